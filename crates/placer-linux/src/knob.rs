//! The knob framework: what a knob handler is ([`KnobHandler`]: apply the actions it knows,
//! restore the journal entries of its kinds, per-cycle upkeep), what it may use while
//! applying ([`Ctx`]: the root, the journal or, in a dry run, a snapshot of it), how an
//! errno becomes an outcome ([`classify`]), how a restore settles a journal entry
//! ([`settle`]), and [`CpuFileKnob`], the whole of a knob that is one file holding a CPU
//! set (IRQ affinity, RPS). The handlers are all in `knobs/` (process affinity, IRQ, RPS,
//! `cpufreq`, `tc`, `membind`); the `actuator` lists them and runs plans through them.

use crate::journal::{Entry, Journal, Knob};
use placer_core::plan::{Action, Outcome};
use placer_core::policy_kind::PolicyKind;
use placer_core::CpuSet;
use std::path::Path;

pub use placer_core::journal::Restored;

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

/// Applies the actions of its knob kinds and restores their journal entries. Which handler
/// takes which [`crate::journal::KnobKind`] is the actuator's exhaustive match.
pub trait KnobHandler: Send {
    /// Applies `action`, one of this handler's kinds, planned by `policy`; the journal
    /// entry is labelled with its name. A dry run is `ctx.dry_run()`: nothing is written then.
    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action, policy: PolicyKind) -> Outcome;
    /// Puts a journaled knob back (only if it still holds what placer applied).
    fn restore(&mut self, root: &Path, entry: &Entry) -> Restored;
    /// Per-cycle upkeep of the knobs it holds (e.g. threads created since a pin); returns
    /// how many it fixed.
    fn maintain(&mut self, _root: &Path, _entries: &[Entry]) -> usize {
        0
    }
}

/// What a handler answers for an action of another kind: the actuator's dispatch never
/// hands it one, so this is a bug, refused rather than guessed at.
pub fn not_mine(handler: &str, action: &Action) -> Outcome {
    Outcome::Permanent(format!(
        "{} is not an action of the {handler} handler",
        action.kind()
    ))
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

/// The pseudo-filesystem a knob file lives in, under the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnobFs {
    /// `ROOT/proc`: no link on a knob's path.
    Proc,
    /// `ROOT/sys`: class directories are links inside /sys (`class/net/eth0` ->
    /// `../../devices/...`), followed only while they stay beneath it.
    Sys,
}

/// Knob files are a few bytes (an 8192-CPU mask is about 2.3 KB).
const MAX_KNOB_FILE_BYTES: u64 = 64 << 10;

/// Opens a knob file beneath `ROOT/proc` or `ROOT/sys` (openat2 RESOLVE_BENEATH, no
/// magic links, the last component never followed; see [`crate::sys::open_beneath`]).
pub fn open_knob(
    root: &Path,
    fs: KnobFs,
    rel: &str,
    write: bool,
) -> std::io::Result<std::fs::File> {
    let base = root.join(match fs {
        KnobFs::Proc => "proc",
        KnobFs::Sys => "sys",
    });
    let dir = crate::sys::openat(None, &base, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    // O_TRUNC: nothing to procfs and sysfs, but a fixture tree holds regular files.
    let flags = if write {
        libc::O_WRONLY | libc::O_TRUNC
    } else {
        libc::O_RDONLY | libc::O_NONBLOCK
    };
    use std::os::fd::AsFd;
    let f = std::fs::File::from(crate::sys::open_beneath(
        dir.as_fd(),
        Path::new(rel),
        flags,
        fs == KnobFs::Sys,
    )?);
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(f)
}

fn read_knob(root: &Path, fs: KnobFs, rel: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut s = String::new();
    open_knob(root, fs, rel, false)?
        .take(MAX_KNOB_FILE_BYTES)
        .read_to_string(&mut s)?;
    Ok(s)
}

fn write_knob(root: &Path, fs: KnobFs, rel: &str, value: &str) -> std::io::Result<()> {
    use std::io::Write;
    open_knob(root, fs, rel, true)?.write_all(format!("{value}\n").as_bytes())
}

/// A knob that is one text file holding a CPU set (IRQ affinity list, RPS mask).
pub trait CpuFileKnob {
    /// Where the knob's file is: its filesystem and its path there, built only from names
    /// that passed [`crate::journal::validate`]'s rules (None otherwise).
    fn locate(&self, knob: &Knob) -> Option<(KnobFs, String)>;
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
        let Some((fs, rel)) = self.locate(&knob) else {
            return Outcome::Permanent(format!("{knob}: not a name the kernel allows"));
        };
        let shown = ctx.root.join(&rel).display().to_string();
        let text = match read_knob(ctx.root, fs, &rel) {
            Ok(t) => t.trim().to_string(),
            Err(e) => return classify(&e, &shown),
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
        // Only a value in the knob's own format is journaled: a restore writes it back.
        if cur.is_none() {
            return Outcome::Permanent(format!("{shown} holds {text:?}, not a CPU set"));
        }
        let value = self.format(cpus);
        let new = match journal.record(knob.clone(), &text, &value, label) {
            Ok(n) => n,
            Err(e) => return Outcome::Transient(format!("journal: {e}")),
        };
        match write_knob(ctx.root, fs, &rel, &value) {
            Ok(()) => Outcome::Done,
            Err(e) => {
                if new {
                    let _ = journal.remove(&knob);
                }
                classify(&e, &format!("writing {value} to {shown}"))
            }
        }
    }

    fn put_back(&self, root: &Path, e: &Entry) -> Restored {
        let Some((fs, rel)) = self.locate(&e.knob) else {
            return Restored::Failed(format!("{}: not a name the kernel allows", e.knob));
        };
        let shown = root.join(&rel).display().to_string();
        // Only a value that parses as the knob's format is written, as the kernel printed
        // it, and only of a CPU set's characters: a journal entry cannot make placer write
        // arbitrary text.
        let previous = e.previous.trim();
        let set_chars = |v: &str| {
            v.bytes()
                .all(|b| b.is_ascii_hexdigit() || matches!(b, b',' | b'-' | b':' | b'x'))
        };
        let (true, Some(_), Some(applied)) = (
            set_chars(previous),
            self.parse(previous),
            self.parse(&e.applied),
        ) else {
            return Restored::Failed(format!(
                "{}: the journaled values {:?} / {:?} are not CPU sets: not written",
                e.knob, e.previous, e.applied
            ));
        };
        let text = match read_knob(root, fs, &rel) {
            Ok(t) => t,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Restored::Gone(format!("{shown} is gone"))
            }
            Err(err) => return Restored::Failed(format!("{shown}: {err}")),
        };
        if self.parse(text.trim()).as_ref() != Some(&applied) {
            return Restored::ChangedElsewhere(format!(
                "{} is {} now, not the {} placer set: left as is",
                e.knob,
                text.trim(),
                e.applied
            ));
        }
        let value = previous;
        match write_knob(root, fs, &rel, value) {
            Ok(()) => Restored::Restored,
            Err(err) => Restored::Failed(format!("writing {value} to {shown}: {err}")),
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
