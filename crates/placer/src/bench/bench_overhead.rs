//! `placer bench overhead`: placer's own cost next to another agent's, on the same load
//! (`procs` sleeping processes, `conns` idle loopback connections), one after the other in
//! one run: the daemon (dry run, so the measurement changes nothing; the given policies),
//! then the other agent (`irqbalance`, `numad` or any command, all at a 1 s interval where
//! they have one), each for `--duration` after a warm-up. Reports each one's CPU share of one
//! CPU (the run time of all its threads over the window, from `schedstat` in ns: stat's
//! 10 ms ticks cannot resolve a share of 0.1%) and the ratio. `--paths events,proc`
//! measures the daemon with its kernel event sources and without them (`kernel_events =
//! false`: what it costs where eBPF cannot load), one after the other. On the events path
//! the eBPF collector's own run time in the kernel is measured too (the kernel's BPF run-time
//! stats, on during the window only): it runs beside whichever task was switched out or
//! ticked, so the daemon's schedstat does not hold it, and the total is what placer costs.
//! That time is taken per program the daemon holds (its fds' `prog_id`): a program whose
//! counter goes back in the window gives no figure for it, never a wrapped one.
//!
//! `--background switches:N,stream:M` runs a busy machine's events beside the whole
//! measurement ([`super::busy`]: a paced pipe ping-pong pinned to the last CPU, loopback
//! streams), since the programs' in-kernel time grows with switches, timers and segments,
//! not with placer's work; each program's time is then also given per run of it (ns per
//! switch, per timer, per segment: its `run_time_ns` over its `run_cnt` in the window),
//! with the rates the window saw.
//!
//! The whole comparison is repeated `--runs` times (each run measures every agent, side by
//! side): each agent's figure is the median over the runs, with its spread (min, max), and
//! the ratio is the median of the runs' ratios, from runs where both figures are valid.

use super::bench_daemon::{idle_load, temp_dir, Kids};
use super::busy::{Background, Busy, Rates};
use anyhow::{bail, Context, Result};
use placer_core::stats::median;
use placer_linux::bpf::{Prog, ProgramRunTime};
use serde::Serialize;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The other agent: irqbalance, numad, or a shell command (run in the foreground).
    #[arg(long)]
    pub vs: Option<String>,
    /// placer's policies for the measurement (comma-separated; `all` for all five).
    #[arg(long, default_value = "net-affinity", value_delimiter = ',')]
    pub policies: Vec<String>,
    /// Sleeping processes in the load.
    #[arg(long, default_value_t = 500)]
    pub procs: u32,
    /// Idle loopback TCP connections in the load.
    #[arg(long, default_value_t = 200)]
    pub conns: u32,
    /// Measured window per agent (after a 3 s warm-up).
    #[arg(long, alias = "seconds", default_value = "30s", value_parser = crate::common::duration_arg)]
    pub duration: Duration,
    /// The daemon's observation paths to measure, in order: `events` (the kernel's event
    /// sources, the default) and/or `proc` (`kernel_events = false`).
    #[arg(long, default_value = "events", value_delimiter = ',', value_parser = ["events", "proc"])]
    pub paths: Vec<String>,
    /// Repeat the whole comparison this many times; figures are medians with their spread.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// A busy machine's events beside the measurement: `switches:N` (context switches per
    /// second, a pipe ping-pong pinned to the last CPU), `stream:M` (loopback TCP streams),
    /// `stream-gbit:R` (each stream paced to R Gbit/s; unpaced without it), comma-separated.
    #[arg(long)]
    pub background: Option<Background>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One of placer's programs over the runs (medians of the runs where it was measured).
#[derive(Debug, Serialize)]
pub struct ProgramCost {
    pub program: &'static str,
    /// What one run of it is.
    pub event: &'static str,
    pub runs_per_s: f64,
    /// Its in-kernel time per run (`run_time_ns` / `run_cnt` in the window); None when it
    /// did not run.
    pub ns_per_run: Option<f64>,
    pub percent_of_one: f64,
}

#[derive(Debug, Serialize)]
pub struct AgentCost {
    pub agent: String,
    /// placer's observation path (`events` or `proc`); None for the other agent.
    pub path: Option<String>,
    pub command: String,
    pub window_s: f64,
    /// The median over the runs of its own CPU, % of one CPU.
    pub cpu_percent_of_one: Option<f64>,
    /// placer's eBPF collector's run time in the kernel over the window, % of one CPU
    /// (events path; the median over runs with a valid figure; None where the kernel's BPF
    /// stats could not be enabled or no run gave a valid figure).
    pub in_kernel_percent_of_one: Option<f64>,
    /// Each run's total (own CPU plus in-kernel time), % of one CPU, in run order; a run
    /// without a valid figure is left out.
    pub runs_percent_of_one: Vec<f64>,
    /// The smallest and largest of `runs_percent_of_one` (the run-to-run spread).
    pub min_percent_of_one: Option<f64>,
    pub max_percent_of_one: Option<f64>,
    /// Each of its eBPF programs (events path, where the stats were on).
    pub programs: Vec<ProgramCost>,
    /// What the machine and the background did in its windows (medians over runs), with
    /// `--background`.
    pub background: Option<Rates>,
    /// Why it was not measured (not installed, exited at start).
    pub missing: Option<String>,
}

impl AgentCost {
    /// Its own CPU plus its in-kernel programs' time, % of one CPU.
    pub fn total_percent_of_one(&self) -> Option<f64> {
        self.cpu_percent_of_one
            .map(|c| c + self.in_kernel_percent_of_one.unwrap_or(0.0))
    }

    /// `placer [events]`, or the other agent's name.
    pub fn label(&self) -> String {
        match &self.path {
            Some(p) => format!("{} [{p}]", self.agent),
            None => self.agent.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub procs: u32,
    pub conns: u32,
    /// The busy background run beside the whole measurement, if any.
    pub background: Option<Background>,
    pub policies: Vec<String>,
    pub agents: Vec<AgentCost>,
    pub runs: u32,
    /// placer's share (the first path, its eBPF program's time included) over the other
    /// agent's: the median of the runs' ratios (None without a measured other agent).
    pub ratio: Option<f64>,
    /// Each run's ratio, from runs where both figures are valid.
    pub ratios: Vec<f64>,
}

/// One agent's figures in one run.
#[derive(Debug, Clone)]
struct RunCost {
    command: String,
    window_s: f64,
    cpu_percent_of_one: Option<f64>,
    in_kernel_percent_of_one: Option<f64>,
    programs: Vec<ProgramWindow>,
    background: Option<Rates>,
    missing: Option<String>,
}

/// One kind of program's work in the kernel over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ProgramWindow {
    prog: Prog,
    run_ns: u64,
    runs: u64,
    window_s: f64,
}

impl RunCost {
    fn missing(command: String, why: String) -> RunCost {
        RunCost {
            command,
            window_s: 0.0,
            cpu_percent_of_one: None,
            in_kernel_percent_of_one: None,
            programs: Vec::new(),
            background: None,
            missing: Some(why),
        }
    }

    /// Own CPU plus in-kernel time; None when the in-kernel time was to be measured and
    /// has no valid figure (a total without it would understate placer's cost).
    fn total(&self, wants_kernel: bool) -> Option<f64> {
        let k = match (wants_kernel, self.in_kernel_percent_of_one) {
            (true, None) => return None,
            (_, k) => k.unwrap_or(0.0),
        };
        self.cpu_percent_of_one.map(|c| c + k)
    }
}

/// Each kind of program's in-kernel work over the window, from each program's counters at
/// its start and end. Only programs present at both ends count (one loaded or unloaded
/// meanwhile is not the measured daemon's steady cost); a counter that went back (the
/// program's id reused, the stats reset) gives no figure for the window: `None`, never a
/// wrapped one; so does a window where no program was there at both ends.
fn window_programs(
    start: &[ProgramRunTime],
    end: &[ProgramRunTime],
    window_s: f64,
) -> Option<Vec<ProgramWindow>> {
    let mut out: Vec<ProgramWindow> = Vec::new();
    for e in end {
        let Some(s) = start.iter().find(|s| s.id == e.id) else {
            continue;
        };
        let (ns, runs) = (
            e.run_time_ns.checked_sub(s.run_time_ns)?,
            e.runs.checked_sub(s.runs)?,
        );
        match out.iter_mut().find(|w| w.prog == e.prog) {
            Some(w) => {
                w.run_ns = w.run_ns.checked_add(ns)?;
                w.runs += runs;
            }
            None => out.push(ProgramWindow {
                prog: e.prog,
                run_ns: ns,
                runs,
                window_s,
            }),
        }
    }
    out.sort_by_key(|w| w.prog);
    (!out.is_empty()).then_some(out)
}

/// Each program's latest figures: `now`'s, beside those of programs no longer in it.
fn merge_seen(seen: &mut Vec<ProgramRunTime>, now: &[ProgramRunTime]) {
    for p in now {
        match seen.iter_mut().find(|s| s.id == p.id) {
            Some(s) => *s = *p,
            None => seen.push(*p),
        }
    }
}

/// CPU time of all of `pid`'s threads so far, seconds (threads that exited are not in it).
fn cpu_s(pid: u32) -> Result<f64> {
    let mut ns = 0u64;
    let dir = format!("/proc/{pid}/task");
    for t in std::fs::read_dir(&dir)
        .with_context(|| dir.clone())?
        .flatten()
    {
        if let Ok(text) = std::fs::read_to_string(t.path().join("schedstat")) {
            ns += placer_linux::procfs::parse_schedstat(&text).map_or(0, |s| s.run_ns);
        }
    }
    Ok(ns as f64 / 1e9)
}

/// Measures `cmd`'s CPU over `window` after a 3 s warm-up; `bpf_prog`: its eBPF programs,
/// whose in-kernel run time counts too (`only_held`: only those it holds, none when it
/// holds none; else all of those names when it holds none); `busy`: the background whose
/// rates the window reports.
fn measure(
    name: &str,
    mut cmd: Command,
    window: Duration,
    bpf_prog: Option<&[Prog]>,
    only_held: bool,
    busy: Option<&Busy>,
) -> Result<RunCost> {
    let command = format!("{cmd:?}");
    // Gone with the bench even when it is killed (Kids covers every other way out).
    placer_linux::sys::stop_with_parent(&mut cmd)?;
    let child = match cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            let why = format!("cannot start it ({e}); Debian package {name}?");
            return Ok(RunCost::missing(command, why));
        }
    };
    let mut kids = Kids(vec![child]);
    std::thread::sleep(Duration::from_secs(3));
    if let Ok(Some(st)) = kids.0[0].try_wait() {
        return Ok(RunCost::missing(command, format!("exited at start ({st})")));
    }
    let pid = kids.0[0].id();
    // Each of its programs' run time so far, counted from here on (the stats stay on while
    // held). Its own programs only, where its fds say which (other daemons on this machine
    // load programs of the same name); all of that name where they do not.
    let bpf_ns = || -> Option<Vec<ProgramRunTime>> {
        let mut all = placer_linux::bpf::program_run_times(bpf_prog?).ok()?;
        let held = placer_linux::bpf::programs_held_by(pid).unwrap_or_default();
        all.retain(|p| (held.is_empty() && !only_held) || held.contains(&p.id));
        Some(all)
    };
    let stats = bpf_prog
        .and_then(|_| placer_linux::bpf::RunTimeStats::enable().ok())
        .and_then(|on| Some((on, bpf_ns()?)));
    let b0 = busy.map(Busy::snapshot).transpose()?;
    let (c0, t0) = (cpu_s(pid)?, Instant::now());
    // The daemon attaches and detaches its hooks by their cost (issue 46): its programs
    // are looked at every 100 ms, each counted from where it stood at the start (or from
    // 0, loaded in the window) to where it stood when last seen held, so that a program
    // dropped in the window counts up to 100 ms before its end.
    let mut seen: Vec<ProgramRunTime> = Vec::new();
    while t0.elapsed() < window {
        std::thread::sleep((window - t0.elapsed()).min(Duration::from_millis(100)));
        if stats.is_some() {
            merge_seen(&mut seen, &bpf_ns().unwrap_or_default());
        }
    }
    let (c1, w) = (cpu_s(pid)?, t0.elapsed().as_secs_f64());
    let programs = stats
        .and_then(|(_on, mut k0)| {
            for p in &seen {
                if !k0.iter().any(|k| k.id == p.id) {
                    k0.push(ProgramRunTime {
                        run_time_ns: 0,
                        runs: 0,
                        ..*p
                    });
                }
            }
            window_programs(&k0, &seen, w)
        })
        .unwrap_or_default();
    let background = match (b0, busy) {
        (Some(a), Some(b)) => Some(a.rates_to(&b.snapshot()?)),
        _ => None,
    };
    drop(kids);
    let in_kernel_ns = (!programs.is_empty()).then(|| programs.iter().map(|p| p.run_ns).sum());
    Ok(RunCost {
        command,
        window_s: w,
        cpu_percent_of_one: Some((c1 - c0) / w * 100.0),
        in_kernel_percent_of_one: in_kernel_ns.map(|k: u64| k as f64 / 1e9 / w * 100.0),
        programs,
        background,
        missing: None,
    })
}

/// One agent's figures over the runs: medians, spread, and each run's total.
fn summarise(agent: &str, path: Option<String>, runs: &[RunCost], wants_kernel: bool) -> AgentCost {
    let cpu: Vec<f64> = runs.iter().filter_map(|r| r.cpu_percent_of_one).collect();
    let kernel: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.in_kernel_percent_of_one)
        .collect();
    let totals: Vec<f64> = runs.iter().filter_map(|r| r.total(wants_kernel)).collect();
    let last = runs.last();
    AgentCost {
        agent: agent.into(),
        path,
        command: last.map(|r| r.command.clone()).unwrap_or_default(),
        window_s: median(&runs.iter().map(|r| r.window_s).collect::<Vec<_>>()).unwrap_or(0.0),
        cpu_percent_of_one: median(&cpu),
        in_kernel_percent_of_one: median(&kernel),
        min_percent_of_one: totals.iter().copied().reduce(f64::min),
        max_percent_of_one: totals.iter().copied().reduce(f64::max),
        runs_percent_of_one: totals,
        programs: program_costs(runs),
        background: background_rates(runs),
        missing: if cpu.is_empty() {
            runs.iter().find_map(|r| r.missing.clone())
        } else {
            None
        },
    }
}

/// Each program's medians over the runs that measured it.
fn program_costs(runs: &[RunCost]) -> Vec<ProgramCost> {
    Prog::ALL
        .into_iter()
        .filter_map(|prog| {
            let w: Vec<&ProgramWindow> = runs
                .iter()
                .flat_map(|r| r.programs.iter().filter(|p| p.prog == prog))
                .collect();
            let per = |f: &dyn Fn(&ProgramWindow) -> Option<f64>| {
                median(&w.iter().filter_map(|p| f(p)).collect::<Vec<_>>())
            };
            Some(ProgramCost {
                program: prog.name(),
                event: prog.event(),
                runs_per_s: per(&|p| Some(p.runs as f64 / p.window_s))?,
                ns_per_run: per(&|p| (p.runs > 0).then(|| p.run_ns as f64 / p.runs as f64)),
                percent_of_one: per(&|p| Some(p.run_ns as f64 / 1e9 / p.window_s * 100.0))?,
            })
        })
        .collect()
}

/// The background's rates, each the median over the runs.
fn background_rates(runs: &[RunCost]) -> Option<Rates> {
    let r: Vec<&Rates> = runs.iter().filter_map(|r| r.background.as_ref()).collect();
    let m = |f: fn(&Rates) -> f64| median(&r.iter().map(|x| f(x)).collect::<Vec<_>>());
    Some(Rates {
        machine_switches_per_s: m(|x| x.machine_switches_per_s)?,
        pingpong_switches_per_s: m(|x| x.pingpong_switches_per_s)?,
        segments_per_s: m(|x| x.segments_per_s)?,
        stream_gbit_per_s: m(|x| x.stream_gbit_per_s)?,
    })
}

/// The other agent's command, at a 1 s interval where it has one.
fn other_agent(vs: &str) -> Command {
    match vs {
        "irqbalance" => {
            let mut c = Command::new("irqbalance");
            c.args(["--foreground", "--interval=1"]);
            c
        }
        "numad" => {
            let mut c = Command::new("numad");
            c.args(["-F", "-i", "1"]);
            c
        }
        cmd => {
            let mut c = Command::new("sh");
            c.args(["-c", &format!("exec {cmd}")]);
            c
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    let all = [
        "net-affinity",
        "smt-energy",
        "contention",
        "energy-qos",
        "numa-local",
    ];
    let policies: Vec<String> = if args.policies.iter().any(|p| p == "all") {
        all.iter().map(|s| s.to_string()).collect()
    } else {
        args.policies.clone()
    };
    if policies.is_empty() {
        bail!("--policies: at least one");
    }
    let _load = idle_load(args.procs, args.conns)?;
    // Beside every window of every run; bounded by the whole measurement's length (each
    // window, its warm-up and a start) should the bench fail to stop it.
    let agents_n = args.paths.len() as u32 + u32::from(args.vs.is_some());
    let bound = (args.duration + Duration::from_secs(10)) * args.runs * agents_n;
    let last_cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32 - 1;
    let busy = args
        .background
        .map(|bg| Busy::start(bg, last_cpu, bound + Duration::from_secs(60)))
        .transpose()?;
    let dir = temp_dir("overhead-vs");
    let list = policies
        .iter()
        .map(|p| format!("{p:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    // One column per agent (the paths, then the other agent), one row per run: every run
    // measures them all, side by side on the same load.
    let mut columns: Vec<Vec<RunCost>> = Vec::new();
    let mut per_run_ratios = Vec::new();
    for _ in 0..args.runs {
        let mut row = Vec::new();
        for path in &args.paths {
            let cfg = dir.join(format!("placer-{path}.toml"));
            std::fs::write(
                &cfg,
                format!(
                    "interval = \"1s\"\npolicies = [{list}]\nstate_dir = {:?}\nkernel_events = {}\n\
                     [metrics]\nenabled = false\n",
                    dir.join("state").display().to_string(),
                    path == "events"
                ),
            )
            .context("writing the daemon's config")?;
            let mut placer = Command::new(std::env::current_exe()?);
            placer.args(["daemon", "--dry-run", "--config"]).arg(&cfg);
            let prog = (path == "events").then_some(&Prog::ALL[..]);
            row.push(measure(
                "placer",
                placer,
                args.duration,
                prog,
                false,
                busy.as_ref(),
            )?);
        }
        if let Some(vs) = &args.vs {
            // Another placer (an older build, `--vs "PATH daemon ..."`) has programs of
            // the same names: its own are measured too.
            let (other, progs) = (other_agent(vs), Some(&Prog::ALL[..]));
            row.push(measure(
                vs,
                other,
                args.duration,
                progs,
                true,
                busy.as_ref(),
            )?);
        }
        let first_kernel = args.paths.first().is_some_and(|p| p == "events");
        if let (Some(a), Some(b)) = (row.first(), row.get(args.paths.len())) {
            if let (Some(x), Some(y)) = (a.total(first_kernel), b.total(false)) {
                if y > 0.0 {
                    per_run_ratios.push(x / y);
                }
            }
        }
        for (i, c) in row.into_iter().enumerate() {
            if columns.len() <= i {
                columns.push(Vec::new());
            }
            columns[i].push(c);
        }
    }
    drop(busy);
    let _ = std::fs::remove_dir_all(&dir);
    let mut agents = Vec::new();
    for (i, runs) in columns.iter().enumerate() {
        agents.push(match args.paths.get(i) {
            Some(path) => summarise("placer", Some(path.clone()), runs, path == "events"),
            None => summarise(args.vs.as_deref().unwrap_or("other"), None, runs, false),
        });
    }
    let ratio = median(&per_run_ratios);
    let report = Report {
        procs: args.procs,
        conns: args.conns,
        background: args.background,
        policies,
        agents,
        runs: args.runs,
        ratio,
        ratios: per_run_ratios,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    outln!(
        "load: {} sleeping processes, {} idle connections{}; placer policies: {}",
        report.procs,
        report.conns,
        match &report.background {
            Some(b) => format!(
                "; background {} switches/s, {} stream(s){}",
                b.switches_per_s,
                b.streams,
                b.stream_gbit_per_s
                    .map_or_else(String::new, |g| format!(" at {g} Gbit/s"))
            ),
            None => String::new(),
        },
        report.policies.join(", ")
    );
    for a in &report.agents {
        match (a.cpu_percent_of_one, &a.missing) {
            (Some(p), _) => outln!(
                "{:<16} {p:.3}% of one CPU over {:.1} s{}{}",
                a.label(),
                a.window_s,
                match (a.in_kernel_percent_of_one, a.total_percent_of_one()) {
                    (Some(k), Some(t)) => format!(" + {k:.3}% in its eBPF program = {t:.3}%"),
                    _ => String::new(),
                },
                match (a.min_percent_of_one, a.max_percent_of_one) {
                    (Some(lo), Some(hi)) => format!(
                        " (median of {} runs; {lo:.3}-{hi:.3}%)",
                        a.runs_percent_of_one.len()
                    ),
                    _ => String::new(),
                }
            ),
            (None, Some(why)) => outln!("{:<16} not measured: {why}", a.label()),
            _ => {}
        }
        for p in &a.programs {
            outln!(
                "  {:<16} {:>10.0} runs/s ({}) x {} = {:.3}% of one CPU",
                p.program,
                p.runs_per_s,
                p.event,
                p.ns_per_run
                    .map_or_else(|| "-".to_string(), |n| format!("{n:.0} ns")),
                p.percent_of_one
            );
        }
        if let Some(b) = &a.background {
            outln!(
                "  machine: {:.0} switches/s ({:.0} the ping-pong's), {:.0} TCP segments received/s, streams {:.2} Gbit/s",
                b.machine_switches_per_s,
                b.pingpong_switches_per_s,
                b.segments_per_s,
                b.stream_gbit_per_s
            );
        }
    }
    match report.ratio {
        Some(r) => outln!(
            "{} / {}: {r:.1}x (median of {} runs' ratios; {:.1}-{:.1}x)",
            report.agents[0].label(),
            report.agents[args.paths.len()].label(),
            report.ratios.len(),
            report.ratios.iter().copied().fold(f64::INFINITY, f64::min),
            report
                .ratios
                .iter()
                .copied()
                .fold(f64::NEG_INFINITY, f64::max)
        ),
        None if report.agents.len() > args.paths.len() => {
            outln!("no ratio: the other agent used no measurable CPU or was not measured")
        }
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(id: u32, prog: Prog, run_time_ns: u64, runs: u64) -> ProgramRunTime {
        ProgramRunTime {
            id,
            prog,
            run_time_ns,
            runs,
        }
    }

    #[test]
    fn a_counter_that_goes_back_gives_no_figure_never_a_wrapped_one() {
        // Issue 37: a run-time delta taken as unsigned read 92,232,388,878% of one CPU.
        let sw = |id, ns, runs| at(id, Prog::Switch, ns, runs);
        let total = |a: &[ProgramRunTime], b: &[ProgramRunTime]| {
            window_programs(a, b, 1.0).map(|w| w.iter().map(|p| p.run_ns).sum::<u64>())
        };
        assert_eq!(total(&[sw(7, 500, 5)], &[sw(7, 400, 6)]), None);
        assert_eq!(total(&[sw(7, 500, 5)], &[sw(7, 600, 4)]), None);
        assert_eq!(
            total(
                &[sw(7, 500, 1), sw(8, 10, 1)],
                &[sw(7, 400, 1), sw(8, 20, 1)]
            ),
            None
        );
        assert_eq!(total(&[sw(7, 500, 1)], &[sw(7, 800, 2)]), Some(300));
        // A program unloaded in the window (another daemon's) does not make the sum go
        // back; one loaded in it is not counted.
        assert_eq!(
            total(
                &[sw(7, 500, 1), sw(9, 10_000, 1)],
                &[sw(7, 800, 1), sw(11, 5, 1)]
            ),
            Some(300)
        );
        assert_eq!(total(&[sw(9, 1, 1)], &[sw(11, 5, 1)]), None);
    }

    #[test]
    fn a_program_dropped_in_the_window_counts_to_its_last_sight() {
        // Program 1 held at the start, dropped in the window (last seen at 500 ns);
        // program 2 loaded in the window (from 0), seen at 70 then 300.
        let mut seen = Vec::new();
        merge_seen(&mut seen, &[at(1, Prog::Switch, 500, 5)]);
        merge_seen(&mut seen, &[at(2, Prog::Switch, 70, 1)]);
        merge_seen(&mut seen, &[at(2, Prog::Switch, 300, 3)]);
        assert_eq!(seen.len(), 2);
        let start = [at(1, Prog::Switch, 100, 1), at(2, Prog::Switch, 0, 0)];
        let w = window_programs(&start, &seen, 1.0).unwrap();
        assert_eq!((w[0].run_ns, w[0].runs), (700, 7));
    }

    #[test]
    fn each_kind_of_program_is_summed_apart_with_its_runs() {
        let start = [
            at(3, Prog::TcpMoves, 1_000, 10),
            at(1, Prog::Switch, 100, 1),
            at(2, Prog::Tick, 50, 1),
            at(4, Prog::Switch, 0, 0),
        ];
        let end = [
            at(1, Prog::Switch, 1_100, 11),
            at(4, Prog::Switch, 900, 9),
            at(2, Prog::Tick, 50, 1),
            at(3, Prog::TcpMoves, 4_000, 40),
        ];
        let w = window_programs(&start, &end, 2.0).unwrap();
        let got: Vec<(Prog, u64, u64)> = w.iter().map(|p| (p.prog, p.run_ns, p.runs)).collect();
        assert_eq!(
            got,
            [
                (Prog::Switch, 1_900, 19),
                (Prog::Tick, 0, 0),
                (Prog::TcpMoves, 3_000, 30)
            ]
        );
        let run = RunCost {
            command: String::new(),
            window_s: 2.0,
            cpu_percent_of_one: Some(0.1),
            in_kernel_percent_of_one: Some(0.0),
            programs: w,
            background: None,
            missing: None,
        };
        let c = program_costs(&[run]);
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].program, "placer_cpu");
        assert_eq!(c[0].runs_per_s, 9.5);
        assert_eq!(c[0].ns_per_run, Some(100.0));
        // A program that did not run has no cost per run, not a division by zero.
        assert_eq!((c[1].program, c[1].ns_per_run), ("placer_tick", None));
        assert_eq!(c[2].percent_of_one, 3_000.0 / 1e9 / 2.0 * 100.0);
    }

    #[test]
    fn ratios_and_totals_come_only_from_valid_figures() {
        let run = |cpu: f64, k: Option<f64>| RunCost {
            command: String::new(),
            window_s: 1.0,
            cpu_percent_of_one: Some(cpu),
            in_kernel_percent_of_one: k,
            programs: Vec::new(),
            background: None,
            missing: None,
        };
        assert_eq!(run(1.0, None).total(true), None);
        assert_eq!(run(1.0, None).total(false), Some(1.0));
        assert_eq!(run(1.0, Some(0.5)).total(true), Some(1.5));
        let a = summarise(
            "placer",
            Some("events".into()),
            &[run(1.0, Some(0.5)), run(3.0, None), run(2.0, Some(0.1))],
            true,
        );
        assert_eq!(a.runs_percent_of_one, [1.5, 2.1]);
        assert_eq!(a.cpu_percent_of_one, Some(2.0));
        assert_eq!(a.in_kernel_percent_of_one, Some(0.3));
        assert_eq!(a.min_percent_of_one, Some(1.5));
        assert_eq!(a.max_percent_of_one, Some(2.1));
    }
}
