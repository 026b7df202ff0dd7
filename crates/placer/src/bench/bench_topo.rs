//! `placer bench topo`: time to read the topology of a root (default `/`), as the median
//! of `--runs` reads after one warm-up read (the page cache is warm, as it is for the
//! daemon, which re-reads the topology on hotplug).

use anyhow::Result;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Filesystem root holding sys/ and proc/ (an unpacked snapshot, or /).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Number of timed reads.
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    /// Print the result, with the raw run times, as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Time the daemon's refresh instead: one reader read again and again, whose machine
    /// part and NICs are read in full only on hotplug, a link change or every
    /// FULL_READ_EVERY reads (docs/topology.md, "Reading it again").
    #[arg(long)]
    pub refresh: bool,
}

/// CPU time of this thread in ms: the read's own cost, apart from waiting for a CPU on
/// a loaded machine.
fn thread_cpu_ms() -> f64 {
    placer_linux::sys::thread_cpu_ns() as f64 / 1e6
}

use placer_core::stats::median;

pub fn run(args: Args) -> Result<()> {
    let runs = args.runs.max(1);
    // A root without CPUs is a mistake (a typo, a snapshot not unpacked): refused.
    let machine = crate::common::MachineArgs {
        root: args.root.clone(),
        machine: None,
    };
    let mut reader = args
        .refresh
        .then(|| placer_linux::topology::Reader::new(&args.root));
    let mut read = || -> Result<placer_core::Topology> {
        match reader.as_mut() {
            Some(r) => Ok(r.read()?),
            None => machine.topology(),
        }
    };
    let topo = read()?;
    let mut ms = Vec::with_capacity(runs);
    let mut cpu_ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (t, c) = (Instant::now(), thread_cpu_ms());
        let again = read()?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        cpu_ms.push(thread_cpu_ms() - c);
        std::hint::black_box(again);
    }
    let raw = ms.clone();
    let med = median(&ms).unwrap_or(f64::NAN);
    let cpu_med = median(&cpu_ms).unwrap_or(f64::NAN);
    if args.json {
        let v = serde_json::json!({
            "bench": "topo",
            "root": args.root,
            "cpus": topo.cpus.len(),
            "caches": topo.caches.len(),
            "nodes": topo.nodes.len(),
            "nics": topo.nics.len(),
            "median_ms": med,
            "median_cpu_ms": cpu_med,
            "refresh": args.refresh,
            "runs_ms": raw,
        });
        outln!("{v}");
        return Ok(());
    }
    outln!(
        "topology {} of {} ({} CPUs, {} caches, {} nodes, {} NICs): median {:.2} ms \
         (CPU time {cpu_med:.2} ms), min {:.2} ms, max {:.2} ms over {} runs",
        if args.refresh { "refresh" } else { "read" },
        args.root.display(),
        topo.cpus.len(),
        topo.caches.len(),
        topo.nodes.len(),
        topo.nics.len(),
        med,
        ms.iter().copied().fold(f64::INFINITY, f64::min),
        ms.iter().copied().fold(0.0, f64::max),
        runs
    );
    Ok(())
}
