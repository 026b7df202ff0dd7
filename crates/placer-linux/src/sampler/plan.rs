//! What to re-read this cycle: the cache rules of the [sampler's doc](super) (the /proc
//! path's refresh, rules 1-7 of the kernel-events path, the socket dump's reuse) as pure
//! decisions on what earlier samples left and what the kernel's events say. Nothing here
//! reads a file, so every rule is tested on plain values.

use crate::bpf::ThreadCpu;
use crate::pid::{PidMap, PidSet};
use crate::proc_events::ProcEvent;
use placer_core::sample::{ExitedProc, ThreadSample};

/// With the eBPF collector: at most this many idle processes are re-read in full per
/// sample (a rotating window), so that the cost of a sample does not grow with the number
/// of processes that exist; see [`super::Sampler::set_refresh_every`].
pub const IDLE_REFRESH_BUDGET: usize = 32;
/// With the process-events connector: /proc is still listed this often (samples), as a
/// safety net for anything the events could not say.
pub const LIST_EVERY: u64 = 64;

/// Default of [`super::Sampler::set_refresh_every`].
pub const DEFAULT_REFRESH_EVERY: u64 = 8;

/// The process set of one sample (rule 2).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProcessSet {
    /// The pids to read, sorted; `None`: /proc must be listed (first sample, every
    /// [`LIST_EVERY`] samples, or the connector's events are unknown).
    pub pids: Option<Vec<u32>>,
    /// Forked in the interval (by the connector).
    pub born: PidSet,
    /// Exec'd in the interval: read again in full (rule 3).
    pub execd: PidSet,
    /// Exited in the interval (by the connector): their children were given another
    /// parent (rule 7).
    pub exits: PidSet,
}

/// Whether /proc is listed this sample although the connector's events are known.
pub fn listing_due(cache_empty: bool, sample_no: u64) -> bool {
    cache_empty || sample_no.is_multiple_of(LIST_EVERY)
}

/// Rule 2: the cached pids plus the connector's forks and execs, less its exits; the events
/// are taken in order, so a pid forked and gone in one interval is not read. Without the
/// connector, rule 9: when no task was created since the last listing (`none_created`),
/// the cached pids are the set (the ones gone fail their reads).
pub fn process_set(
    cached: impl Iterator<Item = u32>,
    events: Option<&[ProcEvent]>,
    listing_due: bool,
    none_created: bool,
) -> ProcessSet {
    let mut set = ProcessSet::default();
    let mut named: PidMap<bool> = PidMap::default();
    for e in events.unwrap_or_default() {
        match *e {
            ProcEvent::Fork { pid, .. } => {
                named.insert(pid, true);
                set.born.insert(pid);
            }
            ProcEvent::Exec { pid } => {
                named.insert(pid, true);
                set.execd.insert(pid);
            }
            ProcEvent::Exit { pid } => {
                named.insert(pid, false);
                set.exits.insert(pid);
            }
            ProcEvent::Other => {}
        }
    }
    if (events.is_some() || none_created) && !listing_due {
        let mut v: Vec<u32> = cached
            .filter(|p| named.get(p) != Some(&false))
            .chain(named.iter().filter(|(_, &there)| there).map(|(&p, _)| p))
            .collect();
        v.sort_unstable();
        v.dedup();
        set.pids = Some(v);
    }
    set
}

/// Rule 3's rotating window of idle processes to re-read in full.
#[derive(Debug, Default, Clone, Copy)]
pub struct RefreshWindow {
    /// Where the window stopped last time (a pid).
    cursor: u32,
}

impl RefreshWindow {
    /// The next window of at most [`IDLE_REFRESH_BUDGET`] of the sorted `pids` (about
    /// `1/refresh_every` of them) after the cursor, wrapping: every process in turn.
    pub fn next(&mut self, pids: &[u32], refresh_every: u64) -> PidSet {
        if pids.is_empty() {
            return PidSet::default();
        }
        let n = pids
            .len()
            .div_ceil(refresh_every.max(1) as usize)
            .clamp(1, IDLE_REFRESH_BUDGET);
        let start = pids.partition_point(|&p| p <= self.cursor);
        let window: PidSet = (0..n.min(pids.len()))
            .map(|i| pids[(start + i) % pids.len()])
            .collect();
        self.cursor = pids[(start + n - 1) % pids.len()];
        window
    }
}

/// What the kernel's events say of one process this sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcFacts {
    /// `None`: no collector word this sample; `Some(ran)`: whether it ran.
    pub ran: Option<bool>,
    /// In this sample's refresh window (rule 3).
    pub in_window: bool,
    /// Exec'd in the interval.
    pub execd: bool,
    /// Invalidated since the last sample ([`super::Sampler::invalidate`]).
    pub stale: bool,
    /// Its parent (by its last read) exited in the interval: the kernel gave it another
    /// parent without its running, so its `stat` is read again (rule 7).
    pub orphaned: bool,
}

/// How one process is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcRead {
    /// Rule 1: not read at all; its cached sample is used (if there is none, it is read
    /// as [`ProcRead::Files`] with `due: Some(false)`).
    Cached,
    /// Its `stat` is read. `due`: re-read status, cgroup and threads whatever changed
    /// (`Some(true)`), only if it ran (`Some(false)`), or by the /proc path's staggered
    /// refresh (`None`, see [`staggered_due`]).
    Files { due: Option<bool> },
    /// Rule 3 for a process that did not run: only what another process can change while
    /// it sleeps is read again (its and its threads' allowed CPUs, its cgroup), not its
    /// `stat` (if nothing is cached, it is read as [`ProcRead::Files`] with `due:
    /// Some(true)`).
    Refresh,
}

/// Rules 1, 3 and 7.
pub fn proc_read(f: ProcFacts) -> ProcRead {
    if f.ran == Some(false) && !f.execd && !f.stale && !f.orphaned {
        return match f.in_window {
            true => ProcRead::Refresh,
            false => ProcRead::Cached,
        };
    }
    // An exec or a parent's exit the connector reported is read at once, with the
    // collector's word or without it (detached by cost, or missing: `sampler::paths`);
    // without it, in full, which is what keeps rule 8 from sparing its `stat`.
    let due = if f.stale || (f.ran.is_none() && (f.execd || f.orphaned)) {
        Some(true)
    } else {
        f.ran.map(|_| f.in_window || f.execd)
    };
    ProcRead::Files { due }
}

/// The /proc path's refresh: each process in full every `refresh_every` samples,
/// staggered by pid so that not all come due at once.
pub fn staggered_due(sample_no: u64, pid: u32, refresh_every: u64) -> bool {
    (sample_no + u64::from(pid)).is_multiple_of(refresh_every.max(1))
}

/// What a process's `stat` says, as far as the cache rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatKey {
    pub start_time_ticks: u64,
    pub cpu_ticks: u64,
    pub num_threads: u32,
}

/// A process whose `stat` is unchanged did not run: its status, cgroup and threads are
/// kept from the cache, unless threads are asked for and were not read then.
pub fn unchanged(cached: StatKey, now: StatKey, threads_asked: bool, threads_read: bool) -> bool {
    cached == now && (!threads_asked || threads_read)
}

/// Rule 6: a process that ran with the threads of its last read (same count, each with a
/// collector time, every thread that ran among them) reads no thread file. Both lists are
/// in tid order.
pub fn threads_from_collector(prev: &[ThreadSample], num_threads: u32, ran: &[ThreadCpu]) -> bool {
    prev.len() == num_threads as usize
        && prev.iter().all(|t| t.cpu_ns.is_some())
        && ran
            .iter()
            .all(|t| prev.binary_search_by_key(&t.tid, |x| x.tid).is_ok())
}

/// Rule 4: numa_maps is read for a process whose files were read again, that the
/// collector saw run, or that has no map cached.
pub fn numa_due(fresh: bool, ran: bool, cached: bool) -> bool {
    fresh || ran || !cached
}

/// Rule 3's `cgroup` read: due unless the kernel's count of cgroup moves is known now and
/// is what it was before the file was last read (nothing moved since: the file says what
/// it said). A count taken before a read and compared at the next keeps a move during the
/// read from being missed.
pub fn cgroup_due(moves_now: Option<u64>, moves_at_read: Option<u64>) -> bool {
    moves_now.is_none() || moves_now != moves_at_read
}

/// The socket dump is skipped when the TCP segment counters (in, out) are known and did
/// not move since the last dump.
pub fn socket_dump_due(segments: Option<(u64, u64)>, at_last_dump: Option<(u64, u64)>) -> bool {
    segments.is_none() || segments != at_last_dump
}

/// How a sample gets its TCP sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketRead {
    /// The last sample's, as they were.
    Reuse,
    /// All of them, dumped.
    Dump,
    /// The last sample's, with those that moved read again.
    Lookup,
}

/// Samples between two dumps at most, with the kernel's socket marks: what the marks do
/// not see (a sender's segments out between two ACKs, segments in states other than
/// ESTABLISHED) shows at the latest then.
pub const SOCKET_DUMP_EVERY: u64 = 64;

/// What the kernel's socket marks ([`crate::bpf::TcpMoves`]) say at a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketMarks {
    /// TCP state changes counted now, and when taken just before the last dump.
    pub states_now: u64,
    pub states_at_dump: Option<u64>,
    /// The drain took every mark (the map was not full).
    pub complete: bool,
    /// Sockets of the last sample that were marked, and how many it holds.
    pub moved: usize,
    pub known: usize,
    /// Samples since the last dump.
    pub since_dump: u64,
}

/// The socket rule. With the marks: a dump when a socket may have come or gone (a state
/// changed since the last dump, or none was made), when a mark may be missing (a full
/// map), every [`SOCKET_DUMP_EVERY`] samples, and when more than half the sockets moved
/// (then the dump costs less than reading them one by one: see docs/figures.md); else the
/// sockets that moved are read, and with none, the last sample's stand. Without them, the
/// segment counters' rule ([`socket_dump_due`]).
pub fn socket_read(
    marks: Option<SocketMarks>,
    segments: Option<(u64, u64)>,
    segments_at_dump: Option<(u64, u64)>,
) -> SocketRead {
    let Some(m) = marks else {
        return if socket_dump_due(segments, segments_at_dump) {
            SocketRead::Dump
        } else {
            SocketRead::Reuse
        };
    };
    if m.states_at_dump != Some(m.states_now)
        || !m.complete
        || m.since_dump >= SOCKET_DUMP_EVERY
        || m.moved * 2 > m.known
    {
        SocketRead::Dump
    } else if m.moved == 0 {
        SocketRead::Reuse
    } else {
        SocketRead::Lookup
    }
}

/// Socket mapping, rules 1-2 of its doc: a process's fd directory is re-read when it is
/// new (or its pid reused) or its fd count changed; with the collector, a process not
/// read again this sample keeps its cached sockets without even its count being taken.
/// Whether to take its fd count (`false`: keep its cached sockets as they are).
pub fn fd_check(cached_start: Option<u64>, start: u64, reread_or_no_collector: bool) -> bool {
    reread_or_no_collector || cached_start != Some(start)
}

/// Whether a cached fd entry still holds (same process, same count).
pub fn fds_fresh(cached: Option<(u64, u64)>, start: u64, count: u64) -> bool {
    cached == Some((start, count))
}

/// Rule 5: who ran and is gone at this sample (not in `alive`), with the collector's CPU
/// time; else, for a process forked and gone in the interval, the connector's word alone.
/// `unsampled`: it was born in the interval or missing from the previous sample, so no
/// sample holds its earlier time. Sorted by pid.
pub fn exited(
    ran: Option<&PidMap<crate::bpf::ProcCpu>>,
    events: Option<&[ProcEvent]>,
    alive: &PidSet,
    born: &PidSet,
    last_alive: &PidSet,
) -> Vec<ExitedProc> {
    let mut exited: Vec<ExitedProc> = Vec::new();
    for (&pid, c) in ran.into_iter().flatten() {
        if !alive.contains(&pid) {
            exited.push(ExitedProc {
                pid,
                comm: c.comm.clone(),
                cpu_ns: Some(c.cpu_ns),
                unsampled: born.contains(&pid) || !last_alive.contains(&pid),
            });
        }
    }
    for e in events.unwrap_or_default() {
        if let ProcEvent::Exit { pid } = *e {
            if born.contains(&pid) && !exited.iter().any(|x| x.pid == pid) {
                exited.push(ExitedProc {
                    pid,
                    comm: String::new(),
                    cpu_ns: None,
                    unsampled: true,
                });
            }
        }
    }
    exited.sort_by_key(|x| x.pid);
    exited
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(ran: Option<bool>) -> ProcFacts {
        ProcFacts {
            ran,
            in_window: false,
            execd: false,
            stale: false,
            orphaned: false,
        }
    }

    #[test]
    fn rule1_a_process_that_did_not_run_is_not_read() {
        assert_eq!(proc_read(facts(Some(false))), ProcRead::Cached);
        assert_eq!(
            proc_read(facts(Some(true))),
            ProcRead::Files { due: Some(false) }
        );
        // Without the collector every stat is read, due by the staggered refresh.
        assert_eq!(proc_read(facts(None)), ProcRead::Files { due: None });
    }

    #[test]
    fn rule3_window_exec_and_invalidate_read_an_idle_process_again() {
        // In the window: what others can change while it sleeps, not its stat.
        let window = ProcFacts {
            in_window: true,
            ..facts(Some(false))
        };
        assert_eq!(proc_read(window), ProcRead::Refresh);
        // One that ran in the window is read in full.
        assert_eq!(
            proc_read(ProcFacts {
                ran: Some(true),
                ..window
            }),
            ProcRead::Files { due: Some(true) }
        );
        let execd = ProcFacts {
            execd: true,
            ..facts(Some(false))
        };
        assert_eq!(proc_read(execd), ProcRead::Files { due: Some(true) });
        // The connector's exec without the collector's word (detached by cost): in full.
        assert_eq!(
            proc_read(ProcFacts { ran: None, ..execd }),
            ProcRead::Files { due: Some(true) }
        );
        for ran in [None, Some(false), Some(true)] {
            let f = ProcFacts {
                stale: true,
                ..facts(ran)
            };
            assert_eq!(proc_read(f), ProcRead::Files { due: Some(true) });
        }
    }

    #[test]
    fn rule7_an_idle_process_whose_parent_exited_has_its_stat_read() {
        let orphan = ProcFacts {
            orphaned: true,
            ..facts(Some(false))
        };
        assert_eq!(proc_read(orphan), ProcRead::Files { due: Some(false) });
        // In the window too (its stat, then its refresh in full).
        assert_eq!(
            proc_read(ProcFacts {
                in_window: true,
                ..orphan
            }),
            ProcRead::Files { due: Some(true) }
        );
        // Without the collector's word (rule 8 would spare its unchanged schedstat).
        assert_eq!(
            proc_read(ProcFacts {
                ran: None,
                ..orphan
            }),
            ProcRead::Files { due: Some(true) }
        );
    }

    #[test]
    fn rule2_events_in_order_decide_the_process_set() {
        let ev = [
            ProcEvent::Fork { pid: 7, parent: 1 },
            ProcEvent::Exit { pid: 2 },
            ProcEvent::Fork { pid: 9, parent: 1 },
            ProcEvent::Exit { pid: 9 },
            ProcEvent::Exec { pid: 3 },
        ];
        let s = process_set([1, 2, 3].into_iter(), Some(&ev), false, false);
        assert_eq!(s.pids, Some(vec![1, 3, 7]));
        assert!(s.born.contains(&7) && s.born.contains(&9));
        assert_eq!(s.execd.iter().copied().collect::<Vec<_>>(), [3]);
        let mut exits: Vec<u32> = s.exits.iter().copied().collect();
        exits.sort_unstable();
        assert_eq!(exits, [2, 9]);
        // Listing due, or events unknown: /proc is listed (births and execs still kept).
        let s = process_set([1, 2, 3].into_iter(), Some(&ev), true, false);
        assert_eq!(s.pids, None);
        assert!(s.execd.contains(&3));
        assert_eq!(process_set([1].into_iter(), None, false, false).pids, None);
    }

    #[test]
    fn rule9_without_events_nothing_created_keeps_the_cached_set() {
        // Nothing created since the last listing: the cached pids, in order.
        let s = process_set([3, 1, 2].into_iter(), None, false, true);
        assert_eq!(s.pids, Some(vec![1, 2, 3]));
        assert!(s.born.is_empty() && s.exits.is_empty() && s.execd.is_empty());
        // A task created, or the listing due: /proc is listed.
        assert_eq!(process_set([1].into_iter(), None, false, false).pids, None);
        assert_eq!(process_set([1].into_iter(), None, true, true).pids, None);
    }

    #[test]
    fn rule2_listing_is_due_first_and_every_list_every() {
        assert!(listing_due(true, 5));
        assert!(!listing_due(false, 5));
        assert!(listing_due(false, LIST_EVERY));
        assert!(listing_due(false, 3 * LIST_EVERY));
    }

    #[test]
    fn rule3_window_is_bounded_and_rotates_through_every_process() {
        let pids: Vec<u32> = (1..=1000).collect();
        let mut w = RefreshWindow::default();
        let mut seen = PidSet::default();
        let mut rounds = 0;
        while seen.len() < pids.len() {
            let win = w.next(&pids, 8);
            assert_eq!(win.len(), IDLE_REFRESH_BUDGET);
            seen.extend(win);
            rounds += 1;
            assert!(rounds <= pids.len().div_ceil(IDLE_REFRESH_BUDGET));
        }
        // Few processes: about 1/refresh_every of them, at least one.
        let mut w = RefreshWindow::default();
        assert_eq!(w.next(&[1, 2, 3, 4, 5, 6, 7, 8, 9], 8).len(), 2);
        assert_eq!(w.next(&[4], 8).len(), 1);
        assert!(w.next(&[], 8).is_empty());
    }

    #[test]
    fn proc_path_refresh_is_staggered_by_pid() {
        let due: Vec<u32> = (0..16).filter(|&p| staggered_due(3, p, 8)).collect();
        assert_eq!(due, [5, 13]);
        assert!((0..4).all(|p| staggered_due(9, p, 1)));
    }

    #[test]
    fn unchanged_stat_keeps_the_cache_unless_threads_are_newly_asked() {
        let k = StatKey {
            start_time_ticks: 5,
            cpu_ticks: 10,
            num_threads: 2,
        };
        assert!(unchanged(k, k, false, false));
        assert!(unchanged(k, k, true, true));
        assert!(!unchanged(k, k, true, false));
        for now in [
            StatKey { cpu_ticks: 11, ..k },
            StatKey {
                num_threads: 3,
                ..k
            },
            StatKey {
                start_time_ticks: 6,
                ..k
            },
        ] {
            assert!(!unchanged(k, now, false, false));
        }
    }

    fn thread(tid: u32, cpu_ns: Option<u64>) -> ThreadSample {
        ThreadSample {
            tid,
            comm: "t".into(),
            state: 'S',
            utime_ticks: 0,
            stime_ticks: 0,
            last_cpu: Some(0),
            allowed: Default::default(),
            cpu_ns,
        }
    }

    #[test]
    fn rule6_threads_come_from_the_collector_only_when_the_same_threads_ran() {
        let prev = [thread(10, Some(1)), thread(11, Some(2))];
        let ran = |tid| ThreadCpu {
            tid,
            cpu_ns: 5,
            last_cpu: 1,
        };
        assert!(threads_from_collector(&prev, 2, &[ran(11)]));
        assert!(threads_from_collector(&prev, 2, &[]));
        // A thread it has not read, a changed count, or a thread without a collector time.
        assert!(!threads_from_collector(&prev, 2, &[ran(12)]));
        assert!(!threads_from_collector(&prev, 3, &[ran(11)]));
        assert!(!threads_from_collector(
            &[thread(10, None), thread(11, Some(2))],
            2,
            &[ran(11)]
        ));
    }

    #[test]
    fn rule4_numa_maps_only_for_what_ran_or_is_new() {
        assert!(!numa_due(false, false, true));
        assert!(numa_due(true, false, true));
        assert!(numa_due(false, true, true));
        assert!(numa_due(false, false, false));
    }

    #[test]
    fn cgroup_is_kept_only_while_no_move_was_counted_since_its_read() {
        assert!(!cgroup_due(Some(7), Some(7)));
        assert!(cgroup_due(Some(8), Some(7)));
        assert!(cgroup_due(None, Some(7)));
        assert!(cgroup_due(None, None));
        assert!(cgroup_due(Some(7), None), "read when the count was unknown");
    }

    #[test]
    fn sockets_are_reused_dumped_or_read_again_by_the_rule() {
        assert!(!socket_dump_due(Some((1, 2)), Some((1, 2))));
        // With the marks, the segment counters do not matter.
        let m = SocketMarks {
            states_now: 5,
            states_at_dump: Some(5),
            complete: true,
            moved: 0,
            known: 10,
            since_dump: 3,
        };
        use SocketRead::*;
        assert_eq!(socket_read(Some(m), Some((1, 3)), Some((1, 2))), Reuse);
        assert_eq!(
            socket_read(Some(SocketMarks { moved: 2, ..m }), None, None),
            Lookup
        );
        assert_eq!(
            socket_read(Some(SocketMarks { moved: 5, ..m }), None, None),
            Lookup
        );
        assert_eq!(
            socket_read(Some(SocketMarks { moved: 6, ..m }), None, None),
            Dump
        );
        for changed in [
            SocketMarks { states_now: 6, ..m },
            SocketMarks {
                states_at_dump: None,
                ..m
            },
            SocketMarks {
                complete: false,
                ..m
            },
            SocketMarks {
                since_dump: SOCKET_DUMP_EVERY,
                ..m
            },
        ] {
            assert_eq!(socket_read(Some(changed), Some((1, 2)), Some((1, 2))), Dump);
        }
        // Without them, the counters' rule.
        assert_eq!(socket_read(None, Some((1, 2)), Some((1, 2))), Reuse);
        assert_eq!(socket_read(None, Some((1, 3)), Some((1, 2))), Dump);
        assert_eq!(socket_read(None, None, None), Dump);
        assert!(socket_dump_due(Some((1, 3)), Some((1, 2))));
        assert!(socket_dump_due(None, None));
        assert!(socket_dump_due(Some((1, 2)), None));
    }

    #[test]
    fn fd_dirs_are_checked_when_reread_new_or_reused() {
        assert!(!fd_check(Some(5), 5, false));
        assert!(fd_check(Some(5), 5, true));
        assert!(fd_check(Some(4), 5, false));
        assert!(fd_check(None, 5, false));
        assert!(fds_fresh(Some((5, 3)), 5, 3));
        assert!(!fds_fresh(Some((5, 3)), 5, 4));
        assert!(!fds_fresh(None, 5, 3));
    }

    #[test]
    fn rule5_who_ran_and_is_gone_is_reported_with_its_time() {
        let cpu = |ns| crate::bpf::ProcCpu {
            cpu_ns: ns,
            comm: "x".into(),
            threads: Vec::new(),
        };
        let ran: PidMap<_> = [(1, cpu(5)), (2, cpu(7)), (3, cpu(9)), (8, cpu(1))]
            .into_iter()
            .collect();
        let alive: PidSet = [1].into_iter().collect();
        let born: PidSet = [3, 4, 6].into_iter().collect();
        let last: PidSet = [1, 2].into_iter().collect();
        let ev = [ProcEvent::Exit { pid: 4 }, ProcEvent::Exit { pid: 5 }];
        let x = exited(Some(&ran), Some(&ev), &alive, &born, &last);
        let got: Vec<_> = x.iter().map(|e| (e.pid, e.cpu_ns, e.unsampled)).collect();
        // 2 ran and was sampled; 3 was born and ran; 4 was born and gone without running
        // (the connector's word); 5's exit alone says nothing (it was not born here and did
        // not run: the process set already dropped it); 8 ran but no sample held it.
        assert_eq!(
            got,
            [
                (2, Some(7), false),
                (3, Some(9), true),
                (4, None, true),
                (8, Some(1), true)
            ]
        );
        assert!(exited(None, None, &alive, &born, &last).is_empty());
    }
}
