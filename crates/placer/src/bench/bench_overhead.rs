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

use super::bench_daemon::{idle_load, temp_dir, Kids};
use anyhow::{bail, Context, Result};
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
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct AgentCost {
    pub agent: String,
    /// placer's observation path (`events` or `proc`); None for the other agent.
    pub path: Option<String>,
    pub command: String,
    pub window_s: f64,
    pub cpu_percent_of_one: Option<f64>,
    /// placer's eBPF collector's run time in the kernel over the window, % of one CPU
    /// (events path; None where the kernel's BPF stats could not be enabled).
    pub in_kernel_percent_of_one: Option<f64>,
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
    pub policies: Vec<String>,
    pub agents: Vec<AgentCost>,
    /// placer's share (the first path, its eBPF program's time included) over the other
    /// agent's (None without a measured other agent).
    pub ratio: Option<f64>,
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
            ns += placer_linux::procfs::parse_schedstat_run_ns(&text).unwrap_or(0);
        }
    }
    Ok(ns as f64 / 1e9)
}

/// Measures `cmd`'s CPU over `window` after a 3 s warm-up; `bpf_prog`: the name of its eBPF
/// program whose in-kernel run time counts too.
fn measure(
    name: &str,
    mut cmd: Command,
    window: Duration,
    bpf_prog: Option<&str>,
) -> Result<AgentCost> {
    let command = format!("{cmd:?}");
    let child = match cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return Ok(AgentCost {
                agent: name.into(),
                path: None,
                command,
                window_s: 0.0,
                cpu_percent_of_one: None,
                in_kernel_percent_of_one: None,
                missing: Some(format!("cannot start it ({e}); Debian package {name}?")),
            })
        }
    };
    let mut kids = Kids(vec![child]);
    std::thread::sleep(Duration::from_secs(3));
    if let Ok(Some(st)) = kids.0[0].try_wait() {
        return Ok(AgentCost {
            agent: name.into(),
            path: None,
            command,
            window_s: 0.0,
            cpu_percent_of_one: None,
            in_kernel_percent_of_one: None,
            missing: Some(format!("exited at start ({st})")),
        });
    }
    let pid = kids.0[0].id();
    // The program's run time so far, counted from here on (the stats stay on while held).
    let bpf_ns = || {
        placer_linux::bpf::programs_run_time(bpf_prog?)
            .ok()
            .map(|r| r.0)
    };
    let stats = bpf_prog
        .and_then(|_| placer_linux::bpf::RunTimeStats::enable().ok())
        .and_then(|on| Some((on, bpf_ns()?)));
    let (c0, t0) = (cpu_s(pid)?, Instant::now());
    std::thread::sleep(window);
    let (c1, w) = (cpu_s(pid)?, t0.elapsed().as_secs_f64());
    let in_kernel = stats.and_then(|(_on, k0)| Some((bpf_ns()? - k0) as f64 / 1e9));
    drop(kids);
    Ok(AgentCost {
        agent: name.into(),
        path: None,
        command,
        window_s: w,
        cpu_percent_of_one: Some((c1 - c0) / w * 100.0),
        in_kernel_percent_of_one: in_kernel.map(|k| k / w * 100.0),
        missing: None,
    })
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
    let dir = temp_dir("overhead-vs");
    let list = policies
        .iter()
        .map(|p| format!("{p:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut agents = Vec::new();
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
        let prog = (path == "events").then_some(placer_linux::bpf::PROG_NAME);
        let mut cost = measure("placer", placer, args.duration, prog)?;
        cost.path = Some(path.clone());
        agents.push(cost);
    }
    if let Some(vs) = &args.vs {
        let other = match vs.as_str() {
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
        };
        agents.push(measure(vs, other, args.duration, None)?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let ratio = match (agents.first(), agents.get(args.paths.len())) {
        (Some(a), Some(b)) => match (a.total_percent_of_one(), b.total_percent_of_one()) {
            (Some(x), Some(y)) if y > 0.0 => Some(x / y),
            _ => None,
        },
        _ => None,
    };
    let report = Report {
        procs: args.procs,
        conns: args.conns,
        policies,
        agents,
        ratio,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    outln!(
        "load: {} sleeping processes, {} idle connections; placer policies: {}",
        report.procs,
        report.conns,
        report.policies.join(", ")
    );
    for a in &report.agents {
        match (a.cpu_percent_of_one, &a.missing) {
            (Some(p), _) => outln!(
                "{:<16} {p:.3}% of one CPU over {:.1} s{}",
                a.label(),
                a.window_s,
                match (a.in_kernel_percent_of_one, a.total_percent_of_one()) {
                    (Some(k), Some(t)) => format!(" + {k:.3}% in its eBPF program = {t:.3}%"),
                    _ => String::new(),
                }
            ),
            (None, Some(why)) => outln!("{:<16} not measured: {why}", a.label()),
            _ => {}
        }
    }
    match report.ratio {
        Some(r) => outln!(
            "{} / {}: {r:.1}x",
            report.agents[0].label(),
            report.agents[args.paths.len()].label()
        ),
        None if report.agents.len() > args.paths.len() => {
            outln!("no ratio: the other agent used no measurable CPU or was not measured")
        }
        None => {}
    }
    Ok(())
}
