//! The knob framework: what a knob handler is ([`KnobHandler`]: apply the actions it knows,
//! restore the journal entries of its kinds, per-cycle upkeep), what it may use while
//! applying ([`Ctx`]: the root, the journal or, in a dry run, a snapshot of it), how an
//! errno becomes an outcome ([`classify`]), how a restore settles a journal entry
//! ([`settle`]), and [`CpuFileKnob`], the whole of a knob that is one file holding a CPU
//! set (IRQ affinity, RPS). The handlers are in `knobs/` (process affinity, IRQ, RPS), `tc`,
//! `cpufreq` and `membind`; the `actuator` lists them and runs plans through them.

use crate::journal::{Entry, Journal, Knob};
use placer_core::plan::{Action, Outcome};
use placer_core::CpuSet;
use std::path::{Path, PathBuf};

pub use placer_core::journal::Restored;

/// The knob kind of the handler that takes `action`: an exhaustive match (no catch-all), so
/// an action added without a handler does not compile.
pub fn kind_of(action: &Action) -> &'static str {
    match action {
        Action::PinProcess { .. } | Action::PinThread { .. } | Action::RestoreProcess { .. } => {
            "proc_affinity"
        }
        Action::SetIrqAffinity { .. } | Action::RestoreIrq { .. } => "irq_affinity",
        Action::SetRps { .. } => "rps",
        Action::CapFrequency { .. } | Action::RestoreFrequency { .. } => "cpufreq_max",
        Action::SetGovernor { .. } => "cpufreq_governor",
        Action::LimitBandwidth { .. } | Action::RemoveLimit { .. } => "tc_qdisc",
        Action::BindMemory { .. } | Action::RestoreMemory { .. } => "mem_policy",
    }
}

/// What a handler may use while applying an action.
pub struct Ctx<'a> {
    pub root: &'a Path,
    /// None in a dry run (nothing may be written).
    pub journal: Option<&'a mut Journal>,
    /// The journal's entries as read at the start of a dry run.
    pub snapshot: Vec<Entry>,
}

impl Ctx<'_> {
    /// A dry run: the context has no journal to write to (only its snapshot), and no
    /// handler may change anything. This is the one place a dry run is told.
    pub fn dry_run(&self) -> bool {
        self.journal.is_none()
    }

    /// The journal entry of `knob`, live (or from the snapshot in a dry run).
    pub fn entry(&self, knob: &Knob) -> Option<Entry> {
        match self.journal.as_deref() {
            Some(j) => j.get(knob).cloned(),
            None => self.snapshot.iter().find(|e| &e.knob == knob).cloned(),
        }
    }
}

/// Applies some actions and restores some knob kinds.
pub trait KnobHandler: Send {
    /// Knob kinds ([`Knob::kind`]) this handler restores.
    fn kinds(&self) -> &'static [&'static str];
    /// Applies `action` if it is one of this handler's; None otherwise. A dry run is
    /// `ctx.dry_run()`: nothing is written then.
    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action) -> Option<Outcome>;
    /// Puts a journaled knob back (only if it still holds what placer applied).
    fn restore(&mut self, root: &Path, entry: &Entry) -> Restored;
    /// Per-cycle upkeep of the knobs it holds (e.g. threads created since a pin); returns
    /// how many it fixed.
    fn maintain(&mut self, _root: &Path, _entries: &[Entry]) -> usize {
        0
    }
}

/// Outcome for an errno from a syscall or a write.
pub fn classify(err: &std::io::Error, what: &str) -> Outcome {
    match err.raw_os_error() {
        Some(libc::ESRCH) => Outcome::Permanent(format!("{what}: the task exited")),
        Some(libc::EINVAL) | Some(libc::EOVERFLOW) | Some(libc::EIO) => {
            Outcome::Permanent(format!("{what}: refused by the kernel ({err})"))
        }
        Some(libc::EPERM) | Some(libc::EACCES) | Some(libc::EROFS) => {
            Outcome::Permanent(format!("{what}: no permission ({err})"))
        }
        Some(libc::ENOENT) | Some(libc::ENODEV) => {
            Outcome::Permanent(format!("{what}: no such knob ({err})"))
        }
        Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::EINTR) => {
            Outcome::Transient(format!("{what}: {err}"))
        }
        _ => Outcome::Transient(format!("{what}: {err}")),
    }
}

/// Turns a restore into an action outcome, dropping settled entries from the journal.
pub fn settle(ctx: &mut Ctx<'_>, knob: &Knob, r: Restored) -> Outcome {
    if r.settled() {
        if let Some(j) = ctx.journal.as_deref_mut() {
            if let Err(err) = j.remove(knob) {
                return Outcome::Transient(format!("journal: {err}"));
            }
        }
    }
    match r {
        Restored::Restored => Outcome::Done,
        Restored::Gone(why) => Outcome::Permanent(why),
        Restored::ChangedElsewhere(why) => Outcome::Skipped(why),
        Restored::Failed(why) => Outcome::Transient(why),
    }
}

/// A knob that is one text file holding a CPU set (IRQ affinity list, RPS mask).
pub trait CpuFileKnob {
    fn path(&self, root: &Path, knob: &Knob) -> Option<PathBuf>;
    fn parse(&self, text: &str) -> Option<CpuSet>;
    fn format(&self, cpus: &CpuSet) -> String;

    fn set(
        &self,
        ctx: &mut Ctx<'_>,
        knob: Knob,
        cpus: &CpuSet,
        label: &str,
        dry_run: bool,
    ) -> Outcome {
        let Some(path) = self.path(ctx.root, &knob) else {
            return Outcome::Permanent("bad knob".into());
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t.trim().to_string(),
            Err(e) => return classify(&e, &path.display().to_string()),
        };
        let cur = self.parse(&text);
        if cur.as_ref() == Some(cpus) {
            return Outcome::Skipped(format!("{knob} already {cpus}"));
        }
        if dry_run {
            return Outcome::Skipped(format!("dry run: would set {knob} from {text} to {cpus}"));
        }
        let Some(journal) = ctx.journal.as_deref_mut() else {
            return Outcome::Transient("no journal".into());
        };
        let value = self.format(cpus);
        let new = match journal.record(knob.clone(), &text, &value, label) {
            Ok(n) => n,
            Err(e) => return Outcome::Transient(format!("journal: {e}")),
        };
        match std::fs::write(&path, format!("{value}\n")) {
            Ok(()) => Outcome::Done,
            Err(e) => {
                if new {
                    let _ = journal.remove(&knob);
                }
                classify(&e, &format!("writing {value} to {}", path.display()))
            }
        }
    }

    fn put_back(&self, root: &Path, e: &Entry) -> Restored {
        let Some(path) = self.path(root, &e.knob) else {
            return Restored::Failed("bad knob".into());
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Restored::Gone(format!("{} is gone", path.display()))
            }
            Err(err) => return Restored::Failed(format!("{}: {err}", path.display())),
        };
        if self.parse(text.trim()) != self.parse(&e.applied) {
            return Restored::ChangedElsewhere(format!(
                "{} is {} now, not the {} placer set: left as is",
                e.knob,
                text.trim(),
                e.applied
            ));
        }
        match std::fs::write(&path, format!("{}\n", e.previous)) {
            Ok(()) => Restored::Restored,
            Err(err) => Restored::Failed(format!(
                "writing {} to {}: {err}",
                e.previous,
                path.display()
            )),
        }
    }

    fn restore_action(&self, ctx: &mut Ctx<'_>, knob: Knob, dry_run: bool) -> Outcome {
        let Some(e) = ctx.entry(&knob) else {
            return Outcome::Skipped(format!("{knob}: placer did not change it"));
        };
        if dry_run {
            return Outcome::Skipped(format!("dry run: would restore {knob} to {}", e.previous));
        }
        let r = self.put_back(ctx.root, &e);
        settle(ctx, &e.knob, r)
    }
}
