//! The daemon's side of `sd_notify` (`placer::systemd::Notifier`, a no-op outside systemd):
//! `STATUS=` from the start, `READY=1` once what a dead daemon left is restored and the
//! first cycle ran, `RELOADING=1` around a reload, `STOPPING=1`, and the watchdog fed after
//! each cycle and while the loop sleeps, so a hung cycle is what stops it.

use super::signals;
use placer::systemd::Notifier;
use placer_core::engine::CycleReport;
use std::time::Instant;

/// Read once: the environment does not change under the daemon.
static NOTIFIER: std::sync::OnceLock<Notifier> = std::sync::OnceLock::new();

fn notifier() -> &'static Notifier {
    NOTIFIER.get_or_init(Notifier::from_env)
}

pub struct Systemd {
    ready: bool,
}

impl Systemd {
    /// Says the daemon is starting (before the lock and the start-up restore).
    pub fn from_env() -> Systemd {
        notifier().status("starting: restoring what a previous daemon left");
        Systemd { ready: false }
    }

    /// After each cycle (and after a reload): ready the first time (and after a reload),
    /// the status again when a cycle failed, the watchdog fed.
    pub fn after_cycle(&mut self, r: &CycleReport) {
        let status = match &r.error {
            Some(e) => format!("running; cycle {} failed: {e}", r.cycle),
            None => format!("running; cycle {}", r.cycle),
        };
        if !self.ready {
            self.ready = true;
            notifier().ready(&status);
        } else if r.error.is_some() {
            notifier().status(&status);
        }
        notifier().watchdog();
    }

    /// A reload starts; [`Systemd::after_cycle`] says ready again when it is done.
    pub fn reloading(&mut self) {
        notifier().send("RELOADING=1");
        self.ready = false;
    }

    pub fn stopping(&self) {
        notifier().stopping("stopping: restoring every journaled knob");
    }
}

/// Sleeps until `deadline` (or a stop or reload request), sending `WATCHDOG=1` every
/// watchdog interval when systemd asked for one, so an interval longer than the
/// watchdog's is not taken for a hang.
pub fn sleep_feeding_watchdog(deadline: Instant) {
    let Some(every) = notifier().watchdog_interval() else {
        return signals::sleep_until(deadline);
    };
    loop {
        let now = Instant::now();
        if now >= deadline || signals::stop_requested() || signals::reload_requested() {
            return;
        }
        signals::sleep_until(deadline.min(now + every));
        notifier().watchdog();
    }
}
