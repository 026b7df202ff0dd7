//! `placer record --interval 1s --duration 60s FILE`: raw samples to a versioned JSON-lines
//! file (format in `placer_linux::record` and docs/observation.md) for later replay.
//! `placer record --replay FILE` prints one summary line per replayed observation;
//! `--plans` runs the engine over the recording instead (the daemon's config from a
//! `placer daemon --record` header, else `--config` or the built-in default) and prints each
//! cycle's plan, as `placer daemon --dry-run` printed it live.

use crate::cmd::top::busiest;
use crate::common::duration_arg;
use anyhow::{Context, Result};
use placer_core::observation::Observation;
use placer_core::sample::SampleRequest;
use placer_linux::record::RecordWriter;
use placer_linux::sampler::Sampler;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The record file to write (or, with --replay, to read).
    pub file: PathBuf,
    /// Filesystem root holding proc/ and sys/.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Time between samples.
    #[arg(long, default_value = "1s", value_parser = duration_arg)]
    pub interval: Duration,
    /// How long to record.
    #[arg(long, default_value = "60s", value_parser = duration_arg)]
    pub duration: Duration,
    /// Also record threads.
    #[arg(long)]
    pub threads: bool,
    /// Leave TCP sockets out.
    #[arg(long)]
    pub no_sockets: bool,
    /// Read FILE and print a summary of each interval instead of recording.
    #[arg(long)]
    pub replay: bool,
    /// With --replay: run the engine over the recording and print each cycle's plan.
    #[arg(long, requires = "replay")]
    pub plans: bool,
    /// With --plans: this config instead of the one in the recording's header.
    #[arg(long, requires = "plans")]
    pub config: Option<PathBuf>,
    /// With --plans: one JSON line per cycle (`cycle`, `plan`).
    #[arg(long, requires = "plans")]
    pub json: bool,
}

pub fn run(args: Args) -> Result<()> {
    if args.plans {
        return replay_plans(&args);
    }
    if args.replay {
        return replay(&args.file);
    }
    if args.interval > args.duration {
        anyhow::bail!(
            "--interval {:?} is longer than --duration {:?}: that records a single sample, \
             which replays to no observation; use a --duration of at least one interval",
            args.interval,
            args.duration
        );
    }
    let mut sampler = Sampler::new(&args.root);
    let header = placer_linux::record::header(
        &args.root,
        args.interval.as_millis() as u64,
        sampler.sources(),
    );
    let f = std::fs::File::create(&args.file)
        .with_context(|| format!("creating {}", args.file.display()))?;
    let mut w = RecordWriter::new(std::io::BufWriter::new(f), &header)?;
    let req = SampleRequest {
        threads: args.threads,
        sockets: !args.no_sockets,
        counters: true,
        numa_pages: false,
        nics: true,
        irqs: true,
    };
    let start = Instant::now();
    let (mut n, mut late) = (0u64, 0u64);
    // Samples at start + k*interval (no drift), through the end of the duration, and never
    // past it: when a sample costs more than the interval, fewer samples, not more time.
    loop {
        let s = sampler.sample(req).context("sampling")?;
        w.write(&s)
            .with_context(|| format!("writing {}", args.file.display()))?;
        n += 1;
        let next = args.interval * n as u32;
        if args.interval.is_zero() || next > args.duration || start.elapsed() >= args.duration {
            break;
        }
        match next.checked_sub(start.elapsed()) {
            Some(wait) => std::thread::sleep(wait),
            None => late += 1,
        }
    }
    eprintln!("placer record: {n} samples to {}", args.file.display());
    if late > 0 {
        eprintln!(
            "placer record: {late} sample(s) started late: one costs more than --interval {} ms here",
            args.interval.as_millis()
        );
    }
    Ok(())
}

fn replay_plans(args: &Args) -> Result<()> {
    let path = &args.file;
    let mut r =
        placer_linux::record::open(path).with_context(|| format!("opening {}", path.display()))?;
    let samples = r.read_all()?;
    let config = match (&args.config, &r.header.config) {
        (Some(p), _) => crate::cmd::config::load_config(Some(p))?,
        (None, Some(c)) => c.clone(),
        (None, None) => placer_core::config::Config::default(),
    };
    let plans = placer_core::replay::plans(&r.header, samples, config)
        .with_context(|| format!("replaying {}", path.display()))?;
    // Cycle 0 is the warm-up (no observation yet), as in the daemon, which prints from 1.
    for (cycle, plan) in plans.iter().enumerate().skip(1) {
        if args.json {
            outln!("{}", serde_json::json!({ "cycle": cycle, "plan": plan }));
            continue;
        }
        if plan.actions.is_empty() {
            outln!("cycle {cycle}: no actions");
        }
        for a in &plan.actions {
            outln!(
                "cycle {cycle}: [{}] {} {}: {}",
                a.policy,
                a.action.kind(),
                placer_agent::agent::describe_target(&a.action),
                a.reason
            );
        }
    }
    Ok(())
}

fn replay(path: &std::path::Path) -> Result<()> {
    let mut r =
        placer_linux::record::open(path).with_context(|| format!("opening {}", path.display()))?;
    outln!(
        "record v{} from {} every {} ms",
        r.header.version,
        r.header.host,
        r.header.interval_ms
    );
    let mut prev = None;
    while let Some(s) = r.next_sample()? {
        if let Some(p) = &prev {
            let o = Observation::new(p, &s);
            let util: f64 = o.cpus.iter().map(|c| c.util).sum();
            let top = busiest(&o, 1)
                .first()
                .map(|p| format!("{} ({}) {:.2}", p.pid, p.comm, p.cpu_share))
                .unwrap_or_default();
            outln!(
                "{:>10.3}s  cpus busy {:.2}  procs {}  busiest {}",
                o.time_ns as f64 / 1e9,
                util,
                o.procs.len(),
                top
            );
        }
        prev = Some(s);
    }
    if r.truncated {
        eprintln!("placer record: the file ends in a partial line (recording cut short)");
    }
    Ok(())
}
