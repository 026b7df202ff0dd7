//! Takes raw [`Sample`]s of the machine under a root (`/` or a fixture tree).
//!
//! Each sample reads: `proc/stat` (per-CPU ticks), `proc/interrupts`, `proc/softirqs`,
//! and for every `proc/PID`: `stat` (comm, state, ppid, flags, CPU ticks, threads, start
//! time, last CPU), and for user processes `status` (Uid, Cpus_allowed_list) and `cgroup`.
//! Kernel threads (PF_KTHREAD, or kthreadd and its children) get `stat` only: they are
//! never placed, and skipping two files each keeps the cycle cheap. On request: threads
//! (`task/TID/stat` + `status`), TCP sockets (sock_diag, see [`crate::sockdiag`]) mapped
//! to processes, hardware counters ([`crate::perf`]), pages per NUMA node
//! ([`crate::numa_maps`]). Energy and power sensors
//! ([`crate::energy`]) are read when present.
//!
//! Layout: [`Sampler`] holds three kinds of state, each in its file: `sources` (the
//! open `proc` directory, files kept open, the kernel's event sources, counters and
//! sensors: probed and opened once), `cache` (what persists from sample to sample: each
//! reader's cache and the rules' memory) and `cycle` (one sample's scratch, handed to
//! each stage as one argument, and the stages themselves, in order); `reads` is what
//! every reader is handed (the open directory, the buffer, the request, the counters of
//! work); `stats` says what a sample cost. [`plan`] decides what to re-read (the rules below, as pure functions
//! tested without files); the readers read: `procs` (processes and threads), `sockets`
//! (the fd mapping) over `tcp` (the sockets), `system` (counters, NUMA pages, NICs, CPU
//! frequencies). A new reader is a file beside them taking `&mut Reads`, a field of
//! `SampleCache` if it keeps anything, a rule in [`plan`] if it skips reads, and a stage
//! in `cycle` called from [`Sampler::sample`]; `tests/equivalence.rs` holds its cache to
//! a fresh full read.
//!
//! Idle processes are cheap: `stat` is read every sample, but a process whose CPU ticks,
//! thread count and start time are unchanged since the previous sample did not run, so its
//! `status`, `cgroup` and threads are taken from the cache instead of re-read — except
//! every [`DEFAULT_REFRESH_EVERY`] samples (staggered by pid; [`Sampler::set_refresh_every`],
//! 1 = always re-read), and after [`Sampler::invalidate`] (the actuator calls it after
//! changing a process's affinity or cgroup). What this can miss: another tool changing a
//! sleeping process's affinity shows at the latest `refresh_every` samples later; a thread
//! that ran less than the process's next tick shows its last tick at most that late.
//! A process that ran is read again (stat, status: its affinity shows at once) but keeps
//! its cached cgroup until its refresh, an exec or [`Sampler::invalidate`]: a cgroup does
//! not change by running, and a manager moving a running process is rare.
//! A process that ran with the thread count of its last read keeps its thread list (the
//! task directory is not listed again): a thread that exited fails its read and the
//! directory is listed after all, so only a thread replaced by another at the same count
//! between two samples shows late (at the process's next refresh).
//!
//! With the kernel's event sources ([`crate::activity`], on by default for root `/`), a
//! sample's cost follows what is active, not what exists:
//! 1. a process the eBPF collector says did not run since the previous sample is not read
//!    at all: its cached sample is used (a process that did not run cannot have changed its
//!    CPU time, state, threads or fds), the cache's own `Arc`, not a copy: the later stages
//!    copy a process only where they change it, and the cache takes that copy back;
//! 2. the process set comes from the cache plus the connector's forks and exits; /proc is
//!    listed only at the first sample, every [`LIST_EVERY`] samples, and when the
//!    connector lost events;
//! 3. idle processes are refreshed in a rotating window of at most [`IDLE_REFRESH_BUDGET`]
//!    per sample (so another tool's change to a sleeping process's affinity or cgroup
//!    shows within `procs / budget` samples): what another process can change while it
//!    sleeps is read again (`status`: uid and allowed CPUs; `cgroup`; each known thread's
//!    `status` when threads are asked for), not its `stat`, whose every field stays as it
//!    was while it does not run (but its parent: rule 7); a kernel thread in the window
//!    reads nothing. On this machine's root its `status` files are not read either while
//!    `sched_getaffinity` of the process and its threads says what it said at its last
//!    refresh (it gives the allowed CPUs that are active: a change confined to CPUs
//!    inactive both times shows when they come back). Nor is its `cgroup` while the
//!    kernel's count of cgroup moves ([`crate::bpf::CgroupMoves`]: attach, transfer,
//!    rename, hierarchy set-up and removal) stands where it stood before the file was last
//!    read: nothing changed cgroup since. A process is read in full at once after an exec;
//! 4. numa_maps and fd counts are read only for processes that ran (on the /proc path:
//!    for processes whose files were read again, their `stat` having changed; numa_maps
//!    also for those refreshed by rule 3, since reclaim or another process can move a
//!    sleeping process's pages). A socket opened by a process whose `stat` did not change
//!    shows in the dump with no owner, and every fd list is read again (below);
//! 5. a process that ran and exited between two samples is reported in `Sample::exited`
//!    with its CPU time (the collector) or at least its pid (the connector);
//! 6. a process that ran with the threads of its last read (same count, every thread the
//!    collector names among them) reads no thread file: each thread's cumulative
//!    `cpu_ns` goes on by the collector's time and its last CPU is the collector's (its
//!    ticks, state and comm stay as last read until the process is read in full while it
//!    runs: in its refresh window, after an exec or [`Sampler::invalidate`]; or until its
//!    thread count changes. A refresh of it idle by rule 3 reads no `stat`, so this lag
//!    has no bound in samples: `cpu_ns` is the figure to use). The same step applies to a
//!    process that ran for less than a tick (its `stat` unchanged, so otherwise cached):
//!    on a busy host a thread can get under a tick per sample for many samples in a row,
//!    and dropping the collector's time there once lost 38 ms of 300 in 15 s. A thread's
//!    `cpu_ns` starts at its ticks when the thread is first read; a sample without the collector's word has none, and the observation
//!    then uses ticks. A root test holds these figures to each thread's `schedstat` on a
//!    real process, within the kernel's accounting granularity;
//! 7. a process whose parent (by its last read) exited in the interval has its `stat`
//!    read again: the kernel gave it a new parent without its running. (A parent whose
//!    leader exited before its last thread is reported at the leader's exit: its
//!    children's new parent then shows when they next run or are read in full.)
//!
//! Either source missing falls back to the /proc rule above for its part, and then:
//! 8. without the collector, a single-threaded process (by its last read) has its
//!    `schedstat` read first, a third of what its `stat` costs the kernel: run time in ns
//!    and timeslices. While they say what they said just before its last `stat` was read,
//!    it did not run, and its cached sample stands (as by rule 1); a process that ran, or
//!    is due, is read in full. A process that took a dead one's pid cannot show the same
//!    nanoseconds of run time, and all-zero figures (a kernel without schedstats) are
//!    never trusted; a process with a `stat` and no `schedstat` turns the rule off. A
//!    multi-threaded process's `schedstat` is its main thread's, so it always has its
//!    `stat` read. A process the rule spares lets its kept-open `stat` go (below). Its
//!    parent is spared with it: a process whose parent exited shows its new parent at
//!    its refresh (rule 7 needs the connector's exits: with them, as when the collector is
//!    detached by cost, an orphan or an exec is read in full at once);
//! 9. without the connector, /proc is not listed while `/proc/loadavg`'s last pid (the
//!    pid the kernel handed out last, moved by every process or thread created) stands
//!    where it stood just before the last listing: no process came since, and one that
//!    went fails its reads. It is read before the listing, so a process created during
//!    one is either listed or moves it. This machine's root only, and only where its
//!    /proc is of placer's own pid namespace (the one loadavg speaks of); the listing
//!    every [`LIST_EVERY`] samples stays.
//!
//! The sockets ([`tcp`], the rule [`plan::socket_read`]): with the kernel's socket marks
//! ([`crate::bpf::TcpMoves`], root `/` with `kernel_events`), only the sockets a segment
//! reached since the last sample are read again, and their mapping to processes stands;
//! all are dumped at the first sample, after a TCP state change in the namespace, when a
//! mark may be missing, every [`plan::SOCKET_DUMP_EVERY`] samples, and when more than half
//! moved. Without the marks, the dump is skipped when not one TCP segment moved in this
//! network namespace since the last one (`/proc/net/snmp`).
//!
//! Robustness: a process that exits mid-read (any of its files vanishes) is dropped
//! silently; a malformed file drops only that process (or that line); only an unreadable
//! `proc/stat` — a wrong root — fails the sample.
//!
//! Socket-to-process mapping is cached per process (keyed by pid and start time): a
//! process's `fd/` directory is re-read only when (1) the process is new (or its PID was
//! reused), (2) its open-fd count, looked at when it ran (rule 4), changed
//! (`stat(proc/PID/fd).st_size` is the number of open fds since Linux 6.2; on older
//! kernels it is constant and this rule is inert; for placer's own process, the count
//! less the files its samplers keep open, which move as processes come and go), or
//! (3) sock_diag reports a socket inode that no cached process owns and that was not
//! already unowned in the previous sample — then every process not re-read this cycle is
//! re-read once. Rule 3 catches an fd swapped for another at a constant count; remembering
//! the unowned set keeps sockets nobody can map (other users' without permission, sockets
//! of processes in another PID namespace) from forcing a full re-read every cycle.
//!
//! When the sockets are the last sample's (reused, or the moved ones read again), the
//! last sample mapped too, and no process's fd list was read
//! again or is gone, the last sample's mapping stands as it was (nothing to recompute):
//! only the sockets' owners are looked at. Every other process's sample either comes from
//! the cache, which holds what the stage last gave it (`ProcReader::keep` takes each
//! change back, into the cached sample with threads too), or was read afresh, with no
//! sockets; neither can hold a socket then.
//!
//! sock_diag talks to the kernel, not to the root path, so it is only used when the root
//! is `/` (override with [`Sampler::set_sock_diag`]).
//!
//! Files kept open: on this machine's root, the machine-wide files of every sample
//! (`stat`, `interrupts` when asked, `softirqs`, `net/snmp`, `net/dev`, `loadavg` on the
//! /proc path) and the `PID/stat` of up to 256 (`STAT_PINS_MAX`) processes read before are
//! kept open and read again from their start: no path walk, open and close each time (a
//! process gone fails its read, and one that took its pid is opened anew). Rule 8's
//! `PID/schedstat` files are kept open in the room the `stat` files leave of 512
//! (`PINS_MAX`) in all: a process that rule 8 spares lets its `stat` go, since only its
//! `schedstat` is read while it does not run.

mod cache;
mod cycle;
pub mod paths;
pub mod plan;
mod procs;
mod reads;
mod sockets;
mod sources;
mod stats;
mod system;
mod tcp;
#[cfg(test)]
mod tests;

pub use crate::activity::{Activity, ActivitySource};
use crate::error::Result;
use crate::perf::CounterSource;
use cache::SampleCache;
use cycle::{Cycle, Machine};
use placer_core::sample::{SampleRequest, SourceStatus};
use placer_core::Sample;
pub use plan::{DEFAULT_REFRESH_EVERY, IDLE_REFRESH_BUDGET, LIST_EVERY};
use sockets::SocketReader;
use sources::Sources;
pub use stats::{SampleStats, StageTimes};
use std::path::Path;
pub use system::read_cpu_freqs;

/// How the sampler was told to work.
#[derive(Debug, Clone, Copy)]
struct Settings {
    /// See [`Sampler::set_refresh_every`].
    refresh_every: u64,
    /// See [`Sampler::set_stage_times`].
    stage_times: bool,
}

pub struct Sampler {
    /// Where the figures come from (probed and opened once).
    sources: Sources,
    /// The CPU collector attached only while it is the cheaper path ([`paths`]); `None`:
    /// attached whenever it can be (the default).
    cpu_path: Option<paths::CpuPath>,
    /// What persists between samples.
    cache: SampleCache,
    settings: Settings,
    /// The text of the file last read (kept: its capacity serves every sample).
    buf: String,
    /// What the last sample's rules did (for tests and the bench).
    pub last_stats: SampleStats,
    /// Where the last sample's CPU time went (when [`Sampler::set_stage_times`] is on).
    pub last_stages: StageTimes,
}

impl Sampler {
    pub fn new(root: &Path) -> Self {
        let sources = Sources::new(root);
        Sampler {
            cache: SampleCache::new(sources.clk_tck, sources.real_root()),
            sources,
            cpu_path: None,
            settings: Settings {
                refresh_every: DEFAULT_REFRESH_EVERY,
                stage_times: false,
            },
            buf: String::with_capacity(4096),
            last_stats: SampleStats::default(),
            last_stages: StageTimes::default(),
        }
    }

    /// The root this sampler reads under.
    pub fn root(&self) -> &Path {
        &self.sources.root
    }

    /// Use the kernel's event sources (eBPF CPU collector, process-events connector) when
    /// they can be opened (root, the real `/`), or never (`false`: the /proc path only).
    /// On by default for root `/`.
    pub fn set_kernel_events(&mut self, on: bool) {
        self.sources.kernel_events = on;
        self.sources.activity = None;
        self.cache.sockets.reprobe();
        self.sources.status = None;
    }

    /// Attach the eBPF CPU collector only while it costs less than reading every
    /// process's files, and the socket marks only while they cost less than dumping every
    /// socket, by measured cost ([`paths`]), with `cfg`'s hysteresis; `None` (the
    /// default): attached whenever they can be. The daemon turns it on.
    pub fn set_event_path_choice(&mut self, cfg: Option<placer_core::event_path::ChooserConfig>) {
        self.cpu_path = cfg.map(paths::CpuPath::new);
        self.cache.sockets.set_path_choice(cfg);
    }

    /// Where the CPU collector's choice stands (`None` without the choice).
    pub fn cpu_path(&self) -> Option<paths::PathStatus> {
        let p = self.cpu_path.as_ref()?;
        Some(p.status(self.sources.activity.as_deref()))
    }

    /// Where the socket marks' choice stands (`None` without the choice or sock_diag).
    pub fn socket_path(&self) -> Option<paths::PathStatus> {
        self.cache.sockets.path_status()
    }

    /// Whether the eBPF CPU collector is attached now (`None`: there is none).
    pub fn cpu_collector_attached(&self) -> Option<bool> {
        self.sources.activity.as_deref()?.cpu_attached()
    }

    /// Replace the event sources (a scripted one in benchmarks on generated trees).
    pub fn set_activity_source(&mut self, src: Box<dyn ActivitySource>) {
        self.sources.activity = Some(src);
        self.sources.kernel_events = true;
        self.sources.status = None;
    }

    /// Use sock_diag (the current network namespace) even for a non-`/` root, or not at all.
    pub fn set_sock_diag(&mut self, on: bool) {
        self.cache.sockets = SocketReader::new(on);
        self.sources.status = None;
    }

    /// Times each stage of a sample into [`Sampler::last_stages`] (off by default: the
    /// thread's CPU clock is a system call, made at each stage).
    pub fn set_stage_times(&mut self, on: bool) {
        self.settings.stage_times = on;
    }

    /// Re-read every process's status, cgroup and threads at least every `n` samples
    /// (1 = every sample: exact, and the most costly). See the module doc.
    pub fn set_refresh_every(&mut self, n: u64) {
        self.settings.refresh_every = n.max(1);
    }

    /// Forget what is cached about `pid` (call after changing its affinity or cgroup), so
    /// the next sample re-reads it.
    ///
    /// The process stays in the cache until then: on the events path the process set is the
    /// cache plus the connector's forks, so dropping it would make a process placer just
    /// moved vanish from the samples until the next full listing, and the engine would take
    /// it for exited and lose its hold.
    pub fn invalidate(&mut self, pid: u32) {
        self.cache.stale.insert(pid);
        self.cache.sockets.forget(pid);
    }

    /// Replace the counter source (a [`crate::perf::ReplayCounters`] in tests and replays).
    pub fn set_counter_source(&mut self, src: Box<dyn CounterSource>) {
        self.sources.counters = Some(src);
        self.sources.status = None;
    }

    /// Every process of the last sample by its last read (pid, comm, state): for questions
    /// about who runs that need no file of their own. `None` before the first sample.
    pub fn known_processes(&self) -> Option<impl Iterator<Item = (u32, &str, char)> + '_> {
        (self.cache.sample_no > 0).then(|| self.cache.procs.known())
    }

    /// Which optional sources exist and why the others do not (probed once).
    pub fn sources(&mut self) -> SourceStatus {
        self.sources.probe(&mut self.cache.sockets);
        self.sources.status.clone().unwrap_or_default()
    }

    /// One raw sample now: the stages of [`cycle`], in order.
    pub fn sample(&mut self, req: SampleRequest) -> Result<Sample> {
        self.sources.probe(&mut self.cache.sockets);
        // The sample's time is the middle of its reads (CPU times, processes, sockets):
        // under load one sample can take tens of ms, and stamping its start would skew
        // every rate by that much.
        if let (Some(p), Some(a)) = (&mut self.cpu_path, self.sources.activity.as_deref_mut()) {
            if p.before(a) {
                self.sources.refresh_activity_status();
            }
        }
        let t_start = crate::sys::monotonic_ns();
        let clk_tck = self.sources.clk_tck;
        let src = self
            .sources
            .open(&mut self.buf, req, self.settings.stage_times)?;
        let mut cx = Cycle::new(src.rd, self.settings.refresh_every);
        let mut machine = Machine::default();
        let cache = &mut self.cache;
        cx.interrupts(&mut machine);
        // The path's own cost (two clock reads a sample, only with the choice on).
        let choosing = self.cpu_path.is_some();
        let first = cache.procs.cache.is_empty();
        let procs_t0 = if choosing {
            crate::sys::thread_cpu_ns()
        } else {
            0
        };
        cache.plan(&mut cx, src.activity, src.last_pid_ours)?;
        cache.read_procs(&mut cx);
        cache.settle_set(&mut cx);
        let procs_ns = match choosing {
            true => crate::sys::thread_cpu_ns().saturating_sub(procs_t0),
            false => 0,
        };
        let full = first || !cx.drain_trusted();
        let sockets = cache.read_sockets(&mut cx);
        let time_ns = t_start + (crate::sys::monotonic_ns() - t_start) / 2;
        cx.sockets_done();
        cache.read_counters(&mut cx, src.counters);
        cache.read_numa(&mut cx, src.root);
        cache.read_machine(&mut cx, &mut machine, src.root, src.energy)?;
        tracing::trace!(stats = ?cx.rd.stats, stages = ?cx.stages, "sample");
        self.last_stats = cx.rd.stats;
        self.last_stages = cx.stages;
        let Machine {
            irqs,
            softirqs,
            cpus,
            energy,
            power,
            nics,
            cpu_freqs,
            ctxt,
        } = machine;
        let n_procs = cx.procs.len();
        let sample = Sample {
            time_ns,
            clk_tck,
            cpus,
            procs: cx.procs,
            sockets,
            irqs,
            softirqs,
            energy,
            power,
            nics,
            cpu_freqs,
            page_bytes: placer_bufpool::numa::page_bytes() as u64,
            exited: cx.exited,
        };
        if let (Some(p), Some(a)) = (&mut self.cpu_path, self.sources.activity.as_deref_mut()) {
            let cost = paths::SampleCost {
                ctxt,
                time_ns,
                procs_ns,
                full,
                procs: n_procs,
            };
            p.after(a, cost);
        }
        Ok(sample)
    }
}
