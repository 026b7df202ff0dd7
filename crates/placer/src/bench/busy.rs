//! The busy background of `placer bench overhead --background`: a known rate of context
//! switches and loopback TCP streams, so that the in-kernel cost of placer's per-event
//! programs is measured where it grows (an idle machine hides it).
//!
//! The switches: two threads bounce a byte over two pipes, both pinned to one CPU, so each
//! round trip is two switches (one to the other thread and back); the pinger paces the round
//! trips to the rate asked in 1 ms slots (sleeping between slots adds the idle task's
//! switches, which the machine-wide count reported beside includes). The streams: a sender
//! and a receiver thread per stream over 127.0.0.1, as fast as they go or paced.
//!
//! Everything is a thread of the bench itself: it ends with the bench whatever the cause
//! (an interrupt, a panic, a kill), and each loop stops at a deadline even if the bench
//! forgets to stop it, so nothing outlives it (no child process, no namespace).

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What to run beside the measurement: `switches:N,stream:M[,stream-gbit:R]`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Background {
    /// Context switches per second the ping-pong aims at (0: no ping-pong).
    pub switches_per_s: u64,
    /// Loopback TCP streams.
    pub streams: u32,
    /// Each stream's pace; `None`: as fast as it goes.
    pub stream_gbit_per_s: Option<f64>,
}

impl std::str::FromStr for Background {
    type Err = String;

    fn from_str(s: &str) -> Result<Background, String> {
        let mut b = Background::default();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once(':')
                .ok_or_else(|| format!("{part:?}: KEY:VALUE expected"))?;
            let bad = |e: &dyn std::fmt::Display| format!("{part:?}: {e}");
            match key {
                "switches" => b.switches_per_s = value.parse().map_err(|e| bad(&e))?,
                "stream" => b.streams = value.parse().map_err(|e| bad(&e))?,
                "stream-gbit" => {
                    let r: f64 = value.parse().map_err(|e| bad(&e))?;
                    if !(r.is_finite() && r > 0.0) {
                        return Err(bad(&"a positive rate"));
                    }
                    b.stream_gbit_per_s = Some(r);
                }
                _ => return Err(format!("{key:?}: switches, stream or stream-gbit")),
            }
        }
        if b.switches_per_s == 0 && b.streams == 0 {
            return Err("nothing to run: switches:N and/or stream:M".into());
        }
        Ok(b)
    }
}

/// The counters a window's rates come from.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    at: Instant,
    /// The machine's context switches (`/proc/stat` `ctxt`).
    machine_switches: u64,
    /// TCP segments received in this network namespace (`/proc/net/snmp` `InSegs`).
    segments: u64,
    round_trips: u64,
    stream_bytes: u64,
}

/// What the background and the machine did over a window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rates {
    /// Every context switch of the machine, per second (the ping-pong's and all others).
    pub machine_switches_per_s: f64,
    /// The ping-pong's own (two per round trip).
    pub pingpong_switches_per_s: f64,
    /// TCP segments received in this network namespace, per second.
    pub segments_per_s: f64,
    /// The streams' payload, Gbit/s.
    pub stream_gbit_per_s: f64,
}

impl Snapshot {
    /// The rates from `self` to `later`.
    pub fn rates_to(&self, later: &Snapshot) -> Rates {
        let s = later.at.duration_since(self.at).as_secs_f64().max(1e-9);
        let per_s = |a: u64, b: u64| b.saturating_sub(a) as f64 / s;
        Rates {
            machine_switches_per_s: per_s(self.machine_switches, later.machine_switches),
            pingpong_switches_per_s: 2.0 * per_s(self.round_trips, later.round_trips),
            segments_per_s: per_s(self.segments, later.segments),
            stream_gbit_per_s: per_s(self.stream_bytes, later.stream_bytes) * 8.0 / 1e9,
        }
    }
}

/// The running background; dropping it stops and joins every thread.
pub struct Busy {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    round_trips: Arc<AtomicU64>,
    stream_bytes: Arc<AtomicU64>,
}

/// Sleeps until `elapsed` reaches the next whole millisecond slot after the work due by now.
fn next_slot(t0: Instant) {
    let slot = Duration::from_millis(1);
    let e = t0.elapsed();
    let next = slot * (e.as_millis() as u32 + 1);
    std::thread::sleep(next.saturating_sub(e));
}

/// A pace of `per_s` units of work: what is due by now. A thread that fell behind (its CPU
/// taken by others) does at most 2 ms of work more than its count and forgets the rest, so
/// that no window sees more than the rate asked (and a window of a stall sees less, as
/// measured).
struct Pace {
    t0: Instant,
    per_s: f64,
    forgotten: u64,
}

impl Pace {
    fn new(per_s: f64) -> Pace {
        Pace {
            t0: Instant::now(),
            per_s,
            forgotten: 0,
        }
    }

    fn due(&mut self, done: u64) -> u64 {
        let want =
            ((self.t0.elapsed().as_secs_f64() * self.per_s) as u64).saturating_sub(self.forgotten);
        let most = done + (self.per_s / 500.0).ceil() as u64;
        if want > most {
            self.forgotten += want - most;
            return most;
        }
        want
    }
}

impl Busy {
    /// Starts `bg` (the ping-pong pinned to `cpu`), every loop ending by `limit` at the
    /// latest.
    pub fn start(bg: Background, cpu: u32, limit: Duration) -> Result<Busy> {
        let mut busy = Busy {
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            round_trips: Arc::default(),
            stream_bytes: Arc::default(),
        };
        let deadline = Instant::now() + limit;
        if bg.switches_per_s > 0 {
            busy.ping_pong(bg.switches_per_s as f64 / 2.0, cpu, deadline)?;
        }
        for _ in 0..bg.streams {
            busy.stream(bg.stream_gbit_per_s, deadline)?;
        }
        Ok(busy)
    }

    fn running(stop: &AtomicBool, deadline: Instant) -> bool {
        !stop.load(Ordering::Relaxed) && Instant::now() < deadline
    }

    fn ping_pong(&mut self, round_trips_per_s: f64, cpu: u32, deadline: Instant) -> Result<()> {
        let (mut to_pong_r, mut to_pong_w) = std::io::pipe().context("pipe")?;
        let (mut to_ping_r, mut to_ping_w) = std::io::pipe().context("pipe")?;
        // The pong ends when the ping's pipe closes (end of file).
        self.threads.push(std::thread::spawn(move || {
            let _ = placer_linux::sys::pin_self(cpu);
            let mut b = [0u8; 1];
            while matches!(to_pong_r.read(&mut b), Ok(1)) {
                if to_ping_w.write_all(&b).is_err() {
                    return;
                }
            }
        }));
        let (stop, count) = (self.stop.clone(), self.round_trips.clone());
        self.threads.push(std::thread::spawn(move || {
            let _ = placer_linux::sys::pin_self(cpu);
            let (mut pace, mut done, mut b) = (Pace::new(round_trips_per_s), 0u64, [0u8; 1]);
            while Busy::running(&stop, deadline) {
                let want = pace.due(done);
                while done < want {
                    if to_pong_w.write_all(&b).is_err() || !matches!(to_ping_r.read(&mut b), Ok(1))
                    {
                        return;
                    }
                    done += 1;
                    // Published per round trip: a window reads it at any time.
                    count.store(done, Ordering::Relaxed);
                }
                next_slot(pace.t0);
            }
        }));
        Ok(())
    }

    fn stream(&mut self, gbit_per_s: Option<f64>, deadline: Instant) -> Result<()> {
        let l = TcpListener::bind("127.0.0.1:0").context("loopback listener")?;
        let mut tx = TcpStream::connect(l.local_addr()?).context("loopback connect")?;
        let (mut rx, _) = l.accept().context("loopback accept")?;
        // Bounds the receiver's wait should the sender be gone without a close.
        rx.set_read_timeout(Some(Duration::from_secs(1)))?;
        let bytes = self.stream_bytes.clone();
        self.threads.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            while Instant::now() < deadline + Duration::from_secs(1) {
                match rx.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                    Err(_) => return,
                }
            }
        }));
        let stop = self.stop.clone();
        self.threads.push(std::thread::spawn(move || {
            let buf = vec![b'x'; 1 << 16];
            let mut pace = gbit_per_s.map(|g| Pace::new(g * 1e9 / 8.0));
            let mut sent = 0u64;
            while Busy::running(&stop, deadline) {
                let want = pace
                    .as_mut()
                    .map_or(sent + buf.len() as u64, |p| p.due(sent));
                while sent < want {
                    if tx.write_all(&buf).is_err() {
                        return;
                    }
                    sent += buf.len() as u64;
                }
                if let Some(p) = &pace {
                    next_slot(p.t0);
                }
            }
        }));
        Ok(())
    }

    /// The counters now.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let stat = std::fs::read_to_string("/proc/stat").context("/proc/stat")?;
        let snmp = std::fs::read_to_string("/proc/net/snmp").context("/proc/net/snmp")?;
        let Some(machine_switches) = placer_linux::procfs::parse_context_switches(&stat) else {
            bail!("/proc/stat: no ctxt line");
        };
        Ok(Snapshot {
            at: Instant::now(),
            machine_switches,
            segments: placer_linux::procfs::parse_tcp_segments(&snmp).map_or(0, |s| s.0),
            round_trips: self.round_trips.load(Ordering::Relaxed),
            stream_bytes: self.stream_bytes.load(Ordering::Relaxed),
        })
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_background_grammar() {
        let b: Background = "switches:100000,stream:1".parse().unwrap();
        assert_eq!(
            b,
            Background {
                switches_per_s: 100_000,
                streams: 1,
                stream_gbit_per_s: None
            }
        );
        let b: Background = "stream:2,stream-gbit:1.5".parse().unwrap();
        assert_eq!((b.switches_per_s, b.streams), (0, 2));
        assert_eq!(b.stream_gbit_per_s, Some(1.5));
        for bad in [
            "",
            "switches:0",
            "switches",
            "switches:x",
            "streams:1",
            "stream:1,stream-gbit:0",
            "stream:1,stream-gbit:-1",
        ] {
            assert!(bad.parse::<Background>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn work_due_is_paced_and_a_stall_is_forgotten_not_caught_up() {
        let mut p = Pace::new(1000.0);
        p.t0 = Instant::now() - Duration::from_secs(10);
        // Ten seconds behind at 1,000/s: 2 ms of work more, the rest forgotten.
        assert_eq!(p.due(0), 2);
        assert_eq!(p.forgotten, 9_998);
        // Then on at the pace from there, not from the start.
        let d = p.due(2);
        assert!((2..=4).contains(&d), "{d}");
        assert_eq!(Pace::new(1000.0).due(0), 0);
    }

    /// The ping-pong runs at about the rate asked, the stream moves bytes, and dropping the
    /// background ends every thread promptly.
    #[test]
    fn a_short_background_runs_at_its_rate_and_stops() {
        let bg: Background = "switches:2000,stream:1,stream-gbit:0.1".parse().unwrap();
        let busy = Busy::start(bg, 0, Duration::from_secs(10)).unwrap();
        let a = busy.snapshot().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let r = a.rates_to(&busy.snapshot().unwrap());
        let t = Instant::now();
        drop(busy);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // Within a factor of the rate asked: a shared 2-vCPU VM may lag, never run ahead
        // by more than a slot's rounding.
        assert!(
            (500.0..=2200.0).contains(&r.pingpong_switches_per_s),
            "{r:?}"
        );
        assert!(
            r.stream_gbit_per_s > 0.01 && r.stream_gbit_per_s < 0.15,
            "{r:?}"
        );
        assert!(
            r.machine_switches_per_s >= r.pingpong_switches_per_s * 0.9,
            "{r:?}"
        );
    }
}
