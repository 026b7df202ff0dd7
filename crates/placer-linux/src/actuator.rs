//! Applies plans to the machine, journaling every knob's previous value first.
//!
//! For each action: check the object still is what the plan meant (a process's start time
//! must match, so a reused pid is never touched), read the knob's current value, record it
//! in the [`Journal`] durably, then change the knob, and classify the outcome:
//! - `Done`; `Skipped` when the knob already has the value, or in a dry run (nothing is
//!   read-write then, not even the journal);
//! - `Transient` (EAGAIN, EBUSY, EINTR, the journal could not be written): planned again
//!   next cycle;
//! - `Permanent` (ESRCH: the task exited; EINVAL: CPUs outside its cpuset or refused by the
//!   kernel; EPERM/EACCES: no permission; ENOENT: no such knob).
//!
//! Pinning a process sets the affinity of every thread in /proc/PID/task; threads created
//! later inherit the affinity of the thread that creates them, and a thread created while
//! the list was being walked is caught by walking it again (bounded) and by
//! [`Actuator::maintain`], which every cycle fixes threads of held processes that appeared
//! since with another affinity.
//!
//! Knob handlers are pluggable: [`KnobHandler`] applies the actions it knows and restores
//! the journal entries of its knob kinds. Built in: process affinity, IRQ affinity, RPS.
//! Other areas register theirs with [`Handlers::register`] (cpufreq, tc, memory policy).
//!
//! Process knobs act on the running kernel (syscalls by pid); `root` only locates /proc and
//! /sys, so IRQ and RPS handling can be tested on a writable temporary tree.

use crate::journal::{Entry, Journal, Knob};
use placer_core::plan::{Action, ActionReport, Outcome, Plan};
use placer_core::sample::ProcKey;
use placer_core::CpuSet;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What became of one journaled knob on restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// Put back to its previous value.
    Restored,
    /// Its object no longer exists (the process exited, the device is gone).
    Gone(String),
    /// Someone else changed it since placer did: left as they set it.
    ChangedElsewhere(String),
    /// Could not be restored now; the entry stays in the journal.
    Failed(String),
}

impl Restored {
    /// Whether the entry leaves the journal.
    pub fn settled(&self) -> bool {
        !matches!(self, Restored::Failed(_))
    }
    pub fn kind(&self) -> &'static str {
        match self {
            Restored::Restored => "restored",
            Restored::Gone(_) => "gone",
            Restored::ChangedElsewhere(_) => "changed_elsewhere",
            Restored::Failed(_) => "failed",
        }
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
    /// Applies `action` if it is one of this handler's; None otherwise.
    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action, dry_run: bool) -> Option<Outcome>;
    /// Puts a journaled knob back (only if it still holds what placer applied).
    fn restore(&mut self, root: &Path, entry: &Entry) -> Restored;
    /// Per-cycle upkeep of the knobs it holds (e.g. threads created since a pin); returns
    /// how many it fixed.
    fn maintain(&mut self, _root: &Path, _entries: &[Entry]) -> usize {
        0
    }
}

/// The registered handlers; built-ins first.
pub struct Handlers {
    list: Vec<Box<dyn KnobHandler>>,
}

impl Default for Handlers {
    fn default() -> Self {
        Handlers::builtin()
    }
}

impl Handlers {
    pub fn builtin() -> Handlers {
        let list: Vec<Box<dyn KnobHandler>> = vec![
            Box::new(ProcAffinityHandler::default()),
            Box::new(IrqHandler),
            Box::new(RpsHandler),
            Box::new(crate::cpufreq::CpufreqHandler),
            Box::new(crate::tc::TcHandler {
                ctx: crate::tc::TcCtx::current(),
                ..Default::default()
            }),
            Box::new(crate::membind::MemPolicyHandler),
            // Other areas add their handlers here.
        ];
        Handlers { list }
    }

    /// Adds a handler (tried after the ones before it).
    pub fn register(&mut self, h: Box<dyn KnobHandler>) {
        self.list.push(h);
    }

    fn for_kind(&mut self, kind: &str) -> Option<&mut Box<dyn KnobHandler>> {
        self.list.iter_mut().find(|h| h.kinds().contains(&kind))
    }
}

/// Restores every journaled knob; settled entries leave the journal. Returns what happened
/// to each.
pub fn restore_all(
    root: &Path,
    journal: &mut Journal,
    handlers: &mut Handlers,
) -> Vec<(Entry, Restored)> {
    let mut out: Vec<(Entry, Restored)> = Vec::new();
    // Newest first: a knob changed twice by different actions is put back in reverse.
    let entries: Vec<Entry> = journal.entries().iter().rev().cloned().collect();
    // Settled entries leave the journal in batches, one durable write each: restoring is
    // idempotent (a knob already back reads as settled again), so a crash between a
    // restore and its batch's write only repeats work.
    const BATCH: usize = 512;
    let mut settled: Vec<usize> = Vec::new();
    let flush =
        |journal: &mut Journal, out: &mut Vec<(Entry, Restored)>, settled: &mut Vec<usize>| {
            let knobs: Vec<Knob> = settled.iter().map(|&i| out[i].0.knob.clone()).collect();
            if let Err(err) = journal.remove_many(&knobs) {
                for &i in settled.iter() {
                    out[i].1 = Restored::Failed(format!("restored, but the journal: {err}"));
                }
            }
            settled.clear();
        };
    for e in entries {
        let r = match handlers.for_kind(e.knob.kind()) {
            Some(h) => h.restore(root, &e),
            None => Restored::Failed(format!(
                "no restorer for knob kind {} in this placer",
                e.knob.kind()
            )),
        };
        if r.settled() {
            settled.push(out.len());
        }
        out.push((e, r));
        if settled.len() >= BATCH {
            flush(journal, &mut out, &mut settled);
        }
    }
    flush(journal, &mut out, &mut settled);
    out
}

pub struct Actuator {
    pub root: PathBuf,
    pub state_dir: PathBuf,
    pub handlers: Handlers,
    journal: Option<Journal>,
}

impl Actuator {
    /// The journal is opened on first use (so a dry run needs no writable state dir).
    pub fn new(root: &Path, state_dir: &Path) -> Self {
        Actuator {
            root: root.to_path_buf(),
            state_dir: state_dir.to_path_buf(),
            handlers: Handlers::builtin(),
            journal: None,
        }
    }

    /// The journal, opened for writing (creating the state dir).
    pub fn journal(&mut self) -> crate::Result<&mut Journal> {
        if self.journal.is_none() {
            self.journal = Some(Journal::open(&self.state_dir)?);
        }
        Ok(self.journal.as_mut().expect("just opened"))
    }

    /// Puts back every journaled knob.
    pub fn restore_all(&mut self) -> crate::Result<Vec<(Entry, Restored)>> {
        self.journal()?;
        let journal = self.journal.as_mut().expect("opened above");
        Ok(restore_all(&self.root, journal, &mut self.handlers))
    }

    /// Per-cycle upkeep: pins threads that held processes created since with another
    /// affinity. Returns how many threads it fixed.
    pub fn maintain(&mut self) -> usize {
        let root = self.root.clone();
        let Some(j) = self.journal.as_mut() else {
            return 0;
        };
        // Entries of exited processes go promptly (a failed write is retried next cycle).
        if let Err(e) = j.prune_exited(&root) {
            tracing::warn!("journal: pruning exited processes: {e}");
        }
        let entries = j.entries().to_vec();
        let root = self.root.clone();
        self.handlers
            .list
            .iter_mut()
            .map(|h| h.maintain(&root, &entries))
            .sum()
    }

    pub fn apply(&mut self, plan: &Plan, dry_run: bool) -> Vec<ActionReport> {
        if !dry_run && !plan.actions.is_empty() {
            if let Err(e) = self.journal() {
                let why = format!("cannot open the journal, changing nothing: {e}");
                return plan
                    .actions
                    .iter()
                    .map(|a| ActionReport {
                        planned: a.clone(),
                        outcome: Outcome::Transient(why.clone()),
                    })
                    .collect();
            }
        }
        if !dry_run {
            // Every cycle, plan or not: threads of held processes created since.
            let fixed = self.maintain();
            if fixed > 0 {
                tracing::info!("pinned {fixed} new thread(s) of held processes");
            }
        }
        let mut ctx = if dry_run {
            Ctx {
                root: &self.root,
                journal: None,
                snapshot: Journal::load(&self.state_dir)
                    .map(|j| j.entries().to_vec())
                    .unwrap_or_default(),
            }
        } else {
            Ctx {
                root: &self.root,
                journal: self.journal.as_mut(),
                snapshot: Vec::new(),
            }
        };
        let mut out = Vec::new();
        for pa in &plan.actions {
            let mut outcome = None;
            for h in self.handlers.list.iter_mut() {
                outcome = h.apply(&mut ctx, &pa.action, dry_run);
                if outcome.is_some() {
                    break;
                }
            }
            let outcome = outcome.unwrap_or_else(|| {
                Outcome::Permanent(format!(
                    "no handler for {} in this placer",
                    pa.action.kind()
                ))
            });
            out.push(ActionReport {
                planned: pa.clone(),
                outcome,
            });
        }
        out
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

// ---------------------------------------------------------------------------------------
// Affinity syscalls.

// The affinity calls live in `sys`; re-exported here for the handlers and their tests.
pub use crate::sys::{get_affinity, set_affinity};

/// Restores a process's threads, each decided on its own: a thread still on `applied` gets
/// its own previous value (`threads`, else the process's `previous`); a thread on anything
/// else was moved by someone else, or restored already, and is left alone. The main thread
/// goes last, so a restore interrupted part-way (SIGKILL) leaves the main thread on
/// `applied` and a second restore finishes the rest: restoring is idempotent.
fn restore_threads(
    root: &Path,
    k: ProcKey,
    previous: &CpuSet,
    applied: &CpuSet,
    threads: &BTreeMap<u32, String>,
) -> Restored {
    let target = |tid: u32| -> CpuSet {
        threads
            .get(&tid)
            .and_then(|v| CpuSet::parse_list(v).ok())
            .unwrap_or_else(|| previous.clone())
    };
    let mut done: BTreeSet<u32> = BTreeSet::new();
    let (mut restored, mut elsewhere) = (0usize, 0usize);
    // New threads can appear while we walk: a few passes, main thread after the others.
    for _ in 0..4 {
        let mut tids = match task_ids(root, k.pid) {
            Ok(t) => t,
            Err(_) if done.is_empty() => return Restored::Gone(format!("pid {} exited", k.pid)),
            Err(_) => break,
        };
        tids.retain(|t| !done.contains(t));
        if tids.is_empty() {
            break;
        }
        tids.sort_by_key(|&t| (t == k.pid, t));
        for tid in tids {
            done.insert(tid);
            match get_affinity(tid) {
                Ok(cur) if &cur == applied => {
                    let want = target(tid);
                    match set_affinity(tid, &want) {
                        Ok(()) => restored += 1,
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                        Err(e) => {
                            return Restored::Failed(format!(
                                "restoring thread {tid} of pid {} to {want}: {e}",
                                k.pid
                            ))
                        }
                    }
                }
                Ok(cur) if cur == target(tid) => {}
                Ok(_) => elsewhere += 1,
                Err(_) => {}
            }
        }
    }
    if restored == 0 && elsewhere > 0 {
        return Restored::ChangedElsewhere(format!(
            "pid {}: none of its threads is on the {applied} placer set: left as is",
            k.pid
        ));
    }
    Restored::Restored
}

/// Start time (field 22 of /proc/PID/stat) of a process under `root`; None if gone.
pub fn start_time_ticks(root: &Path, pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(root.join(format!("proc/{pid}/stat"))).ok()?;
    parse_start_time(&text)
}

/// Field 22 of a stat line (the comm may hold spaces and parentheses: split after the last
/// `)`).
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the comm: field 3 (state) is the first; field 22 is the 20th.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Thread ids of a process under `root`, sorted.
pub fn task_ids(root: &Path, pid: u32) -> std::io::Result<Vec<u32>> {
    let mut v: Vec<u32> = std::fs::read_dir(root.join(format!("proc/{pid}/task")))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

fn proc_knob(k: ProcKey) -> Knob {
    Knob::ProcAffinity {
        pid: k.pid,
        start_time_ticks: k.start_time_ticks,
    }
}

/// Checks that `k` still names the same process.
fn same_process(root: &Path, k: ProcKey) -> Result<(), String> {
    match start_time_ticks(root, k.pid) {
        None => Err(format!("pid {} exited", k.pid)),
        Some(t) if t != k.start_time_ticks => Err(format!(
            "pid {} now names another process (start time {t}, expected {})",
            k.pid, k.start_time_ticks
        )),
        Some(_) => Ok(()),
    }
}

/// Process affinity: pins every thread; restores threads still on what placer set.
#[derive(Default)]
pub struct ProcAffinityHandler {
    /// Threads already handled per held process (new ones are checked by `maintain`).
    known: BTreeMap<ProcKey, BTreeSet<u32>>,
}

impl ProcAffinityHandler {
    const KINDS: &'static [&'static str] = &["proc_affinity"];

    /// Sets `cpus` on every thread, walking the task list until no new thread shows up
    /// (at most 4 walks). Errors on the main thread decide the outcome; a thread that
    /// exited meanwhile is fine.
    fn set_all(
        &mut self,
        root: &Path,
        k: ProcKey,
        cpus: &CpuSet,
        only_if: Option<&CpuSet>,
    ) -> Result<usize, std::io::Error> {
        let mut done: BTreeSet<u32> = BTreeSet::new();
        let mut changed = 0;
        for _ in 0..4 {
            let tids = task_ids(root, k.pid)?;
            let fresh: Vec<u32> = tids.into_iter().filter(|t| !done.contains(t)).collect();
            if fresh.is_empty() {
                break;
            }
            for tid in fresh {
                done.insert(tid);
                if let Some(expect) = only_if {
                    match get_affinity(tid) {
                        Ok(cur) if &cur != expect => continue,
                        Ok(_) => {}
                        Err(e) if tid == k.pid => return Err(e),
                        Err(_) => continue,
                    }
                }
                match set_affinity(tid, cpus) {
                    Ok(()) => changed += 1,
                    Err(e) if tid == k.pid || e.raw_os_error() != Some(libc::ESRCH) => {
                        if changed == 0 || tid == k.pid {
                            return Err(e);
                        }
                    }
                    Err(_) => {}
                }
            }
        }
        self.known.insert(k, done);
        Ok(changed)
    }

    fn pin(
        &mut self,
        ctx: &mut Ctx<'_>,
        k: ProcKey,
        comm: &str,
        cpus: &CpuSet,
        dry_run: bool,
    ) -> Outcome {
        if let Err(why) = same_process(ctx.root, k) {
            return Outcome::Permanent(why);
        }
        let cur = match get_affinity(k.pid) {
            Ok(c) => c,
            Err(e) => return classify(&e, "sched_getaffinity"),
        };
        let tids = task_ids(ctx.root, k.pid).unwrap_or_default();
        let all_there = tids
            .iter()
            .all(|t| get_affinity(*t).map_or(true, |a| &a == cpus));
        if all_there {
            return Outcome::Skipped(format!("{comm} ({}) already on {cpus}", k.pid));
        }
        if dry_run {
            return Outcome::Skipped(format!(
                "dry run: would pin {comm} ({}) and its {} thread(s) from {cur} to {cpus}",
                k.pid,
                tids.len()
            ));
        }
        let Some(journal) = ctx.journal.as_deref_mut() else {
            return Outcome::Transient("no journal".into());
        };
        let knob = proc_knob(k);
        // Threads the app placed itself get their own value back on restore.
        let threads: BTreeMap<u32, String> = tids
            .iter()
            .filter_map(|&t| {
                let a = get_affinity(t).ok()?;
                (a != cur).then(|| (t, a.to_list_string()))
            })
            .collect();
        let new = match journal.record_with_threads(
            knob.clone(),
            &cur.to_list_string(),
            &cpus.to_list_string(),
            comm,
            &threads,
        ) {
            Ok(n) => n,
            Err(e) => return Outcome::Transient(format!("journal: {e}")),
        };
        match self.set_all(ctx.root, k, cpus, None) {
            Ok(_) => Outcome::Done,
            Err(e) => {
                if new {
                    let _ = journal.remove(&knob);
                }
                let what = format!("pinning {comm} ({}) to {cpus}", k.pid);
                match e.raw_os_error() {
                    Some(libc::EINVAL) => Outcome::Permanent(format!(
                        "{what}: CPUs outside its cpuset (allowed now {cur})"
                    )),
                    _ => classify(&e, &what),
                }
            }
        }
    }

    fn restore_proc(&mut self, root: &Path, k: ProcKey, e: &Entry) -> Restored {
        if let Err(why) = same_process(root, k) {
            self.known.remove(&k);
            return Restored::Gone(why);
        }
        let (Ok(prev), Ok(applied)) = (
            CpuSet::parse_list(&e.previous),
            CpuSet::parse_list(&e.applied),
        ) else {
            return Restored::Failed(format!(
                "bad CPU lists in the journal: {:?} / {:?}",
                e.previous, e.applied
            ));
        };
        let r = restore_threads(root, k, &prev, &applied, &e.thread_previous);
        self.known.remove(&k);
        r
    }

    /// Pins threads of journaled processes that appeared since with another affinity.
    fn fix_new_threads(&mut self, root: &Path, entries: &[Entry]) -> usize {
        let mut fixed = 0;
        for e in entries {
            let Knob::ProcAffinity {
                pid,
                start_time_ticks,
            } = e.knob
            else {
                continue;
            };
            let k = ProcKey {
                pid,
                start_time_ticks,
            };
            if same_process(root, k).is_err() {
                self.known.remove(&k);
                continue;
            }
            let Ok(applied) = CpuSet::parse_list(&e.applied) else {
                continue;
            };
            // Someone else moved the process since (lease broken): its threads are theirs.
            if get_affinity(pid).map_or(true, |a| a != applied) {
                self.known.remove(&k);
                continue;
            }
            let Ok(tids) = task_ids(root, pid) else {
                continue;
            };
            let known = self.known.entry(k).or_default();
            for tid in tids {
                if !known.insert(tid) {
                    continue;
                }
                if get_affinity(tid).is_ok_and(|a| a != applied)
                    && set_affinity(tid, &applied).is_ok()
                {
                    fixed += 1;
                }
            }
        }
        fixed
    }
}

impl KnobHandler for ProcAffinityHandler {
    fn kinds(&self) -> &'static [&'static str] {
        Self::KINDS
    }

    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action, dry_run: bool) -> Option<Outcome> {
        match action {
            Action::PinProcess { proc, comm, cpus } => {
                Some(self.pin(ctx, *proc, comm, cpus, dry_run))
            }
            Action::RestoreProcess { proc, comm } => {
                let knob = proc_knob(*proc);
                let Some(e) = ctx.entry(&knob) else {
                    return Some(Outcome::Skipped(format!(
                        "{comm} ({}): placer did not change it",
                        proc.pid
                    )));
                };
                if dry_run {
                    return Some(Outcome::Skipped(format!(
                        "dry run: would restore {comm} ({}) to {}",
                        proc.pid, e.previous
                    )));
                }
                Some(settle(ctx, &e, self.restore_proc(ctx.root, *proc, &e)))
            }
            _ => None,
        }
    }

    fn restore(&mut self, root: &Path, entry: &Entry) -> Restored {
        match entry.knob {
            Knob::ProcAffinity {
                pid,
                start_time_ticks,
            } => self.restore_proc(
                root,
                ProcKey {
                    pid,
                    start_time_ticks,
                },
                entry,
            ),
            _ => Restored::Failed("not a process affinity".into()),
        }
    }

    fn maintain(&mut self, root: &Path, entries: &[Entry]) -> usize {
        self.fix_new_threads(root, entries)
    }
}

/// Turns a restore into an action outcome, dropping settled entries from the journal.
fn settle(ctx: &mut Ctx<'_>, e: &Entry, r: Restored) -> Outcome {
    if r.settled() {
        if let Some(j) = ctx.journal.as_deref_mut() {
            if let Err(err) = j.remove(&e.knob) {
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
trait CpuFileKnob {
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
        settle(ctx, &e, r)
    }
}

/// /proc/irq/N/smp_affinity_list.
pub struct IrqHandler;

impl CpuFileKnob for IrqHandler {
    fn path(&self, root: &Path, knob: &Knob) -> Option<PathBuf> {
        match knob {
            Knob::IrqAffinity { irq } => {
                Some(root.join(format!("proc/irq/{irq}/smp_affinity_list")))
            }
            _ => None,
        }
    }
    fn parse(&self, text: &str) -> Option<CpuSet> {
        CpuSet::parse_list(text.trim()).ok()
    }
    fn format(&self, cpus: &CpuSet) -> String {
        cpus.to_list_string()
    }
}

impl KnobHandler for IrqHandler {
    fn kinds(&self) -> &'static [&'static str] {
        &["irq_affinity"]
    }
    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action, dry_run: bool) -> Option<Outcome> {
        match action {
            Action::SetIrqAffinity { irq, cpus } => Some(self.set(
                ctx,
                Knob::IrqAffinity { irq: *irq },
                cpus,
                &format!("irq {irq}"),
                dry_run,
            )),
            Action::RestoreIrq { irq } => {
                Some(self.restore_action(ctx, Knob::IrqAffinity { irq: *irq }, dry_run))
            }
            _ => None,
        }
    }
    fn restore(&mut self, root: &Path, entry: &Entry) -> Restored {
        self.put_back(root, entry)
    }
}

/// /sys/class/net/DEV/queues/QUEUE/rps_cpus.
pub struct RpsHandler;

impl CpuFileKnob for RpsHandler {
    fn path(&self, root: &Path, knob: &Knob) -> Option<PathBuf> {
        match knob {
            Knob::Rps { dev, queue } => {
                Some(root.join(format!("sys/class/net/{dev}/queues/{queue}/rps_cpus")))
            }
            _ => None,
        }
    }
    fn parse(&self, text: &str) -> Option<CpuSet> {
        CpuSet::parse_mask(text.trim()).ok()
    }
    fn format(&self, cpus: &CpuSet) -> String {
        cpus.to_mask_string()
    }
}

impl KnobHandler for RpsHandler {
    fn kinds(&self) -> &'static [&'static str] {
        &["rps"]
    }
    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action, dry_run: bool) -> Option<Outcome> {
        match action {
            Action::SetRps { dev, queue, cpus } => Some(self.set(
                ctx,
                Knob::Rps {
                    dev: dev.clone(),
                    queue: queue.clone(),
                },
                cpus,
                dev,
                dry_run,
            )),
            _ => None,
        }
    }
    fn restore(&mut self, root: &Path, entry: &Entry) -> Restored {
        self.put_back(root, entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use placer_core::plan::PlannedAction;
    use std::process::{Child, Command};

    struct TempRoot(PathBuf);

    impl TempRoot {
        fn new(tag: &str) -> TempRoot {
            let d = std::env::temp_dir().join(format!("placer-act-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).expect("mkdir");
            TempRoot(d)
        }
        fn file(&self, rel: &str, text: &str) -> PathBuf {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, text).expect("write");
            p
        }
        fn state(&self) -> PathBuf {
            self.0.join("state")
        }
    }

    impl Drop for TempRoot {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    struct Kid(Child);
    impl Drop for Kid {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn plan(actions: Vec<Action>) -> Plan {
        Plan {
            actions: actions
                .into_iter()
                .map(|action| PlannedAction {
                    action,
                    policy: "test".into(),
                    reason: "test".into(),
                })
                .collect(),
            notes: vec![],
        }
    }

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).expect("read").trim().to_string()
    }

    #[test]
    fn start_time_from_a_stat_line_with_a_hostile_comm() {
        let line = "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 3 1 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        assert_eq!(parse_start_time(line), Some(987654));
        assert_eq!(parse_start_time("42 (x) S 1"), None);
    }

    #[test]
    fn irq_affinity_journaled_set_and_restored() {
        let r = TempRoot::new("irq");
        let f = r.file("proc/irq/30/smp_affinity_list", "0-3\n");
        let mut a = Actuator::new(&r.0, &r.state());
        let rep = a.apply(
            &plan(vec![Action::SetIrqAffinity {
                irq: 30,
                cpus: CpuSet::single(1),
            }]),
            false,
        );
        assert_eq!(rep[0].outcome, Outcome::Done);
        assert_eq!(read(&f), "1");
        let j = Journal::load(&r.state()).expect("journal");
        assert_eq!(j.entries()[0].previous, "0-3");
        // Again: already so.
        let rep = a.apply(
            &plan(vec![Action::SetIrqAffinity {
                irq: 30,
                cpus: CpuSet::single(1),
            }]),
            false,
        );
        assert!(matches!(rep[0].outcome, Outcome::Skipped(_)));
        // Restore by action.
        let rep = a.apply(&plan(vec![Action::RestoreIrq { irq: 30 }]), false);
        assert_eq!(rep[0].outcome, Outcome::Done);
        assert_eq!(read(&f), "0-3");
        assert!(Journal::load(&r.state()).expect("journal").is_empty());
    }

    #[test]
    fn rps_mask_set_and_restored_by_restore_all() {
        let r = TempRoot::new("rps");
        let f = r.file("sys/class/net/veth0/queues/rx-0/rps_cpus", "0\n");
        let mut a = Actuator::new(&r.0, &r.state());
        let rep = a.apply(
            &plan(vec![Action::SetRps {
                dev: "veth0".into(),
                queue: "rx-0".into(),
                cpus: CpuSet::single(1),
            }]),
            false,
        );
        assert_eq!(rep[0].outcome, Outcome::Done);
        assert_eq!(
            CpuSet::parse_mask(&read(&f)).expect("mask"),
            CpuSet::single(1)
        );
        // A new actuator (as after a crash) restores from the file alone.
        let mut b = Actuator::new(&r.0, &r.state());
        let res = b.restore_all().expect("restore");
        assert_eq!(res.len(), 1);
        assert_eq!(res[0].1, Restored::Restored);
        assert_eq!(read(&f), "0");
        assert!(Journal::load(&r.state()).expect("journal").is_empty());
    }

    #[test]
    fn knob_changed_by_someone_else_is_left_alone_on_restore() {
        let r = TempRoot::new("lease");
        let f = r.file("proc/irq/31/smp_affinity_list", "0-3\n");
        let mut a = Actuator::new(&r.0, &r.state());
        a.apply(
            &plan(vec![Action::SetIrqAffinity {
                irq: 31,
                cpus: CpuSet::single(2),
            }]),
            false,
        );
        std::fs::write(&f, "3\n").expect("irqbalance moves it");
        let res = a.restore_all().expect("restore");
        assert!(
            matches!(res[0].1, Restored::ChangedElsewhere(_)),
            "{:?}",
            res[0].1
        );
        assert_eq!(read(&f), "3");
        assert!(Journal::load(&r.state()).expect("journal").is_empty());
    }

    #[test]
    fn dry_run_changes_nothing_not_even_the_journal() {
        let r = TempRoot::new("dry");
        let f = r.file("proc/irq/30/smp_affinity_list", "0-3\n");
        let mut a = Actuator::new(&r.0, &r.state());
        let rep = a.apply(
            &plan(vec![Action::SetIrqAffinity {
                irq: 30,
                cpus: CpuSet::single(1),
            }]),
            true,
        );
        match &rep[0].outcome {
            Outcome::Skipped(s) => assert!(s.contains("dry run"), "{s}"),
            o => panic!("{o:?}"),
        }
        assert_eq!(read(&f), "0-3");
        assert!(!r.state().exists());
    }

    #[test]
    fn missing_knob_is_permanent_and_leaves_no_journal_entry() {
        let r = TempRoot::new("missing");
        let mut a = Actuator::new(&r.0, &r.state());
        let rep = a.apply(
            &plan(vec![Action::SetIrqAffinity {
                irq: 99,
                cpus: CpuSet::single(1),
            }]),
            false,
        );
        assert!(
            matches!(rep[0].outcome, Outcome::Permanent(_)),
            "{:?}",
            rep[0].outcome
        );
        assert!(Journal::load(&r.state()).expect("journal").is_empty());
        let rep = a.apply(
            &plan(vec![Action::CapFrequency {
                domain: 0,
                max_khz: 1,
            }]),
            false,
        );
        // The cpufreq handler finds no policy0 under this root.
        assert!(matches!(&rep[0].outcome, Outcome::Permanent(_)));
    }

    #[test]
    fn unwritable_state_dir_changes_nothing() {
        let r = TempRoot::new("nostate");
        let f = r.file("proc/irq/30/smp_affinity_list", "0-3\n");
        // A file where the state directory should be.
        let state = r.file("state", "");
        let mut a = Actuator::new(&r.0, &state);
        let rep = a.apply(
            &plan(vec![Action::SetIrqAffinity {
                irq: 30,
                cpus: CpuSet::single(1),
            }]),
            false,
        );
        assert!(
            matches!(rep[0].outcome, Outcome::Transient(_)),
            "{:?}",
            rep[0].outcome
        );
        assert_eq!(read(&f), "0-3");
    }

    fn spawn_threads(n: u32) -> Option<Kid> {
        // A process with n extra threads that sleep.
        let code = format!(
            "import threading,time\nfor _ in range({n}): threading.Thread(target=time.sleep,args=(60,),daemon=True).start()\ntime.sleep(60)\n"
        );
        let c = Command::new("python3").arg("-c").arg(code).spawn().ok()?;
        let kid = Kid(c);
        let pid = kid.0.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while task_ids(Path::new("/"), pid).map_or(0, |t| t.len()) < n as usize + 1 {
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Some(kid)
    }

    fn can_pin() -> Option<CpuSet> {
        let mine = get_affinity(std::process::id()).ok()?;
        (mine.len() >= 2).then_some(mine)
    }

    /// Issue 17: an app that pinned some threads itself gets their own masks back, and a
    /// restore interrupted part-way (some threads back, as after a SIGKILL) or a `taskset
    /// -p` of the main thread only leaves nothing pinned after the next restore.
    #[test]
    fn restore_is_per_thread_repeatable_and_keeps_self_pinned_masks() {
        let Some(all) = can_pin() else {
            placer_testkit::skip("needs 2 allowed CPUs");
            return;
        };
        let first = all.iter().next().expect("cpu");
        let last = all.last().expect("cpu");
        // 20 threads; the first pins itself to `first` before placer sees the process.
        let code = format!(
            "import os,threading,time\n\
             def own():\n    os.sched_setaffinity(threading.get_native_id(), {{{first}}})\n    time.sleep(60)\n\
             threading.Thread(target=own,daemon=True).start()\n\
             for _ in range(19): threading.Thread(target=time.sleep,args=(60,),daemon=True).start()\n\
             time.sleep(60)\n"
        );
        let Ok(c) = Command::new("python3").arg("-c").arg(code).spawn() else {
            placer_testkit::skip("python3 not available");
            return;
        };
        let kid = Kid(c);
        let pid = kid.0.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let own_tid = loop {
            let tids = task_ids(Path::new("/"), pid).unwrap_or_default();
            let own = tids
                .iter()
                .copied()
                .find(|&t| get_affinity(t).is_ok_and(|a| a == CpuSet::single(first)));
            if let (true, Some(own)) = (tids.len() >= 21, own) {
                break own;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "threads did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let root = TempRoot::new("perthread");
        let k = ProcKey {
            pid,
            start_time_ticks: start_time_ticks(Path::new("/"), pid).expect("start"),
        };
        let target = CpuSet::single(last);
        let restore_once = |a: &mut Actuator| {
            a.apply(
                &plan(vec![Action::RestoreProcess {
                    proc: k,
                    comm: "py".into(),
                }]),
                false,
            )[0]
            .outcome
            .clone()
        };
        let check_all_back = || {
            for tid in task_ids(Path::new("/"), pid).expect("tasks") {
                let want = if tid == own_tid {
                    CpuSet::single(first)
                } else {
                    all.clone()
                };
                assert_eq!(get_affinity(tid).expect("aff"), want, "thread {tid}");
            }
        };
        for interruption in ["half the threads back", "main thread only (taskset -p)"] {
            let mut a = Actuator::new(Path::new("/"), &root.state());
            let rep = a.apply(
                &plan(vec![Action::PinProcess {
                    proc: k,
                    comm: "py".into(),
                    cpus: target.clone(),
                }]),
                false,
            );
            assert_eq!(rep[0].outcome, Outcome::Done, "{interruption}");
            let tids = task_ids(Path::new("/"), pid).expect("tasks");
            if interruption.starts_with("half") {
                for &t in tids.iter().filter(|&&t| t != pid).take(tids.len() / 2) {
                    let back = if t == own_tid {
                        CpuSet::single(first)
                    } else {
                        all.clone()
                    };
                    set_affinity(t, &back).expect("partial restore");
                }
            } else {
                set_affinity(pid, &all).expect("taskset -p");
            }
            assert_eq!(restore_once(&mut a), Outcome::Done, "{interruption}");
            check_all_back();
            assert!(Journal::load(&root.state()).expect("j").is_empty());
        }
    }

    #[test]
    fn process_pinned_on_every_thread_and_restored() {
        let Some(all) = can_pin() else {
            placer_testkit::skip("needs 2 allowed CPUs");
            return;
        };
        let Some(kid) = spawn_threads(3) else {
            placer_testkit::skip("python3 with threads not available");
            return;
        };
        let pid = kid.0.id();
        let root = TempRoot::new("proc");
        let k = ProcKey {
            pid,
            start_time_ticks: start_time_ticks(Path::new("/"), pid).expect("start"),
        };
        let target = CpuSet::single(all.last().expect("cpu"));
        let mut a = Actuator::new(Path::new("/"), &root.state());
        let rep = a.apply(
            &plan(vec![Action::PinProcess {
                proc: k,
                comm: "py".into(),
                cpus: target.clone(),
            }]),
            false,
        );
        assert_eq!(rep[0].outcome, Outcome::Done);
        for tid in task_ids(Path::new("/"), pid).expect("tasks") {
            assert_eq!(get_affinity(tid).expect("aff"), target, "thread {tid}");
        }
        let e = Journal::load(&root.state()).expect("j").entries()[0].clone();
        assert_eq!(CpuSet::parse_list(&e.previous).expect("list"), all);
        // A thread appears later with another affinity (as if created mid-walk).
        let tids = task_ids(Path::new("/"), pid).expect("tasks");
        let last = *tids.last().expect("tid");
        set_affinity(last, &all).expect("unpin one thread");
        // It is a thread placer already saw: someone else changed it; maintain leaves it.
        assert_eq!(a.maintain(), 0);
        let rep = a.apply(
            &plan(vec![Action::RestoreProcess {
                proc: k,
                comm: "py".into(),
            }]),
            false,
        );
        assert_eq!(rep[0].outcome, Outcome::Done);
        for tid in task_ids(Path::new("/"), pid).expect("tasks") {
            assert_eq!(get_affinity(tid).expect("aff"), all, "thread {tid}");
        }
        assert!(Journal::load(&root.state()).expect("j").is_empty());
    }

    #[test]
    fn reused_pid_and_bad_cpus_are_permanent_and_touch_nothing() {
        let Some(all) = can_pin() else {
            placer_testkit::skip("needs 2 allowed CPUs");
            return;
        };
        let kid = Kid(Command::new("sleep").arg("30").spawn().expect("sleep"));
        let pid = kid.0.id();
        let st = start_time_ticks(Path::new("/"), pid).expect("start");
        let root = TempRoot::new("reuse");
        let mut a = Actuator::new(Path::new("/"), &root.state());
        let wrong = ProcKey {
            pid,
            start_time_ticks: st + 1,
        };
        let rep = a.apply(
            &plan(vec![Action::PinProcess {
                proc: wrong,
                comm: "s".into(),
                cpus: CpuSet::single(0),
            }]),
            false,
        );
        assert!(
            matches!(&rep[0].outcome, Outcome::Permanent(s) if s.contains("another process")),
            "{:?}",
            rep[0].outcome
        );
        let k = ProcKey {
            pid,
            start_time_ticks: st,
        };
        let rep = a.apply(
            &plan(vec![Action::PinProcess {
                proc: k,
                comm: "s".into(),
                cpus: CpuSet::single(1000),
            }]),
            false,
        );
        assert!(
            matches!(&rep[0].outcome, Outcome::Permanent(s) if s.contains("cpuset")),
            "{:?}",
            rep[0].outcome
        );
        assert_eq!(get_affinity(pid).expect("aff"), all);
        assert!(Journal::load(&root.state()).expect("j").is_empty());
    }

    #[test]
    fn process_moved_by_someone_else_is_not_restored_and_exited_is_gone() {
        let Some(all) = can_pin() else {
            placer_testkit::skip("needs 2 allowed CPUs");
            return;
        };
        let mut kid = Kid(Command::new("sleep").arg("30").spawn().expect("sleep"));
        let pid = kid.0.id();
        let k = ProcKey {
            pid,
            start_time_ticks: start_time_ticks(Path::new("/"), pid).expect("start"),
        };
        let root = TempRoot::new("moved");
        let mut a = Actuator::new(Path::new("/"), &root.state());
        let first = CpuSet::single(all.first().expect("cpu"));
        let second = CpuSet::single(all.last().expect("cpu"));
        a.apply(
            &plan(vec![Action::PinProcess {
                proc: k,
                comm: "s".into(),
                cpus: first,
            }]),
            false,
        );
        set_affinity(pid, &second).expect("someone else");
        let res = a.restore_all().expect("restore");
        assert!(
            matches!(res[0].1, Restored::ChangedElsewhere(_)),
            "{:?}",
            res[0].1
        );
        assert_eq!(get_affinity(pid).expect("aff"), second);
        // Pin again, then the process exits before restore.
        set_affinity(pid, &all).expect("reset");
        a.apply(
            &plan(vec![Action::PinProcess {
                proc: k,
                comm: "s".into(),
                cpus: second,
            }]),
            false,
        );
        let _ = kid.0.kill();
        let _ = kid.0.wait();
        let res = a.restore_all().expect("restore");
        assert!(matches!(res[0].1, Restored::Gone(_)), "{:?}", res[0].1);
        assert!(Journal::load(&root.state()).expect("j").is_empty());
    }
}
