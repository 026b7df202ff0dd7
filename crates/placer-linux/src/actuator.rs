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
//! Each knob kind has one handler ([`KnobHandler`]: applies the actions of its kinds and
//! restores their journal entries): process affinity, IRQ affinity, RPS (in `knobs/`),
//! cpufreq, tc and memory policy. [`Handlers::for_kind`] matches a [`KnobKind`] to its
//! handler exhaustively; the handler is given the planned action's policy for the journal.
//!
//! Process knobs act on the running kernel (syscalls by pid); `root` only locates /proc and
//! /sys, so IRQ and RPS handling can be tested on a writable temporary tree.

use crate::journal::{Entry, Journal, Knob, KnobKind};
pub use crate::knob::{classify, settle, Ctx, KnobHandler, Restored};
pub use crate::knobs::{irq::IrqHandler, proc_affinity::ProcAffinityHandler, rps::RpsHandler};
pub use crate::pid::{parse_start_time, start_time_ticks, task_ids};
// The affinity calls live in `sys`; re-exported for the binary and tests.
pub use crate::sys::{get_affinity, set_affinity};
use placer_core::plan::{ActionReport, Outcome, Plan};
use std::path::{Path, PathBuf};

/// The knob handlers, one per area; [`Handlers::for_kind`] is an exhaustive match, so a
/// knob kind (and so an action) added without a handler does not compile.
pub struct Handlers {
    pub proc_affinity: ProcAffinityHandler,
    pub irq: IrqHandler,
    pub rps: RpsHandler,
    pub cpufreq: crate::knobs::cpufreq::CpufreqHandler,
    pub tc: crate::knobs::tc::TcHandler,
    pub mem_policy: crate::knobs::membind::MemPolicyHandler,
}

impl Default for Handlers {
    fn default() -> Self {
        Handlers::builtin()
    }
}

impl Handlers {
    pub fn builtin() -> Handlers {
        Handlers {
            proc_affinity: ProcAffinityHandler::default(),
            irq: IrqHandler,
            rps: RpsHandler,
            cpufreq: crate::knobs::cpufreq::CpufreqHandler,
            tc: crate::knobs::tc::TcHandler {
                ctx: crate::knobs::tc::TcCtx::current(),
                ..Default::default()
            },
            mem_policy: crate::knobs::membind::MemPolicyHandler,
        }
    }

    /// The handler of `kind`.
    pub fn for_kind(&mut self, kind: KnobKind) -> &mut dyn KnobHandler {
        match kind {
            KnobKind::ProcAffinity => &mut self.proc_affinity,
            KnobKind::IrqAffinity => &mut self.irq,
            KnobKind::Rps => &mut self.rps,
            KnobKind::CpufreqMax | KnobKind::CpufreqGovernor => &mut self.cpufreq,
            KnobKind::TcQdisc => &mut self.tc,
            KnobKind::MemPolicy => &mut self.mem_policy,
        }
    }

    /// Every handler, for the per-cycle upkeep.
    fn all(&mut self) -> [&mut dyn KnobHandler; 6] {
        [
            &mut self.proc_affinity,
            &mut self.irq,
            &mut self.rps,
            &mut self.cpufreq,
            &mut self.tc,
            &mut self.mem_policy,
        ]
    }
}

/// Restores every journaled knob; settled entries leave the journal. Returns what happened
/// to each.
pub fn restore_all(
    root: &Path,
    journal: &mut Journal,
    handlers: &mut Handlers,
) -> Vec<(Entry, Restored)> {
    restore_where(root, journal, handlers, &|_| true)
}

/// [`restore_all`] for the entries `which` selects; the others stay journaled.
pub fn restore_where(
    root: &Path,
    journal: &mut Journal,
    handlers: &mut Handlers,
    which: &dyn Fn(&Entry) -> bool,
) -> Vec<(Entry, Restored)> {
    let mut out: Vec<(Entry, Restored)> = Vec::new();
    // Newest first: a knob changed twice by different actions is put back in reverse.
    let entries: Vec<Entry> = journal
        .entries()
        .iter()
        .rev()
        .filter(|e| which(e))
        .cloned()
        .collect();
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
        let r = handlers.for_kind(e.knob.kind()).restore(root, &e);
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
        self.restore_where(&|_| true)
    }

    /// Puts back the journaled knobs `which` selects.
    pub fn restore_where(
        &mut self,
        which: &dyn Fn(&Entry) -> bool,
    ) -> crate::Result<Vec<(Entry, Restored)>> {
        self.journal()?;
        let journal = self.journal.as_mut().expect("opened above");
        Ok(restore_where(
            &self.root,
            journal,
            &mut self.handlers,
            which,
        ))
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
            .all()
            .into_iter()
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
            let outcome = self
                .handlers
                .for_kind(KnobKind::of(&pa.action))
                .apply(&mut ctx, &pa.action, pa.policy);
            out.push(ActionReport {
                planned: pa.clone(),
                outcome,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use placer_core::plan::Action;
    use placer_core::plan::PlannedAction;
    use placer_core::sample::ProcKey;
    use placer_core::CpuSet;
    use placer_testkit::proc::KillOnDrop as Kid;
    use placer_testkit::FakeRoot;
    use std::process::Command;

    fn plan(actions: Vec<Action>) -> Plan {
        Plan {
            actions: actions
                .into_iter()
                .map(|action| PlannedAction {
                    action,
                    policy: placer_core::policy_kind::PolicyKind::NetAffinity,
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
        let r = FakeRoot::new("act-irq");
        let f = r.write("proc/irq/30/smp_affinity_list", "0-3\n");
        let mut a = Actuator::new(r.path(), &r.join("state"));
        let rep = a.apply(
            &plan(vec![Action::SetIrqAffinity {
                irq: 30,
                cpus: CpuSet::single(1),
            }]),
            false,
        );
        assert_eq!(rep[0].outcome, Outcome::Done);
        assert_eq!(read(&f), "1");
        let j = Journal::load(&r.join("state")).expect("journal");
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
        assert!(Journal::load(&r.join("state")).expect("journal").is_empty());
    }

    #[test]
    fn rps_mask_set_and_restored_by_restore_all() {
        let r = FakeRoot::new("act-rps");
        let f = r.write("sys/class/net/veth0/queues/rx-0/rps_cpus", "0\n");
        let mut a = Actuator::new(r.path(), &r.join("state"));
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
        let mut b = Actuator::new(r.path(), &r.join("state"));
        let res = b.restore_all().expect("restore");
        assert_eq!(res.len(), 1);
        assert_eq!(res[0].1, Restored::Restored);
        assert_eq!(read(&f), "0");
        assert!(Journal::load(&r.join("state")).expect("journal").is_empty());
    }

    #[test]
    fn knob_changed_by_someone_else_is_left_alone_on_restore() {
        let r = FakeRoot::new("act-lease");
        let f = r.write("proc/irq/31/smp_affinity_list", "0-3\n");
        let mut a = Actuator::new(r.path(), &r.join("state"));
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
        assert!(Journal::load(&r.join("state")).expect("journal").is_empty());
    }

    #[test]
    fn dry_run_changes_nothing_not_even_the_journal() {
        let r = FakeRoot::new("act-dry");
        let f = r.write("proc/irq/30/smp_affinity_list", "0-3\n");
        let mut a = Actuator::new(r.path(), &r.join("state"));
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
        assert!(!r.join("state").exists());
    }

    #[test]
    fn missing_knob_is_permanent_and_leaves_no_journal_entry() {
        let r = FakeRoot::new("act-missing");
        let mut a = Actuator::new(r.path(), &r.join("state"));
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
        assert!(Journal::load(&r.join("state")).expect("journal").is_empty());
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
        let r = FakeRoot::new("act-nostate");
        let f = r.write("proc/irq/30/smp_affinity_list", "0-3\n");
        // A file where the state directory should be.
        let state = r.write("state", "");
        let mut a = Actuator::new(r.path(), &state);
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
        // Bounded, but long enough for python3 to start on a host busy with other work.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
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
        // As in spawn_threads: room for python3's start on a busy host.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
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
        let root = FakeRoot::new("act-perthread");
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
                    via: None,
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
            let mut a = Actuator::new(Path::new("/"), &root.join("state"));
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
            assert!(Journal::load(&root.join("state")).expect("j").is_empty());
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
        let root = FakeRoot::new("act-proc");
        let k = ProcKey {
            pid,
            start_time_ticks: start_time_ticks(Path::new("/"), pid).expect("start"),
        };
        let target = CpuSet::single(all.last().expect("cpu"));
        let mut a = Actuator::new(Path::new("/"), &root.join("state"));
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
        let e = Journal::load(&root.join("state")).expect("j").entries()[0].clone();
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
                via: None,
            }]),
            false,
        );
        assert_eq!(rep[0].outcome, Outcome::Done);
        for tid in task_ids(Path::new("/"), pid).expect("tasks") {
            assert_eq!(get_affinity(tid).expect("aff"), all, "thread {tid}");
        }
        assert!(Journal::load(&root.join("state")).expect("j").is_empty());
    }

    /// V12's host half: a restore through `via` puts a running thread on that CPU before
    /// widening its mask (the kernel keeps a running task where it is while its mask still
    /// holds that CPU), then the mask is the one it had; the journal is empty after.
    #[test]
    fn a_restore_via_a_cpu_puts_the_running_process_there_then_widens() {
        let Some(all) = can_pin() else {
            placer_testkit::skip("needs 2 allowed CPUs");
            return;
        };
        let (first, last) = (all.first().expect("cpu"), all.last().expect("cpu"));
        let kid = Kid(Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("spinner"));
        let pid = kid.0.id();
        let k = ProcKey {
            pid,
            start_time_ticks: start_time_ticks(Path::new("/"), pid).expect("start"),
        };
        let root = FakeRoot::new("act-via");
        let mut a = Actuator::new(Path::new("/"), &root.join("state"));
        let ran_on = || {
            let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
            crate::procfs::parse_pid_stat(&text).and_then(|s| s.last_cpu)
        };
        let mut there = 0;
        for _ in 0..5 {
            let rep = a.apply(
                &plan(vec![Action::PinProcess {
                    proc: k,
                    comm: "sh".into(),
                    cpus: CpuSet::single(last),
                }]),
                false,
            );
            assert_eq!(rep[0].outcome, Outcome::Done);
            std::thread::sleep(std::time::Duration::from_millis(20));
            let rep = a.apply(
                &plan(vec![Action::RestoreProcess {
                    proc: k,
                    comm: "sh".into(),
                    via: Some(CpuSet::single(first)),
                }]),
                false,
            );
            assert_eq!(rep[0].outcome, Outcome::Done);
            there += usize::from(ran_on() == Some(first));
            assert_eq!(get_affinity(pid).expect("aff"), all);
            assert!(Journal::load(&root.join("state")).expect("j").is_empty());
        }
        // A balancer may move it in the instant before the look, rarely.
        assert!(
            there >= 4,
            "on CPU {first} right after {there} of 5 restores"
        );
    }

    /// A daemon killed between a restore's two steps (its threads put on `via`, not yet
    /// widened) left a mask the next start's restore knows as placer's: the journal has it
    /// as the entry's transit, and the thread gets its own affinity back.
    #[test]
    fn a_restore_killed_on_its_way_through_via_is_finished_by_the_next_restore() {
        let Some(all) = can_pin() else {
            placer_testkit::skip("needs 2 allowed CPUs");
            return;
        };
        let (first, last) = (all.first().expect("cpu"), all.last().expect("cpu"));
        let kid = Kid(Command::new("sleep").arg("30").spawn().expect("sleep"));
        let pid = kid.0.id();
        let k = ProcKey {
            pid,
            start_time_ticks: start_time_ticks(Path::new("/"), pid).expect("start"),
        };
        let root = FakeRoot::new("act-transit");
        let mut a = Actuator::new(Path::new("/"), &root.join("state"));
        let rep = a.apply(
            &plan(vec![Action::PinProcess {
                proc: k,
                comm: "sleep".into(),
                cpus: CpuSet::single(last),
            }]),
            false,
        );
        assert_eq!(rep[0].outcome, Outcome::Done);
        // What the off arm does before it dies: the transit journaled, the thread on it.
        let via = CpuSet::single(first);
        let knob = Knob::ProcAffinity {
            pid,
            start_time_ticks: k.start_time_ticks,
        };
        let mut j = Journal::open(&root.join("state")).expect("journal");
        j.set_transit(&knob, &via.to_list_string())
            .expect("transit");
        set_affinity(pid, &via).expect("on via");
        drop(a);
        // The next daemon's start.
        let mut a = Actuator::new(Path::new("/"), &root.join("state"));
        let res = a.restore_all().expect("restore");
        assert!(res.iter().all(|(_, r)| *r == Restored::Restored), "{res:?}");
        assert_eq!(get_affinity(pid).expect("aff"), all);
        assert!(Journal::load(&root.join("state")).expect("j").is_empty());
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
        let root = FakeRoot::new("act-reuse");
        let mut a = Actuator::new(Path::new("/"), &root.join("state"));
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
        assert!(Journal::load(&root.join("state")).expect("j").is_empty());
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
        let root = FakeRoot::new("act-moved");
        let mut a = Actuator::new(Path::new("/"), &root.join("state"));
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
        assert!(Journal::load(&root.join("state")).expect("j").is_empty());
    }
    /// Issue 36: the RPS restorer itself (whatever the journal says) refuses a device name
    /// with `..` or `/`, a symbolic link as the knob file, and a `previous` that is not a
    /// mask; nothing is written.
    #[test]
    fn crafted_rps_entries_write_nothing() {
        let r = FakeRoot::new("act-rps-crafted");
        let outside = r.write("outside/queues/rx-0/rps_cpus", "1\n");
        let f = r.write("sys/class/net/eth0/queues/rx-0/rps_cpus", "1\n");
        let target = r.write("target", "1\n");
        std::fs::create_dir_all(r.join("sys/class/net/evil/queues/rx-0")).unwrap();
        std::os::unix::fs::symlink(&target, r.join("sys/class/net/evil/queues/rx-0/rps_cpus"))
            .unwrap();
        let entry = |dev: &str, previous: &str| Entry {
            knob: Knob::Rps {
                dev: dev.into(),
                queue: "rx-0".into(),
            },
            previous: previous.into(),
            applied: "1".into(),
            label: String::new(),
            since_unix_s: 0,
            thread_previous: Default::default(),
            transit: None,
        };
        let mut h = RpsHandler;
        for e in [
            entry("../../../outside", "3"),
            entry("eth0/../../../../outside", "3"),
            entry("evil", "3"),
            entry("eth0", "hello world"),
            entry("eth0", "3\nanything"),
        ] {
            let got = crate::knob::KnobHandler::restore(&mut h, r.path(), &e);
            assert!(!got.settled(), "{e:?}: {got:?}");
        }
        for p in [&outside, &f, &target] {
            assert_eq!(read(p), "1", "{} written", p.display());
        }
        let ok = crate::knob::KnobHandler::restore(&mut h, r.path(), &entry("eth0", "3"));
        assert_eq!(ok, Restored::Restored);
        assert_eq!(read(&f), "3");
    }
    /// Issue 36: a thread that sets its own affinity after placer pinned its process is a
    /// lease break for that thread: a later pin (the policy repeating its plan), the
    /// per-cycle upkeep and the restore all leave its mask as it set it.
    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn a_thread_that_pins_itself_late_keeps_its_mask() {
        placer_testkit::require_root();
        let Some(all) = can_pin() else {
            placer_testkit::skip("needs 2 allowed CPUs");
            return;
        };
        let (first, last) = (all.iter().next().expect("cpu"), all.last().expect("cpu"));
        let Some(kid) = spawn_threads(4) else {
            placer_testkit::skip("python3 not available");
            return;
        };
        let pid = kid.0.id();
        let k = ProcKey {
            pid,
            start_time_ticks: start_time_ticks(Path::new("/"), pid).expect("start"),
        };
        let root = FakeRoot::new("act-latepin");
        let mut a = Actuator::new(Path::new("/"), &root.join("state"));
        let pin = |a: &mut Actuator| {
            a.apply(
                &plan(vec![Action::PinProcess {
                    proc: k,
                    comm: "py".into(),
                    cpus: CpuSet::single(last),
                }]),
                false,
            )[0]
            .outcome
            .clone()
        };
        assert_eq!(pin(&mut a), Outcome::Done);
        let own = *task_ids(Path::new("/"), pid)
            .expect("tasks")
            .iter()
            .find(|&&t| t != pid)
            .expect("a thread");
        set_affinity(own, &CpuSet::single(first)).expect("the thread pins itself");
        let again = pin(&mut a);
        assert!(matches!(again, Outcome::Skipped(_)), "{again:?}");
        a.maintain();
        assert_eq!(get_affinity(own).expect("aff"), CpuSet::single(first));
        let res = a.restore_all().expect("restore");
        assert!(res.iter().all(|(_, r)| r.settled()), "{res:?}");
        for tid in task_ids(Path::new("/"), pid).expect("tasks") {
            let want = if tid == own {
                CpuSet::single(first)
            } else {
                all.clone()
            };
            assert_eq!(get_affinity(tid).expect("aff"), want, "thread {tid}");
        }
    }

    /// A python3 child running `code` with piped stdin and stdout, its key, and an actuator
    /// (state under `root`) that pinned it to CPU `cpu`; None without python3.
    fn pinned_python(code: &str, root: &FakeRoot, cpu: u32) -> Option<(Kid, ProcKey, Actuator)> {
        let child = Command::new("python3")
            .arg("-c")
            .arg(code)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        let kid = Kid(child);
        let pid = kid.0.id();
        let k = ProcKey {
            pid,
            start_time_ticks: start_time_ticks(Path::new("/"), pid).expect("start"),
        };
        let mut a = Actuator::new(Path::new("/"), &root.join("state"));
        let rep = a.apply(
            &plan(vec![Action::PinProcess {
                proc: k,
                comm: "py".into(),
                cpus: CpuSet::single(cpu),
            }]),
            false,
        );
        assert_eq!(rep[0].outcome, Outcome::Done);
        Some((kid, k, a))
    }

    /// Issue 48: threads created after the pin that set their own affinity, one to a CPU
    /// of its own and one back to the whole machine (the mask placer replaced), keep it:
    /// the per-cycle upkeep does not re-pin them and the restore leaves them as they are.
    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn a_thread_created_after_the_pin_keeps_the_mask_it_sets_itself() {
        use std::io::{BufRead, Write};
        placer_testkit::require_root();
        let Some(all) = can_pin() else {
            placer_testkit::skip("needs 2 allowed CPUs");
            return;
        };
        let (first, last) = (all.iter().next().expect("cpu"), all.last().expect("cpu"));
        // Each line on stdin names a CPU list; a new thread sets it as its own mask and
        // prints its tid.
        let code = "import os,sys,threading,time\n\
def own(cpus):\n    os.sched_setaffinity(0, cpus)\n    print(threading.get_native_id(), flush=True)\n    time.sleep(60)\n\
for line in sys.stdin:\n    cpus = {int(c) for c in line.split()}\n    threading.Thread(target=own, args=(cpus,), daemon=True).start()\n";
        let root = FakeRoot::new("act-latethread");
        let Some((mut kid, k, mut a)) = pinned_python(code, &root, last) else {
            placer_testkit::skip("python3 not available");
            return;
        };
        let pid = k.pid;
        // Later than the pin's clock tick, so the threads cannot have raced it.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut stdin = kid.0.stdin.take().expect("stdin");
        let mut out = std::io::BufReader::new(kid.0.stdout.take().expect("stdout"));
        let mut late = Vec::new();
        for want in [CpuSet::single(first), all.clone()] {
            let list: Vec<String> = want.iter().map(|c| c.to_string()).collect();
            writeln!(stdin, "{}", list.join(" ")).expect("ask for a thread");
            let mut line = String::new();
            out.read_line(&mut line).expect("its tid");
            let tid: u32 = line.trim().parse().expect("a tid");
            assert_eq!(get_affinity(tid).expect("aff"), want);
            late.push((tid, want));
        }
        a.maintain();
        for (tid, want) in &late {
            assert_eq!(
                &get_affinity(*tid).expect("aff"),
                want,
                "thread {tid} re-pinned"
            );
        }
        let res = a.restore_all().expect("restore");
        assert!(res.iter().all(|(_, r)| r.settled()), "{res:?}");
        assert_eq!(get_affinity(pid).expect("aff"), all, "main thread restored");
        for (tid, want) in &late {
            assert_eq!(
                &get_affinity(*tid).expect("aff"),
                want,
                "thread {tid} after restore"
            );
        }
    }

    /// Issue 48: a pinned process that renames itself to bytes that are not UTF-8 is the
    /// same process (pid and start time) and is restored, not pruned as exited.
    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn a_process_renamed_to_bytes_that_are_not_utf8_is_restored() {
        placer_testkit::require_root();
        let Some(all) = can_pin() else {
            placer_testkit::skip("needs 2 allowed CPUs");
            return;
        };
        let last = all.last().expect("cpu");
        // PR_SET_NAME (15) with invalid UTF-8, once stdin has a line; then it sleeps.
        let code = "import ctypes,sys,time\nsys.stdin.readline()\n\
ctypes.CDLL(None).prctl(15, ctypes.c_char_p(b'rx\\xff\\xfe\\x80'), 0, 0, 0)\n\
print('renamed', flush=True)\ntime.sleep(60)\n";
        let root = FakeRoot::new("act-rename");
        let Some((mut kid, k, mut a)) = pinned_python(code, &root, last) else {
            placer_testkit::skip("python3 not available");
            return;
        };
        let pid = k.pid;
        {
            use std::io::{BufRead, Write};
            let mut stdin = kid.0.stdin.take().expect("stdin");
            writeln!(stdin).expect("rename now");
            let mut line = String::new();
            std::io::BufReader::new(kid.0.stdout.take().expect("stdout"))
                .read_line(&mut line)
                .expect("renamed");
            assert_eq!(line.trim(), "renamed");
        }
        let comm = std::fs::read(format!("/proc/{pid}/comm")).expect("comm");
        assert!(std::str::from_utf8(&comm).is_err(), "{comm:?}");
        assert_eq!(
            start_time_ticks(Path::new("/"), pid),
            Some(k.start_time_ticks)
        );
        let res = a.restore_all().expect("restore");
        assert!(res.iter().all(|(_, r)| *r == Restored::Restored), "{res:?}");
        for tid in task_ids(Path::new("/"), pid).expect("tasks") {
            assert_eq!(get_affinity(tid).expect("aff"), all, "thread {tid}");
        }
    }
}
