//! The TCP sockets of a sample: dumped, the last sample's again, or the last sample's with
//! those the kernel marked as moved read again ([`plan::socket_read`] decides which).

use super::paths::{Hook, HookKind, HookPath, Observed, PathStatus};
use super::plan::{self, SocketMarks, SocketRead};
use crate::bpf::TcpMoves;
use crate::sockdiag::{SockDiag, SocketId};
use placer_core::sample::SocketSample;
use std::collections::HashMap;
use std::sync::Arc;

/// sock_diag, the kernel's socket marks when they could be had, and the last sample's
/// sockets with their ids.
pub(super) struct TcpReader {
    diag: SockDiag,
    moves: Marks,
    last: Arc<[SocketSample]>,
    /// `last`'s ids, in its order, and its indices by cookie.
    ids: Vec<SocketId>,
    by_cookie: HashMap<u64, usize>,
    /// The segment counters at the last dump (the rule without marks).
    segments_at_dump: Option<(u64, u64)>,
    /// The state-change count taken just before the last dump (the rule with marks).
    states_at_dump: Option<u64>,
    since_dump: u64,
    marks: Vec<u64>,
    /// The marks attached only while they cost less than dumping ([`super::paths`]);
    /// `None`: attached whenever sockets are asked for.
    path: Option<HookPath>,
    /// The sampler's CPU ns reading sockets on a dump (the polling path's cost).
    dump_ns: Option<f64>,
    /// The segment counts at the last sample (with the choice on).
    segs_last: Option<(u64, u64)>,
}

/// The kernel's socket marks: loaded at the probe (so that the sources say whether they
/// work), let go while samples do not ask for sockets (each segment received costs their
/// program a few hundred ns), loaded again at the next that does.
enum Marks {
    On(TcpMoves),
    /// Wanted, not loaded now.
    Idle,
    /// Let go while dumping costs less ([`super::paths`]).
    Detached,
    /// Why not: not asked for (another root, no kernel events), or it failed to load.
    Off(String),
}

impl Marks {
    fn load(netns: std::io::Result<u64>) -> Marks {
        match netns
            .map_err(|e| format!("this namespace's cookie: {e}"))
            .and_then(|ns| TcpMoves::open(ns).map_err(|e| e.to_string()))
        {
            Ok(m) => Marks::On(m),
            Err(why) => Marks::Off(why),
        }
    }
}

/// What [`TcpReader::read`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Read {
    pub how: SocketRead,
    /// Sockets read again (`Lookup`).
    pub looked_up: usize,
}

impl TcpReader {
    /// sock_diag (its error: no sockets at all), and the socket marks when `marks`.
    pub(super) fn open(marks: bool) -> Result<TcpReader, String> {
        let diag = SockDiag::open().map_err(|e| e.to_string())?;
        let moves = if marks {
            Marks::load(diag.netns_cookie())
        } else {
            Marks::Off("not asked for".into())
        };
        Ok(TcpReader {
            diag,
            moves,
            last: Arc::default(),
            ids: Vec::new(),
            by_cookie: HashMap::new(),
            segments_at_dump: None,
            states_at_dump: None,
            since_dump: 0,
            marks: Vec::new(),
            path: None,
            dump_ns: None,
            segs_last: None,
        })
    }

    /// Why there are no socket marks (`None`: there are).
    pub(super) fn marks_missing(&self) -> Option<&str> {
        match &self.moves {
            Marks::Off(why) => Some(why),
            Marks::On(_) | Marks::Idle | Marks::Detached => None,
        }
    }

    /// Attach the marks only while they cost less than dumping, with `cfg`'s hysteresis.
    pub(super) fn set_path_choice(&mut self, cfg: Option<placer_core::event_path::ChooserConfig>) {
        self.path = cfg.map(|c| HookPath::new(HookKind::SocketMarks, c));
    }

    /// Where the marks' choice stands.
    pub(super) fn path_status(&self) -> Option<PathStatus> {
        let p = self.path.as_ref()?;
        Some(p.status(matches!(self.moves, Marks::On(_))))
    }

    /// A sample without sockets: the marks are let go (they are loaded again, and the
    /// next sample dumps, when sockets are asked for again).
    pub(super) fn skipped(&mut self) {
        if let Marks::On(_) | Marks::Detached = self.moves {
            self.moves = Marks::Idle;
            self.states_at_dump = None;
        }
    }

    /// Whether the marking programs are loaded now.
    #[cfg(test)]
    pub(super) fn marks_loaded(&self) -> bool {
        matches!(self.moves, Marks::On(_))
    }

    /// This sample's sockets. `segments`: the namespace's TCP segment counters, asked only
    /// without the marks.
    pub(super) fn read(
        &mut self,
        segments: impl FnOnce() -> Option<(u64, u64)>,
    ) -> (Arc<[SocketSample]>, Read) {
        let Some(mut path) = self.path.take() else {
            return self.read_sockets(segments);
        };
        let mut hook = MarksHook {
            moves: &mut self.moves,
            diag: &self.diag,
            states_at_dump: &mut self.states_at_dump,
        };
        path.before(&mut hook);
        // The namespace's segment counts every sample: the marks' cost follows them.
        let t0 = crate::sys::thread_cpu_ns();
        let segs = segments();
        let (sockets, read) = self.read_sockets(|| segs);
        let read_ns = crate::sys::thread_cpu_ns().saturating_sub(t0);
        let on = matches!(self.moves, Marks::On(_));
        if read.how == SocketRead::Dump {
            self.dump_ns = Some(match self.dump_ns {
                Some(o) => o + 0.25 * (read_ns as f64 - o),
                None => read_ns as f64,
            });
        }
        // Without the marks a sample dumps when a segment moved since the last, and costs
        // next to nothing when none did: what it costs now, measured while detached.
        let moved = segs.is_some() && segs != std::mem::replace(&mut self.segs_last, segs);
        let polling_sample_ns = match (on, moved) {
            (false, _) => Some(read_ns as f64),
            (true, true) => self.dump_ns,
            (true, false) => Some(0.0),
        };
        let obs = Observed {
            events: segs.map(|(rx, _)| rx),
            time_ns: crate::sys::monotonic_ns(),
            events_sample_ns: on.then_some(read_ns),
            polling_sample_ns,
        };
        let mut hook = MarksHook {
            moves: &mut self.moves,
            diag: &self.diag,
            states_at_dump: &mut self.states_at_dump,
        };
        path.after(&mut hook, obs);
        self.path = Some(path);
        (sockets, read)
    }

    /// [`TcpReader::read`] once the marks' path is settled.
    fn read_sockets(
        &mut self,
        segments: impl FnOnce() -> Option<(u64, u64)>,
    ) -> (Arc<[SocketSample]>, Read) {
        if let Marks::Idle = self.moves {
            self.moves = Marks::load(self.diag.netns_cookie());
            if let Marks::Off(why) = &self.moves {
                tracing::warn!(
                    "TCP socket marks: {why}; every socket is dumped when a segment moved"
                );
            }
        }
        // The count before the drain, the drain before any socket is read: a socket born
        // after the count moves it for the next sample; a segment after the drain leaves
        // its mark for the next sample.
        let taken = match &mut self.moves {
            Marks::On(m) => match (m.state_changes(), m.drain(&mut self.marks)) {
                (Ok(states), Ok(complete)) => Some((states, complete)),
                (a, b) => {
                    tracing::debug!("TCP socket marks: {:?} {:?}", a.err(), b.err());
                    None
                }
            },
            Marks::Idle | Marks::Detached | Marks::Off(_) => None,
        };
        let mut moved: Vec<usize> = Vec::new();
        let marks = taken.map(|(states_now, complete)| {
            moved.extend(self.marks.iter().filter_map(|c| self.by_cookie.get(c)));
            moved.sort_unstable();
            moved.dedup();
            SocketMarks {
                states_now,
                states_at_dump: self.states_at_dump,
                complete,
                moved: moved.len(),
                known: self.last.len(),
                since_dump: self.since_dump,
            }
        });
        let segs = if marks.is_none() { segments() } else { None };
        self.since_dump += 1;
        let mut how = plan::socket_read(marks, segs, self.segments_at_dump);
        if how == SocketRead::Lookup && !self.lookup(&moved) {
            how = SocketRead::Dump;
        }
        let looked_up = if how == SocketRead::Lookup {
            moved.len()
        } else {
            0
        };
        let sockets = match how {
            SocketRead::Dump => self.dump(marks.map(|m| m.states_now), segs),
            SocketRead::Reuse | SocketRead::Lookup => self.last.clone(),
        };
        (sockets, Read { how, looked_up })
    }

    /// Reads the sockets at `moved` (indices into the last sample's) again; `false` when
    /// one is gone or sock_diag failed (the caller dumps).
    fn lookup(&mut self, moved: &[usize]) -> bool {
        let ids: Vec<SocketId> = moved.iter().map(|&i| self.ids[i]).collect();
        let got = match self.diag.lookup(&ids) {
            Ok(g) => g,
            Err(e) => {
                tracing::debug!("sock_diag lookup: {e}");
                return false;
            }
        };
        if got.iter().any(Option::is_none) {
            return false;
        }
        let mut next = self.last.to_vec();
        for (&i, s) in moved.iter().zip(got) {
            next[i] = s.expect("checked above");
        }
        self.last = next.into();
        true
    }

    /// Dumps every socket; `states`: the state-change count taken before (with the marks).
    /// A failed dump gives no sockets, and the next sample dumps.
    fn dump(&mut self, states: Option<u64>, segs: Option<(u64, u64)>) -> Arc<[SocketSample]> {
        self.since_dump = 0;
        match self.diag.tcp_sockets() {
            Ok(found) => {
                self.by_cookie = found
                    .ids
                    .iter()
                    .enumerate()
                    .map(|(i, id)| (id.cookie(), i))
                    .collect();
                self.ids = found.ids;
                self.last = found.sockets.into();
                self.states_at_dump = states;
                self.segments_at_dump = segs;
                self.last.clone()
            }
            Err(e) => {
                tracing::debug!("sock_diag: {e}");
                self.states_at_dump = None;
                self.segments_at_dump = None;
                Arc::default()
            }
        }
    }
}

/// The socket marks as a [`Hook`] of [`super::paths`].
struct MarksHook<'a> {
    moves: &'a mut Marks,
    diag: &'a SockDiag,
    states_at_dump: &'a mut Option<u64>,
}

impl Hook for MarksHook<'_> {
    fn attached(&self) -> Option<bool> {
        match self.moves {
            Marks::On(_) => Some(true),
            Marks::Detached => Some(false),
            Marks::Idle | Marks::Off(_) => None,
        }
    }

    fn set_attached(&mut self, on: bool) -> Result<(), String> {
        match (&*self.moves, on) {
            (Marks::On(_), false) => *self.moves = Marks::Detached,
            (Marks::Detached, true) => {
                *self.moves = Marks::load(self.diag.netns_cookie());
                if let Marks::Off(why) = &*self.moves {
                    let why = why.clone();
                    // Still wanted: tried again at the chooser's next move.
                    *self.moves = Marks::Detached;
                    return Err(why);
                }
            }
            _ => return Ok(()),
        }
        // Either way the next sample dumps: detached, no segment count at the last dump
        // to compare with; attached, no state count.
        *self.states_at_dump = None;
        Ok(())
    }

    fn run_time_ns(&self) -> Option<(u64, u64)> {
        match &*self.moves {
            Marks::On(m) => m.run_time_ns().ok(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testnet::VethPair;
    use std::io::{Read as _, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    /// Reads until a sample finds nothing moved (the handshakes' last ACKs may still
    /// land), for at most 2 s.
    fn settle(r: &mut TcpReader) {
        let t = Instant::now();
        loop {
            let (_, read) = r.read(|| None);
            if read.how == SocketRead::Reuse {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(2),
                "never settled: {read:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `n` bytes each way on a connection, read to the end on the other side.
    fn exchange(c: &mut TcpStream, s: &mut TcpStream, n: usize) {
        let mut buf = vec![0u8; n];
        c.write_all(&vec![1u8; n]).unwrap();
        s.read_exact(&mut buf).unwrap();
        s.write_all(&vec![2u8; n / 2]).unwrap();
        c.read_exact(&mut buf[..n / 2]).unwrap();
    }

    /// A connection opened and closed in namespace `ns` (on a thread of its own there).
    fn churn_in(ns: &str) {
        VethPair::in_netns(ns, || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let s = l.accept().unwrap();
            drop((c, s));
            std::thread::sleep(Duration::from_millis(20));
        })
        .join()
        .unwrap()
        .unwrap();
    }

    /// In a namespace of its own (so that only its sockets move there): 12 connections,
    /// 2 of them exchange bytes; the next sample reads those 4 sockets again and no
    /// other, and then holds what a dump gives. Connections opened and closed in another
    /// namespace (`other`) change nothing; one closed or opened here makes the next
    /// sample dump.
    fn in_own_namespace(other: &str) -> Result<(), String> {
        let mut r = TcpReader::open(true)?;
        if let Some(why) = r.marks_missing() {
            return Err(format!("socket marks unavailable: {why}"));
        }
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut conns: Vec<(TcpStream, TcpStream)> = (0..12)
            .map(|_| {
                let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
                (c, l.accept().unwrap().0)
            })
            .collect();
        for (c, s) in &mut conns {
            exchange(c, s, 100);
        }
        let (first, read) = r.read(|| None);
        assert_eq!(read.how, SocketRead::Dump, "the first sample dumps");
        assert_eq!(first.len(), 24);
        settle(&mut r);
        churn_in(other);
        for (c, s) in &mut conns[3..5] {
            exchange(c, s, 5000);
        }
        // The receivers' delayed ACKs (40 ms at most on loopback) reach the senders.
        std::thread::sleep(Duration::from_millis(200));
        let (got, read) = r.read(|| None);
        assert_eq!(
            read,
            Read {
                how: SocketRead::Lookup,
                looked_up: 4
            }
        );
        let dump = SockDiag::open().unwrap().tcp_sockets().unwrap().sockets;
        assert_eq!(got.len(), dump.len());
        for s in got.iter() {
            let d = dump
                .iter()
                .find(|d| d.inode == s.inode)
                .expect("in the dump");
            assert_eq!(s, d, "read again or kept, as the dump says");
        }
        let moved: Vec<&SocketSample> = got
            .iter()
            .filter(|s| s.bytes_received > 2000 || s.bytes_acked > 2000)
            .collect();
        assert_eq!(moved.len(), 4, "{moved:?}");
        settle(&mut r);
        // A connection closed: its state changes; the next sample dumps.
        drop(conns.pop());
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(r.read(|| None).1.how, SocketRead::Dump);
        settle(&mut r);
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _s = l.accept().unwrap();
        let (after, read) = r.read(|| None);
        assert_eq!(read.how, SocketRead::Dump, "a new connection");
        assert!(after.iter().any(|s| s.local == c.local_addr().unwrap()));
        // A sample without sockets lets the marks go; the next with them loads them again
        // and dumps first.
        r.skipped();
        assert!(!r.marks_loaded());
        assert_eq!(r.read(|| None).1.how, SocketRead::Dump);
        assert!(r.marks_loaded());
        settle(&mut r);
        Ok(())
    }

    const IDLE_CONNS: usize = 1000;

    /// In a namespace of its own: the marks detach under a stream of small segments (each
    /// a run of `placer_tcpmove`) and attach again under slow traffic, where a dump at each
    /// sample costs more; the sample after each
    /// move dumps, and every sample's receiving socket holds what a dump just after says.
    fn marks_by_cost_in_own_namespace() -> Result<(), String> {
        let mut r = TcpReader::open(true)?;
        if let Some(why) = r.marks_missing() {
            return Err(format!("socket marks unavailable: {why}"));
        }
        if crate::bpf::RunTimeStats::enable().is_err() {
            return Err("no BPF run-time statistics (Linux 5.8)".into());
        }
        r.set_path_choice(Some(placer_core::event_path::ChooserConfig {
            factor: 1.5,
            streak: 2,
            hold: 2,
        }));
        let segs = || {
            std::fs::read_to_string("/proc/thread-self/net/snmp")
                .ok()
                .and_then(|t| crate::procfs::parse_tcp_segments(&t))
        };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        // Idle connections beside it: a dump costs what it reads.
        let _idle: Vec<(TcpStream, TcpStream)> = (0..IDLE_CONNS)
            .map(|_| {
                let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
                (c, l.accept().unwrap().0)
            })
            .collect();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut srv, _) = l.accept().unwrap();
        let port = c.local_addr().unwrap();
        // 0: stop; 1: as fast as it goes; 2: a byte every 50 ms.
        let pace = Arc::new(std::sync::atomic::AtomicU8::new(1));
        // The sender: one byte a write, no coalescing: a segment each (bounded: 60 s).
        let sender = {
            let pace = pace.clone();
            let mut c = c.try_clone().unwrap();
            c.set_nodelay(true).unwrap();
            std::thread::spawn(move || {
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_secs(60) {
                    match pace.load(std::sync::atomic::Ordering::Relaxed) {
                        0 => return,
                        1 => {}
                        _ => std::thread::sleep(Duration::from_millis(50)),
                    }
                    if c.write_all(b"x").is_err() {
                        return;
                    }
                }
            })
        };
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while let Ok(n) = srv.read(&mut buf) {
                if n == 0 {
                    return;
                }
            }
        });
        // The receiving side's socket (remote = the sender) against a dump just after.
        let check = |r: &mut TcpReader, when: &str| -> SocketRead {
            let (got, read) = r.read(segs);
            let mine = got
                .iter()
                .find(|s| s.remote == port)
                .map(|s| s.bytes_received);
            let fresh = TcpReader::open(false).unwrap().dump(None, None);
            let truth = fresh
                .iter()
                .find(|s| s.remote == port)
                .map(|s| s.bytes_received);
            match (mine, truth) {
                (Some(a), Some(b)) => assert!(a <= b, "{when}: {a} > a dump's {b}"),
                _ => panic!("{when}: the socket missing: {mine:?} / {truth:?}"),
            }
            read.how
        };
        let t0 = Instant::now();
        let mut how = SocketRead::Dump;
        while r.marks_loaded() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "still attached after 30 s of the stream: {:?}",
                r.path_status()
            );
            // Sampled every 2 s: a dump's cost per second is small beside the program's
            // at every segment of the stream.
            std::thread::sleep(Duration::from_millis(2000));
            how = check(&mut r, "stream");
        }
        eprintln!("detached after {:?}: {:?}", t0.elapsed(), r.path_status());
        assert_eq!(how, SocketRead::Dump, "the sample that detached them dumps");
        // A byte every 50 ms, sampled every 200 ms: a dump at each sample costs more than
        // the program at 20 segments a second and a look-up.
        pace.store(2, std::sync::atomic::Ordering::Relaxed);
        let t1 = Instant::now();
        while !r.marks_loaded() {
            assert!(
                t1.elapsed() < Duration::from_secs(30),
                "still detached 30 s into the slow traffic: {:?}",
                r.path_status()
            );
            std::thread::sleep(Duration::from_millis(200));
            how = check(&mut r, "slow traffic");
        }
        eprintln!("attached after {:?}: {:?}", t1.elapsed(), r.path_status());
        assert_eq!(how, SocketRead::Dump, "the sample that attached them dumps");
        pace.store(0, std::sync::atomic::Ordering::Relaxed);
        sender.join().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        // Quiet, the marks hold: the socket stands as the dump says.
        r.read(segs);
        let (got, _) = r.read(segs);
        let fresh = TcpReader::open(false).unwrap().dump(None, None);
        let f = |x: &[SocketSample]| {
            x.iter()
                .find(|s| s.remote == port)
                .map(|s| s.bytes_received)
        };
        assert_eq!(f(&got), f(&fresh));
        drop(c);
        let _ = reader.join();
        Ok(())
    }

    #[test]
    fn real_socket_marks_detach_under_a_stream_and_attach_again_under_slow_traffic() {
        placer_testkit::require_root();
        if let Some(why) = crate::testnet::unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        let pair = VethPair::new().unwrap();
        let outcome = VethPair::in_netns(&pair.ns_a, marks_by_cost_in_own_namespace).join();
        match outcome {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(why))) => placer_testkit::skip(&why),
            Ok(Err(e)) => panic!("entering the namespace: {e}"),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    #[test]
    fn real_only_the_sockets_that_moved_are_read_again_and_they_match_a_dump() {
        placer_testkit::require_root();
        if let Some(why) = crate::testnet::unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        let pair = VethPair::new().unwrap();
        let other = pair.ns_b.clone();
        let outcome = VethPair::in_netns(&pair.ns_a, move || in_own_namespace(&other)).join();
        match outcome {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(why))) => placer_testkit::skip(&why),
            Ok(Err(e)) => panic!("entering the namespace: {e}"),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}
