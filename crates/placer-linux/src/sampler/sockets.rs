//! TCP sockets and the processes that own them: the sockets ([`super::tcp`]: dumped, read
//! again where they moved, or kept) and the mapping of socket inodes to processes through
//! their fd directories, cached per process (the rules in the [sampler's doc](super)).

use super::plan;
use super::reads::{edit, Reads};
use super::tcp::TcpReader;
use crate::pid::{PidMap, PidSet};
use crate::procfs::{parse_tcp_segments, socket_inode};
use crate::sys::Dir;
use placer_core::sample::{ProcSample, SocketSample};
use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::sync::Arc;

/// The cached socket inodes of one process.
#[derive(Debug, Clone)]
struct FdEntry {
    start_time_ticks: u64,
    fd_count: u64,
    inodes: Vec<u64>,
    /// Those among the last dump's sockets (the process's last `socket_inodes`).
    live: Vec<u64>,
}

/// Whether `pid` under `proc_dir` is this process, on this machine's /proc.
fn is_own(proc_dir: &Path, pid: u32) -> bool {
    pid == std::process::id() && proc_dir == Path::new("/proc")
}

/// Which processes a sample's mapping looks at.
pub(super) struct Mapping<'a> {
    /// This sample's pids.
    pub alive: &'a PidSet,
    /// The same processes as the last sample.
    pub same_set: bool,
    /// With the collector, the processes read again this sample (the others cannot have
    /// opened or closed an fd); `None`: every process may have.
    pub ran: Option<&'a PidSet>,
}

/// The socket side of a sample, with what it keeps between samples.
pub(super) struct SocketReader {
    use_sock_diag: bool,
    tcp: Option<std::result::Result<TcpReader, String>>,
    fd_cache: PidMap<FdEntry>,
    last_unowned: HashSet<u64>,
    /// The last sample mapped sockets to processes (the stage ran): its mapping is what
    /// the cached samples hold.
    mapped_last: bool,
    /// See [`SocketReader::set_path_choice`].
    path_choice: Option<placer_core::event_path::ChooserConfig>,
}

impl SocketReader {
    /// `use_sock_diag`: dump this network namespace's sockets (sock_diag sees the host's
    /// kernel, not a fixture root's).
    pub(super) fn new(use_sock_diag: bool) -> SocketReader {
        SocketReader {
            use_sock_diag,
            tcp: None,
            fd_cache: PidMap::default(),
            last_unowned: HashSet::new(),
            mapped_last: false,
            path_choice: None,
        }
    }

    /// Opens sock_diag when it is to be used, with the kernel's socket marks when `marks`:
    /// `None` when it is not, else whether it opened.
    pub(super) fn probe(&mut self, marks: bool) -> Option<&std::result::Result<TcpReader, String>> {
        if self.use_sock_diag && self.tcp.is_none() {
            let mut tcp = TcpReader::open(marks);
            if let Ok(t) = &mut tcp {
                t.set_path_choice(self.path_choice);
            }
            self.tcp = Some(tcp);
        }
        self.tcp.as_ref()
    }

    /// Attach the socket marks only while they cost less than dumping (now and after a
    /// probe).
    pub(super) fn set_path_choice(&mut self, cfg: Option<placer_core::event_path::ChooserConfig>) {
        self.path_choice = cfg;
        if let Some(Ok(tcp)) = &mut self.tcp {
            tcp.set_path_choice(cfg);
        }
    }

    /// Where the socket marks' choice stands.
    pub(super) fn path_status(&self) -> Option<super::paths::PathStatus> {
        match &self.tcp {
            Some(Ok(tcp)) => tcp.path_status(),
            _ => None,
        }
    }

    /// Opens sock_diag again at the next probe (the socket marks asked for changed).
    pub(super) fn reprobe(&mut self) {
        self.tcp = None;
    }

    /// Forget the cached sockets of `pid` (its fds are read again).
    pub(super) fn forget(&mut self, pid: u32) {
        self.fd_cache.remove(&pid);
    }

    /// A sample without the socket stage: the next one maps every process again, and the
    /// kernel's socket marks are let go until then.
    pub(super) fn skipped(&mut self) {
        self.mapped_last = false;
        if let Some(Ok(tcp)) = &mut self.tcp {
            tcp.skipped();
        }
    }

    /// This sample's TCP sockets, each process's `socket_inodes` filled in, and with
    /// `timed`, the thread's CPU ns spent reading the sockets (not mapping them). `ran`:
    /// with the collector, the processes read again this sample (the others cannot have
    /// opened or closed an fd). `pins`: on this machine's root (the TCP MIB is this
    /// namespace's, so an unmoved segment count can spare the dump), its files kept open.
    pub(super) fn read(
        &mut self,
        rd: &mut Reads,
        procs: &mut [Arc<ProcSample>],
        touched: &mut Vec<usize>,
        m: &Mapping,
    ) -> (Arc<[SocketSample]>, u64) {
        let timed = rd.timed;
        // Without sock_diag there are no sockets, hence nothing to map to processes.
        let Some(Ok(tcp)) = &mut self.tcp else {
            return (Arc::default(), 0);
        };
        let t0 = if timed {
            crate::sys::thread_cpu_ns()
        } else {
            0
        };
        // Without the marks: the dump walks every bucket of the kernel's TCP hash, however
        // few sockets there are; when not one TCP segment moved in this namespace since
        // the last dump (the TCP MIB, /proc/net/snmp), no socket changed, and the last dump
        // is still true. The counters of the namespace sock_diag dumps: the sampling
        // thread's (`self/` would give the main thread's, another one where a thread
        // entered a namespace of its own).
        let (proc_, buf) = (rd.proc_, &mut *rd.buf);
        let (sockets, read) = tcp.read(|| {
            rd.pins.as_deref_mut().and_then(|p| {
                p.read(proc_, "thread-self/net/snmp", buf)
                    .ok()
                    .and_then(|()| parse_tcp_segments(buf))
            })
        });
        let read_ns = if timed {
            crate::sys::thread_cpu_ns().saturating_sub(t0)
        } else {
            0
        };
        rd.stats.sockets_reused = read.how == plan::SocketRead::Reuse;
        rd.stats.sockets_looked_up = read.looked_up;
        // Read again or kept, the sockets are the last sample's: so is their mapping.
        let same_sockets = read.how != plan::SocketRead::Dump;
        self.map_sockets(rd, procs, touched, m, same_sockets, &sockets);
        (sockets, read_ns)
    }

    /// The socket inodes among a process's open fds, and the fd count (`None`: exited).
    fn scan_fds(proc_dir: &Path, pid: u32) -> Option<Vec<u64>> {
        // This process: its own descriptors, without a path walk and a readlink each (it
        // keeps hundreds of files open).
        if is_own(proc_dir, pid) {
            return Some(crate::sys::own_socket_inodes());
        }
        let fd_dir = proc_dir.join(format!("{pid}/fd"));
        let mut inodes = Vec::new();
        for e in fs::read_dir(&fd_dir).ok()?.flatten() {
            if let Ok(link) = fs::read_link(e.path()) {
                if let Some(ino) = socket_inode(link.as_os_str().as_encoded_bytes()) {
                    inodes.push(ino);
                }
            }
        }
        inodes.sort_unstable();
        inodes.dedup();
        Some(inodes)
    }

    /// A process's open fds; for this process, those it does not keep open as pinned
    /// files or directories (its samplers keep files open and let them go as processes
    /// come and go: that is no reason to read its fd list again).
    fn fd_count(proc_: &Dir, proc_dir: &Path, pid: u32) -> u64 {
        let n = proc_.size_of(&format!("{pid}/fd")).ok().unwrap_or(0);
        if is_own(proc_dir, pid) {
            n.saturating_sub(crate::sys::kept_open_files())
        } else {
            n
        }
    }

    /// Each process's `socket_inodes`: its fd list read again where the cache rules say
    /// it may have moved (the module doc's socket rules 1-3), else the cached one.
    fn map_sockets(
        &mut self,
        rd: &mut Reads,
        procs: &mut [Arc<ProcSample>],
        touched: &mut Vec<usize>,
        m: &Mapping,
        same_sockets: bool,
        sockets: &[SocketSample],
    ) {
        let (proc_, proc_dir, stats) = (rd.proc_, rd.proc_dir, &mut rd.stats);
        let (alive, same_set, ran) = (m.alive, m.same_set, m.ran);
        // A process gone leaves the cache (none is when the set is the last sample's).
        let cached = self.fd_cache.len();
        if !same_set {
            self.fd_cache.retain(|pid, _| alive.contains(pid));
        }
        // The dump as before, the last sample mapped, no process gone, no fd list read
        // again (below): every process owns what it owned, and that mapping stands.
        let was_mapped = std::mem::take(&mut self.mapped_last);
        let same = same_sockets && was_mapped && self.fd_cache.len() == cached;
        // Whose fd count is checked: with the collector, when the last sample mapped this
        // same set of processes (so each has its entry from it), only those read again;
        // else every process.
        let candidates: Vec<usize> = match ran.filter(|_| same_set && was_mapped) {
            Some(r) => {
                let mut v: Vec<usize> = r
                    .iter()
                    .filter_map(|pid| procs.binary_search_by_key(pid, |p| p.pid).ok())
                    .collect();
                v.sort_unstable();
                v
            }
            None => (0..procs.len()).collect(),
        };
        let mut scanned: PidSet = PidSet::default();
        for p in candidates
            .iter()
            .map(|&i| &procs[i])
            .filter(|p| !p.kernel_thread)
        {
            let cached = self.fd_cache.get(&p.pid);
            let reread = ran.is_none_or(|r| r.contains(&p.pid));
            if !plan::fd_check(
                cached.map(|e| e.start_time_ticks),
                p.start_time_ticks,
                reread,
            ) {
                continue;
            }
            let count = Self::fd_count(proc_, proc_dir, p.pid);
            let fresh = plan::fds_fresh(
                self.fd_cache
                    .get(&p.pid)
                    .map(|e| (e.start_time_ticks, e.fd_count)),
                p.start_time_ticks,
                count,
            );
            if !fresh {
                let inodes = Self::scan_fds(proc_dir, p.pid).unwrap_or_default();
                stats.fd_dirs_scanned += 1;
                stats.own_fds_scanned |= is_own(proc_dir, p.pid);
                scanned.insert(p.pid);
                self.fd_cache.insert(
                    p.pid,
                    FdEntry {
                        start_time_ticks: p.start_time_ticks,
                        fd_count: count,
                        inodes,
                        live: Vec::new(),
                    },
                );
            }
        }
        self.mapped_last = true;
        if same && scanned.is_empty() {
            // A process's sample either comes from the sampler's cache, which holds the
            // last mapping's sockets (none for all but their owners: the same owners as
            // now), or was read afresh, with none: only the owners are looked at, not
            // every process (procs are in pid order).
            for (pid, e) in self.fd_cache.iter().filter(|(_, e)| !e.live.is_empty()) {
                if let Ok(i) = procs.binary_search_by_key(pid, |p| p.pid) {
                    if procs[i].socket_inodes != e.live {
                        edit(&mut procs[i], i, touched).socket_inodes = e.live.clone();
                    }
                }
            }
            return;
        }
        let owned = |cache: &PidMap<FdEntry>| -> HashSet<u64> {
            cache
                .values()
                .flat_map(|e| e.inodes.iter().copied())
                .collect()
        };
        let mut own = owned(&self.fd_cache);
        let unowned: HashSet<u64> = sockets
            .iter()
            .map(|s| s.inode)
            .filter(|&i| i != 0 && !own.contains(&i))
            .collect();
        if unowned.iter().any(|i| !self.last_unowned.contains(i)) {
            stats.full_rescan = true;
            for p in procs.iter().filter(|p| !p.kernel_thread) {
                if scanned.contains(&p.pid) {
                    continue;
                }
                let inodes = Self::scan_fds(proc_dir, p.pid).unwrap_or_default();
                stats.fd_dirs_scanned += 1;
                stats.own_fds_scanned |= is_own(proc_dir, p.pid);
                if let Some(e) = self.fd_cache.get_mut(&p.pid) {
                    e.inodes = inodes;
                }
            }
            own = owned(&self.fd_cache);
        }
        self.last_unowned = sockets
            .iter()
            .map(|s| s.inode)
            .filter(|&i| i != 0 && !own.contains(&i))
            .collect();
        let live: HashSet<u64> = sockets.iter().map(|s| s.inode).collect();
        for (i, p) in procs.iter_mut().enumerate() {
            let mine = match self.fd_cache.get_mut(&p.pid) {
                Some(e) => {
                    e.live = e
                        .inodes
                        .iter()
                        .copied()
                        .filter(|i| live.contains(i))
                        .collect();
                    &e.live[..]
                }
                None => &[][..],
            };
            if p.socket_inodes != mine {
                edit(p, i, touched).socket_inodes = mine.to_vec();
            }
        }
    }
}
