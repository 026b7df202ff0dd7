//! [`Agent`]: the daemon's life, on any host.
//!
//! ```text
//! start ──> [restore what a dead agent left] ──> step ──> sinks ──> wait ──┐
//!                                                  ^                        │
//!                                                  └──── not stopped ───────┘
//! stopped (signal, `--once` done, the container runtime gone) ──> stop: restore
//! ```
//!
//! Start: take the state dir's lock (one daemon per state dir; a dry run takes nothing),
//! and restore every knob the host's journal lists (restore, not re-adopt: the policies
//! re-pin within an interval or two what still deserves it, and nothing stays changed on the
//! word of a dead process). Each step is one `Engine::step` (sample, observe, plan, apply,
//! learn), its report fed to the sinks: the log, the metrics, `decisions.json` (for
//! `placer explain`), the verdict log (for `placer report`) and the recorder (`--record`).
//! Stop: put back, through the runtime, the container cpusets placer changed (`--nri`), then
//! every journaled knob of the host.
//!
//! `once`: one plan (two samples one interval apart), applied and left journaled (undo with
//! `placer restore`); `dry_run`: plans only, nothing changed (no journal, no state files).
//!
//! What the config decides (the engine, the interval, what the metrics list) sits in
//! [`Configured`], one value, so that applying a new config to a running agent replaces it.

use crate::metrics::Metrics;
use crate::state::{self, Decisions, StateLock};
use crate::{AgentError, Result};
use placer_core::config::Config;
use placer_core::engine::{CycleReport, Engine};
use placer_core::host::Host;
use placer_core::journal::{Entry, Restored};
use placer_core::learned::{Learned, LearnedFile};
use placer_core::plan::Outcome;
use placer_core::policies::PolicyKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tracing::{debug, error, info, warn};

/// The journal of container cpusets placer changed after creation (`--nri`), in the state
/// dir beside the host's journal.
pub const NRI_JOURNAL_FILE: &str = "nri-journal.json";

/// How to run an agent (what the daemon's arguments say, typed).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Filesystem root of /proc and /sys (the kubelet's state, containers' cgroups, the
    /// recording's header are read under it).
    pub root: PathBuf,
    /// The state dir (lock, `decisions.json`, the NRI journal); `None`: no files (a
    /// simulated or replayed host keeps its journal itself).
    pub state_dir: Option<PathBuf>,
    /// Plans only: nothing changed, nothing journaled, no lock, no state files.
    pub dry_run: bool,
    /// One plan, applied and left journaled; no restore at stop, no metrics server.
    pub once: bool,
    /// Record every sample the engine decides on to this file.
    pub record: Option<PathBuf>,
    /// Also an NRI plugin of the container runtime (Kubernetes node agent).
    pub nri: Option<NriOptions>,
    /// Where the config came from ("config /etc/placer/placer.toml", "the built-in
    /// config"), named in the start line.
    pub config_source: String,
}

#[derive(Debug, Clone)]
pub struct NriOptions {
    pub socket: PathBuf,
    pub index: u32,
}

/// What the config decides, in one place.
pub struct Configured {
    pub config: Config,
    pub engine: Engine,
    pub interval: Duration,
}

impl Configured {
    fn new(config: Config) -> Configured {
        Configured {
            interval: Duration::from_millis(config.interval_ms),
            engine: Engine::from_config(config.clone(), std::process::id()),
            config,
        }
    }
}

/// What a config reload did ([`Agent::reload`]).
#[derive(Debug, Default)]
pub struct Reloaded {
    /// Policies the new config no longer lists, each with its knobs put back.
    pub switched_off: Vec<(PolicyKind, Vec<(Entry, Restored)>)>,
    /// Policies it lists that were not running.
    pub switched_on: Vec<PolicyKind>,
    /// Settings that take effect only at a restart: they keep their running values.
    pub needs_restart: Vec<&'static str>,
}

impl Reloaded {
    /// Says what a reload of the config from `source` did: the policies switched off (with
    /// their knobs put back) and on, the settings kept until a restart.
    pub fn log(&self, source: &str) {
        for (policy, restored) in &self.switched_off {
            tracing::info!(
                "SIGHUP: policy {policy} switched off: {} of its knob(s) put back",
                restored.len()
            );
        }
        for policy in &self.switched_on {
            tracing::info!("SIGHUP: policy {policy} switched on");
        }
        if !self.needs_restart.is_empty() {
            tracing::warn!(
                "SIGHUP: {} changed: kept as running until the next restart",
                self.needs_restart.join(", ")
            );
        }
        tracing::info!("SIGHUP: {source} applied; nothing else put back");
    }
}

/// One cycle as `placer daemon --dry-run`/`--once --json` print it: one JSON line.
pub fn cycle_json(r: &CycleReport, dry_run: bool) -> String {
    #[derive(serde::Serialize)]
    struct PrintedCycle<'a> {
        cycle: u64,
        dry_run: bool,
        plan: &'a placer_core::Plan,
        reports: &'a [placer_core::plan::ActionReport],
        lease_breaks: &'a [placer_core::engine::LeaseBreak],
        managed: usize,
        error: &'a Option<String>,
    }
    serde_json::to_string(&PrintedCycle {
        cycle: r.cycle,
        dry_run,
        plan: &r.plan,
        reports: &r.reports,
        lease_breaks: &r.lease_breaks,
        managed: r.managed,
        error: &r.error,
    })
    .unwrap_or_default()
}

/// Why the loop ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// `once`: its plan was applied; the cycle's error, if it had one.
    Once(Option<String>),
    /// The caller asked to stop (a signal).
    Stopped,
    /// `--nri`: the container runtime went away (shutdown or closed connection).
    RuntimeGone,
}

/// Where each cycle's report goes besides the caller.
struct Sinks {
    metrics: Metrics,
    /// With a state dir and not a dry run.
    decisions: Option<(Decisions, PathBuf)>,
    /// The state dir whose verdict log gets every verdict (as `decisions`: with a state dir,
    /// not a dry run). The agent is the one writer of verdicts: the log line, the metrics,
    /// `decisions.json` and this log are all fed from the cycle's report, on every host.
    verdict_log: Option<PathBuf>,
    recorder: Option<placer_core::record::RecordWriter<std::io::BufWriter<std::fs::File>>>,
    /// The log says a persistent error once, not every cycle.
    last_error: Option<String>,
    kubelet_error: Option<String>,
    /// The processes whose reason for staying where they are the log has said, per policy
    /// (once per process: a first run tells why a busy process was not moved).
    said_why: std::collections::HashSet<(placer_core::sample::ProcKey, PolicyKind)>,
    /// What the policies learned, kept in the state dir (`learned.json`).
    learned: Option<LearnedStore>,
}

/// The state dir's record of what the policies learned about this machine
/// ([`placer_core::learned`]): read at start, given to the engine once the machine's
/// topology is known (before any plan: the first step only samples), written again
/// whenever it changes (not in a dry run, which writes nothing).
struct LearnedStore {
    dir: PathBuf,
    /// The file as read at start, until the topology is known.
    pending: Option<std::result::Result<LearnedFile, String>>,
    /// What the file holds now (what was given back, or last written).
    written: Vec<Learned>,
    write: bool,
}

impl LearnedStore {
    fn open(dir: &Path, write: bool) -> LearnedStore {
        let pending = match placer_linux::state_dir::StateDir::open(dir) {
            Ok(d) => match d.read(state::LEARNED_FILE) {
                Ok(text) => Some(LearnedFile::parse(&text).map_err(|e| e.to_string())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => Some(Err(e.to_string())),
            },
            // No state dir yet (a first start creates it): nothing learned.
            Err(_) => None,
        };
        LearnedStore {
            dir: dir.to_path_buf(),
            pending,
            written: Vec::new(),
            write,
        }
    }

    /// After a step: the record given back once the topology is known, then kept current.
    fn after_step(&mut self, engine: &mut Engine) {
        if engine.topology().is_none() {
            return;
        }
        let name = self.dir.join(state::LEARNED_FILE);
        let given = match self.pending.take() {
            Some(Ok(file)) => {
                let saved = file.saved_unix_s;
                let topo = engine.topology().expect("checked above");
                file.for_machine(topo)
                    .map(|l| (l, saved))
                    .map_err(|e| e.to_string())
            }
            Some(Err(e)) => Err(e),
            None => Ok((Vec::new(), 0.0)),
        };
        match given {
            Ok((learned, saved)) if !learned.is_empty() => {
                let age_s = (unix_now_s() - saved).max(0.0);
                info!(
                    "{}: what a previous daemon learned here {} ago, given back: {}",
                    name.display(),
                    placer_core::units::format_duration(Duration::from_secs_f64(age_s)),
                    learned
                        .iter()
                        .map(Learned::describe)
                        .collect::<Vec<_>>()
                        .join("; ")
                );
                engine.relearn(&learned);
                self.written = learned;
            }
            Ok(_) => {}
            Err(e) => warn!("{}: {e}: not used; measuring again", name.display()),
        }
        if !self.write {
            return;
        }
        let now = engine.learned();
        if now.is_empty() || now == self.written {
            return;
        }
        let topo = engine.topology().expect("checked above");
        let text = LearnedFile::new(topo, unix_now_s(), now.clone()).to_json();
        if let Err(e) = placer_linux::state_dir::StateDir::open(&self.dir)
            .and_then(|d| d.write_replace(state::LEARNED_FILE, text.as_bytes()))
        {
            // Said once: a later change tries again, quietly.
            if self.written.is_empty() {
                warn!("writing {}: {e}", name.display());
            }
        }
        self.written = now;
    }
}

fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub struct Agent<H: Host> {
    host: H,
    opts: Options,
    configured: Configured,
    sinks: Sinks,
    nri: Option<placer_nri::plugin::Plugin>,
    _lock: Option<StateLock>,
}

impl<H: Host> Agent<H> {
    /// Starts: the lock, the restore of what a dead agent left (logged), the NRI plugin,
    /// the metrics server (when the config enables it and not `once`), the recorder.
    pub fn start(mut host: H, config: Config, opts: Options) -> Result<Agent<H>> {
        let dry_run = opts.dry_run;
        // One daemon per state dir; a dry run touches nothing, not even the lock.
        let lock = match &opts.state_dir {
            Some(dir) if !dry_run => Some(StateLock::acquire(dir)?),
            _ => None,
        };
        if !dry_run {
            let journal = host.journal()?;
            if !journal.is_empty() {
                info!(
                    "journal {} lists {} knob(s) left by a previous daemon: restoring them",
                    journal_name(opts.state_dir.as_deref()),
                    journal.len()
                );
                let res = host.restore_all()?;
                log_restores("start", &res);
            }
        }
        let nri = match &opts.nri {
            Some(n) => Some(nri_connect(n, &opts, &config, &mut host)?),
            None => None,
        };
        let configured = Configured::new(config);
        let cfg = &configured.config;
        let names: Vec<(PolicyKind, bool)> = configured
            .engine
            .policies()
            .iter()
            .map(|p| (p.0, true))
            .collect();
        let metrics = Metrics::new(&names, dry_run).with_process(&opts.root, std::process::id());
        if cfg.metrics.enabled && !opts.once && !cfg.metrics.unix_socket.is_empty() {
            let path = Path::new(&cfg.metrics.unix_socket);
            match crate::metrics::serve_unix(path, metrics.clone()) {
                Ok(()) => info!("metrics on unix:{} (mode 0600)", path.display()),
                Err(e) => warn!(
                    "metrics: cannot listen on {}: {e}; running without",
                    path.display()
                ),
            }
        } else if cfg.metrics.enabled && !opts.once {
            match crate::metrics::serve(&cfg.metrics.listen, metrics.clone()) {
                Ok(addr) => info!("metrics on http://{addr}/metrics"),
                Err(e) => warn!(
                    "metrics: cannot listen on {}: {e}; running without",
                    cfg.metrics.listen
                ),
            }
        }
        info!(
            "placer daemon pid {} started with {}: interval {} ms, policies [{}], state dir {}{}; \
             it manages {}",
            std::process::id(),
            if opts.config_source.is_empty() {
                "its config"
            } else {
                &opts.config_source
            },
            cfg.interval_ms,
            cfg.policies
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(", "),
            cfg.state_dir,
            if dry_run {
                ", dry run (changes nothing)"
            } else {
                ""
            },
            cfg.scope.describe()
        );
        let decisions = match &opts.state_dir {
            Some(dir) if !dry_run => Some((
                Decisions {
                    daemon_pid: std::process::id(),
                    interval_ms: cfg.interval_ms,
                    dry_run,
                    ..Default::default()
                },
                dir.clone(),
            )),
            _ => None,
        };
        let recorder = match &opts.record {
            Some(path) => {
                let mut header =
                    placer_linux::record::header(&opts.root, cfg.interval_ms, host.sources());
                header.config = Some(cfg.clone());
                let f = std::fs::File::create(path)
                    .map_err(|e| AgentError::io(format!("creating {}", path.display()), e))?;
                Some(
                    placer_core::record::RecordWriter::new(std::io::BufWriter::new(f), &header)
                        .map_err(|e| AgentError::io(format!("writing {}", path.display()), e))?,
                )
            }
            None => None,
        };
        let learned = opts
            .state_dir
            .as_deref()
            .map(|d| LearnedStore::open(d, !dry_run));
        Ok(Agent {
            host,
            opts,
            configured,
            sinks: Sinks {
                metrics,
                verdict_log: decisions.as_ref().map(|(_, dir)| dir.clone()),
                decisions,
                recorder,
                last_error: None,
                kubelet_error: None,
                said_why: Default::default(),
                learned,
            },
            nri,
            _lock: lock,
        })
    }

    pub fn host(&self) -> &H {
        &self.host
    }

    pub fn host_mut(&mut self) -> &mut H {
        &mut self.host
    }

    pub fn configured(&self) -> &Configured {
        &self.configured
    }

    /// Applies a new (already parsed and validated) config to the running agent without
    /// putting back what stays valid: policies still listed keep what they hold and run on
    /// with their new settings; the knobs of a policy no longer listed are put back (said in
    /// the log); a newly listed one starts. The state dir, the metrics endpoint,
    /// `kernel_events` and, with `--nri`, `[kubernetes]` are fixed at start: a change to
    /// them is kept for the next restart and said.
    pub fn reload(&mut self, mut config: Config) -> Result<Reloaded> {
        let old = &self.configured.config;
        let mut out = Reloaded::default();
        if config.state_dir != old.state_dir {
            config.state_dir = old.state_dir.clone();
            out.needs_restart.push("state_dir");
        }
        if config.metrics != old.metrics {
            config.metrics = old.metrics.clone();
            out.needs_restart.push("[metrics]");
        }
        if config.kernel_events != old.kernel_events {
            config.kernel_events = old.kernel_events;
            out.needs_restart.push("kernel_events");
        }
        if self.nri.is_some() && config.kubernetes != old.kubernetes {
            config.kubernetes = old.kubernetes.clone();
            out.needs_restart.push("[kubernetes]");
        }
        let before: Vec<PolicyKind> = self
            .configured
            .engine
            .policies()
            .iter()
            .map(|p| p.0)
            .collect();
        let removed = self.configured.engine.reconfigure(config.clone());
        for (kind, held) in removed {
            let restored = if self.opts.dry_run {
                Vec::new()
            } else {
                self.host
                    .restore_where(&|e| placer_core::journal::set_by(e, kind, &held))?
            };
            self.sinks.metrics.set_policy(kind, false);
            out.switched_off.push((kind, restored));
        }
        for (kind, _) in self.configured.engine.policies() {
            if !before.contains(&kind) {
                self.sinks.metrics.set_policy(kind, true);
                out.switched_on.push(kind);
            }
        }
        self.configured.interval = Duration::from_millis(config.interval_ms);
        self.configured.config = config;
        if let Some((decisions, _)) = self.sinks.decisions.as_mut() {
            decisions.interval_ms = self.configured.config.interval_ms;
        }
        Ok(out)
    }

    /// Leaves without restoring, as a killed daemon does (tests play a crash with it; the
    /// lock goes with the agent).
    pub fn into_host(self) -> H {
        self.host
    }

    /// One cycle: the engine's step through the NRI wrapping and the recorder, its report
    /// fed to the log, the metrics and `decisions.json`.
    pub fn step(&mut self) -> CycleReport {
        let t0 = Instant::now();
        let dry_run = self.opts.dry_run;
        if let Some(p) = &self.nri {
            // The kubelet's pins change as pods come and go: read them here, off the
            // runtime's request path.
            match kubelet_state(&self.opts.root) {
                Ok(k) => {
                    p.with_state(|s| s.facts.kubelet = k);
                    self.sinks.kubelet_error = None;
                }
                Err(e) => {
                    // Said once per distinct error, not every cycle.
                    let e = e.to_string();
                    if self.sinks.kubelet_error.as_ref() != Some(&e) {
                        warn!("{e}; keeping the last state read");
                        self.sinks.kubelet_error = Some(e);
                    }
                }
            }
        }
        let engine = &mut self.configured.engine;
        let mut nri_host;
        let base: &mut dyn Host = match &self.nri {
            Some(plugin) => {
                nri_host = placer_nri::host::NriHost {
                    inner: &mut self.host,
                    plugin,
                    root: &self.opts.root,
                };
                &mut nri_host
            }
            None => &mut self.host,
        };
        let r = match self.sinks.recorder.as_mut() {
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
        if let Some(l) = self.sinks.learned.as_mut() {
            l.after_step(engine);
        }
        let cycle_s = t0.elapsed().as_secs_f64();
        log_cycle(&r, &mut self.sinks.last_error);
        log_why_not_moved(&r, &mut self.sinks.said_why);
        for (p, _) in &r.disabled {
            self.sinks.metrics.set_policy(*p, false);
        }
        self.sinks.metrics.record(&r, cycle_s);
        if let Some(dir) = &self.sinks.verdict_log {
            append_verdicts(dir, &r.verdicts);
        }
        if let Some((decisions, dir)) = self.sinks.decisions.as_mut() {
            if r.observation.is_some() {
                let engine = &self.configured.engine;
                decisions.policies = engine
                    .policies()
                    .into_iter()
                    .map(|(k, d)| (k, d.map(str::to_string)))
                    .collect();
                let now_s = r.time_ns as f64 / 1e9;
                decisions.update(&r, &engine.held(), now_s);
                if let Some(p) = &self.nri {
                    decisions.containers = p.explain();
                    self.sinks.metrics.set_containers(
                        &decisions.containers,
                        self.configured.config.kubernetes.metrics_labels,
                    );
                }
                if let Err(e) = decisions.write(dir) {
                    debug!("writing decisions: {e}");
                }
            }
        }
        r
    }

    /// Steps every interval until `once` is done, the runtime is gone, or `wait` (which
    /// sleeps until the deadline it is given) says stop. `each` sees every report.
    pub fn run(
        &mut self,
        mut each: impl FnMut(&mut Self, &CycleReport),
        mut wait: impl FnMut(Instant) -> bool,
    ) -> Ended {
        loop {
            let t0 = Instant::now();
            let r = self.step();
            each(self, &r);
            if self.opts.once && !r.warming_up {
                return Ended::Once(r.error);
            }
            let stop = wait(t0 + self.configured.interval);
            if self.nri.as_ref().is_some_and(|p| p.is_gone()) {
                warn!("NRI: the container runtime went away: restoring and exiting");
                return Ended::RuntimeGone;
            }
            if stop {
                return Ended::Stopped;
            }
        }
    }

    /// Stops: the container cpusets back through the runtime (`--nri`), then every
    /// journaled knob of the host (not after `once`, whose changes stay journaled, nor in a
    /// dry run, which changed nothing). Returns the host's restores; an error when some
    /// could not be restored (they stay in the journal). The host comes back with them.
    pub fn stop(mut self) -> Result<(H, Vec<(Entry, Restored)>)> {
        if let Some(p) = &self.nri {
            if !p.is_gone() {
                match p.restore_all() {
                    Ok(n) => info!("NRI: {n} container cpuset(s) put back through the runtime"),
                    Err(e) => warn!("NRI: putting container cpusets back: {e}"),
                }
            }
        }
        if self.opts.dry_run || self.opts.once {
            return Ok((self.host, Vec::new()));
        }
        let res = self.host.restore_all()?;
        log_restores("stop", &res);
        if let Some((_, dir)) = &self.sinks.decisions {
            if let Ok(d) = placer_linux::state_dir::StateDir::open(dir) {
                let _ = d.remove(state::DECISIONS_FILE);
            }
        }
        let failed = res
            .iter()
            .filter(|(_, r)| matches!(r, Restored::Failed(_)))
            .count();
        if failed > 0 {
            return Err(AgentError::NotRestored { failed });
        }
        info!("placer daemon stopped; {} knob(s) restored", res.len());
        Ok((self.host, res))
    }
}

fn journal_name(state_dir: Option<&Path>) -> String {
    match state_dir {
        Some(d) => d
            .join(placer_linux::journal::JOURNAL_FILE)
            .display()
            .to_string(),
        None => "of the host".into(),
    }
}

/// The kubelet's CPU manager state under `root` (`none` when the file is absent: no static
/// policy); read every cycle, since its pins change as pods come and go.
fn kubelet_state(root: &Path) -> Result<placer_core::k8s::CpuManager> {
    let path = root.join("var/lib/kubelet/cpu_manager_state");
    // A regular file, bounded: the kubelet's file is small, and a FIFO put in its place
    // must not stop the cycle.
    let text = placer_linux::sys::read_regular_file(&path, placer_linux::attr::MAX_ATTR_BYTES * 16)
        .and_then(|b| String::from_utf8(b).map_err(std::io::Error::other));
    match text {
        Ok(text) => {
            placer_core::k8s::parse_cpu_manager_state(&text).map_err(|e| AgentError::Parse {
                path: path.clone(),
                message: e.to_string(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(placer_core::k8s::CpuManager::None)
        }
        Err(e) => Err(AgentError::io(format!("reading {}", path.display()), e)),
    }
}

/// Registers with the runtime (`--nri`).
fn nri_connect<H: Host>(
    nri: &NriOptions,
    opts: &Options,
    cfg: &Config,
    host: &mut H,
) -> Result<placer_nri::plugin::Plugin> {
    use placer_nri::placement::{Facts, State};
    if !nri.socket.exists() {
        return Err(AgentError::Nri(format!(
            "no NRI socket at {} (enable NRI in containerd 1.7+ or CRI-O 1.26+, or pass --nri-socket; docs/kubernetes.md)",
            nri.socket.display()
        )));
    }
    let state_dir = opts
        .state_dir
        .clone()
        .ok_or_else(|| AgentError::Nri("needs a state dir".into()))?;
    let topo = host
        .topology()
        .map_err(|e| AgentError::Nri(format!("reading the topology: {e}")))?;
    let kubelet = kubelet_state(&opts.root)?;
    let facts = Facts::new(&topo, cfg, kubelet);
    // Every container placed rewrites the journal there, in the pod's path.
    if placer_linux::sys::on_memory_fs(&state_dir) == Some(false) {
        tracing::warn!(
            "NRI: state dir {} is not on a tmpfs: each container placed renames nri-journal.json there, which on a disk costs up to milliseconds in the pod's creation (docs/kubernetes.md, 'Cost at creation'); /run/placer is the default",
            state_dir.display()
        );
    }
    let plugin_opts = placer_nri::plugin::Options {
        socket: nri.socket.clone(),
        index: nri.index,
        timeout: Duration::from_secs(10),
        journal: Some(state_dir.join(NRI_JOURNAL_FILE)),
        root: opts.root.clone(),
    };
    placer_nri::plugin::Plugin::connect(&plugin_opts, State::new(cfg.kubernetes.clone(), facts))
        .map_err(|e| AgentError::Nri(e.to_string()))
}

/// One action of a cycle as the log and `--dry-run` say it:
/// `[policy] kind target: reason => outcome`.
pub fn action_line(a: &placer_core::plan::ActionReport) -> String {
    format!(
        "[{}] {} {}: {} => {}",
        a.planned.policy,
        a.planned.action.kind(),
        describe_target(&a.planned.action),
        a.planned.reason,
        outcome_text(&a.outcome)
    )
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
        A::RestoreProcess { proc, comm, .. } => format!("pid {} ({comm})", proc.pid),
        A::PinThread { proc, tid, cpus } => format!("pid {} tid {tid} -> CPUs {cpus}", proc.pid),
        A::SetIrqAffinity { irq, cpus } => format!("IRQ {irq} -> CPUs {cpus}"),
        A::RestoreIrq { irq } => format!("IRQ {irq}"),
        A::SetRps { dev, queue, cpus } => format!("{dev}/{queue} -> CPUs {cpus}"),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn log_restores(what: &str, res: &[(Entry, Restored)]) {
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

/// Says once per process and policy why a process the policy looked at stays where it is
/// ("lo has no known receive CPU", "outside the configured scope"); the notes that change
/// every cycle (under the threshold, not pinned yet) stay at debug level in [`log_cycle`].
fn log_why_not_moved(
    r: &CycleReport,
    said: &mut std::collections::HashSet<(placer_core::sample::ProcKey, PolicyKind)>,
) {
    if let Some(o) = &r.observation {
        let alive: std::collections::HashSet<_> = o.procs.iter().map(|p| p.key()).collect();
        said.retain(|(k, _)| alive.contains(k));
    }
    for n in &r.plan.notes {
        let Some(k) = n.proc else { continue };
        let passing =
            n.text.starts_with("not communication-intensive") || n.text.contains("not pinned yet");
        if passing || !said.insert((k, n.policy)) {
            continue;
        }
        let comm = r
            .observation
            .as_ref()
            .and_then(|o| o.procs.iter().find(|p| p.key() == k))
            .map_or(String::new(), |p| format!(" ({})", p.comm));
        info!(
            "[{}] pid {}{comm} not moved: {} (said once per process)",
            n.policy, k.pid, n.text
        );
    }
}

/// Appends each verdict, with the wall-clock time, to the state dir's verdict log (the
/// typed history `placer report` reads; the journal's entries go on restore).
fn append_verdicts(dir: &Path, verdicts: &[placer_core::verdict::Verdict]) {
    if verdicts.is_empty() {
        return;
    }
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for v in verdicts {
        let rec = placer_linux::verdict_log::VerdictRecord {
            unix_ms,
            verdict: v.clone(),
        };
        if let Err(e) = placer_linux::verdict_log::append(dir, &rec) {
            warn!("verdict log: {e}");
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
    for (p, what) in &r.lacking {
        info!("policy {p} runs without: {what}");
    }
    match r.coexistence.as_deref() {
        Some([]) => info!("no other agent manages IRQ affinity or cpufreq any more"),
        Some(lines) => lines
            .iter()
            .for_each(|l| info!("next to another agent: {l}")),
        None => {}
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
        let line = action_line(a);
        match a.outcome {
            Outcome::Done | Outcome::Skipped(_) => info!("{line}"),
            Outcome::Transient(_) | Outcome::Permanent(_) => warn!("{line}"),
        }
    }
    for n in &r.plan.notes {
        debug!(pid = n.proc.map(|k| k.pid), policy = %n.policy, "{}", n.text);
    }
}
