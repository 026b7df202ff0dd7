//! Moving another process's memory to a NUMA node, bounded in bytes per call (the
//! actuator side of `Action::BindMemory` / `Action::RestoreMemory`, seed 004).
//!
//! Why not simply bind: `set_mempolicy` and `mbind` act only on the calling process, so
//! placer cannot set another process's policy. What it can do:
//! - run the process on the target node's CPUs (a `PinProcess` from the policy), so the
//!   kernel's default local policy puts its *new* pages there (first touch);
//! - move its *existing* pages with `move_pages(pid, ...)`, a bounded number per interval:
//!   migration copies every page and stalls the process's accesses to it, so moving a
//!   large process in one `migrate_pages` call can freeze it for a long time.
//!
//! [`migrate_bounded`] scans the mappings that numa_maps says have pages off the target
//! node, asks the kernel where each page is (a `move_pages` status query, nodes = NULL),
//! and moves at most `max_bytes` of the off-target ones. [`snapshot`] records the pages per
//! node before the first move (the journal's previous value); [`restore`] moves the pages
//! back to the node that held most of them then, with one unbounded `migrate_pages` (done
//! at shutdown or `placer restore`, when a stall is the lesser evil).
//!
//! Invariants (tested): never more than `max_bytes` moved per call; pages already on the
//! target are never moved; an exited process is a `Proc` error naming the pid.

use crate::error::{LinuxError, Result};
use crate::journal::{Entry, Knob};
use crate::knob::{Ctx, KnobHandler, Restored};
use crate::numa_maps;
use placer_bufpool::numa as sys;
use placer_core::plan::{Action, Outcome};
use placer_core::policy_kind::PolicyKind;
use placer_core::sample::{main_page_node, ProcKey};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Pages asked about per `move_pages` query.
const QUERY_BATCH_PAGES: usize = 512;
/// Most pages scanned (queried) per call, so a huge process cannot make one cycle slow.
pub const MAX_SCAN_PAGES: u64 = 1 << 20;

/// The journal's record of a process's memory placement before placer moved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemRecord {
    pub pid: u32,
    pub start_time_ticks: u64,
    /// Resident base pages per node before the first move.
    pub before_pages: BTreeMap<u32, u64>,
    /// Nodes placer moved memory to.
    pub target: Vec<u32>,
}

impl MemRecord {
    /// The node that held most pages before (the one `restore` moves back to).
    pub fn previous_main_node(&self) -> Option<u32> {
        main_page_node(&self.before_pages)
    }
}

/// What one bounded migration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MigrateReport {
    pub scanned_pages: u64,
    /// Present pages found off the target node.
    pub off_target_pages: u64,
    pub moved_pages: u64,
    pub moved_bytes: u64,
    /// Pages the kernel would not move (pinned, shared, busy).
    pub failed_pages: u64,
    /// Stopped because `max_bytes` (or the scan cap) was reached; more may remain.
    pub bounded: bool,
}

/// Start and end of each mapping in /proc/PID/maps text.
pub fn parse_maps_ranges(text: &str) -> BTreeMap<u64, u64> {
    text.lines()
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect()
}

/// From a status query of `addrs`, the addresses on a node other than `target`, at most
/// `budget_pages` of them, in address order. Absent pages (negative status) are skipped.
pub fn pick_off_target(
    addrs: &[u64],
    status: &[std::result::Result<u32, i32>],
    target: u32,
    budget_pages: u64,
) -> Vec<u64> {
    addrs
        .iter()
        .zip(status)
        .filter(|(_, s)| matches!(s, Ok(n) if *n != target))
        .map(|(&a, _)| a)
        .take(usize::try_from(budget_pages).unwrap_or(usize::MAX))
        .collect()
}

/// The pages per node of `pid` now, as the record of its placement before placer moves it.
pub fn snapshot(
    root: &Path,
    pid: u32,
    start_time_ticks: u64,
    target: &[u32],
    base_page_bytes: u64,
) -> Result<MemRecord> {
    let before_pages = numa_maps::read(root, pid, base_page_bytes)?.ok_or(LinuxError::Proc {
        pid,
        message: "process gone (no numa_maps)".into(),
    })?;
    Ok(MemRecord {
        pid,
        start_time_ticks,
        before_pages,
        target: target.to_vec(),
    })
}

fn proc_err(pid: u32, what: &str, e: std::io::Error) -> LinuxError {
    LinuxError::Proc {
        pid,
        message: format!("{what}: {e}"),
    }
}

/// Moves at most `max_bytes` of `pid`'s resident pages that are not on `target` to it.
/// `root` locates /proc (the syscalls act on the live pid, so use `/` for real moves).
pub fn migrate_bounded(
    root: &Path,
    pid: u32,
    target: u32,
    max_bytes: u64,
) -> Result<MigrateReport> {
    let mut rep = MigrateReport::default();
    if max_bytes == 0 {
        return Ok(rep);
    }
    let read = |name: &str| {
        let path = root.join(format!("proc/{pid}/{name}"));
        std::fs::read_to_string(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => LinuxError::Proc {
                pid,
                message: "process gone".into(),
            },
            _ => LinuxError::io(path, e),
        })
    };
    let maps = numa_maps::parse(&read("numa_maps")?);
    let ranges = parse_maps_ranges(&read("maps")?);
    let mut budget_bytes = max_bytes;
    'mappings: for m in maps.iter().filter(|m| m.pages.keys().any(|&n| n != target)) {
        let Some(&end) = ranges.get(&m.start) else {
            continue; // the mapping changed between the two reads
        };
        let page = m.page_kb * 1024;
        let mut addr = m.start;
        while addr < end {
            if budget_bytes < page || rep.scanned_pages >= MAX_SCAN_PAGES {
                rep.bounded = true;
                break 'mappings;
            }
            let n = ((end - addr) / page).min(QUERY_BATCH_PAGES as u64);
            let addrs: Vec<u64> = (0..n).map(|i| addr + i * page).collect();
            addr += n * page;
            let ptrs: Vec<*const u8> = addrs.iter().map(|&a| a as *const u8).collect();
            let status =
                sys::page_nodes_of(pid, &ptrs).map_err(|e| proc_err(pid, "move_pages query", e))?;
            rep.scanned_pages += n;
            rep.off_target_pages += status
                .iter()
                .filter(|s| matches!(s, Ok(x) if *x != target))
                .count() as u64;
            let picked = pick_off_target(&addrs, &status, target, budget_bytes / page);
            if picked.is_empty() {
                continue;
            }
            let ptrs: Vec<*const u8> = picked.iter().map(|&a| a as *const u8).collect();
            let after = sys::move_pages_to(pid, &ptrs, target)
                .map_err(|e| proc_err(pid, "move_pages", e))?;
            let moved = after.iter().filter(|s| **s == Ok(target)).count() as u64;
            rep.moved_pages += moved;
            rep.failed_pages += picked.len() as u64 - moved;
            rep.moved_bytes += moved * page;
            // Failed pages still used the budget's time; count what was attempted.
            budget_bytes = budget_bytes.saturating_sub(picked.len() as u64 * page);
        }
    }
    Ok(rep)
}

/// Puts a process's memory back on the node that held most of it before placer moved it
/// (unbounded `migrate_pages`). Returns the pages that could not be moved; `Ok(0)` with
/// nothing done when the previous main node is a target (nothing to undo).
pub fn restore(rec: &MemRecord) -> Result<u64> {
    let Some(prev) = rec.previous_main_node() else {
        return Ok(0);
    };
    let from: Vec<u32> = rec.target.iter().copied().filter(|&n| n != prev).collect();
    if from.is_empty() {
        return Ok(0);
    }
    let to = vec![prev; from.len()];
    sys::migrate_pages(rec.pid, &from, &to).map_err(|e| proc_err(rec.pid, "migrate_pages", e))
}

// ---------------------------------------------------------------------------------------
// The actuator's handler for BindMemory / RestoreMemory, journaled as Knob::MemPolicy.

/// Applies `Action::BindMemory` (bounded migration to the first listed node) and restores
/// `mem_policy` journal entries. The journal's `previous` is the [`MemRecord`] (pages per
/// node before placer's first move) as JSON; `applied` is the target node list.
#[derive(Default)]
pub struct MemPolicyHandler;

fn mem_knob(pid: u32, start_time_ticks: u64) -> Knob {
    Knob::MemPolicy {
        pid,
        start_time_ticks,
    }
}

fn check_same(root: &Path, pid: u32, start: u64) -> std::result::Result<(), String> {
    match crate::pid::start_time_ticks(root, pid) {
        None => Err(format!("pid {pid} exited")),
        Some(t) if t != start => Err(format!("pid {pid} now names another process")),
        Some(_) => Ok(()),
    }
}

impl MemPolicyHandler {
    fn bind(
        &mut self,
        ctx: &mut Ctx<'_>,
        proc: ProcKey,
        nodes: &[u32],
        max_bytes: u64,
        policy: PolicyKind,
        dry_run: bool,
    ) -> Outcome {
        let Some(&target) = nodes.first() else {
            return Outcome::Permanent("bind_memory with no node".into());
        };
        if let Err(e) = check_same(ctx.root, proc.pid, proc.start_time_ticks) {
            return Outcome::Permanent(e);
        }
        if max_bytes == 0 {
            // set_mempolicy/mbind act only on the caller: another process's policy cannot
            // be set, only its pages moved and its CPUs chosen.
            return Outcome::Skipped(format!(
                "no migration asked; new pages of pid {} follow its CPUs (another process's memory policy cannot be set)",
                proc.pid
            ));
        }
        if dry_run {
            return Outcome::Skipped(format!(
                "dry run: would move up to {max_bytes} bytes of pid {} to node {target}",
                proc.pid
            ));
        }
        let knob = mem_knob(proc.pid, proc.start_time_ticks);
        let page = sys::page_bytes() as u64;
        let mut new_entry = false;
        if ctx.entry(&knob).is_none() {
            let rec = match snapshot(ctx.root, proc.pid, proc.start_time_ticks, nodes, page) {
                Ok(r) => r,
                Err(e) => return Outcome::Permanent(e.to_string()),
            };
            let prev = serde_json::to_string(&rec).unwrap_or_default();
            let applied = serde_json::to_string(nodes).unwrap_or_default();
            match ctx.journal.as_deref_mut() {
                Some(j) => match j.record(knob.clone(), &prev, &applied, policy.name()) {
                    Ok(n) => new_entry = n,
                    Err(e) => return Outcome::Transient(format!("journal: {e}")),
                },
                None => return Outcome::Transient("no journal open".into()),
            }
        }
        let result = migrate_bounded(ctx.root, proc.pid, target, max_bytes);
        let drop_entry = match &result {
            Ok(r) => r.moved_pages == 0 && new_entry,
            Err(_) => new_entry,
        };
        if drop_entry {
            if let Some(j) = ctx.journal.as_deref_mut() {
                let _ = j.remove(&knob);
            }
        }
        match result {
            Ok(r) if r.moved_pages > 0 => Outcome::Done,
            Ok(r) if r.off_target_pages == 0 => {
                Outcome::Skipped(format!("all scanned pages already on node {target}"))
            }
            Ok(r) => Outcome::Transient(format!(
                "{} pages off node {target}, none moved ({} refused by the kernel)",
                r.off_target_pages, r.failed_pages
            )),
            Err(LinuxError::Proc { message, .. }) if message.contains("gone") => {
                Outcome::Permanent(message)
            }
            Err(LinuxError::Proc { message, .. })
                if message.contains("Operation not permitted")
                    || message.contains("Permission denied") =>
            {
                Outcome::Permanent(format!("no permission: {message}"))
            }
            Err(e) => Outcome::Transient(e.to_string()),
        }
    }
}

impl KnobHandler for MemPolicyHandler {
    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action, policy: PolicyKind) -> Outcome {
        let dry_run = ctx.dry_run();
        match action {
            Action::BindMemory {
                proc,
                nodes,
                migrate_max_bytes,
            } => self.bind(ctx, *proc, nodes, *migrate_max_bytes, policy, dry_run),
            Action::RestoreMemory { proc } => {
                let knob = mem_knob(proc.pid, proc.start_time_ticks);
                let Some(entry) = ctx.entry(&knob) else {
                    return Outcome::Skipped("placer never moved its memory".into());
                };
                if dry_run {
                    return Outcome::Skipped(format!(
                        "dry run: would move pid {}'s pages back",
                        proc.pid
                    ));
                }
                let r = self.restore(ctx.root, &entry);
                if r.settled() {
                    if let Some(j) = ctx.journal.as_deref_mut() {
                        let _ = j.remove(&knob);
                    }
                }
                match r {
                    Restored::Restored => Outcome::Done,
                    Restored::Gone(m) | Restored::ChangedElsewhere(m) => Outcome::Skipped(m),
                    Restored::Failed(m) => Outcome::Transient(m),
                }
            }
            _ => crate::knob::not_mine("memory policy", action),
        }
    }

    fn restore(&mut self, root: &Path, entry: &Entry) -> Restored {
        let Knob::MemPolicy {
            pid,
            start_time_ticks,
        } = entry.knob
        else {
            return Restored::Failed("not a mem_policy entry".into());
        };
        if let Err(e) = check_same(root, pid, start_time_ticks) {
            return Restored::Gone(e);
        }
        let rec: MemRecord = match serde_json::from_str(&entry.previous) {
            Ok(r) => r,
            Err(e) => return Restored::Failed(format!("journal value unreadable: {e}")),
        };
        match restore(&rec) {
            Ok(0) => Restored::Restored,
            Ok(left) if residue_only(left, &rec) => {
                tracing::info!(
                    "pid {pid}: memory put back; {left} page(s) the kernel would not move \
                     stay where they are"
                );
                Restored::Restored
            }
            Ok(left) => Restored::Failed(format!("{left} pages could not be moved back")),
            Err(e) => Restored::Failed(e.to_string()),
        }
    }
}

/// Whether `left` pages that `migrate_pages` could not move back are only a residue: at
/// most 1% of the pages the process had when placer first moved it. A page the kernel
/// refuses to move (locked, pinned, shared) mostly stays refused, and an entry kept for it
/// would be retried, and refused, at every start (seen in the lab: 1 or 2 pages of 6,000).
fn residue_only(left: u64, rec: &MemRecord) -> bool {
    let total: u64 = rec.before_pages.values().sum();
    left.saturating_mul(100) <= total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_residue_of_unmovable_pages_still_restores_but_more_does_not() {
        let rec = MemRecord {
            pid: 1,
            start_time_ticks: 1,
            before_pages: BTreeMap::from([(0, 5000), (1, 1000)]),
            target: vec![1],
        };
        assert!(residue_only(0, &rec));
        assert!(residue_only(2, &rec));
        assert!(residue_only(60, &rec));
        assert!(!residue_only(61, &rec));
        let empty = MemRecord {
            before_pages: BTreeMap::new(),
            ..rec
        };
        assert!(!residue_only(1, &empty));
    }

    #[test]
    fn maps_ranges() {
        let t = "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/dbus-daemon\n\
                 7ffd2a1c3000-7ffd2a1e4000 rw-p 00000000 00:00 0 [stack]\n";
        let r = parse_maps_ranges(t);
        assert_eq!(r[&0x400000], 0x452000);
        assert_eq!(r[&0x7ffd2a1c3000], 0x7ffd2a1e4000);
    }

    #[test]
    fn picks_only_off_target_pages_within_budget() {
        let addrs = [0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000];
        let st = [Ok(0), Ok(1), Err(-libc::ENOENT), Ok(2), Ok(1), Ok(0)];
        assert_eq!(
            pick_off_target(&addrs, &st, 0, 10),
            vec![0x2000, 0x4000, 0x5000]
        );
        assert_eq!(pick_off_target(&addrs, &st, 0, 2), vec![0x2000, 0x4000]);
        assert!(pick_off_target(&addrs, &st, 0, 0).is_empty());
        // Pages already on the target are never picked.
        assert_eq!(
            pick_off_target(&addrs, &st, 1, 10),
            vec![0x1000, 0x4000, 0x6000]
        );
    }

    #[test]
    fn restoring_to_the_main_node_that_is_the_target_moves_nothing() {
        let rec = MemRecord {
            pid: 1,
            start_time_ticks: 1,
            before_pages: BTreeMap::from([(2, 100), (0, 3)]),
            target: vec![2],
        };
        // Previous main node is the target: restoring has nothing to undo.
        assert_eq!(restore(&rec).unwrap(), 0);
    }

    /// A child process whose pages are all on node 0 (the only node here): a bounded
    /// migration to node 0 scans but moves nothing; to a node that does not exist it
    /// moves nothing either and fails per page or as a whole, never silently succeeds.
    #[test]
    fn live_child_on_node_0() {
        use placer_testkit::proc::KillOnDrop as Kill;
        let child = match std::process::Command::new("sleep").arg("30").spawn() {
            Ok(c) => Kill(c),
            Err(e) => {
                placer_testkit::skip(&format!("cannot start sleep: {e}"));
                return;
            }
        };
        let pid = child.0.id();
        // Let it exec so its mappings are sleep's.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let rec = snapshot(Path::new("/"), pid, 0, &[0], 4096).unwrap();
        assert!(rec.before_pages.values().sum::<u64>() > 0);
        match migrate_bounded(Path::new("/"), pid, 0, 1 << 20) {
            Ok(rep) => {
                let only_node0 = rec.before_pages.keys().all(|&n| n == 0);
                if only_node0 {
                    assert_eq!(rep.moved_pages, 0);
                    assert_eq!(rep.off_target_pages, 0);
                }
                assert!(rep.moved_bytes <= 1 << 20);
            }
            Err(e) => {
                placer_testkit::skip(&format!("move_pages on a child not permitted here: {e}"))
            }
        }
        assert_eq!(
            migrate_bounded(Path::new("/"), pid, 0, 0).unwrap(),
            MigrateReport::default()
        );
    }

    #[test]
    fn gone_process_is_a_proc_error() {
        // Pid beyond pid_max never exists.
        match migrate_bounded(Path::new("/"), u32::MAX - 1, 0, 4096) {
            Err(LinuxError::Proc { pid, .. }) => assert_eq!(pid, u32::MAX - 1),
            other => panic!("expected a Proc error, got {other:?}"),
        }
    }

    fn one(action: Action) -> placer_core::plan::Plan {
        let mut p = placer_core::plan::Plan::default();
        p.push(PolicyKind::NumaLocal, action, "test");
        p
    }

    /// Through the actuator: a live child already on node 0 gets Skipped (nothing to
    /// move) and leaves no journal entry; a dry run and a zero budget change nothing; an
    /// exited process is Permanent; a journal entry of an exited process restores as gone.
    #[test]
    fn actuator_handles_bind_and_restore() {
        use placer_testkit::proc::KillOnDrop as Kill;
        let Ok(child) = std::process::Command::new("sleep").arg("30").spawn() else {
            placer_testkit::skip("cannot start sleep");
            return;
        };
        let child = Kill(child);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let pid = child.0.id();
        let root = Path::new("/");
        let start = crate::pid::start_time_ticks(root, pid).unwrap();
        let key = ProcKey {
            pid,
            start_time_ticks: start,
        };
        let tmp = placer_testkit::FakeRoot::new("membind-act");
        let dir = tmp.join("state");
        let mut act = crate::actuator::Actuator::new(root, &dir);
        let bind = |max| Action::BindMemory {
            proc: key,
            nodes: vec![0],
            migrate_max_bytes: max,
        };

        let r = act.apply(&one(bind(1 << 20)), true);
        assert!(
            matches!(&r[0].outcome, Outcome::Skipped(m) if m.contains("dry run")),
            "{r:?}"
        );
        let r = act.apply(&one(bind(0)), false);
        assert!(matches!(&r[0].outcome, Outcome::Skipped(_)), "{r:?}");
        let r = act.apply(&one(bind(1 << 20)), false);
        match &r[0].outcome {
            Outcome::Skipped(m) => assert!(m.contains("already on node 0"), "{m}"),
            Outcome::Permanent(m) if m.contains("permission") => {
                placer_testkit::skip(&format!("moving the child's pages: {m}"));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(
            act.journal().unwrap().is_empty(),
            "nothing moved, nothing journaled"
        );
        let r = act.apply(&one(Action::RestoreMemory { proc: key }), false);
        assert!(matches!(&r[0].outcome, Outcome::Skipped(_)), "{r:?}");

        let gone = ProcKey {
            pid,
            start_time_ticks: start + 1,
        };
        let r = act.apply(
            &one(Action::BindMemory {
                proc: gone,
                nodes: vec![0],
                migrate_max_bytes: 4096,
            }),
            false,
        );
        assert!(matches!(&r[0].outcome, Outcome::Permanent(_)), "{r:?}");

        // A journaled move of a process that has exited since: restore drops it as gone.
        let rec = MemRecord {
            pid,
            start_time_ticks: start + 1,
            before_pages: BTreeMap::from([(1, 10)]),
            target: vec![0],
        };
        act.journal()
            .unwrap()
            .record(
                Knob::MemPolicy {
                    pid,
                    start_time_ticks: start + 1,
                },
                &serde_json::to_string(&rec).unwrap(),
                "[0]",
                "test",
            )
            .unwrap();
        let out = act.restore_all().unwrap();
        assert_eq!(out.len(), 1);
        assert!(matches!(out[0].1, Restored::Gone(_)), "{out:?}");
        assert!(act.journal().unwrap().is_empty());
    }
}
