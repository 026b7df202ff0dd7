//! The pure derivation of an [`Observation`] from two [`Sample`]s (`prev` then `cur`).
//!
//! Rules, each tested below:
//! - **Interval**: `dt = cur.time_ns - prev.time_ns`. A zero or negative interval gives
//!   zero rates (never infinities or NaN).
//! - **Counter resets**: a cumulative counter that went backwards was reset (a re-opened
//!   perf fd, a re-created socket under the same inode, a CPU that went offline and back);
//!   it contributes 0 for the interval rather than a huge rate.
//! - **Wrap-around**: energy counters wrap at their `max_range_uj`; TCP segment counters
//!   (`tcpi_segs_in/out`, `data_segs_*`) are 32-bit in the kernel and wrap at 2^32. A wrapped
//!   counter gives the true difference when it wrapped at most once in the interval.
//! - **Processes** are matched by [`ProcKey`] (pid and start time): a pid whose start time
//!   changed is a reused pid, i.e. a new process. A process only in `cur` is `new`; when it
//!   started after `prev` was taken (start time >= prev time), all its CPU time was spent
//!   in the interval and its share counts; when it started earlier (it was missed in
//!   `prev`), its share over the interval is unknown and is 0. Processes only in `prev`
//!   exited and do not appear.
//! - **CPU share** is (utime + stime) ticks / clk_tck / dt, in CPUs (1.0 = one CPU busy).
//!   Threads are matched by tid within the same process; a thread only in `cur` has no
//!   known share (0). A thread's share is `d cpu_ns / dt` when both samples carry the
//!   collector's `cpu_ns` (exact, and current where its ticks were not read again), else
//!   its ticks' as for processes.
//!   A process's observed threads are those that used CPU in the interval (share > 0):
//!   a sleeping thread has nothing to say about placement, and listing only the running
//!   ones makes the observation cost follow activity (80,000 sleeping threads would
//!   otherwise be 80,000 entries each cycle). A process whose thread list is the very one
//!   of `prev` (shared: the sampler did not read it again) ran no thread and lists none.
//! - **Flows**: a process's sockets are those whose inode it holds in `cur`. A socket seen
//!   in both samples gives receive rate `d bytes_received / dt`, send rate
//!   `d bytes_acked / dt` (acknowledged payload: what the network delivered), segment rates,
//!   and average segment sizes `d bytes / d data_segs` (falling back to all segments on
//!   kernels without data_segs; `None` when nothing moved). A socket first seen in `cur`
//!   is listed with zero rates and `new = true`; a socket closed during the interval is
//!   lost (its last bytes are not counted). The process rates are the sums over its flows.
//! - **CPUs**: utilisation = busy ticks / all ticks of that CPU (busy = all but idle and
//!   iowait), so it does not depend on clk_tck; NET_RX/NET_TX softirqs per second; IRQs per
//!   second counts device interrupts (numbered rows of /proc/interrupts) only — LOC, RES,
//!   CAL and the other architecture rows are in `irqs` but would drown the device rate.
//! - **Interfaces**: packet and byte rates by interface name, counters reset (a re-created
//!   interface) counting 0; an interface only in `cur` is not listed. Each CPU's current
//!   frequency is the later sample's.
//! - **IRQs**: per IRQ, per CPU id (matched by the header's CPU ids, so hotplug that
//!   shifts columns does not mix CPUs up).
//! - **Power**: RAPL energy domains give watts by difference; the whole-machine figure is
//!   the sum of top-level domains (`intel-rapl:0`, not its sub-zone `intel-rapl:0:0`).
//!   Instantaneous sensors (hwmon) are reported per sensor, and give the whole-machine
//!   figure only when there are no energy counters (RAPL integrates over the interval; a
//!   sensor is one instant).
//! - **Hardware counters**: per event, scaled for multiplexing by the interval's
//!   `d time_enabled / d time_running`; rates per second and per 1,000 instructions;
//!   `coverage` is the lowest running/enabled ratio of the interval.

use crate::observation::*;
use crate::sample::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Difference of cumulative counters, 0 if the counter went backwards (reset).
fn delta(prev: u64, cur: u64) -> u64 {
    cur.saturating_sub(prev)
}

/// Difference of a counter that wraps at `range` (RAPL's max_energy_range_uj).
fn delta_wrapping(prev: u64, cur: u64, range: Option<u64>) -> u64 {
    if cur >= prev {
        cur - prev
    } else {
        match range {
            Some(r) if r >= prev => r - prev + cur,
            _ => 0,
        }
    }
}

/// Difference of a kernel u32 counter (TCP segment counts), wrapping at 2^32.
fn delta_u32(prev: u64, cur: u64) -> u64 {
    if prev <= u32::MAX as u64 && cur <= u32::MAX as u64 {
        (cur as u32).wrapping_sub(prev as u32) as u64
    } else {
        delta(prev, cur)
    }
}

impl Observation {
    /// Derives rates from two samples of the same machine. Pure. (Defined here, beside the
    /// rules, so that the types in `observation` do not depend on their derivation.)
    pub fn new(prev: &Sample, cur: &Sample) -> Observation {
        derive(prev, cur, &[])
    }

    /// [`Observation::new`], sharing the processes of `last` (an earlier observation's,
    /// best the one that ended at `prev`, in pid order) that it would derive again as they
    /// are: a process that stayed the very same sample from `prev` to `cur` (the sampler
    /// shares an idle one) with no sockets or counters, whose observation in `last` is its
    /// quiet image ([`quiet_image`]). Equal to `new(prev, cur)`, whatever `last` is; at
    /// 32,000 idle processes it spares a copy of each and the reference counts of its
    /// texts.
    pub fn after(prev: &Sample, cur: &Sample, last: &[Arc<ProcObs>]) -> Observation {
        derive(prev, cur, last)
    }
}

/// Whether `o` is what [`derive`] makes of `p` over an interval in which `p` stayed the very
/// same sample and has no sockets or counters: no CPU time, no rates, no threads that ran,
/// not new. Every field is named, so that a new one cannot be forgotten here.
fn quiet_image(o: &ProcObs, p: &ProcSample) -> bool {
    let ProcObs {
        pid,
        start_time_ticks,
        comm,
        state,
        uid,
        cgroup,
        kernel_thread,
        cpu_share,
        allowed_cpus,
        last_cpu,
        num_threads,
        rx_bytes_per_s,
        tx_bytes_per_s,
        segs_in_per_s,
        segs_out_per_s,
        flows,
        threads,
        counters,
        numa_pages,
        new,
    } = o;
    *pid == p.pid
        && *start_time_ticks == p.start_time_ticks
        && Arc::ptr_eq(comm, &p.comm)
        && *state == p.state
        && *uid == p.uid
        && Arc::ptr_eq(cgroup, &p.cgroup)
        && *kernel_thread == p.kernel_thread
        && *cpu_share == 0.0
        && *allowed_cpus == p.allowed
        && *last_cpu == p.last_cpu
        && *num_threads == p.num_threads
        && [
            rx_bytes_per_s,
            tx_bytes_per_s,
            segs_in_per_s,
            segs_out_per_s,
        ]
        .iter()
        .all(|r| **r == 0.0)
        && flows.is_empty()
        && threads.is_empty()
        && counters.is_none()
        && *numa_pages == p.numa_pages
        && !*new
}

/// Sockets by inode.
fn by_inode(socks: &[SocketSample]) -> HashMap<u64, &SocketSample> {
    socks.iter().map(|s| (s.inode, s)).collect()
}

pub(crate) fn derive(prev: &Sample, cur: &Sample, last: &[Arc<ProcObs>]) -> Observation {
    let dt_ns = cur.time_ns.saturating_sub(prev.time_ns);
    let dt = dt_ns as f64 / 1e9;
    // Rates over the interval; 0 for an empty interval.
    let per_s = |x: f64| if dt > 0.0 { x / dt } else { 0.0 };
    let hz = if cur.clk_tck == 0 {
        100.0
    } else {
        cur.clk_tck as f64
    };

    let irqs = derive_irqs(prev, cur, &per_s);
    let cpus = derive_cpus(prev, cur, &irqs, &per_s);

    let cur_socks = by_inode(&cur.sockets);
    // A dump the sampler reused (no segment moved) is one map, not two.
    let reused = std::sync::Arc::ptr_eq(&prev.sockets, &cur.sockets);
    let prev_built;
    let prev_socks = if reused {
        &cur_socks
    } else {
        prev_built = by_inode(&prev.sockets);
        &prev_built
    };
    // Samples list processes by pid (the sampler does): a merge walk pairs them without a
    // map of thousands of entries; any other order falls back to the map.
    let by_pid = |s: &Sample| s.procs.is_sorted_by_key(|p| p.pid);
    let merge = by_pid(prev) && by_pid(cur);
    let prev_procs: HashMap<ProcKey, &ProcSample> = if merge {
        HashMap::new()
    } else {
        prev.procs.iter().map(|p| (p.key(), &**p)).collect()
    };
    let mut cursor = 0usize;
    let mut before_of = |p: &ProcSample| -> Option<&ProcSample> {
        if !merge {
            return prev_procs.get(&p.key()).copied();
        }
        while prev.procs.get(cursor).is_some_and(|b| b.pid < p.pid) {
            cursor += 1;
        }
        prev.procs
            .get(cursor)
            .map(|b| &**b)
            .filter(|b| b.key() == p.key())
    };
    // Start times are in ticks since boot; sample times are monotonic ns since boot.
    let prev_time_ticks = prev.time_ns as f64 / 1e9 * hz;

    let mut last_cursor = 0usize;
    let procs = cur
        .procs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            // Each process's sample and last observation is a cache miss at 32,000.
            if let Some(a) = cur.procs.get(i + crate::mem::AHEAD) {
                crate::mem::prefetch(a);
            }
            if let Some(o) = last.get(last_cursor + crate::mem::AHEAD) {
                crate::mem::prefetch(o);
            }
            let before = before_of(p);
            let quiet = before.is_some_and(|b| std::ptr::eq(b, &**p))
                && p.socket_inodes.is_empty()
                && p.counters.is_empty();
            if quiet {
                while last.get(last_cursor).is_some_and(|o| o.pid < p.pid) {
                    last_cursor += 1;
                }
                if let Some(o) = last.get(last_cursor).filter(|o| quiet_image(o, p)) {
                    return o.clone();
                }
            }
            let cpu_ticks = match before {
                Some(b) => delta(b.utime_ticks + b.stime_ticks, p.utime_ticks + p.stime_ticks),
                // Started during the interval: all of its CPU time is in the interval.
                None if p.start_time_ticks as f64 >= prev_time_ticks => {
                    p.utime_ticks + p.stime_ticks
                }
                None => 0,
            };
            let flows: Vec<FlowObs> = p
                .socket_inodes
                .iter()
                .filter_map(|ino| cur_socks.get(ino))
                .map(|s| derive_flow(prev_socks.get(&s.inode).copied(), s, &per_s))
                .collect();
            // fold from +0.0: `Sum` of an empty f64 iterator is -0.0, which prints as "-0".
            let sum = |f: fn(&FlowObs) -> f64| flows.iter().map(f).fold(0.0, |a, b| a + b);
            Arc::new(ProcObs {
                pid: p.pid,
                start_time_ticks: p.start_time_ticks,
                comm: p.comm.clone(),
                state: p.state,
                uid: p.uid,
                cgroup: p.cgroup.clone(),
                kernel_thread: p.kernel_thread,
                cpu_share: per_s(cpu_ticks as f64 / hz),
                allowed_cpus: p.allowed.clone(),
                last_cpu: p.last_cpu,
                num_threads: p.num_threads,
                rx_bytes_per_s: sum(|f| f.rx_bytes_per_s),
                tx_bytes_per_s: sum(|f| f.tx_bytes_per_s),
                segs_in_per_s: sum(|f| f.segs_in_per_s),
                segs_out_per_s: sum(|f| f.segs_out_per_s),
                threads: derive_threads(before, p, hz, &per_s),
                counters: before.and_then(|b| counter_rates(&b.counters, &p.counters, &per_s)),
                numa_pages: p.numa_pages.clone(),
                new: before.is_none(),
                flows,
            })
        })
        .collect();

    let (power_w, power_by_domain_w) = derive_power(prev, cur, &per_s);
    Observation {
        time_ns: cur.time_ns,
        interval_s: dt,
        cpus,
        procs,
        irqs,
        power_w,
        power_by_domain_w,
        nics: derive_nics(prev, cur, &per_s),
        page_bytes: cur.page_bytes,
    }
}

fn derive_cpus(
    prev: &Sample,
    cur: &Sample,
    irqs: &[IrqObs],
    per_s: &dyn Fn(f64) -> f64,
) -> Vec<CpuObs> {
    let prev_cpu: HashMap<u32, &CpuTimes> = prev.cpus.iter().map(|c| (c.cpu, c)).collect();
    let prev_soft: HashMap<u32, &SoftirqCounts> =
        prev.softirqs.iter().map(|c| (c.cpu, c)).collect();
    let cur_soft: HashMap<u32, &SoftirqCounts> = cur.softirqs.iter().map(|c| (c.cpu, c)).collect();
    let mut irqs_per_cpu: BTreeMap<u32, f64> = BTreeMap::new();
    for i in irqs.iter().filter(|i| is_device_irq(&i.irq)) {
        for (&c, &r) in &i.per_cpu_per_s {
            *irqs_per_cpu.entry(c).or_default() += r;
        }
    }
    cur.cpus
        .iter()
        .map(|c| {
            let mut o = CpuObs {
                cpu: c.cpu,
                ..Default::default()
            };
            if let Some(p) = prev_cpu.get(&c.cpu) {
                let total = delta(p.total(), c.total()) as f64;
                if total > 0.0 {
                    let f = |a: u64, b: u64| (delta(a, b) as f64 / total).clamp(0.0, 1.0);
                    o.util = f(p.busy(), c.busy());
                    o.user = f(p.user + p.nice, c.user + c.nice);
                    o.system = f(p.system, c.system);
                    o.irq = f(p.irq, c.irq);
                    o.softirq = f(p.softirq, c.softirq);
                }
            }
            if let (Some(p), Some(s)) = (prev_soft.get(&c.cpu), cur_soft.get(&c.cpu)) {
                o.net_rx_softirqs_per_s = per_s(delta(p.net_rx, s.net_rx) as f64);
                o.net_tx_softirqs_per_s = per_s(delta(p.net_tx, s.net_tx) as f64);
            }
            o.irqs_per_s = irqs_per_cpu.get(&c.cpu).copied().unwrap_or(0.0);
            o.cur_khz = cur.cpu_freqs.iter().find(|f| f.cpu == c.cpu).map(|f| f.khz);
            o
        })
        .collect()
}

/// Interface rates by name; an interface only in `cur` (just created) has none yet.
fn derive_nics(prev: &Sample, cur: &Sample, per_s: &dyn Fn(f64) -> f64) -> Vec<NicObs> {
    cur.nics
        .iter()
        .filter_map(|c| {
            let p = prev.nics.iter().find(|p| p.name == c.name)?;
            let d = |a: u64, b: u64| per_s(delta(a, b) as f64);
            Some(NicObs {
                name: c.name.clone(),
                rx_packets_per_s: d(p.rx_packets, c.rx_packets),
                rx_bytes_per_s: d(p.rx_bytes, c.rx_bytes),
                tx_packets_per_s: d(p.tx_packets, c.tx_packets),
                tx_bytes_per_s: d(p.tx_bytes, c.tx_bytes),
            })
        })
        .collect()
}

/// Numbered rows of /proc/interrupts are device interrupts; `LOC`, `NMI`... are not.
fn is_device_irq(irq: &str) -> bool {
    !irq.is_empty() && irq.bytes().all(|b| b.is_ascii_digit())
}

fn derive_flow(b: Option<&SocketSample>, s: &SocketSample, per_s: &dyn Fn(f64) -> f64) -> FlowObs {
    let mut f = FlowObs {
        local: s.local,
        remote: s.remote,
        state: s.state,
        inode: s.inode,
        rx_bytes_per_s: 0.0,
        tx_bytes_per_s: 0.0,
        avg_rx_seg_bytes: None,
        avg_tx_seg_bytes: None,
        segs_in_per_s: 0.0,
        segs_out_per_s: 0.0,
        new: b.is_none(),
    };
    let Some(b) = b else { return f };
    let drx = delta(b.bytes_received, s.bytes_received) as f64;
    let dtx = delta(b.bytes_acked, s.bytes_acked) as f64;
    let dsi = delta_u32(b.segs_in, s.segs_in) as f64;
    let dso = delta_u32(b.segs_out, s.segs_out) as f64;
    // Data segments exclude pure ACKs; use them when the kernel reports them.
    let ddi = delta_u32(b.data_segs_in, s.data_segs_in) as f64;
    let ddo = delta_u32(b.data_segs_out, s.data_segs_out) as f64;
    let (rx_segs, tx_segs) = (
        if ddi > 0.0 { ddi } else { dsi },
        if ddo > 0.0 { ddo } else { dso },
    );
    f.rx_bytes_per_s = per_s(drx);
    f.tx_bytes_per_s = per_s(dtx);
    f.segs_in_per_s = per_s(dsi);
    f.segs_out_per_s = per_s(dso);
    f.avg_rx_seg_bytes = (rx_segs > 0.0 && drx > 0.0).then(|| drx / rx_segs);
    f.avg_tx_seg_bytes = (tx_segs > 0.0 && dtx > 0.0).then(|| dtx / tx_segs);
    f
}

fn derive_threads(
    before: Option<&ProcSample>,
    p: &ProcSample,
    hz: f64,
    per_s: &dyn Fn(f64) -> f64,
) -> Vec<ThreadObs> {
    let Some(b) = before else {
        // No earlier sample: no thread's share is known.
        return Vec::new();
    };
    if std::sync::Arc::ptr_eq(&b.threads, &p.threads) {
        return Vec::new();
    }
    // The same threads in the same order (the common case): pair them without a map.
    let same = b.threads.len() == p.threads.len()
        && b.threads
            .iter()
            .zip(p.threads.iter())
            .all(|(x, y)| x.tid == y.tid);
    let prev: HashMap<u32, &ThreadSample> = if same {
        HashMap::new()
    } else {
        b.threads.iter().map(|t| (t.tid, t)).collect()
    };
    p.threads
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let bt = if same {
                Some(&b.threads[i])
            } else {
                prev.get(&t.tid).copied()
            }?;
            let secs = match (bt.cpu_ns, t.cpu_ns) {
                (Some(a), Some(b)) => delta(a, b) as f64 / 1e9,
                _ => {
                    delta(
                        bt.utime_ticks + bt.stime_ticks,
                        t.utime_ticks + t.stime_ticks,
                    ) as f64
                        / hz
                }
            };
            (secs > 0.0).then(|| ThreadObs {
                tid: t.tid,
                comm: t.comm.clone(),
                cpu_share: per_s(secs),
                last_cpu: t.last_cpu,
                allowed_cpus: t.allowed.clone(),
            })
        })
        .collect()
}

fn derive_irqs(prev: &Sample, cur: &Sample, per_s: &dyn Fn(f64) -> f64) -> Vec<IrqObs> {
    let prev_irq: HashMap<&str, &IrqSample> =
        prev.irqs.iter().map(|i| (i.irq.as_str(), i)).collect();
    cur.irqs
        .iter()
        .map(|i| {
            let mut per_cpu = BTreeMap::new();
            let before = prev_irq.get(i.irq.as_str());
            for (pos, &count) in i.counts.iter().enumerate() {
                let cpu = i.cpu_ids.get(pos).copied().unwrap_or(pos as u32);
                let prev_count = before.and_then(|b| {
                    let bp = if b.cpu_ids.is_empty() {
                        Some(pos)
                    } else {
                        b.cpu_ids.iter().position(|&c| c == cpu)
                    };
                    bp.and_then(|bp| b.counts.get(bp).copied())
                });
                let r = prev_count.map_or(0.0, |pc| per_s(delta(pc, count) as f64));
                per_cpu.insert(cpu, r);
            }
            IrqObs {
                irq: i.irq.clone(),
                name: i.name.clone(),
                per_cpu_per_s: per_cpu,
            }
        })
        .collect()
}

fn derive_power(
    prev: &Sample,
    cur: &Sample,
    per_s: &dyn Fn(f64) -> f64,
) -> (Option<f64>, BTreeMap<String, f64>) {
    let mut by_domain = BTreeMap::new();
    let mut energy_total = None;
    for e in &cur.energy {
        if let Some(p) = prev.energy.iter().find(|p| p.domain == e.domain) {
            let duj = delta_wrapping(p.energy_uj, e.energy_uj, e.max_range_uj);
            let w = per_s(duj as f64 / 1e6);
            by_domain.insert(e.domain.clone(), w);
            // Top-level zones only (`a:b`; sub-zones are `a:b:c`), nothing counted twice.
            if e.domain.matches(':').count() <= 1 {
                *energy_total.get_or_insert(0.0) += w;
            }
        }
    }
    let mut sensor_total = None;
    for s in &cur.power {
        let w = s.power_uw as f64 / 1e6;
        by_domain.insert(s.sensor.clone(), w);
        *sensor_total.get_or_insert(0.0) += w;
    }
    (energy_total.or(sensor_total), by_domain)
}

pub(crate) fn counter_rates(
    prev: &[CounterValue],
    cur: &[CounterValue],
    per_s: &dyn Fn(f64) -> f64,
) -> Option<CounterRates> {
    if cur.is_empty() {
        return None;
    }
    let mut rates = CounterRates {
        coverage: 1.0,
        ..Default::default()
    };
    for c in cur {
        let Some(p) = prev.iter().find(|p| p.event == c.event) else {
            continue;
        };
        let d_run = delta(p.time_running_ns, c.time_running_ns);
        let d_en = delta(p.time_enabled_ns, c.time_enabled_ns);
        let d_val = delta(p.value, c.value) as f64;
        let scaled = if d_run == 0 {
            0.0
        } else {
            d_val * d_en as f64 / d_run as f64
        };
        if d_en > 0 {
            rates.coverage = rates.coverage.min(d_run as f64 / d_en as f64);
        }
        rates
            .per_s
            .insert(c.event.name().to_string(), per_s(scaled));
    }
    if let Some(&instr) = rates.per_s.get("instructions") {
        if instr > 0.0 {
            for (k, v) in &rates.per_s {
                rates.per_kinstr.insert(k.clone(), v / instr * 1000.0);
            }
        }
    }
    Some(rates)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuSet;

    const S: u64 = 1_000_000_000;

    fn sample(t_s: u64) -> Sample {
        Sample {
            time_ns: t_s * S,
            clk_tck: 100,
            ..Default::default()
        }
    }

    #[test]
    fn processes_pair_the_same_in_pid_order_as_in_any_order() {
        let (mut a, mut b) = (sample(100), sample(101));
        for pid in 1..60u32 {
            if pid % 7 != 0 {
                a.procs
                    .push(std::sync::Arc::new(proc_(pid, 5, u64::from(pid))));
            }
            if pid % 11 != 0 {
                // pid 23 was reused: another start time, a new process.
                let start = if pid == 23 { 9_000 } else { 5 };
                b.procs
                    .push(std::sync::Arc::new(proc_(pid, start, u64::from(pid) * 3)));
            }
        }
        let view = |o: &Observation| -> Vec<(u32, bool, f64)> {
            let mut v: Vec<_> = o
                .procs
                .iter()
                .map(|p| (p.pid, p.new, p.cpu_share))
                .collect();
            v.sort_by_key(|x| x.0);
            v
        };
        let merged = view(&Observation::new(&a, &b));
        a.procs.reverse();
        b.procs.reverse();
        assert_eq!(merged, view(&Observation::new(&a, &b)));
        // The pairing itself: 7 is new (only in b), 23 is new (reused), 5 ran 10 ticks.
        let get = |pid: u32| merged.iter().find(|x| x.0 == pid).copied().unwrap();
        assert!(get(7).1 && get(23).1 && !get(5).1);
        assert!((get(5).2 - 0.10).abs() < 1e-9, "{:?}", get(5));
    }

    fn proc_(pid: u32, start: u64, ticks: u64) -> ProcSample {
        ProcSample {
            state: 'R',
            utime_ticks: ticks,
            last_cpu: Some(1),
            ..ProcSample::bare(pid, start, &format!("p{pid}"), CpuSet::first_n(2))
        }
    }

    /// `after` equals `new` for any `last`, and shares exactly the processes that stayed
    /// the very same sample with no sockets or counters and were quiet in `last` too.
    #[test]
    fn after_shares_what_stayed_quiet_and_equals_new() {
        let quiet = Arc::new(proc_(10, 5, 100));
        let runs = |ticks| Arc::new(proc_(11, 5, ticks));
        let with_socket = Arc::new(ProcSample {
            socket_inodes: vec![77],
            ..proc_(12, 5, 100)
        });
        let with_counters = Arc::new(ProcSample {
            counters: vec![CounterValue {
                event: CounterEvent::Cycles,
                value: 1,
                time_enabled_ns: 1,
                time_running_ns: 1,
            }],
            ..proc_(13, 5, 100)
        });
        let at = |t, procs: Vec<Arc<ProcSample>>| Sample {
            procs,
            sockets: [sock(77, 10 * t, 0, t, t)].into(),
            ..sample(t)
        };
        let (r1, r2) = (runs(100), runs(300));
        let fixed = [&quiet, &with_socket, &with_counters].map(|p| p.clone());
        let all = |r: &Arc<ProcSample>| {
            let mut v = fixed.to_vec();
            v.insert(1, r.clone());
            v
        };
        let (a, b, c, d) = (
            at(1, all(&r1)),
            at(2, all(&r2)),
            at(3, all(&r2)),
            at(4, all(&r2)),
        );
        let ab = Observation::new(&a, &b);
        let bc = Observation::after(&b, &c, &ab.procs);
        assert_eq!(bc, Observation::new(&b, &c));
        let shared = |x: &Observation, y: &Observation| -> Vec<u32> {
            x.procs
                .iter()
                .zip(&y.procs)
                .filter(|(p, q)| Arc::ptr_eq(p, q))
                .map(|(p, _)| p.pid)
                .collect()
        };
        // 11 ran from a to b: its observation there is not its quiet image.
        assert_eq!(shared(&ab, &bc), vec![10]);
        let cd = Observation::after(&c, &d, &bc.procs);
        assert_eq!(cd, Observation::new(&c, &d));
        assert_eq!(shared(&bc, &cd), vec![10, 11]);
        // Any other `last` (here one without them, and one of other samples) gives the same.
        assert_eq!(Observation::after(&c, &d, &[]), cd);
        assert_eq!(Observation::after(&c, &d, &ab.procs), cd);
        // 11 runs again: derived anew.
        let e = at(5, all(&runs(400)));
        let de = Observation::after(&d, &e, &cd.procs);
        assert_eq!(de, Observation::new(&d, &e));
        assert_eq!(shared(&cd, &de), vec![10]);
        assert!(de.proc(11).unwrap().cpu_share > 0.0);
    }

    fn sock(inode: u64, rx: u64, tx: u64, segs_in: u64, data_in: u64) -> SocketSample {
        SocketSample {
            inode,
            local: "10.0.0.1:5001".parse().unwrap(),
            remote: "10.0.0.2:40000".parse().unwrap(),
            state: 1,
            bytes_acked: tx,
            bytes_received: rx,
            segs_in,
            segs_out: 0,
            data_segs_in: data_in,
            data_segs_out: 0,
        }
    }

    #[test]
    fn interfaces_and_page_size_come_from_the_samples() {
        let nic = |p: u64, b: u64| NicCounters {
            name: "eth0".into(),
            rx_packets: p,
            rx_bytes: b,
            ..Default::default()
        };
        let a = Sample {
            time_ns: 1_000_000_000,
            nics: vec![nic(100, 100_000)],
            ..Default::default()
        };
        let b = Sample {
            time_ns: 3_000_000_000,
            nics: vec![
                nic(300, 400_000),
                NicCounters {
                    name: "new0".into(),
                    ..Default::default()
                },
            ],
            page_bytes: 65536,
            ..Default::default()
        };
        let o = derive(&a, &b, &[]);
        assert_eq!(
            o.nics.len(),
            1,
            "an interface only in the later sample is not listed"
        );
        assert_eq!(o.nics[0].rx_packets_per_s, 100.0);
        assert_eq!(o.nics[0].rx_bytes_per_s, 150_000.0);
        assert_eq!(o.page_bytes_or(4096), 65536);
        // Counters that went backwards count 0; a sample without a page size leaves the
        // fallback.
        let o = derive(&b, &a, &[]);
        assert_eq!(o.nics[0].rx_packets_per_s, 0.0);
        assert_eq!(o.page_bytes_or(4096), 4096);
    }

    #[test]
    fn energy_wraps() {
        assert_eq!(delta_wrapping(90, 10, Some(100)), 20);
        assert_eq!(delta_wrapping(10, 30, Some(100)), 20);
        assert_eq!(delta_wrapping(90, 10, None), 0);
        assert_eq!(delta(5, 3), 0);
    }

    #[test]
    fn segment_counters_wrap_at_u32() {
        assert_eq!(delta_u32(u32::MAX as u64 - 4, 5), 10);
        assert_eq!(delta_u32(5, 15), 10);
        // Not u32 values (a simulated source): plain reset rule.
        assert_eq!(delta_u32(1 << 40, 5), 0);
    }

    #[test]
    fn cpu_share_of_a_busy_process_is_one() {
        let mut a = sample(100);
        let mut b = sample(102);
        a.procs.push(std::sync::Arc::new(proc_(10, 5, 1000)));
        b.procs.push(std::sync::Arc::new(proc_(10, 5, 1200))); // 200 ticks at 100 Hz over 2 s
        let o = Observation::new(&a, &b);
        let p = o.proc(10).unwrap();
        assert!((p.cpu_share - 1.0).abs() < 1e-9);
        assert!(!p.new);
        assert_eq!(o.interval_s, 2.0);
    }

    #[test]
    fn reused_pid_is_a_new_process_and_exited_ones_vanish() {
        let mut a = sample(100);
        let mut b = sample(101);
        a.procs.push(std::sync::Arc::new(proc_(10, 5, 50_000)));
        a.procs.push(std::sync::Arc::new(proc_(11, 6, 10)));
        // pid 10 reused by a process started at t=100.5 s (10050 ticks) with 30 ticks.
        b.procs.push(std::sync::Arc::new(proc_(10, 10_050, 30)));
        let o = Observation::new(&a, &b);
        assert_eq!(o.procs.len(), 1, "pid 11 exited");
        let p = o.proc(10).unwrap();
        assert!(p.new);
        // Not 50_000 ticks backwards, and not 0: its own 30 ticks over the 1 s interval.
        assert!((p.cpu_share - 0.3).abs() < 1e-9, "{}", p.cpu_share);
    }

    #[test]
    fn missed_old_process_gets_no_share() {
        let a = sample(100);
        let mut b = sample(101);
        b.procs.push(std::sync::Arc::new(proc_(12, 500, 9_000))); // started at 5 s, long before prev
        let o = Observation::new(&a, &b);
        assert!(o.proc(12).unwrap().new);
        assert_eq!(o.proc(12).unwrap().cpu_share, 0.0);
    }

    #[test]
    fn counter_reset_gives_zero_not_huge() {
        let mut a = sample(100);
        let mut b = sample(101);
        a.procs.push(std::sync::Arc::new(proc_(10, 5, 500)));
        b.procs.push(std::sync::Arc::new(proc_(10, 5, 100)));
        let o = Observation::new(&a, &b);
        assert_eq!(o.proc(10).unwrap().cpu_share, 0.0);
    }

    #[test]
    fn zero_interval_gives_zero_rates() {
        let mut a = sample(100);
        a.procs.push(std::sync::Arc::new(proc_(10, 5, 500)));
        let mut b = a.clone();
        std::sync::Arc::make_mut(&mut b.procs[0]).utime_ticks = 600;
        let o = Observation::new(&a, &b);
        assert_eq!(o.proc(10).unwrap().cpu_share, 0.0);
        assert!(serde_json::to_string(&o).is_ok());
    }

    /// A dump the sampler reused (the very same sockets in both samples) derives what two
    /// equal dumps do: flows seen before, with no rates, not new.
    #[test]
    fn a_reused_dump_derives_as_two_equal_dumps_do() {
        let mut a = sample(100);
        let mut p = proc_(10, 5, 0);
        p.socket_inodes = vec![7, 8];
        a.procs.push(std::sync::Arc::new(p));
        a.sockets = [sock(7, 1_000, 0, 10, 9), sock(8, 5_000, 0, 5, 5)].into();
        let mut b = a.clone();
        b.time_ns += 2_000_000_000;
        assert!(std::sync::Arc::ptr_eq(&a.sockets, &b.sockets));
        let shared = Observation::new(&a, &b);
        let mut copied = b.clone();
        copied.sockets = b.sockets.to_vec().into();
        assert_eq!(shared, Observation::new(&a, &copied));
        let flows = &shared.proc(10).unwrap().flows;
        assert_eq!(flows.len(), 2);
        assert!(flows.iter().all(|f| !f.new && f.rx_bytes_per_s == 0.0));
    }

    #[test]
    fn flows_rates_segment_sizes_and_new_sockets() {
        let mut a = sample(100);
        let mut b = sample(102);
        let mut p = proc_(10, 5, 0);
        p.socket_inodes = vec![7, 8, 9];
        a.procs.push(std::sync::Arc::new(p.clone()));
        b.procs.push(std::sync::Arc::new(p));
        // Socket 7: 2 MB received in 2 s over 1000 data segments (+ 10 pure ACKs).
        // Socket 8: first seen now. Socket 9: closed during the interval (only in prev):
        // not listed. Socket 11: not this process's.
        a.sockets = [
            sock(7, 1_000_000, 0, 100, 90),
            sock(9, 1, 1, 1, 1),
            sock(11, 0, 0, 0, 0),
        ]
        .into();
        b.sockets = [
            sock(7, 3_000_000, 0, 1110, 1090),
            sock(8, 5_000, 0, 5, 5),
            sock(11, 1 << 30, 0, 0, 0),
        ]
        .into();
        let o = Observation::new(&a, &b);
        let p = o.proc(10).unwrap();
        assert_eq!(p.flows.len(), 2);
        let f7 = p.flows.iter().find(|f| f.inode == 7).unwrap();
        assert_eq!(f7.rx_bytes_per_s, 1_000_000.0);
        assert_eq!(f7.avg_rx_seg_bytes, Some(2000.0));
        assert_eq!(f7.segs_in_per_s, 505.0);
        assert_eq!(f7.avg_tx_seg_bytes, None);
        assert!(!f7.new);
        let f8 = p.flows.iter().find(|f| f.inode == 8).unwrap();
        assert!(f8.new);
        assert_eq!(f8.rx_bytes_per_s, 0.0);
        assert_eq!(p.rx_bytes_per_s, 1_000_000.0);
        assert_eq!(p.tx_bytes_per_s, 0.0);
    }

    #[test]
    fn avg_segment_falls_back_to_all_segments_without_data_segs() {
        let b = sock(1, 3000, 0, 12, 0);
        let a = sock(1, 0, 0, 10, 0);
        let f = derive_flow(Some(&a), &b, &|x| x);
        assert_eq!(f.avg_rx_seg_bytes, Some(1500.0));
    }

    #[test]
    fn irq_rates_by_cpu_id_and_device_only_in_cpu_totals() {
        let irq = |name: &str, counts: Vec<u64>, ids: Vec<u32>| IrqSample {
            irq: name.into(),
            counts,
            cpu_ids: ids,
            name: String::new(),
        };
        let mut a = sample(100);
        let mut b = sample(101);
        for c in [0, 1, 3] {
            a.cpus.push(CpuTimes {
                cpu: c,
                ..Default::default()
            });
            b.cpus.push(CpuTimes {
                cpu: c,
                ..Default::default()
            });
        }
        a.irqs.push(irq("30", vec![10, 20], vec![0, 1]));
        // CPU 3 came online: a new column; CPU 1's count is matched by id, not position.
        b.irqs.push(irq("30", vec![15, 120, 7], vec![0, 1, 3]));
        a.irqs.push(irq("LOC", vec![0, 0], vec![0, 1]));
        b.irqs
            .push(irq("LOC", vec![1000, 1000, 1000], vec![0, 1, 3]));
        let o = Observation::new(&a, &b);
        let i = o.irqs.iter().find(|i| i.irq == "30").unwrap();
        assert_eq!(i.per_cpu_per_s[&0], 5.0);
        assert_eq!(i.per_cpu_per_s[&1], 100.0);
        assert_eq!(i.per_cpu_per_s[&3], 0.0, "no previous count for CPU 3");
        assert_eq!(o.cpu(1).unwrap().irqs_per_s, 100.0, "LOC not counted");
    }

    #[test]
    fn cpu_util_and_softirqs() {
        let mut a = sample(100);
        let mut b = sample(101);
        a.cpus.push(CpuTimes {
            cpu: 0,
            user: 100,
            idle: 100,
            ..Default::default()
        });
        b.cpus.push(CpuTimes {
            cpu: 0,
            user: 150,
            idle: 130,
            softirq: 20,
            ..Default::default()
        });
        a.softirqs.push(SoftirqCounts {
            cpu: 0,
            net_rx: 10,
            net_tx: 0,
        });
        b.softirqs.push(SoftirqCounts {
            cpu: 0,
            net_rx: 1010,
            net_tx: 5,
        });
        let o = Observation::new(&a, &b);
        let c = o.cpu(0).unwrap();
        assert!((c.util - 0.7).abs() < 1e-9);
        assert!((c.user - 0.5).abs() < 1e-9);
        assert!((c.softirq - 0.2).abs() < 1e-9);
        assert_eq!(c.net_rx_softirqs_per_s, 1000.0);
        assert_eq!(c.net_tx_softirqs_per_s, 5.0);
    }

    #[test]
    fn power_from_rapl_top_level_and_sensors() {
        let e = |d: &str, uj: u64| EnergyCounter {
            domain: d.into(),
            energy_uj: uj,
            max_range_uj: Some(1_000_000_000),
        };
        let mut a = sample(100);
        let mut b = sample(102);
        a.energy = vec![e("intel-rapl:0", 999_000_000), e("intel-rapl:0:0", 0)];
        // Package wrapped: 1e6 uJ before the wrap + 99e6 after = 100 J in 2 s = 50 W.
        b.energy = vec![
            e("intel-rapl:0", 99_000_000),
            e("intel-rapl:0:0", 60_000_000),
        ];
        b.power = vec![PowerReading {
            sensor: "hwmon0/acpi/power1".into(),
            power_uw: 120_000_000,
        }];
        let o = Observation::new(&a, &b);
        assert_eq!(o.power_by_domain_w["intel-rapl:0"], 50.0);
        assert_eq!(o.power_by_domain_w["intel-rapl:0:0"], 30.0);
        assert_eq!(o.power_by_domain_w["hwmon0/acpi/power1"], 120.0);
        assert_eq!(o.power_w, Some(50.0), "RAPL preferred, sub-zone not added");
        // Sensors only.
        a.energy.clear();
        b.energy.clear();
        assert_eq!(Observation::new(&a, &b).power_w, Some(120.0));
        b.power.clear();
        assert_eq!(Observation::new(&a, &b).power_w, None);
    }

    #[test]
    fn counter_rates_scaled_and_per_kinstr() {
        let cv = |e: CounterEvent, v: u64, en: u64, run: u64| CounterValue {
            event: e,
            value: v,
            time_enabled_ns: en,
            time_running_ns: run,
        };
        let mut a = sample(100);
        let mut b = sample(101);
        let mut p = proc_(10, 5, 0);
        p.counters = vec![
            cv(CounterEvent::Instructions, 0, 0, 0),
            cv(CounterEvent::LlcMisses, 0, 0, 0),
        ];
        a.procs.push(std::sync::Arc::new(p.clone()));
        // Instructions: 1e9 counted over the full second; misses: 1e6 counted half the time.
        p.counters = vec![
            cv(CounterEvent::Instructions, 1_000_000_000, S, S),
            cv(CounterEvent::LlcMisses, 1_000_000, S, S / 2),
        ];
        b.procs.push(std::sync::Arc::new(p));
        let o = Observation::new(&a, &b);
        let c = o.proc(10).unwrap().counters.as_ref().unwrap();
        assert_eq!(c.per_s["instructions"], 1e9);
        assert_eq!(c.per_s["llc_misses"], 2e6);
        assert_eq!(c.per_kinstr["llc_misses"], 2.0);
        assert_eq!(c.coverage, 0.5);
        // No PMU: no counters at all, not zeros.
        let a = sample(1);
        let mut b = sample(2);
        b.procs.push(std::sync::Arc::new(proc_(1, 0, 0)));
        assert!(Observation::new(&a, &b).procs[0].counters.is_none());
    }

    fn thread(tid: u32, ticks: u64, cpu_ns: Option<u64>) -> ThreadSample {
        ThreadSample {
            tid,
            comm: "w".into(),
            state: 'R',
            utime_ticks: ticks,
            stime_ticks: 0,
            last_cpu: Some(0),
            allowed: CpuSet::single(0),
            cpu_ns,
        }
    }

    #[test]
    fn thread_shares_matched_by_tid() {
        let t = |tid: u32, ticks: u64| thread(tid, ticks, None);
        let mut a = sample(100);
        let mut b = sample(101);
        let mut p = proc_(10, 5, 0);
        p.threads = vec![t(10, 0), t(11, 0), t(13, 7)].into();
        a.procs.push(std::sync::Arc::new(p.clone()));
        p.threads = vec![t(10, 50), t(12, 80), t(13, 7)].into();
        b.procs.push(std::sync::Arc::new(p));
        let o = Observation::new(&a, &b);
        let th = &o.proc(10).unwrap().threads;
        // 10 ran; 12 is new (unknown start, no share); 13 slept; 11 exited.
        assert_eq!(th.len(), 1, "{th:?}");
        assert_eq!((th[0].tid, th[0].cpu_share), (10, 0.5));
        // The same list as before (the sampler's cache): no thread ran, none is listed.
        let mut c = sample(102);
        c.procs.push(b.procs[0].clone());
        assert!(Observation::new(&b, &c)
            .proc(10)
            .unwrap()
            .threads
            .is_empty());
    }

    #[test]
    fn thread_share_from_collector_ns_when_both_samples_carry_it() {
        let t = |ticks: u64, ns: Option<u64>| thread(10, ticks, ns);
        let share = |before: ThreadSample, after: ThreadSample| {
            let (mut a, mut b) = (sample(100), sample(101));
            let mut p = proc_(10, 5, 0);
            p.threads = vec![before].into();
            a.procs.push(std::sync::Arc::new(p.clone()));
            p.threads = vec![after].into();
            b.procs.push(std::sync::Arc::new(p));
            let o = Observation::new(&a, &b);
            o.proc(10).unwrap().threads.first().map(|t| t.cpu_share)
        };
        // Stale ticks (not read again), current ns: the ns decide.
        assert_eq!(
            share(t(7, Some(70_000_000)), t(7, Some(320_000_000))),
            Some(0.25)
        );
        // ns on one side only (the collector came or went): the ticks decide.
        assert_eq!(share(t(0, None), t(50, Some(1))), Some(0.5));
        assert_eq!(share(t(0, Some(5)), t(50, None)), Some(0.5));
        // ns unchanged: the thread did not run, whatever its ticks say.
        assert_eq!(share(t(0, Some(9)), t(50, Some(9))), None);
    }
}
