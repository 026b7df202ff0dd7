//! Policy `net-affinity` (seed 002, docs/seeds.md, "Dynamic
//! Scheduling of Network Processes for Multi-Core Systems", Jang, Jin, Kim, KIISE 2009):
//! communication-intensive processes run on the CPU that does their NIC's receive
//! processing, or on a CPU sharing cache with it when that CPU is busy, and get their
//! original affinity back when they go quiet.
//!
//! The paper measured that a receiver on the CPU taking the NIC interrupt, or on one
//! sharing its L2, costs far less CPU than one elsewhere (up to 27 % more without shared
//! cache), and implemented in Linux 2.6.28: (1) detect communication-intensive processes,
//! (2) find the CPU(s) the NIC's interrupt affinity points to, (3) if that CPU's load is
//! under a threshold run the process there, else on a CPU sharing cache with it, (4) keep
//! re-evaluating intensity, IRQ affinity and loads. Intensity is kept per connection in an
//! LRU list of last activity; a timer drops connections idle longer than a threshold and
//! restores the process's original affinity.
//!
//! Algorithm, every interval (pure: same topology, observation and state, same plan):
//! 1. Activity: each connection (process, socket inode) that moved at least
//!    `active_flow_bytes_per_s` is moved to the tail of the LRU with the current time.
//!    Connections idle longer than `idle_timeout_ms` fall off its head.
//! 2. Intensity: a process is intensive in an interval when its receive rate (send +
//!    receive with `count_sent`) exceeds `intensive_bytes_per_s`: seed 002 is about receive
//!    processing, so a send-only process is no candidate. It becomes a candidate after
//!    `pin_after_intervals` consecutive intensive intervals (hysteresis against bursts).
//! 3. Target: the NIC its flows use (`Topology::nic_for_addr` on each flow's local address;
//!    with flows on several NICs, the one carrying the most bytes this interval); that
//!    NIC's receive CPUs (`Nic::rx_cpus`: IRQ affinity of its queues, or RPS CPUs for
//!    software queues such as veth). The least-loaded receive CPU, its load counted
//!    *without* the process itself (and with the processes this plan already moved there),
//!    is the target if under `cpu_load_threshold`; else, with `when_busy = cache_neighbour`,
//!    the least-loaded CPU sharing the lowest shared cache level with it
//!    (`Topology::cache_neighbours`) that is under the threshold; else the process is left
//!    alone (with a note saying why). Where those neighbours share only a cache over the
//!    whole package (one LLC, private L1/L2: this VM, the 16-core device) the pin is all of
//!    them, every CPU of the package but the receive CPU: a one-CPU pin there buys no
//!    shared cache and takes the scheduler's freedom (the 16-core device, 2026-11-28:
//!    4 streams 0.944x, 17 nginx workers' p99 15x). A CPU's load never reads below its softirq + IRQ time
//!    (taking the process's own share off cannot make a CPU busy with receive processing
//!    look idle). A pinned process stays on its cache neighbour unless another is lighter
//!    by more than `move_margin`. `rule = "paper"` applies the literal rule instead (no
//!    softirq floor, no second check on the neighbour, no margin).
//!
//!    With `rule = "checked"` (the default) **on, beside or leave alone is chosen by
//!    measurement** (issue 45; `choose_class`): the policy records, per placement class
//!    (on the receive CPU, beside it), each pin's outcome on this machine: log(after /
//!    before) of the pinned process's own CPU seconds per received byte, the median over
//!    the `MEASURE_INTERVALS` intervals after its pin against the median over its last
//!    intensive intervals before (`ClassCosts`). A class whose record says it costs more
//!    than leaving the process alone (95% t interval above 1) is not used; of classes
//!    that pay, the cheaper; else a class still to be measured (the record is made by
//!    trying it; `cpu_load_threshold = 1.0` keeps "always the receive CPU"). Without a
//!    record, "on" is assumed only where seed 002's machine shape holds
//!    (`NetAffinity::prior`): the receive CPU spends under half its time in softirq and
//!    IRQ, and shares a cache smaller than its package (an L2 pair, SMT siblings, a die's
//!    L3) with a CPU the process may use; with one LLC over the package (this VM, the
//!    16-core device) the first pins go beside it. Where RFS steers a flow's receive
//!    processing to the CPU its reader last ran on, the receive CPU follows the reader:
//!    pinning it "beside" moves the softirq there too, so on and beside become one class
//!    and the record measures only the pin against no pin; the topology does not read
//!    RFS yet, so the policy does not tell.
//! 4. Restore: a held process none of whose connections remains in the LRU (all idle longer
//!    than the timeout), and held at least `min_hold_ms`, gets its original affinity back.
//! 5. Re-pin: a held process whose target differs from where it is pinned for
//!    `repin_after_intervals` consecutive intervals (IRQ affinity moved, its CPU got busy),
//!    and held at least `min_hold_ms`, is pinned to the new target.
//!
//! Invariants (each tested below; a test's name starts with the ones it checks):
//! - N1: never pins a process outside the scope (kernel threads, placer's own pid, `scope`);
//! - N2: never touches a process released (lease broken / permanent failure) or held by an
//!   earlier policy (`PolicyState::taken`);
//! - N3: never pins a process to CPUs outside the affinity it had before placer first pinned
//!   it (its cpuset or a user's choice), nor one already confined to exactly that CPU;
//! - N4: a pinned CPU is a receive CPU of the process's NIC, or shares a cache with one;
//! - N5: a pin is restored only after every connection has been idle for the timeout;
//! - N6: at most one action per process per interval;
//! - N7: never pins in a class whose measured record here says it costs more CPU per byte
//!   than leaving the process alone;
//! - N8: without a record, pins on the receive CPU only where it is not busy with softirq
//!   (below `ON_SOFTIRQ_MAX`) and shares a cache smaller than its package with a CPU the
//!   process may use; otherwise beside it;
//! - N9: of classes whose records say they pay, the cheaper.

use crate::cpuset::CpuSet;
use crate::observation::{Observation, ProcObs};
use crate::plan::{Action, Plan};
use crate::policy::{Policy, PolicyState};
use crate::sample::{ProcKey, SampleRequest, SourceKind};
use crate::scope::Scope;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

pub const NAME: &str = KIND.name();
/// This policy's identity in plans, notes, verdicts and back-off keys.
const KIND: crate::policies::PolicyKind = crate::policies::PolicyKind::NetAffinity;

/// What to do when the NIC's receive CPU is too busy to take the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WhenBusy {
    /// Pin to the least-loaded CPU sharing the lowest cache level with it (the paper).
    #[default]
    CacheNeighbour,
    /// Leave the process where the kernel puts it.
    Leave,
}

/// Which placement rule to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The paper's rule with capacity checks: the cache neighbour must be under the
    /// threshold too, load counts softirq time and this plan's placements, and a pinned
    /// process moves between equivalent targets only beyond `move_margin`.
    #[default]
    Checked,
    /// Seed 002's literal rule, for reproducing the paper: the receive CPU when under the
    /// threshold, else the least-loaded cache neighbour without a second load check.
    Paper,
}

/// Configuration of `net-affinity` (`[net_affinity]` in the TOML; docs/config.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetAffinityConfig {
    /// A process is communication-intensive in an interval when its send + receive rate
    /// (bytes acknowledged + bytes received over all its TCP connections) exceeds this,
    /// bytes per second. Default 1 MiB/s.
    pub intensive_bytes_per_s: u64,
    /// A connection counts as active in an interval (moves to the tail of the LRU) when it
    /// moved at least this many bytes per second; lower than the intensity threshold, so a
    /// pinned process stays pinned while it still talks, but heartbeats do not keep it.
    /// Default 1 KiB/s.
    pub active_flow_bytes_per_s: u64,
    /// A pinned process whose connections have all been idle longer than this gets its
    /// original affinity back, milliseconds. Default 5000.
    pub idle_timeout_ms: u64,
    /// The receive CPU takes the process only if its load, counted without the process
    /// itself, is below this busy fraction (0 < x <= 1). Default 0.8. 1.0 turns the check
    /// off: always the receive CPU (its softirq work for a fast stream can saturate it),
    /// with no measured choice between on and beside it.
    pub cpu_load_threshold: f64,
    /// When the receive CPU is too busy: `cache_neighbour` (least-loaded CPU sharing cache
    /// with it, the paper) or `leave` (do not pin). Default `cache_neighbour`.
    pub when_busy: WhenBusy,
    /// Consecutive intensive intervals before a process is pinned (>= 1). Default 1: the
    /// paper reacts at the first send/receive; the timeout and minimum hold damp flapping.
    pub pin_after_intervals: u32,
    /// Minimum time a pin is kept before it is restored or moved, milliseconds. Default 2000.
    pub min_hold_ms: u64,
    /// Consecutive intervals a new target must persist before a pinned process is moved
    /// (>= 1). Default 3.
    pub repin_after_intervals: u32,
    /// Count sent bytes toward intensity too. Default false: seed 002 is about receive
    /// processing, so a send-only process is no candidate for the receive CPU.
    pub count_sent: bool,
    /// A pinned process moves to another target of the same kind (receive CPU or cache
    /// neighbour) only when that target's load is lower by more than this busy fraction
    /// (0..1). Default 0.2.
    pub move_margin: f64,
    /// `checked` (default) or `paper`.
    pub rule: Rule,
}

impl Default for NetAffinityConfig {
    fn default() -> Self {
        NetAffinityConfig {
            intensive_bytes_per_s: 1 << 20,
            active_flow_bytes_per_s: 1 << 10,
            idle_timeout_ms: 5000,
            cpu_load_threshold: 0.8,
            when_busy: WhenBusy::CacheNeighbour,
            pin_after_intervals: 1,
            min_hold_ms: 2000,
            repin_after_intervals: 3,
            count_sent: false,
            move_margin: 0.2,
            rule: Rule::Checked,
        }
    }
}

impl NetAffinityConfig {
    /// Checks values; Err((field, message)).
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, m: String| Err((f.to_string(), m));
        if self.intensive_bytes_per_s == 0 {
            return bad("intensive_bytes_per_s", "must be > 0".into());
        }
        if self.active_flow_bytes_per_s > self.intensive_bytes_per_s {
            return bad(
                "active_flow_bytes_per_s",
                format!(
                    "{} exceeds intensive_bytes_per_s ({}): an intensive process would have no active connection",
                    self.active_flow_bytes_per_s, self.intensive_bytes_per_s
                ),
            );
        }
        if self.idle_timeout_ms == 0 {
            return bad("idle_timeout_ms", "must be > 0".into());
        }
        if !(self.cpu_load_threshold > 0.0 && self.cpu_load_threshold <= 1.0) {
            return bad(
                "cpu_load_threshold",
                format!("{} is not in (0, 1]", self.cpu_load_threshold),
            );
        }
        const DAY_MS: u64 = 24 * 3600 * 1000;
        if self.idle_timeout_ms > DAY_MS || self.min_hold_ms > DAY_MS {
            return bad(
                "idle_timeout_ms",
                "idle_timeout and min_hold are at most a day".into(),
            );
        }
        if !(0.0..1.0).contains(&self.move_margin) {
            return bad(
                "move_margin",
                format!("{} is not in [0, 1)", self.move_margin),
            );
        }
        if !(1..=10_000).contains(&self.pin_after_intervals) {
            return bad("pin_after_intervals", "must be within 1..=10000".into());
        }
        if !(1..=10_000).contains(&self.repin_after_intervals) {
            return bad("repin_after_intervals", "must be within 1..=10000".into());
        }
        Ok(())
    }
}

/// The policy. Holds its configuration and who it must never touch.
pub struct NetAffinity {
    pub cfg: NetAffinityConfig,
    pub scope: Scope,
    pub self_pid: u32,
}

impl NetAffinity {
    pub fn new(cfg: NetAffinityConfig, scope: Scope, self_pid: u32) -> Self {
        NetAffinity {
            cfg,
            scope,
            self_pid,
        }
    }
}

type FlowId = (ProcKey, u64);

/// The paper's per-connection list of last activity: touched connections move to the
/// tail; expiry walks from the head.
#[derive(Debug, Default)]
struct Lru {
    next_seq: u64,
    /// seq -> connection, oldest first.
    order: BTreeMap<u64, FlowId>,
    /// connection -> (seq, last activity, s).
    recs: BTreeMap<FlowId, (u64, f64)>,
}

impl Lru {
    fn touch(&mut self, id: FlowId, now_s: f64) {
        if let Some((seq, _)) = self.recs.get(&id) {
            self.order.remove(seq);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert(seq, id);
        self.recs.insert(id, (seq, now_s));
    }

    fn remove(&mut self, id: &FlowId) {
        if let Some((seq, _)) = self.recs.remove(id) {
            self.order.remove(&seq);
        }
    }

    /// Drops connections idle longer than `timeout_s` (from the head).
    fn expire(&mut self, now_s: f64, timeout_s: f64) {
        while let Some((&seq, &id)) = self.order.iter().next() {
            let last = self.recs.get(&id).map_or(f64::NEG_INFINITY, |r| r.1);
            if now_s - last <= timeout_s {
                break;
            }
            self.order.remove(&seq);
            self.recs.remove(&id);
        }
    }

    fn of(&self, k: ProcKey) -> impl Iterator<Item = (&FlowId, &(u64, f64))> {
        self.recs.range((k, 0)..=(k, u64::MAX))
    }

    fn count(&self, k: ProcKey) -> usize {
        self.of(k).count()
    }

    /// Most recent activity of any of the process's connections.
    fn last_active(&self, k: ProcKey) -> Option<f64> {
        self.of(k).map(|(_, r)| r.1).reduce(f64::max)
    }
}

#[derive(Debug, Default)]
struct Track {
    /// Consecutive intensive intervals.
    streak: u32,
    /// A target different from the pinned CPUs, and for how many intervals in a row.
    pending: Option<(CpuSet, u32)>,
    /// Affinity before placer first pinned it: targets stay inside it.
    original: Option<CpuSet>,
    /// Its own CPU seconds per byte in its last intensive intervals while not pinned.
    before: VecDeque<f64>,
    /// The same since its current pin, until the pin's outcome is recorded.
    after: Vec<f64>,
    /// The class of its current pin, while its outcome is still to be recorded.
    measuring: Option<Placement>,
}

#[derive(Debug, Default)]
pub struct NetState {
    lru: Lru,
    procs: BTreeMap<ProcKey, Track>,
    /// What each placement class has cost on this machine.
    pub costs: ClassCosts,
}

/// Where a pinned receiver runs relative to its NIC's receive CPU: on it (seed 002's
/// first choice), or beside it (a CPU sharing a cache with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    On,
    Beside,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::On => "on the receive CPU",
            Placement::Beside => "beside the receive CPU",
        }
    }
}

/// Moves of a class recorded per class (the newest kept).
pub const CLASS_WINDOW: usize = 16;
/// Recorded moves of a class before its record speaks for it.
pub const MIN_CLASS_SAMPLES: usize = 3;
/// Intervals after a pin over which its cost is measured.
pub const MEASURE_INTERVALS: usize = 5;
/// Intensive unpinned intervals kept as a process's cost before a pin.
pub const BEFORE_WINDOW: usize = 8;
/// Without a record, "on" is assumed to pay only below this softirq + IRQ share of the
/// receive CPU: above it the reader would compete with receive processing for that CPU
/// (not a fitted value: half of a CPU, where the two would split it).
pub const ON_SOFTIRQ_MAX: f64 = 0.5;

/// The measured record of each placement class on this machine: for each recorded move,
/// log(after / before) of the moved process's own CPU seconds per received byte (median
/// over [`MEASURE_INTERVALS`] intervals after its pin, against its median over its last
/// intensive intervals before), the newest [`CLASS_WINDOW`] per class. Negative: the class
/// made receiving cheaper than where the kernel had put it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ClassCosts {
    pub on: VecDeque<f64>,
    pub beside: VecDeque<f64>,
}

/// What a class's record says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Evidence {
    /// Fewer than [`MIN_CLASS_SAMPLES`] recorded moves.
    Unmeasured,
    /// Its 95% interval (t on the log ratios) lies below 1: cheaper. The geometric mean.
    Pays(f64),
    /// Its interval lies above 1: dearer than leaving the process alone.
    Hurts(f64),
    /// Its interval holds 1.
    Unclear(f64),
}

impl ClassCosts {
    pub fn of(&self, c: Placement) -> &VecDeque<f64> {
        match c {
            Placement::On => &self.on,
            Placement::Beside => &self.beside,
        }
    }

    pub fn record(&mut self, c: Placement, log_ratio: f64) {
        if !log_ratio.is_finite() {
            return;
        }
        let q = match c {
            Placement::On => &mut self.on,
            Placement::Beside => &mut self.beside,
        };
        crate::stats::push_bounded(q, log_ratio, CLASS_WINDOW);
    }

    pub fn evidence(&self, c: Placement) -> Evidence {
        let q = self.of(c);
        if q.len() < MIN_CLASS_SAMPLES {
            return Evidence::Unmeasured;
        }
        let ratios: Vec<f64> = q.iter().map(|x| x.exp()).collect();
        match crate::stats::log_ratio_interval(&ratios) {
            Some(i) if i.ci95.1 < 1.0 => Evidence::Pays(i.geo_mean),
            Some(i) if i.ci95.0 > 1.0 => Evidence::Hurts(i.geo_mean),
            Some(i) => Evidence::Unclear(i.geo_mean),
            None => Evidence::Unmeasured,
        }
    }
}

/// The class to pin a receiver in, from what each class has measured here; `on_ok` and
/// `beside_ok`: whether each has a CPU under the load threshold; `prior`: the class
/// assumed without a record ([`NetAffinity::prior`]). A class whose record hurts is never
/// chosen (N7); of classes that pay, the cheaper (N9); else a class still to be measured,
/// the prior first (exploration: the record is made by trying); else the process is left
/// alone, with why.
pub fn choose_class(
    costs: &ClassCosts,
    on_ok: bool,
    beside_ok: bool,
    prior: Placement,
) -> Result<(Placement, String), String> {
    let other = match prior {
        Placement::On => Placement::Beside,
        Placement::Beside => Placement::On,
    };
    let usable = |c: Placement| match c {
        Placement::On => on_ok,
        Placement::Beside => beside_ok,
    };
    let said = |c: Placement| match costs.evidence(c) {
        Evidence::Unmeasured => format!(
            "{}: {} of {MIN_CLASS_SAMPLES} moves measured",
            c.name(),
            costs.of(c).len()
        ),
        Evidence::Pays(g) => format!("{}: x{g:.3} CPU per byte, pays", c.name()),
        Evidence::Hurts(g) => format!("{}: x{g:.3} CPU per byte, hurts", c.name()),
        Evidence::Unclear(g) => format!("{}: x{g:.3} CPU per byte, unclear", c.name()),
    };
    let record = format!("{}; {}", said(Placement::On), said(Placement::Beside));
    let candidates: Vec<Placement> = [prior, other]
        .into_iter()
        .filter(|c| usable(*c) && !matches!(costs.evidence(*c), Evidence::Hurts(_)))
        .collect();
    let paying = candidates
        .iter()
        .filter_map(|c| match costs.evidence(*c) {
            Evidence::Pays(g) => Some((*c, g)),
            _ => None,
        })
        .min_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((c, _)) = paying {
        return Ok((c, format!("measured here, {record}")));
    }
    let unmeasured = candidates
        .iter()
        .find(|c| costs.evidence(**c) == Evidence::Unmeasured);
    if let Some(c) = unmeasured.or(candidates.first()) {
        return Ok((*c, format!("to measure, {record}")));
    }
    Err(format!("no placement class to use: {record}"))
}

/// "CPU 3" or "CPUs 0-2,4-15", as the notes name a target.
fn cpus_named(cpus: &CpuSet) -> String {
    match cpus.len() {
        1 => format!("CPU {cpus}"),
        _ => format!("CPUs {cpus}"),
    }
}

/// Adds a pinned process's CPU share to the load its target CPUs will carry this plan,
/// spread evenly over them (the scheduler balances it inside a set).
fn add_load(extra: &mut BTreeMap<u32, f64>, cpus: &CpuSet, share: f64) {
    let each = share / cpus.len().max(1) as f64;
    for c in cpus.iter() {
        *extra.entry(c).or_default() += each;
    }
}

/// Bytes per second, human-readable.
pub fn fmt_rate(bytes_per_s: f64) -> String {
    let (v, unit) = if bytes_per_s >= 1e9 {
        (bytes_per_s / 1e9, "GB/s")
    } else if bytes_per_s >= 1e6 {
        (bytes_per_s / 1e6, "MB/s")
    } else if bytes_per_s >= 1e3 {
        (bytes_per_s / 1e3, "kB/s")
    } else {
        (bytes_per_s, "B/s")
    };
    format!("{v:.1} {unit}")
}

fn pct(x: f64) -> String {
    if x.is_infinite() {
        return "any load (check off)".into();
    }
    format!("{:.0}%", x * 100.0)
}

/// Where the process should run, and why; or why it has no target.
struct Target {
    /// One CPU, or beside a receive CPU whose cache neighbours span its whole package, all
    /// of them (every CPU of the package but the receive CPU).
    cpus: CpuSet,
    class: Placement,
    why: String,
}

impl NetAffinity {
    /// The bytes that make `p` communication-intensive: received, or sent and received
    /// with `count_sent`.
    fn intensity(&self, p: &ProcObs) -> f64 {
        if self.cfg.count_sent {
            p.net_bytes_per_s()
        } else {
            p.rx_bytes_per_s
        }
    }

    /// The CPU's busy fraction without `p` itself, plus what this plan already moved there.
    /// Only `p`'s own task time is taken off: the CPU's softirq time (receive processing,
    /// of its flows or others') stays counted, so a CPU already busy with softirq never
    /// reads as idle (with the paper's rule, the plain busy fraction as before).
    fn load(&self, obs: &Observation, p: &ProcObs, cpu: u32, extra: &BTreeMap<u32, f64>) -> f64 {
        let c = obs.cpu(cpu);
        let util = c.map_or(0.0, |c| c.util);
        let own = if p.allowed_cpus == CpuSet::single(cpu) || p.last_cpu == Some(cpu) {
            p.cpu_share.min(util)
        } else {
            0.0
        };
        let without = (util - own).max(0.0);
        let floor = match self.cfg.rule {
            Rule::Checked => c.map_or(0.0, |c| c.softirq + c.irq),
            Rule::Paper => 0.0,
        };
        without.max(floor) + extra.get(&cpu).copied().unwrap_or(0.0)
    }

    // The plan's context (current pin, this plan's placements, the class record) is
    // passed as it is kept, not bundled for this one caller.
    #[allow(clippy::too_many_arguments)]
    fn target(
        &self,
        topo: &Topology,
        obs: &Observation,
        p: &ProcObs,
        allowed: &CpuSet,
        current: Option<u32>,
        extra: &BTreeMap<u32, f64>,
        costs: &ClassCosts,
    ) -> Result<Target, String> {
        // The NIC carrying most of its bytes this interval.
        let mut by_nic: BTreeMap<&str, f64> = BTreeMap::new();
        for f in &p.flows {
            let bytes = f.rx_bytes_per_s + f.tx_bytes_per_s;
            if bytes <= 0.0 {
                continue;
            }
            let ip = f.local.ip().to_canonical();
            if let Some(n) = topo.nic_for_addr(&ip) {
                *by_nic.entry(n.name.as_str()).or_default() += bytes;
            }
        }
        let Some((nic_name, nic_bytes)) = by_nic
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(n, b)| (*n, *b))
        else {
            return Err("the local addresses of its active flows belong to no known NIC".into());
        };
        let nic = topo.nic(nic_name).expect("name from the topology");
        let others = if by_nic.len() > 1 {
            format!(
                " (most of its traffic, {} of {}; also {})",
                fmt_rate(nic_bytes),
                fmt_rate(by_nic.values().sum()),
                by_nic
                    .keys()
                    .filter(|n| **n != nic_name)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            String::new()
        };
        let rx = nic.rx_cpus.intersection(&topo.online());
        if rx.is_empty() {
            return Err(format!(
                "{nic_name}{others} has no known receive CPU (no IRQ affinity or RPS CPUs)"
            ));
        }
        let thr = self.cfg.cpu_load_threshold;
        // 1.0 = no load check: nothing counts as busy.
        let thr = if thr >= 1.0 { f64::INFINITY } else { thr };
        let load = |c: u32| self.load(obs, p, c, extra);
        let least = |set: &CpuSet| -> Option<(u32, f64)> {
            set.iter()
                .map(|c| (c, load(c)))
                .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        };
        let rx_ok = rx.intersection(allowed);
        // Stay on the current receive CPU while it is under the threshold (stability).
        let rx_pick = match current {
            Some(c) if rx_ok.contains(c) && load(c) < thr => Some((c, load(c))),
            _ => least(&rx_ok),
        };
        let Some((rc, rl)) = rx_pick.or_else(|| least(&rx)) else {
            return Err(format!("{nic_name}{others}: no receive CPU"));
        };
        let on_ok = rl < thr && rx_ok.contains(rc);
        let on_why = format!(
            "{nic_name}{others} receives on CPU {rc}, load {} without this process < {}",
            pct(rl),
            pct(thr)
        );
        // Seed 002's literal rule, or the load check off (`cpu_load_threshold = 1.0`:
        // "always the receive CPU"): the receive CPU whenever it is under the threshold.
        if on_ok && (self.cfg.rule == Rule::Paper || thr.is_infinite()) {
            return Ok(Target {
                cpus: CpuSet::single(rc),
                class: Placement::On,
                why: on_why,
            });
        }
        let busy = if on_ok {
            on_why.clone()
        } else if rx_ok.contains(rc) {
            format!(
                "{nic_name}{others} receives on CPU {rc}, busy: {} without this process >= {}",
                pct(rl),
                pct(thr)
            )
        } else {
            format!(
                "{nic_name}{others} receives on CPU(s) {rx}, outside its allowed CPUs {allowed}"
            )
        };
        let neigh = topo.cache_neighbours(rc).intersection(allowed);
        // No flapping: stay on the current neighbour unless another is lighter by more
        // than the margin.
        let pick = match (current, least(&neigh)) {
            (Some(c), Some((n, nl)))
                if self.cfg.rule == Rule::Checked
                    && n != c
                    && neigh.contains(c)
                    && load(c) < thr
                    && load(c) - nl <= self.cfg.move_margin =>
            {
                Some((c, load(c)))
            }
            (_, l) => l,
        };
        let beside = |n: u32, nl: f64, reason: &str| {
            let cache = topo.caches_of(rc).into_iter().find(|c| c.cpus.contains(n));
            let level = cache
                .as_ref()
                .map_or("a cache".to_string(), |c| format!("L{}", c.level));
            // Its neighbours share only the cache over the whole package: a one-CPU pin
            // there buys no cache the scheduler's own choice lacks and takes its freedom
            // away (on the 16-core device one-CPU pins of 4 streams cost 5.6% of their
            // throughput and of 17 nginx workers a 15x p99). So every neighbour: the pin
            // keeps it off the receive CPU and leaves the scheduler the rest.
            let spans_package = self.cfg.rule == Rule::Checked
                && neigh.len() > 1
                && cache.is_some_and(|c| topo.package_cpus(rc).is_subset(&c.cpus));
            if spans_package {
                return Target {
                    cpus: neigh.clone(),
                    class: Placement::Beside,
                    why: format!(
                        "{reason}; CPUs {neigh} share {level} with it, over its whole package: kept off the receive CPU, the scheduler places it among them (least loaded CPU {n} at {} < {})",
                        pct(nl),
                        pct(thr)
                    ),
                };
            }
            Target {
                cpus: CpuSet::single(n),
                class: Placement::Beside,
                why: format!(
                    "{reason}; CPU {n} shares {level} with it, load {} < {}",
                    pct(nl),
                    pct(thr)
                ),
            }
        };
        if self.cfg.rule == Rule::Paper {
            if self.cfg.when_busy == WhenBusy::Leave {
                return Err(format!("{busy}; when_busy = leave"));
            }
            return match pick {
                Some((n, nl)) => Ok(beside(n, nl, &busy)),
                None => Err(format!("{busy}; no allowed CPU shares a cache with it")),
            };
        }
        // Checked: on, beside or leave alone, by what each class has measured here (N7-N9).
        let beside_ok =
            self.cfg.when_busy == WhenBusy::CacheNeighbour && pick.is_some_and(|(_, nl)| nl < thr);
        let (prior, prior_why) = self.prior(topo, obs, rc, allowed);
        match choose_class(costs, on_ok, beside_ok, prior) {
            Ok((Placement::On, why)) => {
                // Say why not beside when beside was the class to prefer.
                let not_beside = match pick {
                    Some((n, nl)) if prior == Placement::Beside && nl >= thr => format!(
                        "; beside unusable: cache neighbour CPU {n} at {} >= {}",
                        pct(nl),
                        pct(thr)
                    ),
                    _ => String::new(),
                };
                Ok(Target {
                    cpus: CpuSet::single(rc),
                    class: Placement::On,
                    why: format!("{on_why}; {why}; without a record: {prior_why}{not_beside}"),
                })
            }
            Ok((Placement::Beside, why)) => {
                let (n, nl) = pick.expect("beside_ok needs a neighbour");
                Ok(beside(
                    n,
                    nl,
                    &format!("{busy}; {why}; without a record: {prior_why}"),
                ))
            }
            Err(why) => Err(match (self.cfg.when_busy, pick) {
                _ if on_ok => format!("{busy}; {why}"),
                (WhenBusy::Leave, _) => format!("{busy}; when_busy = leave"),
                (_, Some((n, nl))) if nl >= thr => format!(
                    "{busy}; least-loaded cache neighbour CPU {n} busy too ({} >= {})",
                    pct(nl),
                    pct(thr)
                ),
                (_, None) => format!("{busy}; no allowed CPU shares a cache with it"),
                _ => format!("{busy}; {why}"),
            }),
        }
    }

    /// The class assumed before this machine has measured any (N8): "on" only where the
    /// receive CPU is not busy with receive processing (softirq + IRQ below
    /// [`ON_SOFTIRQ_MAX`]) and shares a cache smaller than its package with a CPU the
    /// process may use: the shape of seed 002's machine (L2 shared by pairs), where the
    /// paper measured "on" or its L2 neighbour to pay. With one big last-level cache over
    /// the package and private lower levels (this VM, the 16-core device) "on" is not
    /// assumed to pay: beside it.
    fn prior(
        &self,
        topo: &Topology,
        obs: &Observation,
        rc: u32,
        allowed: &CpuSet,
    ) -> (Placement, String) {
        let rx_busy = obs.cpu(rc).map_or(0.0, |c| c.softirq + c.irq);
        if rx_busy >= ON_SOFTIRQ_MAX {
            return (
                Placement::Beside,
                format!(
                    "CPU {rc} spends {} in softirq/IRQ, so on is not assumed to pay",
                    pct(rx_busy)
                ),
            );
        }
        // A cache shared with a CPU it may use, but not by its whole package: L2 shared by
        // a pair (seed 002's Xeon 5355), SMT siblings' L1/L2, a die's L3 on a two-die
        // package. One LLC over the whole package is not such a cache.
        let package_cpus = topo.package_cpus(rc);
        let shared_private = topo.caches_of(rc).into_iter().find(|c| {
            c.kind != crate::topology::CacheKind::Instruction
                && !package_cpus.is_subset(&c.cpus)
                && !c
                    .cpus
                    .intersection(allowed)
                    .intersection(&topo.online())
                    .difference(&CpuSet::single(rc))
                    .is_empty()
        });
        match shared_private {
            Some(c) => (
                Placement::On,
                format!(
                    "CPU {rc} shares L{} with a CPU it may use, not with its whole package (seed 002's shape)",
                    c.level
                ),
            ),
            None => (
                Placement::Beside,
                format!(
                    "CPU {rc} shares no cache with a CPU it may use but one over its whole package, so on is not assumed to pay"
                ),
            ),
        }
    }
}

impl Policy for NetAffinity {
    type State = NetState;

    fn kind(&self) -> crate::policies::PolicyKind {
        KIND
    }

    fn wants(&self) -> SampleRequest {
        SampleRequest {
            sockets: true,
            ..Default::default()
        }
    }

    fn disabled_reason(
        &self,
        topo: &Topology,
        sources: &crate::sample::SourceStatus,
    ) -> Option<String> {
        if let Some(why) = sources.why_missing(SourceKind::SockDiag) {
            return Some(format!("needs per-connection counters (sock_diag): {why}"));
        }
        if topo.nics.iter().all(|n| n.rx_cpus.is_empty()) {
            return Some(
                "no NIC with a known receive CPU (IRQ affinity or RPS) in the topology".into(),
            );
        }
        None
    }

    fn lacks(&self, topo: &Topology, _sources: &crate::sample::SourceStatus) -> Vec<String> {
        let blind: Vec<&str> = topo
            .nics
            .iter()
            .filter(|n| n.rx_cpus.is_empty())
            .map(|n| n.name.as_str())
            .collect();
        if blind.is_empty() {
            return Vec::new();
        }
        vec![format!(
            "{}: no known receive CPU (no IRQ affinity, RPS off): a process whose traffic \
             flows there is left where it is (set RPS on the interface, or use a NIC)",
            blind.join(", ")
        )]
    }

    fn plan(&self, topo: &Topology, obs: &Observation, state: &mut PolicyState<NetState>) -> Plan {
        let mut st = std::mem::take(&mut state.private);
        let plan = self.plan_with(topo, obs, state, &mut st);
        state.private = st;
        plan
    }

    /// The class record (N7-N9's evidence) is what this machine taught: kept across
    /// restarts so that a new daemon does not try again a class measured to hurt here.
    fn learned(&self, st: &NetState) -> Option<crate::learned::Learned> {
        if st.costs.on.is_empty() && st.costs.beside.is_empty() {
            return None;
        }
        Some(crate::learned::Learned::NetAffinityClasses(
            crate::learned::ClassRecord {
                on: st.costs.on.iter().copied().collect(),
                beside: st.costs.beside.iter().copied().collect(),
            },
        ))
    }

    fn relearn(&self, st: &mut NetState, learned: &crate::learned::Learned) {
        match learned {
            crate::learned::Learned::NetAffinityClasses(r) => {
                // Through `record`, so the window and the finiteness rule hold as for a
                // move measured here; what this daemon measured already stays the newest.
                let mine = std::mem::take(&mut st.costs);
                for (class, old) in [(Placement::On, &r.on), (Placement::Beside, &r.beside)] {
                    for &x in old.iter().chain(mine.of(class)) {
                        st.costs.record(class, x);
                    }
                }
            }
        }
    }
}

impl NetAffinity {
    fn plan_with(
        &self,
        topo: &Topology,
        obs: &Observation,
        state: &PolicyState<NetState>,
        st: &mut NetState,
    ) -> Plan {
        let cfg = &self.cfg;
        let now = state.now_s;
        let timeout_s = cfg.idle_timeout_ms as f64 / 1e3;
        let min_hold_s = cfg.min_hold_ms as f64 / 1e3;
        let mut plan = Plan::default();

        // 1-2. Activity and intensity. A process is tracked only while its track says
        // something (a streak, a pending target, an original affinity): most processes
        // never communicate, and cost no entry.
        let present = obs.index();
        let has = |k: &ProcKey| present.contains(k);
        st.procs.retain(|k, _| has(k));
        let gone: Vec<FlowId> = st
            .lru
            .recs
            .keys()
            .filter(|(k, _)| !has(k))
            .copied()
            .collect();
        for id in &gone {
            st.lru.remove(id);
        }
        for p in obs.iter_procs() {
            let k = p.key();
            for f in &p.flows {
                let bytes = f.rx_bytes_per_s + f.tx_bytes_per_s;
                if bytes > 0.0 && bytes >= cfg.active_flow_bytes_per_s as f64 {
                    st.lru.touch((k, f.inode), now);
                }
            }
            let intensity = self.intensity(p);
            if intensity > cfg.intensive_bytes_per_s as f64 {
                let t = st.procs.entry(k).or_default();
                t.streak = t.streak.saturating_add(1);
                // Its own CPU per byte: before a pin, and after it until the pin's class
                // has its outcome recorded (N8's record, `ClassCosts`).
                let cost = p.cpu_share / intensity;
                if cost.is_finite() && cost > 0.0 {
                    match (state.held.contains_key(&k), t.measuring) {
                        (false, _) => {
                            crate::stats::push_bounded(&mut t.before, cost, BEFORE_WINDOW)
                        }
                        (true, Some(class)) => {
                            t.after.push(cost);
                            if t.after.len() >= MEASURE_INTERVALS {
                                let before: Vec<f64> = t.before.iter().copied().collect();
                                if let (Some(a), Some(b)) = (
                                    crate::stats::median(&t.after),
                                    crate::stats::median(&before),
                                ) {
                                    st.costs.record(class, (a / b).ln());
                                }
                                t.measuring = None;
                                t.after.clear();
                            }
                        }
                        (true, None) => {}
                    }
                }
            } else if let Some(t) = st.procs.get_mut(&k) {
                t.streak = 0;
            }
        }
        st.lru.expire(now, timeout_s);

        // 3-5. Decisions, biggest communicators first so they get the receive CPU. A
        // process neither held nor moving a byte has none to make.
        let mut order: Vec<&ProcObs> = obs
            .iter_procs()
            .filter(|p| {
                // The complement of the quiet test below (`rate <= 0.0`), NaN included.
                let rate = p.net_bytes_per_s();
                rate > 0.0 || rate.is_nan() || state.held.contains_key(&p.key())
            })
            .collect();
        order.sort_by(|a, b| {
            b.net_bytes_per_s()
                .total_cmp(&a.net_bytes_per_s())
                .then(a.pid.cmp(&b.pid))
        });
        let mut extra: BTreeMap<u32, f64> = BTreeMap::new();
        let thr_s = fmt_rate(cfg.intensive_bytes_per_s as f64);
        for p in order {
            let k = p.key();
            let rate = p.net_bytes_per_s();
            // Formatted only for the processes a line is written about (most are quiet).
            // The counted rate is the one compared: sent bytes only with count_sent.
            let rates = || {
                if cfg.count_sent {
                    format!(
                        "rx {} + tx {}",
                        fmt_rate(p.rx_bytes_per_s),
                        fmt_rate(p.tx_bytes_per_s)
                    )
                } else {
                    format!(
                        "rx {} (tx {} not counted: count_sent = false)",
                        fmt_rate(p.rx_bytes_per_s),
                        fmt_rate(p.tx_bytes_per_s)
                    )
                }
            };
            let track = st.procs.entry(k).or_default();
            if let Some(h) = state.held.get(&k) {
                let held_for = now - h.since_s;
                let conns = st.lru.count(k);
                if conns == 0 {
                    if held_for >= min_hold_s {
                        let idle = st
                            .lru
                            .last_active(k)
                            .map_or(String::new(), |t| format!(" ({:.1} s)", now - t));
                        plan.push(
                            KIND,
                            Action::RestoreProcess {
                                proc: k,
                                comm: p.comm.to_string(),
                                via: None,
                            },
                            format!(
                                "all its connections idle longer than {:.1} s{idle}: no longer communication-intensive; original affinity back",
                                timeout_s
                            ),
                        );
                        track.pending = None;
                        track.original = None;
                        track.measuring = None;
                    } else {
                        plan.note(
                            KIND,
                            Some(k),
                            format!(
                                "idle, but pinned to {} only {held_for:.1} s ago (min_hold {min_hold_s:.1} s)",
                                h.cpus
                            ),
                        );
                    }
                    continue;
                }
                let allowed = track
                    .original
                    .clone()
                    .unwrap_or_else(|| p.allowed_cpus.clone());
                let current = (h.cpus.len() == 1).then(|| h.cpus.first()).flatten();
                match self.target(topo, obs, p, &allowed, current, &extra, &st.costs) {
                    Ok(t) if t.cpus == h.cpus => {
                        track.pending = None;
                        plan.note(
                            KIND,
                            Some(k),
                            format!(
                                "stays on {}: {}, {conns} active connection(s); {}",
                                cpus_named(&t.cpus),
                                rates(),
                                t.why
                            ),
                        );
                    }
                    Ok(t) => {
                        let n = match &track.pending {
                            Some((c, n)) if *c == t.cpus => n + 1,
                            _ => 1,
                        };
                        track.pending = Some((t.cpus.clone(), n));
                        if n >= cfg.repin_after_intervals && held_for >= min_hold_s {
                            track.pending = None;
                            track.measuring = Some(t.class);
                            track.after.clear();
                            add_load(&mut extra, &t.cpus, p.cpu_share);
                            plan.push(
                                KIND,
                                Action::PinProcess {
                                    proc: k,
                                    comm: p.comm.to_string(),
                                    cpus: t.cpus.clone(),
                                },
                                format!(
                                    "moved from {} after {n} interval(s) with a new target: {}; {}",
                                    h.cpus,
                                    rates(),
                                    t.why
                                ),
                            );
                        } else {
                            plan.note(
                                KIND,
                                Some(k),
                                format!(
                                    "stays on {} for now: target {} for {n}/{} interval(s), held {held_for:.1} s (min {min_hold_s:.1} s); {}",
                                    h.cpus, cpus_named(&t.cpus), cfg.repin_after_intervals, t.why
                                ),
                            );
                        }
                    }
                    Err(why) => {
                        track.pending = None;
                        plan.note(
                            KIND,
                            Some(k),
                            format!(
                                "stays on {}: {conns} active connection(s), no better target: {why}",
                                h.cpus
                            ),
                        );
                    }
                }
                continue;
            }
            if rate <= 0.0 {
                continue;
            }
            if state.released.contains(&k) {
                plan.note(
                    KIND,
                    Some(k),
                    "released: its affinity was changed by someone else (or a pin failed for good); placer leaves it alone",
                );
                continue;
            }
            if state.taken.contains(&k) {
                plan.note(KIND, Some(k), "held by an earlier policy");
                continue;
            }
            if !self.scope.admits(p, self.self_pid) {
                plan.note(KIND, Some(k), "outside the configured scope: never placed");
                continue;
            }
            if track.streak == 0 {
                plan.note(
                    KIND,
                    Some(k),
                    format!("not communication-intensive: {} <= {thr_s}", rates()),
                );
                continue;
            }
            if track.streak < cfg.pin_after_intervals {
                plan.note(
                    KIND,
                    Some(k),
                    format!(
                        "intensive ({} > {thr_s}) for {}/{} interval(s): not pinned yet",
                        rates(),
                        track.streak,
                        cfg.pin_after_intervals
                    ),
                );
                continue;
            }
            let allowed = p.allowed_cpus.clone();
            match self.target(topo, obs, p, &allowed, None, &extra, &st.costs) {
                Ok(t) if allowed == t.cpus => plan.note(
                    KIND,
                    Some(k),
                    format!(
                        "already confined to {} (not by placer): {}",
                        cpus_named(&t.cpus),
                        t.why
                    ),
                ),
                Ok(t) => {
                    track.original = Some(allowed);
                    track.measuring = Some(t.class);
                    track.after.clear();
                    add_load(&mut extra, &t.cpus, p.cpu_share);
                    plan.push(
                        KIND,
                        Action::PinProcess {
                            proc: k,
                            comm: p.comm.to_string(),
                            cpus: t.cpus.clone(),
                        },
                        format!("communication-intensive: {} > {thr_s}; {}", rates(), t.why),
                    );
                }
                Err(why) => plan.note(
                    KIND,
                    Some(k),
                    format!(
                        "communication-intensive ({} > {thr_s}) but left alone: {why}",
                        rates()
                    ),
                ),
            }
        }
        st.procs
            .retain(|_, t| t.streak > 0 || t.pending.is_some() || t.original.is_some());
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machines::machine;
    use crate::observation::{CpuObs, FlowObs};
    use crate::policy::Held;
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};

    const MB: f64 = 1e6;

    fn ip(last: u8, net: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, net, 0, last))
    }

    /// Gives NIC `ethN` address 10.N.0.1.
    fn with_addrs(mut t: Topology) -> Topology {
        for (i, n) in t.nics.iter_mut().enumerate() {
            n.addrs = vec![ip(1, i as u8)];
        }
        t
    }

    fn flow(nic: u8, inode: u64, rx: f64) -> FlowObs {
        FlowObs {
            local: SocketAddr::new(ip(1, nic), 5001),
            remote: SocketAddr::new(ip(2, nic), 40000 + inode as u16),
            state: 1,
            inode,
            rx_bytes_per_s: rx,
            tx_bytes_per_s: 0.0,
            avg_rx_seg_bytes: None,
            avg_tx_seg_bytes: None,
            segs_in_per_s: 0.0,
            segs_out_per_s: 0.0,
            new: false,
        }
    }

    fn proc_obs(pid: u32, comm: &str, allowed: CpuSet, flows: Vec<FlowObs>) -> ProcObs {
        let rx = flows.iter().map(|f| f.rx_bytes_per_s).sum();
        ProcObs {
            uid: Some(1000),
            cgroup: "/user.slice".into(),
            cpu_share: 0.2,
            last_cpu: Some(5),
            rx_bytes_per_s: rx,
            flows,
            ..ProcObs::bare(pid, 1000 + pid as u64, comm, allowed)
        }
    }

    fn obs(topo: &Topology, loads: &[(u32, f64)], procs: Vec<ProcObs>, t_s: f64) -> Observation {
        Observation {
            time_ns: (t_s * 1e9) as u64,
            interval_s: 1.0,
            cpus: topo
                .online()
                .iter()
                .map(|c| CpuObs {
                    cpu: c,
                    util: loads
                        .iter()
                        .find(|(id, _)| *id == c)
                        .map_or(0.05, |(_, u)| *u),
                    ..Default::default()
                })
                .collect(),
            procs: procs.into_iter().map(std::sync::Arc::new).collect(),
            ..Default::default()
        }
    }

    fn policy(cfg: NetAffinityConfig) -> NetAffinity {
        NetAffinity::new(cfg, Scope::default(), 1)
    }

    /// What the engine does with outcomes when every action succeeds.
    fn run(
        p: &NetAffinity,
        topo: &Topology,
        o: &Observation,
        st: &mut PolicyState<NetState>,
    ) -> Plan {
        st.now_s = o.time_ns as f64 / 1e9;
        let plan = p.plan(topo, o, st);
        for a in &plan.actions {
            match &a.action {
                Action::PinProcess { proc, comm, cpus } => {
                    st.shared.held.insert(
                        *proc,
                        Held {
                            cpus: cpus.clone(),
                            since_s: st.shared.now_s,
                            comm: comm.clone(),
                        },
                    );
                }
                Action::RestoreProcess { proc, .. } => {
                    st.held.remove(proc);
                }
                _ => {}
            }
        }
        plan
    }

    /// Process 10 streams 50 MB/s on eth1 at t = 1 s and is pinned to CPU 1.
    fn pin_first(p: &NetAffinity, t: &Topology, st: &mut PolicyState<NetState>) {
        let pr = proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)]);
        let plan = run(p, t, &obs(t, &[], vec![pr], 1.0), st);
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(1)));
    }

    fn pinned_to(plan: &Plan, pid: u32) -> Option<CpuSet> {
        plan.actions.iter().find_map(|a| match &a.action {
            Action::PinProcess { proc, cpus, .. } if proc.pid == pid => Some(cpus.clone()),
            _ => None,
        })
    }

    fn restored(plan: &Plan, pid: u32) -> bool {
        plan.actions
            .iter()
            .any(|a| matches!(&a.action, Action::RestoreProcess { proc, .. } if proc.pid == pid))
    }

    fn note_of(plan: &Plan, pid: u32) -> String {
        plan.notes
            .iter()
            .filter(|n| n.proc.map(|k| k.pid) == Some(pid))
            .map(|n| n.text.clone())
            .collect::<Vec<_>>()
            .join(" | ")
    }

    fn xeon() -> Topology {
        with_addrs(machine("xeon-5355x2").expect("model"))
    }

    #[test]
    fn xeon_5355_l2_pairs_as_the_paper_says() {
        let t = xeon();
        // The seed's testbed: cores 0 and 1 share an L2; eth1's interrupt is on CPU 1.
        assert_eq!(t.cache_neighbours(1), CpuSet::single(0));
        assert_eq!(t.nic("eth1").expect("eth1").rx_cpus, CpuSet::single(1));
    }

    #[test]
    fn n4_intensive_process_pinned_to_the_receive_cpu() {
        let t = xeon();
        let p = policy(Default::default());
        let mut st = PolicyState::default();
        let o = obs(
            &t,
            &[],
            vec![proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)])],
            1.0,
        );
        let plan = run(&p, &t, &o, &mut st);
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(1)));
        let reason = &plan.actions[0].reason;
        assert!(
            reason.contains("eth1") && reason.contains("CPU 1"),
            "{reason}"
        );
        assert!(reason.contains("50.0 MB/s"), "{reason}");
    }

    #[test]
    fn n4_busy_receive_cpu_sends_it_to_the_cache_sharing_cpu() {
        let t = xeon();
        let p = policy(Default::default());
        let mut st = PolicyState::default();
        let o = obs(
            &t,
            &[(1, 0.95)],
            vec![proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)])],
            1.0,
        );
        let plan = run(&p, &t, &o, &mut st);
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(0)));
        assert!(
            plan.actions[0].reason.contains("shares L2"),
            "{}",
            plan.actions[0].reason
        );
    }

    #[test]
    fn busy_receive_cpu_and_leave_configured_leaves_it() {
        let t = xeon();
        let p = policy(NetAffinityConfig {
            when_busy: WhenBusy::Leave,
            ..Default::default()
        });
        let mut st = PolicyState::default();
        let o = obs(
            &t,
            &[(1, 0.95)],
            vec![proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)])],
            1.0,
        );
        let plan = run(&p, &t, &o, &mut st);
        assert!(plan.actions.is_empty());
        assert!(note_of(&plan, 10).contains("when_busy = leave"));
    }

    #[test]
    fn busy_receive_cpu_and_busy_neighbours_leaves_it() {
        let t = xeon();
        let p = policy(Default::default());
        let mut st = PolicyState::default();
        let o = obs(
            &t,
            &[(0, 0.9), (1, 0.95)],
            vec![proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)])],
            1.0,
        );
        let plan = run(&p, &t, &o, &mut st);
        assert!(plan.actions.is_empty());
        assert!(
            note_of(&plan, 10).contains("busy too"),
            "{}",
            note_of(&plan, 10)
        );
    }

    #[test]
    fn load_counts_without_the_process_itself() {
        let t = xeon();
        let p = policy(Default::default());
        let mut st = PolicyState::default();
        // CPU 1 at 90%, of which 50% is this process (it last ran there).
        let mut pr = proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)]);
        pr.last_cpu = Some(1);
        pr.cpu_share = 0.5;
        let o = obs(&t, &[(1, 0.9)], vec![pr], 1.0);
        let plan = run(&p, &t, &o, &mut st);
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(1)));
    }

    #[test]
    fn load_threshold_one_turns_the_load_check_off() {
        let t = xeon();
        let p = policy(NetAffinityConfig {
            cpu_load_threshold: 1.0,
            ..Default::default()
        });
        let mut st = PolicyState::default();
        let pr = proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)]);
        let plan = run(&p, &t, &obs(&t, &[(1, 1.0)], vec![pr], 1.0), &mut st);
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(1)));
    }

    #[test]
    fn threshold_separates_intensive_from_not() {
        let t = xeon();
        let p = policy(Default::default());
        let thr = NetAffinityConfig::default().intensive_bytes_per_s as f64;
        let mut st = PolicyState::default();
        let o = obs(
            &t,
            &[],
            vec![proc_obs(10, "rx", t.online(), vec![flow(1, 1, thr)])],
            1.0,
        );
        let plan = run(&p, &t, &o, &mut st);
        assert!(plan.actions.is_empty(), "at the threshold is not above it");
        assert!(note_of(&plan, 10).contains("not communication-intensive"));
        let o = obs(
            &t,
            &[],
            vec![proc_obs(10, "rx", t.online(), vec![flow(1, 1, thr + 1.0)])],
            2.0,
        );
        let plan = run(&p, &t, &o, &mut st);
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(1)));
    }

    #[test]
    fn n5_restored_only_after_every_connection_idles_past_the_timeout() {
        let t = xeon();
        let p = policy(NetAffinityConfig {
            idle_timeout_ms: 3000,
            min_hold_ms: 0,
            ..Default::default()
        });
        let mut st = PolicyState::default();
        let busy =
            |r1: f64, r2: f64| proc_obs(10, "rx", t.online(), vec![flow(1, 1, r1), flow(1, 2, r2)]);
        let plan = run(
            &p,
            &t,
            &obs(&t, &[], vec![busy(50.0 * MB, 10.0 * MB)], 1.0),
            &mut st,
        );
        assert!(pinned_to(&plan, 10).is_some());
        // Connection 1 goes quiet; connection 2 keeps trickling above the activity floor.
        for s in 2..=6 {
            let mut pr = busy(0.0, 5000.0);
            pr.allowed_cpus = CpuSet::single(1);
            let plan = run(&p, &t, &obs(&t, &[], vec![pr], s as f64), &mut st);
            assert!(plan.actions.is_empty(), "t={s}: {:?}", plan.actions);
        }
        // Now both idle: restored once 3 s have passed since the last activity (t=6).
        for s in 7..=9 {
            let mut pr = busy(0.0, 0.0);
            pr.allowed_cpus = CpuSet::single(1);
            let plan = run(&p, &t, &obs(&t, &[], vec![pr], s as f64), &mut st);
            assert!(!restored(&plan, 10), "t={s}: restored too early");
        }
        let mut pr = busy(0.0, 0.0);
        pr.allowed_cpus = CpuSet::single(1);
        let plan = run(&p, &t, &obs(&t, &[], vec![pr], 9.5), &mut st);
        assert!(restored(&plan, 10), "t=9.5: {:?}", plan.notes);
        assert!(plan.actions[0].reason.contains("idle longer than 3.0 s"));
    }

    #[test]
    fn heartbeats_below_the_activity_floor_do_not_keep_a_pin() {
        let t = xeon();
        let p = policy(NetAffinityConfig {
            idle_timeout_ms: 1000,
            min_hold_ms: 0,
            ..Default::default()
        });
        let mut st = PolicyState::default();
        pin_first(&p, &t, &mut st);
        let mut plan = Plan::default();
        for s in 2..=3 {
            let mut pr = proc_obs(10, "rx", CpuSet::single(1), vec![flow(1, 1, 100.0)]);
            pr.allowed_cpus = CpuSet::single(1);
            plan = run(&p, &t, &obs(&t, &[], vec![pr], s as f64), &mut st);
        }
        assert!(restored(&plan, 10));
    }

    #[test]
    fn min_hold_delays_restore() {
        let t = xeon();
        let p = policy(NetAffinityConfig {
            idle_timeout_ms: 500,
            min_hold_ms: 4000,
            ..Default::default()
        });
        let mut st = PolicyState::default();
        pin_first(&p, &t, &mut st);
        let idle = || proc_obs(10, "rx", CpuSet::single(1), vec![flow(1, 1, 0.0)]);
        for s in 2..=4 {
            let plan = run(&p, &t, &obs(&t, &[], vec![idle()], s as f64), &mut st);
            assert!(!restored(&plan, 10), "t={s}");
            assert!(note_of(&plan, 10).contains("min_hold"));
        }
        let plan = run(&p, &t, &obs(&t, &[], vec![idle()], 5.0), &mut st);
        assert!(restored(&plan, 10));
    }

    #[test]
    fn hysteresis_pins_after_k_consecutive_intensive_intervals() {
        let t = xeon();
        let p = policy(NetAffinityConfig {
            pin_after_intervals: 3,
            ..Default::default()
        });
        let mut st = PolicyState::default();
        let hot = || proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)]);
        let cold = || proc_obs(10, "rx", t.online(), vec![flow(1, 1, 10.0)]);
        // hot, hot, cold (resets), hot, hot, hot -> pinned on the 6th.
        let seq = [hot(), hot(), cold(), hot(), hot()];
        for (i, pr) in seq.into_iter().enumerate() {
            let plan = run(&p, &t, &obs(&t, &[], vec![pr], 1.0 + i as f64), &mut st);
            assert!(plan.actions.is_empty(), "interval {i}");
        }
        let plan = run(&p, &t, &obs(&t, &[], vec![hot()], 6.0), &mut st);
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(1)));
    }

    /// N6: over a run where processes are pinned, moved as their traffic changes NIC, and
    /// restored once quiet, no plan holds two actions for one process.
    #[test]
    fn n6_at_most_one_action_per_process_per_interval() {
        let t = xeon();
        let p = policy(NetAffinityConfig {
            repin_after_intervals: 1,
            min_hold_ms: 0,
            idle_timeout_ms: 1000,
            ..Default::default()
        });
        let mut st = PolicyState::default();
        let mut allowed: std::collections::BTreeMap<u32, CpuSet> = Default::default();
        let (mut pins, mut moves, mut restores) = (0, 0, 0);
        for i in 0..24u32 {
            let procs: Vec<ProcObs> = [10u32, 11, 12]
                .iter()
                .map(|&pid| {
                    // Traffic moves to another NIC (another receive CPU) every 3 intervals;
                    // process 12 goes quiet from interval 12.
                    let nic = ((i / 3 + pid) % 8) as u8;
                    let rx = if pid == 12 && i >= 12 { 0.0 } else { 40.0 * MB };
                    let flows = vec![
                        flow(nic, u64::from(pid), rx),
                        flow((nic + 3) % 8, u64::from(pid) + 100, rx / 2.0),
                    ];
                    let mut pr = proc_obs(pid, "rx", t.online(), flows);
                    if let Some(a) = allowed.get(&pid) {
                        pr.allowed_cpus = a.clone();
                    }
                    pr
                })
                .collect();
            let plan = run(&p, &t, &obs(&t, &[], procs, 1.0 + f64::from(i)), &mut st);
            let mut per_pid: std::collections::BTreeMap<u32, usize> = Default::default();
            for a in &plan.actions {
                let pid = a.action.proc().expect("a process's action").pid;
                *per_pid.entry(pid).or_default() += 1;
                match &a.action {
                    Action::PinProcess { cpus, .. } => match allowed.insert(pid, cpus.clone()) {
                        Some(_) => moves += 1,
                        None => pins += 1,
                    },
                    Action::RestoreProcess { .. } => {
                        allowed.remove(&pid);
                        restores += 1;
                    }
                    _ => {}
                }
            }
            assert!(
                per_pid.values().all(|&n| n <= 1),
                "interval {i}: {:?}",
                plan.actions
            );
        }
        assert!(
            pins > 0 && moves > 0 && restores > 0,
            "pins {pins}, moves {moves}, restores {restores}"
        );
    }

    #[test]
    fn moved_only_after_the_new_target_persists() {
        let mut t = xeon();
        let p = policy(NetAffinityConfig {
            repin_after_intervals: 3,
            min_hold_ms: 0,
            ..Default::default()
        });
        let mut st = PolicyState::default();
        let pr = |allowed: CpuSet| proc_obs(10, "rx", allowed, vec![flow(1, 1, 50.0 * MB)]);
        run(&p, &t, &obs(&t, &[], vec![pr(t.online())], 1.0), &mut st);
        // irqbalance moves eth1's interrupt to CPU 6.
        let nic = t.nics.iter_mut().find(|n| n.name == "eth1").expect("eth1");
        nic.rx_cpus = CpuSet::single(6);
        for s in 2..=3 {
            let plan = run(
                &p,
                &t,
                &obs(&t, &[], vec![pr(CpuSet::single(1))], s as f64),
                &mut st,
            );
            assert!(plan.actions.is_empty(), "t={s}");
            assert!(
                note_of(&plan, 10).contains("target CPU 6"),
                "{}",
                note_of(&plan, 10)
            );
        }
        let plan = run(
            &p,
            &t,
            &obs(&t, &[], vec![pr(CpuSet::single(1))], 4.0),
            &mut st,
        );
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(6)));
    }

    #[test]
    fn held_process_stays_while_its_cpu_is_busy_only_with_itself() {
        let t = xeon();
        let p = policy(Default::default());
        let mut st = PolicyState::default();
        pin_first(&p, &t, &mut st);
        for s in 2..=6 {
            let mut pr = proc_obs(10, "rx", CpuSet::single(1), vec![flow(1, 1, 50.0 * MB)]);
            pr.cpu_share = 0.9;
            let plan = run(&p, &t, &obs(&t, &[(1, 0.95)], vec![pr], s as f64), &mut st);
            assert!(plan.actions.is_empty(), "t={s}");
            assert!(note_of(&plan, 10).contains("stays on CPU 1"));
        }
    }

    #[test]
    fn n1_scope_exclusions_are_never_pinned() {
        let t = xeon();
        let scope = Scope {
            exclude_comm: vec!["sshd".into()],
            include_comm: vec!["rx*".into(), "sshd".into(), "kworker*".into()],
            ..Default::default()
        };
        let p = NetAffinity::new(Default::default(), scope, 11);
        let mut st = PolicyState::default();
        let f = || vec![flow(1, 1, 50.0 * MB)];
        let mut kt = proc_obs(12, "kworker/1:0", t.online(), f());
        kt.kernel_thread = true;
        let procs = vec![
            proc_obs(10, "sshd", t.online(), f()),
            proc_obs(11, "rxself", t.online(), f()), // placer's own pid
            kt,
            proc_obs(13, "other", t.online(), f()), // not included
            proc_obs(14, "rxd", t.online(), f()),
        ];
        let plan = run(&p, &t, &obs(&t, &[], procs, 1.0), &mut st);
        let pinned: Vec<u32> = plan
            .actions
            .iter()
            .filter_map(|a| a.action.proc())
            .map(|k| k.pid)
            .collect();
        assert_eq!(pinned, vec![14]);
        for pid in [10, 11, 12, 13] {
            assert!(note_of(&plan, pid).contains("scope"), "{pid}");
        }
    }

    #[test]
    fn n2_released_and_taken_processes_are_left_alone() {
        let t = xeon();
        let p = policy(Default::default());
        let mut st = PolicyState::default();
        let a = proc_obs(10, "a", t.online(), vec![flow(1, 1, 50.0 * MB)]);
        let b = proc_obs(11, "b", t.online(), vec![flow(1, 2, 50.0 * MB)]);
        st.released.insert(a.key());
        st.taken.insert(b.key());
        let plan = run(&p, &t, &obs(&t, &[], vec![a, b], 1.0), &mut st);
        assert!(plan.actions.is_empty());
        assert!(note_of(&plan, 10).contains("released"));
        assert!(note_of(&plan, 11).contains("earlier policy"));
    }

    #[test]
    fn n3_never_outside_the_original_affinity_nor_on_an_own_pin() {
        let t = xeon();
        let p = policy(Default::default());
        let mut st = PolicyState::default();
        // Its cpuset is 4-7: eth1's CPU 1 and its L2 sibling 0 are out of bounds.
        let a = proc_obs(
            10,
            "a",
            CpuSet::parse_list("4-7").expect("list"),
            vec![flow(1, 1, 50.0 * MB)],
        );
        // A user pinned it to CPU 1 already.
        let b = proc_obs(11, "b", CpuSet::single(1), vec![flow(1, 2, 50.0 * MB)]);
        let plan = run(&p, &t, &obs(&t, &[], vec![a, b], 1.0), &mut st);
        assert!(plan.actions.is_empty(), "{:?}", plan.actions);
        assert!(
            note_of(&plan, 10).contains("outside its allowed"),
            "{}",
            note_of(&plan, 10)
        );
        assert!(note_of(&plan, 11).contains("already confined"));
    }

    #[test]
    fn two_nics_follow_the_one_with_most_traffic() {
        let t = xeon();
        let p = policy(Default::default());
        let mut st = PolicyState::default();
        // eth2 (IRQ on CPU 0) carries 30 MB/s, eth3 (IRQ on CPU 1) 5 MB/s.
        let pr = proc_obs(
            10,
            "rx",
            t.online(),
            vec![flow(2, 1, 30.0 * MB), flow(3, 2, 5.0 * MB)],
        );
        let plan = run(&p, &t, &obs(&t, &[], vec![pr], 1.0), &mut st);
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(0)));
        let r = &plan.actions[0].reason;
        assert!(r.contains("eth2") && r.contains("also eth3"), "{r}");
        let mut st = PolicyState::default();
        let pr = proc_obs(
            10,
            "rx",
            t.online(),
            vec![flow(2, 1, 5.0 * MB), flow(3, 2, 30.0 * MB)],
        );
        let plan = run(&p, &t, &obs(&t, &[], vec![pr], 1.0), &mut st);
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(1)));
    }

    #[test]
    fn second_process_sees_the_load_the_first_adds() {
        let t = xeon();
        let p = policy(Default::default());
        let mut st = PolicyState::default();
        let mut a = proc_obs(10, "a", t.online(), vec![flow(1, 1, 80.0 * MB)]);
        a.cpu_share = 0.7;
        let mut b = proc_obs(11, "b", t.online(), vec![flow(1, 2, 40.0 * MB)]);
        b.cpu_share = 0.5;
        let plan = run(
            &p,
            &t,
            &obs(&t, &[(1, 0.2), (0, 0.1)], vec![b, a], 1.0),
            &mut st,
        );
        // a (more traffic) gets CPU 1; CPU 1 is then 0.2 + 0.7 = 0.9: b goes to CPU 0.
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(1)));
        assert_eq!(pinned_to(&plan, 11), Some(CpuSet::single(0)));
    }

    #[test]
    fn unknown_nic_and_loopback_without_rx_cpus_are_noted() {
        let t = xeon();
        let p = policy(Default::default());
        let mut st = PolicyState::default();
        let mut pr = proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)]);
        pr.flows[0].local = "192.168.9.9:1".parse().expect("addr");
        let plan = run(&p, &t, &obs(&t, &[], vec![pr], 1.0), &mut st);
        assert!(plan.actions.is_empty());
        assert!(note_of(&plan, 10).contains("no known NIC"));
    }

    #[test]
    fn dell_c6100_busy_rx_cpu_goes_to_its_smt_sibling() {
        let t = with_addrs(machine("dell-c6100").expect("model"));
        let p = policy(Default::default());
        // eth0's queues take interrupts on CPUs 0, 2, 4, 6; all busy.
        let rx = t.nic("eth0").expect("eth0").rx_cpus.clone();
        let loads: Vec<(u32, f64)> = rx.iter().map(|c| (c, 0.95)).collect();
        let mut st = PolicyState::default();
        let pr = proc_obs(10, "rx", t.online(), vec![flow(0, 1, 50.0 * MB)]);
        let plan = run(&p, &t, &obs(&t, &loads, vec![pr], 1.0), &mut st);
        let cpu = pinned_to(&plan, 10).expect("pinned").first().expect("cpu");
        assert!(!rx.contains(cpu));
        // The lowest shared level with an SMT sibling is L1: the sibling of a receive CPU.
        let sib_of_rx = rx.iter().any(|r| t.siblings(r).contains(cpu));
        assert!(sib_of_rx, "CPU {cpu} is no SMT sibling of {rx}");
        assert!(
            plan.actions[0].reason.contains("shares L1"),
            "{}",
            plan.actions[0].reason
        );
    }

    #[test]
    fn magny_cours_multi_queue_takes_the_least_loaded_receive_cpu() {
        let t = with_addrs(machine("opteron-magny-cours-4p").expect("model"));
        let p = policy(Default::default());
        let rx = t.nic("eth0").expect("eth0").rx_cpus.clone();
        assert_eq!(rx, CpuSet::parse_list("0-3").expect("list"));
        let mut st = PolicyState::default();
        let pr = proc_obs(10, "rx", t.online(), vec![flow(0, 1, 500.0 * MB)]);
        let loads = [(0, 0.7), (1, 0.3), (2, 0.1), (3, 0.5)];
        let plan = run(&p, &t, &obs(&t, &loads, vec![pr], 1.0), &mut st);
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(2)));
        // All four receive CPUs busy: they are the whole die, so no cache neighbour is free.
        let mut st = PolicyState::default();
        let pr = || proc_obs(10, "rx", t.online(), vec![flow(0, 1, 500.0 * MB)]);
        let loads = [(0, 0.9), (1, 0.9), (2, 0.9), (3, 0.9)];
        let plan = run(&p, &t, &obs(&t, &loads, vec![pr()], 1.0), &mut st);
        assert!(plan.actions.is_empty());
        assert!(
            note_of(&plan, 10).contains("busy too"),
            "{}",
            note_of(&plan, 10)
        );
        // Interrupts on CPU 0 only, and it is busy: a CPU of the same die (shares L3).
        let mut t1 = t.clone();
        t1.nics[0].rx_cpus = CpuSet::single(0);
        let mut st = PolicyState::default();
        let plan = run(
            &p,
            &t1,
            &obs(&t1, &[(0, 0.9), (1, 0.5)], vec![pr()], 1.0),
            &mut st,
        );
        let cpu = pinned_to(&plan, 10).expect("pinned").first().expect("cpu");
        let l3 = t.llc_of(0).expect("l3").cpus.clone();
        assert!(
            l3.contains(cpu) && cpu != 0 && cpu != 1,
            "CPU {cpu} vs L3 {l3}"
        );
        assert!(
            plan.actions[0].reason.contains("shares L3"),
            "{}",
            plan.actions[0].reason
        );
    }

    /// Issue 13: only received bytes make a candidate; a send-only process is left alone
    /// unless `count_sent`.
    #[test]
    fn send_only_process_is_not_moved() {
        let t = xeon();
        let mut f = flow(1, 1, 0.0);
        f.tx_bytes_per_s = 3000.0 * MB;
        let sender = || {
            let mut p = proc_obs(10, "tx", t.online(), vec![f.clone()]);
            p.tx_bytes_per_s = 3000.0 * MB;
            p
        };
        let p = policy(Default::default());
        let plan = run(
            &p,
            &t,
            &obs(&t, &[], vec![sender()], 1.0),
            &mut PolicyState::default(),
        );
        assert!(plan.actions.is_empty(), "{:?}", plan.actions);
        assert!(note_of(&plan, 10).contains("not communication-intensive"));
        let p = policy(NetAffinityConfig {
            count_sent: true,
            ..Default::default()
        });
        let plan = run(
            &p,
            &t,
            &obs(&t, &[], vec![sender()], 1.0),
            &mut PolicyState::default(),
        );
        assert!(pinned_to(&plan, 10).is_some());
    }

    /// Issue 13: a CPU past the threshold in softirq gets no new stream, even when the
    /// process itself last ran there (its own share is not softirq time).
    #[test]
    fn cpu_past_the_threshold_in_softirq_gets_no_new_stream() {
        let t = xeon();
        let p = policy(Default::default());
        let mut pr = proc_obs(10, "rx", t.online(), vec![flow(1, 1, 500.0 * MB)]);
        pr.last_cpu = Some(1);
        pr.cpu_share = 0.9;
        let mut o = obs(&t, &[(1, 0.9), (0, 0.85)], vec![pr], 1.0);
        for c in o.cpus.iter_mut().filter(|c| c.cpu == 1 || c.cpu == 0) {
            c.softirq = 0.82;
        }
        let plan = run(&p, &t, &o, &mut PolicyState::default());
        assert!(plan.actions.is_empty(), "{:?}", plan.actions);
        assert!(
            note_of(&plan, 10).contains("busy"),
            "{}",
            note_of(&plan, 10)
        );
        let paper = policy(NetAffinityConfig {
            rule: Rule::Paper,
            ..Default::default()
        });
        // The literal rule takes the process's own share off the CPU's load and so reads
        // CPU 1 as idle: what was measured on the 16-core machine, reproduced on request.
        let plan = run(&paper, &t, &o, &mut PolicyState::default());
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(1)));
    }

    /// Issue 13: a pinned process does not flap between equivalent cache neighbours whose
    /// loads differ by less than `move_margin`.
    #[test]
    fn equal_targets_do_not_flap() {
        let mut t = with_addrs(machine("opteron-magny-cours-4p").expect("model"));
        t.nics[0].rx_cpus = CpuSet::single(0);
        let p = policy(NetAffinityConfig {
            repin_after_intervals: 1,
            min_hold_ms: 0,
            ..Default::default()
        });
        let mut st = PolicyState::default();
        let pr = || proc_obs(10, "rx", t.online(), vec![flow(0, 1, 500.0 * MB)]);
        // CPU 0 busy; CPUs 1 and 2 share its L3 and alternate as the lighter one.
        let mut moves = 0;
        for i in 0..12 {
            let (l1, l2) = if i % 2 == 0 {
                (0.30, 0.20)
            } else {
                (0.20, 0.30)
            };
            let o = obs(
                &t,
                &[(0, 0.95), (1, l1), (2, l2), (3, 0.9), (4, 0.9), (5, 0.9)],
                vec![pr()],
                1.0 + i as f64,
            );
            let plan = run(&p, &t, &o, &mut st);
            moves += plan.actions.len();
        }
        assert_eq!(moves, 1, "pinned once, then stays");
        // A real difference (more than the margin) still moves it.
        let held = st
            .held
            .values()
            .next()
            .expect("held")
            .cpus
            .first()
            .expect("cpu");
        let other = if held == 1 { 2 } else { 1 };
        let mut loads = vec![(0, 0.95), (3, 0.9), (4, 0.9), (5, 0.9)];
        loads.push((held, 0.75));
        loads.push((other, 0.05));
        let plan = run(&p, &t, &obs(&t, &loads, vec![pr()], 20.0), &mut st);
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(other)));
    }

    #[test]
    fn odroid_busy_little_rx_cpu_goes_to_its_cluster() {
        let t = with_addrs(machine("odroid-xu4").expect("model"));
        let p = policy(Default::default());
        let mut st = PolicyState::default();
        let pr = proc_obs(10, "ftp", t.online(), vec![flow(0, 1, 40.0 * MB)]);
        let loads = [(0, 0.9), (1, 0.6), (2, 0.2), (3, 0.4)];
        let plan = run(&p, &t, &obs(&t, &loads, vec![pr], 1.0), &mut st);
        // CPU 0 (the A7 taking the GbE interrupt) busy: the least-loaded A7 sharing its L2.
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(2)));
    }

    #[test]
    fn same_inputs_same_plan() {
        let t = xeon();
        let p = policy(Default::default());
        let mk = || {
            vec![
                proc_obs(10, "a", t.online(), vec![flow(1, 1, 20.0 * MB)]),
                proc_obs(11, "b", t.online(), vec![flow(2, 2, 20.0 * MB)]),
            ]
        };
        let mut s1 = PolicyState::default();
        let mut s2 = PolicyState::default();
        let p1 = run(&p, &t, &obs(&t, &[], mk(), 1.0), &mut s1);
        let p2 = run(&p, &t, &obs(&t, &[], mk(), 1.0), &mut s2);
        assert_eq!(p1, p2);
        assert_eq!(p1.actions.len(), 2);
    }

    #[test]
    fn disabled_without_sock_diag_or_receive_cpus() {
        let t = xeon();
        let p = policy(Default::default());
        let mut sources = crate::sample::SourceStatus::default();
        assert!(p.disabled_reason(&t, &sources).is_none());
        sources.sources.push(crate::sample::Source {
            name: SourceKind::SockDiag,
            available: false,
            detail: "no NETLINK_SOCK_DIAG".into(),
        });
        assert!(p
            .disabled_reason(&t, &sources)
            .expect("disabled")
            .contains("sock_diag"));
        let mut bare = t.clone();
        bare.nics.clear();
        assert!(p
            .disabled_reason(&bare, &Default::default())
            .expect("disabled")
            .contains("no NIC"));
    }

    #[test]
    fn lacks_names_the_interfaces_without_a_receive_cpu() {
        let t = xeon();
        let p = policy(Default::default());
        let sources = crate::sample::SourceStatus::default();
        assert!(t.nics.iter().all(|n| !n.rx_cpus.is_empty()));
        assert!(p.lacks(&t, &sources).is_empty());
        let mut with_lo = t.clone();
        let mut lo = t.nics[0].clone();
        lo.name = "lo".into();
        lo.rx_cpus = CpuSet::default();
        lo.queues.clear();
        with_lo.nics.push(lo);
        let lacks = p.lacks(&with_lo, &sources);
        assert_eq!(lacks.len(), 1, "{lacks:?}");
        assert!(
            lacks[0].starts_with("lo: no known receive CPU"),
            "{lacks:?}"
        );
        assert!(!lacks[0].contains(&t.nics[0].name), "{lacks:?}");
    }

    #[test]
    fn config_validation_names_the_field() {
        let ok = NetAffinityConfig::default();
        assert!(ok.validate().is_ok());
        let cases: Vec<(NetAffinityConfig, &str)> = vec![
            (
                NetAffinityConfig {
                    intensive_bytes_per_s: 0,
                    ..ok.clone()
                },
                "intensive_bytes_per_s",
            ),
            (
                NetAffinityConfig {
                    cpu_load_threshold: 1.5,
                    ..ok.clone()
                },
                "cpu_load_threshold",
            ),
            (
                NetAffinityConfig {
                    cpu_load_threshold: f64::NAN,
                    ..ok.clone()
                },
                "cpu_load_threshold",
            ),
            (
                NetAffinityConfig {
                    idle_timeout_ms: 0,
                    ..ok.clone()
                },
                "idle_timeout_ms",
            ),
            (
                NetAffinityConfig {
                    pin_after_intervals: 0,
                    ..ok.clone()
                },
                "pin_after_intervals",
            ),
            (
                NetAffinityConfig {
                    repin_after_intervals: 0,
                    ..ok.clone()
                },
                "repin_after_intervals",
            ),
            (
                NetAffinityConfig {
                    active_flow_bytes_per_s: 1 << 30,
                    ..ok.clone()
                },
                "active_flow_bytes_per_s",
            ),
        ];
        for (c, field) in cases {
            assert_eq!(c.validate().expect_err(field).0, field);
        }
        let e = crate::config::Config::from_toml("[net_affinity]\ncpu_load_threshold = 2.0\n")
            .expect_err("bad value");
        assert!(
            e.to_string().contains("net_affinity.cpu_load_threshold"),
            "{e}"
        );
        // (`idle_timeout` itself became the duration key of issue 18: a typo stays unknown.)
        let e = crate::config::Config::from_toml("[net_affinity]\nidle_timout = 2\n")
            .expect_err("unknown key");
        assert!(e.to_string().contains("idle_timout"), "{e}");
        let e = crate::config::Config::from_toml("[net_affinity]\nwhen_busy = \"sometimes\"\n")
            .expect_err("bad enum");
        assert!(
            e.to_string().contains("when_busy") || e.to_string().contains("sometimes"),
            "{e}"
        );
        let c = crate::config::Config::from_toml(
            "[net_affinity]\nwhen_busy = \"leave\"\nidle_timeout_ms = 700\n",
        )
        .expect("valid");
        assert_eq!(c.net_affinity.when_busy, WhenBusy::Leave);
        assert_eq!(c.net_affinity.idle_timeout_ms, 700);
        let round = crate::config::Config::from_toml(&crate::config::Config::default().to_toml())
            .expect("default round-trips");
        assert_eq!(round, crate::config::Config::default());
    }
    fn costs(on: &[f64], beside: &[f64]) -> ClassCosts {
        let mut c = ClassCosts::default();
        on.iter().for_each(|x| c.record(Placement::On, *x));
        beside.iter().for_each(|x| c.record(Placement::Beside, *x));
        c
    }

    #[test]
    fn n7_a_class_measured_dearer_than_leaving_alone_is_never_used() {
        let dear = [0.20, 0.25, 0.22, 0.18];
        let c = costs(&dear, &[]);
        assert!(matches!(c.evidence(Placement::On), Evidence::Hurts(_)));
        let (class, why) = choose_class(&c, true, true, Placement::On).unwrap();
        assert_eq!(class, Placement::Beside, "{why}");
        assert!(why.contains("hurts"), "{why}");
        // No other class usable: left alone, and the note says why.
        let e = choose_class(&c, true, false, Placement::On).unwrap_err();
        assert!(e.contains("on the receive CPU: x1.2"), "{e}");
        // Both dearer: left alone.
        assert!(choose_class(&costs(&dear, &dear), true, true, Placement::Beside).is_err());
    }

    /// Process 10 is pinned to a cache neighbour of CPU 1, not CPU 1, for a reason saying
    /// `why`.
    fn pinned_beside_cpu_1(plan: &Plan, t: &Topology, why: &str) {
        let cpu = pinned_to(plan, 10).and_then(|c| c.first()).expect("pinned");
        assert!(cpu != 1 && t.cache_neighbours(1).contains(cpu), "CPU {cpu}");
        let reason = &plan.actions[0].reason;
        assert!(reason.contains(why), "{reason}");
    }

    #[test]
    fn n7_a_record_a_previous_daemon_learned_is_obeyed_from_the_first_pin() {
        // On seed 002's Xeon the prior is "on" (n8 below); a record saying "on" hurts here,
        // given back at start, sends the first pin beside the receive CPU.
        let t = xeon();
        let p = policy(Default::default());
        let pr = || proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)]);
        let learned_from = NetState {
            costs: costs(&[0.20, 0.25, 0.22, 0.18], &[]),
            ..Default::default()
        };
        let record = p.learned(&learned_from).expect("a record to keep");
        let mut state = PolicyState::<NetState>::default();
        p.relearn(&mut state.private, &record);
        assert_eq!(state.private.costs, learned_from.costs);
        let plan = run(&p, &t, &obs(&t, &[], vec![pr()], 1.0), &mut state);
        // Without the record, the same first interval pins on CPU 1 (n8's first case).
        pinned_beside_cpu_1(&plan, &t, "hurts");
    }

    #[test]
    fn n7_a_record_given_back_keeps_this_daemons_own_moves_the_newest() {
        let p = policy(Default::default());
        let mut st = NetState {
            costs: costs(&[0.5], &[]),
            ..Default::default()
        };
        let old = crate::learned::Learned::NetAffinityClasses(crate::learned::ClassRecord {
            on: (0..CLASS_WINDOW).map(|i| i as f64 / 100.0).collect(),
            beside: vec![f64::NAN, -0.1],
        });
        p.relearn(&mut st, &old);
        assert_eq!(st.costs.on.len(), CLASS_WINDOW, "the window holds");
        assert_eq!(
            st.costs.on.back(),
            Some(&0.5),
            "this daemon's move is the newest"
        );
        assert_eq!(
            st.costs.beside,
            VecDeque::from(vec![-0.1]),
            "finite values only"
        );
        // Nothing measured: nothing to keep.
        assert_eq!(p.learned(&NetState::default()), None);
    }

    #[test]
    fn n8_without_a_record_on_only_where_seed_002s_shape_holds() {
        // Xeon 5355: L2 shared by pairs, receive CPU quiet: on it (the paper).
        let t = xeon();
        let p = policy(Default::default());
        let pr = || proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)]);
        let plan = run(
            &p,
            &t,
            &obs(&t, &[], vec![pr()], 1.0),
            &mut PolicyState::default(),
        );
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(1)));
        // The same CPU busy with softirq (under the load threshold): beside it, its L2 pair.
        let mut o = obs(&t, &[(1, 0.6)], vec![pr()], 1.0);
        o.cpus
            .iter_mut()
            .filter(|c| c.cpu == 1)
            .for_each(|c| c.softirq = 0.55);
        let plan = run(&p, &t, &o, &mut PolicyState::default());
        pinned_beside_cpu_1(&plan, &t, "softirq");
        // One LLC over the package, private L1/L2 (this VM's shape, the 16-core device's):
        // beside the receive CPU, not on it.
        let mut t = machine("pkg:1 node:1 core:4 pu:1 l3:package").expect("model");
        let mut nic = xeon().nics[1].clone();
        nic.rx_cpus = CpuSet::single(1);
        nic.addrs = vec![ip(1, 1)];
        t.nics = vec![nic];
        let pr = proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)]);
        let plan = run(
            &p,
            &t,
            &obs(&t, &[], vec![pr], 1.0),
            &mut PolicyState::default(),
        );
        // Every CPU but the receive CPU: a one-CPU pin there buys no shared cache.
        assert_eq!(
            pinned_to(&plan, 10),
            Some(CpuSet::parse_list("0,2-3").unwrap()),
            "{}",
            plan.actions[0].reason
        );
        assert!(
            plan.actions[0].reason.contains("whole package"),
            "{}",
            plan.actions[0].reason
        );
        // Held there, the next plans keep the set (no re-pin as loads move inside it).
        let mut st = PolicyState::default();
        for i in 1..=5 {
            let loads = [(0, 0.05 + 0.1 * f64::from(i % 2)), (2, 0.3), (3, 0.1)];
            let pr = proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)]);
            let plan = run(&p, &t, &obs(&t, &loads, vec![pr], f64::from(i)), &mut st);
            if i > 1 {
                assert!(plan.actions.is_empty(), "{:?}", plan.actions);
            }
        }
        assert_eq!(
            st.held.values().next().map(|h| h.cpus.clone()),
            Some(CpuSet::parse_list("0,2-3").unwrap())
        );
    }

    #[test]
    fn n9_of_classes_that_pay_the_cheaper_is_chosen() {
        let c = costs(&[-0.10, -0.12, -0.09], &[-0.30, -0.28, -0.33]);
        assert_eq!(
            choose_class(&c, true, true, Placement::On).unwrap().0,
            Placement::Beside
        );
        let c = costs(&[-0.30, -0.28, -0.33], &[-0.10, -0.12, -0.09]);
        assert_eq!(
            choose_class(&c, true, true, Placement::Beside).unwrap().0,
            Placement::On
        );
        // One class pays, the other unmeasured: the one that pays.
        let c = costs(&[-0.30, -0.28, -0.33], &[]);
        assert_eq!(
            choose_class(&c, true, true, Placement::Beside).unwrap().0,
            Placement::On
        );
        // Nothing measured: the prior; the prior unusable: the other, to measure it.
        let c = ClassCosts::default();
        assert_eq!(
            choose_class(&c, true, true, Placement::Beside).unwrap().0,
            Placement::Beside
        );
        assert_eq!(
            choose_class(&c, true, false, Placement::Beside).unwrap().0,
            Placement::On
        );
        // Unclear (holds 1): still tried, so the record grows.
        let c = costs(&[0.1, -0.1, 0.05], &[]);
        assert!(matches!(c.evidence(Placement::On), Evidence::Unclear(_)));
        assert_eq!(
            choose_class(&c, true, false, Placement::Beside).unwrap().0,
            Placement::On
        );
    }

    #[test]
    fn a_pins_outcome_is_recorded_for_its_class() {
        // Xeon: pinned on CPU 1 at t = 1; its CPU per byte halves after the pin.
        let t = xeon();
        let p = policy(Default::default());
        let mut st = PolicyState::default();
        let pr = |share: f64| {
            let mut x = proc_obs(10, "rx", t.online(), vec![flow(1, 1, 50.0 * MB)]);
            x.cpu_share = share;
            x
        };
        let plan = run(&p, &t, &obs(&t, &[], vec![pr(0.4)], 1.0), &mut st);
        assert_eq!(pinned_to(&plan, 10), Some(CpuSet::single(1)));
        for i in 0..MEASURE_INTERVALS {
            assert!(
                st.private.costs.on.is_empty(),
                "recorded after {i} intervals"
            );
            run(
                &p,
                &t,
                &obs(&t, &[], vec![pr(0.2)], 2.0 + i as f64),
                &mut st,
            );
        }
        assert_eq!(st.private.costs.on.len(), 1);
        assert!((st.private.costs.on[0] - 0.5f64.ln()).abs() < 1e-9);
        assert!(st.private.costs.beside.is_empty());
        // Recorded once per pin.
        run(&p, &t, &obs(&t, &[], vec![pr(0.2)], 10.0), &mut st);
        assert_eq!(st.private.costs.on.len(), 1);
    }
}
