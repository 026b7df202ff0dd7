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

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work here: two atomic stores.
    SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_reload(_sig: libc::c_int) {
    RELOAD.store(true, Ordering::SeqCst);
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
    let mut sigs = stop_signals();
    sigs.push(libc::SIGHUP);
    placer_linux::sys::set_signal_handler(&sigs, on_signal)
}

/// SIGHUP asks for a reload instead of a stop (the daemon).
pub fn install_reload() -> std::io::Result<()> {
    placer_linux::sys::set_signal_handler(&[libc::SIGHUP], on_reload)
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
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

/// Sleeps until `deadline` or a stop request, whichever comes first. A stop signal cuts the
/// sleep short (EINTR); a signal landing between the check and the sleep is seen at the next
/// wake-up, at most 250 ms later. (Polling every 20 ms, as before, cost 50 wake-ups a second
/// and about a third of the idle daemon's CPU.)
pub fn sleep_until(deadline: std::time::Instant) {
    loop {
        if stop_requested() || RELOAD.load(Ordering::SeqCst) {
            return;
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return;
        }
        placer_linux::sys::sleep_unless_signalled(
            (deadline - now).min(std::time::Duration::from_millis(250)),
        );
    }
}
