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
//!    CPU time, state, threads or fds);
//! 2. the process set comes from the cache plus the connector's forks and exits; /proc is
//!    listed only at the first sample, every [`LIST_EVERY`] samples, and when the
//!    connector lost events;
//! 3. idle processes are re-read in full in a rotating window of at most
//!    [`IDLE_REFRESH_BUDGET`] per sample (so another tool's change to a sleeping process's
//!    affinity shows within `procs / budget` samples), and at once after an exec;
//! 4. numa_maps and fd counts are read only for processes that ran (numa_maps on the /proc
//!    path too: for processes whose files were read again);
//! 5. a process that ran and exited between two samples is reported in `Sample::exited`
//!    with its CPU time (the collector) or at least its pid (the connector);
//! 6. a process that ran with the threads of its last read (same count, every thread the
//!    collector names among them) reads no thread file: each thread's cumulative
//!    `cpu_ns` goes on by the collector's time and its last CPU is the collector's (its
//!    ticks, state and comm stay as last read until the process's refresh or a change
//!    of its thread count). A thread's `cpu_ns` starts at its ticks when the thread is
//!    first read; a sample without the collector's word has none, and the observation
//!    then uses ticks.
//!
//! Either source missing falls back to the /proc rule above for its part. The socket dump
//! is skipped when not one TCP segment moved in this network namespace since the last one
//! (`/proc/net/snmp`), whatever the sources.
//!
//! Robustness: a process that exits mid-read (any of its files vanishes) is dropped
//! silently; a malformed file drops only that process (or that line); only an unreadable
//! `proc/stat` — a wrong root — fails the sample.
//!
//! Socket-to-process mapping is cached per process (keyed by pid and start time): a
//! process's `fd/` directory is re-read only when (1) the process is new (or its PID was
//! reused), (2) its open-fd count changed (`stat(proc/PID/fd).st_size` is the number of
//! open fds since Linux 6.2; on older kernels it is constant and this rule is inert), or
//! (3) sock_diag reports a socket inode that no cached process owns and that was not
//! already unowned in the previous sample — then every process not re-read this cycle is
//! re-read once. Rule 3 catches an fd swapped for another at a constant count; remembering
//! the unowned set keeps sockets nobody can map (other users' without permission, sockets
//! of processes in another PID namespace) from forcing a full re-read every cycle.
//!
//! sock_diag talks to the kernel, not to the root path, so it is only used when the root
//! is `/` (override with [`Sampler::set_sock_diag`]).

pub use crate::activity::{Activity, ActivitySource};
use crate::bpf::ThreadCpu;
use crate::energy::EnergySource;
use crate::error::{LinuxError, Result};
use crate::interrupts::{parse_interrupts, parse_softirqs};
use crate::perf::{CounterSource, PerfCounters};
use crate::pid::{PidMap, PidSet};
use crate::proc_events::ProcEvent;
use crate::procfs::{
    parse_cgroup, parse_pid_stat, parse_proc_stat, parse_status, parse_tcp_segments, socket_inode,
};
use crate::sockdiag::SockDiag;
use placer_core::sample::{
    ExitedProc, ProcSample, SampleRequest, Source, SourceKind, SourceStatus, ThreadSample,
};
use placer_core::{CpuSet, Sample};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Cumulative counters of every interface under `root/sys/class/net`, sorted by name; an
/// interface whose counters cannot be read (it vanished mid-read) is left out.
pub fn read_nic_counters(root: &Path) -> Vec<placer_core::sample::NicCounters> {
    let dir = root.join("sys/class/net");
    let Ok(entries) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    let read = |name: &str, file: &str| -> Option<u64> {
        let p = dir.join(name).join("statistics").join(file);
        crate::attr::read_u64(&p)
    };
    names
        .into_iter()
        .filter_map(|name| {
            Some(placer_core::sample::NicCounters {
                rx_packets: read(&name, "rx_packets")?,
                rx_bytes: read(&name, "rx_bytes")?,
                tx_packets: read(&name, "tx_packets")?,
                tx_bytes: read(&name, "tx_bytes")?,
                name,
            })
        })
        .collect()
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

/// The cached socket inodes of one process.
#[derive(Debug, Clone)]
struct FdEntry {
    start_time_ticks: u64,
    fd_count: u64,
    inodes: Vec<u64>,
}

/// What a process's files said last time: its whole sample (without sockets, counters and
/// pages), so that a process the kernel's events say did not run is not read at all.
#[derive(Debug, Clone)]
struct ProcCache {
    sample: ProcSample,
    /// Whether `sample.threads` were read (a policy asked for threads then).
    threads_read: bool,
}

impl ProcCache {
    fn cpu_ticks(&self) -> u64 {
        self.sample.utime_ticks + self.sample.stime_ticks
    }
}

/// With the eBPF collector: at most this many idle processes are re-read in full per
/// sample (a rotating window), so that the cost of a sample does not grow with the number
/// of processes that exist; see [`Sampler::set_refresh_every`].
pub const IDLE_REFRESH_BUDGET: usize = 32;
/// With the process-events connector: /proc is still listed this often (samples), as a
/// safety net for anything the events could not say.
pub const LIST_EVERY: u64 = 64;

/// Default of [`Sampler::set_refresh_every`].
pub const DEFAULT_REFRESH_EVERY: u64 = 8;

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
    /// No TCP segment moved since the last socket dump: its sockets were used again.
    pub sockets_reused: bool,
    /// Threads of processes that ran taken from the collector's times, without reading
    /// their files.
    pub threads_from_collector: usize,
}

pub struct Sampler {
    pub root: PathBuf,
    proc_dir: PathBuf,
    clk_tck: u32,
    use_sock_diag: bool,
    sock_diag: Option<std::result::Result<SockDiag, String>>,
    fd_cache: PidMap<FdEntry>,
    proc_cache: PidMap<ProcCache>,
    sample_no: u64,
    refresh_every: u64,
    last_unowned: HashSet<u64>,
    energy: Option<EnergySource>,
    counters: Option<Box<dyn CounterSource>>,
    status: Option<SourceStatus>,
    buf: String,
    /// The open `proc` directory (opened at the first sample).
    proc: Option<Dir>,
    pub last_stats: SampleStats,
    /// The kernel's event sources (eBPF CPU collector, process-events connector), opened at
    /// the first sample when `kernel_events` is on.
    activity: Option<Box<dyn ActivitySource>>,
    kernel_events: bool,
    /// Where the idle-refresh window stopped last time (a pid).
    refresh_cursor: u32,
    /// Pages per node of processes not re-read (with the eBPF collector).
    numa_cache: PidMap<std::collections::BTreeMap<u32, u64>>,
    /// The pids of the previous sample.
    last_alive: PidSet,
    /// TCP segments in and out at the last socket dump, and that dump.
    last_tcp_segments: Option<(u64, u64)>,
    last_sockets: Vec<placer_core::sample::SocketSample>,
    /// Processes to read again in full at the next sample ([`Sampler::invalidate`]): kept
    /// in the cache meanwhile, since on the events path the cache is the process set.
    stale: PidSet,
}

/// An open directory; files under it are opened relative to it (`openat`), which spares
/// the kernel a walk of the whole path for each of the thousands of files a sample reads.
struct Dir(libc::c_int);

/// A NUL-terminated copy of `rel` in a small reusable buffer.
fn c_path(rel: &str, out: &mut Vec<u8>) -> io::Result<()> {
    out.clear();
    out.extend_from_slice(rel.as_bytes());
    if out.contains(&0) {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    out.push(0);
    Ok(())
}

impl Dir {
    fn open(path: &Path) -> io::Result<Dir> {
        let mut c = Vec::new();
        c_path(path.to_str().ok_or(io::ErrorKind::InvalidInput)?, &mut c)?;
        Self::open_raw(libc::AT_FDCWD, &c)
    }

    fn open_raw(at: libc::c_int, c: &[u8]) -> io::Result<Dir> {
        // SAFETY: c is NUL-terminated; the fd is owned by the returned Dir.
        let fd = unsafe {
            libc::openat(
                at,
                c.as_ptr() as *const libc::c_char,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(Dir(fd))
        }
    }

    /// Reads the file `rel` into `buf`. A short read is taken as the end of the file: true
    /// of regular files and of /proc's seq_file files, and it saves a read per file.
    /// A directory under this one (`rel` relative to it).
    fn sub(&self, rel: &str) -> io::Result<Dir> {
        let mut c = Vec::with_capacity(rel.len() + 1);
        c_path(rel, &mut c)?;
        Self::open_raw(self.0, &c)
    }

    /// The numeric entries of this directory (pids, tids), sorted, listed through a
    /// duplicate of its fd (the fd itself stays open for `read`).
    fn numeric_entries(&self) -> io::Result<Vec<u32>> {
        // SAFETY: dup of an fd we own; fdopendir takes the duplicate, closedir closes it;
        // readdir's entries are valid until the next readdir/closedir, and each name is
        // copied out before that.
        unsafe {
            let dup = libc::fcntl(self.0, libc::F_DUPFD_CLOEXEC, 0);
            if dup < 0 {
                return Err(io::Error::last_os_error());
            }
            let d = libc::fdopendir(dup);
            if d.is_null() {
                let e = io::Error::last_os_error();
                libc::close(dup);
                return Err(e);
            }
            let mut v = Vec::new();
            loop {
                let ent = libc::readdir(d);
                if ent.is_null() {
                    break;
                }
                let name = std::ffi::CStr::from_ptr((*ent).d_name.as_ptr());
                if let Some(n) = name.to_str().ok().and_then(|s| s.parse::<u32>().ok()) {
                    v.push(n);
                }
            }
            libc::closedir(d);
            v.sort_unstable();
            Ok(v)
        }
    }

    fn read(&self, rel: &str, buf: &mut String) -> io::Result<()> {
        let mut c = [0u8; 64];
        let bytes = rel.as_bytes();
        if bytes.len() >= c.len() || bytes.contains(&0) {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        c[..bytes.len()].copy_from_slice(bytes);
        // SAFETY: c is NUL-terminated. O_NONBLOCK: a FIFO planted under a root neither
        // blocks the open nor the reads (procfs ignores the flag).
        let fd = unsafe {
            libc::openat(
                self.0,
                c.as_ptr() as *const libc::c_char,
                libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut v = std::mem::take(buf).into_bytes();
        v.clear();
        let r = loop {
            // A link to /dev/zero or a huge file under a root: bounded like topology reads.
            if v.len() > crate::topology::fs::MAX_FILE_BYTES {
                break Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{rel}: larger than {} bytes",
                        crate::topology::fs::MAX_FILE_BYTES
                    ),
                ));
            }
            if v.capacity() - v.len() < 1024 {
                v.reserve(4096);
            }
            let room = v.capacity() - v.len();
            // SAFETY: writes at most `room` bytes into the spare capacity.
            let n =
                unsafe { libc::read(fd, v.as_mut_ptr().add(v.len()) as *mut libc::c_void, room) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                break Err(e);
            }
            // SAFETY: the kernel initialised n bytes.
            unsafe { v.set_len(v.len() + n as usize) };
            if n == 0 || (n as usize) < room {
                break Ok(());
            }
        };
        // SAFETY: fd is ours and closed once.
        unsafe { libc::close(fd) };
        *buf = match String::from_utf8(v) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        r
    }

    /// `st_size` of `rel` (for /proc/PID/fd: the number of open fds, Linux >= 6.2).
    fn size_of(&self, rel: &str) -> io::Result<u64> {
        let mut c = Vec::with_capacity(rel.len() + 1);
        c_path(rel, &mut c)?;
        // SAFETY: st is a valid out-pointer, c NUL-terminated.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::fstatat(self.0, c.as_ptr() as *const libc::c_char, &mut st, 0) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(st.st_size as u64)
        }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: the fd is owned and closed once.
        unsafe { libc::close(self.0) };
    }
}

/// Numeric entries of a directory (pids or tids), sorted.
fn numeric_entries(dir: &Path) -> io::Result<Vec<u32>> {
    let mut v: Vec<u32> = fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

impl Sampler {
    pub fn new(root: &Path) -> Self {
        Sampler {
            root: root.to_path_buf(),
            proc_dir: root.join("proc"),
            clk_tck: crate::sys::clock_ticks_per_s(),
            use_sock_diag: root == Path::new("/"),
            sock_diag: None,
            fd_cache: PidMap::default(),
            proc_cache: PidMap::default(),
            sample_no: 0,
            refresh_every: DEFAULT_REFRESH_EVERY,
            last_unowned: HashSet::new(),
            energy: None,
            counters: None,
            status: None,
            buf: String::with_capacity(4096),
            proc: None,
            last_stats: SampleStats::default(),
            activity: None,
            kernel_events: root == Path::new("/"),
            refresh_cursor: 0,
            numa_cache: PidMap::default(),
            last_alive: PidSet::default(),
            last_tcp_segments: None,
            last_sockets: Vec::new(),
            stale: PidSet::default(),
        }
    }

    /// Use the kernel's event sources (eBPF CPU collector, process-events connector) when
    /// they can be opened (root, the real `/`), or never (`false`: the /proc path only).
    /// On by default for root `/`.
    pub fn set_kernel_events(&mut self, on: bool) {
        self.kernel_events = on;
        self.activity = None;
        self.status = None;
    }

    /// Replace the event sources (a scripted one in benchmarks on generated trees).
    pub fn set_activity_source(&mut self, src: Box<dyn ActivitySource>) {
        self.activity = Some(src);
        self.kernel_events = true;
        self.status = None;
    }

    /// Use sock_diag (the current network namespace) even for a non-`/` root, or not at all.
    pub fn set_sock_diag(&mut self, on: bool) {
        self.use_sock_diag = on;
        self.sock_diag = None;
        self.status = None;
    }

    /// Re-read every process's status, cgroup and threads at least every `n` samples
    /// (1 = every sample: exact, and the most costly). See the module doc.
    pub fn set_refresh_every(&mut self, n: u64) {
        self.refresh_every = n.max(1);
    }

    /// Forget what is cached about `pid` (call after changing its affinity or cgroup), so
    /// the next sample re-reads it.
    ///
    /// The process stays in the cache until then: on the events path the process set is the
    /// cache plus the connector's forks, so dropping it would make a process placer just
    /// moved vanish from the samples until the next full listing, and the engine would take
    /// it for exited and lose its hold.
    pub fn invalidate(&mut self, pid: u32) {
        self.stale.insert(pid);
        self.fd_cache.remove(&pid);
    }

    /// Replace the counter source (a [`crate::perf::ReplayCounters`] in tests and replays).
    pub fn set_counter_source(&mut self, src: Box<dyn CounterSource>) {
        self.counters = Some(src);
        self.status = None;
    }

    fn ensure_probed(&mut self) {
        if self.status.is_some() {
            return;
        }
        let mut sources = Vec::new();
        let stat = self.proc_dir.join("stat");
        sources.push(Source {
            name: SourceKind::Proc,
            available: stat.exists(),
            detail: if stat.exists() {
                format!("{}", self.proc_dir.display())
            } else {
                format!("{} missing", stat.display())
            },
        });
        for (name, file) in [
            (SourceKind::Interrupts, "interrupts"),
            (SourceKind::Softirqs, "softirqs"),
        ] {
            let p = self.proc_dir.join(file);
            sources.push(Source {
                name,
                available: p.exists(),
                detail: if p.exists() {
                    p.display().to_string()
                } else {
                    format!("{} missing", p.display())
                },
            });
        }
        if self.use_sock_diag && self.sock_diag.is_none() {
            self.sock_diag = Some(SockDiag::open().map_err(|e| e.to_string()));
        }
        sources.push(match &self.sock_diag {
            Some(Ok(_)) => Source {
                name: SourceKind::SockDiag,
                available: true,
                detail: "TCP sockets of this network namespace (IPv4, IPv6)".into(),
            },
            Some(Err(e)) => Source {
                name: SourceKind::SockDiag,
                available: false,
                detail: format!("netlink sock_diag: {e}"),
            },
            None => Source {
                name: SourceKind::SockDiag,
                available: false,
                detail: format!(
                    "not used for root {} (sock_diag sees the host's kernel)",
                    self.root.display()
                ),
            },
        });
        if self.counters.is_none() {
            let real_root = self.root == Path::new("/");
            if real_root {
                // Seed 003's events for this CPU generation (pmu_events), else the default set.
                let events = crate::pmu_events::resolve(&self.root)
                    .map(|r| r.events)
                    .unwrap_or_else(|_| crate::perf::default_events());
                self.counters = Some(Box::new(PerfCounters::probe(events)));
            }
        }
        sources.push(match &self.counters {
            Some(c) => c.status(),
            None => Source {
                name: SourceKind::PerfHw,
                available: false,
                detail: format!("no counters for root {}", self.root.display()),
            },
        });
        let (energy, es) = EnergySource::probe(&self.root);
        self.energy = Some(energy);
        sources.extend(es);
        if self.kernel_events && self.activity.is_none() && self.root == Path::new("/") {
            let k = crate::activity::KernelActivity::open();
            sources.extend(k.sources());
            if k.any() {
                self.activity = Some(Box::new(k));
            }
        } else if let Some(a) = &self.activity {
            sources.extend(a.sources());
        } else {
            let why = if self.kernel_events {
                format!("not for root {}", self.root.display())
            } else {
                "off (kernel_events = false)".to_string()
            };
            for name in [SourceKind::Ebpf, SourceKind::ProcEvents] {
                sources.push(Source {
                    name,
                    available: false,
                    detail: why.clone(),
                });
            }
        }
        self.status = Some(SourceStatus { sources });
    }

    /// Which optional sources exist and why the others do not (probed once).
    pub fn sources(&mut self) -> SourceStatus {
        self.ensure_probed();
        self.status.clone().unwrap_or_default()
    }

    /// One raw sample now.
    pub fn sample(&mut self, req: SampleRequest) -> Result<Sample> {
        self.ensure_probed();
        let mut stats = SampleStats::default();
        // The sample's time is the middle of its reads (CPU times, processes, sockets):
        // under load one sample can take tens of ms, and stamping its start would skew
        // every rate by that much.
        let t_start = crate::sys::monotonic_ns();
        if self.proc.is_none() {
            self.proc =
                Some(Dir::open(&self.proc_dir).map_err(|e| LinuxError::io(&self.proc_dir, e))?);
        }
        let proc_ = self.proc.as_ref().expect("opened above");
        let irqs = match proc_.read("interrupts", &mut self.buf) {
            Ok(()) => parse_interrupts(&self.buf),
            Err(_) => Vec::new(),
        };
        let softirqs = match proc_.read("softirqs", &mut self.buf) {
            Ok(()) => parse_softirqs(&self.buf),
            Err(_) => Vec::new(),
        };

        // The kernel's events: which processes ran (eBPF) and which came and went (the
        // connector); each part unknown falls back to reading /proc for it.
        let act = match self.activity.as_mut() {
            Some(a) => a.drain(),
            None => Activity::default(),
        };
        self.sample_no += 1;
        let mut execd: PidSet = PidSet::default();
        let mut born: PidSet = PidSet::default();
        let listing_due = self.proc_cache.is_empty() || self.sample_no.is_multiple_of(LIST_EVERY);
        let pids: Vec<u32> = match &act.events {
            Some(events) if !listing_due => {
                // The events in order decide, for the few pids they name, whether each is
                // there (a fork or exec) or gone (an exit); the cache gives the rest.
                let mut named: PidMap<bool> = PidMap::default();
                for e in events {
                    match *e {
                        ProcEvent::Fork { pid, .. } => {
                            named.insert(pid, true);
                            born.insert(pid);
                        }
                        ProcEvent::Exec { pid } => {
                            named.insert(pid, true);
                            execd.insert(pid);
                        }
                        ProcEvent::Exit { pid } => {
                            named.insert(pid, false);
                        }
                        ProcEvent::Other => {}
                    }
                }
                let mut v: Vec<u32> = self
                    .proc_cache
                    .keys()
                    .copied()
                    .filter(|p| named.get(p) != Some(&false))
                    .chain(named.iter().filter(|(_, &there)| there).map(|(&p, _)| p))
                    .collect();
                v.sort_unstable();
                v.dedup();
                v
            }
            _ => {
                stats.listed = true;
                if let Some(events) = &act.events {
                    for e in events {
                        match *e {
                            ProcEvent::Fork { pid, .. } => {
                                born.insert(pid);
                            }
                            ProcEvent::Exec { pid } => {
                                execd.insert(pid);
                            }
                            _ => {}
                        }
                    }
                }
                numeric_entries(&self.proc_dir).map_err(|e| LinuxError::io(&self.proc_dir, e))?
            }
        };
        // With the collector, idle processes are re-read in a bounded rotating window
        // instead of every `refresh_every` samples each.
        let refresh: PidSet = match &act.ran {
            Some(_) => self.refresh_window(&pids),
            None => PidSet::default(),
        };
        let mut procs = Vec::with_capacity(pids.len());
        let mut reread: PidSet = PidSet::default();
        // Processes whose files were actually read again this sample (not from the cache).
        let mut fresh: PidSet = PidSet::default();
        for pid in pids {
            // What the collector saw of it: None without the collector, Some(None) when it
            // did not run.
            let seen = act.ran.as_ref().map(|r| r.get(&pid));
            let stale = self.stale.contains(&pid);
            if let Some(seen) = seen {
                let skip =
                    seen.is_none() && !refresh.contains(&pid) && !execd.contains(&pid) && !stale;
                if skip {
                    if let Some(p) = self.cached_sample(pid, req) {
                        procs.push(p);
                        stats.procs_skipped += 1;
                        continue;
                    }
                }
            }
            let due = if stale {
                Some(true)
            } else {
                act.ran
                    .as_ref()
                    .map(|_| refresh.contains(&pid) || execd.contains(&pid))
            };
            let before = stats.procs_reread;
            let ran = seen.map(|c| c.map_or(&[][..], |c| &c.threads[..]));
            match self.read_proc(pid, req, due, ran, &mut stats) {
                Some(p) => {
                    reread.insert(pid);
                    if stats.procs_reread > before {
                        fresh.insert(pid);
                    }
                    procs.push(p)
                }
                None => stats.dropped_procs += 1,
            }
        }
        self.stale.clear();
        stats.procs = procs.len();
        let alive: PidSet = procs.iter().map(|p| p.pid).collect();
        if stats.dropped_procs > 0 || self.proc_cache.len() > procs.len() {
            self.proc_cache.retain(|pid, _| alive.contains(pid));
            self.numa_cache.retain(|pid, _| alive.contains(pid));
        }
        // Who ran and is gone: the collector's time for them, else the connector's word.
        let mut exited: Vec<ExitedProc> = Vec::new();
        if let Some(ran) = &act.ran {
            for (&pid, c) in ran {
                if !alive.contains(&pid) {
                    exited.push(ExitedProc {
                        pid,
                        comm: c.comm.clone(),
                        cpu_ns: Some(c.cpu_ns),
                        unsampled: born.contains(&pid) || !self.was_sampled(pid),
                    });
                }
            }
        }
        if let Some(events) = &act.events {
            for e in events {
                if let ProcEvent::Exit { pid } = *e {
                    if born.contains(&pid) && !exited.iter().any(|x| x.pid == pid) {
                        exited.push(ExitedProc {
                            pid,
                            comm: String::new(),
                            cpu_ns: None,
                            unsampled: true,
                        });
                    }
                }
            }
        }
        exited.sort_by_key(|x| x.pid);
        stats.exited = exited.len();
        self.last_alive = alive;

        let mut sockets = Vec::new();
        // Without sock_diag there are no sockets, hence nothing to map to processes.
        if let (true, Some(Ok(sd))) = (req.sockets, &mut self.sock_diag) {
            // The dump walks every bucket of the kernel's TCP hash, however few sockets
            // there are: when not one TCP segment moved in this namespace since the last
            // dump (the TCP MIB, /proc/net/snmp), no socket changed, and the last dump is
            // still true.
            let segs = if self.root == Path::new("/") {
                let proc_ = self.proc.as_ref().expect("opened above");
                proc_
                    .read("self/net/snmp", &mut self.buf)
                    .ok()
                    .and_then(|()| parse_tcp_segments(&self.buf))
            } else {
                None
            };
            if segs.is_some() && segs == self.last_tcp_segments {
                sockets = self.last_sockets.clone();
                stats.sockets_reused = true;
            } else {
                match sd.tcp_sockets() {
                    Ok(s) => {
                        sockets = s;
                        self.last_sockets = sockets.clone();
                        self.last_tcp_segments = segs;
                    }
                    Err(e) => {
                        tracing::debug!("sock_diag: {e}");
                        self.last_tcp_segments = None;
                    }
                }
            }
            // With the collector, a process that did not run cannot have opened or closed
            // an fd: only the re-read ones get their fd count checked.
            let ran = act.ran.as_ref().map(|_| &reread);
            self.map_sockets(&mut procs, &sockets, ran, &mut stats);
        }

        let time_ns = t_start + (crate::sys::monotonic_ns() - t_start) / 2;

        if req.counters {
            if let Some(c) = self.counters.as_mut().filter(|c| c.status().available) {
                let alive: PidSet = procs.iter().map(|p| p.pid).collect();
                c.retain(&alive);
                let proc_dir = &self.proc_dir;
                for p in procs.iter_mut().filter(|p| !p.kernel_thread) {
                    let tids: Vec<u32> = if p.threads.is_empty() {
                        numeric_entries(&proc_dir.join(format!("{}/task", p.pid)))
                            .unwrap_or_default()
                    } else {
                        p.threads.iter().map(|t| t.tid).collect()
                    };
                    p.counters = c.read(p.pid, &tids);
                }
            }
        }

        if req.numa_pages {
            // numa_maps walks each process's page tables: read only when a policy asks, and
            // then only for processes that ran (their files were re-read, or the collector
            // saw them) or are new; the others keep their last map (an idle process's pages
            // do not move, but for the kernel's NUMA balancing, which needs it to run).
            let page = placer_bufpool::numa::page_bytes() as u64;
            for p in procs.iter_mut().filter(|p| !p.kernel_thread) {
                let ran = act.ran.as_ref().is_some_and(|r| r.contains_key(&p.pid));
                if fresh.contains(&p.pid) || ran || !self.numa_cache.contains_key(&p.pid) {
                    match crate::numa_maps::read(&self.root, p.pid, page) {
                        Ok(Some(m)) => {
                            self.numa_cache.insert(p.pid, m);
                        }
                        _ => {
                            self.numa_cache.remove(&p.pid);
                        }
                    }
                }
                if let Some(m) = self.numa_cache.get(&p.pid) {
                    p.numa_pages = m.clone();
                }
            }
        }

        // /proc/stat after the processes: a CPU taken offline while they were read is then
        // missing here too, so a process the kernel moved off it (its fallback affinity)
        // is never seen with that CPU still listed (the engine tells hotplug from someone
        // else's change by the CPU's absence).
        self.proc
            .as_ref()
            .expect("opened above")
            .read("stat", &mut self.buf)
            .map_err(|e| LinuxError::io(self.proc_dir.join("stat"), e))?;
        let cpus = parse_proc_stat(&self.buf);
        let (energy, power) = match &self.energy {
            Some(e) => (e.read_energy(), e.read_power()),
            None => (Vec::new(), Vec::new()),
        };
        let (nics, cpu_freqs) = if req.nics {
            (
                read_nic_counters(&self.root),
                read_cpu_freqs(&self.root, cpus.iter().map(|c| c.cpu)),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        self.last_stats = stats;
        Ok(Sample {
            time_ns,
            clk_tck: self.clk_tck,
            cpus,
            procs,
            sockets,
            irqs,
            softirqs,
            energy,
            power,
            nics,
            cpu_freqs,
            page_bytes: placer_bufpool::numa::page_bytes() as u64,
            exited,
        })
    }

    /// The next window of at most [`IDLE_REFRESH_BUDGET`] pids (about `1/refresh_every` of
    /// them) after the cursor, wrapping: every process is re-read in turn.
    fn refresh_window(&mut self, pids: &[u32]) -> PidSet {
        if pids.is_empty() {
            return PidSet::default();
        }
        let n = pids
            .len()
            .div_ceil(self.refresh_every as usize)
            .clamp(1, IDLE_REFRESH_BUDGET);
        let start = pids.partition_point(|&p| p <= self.refresh_cursor);
        let window: PidSet = (0..n.min(pids.len()))
            .map(|i| pids[(start + i) % pids.len()])
            .collect();
        self.refresh_cursor = pids[(start + n - 1) % pids.len()];
        window
    }

    /// Whether `pid` was in the previous sample.
    fn was_sampled(&self, pid: u32) -> bool {
        self.last_alive.contains(&pid)
    }

    /// The cached sample of a process that did not run (`None` when not cached, or when
    /// threads are asked for and were not read last time).
    fn cached_sample(&self, pid: u32, req: SampleRequest) -> Option<ProcSample> {
        let c = self.proc_cache.get(&pid)?;
        if req.threads && !c.threads_read && !c.sample.kernel_thread {
            return None;
        }
        let mut p = c.sample.clone();
        if !req.threads {
            p.threads = Default::default();
        }
        Some(p)
    }

    /// Reads one process; `None` when it exited mid-read or its stat is malformed. `ran`:
    /// with the eBPF collector, its threads that ran since the previous sample (empty when
    /// none did); `None` without the collector.
    fn read_proc(
        &mut self,
        pid: u32,
        req: SampleRequest,
        due: Option<bool>,
        ran: Option<&[ThreadCpu]>,
        stats: &mut SampleStats,
    ) -> Option<ProcSample> {
        // Paths relative to the open proc dir: no per-process directory fd to open/close.
        let proc_ = self.proc.as_ref()?;
        let mut rel = String::with_capacity(32);
        let _ = write!(rel, "{pid}/stat");
        proc_.read(&rel, &mut self.buf).ok()?;
        let base = rel.len() - "stat".len(); // `PID/`
        let st = parse_pid_stat(&self.buf)?;
        let kernel_thread = st.is_kernel_thread();
        let cpu_ticks = st.utime_ticks + st.stime_ticks;
        // Given by the caller with the collector (the rotating window), else staggered.
        let due =
            due.unwrap_or_else(|| (self.sample_no + pid as u64).is_multiple_of(self.refresh_every));
        if let Some(c) = self.proc_cache.get_mut(&pid) {
            let idle = c.sample.start_time_ticks == st.start_time_ticks
                && c.cpu_ticks() == cpu_ticks
                && c.sample.num_threads == st.num_threads
                && (!req.threads || c.threads_read);
            if idle && !due {
                let p = &mut c.sample;
                // A comm rarely changes: keep the shared text unless it did.
                if *p.comm != *st.comm {
                    p.comm = st.comm.into();
                }
                p.state = st.state;
                p.ppid = st.ppid;
                p.last_cpu = st.last_cpu;
                p.kernel_thread = kernel_thread;
                let mut out = p.clone();
                if !req.threads {
                    out.threads = Default::default();
                }
                return Some(out);
            }
        }
        stats.procs_reread += 1;
        // The last read of this very process, when it is not due for a refresh: what does
        // not change by running (cgroup, threads' affinity, texts) is kept from it.
        let prev: Option<&ProcSample> = self
            .proc_cache
            .get(&pid)
            .map(|c| &c.sample)
            .filter(|p| !due && p.start_time_ticks == st.start_time_ticks);
        let (mut uid, mut allowed) = (None, CpuSet::new());
        let mut cgroup: Arc<str> = Arc::from("");
        if !kernel_thread {
            rel.truncate(base);
            rel.push_str("status");
            proc_.read(&rel, &mut self.buf).ok()?;
            let status = parse_status(&self.buf);
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
                    match proc_.read(&rel, &mut self.buf) {
                        Ok(()) => cgroup = parse_cgroup(&self.buf).into(),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
                        Err(_) => {}
                    }
                }
            }
        }
        let mut threads = Vec::new();
        let ns_per_tick = 1_000_000_000 / u64::from(self.clk_tck.max(1));
        let ran_ns = |tid: u32| -> Option<&ThreadCpu> {
            ran.and_then(|r| r.binary_search_by_key(&tid, |t| t.tid).ok().map(|i| &r[i]))
        };
        // With the collector, a process that ran with the threads of its last read (same
        // count, each with a collector time, every one that ran among them) needs no
        // thread file: the collector gives each thread's time and last CPU. (Both lists
        // are in tid order.)
        let from_collector = req.threads
            && !kernel_thread
            && ran.is_some_and(|r| {
                prev.is_some_and(|p| {
                    p.threads.len() == st.num_threads as usize
                        && p.threads.iter().all(|t| t.cpu_ns.is_some())
                        && r.iter()
                            .all(|t| p.threads.binary_search_by_key(&t.tid, |x| x.tid).is_ok())
                })
            });
        if from_collector {
            let p = prev.expect("checked above");
            threads.extend(p.threads.iter().map(|t| match ran_ns(t.tid) {
                Some(r) => ThreadSample {
                    cpu_ns: t.cpu_ns.map(|ns| ns + r.cpu_ns),
                    last_cpu: Some(r.last_cpu),
                    ..t.clone()
                },
                None => t.clone(),
            }));
            stats.threads_from_collector += threads.len();
        } else if req.threads && !kernel_thread {
            // The collector's cumulative CPU time of each thread as of the last sample (the
            // cache, due or not: a refresh re-reads affinities, the time goes on).
            let ns_before: PidMap<u64> = match ran {
                Some(_) => self
                    .proc_cache
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
            rel.truncate(base);
            rel.push_str("task");
            let task = proc_.sub(&rel).ok();
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
                    if task.read(&trel, &mut self.buf).is_err() {
                        if from_cache {
                            from_cache = false;
                            tids = list(task);
                            continue 'read;
                        }
                        continue; // thread exited
                    }
                    let Some(ts) = parse_pid_stat(&self.buf) else {
                        continue;
                    };
                    let before = known.get(&tid);
                    let t_allowed = match before {
                        Some(t) => t.allowed.clone(),
                        None => {
                            trel.truncate(trel.len() - "stat".len());
                            trel.push_str("status");
                            match task.read(&trel, &mut self.buf) {
                                Ok(()) => parse_status(&self.buf).cpus_allowed.unwrap_or_default(),
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
        }
        let comm = match prev {
            Some(p) if *p.comm == *st.comm => p.comm.clone(),
            _ => st.comm.into(),
        };
        let sample = ProcSample {
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
        };
        self.proc_cache.insert(
            pid,
            ProcCache {
                sample: sample.clone(),
                threads_read: req.threads || kernel_thread,
            },
        );
        Some(sample)
    }

    /// The socket inodes among a process's open fds, and the fd count (`None`: exited).
    fn scan_fds(&self, pid: u32) -> Option<Vec<u64>> {
        let fd_dir = self.proc_dir.join(format!("{pid}/fd"));
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

    fn fd_count(&self, pid: u32) -> u64 {
        self.proc
            .as_ref()
            .and_then(|d| d.size_of(&format!("{pid}/fd")).ok())
            .unwrap_or(0)
    }

    fn map_sockets(
        &mut self,
        procs: &mut [ProcSample],
        sockets: &[placer_core::sample::SocketSample],
        ran: Option<&PidSet>,
        stats: &mut SampleStats,
    ) {
        let alive: PidSet = procs.iter().map(|p| p.pid).collect();
        self.fd_cache.retain(|pid, _| alive.contains(pid));
        let mut scanned: PidSet = PidSet::default();
        for p in procs.iter().filter(|p| !p.kernel_thread) {
            if ran.is_some_and(|r| !r.contains(&p.pid))
                && self
                    .fd_cache
                    .get(&p.pid)
                    .is_some_and(|e| e.start_time_ticks == p.start_time_ticks)
            {
                continue;
            }
            let count = self.fd_count(p.pid);
            let fresh = match self.fd_cache.get(&p.pid) {
                Some(e) => e.start_time_ticks == p.start_time_ticks && e.fd_count == count,
                None => false,
            };
            if !fresh {
                let inodes = self.scan_fds(p.pid).unwrap_or_default();
                stats.fd_dirs_scanned += 1;
                scanned.insert(p.pid);
                self.fd_cache.insert(
                    p.pid,
                    FdEntry {
                        start_time_ticks: p.start_time_ticks,
                        fd_count: count,
                        inodes,
                    },
                );
            }
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
                let inodes = self.scan_fds(p.pid).unwrap_or_default();
                stats.fd_dirs_scanned += 1;
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
        for p in procs.iter_mut() {
            if let Some(e) = self.fd_cache.get(&p.pid) {
                p.socket_inodes = e
                    .inodes
                    .iter()
                    .copied()
                    .filter(|i| live.contains(i))
                    .collect();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writable fixture root with a given set of proc files.
    struct Tree(PathBuf);
    impl Tree {
        fn new(tag: &str) -> Tree {
            let d = std::env::temp_dir().join(format!(
                "placer-sampler-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = fs::remove_dir_all(&d);
            fs::create_dir_all(d.join("proc")).unwrap();
            Tree(d)
        }
        fn write(&self, rel: &str, text: &str) {
            let p = self.0.join("proc").join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
    }
    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn stat_line(pid: u32, comm: &str, ppid: u32, flags: u64, ut: u64, start: u64) -> String {
        format!(
            "{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 {flags} 0 0 0 0 {ut} 3 0 0 20 0 1 0 {start} \
             1000 100 1 1 1 1 1 1 0 0 0 0 0 0 0 17 1 0 0"
        )
    }

    /// Issue 36: a FIFO, a link to /dev/zero and a 2 GiB sparse file at each file the
    /// sampler reads under a root: every sample ends within 5 s, memory stays bounded, and
    /// /proc/stat's case is an error naming the file. Before, the FIFO hung the sampler for
    /// ever, /dev/zero grew it without end and the 2 GiB file was read whole.
    #[test]
    fn hostile_files_at_sampler_paths_are_bounded() {
        let hostile = ["fifo", "zero", "sparse"];
        for rel in [
            "stat",
            "interrupts",
            "softirqs",
            "100/stat",
            "100/status",
            "100/cgroup",
        ] {
            for kind in hostile {
                let t = Tree::new(&format!("hostile-{}-{kind}", rel.replace('/', "-")));
                t.write("stat", "cpu  1 2 3 4\ncpu0 1 2 3 4 5 6 7 8\n");
                t.write("interrupts", "  CPU0\n 30: 1 PCI-MSI 1-edge eth0\n");
                t.write("softirqs", "  CPU0\nNET_RX: 4\nNET_TX: 6\n");
                t.write("100/stat", &stat_line(100, "a", 1, 0, 42, 500));
                t.write("100/status", "Uid:\t0\t0\t0\t0\nCpus_allowed_list:\t0\n");
                t.write("100/cgroup", "0::/\n");
                let p = t.0.join("proc").join(rel);
                fs::remove_file(&p).unwrap();
                match kind {
                    "fifo" => {
                        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
                        // SAFETY: a valid path.
                        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
                    }
                    "zero" => std::os::unix::fs::symlink("/dev/zero", &p).unwrap(),
                    _ => fs::File::create(&p).unwrap().set_len(2 << 30).unwrap(),
                }
                let root = t.0.clone();
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let mut s = Sampler::new(&root);
                    let r = s.sample(SampleRequest {
                        threads: true,
                        ..Default::default()
                    });
                    let _ = tx.send(r.map(|_| ()).map_err(|e| e.to_string()));
                });
                let r = rx
                    .recv_timeout(std::time::Duration::from_secs(5))
                    .unwrap_or_else(|_| panic!("{rel} as {kind}: the sample took over 5 s"));
                if rel == "stat" && kind != "fifo" {
                    let e = r.expect_err("an unreadable /proc/stat is an error");
                    assert!(e.contains("stat") && e.contains("larger than"), "{e}");
                }
            }
        }
        let hwm_kib: u64 = fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap();
        assert!(hwm_kib < 1 << 20, "peak RSS {hwm_kib} KiB");
    }

    #[test]
    fn fixture_tree_with_malformed_and_vanished_processes() {
        let t = Tree::new("fix");
        t.write("stat", "cpu  1 2 3 4\ncpu0 1 2 3 4 5 6 7 8\ncpu1 1 1 1 1\n");
        t.write("interrupts", "  CPU0 CPU1\n 30: 1 2 PCI-MSI 1-edge eth0\n");
        t.write("softirqs", "  CPU0 CPU1\nNET_RX: 4 5\nNET_TX: 6 7\n");
        t.write("100/stat", &stat_line(100, "a b) (c", 1, 0, 42, 500));
        t.write(
            "100/status",
            "Uid:\t1000\t1000\t1000\t1000\nCpus_allowed_list:\t0-1\n",
        );
        t.write("100/cgroup", "0::/work\n");
        t.write("101/stat", "101 (trunc) S 1 1");
        t.write("102/stat", &stat_line(102, "gone", 1, 0, 1, 1)); // no status: exited
        t.write(
            "103/stat",
            &stat_line(103, "kworker/0:1", 2, 0x0020_0000, 0, 7),
        );
        t.write("self/stat", "not a pid dir");
        let mut s = Sampler::new(&t.0);
        let src = s.sources();
        assert!(src.has(SourceKind::Proc) && src.has(SourceKind::Interrupts));
        assert!(
            !src.has(SourceKind::SockDiag)
                && !src.has(SourceKind::Rapl)
                && !src.has(SourceKind::PerfHw)
        );
        let sample = s
            .sample(SampleRequest {
                sockets: true,
                threads: true,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(sample.cpus.len(), 2);
        assert_eq!(sample.irqs.len(), 1);
        assert_eq!(sample.softirqs[1].net_tx, 7);
        let pids: Vec<u32> = sample.procs.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![100, 103]);
        let p = &sample.procs[0];
        assert_eq!(&*p.comm, "a b) (c");
        assert_eq!(p.uid, Some(1000));
        assert_eq!(p.allowed.to_vec(), vec![0, 1]);
        assert_eq!(&*p.cgroup, "/work");
        assert_eq!((p.utime_ticks, p.start_time_ticks), (42, 500));
        assert!(sample.procs[1].kernel_thread);
        assert_eq!(s.last_stats.dropped_procs, 2);
    }

    #[test]
    fn numa_maps_are_read_again_only_for_processes_that_ran() {
        let t = Tree::new("numa");
        t.write("stat", "cpu0 1 2 3 4\n");
        t.write("100/stat", &stat_line(100, "idle", 1, 0, 42, 500));
        t.write("100/status", "Uid:\t0\nCpus_allowed_list:\t0-1\n");
        t.write("100/cgroup", "0::/a\n");
        let maps = |n0: u32, n1: u32| {
            format!(
                "7f0000000000 default anon={} N0={n0} N1={n1} kernelpagesize_kB=4\n",
                n0 + n1
            )
        };
        t.write("100/numa_maps", &maps(10, 0));
        let mut s = Sampler::new(&t.0);
        s.set_refresh_every(1000);
        let req = SampleRequest {
            numa_pages: true,
            ..Default::default()
        };
        let pages = |s: &mut Sampler| s.sample(req).unwrap().procs[0].numa_pages.clone();
        assert_eq!(pages(&mut s).get(&0).copied(), Some(10));
        // Pages moved while it slept (someone migrated them): its last map stands...
        t.write("100/numa_maps", &maps(0, 10));
        assert_eq!(pages(&mut s).get(&0).copied(), Some(10));
        // ...until it runs.
        t.write("100/stat", &stat_line(100, "idle", 1, 0, 43, 500));
        let now = pages(&mut s);
        assert_eq!(
            (now.get(&0).copied(), now.get(&1).copied()),
            (Some(0), Some(10))
        );
    }

    #[test]
    fn idle_processes_come_from_the_cache_until_they_run_or_refresh() {
        let t = Tree::new("cache");
        t.write("stat", "cpu0 1 2 3 4\n");
        t.write("100/stat", &stat_line(100, "idle", 1, 0, 42, 500));
        t.write("100/status", "Uid:\t0\nCpus_allowed_list:\t0-1\n");
        t.write("100/cgroup", "0::/a\n");
        t.write("100/task/100/stat", &stat_line(100, "idle", 1, 0, 42, 500));
        t.write("100/task/100/status", "Cpus_allowed_list:\t0-1\n");
        let mut s = Sampler::new(&t.0);
        s.set_refresh_every(1000);
        let req = SampleRequest {
            threads: true,
            ..Default::default()
        };
        let allowed = |s: &mut Sampler| s.sample(req).unwrap().procs[0].allowed.to_vec();
        assert_eq!(allowed(&mut s), vec![0, 1]);
        // Someone pins the sleeping process: not seen while it does not run...
        t.write("100/status", "Uid:\t0\nCpus_allowed_list:\t1\n");
        assert_eq!(allowed(&mut s), vec![0, 1]);
        assert_eq!(s.last_stats.procs_reread, 0);
        // ...seen at once after invalidate (placer's own actuator)...
        s.invalidate(100);
        assert_eq!(allowed(&mut s), vec![1]);
        // ...and when it runs.
        t.write("100/status", "Uid:\t0\nCpus_allowed_list:\t0\n");
        t.write("100/stat", &stat_line(100, "idle", 1, 0, 43, 500));
        assert_eq!(allowed(&mut s), vec![0]);
        assert_eq!(s.last_stats.procs_reread, 1);
        // refresh_every 1: always exact.
        s.set_refresh_every(1);
        t.write("100/status", "Uid:\t0\nCpus_allowed_list:\t1\n");
        assert_eq!(allowed(&mut s), vec![1]);
        let sample = s.sample(req).unwrap();
        assert_eq!(sample.procs[0].threads.len(), 1, "threads kept");
    }

    /// A `stat` line of a process or thread of a process with two threads.
    fn two(pid: u32, ut: u64) -> String {
        stat_line(pid, "w", 1, 0, ut, 500).replace(" 20 0 1 0 ", " 20 0 2 0 ")
    }

    /// A tree with process 100 and its threads 100 and 101 (5 user ticks each).
    fn two_thread_tree(tag: &str) -> Tree {
        let t = Tree::new(tag);
        t.write("stat", "cpu0 1 2 3 4\n");
        t.write("100/stat", &two(100, 10));
        t.write("100/status", "Uid:\t0\nCpus_allowed_list:\t0-1\n");
        t.write("100/cgroup", "0::/a\n");
        for tid in [100, 101] {
            t.write(&format!("100/task/{tid}/stat"), &two(tid, 5));
            t.write(
                &format!("100/task/{tid}/status"),
                "Cpus_allowed_list:\t0-1\n",
            );
        }
        t
    }

    #[test]
    fn a_running_process_with_an_unchanged_thread_count_is_not_listed_again() {
        let t = two_thread_tree("tids");
        let mut s = Sampler::new(&t.0);
        s.set_refresh_every(1000);
        let req = SampleRequest {
            threads: true,
            ..Default::default()
        };
        let tids = |s: &mut Sampler| -> Vec<u32> {
            s.sample(req).unwrap().procs[0]
                .threads
                .iter()
                .map(|t| t.tid)
                .collect()
        };
        assert_eq!(tids(&mut s), vec![100, 101]);
        // Thread 101 exits and 102 starts between two samples: the same count, but 101's
        // read fails, so the directory is listed after all.
        std::fs::remove_dir_all(t.0.join("proc/100/task/101")).unwrap();
        t.write("100/task/102/stat", &two(102, 1));
        t.write("100/task/102/status", "Cpus_allowed_list:\t1\n");
        t.write("100/stat", &two(100, 20));
        assert_eq!(tids(&mut s), vec![100, 102]);
        // The process runs on with two threads: the known ones are read, the directory is
        // not listed (an entry the count does not account for is not picked up).
        t.write("100/task/103/stat", &two(103, 1));
        t.write("100/stat", &two(100, 30));
        assert_eq!(tids(&mut s), vec![100, 102]);
        assert_eq!(s.last_stats.procs_reread, 1);
    }

    #[test]
    fn with_the_collector_a_running_process_threads_come_from_its_times_not_their_files() {
        use crate::activity::{Activity, ScriptedActivity};
        use crate::bpf::{ProcCpu, ThreadCpu};
        let t = two_thread_tree("bpf-threads");
        // Idle neighbours, so that the rotating refresh window is elsewhere for a while.
        for pid in 200..210 {
            t.write(
                &format!("{pid}/stat"),
                &stat_line(pid, "idle", 1, 0, 1, 500),
            );
            t.write(
                &format!("{pid}/status"),
                "Uid:\t0\nCpus_allowed_list:\t0-1\n",
            );
            t.write(&format!("{pid}/cgroup"), "0::/a\n");
        }
        let mut s = Sampler::new(&t.0);
        s.set_refresh_every(1000);
        let script = ScriptedActivity::default();
        s.set_activity_source(Box::new(script.clone()));
        let req = SampleRequest {
            threads: true,
            ..Default::default()
        };
        let ran = |threads: &[(u32, u64, u32)]| {
            let threads: Vec<ThreadCpu> = threads
                .iter()
                .map(|&(tid, cpu_ns, last_cpu)| ThreadCpu {
                    tid,
                    cpu_ns,
                    last_cpu,
                })
                .collect();
            let mut m = PidMap::default();
            m.insert(
                100,
                ProcCpu {
                    cpu_ns: threads.iter().map(|t| t.cpu_ns).sum(),
                    comm: "w".into(),
                    threads,
                },
            );
            Activity {
                ran: Some(m),
                events: Some(Vec::new()),
            }
        };
        let proc100 = |x: &Sample| x.procs.iter().find(|p| p.pid == 100).unwrap().clone();
        // First sample: files read, each thread's time starts at its ticks (5 + 3 stime).
        script.push(ran(&[]));
        let s1 = s.sample(req).unwrap();
        let tick_ns = 1_000_000_000 / u64::from(s1.clk_tck);
        let ns = |x: &Sample| -> Vec<(u32, Option<u64>, Option<u32>)> {
            proc100(x)
                .threads
                .iter()
                .map(|t| (t.tid, t.cpu_ns, t.last_cpu))
                .collect()
        };
        assert_eq!(
            ns(&s1),
            vec![
                (100, Some(8 * tick_ns), Some(1)),
                (101, Some(8 * tick_ns), Some(1))
            ]
        );
        // It runs, both threads: their files are not read (101's is gone and would make
        // the read fail), the collector's times and CPUs are added.
        std::fs::remove_file(t.0.join("proc/100/task/101/stat")).unwrap();
        t.write("100/stat", &two(100, 20));
        script.push(ran(&[(100, 30_000_000, 0), (101, 20_000_000, 1)]));
        let s2 = s.sample(req).unwrap();
        assert_eq!(s.last_stats.threads_from_collector, 2);
        assert_eq!(
            ns(&s2),
            vec![
                (100, Some(8 * tick_ns + 30_000_000), Some(0)),
                (101, Some(8 * tick_ns + 20_000_000), Some(1))
            ]
        );
        let o = placer_core::Observation::new(&s1, &s2);
        let dt_s = (s2.time_ns - s1.time_ns) as f64 / 1e9;
        let shares: Vec<(u32, f64)> = o
            .proc(100)
            .unwrap()
            .threads
            .iter()
            .map(|t| (t.tid, t.cpu_share * dt_s))
            .collect();
        assert_eq!(shares.len(), 2);
        assert!((shares[0].1 - 0.030).abs() < 1e-9 && (shares[1].1 - 0.020).abs() < 1e-9);
        // A thread the collector names that the last read did not know: the files are
        // read (101's is gone: the directory is listed and 102 found); known threads'
        // times go on, the new one starts at its ticks.
        t.write("100/task/102/stat", &two(102, 1));
        t.write("100/task/102/status", "Cpus_allowed_list:\t1\n");
        t.write("100/stat", &two(100, 30));
        script.push(ran(&[(100, 1_000_000, 1), (102, 5_000_000, 1)]));
        let s3 = s.sample(req).unwrap();
        assert_eq!(s.last_stats.threads_from_collector, 0);
        assert_eq!(
            ns(&s3),
            vec![
                (100, Some(8 * tick_ns + 31_000_000), Some(1)),
                (102, Some(4 * tick_ns), Some(1))
            ]
        );
        // Without the collector (its map filled): ticks only, no collector time.
        t.write("100/stat", &two(100, 40));
        script.push(Activity {
            ran: None,
            events: Some(Vec::new()),
        });
        let s4 = s.sample(req).unwrap();
        assert!(ns(&s4).iter().all(|t| t.1.is_none()), "{:?}", ns(&s4));
    }

    #[test]
    fn on_the_events_path_an_invalidated_process_is_read_again_not_dropped() {
        use crate::activity::{Activity, ScriptedActivity};
        let t = Tree::new("events-invalidate");
        t.write("stat", "cpu0 1 2 3 4\n");
        for pid in [100, 200] {
            t.write(&format!("{pid}/stat"), &stat_line(pid, "w", 1, 0, 10, 500));
            t.write(
                &format!("{pid}/status"),
                "Uid:\t0\nCpus_allowed_list:\t0-1\n",
            );
            t.write(&format!("{pid}/cgroup"), "0::/a\n");
        }
        let mut s = Sampler::new(&t.0);
        s.set_refresh_every(1000);
        let script = ScriptedActivity::default();
        s.set_activity_source(Box::new(script.clone()));
        let quiet = || Activity {
            ran: Some(PidMap::default()),
            events: Some(Vec::new()),
        };
        let req = SampleRequest::default();
        script.push(quiet());
        assert_eq!(s.sample(req).unwrap().procs.len(), 2);
        // placer pins the sleeping 100 and invalidates it: the next sample, which takes its
        // process set from the cache and the (empty) events, still has it, read again.
        t.write("100/status", "Uid:\t0\nCpus_allowed_list:\t1\n");
        s.invalidate(100);
        script.push(quiet());
        let x = s.sample(req).unwrap();
        assert!(!s.last_stats.listed);
        let p = x.procs.iter().find(|p| p.pid == 100).expect("100 dropped");
        assert_eq!(p.allowed.to_vec(), vec![1]);
        // And in the samples after.
        script.push(quiet());
        assert_eq!(s.sample(req).unwrap().procs.len(), 2);
    }

    #[test]
    fn a_running_process_keeps_its_cgroup_until_refresh_but_shows_its_affinity() {
        let t = Tree::new("cg");
        t.write("stat", "cpu0 1 2 3 4\n");
        t.write("100/stat", &stat_line(100, "w", 1, 0, 10, 500));
        t.write("100/status", "Uid:\t0\nCpus_allowed_list:\t0-1\n");
        t.write("100/cgroup", "0::/a\n");
        let mut s = Sampler::new(&t.0);
        s.set_refresh_every(1000);
        let req = SampleRequest::default();
        let look = |s: &mut Sampler| {
            let p = s.sample(req).unwrap().procs.remove(0);
            (p.cgroup.to_string(), p.allowed.to_vec())
        };
        assert_eq!(look(&mut s), ("/a".to_string(), vec![0, 1]));
        t.write("100/cgroup", "0::/b\n");
        t.write("100/status", "Uid:\t0\nCpus_allowed_list:\t1\n");
        t.write("100/stat", &stat_line(100, "w", 1, 0, 20, 500));
        assert_eq!(look(&mut s), ("/a".to_string(), vec![1]));
        s.invalidate(100);
        assert_eq!(look(&mut s), ("/b".to_string(), vec![1]));
    }

    #[test]
    fn wrong_root_is_an_error() {
        let mut s = Sampler::new(Path::new("/nonexistent-placer-root"));
        assert!(s.sample(SampleRequest::default()).is_err());
        assert!(!s.sources().has(SourceKind::Proc));
    }

    #[test]
    fn this_machine_maps_a_socket_to_this_process_and_caches() {
        let mut s = Sampler::new(Path::new("/"));
        if !s.sources().has(SourceKind::SockDiag) {
            placer_testkit::skip(&format!(
                "{:?}",
                s.sources().why_missing(SourceKind::SockDiag)
            ));
            return;
        }
        let req = SampleRequest {
            sockets: true,
            ..Default::default()
        };
        s.sample(req).unwrap();
        let first_scans = s.last_stats.fd_dirs_scanned;
        assert!(first_scans > 0);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_srv, _) = l.accept().unwrap();
        let me = std::process::id();
        let sample = s.sample(req).unwrap();
        let p = sample.procs.iter().find(|p| p.pid == me).unwrap();
        let cl = c.local_addr().unwrap();
        let mine: Vec<_> = sample
            .sockets
            .iter()
            .filter(|s| p.socket_inodes.contains(&s.inode))
            .filter(|s| s.local == cl || s.remote == cl)
            .collect();
        assert!(
            mine.iter().any(|s| s.local == c.local_addr().unwrap()),
            "{mine:?}"
        );
        assert_eq!(mine.len(), 2, "client and accepted socket");
        // Nothing changed: the next sample re-reads (almost) no fd directory.
        let _ = s.sample(req).unwrap();
        assert!(
            s.last_stats.fd_dirs_scanned < first_scans / 2 + 3,
            "{} vs {first_scans}",
            s.last_stats.fd_dirs_scanned
        );
        assert!(!s.last_stats.full_rescan);
    }

    use placer_testkit::proc::spinner;

    /// Threads of this process that spin until stopped (at most 10 s).
    struct SpinThreads {
        stop: Arc<std::sync::atomic::AtomicBool>,
        handles: Vec<std::thread::JoinHandle<u32>>,
    }
    impl SpinThreads {
        fn start(n: usize) -> SpinThreads {
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let handles = (0..n)
                .map(|_| {
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        let tid = crate::sys::gettid();
                        let t0 = std::time::Instant::now();
                        while !stop.load(std::sync::atomic::Ordering::Relaxed)
                            && t0.elapsed().as_secs() < 10
                        {
                            std::hint::spin_loop();
                        }
                        tid
                    })
                })
                .collect();
            SpinThreads { stop, handles }
        }
        /// Stops them; their tids.
        fn stop(mut self) -> Vec<u32> {
            self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
            std::mem::take(&mut self.handles)
                .into_iter()
                .map(|h| h.join().expect("spin thread"))
                .collect()
        }
    }
    impl Drop for SpinThreads {
        fn drop(&mut self) {
            self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn event_sampler() -> Option<Sampler> {
        let mut s = Sampler::new(Path::new("/"));
        let src = s.sources();
        if !src.has(SourceKind::Ebpf) || !src.has(SourceKind::ProcEvents) {
            placer_testkit::skip(&format!(
                "kernel event sources: {:?} / {:?}",
                src.why_missing(SourceKind::Ebpf),
                src.why_missing(SourceKind::ProcEvents)
            ));
            return None;
        }
        Some(s)
    }

    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_process_that_lives_between_two_samples_is_seen_and_accounted() {
        placer_testkit::require_root();
        let Some(mut s) = event_sampler() else {
            return;
        };
        let req = SampleRequest::default();
        s.sample(req).unwrap();
        s.sample(req).unwrap();
        // The truth is the kernel's own account of the child's CPU time just before it is
        // killed (schedstat, ns), not its wall time: on a loaded machine a 200 ms spinner
        // may get well under 200 ms of CPU.
        let spin = spinner();
        let pid = spin.0.id();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let truth_ns: u64 = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
            .ok()
            .and_then(|t| crate::procfs::parse_schedstat_run_ns(&t))
            .expect("the spinner's schedstat");
        drop(spin);
        let sample = s.sample(req).unwrap();
        assert!(!sample.procs.iter().any(|p| p.pid == pid));
        let x = sample
            .exited
            .iter()
            .find(|x| x.pid == pid)
            .unwrap_or_else(|| panic!("{pid} not in {:?}", sample.exited));
        assert!(x.unsampled);
        let ns = x.cpu_ns.expect("the collector's time");
        // What it ran after the schedstat read (until the kill) is a few ms at most.
        assert!(
            ns >= truth_ns * 95 / 100 && ns <= truth_ns + 50_000_000,
            "collector {ns} ns, schedstat {truth_ns} ns"
        );
        assert!(
            truth_ns > 10_000_000,
            "the spinner hardly ran: {truth_ns} ns"
        );
        assert!(s.last_stats.procs_skipped > 0, "{:?}", s.last_stats);
    }

    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_event_path_observes_what_the_proc_path_does() {
        placer_testkit::require_root();
        let Some(mut ev) = event_sampler() else {
            return;
        };
        let mut scan = Sampler::new(Path::new("/"));
        scan.set_kernel_events(false);
        assert!(!scan.sources().has(SourceKind::Ebpf));
        let req = SampleRequest {
            threads: true,
            ..Default::default()
        };
        // A steady load: a spinner for the whole window, and two spinning threads here
        // (the event path takes their times from the collector, the scan from their stat).
        let spin = spinner();
        let spin_pid = spin.0.id();
        let threads = SpinThreads::start(2);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let (e0, s0) = (ev.sample(req).unwrap(), scan.sample(req).unwrap());
        let (e1, s1) = (ev.sample(req).unwrap(), scan.sample(req).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let (e2, s2) = (ev.sample(req).unwrap(), scan.sample(req).unwrap());
        let _ = (e0, s0);
        assert!(ev.last_stats.procs_skipped > 0, "{:?}", ev.last_stats);
        let (oe, os) = (
            placer_core::Observation::new(&e1, &e2),
            placer_core::Observation::new(&s1, &s2),
        );
        let share = |o: &placer_core::Observation, pid: u32| {
            o.procs.iter().find(|p| p.pid == pid).map(|p| p.cpu_share)
        };
        let tids = threads.stop();
        // Within 5%, plus the /proc path's resolution: one tick over the interval. The
        // floors only say the spinners ran (three of them share the CPUs with the rest of
        // the test suite).
        let tick = 1.0 / (f64::from(s2.clk_tck) * (s2.time_ns - s1.time_ns) as f64 / 1e9);
        let (a, b) = (share(&oe, spin_pid).unwrap(), share(&os, spin_pid).unwrap());
        assert!(
            a > 0.05 && (a - b).abs() <= 0.05 * b + tick,
            "spinner {a} vs {b}"
        );
        let thread_share = |o: &placer_core::Observation, tid: u32| {
            o.proc(std::process::id())
                .and_then(|p| p.threads.iter().find(|t| t.tid == tid))
                .map_or(0.0, |t| t.cpu_share)
        };
        for tid in tids {
            let (a, b) = (thread_share(&oe, tid), thread_share(&os, tid));
            assert!(
                a > 0.05 && (a - b).abs() <= 0.05 * b + tick,
                "thread {tid}: {a} vs {b}"
            );
        }
        assert!(
            ev.last_stats.threads_from_collector > 0,
            "{:?}",
            ev.last_stats
        );
        let total = |o: &placer_core::Observation| o.procs.iter().map(|p| p.cpu_share).sum::<f64>();
        let (ta, tb) = (total(&oe), total(&os));
        assert!((ta - tb).abs() <= 0.05 * tb, "all processes {ta} vs {tb}");
        // The same processes, but for those born or gone between the two samplers' reads.
        let pids = |x: &Sample| x.procs.iter().map(|p| p.pid).collect::<PidSet>();
        let (pa, pb) = (pids(&e2), pids(&s2));
        let differ = pa.symmetric_difference(&pb).count();
        assert!(
            differ <= 3 + pa.len() / 50,
            "{differ} of {} differ",
            pa.len()
        );
        drop(spin);
    }
}
