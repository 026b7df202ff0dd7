//! One sample's scratch ([`Cycle`]) and its stages, in the order
//! [`super::Sampler::sample`] calls them: the machine's interrupts, the plan (the kernel's
//! events drained, the process set decided), the processes, the set settled (who exited),
//! the sockets, the counters, the pages, and the machine-wide files last. Each stage takes
//! the cycle as its one argument beside the cache ([`SampleCache`]) it reads and updates.

use super::cache::SampleCache;
use super::plan::{self, ProcFacts, ProcRead};
use super::reads::{edit, Reads};
use super::sockets::Mapping;
use super::stats::{Lap, StageTimes};
use super::system::{self, read_cpu_freqs, read_nic_counters};
use crate::activity::{Activity, ActivitySource};
use crate::energy::EnergySource;
use crate::error::{LinuxError, Result};
use crate::interrupts::{parse_interrupts, parse_softirqs};
use crate::perf::CounterSource;
use crate::pid::PidSet;
use crate::procfs::parse_proc_stat;
use placer_core::sample::{
    CpuFreq, CpuTimes, EnergyCounter, ExitedProc, IrqSample, NicCounters, PowerReading, ProcSample,
    SocketSample, SoftirqCounts,
};
use std::path::Path;
use std::sync::Arc;

/// One sample in the making: what its stages hand each other.
pub(super) struct Cycle<'a> {
    pub rd: Reads<'a>,
    lap: Lap,
    pub stages: StageTimes,
    refresh_every: u64,
    /// The kernel's events of the interval (empty without the sources).
    act: Activity,
    /// This sample's pids, sorted.
    pids: Vec<u32>,
    born: PidSet,
    execd: PidSet,
    exits: PidSet,
    /// Rule 3's window of idle processes to refresh.
    refresh: PidSet,
    /// This sample's processes, in pid order.
    pub procs: Vec<Arc<ProcSample>>,
    /// The processes whose sockets, counters or pages the later stages changed (indices
    /// into `procs`): copied then (an idle process's sample is shared with the cache), and
    /// taken back into the cache after.
    touched: Vec<usize>,
    /// Processes read (not from the cache).
    reread: PidSet,
    /// Processes whose files were actually read again this sample.
    fresh: PidSet,
    /// The same processes as the last sample.
    same_set: bool,
    pub exited: Vec<ExitedProc>,
}

/// The machine-wide figures of a sample.
#[derive(Default)]
pub(super) struct Machine {
    pub irqs: Vec<IrqSample>,
    pub softirqs: Vec<SoftirqCounts>,
    pub cpus: Vec<CpuTimes>,
    pub energy: Vec<EnergyCounter>,
    pub power: Vec<PowerReading>,
    pub nics: Vec<NicCounters>,
    pub cpu_freqs: Vec<CpuFreq>,
    /// `/proc/stat`'s count of context switches (the collector's cost follows it).
    pub ctxt: Option<u64>,
}

/// Empties what a stage not asked for this sample left in processes from an earlier one
/// (a cached sample keeps what its last sample held); only those that hold some are copied.
fn clear_unasked(
    procs: &mut [Arc<ProcSample>],
    touched: &mut Vec<usize>,
    holds: impl Fn(&ProcSample) -> bool,
    clear: impl Fn(&mut ProcSample),
) {
    for (i, p) in procs.iter_mut().enumerate() {
        if holds(p) {
            clear(edit(p, i, touched));
        }
    }
}

impl<'a> Cycle<'a> {
    pub(super) fn new(rd: Reads<'a>, refresh_every: u64) -> Cycle<'a> {
        Cycle {
            lap: Lap::start(rd.timed),
            rd,
            stages: StageTimes::default(),
            refresh_every,
            act: Activity::default(),
            pids: Vec::new(),
            born: PidSet::default(),
            execd: PidSet::default(),
            exits: PidSet::default(),
            refresh: PidSet::default(),
            procs: Vec::new(),
            touched: Vec::new(),
            reread: PidSet::default(),
            fresh: PidSet::default(),
            same_set: false,
            exited: Vec::new(),
        }
    }

    /// `/proc/interrupts` (when asked) and `/proc/softirqs`.
    pub(super) fn interrupts(&mut self, m: &mut Machine) {
        if self.rd.req.irqs {
            if let Ok(()) = self.rd.system("interrupts") {
                m.irqs = parse_interrupts(self.rd.buf);
            }
        }
        if let Ok(()) = self.rd.system("softirqs") {
            m.softirqs = parse_softirqs(self.rd.buf);
        }
        self.stages.system_ns += self.lap.take();
    }

    /// Whether the collector's drain said which processes ran (else every process's files
    /// were read).
    pub(super) fn drain_trusted(&self) -> bool {
        self.act.ran.is_some()
    }

    /// The sockets stage's time, taken by the caller after it stamped the sample.
    pub(super) fn sockets_done(&mut self) {
        self.stages.sockets_ns += self.lap.take();
    }
}

impl SampleCache {
    /// The kernel's events drained (which processes ran, which came and went: each part
    /// unknown falls back to reading /proc for it) and this sample's process set decided,
    /// /proc listed when it must be (rules 2, 3 and 9).
    pub(super) fn plan(
        &mut self,
        cx: &mut Cycle,
        activity: Option<&mut (dyn ActivitySource + 'static)>,
        last_pid_ours: bool,
    ) -> Result<()> {
        cx.act = match activity {
            Some(a) => a.drain(),
            None => Activity::default(),
        };
        cx.rd.cgroup_moves = cx.act.cgroup_moves;
        self.sample_no += 1;
        let listing_due = plan::listing_due(self.procs.cache.is_empty(), self.sample_no);
        // Rule 9: without the connector, the kernel's last pid, read before any listing so
        // that a task created after it is listed or moves it.
        let last_pid = match cx.act.events.is_none() && last_pid_ours {
            true => cx
                .rd
                .system("loadavg")
                .ok()
                .and_then(|()| crate::procfs::parse_loadavg(cx.rd.buf))
                .map(|l| l.last_pid),
            false => None,
        };
        let set = plan::process_set(
            self.procs.cache.keys().copied(),
            cx.act.events.as_deref(),
            listing_due,
            last_pid.is_some() && last_pid == self.last_pid_listed,
        );
        (cx.born, cx.execd, cx.exits) = (set.born, set.execd, set.exits);
        cx.pids = match set.pids {
            Some(pids) => pids,
            None => {
                cx.rd.stats.listed = true;
                self.last_pid_listed = None;
                let pids = crate::pid::process_ids(cx.rd.root)
                    .map_err(|e| LinuxError::io(cx.rd.proc_dir, e))?;
                self.last_pid_listed = last_pid;
                pids
            }
        };
        // With the collector, idle processes are re-read in a bounded rotating window
        // instead of every `refresh_every` samples each.
        if cx.act.ran.is_some() {
            cx.refresh = self.refresh_window.next(&cx.pids, cx.refresh_every);
        }
        cx.stages.plan_ns += cx.lap.take();
        Ok(())
    }

    /// Each process of the set: from the cache, refreshed (rule 3) or read (rules 1, 3,
    /// 7 and 8 by [`plan::proc_read`]).
    pub(super) fn read_procs(&mut self, cx: &mut Cycle) {
        let pids = std::mem::take(&mut cx.pids);
        cx.procs.reserve(pids.len());
        for (i, &pid) in pids.iter().enumerate() {
            // An idle process costs its cached sample's count, a cache miss at 32,000.
            if let Some(ahead) = pids.get(i + placer_core::mem::AHEAD) {
                self.procs.prefetch(*ahead);
            }
            self.read_proc(cx, pid);
        }
        self.stale.clear();
        cx.rd.stats.procs = cx.procs.len();
        cx.pids = pids;
    }

    /// One process of the set.
    fn read_proc(&mut self, cx: &mut Cycle, pid: u32) {
        // What the collector saw of it: None without the collector, Some(None) when it
        // did not run.
        let seen = cx.act.ran.as_ref().map(|r| r.get(&pid));
        let facts = ProcFacts {
            ran: seen.map(|c| c.is_some()),
            in_window: cx.refresh.contains(&pid),
            execd: cx.execd.contains(&pid),
            stale: self.stale.contains(&pid),
            orphaned: !cx.exits.is_empty()
                && self
                    .procs
                    .ppid(pid)
                    .is_some_and(|pp| cx.exits.contains(&pp)),
        };
        let due = match plan::proc_read(facts) {
            ProcRead::Cached => {
                if let Some(p) = self.procs.cached_sample(pid, cx.rd.req) {
                    cx.procs.push(p);
                    cx.rd.stats.procs_skipped += 1;
                    return;
                }
                Some(false)
            }
            ProcRead::Refresh => {
                if let Some(p) = self.procs.refresh_idle(&mut cx.rd, pid) {
                    // Not in `reread`: a process that did not run cannot have opened
                    // or closed an fd (rule 4). Its pages can move (reclaim, another
                    // process's migration): numa_maps counts it as read again.
                    cx.fresh.insert(pid);
                    cx.procs.push(p);
                    cx.rd.stats.procs_refreshed += 1;
                    return;
                }
                Some(true)
            }
            ProcRead::Files { due } => due,
        };
        let before = cx.rd.stats.procs_reread;
        let ran = seen.map(|c| c.map_or(&[][..], |c| &c.threads[..]));
        // Given with the collector (the rotating window), else staggered by pid.
        let due = due.unwrap_or_else(|| plan::staggered_due(self.sample_no, pid, cx.refresh_every));
        match self.procs.read(&mut cx.rd, pid, due, ran) {
            Some(p) => {
                cx.reread.insert(pid);
                if cx.rd.stats.procs_reread > before {
                    cx.fresh.insert(pid);
                }
                cx.procs.push(p)
            }
            None => cx.rd.stats.dropped_procs += 1,
        }
    }

    /// The set settled: the processes gone leave the caches, and those that ran and
    /// exited in the interval are named (rule 5).
    pub(super) fn settle_set(&mut self, cx: &mut Cycle) {
        let stats = &mut cx.rd.stats;
        // The same processes as the last sample (the cache's, none listed, born, gone or
        // failed): its set stands rather than being built again (at 32,000 processes, as
        // many hashes and samples touched each sample).
        cx.same_set = !stats.listed
            && cx.born.is_empty()
            && cx.exits.is_empty()
            && stats.dropped_procs == 0
            && cx.procs.len() == self.last_alive.len()
            && self.procs.cache.len() == cx.procs.len();
        let alive: PidSet = if cx.same_set {
            std::mem::take(&mut self.last_alive)
        } else {
            cx.procs.iter().map(|p| p.pid).collect()
        };
        if stats.dropped_procs > 0 || self.procs.cache.len() > cx.procs.len() {
            self.procs.retain(&alive);
            self.numa.retain(&alive);
        }
        cx.exited = plan::exited(
            cx.act.ran.as_ref(),
            cx.act.events.as_deref(),
            &alive,
            &cx.born,
            if cx.same_set {
                &alive
            } else {
                &self.last_alive
            },
        );
        stats.exited = cx.exited.len();
        // The stages below take this sample's pids from here, not from a set of their own
        // built again from every process.
        self.last_alive = alive;
        cx.stages.procs_ns += cx.lap.take();
    }

    /// The sockets and their owners (or, not asked for, the owners of an earlier sample's
    /// cleared).
    pub(super) fn read_sockets(&mut self, cx: &mut Cycle) -> Arc<[SocketSample]> {
        let sockets = if cx.rd.req.sockets {
            // A process that did not run cannot have opened or closed an fd: only the ones
            // that ran get their fd count checked (rule 4; without the collector, those
            // whose files were read again).
            let ran = match cx.act.ran {
                Some(_) => &cx.reread,
                None => &cx.fresh,
            };
            let m = Mapping {
                alive: &self.last_alive,
                same_set: cx.same_set,
                ran: Some(ran),
            };
            let (sockets, read_ns) =
                self.sockets
                    .read(&mut cx.rd, &mut cx.procs, &mut cx.touched, &m);
            cx.stages.socket_read_ns = read_ns;
            sockets
        } else {
            self.sockets.skipped();
            if std::mem::take(&mut self.may_hold.sockets) {
                clear_unasked(
                    &mut cx.procs,
                    &mut cx.touched,
                    |p| !p.socket_inodes.is_empty(),
                    |p| p.socket_inodes.clear(),
                );
            }
            Default::default()
        };
        self.may_hold.sockets |= cx.rd.req.sockets;
        sockets
    }

    /// Each user process's hardware counters (or, not asked for, an earlier sample's
    /// cleared).
    pub(super) fn read_counters(
        &mut self,
        cx: &mut Cycle,
        counters: Option<&mut (dyn CounterSource + 'static)>,
    ) {
        match counters.filter(|c| cx.rd.req.counters && c.status().available) {
            Some(c) => {
                system::read_counters(
                    c,
                    cx.rd.root,
                    &mut cx.procs,
                    &self.last_alive,
                    &mut cx.touched,
                );
                self.may_hold.counters = true;
            }
            None if std::mem::take(&mut self.may_hold.counters) => clear_unasked(
                &mut cx.procs,
                &mut cx.touched,
                |p| !p.counters.is_empty(),
                |p| p.counters.clear(),
            ),
            None => {}
        }
        cx.stages.counters_ns += cx.lap.take();
    }

    /// Pages per NUMA node (rule 4; or, not asked for, an earlier sample's cleared); then
    /// the cache takes back every process the later stages changed.
    pub(super) fn read_numa(&mut self, cx: &mut Cycle, root: &Path) {
        if cx.rd.req.numa_pages {
            let act = &cx.act;
            let ran = |pid: u32| act.ran.as_ref().is_some_and(|r| r.contains_key(&pid));
            self.numa
                .read(root, &mut cx.procs, &mut cx.touched, &cx.fresh, ran);
            self.may_hold.numa_pages = true;
        } else if std::mem::take(&mut self.may_hold.numa_pages) {
            clear_unasked(
                &mut cx.procs,
                &mut cx.touched,
                |p| !p.numa_pages.is_empty(),
                |p| p.numa_pages.clear(),
            );
        }
        self.procs.keep(&cx.procs, &cx.touched);
        cx.stages.numa_ns += cx.lap.take();
    }

    /// The machine-wide files after the processes: `/proc/stat` (an error when it cannot
    /// be read: a wrong root), energy, NICs and CPU frequencies when asked.
    pub(super) fn read_machine(
        &mut self,
        cx: &mut Cycle,
        m: &mut Machine,
        root: &Path,
        energy: Option<&EnergySource>,
    ) -> Result<()> {
        // /proc/stat after the processes: a CPU taken offline while they were read is then
        // missing here too, so a process the kernel moved off it (its fallback affinity)
        // is never seen with that CPU still listed (the engine tells hotplug from someone
        // else's change by the CPU's absence).
        cx.rd
            .system("stat")
            .map_err(|e| LinuxError::io(cx.rd.proc_dir.join("stat"), e))?;
        m.cpus = parse_proc_stat(cx.rd.buf);
        m.ctxt = crate::procfs::parse_context_switches(cx.rd.buf);
        if let Some(e) = energy {
            (m.energy, m.power) = (e.read_energy(), e.read_power());
        }
        if cx.rd.req.nics {
            m.nics = read_nic_counters(cx.rd.pins.as_deref_mut(), cx.rd.proc_, cx.rd.buf);
            // A machine without cpufreq (a VM) has no file to find each sample: looked
            // for again every LIST_EVERY samples (a driver loaded later).
            if self.sample_no >= self.no_cpufreq_until {
                m.cpu_freqs = read_cpu_freqs(root, m.cpus.iter().map(|c| c.cpu));
                if m.cpu_freqs.is_empty() {
                    self.no_cpufreq_until = self.sample_no + plan::LIST_EVERY;
                }
            }
        }
        cx.stages.system_ns += cx.lap.take();
        Ok(())
    }
}
