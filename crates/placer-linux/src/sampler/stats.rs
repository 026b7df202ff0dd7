//! What one sample cost: the work each rule did ([`SampleStats`]) and where the sampling
//! thread's CPU time went ([`StageTimes`]), kept apart from what the sampler caches.

/// Counters of the work the sampler did in its last sample (for tests and the bench).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleStats {
    pub procs: usize,
    pub dropped_procs: usize,
    /// Processes whose status/cgroup/threads were re-read (the others did not run).
    pub procs_reread: usize,
    pub fd_dirs_scanned: usize,
    pub full_rescan: bool,
    /// Processes not read at all: the eBPF collector said they did not run.
    pub procs_skipped: usize,
    /// /proc was listed (else the process set came from the connector's events).
    pub listed: bool,
    /// Processes that ran since the previous sample and were gone at this one.
    pub exited: usize,
    /// No TCP socket moved since the last sample (by the kernel's marks, else by the
    /// namespace's segment counters): its sockets were used again.
    pub sockets_reused: bool,
    /// Sockets read again because the kernel marked them as moved (no dump was made).
    pub sockets_looked_up: usize,
    /// This process's own fd list was read again (its count, less its pinned files,
    /// moved).
    pub own_fds_scanned: bool,
    /// Threads of processes that ran taken from the collector's times, without reading
    /// their files.
    pub threads_from_collector: usize,
    /// Idle processes of the refresh window whose allowed CPUs and cgroup were read
    /// again without their `stat` (rule 3).
    pub procs_refreshed: usize,
    /// Of those, the ones whose `status` was not read either: `sched_getaffinity` said
    /// what it said at their last refresh.
    pub status_spared: usize,
    /// Of those, the ones whose `cgroup` was not read either: the kernel counted no
    /// cgroup move since it was last read.
    pub cgroup_spared: usize,
    /// Without the collector, single-threaded processes whose `schedstat` said they did
    /// not run: their `stat` was not read (rule 8).
    pub schedstat_spared: usize,
}

/// Where the last sample's time went: the sampling thread's CPU time (user + kernel) in
/// each stage, ns (`placer bench cycle` reports them, so the next saving is chosen from
/// figures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StageTimes {
    /// The kernel's events drained and the process set decided (or /proc listed).
    pub plan_ns: u64,
    /// The processes and their threads read (or taken from the cache).
    pub procs_ns: u64,
    /// The socket dump and the fd mapping.
    pub sockets_ns: u64,
    /// Of `sockets_ns`, the sockets themselves (a dump, the moved ones read again, or the
    /// last sample's kept), without their mapping to processes.
    pub socket_read_ns: u64,
    /// Hardware counters.
    pub counters_ns: u64,
    /// Pages per NUMA node.
    pub numa_ns: u64,
    /// Machine-wide files: interrupts, softirqs, /proc/stat, energy, NICs, frequencies.
    pub system_ns: u64,
}

/// The thread's CPU time since the last lap, when stages are timed (one system call a
/// stage: the benchmark's, not the daemon's); 0 otherwise.
pub(super) struct Lap {
    timed: bool,
    last_ns: u64,
}

impl Lap {
    pub(super) fn start(timed: bool) -> Lap {
        Lap {
            timed,
            last_ns: if timed {
                crate::sys::thread_cpu_ns()
            } else {
                0
            },
        }
    }

    pub(super) fn take(&mut self) -> u64 {
        if !self.timed {
            return 0;
        }
        let now = crate::sys::thread_cpu_ns();
        now.saturating_sub(std::mem::replace(&mut self.last_ns, now))
    }
}
