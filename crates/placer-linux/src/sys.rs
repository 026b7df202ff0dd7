//! Every system call placer makes, wrapped once: affinity, clocks, scheduling, namespaces,
//! perf, file locks, signals, process liveness, and the sampler's directory handle
//! ([`Dir`]: files opened relative to an open directory, read into a reused buffer). The rest of
//! placer (and its binary, which holds no `unsafe`) calls these. The NUMA memory calls
//! (move_pages, migrate_pages, mbind) live in `placer_bufpool::numa`, a crate below this one,
//! and are re-exported here so that this module is the one place to look.

use placer_core::CpuSet;
use std::io;
use std::os::fd::AsRawFd;

pub use placer_bufpool::numa::{migrate_pages, move_pages_to, page_bytes, page_nodes_of};

fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The effective user id of this process.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    effective_uid() == 0
}

/// The kernel thread id of the calling thread.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

fn to_cpu_set(cpus: &CpuSet) -> io::Result<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>() as u32;
    for c in cpus.iter() {
        if c >= max {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: c < CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(c as usize, &mut set) };
    }
    Ok(set)
}

/// sched_setaffinity of thread `tid` (0 = the calling thread). An empty set or a CPU beyond
/// CPU_SETSIZE is EINVAL.
pub fn set_affinity(tid: u32, cpus: &CpuSet) -> io::Result<()> {
    if cpus.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let set = to_cpu_set(cpus)?;
    // SAFETY: set is a valid cpu_set_t of the size passed.
    check(unsafe {
        libc::sched_setaffinity(
            tid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &set,
        )
    })
}

/// sched_getaffinity of thread `tid` (0 = the calling thread).
pub fn get_affinity(tid: u32) -> io::Result<CpuSet> {
    // SAFETY: cpu_set_t is plain data; the kernel writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid out-pointer of the size passed.
    check(unsafe {
        libc::sched_getaffinity(
            tid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        )
    })?;
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: i < CPU_SETSIZE.
    Ok((0..max)
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .map(|i| i as u32)
        .collect())
}

/// Makes `cmd`'s child start on `cpus`: the affinity is set between fork and exec, so the
/// command never runs a cycle elsewhere.
pub fn set_affinity_on_spawn(cmd: &mut std::process::Command, cpus: &CpuSet) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    if cpus.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let set = to_cpu_set(cpus)?;
    // SAFETY: the closure only calls sched_setaffinity (async-signal-safe) on a set built
    // before the fork.
    unsafe {
        cmd.pre_exec(move || {
            check(libc::sched_setaffinity(
                0,
                std::mem::size_of::<libc::cpu_set_t>(),
                &set,
            ))
        });
    }
    Ok(())
}

/// Makes `cmd`'s child receive SIGTERM when the thread that spawns it dies, so a helper
/// (a daemon started by `placer ab`) stops, and restores, when its parent is killed.
pub fn stop_with_parent(cmd: &mut std::process::Command) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

/// Pins the calling thread to `cpu`.
pub fn pin_self(cpu: u32) -> io::Result<()> {
    set_affinity(0, &CpuSet::single(cpu))
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).unwrap_or(0)
}

/// Which clock [`clock_ns`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// CLOCK_MONOTONIC: sample times, deadlines.
    Monotonic,
    /// CLOCK_THREAD_CPUTIME_ID: the calling thread's CPU time.
    ThreadCpu,
    /// CLOCK_PROCESS_CPUTIME_ID: this process's CPU time (all threads).
    ProcessCpu,
    /// CLOCK_BOOTTIME: the clock of /proc's start times.
    Boottime,
}

/// A clock in nanoseconds.
pub fn clock_ns(clock: Clock) -> u64 {
    let id = match clock {
        Clock::Monotonic => libc::CLOCK_MONOTONIC,
        Clock::ThreadCpu => libc::CLOCK_THREAD_CPUTIME_ID,
        Clock::ProcessCpu => libc::CLOCK_PROCESS_CPUTIME_ID,
        Clock::Boottime => libc::CLOCK_BOOTTIME,
    };
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; these clocks exist on every Linux.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    clock_ns(Clock::Monotonic)
}

/// The calling thread's CPU time in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(Clock::ThreadCpu)
}

/// The calling thread's user and system CPU time, seconds (getrusage RUSAGE_THREAD).
pub fn thread_rusage_s() -> (f64, f64) {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// Clock ticks per second (the unit of /proc's utime/stime); 100 when sysconf fails.
pub fn clock_ticks_per_s() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u32::try_from(v).ok().filter(|&v| v > 0).unwrap_or(100)
}

/// Whether `path` lies on a file system held in memory (tmpfs, ramfs): there a rename
/// costs microseconds, on a disk file system it can cost milliseconds (ext4 starts writing
/// back a file renamed over another). None when statfs fails.
pub fn on_memory_fs(path: &std::path::Path) -> Option<bool> {
    use std::os::unix::ffi::OsStrExt;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statfs` is plain data, for which all-zero bytes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs writes one struct we own; the path is NUL-terminated.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between architectures
    let kind = st.f_type as i64;
    Some(kind == TMPFS_MAGIC || kind == RAMFS_MAGIC)
}

/// Moves the calling thread into the network namespace `ns` (an open /run/netns/NAME or
/// /proc/PID/ns/net).
pub fn setns_net(ns: &std::fs::File) -> io::Result<()> {
    // SAFETY: setns on an fd we hold; it affects only the calling thread.
    check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) })
}

/// Moves the calling thread into a new network namespace of its own, with its loopback up
/// (root). Nothing names it: it goes with the last thread or socket in it, so a killed
/// test leaves nothing behind.
pub fn unshare_net_with_loopback() -> io::Result<()> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: unshare takes no pointer; it affects only the calling thread.
    check(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
    // SAFETY: a plain socket call; the fd is owned at once.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh fd nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is plain data; all zeros is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(b"lo") {
        *d = *s as libc::c_char;
    }
    // SAFETY: both ioctls read and write the ifreq we own, on a socket we hold.
    unsafe {
        check(libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req))?;
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        check(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req))
    }
}

/// SCHED_FIFO at `priority` for the calling thread.
pub fn set_fifo(priority: i32) -> io::Result<()> {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: p is a valid sched_param.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) })
}

/// The nice value of the calling thread.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority on our own thread id.
    check(unsafe { libc::setpriority(libc::PRIO_PROCESS, gettid() as libc::id_t, nice) })
}

/// perf_event_open(2) of `attr` (a perf_event_attr whose size field is set) on thread `tid`
/// (0 = the calling thread), any CPU, no group; the fd is close-on-exec.
pub fn perf_event_open(attr: &[u8], tid: i32) -> io::Result<std::fs::File> {
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
    let declared = attr
        .get(4..8)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize);
    if declared != Some(attr.len()) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: attr is a perf_event_attr of the size it declares (checked above).
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            tid,
            -1i32,
            -1i32,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    use std::os::fd::FromRawFd;
    // SAFETY: the kernel just gave us this fd; the File owns it.
    Ok(unsafe { std::fs::File::from_raw_fd(fd as i32) })
}

/// How [`try_flock`] locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    Shared,
    Exclusive,
}

/// A non-blocking flock: Ok(true) when taken, Ok(false) when someone else holds it.
pub fn try_flock(f: &std::fs::File, lock: Lock) -> io::Result<bool> {
    let op = match lock {
        Lock::Shared => libc::LOCK_SH,
        Lock::Exclusive => libc::LOCK_EX,
    };
    // SAFETY: flock on an fd we hold.
    match check(unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) }) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Releases a flock taken with [`try_flock`].
pub fn unflock(f: &std::fs::File) -> io::Result<()> {
    // SAFETY: flock on an fd we hold.
    check(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) })
}

/// Whether process `pid` exists (kill(pid, 0)); false for pid 0.
pub fn process_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    pid != 0
        && (unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Sleeps for `d` on the monotonic clock, or less when a signal handler runs meanwhile
/// (nanosleep is never restarted after a handler: it returns `EINTR`). Returns whether the
/// whole time was slept.
pub fn sleep_unless_signalled(d: std::time::Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a valid timespec; the remainder pointer may be null.
    let r = unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &ts, std::ptr::null_mut()) };
    r == 0
}

/// A pipe a signal handler writes a byte to ([`poke`]), so that a thread waiting on it
/// ([`WakePipe::wait`]) wakes at once, whichever thread ran the handler, and a signal
/// landing between a flag check and the wait is not lost: its byte is already there (the
/// self-pipe trick). One wake-up per wait, not one per polling slice.
pub struct WakePipe {
    read: std::os::fd::OwnedFd,
    write: std::os::fd::OwnedFd,
}

impl WakePipe {
    pub fn new() -> io::Result<WakePipe> {
        use std::os::fd::FromRawFd;
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: fds is a valid out-array of two ints.
        check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) })?;
        // SAFETY: two new fds nothing else owns.
        Ok(unsafe {
            WakePipe {
                read: std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                write: std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            }
        })
    }

    /// The end a handler writes to (with [`poke`]).
    pub fn write_fd(&self) -> libc::c_int {
        std::os::fd::AsRawFd::as_raw_fd(&self.write)
    }

    /// Waits `d` at most; true when poked meanwhile (or before), the pokes then drained.
    pub fn wait(&self, d: std::time::Duration) -> bool {
        use std::os::fd::AsRawFd;
        let ts = libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        };
        let mut pfd = libc::pollfd {
            fd: self.read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if n <= 0 {
            return false; // timed out, or a handler ran (EINTR): the caller checks its flags
        }
        let mut sink = [0u8; 64];
        // SAFETY: reads into a local buffer; the fd is non-blocking, so this ends at EAGAIN.
        while unsafe { libc::read(pfd.fd, sink.as_mut_ptr() as *mut libc::c_void, sink.len()) } > 0
        {
        }
        true
    }
}

/// What [`poll`] waits for on one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    Read,
    Write,
}

/// Sets the accept queue of a listening socket to `backlog` connections (listen(2) again on
/// a socket already listening changes only its queue's length).
pub fn set_listen_backlog(fd: std::os::fd::BorrowedFd<'_>, backlog: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let n = backlog.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: listen(2) on a descriptor the caller keeps open; no memory is passed.
    if unsafe { libc::listen(fd.as_raw_fd(), n) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until one of `fds` is ready the way asked, or `timeout` passes; says for each
/// whether it is ready (a hang-up or an error counts: the next read or write reports it).
/// A signal handler ending the wait (EINTR) is a wait with none ready.
pub fn poll(
    fds: &[(std::os::fd::BorrowedFd<'_>, Interest)],
    timeout: std::time::Duration,
) -> io::Result<Vec<bool>> {
    use std::os::fd::AsRawFd;
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|(fd, want)| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: match want {
                Interest::Read => libc::POLLIN,
                Interest::Write => libc::POLLOUT,
            },
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: pfds is a valid array of pfds.len() pollfds, borrowed fds kept open by the caller.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(pfds.iter().map(|p| p.revents != 0).collect())
}

/// Writes one byte to `fd`: only write(2), errno kept, failures ignored (a full pipe
/// already wakes its reader), so that a signal handler may call it.
pub fn poke(fd: libc::c_int) {
    // SAFETY: errno is this thread's; write reads one byte from a local.
    unsafe {
        let errno = *libc::__errno_location();
        let b = 1u8;
        libc::write(fd, &b as *const u8 as *const libc::c_void, 1);
        *libc::__errno_location() = errno;
    }
}

/// Installs `handler` for each of `signals` (sigaction, SA_RESTART off so blocking calls
/// return EINTR and the main loop sees the flag promptly).
pub fn set_signal_handler(
    signals: &[libc::c_int],
    handler: extern "C" fn(libc::c_int),
) -> io::Result<()> {
    for &sig in signals {
        // SAFETY: sigaction is plain data; the handler only stores to an atomic (callers'
        // contract) and is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            check(libc::sigaction(sig, &sa, std::ptr::null_mut()))?;
        }
    }
    Ok(())
}

/// Sends `sig` to the calling thread (not the process: no other thread takes it).
pub fn raise(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: raise has no memory preconditions.
    check(unsafe { libc::raise(sig) })
}

/// Sends `sig` to process `pid`.
pub fn kill(pid: u32, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill has no memory preconditions.
    check(unsafe { libc::kill(pid as libc::pid_t, sig) })
}

/// Sends `sig` to every process of group `pgid`.
/// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER): the
/// per-connection children of a server killed with their parent come back to it to be
/// reaped, instead of waiting as zombies on an init that may reap them late (seen in CI:
/// a netserver child still listed after `placer ab` had returned).
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) })
}

/// Reaps this process's children in process group `pgid` until none is left (true) or
/// `deadline` passes (false).
pub fn reap_group(pgid: u32, deadline: std::time::Instant) -> bool {
    if pgid == 0 {
        return true;
    }
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes one int we own; a negative pid names a process group.
        let r = unsafe { libc::waitpid(-(pgid as libc::pid_t), &mut status, libc::WNOHANG) };
        if r > 0 {
            continue;
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // ECHILD: no child of ours is left in the group.
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

pub fn kill_group(pgid: u32, sig: libc::c_int) -> io::Result<()> {
    if pgid == 0 {
        // kill(0, ...) would signal placer's own group.
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: kill has no memory preconditions; a negative pid names a process group.
    check(unsafe { libc::kill(-(pgid as libc::pid_t), sig) })
}

fn cstr(name: &std::path::Path) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(name.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn dirfd(dir: Option<std::os::fd::BorrowedFd<'_>>) -> libc::c_int {
    dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd())
}

fn owned(fd: libc::c_int) -> io::Result<std::os::fd::OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    use std::os::fd::FromRawFd;
    // SAFETY: the kernel just gave us this fd; the OwnedFd owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Opens `path` for reading without blocking (a FIFO with no writer, a device that waits)
/// and only if it is a regular file: a FIFO, a device or a socket is refused at once with
/// an `InvalidInput` error that says which, and a file over `max_bytes` with `InvalidData`.
/// Every file placer is told to read (config, CLI inputs, recordings, state) goes through
/// here or [`read_regular_file`].
pub fn open_regular_file(path: &std::path::Path, max_bytes: u64) -> io::Result<std::fs::File> {
    use std::os::unix::fs::FileTypeExt;
    let fd = openat(None, path, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
    let f = std::fs::File::from(fd);
    let m = f.metadata()?;
    let t = m.file_type();
    if !t.is_file() {
        let what = if t.is_fifo() {
            "a FIFO"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else if t.is_socket() {
            "a socket"
        } else if t.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is {what}: placer reads regular files only",
                path.display()
            ),
        ));
    }
    if m.len() > max_bytes {
        return Err(too_big(path, max_bytes));
    }
    Ok(f)
}

/// The bytes of regular file `path` ([`open_regular_file`]), at most `max_bytes` (checked
/// again while reading: a file may grow after its size was read).
pub fn read_regular_file(path: &std::path::Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut b = Vec::new();
    open_regular_file(path, max_bytes)?
        .take(max_bytes + 1)
        .read_to_end(&mut b)?;
    if b.len() as u64 > max_bytes {
        return Err(too_big(path, max_bytes));
    }
    Ok(b)
}

fn too_big(path: &std::path::Path, max_bytes: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{} is larger than {max_bytes} bytes", path.display()),
    )
}

/// openat(2) of `name` relative to `dir` (None: the working directory), close-on-exec.
pub fn openat(
    dir: Option<std::os::fd::BorrowedFd<'_>>,
    name: &std::path::Path,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<std::os::fd::OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: c is a valid C string; the mode is read only with O_CREAT.
    owned(unsafe { libc::openat(dirfd(dir), c.as_ptr(), flags | libc::O_CLOEXEC, mode) })
}

/// Opens `rel` beneath `dir` for a knob: openat2 with RESOLVE_BENEATH (no `..` or absolute
/// link may leave `dir`), RESOLVE_NO_MAGICLINKS, and RESOLVE_NO_SYMLINKS unless
/// `links_inside` (sysfs class directories are links within /sys); the last component is
/// never followed. Where the kernel lacks openat2 (before 5.6), openat with O_NOFOLLOW on the
/// last component: callers pass only names they validated (no `/`, no `..`).
pub fn open_beneath(
    dir: std::os::fd::BorrowedFd<'_>,
    rel: &std::path::Path,
    flags: libc::c_int,
    links_inside: bool,
) -> io::Result<std::os::fd::OwnedFd> {
    let c = cstr(rel)?;
    let mut resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    if !links_inside {
        resolve |= libc::RESOLVE_NO_SYMLINKS;
    }
    // SAFETY: open_how is plain data; all-zero is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
    how.resolve = resolve;
    // SAFETY: c is a valid C string and how a valid open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
        return openat(Some(dir), rel, flags | libc::O_NOFOLLOW, 0);
    }
    owned(fd as libc::c_int)
}

/// mkdirat(2): creates directory `name` in `dir` with `mode` (less the umask).
pub fn mkdirat(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::path::Path,
    mode: libc::mode_t,
) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: c is a valid C string.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode) })
}

/// renameat(2) within one directory.
pub fn renameat(
    dir: std::os::fd::BorrowedFd<'_>,
    from: &std::path::Path,
    to: &std::path::Path,
) -> io::Result<()> {
    let (f, t) = (cstr(from)?, cstr(to)?);
    // SAFETY: valid C strings; both names relative to the same directory fd.
    check(unsafe { libc::renameat(dir.as_raw_fd(), f.as_ptr(), dir.as_raw_fd(), t.as_ptr()) })
}

/// unlinkat(2) of a file (not a directory) in `dir`.
pub fn unlinkat(dir: std::os::fd::BorrowedFd<'_>, name: &std::path::Path) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: c is a valid C string.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) })
}

/// renameat2(2) with RENAME_EXCHANGE: swaps two names of `dir` atomically (tests of the
/// state directory race it).
pub fn rename_exchange(
    dir: std::os::fd::BorrowedFd<'_>,
    a: &std::path::Path,
    b: &std::path::Path,
) -> io::Result<()> {
    let (ca, cb) = (cstr(a)?, cstr(b)?);
    // SAFETY: valid C strings; both names relative to the same directory fd.
    check(unsafe {
        libc::renameat2(
            dir.as_raw_fd(),
            ca.as_ptr(),
            dir.as_raw_fd(),
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    })
}

/// The most bytes read from one file: sysfs attributes are at most a page, the largest
/// procfs files a reader here uses are a few hundred KiB.
pub const MAX_FILE_BYTES: usize = 4 << 20;

/// Reads all of `fd` into `buf` (`pread` from offset 0 when `from_start`: a file kept open
/// and read again). A short read is taken as the end of the file: true of regular files
/// and of /proc's seq_file files, and it saves a read per file. Bounded like topology
/// reads (a link to /dev/zero, a huge file under a root).
fn read_whole(fd: libc::c_int, what: &str, from_start: bool, buf: &mut String) -> io::Result<()> {
    let mut v = std::mem::take(buf).into_bytes();
    v.clear();
    let r = loop {
        if v.len() > MAX_FILE_BYTES {
            break Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{what}: larger than {} bytes", MAX_FILE_BYTES),
            ));
        }
        if v.capacity() - v.len() < 1024 {
            v.reserve(4096);
        }
        let room = v.capacity() - v.len();
        let at = v.as_mut_ptr().wrapping_add(v.len()) as *mut libc::c_void;
        // SAFETY: writes at most `room` bytes into the spare capacity.
        let n = unsafe {
            if from_start {
                libc::pread(fd, at, room, v.len() as libc::off_t)
            } else {
                libc::read(fd, at, room)
            }
        };
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
    *buf = match String::from_utf8(v) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    };
    r
}

/// A file kept open and read again from its start at each use: the machine-wide /proc
/// files every sample reads (`stat`, `interrupts`, `net/snmp`...), without a path walk, an
/// open and a close each time. Only on the machine's own /proc: a fixture file replaced
/// by another would go unseen through the old one.
pub(crate) struct PinnedFile(std::os::fd::OwnedFd);

/// Files this process has open now as [`PinnedFile`]s and [`Dir`]s, all its samplers
/// together.
static KEPT_OPEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many files this process has open as [`PinnedFile`]s and [`Dir`]s: its open-fd
/// count less these moves only when it opens or closes something else (a socket among
/// them), not each time a sampler keeps another process's `stat` open or lets one go.
pub(crate) fn kept_open_files() -> u64 {
    KEPT_OPEN.load(std::sync::atomic::Ordering::Relaxed)
}

impl PinnedFile {
    pub(crate) fn open(dir: &Dir, rel: &str) -> io::Result<PinnedFile> {
        let fd = dir.open_file(rel)?;
        KEPT_OPEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: a new fd nothing else owns.
        Ok(PinnedFile(unsafe {
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
        }))
    }

    /// The whole file as it is now (`what` names it in errors).
    pub(crate) fn read(&self, what: &str, buf: &mut String) -> io::Result<()> {
        read_whole(std::os::fd::AsRawFd::as_raw_fd(&self.0), what, true, buf)
    }
}

impl Drop for PinnedFile {
    fn drop(&mut self) {
        KEPT_OPEN.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The files kept open under one directory, by name (a handful: a scan beats a map).
#[derive(Default)]
pub(crate) struct Pins(Vec<(&'static str, PinnedFile)>);

impl Pins {
    /// Reads `rel` under `dir` through a file kept open: opened at its first read, and
    /// opened again once when a read through it fails.
    pub(crate) fn read(
        &mut self,
        dir: &Dir,
        rel: &'static str,
        buf: &mut String,
    ) -> io::Result<()> {
        if let Some(i) = self.0.iter().position(|(r, _)| *r == rel) {
            if self.0[i].1.read(rel, buf).is_ok() {
                return Ok(());
            }
            self.0.swap_remove(i);
        }
        let f = PinnedFile::open(dir, rel)?;
        f.read(rel, buf)?;
        self.0.push((rel, f));
        Ok(())
    }
}

/// An open directory; files under it are opened relative to it (`openat`), which spares
/// the kernel a walk of the whole path for each of the thousands of files a sample reads.
pub(crate) struct Dir(libc::c_int);

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
    pub(crate) fn open(path: &std::path::Path) -> io::Result<Dir> {
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
            KEPT_OPEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(Dir(fd))
        }
    }

    /// A directory under this one (`rel` relative to it).
    pub(crate) fn sub(&self, rel: &str) -> io::Result<Dir> {
        let mut c = Vec::with_capacity(rel.len() + 1);
        c_path(rel, &mut c)?;
        Self::open_raw(self.0, &c)
    }

    /// The numeric entries of this directory (pids, tids), sorted, listed through a
    /// duplicate of its fd (the fd itself stays open for `read`).
    pub(crate) fn numeric_entries(&self) -> io::Result<Vec<u32>> {
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

    /// Opens the file `rel` for reading; the caller owns (and closes) the fd.
    fn open_file(&self, rel: &str) -> io::Result<libc::c_int> {
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
        Ok(fd)
    }

    /// Reads the file `rel` into `buf` (see [`read_whole`]).
    pub(crate) fn read(&self, rel: &str, buf: &mut String) -> io::Result<()> {
        let fd = self.open_file(rel)?;
        let r = read_whole(fd, rel, false, buf);
        // SAFETY: fd is ours and closed once.
        unsafe { libc::close(fd) };
        r
    }

    /// `st_size` of `rel` (for /proc/PID/fd: the number of open fds, Linux >= 6.2).
    pub(crate) fn size_of(&self, rel: &str) -> io::Result<u64> {
        let mut c = Vec::with_capacity(rel.len() + 1);
        c_path(rel, &mut c)?;
        // SAFETY: `stat` is plain data, for which all-zero bytes are a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: st is a valid out-pointer, c NUL-terminated, self.0 an open directory.
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
        KEPT_OPEN.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the fd is owned and closed once.
        unsafe { libc::close(self.0) };
    }
}

/// A non-blocking netlink socket of `protocol`; `groups`: the multicast groups it joins
/// (bound only when some are given). `before_bind` sets what must precede the bind (a
/// receive buffer).
pub fn netlink_socket(
    protocol: libc::c_int,
    groups: u32,
    before_bind: impl FnOnce(libc::c_int),
) -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: plain socket(2); the result is checked and owned below.
    let fd = owned(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            protocol,
        )
    })?;
    before_bind(fd.as_raw_fd());
    if groups != 0 {
        // SAFETY: sockaddr_nl is plain data; zero is a valid start.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        sa.nl_groups = groups;
        // SAFETY: sa is a valid sockaddr_nl of the given size.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const sa).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        })?;
    }
    Ok(fd)
}

/// How [`recv_waiting`] ended, beside the messages it handed on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecvEnd {
    /// The socket's buffer overflowed: messages were lost.
    pub lost: bool,
    /// It failed otherwise (not "nothing waiting").
    pub failed: bool,
}

/// Every datagram waiting on `fd`, each handed to `f`, without blocking.
pub fn recv_waiting(
    fd: std::os::fd::BorrowedFd<'_>,
    buf: &mut [u8],
    mut f: impl FnMut(&[u8]),
) -> RecvEnd {
    let mut end = RecvEnd::default();
    loop {
        // SAFETY: buf is a valid writable buffer of its length.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        match n {
            0 => return end,
            n if n > 0 => f(&buf[..n as usize]),
            _ => match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::ENOBUFS) => end.lost = true,
                Some(libc::EAGAIN) => return end,
                _ => {
                    end.failed = true;
                    return end;
                }
            },
        }
    }
}

/// The socket inodes (sock_diag's, sorted) among this process's open descriptors: each fd
/// listed in `/proc/self/fd` is `fstat`ed, with no path walked. A descriptor closed or
/// reused meanwhile gives what a readlink of it would have: its old or new file, or none.
pub fn own_socket_inodes() -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: stat is plain data; fstat only writes it, and fails on a closed fd.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a stat struct.
        if unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK {
            out.push(st.st_ino);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_socket_inodes_are_the_sockets_readlink_names() {
        use std::os::fd::AsRawFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        let inode = |fd: i32| {
            let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
            crate::procfs::socket_inode(link.as_os_str().as_encoded_bytes())
        };
        let mine = own_socket_inodes();
        let sock = inode(l.as_raw_fd()).expect("a socket link");
        assert!(mine.contains(&sock), "{sock} not in {mine:?}");
        assert_eq!(inode(f.as_raw_fd()), None);
        assert!(mine.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_wake_pipe_wakes_its_waiter_at_once_and_otherwise_times_out() {
        use std::time::{Duration, Instant};
        let p = WakePipe::new().unwrap();
        let t = Instant::now();
        assert!(!p.wait(Duration::from_millis(30)));
        assert!(t.elapsed() >= Duration::from_millis(30));
        // A poke before the wait is not lost; several make one wake-up.
        poke(p.write_fd());
        poke(p.write_fd());
        let t = Instant::now();
        assert!(p.wait(Duration::from_secs(10)));
        assert!(t.elapsed() < Duration::from_secs(1));
        assert!(!p.wait(Duration::from_millis(1)), "drained");
        // From another thread, during the wait.
        let fd = p.write_fd();
        let poker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            poke(fd);
        });
        let t = Instant::now();
        assert!(p.wait(Duration::from_secs(10)));
        assert!(t.elapsed() < Duration::from_secs(5));
        poker.join().unwrap();
    }

    #[test]
    fn a_pinned_proc_file_is_generated_again_at_each_read() {
        let proc_ = Dir::open(std::path::Path::new("/proc")).unwrap();
        let mut pins = Pins::default();
        let mut buf = String::new();
        let uptime = |b: &str| -> f64 { b.split_whitespace().next().unwrap().parse().unwrap() };
        pins.read(&proc_, "uptime", &mut buf).unwrap();
        let first = uptime(&buf);
        std::thread::sleep(std::time::Duration::from_millis(30));
        pins.read(&proc_, "uptime", &mut buf).unwrap();
        assert!(uptime(&buf) > first, "{buf} after {first}");
        assert_eq!(pins.0.len(), 1, "one file kept open");
        assert!(pins.read(&proc_, "no-such-file", &mut buf).is_err());
        assert_eq!(pins.0.len(), 1);
        // A file larger than one read comes whole, and again whole after it changed in
        // place (shorter).
        let t = placer_testkit::TempDir::new("pins");
        let dir = Dir::open(t.path()).unwrap();
        let long: String = (0..3000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(t.path().join("f"), &long).unwrap();
        let mut pins = Pins::default();
        pins.read(&dir, "f", &mut buf).unwrap();
        assert_eq!(buf, long);
        std::fs::write(t.path().join("f"), &long[..5000]).unwrap();
        pins.read(&dir, "f", &mut buf).unwrap();
        assert_eq!(buf, long[..5000]);
    }

    #[test]
    fn affinity_round_trips_on_this_thread() {
        let all = get_affinity(0).expect("get");
        assert!(!all.is_empty());
        let first = all.iter().next().expect("a CPU");
        std::thread::spawn(move || {
            pin_self(first).expect("pin");
            assert_eq!(get_affinity(0).expect("get"), CpuSet::single(first));
            assert_eq!(current_cpu(), first);
        })
        .join()
        .expect("thread");
        assert!(
            set_affinity(0, &CpuSet::new()).is_err(),
            "empty set accepted"
        );
    }

    #[test]
    fn a_killed_group_is_reaped_to_the_last_orphan() {
        use std::os::unix::process::CommandExt;
        become_subreaper().expect("subreaper");
        // A shell and two children of its own, in a group of their own.
        let mut leader = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .expect("sh");
        let pgid = leader.id();
        std::thread::sleep(std::time::Duration::from_millis(200));
        kill_group(pgid, libc::SIGKILL).expect("kill");
        let _ = leader.wait();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        assert!(reap_group(pgid, deadline), "orphans left unreaped");
        // No member is left, not even a zombie.
        // SAFETY: signal 0 only checks that the group exists.
        let r = unsafe { libc::kill(-(pgid as libc::pid_t), 0) };
        assert_eq!(r, -1, "the group still has members");
        assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::ESRCH));
    }

    #[test]
    fn memory_file_systems_are_told_from_disks() {
        // /dev/shm is a tmpfs wherever this runs; /proc is neither tmpfs nor ramfs.
        assert_eq!(on_memory_fs(std::path::Path::new("/dev/shm")), Some(true));
        assert_eq!(on_memory_fs(std::path::Path::new("/proc")), Some(false));
        assert_eq!(on_memory_fs(std::path::Path::new("/no/such/dir")), None);
    }

    #[test]
    fn clocks_move_forward() {
        let (m0, t0) = (monotonic_ns(), thread_cpu_ns());
        let mut x = 0u64;
        while thread_cpu_ns() - t0 < 2_000_000 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(monotonic_ns() > m0 && x > 0);
        assert!(clock_ns(Clock::ProcessCpu) >= thread_cpu_ns() - t0);
        assert!(clock_ticks_per_s() >= 100);
    }

    #[test]
    fn perf_attr_size_is_checked() {
        let attr = [0u8; 72];
        assert_eq!(
            perf_event_open(&attr, 0).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn flock_is_exclusive_across_open_files() {
        let p = std::env::temp_dir().join(format!("placer-sys-lock-{}", std::process::id()));
        let a = std::fs::File::create(&p).expect("a");
        let b = std::fs::File::open(&p).expect("b");
        assert!(try_flock(&a, Lock::Exclusive).expect("lock a"));
        assert!(!try_flock(&b, Lock::Shared).expect("lock b"));
        unflock(&a).expect("unlock");
        assert!(try_flock(&b, Lock::Shared).expect("lock b again"));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn liveness() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(0));
    }
}
