//! Processes and their threads: each process's `stat`, and when it ran or is due its
//! `status`, `cgroup` and threads, with the cache of its last read that the rules in the
//! [sampler's doc](super) keep using (decided in [`super::plan`]).

use super::plan;
use super::reads::Reads;
use crate::bpf::ThreadCpu;
use crate::pid::PidMap;
use crate::procfs::{parse_cgroup, parse_pid_stat, parse_schedstat, parse_status, PidStat};
use crate::sys::{Dir, PinnedFile};
use placer_core::sample::{ProcSample, SampleRequest, ThreadSample};
use placer_core::CpuSet;
use std::fmt::Write as _;
use std::io;
use std::sync::Arc;

/// What a process's files said last time: its whole sample, so that a process the kernel's
/// events say did not run is not read at all. Shared with the samples that hold it: an idle
/// process costs a sample one reference, not a copy. Its sockets, counters and pages are
/// those of the last sample that held it ([`ProcReader::keep`]).
#[derive(Debug, Clone)]
pub(super) struct ProcCache {
    sample: Arc<ProcSample>,
    /// Whether `sample.threads` were read (a policy asked for threads then).
    threads_read: bool,
    /// What `sched_getaffinity` said of the process and of each of its threads (in
    /// order, when threads were asked for) at its last refresh by rule 3, or of the
    /// process alone at its last full read without threads; else `None`. While it says
    /// the same, its allowed CPUs did not change and `status`
    /// is not read again (see [`ProcReader::refresh_idle`]).
    affinity_seen: Option<Vec<CpuSet>>,
    /// The kernel's count of cgroup moves before `sample.cgroup` was read from its file
    /// (`None`: unknown); see [`plan::cgroup_due`].
    cgroup_moves: Option<u64>,
    /// Without the collector, a single-threaded process's `schedstat` (run ns, timeslices)
    /// read just before its last `stat`: while it says the same, the process did not run
    /// (rule 8).
    schedstat: Option<crate::procfs::Schedstat>,
}

impl ProcCache {
    fn key(&self) -> plan::StatKey {
        plan::StatKey {
            start_time_ticks: self.sample.start_time_ticks,
            cpu_ticks: self.sample.utime_ticks + self.sample.stime_ticks,
            num_threads: self.sample.num_threads,
        }
    }
}

/// Reads processes and threads, keeping the last read of each.
pub(super) struct ProcReader {
    pub(super) cache: PidMap<ProcCache>,
    clk_tck: u32,
    /// The root is this machine's `/`: `sched_getaffinity` sees the same processes.
    real_root: bool,
    /// `PID/stat` kept open for processes read before (this machine's root only): a
    /// process that runs every second (the kernel's own threads, mostly) is read again
    /// without a path walk, an open and a close. Each costs the kernel a page for its
    /// text: at most [`STAT_PINS_MAX`]. A process that rule 8 spares lets its file go:
    /// it is read again only when it runs, and its `schedstat` is what is read meanwhile.
    pub(super) stat_pins: Option<PidMap<PinnedFile>>,
    /// `PID/schedstat` kept open the same way (rule 8), in what [`PINS_MAX`] leaves.
    pub(super) schedstat_pins: Option<PidMap<PinnedFile>>,
    /// A process had its `stat` and no `schedstat`: rule 8 is off for this root.
    no_schedstat: bool,
}

/// At most this many `PID/stat` files kept open (a page of kernel memory each).
pub const STAT_PINS_MAX: usize = 256;

/// At most this many `PID/stat` and `PID/schedstat` files kept open in all: without the
/// collector, every idle single-threaded process has its `schedstat` read each sample
/// (rule 8) and only the ones that ran their `stat`, so the room the `stat` files of idle
/// processes let go is the `schedstat` files'.
pub const PINS_MAX: usize = 2 * STAT_PINS_MAX;

impl ProcReader {
    pub(super) fn new(clk_tck: u32, real_root: bool) -> ProcReader {
        ProcReader {
            cache: PidMap::default(),
            clk_tck,
            real_root,
            stat_pins: real_root.then(PidMap::default),
            schedstat_pins: real_root.then(PidMap::default),
            no_schedstat: false,
        }
    }

    /// The cached sample of a process that did not run (`None` when not cached, or when
    /// threads are asked for and were not read last time).
    pub(super) fn cached_sample(&self, pid: u32, req: SampleRequest) -> Option<Arc<ProcSample>> {
        let c = self.cache.get(&pid)?;
        if req.threads && !c.threads_read && !c.sample.kernel_thread {
            return None;
        }
        Some(shared_as_asked(&c.sample, req))
    }

    /// Asks the CPU for the cached sample of `pid`, which the walk reaches shortly.
    pub(super) fn prefetch(&self, pid: u32) {
        if let Some(c) = self.cache.get(&pid) {
            placer_core::mem::prefetch(&c.sample);
        }
    }

    /// Takes the final samples of the processes at `touched` (indices into `procs`, whose
    /// sockets, counters or pages the sample's later stages changed) as their cached
    /// samples, so that the next sample shares them while they stay the same.
    ///
    /// Afterwards every cached sample holds what the later stages last gave it: the
    /// socket stage relies on it to check only the sockets' owners while the mapping
    /// stands.
    pub(super) fn keep(&mut self, procs: &[Arc<ProcSample>], touched: &[usize]) {
        for &i in touched {
            let p = &procs[i];
            let Some(c) = self.cache.get_mut(&p.pid) else {
                continue;
            };
            if c.sample.start_time_ticks != p.start_time_ticks {
                continue;
            }
            if Arc::ptr_eq(&c.sample.threads, &p.threads) || c.sample.threads.is_empty() {
                c.sample = p.clone();
            } else {
                // A copy made without the threads the cache holds: the cache keeps its
                // threads and takes what the later stages changed.
                let s = Arc::make_mut(&mut c.sample);
                s.socket_inodes.clone_from(&p.socket_inodes);
                s.counters.clone_from(&p.counters);
                s.numa_pages.clone_from(&p.numa_pages);
            }
        }
    }

    /// Every cached process by its last read: pid, comm, state.
    pub(super) fn known(&self) -> impl Iterator<Item = (u32, &str, char)> + '_ {
        self.cache
            .iter()
            .map(|(pid, c)| (*pid, &*c.sample.comm, c.sample.state))
    }

    /// Forgets the processes gone (their cache and their open `stat`).
    pub(super) fn retain(&mut self, alive: &crate::pid::PidSet) {
        self.cache.retain(|pid, _| alive.contains(pid));
        for pins in [&mut self.stat_pins, &mut self.schedstat_pins] {
            if let Some(pins) = pins.as_mut() {
                pins.retain(|pid, _| alive.contains(pid));
            }
        }
    }

    /// Reads `PID/stat` (`rel`) through [`read_pinned`].
    fn read_stat(&mut self, proc_: &Dir, pid: u32, rel: &str, buf: &mut String) -> io::Result<()> {
        let cap = room(STAT_PINS_MAX, &self.schedstat_pins);
        read_pinned(self.stat_pins.as_mut(), cap, proc_, pid, rel, buf)
    }

    /// The parent of a cached process, by its last read.
    pub(super) fn ppid(&self, pid: u32) -> Option<u32> {
        self.cache.get(&pid).map(|c| c.sample.ppid)
    }

    /// Rule 3's refresh of a process the collector says did not run: its `status` (uid,
    /// allowed CPUs), its `cgroup` (unless the kernel counted no cgroup move since it was
    /// last read: [`plan::cgroup_due`]) and, when threads are asked for and were read last
    /// time, each thread's `status` are read again; everything its `stat` says is kept
    /// from the cache (it cannot change without the process running). A kernel thread
    /// reads nothing (only its stat is ever read). `None` when it is not cached with what
    /// `req` asks for, or any file fails: the caller reads it in full instead (which
    /// drops it if it is gone).
    ///
    /// On this machine's root, `sched_getaffinity` of the process and its threads (one
    /// system call each, no text) is asked first: when it says what it said at the last
    /// refresh, no `status` is read (its uid cannot change without its running either).
    /// It gives the allowed CPUs that are active: a change confined to CPUs inactive at
    /// both refreshes shows when they come back.
    pub(super) fn refresh_idle(&mut self, rd: &mut Reads, pid: u32) -> Option<Arc<ProcSample>> {
        let (proc_, buf, req, stats) = (rd.proc_, &mut *rd.buf, rd.req, &mut rd.stats);
        let moves_now = rd.cgroup_moves;
        let c = self.cache.get_mut(&pid)?;
        if !c.sample.kernel_thread {
            if req.threads && !c.threads_read {
                return None;
            }
            // Changed in place when no sample holds it any more, else copied once.
            let p = Arc::make_mut(&mut c.sample);
            // Asked before the files are read: a change between the two is seen next time.
            let seen: Option<Vec<CpuSet>> = match self.real_root {
                true => {
                    let tids: &[ThreadSample] = if req.threads { &p.threads } else { &[] };
                    let mut v = Vec::with_capacity(1 + tids.len());
                    for id in std::iter::once(pid).chain(tids.iter().map(|t| t.tid)) {
                        v.push(crate::sys::get_affinity(id).ok()?);
                    }
                    Some(v)
                }
                false => None,
            };
            let same_affinity = seen.is_some() && seen == c.affinity_seen;
            let mut rel = String::with_capacity(32);
            let mut threads = Vec::new();
            if same_affinity {
                stats.status_spared += 1;
                if req.threads {
                    threads.extend(p.threads.iter().cloned());
                }
            } else {
                let _ = write!(rel, "{pid}/status");
                proc_.read(&rel, buf).ok()?;
                let status = parse_status(buf);
                if req.threads {
                    threads.reserve(p.threads.len());
                    for t in p.threads.iter() {
                        rel.clear();
                        let _ = write!(rel, "{pid}/task/{}/status", t.tid);
                        proc_.read(&rel, buf).ok()?;
                        threads.push(ThreadSample {
                            allowed: parse_status(buf).cpus_allowed.unwrap_or_default(),
                            ..t.clone()
                        });
                    }
                }
                p.uid = status.uid;
                p.allowed = status.cpus_allowed.unwrap_or_default();
            }
            if plan::cgroup_due(moves_now, c.cgroup_moves) {
                rel.clear();
                let _ = write!(rel, "{pid}/cgroup");
                let cgroup = read_cgroup(proc_, &rel, buf)?;
                if *p.cgroup != *cgroup {
                    p.cgroup = cgroup;
                }
                c.cgroup_moves = moves_now;
            } else {
                stats.cgroup_spared += 1;
            }
            p.threads = threads.into();
            c.threads_read = req.threads;
            c.affinity_seen = seen;
        }
        Some(shared_as_asked(&c.sample, req))
    }

    /// Reads one process (`due`: re-read what does not change by running, see
    /// [`plan::proc_read`]); `None` when it exited mid-read or its stat is malformed. `ran`:
    /// with the eBPF collector, its threads that ran since the previous sample (empty when
    /// none did); `None` without the collector.
    pub(super) fn read(
        &mut self,
        rd: &mut Reads,
        pid: u32,
        due: bool,
        ran: Option<&[ThreadCpu]>,
    ) -> Option<Arc<ProcSample>> {
        let (proc_, buf, req, stats) = (rd.proc_, &mut *rd.buf, rd.req, &mut rd.stats);
        // Paths relative to the open proc dir: no per-process directory fd to open/close.
        let mut rel = String::with_capacity(32);
        // Rule 8: without the collector, a single-threaded process whose schedstat (read
        // before its stat) says what it said at its last read did not run: its cached
        // sample, its stat unread.
        // Its cached schedstat, when the rule applies to it (one lookup, not one a step).
        let cached_schedstat = match ran.is_none() && !self.no_schedstat {
            true => self
                .cache
                .get(&pid)
                .filter(|c| c.sample.num_threads == 1)
                .map(|c| c.schedstat),
            false => None,
        };
        let mut schedstat_missing = false;
        let schedstat = match cached_schedstat.is_some() {
            true => {
                let _ = write!(rel, "{pid}/schedstat");
                let cap = room(PINS_MAX, &self.stat_pins);
                match read_pinned(self.schedstat_pins.as_mut(), cap, proc_, pid, &rel, buf) {
                    Ok(()) => parse_schedstat(buf)
                        // All zero: a kernel without schedstats, never trusted.
                        .filter(|s| s.run_ns != 0 || s.slices != 0),
                    Err(e) => {
                        schedstat_missing = e.kind() == io::ErrorKind::NotFound;
                        None
                    }
                }
            }
            false => None,
        };
        if !due && schedstat.is_some() && cached_schedstat == Some(schedstat) {
            if let Some(p) = self.cached_sample(pid, req) {
                stats.schedstat_spared += 1;
                if let Some(pins) = self.stat_pins.as_mut() {
                    pins.remove(&pid);
                }
                return Some(p);
            }
        }
        rel.clear();
        let _ = write!(rel, "{pid}/stat");
        self.read_stat(proc_, pid, &rel, buf).ok()?;
        // Its stat is there and its schedstat is not: a kernel (or a fixture) without
        // them, not looked for again.
        self.no_schedstat |= schedstat_missing;
        let base = rel.len() - "stat".len(); // `PID/`
        let st = parse_pid_stat(buf)?;
        let kernel_thread = st.is_kernel_thread();
        let cpu_ticks = st.utime_ticks + st.stime_ticks;
        let key = plan::StatKey {
            start_time_ticks: st.start_time_ticks,
            cpu_ticks,
            num_threads: st.num_threads,
        };
        if let Some(c) = self.cache.get_mut(&pid) {
            // Ran for less than a tick: its stat is unchanged, but the collector's time for
            // its threads is not (kept only when rule 6 can place every increment).
            let ran_threads = ran.filter(|r| req.threads && !r.is_empty());
            let idle = plan::unchanged(c.key(), key, req.threads, c.threads_read)
                && ran_threads.is_none_or(|r| {
                    plan::threads_from_collector(&c.sample.threads, st.num_threads, r)
                });
            if idle && !due {
                if let Some(r) = ran_threads {
                    let p = Arc::make_mut(&mut c.sample);
                    p.threads = advanced_by(&p.threads, r).into();
                    stats.threads_from_collector += p.threads.len();
                }
                c.schedstat = schedstat;
                let p = &c.sample;
                let same = *p.comm == *st.comm
                    && p.state == st.state
                    && p.ppid == st.ppid
                    && p.last_cpu == st.last_cpu
                    && p.kernel_thread == kernel_thread;
                if !same {
                    let p = Arc::make_mut(&mut c.sample);
                    // A comm rarely changes: keep the shared text unless it did.
                    if *p.comm != *st.comm {
                        p.comm = st.comm.into();
                    }
                    p.state = st.state;
                    p.ppid = st.ppid;
                    p.last_cpu = st.last_cpu;
                    p.kernel_thread = kernel_thread;
                }
                return Some(shared_as_asked(&c.sample, req));
            }
        }
        stats.procs_reread += 1;
        // The last read of this very process, when it is not due for a refresh: what does
        // not change by running (cgroup, threads' affinity, texts) is kept from it.
        let prev_cache: Option<&ProcCache> = self
            .cache
            .get(&pid)
            .filter(|c| !due && c.sample.start_time_ticks == st.start_time_ticks);
        let prev: Option<&ProcSample> = prev_cache.map(|c| &*c.sample);
        let mut cgroup_moves = prev_cache.and_then(|c| c.cgroup_moves);
        let (mut uid, mut allowed) = (None, CpuSet::new());
        let mut cgroup: Arc<str> = Arc::from("");
        // What sched_getaffinity says now, before `status` is read, so that the process's
        // first refresh can spare it (without threads: their allowed CPUs may be kept
        // from an earlier read, and would not match).
        let mut affinity_seen = None;
        if !kernel_thread {
            if self.real_root && !req.threads {
                affinity_seen = crate::sys::get_affinity(pid).ok().map(|g| vec![g]);
            }
            rel.truncate(base);
            rel.push_str("status");
            proc_.read(&rel, buf).ok()?;
            let status = parse_status(buf);
            uid = status.uid;
            allowed = status.cpus_allowed.unwrap_or_default();
            // A process's cgroup does not change by running (it moves when a manager moves
            // it, mostly at exec, which makes it due; placer's own moves invalidate it):
            // a process that ran keeps its cgroup until its refresh.
            match prev {
                Some(p) => cgroup = p.cgroup.clone(),
                None => {
                    rel.truncate(base);
                    rel.push_str("cgroup");
                    cgroup = read_cgroup(proc_, &rel, buf)?;
                    cgroup_moves = rd.cgroup_moves;
                }
            }
        }
        let mut threads = Vec::new();
        // With the collector, a process that ran with the threads of its last read (same
        // count, each with a collector time, every one that ran among them) needs no
        // thread file: the collector gives each thread's time and last CPU. (Both lists
        // are in tid order.)
        let from_collector = req.threads
            && !kernel_thread
            && ran.is_some_and(|r| {
                prev.is_some_and(|p| plan::threads_from_collector(&p.threads, st.num_threads, r))
            });
        if from_collector {
            let p = prev.expect("checked above");
            threads = advanced_by(&p.threads, ran.expect("checked above"));
            stats.threads_from_collector += threads.len();
        } else if req.threads && !kernel_thread {
            threads = self.read_thread_files(proc_, buf, pid, &st, prev, ran);
        }
        let comm = match prev {
            Some(p) if *p.comm == *st.comm => p.comm.clone(),
            _ => st.comm.into(),
        };
        let sample = Arc::new(ProcSample {
            pid,
            start_time_ticks: st.start_time_ticks,
            comm,
            state: st.state,
            ppid: st.ppid,
            uid,
            utime_ticks: st.utime_ticks,
            stime_ticks: st.stime_ticks,
            last_cpu: st.last_cpu,
            allowed,
            cgroup,
            num_threads: st.num_threads,
            kernel_thread,
            threads: threads.into(),
            socket_inodes: Vec::new(),
            counters: Vec::new(),
            numa_pages: Default::default(),
        });
        self.cache.insert(
            pid,
            ProcCache {
                sample: sample.clone(),
                threads_read: req.threads || kernel_thread,
                affinity_seen,
                cgroup_moves,
                schedstat,
            },
        );
        Some(shared_as_asked(&sample, req))
    }

    /// A process's threads from their files (`task/TID/stat`, and `status` for a thread
    /// not read before or when the process is refreshed: `prev` is its last read when it is
    /// not), each thread's collector time carried on from the cache.
    fn read_thread_files(
        &self,
        proc_: &Dir,
        buf: &mut String,
        pid: u32,
        st: &PidStat,
        prev: Option<&ProcSample>,
        ran: Option<&[ThreadCpu]>,
    ) -> Vec<ThreadSample> {
        let mut threads = Vec::new();
        let ns_per_tick = 1_000_000_000 / u64::from(self.clk_tck.max(1));
        let ran_ns = |tid: u32| ran.and_then(|r| ran_of(r, tid));
        // The collector's cumulative CPU time of each thread as of the last sample (the
        // cache, due or not: a refresh re-reads affinities, the time goes on).
        let ns_before: PidMap<u64> = match ran {
            Some(_) => self
                .cache
                .get(&pid)
                .filter(|c| c.sample.start_time_ticks == st.start_time_ticks)
                .map(|c| {
                    c.sample
                        .threads
                        .iter()
                        .filter_map(|t| Some((t.tid, t.cpu_ns?)))
                        .collect()
                })
                .unwrap_or_default(),
            None => PidMap::default(),
        };
        // A thread's affinity does not change by running: its status is re-read when
        // the thread is new or the process is due for a refresh, else kept (with its
        // comm's shared text when unchanged).
        let cached: Option<&Arc<[ThreadSample]>> = prev.map(|p| &p.threads);
        let known: PidMap<&ThreadSample> = cached
            .map(|t| t.iter().map(|t| (t.tid, t)).collect())
            .unwrap_or_default();
        // No task dir: the process exited, its threads with it.
        // The task directory is opened once: each thread's files are opened relative
        // to it (no walk of `PID/task/` per file).
        let task = proc_.sub(&format!("{pid}/task")).ok();
        let list = |task: &Dir| task.numeric_entries().unwrap_or_default();
        // Same thread count as the last read: the same threads, most likely, so the
        // directory is not listed; a thread that exited since fails its read, and the
        // directory is then listed after all (a thread replaced by another at the same
        // count between two samples shows at the process's next refresh).
        let mut from_cache = cached.is_some_and(|t| t.len() == st.num_threads as usize);
        let mut tids: Vec<u32> = if from_cache {
            cached
                .map(|t| t.iter().map(|t| t.tid).collect())
                .unwrap_or_default()
        } else {
            task.as_ref().map(list).unwrap_or_default()
        };
        let mut trel = String::with_capacity(24);
        'read: loop {
            threads.clear();
            for &tid in &tids {
                let Some(task) = task.as_ref() else { break };
                trel.clear();
                let _ = write!(trel, "{tid}/stat");
                if task.read(&trel, buf).is_err() {
                    if from_cache {
                        from_cache = false;
                        tids = list(task);
                        continue 'read;
                    }
                    continue; // thread exited
                }
                let Some(ts) = parse_pid_stat(buf) else {
                    continue;
                };
                let before = known.get(&tid);
                let t_allowed = match before {
                    Some(t) => t.allowed.clone(),
                    None => {
                        trel.truncate(trel.len() - "stat".len());
                        trel.push_str("status");
                        match task.read(&trel, buf) {
                            Ok(()) => parse_status(buf).cpus_allowed.unwrap_or_default(),
                            Err(_) => continue,
                        }
                    }
                };
                let comm = match before {
                    Some(t) if *t.comm == *ts.comm => t.comm.clone(),
                    _ => ts.comm.into(),
                };
                // The collector's time goes on from where it was; a thread it has
                // no time for yet starts at its ticks.
                let cpu_ns = ran.map(|_| match ns_before.get(&tid) {
                    Some(&ns) => ns + ran_ns(tid).map_or(0, |r| r.cpu_ns),
                    None => (ts.utime_ticks + ts.stime_ticks) * ns_per_tick,
                });
                threads.push(ThreadSample {
                    tid,
                    comm,
                    state: ts.state,
                    utime_ticks: ts.utime_ticks,
                    stime_ticks: ts.stime_ticks,
                    last_cpu: ts.last_cpu,
                    allowed: t_allowed,
                    cpu_ns,
                });
            }
            break;
        }
        threads
    }
}

/// A cached sample as `req` asks for it: shared, or a copy without its threads when they
/// were not asked for (a sample carries threads only when asked).
/// Rule 6's step: each thread of `prev` advanced by the time the collector gives it in
/// `ran` (both in tid order), with the CPU it ran on last.
fn advanced_by(prev: &[ThreadSample], ran: &[ThreadCpu]) -> Vec<ThreadSample> {
    prev.iter()
        .map(|t| match ran_of(ran, t.tid) {
            Some(r) => ThreadSample {
                cpu_ns: t.cpu_ns.map(|ns| ns + r.cpu_ns),
                last_cpu: Some(r.last_cpu),
                ..t.clone()
            },
            None => t.clone(),
        })
        .collect()
}

/// What the collector gives thread `tid` in `ran` (in tid order), if it ran.
fn ran_of(ran: &[ThreadCpu], tid: u32) -> Option<&ThreadCpu> {
    ran.binary_search_by_key(&tid, |r| r.tid)
        .ok()
        .map(|i| &ran[i])
}

fn shared_as_asked(p: &Arc<ProcSample>, req: SampleRequest) -> Arc<ProcSample> {
    if req.threads || p.threads.is_empty() {
        return p.clone();
    }
    Arc::new(ProcSample {
        threads: Default::default(),
        ..(**p).clone()
    })
}

/// How many files of one kind may be kept open: `max`, less what the other kind holds of
/// [`PINS_MAX`].
fn room(max: usize, other: &Option<PidMap<PinnedFile>>) -> usize {
    max.min(PINS_MAX - other.as_ref().map_or(0, |o| o.len().min(PINS_MAX)))
}

/// Reads a process's file `rel` (under the proc dir): through its file kept open in `pins`
/// when there is one (a process gone fails it, and a process that took its pid is opened
/// anew), else opened, and kept open while fewer than `cap` are. Without `pins` (a fixture
/// root), opened and read.
fn read_pinned(
    pins: Option<&mut PidMap<PinnedFile>>,
    cap: usize,
    proc_: &Dir,
    pid: u32,
    rel: &str,
    buf: &mut String,
) -> io::Result<()> {
    let Some(pins) = pins else {
        return proc_.read(rel, buf);
    };
    if let Some(f) = pins.get(&pid) {
        if f.read(rel, buf).is_ok() {
            return Ok(());
        }
        pins.remove(&pid);
    }
    if pins.len() >= cap {
        return proc_.read(rel, buf);
    }
    let f = PinnedFile::open(proc_, rel)?;
    f.read(rel, buf)?;
    pins.insert(pid, f);
    Ok(())
}

/// A process's `cgroup` file (`rel`, under /proc): `None` when it vanished (the process is
/// gone), "" when it could not be read otherwise (left unknown).
fn read_cgroup(proc_: &Dir, rel: &str, buf: &mut String) -> Option<Arc<str>> {
    match proc_.read(rel, buf) {
        Ok(()) => Some(parse_cgroup(buf).into()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(_) => Some(Arc::from("")),
    }
}
