//! The pure derivation of an [`Observation`] from two [`Sample`]s.
//!
//! Rules: a counter that went backwards wrapped (energy counters wrap at their range;
//! other counters are treated as reset and give 0 for the interval rather than a huge
//! negative or positive rate); a process present only in `cur` is new (its rate covers its
//! own lifetime: counters since start); a pid whose start time changed is a new process.

use crate::observation::*;
use crate::sample::*;
use std::collections::{BTreeMap, HashMap};

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

pub(crate) fn derive(prev: &Sample, cur: &Sample) -> Observation {
    let dt_ns = cur.time_ns.saturating_sub(prev.time_ns);
    let dt = (dt_ns as f64 / 1e9).max(1e-9);
    let hz = if cur.clk_tck == 0 {
        100.0
    } else {
        cur.clk_tck as f64
    };

    // Per CPU.
    let prev_cpu: HashMap<u32, &CpuTimes> = prev.cpus.iter().map(|c| (c.cpu, c)).collect();
    let prev_soft: HashMap<u32, &SoftirqCounts> =
        prev.softirqs.iter().map(|c| (c.cpu, c)).collect();
    let cur_soft: HashMap<u32, &SoftirqCounts> = cur.softirqs.iter().map(|c| (c.cpu, c)).collect();
    let irqs = derive_irqs(prev, cur, dt);
    let mut irqs_per_cpu: BTreeMap<u32, f64> = BTreeMap::new();
    for i in &irqs {
        for (&c, &r) in &i.per_cpu_per_s {
            *irqs_per_cpu.entry(c).or_default() += r;
        }
    }
    let cpus = cur
        .cpus
        .iter()
        .map(|c| {
            let mut o = CpuObs {
                cpu: c.cpu,
                ..Default::default()
            };
            if let Some(p) = prev_cpu.get(&c.cpu) {
                let total = delta(p.total(), c.total()) as f64;
                if total > 0.0 {
                    let f = |a: u64, b: u64| delta(a, b) as f64 / total;
                    o.util = (delta(p.busy(), c.busy()) as f64 / total).clamp(0.0, 1.0);
                    o.user = f(p.user + p.nice, c.user + c.nice);
                    o.system = f(p.system, c.system);
                    o.irq = f(p.irq, c.irq);
                    o.softirq = f(p.softirq, c.softirq);
                }
            }
            if let (Some(p), Some(s)) = (prev_soft.get(&c.cpu), cur_soft.get(&c.cpu)) {
                o.net_rx_softirqs_per_s = delta(p.net_rx, s.net_rx) as f64 / dt;
                o.net_tx_softirqs_per_s = delta(p.net_tx, s.net_tx) as f64 / dt;
            }
            o.irqs_per_s = irqs_per_cpu.get(&c.cpu).copied().unwrap_or(0.0);
            o
        })
        .collect();

    // Sockets by inode.
    let prev_socks: HashMap<u64, &SocketSample> =
        prev.sockets.iter().map(|s| (s.inode, s)).collect();
    let cur_socks: HashMap<u64, &SocketSample> = cur.sockets.iter().map(|s| (s.inode, s)).collect();

    let prev_procs: HashMap<ProcKey, &ProcSample> =
        prev.procs.iter().map(|p| (p.key(), p)).collect();
    let procs = cur
        .procs
        .iter()
        .map(|p| {
            let before = prev_procs.get(&p.key());
            let new = before.is_none();
            let cpu_ticks = match before {
                Some(b) => delta(b.utime_ticks + b.stime_ticks, p.utime_ticks + p.stime_ticks),
                None => 0,
            };
            let mut flows = Vec::new();
            let (mut rx, mut tx, mut si, mut so) = (0.0, 0.0, 0.0, 0.0);
            for ino in &p.socket_inodes {
                let Some(s) = cur_socks.get(ino) else {
                    continue;
                };
                // A socket first seen now: no rate yet (its counters cover an unknown span).
                let Some(b) = prev_socks.get(ino) else {
                    continue;
                };
                let drx = delta(b.bytes_received, s.bytes_received) as f64;
                let dtx = delta(b.bytes_acked, s.bytes_acked) as f64;
                let dsi = delta(b.segs_in, s.segs_in) as f64;
                let dso = delta(b.segs_out, s.segs_out) as f64;
                rx += drx / dt;
                tx += dtx / dt;
                si += dsi / dt;
                so += dso / dt;
                flows.push(FlowObs {
                    local: s.local,
                    remote: s.remote,
                    state: s.state,
                    inode: s.inode,
                    rx_bytes_per_s: drx / dt,
                    tx_bytes_per_s: dtx / dt,
                    avg_rx_seg_bytes: (dsi > 0.0 && drx > 0.0).then(|| drx / dsi),
                    avg_tx_seg_bytes: (dso > 0.0 && dtx > 0.0).then(|| dtx / dso),
                });
            }
            let threads = p
                .threads
                .iter()
                .map(|t| {
                    let share = before
                        .and_then(|b| b.threads.iter().find(|bt| bt.tid == t.tid))
                        .map(|bt| {
                            delta(
                                bt.utime_ticks + bt.stime_ticks,
                                t.utime_ticks + t.stime_ticks,
                            ) as f64
                                / hz
                                / dt
                        })
                        .unwrap_or(0.0);
                    ThreadObs {
                        tid: t.tid,
                        comm: t.comm.clone(),
                        cpu_share: share,
                        last_cpu: t.last_cpu,
                        allowed_cpus: t.allowed.clone(),
                    }
                })
                .collect();
            ProcObs {
                pid: p.pid,
                start_time_ticks: p.start_time_ticks,
                comm: p.comm.clone(),
                state: p.state,
                uid: p.uid,
                cgroup: p.cgroup.clone(),
                kernel_thread: p.kernel_thread,
                cpu_share: cpu_ticks as f64 / hz / dt,
                allowed_cpus: p.allowed.clone(),
                last_cpu: p.last_cpu,
                num_threads: p.num_threads,
                rx_bytes_per_s: rx,
                tx_bytes_per_s: tx,
                segs_in_per_s: si,
                segs_out_per_s: so,
                flows,
                threads,
                counters: before.and_then(|b| counter_rates(&b.counters, &p.counters, dt)),
                numa_pages: p.numa_pages.clone(),
                new,
            }
        })
        .collect();

    let (power_w, power_by_domain_w) = derive_power(prev, cur, dt);
    Observation {
        time_ns: cur.time_ns,
        interval_s: dt,
        cpus,
        procs,
        irqs,
        power_w,
        power_by_domain_w,
    }
}

fn derive_irqs(prev: &Sample, cur: &Sample, dt: f64) -> Vec<IrqObs> {
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
                    b.cpu_ids
                        .iter()
                        .position(|&c| c == cpu)
                        .or(if b.cpu_ids.is_empty() {
                            Some(pos)
                        } else {
                            None
                        })
                        .and_then(|bp| b.counts.get(bp).copied())
                });
                let r = match prev_count {
                    Some(pc) => delta(pc, count) as f64 / dt,
                    None => 0.0,
                };
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

fn derive_power(prev: &Sample, cur: &Sample, dt: f64) -> (Option<f64>, BTreeMap<String, f64>) {
    let mut by_domain = BTreeMap::new();
    for e in &cur.energy {
        if let Some(p) = prev.energy.iter().find(|p| p.domain == e.domain) {
            let duj = delta_wrapping(p.energy_uj, e.energy_uj, e.max_range_uj);
            by_domain.insert(e.domain.clone(), duj as f64 / 1e6 / dt);
        }
    }
    for s in &cur.power {
        by_domain.insert(s.sensor.clone(), s.power_uw as f64 / 1e6);
    }
    // Whole-machine power: the top-level domains only (RAPL subdomains are `a:b:c`, nested
    // in `a:b`), so nothing is counted twice.
    let total: f64 = by_domain
        .iter()
        .filter(|(k, _)| k.matches(':').count() <= 1)
        .map(|(_, v)| v)
        .sum();
    let power = (!by_domain.is_empty()).then_some(total);
    (power, by_domain)
}

pub(crate) fn counter_rates(
    prev: &[CounterValue],
    cur: &[CounterValue],
    dt: f64,
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
        rates.per_s.insert(c.event.name().to_string(), scaled / dt);
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

    #[test]
    fn energy_wraps() {
        assert_eq!(delta_wrapping(90, 10, Some(100)), 20);
        assert_eq!(delta_wrapping(10, 30, Some(100)), 20);
        assert_eq!(delta_wrapping(90, 10, None), 0);
        assert_eq!(delta(5, 3), 0);
    }
}
