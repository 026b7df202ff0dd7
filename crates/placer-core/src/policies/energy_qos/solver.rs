//! The solver of `energy-qos`: clusters and apps as it sees them, the prediction of one
//! state, and the exhaustive search (module doc of `energy_qos`, "Search and invariants").

use super::EnergyQosConfig;
use crate::power_table::{clusters_of, Cluster, StatePowerTable};
use crate::topology::Topology;
use std::collections::BTreeMap;

/// A CPU-bound app's maximum performance (capacity units, 1024 = the biggest CPU at its
/// top frequency): `threads` CPUs of the largest cluster, at most, at the biggest capacity.
pub fn max_perf(clusters: &[Cluster], threads: u32) -> f64 {
    let k = clusters.iter().map(|c| c.cpus.len()).max().unwrap_or(1) as f64;
    let cap = clusters.iter().map(|c| c.cap_max).fold(0.0, f64::max);
    f64::from(threads).min(k) * cap
}

/// What an app needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// Network app: bandwidth in the limited direction, with its average segment size.
    Bandwidth {
        bytes_per_s: f64,
        segment_bytes: f64,
        /// True when received bytes are limited (their softirq lands on the rx CPU).
        receive: bool,
    },
    /// CPU-bound app: share of its maximum performance.
    PerfShare { share: f64, threads: u32 },
    /// Periodic real-time app.
    RealTime {
        period_us: f64,
        deadline_us: f64,
        work_us: f64,
    },
}

/// One app as the solver sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct AppDemand {
    pub name: String,
    pub target: Target,
    /// This app's own CPU cost per byte, ns at capacity 1024, when learned for it
    /// (`None`: the configured `app_ns_per_byte`).
    pub app_ns_per_byte: Option<f64>,
}

/// The solver's inputs besides the apps.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    pub clusters: Vec<Cluster>,
    /// The receive-processing CPU of the NIC the network apps use.
    pub rx_cpu: Option<u32>,
    pub power: StatePowerTable,
}

impl Machine {
    pub fn for_topology(topo: &Topology, power: StatePowerTable) -> Machine {
        let rx_cpu = topo
            .nics
            .iter()
            .filter(|n| n.name != "lo")
            .find_map(|n| n.rx_cpus.first());
        Machine {
            clusters: clusters_of(topo),
            rx_cpu,
            power,
        }
    }

    fn rx_cluster(&self) -> Option<usize> {
        let rx = self.rx_cpu?;
        self.clusters.iter().position(|c| c.cpus.contains(rx))
    }

    /// Largest cluster size times the biggest capacity: a CPU-bound app's maximum.
    fn max_perf(&self, threads: u32) -> f64 {
        max_perf(&self.clusters, threads)
    }
}

/// A system state: frequency per cluster (index-aligned with `Machine::clusters`) and a
/// cluster per app (index-aligned with the apps).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub freq_khz: Vec<u64>,
    pub cluster_of_app: Vec<usize>,
}

/// A target a state misses, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Miss {
    /// App name, or `receive processing`.
    pub what: String,
    pub why: String,
}

/// One state's prediction.
#[derive(Debug, Clone, PartialEq)]
pub struct Eval {
    pub power_w: f64,
    /// Per app: achieved / needed (>= 1 meets the target).
    pub achieved: Vec<f64>,
    /// Per app: predicted performance in its own unit (bytes/s, capacity units, or
    /// deadline slack ratio).
    pub perf: Vec<f64>,
    pub misses: Vec<Miss>,
}

/// Per-app softirq load (capacity units on the receive CPU) and thread demand.
pub(super) fn net_costs(
    cfg: &EnergyQosConfig,
    app: &AppDemand,
    bytes: f64,
    seg: f64,
    receive: bool,
) -> (f64, f64) {
    let pkts = bytes / seg.max(1.0);
    let stack_s = (pkts * cfg.softirq_ns_per_packet + bytes * cfg.softirq_ns_per_byte) * 1e-9;
    let app_s = bytes * app.app_ns_per_byte.unwrap_or(cfg.app_ns_per_byte) * 1e-9;
    if receive {
        (stack_s * 1024.0, app_s * 1024.0)
    } else {
        (0.0, (app_s + stack_s) * 1024.0)
    }
}

pub(super) struct ClusterEval {
    pub(super) power_w: f64,
    pub(super) misses: Vec<Miss>,
    /// (app index, achieved ratio, perf)
    pub(super) apps: Vec<(usize, f64, f64)>,
}

/// Evaluates one cluster at one frequency with the apps assigned to it. `softirq` is the
/// receive-processing load (capacity units) when this cluster holds the receive CPU.
pub(super) fn eval_cluster(
    cfg: &EnergyQosConfig,
    m: &Machine,
    ci: usize,
    khz: u64,
    apps: &[AppDemand],
    members: &[usize],
    softirq: f64,
) -> ClusterEval {
    let c = &m.clusters[ci];
    let cap = c.cap_at(khz).max(1e-9);
    let k = c.cpus.len() as f64;
    let holds_rx = m.rx_cpu.is_some_and(|r| c.cpus.contains(r));
    let mut misses = Vec::new();
    let mhz = khz / 1000;
    if softirq > cfg.max_util * cap {
        misses.push(Miss {
            what: "receive processing".into(),
            why: format!(
                "the network apps' softirq load needs {:.0}% of receive CPU {} at {} MHz, \
                 above max_util {:.0}%",
                100.0 * softirq / cap,
                m.rx_cpu.unwrap_or(0),
                mhz,
                100.0 * cfg.max_util
            ),
        });
    }
    // Real-time apps first (above CFS).
    let rt_cpus = if holds_rx && cfg.rt_avoid_rx_cpu && k > 1.0 {
        k - 1.0
    } else {
        k
    };
    let rt_shares_rx = holds_rx && !(cfg.rt_avoid_rx_cpu && k > 1.0);
    let mut rt_load = 0.0;
    let mut out = Vec::new();
    for &i in members {
        if let Target::RealTime {
            period_us,
            deadline_us,
            work_us,
        } = apps[i].target
        {
            let mut resp = work_us * 1024.0 / cap;
            if rt_shares_rx {
                let free = 1.0 - (softirq / cap).min(1.0);
                resp = if free > 0.0 {
                    resp / free
                } else {
                    f64::INFINITY
                };
            }
            rt_load += work_us / period_us * 1024.0;
            let ratio = deadline_us / resp;
            if ratio < 1.0 - 1e-9 {
                misses.push(Miss {
                    what: apps[i].name.clone(),
                    why: format!(
                        "response {:.0} us > deadline {:.0} us on cluster {} at {} MHz{}",
                        resp,
                        deadline_us,
                        c.domain,
                        mhz,
                        if rt_shares_rx {
                            " sharing the receive CPU with softirq"
                        } else {
                            ""
                        }
                    ),
                });
            }
            out.push((i, ratio, ratio));
        }
    }
    if rt_load > cfg.max_util * rt_cpus * cap {
        for &i in members {
            if matches!(apps[i].target, Target::RealTime { .. }) {
                misses.push(Miss {
                    what: apps[i].name.clone(),
                    why: format!(
                        "real-time load {:.0}% of {} CPU(s) of cluster {} at {} MHz exceeds \
                         max_util",
                        100.0 * rt_load / (rt_cpus * cap),
                        rt_cpus,
                        c.domain,
                        mhz
                    ),
                });
            }
        }
    }
    // CFS: bounded network threads and greedy CPU-bound threads share what is left.
    let free = (k * cap - softirq.min(cap) - rt_load).max(0.0);
    let mut threads: Vec<(usize, f64)> = Vec::new(); // (app, demand; INF = greedy)
    let mut bounded = 0.0;
    for &i in members {
        match apps[i].target {
            Target::Bandwidth {
                bytes_per_s,
                segment_bytes,
                receive,
            } => {
                let (_, d) = net_costs(cfg, &apps[i], bytes_per_s, segment_bytes, receive);
                bounded += d;
                threads.push((i, d));
            }
            Target::PerfShare { threads: n, .. } => {
                for _ in 0..n.max(1) {
                    threads.push((i, f64::INFINITY));
                }
            }
            Target::RealTime { .. } => {}
        }
    }
    let alloc = water_fill(&threads, free, cap);
    let mut got: BTreeMap<usize, f64> = BTreeMap::new();
    for (t, a) in threads.iter().zip(&alloc) {
        *got.entry(t.0).or_default() += a;
    }
    let bounded_over = bounded > cfg.max_util * free.max(1e-9) && bounded > 0.0;
    for &i in members {
        match apps[i].target {
            Target::Bandwidth {
                bytes_per_s,
                segment_bytes,
                receive,
            } => {
                let (_, d) = net_costs(cfg, &apps[i], bytes_per_s, segment_bytes, receive);
                let g = got.get(&i).copied().unwrap_or(0.0);
                let ratio = if d > 0.0 { (g / d).min(1.0) } else { 1.0 };
                if ratio < 1.0 - 1e-9 || bounded_over {
                    misses.push(Miss {
                        what: apps[i].name.clone(),
                        why: format!(
                            "its thread needs {:.0} capacity units for {:.1} MB/s but cluster {} \
                             at {} MHz gives it {:.0} (network load {:.0} of {:.0} free)",
                            d,
                            bytes_per_s / 1e6,
                            c.domain,
                            mhz,
                            g,
                            bounded,
                            free
                        ),
                    });
                }
                out.push((i, ratio, bytes_per_s * ratio));
            }
            Target::PerfShare { share, threads: n } => {
                let g = got.get(&i).copied().unwrap_or(0.0);
                let need = share * m.max_perf(n);
                let ratio = g / need.max(1e-9);
                if ratio < 1.0 - 1e-9 {
                    misses.push(Miss {
                        what: apps[i].name.clone(),
                        why: format!(
                            "reaches {:.0}% of its maximum performance on cluster {} at {} MHz, \
                             target {:.0}%",
                            100.0 * g / m.max_perf(n),
                            c.domain,
                            mhz,
                            100.0 * share
                        ),
                    });
                }
                out.push((i, ratio, g));
            }
            Target::RealTime { .. } => {}
        }
    }
    let used: f64 = alloc.iter().sum::<f64>() + rt_load + softirq.min(cap);
    let busy = (used / cap).min(k);
    ClusterEval {
        power_w: m.power.cluster_w(c.domain, khz, busy),
        misses,
        apps: out,
    }
}

/// Fair sharing of `total` capacity among threads with demands (INF = greedy), each at
/// most `per_thread`: every thread gets min(demand, level) with the level chosen so the
/// sum is at most `total`.
pub(super) fn water_fill(threads: &[(usize, f64)], total: f64, per_thread: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..threads.len()).collect();
    order.sort_by(|&a, &b| threads[a].1.total_cmp(&threads[b].1));
    let mut out = vec![0.0; threads.len()];
    let mut left = total;
    let mut n_left = threads.len();
    for &j in &order {
        let level = (left / n_left as f64).min(per_thread);
        let a = threads[j].1.min(level).max(0.0);
        out[j] = a;
        left -= a;
        n_left -= 1;
    }
    out
}

/// The softirq load (capacity units) the network apps cause on the receive CPU.
pub(super) fn softirq_load(cfg: &EnergyQosConfig, apps: &[AppDemand]) -> f64 {
    apps.iter()
        .map(|a| match a.target {
            Target::Bandwidth {
                bytes_per_s,
                segment_bytes,
                receive,
            } => net_costs(cfg, a, bytes_per_s, segment_bytes, receive).0,
            _ => 0.0,
        })
        .sum()
}

/// Predicts one full state. Pure.
pub fn evaluate(cfg: &EnergyQosConfig, m: &Machine, apps: &[AppDemand], s: &State) -> Eval {
    let softirq = softirq_load(cfg, apps);
    let rx = m.rx_cluster();
    let mut e = Eval {
        power_w: m.power.base_w,
        achieved: vec![0.0; apps.len()],
        perf: vec![0.0; apps.len()],
        misses: Vec::new(),
    };
    for ci in 0..m.clusters.len() {
        let members: Vec<usize> = (0..apps.len())
            .filter(|&i| s.cluster_of_app[i] == ci)
            .collect();
        let sirq = if rx == Some(ci) { softirq } else { 0.0 };
        let ce = eval_cluster(cfg, m, ci, s.freq_khz[ci], apps, &members, sirq);
        e.power_w += ce.power_w;
        e.misses.extend(ce.misses);
        for (i, r, p) in ce.apps {
            e.achieved[i] = r;
            e.perf[i] = p;
        }
    }
    e
}

/// The solver's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Solution {
    pub state: State,
    pub eval: Eval,
    /// States evaluated (cluster-level evaluations).
    pub evaluated: u64,
    /// Apps beyond the search bound, put on the largest cluster.
    pub unsearched: Vec<String>,
}

/// Finds the state with the fewest missed targets, then the least power. Exact over the
/// product space (see the module doc); `None` when the machine has no clusters.
pub fn solve(cfg: &EnergyQosConfig, m: &Machine, apps: &[AppDemand]) -> Option<Solution> {
    let nc = m.clusters.len();
    if nc == 0 {
        return None;
    }
    let softirq = softirq_load(cfg, apps);
    let rx = m.rx_cluster();
    let freqs_total: u64 = m.clusters.iter().map(|c| c.freqs_khz.len() as u64).sum();
    // How many apps can be searched exhaustively within the bound.
    let mut searched = apps.len();
    while searched > 0
        && (nc as u64)
            .checked_pow(searched as u32)
            .and_then(|a| a.checked_mul(freqs_total))
            .is_none_or(|n| n > cfg.max_search_states)
    {
        searched -= 1;
    }
    let largest = (0..nc)
        .max_by(|&a, &b| {
            let w = |c: &Cluster| c.cap_max * c.cpus.len() as f64;
            w(&m.clusters[a]).total_cmp(&w(&m.clusters[b]))
        })
        .unwrap_or(0);
    let unsearched: Vec<String> = apps[searched..].iter().map(|a| a.name.clone()).collect();
    let mut best: Option<(usize, f64, State)> = None;
    let mut evaluated = 0u64;
    let mut assign = vec![0usize; searched];
    loop {
        let cluster_of_app: Vec<usize> = (0..apps.len())
            .map(|i| if i < searched { assign[i] } else { largest })
            .collect();
        let mut freq_khz = Vec::with_capacity(nc);
        let (mut misses, mut power) = (0usize, m.power.base_w);
        for ci in 0..nc {
            let members: Vec<usize> = (0..apps.len())
                .filter(|&i| cluster_of_app[i] == ci)
                .collect();
            let sirq = if rx == Some(ci) { softirq } else { 0.0 };
            let mut pick: Option<(usize, f64, u64)> = None;
            for &f in &m.clusters[ci].freqs_khz {
                let ce = eval_cluster(cfg, m, ci, f, apps, &members, sirq);
                evaluated += 1;
                let key = (ce.misses.len(), ce.power_w);
                if pick.is_none_or(|(pm, pp, _)| key.0 < pm || (key.0 == pm && key.1 < pp)) {
                    pick = Some((key.0, key.1, f));
                }
            }
            let (pm, pp, f) = pick.unwrap_or((0, 0.0, 0));
            misses += pm;
            power += pp;
            freq_khz.push(f);
        }
        if best
            .as_ref()
            .is_none_or(|(bm, bp, _)| misses < *bm || (misses == *bm && power < *bp - 1e-12))
        {
            best = Some((
                misses,
                power,
                State {
                    freq_khz,
                    cluster_of_app,
                },
            ));
        }
        // Next assignment (odometer).
        let mut i = 0;
        while i < searched {
            assign[i] += 1;
            if assign[i] < nc {
                break;
            }
            assign[i] = 0;
            i += 1;
        }
        if i == searched {
            break;
        }
    }
    let (_, _, state) = best?;
    let eval = evaluate(cfg, m, apps, &state);
    Some(Solution {
        state,
        eval,
        evaluated,
        unsearched,
    })
}
