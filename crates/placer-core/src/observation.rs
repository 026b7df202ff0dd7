//! Rates derived from two raw samples by a pure function: what each CPU, process, flow and
//! IRQ did during the interval. Policies read only this (and the topology).

use crate::cpuset::CpuSet;
use crate::sample::ProcKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Observation {
    /// Time of the later sample.
    pub time_ns: u64,
    pub interval_s: f64,
    pub cpus: Vec<CpuObs>,
    pub procs: Vec<std::sync::Arc<ProcObs>>,
    pub irqs: Vec<IrqObs>,
    /// Whole-machine power over the interval, from energy counters or power sensors.
    pub power_w: Option<f64>,
    /// Power per energy domain (`intel-rapl:0` -> W).
    #[serde(default)]
    pub power_by_domain_w: BTreeMap<String, f64>,
    /// Size of the pages `numa_pages` counts on the observed machine, bytes (0 = unknown:
    /// see [`Observation::page_bytes_or`]).
    #[serde(default)]
    pub page_bytes: u64,
    /// Per network interface: packet and byte rates (empty unless asked for).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<NicObs>,
}

/// One interface's rates over the interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct NicObs {
    pub name: String,
    pub rx_packets_per_s: f64,
    pub rx_bytes_per_s: f64,
    pub tx_packets_per_s: f64,
    pub tx_bytes_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CpuObs {
    pub cpu: u32,
    /// Busy fraction of the interval (everything but idle and iowait), 0..=1.
    pub util: f64,
    pub user: f64,
    pub system: f64,
    pub irq: f64,
    pub softirq: f64,
    pub net_rx_softirqs_per_s: f64,
    pub net_tx_softirqs_per_s: f64,
    pub irqs_per_s: f64,
    /// Frequency at the later sample, kHz (None without cpufreq).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cur_khz: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcObs {
    pub pid: u32,
    pub start_time_ticks: u64,
    pub comm: std::sync::Arc<str>,
    pub state: char,
    pub uid: Option<u32>,
    pub cgroup: std::sync::Arc<str>,
    pub kernel_thread: bool,
    /// CPU time over the interval in CPUs (1.0 = one CPU fully busy).
    pub cpu_share: f64,
    pub allowed_cpus: CpuSet,
    pub last_cpu: Option<u32>,
    pub num_threads: u32,
    pub rx_bytes_per_s: f64,
    pub tx_bytes_per_s: f64,
    pub segs_in_per_s: f64,
    pub segs_out_per_s: f64,
    pub flows: Vec<FlowObs>,
    /// The threads that used CPU in the interval (see observe.rs's rules); empty unless
    /// threads were sampled.
    #[serde(default)]
    pub threads: Vec<ThreadObs>,
    /// Hardware counter rates; None without a PMU.
    #[serde(default)]
    pub counters: Option<CounterRates>,
    #[serde(default)]
    pub numa_pages: BTreeMap<u32, u64>,
    /// True when this process was first seen in the later sample (new or PID reused).
    #[serde(default)]
    pub new: bool,
}

impl ProcObs {
    /// A quiet, sleeping user process allowed on `allowed_cpus`, everything else zero or
    /// empty: a base for tests and models to fill in.
    pub fn bare(pid: u32, start_time_ticks: u64, comm: &str, allowed_cpus: CpuSet) -> ProcObs {
        ProcObs {
            pid,
            start_time_ticks,
            comm: comm.into(),
            state: 'S',
            uid: Some(0),
            cgroup: "/".into(),
            kernel_thread: false,
            cpu_share: 0.0,
            allowed_cpus,
            last_cpu: None,
            num_threads: 1,
            rx_bytes_per_s: 0.0,
            tx_bytes_per_s: 0.0,
            segs_in_per_s: 0.0,
            segs_out_per_s: 0.0,
            flows: Vec::new(),
            threads: Vec::new(),
            counters: None,
            numa_pages: BTreeMap::new(),
            new: false,
        }
    }

    pub fn key(&self) -> ProcKey {
        ProcKey {
            pid: self.pid,
            start_time_ticks: self.start_time_ticks,
        }
    }
    pub fn net_bytes_per_s(&self) -> f64 {
        self.rx_bytes_per_s + self.tx_bytes_per_s
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowObs {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub state: u8,
    pub inode: u64,
    pub rx_bytes_per_s: f64,
    pub tx_bytes_per_s: f64,
    /// Average received segment size over the interval (bytes/segment); None when idle.
    pub avg_rx_seg_bytes: Option<f64>,
    pub avg_tx_seg_bytes: Option<f64>,
    #[serde(default)]
    pub segs_in_per_s: f64,
    #[serde(default)]
    pub segs_out_per_s: f64,
    /// First seen in the later sample: no rate yet.
    #[serde(default)]
    pub new: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadObs {
    pub tid: u32,
    pub comm: std::sync::Arc<str>,
    pub cpu_share: f64,
    pub last_cpu: Option<u32>,
    pub allowed_cpus: CpuSet,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CounterRates {
    /// Event name -> events per second (multiplexing-scaled).
    pub per_s: BTreeMap<String, f64>,
    /// Event name -> events per 1,000 instructions (when instructions are counted).
    pub per_kinstr: BTreeMap<String, f64>,
    /// Lowest running/enabled ratio among the events (1.0 = never multiplexed).
    pub coverage: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IrqObs {
    pub irq: String,
    pub name: String,
    /// CPU id -> interrupts per second.
    pub per_cpu_per_s: BTreeMap<u32, f64>,
}

impl Observation {
    /// The processes, by reference (each is an `Arc`, shared between observations).
    pub fn iter_procs(&self) -> impl Iterator<Item = &ProcObs> {
        self.procs.iter().map(|p| &**p)
    }

    pub fn proc(&self, pid: u32) -> Option<&ProcObs> {
        self.iter_procs().find(|p| p.pid == pid)
    }

    /// The observed machine's page size, or `fallback` when the sample did not carry it.
    pub fn page_bytes_or(&self, fallback: u64) -> u64 {
        if self.page_bytes > 0 {
            self.page_bytes
        } else {
            fallback
        }
    }

    pub fn cpu(&self, cpu: u32) -> Option<&CpuObs> {
        self.cpus.iter().find(|c| c.cpu == cpu)
    }

    /// Its processes looked up by key (see [`ProcIndex`]).
    pub fn index(&self) -> ProcIndex<'_> {
        ProcIndex::new(&self.procs)
    }
}

/// Processes looked up by key: by binary search where they are in key order (a sample
/// lists them by pid, and the derivation keeps its order), so that the daemon's cycle
/// builds no map of every process to find the few it holds; else through a map built
/// once.
pub struct ProcIndex<'a> {
    procs: &'a [std::sync::Arc<ProcObs>],
    /// `None` when `procs` is in key order.
    map: Option<BTreeMap<ProcKey, usize>>,
}

impl<'a> ProcIndex<'a> {
    pub fn new(procs: &'a [std::sync::Arc<ProcObs>]) -> ProcIndex<'a> {
        let map = (!procs.is_sorted_by_key(|p| p.key())).then(|| {
            procs
                .iter()
                .enumerate()
                .map(|(i, p)| (p.key(), i))
                .collect()
        });
        ProcIndex { procs, map }
    }

    pub fn get(&self, key: &ProcKey) -> Option<&'a ProcObs> {
        let i = match &self.map {
            Some(m) => *m.get(key)?,
            None => self.procs.binary_search_by_key(key, |p| p.key()).ok()?,
        };
        Some(&self.procs[i])
    }

    pub fn contains(&self, key: &ProcKey) -> bool {
        self.get(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The index finds by key, pid and start time both, in key order (by search) and out
    /// of it (through its map) alike; a reused pid or an absent one is not found.
    #[test]
    fn the_index_finds_by_key_in_and_out_of_order() {
        let p = |pid, start| Arc::new(ProcObs::bare(pid, start, "x", CpuSet::new()));
        let key = |pid, start_time_ticks| ProcKey {
            pid,
            start_time_ticks,
        };
        let sorted = vec![p(1, 5), p(7, 9), p(30, 2)];
        let mut shuffled = sorted.clone();
        shuffled.swap(0, 2);
        for procs in [&sorted, &shuffled] {
            let ix = ProcIndex::new(procs);
            assert_eq!(ix.map.is_none(), std::ptr::eq(procs, &sorted));
            for q in procs.iter() {
                assert!(std::ptr::eq(ix.get(&q.key()).unwrap(), &**q));
            }
            assert!(ix.contains(&key(7, 9)));
            assert!(!ix.contains(&key(7, 10)), "pid 7 reused");
            assert!(!ix.contains(&key(8, 9)));
        }
    }
}
