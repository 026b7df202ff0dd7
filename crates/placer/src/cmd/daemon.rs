//! `placer daemon`: observe, decide, act, every interval; never leave the machine worse
//! than it was found.
//!
//! Start: load the config (built-in default without `--config`), take the state dir's lock,
//! and restore whatever a previous daemon that crashed or was SIGKILLed left in the journal
//! (restore, not re-adopt: the policies re-pin within an interval or two what still deserves
//! it, and nothing stays changed on the word of a dead process). Then loop: one
//! `Engine::step` per interval (sample, observe, plan, apply, learn), log actions, update the
//! metrics and `decisions.json` (for `placer explain`). SIGTERM/SIGINT: restore every
//! journaled knob, then exit.
//!
//! `--nri`: also a Kubernetes node agent, an NRI plugin of the container runtime
//! (`placer_nri`, docs/kubernetes.md): containers get their cpuset at creation from the
//! plugin, and the engine's moves of their processes become container cpuset updates sent
//! through the runtime. No NRI socket: the daemon says so and exits non-zero (a DaemonSet
//! restarts it until the runtime has NRI enabled). The runtime going away ends the daemon
//! the same way, after restoring. SIGTERM puts back, through the runtime, every container
//! cpuset placer changed after creation, then the host's knobs.
//!
//! `--once`: one plan (two samples one interval apart), applied and left journaled (undo
//! with `placer restore`); `--dry-run`: prints the plans and changes nothing (no journal,
//! no state files).

pub mod metrics;
pub mod signals;
pub mod state;

use anyhow::{Context, Result};
use placer_core::config::Config;
use placer_core::engine::{CycleReport, Engine};
use placer_core::plan::Outcome;
use placer_linux::LinuxHost;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tracing::{debug, error, info, warn};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub state: state::StateArgs,
    /// Run one cycle (two samples one interval apart), apply its plan, exit. The changes
    /// stay journaled: `placer restore` undoes them.
    #[arg(long)]
    pub once: bool,
    /// Print each plan; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Interval between cycles (250ms, 1s, 2m or seconds), overriding the config's interval.
    #[arg(long, value_parser = crate::common::duration_arg)]
    pub interval: Option<std::time::Duration>,
    /// Print the built-in default config (TOML) and exit.
    #[arg(long)]
    pub print_default_config: bool,
    /// With --print-default-config: every setting commented out, as the package installs it
    /// (defaults then follow upgrades).
    #[arg(long, requires = "print_default_config")]
    pub commented_out: bool,
    /// Print plans (with --once or --dry-run) as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Record every sample the engine decides on, with the topology and this config in the
    /// header, to FILE (`placer record --replay FILE --plans` plays it back through the
    /// same engine).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Run as an NRI plugin of the container runtime too (Kubernetes node agent).
    #[arg(long, conflicts_with_all = ["once", "dry_run"])]
    pub nri: bool,
    /// The runtime's NRI socket.
    #[arg(long, value_name = "PATH", default_value = placer_nri::plugin::DEFAULT_SOCKET, requires = "nri")]
    pub nri_socket: PathBuf,
    /// The plugin's index: plugins are called in ascending order (00-99).
    #[arg(long, value_name = "N", default_value_t = placer_nri::plugin::DEFAULT_INDEX,
          value_parser = clap::value_parser!(u32).range(0..=99), requires = "nri")]
    pub nri_index: u32,
}

/// The kubelet's CPU manager state under `root` (`none` when the file is absent: no static
/// policy); read every cycle, since its pins change as pods come and go.
fn kubelet_state(root: &std::path::Path) -> Result<placer_core::k8s::CpuManager> {
    let path = root.join("var/lib/kubelet/cpu_manager_state");
    match std::fs::read_to_string(&path) {
        Ok(text) => placer_core::k8s::parse_cpu_manager_state(&text)
            .with_context(|| format!("reading {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(placer_core::k8s::CpuManager::None)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The journal of container cpusets placer changed after creation (`--nri`), in the state
/// dir beside the host's journal.
pub const NRI_JOURNAL_FILE: &str = "nri-journal.json";

/// Registers with the runtime (`--nri`).
fn nri_connect(
    args: &Args,
    cfg: &Config,
    host: &mut LinuxHost,
    state_dir: &std::path::Path,
) -> Result<placer_nri::plugin::Plugin> {
    use placer_nri::placement::{Facts, State};
    if !args.nri_socket.exists() {
        anyhow::bail!(
            "--nri: no NRI socket at {} (enable NRI in containerd 1.7+ or CRI-O 1.26+, or pass --nri-socket; docs/kubernetes.md)",
            args.nri_socket.display()
        );
    }
    let topo = placer_core::host::Host::topology(host).context("--nri: reading the topology")?;
    let kubelet = kubelet_state(&args.state.root)?;
    let facts = Facts::new(&topo, cfg, kubelet);
    let opts = placer_nri::plugin::Options {
        socket: args.nri_socket.clone(),
        index: args.nri_index,
        private_dir: state_dir.to_path_buf(),
        timeout: Duration::from_secs(10),
        journal: Some(state_dir.join(NRI_JOURNAL_FILE)),
    };
    placer_nri::plugin::Plugin::connect(&opts, State::new(cfg.kubernetes.clone(), facts))
        .context("--nri")
}

/// The effective config: file or default, with the command-line overrides, validated.
pub fn effective_config(args: &Args) -> Result<Config> {
    let mut cfg = args.state.config()?;
    if let Some(i) = args.interval {
        cfg.interval_ms = u64::try_from(i.as_millis()).context("--interval too large")?;
        cfg.validate().context("with --interval")?;
    }
    Ok(cfg)
}

/// One cycle as printed by --dry-run/--once --json.
#[derive(Serialize)]
struct PrintedCycle<'a> {
    cycle: u64,
    dry_run: bool,
    plan: &'a placer_core::Plan,
    reports: &'a [placer_core::plan::ActionReport],
    lease_breaks: &'a [placer_core::engine::LeaseBreak],
    managed: usize,
    error: &'a Option<String>,
}

fn print_cycle(r: &CycleReport, dry_run: bool, json: bool) {
    if json {
        let p = PrintedCycle {
            cycle: r.cycle,
            dry_run,
            plan: &r.plan,
            reports: &r.reports,
            lease_breaks: &r.lease_breaks,
            managed: r.managed,
            error: &r.error,
        };
        outln!("{}", serde_json::to_string(&p).unwrap_or_default());
        return;
    }
    if let Some(e) = &r.error {
        outln!("cycle {}: error: {e}", r.cycle);
        return;
    }
    if r.reports.is_empty() {
        outln!("cycle {}: no actions", r.cycle);
    }
    for a in &r.reports {
        outln!(
            "cycle {}: [{}] {} {}: {} => {}",
            r.cycle,
            a.planned.policy,
            a.planned.action.kind(),
            describe_target(&a.planned.action),
            a.planned.reason,
            outcome_text(&a.outcome)
        );
    }
    for n in &r.plan.notes {
        let who = n.proc.map_or(String::new(), |k| format!("pid {} ", k.pid));
        outln!("cycle {}: [{}] note {who}{}", r.cycle, n.policy, n.text);
    }
}

pub fn outcome_text(o: &Outcome) -> String {
    match o {
        Outcome::Done => "done".into(),
        Outcome::Skipped(s) => format!("skipped ({s})"),
        Outcome::Transient(s) => format!("transient ({s})"),
        Outcome::Permanent(s) => format!("permanent ({s})"),
    }
}

/// "pid 12 (iperf3) -> 1" and similar.
pub fn describe_target(a: &placer_core::Action) -> String {
    use placer_core::Action as A;
    match a {
        A::PinProcess { proc, comm, cpus } => format!("pid {} ({comm}) -> CPUs {cpus}", proc.pid),
        A::RestoreProcess { proc, comm } => format!("pid {} ({comm})", proc.pid),
        A::PinThread { proc, tid, cpus } => format!("pid {} tid {tid} -> CPUs {cpus}", proc.pid),
        A::SetIrqAffinity { irq, cpus } => format!("IRQ {irq} -> CPUs {cpus}"),
        A::RestoreIrq { irq } => format!("IRQ {irq}"),
        A::SetRps { dev, queue, cpus } => format!("{dev}/{queue} -> CPUs {cpus}"),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn log_restores(
    what: &str,
    res: &[(
        placer_linux::journal::Entry,
        placer_linux::actuator::Restored,
    )],
) {
    use placer_linux::actuator::Restored;
    for (e, r) in res {
        match r {
            Restored::Restored => info!(
                "{what}: restored {} ({}) to {}",
                e.knob, e.label, e.previous
            ),
            Restored::Gone(w) => info!("{what}: {} ({}): {w}", e.knob, e.label),
            Restored::ChangedElsewhere(w) => warn!("{what}: {} ({}): {w}", e.knob, e.label),
            Restored::Failed(w) => error!(
                "{what}: could not restore {} ({}): {w}; it stays in the journal",
                e.knob, e.label
            ),
        }
    }
}

fn log_cycle(r: &CycleReport, last_error: &mut Option<String>) {
    for (s, why) in &r.missing_sources {
        info!("source {s} unavailable: {why}");
    }
    for (p, why) in &r.disabled {
        warn!("policy {p} disabled: {why}");
    }
    if r.error != *last_error {
        match &r.error {
            Some(e) => warn!("cycle {}: {e} (doing nothing this cycle)", r.cycle),
            None if last_error.is_some() => info!("cycle {}: working again", r.cycle),
            None => {}
        }
        *last_error = r.error.clone();
    }
    // A plan judged together is one verdict for people: one line naming its processes.
    for g in placer_core::verdict::same_judgement(&r.verdicts) {
        let v = g[0];
        let line = format!(
            "verdict on [{}] {}: {}{}",
            v.policy,
            placer_core::verdict::who(&g),
            v.judgement.why,
            v.backoff_intervals.map_or(String::new(), |n| format!(
                "; restored, not moved again for {n} interval(s)"
            ))
        );
        if v.judgement.kind == placer_core::verdict::VerdictKind::Undone {
            warn!("{line}");
        } else {
            info!("{line}");
        }
    }
    for b in &r.lease_breaks {
        warn!(
            "pid {} ({}) was pinned to {} by {} but is on {} now: someone else changed it; placer stops managing it",
            b.proc.pid, b.comm, b.pinned, b.policy, b.observed
        );
    }
    for a in &r.reports {
        let line = format!(
            "[{}] {} {}: {} => {}",
            a.planned.policy,
            a.planned.action.kind(),
            describe_target(&a.planned.action),
            a.planned.reason,
            outcome_text(&a.outcome)
        );
        match a.outcome {
            Outcome::Done | Outcome::Skipped(_) => info!("{line}"),
            Outcome::Transient(_) | Outcome::Permanent(_) => warn!("{line}"),
        }
    }
    for n in &r.plan.notes {
        debug!(pid = n.proc.map(|k| k.pid), policy = %n.policy, "{}", n.text);
    }
}

pub fn run(args: Args) -> Result<()> {
    if args.print_default_config {
        out!(
            "{}",
            if args.commented_out {
                placer_core::config_doc::shipped_config_toml()
            } else {
                placer_core::config_doc::commented_default_toml()
            }
        );
        return Ok(());
    }
    let cfg = effective_config(&args)?;
    let state_dir = PathBuf::from(&cfg.state_dir);
    let interval = Duration::from_millis(cfg.interval_ms);
    let dry_run = args.dry_run;
    if !dry_run && !placer_linux::sys::is_root() {
        warn!(
            "not running as root: placer can change only this user's processes; IRQ, RPS, qdisc, \
             cpufreq and other users' knobs need root (run with sudo, or --dry-run to only print plans)"
        );
    }

    // One daemon per state dir; a dry run touches nothing, not even the lock.
    let _lock = if dry_run {
        None
    } else {
        Some(state::StateLock::acquire(&state_dir)?)
    };
    let mut host = LinuxHost::new(&args.state.root, &state_dir);
    host.sampler.set_kernel_events(cfg.kernel_events);
    if !dry_run {
        let journal = host
            .actuator
            .journal()
            .with_context(|| format!("opening the journal in {}", state_dir.display()))?;
        if !journal.is_empty() {
            info!(
                "journal {} lists {} knob(s) left by a previous daemon: restoring them",
                journal.path().display(),
                journal.entries().len()
            );
            let res = host.actuator.restore_all()?;
            log_restores("start", &res);
        }
    }
    let nri = if args.nri {
        Some(nri_connect(&args, &cfg, &mut host, &state_dir)?)
    } else {
        None
    };
    let mut engine = Engine::from_config(cfg.clone(), std::process::id());
    let names: Vec<(&str, bool)> = engine.policies().iter().map(|p| (p.0, true)).collect();
    signals::install().context("installing signal handlers")?;

    let metrics = metrics::Metrics::new(&names, dry_run);
    if cfg.metrics.enabled && !args.once {
        match metrics::serve(&cfg.metrics.listen, metrics.clone()) {
            Ok(addr) => info!("metrics on http://{addr}/metrics"),
            Err(e) => warn!(
                "metrics: cannot listen on {}: {e}; running without",
                cfg.metrics.listen
            ),
        }
    }
    info!(
        "placer daemon pid {} started: interval {} ms, policies [{}], state dir {}{}",
        std::process::id(),
        cfg.interval_ms,
        cfg.policies
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", "),
        state_dir.display(),
        if dry_run {
            ", dry run (changes nothing)"
        } else {
            ""
        }
    );

    let mut decisions = state::Decisions {
        daemon_pid: std::process::id(),
        interval_ms: cfg.interval_ms,
        dry_run,
        ..Default::default()
    };
    let mut last_error = None;
    let mut kubelet_error: Option<String> = None;
    let mut exit_err = None;
    let mut recorder = match &args.record {
        Some(path) => {
            let mut header = placer_linux::record::header(
                &args.state.root,
                cfg.interval_ms,
                placer_core::host::Host::sources(&mut host),
            );
            header.config = Some(cfg.clone());
            let f = std::fs::File::create(path)
                .with_context(|| format!("creating {}", path.display()))?;
            Some(placer_linux::record::RecordWriter::new(
                std::io::BufWriter::new(f),
                &header,
            )?)
        }
        None => None,
    };
    loop {
        let t0 = Instant::now();
        if let Some(p) = &nri {
            // The kubelet's pins change as pods come and go: read them here, off the
            // runtime's request path.
            match kubelet_state(&args.state.root) {
                Ok(k) => {
                    p.with_state(|s| s.facts.kubelet = k);
                    kubelet_error = None;
                }
                Err(e) => {
                    // Said once per distinct error, not every cycle.
                    let e = format!("{e:#}");
                    if kubelet_error.as_ref() != Some(&e) {
                        warn!("{e}; keeping the last state read");
                        kubelet_error = Some(e);
                    }
                }
            }
        }
        let mut nri_host;
        let base: &mut dyn placer_core::host::Host = match &nri {
            Some(plugin) => {
                nri_host = placer_nri::host::NriHost {
                    inner: &mut host,
                    plugin,
                    root: &args.state.root,
                };
                &mut nri_host
            }
            None => &mut host,
        };
        let r = match recorder.as_mut() {
            Some(w) => {
                let mut write = |s: &placer_core::Sample| {
                    if let Err(e) = w.write(s) {
                        warn!("--record: {e}");
                    }
                };
                let mut tee = placer_core::replay::RecordingHost {
                    inner: base,
                    record: &mut write,
                };
                engine.step(&mut tee, dry_run)
            }
            None => engine.step(base, dry_run),
        };
        let cycle_s = t0.elapsed().as_secs_f64();
        log_cycle(&r, &mut last_error);
        for (p, _) in &r.disabled {
            metrics.set_policy(p, false);
        }
        metrics.record(&r, cycle_s);
        if (dry_run || args.once) && !r.warming_up {
            print_cycle(&r, dry_run, args.json);
        }
        if !dry_run && r.observation.is_some() {
            decisions.policies = engine
                .policies()
                .into_iter()
                .map(|(n, d)| (n.to_string(), d.map(str::to_string)))
                .collect();
            let now_s = r.time_ns as f64 / 1e9;
            decisions.update(&r, &engine.held(), now_s);
            if let Some(p) = &nri {
                decisions.containers = p.explain();
                metrics.set_containers(&decisions.containers, cfg.kubernetes.metrics_labels);
            }
            if let Err(e) = decisions.write(&state_dir) {
                debug!("writing decisions: {e:#}");
            }
        }
        if args.once && !r.warming_up {
            if let Some(e) = &r.error {
                exit_err = Some(anyhow::anyhow!("{e}"));
            }
            break;
        }
        signals::sleep_until(t0 + interval);
        if nri.as_ref().is_some_and(|p| p.is_gone()) {
            exit_err = Some(anyhow::anyhow!(
                "--nri: the container runtime went away (shutdown or closed connection)"
            ));
            warn!("NRI: the container runtime went away: restoring and exiting");
            break;
        }
        if signals::stop_requested() {
            info!(
                "{} received: restoring every journaled knob",
                signals::which().unwrap_or("stop")
            );
            break;
        }
    }
    if let Some(p) = &nri {
        if !p.is_gone() {
            match p.restore_all() {
                Ok(n) => info!("NRI: {n} container cpuset(s) put back through the runtime"),
                Err(e) => warn!("NRI: putting container cpusets back: {e}"),
            }
        }
    }
    if !dry_run && !args.once {
        let res = host.actuator.restore_all()?;
        log_restores("stop", &res);
        let _ = std::fs::remove_file(state_dir.join(state::DECISIONS_FILE));
        let failed = res
            .iter()
            .filter(|(_, r)| matches!(r, placer_linux::actuator::Restored::Failed(_)))
            .count();
        if failed > 0 {
            anyhow::bail!("{failed} knob(s) could not be restored; they stay in the journal (`placer restore` retries)");
        }
        info!("placer daemon stopped; {} knob(s) restored", res.len());
    }
    match exit_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
