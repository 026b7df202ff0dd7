//! `placer run`: start a command on the CPUs an allocation order chooses (seed 001 at the
//! application and runtime layers).
//!
//! What it does, exactly:
//! 1. Chooses the first `n` CPUs of `--policy`'s order (`efficiency` by default). With
//!    `--auto`, `n` is capped at the order's least-energy prefix or where parallel
//!    efficiency falls below 1/2, for a serial fraction given (`--serial-fraction`) or
//!    fitted from measured run times (`--times 1=400,4=120`).
//! 2. Starts the command with its CPU affinity set to those CPUs (in the child, before
//!    exec) and with these variables added to its environment (existing values are
//!    replaced):
//!    - `OMP_NUM_THREADS=n`
//!    - `OMP_PLACES={c0},{c1},...`: one place per chosen CPU, in the order's order;
//!    - `OMP_PROC_BIND=close`: with as many threads as places, OpenMP thread `i` runs on
//!      place `i`, so OpenMP programs follow the order themselves.
//! 3. Follows the command's whole process tree for its lifetime: its threads and those of
//!    every descendant process (children found through the ppid of /proc/*/stat, since
//!    /proc/PID/task/TID/children is often compiled out). Each task it has not seen before
//!    is pinned, in order of appearance (parents first, lowest tid first within one look),
//!    to the chosen CPU holding the fewest live tasks it pinned (ties: the earlier CPU in
//!    the order). Without exits this is round-robin: the k-th task (the main thread is the
//!    first) gets CPU `k mod n`; tasks that exit free their CPU. So `make -j` or
//!    `sh -c 'a & b & wait'` spread their children over the CPUs instead of all inheriting
//!    the main thread's single CPU. Threads are looked for every 2 ms during `--watch`
//!    (start-up, when most threads appear) and every 50 ms after it; descendants every
//!    50 ms.
//! 4. Waits for the command and exits with its status.
//!
//! Where the topology reader is unavailable for `/`, the allowed CPUs of this process are
//! used as independent cores (no SMT), and a warning says so.

use super::plan::JobArgs;
use crate::common::MachineArgs;
use anyhow::{bail, Context, Result};
use placer_core::alloc::{self, AllocPolicy};
use placer_core::topology::Cpu;
use placer_core::{CpuSet, Topology};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub job: JobArgs,
    /// Cap the units with the Amdahl/energy rule (needs --serial-fraction or --times).
    #[arg(long)]
    pub auto: bool,
    /// Measured run times to fit the serial fraction from: `UNITS=SECONDS,...`.
    #[arg(long, conflicts_with = "serial_fraction")]
    pub times: Option<String>,
    /// Look for new threads every 2 ms for this long after the start (then every 50 ms for the
    /// job's lifetime): 250ms, 10s, 2m or seconds.
    #[arg(long, alias = "watch-s", default_value = "10s", value_parser = crate::common::duration_arg)]
    pub watch: Duration,
    /// Do not set the OMP_* variables.
    #[arg(long)]
    pub no_omp: bool,
    /// Print what would be done (as JSON with --json) and do not start the command.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: print the plan (CPUs, order, environment) as JSON.
    #[arg(long, requires = "dry_run")]
    pub json: bool,
    /// Do not print the pinning log.
    #[arg(long, short)]
    pub quiet: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub cmd: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct RunPlan {
    pub policy: AllocPolicy,
    pub topology: String,
    pub cpus: Vec<u32>,
    pub env: Vec<(String, String)>,
    /// Why n is what it is.
    pub reason: String,
}

impl RunPlan {
    /// `K=V K=V` as a shell would show it.
    pub fn env_string(&self) -> String {
        self.env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Parses `1=400,4=120.5` into (units, seconds) pairs.
pub fn parse_times(text: &str) -> Result<Vec<(f64, f64)>> {
    text.split(',')
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("{kv:?} is not UNITS=SECONDS"))?;
            let n: f64 = k
                .trim()
                .parse()
                .with_context(|| format!("{k:?} is not a number"))?;
            let t: f64 = v
                .trim()
                .parse()
                .with_context(|| format!("{v:?} is not a number"))?;
            Ok((n, t))
        })
        .collect()
}

/// The OMP variables for a CPU list.
pub fn omp_env(cpus: &[u32]) -> Vec<(String, String)> {
    let places = cpus
        .iter()
        .map(|c| format!("{{{c}}}"))
        .collect::<Vec<_>>()
        .join(",");
    vec![
        ("OMP_NUM_THREADS".into(), cpus.len().to_string()),
        ("OMP_PLACES".into(), places),
        ("OMP_PROC_BIND".into(), "close".into()),
    ]
}

/// This process's allowed CPUs as a topology of independent cores.
fn affinity_topology() -> Result<Topology> {
    let set = get_affinity(0).context("sched_getaffinity")?;
    let cpus = set
        .iter()
        .map(|id| {
            let mut c = Cpu::bare(id, true);
            c.core = Some(id);
            c.siblings = CpuSet::single(id);
            c
        })
        .collect();
    Ok(Topology {
        cpus,
        source: "affinity:self".into(),
        ..Default::default()
    })
}

fn topology(m: &MachineArgs) -> Result<Topology> {
    match m.topology() {
        Ok(t) => Ok(t),
        Err(e) if m.machine.is_none() && m.root == std::path::Path::new("/") => {
            eprintln!(
                "placer run: warning: {e:#}; using this process's allowed CPUs as independent \
                 cores (no SMT information)"
            );
            affinity_topology()
        }
        Err(e) => Err(e),
    }
}

pub fn make_plan(args: &Args, topo: &Topology) -> Result<RunPlan> {
    let policy = args.job.policy(AllocPolicy::Efficiency);
    let opts = args.job.model.opts()?;
    let order = alloc::order(topo, policy, &opts);
    if order.is_empty() {
        bail!("no allowed online CPUs in {}", topo.source);
    }
    let mut n = args.job.n.unwrap_or(order.len());
    let mut reason = match args.job.n {
        Some(_) => format!("n = {n} as asked"),
        None => format!("n = {n}: every allowed CPU"),
    };
    if args.auto {
        let s = match (&args.times, args.job.model.serial_fraction) {
            (Some(t), _) => {
                let f = placer_core::amdahl::fit_serial_fraction(&parse_times(t)?)?;
                reason.push_str(&format!(
                    "; S = {:.4} fitted from --times (t1 {:.2} s, rms {:.3} s)",
                    f.serial_fraction, f.t1_s, f.rms_residual_s
                ));
                f.serial_fraction
            }
            (None, Some(_)) => {
                let s = args.job.model.serial_fraction()?;
                reason.push_str(&format!("; S = {s} given"));
                s
            }
            (None, None) => bail!(
                "--auto needs the job's serial fraction: --serial-fraction S, or measured \
                 run times --times UNITS=SECONDS,..."
            ),
        };
        let (model, _) = args
            .job
            .model
            .power_model(args.job.machine.machine.as_deref())?;
        let stats = alloc::prefix_stats(topo, &order, &model, s, &opts);
        let caps = alloc::caps(&stats, s);
        if caps.cap() < n {
            n = caps.cap();
            reason.push_str(&format!(
                "; capped to {n} (efficiency limit n = {}, least energy at n = {}, marginal \
                 energy rule n = {}, power model {})",
                caps.efficiency_n, caps.energy_optimum_n, caps.energy_n, model.name
            ));
        } else {
            reason.push_str(&format!(
                "; within the caps (efficiency n = {}, least energy n = {})",
                caps.efficiency_n, caps.energy_optimum_n
            ));
        }
    }
    let cpus = alloc::allocate(topo, policy, n, &opts)?;
    let env = if args.no_omp {
        Vec::new()
    } else {
        omp_env(&cpus)
    };
    Ok(RunPlan {
        policy,
        topology: topo.source.clone(),
        cpus,
        env,
        reason,
    })
}

use placer_linux::sys::get_affinity;

/// The pids of `pid`'s descendants under `root` (`/`, or `--root`), parents before
/// children (a breadth-first walk of the ppid links read from its proc/*/stat).
fn descendants(root: &Path, pid: u32) -> Vec<u32> {
    let mut children: std::collections::HashMap<u32, Vec<u32>> = Default::default();
    for p in placer_linux::pid::process_ids(root).unwrap_or_default() {
        let Ok(text) = std::fs::read_to_string(root.join(format!("proc/{p}/stat"))) else {
            continue;
        };
        if let Some(st) = placer_linux::procfs::parse_pid_stat(&text) {
            children.entry(st.ppid).or_default().push(p);
        }
    }
    let mut out = Vec::new();
    let mut queue = std::collections::VecDeque::from([pid]);
    while let Some(p) = queue.pop_front() {
        if let Some(kids) = children.get_mut(&p) {
            kids.sort_unstable();
            for &k in kids.iter() {
                // A pid cannot be its own ancestor; the guard bounds the walk regardless.
                if k != pid && !out.contains(&k) && out.len() < 100_000 {
                    out.push(k);
                    queue.push_back(k);
                }
            }
        }
    }
    out
}

/// Spreads tasks over the chosen CPUs: each new task goes to the CPU holding the fewest
/// live tasks already placed (ties: earlier in the order).
#[derive(Debug, Default)]
struct Spreader {
    /// tid -> index into the CPU list.
    placed: std::collections::HashMap<i32, usize>,
}

impl Spreader {
    /// Forgets tasks not in `live` (they exited) and returns the index for a new task.
    fn forget_exited(&mut self, live: &BTreeSet<i32>) {
        self.placed.retain(|tid, _| live.contains(tid));
    }

    fn place(&mut self, tid: i32, n_cpus: usize) -> usize {
        let mut load = vec![0usize; n_cpus];
        for &i in self.placed.values() {
            load[i] += 1;
        }
        let i = (0..n_cpus).min_by_key(|&i| (load[i], i)).unwrap_or(0);
        self.placed.insert(tid, i);
        i
    }
}

/// The tasks of `pid` under `root`, sorted (none when it is gone).
fn tasks(root: &Path, pid: u32) -> Vec<i32> {
    placer_linux::pid::task_ids(root, pid)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|t| i32::try_from(t).ok())
        .collect()
}

pub fn run(args: Args) -> Result<()> {
    let topo = topology(&args.job.machine)?;
    let plan = make_plan(&args, &topo)?;
    if args.dry_run {
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&plan)?);
        } else {
            outln!(
                "would run {:?} on CPUs {} ({}), {}",
                args.cmd,
                plan.cpus
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                plan.reason,
                plan.env_string()
            );
        }
        return Ok(());
    }
    let all: CpuSet = plan.cpus.iter().copied().collect();
    let mut cmd = std::process::Command::new(&args.cmd[0]);
    cmd.args(&args.cmd[1..]);
    for (k, v) in &plan.env {
        cmd.env(k, v);
    }
    placer_linux::sys::set_affinity_on_spawn(&mut cmd, &all)
        .with_context(|| format!("CPUs {}", all.to_list_string()))?;
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        // The statuses of env(1), taskset(1) and shells, so that scripts can tell a missing
        // or unrunnable command from one that ran and failed.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("placer run: {}: command not found", args.cmd[0]);
            std::process::exit(127)
        }
        Err(e) => {
            eprintln!("placer run: {}: cannot run: {e}", args.cmd[0]);
            std::process::exit(126)
        }
    };
    let pid = child.id();
    if !args.quiet {
        eprintln!(
            "placer run: pid {pid} on CPUs {} (order {}, {}); {}",
            all.to_list_string(),
            plan.policy,
            plan.reason,
            plan.env_string()
        );
    }
    let fast_until = Instant::now() + args.watch;
    let tree_every = Duration::from_millis(50);
    let mut spreader = Spreader::default();
    let root = args.job.machine.root.as_path();
    let mut procs: Vec<u32> = vec![pid];
    let mut next_tree = Instant::now();
    let status = loop {
        let now = Instant::now();
        if now >= next_tree {
            procs = std::iter::once(pid).chain(descendants(root, pid)).collect();
            next_tree = now + tree_every;
        }
        let live: BTreeSet<i32> = procs.iter().flat_map(|&p| tasks(root, p)).collect();
        spreader.forget_exited(&live);
        for &p in &procs {
            for tid in tasks(root, p) {
                if spreader.placed.contains_key(&tid) {
                    continue;
                }
                let i = spreader.place(tid, plan.cpus.len());
                match placer_linux::sys::set_affinity(tid as u32, &CpuSet::single(plan.cpus[i])) {
                    Ok(()) => {
                        if !args.quiet {
                            eprintln!(
                                "placer run: pinned tid {tid} -> cpu {} (pid {p})",
                                plan.cpus[i]
                            );
                        }
                    }
                    // The task exited between the listing and the call.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => eprintln!("placer run: pinning tid {tid}: {e}"),
                }
            }
        }
        if let Some(st) = child.try_wait()? {
            break st;
        }
        let pause = if Instant::now() < fast_until { 2 } else { 50 };
        std::thread::sleep(Duration::from_millis(pause));
    };
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok(()),
        (Some(c), _) => std::process::exit(c),
        // As a shell reports it: 128 + the signal's number.
        (None, Some(sig)) => {
            eprintln!(
                "placer run: {:?} was killed by a signal ({status})",
                args.cmd[0]
            );
            std::process::exit(128 + sig)
        }
        (None, None) => bail!("{:?} ended without a status ({status})", args.cmd[0]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn omp_env_lists_one_place_per_cpu_in_order() {
        let e = omp_env(&[0, 8, 2]);
        assert_eq!(e[0], ("OMP_NUM_THREADS".into(), "3".into()));
        assert_eq!(e[1], ("OMP_PLACES".into(), "{0},{8},{2}".into()));
        assert_eq!(e[2], ("OMP_PROC_BIND".into(), "close".into()));
    }

    #[test]
    fn spreader_is_round_robin_without_exits_and_refills_freed_cpus() {
        let mut s = Spreader::default();
        let got: Vec<usize> = (10..15).map(|tid| s.place(tid, 2)).collect();
        assert_eq!(got, vec![0, 1, 0, 1, 0]);
        // Tasks 11 and 13 (both on CPU 1) exit: CPU 1 is refilled until it holds as many as
        // CPU 0 (three), then the order resumes.
        s.forget_exited(&[10, 12, 14].into_iter().collect());
        assert_eq!(s.place(20, 2), 1);
        assert_eq!(s.place(21, 2), 1);
        assert_eq!(s.place(22, 2), 1);
        assert_eq!(s.place(23, 2), 0);
    }

    #[test]
    fn descendants_of_this_test_include_a_child() {
        let mut c = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let d = descendants(Path::new("/"), std::process::id());
        let _ = c.kill();
        let _ = c.wait();
        assert!(d.contains(&c.id()), "{d:?}");
    }

    #[test]
    fn times_parse() {
        assert_eq!(
            parse_times("1=400,4=120.5").unwrap(),
            vec![(1.0, 400.0), (4.0, 120.5)]
        );
        assert!(parse_times("1:400").is_err());
        assert!(parse_times("x=1").is_err());
    }

    #[test]
    fn affinity_topology_matches_sched_getaffinity() {
        let t = affinity_topology().unwrap();
        assert_eq!(t.allowed(), get_affinity(0).unwrap());
        assert!(!t.cpus.is_empty());
    }
}
