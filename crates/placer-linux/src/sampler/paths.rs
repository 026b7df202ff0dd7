//! The CPU collector attached only while it is the cheaper way to know what ran (issue 46).
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
//! after [`crate::activity::KernelActivity`] grows its map).

use crate::activity::ActivitySource;
use crate::bpf::RunTimeStats;
use placer_core::event_path::{
    events_cost_ns_per_s, ChooserConfig, Costs, EventPath, Move, PathChooser,
};

/// ns per context switch of the two programs until measured, and where the kernel cannot
/// count their run time (before Linux 5.8): a conservative figure from the issue's
/// measurements on this 2-vCPU VM (178-250 ns with the statistics on).
pub const DEFAULT_NS_PER_SWITCH: f64 = 250.0;
/// Samples between two calibrations while attached (one interval each).
pub const CALIBRATE_EVERY: u64 = 64;
/// Weight of the newest sample in the sampler's own costs (a moving average: one slow
/// sample on a loaded machine does not decide).
const NEWEST: f64 = 0.25;

/// What the last evaluation knew (for `placer top`, the metrics and tests).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CpuPathStatus {
    /// The collector is attached now.
    pub attached: bool,
    pub switches_per_s: Option<f64>,
    pub ns_per_switch: Option<f64>,
    /// Whether `ns_per_switch` was measured (else the default).
    pub measured: bool,
    pub costs: Costs,
}

/// A calibration window: the statistics held, and where the counts stood at its start.
struct Calibration {
    _stats: RunTimeStats,
    run_ns: u64,
    ctxt: u64,
}

fn ewma(old: Option<f64>, new: f64) -> f64 {
    match old {
        Some(o) => o + NEWEST * (new - o),
        None => new,
    }
}

pub(super) struct CpuPath {
    chooser: PathChooser,
    /// `ctxt` and the sample's time at the last sample.
    last: Option<(u64, u64)>,
    switches_per_s: Option<f64>,
    interval_s: Option<f64>,
    ns_per_switch: Option<f64>,
    measured: bool,
    calibration: Option<Calibration>,
    since_calibration: u64,
    /// The sampler's CPU ns per process on samples that read every process.
    full_ns_per_proc: Option<f64>,
    /// The sampler's CPU ns per sample on the events path.
    events_sample_ns: Option<f64>,
    procs: usize,
    last_costs: Costs,
    /// A move decided after the last sample, carried out at the start of the next (so
    /// that the sample after an attach is the one that reads every process: its drain
    /// would hold only the instants since the attach).
    pending: Option<Move>,
}

/// One sample, as this module needs it.
pub(super) struct SampleCost {
    pub ctxt: Option<u64>,
    pub time_ns: u64,
    /// The sampling thread's CPU ns deciding and reading the process set.
    pub procs_ns: u64,
    /// Every process's files were read (no drain trusted, or the first sample).
    pub full: bool,
    pub procs: usize,
}

impl CpuPath {
    pub(super) fn new(cfg: ChooserConfig) -> CpuPath {
        CpuPath {
            chooser: PathChooser::new(cfg, EventPath::Events),
            last: None,
            switches_per_s: None,
            interval_s: None,
            ns_per_switch: None,
            measured: false,
            calibration: None,
            since_calibration: CALIBRATE_EVERY,
            full_ns_per_proc: None,
            events_sample_ns: None,
            procs: 0,
            last_costs: Costs::default(),
            pending: None,
        }
    }

    pub(super) fn status(&self, act: Option<&(dyn ActivitySource + 'static)>) -> CpuPathStatus {
        CpuPathStatus {
            attached: act.and_then(|a| a.cpu_attached()).unwrap_or(false),
            switches_per_s: self.switches_per_s,
            ns_per_switch: self.ns_per_switch,
            measured: self.measured,
            costs: self.last_costs,
        }
    }

    /// Before a sample: the move the last one decided, carried out. `true` when it moved
    /// (the sources' text changes).
    pub(super) fn before(&mut self, act: &mut (dyn ActivitySource + 'static)) -> bool {
        match self.pending.take() {
            Some(m) => self.carry_out(act, m),
            None => false,
        }
    }

    /// After a sample: the figures taken in, a calibration finished or begun, and a move
    /// decided when the chooser says so (carried out by [`CpuPath::before`]).
    pub(super) fn after(&mut self, act: &mut (dyn ActivitySource + 'static), s: SampleCost) {
        let Some(attached) = act.cpu_attached() else {
            return;
        };
        if let (Some((c0, t0)), Some(c1)) = (self.last, s.ctxt) {
            let dt_s = s.time_ns.saturating_sub(t0) as f64 / 1e9;
            if dt_s > 0.0 {
                self.interval_s = Some(dt_s);
                self.switches_per_s = Some(c1.saturating_sub(c0) as f64 / dt_s);
            }
        }
        self.last = s.ctxt.map(|c| (c, s.time_ns));
        self.procs = s.procs;
        if s.full && s.procs > 0 {
            self.full_ns_per_proc = Some(ewma(
                self.full_ns_per_proc,
                s.procs_ns as f64 / s.procs as f64,
            ));
        } else if !s.full && attached {
            self.events_sample_ns = Some(ewma(self.events_sample_ns, s.procs_ns as f64));
        }
        if attached {
            self.calibrate(act, s.ctxt);
        } else {
            self.calibration = None;
        }
        let costs = self.costs();
        self.last_costs = costs;
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

    fn costs(&self) -> Costs {
        let per_s = |ns: Option<f64>| Some(ns? / self.interval_s.filter(|i| *i > 0.0)?);
        Costs {
            events_ns_per_s: events_cost_ns_per_s(
                self.switches_per_s,
                self.ns_per_switch,
                per_s(self.events_sample_ns),
            ),
            polling_ns_per_s: per_s(self.full_ns_per_proc.map(|n| n * self.procs as f64)),
        }
    }

    /// Ends a calibration window (its ns per switch taken) or begins one when due.
    fn calibrate(&mut self, act: &mut (dyn ActivitySource + 'static), ctxt: Option<u64>) {
        self.since_calibration += 1;
        if let Some(cal) = self.calibration.take() {
            let now = act.cpu_run_time_ns();
            if let (Some(run_ns), Some(c)) = (now, ctxt) {
                let switches = c.saturating_sub(cal.ctxt);
                if switches > 0 && run_ns >= cal.run_ns {
                    self.ns_per_switch = Some((run_ns - cal.run_ns) as f64 / switches as f64);
                    self.measured = true;
                }
            }
            self.since_calibration = 0;
            return; // the statistics go off here (dropped)
        }
        if self.since_calibration < CALIBRATE_EVERY {
            return;
        }
        let (Some(ctxt), Ok(stats)) = (ctxt, RunTimeStats::enable()) else {
            // No statistics (before Linux 5.8): the default stands; tried again later.
            self.ns_per_switch.get_or_insert(DEFAULT_NS_PER_SWITCH);
            self.since_calibration = 0;
            return;
        };
        match act.cpu_run_time_ns() {
            Some(run_ns) => {
                self.calibration = Some(Calibration {
                    _stats: stats,
                    run_ns,
                    ctxt,
                })
            }
            None => {
                self.ns_per_switch.get_or_insert(DEFAULT_NS_PER_SWITCH);
                self.since_calibration = 0;
            }
        }
    }

    fn carry_out(&mut self, act: &mut (dyn ActivitySource + 'static), m: Move) -> bool {
        let pct = |ns_per_s: f64| ns_per_s / 1e7;
        let (sw, ns) = (
            self.switches_per_s.unwrap_or(0.0),
            self.ns_per_switch.unwrap_or(0.0),
        );
        let on = m.to == EventPath::Events;
        match act.set_cpu_attached(on) {
            Ok(()) if on => {
                // A fresh collector: measured again over its first interval.
                self.since_calibration = CALIBRATE_EVERY;
                tracing::info!(
                    "eBPF CPU collector attached: {sw:.0} switches/s x {ns:.0} ns = {:.3}% of a CPU with its sampling, reading every /proc/PID/stat costs {:.3}%",
                    pct(m.events_ns_per_s),
                    pct(m.polling_ns_per_s)
                );
                true
            }
            Ok(()) => {
                self.calibration = None;
                tracing::info!(
                    "eBPF CPU collector detached: {sw:.0} switches/s x {ns:.0} ns = {:.3}% of a CPU with its sampling, reading every /proc/PID/stat costs {:.3}%",
                    pct(m.events_ns_per_s),
                    pct(m.polling_ns_per_s)
                );
                true
            }
            Err(why) => {
                tracing::warn!("eBPF CPU collector: attaching it again failed: {why}");
                self.chooser.reset(EventPath::Polling);
                false
            }
        }
    }
}
