//! Each per-event hook attached only while it is the cheaper way to the observation
//! (issue 46): the CPU collector (what ran) and the socket marks (which sockets moved).
//!
//! The collector's programs run at every context switch and timer of every CPU: their cost
//! is the machine's rate of switches (`/proc/stat`'s `ctxt`, read each sample anyway) times
//! their ns per switch (the kernel's `run_time_ns` of the two programs over the switches of
//! a calibration window: one sample interval in which [`RunTimeStats`] is held, at the
//! first sample after each attach and every [`CALIBRATE_EVERY`] samples; the statistics
//! add their own clock reads to each run, so they are not kept on), plus the sampler's own
//! time on that path. Without it, each sample reads every process's `stat` (or
//! `schedstat`, rule 8): that path's cost is the sampler's own CPU time per process on a
//! sample that read them all, times the processes, per interval. Both are the sampling
//! thread's CPU time (user and kernel) and the programs' time in the kernel: what placer
//! costs the machine, not a model. [`placer_core::event_path::PathChooser`] decides from
//! them, with its hysteresis; this module measures and carries the move out.
//!
//! Correctness across a move is the activity source's: a detached collector drains
//! `ran: None` (every process read), and one attached again drains `ran: None` once, so
//! the sample after an attach reads every process and only later drains are trusted (as
//! after [`crate::activity::KernelActivity`] grows its map). A move is decided after a
//! sample and carried out at the start of the next, so that this first sample is the one
//! whose drain would hold only the instants since the attach.
//!
//! The socket marks the same way ([`HookKind::SocketMarks`]): their cost is the
//! namespace's TCP segments received per second (`InSegs`, `/proc/net/snmp`) times
//! `placer_tcpmove`'s ns per segment (calibrated as above; [`DEFAULT_NS_PER_SEGMENT`]
//! until then), plus the sampler's own time reading sockets with them (the moved ones
//! looked up, a dump now and then); without them each sample with a segment moved dumps
//! every socket, at the cost of the last dumps measured. Detached, the next sample dumps
//! (no segment count to compare with yet); attached again, it dumps too (the state count
//! has no base yet: [`super::plan::socket_read`]).

use crate::activity::ActivitySource;
use crate::bpf::RunTimeStats;
use placer_core::event_path::{
    events_cost_ns_per_s, ChooserConfig, Costs, EventPath, Move, PathChooser,
};

/// ns per context switch of the two programs until measured, and where the kernel cannot
/// count their run time (before Linux 5.8): a conservative figure from the issue's
/// measurements on this 2-vCPU VM (178-250 ns with the statistics on).
pub const DEFAULT_NS_PER_SWITCH: f64 = 250.0;
/// ns per TCP segment received of `placer_tcpmove` until measured: the figure on
/// this VM (356-387 ns with the statistics on).
pub const DEFAULT_NS_PER_SEGMENT: f64 = 380.0;
/// Samples between two calibrations while attached (one interval each).
pub const CALIBRATE_EVERY: u64 = 64;
/// Weight of the newest sample in the sampler's own costs (a moving average: one slow
/// sample on a loaded machine does not decide).
const NEWEST: f64 = 0.25;

/// Which hook a [`HookPath`] attaches and detaches (how it logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    /// The eBPF CPU collector (`placer_cpu`, `placer_tick`), per context switch.
    CpuCollector,
    /// The socket marks (`placer_tcpmove`, `placer_tcpstate`), per segment received.
    SocketMarks,
}

impl HookKind {
    fn default_ns(self) -> f64 {
        match self {
            HookKind::CpuCollector => DEFAULT_NS_PER_SWITCH,
            HookKind::SocketMarks => DEFAULT_NS_PER_SEGMENT,
        }
    }
    fn what(self) -> (&'static str, &'static str, &'static str) {
        match self {
            HookKind::CpuCollector => (
                "eBPF CPU collector",
                "switches/s",
                "reading every /proc/PID/stat",
            ),
            HookKind::SocketMarks => ("TCP socket marks", "segments/s", "dumping every socket"),
        }
    }
}

/// What a hook can be asked: the sampler's side of it.
pub(super) trait Hook {
    /// Attached now; `None`: there is none to attach.
    fn attached(&self) -> Option<bool>;
    fn set_attached(&mut self, on: bool) -> Result<(), String>;
    /// Its programs' cumulative time in the kernel (ns, counted while statistics are on):
    /// the program run at each of the events counted, and the others (the collector's
    /// tick program, whose runs follow the timers, not the switches; the marks' state
    /// counter), whose time is taken per second.
    fn run_time_ns(&self) -> Option<(u64, u64)>;
}

/// What the last evaluation knew (for `placer top`, the metrics and tests).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PathStatus {
    /// The hook is attached now.
    pub attached: bool,
    /// The machine's events the hook runs at, per second.
    pub events_per_s: Option<f64>,
    pub ns_per_event: Option<f64>,
    /// Whether `ns_per_event` was measured (else the default).
    pub measured: bool,
    pub costs: Costs,
}

/// A calibration window: the statistics held, and where the counts stood at its start.
struct Calibration {
    _stats: RunTimeStats,
    run_ns: (u64, u64),
    events: u64,
    time_ns: u64,
}

fn ewma(old: Option<f64>, new: f64) -> f64 {
    match old {
        Some(o) => o + NEWEST * (new - o),
        None => new,
    }
}

/// One sample, as a [`HookPath`] needs it.
pub(super) struct Observed {
    /// The machine's count of the hook's events (context switches, segments received).
    pub events: Option<u64>,
    pub time_ns: u64,
    /// The sampler's CPU ns on this sample, when it was one on the events path.
    pub events_sample_ns: Option<u64>,
    /// What a sample on the polling path costs now, ns (measured by the caller).
    pub polling_sample_ns: Option<f64>,
}

/// One hook's costs measured and its moves decided.
pub(super) struct HookPath {
    kind: HookKind,
    chooser: PathChooser,
    /// The event count and the sample's time at the last sample.
    last: Option<(u64, u64)>,
    events_per_s: Option<f64>,
    interval_s: Option<f64>,
    ns_per_event: Option<f64>,
    /// The other programs' time per second of wall time (calibrated with it).
    other_ns_per_s: f64,
    measured: bool,
    calibration: Option<Calibration>,
    since_calibration: u64,
    events_sample_ns: Option<f64>,
    polling_sample_ns: Option<f64>,
    last_costs: Costs,
    /// A move decided after the last sample, carried out at the start of the next (so
    /// that the sample after an attach is the one that reads everything: its drain would
    /// hold only the instants since the attach).
    pending: Option<Move>,
}

impl HookPath {
    pub(super) fn new(kind: HookKind, cfg: ChooserConfig) -> HookPath {
        HookPath {
            kind,
            chooser: PathChooser::new(cfg, EventPath::Events),
            last: None,
            events_per_s: None,
            interval_s: None,
            ns_per_event: None,
            other_ns_per_s: 0.0,
            measured: false,
            calibration: None,
            since_calibration: CALIBRATE_EVERY,
            events_sample_ns: None,
            polling_sample_ns: None,
            last_costs: Costs::default(),
            pending: None,
        }
    }

    pub(super) fn status(&self, attached: bool) -> PathStatus {
        PathStatus {
            attached,
            events_per_s: self.events_per_s,
            ns_per_event: self.ns_per_event,
            measured: self.measured,
            costs: self.last_costs,
        }
    }

    /// Before a sample: the move the last one decided, carried out. `true` when it moved.
    pub(super) fn before(&mut self, hook: &mut dyn Hook) -> bool {
        match self.pending.take() {
            Some(m) => self.carry_out(hook, m),
            None => false,
        }
    }

    /// After a sample: the figures taken in, a calibration finished or begun, and a move
    /// decided when the chooser says so (carried out by [`HookPath::before`]).
    pub(super) fn after(&mut self, hook: &mut dyn Hook, s: Observed) {
        let Some(attached) = hook.attached() else {
            return;
        };
        if let (Some((c0, t0)), Some(c1)) = (self.last, s.events) {
            let dt_s = s.time_ns.saturating_sub(t0) as f64 / 1e9;
            if dt_s > 0.0 {
                self.interval_s = Some(dt_s);
                self.events_per_s = Some(c1.saturating_sub(c0) as f64 / dt_s);
            }
        }
        self.last = s.events.map(|c| (c, s.time_ns));
        if let (Some(ns), true) = (s.events_sample_ns, attached) {
            self.events_sample_ns = Some(ewma(self.events_sample_ns, ns as f64));
        }
        if s.polling_sample_ns.is_some() {
            self.polling_sample_ns = s.polling_sample_ns;
        }
        if attached {
            self.calibrate(hook, s.events, s.time_ns);
        } else {
            self.calibration = None;
        }
        let per_s = |ns: Option<f64>| Some(ns? / self.interval_s.filter(|i| *i > 0.0)?);
        let costs = Costs {
            events_ns_per_s: events_cost_ns_per_s(
                self.events_per_s,
                self.ns_per_event,
                per_s(self.events_sample_ns).map(|n| n + self.other_ns_per_s),
            ),
            polling_ns_per_s: per_s(self.polling_sample_ns),
        };
        self.last_costs = costs;
        tracing::debug!(hook = ?self.kind, attached, events_per_s = ?self.events_per_s, ns_per_event = ?self.ns_per_event, ?costs, "event path");
        // The actual state wins over the chooser's memory (an attach that failed).
        let path = match attached {
            true => EventPath::Events,
            false => EventPath::Polling,
        };
        if self.chooser.path() != path {
            self.chooser.reset(path);
        }
        self.pending = self.chooser.evaluate(costs);
    }

    /// Ends a calibration window (its ns per event taken) or begins one when due.
    fn calibrate(&mut self, hook: &mut dyn Hook, events: Option<u64>, time_ns: u64) {
        self.since_calibration += 1;
        if let Some(cal) = self.calibration.take() {
            if let (Some((ev_ns, other_ns)), Some(c)) = (hook.run_time_ns(), events) {
                let n = c.saturating_sub(cal.events);
                let dt_s = time_ns.saturating_sub(cal.time_ns) as f64 / 1e9;
                let (ev, other) = (
                    ev_ns.checked_sub(cal.run_ns.0),
                    other_ns.checked_sub(cal.run_ns.1),
                );
                tracing::debug!(hook = ?self.kind, ?ev, ?other, events = n, dt_s, "calibration");
                if let (Some(ev), Some(other), true, true) = (ev, other, n > 0, dt_s > 0.0) {
                    self.ns_per_event = Some(ev as f64 / n as f64);
                    self.other_ns_per_s = other as f64 / dt_s;
                    self.measured = true;
                }
            }
            self.ns_per_event.get_or_insert(self.kind.default_ns());
            self.since_calibration = 0;
            return; // the statistics go off here (dropped)
        }
        if self.since_calibration < CALIBRATE_EVERY {
            return;
        }
        let started = match (events, RunTimeStats::enable()) {
            (Some(events), Ok(stats)) => hook.run_time_ns().map(|run_ns| Calibration {
                _stats: stats,
                run_ns,
                events,
                time_ns,
            }),
            _ => None,
        };
        if started.is_none() {
            // No statistics (before Linux 5.8): the default stands; tried again later.
            self.ns_per_event.get_or_insert(self.kind.default_ns());
            self.since_calibration = 0;
        }
        self.calibration = started;
    }

    fn carry_out(&mut self, hook: &mut dyn Hook, m: Move) -> bool {
        let pct = |ns_per_s: f64| ns_per_s / 1e7;
        let (name, unit, read) = self.kind.what();
        let (rate, ns) = (
            self.events_per_s.unwrap_or(0.0),
            self.ns_per_event.unwrap_or(0.0),
        );
        let on = m.to == EventPath::Events;
        match hook.set_attached(on) {
            Ok(()) => {
                if on {
                    // A fresh hook: measured again over its first interval.
                    self.since_calibration = CALIBRATE_EVERY;
                } else {
                    self.calibration = None;
                }
                tracing::info!(
                    "{name} {}: {rate:.0} {unit} x {ns:.0} ns = {:.3}% of a CPU with its sampling, {read} costs {:.3}%",
                    if on { "attached" } else { "detached" },
                    pct(m.events_ns_per_s),
                    pct(m.polling_ns_per_s)
                );
                true
            }
            Err(why) => {
                tracing::warn!("{name}: attaching it again failed: {why}");
                self.chooser.reset(EventPath::Polling);
                false
            }
        }
    }
}

/// The CPU collector as a [`Hook`]: the activity source's.
struct CpuHook<'a>(&'a mut (dyn ActivitySource + 'static));

impl Hook for CpuHook<'_> {
    fn attached(&self) -> Option<bool> {
        self.0.cpu_attached()
    }
    fn set_attached(&mut self, on: bool) -> Result<(), String> {
        self.0.set_cpu_attached(on)
    }
    fn run_time_ns(&self) -> Option<(u64, u64)> {
        self.0.cpu_run_time_ns()
    }
}

/// One sample, as [`CpuPath`] needs it.
pub(super) struct SampleCost {
    pub ctxt: Option<u64>,
    pub time_ns: u64,
    /// The sampling thread's CPU ns deciding and reading the process set.
    pub procs_ns: u64,
    /// Every process's files were read (no drain trusted, or the first sample).
    pub full: bool,
    pub procs: usize,
}

/// The CPU collector's path: the polling side's cost is per process (a full read's
/// ns per process, times the processes now). While attached, it is measured by a probe:
/// two samples whose drains are let go (so they read every process), the second of which
/// costs what a sample on the polling path costs (rule 8's `schedstat` figures are there
/// from the first); at the third sample and every [`CALIBRATE_EVERY`] after. Until then,
/// the first sample's full read stands in (dearer than the polling path's: it reads every
/// file of every process).
pub(super) struct CpuPath {
    hook: HookPath,
    full_ns_per_proc: Option<f64>,
    /// `full_ns_per_proc` is a polling sample's (a probe's, or the polling path's own).
    polling_measured: bool,
    since_probe: u64,
    /// Probe samples still to come (2, then 1).
    probing: u8,
}

impl CpuPath {
    pub(super) fn new(cfg: ChooserConfig) -> CpuPath {
        CpuPath {
            hook: HookPath::new(HookKind::CpuCollector, cfg),
            full_ns_per_proc: None,
            polling_measured: false,
            since_probe: 0,
            probing: 0,
        }
    }

    pub(super) fn status(&self, act: Option<&(dyn ActivitySource + 'static)>) -> PathStatus {
        self.hook
            .status(act.and_then(|a| a.cpu_attached()).unwrap_or(false))
    }

    pub(super) fn before(&mut self, act: &mut (dyn ActivitySource + 'static)) -> bool {
        let moved = self.hook.before(&mut CpuHook(&mut *act));
        let due = self.since_probe >= CALIBRATE_EVERY
            || (!self.polling_measured && self.since_probe >= 2);
        if !moved && self.probing == 0 && due && act.cpu_attached() == Some(true) {
            act.discard_next_drains(2);
            self.probing = 2;
            self.since_probe = 0;
        }
        moved
    }

    pub(super) fn after(&mut self, act: &mut (dyn ActivitySource + 'static), s: SampleCost) {
        self.since_probe += 1;
        let attached = act.cpu_attached() == Some(true);
        let probing = self.probing;
        self.probing = probing.saturating_sub(1);
        if s.full && s.procs > 0 {
            let per = s.procs_ns as f64 / s.procs as f64;
            let take = match (attached, probing) {
                // The probe's first: rule 8 has no `schedstat` figures to compare yet.
                (true, 2) => None,
                (true, 1) => Some(true),
                (false, _) => Some(true),
                // A first sample, or the one after an attach: until a polling sample.
                (true, _) => (!self.polling_measured).then_some(false),
            };
            if let Some(polling) = take {
                let prev = self
                    .full_ns_per_proc
                    .filter(|_| self.polling_measured || !polling);
                self.full_ns_per_proc = Some(ewma(prev, per));
                self.polling_measured |= polling;
            }
        }
        let obs = Observed {
            events: s.ctxt,
            time_ns: s.time_ns,
            events_sample_ns: (!s.full).then_some(s.procs_ns),
            polling_sample_ns: self.full_ns_per_proc.map(|n| n * s.procs as f64),
        };
        self.hook.after(&mut CpuHook(act), obs);
    }
}
