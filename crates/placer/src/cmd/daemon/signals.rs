//! Every catchable signal whose default action ends the process (SIGTERM, SIGINT, SIGQUIT,
//! SIGUSR1, SIGUSR2, SIGALRM; SIGXCPU and SIGXFSZ, which the kernel sends under
//! `LimitCPU=`/`LimitFSIZE=`; SIGVTALRM, SIGPROF, SIGPWR, SIGIO, SIGSTKFLT, SIGSYS, SIGTRAP
//! and every real-time signal) sets a flag the loop polls; the loop then restores every knob
//! and exits. Their default action would kill the daemon with its knobs changed. SIGHUP asks
//! the daemon for a config reload (`systemctl reload`, a ConfigMap change) and stops other
//! commands (`top`). Not here:
//! SIGKILL and SIGSTOP (cannot be caught; the next start restores), the faults (SIGSEGV,
//! SIGBUS, SIGILL, SIGFPE, SIGABRT: returning from their handler re-runs the fault), and
//! SIGPIPE (ignored by Rust's runtime). The handlers are installed before anything is
//! touched, the start-up restore included.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static RELOAD: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// What [`sleep_until`] waits on; its write end is in [`WAKE_FD`] for the handlers.
static WAKE: std::sync::OnceLock<placer_linux::sys::WakePipe> = std::sync::OnceLock::new();
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// Wakes [`sleep_until`] (async-signal-safe: an atomic load and a write(2)).
fn wake() {
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        placer_linux::sys::poke(fd);
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work here: two atomic stores and a wake-up.
    SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
    wake();
}

extern "C" fn on_reload(_sig: libc::c_int) {
    RELOAD.store(true, Ordering::SeqCst);
    wake();
}

/// The signals that stop the daemon (after restoring), with their names; and every
/// real-time signal ([`stop_signals`]).
pub const STOP_SIGNALS: [(libc::c_int, &str); 15] = [
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGINT, "SIGINT"),
    (libc::SIGQUIT, "SIGQUIT"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGUSR2, "SIGUSR2"),
    (libc::SIGALRM, "SIGALRM"),
    (libc::SIGXCPU, "SIGXCPU"),
    (libc::SIGXFSZ, "SIGXFSZ"),
    (libc::SIGVTALRM, "SIGVTALRM"),
    (libc::SIGPROF, "SIGPROF"),
    (libc::SIGPWR, "SIGPWR"),
    (libc::SIGIO, "SIGIO"),
    (libc::SIGSTKFLT, "SIGSTKFLT"),
    (libc::SIGSYS, "SIGSYS"),
    (libc::SIGTRAP, "SIGTRAP"),
];

/// Every signal that stops the daemon: [`STOP_SIGNALS`] and SIGRTMIN..=SIGRTMAX.
pub fn stop_signals() -> Vec<libc::c_int> {
    STOP_SIGNALS
        .iter()
        .map(|s| s.0)
        .chain(libc::SIGRTMIN()..=libc::SIGRTMAX())
        .collect()
}

/// Installs the handler for every signal of [`stop_signals`], and SIGHUP as a stop too (for
/// commands that do not reload, such as `top`) until [`install_reload`].
pub fn install() -> std::io::Result<()> {
    init_wake();
    let mut sigs = stop_signals();
    sigs.push(libc::SIGHUP);
    placer_linux::sys::set_signal_handler(&sigs, on_signal)
}

/// The pipe the handlers wake [`sleep_until`] through, made before they are installed (a
/// signal from then on finds it). Without one (no fd left) sleep_until polls in slices.
fn init_wake() {
    if WAKE.get().is_none() {
        if let Ok(p) = placer_linux::sys::WakePipe::new() {
            let p = WAKE.get_or_init(|| p);
            WAKE_FD.store(p.write_fd(), Ordering::SeqCst);
        }
    }
}

/// SIGHUP asks for a reload instead of a stop (the daemon).
pub fn install_reload() -> std::io::Result<()> {
    placer_linux::sys::set_signal_handler(&[libc::SIGHUP], on_reload)
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Whether a reload waits to be taken (without taking it).
pub fn reload_requested() -> bool {
    RELOAD.load(Ordering::SeqCst)
}

/// Whether a reload was asked for since the last call (the request is taken).
pub fn take_reload() -> bool {
    RELOAD.swap(false, Ordering::SeqCst)
}

/// Name of the signal that asked to stop, if any.
pub fn which() -> Option<String> {
    name(SIGNAL.load(Ordering::SeqCst))
}

/// A stop signal's name (`SIGRTMIN+3` for a real-time one).
pub fn name(sig: libc::c_int) -> Option<String> {
    if sig == libc::SIGHUP {
        return Some("SIGHUP".into());
    }
    if let Some(s) = STOP_SIGNALS.iter().find(|s| s.0 == sig) {
        return Some(s.1.to_string());
    }
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    match sig {
        s if s == min => Some("SIGRTMIN".into()),
        s if s == max => Some("SIGRTMAX".into()),
        s if s > min && s < max => Some(format!("SIGRTMIN+{}", s - min)),
        _ => None,
    }
}

/// Sleeps until `deadline` or a stop or reload request, whichever comes first: a handler
/// wakes it through a pipe at once, whichever thread it ran on, and a signal landing
/// between the flag check and the wait is not lost (its byte is already in the pipe). One
/// wake-up per interval. (Without the pipe: slices of 250 ms, a signal seen at the latest
/// at the next one; polling every 250 ms cost four wake-ups a second, every 20 ms as
/// before that about a third of the idle daemon's CPU.)
pub fn sleep_until(deadline: std::time::Instant) {
    loop {
        if stop_requested() || reload_requested() {
            return;
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return;
        }
        match WAKE.get() {
            Some(p) => {
                p.wait(deadline - now);
            }
            None => {
                placer_linux::sys::sleep_unless_signalled(
                    (deadline - now).min(std::time::Duration::from_millis(250)),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A handler that runs on another thread (not the sleeping one, whose wait no signal
    /// interrupts then) still ends the sleep at once: through the pipe. (SIGHUP's reload
    /// handler only: the test binary keeps its default stop signals.)
    #[test]
    fn a_signal_handled_on_another_thread_ends_the_sleep_at_once() {
        init_wake();
        assert!(WAKE.get().is_some());
        install_reload().unwrap();
        let t = Instant::now();
        let other = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            placer_linux::sys::raise(libc::SIGHUP).unwrap();
        });
        sleep_until(t + Duration::from_secs(30));
        let slept = t.elapsed();
        other.join().unwrap();
        assert!(take_reload(), "the handler ran");
        assert!(slept < Duration::from_secs(10), "slept {slept:?}");
    }
}
