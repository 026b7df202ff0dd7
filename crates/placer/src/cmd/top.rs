//! `placer top`: what every CPU and the busiest processes are doing.
//!
//! Live (default): a terminal view (ratatui) refreshed each `--interval`: CPUs (utilisation,
//! softirq share, device IRQs/s, NET_RX softirqs/s), the busiest processes (CPU share,
//! allowed CPUs, last CPU, receive/send rates, flows) and a line naming the sources that
//! are missing and why. `q`, Esc, Ctrl-C or a SIGINT/SIGTERM quits, restoring the
//! terminal.
//!
//! `--once`: two samples `--interval` apart, one observation, printed as a table, or with
//! `--json` as the documented JSON contract ([`TopJson`], docs/observation.md):
//! `{"version":1, "sources":[...], "time_ns", "interval_s", "cpus":[...], "procs":[...],
//! "irqs":[...], "power_w", "power_by_domain_w"}`, each process with at least `pid`,
//! `comm`, `cpu_share`, `allowed_cpus` (array of CPU ids), `last_cpu`, `rx_bytes_per_s`,
//! `tx_bytes_per_s`, `flows`. `--json` alone is `--once --json`; `--json --follow` prints
//! one such line per interval until SIGINT/SIGTERM (then exits 0).

use anyhow::{Context, Result};
use placer_core::observation::{Observation, ProcObs};
use placer_core::sample::{Source, SourceStatus};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use placer::observer::{busiest, NetCosts, Observer};

/// Version of the `top --json` output. Fields are only ever added.
pub const TOP_JSON_VERSION: u32 = 1;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Filesystem root holding proc/ and sys/ (sockets are read only for /).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Time between the samples of an observation: "1s", "500ms", "2m", or seconds.
    #[arg(long, default_value = "1s", value_parser = crate::common::duration_arg)]
    pub interval: Duration,
    /// One observation (two samples an interval apart), then exit.
    #[arg(long)]
    pub once: bool,
    /// Machine-readable JSON instead of the table or the live view: one observation (as
    /// --once), or one line per interval with --follow.
    #[arg(long)]
    pub json: bool,
    /// With --json: one JSON line per interval until interrupted (SIGINT/SIGTERM end it
    /// with status 0).
    #[arg(long, requires = "json", conflicts_with = "once")]
    pub follow: bool,
    /// Processes shown in the table or live view.
    #[arg(long, short = 'n', default_value_t = 25)]
    pub count: usize,
    /// Also sample threads (costly on big machines).
    #[arg(long)]
    pub threads: bool,
    /// Also read each process's resident pages per NUMA node (/proc/PID/numa_maps; costly:
    /// it walks every mapping) and show them (`numa_pages` in the JSON).
    #[arg(long)]
    pub numa: bool,
    /// The running daemon's state directory, where `placer daemon --nri` lists the
    /// Kubernetes containers it sees (their pods and names are shown beside processes);
    /// default: the config's `state_dir`.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// The daemon's TOML config, read for its `state_dir` only; default
    /// /etc/placer/placer.toml when it exists, else the built-in default.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

impl Args {
    /// The daemon's config (its `state_dir`, and what it does next to other agents). One
    /// that cannot be read is said once and the built-in default used: top observes
    /// without the daemon's state too.
    fn daemon_config(&self) -> placer_core::config::Config {
        let state = crate::cmd::config::StateArgs {
            config: self.config.clone(),
            no_config: false,
            state_dir: None,
            root: self.root.clone(),
        };
        state.config().unwrap_or_else(|e| {
            let cfg = placer_core::config::Config::default();
            eprintln!(
                "placer top: {e:#}; using the built-in config (state in {})",
                cfg.state_dir
            );
            cfg
        })
    }

    /// Where the daemon keeps its decisions: --state-dir, else the config's `state_dir`
    /// (the daemon's own resolution).
    fn state_dir(&self, cfg: &placer_core::config::Config) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(&cfg.state_dir))
    }
}

/// The JSON printed by `placer top --once --json`.
#[derive(Serialize)]
pub struct TopJson<'a> {
    pub version: u32,
    pub sources: &'a [Source],
    #[serde(flatten)]
    pub observation: &'a Observation,
    /// Per interface with receive CPUs: the receive costs learned so far
    /// ([`placer_core::net_costs`]; configured fallbacks until confident).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub net_costs: BTreeMap<String, NetCosts>,
    /// Processes that ran in the interval and were gone at its end (kernel event sources
    /// only: the /proc path cannot see them).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub exited: &'a [placer_core::sample::ExitedProc],
    /// With `placer daemon --nri` running: the Kubernetes pod and container of each
    /// process that runs in one the runtime reported.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub pods: &'a [ProcPod],
    /// Other agents managing IRQ affinity or cpufreq (irqbalance, tuned, ...) and what
    /// placer, as configured, does next to each (`placer_core::coexist`).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub coexistence: &'a [String],
    /// Each placer process (the daemon, this top): its own CPU and its eBPF programs'
    /// time in the kernel over the interval.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub placer: &'a [PlacerCost],
}

/// A process in a Kubernetes container: its pid beside the daemon's view of the container.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct ProcPod {
    pub pid: u32,
    #[serde(flatten)]
    pub container: placer_nri::placement::ContainerView,
}

/// The running (not dry-run) daemon's containers, from its state directory; empty
/// without `placer daemon --nri`.
fn daemon_containers(state_dir: &std::path::Path) -> Vec<placer_nri::placement::ContainerView> {
    placer_agent::state::Decisions::read_live(state_dir)
        .map(|d| d.containers)
        .unwrap_or_default()
}

/// Each observed process in one of `containers`, by the container id in its cgroup path.
pub fn pods_of(
    obs: &Observation,
    containers: &[placer_nri::placement::ContainerView],
) -> Vec<ProcPod> {
    if containers.is_empty() {
        return Vec::new();
    }
    obs.procs
        .iter()
        .filter_map(|p| {
            let id = placer_core::k8s::parse_cgroup_path(&p.cgroup)?.container_id;
            let c = containers.iter().find(|c| c.container_id == id)?;
            Some(ProcPod {
                pid: p.pid,
                container: c.clone(),
            })
        })
        .collect()
}

/// The KUBERNETES section: the shown processes that run in a pod's container.
fn pods_section(obs: &Observation, n: usize, pods: &[ProcPod]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let shown: Vec<(&ProcObs, &ProcPod)> = busiest(obs, n)
        .into_iter()
        .filter_map(|p| Some((p, pods.iter().find(|x| x.pid == p.pid)?)))
        .collect();
    if shown.is_empty() {
        return o;
    }
    let _ = writeln!(
        o,
        "\n{:>7} {:<16} KUBERNETES (namespace/pod container)",
        "PID", "COMM"
    );
    for (p, ProcPod { container: k, .. }) in shown {
        let comm: String = p.comm.chars().take(16).collect();
        let cpus = k
            .cpus
            .as_ref()
            .map_or(String::new(), |c| format!(" cpuset {c} (placer)"));
        let _ = writeln!(
            o,
            "{:>7} {comm:<16} {}/{} {}{cpus}",
            p.pid, k.namespace, k.pod, k.container
        );
    }
    o
}

/// One placer process's cost over an interval: its own CPU (its threads' time, from the
/// observation) and its eBPF programs' time in the kernel, which runs beside whichever task
/// switched, took a timer or received a segment and so is not in its own share.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlacerCost {
    pub pid: u32,
    /// CPU time over the interval (1.0 = one whole CPU).
    pub own_cpu_share: f64,
    /// Its programs' kernel time over the interval, same unit; `None` when it holds none
    /// or the kernel does not count their time (sysctl kernel.bpf_stats_enabled = 0).
    pub in_kernel_share: Option<f64>,
    /// Whether it holds the CPU collector's program now (the daemon detaches it while
    /// reading every /proc/PID/stat costs less: `placer_linux::sampler::paths`).
    pub cpu_collector_attached: bool,
}

/// The kernel's counts of placer's programs now (empty without root).
pub fn bpf_counts() -> Vec<placer_linux::bpf::ProgramRunTime> {
    placer_linux::bpf::program_run_times(&placer_linux::bpf::Prog::ALL).unwrap_or_default()
}

/// Whether the kernel counts programs' run time now.
fn bpf_counting() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|t| t.trim() != "0")
}

/// Each placer process of the observation (by its comm) with its programs' kernel time
/// between the counts `before` and `after` (`held`: the program ids a pid holds;
/// `counting`: whether the kernel counted meanwhile). A program not in both counts, or
/// whose count went back, is left out.
pub fn placer_costs(
    obs: &Observation,
    before: &[placer_linux::bpf::ProgramRunTime],
    after: &[placer_linux::bpf::ProgramRunTime],
    held: impl Fn(u32) -> Vec<u32>,
    counting: bool,
) -> Vec<PlacerCost> {
    obs.procs
        .iter()
        .filter(|p| &*p.comm == "placer")
        .map(|p| {
            let ids = held(p.pid);
            let ns: u64 = after
                .iter()
                .filter(|a| ids.contains(&a.id))
                .filter_map(|a| {
                    let b = before.iter().find(|b| b.id == a.id)?;
                    a.run_time_ns.checked_sub(b.run_time_ns)
                })
                .sum();
            PlacerCost {
                pid: p.pid,
                cpu_collector_attached: after
                    .iter()
                    .any(|a| a.prog == placer_linux::bpf::Prog::Switch && ids.contains(&a.id)),
                own_cpu_share: p.cpu_share,
                in_kernel_share: (counting && !ids.is_empty() && obs.interval_s > 0.0)
                    .then(|| ns as f64 / 1e9 / obs.interval_s),
            }
        })
        .collect()
}

/// placer's costs between two counts taken around an observation's interval.
fn placer_costs_now(
    obs: &Observation,
    before: &[placer_linux::bpf::ProgramRunTime],
) -> Vec<PlacerCost> {
    placer_costs(
        obs,
        before,
        &bpf_counts(),
        |pid| placer_linux::bpf::programs_held_by(pid).unwrap_or_default(),
        bpf_counting(),
    )
}

/// "placer: pid 12 own 0.21% + in kernel 0.05% (its eBPF programs) of one CPU", one entry
/// per placer process; empty when none runs.
pub fn placer_line(costs: &[PlacerCost]) -> String {
    if costs.is_empty() {
        return String::new();
    }
    let each: Vec<String> = costs
        .iter()
        .map(|c| {
            let k = match c.in_kernel_share {
                Some(k) => format!(" + in kernel {:.3}% (its eBPF programs)", k * 100.0),
                None => {
                    " + in kernel not counted (no programs, or sysctl kernel.bpf_stats_enabled=0)"
                        .into()
                }
            };
            let path = match c.cpu_collector_attached {
                true => "",
                false => " (CPU collector detached: what ran read from /proc)",
            };
            format!("pid {} own {:.3}%{k}{path}", c.pid, c.own_cpu_share * 100.0)
        })
        .collect();
    format!("placer, % of one CPU: {}\n", each.join("; "))
}

/// One line on the processes that lived within the interval (empty when none was seen).
pub fn exited_line(exited: &[placer_core::sample::ExitedProc], interval_s: f64) -> String {
    if exited.is_empty() {
        return String::new();
    }
    let cpu_s: f64 = exited.iter().filter_map(|x| x.cpu_ns).sum::<u64>() as f64 / 1e9;
    let unsampled = exited.iter().filter(|x| x.unsampled).count();
    format!(
        "exited in the interval: {} process(es) ({unsampled} never sampled), {:.2} CPUs\n",
        exited.len(),
        if interval_s > 0.0 {
            cpu_s / interval_s
        } else {
            0.0
        }
    )
}

/// "missing: perf_hw (no hardware counters: ...); rapl (...)" or "all sources present".
pub fn missing_line(src: &SourceStatus) -> String {
    let missing: Vec<String> = src
        .sources
        .iter()
        .filter(|s| !s.available)
        .map(|s| format!("{} ({})", s.name, s.detail))
        .collect();
    if missing.is_empty() {
        "all sources present".into()
    } else {
        format!("missing: {}", missing.join("; "))
    }
}

pub fn human_rate(bytes_per_s: f64) -> String {
    let b = bytes_per_s;
    if b >= 1e9 {
        format!("{:.1}G", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1}M", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1}k", b / 1e3)
    } else {
        format!("{b:.0}")
    }
}

/// Column names of the CPU and process tables, the same in the live view and `--once`:
/// a process's SHARE is CPU time over the interval (1.00 = one whole CPU), LASTCPU the id
/// of the CPU it last ran on.
const CPU_COLUMNS: [&str; 7] = ["CPU", "util", "user", "sys", "softirq", "irq/s", "net_rx/s"];
const PROC_COLUMNS: [&str; 8] = [
    "PID", "COMM", "SHARE", "ALLOWED", "LASTCPU", "RX/s", "TX/s", "FLOWS",
];

fn table(
    obs: &Observation,
    src: &SourceStatus,
    n: usize,
    costs: &BTreeMap<String, NetCosts>,
    coexistence: &[String],
) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "interval {:.2}s  {}", obs.interval_s, missing_line(src));
    for l in coexistence {
        let _ = writeln!(o, "next to another agent: {l}");
    }
    let [c0, c1, c2, c3, c4, c5, c6] = CPU_COLUMNS;
    let _ = writeln!(o, "{c0:<4} {c1:>5} {c2:>5} {c3:>5} {c4:>7} {c5:>6} {c6:>9}");
    for c in &obs.cpus {
        let _ = writeln!(
            o,
            "{:<4} {:>4.0}% {:>4.0}% {:>4.0}% {:>6.0}% {:>6.0} {:>9.0}",
            c.cpu,
            c.util * 100.0,
            c.user * 100.0,
            c.system * 100.0,
            c.softirq * 100.0,
            c.irqs_per_s,
            c.net_rx_softirqs_per_s
        );
    }
    o.push('\n');
    let [p0, p1, p2, p3, p4, p5, p6, p7] = PROC_COLUMNS;
    let _ = writeln!(
        o,
        "{p0:>7} {p1:<16} {p2:>5} {p3:>9} {p4:>7} {p5:>8} {p6:>8} {p7:>5}"
    );
    for p in busiest(obs, n) {
        let _ = writeln!(
            o,
            "{:>7} {:<16} {:>5.2} {:>9} {:>7} {:>8} {:>8} {:>5}",
            p.pid,
            p.comm.chars().take(16).collect::<String>(),
            p.cpu_share,
            p.allowed_cpus.to_list_string(),
            p.last_cpu.map(|c| c.to_string()).unwrap_or_default(),
            human_rate(p.rx_bytes_per_s),
            human_rate(p.tx_bytes_per_s),
            p.flows.len()
        );
    }
    // Seed 004: where each shown process's memory is (only sampled with --numa).
    let shown: Vec<&ProcObs> = busiest(obs, n)
        .into_iter()
        .filter(|p| !p.numa_pages.is_empty())
        .collect();
    if !shown.is_empty() {
        let _ = writeln!(o, "\n{:>7} {:<16} MEMORY PER NODE", "PID", "COMM");
        for p in shown {
            let comm: String = p.comm.chars().take(16).collect();
            let pages = placer_core::policies::numa_local::format_pages(
                &p.numa_pages,
                obs.page_bytes_or(placer_bufpool::numa::page_bytes() as u64),
            );
            let _ = writeln!(o, "{:>7} {comm:<16} {pages}", p.pid);
        }
    }
    // Seed 000: receive costs learned per interface (ns at capacity 1024).
    let with_samples: Vec<_> = costs
        .iter()
        .filter(|(_, c)| c.costs.softirq_ns_per_packet.samples > 0)
        .collect();
    if !with_samples.is_empty() {
        let _ = writeln!(
            o,
            "\n{:<10} {:<8} RECEIVE COSTS (ns at capacity 1024)",
            "NIC", "RX CPUS"
        );
        for (name, c) in with_samples {
            let cpus = placer_core::CpuSet::from_iter(c.rx_cpus.iter().copied()).to_list_string();
            let _ = writeln!(
                o,
                "{name:<10} {cpus:<8} softirq {} per packet + {} per byte",
                c.costs.softirq_ns_per_packet.describe(),
                c.costs.softirq_ns_per_byte.describe()
            );
        }
    }
    // Seed 003: each process's contention class and the counter rates behind it (default
    // thresholds, this interval only; the daemon smooths over several).
    let classes = placer_core::classify::class_lines(obs, &Default::default(), None);
    if !classes.is_empty() {
        let _ = writeln!(o, "\n{:>7} {:<16} CONTENTION CLASS", "PID", "COMM");
        for (pid, comm, line) in classes {
            let comm: String = comm.chars().take(16).collect();
            let _ = writeln!(o, "{pid:>7} {comm:<16} {line}");
        }
    }
    o
}

pub fn run(mut args: Args) -> Result<()> {
    use std::io::IsTerminal;
    let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    if args.json && !args.follow {
        args.once = true;
    }
    if !(args.once || args.json || terminal) {
        // The live view needs a terminal for keys and drawing; without one, print what
        // `--once` prints rather than failing.
        eprintln!("placer top: no terminal; printing one observation (as --once)");
        args.once = true;
    }
    let mut ob = Observer::new(&args.root, args.threads, args.numa);
    let src = ob.sources();
    let cfg = args.daemon_config();
    let state_dir = args.state_dir(&cfg);
    // Read once: `top` shows what placer does next to the agents running as it starts.
    let coexistence = placer_linux::coexist::detect_beside(&args.root, &state_dir)
        .statements(&cfg.coexist_stance());
    if args.once {
        let counts = bpf_counts();
        ob.step()?;
        std::thread::sleep(args.interval);
        let obs = ob.step()?.expect("second sample gives an observation");
        let placer = placer_costs_now(&obs, &counts);
        let pods = pods_of(&obs, &daemon_containers(&state_dir));
        if args.json {
            let j = TopJson {
                version: TOP_JSON_VERSION,
                sources: &src.sources,
                observation: &obs,
                net_costs: ob.net_costs(),
                exited: ob.exited(),
                pods: &pods,
                coexistence: &coexistence,
                placer: &placer,
            };
            crate::common::write_stdout(&(serde_json::to_string(&j)? + "\n"));
        } else {
            let mut text = table(&obs, &src, args.count, &ob.net_costs(), &coexistence);
            text += &placer_line(&placer);
            text += &pods_section(&obs, args.count, &pods);
            text += &exited_line(ob.exited(), obs.interval_s);
            crate::common::write_stdout(&text);
        }
        return Ok(());
    }
    // SIGINT/SIGTERM end --follow and the live view cleanly (the terminal restored).
    crate::cmd::daemon::signals::install().context("installing signal handlers")?;
    if args.json {
        let mut counts = bpf_counts();
        ob.step()?;
        loop {
            crate::cmd::daemon::signals::sleep_until(Instant::now() + args.interval);
            if crate::cmd::daemon::signals::stop_requested() {
                return Ok(());
            }
            let obs = ob.step()?.expect("observation after the first sample");
            let placer = placer_costs_now(&obs, &counts);
            counts = bpf_counts();
            let pods = pods_of(&obs, &daemon_containers(&state_dir));
            let j = TopJson {
                version: TOP_JSON_VERSION,
                sources: &src.sources,
                observation: &obs,
                net_costs: ob.net_costs(),
                exited: ob.exited(),
                pods: &pods,
                coexistence: &coexistence,
                placer: &placer,
            };
            crate::common::write_stdout(&(serde_json::to_string(&j)? + "\n"));
        }
    }
    live::run(ob, src, args.interval, args.count, &coexistence)
}

mod live {
    use super::*;
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
    use ratatui::layout::{Constraint, Layout};
    use ratatui::style::{Modifier, Style};
    use ratatui::widgets::{Block, Paragraph, Row, Table};
    use ratatui::Frame;

    pub fn run(
        mut ob: Observer,
        src: SourceStatus,
        interval: Duration,
        n: usize,
        coexistence: &[String],
    ) -> Result<()> {
        let agents: String = coexistence
            .iter()
            .map(|l| format!("\nnext to another agent: {l}"))
            .collect();
        let mut counts = bpf_counts();
        ob.step()?;
        let mut term = ratatui::init();
        let r = (|| -> Result<()> {
            let mut obs: Option<Observation> = None;
            let mut placer = String::new();
            let mut next = Instant::now() + interval;
            let mut redraw = true;
            loop {
                if redraw {
                    let costs = cost_line(&ob.net_costs()) + &agents + &placer;
                    term.draw(|f| draw(f, obs.as_ref(), &src, n, interval, &costs))?;
                    redraw = false;
                }
                if crate::cmd::daemon::signals::stop_requested() {
                    return Ok(());
                }
                // Short polls, so that a signal (which does not end the poll) is seen soon.
                let wait = next
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(100));
                if event::poll(wait)? {
                    match event::read()? {
                        Event::Key(k) if k.kind == KeyEventKind::Press && quits(&k) => {
                            return Ok(())
                        }
                        Event::Resize(..) => redraw = true,
                        _ => {}
                    }
                    continue;
                }
                if Instant::now() < next {
                    continue;
                }
                obs = ob.step()?;
                if let Some(o) = &obs {
                    let line = placer_line(&placer_costs_now(o, &counts));
                    placer = format!("\n{}", line.trim_end());
                    counts = bpf_counts();
                }
                redraw = true;
                next += interval;
                if next < Instant::now() {
                    next = Instant::now() + interval;
                }
            }
        })();
        ratatui::restore();
        r
    }

    /// q, Esc, or Ctrl-C (a key in raw mode, not a signal).
    fn quits(k: &event::KeyEvent) -> bool {
        use ratatui::crossterm::event::KeyModifiers;
        matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
            || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL))
    }

    /// "receive costs: eth0 2310 ns/packet + 0.0 ns/byte (learned)" for the live view.
    fn cost_line(costs: &BTreeMap<String, NetCosts>) -> String {
        let parts: Vec<String> = costs
            .iter()
            .filter(|(_, c)| c.costs.softirq_ns_per_packet.samples > 0)
            .map(|(name, c)| {
                let (p, b) = (&c.costs.softirq_ns_per_packet, &c.costs.softirq_ns_per_byte);
                format!(
                    "{name} {:.0} ns/packet + {:.1} ns/byte ({})",
                    p.ns,
                    b.ns,
                    if p.learned { "learned" } else { "configured" }
                )
            })
            .collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!("receive costs at capacity 1024: {}", parts.join("; "))
        }
    }

    fn draw(
        f: &mut Frame,
        obs: Option<&Observation>,
        src: &SourceStatus,
        n: usize,
        iv: Duration,
        costs: &str,
    ) {
        let ncpu = obs.map_or(0, |o| o.cpus.len()) as u16;
        let power = obs
            .and_then(|o| o.power_w)
            .map(|w| format!("  power {w:.1} W"))
            .unwrap_or_default();
        let header = format!(
            "placer top — every {:.1}s (q quits){power}\n{}\n{costs}",
            iv.as_secs_f64(),
            missing_line(src)
        );
        // Wrapped, the header takes as many rows as its lines need at this width.
        let width = f.area().width.max(1) as usize;
        let head_rows: usize = header
            .lines()
            .map(|l| l.chars().count().div_ceil(width).max(1))
            .sum();
        let [head, cpus, procs] = Layout::vertical([
            Constraint::Length(head_rows as u16),
            Constraint::Length(ncpu + 3),
            Constraint::Min(5),
        ])
        .areas(f.area());
        let bold = Style::default().add_modifier(Modifier::BOLD);
        f.render_widget(
            Paragraph::new(header).wrap(ratatui::widgets::Wrap { trim: false }),
            head,
        );
        let Some(o) = obs else {
            f.render_widget(Paragraph::new("sampling..."), cpus);
            return;
        };
        let rows = o.cpus.iter().map(|c| {
            Row::new(vec![
                c.cpu.to_string(),
                format!("{:.0}%", c.util * 100.0),
                format!("{:.0}%", c.user * 100.0),
                format!("{:.0}%", c.system * 100.0),
                format!("{:.0}%", c.softirq * 100.0),
                format!("{:.0}", c.irqs_per_s),
                format!("{:.0}", c.net_rx_softirqs_per_s),
            ])
        });
        // Each column as wide as its header (net_rx/s is the widest): none is cut.
        let t = Table::new(
            rows,
            CPU_COLUMNS.map(|h| Constraint::Length(h.len().max(5) as u16)),
        )
        .header(Row::new(CPU_COLUMNS.to_vec()).style(bold))
        .block(Block::bordered().title("CPUs"));
        f.render_widget(t, cpus);
        let rows = busiest(o, n).into_iter().map(|p| {
            let flow = p
                .flows
                .iter()
                .max_by(|a, b| {
                    (a.rx_bytes_per_s + a.tx_bytes_per_s)
                        .total_cmp(&(b.rx_bytes_per_s + b.tx_bytes_per_s))
                })
                .map(|f| format!("{} {}<->{}", p.flows.len(), f.local, f.remote))
                .unwrap_or_default();
            Row::new(vec![
                p.pid.to_string(),
                p.comm.to_string(),
                format!("{:.2}", p.cpu_share),
                p.allowed_cpus.to_list_string(),
                p.last_cpu.map(|c| c.to_string()).unwrap_or_default(),
                human_rate(p.rx_bytes_per_s),
                human_rate(p.tx_bytes_per_s),
                flow,
            ])
        });
        let widths = [
            Constraint::Length(8),
            Constraint::Length(16),
            Constraint::Length(6),
            Constraint::Length(10),
            Constraint::Length(7),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Min(10),
        ];
        let t = Table::new(rows, widths)
            .header(Row::new(PROC_COLUMNS.to_vec()).style(bold))
            .block(Block::bordered().title("busiest processes"));
        f.render_widget(t, procs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use placer_core::sample::SourceKind;

    #[derive(clap::Parser)]
    struct TopCli {
        #[command(flatten)]
        top: Args,
    }

    fn top_args(argv: &[&str]) -> Args {
        use clap::Parser;
        TopCli::try_parse_from(std::iter::once("top").chain(argv.iter().copied()))
            .expect("parses")
            .top
    }

    #[test]
    fn state_dir_is_the_flag_then_the_configs_then_the_default() {
        let dir = placer_testkit::TempDir::new("top-state-dir");
        let cfg = dir.path().join("placer.toml");
        std::fs::write(&cfg, "state_dir = \"/run/placer-elsewhere\"\n").expect("write");
        let cfg = cfg.to_str().expect("utf-8");
        assert_eq!(
            {
                let a = top_args(&["--config", cfg]);
                a.state_dir(&a.daemon_config())
            },
            PathBuf::from("/run/placer-elsewhere")
        );
        assert_eq!(
            {
                let a = top_args(&["--config", cfg, "--state-dir", "/tmp/x"]);
                a.state_dir(&a.daemon_config())
            },
            PathBuf::from("/tmp/x")
        );
        // An unreadable config: said, and the built-in default used.
        let missing = dir.path().join("missing.toml");
        assert_eq!(
            {
                let a = top_args(&["--config", missing.to_str().expect("utf-8")]);
                a.state_dir(&a.daemon_config())
            },
            PathBuf::from(placer_core::config::Config::default().state_dir)
        );
    }

    #[test]
    fn missing_sources_are_named_with_reasons() {
        let s = SourceStatus {
            sources: vec![
                Source {
                    name: SourceKind::Proc,
                    available: true,
                    detail: String::new(),
                },
                Source {
                    name: SourceKind::Rapl,
                    available: false,
                    detail: "no RAPL".into(),
                },
            ],
        };
        assert_eq!(missing_line(&s), "missing: rapl (no RAPL)");
    }

    #[test]
    fn placer_processes_get_their_programs_kernel_time_apart_from_their_own() {
        use placer_linux::bpf::{Prog, ProgramRunTime};
        let at = |id, run_time_ns| ProgramRunTime {
            id,
            prog: Prog::Switch,
            run_time_ns,
            runs: 1,
        };
        let mut obs = Observation {
            interval_s: 2.0,
            ..Default::default()
        };
        let mut daemon = ProcObs::bare(10, 1, "placer", placer_core::cpuset::CpuSet::single(0));
        daemon.cpu_share = 0.002;
        obs.procs = vec![
            std::sync::Arc::new(daemon),
            std::sync::Arc::new(ProcObs::bare(11, 1, "sleep", Default::default())),
        ];
        // Program 1 is the daemon's (20 ms over 2 s: 1%), 2 someone else's, 3 loaded in
        // the interval (no count before it), 4 went back.
        let before = [at(1, 100), at(2, 0), at(4, 50)];
        let after = [at(1, 20_000_100), at(2, 9_000_000), at(3, 5), at(4, 10)];
        let held = |pid| if pid == 10 { vec![1, 3, 4] } else { vec![2] };
        let c = placer_costs(&obs, &before, &after, held, true);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].pid, 10);
        assert_eq!(c[0].own_cpu_share, 0.002);
        assert!(
            (c[0].in_kernel_share.unwrap() - 0.01).abs() < 1e-12,
            "{c:?}"
        );
        let line = placer_line(&c);
        assert!(
            line.contains("pid 10 own 0.200% + in kernel 1.000%"),
            "{line}"
        );
        // Not counted by the kernel: said, not a zero.
        let c = placer_costs(&obs, &before, &after, held, false);
        assert_eq!(c[0].in_kernel_share, None);
        assert!(placer_line(&c).contains("not counted"));
        assert_eq!(placer_line(&[]), "");
        // Holding the switch program: attached; holding only others: said detached.
        assert!(c[0].cpu_collector_attached && !placer_line(&c).contains("detached"));
        let mut others = after.to_vec();
        others.push(ProgramRunTime {
            prog: Prog::TcpMoves,
            ..at(5, 10)
        });
        let tcp_only = |pid| if pid == 10 { vec![5] } else { vec![] };
        let c = placer_costs(&obs, &before, &others, tcp_only, true);
        assert!(!c[0].cpu_collector_attached, "{c:?}");
        assert!(placer_line(&c).contains("CPU collector detached"));
    }

    #[test]
    fn exited_processes_get_one_line_with_their_cpu() {
        use placer_core::sample::ExitedProc;
        assert_eq!(exited_line(&[], 1.0), "");
        let x = [
            ExitedProc {
                pid: 7,
                comm: "sh".into(),
                cpu_ns: Some(300_000_000),
                unsampled: true,
            },
            ExitedProc {
                pid: 8,
                comm: String::new(),
                cpu_ns: None,
                unsampled: false,
            },
        ];
        assert_eq!(
            exited_line(&x, 2.0),
            "exited in the interval: 2 process(es) (1 never sampled), 0.15 CPUs\n"
        );
    }

    #[test]
    fn processes_in_a_pods_container_are_named_with_their_pod() {
        use placer_core::CpuSet;
        use placer_nri::placement::{ContainerView, Managed};
        let mut inside = ProcObs::bare(10, 1, "server", CpuSet::first_n(2));
        inside.cgroup = "/kubepods/burstable/pod1a2b-3c/c0ffee".into();
        let outside = ProcObs::bare(11, 1, "sshd", CpuSet::first_n(2));
        let obs = Observation {
            interval_s: 1.0,
            procs: vec![std::sync::Arc::new(inside), std::sync::Arc::new(outside)],
            ..Default::default()
        };
        let views = [ContainerView {
            namespace: "web".into(),
            pod: "front-0".into(),
            container: "app".into(),
            container_id: "c0ffee".into(),
            managed: Managed::No {
                why: "no policy asked".into(),
            },
            cpus: Some("0-1".into()),
        }];
        let pods = pods_of(&obs, &views);
        assert_eq!(pods.len(), 1, "{pods:?}");
        assert_eq!(
            (pods[0].pid, pods[0].container.pod.as_str()),
            (10, "front-0")
        );
        let text = pods_section(&obs, 10, &pods);
        assert!(
            text.contains("web/front-0 app cpuset 0-1 (placer)"),
            "{text}"
        );
        assert!(!text.contains("sshd"), "{text}");
        // No daemon with --nri: no section, no field.
        assert!(pods_of(&obs, &[]).is_empty());
        assert_eq!(pods_section(&obs, 10, &[]), "");
    }

    #[test]
    fn table_shows_pages_per_node_only_when_sampled() {
        use placer_core::CpuSet;
        let page = placer_bufpool::numa::page_bytes() as u64;
        let mut with = ProcObs::bare(10, 1, "netapp", CpuSet::first_n(2));
        with.numa_pages = [(0, (3 << 20) / page), (1, (1 << 20) / page)].into();
        let without = ProcObs::bare(11, 1, "other", CpuSet::first_n(2));
        let obs = Observation {
            interval_s: 1.0,
            procs: vec![std::sync::Arc::new(with), std::sync::Arc::new(without)],
            ..Default::default()
        };
        let t = table(&obs, &SourceStatus::default(), 10, &BTreeMap::new(), &[]);
        assert!(t.contains("MEMORY PER NODE"), "{t}");
        assert!(t.contains("node 0: 3.0 MiB, node 1: 1.0 MiB"), "{t}");
        let section = t.split("MEMORY PER NODE").nth(1).unwrap_or_default();
        assert!(!section.contains("other"), "{t}");
        let none = Observation {
            procs: vec![std::sync::Arc::new(ProcObs::bare(
                11,
                1,
                "other",
                CpuSet::first_n(2),
            ))],
            ..obs
        };
        assert!(
            !table(&none, &SourceStatus::default(), 10, &BTreeMap::new(), &[])
                .contains("MEMORY PER NODE")
        );
    }
}
