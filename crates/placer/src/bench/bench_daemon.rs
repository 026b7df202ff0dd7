//! `placer bench daemon`: what the daemon costs and how fast it reacts.
//!
//! Overhead: N sleeping processes (`sleep`) and M idle TCP connections over loopback (held
//! by this process), then `placer daemon --dry-run` (net-affinity, the whole cycle except
//! applying, which has nothing to apply here) at the given interval; its CPU time (utime +
//! stime from /proc/PID/stat) over a window after warm-up, as a share of one CPU, and its
//! mean cycle time from its own metrics.
//!
//! Reaction (root, `ip`, two CPUs): two network namespaces joined by veth, the receiver's
//! receive processing steered to CPU 1 with RPS, `placer daemon` in the receiver's
//! namespace; each run starts a fresh receiver and, at a random phase of the daemon's
//! cycle, a sender that connects, idles two intervals, then streams; reaction = time from the first byte sent to the receiver's
//! Cpus_allowed_list reading `1`. Median over the runs. The receive CPU's load check is
//! off (cpu_load_threshold = 1.0) so a busy shared machine does not change the answer.
//!
//! The receiver and sender are this binary again (`--role`, hidden), run in the namespaces
//! with `ip netns exec`.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Daemon interval for both measurements.
    #[arg(long, default_value = "1s", value_parser = crate::common::duration_arg)]
    pub interval: Duration,
    /// Length of the overhead measurement window (after a warm-up of 3 intervals).
    #[arg(long, alias = "seconds", default_value = "30s", value_parser = crate::common::duration_arg)]
    pub duration: Duration,
    /// Sleeping processes in the overhead scenario.
    #[arg(long, default_value_t = 500)]
    pub procs: u32,
    /// Idle TCP connections in the overhead scenario.
    #[arg(long, default_value_t = 200)]
    pub conns: u32,
    /// Reaction-time runs.
    #[arg(long, default_value_t = 10)]
    pub runs: u32,
    /// Skip the overhead measurement.
    #[arg(long)]
    pub no_overhead: bool,
    /// Skip the reaction measurement.
    #[arg(long)]
    pub no_reaction: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Internal: run as the benchmark's `receiver` or `sender`.
    #[arg(long, hide = true)]
    pub role: Option<String>,
    #[arg(long, hide = true)]
    pub addr: Option<String>,
    #[arg(long, hide = true)]
    pub comm: Option<String>,
    #[arg(long, hide = true, default_value_t = 0)]
    pub idle_ms: u64,
    #[arg(long, hide = true, default_value_t = 0)]
    pub stream_ms: u64,
    #[arg(long, hide = true, default_value_t = 20_000_000)]
    pub rate_bytes_per_s: u64,
}

#[derive(Serialize, Default)]
struct Report {
    interval_ms: u64,
    overhead: Option<Overhead>,
    reaction: Option<Reaction>,
}

#[derive(Serialize)]
struct Overhead {
    procs: u32,
    conns: u32,
    window_s: f64,
    cpu_s: f64,
    /// CPU time / wall time, percent of one CPU.
    cpu_percent_of_one: f64,
    cycles: u64,
    mean_cycle_ms: f64,
}

#[derive(Serialize)]
struct Reaction {
    runs_ms: Vec<f64>,
    /// Runs in which the receiver was not pinned within 5 intervals.
    missed: u32,
    median_ms: Option<f64>,
}

pub fn run(args: Args) -> Result<()> {
    if let Some(role) = args.role.as_deref() {
        return match role {
            "receiver" => receiver(&args),
            "sender" => sender(&args),
            r => bail!("unknown role {r}"),
        };
    }
    let interval = args.interval;
    let mut report = Report {
        interval_ms: interval.as_millis() as u64,
        ..Default::default()
    };
    if !args.no_overhead {
        report.overhead = Some(overhead(&args, interval)?);
    }
    if !args.no_reaction {
        match reaction_missing() {
            Some(why) => eprintln!("reaction time skipped: {why}"),
            None => report.reaction = Some(reaction(&args, interval)?),
        }
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    if let Some(o) = &report.overhead {
        outln!(
            "daemon overhead: {:.3}% of one CPU ({:.3} s CPU over {:.1} s) at a {} ms interval, \
             {} sleeping processes, {} TCP connections; {} cycles, mean cycle {:.2} ms",
            o.cpu_percent_of_one,
            o.cpu_s,
            o.window_s,
            report.interval_ms,
            o.procs,
            o.conns,
            o.cycles,
            o.mean_cycle_ms
        );
    }
    if let Some(r) = &report.reaction {
        outln!(
            "reaction (stream start to pin) at a {} ms interval: median {} over {} runs ({} missed); runs: {}",
            report.interval_ms,
            r.median_ms.map_or("n/a".into(), |m| format!("{m:.0} ms")),
            r.runs_ms.len(),
            r.missed,
            r.runs_ms
                .iter()
                .map(|m| format!("{m:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    Ok(())
}

use placer_linux::sys::monotonic_ns;

fn set_comm(name: &str) {
    let _ = std::fs::write("/proc/self/comm", name);
}

fn receiver(args: &Args) -> Result<()> {
    set_comm(args.comm.as_deref().unwrap_or("plrbrx"));
    let l = TcpListener::bind(args.addr.as_deref().context("--addr")?)?;
    outln!("listening");
    std::io::stdout().flush()?;
    let mut buf = vec![0u8; 1 << 16];
    for c in l.incoming() {
        let mut c = c?;
        while c.read(&mut buf).map(|n| n > 0).unwrap_or(false) {}
    }
    Ok(())
}

fn sender(args: &Args) -> Result<()> {
    set_comm("plrbtx");
    let mut c = TcpStream::connect(args.addr.as_deref().context("--addr")?)?;
    std::thread::sleep(Duration::from_millis(args.idle_ms));
    let t0 = Instant::now();
    outln!("start {}", monotonic_ns());
    std::io::stdout().flush()?;
    let buf = vec![b'x'; 1 << 16];
    let mut sent = 0u64;
    let rate = args.rate_bytes_per_s.max(1) as f64;
    while t0.elapsed() < Duration::from_millis(args.stream_ms) {
        c.write_all(&buf)?;
        sent += buf.len() as u64;
        let ahead = sent as f64 / rate - t0.elapsed().as_secs_f64();
        if ahead > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(ahead));
        }
    }
    outln!("stop");
    std::thread::sleep(Duration::from_secs(3600));
    Ok(())
}

/// Children killed and reaped on drop.
#[derive(Default)]
pub(crate) struct Kids(pub(crate) Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

/// utime + stime of a process, seconds.
pub(crate) fn cpu_s(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let st = placer_linux::procfs::parse_pid_stat(&stat).context("parsing /proc/PID/stat")?;
    let ticks = st.utime_ticks + st.stime_ticks;
    Ok(ticks as f64 / placer_linux::sys::clock_ticks_per_s() as f64)
}

fn scrape(addr: &str) -> Result<String> {
    let mut c = TcpStream::connect(addr)?;
    c.set_read_timeout(Some(Duration::from_secs(2)))?;
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")?;
    let mut s = String::new();
    c.read_to_string(&mut s)?;
    Ok(s)
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

pub(crate) fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("placer-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::create_dir_all(&d);
    d
}

/// The load the overhead is measured on: `procs` sleeping processes and `conns` idle
/// loopback TCP connections, kept while the returned value lives.
pub(crate) fn idle_load(procs: u32, conns: u32) -> Result<(Kids, Vec<(TcpStream, TcpStream)>)> {
    let mut kids = Kids::default();
    for _ in 0..procs {
        let mut sleep = Command::new("sleep");
        // Gone with the bench even when it is killed.
        placer_linux::sys::stop_with_parent(&mut sleep)?;
        kids.0.push(
            sleep
                .arg("3600")
                .stdin(Stdio::null())
                .spawn()
                .context("spawning sleep")?,
        );
    }
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let mut pairs = Vec::new();
    for _ in 0..conns {
        let c = TcpStream::connect(addr)?;
        let (s, _) = l.accept()?;
        pairs.push((c, s));
    }
    Ok((kids, pairs))
}

fn overhead(args: &Args, interval: Duration) -> Result<Overhead> {
    let _load = idle_load(args.procs, args.conns)?;
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let dir = temp_dir("overhead");
    let cfg = dir.join("placer.toml");
    std::fs::write(
        &cfg,
        format!(
            "interval_ms = {}\nstate_dir = {:?}\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n",
            interval.as_millis(),
            dir.join("state").display().to_string()
        ),
    )?;
    let exe = std::env::current_exe()?;
    let mut daemon = Kids::default();
    daemon.0.push(
        Command::new(&exe)
            .args(["daemon", "--dry-run", "--config"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let pid = daemon.0[0].id();
    std::thread::sleep(interval * 3);
    let addr = format!("127.0.0.1:{port}");
    let m0 = scrape(&addr).context("scraping the daemon's metrics")?;
    let (c0, t0) = (cpu_s(pid)?, Instant::now());
    std::thread::sleep(args.duration);
    let (c1, window) = (cpu_s(pid)?, t0.elapsed().as_secs_f64());
    let m1 = scrape(&addr)?;
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
    let count = |m: &str| metric(m, "placer_cycle_seconds_count").unwrap_or(0.0);
    let sum = |m: &str| metric(m, "placer_cycle_seconds_sum").unwrap_or(0.0);
    let cycles = (count(&m1) - count(&m0)).max(0.0);
    Ok(Overhead {
        procs: args.procs,
        conns: args.conns,
        window_s: window,
        cpu_s: c1 - c0,
        cpu_percent_of_one: (c1 - c0) / window * 100.0,
        cycles: cycles as u64,
        mean_cycle_ms: if cycles > 0.0 {
            (sum(&m1) - sum(&m0)) / cycles * 1e3
        } else {
            0.0
        },
    })
}

fn reaction_missing() -> Option<String> {
    if !placer_linux::sys::is_root() {
        return Some("needs root (network namespaces)".into());
    }
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let allowed = placer_linux::procfs::parse_status(&text).cpus_allowed?;
    if allowed.contains(0) && allowed.contains(1) {
        None
    } else {
        Some(format!("needs CPUs 0 and 1 (allowed: {allowed})"))
    }
}

/// Reads lines of a child's stdout until one starts with `prefix` (bounded by `limit`).
fn wait_line(child: &mut Child, prefix: &str, limit: Duration) -> Result<String> {
    let out = child.stdout.take().context("stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    let p = prefix.to_string();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if l.starts_with(&p) {
                let _ = tx.send(l);
                break;
            }
        }
    });
    rx.recv_timeout(limit)
        .with_context(|| format!("no {prefix:?} line within {limit:?}"))
}

fn affinity(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| placer_linux::procfs::parse_status(&t).cpus_allowed)
        .map(|c| c.to_string())
        .unwrap_or_default()
}

fn reaction(args: &Args, interval: Duration) -> Result<Reaction> {
    // Receiver in B (RPS on CPU 1, as a NIC's interrupt would steer it), sender in A;
    // removed on drop, after the processes below.
    let net = placer_linux::testnet::VethPair::new().context("creating the namespaces")?;
    placer_linux::testnet::set_rps(&net.ns_b, &net.dev_b, 1).context("RPS on CPU 1")?;
    let exe = std::env::current_exe()?;
    let exec = |ns: &str| {
        let mut c = placer_linux::testnet::VethPair::exec(ns);
        c.arg(&exe);
        c
    };
    let dir = temp_dir("reaction");
    let cfg = dir.join("placer.toml");
    std::fs::write(
        &cfg,
        format!(
            "interval_ms = {}\nstate_dir = {:?}\n[scope]\ninclude_comm = [\"plrbrx*\"]\n\
             [metrics]\nenabled = false\n[net_affinity]\ncpu_load_threshold = 1.0\nmin_hold_ms = 0\n",
            interval.as_millis(),
            dir.join("state").display().to_string()
        ),
    )?;
    let mut daemon = Kids::default();
    daemon.0.push(
        exec(&net.ns_b)
            .args(["daemon", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    std::thread::sleep(interval * 2);
    let mut runs_ms = Vec::new();
    let mut missed = 0;
    for run in 0..args.runs {
        let addr = format!("{}:{}", net.addr_b, 6000 + run);
        let mut kids = Kids::default();
        let mut rx = exec(&net.ns_b)
            .args(["bench", "daemon", "--role", "receiver", "--addr", &addr])
            .args(["--comm", &format!("plrbrx{run}")])
            .stdout(Stdio::piped())
            .spawn()?;
        let rx_pid = rx.id();
        wait_line(&mut rx, "listening", Duration::from_secs(10))?;
        kids.0.push(rx);
        let original = affinity(rx_pid);
        // A random phase against the daemon's cycle: runs are otherwise spaced by whole
        // intervals and would all hit the same point of the cycle.
        let phase_ns =
            monotonic_ns().wrapping_mul(0x9E37_79B9_7F4A_7C15) % interval.as_nanos().max(1) as u64;
        std::thread::sleep(Duration::from_nanos(phase_ns));
        let mut tx = exec(&net.ns_a)
            .args(["bench", "daemon", "--role", "sender", "--addr", &addr])
            .args(["--idle-ms", &(interval.as_millis() * 2).to_string()])
            .args(["--stream-ms", &(interval.as_millis() * 6).to_string()])
            .stdout(Stdio::piped())
            .spawn()?;
        let line = wait_line(&mut tx, "start", interval * 4 + Duration::from_secs(5))?;
        kids.0.push(tx);
        let start_ns: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .context("start line")?;
        let deadline = Instant::now() + interval * 5;
        let mut pinned = None;
        while Instant::now() < deadline {
            if affinity(rx_pid) == "1" && original != "1" {
                pinned = Some(monotonic_ns());
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        match pinned {
            Some(t) => runs_ms.push(t.saturating_sub(start_ns) as f64 / 1e6),
            None => missed += 1,
        }
        drop(kids);
        // Let the daemon see the receiver gone before the next run.
        std::thread::sleep(interval);
    }
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
    let median_ms = placer_core::stats::median(&runs_ms);
    Ok(Reaction {
        runs_ms,
        missed,
        median_ms,
    })
}
