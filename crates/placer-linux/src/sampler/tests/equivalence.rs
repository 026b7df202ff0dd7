//! The equivalence property: a sampler that reads only what its cache rules say changed
//! gives, at every sample, what a fresh sampler reading every file gives, except the
//! fields a rule of the [sampler's doc](crate::sampler) lets lag, and those no longer than
//! that rule's bound.
//!
//! A model machine on a [`FakeRoot`] changes between samples by a seeded script (runs,
//! forks, exits, execs, renames, thread births and deaths, thread swaps, affinity changes
//! by another tool and by placer, cgroup moves); each change knows which rule covers it
//! and so until which sample a field may differ. Both the /proc path and the kernel-events
//! path (a truthful [`ScriptedActivity`]: who ran, forks, execs, exits, the cgroup-move
//! count) are played. Sockets are not: sock_diag sees the host's kernel, not a fake root;
//! [`real_proc_incremental_agrees_with_a_fresh_read`] plays them on this machine's /proc.

use super::*;
use crate::activity::{Activity, ScriptedActivity};
use crate::bpf::{ProcCpu, ThreadCpu};
use crate::pid::PidMap;
use crate::proc_events::ProcEvent;
use placer_core::sample::{ProcSample, ThreadSample};
use placer_testkit::{FakeRoot, Rng};
use std::collections::BTreeMap;

/// One chance in `n`.
fn one_in(rng: &mut Rng, n: usize) -> bool {
    rng.below(n) == 0
}

#[derive(Debug, Clone)]
struct Task {
    tid: u32,
    comm: String,
    ticks: u64,
    last_cpu: u32,
    allowed: &'static str,
}

#[derive(Debug, Clone)]
struct Proc {
    ppid: u32,
    start: u64,
    state: char,
    kernel: bool,
    allowed: &'static str,
    cgroup: String,
    /// The main thread first (its tid is the pid).
    threads: Vec<Task>,
    /// Ticks of its threads gone: the kernel keeps them in the process's figure.
    dead_ticks: u64,
    run_ns: u64,
    slices: u64,
}

/// What may differ between the incremental and the fresh sample, each until a sample
/// that the change which made it differ set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Lagging {
    /// A process's or its threads' allowed CPUs (rule 3 / the /proc path's refresh).
    Allowed,
    /// A process's cgroup (kept while it runs until its refresh).
    Cgroup,
    /// An orphan's parent without the connector: rule 8 spares the `stat` of a process
    /// that did not run until its refresh (rule 7 needs the connector's exits).
    Parent,
    /// Its thread list (a thread replaced at the same count, the /proc path).
    ThreadList,
    /// Its threads' ticks, comm and state (rule 6: the collector's times stand in).
    ThreadStat,
}

const AFFINITIES: [&str; 3] = ["0-1", "0", "1"];
const REFRESH_EVERY: u64 = 4;

struct World {
    root: FakeRoot,
    procs: BTreeMap<u32, Proc>,
    next_pid: u32,
    /// Ticks since boot (start times).
    clock: u64,
    cgroup_moves: u64,
    /// The last sample each (pid, field) may still differ at.
    lag: BTreeMap<(u32, Lagging), u64>,
    events: bool,
    /// The CPU collector says who ran at the coming sample (off while it is detached,
    /// and at the first sample after it is attached again: [`crate::sampler::paths`]).
    collector: bool,
    tick_ns: u64,
}

fn stat_text(
    pid: u32,
    comm: &str,
    state: char,
    p: &Proc,
    ticks: u64,
    threads: usize,
    cpu: u32,
) -> String {
    let flags: u64 = if p.kernel { 0x0020_0000 } else { 0 };
    format!(
        "{pid} ({comm}) {state} {} {pid} {pid} 0 -1 {flags} 0 0 0 0 {ticks} 0 0 0 20 0 {threads} 0 {} \
         1000 100 1 1 1 1 1 1 0 0 0 0 0 0 0 17 {cpu} 0 0",
        p.ppid, p.start
    )
}

impl World {
    fn new(tag: &str, events: bool, tick_ns: u64) -> World {
        let root = FakeRoot::new(tag);
        root.write("proc/stat", "cpu  1 2 3 4\ncpu0 1 2 3 4\ncpu1 1 2 3 4\n");
        let mut w = World {
            root,
            procs: BTreeMap::new(),
            next_pid: 300,
            clock: 1000,
            cgroup_moves: 0,
            lag: BTreeMap::new(),
            events,
            collector: events,
            tick_ns,
        };
        let init = w.proc_like(0, false, "/init");
        w.procs.insert(1, init);
        let kthreadd = w.proc_like(0, true, "/");
        w.procs.insert(2, kthreadd);
        for pid in [3, 4] {
            let k = w.proc_like(2, true, "/");
            w.procs.insert(pid, k);
        }
        for pid in 100..120 {
            let mut p = w.proc_like(1, false, "/work");
            if pid % 3 == 0 {
                p.threads.push(Task {
                    tid: pid + 1000,
                    comm: "worker".into(),
                    ticks: 2,
                    last_cpu: 1,
                    allowed: "0-1",
                });
            }
            w.procs.insert(pid, p);
        }
        for (&pid, p) in &mut w.procs {
            p.threads[0].tid = pid;
        }
        for pid in w.procs.keys().copied().collect::<Vec<_>>() {
            w.write(pid);
        }
        w
    }

    fn proc_like(&self, ppid: u32, kernel: bool, cgroup: &str) -> Proc {
        Proc {
            ppid,
            start: self.clock,
            state: 'S',
            kernel,
            allowed: "0-1",
            cgroup: cgroup.into(),
            threads: vec![Task {
                tid: 0,
                comm: if kernel {
                    "kworker".into()
                } else {
                    "app".into()
                },
                ticks: 5,
                last_cpu: 0,
                allowed: "0-1",
            }],
            dead_ticks: 0,
            run_ns: 50_000_000,
            slices: 5,
        }
    }

    /// The files of `pid` as the model says (all of them: unchanged ones are rewritten
    /// with the same text).
    fn write(&self, pid: u32) {
        let p = &self.procs[&pid];
        let ticks: u64 = p.dead_ticks + p.threads.iter().map(|t| t.ticks).sum::<u64>();
        let main = &p.threads[0];
        let n = p.threads.len();
        self.root.write(
            format!("proc/{pid}/stat"),
            &stat_text(pid, &main.comm, p.state, p, ticks, n, main.last_cpu),
        );
        // Every task has one (rule 8 turns itself off for a root whose processes lack it).
        self.root.write(
            format!("proc/{pid}/schedstat"),
            &format!("{} 0 {}\n", p.run_ns, p.slices),
        );
        if p.kernel {
            return;
        }
        self.root.write(
            format!("proc/{pid}/status"),
            &format!(
                "Uid:\t1000\t1000\t1000\t1000\nCpus_allowed_list:\t{}\n",
                p.allowed
            ),
        );
        self.root
            .write(format!("proc/{pid}/cgroup"), &format!("0::{}\n", p.cgroup));
        let task = self.root.join(format!("proc/{pid}/task"));
        if task.exists() {
            std::fs::remove_dir_all(&task).unwrap();
        }
        for t in &p.threads {
            self.root.write(
                format!("proc/{pid}/task/{}/stat", t.tid),
                &stat_text(t.tid, &t.comm, 'S', p, t.ticks, n, t.last_cpu),
            );
            self.root.write(
                format!("proc/{pid}/task/{}/status", t.tid),
                &format!("Cpus_allowed_list:\t{}\n", t.allowed),
            );
        }
    }

    fn may_lag(&mut self, pid: u32, what: Lagging, until: u64) {
        self.lag.insert((pid, what), until);
    }

    /// `pid` runs: some of its threads (the main one when `main`) for `ticks` each (0: less
    /// than a tick, it still ran).
    fn run(&mut self, rng: &mut Rng, ran: &mut PidMap<ProcCpu>, pid: u32, main: bool, ticks: u64) {
        let events = self.events;
        let p = self.procs.get_mut(&pid).unwrap();
        p.state = if one_in(rng, 2) { 'R' } else { 'S' };
        p.slices += 1;
        let entry = ran.entry(pid).or_insert_with(|| ProcCpu {
            cpu_ns: 0,
            comm: p.threads[0].comm.clone(),
            threads: Vec::new(),
        });
        for (i, t) in p.threads.iter_mut().enumerate() {
            let runs = (i == 0 && main) || one_in(rng, 2);
            if !runs {
                continue;
            }
            t.ticks += ticks;
            t.last_cpu = rng.below(2) as u32;
            let ns = ticks * self.tick_ns;
            p.run_ns += ns + 1000;
            entry.cpu_ns += ns;
            match entry.threads.binary_search_by_key(&t.tid, |x| x.tid) {
                Ok(j) => {
                    entry.threads[j].cpu_ns += ns;
                    entry.threads[j].last_cpu = t.last_cpu;
                }
                Err(j) => entry.threads.insert(
                    j,
                    ThreadCpu {
                        tid: t.tid,
                        cpu_ns: ns,
                        last_cpu: t.last_cpu,
                    },
                ),
            }
        }
        if events && !p.kernel {
            // Rule 6: a process that ran with known threads keeps their ticks, comm and
            // state as last read until it is read in full while it runs (its window, an
            // exec, placer's invalidation) or its thread count changes: a refresh of it
            // idle (rule 3) reads no `stat`, so no bound in samples. Their `cpu_ns`
            // stands in for the ticks, and is held exact below.
            self.may_lag(pid, Lagging::ThreadStat, u64::MAX);
        }
    }

    /// One interval's changes, before sample `s`; what the kernel's events say of it.
    fn step(&mut self, rng: &mut Rng, sampler: &mut Sampler, s: u64) -> Activity {
        let mut ran: PidMap<ProcCpu> = PidMap::default();
        let mut events = Vec::new();
        let bound = s + REFRESH_EVERY;
        for _ in 0..rng.below(5) {
            let pids: Vec<u32> = self.procs.keys().copied().collect();
            let pid = pids[rng.below(pids.len())];
            let user = !self.procs[&pid].kernel && pid != 1;
            match rng.below(11) {
                // Runs (sometimes renaming itself).
                0..=2 => {
                    let ticks = 1 + rng.below(3) as u64;
                    self.run(rng, &mut ran, pid, true, ticks);
                    if user && one_in(rng, 4) {
                        let p = self.procs.get_mut(&pid).unwrap();
                        p.threads[0].comm = format!("n{}", rng.below(100));
                    }
                }
                // Forks a child, which runs or not yet.
                3 if user && self.procs.len() < 40 => {
                    let child = self.next_pid;
                    self.next_pid += 1 + rng.below(3) as u32;
                    self.run(rng, &mut ran, pid, true, 1);
                    let mut c = self.procs[&pid].clone();
                    c.ppid = pid;
                    c.start = self.clock;
                    c.threads.truncate(1);
                    c.threads[0].tid = child;
                    c.threads[0].ticks = 0;
                    c.dead_ticks = 0;
                    (c.run_ns, c.slices) = (0, 0);
                    self.procs.insert(child, c);
                    events.push(ProcEvent::Fork {
                        pid: child,
                        parent: pid,
                    });
                    if one_in(rng, 2) {
                        self.run(rng, &mut ran, child, true, 1);
                    }
                    self.write(child);
                }
                // Exits; its children go to init without running (rule 7).
                4 if user && self.procs.len() > 12 => {
                    self.run(rng, &mut ran, pid, true, 1);
                    self.procs.remove(&pid);
                    self.root.remove(format!("proc/{pid}"));
                    events.push(ProcEvent::Exit { pid });
                    let orphans: Vec<u32> = self
                        .procs
                        .iter()
                        .filter(|(_, p)| p.ppid == pid)
                        .map(|(&c, _)| c)
                        .collect();
                    for c in orphans {
                        self.procs.get_mut(&c).unwrap().ppid = 1;
                        self.write(c);
                        if !self.events {
                            self.may_lag(c, Lagging::Parent, bound);
                        }
                    }
                    continue;
                }
                // Execs: one thread, a new name; a manager may move it at the exec.
                5 if user => {
                    self.run(rng, &mut ran, pid, true, 1);
                    let p = self.procs.get_mut(&pid).unwrap();
                    p.dead_ticks += p.threads.drain(1..).map(|t| t.ticks).sum::<u64>();
                    p.threads[0].comm = format!("x{}", rng.below(100));
                    if one_in(rng, 2) {
                        p.cgroup = format!("/exec{}", rng.below(5));
                        self.cgroup_moves += 1;
                        // The connector says exec: read in full at once. Without it the
                        // process only ran, and keeps its cgroup until its refresh.
                        if !self.events {
                            self.may_lag(pid, Lagging::Cgroup, bound);
                        }
                    }
                    events.push(ProcEvent::Exec { pid });
                }
                // Another tool changes a process's (and its threads') allowed CPUs, while
                // it sleeps.
                6 if user => {
                    let a = AFFINITIES[rng.below(AFFINITIES.len())];
                    let p = self.procs.get_mut(&pid).unwrap();
                    p.allowed = a;
                    p.threads.iter_mut().for_each(|t| t.allowed = a);
                    self.may_lag(pid, Lagging::Allowed, bound);
                }
                // A manager moves it to another cgroup.
                7 if user => {
                    self.procs.get_mut(&pid).unwrap().cgroup = format!("/m{}", rng.below(5));
                    self.cgroup_moves += 1;
                    self.may_lag(pid, Lagging::Cgroup, bound);
                }
                // A thread is born (its creator ran less than a tick: only the count moves).
                8 if user => {
                    self.run(rng, &mut ran, pid, true, 0);
                    self.new_thread(pid);
                }
                // A thread ends, or is replaced by a new one at the same count (which
                // runs: the collector names it).
                9 if user && self.procs[&pid].threads.len() > 1 => {
                    let swap = one_in(rng, 2);
                    let p = self.procs.get_mut(&pid).unwrap();
                    let gone = 1 + rng.below(p.threads.len() - 1);
                    p.dead_ticks += p.threads.remove(gone).ticks;
                    if swap {
                        let tid = self.new_thread(pid);
                        self.run(rng, &mut ran, pid, false, 1);
                        let p = self.procs.get_mut(&pid).unwrap();
                        let last = p.threads.len() - 1;
                        if p.threads[last].ticks == 0 {
                            p.threads[last].ticks = 1;
                            self.run_one(&mut ran, pid, tid);
                        }
                        if !self.collector {
                            self.may_lag(pid, Lagging::ThreadList, bound);
                        }
                    } else {
                        self.run(rng, &mut ran, pid, true, 1);
                    }
                }
                // Placer moves it, and says so.
                10 if user => {
                    let a = AFFINITIES[rng.below(AFFINITIES.len())];
                    let p = self.procs.get_mut(&pid).unwrap();
                    p.allowed = a;
                    p.threads.iter_mut().for_each(|t| t.allowed = a);
                    self.lag.remove(&(pid, Lagging::Allowed));
                    sampler.invalidate(pid);
                }
                _ => continue,
            }
            self.write(pid);
        }
        self.clock += 1;
        Activity {
            ran: Some(ran),
            events: Some(events),
            cgroup_moves: Some(self.cgroup_moves),
        }
    }

    /// A new thread of `pid`, not run yet: its tid.
    fn new_thread(&mut self, pid: u32) -> u32 {
        let tid = self.next_pid;
        self.next_pid += 1;
        let p = self.procs.get_mut(&pid).unwrap();
        let allowed = p.allowed;
        p.threads.push(Task {
            tid,
            comm: "worker".into(),
            ticks: 0,
            last_cpu: 0,
            allowed,
        });
        tid
    }

    /// The swapped-in thread `tid` of `pid` ran one tick (the collector names it).
    fn run_one(&mut self, ran: &mut PidMap<ProcCpu>, pid: u32, tid: u32) {
        let p = self.procs.get_mut(&pid).unwrap();
        p.run_ns += self.tick_ns;
        let e = ran.get_mut(&pid).unwrap();
        e.cpu_ns += self.tick_ns;
        let at = e.threads.partition_point(|t| t.tid < tid);
        e.threads.insert(
            at,
            ThreadCpu {
                tid,
                cpu_ns: self.tick_ns,
                last_cpu: 0,
            },
        );
    }

    /// Whether `field` of `pid` may differ at sample `s`.
    fn lags(&self, pid: u32, field: Lagging, s: u64) -> bool {
        self.lag.get(&(pid, field)).is_some_and(|&until| s <= until)
    }
}

/// Every difference between the incremental sample `inc` and the fresh one, less those
/// the world allows at sample `s`.
fn differences(w: &World, inc: &Sample, fresh: &Sample, s: u64) -> Vec<String> {
    let mut out = Vec::new();
    let pids = |x: &Sample| x.procs.iter().map(|p| p.pid).collect::<Vec<_>>();
    if pids(inc) != pids(fresh) {
        out.push(format!("pids {:?} != {:?}", pids(inc), pids(fresh)));
        return out;
    }
    for (a, b) in inc.procs.iter().zip(fresh.procs.iter()) {
        let pid = a.pid;
        let exact = (
            a.start_time_ticks,
            &*a.comm,
            a.state,
            a.uid,
            a.utime_ticks,
            a.stime_ticks,
            a.last_cpu,
            a.num_threads,
            a.kernel_thread,
        );
        let want = (
            b.start_time_ticks,
            &*b.comm,
            b.state,
            b.uid,
            b.utime_ticks,
            b.stime_ticks,
            b.last_cpu,
            b.num_threads,
            b.kernel_thread,
        );
        if exact != want {
            out.push(format!("pid {pid}: {exact:?} != {want:?}"));
        }
        if a.ppid != b.ppid && !w.lags(pid, Lagging::Parent, s) {
            out.push(format!("pid {pid}: parent {} != {}", a.ppid, b.ppid));
        }
        if a.allowed != b.allowed && !w.lags(pid, Lagging::Allowed, s) {
            out.push(format!("pid {pid}: allowed {} != {}", a.allowed, b.allowed));
        }
        if a.cgroup != b.cgroup && !w.lags(pid, Lagging::Cgroup, s) {
            out.push(format!("pid {pid}: cgroup {} != {}", a.cgroup, b.cgroup));
        }
        let tids = |p: &ProcSample| p.threads.iter().map(|t| t.tid).collect::<Vec<_>>();
        if tids(a) != tids(b) {
            if !w.lags(pid, Lagging::ThreadList, s) {
                out.push(format!("pid {pid}: threads {:?} != {:?}", tids(a), tids(b)));
            }
            continue;
        }
        for (x, y) in a.threads.iter().zip(b.threads.iter()) {
            if x.allowed != y.allowed && !w.lags(pid, Lagging::Allowed, s) {
                out.push(format!(
                    "pid {pid} tid {}: allowed {} != {}",
                    x.tid, x.allowed, y.allowed
                ));
            }
            if x.last_cpu != y.last_cpu {
                out.push(format!(
                    "pid {pid} tid {}: last cpu {:?} != {:?}",
                    x.tid, x.last_cpu, y.last_cpu
                ));
            }
            let stat = |t: &ThreadSample| (t.utime_ticks, t.stime_ticks, t.state, t.comm.clone());
            if stat(x) != stat(y) && !w.lags(pid, Lagging::ThreadStat, s) {
                out.push(format!(
                    "pid {pid} tid {}: {:?} != {:?}",
                    x.tid,
                    stat(x),
                    stat(y)
                ));
            }
            // The collector's time, where there is one, is the model's: every tick it
            // ran, whichever way the sampler came by it.
            let truth = w
                .procs
                .get(&pid)
                .and_then(|p| p.threads.iter().find(|t| t.tid == x.tid));
            if let (Some(ns), Some(t)) = (x.cpu_ns, truth) {
                if ns != t.ticks * w.tick_ns {
                    out.push(format!(
                        "pid {pid} tid {}: cpu {ns} ns, ran {} ticks",
                        x.tid, t.ticks
                    ));
                }
            }
        }
    }
    out
}

/// Plays `samples` intervals of the seeded script on the /proc path or the events path;
/// panics at the first difference no rule allows.
fn play(seed: u64, events: bool, samples: u64) {
    play_toggled(seed, events, samples, |_| true)
}

/// [`play`], the CPU collector attached at sample `s` only where `attached(s)`: a
/// detached collector's drain says `ran: None`, and so does the first after it is
/// attached again (what it holds then is only since the attach), as
/// [`crate::activity::KernelActivity`] does; the connector stays.
fn play_toggled(seed: u64, events: bool, samples: u64, attached: impl Fn(u64) -> bool) {
    let tick_ns = 1_000_000_000 / u64::from(crate::sys::clock_ticks_per_s());
    let mut w = World::new(&format!("equiv-{seed}-{events}"), events, tick_ns);
    // xorshift stays at 0 from 0: every seed is moved off it.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (seed + 1));
    let mut inc = Sampler::new(w.root.path());
    inc.set_refresh_every(REFRESH_EVERY);
    let script = ScriptedActivity::default();
    if events {
        inc.set_activity_source(Box::new(script.clone()));
    }
    for s in 1..=samples {
        let trusted = events && attached(s) && attached(s - 1);
        w.collector = trusted;
        let mut act = w.step(&mut rng, &mut inc, s);
        if !trusted {
            act.ran = None;
        }
        if events {
            script.push(act);
        }
        // Now and then a sample without threads: the cache must not hand out what it did
        // not read.
        let req = SampleRequest {
            threads: !one_in(&mut rng, 8),
            ..Default::default()
        };
        let a = inc.sample(req).unwrap();
        let mut fresh = Sampler::new(w.root.path());
        fresh.set_refresh_every(1);
        let b = fresh.sample(req).unwrap();
        let d = differences(&w, &a, &b, s);
        assert!(
            d.is_empty(),
            "seed {seed}, {} path, sample {s}: the incremental sample differs from a full read:\n{}",
            if events { "events" } else { "/proc" },
            d.join("\n")
        );
    }
}

const SEEDS: u64 = 12;
const SAMPLES: u64 = 80;

#[test]
fn proc_path_incremental_equals_a_full_read_within_each_rules_lag() {
    for seed in 0..SEEDS {
        play(seed, false, SAMPLES);
    }
}

#[test]
fn events_path_incremental_equals_a_full_read_within_each_rules_lag() {
    for seed in 0..SEEDS {
        play(seed, true, SAMPLES);
    }
}

/// The collector detached and attached again mid-run (by cost, `sampler::paths`), in
/// windows of a few samples and at single samples: every sample still equals a full read.
#[test]
fn events_path_with_the_collector_detached_and_attached_again_equals_a_full_read() {
    for seed in 0..SEEDS {
        play_toggled(seed, true, SAMPLES, |s| {
            !(10..17).contains(&s) && s % 23 != 0
        });
        play_toggled(seed + 100, true, SAMPLES, |s| (s / 5) % 2 == 0);
    }
}

/// Processes this test starts for activity, ended (by pid) when it ends, however it ends;
/// each also stops on its own at its deadline (a test killed outright leaves nothing for
/// long).
struct Noise(Vec<std::process::Child>);

impl Drop for Noise {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A fork loop whose children another tool (`taskset`) pins while they sleep, and
/// loopback TCP connections opened, used and closed by another process, for `secs`.
fn noise(secs: u32) -> std::io::Result<Noise> {
    use std::process::{Command, Stdio};
    let spawn = |prog: &str, script: &str| {
        Command::new(prog)
            .args(["-c", script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
    };
    let mut n = Noise(Vec::new());
    n.0.push(spawn(
        "sh",
        &format!(
            "end=$(($(date +%s) + {secs})); while [ $(date +%s) -lt $end ]; do \
             sleep 0.2 & taskset -p 1 $! ; sleep 0.05; done"
        ),
    )?);
    n.0.push(spawn(
        "python3",
        &format!(
            "import socket, time\n\
             end = time.time() + {secs}\n\
             srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(8)\n\
             while time.time() < end:\n\
             \x20   c = socket.create_connection(srv.getsockname()); s, _ = srv.accept()\n\
             \x20   c.sendall(b'x' * 4096); s.recv(4096); time.sleep(0.15)\n\
             \x20   c.close(); s.close()\n"
        ),
    )?);
    Ok(n)
}

/// On this machine's /proc, beside a fork loop, another tool's affinity changes and TCP
/// sockets opening and closing, for a bounded time: what the incremental sampler says
/// of a process (its allowed CPUs, cgroup, uid, comm, sockets; its presence) agrees with
/// a fresh full read taken just after it, or stops differing within the refresh bound.
/// The two reads are moments apart on a live machine, so one sample's difference is no
/// failure; a difference that outlives every rule's bound is.
#[test]
fn real_proc_incremental_agrees_with_a_fresh_read() {
    let mut inc = Sampler::new(Path::new("/"));
    let sockets = inc.sources().has(SourceKind::SockDiag);
    let _noise = match noise(12) {
        Ok(n) => n,
        Err(e) => {
            placer_testkit::skip(&format!("no activity to sample: {e}"));
            return;
        }
    };
    let req = SampleRequest {
        sockets,
        ..Default::default()
    };
    // How long a difference may last, in samples: a refresh of every process (rule 3's
    // window, or the /proc path's `refresh_every`), and two for the reads' moments apart.
    let mut since: BTreeMap<(u32, &str), u32> = BTreeMap::new();
    let t0 = std::time::Instant::now();
    let mut samples = 0;
    while t0.elapsed() < std::time::Duration::from_secs(10) {
        let a = inc.sample(req).unwrap();
        let mut f = Sampler::new(Path::new("/"));
        f.set_kernel_events(false);
        f.set_refresh_every(1);
        let b = f.sample(req).unwrap();
        samples += 1;
        let window = a.procs.len().div_ceil(DEFAULT_REFRESH_EVERY as usize);
        let bound = a.procs.len().div_ceil(window.clamp(1, IDLE_REFRESH_BUDGET)) as u32 + 2;
        // Sockets both dumps hold.
        let both: std::collections::HashSet<u64> = {
            let x: std::collections::HashSet<u64> = a.sockets.iter().map(|s| s.inode).collect();
            b.sockets
                .iter()
                .map(|s| s.inode)
                .filter(|i| x.contains(i))
                .collect()
        };
        let mut now: Vec<(u32, &str)> = Vec::new();
        for q in b.procs.iter() {
            let Some(p) = a
                .procs
                .binary_search_by_key(&q.pid, |p| p.pid)
                .ok()
                .map(|i| &a.procs[i])
            else {
                now.push((q.pid, "presence"));
                continue;
            };
            if p.start_time_ticks != q.start_time_ticks {
                continue;
            }
            let owned = |x: &ProcSample| -> Vec<u64> {
                x.socket_inodes
                    .iter()
                    .copied()
                    .filter(|i| both.contains(i))
                    .collect()
            };
            for (field, differs) in [
                ("allowed", p.allowed != q.allowed),
                ("cgroup", p.cgroup != q.cgroup),
                ("uid", p.uid != q.uid),
                ("comm", p.comm != q.comm),
                ("sockets", owned(p) != owned(q)),
            ] {
                if differs {
                    now.push((q.pid, field));
                }
            }
        }
        since.retain(|k, _| now.contains(k));
        for k in now {
            let n = since.entry(k).or_insert(0);
            *n += 1;
            assert!(
                *n <= bound,
                "pid {} {}: differs from a full read at {n} samples in a row (bound {bound})",
                k.0,
                k.1
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(samples >= 20, "only {samples} samples in 10 s");
}
