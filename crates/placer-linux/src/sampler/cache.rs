//! What the sampler keeps from one sample to the next: each reader's cache (processes,
//! sockets, pages) and the rules' memory (the refresh window, the last process set, the
//! pids to read again). Everything here outlives a sample; a sample's scratch is its
//! [`super::cycle::Cycle`].

use super::plan::RefreshWindow;
use super::procs::ProcReader;
use super::sockets::SocketReader;
use super::system::NumaReader;
use crate::pid::PidSet;

pub(super) struct SampleCache {
    /// Processes and their threads, with the cache of their last read.
    pub(super) procs: ProcReader,
    /// TCP sockets and their owners (sock_diag, fd directories).
    pub(super) sockets: SocketReader,
    /// Pages per NUMA node, kept for processes that did not run (rule 4).
    pub(super) numa: NumaReader,
    /// Samples taken (the first is 1).
    pub(super) sample_no: u64,
    /// Rule 3's rotating window of idle processes to re-read.
    pub(super) refresh_window: RefreshWindow,
    /// The pids of the previous sample.
    pub(super) last_alive: PidSet,
    /// Which of the later stages' results a cached sample may hold (a stage ran since its
    /// last clearing): only then does a sample that does not ask for it clear them.
    pub(super) may_hold: MayHold,
    /// Processes to read again in full at the next sample ([`super::Sampler::invalidate`]):
    /// kept in the cache meanwhile, since on the events path the cache is the process set.
    pub(super) stale: PidSet,
    /// Rule 9: the last pid `/proc/loadavg` gave just before the last listing.
    pub(super) last_pid_listed: Option<u32>,
    /// No CPU had a frequency file at the sample before this one: none is looked for.
    pub(super) no_cpufreq_until: u64,
}

/// See [`SampleCache::may_hold`].
#[derive(Debug, Default)]
pub(super) struct MayHold {
    pub(super) sockets: bool,
    pub(super) counters: bool,
    pub(super) numa_pages: bool,
}

impl SampleCache {
    pub(super) fn new(clk_tck: u32, real_root: bool) -> SampleCache {
        SampleCache {
            procs: ProcReader::new(clk_tck, real_root),
            sockets: SocketReader::new(real_root),
            numa: NumaReader::default(),
            sample_no: 0,
            refresh_window: RefreshWindow::default(),
            last_alive: PidSet::default(),
            may_hold: MayHold::default(),
            stale: PidSet::default(),
            last_pid_listed: None,
            no_cpufreq_until: 0,
        }
    }
}
