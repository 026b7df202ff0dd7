//! The judge of moves, as a pure state machine the engine feeds once per cycle: did a move
//! pay? (E7 in [`crate::engine`]; the metrics and verdict types are [`crate::verdict`]'s.)
//!
//! **Why paired probing.** A move is made *because* a process's traffic or load changed, so
//! the intervals before it describe another regime (the ramp that triggered it, often idle)
//! and a before/after comparison credits the move with the workload's own change. Instead,
//! after a short settling time the judge briefly undoes and re-applies the move in a
//! randomised pattern: the process alternates between its *on* arm (the policy's pin) and its
//! *off* arm (its own affinity, restored), one interval each, in pairs whose order is a fair
//! coin. Both arms of a pair see the same regime, a pair's two intervals are neighbours (a
//! slow drift cancels within it: for an AR(1) noise of lag-1 correlation rho the difference
//! has variance 2 sigma^2 (1 - rho), where a before/after mean difference pays
//! (1 + rho) / (1 - rho)), and because the order is random the sign of each pair's difference
//! is exchangeable under "the move does nothing": a sign-flip randomisation test is exact
//! whatever the noise's shape or correlation. That is the within-process A/B that
//! `placer ab` runs across processes.
//!
//! **The rule.** Per pair, d = ln(metric on) - ln(metric off), oriented so that d > 0 is
//! better; judged together (a plan of several processes), d is the mean of the members'
//! log ratios (no member is scaled by a before-mean of its own, so no Jensen or
//! regression-to-the-mean bias). The test looks twice, after `first_look_pairs` and after
//! `probe_pairs` pairs, spending `alpha` as 2/5 and 3/5 (Bonferroni over the looks), and
//! each look's share is split between the main metric and the guard (Bonferroni again), so
//! the whole rule, guard included, acts on a move that changes nothing with probability at
//! most `alpha` (V5). A change counts when its p-value is below its share *and* its size is
//! at least `min_effect`.
//!
//! Invariants (each tested below; a test's name starts with the ones it checks):
//! - V1: a trial that ends with fewer than [`MIN_PAIRS`] valid pairs is inconclusive, never
//!   undone (no evidence, no action);
//! - V2: the order of the arms is fixed when the trial starts, from the move's identity alone
//!   (one fair coin per pair), never from the data;
//! - V3: a trial ends with the process in the arm its verdict says: on when kept or
//!   inconclusive (a switch back on is planned if it was off), undone handed to the engine,
//!   which restores it;
//! - V4: an interval counts for an arm only when that arm was in effect for all of it (its
//!   switch was applied); an interval under any other arm spoils its pair;
//! - V5: with no effect, kept + undone happen with probability at most `alpha` (the
//!   randomisation test, alpha spent over the looks and split over main metric and guard);
//! - V6: judged together, a plan's members switch as one, and a pair's statistic is the mean
//!   of the members' log ratios;
//! - V7: the back-off after an undone move doubles with each failure of the same (policy,
//!   process), up to [`crate::verdict::MAX_BACKOFF_INTERVALS`];
//! - V8: while a process is in its off arm its affinity is not the policy's, and the engine
//!   must not count that as a lease break ([`Verifier::in_off_arm`]); a change of its
//!   affinity during the off arm (someone else's) ends the trial and releases the process;
//! - V9: a trial whose process exits or is given back by its policy ends without a verdict;
//! - V10: probing never costs a QoS app more than one interval short of its target: when a
//!   member with a QoS target (energy-qos's apps, [`Seen::qos_ratio`]) falls short of it
//!   in an off arm, and below what it achieved in its last interval on the pin, the trial
//!   ends at once, inconclusive, back on the pin (V3). Stopping only ever ends a trial
//!   without acting, so it cannot raise V5's false-action rate; it costs power only where
//!   the off arm is the worse one (the pin is the better placement for that QoS);
//! - V11: a process's own affinity is the one it had before its policy first pinned it, for
//!   as long as the policy holds it: a re-pin (a new target) does not make the previous pin
//!   its own, since the off arm restores what placer first found (on the 16-core device
//!   every re-pin was read as someone else's change 3 intervals later, and the process
//!   released);
//! - V12: an off arm puts the process back where the kernel had it before its first pin:
//!   for a pin to one CPU, its switch names the CPU the process last ran on before that
//!   pin ([`Switch::via`], when that CPU is outside the pin and inside its own affinity),
//!   for the host to set before widening to its own affinity (the Linux host journals it
//!   first, so that a daemon killed between the two steps leaves nothing pinned). (Only
//!   for one CPU: there
//!   its runnable threads already share that CPU, so moving them together to another is
//!   no worse; a wider pin's threads, spread over its CPUs, would be piled onto one.) The kernel does not move a running task off a
//!   CPU it may still use until its load balancer does, so a plain restore left the
//!   process where the pin had put it, and the off arm measured much of the pin's effect
//!   too (this VM, 2026-12-01: a worker beside a hog taking 40% of its CPU kept 0.82 of a
//!   CPU in a plain off arm, 1.0 in one that names its CPU before the pin; on/off 0.75
//!   against 0.575, the staged 0.6).

use crate::policies::PolicyKind;
use crate::sample::ProcKey;
use crate::verdict::{Comparison, Expectation, Judgement, Metric, Point, Verdict, VerdictKind};
use crate::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The fewest valid pairs a look tests on.
pub const MIN_PAIRS: usize = 4;

/// At most this many pairs the sign-flip test enumerates exactly; beyond, it draws
/// [`FLIPS`] random sign patterns (seeded by the trial: the same data give the same answer).
pub const EXACT_PAIRS: usize = 14;
/// Random sign patterns of the Monte Carlo test (its p-value's resolution is 1 / FLIPS).
pub const FLIPS: usize = 9999;

/// How a trial runs (from `[verify]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProbeSettings {
    /// Intervals after the pin before probing starts (caches and run queues settle).
    pub settle_intervals: u32,
    /// Pairs at the first look.
    pub first_look_pairs: u32,
    /// Pairs at the last look (the longest a trial probes).
    pub probe_pairs: u32,
    /// The false-action rate the whole rule allows (V5).
    pub alpha: f64,
    pub min_effect: f64,
}

impl ProbeSettings {
    /// Intervals from the pin to the last look's verdict.
    pub fn intervals_to_last_look(&self) -> u32 {
        self.settle_intervals + 2 * self.probe_pairs
    }
}

/// Which placement a process is in during a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arm {
    /// The policy's pin.
    On,
    /// The process's own affinity (the pin undone for this interval).
    Off,
}

/// What the engine does for a trial this cycle: put `proc` in `arm` (On: pin it to `cpus`
/// again; Off: restore its own affinity), as `policy`, without changing what the policy
/// holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Switch {
    pub policy: PolicyKind,
    pub proc: ProcKey,
    pub comm: String,
    pub cpus: CpuSet,
    pub arm: Arm,
    /// Off arms: the CPU to put the process on before its own affinity is restored (V12).
    pub via: Option<CpuSet>,
}

/// A pin that took effect, for [`Verifier::start`].
#[derive(Debug, Clone, PartialEq)]
pub struct NewPin {
    pub policy: PolicyKind,
    pub proc: ProcKey,
    pub comm: String,
    /// The CPUs it was pinned to.
    pub cpus: CpuSet,
    /// Its affinity before the pin.
    pub own: CpuSet,
    /// The CPU it last ran on before the pin (V12), if known.
    pub ran_on: Option<u32>,
}

/// One cycle's output of [`Verifier::observe`].
#[derive(Debug, Clone, Default)]
pub struct VerifierStep {
    /// Moves judged this cycle (one record per process; a plan's members share a trial id).
    pub verdicts: Vec<Verdict>,
    /// (policy, process) to restore for good: undone (the engine backs off).
    pub undo: Vec<(PolicyKind, ProcKey)>,
    /// Arms to set before the next interval.
    pub switches: Vec<Switch>,
    /// Processes whose affinity someone else changed during their off arm (V8): the engine
    /// releases them.
    pub released: Vec<(PolicyKind, ProcKey)>,
}

#[derive(Debug, Clone)]
struct Member {
    proc: ProcKey,
    comm: String,
    cpus: CpuSet,
    /// Per pair: the on and the off interval's point.
    on: Vec<Option<Point>>,
    off: Vec<Option<Point>>,
    /// Its own affinity, seen before the pin: what its off arm must show (V8).
    own: CpuSet,
    /// Where its off arm puts it before widening to `own` (V12).
    via: Option<CpuSet>,
    /// Achieved / target of its QoS in its last interval on the pin (V10).
    on_qos: Option<f64>,
}

#[derive(Debug, Clone)]
struct Trial {
    id: u64,
    policy: PolicyKind,
    members: Vec<Member>,
    settle_left: u32,
    /// Two arms per pair, in the order they run (V2).
    schedule: Vec<Arm>,
    /// The schedule slot the interval now ending belongs to.
    pos: usize,
    /// The arm in effect, as far as the applied switches say; None when a switch went
    /// through for some members and not others (mixed, until the next switch sets all).
    applied: Option<Arm>,
    /// A switch is planned this cycle: the next interval is under `applied` only if it
    /// is done ([`Verifier::applied`]).
    switching_to: Option<Arm>,
    spoiled: Vec<bool>,
    looks_done: u32,
}

/// The judge's state: trials running and back-offs (module doc).
#[derive(Debug, Clone, Default)]
pub struct Verifier {
    trials: Vec<Trial>,
    /// (policy, process) -> (undone moves so far, last cycle it may not move it).
    backoff: BTreeMap<(PolicyKind, ProcKey), (u32, u64)>,
    /// (policy, process) -> its affinity before the policy first pinned it, and the CPU it
    /// last ran on then, kept while the policy holds it (V11, V12).
    own: BTreeMap<(PolicyKind, ProcKey), (CpuSet, Option<u32>)>,
    next_id: u64,
}

/// What the engine knows of a process this interval, for the judge.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub point: Point,
    pub affinity: &'a CpuSet,
    /// Achieved / target of the QoS its policy promises it (None: no target, or not
    /// observable), for V10.
    pub qos_ratio: Option<f64>,
}

impl Verifier {
    pub fn new() -> Verifier {
        Verifier::default()
    }

    /// Trials running.
    pub fn trials(&self) -> usize {
        self.trials.len()
    }

    /// Whether any back-off is running or any own affinity is kept (the judge must still see
    /// the processes, to forget those gone or given back).
    pub fn remembers_processes(&self) -> bool {
        !self.backoff.is_empty() || !self.own.is_empty()
    }

    /// Whether `proc` is under trial for `policy`.
    pub fn on_trial(&self, policy: PolicyKind, proc: ProcKey) -> bool {
        self.trials
            .iter()
            .any(|t| t.policy == policy && t.members.iter().any(|m| m.proc == proc))
    }

    /// Whether `proc` was in its off arm during the interval just observed: its affinity is
    /// its own, not the policy's (V8). Asked before [`Verifier::observe`].
    pub fn in_off_arm(&self, policy: PolicyKind, proc: ProcKey) -> bool {
        self.trials.iter().any(|t| {
            // A mixed trial may have this member off: no lease check for it either.
            t.policy == policy
                && t.applied != Some(Arm::On)
                && t.members.iter().any(|m| m.proc == proc)
        })
    }

    /// (undone moves, intervals left) while `policy` must not move `proc` at `cycle`.
    pub fn backing_off(&self, policy: PolicyKind, proc: ProcKey, cycle: u64) -> Option<(u32, u64)> {
        let &(n, until) = self.backoff.get(&(policy, proc))?;
        (cycle <= until).then(|| (n, until + 1 - cycle))
    }

    /// Forgets a policy no longer configured: its trials and back-offs.
    pub fn forget_policy(&mut self, policy: PolicyKind) {
        self.trials.retain(|t| t.policy != policy);
        self.backoff.retain(|(p, _), _| *p != policy);
        self.own.retain(|(p, _), _| *p != policy);
    }

    /// Ends the trials of processes their policy no longer holds (a lease broken, a CPU
    /// gone offline, the policy gave it back): V9.
    pub fn retain_held(&mut self, held: impl Fn(PolicyKind, ProcKey) -> bool) {
        for t in &mut self.trials {
            let policy = t.policy;
            t.members.retain(|m| held(policy, m.proc));
        }
        self.trials.retain(|t| !t.members.is_empty());
        self.own.retain(|(p, k), _| held(*p, *k));
    }

    /// Ends `proc`'s trials without a verdict (its policy restored it: V9).
    pub fn end(&mut self, policy: PolicyKind, proc: ProcKey) {
        for t in self.trials.iter_mut().filter(|t| t.policy == policy) {
            t.members.retain(|m| m.proc != proc);
        }
        self.trials.retain(|t| !t.members.is_empty());
    }

    /// Starts a trial for pins that took effect in one cycle: one trial per pin, or one for
    /// all of a policy's pins of the cycle when they are judged together (V6).
    /// For a process its policy already held, what it had before its first pin counts
    /// (V11, V12).
    pub fn start(&mut self, pins: Vec<NewPin>, settings: &dyn Fn(PolicyKind) -> ProbeSettings) {
        let mut groups: BTreeMap<PolicyKind, Vec<Member>> = BTreeMap::new();
        let mut alone: Vec<(PolicyKind, Member)> = Vec::new();
        for NewPin {
            policy,
            proc,
            comm,
            cpus,
            own,
            ran_on,
        } in pins
        {
            // A new pin of a process on trial starts its trial again.
            self.end(policy, proc);
            let (own, ran_on) = self
                .own
                .entry((policy, proc))
                .or_insert((own, ran_on))
                .clone();
            let via = ran_on
                .filter(|c| cpus.len() == 1 && !cpus.contains(*c) && own.contains(*c))
                .map(CpuSet::single);
            let m = Member {
                proc,
                comm,
                cpus,
                on: Vec::new(),
                off: Vec::new(),
                own,
                via,
                on_qos: None,
            };
            if Expectation::of_policy(policy).together {
                groups.entry(policy).or_default().push(m);
            } else {
                alone.push((policy, m));
            }
        }
        let new = alone.into_iter().map(|(p, m)| (p, vec![m])).chain(groups);
        for (policy, members) in new {
            let s = settings(policy);
            let id = self.next_id;
            self.next_id += 1;
            let seed = members.iter().fold(id ^ (policy as u64) << 56, |h, m| {
                h.rotate_left(17) ^ u64::from(m.proc.pid) ^ m.proc.start_time_ticks.rotate_left(32)
            });
            self.trials.push(Trial {
                id,
                policy,
                members,
                settle_left: s.settle_intervals,
                schedule: schedule(seed, s.probe_pairs as usize),
                pos: 0,
                applied: Some(Arm::On),
                switching_to: None,
                spoiled: vec![false; s.probe_pairs as usize],
                looks_done: 0,
            });
        }
    }

    /// The outcome of this cycle's switches: done (or already so) puts the trial in the arm;
    /// anything else leaves it where it was, which spoils the next interval's pair (V4).
    /// `done(policy, proc)` says whether the switch of that process went through.
    pub fn applied(&mut self, done: impl Fn(PolicyKind, ProcKey) -> bool) {
        for t in &mut self.trials {
            if let Some(arm) = t.switching_to.take() {
                let switched = t.members.iter().filter(|m| done(t.policy, m.proc)).count();
                // All: in the arm; none: where it was; some: mixed, so the next interval
                // spoils its pair (V4) and the next planned arm is switched for every member.
                if switched == t.members.len() {
                    t.applied = Some(arm);
                } else if switched > 0 {
                    t.applied = None;
                }
            }
        }
    }

    /// Feeds the interval that just ended: records each trial's arm, judges at the looks,
    /// plans the next switches. `seen` answers a process's point and affinity (None: gone);
    /// `cycle` is the engine's cycle (back-offs count in cycles).
    pub fn observe<'a>(
        &mut self,
        seen: impl Fn(ProcKey) -> Option<Seen<'a>>,
        cycle: u64,
        settings: &dyn Fn(PolicyKind) -> ProbeSettings,
        backoff_base: u64,
    ) -> VerifierStep {
        let mut out = VerifierStep::default();
        let mut finished = Vec::new();
        for (ti, t) in self.trials.iter_mut().enumerate() {
            // V9: a member that exited leaves the trial.
            t.members.retain(|m| seen(m.proc).is_some());
            if t.members.is_empty() {
                finished.push(ti);
                continue;
            }
            let s = settings(t.policy);
            if t.applied == Some(Arm::On) {
                for m in &mut t.members {
                    m.on_qos = seen(m.proc).and_then(|sn| sn.qos_ratio);
                }
            }
            // V10: an off arm (the last settling interval may be one) that costs the QoS
            // the pin keeps stops probing; someone else's affinity in it is V8's, below.
            let own_in_off = t
                .members
                .iter()
                .all(|m| seen(m.proc).is_none_or(|sn| sn.affinity == &m.own));
            if t.applied == Some(Arm::Off) && own_in_off {
                if let Some(why) = qos_cost(t, &seen) {
                    let j = Judgement {
                        kind: VerdictKind::Inconclusive,
                        main: None,
                        guard: None,
                        why: format!("probing stopped: {why}: the pin stays, inconclusive"),
                    };
                    end_on(t, j, &mut out);
                    finished.push(ti);
                    continue;
                }
            }
            if t.settle_left > 0 {
                t.settle_left -= 1;
            } else {
                let want = t.schedule[t.pos];
                let pair = t.pos / 2;
                if t.applied != Some(want) {
                    t.spoiled[pair] = true;
                }
                let mut lease_broken = false;
                for m in &mut t.members {
                    let Some(sn) = seen(m.proc) else { continue };
                    if t.applied == Some(Arm::Off) && sn.affinity != &m.own {
                        lease_broken = true;
                    }
                    let slot = match want {
                        Arm::On => &mut m.on,
                        Arm::Off => &mut m.off,
                    };
                    if slot.len() <= pair {
                        slot.resize(pair + 1, None);
                    }
                    slot[pair] = Some(sn.point);
                }
                if lease_broken {
                    // V8: someone else chose its placement while it was off: theirs.
                    out.released
                        .extend(t.members.iter().map(|m| (t.policy, m.proc)));
                    finished.push(ti);
                    continue;
                }
                t.pos += 1;
                let pairs_done = t.pos / 2;
                let at_look = t.pos % 2 == 0
                    && (pairs_done == s.first_look_pairs as usize
                        || pairs_done == s.probe_pairs as usize);
                if at_look {
                    let last = pairs_done >= s.probe_pairs as usize;
                    // Two looks spend 2/5 and 3/5 of alpha; a single one (first look at
                    // the last) all of it.
                    let share = match (t.looks_done, last) {
                        (0, false) => 0.4,
                        (0, true) => 1.0,
                        _ => 0.6,
                    };
                    t.looks_done += 1;
                    let j = judge_trial(t, s.alpha * share, s.min_effect, last);
                    if let Some(j) = j {
                        if j.kind == VerdictKind::Undone {
                            for m in &t.members {
                                let e = self.backoff.entry((t.policy, m.proc)).or_insert((0, 0));
                                e.0 += 1;
                                let wait = crate::verdict::backoff_intervals(backoff_base, e.0);
                                e.1 = cycle + wait;
                                out.undo.push((t.policy, m.proc));
                                out.verdicts.push(verdict(t, m, &j, Some(wait)));
                            }
                        } else {
                            // V3: kept or inconclusive ends on.
                            end_on(t, j, &mut out);
                        }
                        finished.push(ti);
                        continue;
                    }
                }
            }
            // The arm of the next interval.
            let next = t.schedule[t.pos];
            if Some(next) != t.applied {
                t.switching_to = Some(next);
                out.switches.extend(t.members.iter().map(|m| Switch {
                    policy: t.policy,
                    proc: m.proc,
                    comm: m.comm.clone(),
                    cpus: m.cpus.clone(),
                    arm: next,
                    via: match next {
                        Arm::On => None,
                        Arm::Off => m.via.clone(),
                    },
                }));
            }
        }
        for ti in finished.into_iter().rev() {
            self.trials.remove(ti);
        }
        // Back-offs of processes gone are memory only.
        self.backoff.retain(|(_, k), _| seen(*k).is_some());
        out
    }
}

/// The switch that puts `m` back on its pin.
fn switch_on(policy: PolicyKind, m: &Member) -> Switch {
    Switch {
        policy,
        proc: m.proc,
        comm: m.comm.clone(),
        cpus: m.cpus.clone(),
        arm: Arm::On,
        via: None,
    }
}

/// Ends `t` with `j` (not undone): every member back on its pin (V3), a verdict each.
fn end_on(t: &Trial, j: Judgement, out: &mut VerifierStep) {
    for m in &t.members {
        if t.applied != Some(Arm::On) {
            out.switches.push(switch_on(t.policy, m));
        }
        out.verdicts.push(verdict(t, m, &j, None));
    }
}

/// `m`'s record of its trial's judgement `j`.
fn verdict(t: &Trial, m: &Member, j: &Judgement, backoff_intervals: Option<u64>) -> Verdict {
    Verdict {
        policy: t.policy,
        proc: m.proc,
        comm: m.comm.clone(),
        judgement: j.clone(),
        backoff_intervals,
        trial: Some(t.id),
    }
}

/// V10: the first member whose off arm just now fell short of its QoS target and below
/// its last interval on the pin, said in words; None when the off arm cost no QoS.
fn qos_cost<'a>(t: &Trial, seen: &impl Fn(ProcKey) -> Option<Seen<'a>>) -> Option<String> {
    t.members.iter().find_map(|m| {
        let off = seen(m.proc)?.qos_ratio?;
        let on = m.on_qos?;
        (off < 1.0 && off < on).then(|| {
            format!(
                "pid {} ({}) reached {:.2} of its QoS target in an off arm, {:.2} on the pin",
                m.proc.pid, m.comm, off, on
            )
        })
    })
}

/// The arms of `pairs` pairs: each pair on-then-off or off-then-on by a fair coin (V2).
fn schedule(seed: u64, pairs: usize) -> Vec<Arm> {
    let mut rng = crate::rng::Rng::new(seed);
    let mut v = Vec::with_capacity(2 * pairs);
    for _ in 0..pairs {
        if rng.next_u64() & 1 == 0 {
            v.extend([Arm::On, Arm::Off]);
        } else {
            v.extend([Arm::Off, Arm::On]);
        }
    }
    v
}

/// A pair's statistic for `metric`: the mean over members with both values of
/// ln(on / off), oriented so that > 0 is better (V6). None when no member has both.
fn pair_stat(t: &Trial, pair: usize, metric: Metric) -> Option<(f64, f64, f64)> {
    let (mut sum, mut n, mut on_sum, mut off_sum) = (0.0, 0usize, 0.0, 0.0);
    for m in &t.members {
        let on =
            m.on.get(pair)
                .copied()
                .flatten()
                .and_then(|p| p.value(metric));
        let off = m
            .off
            .get(pair)
            .copied()
            .flatten()
            .and_then(|p| p.value(metric));
        if let (Some(a), Some(b)) = (on, off) {
            if a > 0.0 && b > 0.0 && a.is_finite() && b.is_finite() {
                sum += (a / b).ln();
                on_sum += a;
                off_sum += b;
                n += 1;
            }
        }
    }
    if n == 0 {
        return None;
    }
    let d = sum / n as f64;
    let d = if metric.lower_is_better() { -d } else { d };
    Some((d, on_sum / n as f64, off_sum / n as f64))
}

/// The valid pairs' statistics of `metric` (pairs not spoiled, with values).
fn pair_stats(t: &Trial, metric: Metric) -> Vec<(f64, f64, f64)> {
    (0..t.pos / 2)
        .filter(|&p| !t.spoiled[p])
        .filter_map(|p| pair_stat(t, p, metric))
        .collect()
}

/// Two-sided p-value of the sign-flip randomisation test of mean(d) = 0: exact up to
/// [`EXACT_PAIRS`], else over [`FLIPS`] random sign patterns from `seed` (counting the
/// observed one, so p is never 0).
pub fn sign_flip_p(d: &[f64], seed: u64) -> f64 {
    let n = d.len();
    if n == 0 {
        return 1.0;
    }
    let observed: f64 = d.iter().sum::<f64>().abs();
    // A pattern at least as extreme as the data, up to rounding of the sums.
    let tol = 1e-12 * d.iter().map(|x| x.abs()).sum::<f64>().max(1e-300);
    if n <= EXACT_PAIRS {
        let total = 1u64 << n;
        let mut extreme = 0u64;
        for bits in 0..total {
            let s: f64 = d
                .iter()
                .enumerate()
                .map(|(i, x)| if bits >> i & 1 == 1 { -x } else { *x })
                .sum();
            if s.abs() >= observed - tol {
                extreme += 1;
            }
        }
        return extreme as f64 / total as f64;
    }
    let mut rng = crate::rng::Rng::new(seed);
    let mut extreme = 1usize;
    for _ in 0..FLIPS {
        let mut bits = rng.next_u64();
        let mut s = 0.0;
        for (i, x) in d.iter().enumerate() {
            if i % 64 == 0 && i > 0 {
                bits = rng.next_u64();
            }
            s += if bits >> (i % 64) & 1 == 1 { -x } else { *x };
        }
        if s.abs() >= observed - tol {
            extreme += 1;
        }
    }
    extreme as f64 / (FLIPS + 1) as f64
}

/// One metric's paired comparison at a look: the [`Comparison`] for the verdict (off arm as
/// "before", on arm as "after"), with its p-value; None below [`MIN_PAIRS`].
pub fn paired_comparison(
    metric: Metric,
    stats: &[(f64, f64, f64)],
    alpha: f64,
    min_effect: f64,
    seed: u64,
) -> Option<Comparison> {
    let n = stats.len();
    if n < MIN_PAIRS {
        return None;
    }
    let d: Vec<f64> = stats.iter().map(|s| s.0).collect();
    let mean = d.iter().sum::<f64>() / n as f64;
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let se = (var / n as f64).sqrt();
    let t = if se > 0.0 {
        mean / se
    } else {
        mean.signum() * f64::INFINITY
    };
    let p = sign_flip_p(&d, seed);
    // The on/off ratio in the metric's own direction (a lower-is-better metric's d was
    // negated to orient it).
    let raw = if metric.lower_is_better() {
        -mean
    } else {
        mean
    };
    let change = raw.exp() - 1.0;
    let half = crate::stats::t_critical_95((n - 1) as f64) * se;
    let ci = if metric.lower_is_better() {
        ((-mean - half).exp(), (-mean + half).exp())
    } else {
        ((mean - half).exp(), (mean + half).exp())
    };
    let beyond_noise = p < alpha;
    Some(Comparison {
        metric,
        before_mean: stats.iter().map(|s| s.2).sum::<f64>() / n as f64,
        after_mean: stats.iter().map(|s| s.1).sum::<f64>() / n as f64,
        change,
        t,
        rho: 0.0,
        significant: beyond_noise && change.abs() >= min_effect,
        beyond_noise,
        paired: Some(crate::verdict::Paired {
            pairs: n,
            p_value: p,
            alpha,
            ratio_ci95: ci,
        }),
    })
}

/// The judgement at a look, or None to probe on (not decided, not the last look).
fn judge_trial(t: &Trial, alpha_look: f64, min_effect: f64, last: bool) -> Option<Judgement> {
    let exp = Expectation::of_policy(t.policy);
    let tests = 1 + usize::from(exp.guard.is_some());
    let a = alpha_look / tests as f64;
    let seed = t.id.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ u64::from(t.looks_done);
    let main = paired_comparison(exp.metric, &pair_stats(t, exp.metric), a, min_effect, seed);
    let guard = exp
        .guard
        .and_then(|g| paired_comparison(g, &pair_stats(t, g), a, min_effect, seed ^ 0x5555));
    let kind = match (&main, &guard) {
        (_, Some(g)) if g.worse() => VerdictKind::Undone,
        (Some(m), _) if m.worse() => VerdictKind::Undone,
        (Some(m), _) if m.better() => VerdictKind::Kept,
        _ if !last => return None,
        _ => VerdictKind::Inconclusive,
    };
    let mut parts: Vec<String> = main.iter().chain(guard.iter()).map(describe).collect();
    if main.is_none() {
        // V1: no evidence.
        parts.push(format!("fewer than {MIN_PAIRS} valid on/off pairs"));
    }
    let who = if t.members.len() > 1 {
        format!("{} processes judged together, ", t.members.len())
    } else {
        String::new()
    };
    Some(Judgement {
        kind,
        why: format!("{who}paired probe: {}: {}", parts.join(", "), kind.name()),
        main,
        guard,
    })
}

fn describe(c: &Comparison) -> String {
    let Some(p) = &c.paired else {
        return format!("{} {:+.0}%", c.metric.name(), c.change * 100.0);
    };
    format!(
        "{} on/off {:+.1}% (95% {:.3}..{:.3}, {} pairs, p = {:.4} vs {:.4}{})",
        c.metric.name(),
        c.change * 100.0,
        p.ratio_ci95.0,
        p.ratio_ci95.1,
        p.pairs,
        p.p_value,
        p.alpha,
        match (c.significant, c.beyond_noise) {
            (true, _) => "",
            (false, true) => ", below the minimum effect",
            (false, false) => ", within noise",
        }
    )
}

/// How a simulated move is timed and what it changes ([`calibrate`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StagedMove {
    /// The policy whose expectation judges it (net-affinity: CPU per byte with throughput
    /// as guard; smt-energy: CPU share; energy-qos: CPU share, judged together).
    pub policy: PolicyKind,
    /// Processes moved in one plan (judged together where the policy says so).
    pub members: usize,
    /// The true relative change of the pin: on the main metric in its own direction
    /// (value x (1 + effect) is better for a higher-is-better metric); for net-affinity on
    /// throughput at unchanged CPU per byte (a receiver squeezed by a hog: only the guard
    /// sees it).
    pub effect: f64,
    /// Timed on a trigger: the process's level jumps tenfold at the move (a stream
    /// starting) and drifts down 1% per interval after it.
    pub trigger: bool,
}

/// How often each verdict came out for one [`StagedMove`] ([`calibrate`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProbeCalibration {
    pub staged: StagedMove,
    pub trials: usize,
    pub kept: usize,
    pub undone: usize,
    pub inconclusive: usize,
    /// Median intervals from the pin to the verdict.
    pub median_intervals_to_verdict: f64,
    /// The before/after rule (5 intervals each side, [`crate::verdict::judge`] and
    /// [`crate::verdict::judge_together`], the judge before this one) on the same series:
    /// kept and undone.
    pub before_after_kept: usize,
    pub before_after_undone: usize,
}

impl ProbeCalibration {
    /// Kept or undone: with no effect, the false-action rate.
    pub fn acted(&self) -> usize {
        self.kept + self.undone
    }
}

/// Runs `trials` simulated moves through the judge ([`Verifier`], the daemon's code) and, on
/// the same series, the before/after rule it replaced. Each process's metrics per interval
/// are log-AR(1) with `noise` (independent series for CPU share and bytes), the arm
/// multiplying the affected one by 1 + effect while on.
pub fn calibrate(
    noise: crate::verdict::NoiseModel,
    staged: StagedMove,
    trials: usize,
    settings: &ProbeSettings,
    seed: u64,
) -> ProbeCalibration {
    use crate::verdict::{judge, judge_together};
    let mut rng = crate::rng::Rng::new(seed);
    let mut out = ProbeCalibration {
        staged,
        trials,
        kept: 0,
        undone: 0,
        inconclusive: 0,
        median_intervals_to_verdict: f64::NAN,
        before_after_kept: 0,
        before_after_undone: 0,
    };
    let exp = Expectation::of_policy(staged.policy);
    let pinned = CpuSet::single(1);
    let own = CpuSet::first_n(2);
    let before_n = 5usize;
    let horizon = settings.intervals_to_last_look() as usize + 1;
    let mut times = Vec::with_capacity(trials);
    for trial in 0..trials {
        // Per member, two AR(1) series (CPU share, bytes) over before + after.
        let len = before_n + horizon;
        let series: Vec<[Vec<f64>; 2]> = (0..staged.members)
            .map(|_| {
                let mut one = || {
                    let mut ar = crate::rng::Ar1::start(noise.sigma_log, noise.rho, &mut rng);
                    (0..len).map(|_| ar.step(&mut rng)).collect::<Vec<f64>>()
                };
                [one(), one()]
            })
            .collect();
        let level = |t: usize| -> f64 {
            match (staged.trigger, t < before_n) {
                (true, true) => -(10f64.ln()),
                (true, false) => -0.01 * (t - before_n) as f64,
                (false, _) => 0.0,
            }
        };
        let point = |m: usize, t: usize, on: bool| -> Point {
            let f = if on { 1.0 + staged.effect } else { 1.0 };
            let (c, b) = (series[m][0][t], series[m][1][t]);
            let l = level(t);
            match staged.policy {
                // CPU per byte unchanged, throughput (and the CPU it gets) scaled.
                PolicyKind::NetAffinity => {
                    let bytes = 1e7 * (l + b).exp() * f;
                    Point {
                        cpu_share: bytes * 2e-8 * c.exp(),
                        bytes_per_s: bytes,
                        instructions_per_s: None,
                    }
                }
                _ => match exp.metric {
                    Metric::InstructionsPerCpuSecond => Point {
                        cpu_share: 1.0,
                        bytes_per_s: 0.0,
                        instructions_per_s: Some(1e9 * (l + c).exp() * f),
                    },
                    _ => Point {
                        cpu_share: 0.5 * (l + c).exp() * f,
                        bytes_per_s: 1e6 * (l + b).exp(),
                        instructions_per_s: None,
                    },
                },
            }
        };
        // The before/after rule on the same series: 5 intervals before the pin, 5 on.
        let windows: Vec<(Vec<Point>, Vec<Point>)> = (0..staged.members)
            .map(|m| {
                (
                    (0..before_n).map(|t| point(m, t, false)).collect(),
                    (before_n..2 * before_n)
                        .map(|t| point(m, t, true))
                        .collect(),
                )
            })
            .collect();
        let old = if exp.together {
            let w: Vec<(&[Point], &[Point])> = windows
                .iter()
                .map(|(b, a)| (b.as_slice(), a.as_slice()))
                .collect();
            judge_together(exp, &w, settings.min_effect)
        } else {
            judge(exp, &windows[0].0, &windows[0].1, settings.min_effect)
        };
        match old.kind {
            VerdictKind::Kept => out.before_after_kept += 1,
            VerdictKind::Undone => out.before_after_undone += 1,
            VerdictKind::Inconclusive => {}
        }
        // The judge: pinned at the end of the before-window.
        let keys: Vec<ProcKey> = (0..staged.members)
            .map(|m| ProcKey {
                pid: 1000 + m as u32,
                start_time_ticks: trial as u64,
            })
            .collect();
        let mut v = Verifier::new();
        v.next_id = seed.wrapping_add(trial as u64);
        v.start(
            keys.iter()
                .map(|&k| NewPin {
                    policy: staged.policy,
                    proc: k,
                    comm: String::new(),
                    cpus: pinned.clone(),
                    own: own.clone(),
                    ran_on: None,
                })
                .collect(),
            &|_| *settings,
        );
        let mut arm = Arm::On;
        for t in 0..horizon {
            let pts: Vec<Point> = (0..staged.members)
                .map(|m| point(m, before_n + t, arm == Arm::On))
                .collect();
            let aff = if arm == Arm::On { &pinned } else { &own };
            let step = v.observe(
                |k| {
                    let m = keys.iter().position(|x| *x == k)?;
                    Some(Seen {
                        point: pts[m],
                        affinity: aff,
                        qos_ratio: None,
                    })
                },
                t as u64,
                &|_| *settings,
                10,
            );
            if let Some(sw) = step.switches.first() {
                arm = sw.arm;
            }
            v.applied(|_, _| true);
            if let Some(vd) = step.verdicts.first() {
                match vd.judgement.kind {
                    VerdictKind::Kept => out.kept += 1,
                    VerdictKind::Undone => out.undone += 1,
                    VerdictKind::Inconclusive => out.inconclusive += 1,
                }
                times.push((t + 1) as f64);
                break;
            }
        }
    }
    out.median_intervals_to_verdict = crate::stats::median(&times).unwrap_or(f64::NAN);
    out
}

/// The staged moves `placer bench verdicts` simulates (and its test checks at 0): a single
/// process judged by CPU share, net-affinity's receiver (a loss only its throughput guard
/// sees), and energy-qos's plan of 8 processes judged together; each at effect 0, timed on a
/// trigger and not, and at -40/-20/-10/+20%.
pub fn staged_grid() -> Vec<StagedMove> {
    let mut v = Vec::new();
    for (policy, members) in [
        (PolicyKind::SmtEnergy, 1),
        (PolicyKind::NetAffinity, 1),
        (PolicyKind::EnergyQos, 8),
    ] {
        for (effect, trigger) in [
            (0.0, false),
            (0.0, true),
            (-0.4, true),
            (-0.2, true),
            (-0.1, true),
            (0.2, true),
        ] {
            v.push(StagedMove {
                policy,
                members,
                effect,
                trigger,
            });
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET: PolicyKind = PolicyKind::NetAffinity;
    const TOGETHER: PolicyKind = PolicyKind::EnergyQos;

    fn key(pid: u32) -> ProcKey {
        ProcKey {
            pid,
            start_time_ticks: 100 + u64::from(pid),
        }
    }

    fn settings() -> ProbeSettings {
        ProbeSettings {
            settle_intervals: 2,
            first_look_pairs: 12,
            probe_pairs: 24,
            alpha: 0.05,
            min_effect: 0.05,
        }
    }

    /// A world of processes whose metric per interval is `value(pid, arm, interval)`; it
    /// applies the verifier's switches (or refuses them, `refuse`), and its affinities follow
    /// the arm unless `foreign` changes one.
    struct World {
        interval: u64,
        arm: BTreeMap<ProcKey, Arm>,
        refuse_at: Option<u64>,
        foreign_at: Option<(u64, ProcKey)>,
        pinned: CpuSet,
        own: CpuSet,
        other: CpuSet,
    }

    type ValueFn = dyn Fn(u32, Arm, u64) -> Point;
    type Keys = Vec<(PolicyKind, ProcKey)>;
    /// What a run gave: verdicts, undone, released, switches.
    type Ran = (Vec<Verdict>, Keys, Keys, Vec<Switch>);

    fn run(
        v: &mut Verifier,
        w: &mut World,
        pids: &[u32],
        value: &ValueFn,
        max_intervals: u64,
    ) -> Ran {
        let s = settings();
        let (mut verdicts, mut undo, mut released, mut all) = (vec![], vec![], vec![], vec![]);
        for _ in 0..max_intervals {
            w.interval += 1;
            let aff: BTreeMap<ProcKey, CpuSet> = pids
                .iter()
                .map(|&p| {
                    let k = key(p);
                    let a = match (w.foreign_at, w.arm.get(&k)) {
                        (Some((at, fk)), _) if fk == k && w.interval >= at => w.other.clone(),
                        (_, Some(Arm::Off)) => w.own.clone(),
                        _ => w.pinned.clone(),
                    };
                    (k, a)
                })
                .collect();
            let points: BTreeMap<ProcKey, Point> = pids
                .iter()
                .map(|&p| (key(p), value(p, w.arm[&key(p)], w.interval)))
                .collect();
            let step = v.observe(
                |k| {
                    Some(Seen {
                        point: *points.get(&k)?,
                        affinity: aff.get(&k)?,
                        qos_ratio: None,
                    })
                },
                w.interval,
                &|_| s,
                10,
            );
            let refuse = w.refuse_at == Some(w.interval);
            for sw in &step.switches {
                if !refuse {
                    w.arm.insert(sw.proc, sw.arm);
                }
            }
            v.applied(|_, _| !refuse);
            verdicts.extend(step.verdicts);
            undo.extend(step.undo);
            released.extend(step.released);
            all.extend(step.switches);
            if v.trials() == 0 {
                break;
            }
        }
        (verdicts, undo, released, all)
    }

    /// One interval of a single process seen at `pt` on `aff`, with [`settings`].
    fn observe_one(v: &mut Verifier, pt: Point, aff: &CpuSet, interval: u64) -> VerifierStep {
        let s = settings();
        v.observe(
            |_| {
                Some(Seen {
                    point: pt,
                    affinity: aff,
                    qos_ratio: None,
                })
            },
            interval,
            &|_| s,
            10,
        )
    }

    /// A pin of process `pid` to `cpus` from `own`, having run on `ran_on` before.
    fn new_pin(policy: PolicyKind, pid: u32, cpus: &str, own: &str, ran_on: Option<u32>) -> NewPin {
        NewPin {
            policy,
            proc: key(pid),
            comm: format!("p{pid}"),
            cpus: CpuSet::parse_list(cpus).unwrap(),
            own: CpuSet::parse_list(own).unwrap(),
            ran_on,
        }
    }

    fn world(pids: &[u32]) -> World {
        World {
            interval: 0,
            arm: pids.iter().map(|&p| (key(p), Arm::On)).collect(),
            refuse_at: None,
            foreign_at: None,
            pinned: CpuSet::parse_list("1").unwrap(),
            own: CpuSet::parse_list("0-1").unwrap(),
            other: CpuSet::parse_list("0").unwrap(),
        }
    }

    fn start(v: &mut Verifier, policy: PolicyKind, pids: &[u32]) {
        let pins = pids
            .iter()
            .map(|&p| new_pin(policy, p, "1", "0-1", Some(0)))
            .collect();
        v.start(pins, &|_| settings());
    }

    /// Noise: a deterministic AR(1) of the log per (pid, interval) from `seed`.
    fn noise(seed: u64, sigma: f64, rho: f64, n: usize) -> Vec<f64> {
        let mut rng = crate::rng::Rng::new(seed);
        let mut ar = crate::rng::Ar1::start(sigma, rho, &mut rng);
        (0..n).map(|_| ar.step(&mut rng)).collect()
    }

    fn cpu_per_byte_point(cpb: f64) -> Point {
        Point {
            cpu_share: cpb * 1e6,
            bytes_per_s: 1e6,
            instructions_per_s: None,
        }
    }

    #[test]
    fn v2_the_schedule_is_balanced_within_pairs_and_fixed_by_the_seed() {
        let a = schedule(7, 24);
        assert_eq!(a, schedule(7, 24));
        assert_ne!(a, schedule(8, 24), "another move, another order");
        for pair in a.chunks(2) {
            assert_ne!(pair[0], pair[1], "each pair has one interval of each arm");
        }
        let on_first = a.chunks(2).filter(|p| p[0] == Arm::On).count();
        assert!(
            (4..=20).contains(&on_first),
            "a fair coin: {on_first} of 24"
        );
    }

    #[test]
    fn v3_v4_a_harmful_move_is_undone_and_a_good_one_kept_and_left_on() {
        // CPU per byte 30% higher on the pin: undone.
        let mut v = Verifier::new();
        start(&mut v, NET, &[10]);
        let n = noise(1, 0.05, 0.3, 200);
        let harm = move |_: u32, arm: Arm, i: u64| {
            let base = n[i as usize].exp();
            cpu_per_byte_point(base * if arm == Arm::On { 1.3 } else { 1.0 })
        };
        let mut w = world(&[10]);
        let (verdicts, undo, _, _) = run(&mut v, &mut w, &[10], &harm, 100);
        assert_eq!(verdicts.len(), 1);
        assert_eq!(
            verdicts[0].judgement.kind,
            VerdictKind::Undone,
            "{:?}",
            verdicts[0].judgement.why
        );
        assert_eq!(undo, vec![(NET, key(10))]);
        assert!(v.backing_off(NET, key(10), w.interval).is_some());

        // 30% lower: kept, and the process ends on its pin (V3).
        let mut v = Verifier::new();
        start(&mut v, NET, &[11]);
        let n = noise(2, 0.05, 0.3, 200);
        let good = move |_: u32, arm: Arm, i: u64| {
            let base = n[i as usize].exp();
            cpu_per_byte_point(base * if arm == Arm::On { 0.7 } else { 1.0 })
        };
        let mut w = world(&[11]);
        let (verdicts, undo, _, _) = run(&mut v, &mut w, &[11], &good, 100);
        assert_eq!(
            verdicts[0].judgement.kind,
            VerdictKind::Kept,
            "{}",
            verdicts[0].judgement.why
        );
        assert!(undo.is_empty());
        assert_eq!(w.arm[&key(11)], Arm::On, "kept ends on");
        // Decided at the first look: 2 settling + 24 intervals.
        assert!(w.interval <= 2 + 24 + 1, "decided early: {}", w.interval);
    }

    #[test]
    fn v3_an_inconclusive_trial_ends_on() {
        let mut v = Verifier::new();
        start(&mut v, NET, &[12]);
        let n = noise(3, 0.3, 0.5, 200);
        let null = move |_: u32, _: Arm, i: u64| cpu_per_byte_point(n[i as usize].exp());
        let mut w = world(&[12]);
        let (verdicts, undo, _, switches) = run(&mut v, &mut w, &[12], &null, 200);
        assert_eq!(verdicts.len(), 1);
        if verdicts[0].judgement.kind == VerdictKind::Inconclusive {
            assert_eq!(w.arm[&key(12)], Arm::On);
        }
        assert!(undo.len() <= 1);
        assert!(switches.iter().any(|s| s.arm == Arm::Off), "it probed");
        assert_eq!(w.interval, u64::from(settings().intervals_to_last_look()));
    }

    #[test]
    fn v1_too_few_valid_pairs_is_inconclusive_never_undone() {
        // CPU per byte is undefined without bytes: no pair is valid.
        let mut v = Verifier::new();
        start(&mut v, NET, &[13]);
        let none = |_: u32, _: Arm, _: u64| Point {
            cpu_share: 0.5,
            bytes_per_s: 0.0,
            instructions_per_s: None,
        };
        let mut w = world(&[13]);
        let (verdicts, undo, _, _) = run(&mut v, &mut w, &[13], &none, 200);
        assert_eq!(verdicts[0].judgement.kind, VerdictKind::Inconclusive);
        assert!(verdicts[0].judgement.why.contains("fewer than"));
        assert!(undo.is_empty());
    }

    #[test]
    fn v4_a_refused_switch_spoils_its_pair() {
        let mut v = Verifier::new();
        start(&mut v, NET, &[14]);
        let mut w = world(&[14]);
        // Every switch refused: the process stays on; every pair that needed an off
        // interval is spoiled, so nothing is judged on a single arm.
        w.refuse_at = None;
        let n = noise(4, 0.05, 0.3, 200);
        let f = move |_: u32, arm: Arm, i: u64| {
            cpu_per_byte_point(n[i as usize].exp() * if arm == Arm::On { 1.5 } else { 1.0 })
        };
        let s = settings();
        for i in 1..=u64::from(s.intervals_to_last_look()) {
            w.interval = i;
            let pt = f(14, w.arm[&key(14)], i);
            let step = observe_one(&mut v, pt, &w.pinned.clone(), i);
            v.applied(|_, _| false);
            if let Some(vd) = step.verdicts.first() {
                assert_eq!(
                    vd.judgement.kind,
                    VerdictKind::Inconclusive,
                    "{}",
                    vd.judgement.why
                );
                return;
            }
        }
        panic!("no verdict at the last look");
    }

    #[test]
    fn v4_v8_a_switch_done_for_some_members_only_leaves_the_arm_mixed_until_all_switch() {
        let mut v = Verifier::new();
        start(&mut v, TOGETHER, &[70, 71]);
        let s = settings();
        let aff = CpuSet::parse_list("1").unwrap();
        let pt = Point {
            cpu_share: 0.5,
            bytes_per_s: 0.0,
            instructions_per_s: None,
        };
        let seen = |_| {
            Some(Seen {
                point: pt,
                affinity: &aff,
                qos_ratio: None,
            })
        };
        // Through settling to the first switch to the off arm.
        let mut i = 0;
        let first = loop {
            i += 1;
            let step = v.observe(seen, i, &|_| s, 10);
            if let Some(sw) = step.switches.first() {
                break sw.arm;
            }
            v.applied(|_, _| true);
        };
        assert!(i < 10, "probing starts");
        // From the pin's on arm, the first switch is to the off arm.
        assert_eq!(first, Arm::Off);
        // Only pid 70 switched: mixed, so neither member is lease-checked.
        v.applied(|_, k| k == key(70));
        assert!(v.in_off_arm(TOGETHER, key(70)) && v.in_off_arm(TOGETHER, key(71)));
        // The next interval cannot count for either arm, and the next step switches every
        // member to its planned arm, whatever it is.
        let step = v.observe(seen, i + 1, &|_| s, 10);
        assert!(v.trials[0].spoiled[0], "the mixed interval spoils its pair");
        assert_eq!(step.switches.len(), 2, "{:?}", step.switches);
        v.applied(|_, _| true);
        assert!(v.trials[0].applied.is_some());
    }

    #[test]
    fn v5_no_effect_is_acted_on_at_most_alpha_even_timed_on_a_trigger() {
        // The regime changes at the move (a stream starts: the level jumps tenfold and
        // keeps ramping), with strong serial correlation; the arms do nothing. A
        // before/after judge credits the move with the ramp; the paired probe must not.
        let trials = 300;
        let mut acted = 0;
        for seed in 0..trials {
            let mut v = Verifier::new();
            start(&mut v, NET, &[20]);
            let n = noise(1000 + seed, 0.22, 0.55, 200);
            let ramp = move |_: u32, _: Arm, i: u64| {
                cpu_per_byte_point((n[i as usize] - 0.01 * i as f64).exp() * 10.0)
            };
            let mut w = world(&[20]);
            let (verdicts, _, _, _) = run(&mut v, &mut w, &[20], &ramp, 200);
            acted += usize::from(verdicts[0].judgement.kind != VerdictKind::Inconclusive);
        }
        // alpha = 5%: at 300 trials the 99.9% bound of Binomial(300, 0.05) is 28.
        assert!(acted <= 28, "acted on {acted} of {trials} null moves");
    }

    #[test]
    fn v6_judged_together_members_switch_as_one_and_the_mean_log_ratio_decides() {
        let mut v = Verifier::new();
        start(&mut v, TOGETHER, &[30, 31, 32]);
        assert_eq!(v.trials(), 1, "one plan, one trial");
        // One member loses 40% of its CPU share, the others gain 10%: the mean log ratio
        // is (ln 0.6 + 2 ln 1.1) / 3 < 0: undone, all three.
        let f = |pid: u32, arm: Arm, i: u64| {
            let wob = 1.0 + 0.01 * ((i * 7 + u64::from(pid)) % 5) as f64;
            let r = match (pid, arm) {
                (30, Arm::On) => 0.6,
                (_, Arm::On) => 1.1,
                _ => 1.0,
            };
            Point {
                cpu_share: 0.5 * r * wob,
                bytes_per_s: 0.0,
                instructions_per_s: None,
            }
        };
        let mut w = world(&[30, 31, 32]);
        let (verdicts, undo, _, switches) = run(&mut v, &mut w, &[30, 31, 32], &f, 200);
        assert_eq!(verdicts.len(), 3);
        assert!(verdicts
            .iter()
            .all(|v| v.judgement.kind == VerdictKind::Undone));
        assert!(verdicts.iter().all(|x| x.trial == verdicts[0].trial));
        assert_eq!(undo.len(), 3);
        // Every switch moved all three.
        let mut by_arm: BTreeMap<(usize, Arm), usize> = BTreeMap::new();
        for (i, chunk) in switches.chunks(3).enumerate() {
            for s in chunk {
                *by_arm.entry((i, s.arm)).or_default() += 1;
            }
        }
        assert!(by_arm.values().all(|&n| n == 3), "{by_arm:?}");
    }

    #[test]
    fn v7_backoff_doubles_per_undone_move() {
        let mut v = Verifier::new();
        let f =
            |_: u32, arm: Arm, _: u64| cpu_per_byte_point(if arm == Arm::On { 2.0 } else { 1.0 });
        let mut waits = Vec::new();
        let mut w = world(&[40]);
        for _ in 0..3 {
            start(&mut v, NET, &[40]);
            w.arm.insert(key(40), Arm::On);
            let (verdicts, _, _, _) = run(&mut v, &mut w, &[40], &f, 200);
            waits.push(verdicts[0].backoff_intervals.unwrap());
        }
        assert_eq!(waits, vec![10, 20, 40]);
    }

    #[test]
    fn v8_off_arm_is_no_lease_break_but_a_foreign_change_in_it_releases() {
        let f = |_: u32, _: Arm, i: u64| cpu_per_byte_point(1.0 + 0.01 * (i % 3) as f64);
        // Its own affinity in the off arms: probed to the end, and the engine is told
        // which intervals were off.
        let mut v = Verifier::new();
        start(&mut v, NET, &[50]);
        let mut w = world(&[50]);
        let (verdicts, _, released, switches) = run(&mut v, &mut w, &[50], &f, 200);
        assert!(released.is_empty());
        assert_eq!(verdicts.len(), 1);
        assert!(switches.iter().any(|s| s.arm == Arm::Off));
        let mut v = Verifier::new();
        start(&mut v, NET, &[50]);
        let (pinned, own) = (
            CpuSet::parse_list("1").unwrap(),
            CpuSet::parse_list("0-1").unwrap(),
        );
        let mut arm = Arm::On;
        let mut saw_off = false;
        for i in 1..100u64 {
            let off = v.in_off_arm(NET, key(50));
            assert_eq!(off, arm == Arm::Off, "the engine's view matches the arm");
            saw_off |= off;
            // Someone else moves it after the first off interval.
            let aff = if saw_off {
                CpuSet::parse_list("0").unwrap()
            } else if off {
                own.clone()
            } else {
                pinned.clone()
            };
            let pt = f(50, arm, i);
            let step = observe_one(&mut v, pt, &aff, i);
            for sw in &step.switches {
                arm = sw.arm;
            }
            v.applied(|_, _| true);
            if !step.released.is_empty() {
                assert!(saw_off);
                assert_eq!(step.released, vec![(NET, key(50))]);
                assert!(step.verdicts.is_empty() && step.switches.is_empty());
                assert_eq!(v.trials(), 0);
                return;
            }
        }
        panic!("the foreign change was not seen");
    }

    /// A re-pin (a new target while held) keeps the affinity the process had before its
    /// first pin: its off arm, which restores that, is no lease break; once its policy no
    /// longer holds it, a new pin takes what is seen then.
    #[test]
    fn v11_a_re_pin_keeps_the_affinity_before_the_first_pin() {
        let f = |_: u32, _: Arm, i: u64| cpu_per_byte_point(1.0 + 0.01 * (i % 3) as f64);
        let mut v = Verifier::new();
        start(&mut v, NET, &[70]);
        // Pinned to 1 from 0-1; a few intervals later re-pinned to 0, seen then on 1 (the
        // first pin): the start is told "1" as the affinity before.
        for i in 1..=3 {
            observe_one(
                &mut v,
                f(70, Arm::On, i),
                &CpuSet::parse_list("1").unwrap(),
                i,
            );
            v.applied(|_, _| true);
        }
        let repin = vec![new_pin(NET, 70, "0", "1", Some(1))];
        v.start(repin.clone(), &|_| settings());
        // Its off arms restore 0-1 (what placer first found): probed to a verdict.
        let mut w = world(&[70]);
        w.pinned = CpuSet::parse_list("0").unwrap();
        let (verdicts, _, released, switches) = run(&mut v, &mut w, &[70], &f, 200);
        assert!(switches.iter().any(|s| s.arm == Arm::Off));
        assert!(
            released.is_empty(),
            "the restored first affinity read as a lease break"
        );
        assert_eq!(verdicts.len(), 1);
        // Given back (no longer held): forgotten, so a later pin takes what it sees then.
        v.retain_held(|_, _| false);
        assert!(!v.remembers_processes());
        v.start(repin, &|_| settings());
        let mut w = world(&[70]);
        w.pinned = CpuSet::parse_list("0").unwrap();
        w.own = CpuSet::parse_list("1").unwrap();
        let (_, _, released, _) = run(&mut v, &mut w, &[70], &f, 200);
        assert!(
            released.is_empty(),
            "the affinity seen at a fresh pin is its own"
        );
    }

    /// An off arm names the CPU the process ran on before its first pin, when that CPU is
    /// outside the pin and inside its own affinity, so the host puts it back there before
    /// widening its affinity; on arms name none; a re-pin keeps the first pin's CPU.
    #[test]
    fn v12_an_off_arm_puts_the_process_back_where_it_ran_before_its_first_pin() {
        let f = |_: u32, _: Arm, i: u64| cpu_per_byte_point(1.0 + 0.01 * (i % 3) as f64);
        let mut v = Verifier::new();
        start(&mut v, NET, &[90]); // pinned to 1 from 0-1, ran on 0 before
        let (_, _, _, switches) = run(&mut v, &mut world(&[90]), &[90], &f, 200);
        let zero = CpuSet::parse_list("0").unwrap();
        assert!(switches.iter().any(|s| s.arm == Arm::Off));
        for s in &switches {
            match s.arm {
                Arm::Off => assert_eq!(s.via.as_ref(), Some(&zero), "{s:?}"),
                Arm::On => assert_eq!(s.via, None, "{s:?}"),
            }
        }
        // It ran on a CPU of the pin, or outside its own affinity, or the pin is wider
        // than one CPU (its threads would be piled onto one): no CPU to name.
        for (pin, own, ran_on) in [
            ("1", "0-1", Some(1)),
            ("1", "0-1", Some(7)),
            ("1", "0-1", None),
            ("1-2", "0-3", Some(0)),
        ] {
            let mut v = Verifier::new();
            v.start(vec![new_pin(NET, 91, pin, own, ran_on)], &|_| settings());
            let mut w = world(&[91]);
            w.pinned = CpuSet::parse_list(pin).unwrap();
            w.own = CpuSet::parse_list(own).unwrap();
            let (_, _, released, switches) = run(&mut v, &mut w, &[91], &f, 200);
            assert!(
                released.is_empty(),
                "{pin}: its off arms are its own affinity"
            );
            assert!(switches.iter().any(|s| s.arm == Arm::Off));
            assert!(switches.iter().all(|s| s.via.is_none()), "{pin} {ran_on:?}");
        }
        // A re-pin while held, said to have run on 1 with affinity 1 (the first pin's
        // doing): what it had before the first pin counts (0-1, ran on 0).
        let mut v = Verifier::new();
        start(&mut v, NET, &[92]);
        v.start(vec![new_pin(NET, 92, "1", "1", Some(1))], &|_| settings());
        let (_, _, _, switches) = run(&mut v, &mut world(&[92]), &[92], &f, 200);
        assert!(switches
            .iter()
            .filter(|s| s.arm == Arm::Off)
            .all(|s| s.via.as_ref() == Some(&zero)));
    }

    /// Runs a plan of pids 80 and 81 judged together whose QoS ratio is `qos(pid, arm)`,
    /// until its verdict: (intervals seen off, the verdicts, the arm it ends in).
    fn run_qos(qos: &dyn Fn(u32, Arm) -> Option<f64>) -> (usize, Vec<Verdict>, Arm) {
        let mut v = Verifier::new();
        start(&mut v, TOGETHER, &[80, 81]);
        let s = settings();
        let (pinned, own) = (
            CpuSet::parse_list("1").unwrap(),
            CpuSet::parse_list("0-1").unwrap(),
        );
        let (mut arm, mut offs) = (Arm::On, 0);
        for i in 1..200u64 {
            offs += usize::from(arm == Arm::Off);
            let aff = if arm == Arm::Off { &own } else { &pinned };
            // The arms differ by noise only on the judged metric.
            let pt = Point {
                cpu_share: 0.5 + 0.01 * (i % 3) as f64,
                bytes_per_s: 0.0,
                instructions_per_s: None,
            };
            let step = v.observe(
                |k| {
                    Some(Seen {
                        point: pt,
                        affinity: aff,
                        qos_ratio: qos(k.pid, arm),
                    })
                },
                i,
                &|_| s,
                10,
            );
            for sw in &step.switches {
                arm = sw.arm;
            }
            v.applied(|_, _| true);
            if !step.verdicts.is_empty() {
                assert_eq!(v.trials(), 0);
                return (offs, step.verdicts, arm);
            }
        }
        panic!("no verdict");
    }

    #[test]
    fn v10_an_off_arm_that_costs_a_qos_target_ends_probing_on_the_pin() {
        // pid 80 meets its target on the pin (1.05) and misses it off (0.90): one off
        // interval, then inconclusive for the whole plan, back on the pin.
        let (offs, verdicts, arm) = run_qos(&|pid, arm| match (pid, arm) {
            (80, Arm::Off) => Some(0.90),
            (80, Arm::On) => Some(1.05),
            _ => Some(1.0),
        });
        assert_eq!(offs, 1, "one off interval: {}", verdicts[0].judgement.why);
        assert_eq!(verdicts.len(), 2);
        for v in &verdicts {
            assert_eq!(v.judgement.kind, VerdictKind::Inconclusive);
            assert!(v.backoff_intervals.is_none());
            assert!(
                v.judgement.why.contains("pid 80") && v.judgement.why.contains("0.90"),
                "{}",
                v.judgement.why
            );
        }
        assert_eq!(arm, Arm::On, "ends on the pin (V3)");
        // Short of the target in both arms, but no worse off: the off arm costs nothing
        // the pin keeps, so probing goes on to a look.
        let (offs, verdicts, _) = run_qos(&|pid, arm| match (pid, arm) {
            (80, Arm::Off) => Some(0.90),
            (80, Arm::On) => Some(0.85),
            _ => Some(1.0),
        });
        assert!(offs >= 12, "probed to a look: {offs} off intervals");
        assert!(!verdicts[0].judgement.why.contains("probing stopped"));
        // At its target off (the pin has headroom to spare): probing goes on.
        let (offs, _, _) = run_qos(&|_, arm| Some(if arm == Arm::On { 1.3 } else { 1.0 }));
        assert!(offs >= 12, "{offs}");
        // No QoS known: as before V10.
        let (offs, _, _) = run_qos(&|_, _| None);
        assert!(offs >= 12, "{offs}");
    }

    #[test]
    fn v9_an_exited_process_or_a_policy_restore_ends_the_trial_without_verdict() {
        let mut v = Verifier::new();
        start(&mut v, NET, &[60]);
        let s = settings();
        let step = v.observe(|_| None, 1, &|_| s, 10);
        assert!(step.verdicts.is_empty() && step.undo.is_empty());
        assert_eq!(v.trials(), 0);
        start(&mut v, NET, &[61]);
        assert!(v.on_trial(NET, key(61)));
        v.end(NET, key(61));
        assert_eq!(v.trials(), 0);
    }

    #[test]
    fn the_sign_flip_test_is_exact_and_deterministic() {
        // All 6 positive: 2 of 64 patterns (all +, all -) are as extreme.
        assert!((sign_flip_p(&[1.0; 6], 0) - 2.0 / 64.0).abs() < 1e-12);
        // Symmetric data: p = 1.
        assert!((sign_flip_p(&[1.0, -1.0, 2.0, -2.0], 0) - 1.0).abs() < 1e-12);
        // Monte Carlo beyond EXACT_PAIRS: the same seed gives the same p, a strong effect a
        // small one.
        let d: Vec<f64> = (0..24).map(|i| 0.1 + 0.01 * (i % 3) as f64).collect();
        assert_eq!(sign_flip_p(&d, 5), sign_flip_p(&d, 5));
        assert!(sign_flip_p(&d, 5) < 0.001);
    }

    #[test]
    fn v5_the_simulated_grid_acts_on_trigger_timed_null_moves_no_more_than_chance() {
        // The mechanism the issue asked for: a null move timed on a trigger is not judged
        // kept more than chance (the before/after rule is, on the same series), alone, with
        // a guard, and judged together.
        let noise = crate::verdict::NoiseModel {
            sigma_log: 0.2173,
            rho: 0.554,
        };
        let s = settings();
        for (policy, members) in [
            (PolicyKind::SmtEnergy, 1),
            (PolicyKind::NetAffinity, 1),
            (PolicyKind::EnergyQos, 8),
        ] {
            let staged = StagedMove {
                policy,
                members,
                effect: 0.0,
                trigger: true,
            };
            let c = calibrate(noise, staged, 200, &s, 7);
            assert_eq!(c.kept + c.undone + c.inconclusive, 200);
            // 99.9% bound of Binomial(200, 0.05): 22.
            assert!(c.acted() <= 22, "{policy}: {c:?}");
            assert!(
                c.before_after_kept + c.before_after_undone > c.acted(),
                "the old rule is fooled by the trigger: {c:?}"
            );
        }
        // And a large harm is found: -40% through the guard alone.
        let staged = StagedMove {
            policy: PolicyKind::NetAffinity,
            members: 1,
            effect: -0.4,
            trigger: true,
        };
        let c = calibrate(noise, staged, 100, &s, 8);
        assert!(c.undone >= 90, "{c:?}");
        assert_eq!(c.kept, 0, "{c:?}");
    }
}
