//! The per-process extras a policy asks for (hardware counters, pages per NUMA node) and
//! the machine-wide counters (NIC packets and bytes, CPU frequencies).

use super::plan;
use crate::perf::CounterSource;
use crate::pid::{PidMap, PidSet};
use crate::sys::{Dir, Pins};
use placer_core::sample::{NicCounters, ProcSample};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Cumulative counters of every interface of this network namespace, sorted by name: one
/// file (`proc/self/net/dev`) instead of four sysfs files per interface (the same
/// `dev_get_stats` figures); none when it cannot be read.
pub(super) fn read_nic_counters(
    pins: Option<&mut Pins>,
    proc: &Dir,
    buf: &mut String,
) -> Vec<NicCounters> {
    match super::reads::read_system(pins, proc, "self/net/dev", buf) {
        Ok(()) => crate::procfs::parse_net_dev(buf),
        Err(_) => Vec::new(),
    }
}

/// Current frequency of each CPU that has cpufreq (`scaling_cur_freq`, kHz).
pub fn read_cpu_freqs(
    root: &Path,
    cpus: impl Iterator<Item = u32>,
) -> Vec<placer_core::sample::CpuFreq> {
    cpus.filter_map(|cpu| {
        let p = root.join(format!(
            "sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"
        ));
        let khz = crate::attr::read_u64(&p)?;
        Some(placer_core::sample::CpuFreq { cpu, khz })
    })
    .collect()
}

/// Each user process's counters (its threads', as listed in the sample or else in its task
/// directory); counters of processes gone are dropped.
pub(super) fn read_counters(
    c: &mut dyn CounterSource,
    root: &Path,
    procs: &mut [Arc<ProcSample>],
    alive: &PidSet,
    touched: &mut Vec<usize>,
) {
    c.retain(alive);
    for (i, p) in procs.iter_mut().enumerate() {
        if p.kernel_thread {
            continue;
        }
        let tids: Vec<u32> = if p.threads.is_empty() {
            crate::pid::task_ids(root, p.pid).unwrap_or_default()
        } else {
            p.threads.iter().map(|t| t.tid).collect()
        };
        let counters = c.read(p.pid, &tids);
        if p.counters != counters {
            super::reads::edit(p, i, touched).counters = counters;
        }
    }
}

/// Pages per NUMA node of each process, kept for those that did not run.
#[derive(Default)]
pub(super) struct NumaReader {
    cache: PidMap<BTreeMap<u32, u64>>,
}

impl NumaReader {
    /// Drops what is kept of processes gone.
    pub(super) fn retain(&mut self, alive: &PidSet) {
        self.cache.retain(|pid, _| alive.contains(pid));
    }

    /// numa_maps walks each process's page tables: read only when a policy asks, and then
    /// only for processes that ran (`fresh`: their files were re-read; `ran`: the collector
    /// saw them) or are new; the others keep their last map (an idle process's pages do not
    /// move, but for the kernel's NUMA balancing, which needs it to run). Rule 4.
    pub(super) fn read(
        &mut self,
        root: &Path,
        procs: &mut [Arc<ProcSample>],
        touched: &mut Vec<usize>,
        fresh: &PidSet,
        ran: impl Fn(u32) -> bool,
    ) {
        let page = placer_bufpool::numa::page_bytes() as u64;
        for (i, p) in procs.iter_mut().enumerate() {
            if p.kernel_thread {
                continue;
            }
            if plan::numa_due(
                fresh.contains(&p.pid),
                ran(p.pid),
                self.cache.contains_key(&p.pid),
            ) {
                match crate::numa_maps::read(root, p.pid, page) {
                    Ok(Some(m)) => {
                        self.cache.insert(p.pid, m);
                    }
                    _ => {
                        self.cache.remove(&p.pid);
                    }
                }
            }
            let pages = self.cache.get(&p.pid);
            if pages.map_or(!p.numa_pages.is_empty(), |m| *m != p.numa_pages) {
                super::reads::edit(p, i, touched).numa_pages = pages.cloned().unwrap_or_default();
            }
        }
    }
}
