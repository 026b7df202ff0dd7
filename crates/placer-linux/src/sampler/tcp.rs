//! The TCP sockets of a sample: dumped, the last sample's again, or the last sample's with
//! those the kernel marked as moved read again ([`plan::socket_read`] decides which).

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
}

/// The kernel's socket marks: loaded at the probe (so that the sources say whether they
/// work), let go while samples do not ask for sockets (each segment received costs their
/// program a few hundred ns), loaded again at the next that does.
enum Marks {
    On(TcpMoves),
    /// Wanted, not loaded now.
    Idle,
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
        })
    }

    /// Why there are no socket marks (`None`: there are).
    pub(super) fn marks_missing(&self) -> Option<&str> {
        match &self.moves {
            Marks::Off(why) => Some(why),
            Marks::On(_) | Marks::Idle => None,
        }
    }

    /// A sample without sockets: the marks are let go (they are loaded again, and the
    /// next sample dumps, when sockets are asked for again).
    pub(super) fn skipped(&mut self) {
        if let Marks::On(_) = self.moves {
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
            Marks::Idle | Marks::Off(_) => None,
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
