//! Baseline schedulers: what the kernel does without placer.
//!
//! `linux-default` (CFS as seed 001 Table 1 and the kernel's select_task_rq/load_balance
//! describe it, simplified):
//! - a new task (or one whose affinity no longer holds its CPU) goes to the idlest place:
//!   a fully idle core (every SMT thread idle), in the package with the least load, then
//!   an idle SMT thread, then the least loaded CPU; higher capacity first on asymmetric
//!   machines; ties broken by the host's seeded PRNG;
//! - a woken task stays on its previous CPU if idle, else takes an idle CPU of the same
//!   LLC (select_idle_sibling), else stays; a network reader, woken by the softirq of its
//!   receive CPU, is placed as wake_affine does it (`select_wake_affine`: towards the
//!   waker's CPU when that looks idle, softirq time not counting);
//! - every `balance_interval_ms`: an idle CPU pulls a task from the CPU with the most
//!   runnable tasks; a fully idle core takes one thread of a core whose threads are all
//!   busy; and a task moves from the busiest to the idlest CPU when their loads (sum of
//!   tasks' utilisation averages) differ by more than `imbalance_ratio`.
//!
//! It never looks at IRQs, softirq time or cache contention.
//!
//! `eas` (CAL E): on asymmetric machines, while no CPU is over `eas_overutilized` of its
//! capacity, every woken or new task (and every runnable task at each balance interval,
//! standing in for its wakeups) goes to the CPU, among its previous CPU and each
//! performance domain's CPU with the most spare capacity, that minimises the energy
//! model's estimate `sum over domains of cost(opp) * sum(util) / capacity`, with the OPP
//! chosen schedutil-like; it moves only when that saves more than `eas_margin`. When
//! overutilized, or on symmetric machines, it is `linux-default`. Both run the
//! machine's DVFS domains under schedutil (the topology's governor).

use crate::machine::volts_at;
use crate::workload::Kind;
use crate::world::SimHost;

pub use crate::world::Baseline;

impl Baseline {
    pub fn parse(s: &str) -> Option<Baseline> {
        match s {
            "linux-default" | "linux" | "cfs" => Some(Baseline::LinuxDefault),
            "eas" => Some(Baseline::Eas),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Baseline::LinuxDefault => "linux-default",
            Baseline::Eas => "eas",
        }
    }
}

fn capacity(h: &SimHost, c: usize) -> f64 {
    crate::machine::capacity(&h.world.params, &h.world.m.cpus[c])
}

struct Load {
    nr: Vec<u32>,
    util: Vec<f64>,
    /// Runnable placed tasks per CPU.
    on: Vec<Vec<usize>>,
}

fn loads(h: &SimHost) -> Load {
    let n = h.world.m.cpus.len();
    let mut l = Load {
        nr: vec![0; n],
        util: vec![0.0; n],
        on: vec![Vec::new(); n],
    };
    for (i, t) in h.world.tasks.iter().enumerate() {
        if t.runnable && t.placed {
            l.nr[t.cpu] += 1;
            l.util[t.cpu] += t.util_avg.max(0.05);
            l.on[t.cpu].push(i);
        }
    }
    l
}

fn allowed_idx(h: &SimHost, ti: usize) -> Vec<usize> {
    let mut v: Vec<usize> = h.world.tasks[ti]
        .allowed
        .iter()
        .filter_map(|id| h.world.m.idx(id))
        .collect();
    if v.is_empty() {
        v = (0..h.world.m.cpus.len()).collect();
    }
    v
}

fn core_idle(h: &SimHost, l: &Load, c: usize) -> bool {
    l.nr[c] == 0 && h.world.m.cpus[c].siblings.iter().all(|&s| l.nr[s] == 0)
}

/// The idlest allowed CPU for a new task.
fn select_idlest(h: &mut SimHost, l: &Load, ti: usize) -> usize {
    let cands = allowed_idx(h, ti);
    let mut pkg_load = vec![0.0; h.world.m.n_packages];
    for (c, info) in h.world.m.cpus.iter().enumerate() {
        pkg_load[info.package] += l.util[c] + l.nr[c] as f64;
    }
    // Rank: (class, -capacity, package load), then a random tie-break.
    let mut best: Vec<usize> = Vec::new();
    let mut best_key = (u8::MAX, f64::INFINITY, f64::INFINITY);
    for &c in &cands {
        let class = if core_idle(h, l, c) {
            0
        } else if l.nr[c] == 0 {
            1
        } else {
            2
        };
        let key = (
            class,
            -capacity(h, c),
            if class == 2 {
                l.util[c] + l.nr[c] as f64
            } else {
                pkg_load[h.world.m.cpus[c].package]
            },
        );
        let cmp = (key.0.cmp(&best_key.0))
            .then(key.1.total_cmp(&best_key.1))
            .then(key.2.total_cmp(&best_key.2));
        match cmp {
            std::cmp::Ordering::Less => {
                best_key = key;
                best.clear();
                best.push(c);
            }
            std::cmp::Ordering::Equal => best.push(c),
            _ => {}
        }
    }
    let k = h.world.rng.below(best.len());
    best.get(k).copied().unwrap_or(0)
}

/// Wakeup: previous CPU if idle, else an idle CPU in its LLC (idle core first), else stay.
fn select_wake(h: &mut SimHost, l: &Load, ti: usize) -> usize {
    let prev = h.world.tasks[ti].cpu;
    if l.nr[prev] == 0 {
        return prev;
    }
    let llc = h.world.m.cpus[prev].llc;
    idle_sibling(h, ti, llc, |c| l.nr[c] == 0).unwrap_or(prev)
}

/// select_idle_sibling's scan: a random idle allowed CPU of LLC `llc` whose whole core is
/// idle, else any idle one; None when there is none (`idle` says which CPUs are idle).
fn idle_sibling(
    h: &mut SimHost,
    ti: usize,
    llc: usize,
    idle: impl Fn(usize) -> bool,
) -> Option<usize> {
    let cands: Vec<usize> = allowed_idx(h, ti)
        .into_iter()
        .filter(|&c| h.world.m.cpus[c].llc == llc && idle(c))
        .collect();
    let idle_core: Vec<usize> = cands
        .iter()
        .copied()
        .filter(|&c| h.world.m.cpus[c].siblings.iter().all(|&s| idle(s)))
        .collect();
    let pool = if idle_core.is_empty() {
        cands
    } else {
        idle_core
    };
    if pool.is_empty() {
        return None;
    }
    let k = h.world.rng.below(pool.len());
    Some(pool[k])
}

/// Wake-up of a task by CPU `waker` (a reader woken by the softirq that queued its data),
/// as Linux's select_task_rq_fair does it: wake_affine_idle picks the waker's CPU when it
/// looks idle and shares the LLC with the task's previous CPU, unless the previous CPU is
/// idle itself (then it stays); otherwise the previous CPU is the target. Then
/// select_idle_sibling: the target if idle, else the previous CPU if idle and in the
/// target's LLC, else an idle CPU of the target's LLC (an idle core first), else the
/// target. Softirq time is invisible here: a CPU busy only with softirq has no runnable
/// task and counts as idle, as the kernel's idle_cpu() sees it.
fn select_wake_affine(h: &mut SimHost, l: &Load, ti: usize, waker: usize) -> usize {
    let prev = h.world.tasks[ti].cpu;
    // The task is counted on its previous CPU; it does not make that CPU busy for itself.
    let idle = |c: usize| l.nr[c].saturating_sub(u32::from(c == prev)) == 0;
    let target = if idle(waker) && h.world.m.share_cache(waker, prev) && !idle(prev) {
        waker
    } else {
        prev
    };
    if idle(target) {
        return target;
    }
    if idle(prev) && h.world.m.share_cache(prev, target) {
        return prev;
    }
    let llc = h.world.m.cpus[target].llc;
    idle_sibling(h, ti, llc, idle).unwrap_or(target)
}

fn move_task(h: &mut SimHost, l: &mut Load, ti: usize, to: usize) {
    let t = &mut h.world.tasks[ti];
    if t.placed && t.runnable {
        l.nr[t.cpu] = l.nr[t.cpu].saturating_sub(1);
        l.util[t.cpu] -= t.util_avg.max(0.05);
        l.on[t.cpu].retain(|&x| x != ti);
    }
    t.cpu = to;
    t.placed = true;
    if t.runnable {
        l.nr[to] += 1;
        l.util[to] += t.util_avg.max(0.05);
        l.on[to].push(ti);
    }
    // First touch: memory lands on the node of the first CPU the process runs on.
    let pi = t.proc;
    if !h.world.procs[pi].mem_placed {
        let spec = &h.world.specs[h.world.procs[pi].spec];
        let node = h.world.m.node_pos(h.world.m.cpus[to].node);
        let target = match &h.world.procs[pi].bind {
            Some(b) if !b.is_empty() => b[0],
            _ => node,
        };
        h.world.procs[pi].mem_bytes[target] = spec.mem_mb * 1e6;
        h.world.procs[pi].mem_placed = true;
    }
}

/// Step 2 of the tick: placement and balancing.
pub fn schedule(h: &mut SimHost) {
    let mut l = loads(h);
    let eas_on = h.world.baseline == Baseline::Eas
        && h.world.m.cpus.iter().any(|c| c.little)
        && !overutilized(h);
    for ti in 0..h.world.tasks.len() {
        let t = &h.world.tasks[ti];
        if !t.runnable {
            continue;
        }
        let cpu_id = h.world.m.cpus[t.cpu].id;
        let disallowed = t.placed && !t.allowed.contains(cpu_id);
        if t.placed && !disallowed && t.was_runnable {
            continue;
        }
        // A reader is woken by the softirq of its receive CPU.
        let waker = match h.world.procs[t.proc].kind {
            Kind::Rx => h.world.procs[t.proc].flow.map(|f| h.world.flows[f].rx_cpu),
            _ => None,
        };
        let to = if eas_on {
            select_energy(h, ti)
        } else if !t.placed || disallowed {
            select_idlest(h, &l, ti)
        } else if let Some(w) = waker.filter(|&w| allowed_idx(h, ti).contains(&w)) {
            select_wake_affine(h, &l, ti, w)
        } else {
            select_wake(h, &l, ti)
        };
        move_task(h, &mut l, ti, to);
    }
    let interval = h.world.params.sched.balance_interval_ms.max(1) * 1_000_000;
    if h.world.time_ns >= h.world.last_balance_ns + interval {
        h.world.last_balance_ns = h.world.time_ns;
        if eas_on {
            for ti in 0..h.world.tasks.len() {
                if h.world.tasks[ti].runnable && h.world.tasks[ti].placed {
                    let to = select_energy(h, ti);
                    if to != h.world.tasks[ti].cpu {
                        move_task(h, &mut l, ti, to);
                    }
                }
            }
        } else {
            balance(h, &mut l);
        }
    }
    let dt = h.world.tick_ns as f64 * 1e-9;
    kernel_background(h, &mut l, dt);
}

/// What the kernel does besides placing and balancing, every tick:
/// - **background migrations**: the load balancer moves a running task now and then
///   (`sched.background_migrations_per_s` per task) to a random CPU of its allowed set,
///   swapping with the task there when that one may run where this one was; each move
///   costs the task `sched.migration_cost_us` of CPU time (`cross_llc_migration_cost_us`
///   across LLCs);
/// - **automatic NUMA balancing**: a task away from the node holding most of its pages
///   moves there or swaps with a task there (`numa_task_placement`), and a process's
///   pages migrate toward the node its first
///   thread runs on, at most `numa.balancing_mb_per_s`, each GB costing the process
///   `numa.migrate_s_per_gb` of CPU time; workloads bound to a node (`mem_node`) are left
///   alone.
fn kernel_background(h: &mut SimHost, l: &mut Load, dt: f64) {
    let rate = h.world.params.sched.background_migrations_per_s;
    if rate > 0.0 {
        for ti in 0..h.world.tasks.len() {
            let t = &h.world.tasks[ti];
            if !(t.runnable && t.placed) || t.rt || h.world.rng.unit() >= rate * dt {
                continue;
            }
            let cands: Vec<usize> = allowed_idx(h, ti)
                .into_iter()
                .filter(|&c| c != t.cpu)
                .collect();
            if cands.is_empty() {
                continue;
            }
            let from = t.cpu;
            let to = cands[h.world.rng.below(cands.len())];
            let from_id = h.world.m.cpus[from].id;
            let other = l.on[to]
                .iter()
                .copied()
                .find(|&o| h.world.tasks[o].allowed.contains(from_id));
            migrate(h, l, ti, to);
            if let Some(o) = other {
                migrate(h, l, o, from);
            }
        }
    }
    numa_task_placement(h, l);
    let mb_s = h.world.params.numa.balancing_mb_per_s;
    if mb_s > 0.0 && h.world.m.node_ids.len() > 1 {
        let budget = mb_s * 1e6 * dt;
        let cost_s_per_byte = h.world.params.numa.migrate_s_per_gb / 1e9;
        for pi in 0..h.world.procs.len() {
            let p = &h.world.procs[pi];
            // A workload placed on a memory node (numactl --membind) stays there.
            if !p.started || p.exited || !p.mem_placed || h.world.specs[p.spec].mem_node.is_some() {
                continue;
            }
            let Some(&t0) = p.threads.iter().find(|&&t| h.world.tasks[t].placed) else {
                continue;
            };
            let here = h
                .world
                .m
                .node_pos(h.world.m.cpus[h.world.tasks[t0].cpu].node);
            let total: f64 = p.mem_bytes.iter().sum();
            let remote = total - p.mem_bytes[here];
            if remote <= 0.0 {
                continue;
            }
            let mv = remote.min(budget);
            let p = &mut h.world.procs[pi];
            for n in 0..p.mem_bytes.len() {
                if n != here {
                    let take = p.mem_bytes[n] / remote * mv;
                    p.mem_bytes[n] -= take;
                }
            }
            p.mem_bytes[here] += mv;
            h.world.tasks[t0].left += mv * cost_s_per_byte;
        }
    }
}

/// The share of process `pi`'s pages on each node position (its NUMA hinting faults land
/// there in proportion: the kernel's task_weight / 1000); None before it has memory.
fn numa_weights(h: &SimHost, pi: usize) -> Option<Vec<f64>> {
    let p = &h.world.procs[pi];
    let total: f64 = p.mem_bytes.iter().sum();
    (p.mem_placed && total > 0.0).then(|| p.mem_bytes.iter().map(|b| b / total).collect())
}

/// The kernel's SMALLIMP (30 of a task weight's 1000): a swap must gain more than this.
const NUMA_SMALL_IMPROVEMENT: f64 = 0.03;

/// Automatic NUMA balancing's task placement, as Linux's kernel/sched/fair.c does it
/// (numa_migrate_preferred, task_numa_migrate, task_numa_find_cpu, task_numa_compare,
/// load_too_imbalanced; the seed-003 paper's section II.3: a task whose remote accesses
/// outnumber its local ones is moved to the node holding that memory). A task whose
/// preferred node (the one holding most of its pages) is not the one it runs on tries,
/// every `numa.task_retry_ms`, each allowed CPU of that node: an idle one takes it when
/// the move leaves the two nodes' load no more imbalanced; a busy one's task is swapped
/// with it when the two tasks' page shares gain in total (its own gain plus the other's
/// change, more than SMALLIMP) and the swap leaves the load no more imbalanced. The best
/// candidate wins; a plain move beats a swap that gains less.
fn numa_task_placement(h: &mut SimHost, l: &mut Load) {
    let retry_ns = (h.world.params.numa.task_retry_ms * 1e6) as u64;
    if retry_ns == 0 || h.world.m.node_ids.len() < 2 {
        return;
    }
    for ti in 0..h.world.tasks.len() {
        let t = &h.world.tasks[ti];
        if !(t.runnable && t.placed) || t.rt || h.world.time_ns < t.numa_retry_ns {
            continue;
        }
        // Memory bound to a node (numactl --membind) takes no NUMA hinting faults.
        if h.world.specs[h.world.procs[t.proc].spec].mem_node.is_some() {
            continue;
        }
        let Some(w) = numa_weights(h, t.proc) else {
            continue;
        };
        h.world.tasks[ti].numa_retry_ns = h.world.time_ns + retry_ns;
        let src_cpu = h.world.tasks[ti].cpu;
        let src = h.world.m.node_pos(h.world.m.cpus[src_cpu].node);
        let pref = (0..w.len())
            .max_by(|&a, &b| w[a].total_cmp(&w[b]).then(b.cmp(&a)))
            .unwrap_or(src);
        if pref == src || w[pref] <= w[src] {
            continue;
        }
        if let Some((to, other)) = numa_find_cpu(h, l, ti, src, pref, &w) {
            migrate(h, l, ti, to);
            if let Some(o) = other {
                migrate(h, l, o, src_cpu);
            }
        }
    }
}

/// task_numa_find_cpu: the best CPU of node position `dst` for task `ti` (on node `src`,
/// page shares `w`), and the task to swap with it, if any.
fn numa_find_cpu(
    h: &SimHost,
    l: &Load,
    ti: usize,
    src: usize,
    dst: usize,
    w: &[f64],
) -> Option<(usize, Option<usize>)> {
    let node_of = |c: usize| h.world.m.node_pos(h.world.m.cpus[c].node);
    let (mut src_load, mut dst_load, mut src_cap, mut dst_cap) = (0.0, 0.0, 0.0, 0.0);
    for c in 0..h.world.m.cpus.len() {
        if node_of(c) == src {
            src_load += l.util[c];
            src_cap += capacity(h, c);
        } else if node_of(c) == dst {
            dst_load += l.util[c];
            dst_cap += capacity(h, c);
        }
    }
    // load_too_imbalanced: would moving `load` from src to dst widen the imbalance of the
    // capacity-corrected loads?
    let too_imbalanced = |load: f64| {
        let imb = ((dst_load + load) * src_cap - (src_load - load) * dst_cap).abs();
        let old = (dst_load * src_cap - src_load * dst_cap).abs();
        imb > old + 1e-12
    };
    let load_of = |t: usize| h.world.tasks[t].util_avg.max(0.05);
    let task_imp = w[dst] - w[src];
    let may_move = !too_imbalanced(load_of(ti));
    let src_id = h.world.m.cpus[h.world.tasks[ti].cpu].id;
    let mut best: Option<(usize, Option<usize>)> = None;
    let mut best_imp = 0.0;
    for c in allowed_idx(h, ti)
        .into_iter()
        .filter(|&c| node_of(c) == dst)
    {
        let Some(&cur) = l.on[c].iter().find(|&&o| o != ti) else {
            if may_move && task_imp >= best_imp {
                best = Some((c, None));
                best_imp = task_imp;
            }
            continue;
        };
        if h.world.tasks[cur].rt || !h.world.tasks[cur].allowed.contains(src_id) {
            continue;
        }
        let cur_spec = &h.world.specs[h.world.procs[h.world.tasks[cur].proc].spec];
        let Some(wc) =
            numa_weights(h, h.world.tasks[cur].proc).filter(|_| cur_spec.mem_node.is_none())
        else {
            continue;
        };
        let imp = task_imp + wc[src] - wc[dst];
        if may_move && task_imp > imp && task_imp > best_imp {
            best = Some((c, None));
            best_imp = task_imp;
            continue;
        }
        if imp < NUMA_SMALL_IMPROVEMENT || imp <= best_imp + NUMA_SMALL_IMPROVEMENT / 2.0 {
            continue;
        }
        let load = load_of(ti) - load_of(cur);
        if load != 0.0 && too_imbalanced(load) {
            continue;
        }
        best = Some((c, Some(cur)));
        best_imp = imp;
    }
    best
}

/// A load-balancer move of a running task, with its cache-refill cost.
fn migrate(h: &mut SimHost, l: &mut Load, ti: usize, to: usize) {
    let from = h.world.tasks[ti].cpu;
    let us = if h.world.m.cpus[from].llc == h.world.m.cpus[to].llc {
        h.world.params.sched.migration_cost_us
    } else {
        h.world.params.sched.cross_llc_migration_cost_us
    };
    if h.world.tasks[ti].left > 0.0 {
        h.world.tasks[ti].left += us * 1e-6;
    }
    move_task(h, l, ti, to);
}

fn movable(h: &SimHost, l: &Load, from: usize, to: usize) -> Vec<usize> {
    let to_id = h.world.m.cpus[to].id;
    l.on[from]
        .iter()
        .copied()
        .filter(|&ti| h.world.tasks[ti].allowed.contains(to_id))
        .collect()
}

fn balance(h: &mut SimHost, l: &mut Load) {
    let n = h.world.m.cpus.len();
    let max_moves = n.div_ceil(2).max(1);
    let mut moves = 0;
    // 1. Idle CPUs pull from the CPU with the most runnable tasks (nearest first).
    for dst in 0..n {
        if moves >= max_moves {
            return;
        }
        if l.nr[dst] != 0 {
            continue;
        }
        let mut best: Option<(u32, u8, usize)> = None;
        for src in 0..n {
            if l.nr[src] < 2 {
                continue;
            }
            let dist = if h.world.m.cpus[src].llc == h.world.m.cpus[dst].llc {
                0
            } else if h.world.m.cpus[src].package == h.world.m.cpus[dst].package {
                1
            } else {
                2
            };
            if movable(h, l, src, dst).is_empty() {
                continue;
            }
            let better = match best {
                None => true,
                Some((nr, d, _)) => l.nr[src] > nr || (l.nr[src] == nr && dist < d),
            };
            if better {
                best = Some((l.nr[src], dist, src));
            }
        }
        if let Some((_, _, src)) = best {
            let m = movable(h, l, src, dst);
            let ti = m[h.world.rng.below(m.len())];
            move_task(h, l, ti, dst);
            moves += 1;
        }
    }
    // 2. SMT: a fully idle core takes one thread of a core whose threads are all busy.
    for dst in 0..n {
        if moves >= max_moves {
            return;
        }
        if !core_idle(h, l, dst) || h.world.m.cpus[dst].siblings.iter().any(|&s| s < dst) {
            continue;
        }
        let src = (0..n).find(|&c| {
            !h.world.m.cpus[c].siblings.is_empty()
                && l.nr[c] >= 1
                && h.world.m.cpus[c].siblings.iter().all(|&s| l.nr[s] >= 1)
                && !movable(h, l, c, dst).is_empty()
        });
        if let Some(src) = src {
            let m = movable(h, l, src, dst);
            move_task(h, l, m[0], dst);
            moves += 1;
        }
    }
    // 3. Load imbalance between the busiest and the idlest CPU.
    while moves < max_moves {
        let (mut hi, mut lo) = (0, 0);
        for c in 0..n {
            if l.util[c] / capacity(h, c) > l.util[hi] / capacity(h, hi) {
                hi = c;
            }
            if l.util[c] / capacity(h, c) < l.util[lo] / capacity(h, lo) {
                lo = c;
            }
        }
        let (uh, ul) = (l.util[hi] / capacity(h, hi), l.util[lo] / capacity(h, lo));
        if l.nr[hi] < 2 || uh <= h.world.params.sched.imbalance_ratio * ul + 0.1 {
            return;
        }
        let half = (uh - ul) / 2.0;
        let cands = movable(h, l, hi, lo);
        let pick = cands
            .iter()
            .copied()
            .filter(|&ti| h.world.tasks[ti].util_avg.max(0.05) <= half + 1e-9)
            .max_by(|&a, &b| {
                h.world.tasks[a]
                    .util_avg
                    .total_cmp(&h.world.tasks[b].util_avg)
            });
        match pick {
            Some(ti) => {
                move_task(h, l, ti, lo);
                moves += 1;
            }
            None => break,
        }
    }
    // 4. Runnable load (the kernel balances load_avg, which counts waiting time, not only
    //    running time): two CPU-bound tasks sharing a CPU while another CPU runs less than
    //    one CPU's worth of demand is an imbalance even when every CPU is busy.
    let demand = |h: &SimHost, ti: usize| -> f64 {
        h.world
            .want
            .get(ti)
            .copied()
            .unwrap_or(1.0)
            .max(h.world.tasks[ti].util_avg)
            .clamp(0.05, 1.0)
    };
    while moves < max_moves {
        let load: Vec<f64> = (0..n)
            .map(|c| l.on[c].iter().map(|&t| demand(h, t)).sum::<f64>())
            .collect();
        let mut best: Option<(f64, usize, usize)> = None;
        for hi in (0..n).filter(|&c| l.nr[c] >= 2) {
            for lo in 0..n {
                let gap = load[hi] - load[lo];
                if lo == hi || gap <= 1.0 {
                    continue;
                }
                if best.is_none_or(|(g, _, _)| gap > g) && !movable(h, l, hi, lo).is_empty() {
                    best = Some((gap, hi, lo));
                }
            }
        }
        let Some((gap, hi, lo)) = best else {
            return;
        };
        // The biggest task whose move narrows the gap.
        let pick = movable(h, l, hi, lo)
            .into_iter()
            .filter(|&t| demand(h, t) < gap)
            .max_by(|&a, &b| demand(h, a).total_cmp(&demand(h, b)));
        match pick {
            Some(ti) => {
                move_task(h, l, ti, lo);
                moves += 1;
            }
            None => return,
        }
    }
}

fn overutilized(h: &SimHost) -> bool {
    h.world
        .cpu
        .iter()
        .any(|st| st.util_avg > h.world.params.sched.eas_overutilized)
}

/// Energy-model estimate of the whole machine with the per-CPU utilisations `util`
/// (capacity units, 1.0 = the big core at f_max).
fn em_energy(h: &SimHost, util: &[f64]) -> f64 {
    let mut e = 0.0;
    for (d, dom) in h.world.topo.freq_domains.iter().enumerate() {
        let cpus: Vec<usize> = dom.cpus.iter().filter_map(|id| h.world.m.idx(id)).collect();
        if cpus.is_empty() {
            continue;
        }
        let cap = capacity(h, cpus[0]);
        let little = h.world.m.cpus[cpus[0]].little;
        let fmax = h.world.m.cpus[cpus[0]].max_khz as f64 / 1000.0;
        let (max_u, sum_u) = cpus
            .iter()
            .fold((0.0f64, 0.0), |(m, s), &c| (m.max(util[c]), s + util[c]));
        let target = h.world.params.sched.schedutil_headroom * max_u / cap * fmax;
        let max_cap_mhz = h.world.domains[d].scaling_max_khz as f64 / 1000.0;
        let f = dom
            .available_khz
            .iter()
            .map(|&k| k as f64 / 1000.0)
            .filter(|&f| f + 1e-6 >= target && f <= max_cap_mhz + 1e-6)
            .fold(f64::INFINITY, f64::min);
        let f = if f.is_finite() {
            f
        } else {
            max_cap_mhz.min(fmax)
        };
        let (coeff, opp) = if little {
            (
                h.world.params.power.em_little_coeff,
                &h.world.params.power.little_opp,
            )
        } else {
            (
                h.world.params.power.em_big_coeff,
                &h.world.params.power.big_opp,
            )
        };
        let v = volts_at(opp, f).unwrap_or(1.0);
        let power = coeff * v * v * f;
        let cost = power * fmax / f.max(1.0);
        e += cost * sum_u / cap;
    }
    e
}

/// EAS: the CPU minimising the energy estimate for task `ti`.
fn select_energy(h: &mut SimHost, ti: usize) -> usize {
    let n = h.world.m.cpus.len();
    let mut util = vec![0.0; n];
    for (c, u) in util.iter_mut().enumerate() {
        *u = h.world.cpu[c].softirq * capacity(h, c);
    }
    for (k, t) in h.world.tasks.iter().enumerate() {
        if k != ti && t.runnable && t.placed {
            util[t.cpu] += t.util_avg;
        }
    }
    let t = &h.world.tasks[ti];
    let prev = t.cpu;
    // A new task starts at half a big core's capacity (the kernel's initial util).
    let tu = if t.placed { t.util_avg.max(0.02) } else { 0.5 };
    let allowed = allowed_idx(h, ti);
    let mut cands: Vec<usize> = Vec::new();
    if t.placed && allowed.contains(&prev) {
        cands.push(prev);
    }
    for dom in &h.world.topo.freq_domains {
        let best = dom
            .cpus
            .iter()
            .filter_map(|id| h.world.m.idx(id))
            .filter(|c| allowed.contains(c))
            .max_by(|&a, &b| (capacity(h, a) - util[a]).total_cmp(&(capacity(h, b) - util[b])));
        if let Some(c) = best {
            if !cands.contains(&c) {
                cands.push(c);
            }
        }
    }
    if cands.is_empty() {
        return allowed[0];
    }
    let mut best = (cands[0], f64::INFINITY);
    let mut prev_e = f64::INFINITY;
    for &c in &cands {
        // Only CPUs where the task fits (util + task <= capacity).
        if util[c] + tu > capacity(h, c) && c != prev {
            continue;
        }
        util[c] += tu;
        let e = em_energy(h, &util);
        util[c] -= tu;
        if c == prev && t.placed {
            prev_e = e;
        }
        if e < best.1 {
            best = (c, e);
        }
    }
    if !best.1.is_finite() {
        // Nothing fits: the biggest spare capacity.
        return cands
            .iter()
            .copied()
            .max_by(|&a, &b| (capacity(h, a) - util[a]).total_cmp(&(capacity(h, b) - util[b])))
            .unwrap_or(prev);
    }
    if prev_e.is_finite() && best.1 > prev_e * (1.0 - h.world.params.sched.eas_margin) {
        return prev;
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    /// An HP DK388P (L3 per package) with one reader of eth0 and a CPU hog, both placed.
    fn host() -> SimHost {
        let sc = Scenario::from_toml(
            "t",
            r#"name = "t"
machine = "hp-dk388p"
duration_s = 1.0
[[workloads]]
kind = "rx"
name = "recv"
nic = "eth0"
rate_mbps = 100.0
[[workloads]]
kind = "cpu"
name = "hog"
"#,
        )
        .unwrap();
        let mut h = sc.host(None, Baseline::LinuxDefault, 1).unwrap();
        h.run_until(10_000_000, false);
        h
    }

    /// (reader task, hog task), with the reader on `prev` and the hog on `hog`.
    fn place(h: &mut SimHost, prev: usize, hog: usize) -> (usize, usize) {
        let r = h.world.procs[0].threads[0];
        let g = h.world.procs[1].threads[0];
        for (t, c) in [(r, prev), (g, hog)] {
            h.world.tasks[t].cpu = c;
            h.world.tasks[t].runnable = true;
            h.world.tasks[t].placed = true;
        }
        (r, g)
    }

    /// An X5570 pair (two nodes of four CPUs) with `n` endless single-thread jobs, run
    /// until placed; `params` overrides.
    fn numa_host(n: u32, params: &str) -> SimHost {
        let sc = Scenario::from_toml(
            "t",
            &format!(
                r#"name = "t"
machine = "xeon-x5570x2"
duration_s = 1.0
{params}
[[workloads]]
kind = "cpu"
name = "job{{i}}"
count = {n}
"#
            ),
        )
        .unwrap();
        let mut h = sc.host(None, Baseline::LinuxDefault, 1).unwrap();
        h.run_until(10_000_000, false);
        h
    }

    /// Puts job `j` on CPU `cpu` with all its pages on node position `mem`, due for its
    /// NUMA placement try.
    fn put(h: &mut SimHost, j: usize, cpu: usize, mem: usize) -> usize {
        let t = h.world.procs[j].threads[0];
        h.world.tasks[t].cpu = cpu;
        h.world.tasks[t].numa_retry_ns = 0;
        let p = &mut h.world.procs[j];
        p.mem_bytes.iter_mut().for_each(|b| *b = 0.0);
        p.mem_bytes[mem] = 1e9;
        p.mem_placed = true;
        t
    }

    fn node_of(h: &SimHost, t: usize) -> usize {
        h.world
            .m
            .node_pos(h.world.m.cpus[h.world.tasks[t].cpu].node)
    }

    #[test]
    fn a_task_whose_memory_is_on_the_far_node_moves_there() {
        let mut h = numa_host(1, "");
        let t = put(&mut h, 0, 0, 1);
        assert_eq!(node_of(&h, t), 0);
        let mut l = loads(&h);
        numa_task_placement(&mut h, &mut l);
        assert_eq!(node_of(&h, t), 1, "moved to an idle CPU of its pages' node");
        // Not again before the retry interval.
        assert_eq!(h.world.tasks[t].numa_retry_ns, h.world.time_ns + 62_500_000);
        // With task placement off it stays where it is.
        let mut h = numa_host(1, "[params.numa]\ntask_retry_ms = 0.0");
        let t = put(&mut h, 0, 0, 1);
        let mut l = loads(&h);
        numa_task_placement(&mut h, &mut l);
        assert_eq!(node_of(&h, t), 0);
    }

    #[test]
    fn a_numa_swap_happens_only_when_the_pair_gains() {
        // Every CPU busy (four jobs per node): no idle CPU, and a plain move would leave the
        // nodes 3:5, so only a swap can bring a task to its memory.
        let setup = |b_mem: usize| {
            let mut h = numa_host(8, "");
            let node1: Vec<usize> = (0..h.world.m.cpus.len())
                .filter(|&c| h.world.m.node_pos(h.world.m.cpus[c].node) == 1)
                .collect();
            let node0: Vec<usize> = (0..h.world.m.cpus.len())
                .filter(|&c| h.world.m.node_pos(h.world.m.cpus[c].node) == 0)
                .collect();
            for (j, &c) in node0.iter().chain(node1.iter()).enumerate() {
                let home = h.world.m.node_pos(h.world.m.cpus[c].node);
                put(&mut h, j, c, home);
            }
            // Job 0 on node 0 with its pages on node 1; job 4 on node 1 with its pages on
            // `b_mem`; the rest at home.
            let a = put(&mut h, 0, node0[0], 1);
            let b = put(&mut h, 4, node1[0], b_mem);
            for t in 0..h.world.tasks.len() {
                if t != a {
                    h.world.tasks[t].numa_retry_ns = u64::MAX;
                }
            }
            let mut l = loads(&h);
            numa_task_placement(&mut h, &mut l);
            (node_of(&h, a), node_of(&h, b))
        };
        // Both gain (each goes to its own pages): they swap.
        assert_eq!(setup(0), (1, 0));
        // The task on node 1 is at home and would lose all its locality, what the other
        // gains: the pair gains nothing, no swap. (The kernel's test is the pair's total,
        // so a swap where one loses less than the other gains does happen.)
        assert_eq!(setup(1), (0, 1));
    }

    #[test]
    fn a_reader_is_woken_as_wake_affine_places_it() {
        let mut h = host();
        let m = h.world.m.clone();
        let pkg0: Vec<usize> = (0..m.cpus.len())
            .filter(|&c| m.cpus[c].package == 0)
            .collect();
        let other_pkg = (0..m.cpus.len()).find(|&c| m.cpus[c].package == 1).unwrap();
        let (waker, prev) = (pkg0[0], pkg0[2]);
        // The previous CPU is idle: the reader stays there.
        let (r, _) = place(&mut h, prev, other_pkg);
        let l = loads(&h);
        assert_eq!(select_wake_affine(&mut h, &l, r, waker), prev);
        // The previous CPU is busy, the waker runs only softirq (no task: idle to the
        // scheduler) in the same LLC: the reader is pulled to the waker's CPU.
        let (r, _) = place(&mut h, prev, prev);
        h.world.cpu[waker].softirq = 0.9;
        let l = loads(&h);
        assert_eq!(select_wake_affine(&mut h, &l, r, waker), waker);
        // The waker in another LLC: the reader stays in its own LLC, on an idle CPU there.
        let (r, _) = place(&mut h, prev, prev);
        let l = loads(&h);
        let to = select_wake_affine(&mut h, &l, r, other_pkg);
        assert_eq!(m.cpus[to].llc, m.cpus[prev].llc);
        assert_ne!(to, prev);
        assert_eq!(l.nr[to], 0);
    }
}
