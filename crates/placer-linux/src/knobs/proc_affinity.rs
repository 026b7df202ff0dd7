//! Process affinity: pins every thread of a process (walking its task list until no new
//! thread shows up), journals each thread's own previous mask where it differs, fixes
//! threads created since at every cycle, and restores only threads still on what placer set.

use crate::journal::{Entry, Knob};
use crate::knob::{classify, settle, Ctx, KnobHandler, Restored};
use crate::pid::{start_time_ticks, task_ids, thread_start_ticks};
use crate::sys::{get_affinity, set_affinity};
use placer_core::plan::{Action, Outcome};
use placer_core::policy_kind::PolicyKind;
use placer_core::sample::ProcKey;
use placer_core::CpuSet;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

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
    transit: Option<&CpuSet>,
    via: Option<&CpuSet>,
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
                // On placer's pin, or on the mask a restore through `via` was moving it
                // through when a daemon died (journaled first: `Entry::transit`).
                Ok(cur) if &cur == applied || Some(&cur) == transit => {
                    let want = target(tid);
                    // Through `via` first: a mask that still holds the thread's CPU does
                    // not move it, and the kernel would keep it where the pin put it.
                    if let Some(v) = via.filter(|v| v.is_subset(&want)) {
                        let _ = set_affinity(tid, v);
                    }
                    match set_affinity(tid, &want) {
                        Ok(()) => restored += 1,
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                        Err(e) => {
                            return Restored::Failed(format!(
                                "restoring thread {tid} of pid {} to {want}: {e}",
                                k.pid
                            ));
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
    /// When placer last finished pinning each held process (clock ticks since boot).
    pinned_at: BTreeMap<ProcKey, u64>,
}

impl ProcAffinityHandler {
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
        self.pinned_at.insert(k, crate::pid::now_ticks());
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
        // Already pinned by placer: a thread no longer on what placer set moved itself (or
        // was moved) since. That is a lease break for that thread: it keeps its mask, now
        // and on restore, and only the threads still on placer's value move.
        let held: Option<CpuSet> = ctx
            .entry(&proc_knob(k))
            .and_then(|e| CpuSet::parse_list(&e.applied).ok());
        let released = |a: &CpuSet| held.as_ref().is_some_and(|h| a != h);
        let all_there = tids
            .iter()
            .all(|t| get_affinity(*t).map_or(true, |a| &a == cpus || released(&a)));
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
        // Threads the app placed itself before placer get their own value back on restore.
        let threads: BTreeMap<u32, String> = if held.is_some() {
            BTreeMap::new()
        } else {
            tids.iter()
                .filter_map(|&t| {
                    let a = get_affinity(t).ok()?;
                    (a != cur).then(|| (t, a.to_list_string()))
                })
                .collect()
        };
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
        match self.set_all(ctx.root, k, cpus, held.as_ref()) {
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

    /// `via`: CPUs each thread is put on first (V12 in `placer_core::verifier`); it must
    /// already be journaled as the entry's transit mask.
    fn restore_proc(
        &mut self,
        root: &Path,
        k: ProcKey,
        e: &Entry,
        via: Option<&CpuSet>,
    ) -> Restored {
        if let Err(why) = same_process(root, k) {
            self.known.remove(&k);
            self.pinned_at.remove(&k);
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
        let transit = e
            .transit
            .as_deref()
            .and_then(|t| CpuSet::parse_list(t).ok());
        let r = restore_threads(
            root,
            k,
            &prev,
            &applied,
            &e.thread_previous,
            transit.as_ref().or(via),
            via,
        );
        self.known.remove(&k);
        self.pinned_at.remove(&k);
        r
    }

    /// Pins threads of journaled processes that appeared since with the mask placer's pin
    /// replaced: a thread cloned while the pin walked its siblings, by one not pinned yet.
    /// Any other mask is the thread's own choice (a thread cloned after the pin starts on
    /// placer's mask and set its own since, or was cloned by a thread that did), and the
    /// thread is left alone for good, as a process that sets its own affinity is.
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
                self.pinned_at.remove(&k);
                continue;
            }
            let Ok(applied) = CpuSet::parse_list(&e.applied) else {
                continue;
            };
            // Someone else moved the process since (lease broken): its threads are theirs.
            if get_affinity(pid).map_or(true, |a| a != applied) {
                self.known.remove(&k);
                self.pinned_at.remove(&k);
                continue;
            }
            let Ok(tids) = task_ids(root, pid) else {
                continue;
            };
            let pinned_at = self.pinned_at.get(&k).copied();
            let known = self.known.entry(k).or_default();
            for tid in tids {
                if !known.insert(tid) {
                    continue;
                }
                let Ok(mask) = get_affinity(tid) else {
                    continue;
                };
                if mask == applied {
                    continue;
                }
                // Only a thread started before the pin ended can have missed it, and then
                // it holds what its creator had before: the process's or a thread's own
                // previous mask. (Start times count whole ticks: one started in the pin's
                // own tick counts as before.)
                let raced = match (pinned_at, thread_start_ticks(root, pid, tid)) {
                    (Some(at), Some(started)) => started <= at,
                    _ => true,
                };
                let old_mask = mask.to_list_string();
                let inherited = CpuSet::parse_list(&e.previous).is_ok_and(|p| p == mask)
                    || e.thread_previous.values().any(|v| *v == old_mask);
                if raced && inherited && set_affinity(tid, &applied).is_ok() {
                    fixed += 1;
                }
            }
        }
        fixed
    }
}

impl KnobHandler for ProcAffinityHandler {
    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action, _policy: PolicyKind) -> Outcome {
        let dry_run = ctx.dry_run();
        match action {
            Action::PinProcess { proc, comm, cpus } => self.pin(ctx, *proc, comm, cpus, dry_run),
            // `via` (V12 in `placer_core::verifier`): each thread is put on it, then
            // widened. Two steps: the mask is journaled first (`Entry::transit`), so that a
            // daemon killed between them leaves a mask the next restore knows as placer's
            // (without it the fault trials left 1-3 of 999 threads pinned, 2026-12-01).
            Action::RestoreProcess { proc, comm, via } => {
                let knob = proc_knob(*proc);
                let Some(e) = ctx.entry(&knob) else {
                    return Outcome::Skipped(format!(
                        "{comm} ({}): placer did not change it",
                        proc.pid
                    ));
                };
                if dry_run {
                    return Outcome::Skipped(format!(
                        "dry run: would restore {comm} ({}) to {}",
                        proc.pid, e.previous
                    ));
                }
                let via = via.as_ref().filter(|v| !v.is_empty());
                if let (Some(v), Some(j)) = (via, ctx.journal.as_deref_mut()) {
                    if let Err(err) = j.set_transit(&e.knob, &v.to_list_string()) {
                        return Outcome::Transient(format!("journal: {err}"));
                    }
                }
                settle(ctx, &e.knob, self.restore_proc(ctx.root, *proc, &e, via))
            }
            _ => crate::knob::not_mine("process affinity", action),
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
                None,
            ),
            _ => Restored::Failed("not a process affinity".into()),
        }
    }

    fn maintain(&mut self, root: &Path, entries: &[Entry]) -> usize {
        self.fix_new_threads(root, entries)
    }
}
