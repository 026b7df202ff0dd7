//! `placer bench cycle`: the cost of one sample + observe cycle (what the daemon pays each
//! interval), in CPU time of the sampling thread (CLOCK_THREAD_CPUTIME_ID: user + kernel,
//! including the kernel's work generating /proc text) and in wall time, median of runs.
//!
//! - `machine`: this machine with `--procs` (500) extra sleeping processes and `--conns`
//!   (200) open TCP connections over loopback, created by the bench and removed after;
//!   sockets, counters requested (as `placer top` does), threads not.
//! - `generated`: a generated /proc tree (`--gen-procs` 2,000 processes with
//!   `--gen-threads` 20,000 threads in all, each process with a few fds) under a temporary
//!   directory, with threads requested.
//!
//! The first (cold) cycle, which reads every process's fd directory, is reported apart;
//! the median is over the following `--runs` cycles, `--pause` apart, in all and by stage
//! (the sampler's: planning what to read, processes, sockets, counters, NUMA pages,
//! machine-wide files; then deriving the observation).

use anyhow::{Context, Result};
use placer_core::observation::Observation;
use placer_core::sample::SampleRequest;
use placer_core::stats::median;
use placer_linux::sampler::Sampler;
use placer_linux::sys::{monotonic_ns, thread_cpu_ns};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Which setup: machine, generated or both.
    #[arg(long, default_value = "both")]
    pub mode: String,
    /// Measured cycles per setup (after one cold cycle).
    #[arg(long, default_value_t = 30)]
    pub runs: usize,
    /// Pause between cycles (the daemon samples every second; a pause lets the machine move).
    #[arg(long, default_value = "100ms", value_parser = crate::common::duration_arg)]
    pub pause: Duration,
    /// Extra sleeping processes for the machine setup.
    #[arg(long, default_value_t = 500)]
    pub procs: usize,
    /// Open loopback TCP connections for the machine setup.
    #[arg(long, default_value_t = 200)]
    pub conns: usize,
    /// Processes in the generated tree.
    #[arg(long, default_value_t = 2000)]
    pub gen_procs: u32,
    /// Threads in all in the generated tree.
    #[arg(long, default_value_t = 20000)]
    pub gen_threads: u32,
    /// Fraction of the generated tree's processes that run between two cycles (their stat
    /// files and their threads' get more CPU ticks); the others sleep, as most do.
    #[arg(long, default_value_t = 0.1)]
    pub busy: f64,
    /// Re-read idle processes' status/cgroup/threads every N samples (1 = every sample).
    #[arg(long, default_value_t = placer_linux::sampler::DEFAULT_REFRESH_EVERY)]
    pub refresh_every: u64,
    /// Where to generate the tree (default: /dev/shm, else the temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Sample this existing tree instead of generating one (it is left in place).
    #[arg(long)]
    pub tree: Option<PathBuf>,
    /// Generate the tree into --dir and keep it (for --tree later).
    #[arg(long)]
    pub keep: bool,
    /// How the sampler learns what ran: `events` (as the daemon by default: the kernel's
    /// eBPF collector and process-events connector on this machine; on a generated tree,
    /// the generator's own list of the processes it made run, as the collector would give
    /// it) or `proc` (read every process each cycle: the fallback without eBPF).
    #[arg(long, default_value = "events", value_parser = ["events", "proc"])]
    pub path: String,
    /// Generated mode for each of these process counts (threads in the same ratio as
    /// --gen-threads/--gen-procs), printing each one's cost against the first's.
    #[arg(long, value_delimiter = ',')]
    pub curve: Vec<u32>,
    /// Print the runs as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize, Debug)]
pub struct Report {
    pub setup: String,
    pub procs_sampled: usize,
    pub sockets_sampled: usize,
    pub threads_sampled: usize,
    pub cold_cpu_ms: f64,
    pub cold_wall_ms: f64,
    pub median_cpu_ms: f64,
    pub median_wall_ms: f64,
    pub max_cpu_ms: f64,
    /// Of the median cycle's CPU, the part spent deriving the observation (the rest samples).
    pub median_observe_cpu_ms: f64,
    /// `events` or `proc` (see --path).
    pub path: String,
    /// Processes not read at all in the last cycle (the collector said they did not run).
    pub procs_skipped: usize,
    /// Where the cycle's CPU went: the median over the measured cycles of each stage.
    pub stages: Stages,
    pub cpu_ms: Vec<f64>,
    pub wall_ms: Vec<f64>,
}

/// Median CPU ms of each stage of a cycle: the sampler's (see
/// `placer_linux::sampler::StageTimes`) and deriving the observation. Planning and
/// actuating are not part of this bench's cycle (it runs no policy).
#[derive(Serialize, Debug, Default)]
pub struct Stages {
    /// Events drained, the process set decided or /proc listed.
    pub sample_plan_ms: f64,
    pub sample_procs_ms: f64,
    pub sample_sockets_ms: f64,
    pub sample_counters_ms: f64,
    pub sample_numa_ms: f64,
    /// Interrupts, softirqs, /proc/stat, energy, NICs.
    pub sample_system_ms: f64,
    /// The observation derived from two samples.
    pub derive_ms: f64,
}

/// Kills and reaps the processes it holds, even on error paths.
struct Children(Vec<Child>);
impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

/// Removes a generated tree.
struct TempTree(PathBuf);
impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn cycles(
    setup: &str,
    sampler: &mut Sampler,
    req: SampleRequest,
    a: &Args,
    between: &mut dyn FnMut(usize) -> Result<()>,
) -> Result<Report> {
    sampler.set_refresh_every(a.refresh_every);
    sampler.set_stage_times(true);
    let mut prev = sampler.sample(req).context("sampling")?;
    let mut last = placer_core::Observation::default();
    let mut cpu_ms = Vec::new();
    let mut wall_ms = Vec::new();
    let mut observe_ms = Vec::new();
    let mut stage_ns: Vec<placer_linux::sampler::StageTimes> = Vec::new();
    let (mut cold_cpu, mut cold_wall) = (0.0, 0.0);
    let (mut procs, mut socks, mut threads) = (0, 0, 0);
    for i in 0..=a.runs {
        std::thread::sleep(a.pause);
        between(i)?;
        let (c0, w0) = (thread_cpu_ns(), monotonic_ns());
        let cur = sampler.sample(req).context("sampling")?;
        let cm = thread_cpu_ns();
        let obs = Observation::after(&prev, &cur, &last.procs);
        let (c1, w1) = (thread_cpu_ns(), monotonic_ns());
        if i > 0 {
            observe_ms.push((c1 - cm) as f64 / 1e6);
            stage_ns.push(sampler.last_stages);
        }
        std::hint::black_box(&obs);
        last = obs;
        let (c, w) = ((c1 - c0) as f64 / 1e6, (w1 - w0) as f64 / 1e6);
        if i == 0 {
            // Not cold any more (prev already scanned), but the second cycle is the first
            // with rates; keep it apart as the warm-up.
            (cold_cpu, cold_wall) = (c, w);
        } else {
            cpu_ms.push(c);
            wall_ms.push(w);
        }
        procs = cur.procs.len();
        socks = cur.sockets.len();
        threads = cur.procs.iter().map(|p| p.threads.len()).sum();
        prev = cur;
    }
    let stage = |f: fn(&placer_linux::sampler::StageTimes) -> u64| {
        median(
            &stage_ns
                .iter()
                .map(|t| f(t) as f64 / 1e6)
                .collect::<Vec<_>>(),
        )
        .unwrap_or(f64::NAN)
    };
    let stages = Stages {
        sample_plan_ms: stage(|t| t.plan_ns),
        sample_procs_ms: stage(|t| t.procs_ns),
        sample_sockets_ms: stage(|t| t.sockets_ns),
        sample_counters_ms: stage(|t| t.counters_ns),
        sample_numa_ms: stage(|t| t.numa_ns),
        sample_system_ms: stage(|t| t.system_ns),
        derive_ms: median(&observe_ms).unwrap_or(f64::NAN),
    };
    Ok(Report {
        setup: setup.into(),
        procs_sampled: procs,
        sockets_sampled: socks,
        threads_sampled: threads,
        cold_cpu_ms: cold_cpu,
        cold_wall_ms: cold_wall,
        median_cpu_ms: median(&cpu_ms).unwrap_or(f64::NAN),
        median_wall_ms: median(&wall_ms).unwrap_or(f64::NAN),
        max_cpu_ms: cpu_ms.iter().copied().fold(0.0, f64::max),
        median_observe_cpu_ms: median(&observe_ms).unwrap_or(f64::NAN),
        path: a.path.clone(),
        procs_skipped: sampler.last_stats.procs_skipped,
        stages,
        cpu_ms,
        wall_ms,
    })
}

fn machine(a: &Args) -> Result<Report> {
    let mut kids = Children(Vec::new());
    for _ in 0..a.procs {
        kids.0.push(
            Command::new("sleep")
                .arg("600")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("spawning sleep")?,
        );
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let mut conns = Vec::with_capacity(2 * a.conns);
    for _ in 0..a.conns {
        let c = std::net::TcpStream::connect(addr)?;
        let (s, _) = l.accept()?;
        conns.push(c);
        conns.push(s);
    }
    let mut sampler = Sampler::new(Path::new("/"));
    sampler.set_kernel_events(a.path == "events");
    // The cold cycle: every fd directory read once.
    let req = SampleRequest {
        sockets: true,
        counters: true,
        ..Default::default()
    };
    let (c0, w0) = (thread_cpu_ns(), monotonic_ns());
    sampler.sample(req)?;
    let cold = (
        (thread_cpu_ns() - c0) as f64 / 1e6,
        (monotonic_ns() - w0) as f64 / 1e6,
    );
    let mut r = cycles(
        &format!(
            "machine (+{} sleeping processes, {} loopback TCP connections)",
            a.procs, a.conns
        ),
        &mut sampler,
        req,
        a,
        &mut |_| Ok(()),
    )?;
    (r.cold_cpu_ms, r.cold_wall_ms) = cold;
    drop(conns);
    Ok(r)
}

fn stat_text(pid: u32, comm: &str, ticks: u64, threads: u32) -> String {
    format!(
        "{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 120 0 0 0 {ticks} {} 0 0 20 0 {threads} 0 \
         {} 12345678 345 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 {} 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
        ticks / 3,
        1000 + pid as u64,
        pid % 2
    )
}

fn status_text(pid: u32, comm: &str) -> String {
    // The lines of a real status file, so the parser walks a realistic amount of text.
    format!(
        "Name:\t{comm}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\n\
         PPid:\t1\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n\
         FDSize:\t64\nGroups:\t1000\nNStgid:\t{pid}\nNSpid:\t{pid}\nNSpgid:\t{pid}\nNSsid:\t{pid}\n\
         Kthread:\t0\nVmPeak:\t  123456 kB\nVmSize:\t  123456 kB\nVmLck:\t       0 kB\n\
         VmPin:\t       0 kB\nVmHWM:\t   12345 kB\nVmRSS:\t   12345 kB\nRssAnon:\t    1234 kB\n\
         RssFile:\t   11111 kB\nRssShmem:\t       0 kB\nVmData:\t    2345 kB\nVmStk:\t     132 kB\n\
         VmExe:\t     100 kB\nVmLib:\t    2000 kB\nVmPTE:\t      60 kB\nVmSwap:\t       0 kB\n\
         HugetlbPages:\t       0 kB\nCoreDumping:\t0\nTHP_enabled:\t1\nThreads:\t10\n\
         SigQ:\t0/63541\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n\
         SigBlk:\t0000000000000000\nSigIgn:\t0000000000001000\nSigCgt:\t0000000188004a07\n\
         CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n\
         CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t0\n\
         Seccomp_filters:\t0\nSpeculation_Store_Bypass:\tthread vulnerable\n\
         Cpus_allowed:\tffff\nCpus_allowed_list:\t0-15\nMems_allowed:\t00000001\n\
         Mems_allowed_list:\t0\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t5\n"
    )
}

/// Writes a /proc tree of `nprocs` processes and `nthreads` threads in all under `root`.
pub fn generate_tree(root: &Path, nprocs: u32, nthreads: u32) -> Result<()> {
    use std::fs;
    let proc_ = root.join("proc");
    fs::create_dir_all(&proc_)?;
    let ncpu = 16;
    let mut stat = String::from("cpu  1 2 3 4 5 6 7 8 0 0\n");
    let mut soft = String::from("       ");
    let mut intr = String::from("       ");
    for c in 0..ncpu {
        stat += &format!("cpu{c} 1000 20 300 40000 10 0 50 0 0 0\n");
        soft += &format!("    CPU{c}");
        intr += &format!("    CPU{c}");
    }
    stat += "intr 1 2 3\nctxt 123\nbtime 1\nprocesses 5000\n";
    soft += "\n";
    intr += "\n";
    for name in ["HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "SCHED", "RCU"] {
        soft += &format!("{name}:{}\n", " 12345".repeat(ncpu));
    }
    for irq in 0..64 {
        intr += &format!(
            "{irq}:{} PCI-MSIX-0000:00:01.0 {irq}-edge eth0-rx-{irq}\n",
            " 100".repeat(ncpu)
        );
    }
    intr += &format!("LOC:{} Local timer interrupts\n", " 5000".repeat(ncpu));
    fs::write(proc_.join("stat"), stat)?;
    fs::write(proc_.join("softirqs"), soft)?;
    fs::write(proc_.join("interrupts"), intr)?;
    let per = (nthreads / nprocs.max(1)).max(1);
    let mut extra = nthreads.saturating_sub(per * nprocs);
    let mut next_tid = 100_000u32;
    for i in 0..nprocs {
        let pid = 1000 + i;
        let comm = format!("worker {i} (gen)");
        let dir = proc_.join(pid.to_string());
        fs::create_dir_all(dir.join("fd"))?;
        let n = per + if extra > 0 { 1 } else { 0 };
        extra = extra.saturating_sub(1);
        fs::write(dir.join("stat"), stat_text(pid, &comm, 500 + i as u64, n))?;
        fs::write(dir.join("status"), status_text(pid, &comm))?;
        fs::write(
            dir.join("cgroup"),
            "12:memory:/user.slice\n3:cpuset:/\n0::/user.slice/app.scope\n",
        )?;
        for (fd, target) in ["/dev/null", "pipe:[77]", "socket:[9001]", "socket:[9002]"]
            .iter()
            .enumerate()
        {
            let _ = std::os::unix::fs::symlink(target, dir.join(format!("fd/{fd}")));
        }
        for t in 0..n {
            let tid = if t == 0 { pid } else { next_tid };
            if t > 0 {
                next_tid += 1;
            }
            let td = dir.join(format!("task/{tid}"));
            fs::create_dir_all(&td)?;
            fs::write(td.join("stat"), stat_text(tid, &comm, 50 + t as u64, n))?;
            fs::write(td.join("status"), status_text(tid, &comm))?;
        }
    }
    Ok(())
}

fn generated(a: &Args) -> Result<Report> {
    // tmpfs when there is one: the bench measures placer, not the disk.
    let shm = Path::new("/dev/shm");
    let base = a.dir.clone().unwrap_or_else(|| {
        if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    });
    let (root, _guard) = match &a.tree {
        Some(t) => (t.clone(), None),
        None => {
            let root = base.join(format!("placer-bench-tree-{}", std::process::id()));
            let guard = (!a.keep).then(|| TempTree(root.clone()));
            generate_tree(&root, a.gen_procs, a.gen_threads)
                .with_context(|| format!("generating {}", root.display()))?;
            if a.keep {
                eprintln!("tree kept in {}", root.display());
            }
            (root, guard)
        }
    };
    let mut sampler = Sampler::new(&root);
    let script = placer_linux::activity::ScriptedActivity::default();
    if a.path == "events" {
        sampler.set_activity_source(Box::new(script.clone()));
    }
    let req = SampleRequest {
        threads: true,
        sockets: true,
        counters: true,
        ..Default::default()
    };
    // The tree's processes and their threads, for making some of them run.
    let mut layout: Vec<(u32, Vec<u32>)> = Vec::new();
    for e in std::fs::read_dir(root.join("proc"))?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        // Sorted: the collector's order.
        layout.push((pid, placer_linux::pid::task_ids(&root, pid)?));
    }
    layout.sort();
    let nbusy = ((layout.len() as f64 * a.busy).round() as usize).min(layout.len());
    let mut run_some = |k: usize| -> Result<()> {
        let proc_ = root.join("proc");
        let mut ran = placer_linux::pid::PidMap::default();
        for j in 0..nbusy {
            let (pid, tids) = &layout[(k * nbusy + j) % layout.len()];
            // Each of its threads ran 10 ticks (100 ms at 100 Hz) since the last cycle, on
            // some CPU: what the collector would report for the files written below.
            let tick_ns = 10_000_000;
            let threads: Vec<placer_linux::bpf::ThreadCpu> = tids
                .iter()
                .map(|&tid| placer_linux::bpf::ThreadCpu {
                    tid,
                    cpu_ns: 10 * tick_ns,
                    last_cpu: tid % 16,
                })
                .collect();
            ran.insert(
                *pid,
                placer_linux::bpf::ProcCpu {
                    cpu_ns: threads.iter().map(|t| t.cpu_ns).sum(),
                    comm: String::new(),
                    threads,
                },
            );
            let comm = format!("worker {} (gen)", pid.saturating_sub(1000));
            let ticks = 10_000 + 10 * k as u64;
            let n = tids.len() as u32;
            std::fs::write(
                proc_.join(format!("{pid}/stat")),
                stat_text(*pid, &comm, ticks * n as u64, n),
            )?;
            for tid in tids {
                std::fs::write(
                    proc_.join(format!("{pid}/task/{tid}/stat")),
                    stat_text(*tid, &comm, ticks, n),
                )?;
            }
        }
        // The generator moves no process between cgroups: the kernel's count stands still.
        script.push(placer_linux::activity::Activity {
            ran: Some(ran),
            events: Some(Vec::new()),
            cgroup_moves: Some(0),
        });
        Ok(())
    };
    cycles(
        &format!(
            "generated /proc ({} processes, {} threads, {:.0}% running each interval)",
            layout.len(),
            layout.iter().map(|l| l.1.len()).sum::<usize>(),
            a.busy * 100.0
        ),
        &mut sampler,
        req,
        a,
        &mut run_some,
    )
}

pub fn run(a: Args) -> Result<()> {
    let mut reports = Vec::new();
    if matches!(a.mode.as_str(), "machine" | "both") && a.curve.is_empty() {
        reports.push(machine(&a)?);
    }
    if !a.curve.is_empty() {
        let per = a.gen_threads as f64 / a.gen_procs.max(1) as f64;
        for &n in &a.curve {
            let one = Args {
                gen_procs: n,
                gen_threads: (n as f64 * per).round() as u32,
                curve: Vec::new(),
                mode: "generated".into(),
                dir: a.dir.clone(),
                tree: None,
                path: a.path.clone(),
                ..a
            };
            reports.push(generated(&one)?);
        }
    } else if matches!(a.mode.as_str(), "generated" | "both") {
        reports.push(generated(&a)?);
    }
    if reports.is_empty() {
        anyhow::bail!("--mode must be machine, generated or both");
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&reports)?);
        return Ok(());
    }
    for r in &reports {
        outln!("{}", r.setup);
        if !a.curve.is_empty() {
            outln!(
                "  {:.2}x the first point's median CPU",
                r.median_cpu_ms / reports[0].median_cpu_ms
            );
        }
        outln!(
            "  sampled {} processes ({} not read: idle), {} threads, {} sockets; path {}; \
             idle re-read every {} samples",
            r.procs_sampled,
            r.procs_skipped,
            r.threads_sampled,
            r.sockets_sampled,
            r.path,
            a.refresh_every
        );
        outln!(
            "  cold cycle: {:.2} ms CPU, {:.2} ms wall",
            r.cold_cpu_ms,
            r.cold_wall_ms
        );
        outln!(
            "  median of {} cycles: {:.2} ms CPU ({:.2} ms of it observing), {:.2} ms wall (max CPU {:.2} ms)",
            r.cpu_ms.len(),
            r.median_cpu_ms,
            r.median_observe_cpu_ms,
            r.median_wall_ms,
            r.max_cpu_ms
        );
        let st = &r.stages;
        outln!(
            "  median CPU by stage: plan {:.2} ms, processes {:.2}, sockets {:.2}, counters {:.2}, \
             NUMA {:.2}, system {:.2}, derive {:.2}",
            st.sample_plan_ms,
            st.sample_procs_ms,
            st.sample_sockets_ms,
            st.sample_counters_ms,
            st.sample_numa_ms,
            st.sample_system_ms,
            st.derive_ms
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tree_samples_fully() {
        let root = std::env::temp_dir().join(format!("placer-gen-test-{}", std::process::id()));
        let _g = TempTree(root.clone());
        generate_tree(&root, 20, 50).unwrap();
        let mut s = Sampler::new(&root);
        let sample = s
            .sample(SampleRequest {
                threads: true,
                sockets: true,
                irqs: true,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(sample.procs.len(), 20);
        assert_eq!(
            sample.procs.iter().map(|p| p.threads.len()).sum::<usize>(),
            50
        );
        assert_eq!(sample.cpus.len(), 16);
        assert_eq!(sample.irqs.len(), 65);
        assert_eq!(&*sample.procs[0].comm, "worker 0 (gen)");
        assert_eq!(sample.procs[0].allowed.len(), 16);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
