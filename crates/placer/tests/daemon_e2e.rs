//! End-to-end tests of `placer daemon` on the real kernel (need root, `ip`, python3 and two
//! CPUs; skipped with a reason otherwise).
//!
//! Two network namespaces joined by a veth pair; the receiver's veth steers receive
//! processing to CPU 1 with RPS; a receiver (python3, renamed `plrrx…`) in one namespace, a
//! sender in the other; `placer daemon` runs in the receiver's namespace, scoped to the
//! receiver's name. Checks: pinned to CPU 1 within 2 intervals of the stream starting,
//! restored within timeout + 2 intervals of it stopping; with a CPU burner on CPU 1, pinned
//! to CPU 0 (sharing cache) or left alone as the config says; restore after SIGTERM, after
//! SIGKILL + `placer restore`, after SIGKILL + a new daemon; `--dry-run` changes nothing; a
//! bad config is rejected naming the field.
//!
//! The namespace tests run one at a time (a lock), since they share the two CPUs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const PLACER: &str = env!("CARGO_BIN_EXE_placer");
const INTERVAL_MS: u64 = 250;
const TIMEOUT_MS: u64 = 1000;
/// 20 MB/s: 20x the default intensity threshold.
const SENDER_BYTES_PER_S: u64 = 20_000_000;

static SERIAL: Mutex<()> = Mutex::new(());
static SEQ: AtomicU32 = AtomicU32::new(0);

fn uniq() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    )
}

fn run(cmd: &mut Command) -> std::io::Result<std::process::Output> {
    cmd.stdin(Stdio::null()).output()
}

fn ok(cmd: &mut Command) -> bool {
    run(cmd).is_ok_and(|o| o.status.success())
}

/// Why this machine cannot run the namespace tests, if it cannot.
fn missing() -> Option<String> {
    if !ok(Command::new("ip").arg("-V")) {
        return Some("needs iproute2 (`ip`)".into());
    }
    if !ok(Command::new("python3").args(["-c", "import socket"])) {
        return Some("needs python3".into());
    }
    let allowed = placer_testkit::proc::status_field(std::process::id(), "Cpus_allowed_list:")
        .unwrap_or_default();
    if !cpus(&allowed).is_some_and(|v| v.contains(&0) && v.contains(&1)) {
        return Some(format!("needs CPUs 0 and 1 (allowed: {allowed})"));
    }
    None
}

fn cpus(list: &str) -> Option<Vec<u32>> {
    let mut v = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => v.push(part.parse().ok()?),
        }
    }
    Some(v)
}

fn affinity(pid: u32) -> String {
    placer_testkit::proc::status_field(pid, "Cpus_allowed_list:").unwrap_or_default()
}

/// Polls `f` every 20 ms until it holds or `limit` passes; returns the instant it held.
fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Instant> {
    let t0 = Instant::now();
    loop {
        if f() {
            return Some(Instant::now());
        }
        if t0.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child killed (and reaped) on drop.
struct Kid {
    child: Child,
    lines: Option<Receiver<(String, Instant)>>,
}

impl Kid {
    fn spawn(cmd: &mut Command) -> Kid {
        let mut child = placer_testkit::proc::die_with_parent(cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send((line, Instant::now())).is_err() {
                    break;
                }
            }
        });
        Kid {
            child,
            lines: Some(rx),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a line starting with `prefix`; returns when it was printed.
    fn expect_line(&self, prefix: &str, limit: Duration) -> Instant {
        let rx = self.lines.as_ref().expect("lines");
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((l, t)) if l.starts_with(prefix) => return t,
                Ok(_) => continue,
                Err(e) => panic!("no line {prefix:?} within {limit:?}: {e}"),
            }
        }
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
    }

    fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two namespaces joined by veth; receive processing of the receiver's end on CPU 1 (RPS).
struct Net {
    rx_ns: String,
    tx_ns: String,
    /// The receiver's address (in `rx_ns`).
    rx_addr: String,
    dir: PathBuf,
    /// The shared harness (placer_linux::testnet): sender in A, receiver in B; dropped
    /// last, after the fields above.
    _pair: placer_linux::testnet::VethPair,
}

/// A python3 receiver renamed `comm`, listening on `addr:port`, started by `prefix` (a
/// namespace's `ip netns exec`, or `env` in the host's own namespace).
fn receiver_in(mut prefix: Command, comm: &str, addr: &str, port: &str) -> Kid {
    let code = "import socket,sys\n\
        open('/proc/self/comm','w').write(sys.argv[1])\n\
        s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
        s.bind((sys.argv[2],int(sys.argv[3]))); s.listen(4)\n\
        print('listening',flush=True)\n\
        while True:\n\
        \x20c,_=s.accept()\n\
        \x20while c.recv(1<<16): pass\n\
        \x20c.close()\n";
    let k = Kid::spawn(prefix.args(["python3", "-c", code, comm, addr, port]));
    k.expect_line("listening", Duration::from_secs(10));
    k
}

/// Connects, idles `idle_s`, prints `start`, streams `stream_s` at about
/// SENDER_BYTES_PER_S (far above the intensity threshold, without saturating a CPU on
/// this 2-CPU machine), prints `stop`, idles with the connection open.
fn sender_in(mut prefix: Command, addr: &str, port: &str, idle_s: f64, stream_s: f64) -> Kid {
    let code = "import socket,sys,time\n\
        open('/proc/self/comm','w').write('plrtx')\n\
        c=socket.create_connection((sys.argv[1],int(sys.argv[2])))\n\
        time.sleep(float(sys.argv[3]))\n\
        print('start',flush=True)\n\
        b=b'x'*65536; t0=time.time(); end=t0+float(sys.argv[4]); n=0; rate=float(sys.argv[5])\n\
        while time.time()<end:\n\
        \x20c.sendall(b); n+=len(b)\n\
        \x20ahead=n/rate-(time.time()-t0)\n\
        \x20if ahead>0: time.sleep(ahead)\n\
        print('stop',flush=True)\n\
        time.sleep(3600)\n";
    Kid::spawn(prefix.args([
        "python3",
        "-c",
        code,
        addr,
        port,
        &idle_s.to_string(),
        &stream_s.to_string(),
        &SENDER_BYTES_PER_S.to_string(),
    ]))
}

const PORT: &str = "5001";

impl Net {
    fn new() -> Net {
        let u = uniq();
        let pair = placer_linux::testnet::VethPair::new().expect("veth pair");
        // Receive processing on CPU 1, as a NIC's interrupt would steer it.
        placer_linux::testnet::set_rps(&pair.ns_b, &pair.dev_b, 1).expect("RPS on CPU 1");
        let net = Net {
            rx_ns: pair.ns_b.clone(),
            tx_ns: pair.ns_a.clone(),
            rx_addr: pair.addr_b.to_string(),
            dir: std::env::temp_dir().join(format!("placer-e2e-{u}")),
            _pair: pair,
        };
        let _ = std::fs::remove_dir_all(&net.dir);
        std::fs::create_dir_all(&net.dir).expect("tmp dir");
        net
    }

    fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    fn in_ns(&self, ns: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]);
        c
    }

    fn receiver(&self, comm: &str) -> Kid {
        receiver_in(self.in_ns(&self.rx_ns), comm, &self.rx_addr, PORT)
    }

    fn sender(&self, idle_s: f64, stream_s: f64) -> Kid {
        sender_in(
            self.in_ns(&self.tx_ns),
            &self.rx_addr,
            PORT,
            idle_s,
            stream_s,
        )
    }

    fn config(&self, comm: &str, extra: &str) -> PathBuf {
        self.config_judged(comm, extra, false)
    }

    /// The config of [`Net::config`], with the judge of moves on (`judged`, the default
    /// config's) or off.
    fn config_judged(&self, comm: &str, extra: &str, judged: bool) -> PathBuf {
        let p = self.dir.join("placer.toml");
        let text = format!(
            "interval_ms = {INTERVAL_MS}\n\
             state_dir = {:?}\n\
             [scope]\ninclude_comm = [{comm:?}]\n\
             [metrics]\nenabled = false\n\
             [verify]\nenabled = {judged}\n\
             [net_affinity]\nidle_timeout_ms = {TIMEOUT_MS}\nmin_hold_ms = 0\n{extra}",
            self.state().display().to_string()
        );
        std::fs::write(&p, text).expect("config");
        p
    }

    fn daemon(&self, config: &Path, extra_args: &[&str]) -> Kid {
        let log =
            std::fs::File::create(self.dir.join(format!("daemon-{}.log", uniq()))).expect("log");
        Kid::spawn(
            self.in_ns(&self.rx_ns)
                .arg(PLACER)
                .args(["daemon", "--config"])
                .arg(config)
                .args(extra_args)
                .env("PLACER_LOG", "debug")
                .stderr(log),
        )
    }

    fn logs(&self) -> String {
        let lines = self.log_lines();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Every line of the daemons' logs so far.
    fn log_lines(&self) -> Vec<String> {
        let mut s = String::new();
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().ends_with(".log") {
                    s += &std::fs::read_to_string(e.path()).unwrap_or_default();
                }
            }
        }
        s.lines().map(str::to_string).collect()
    }

    fn journal_empty(&self) -> bool {
        std::fs::read_to_string(self.state().join("journal.json"))
            .map_or(true, |t| !t.contains("proc_affinity"))
    }

    fn decisions_note(&self, pid: u32) -> String {
        std::fs::read_to_string(self.state().join("decisions.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .map(|v| v["procs"][pid.to_string()].to_string())
            .unwrap_or_default()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // The namespaces go with `_pair`.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs a namespace test serially, or prints why it is skipped.
fn setup() -> Option<std::sync::MutexGuard<'static, ()>> {
    if let Some(why) = missing() {
        placer_testkit::skip(&why);
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|p| p.into_inner()))
}

fn interval() -> Duration {
    Duration::from_millis(INTERVAL_MS)
}

/// Starts receiver, daemon (with `extra` config) and a sender that idles 6 intervals, then
/// streams `stream_s`; returns them with the instant the stream started.
fn scenario(
    net: &Net,
    extra: &str,
    args: &[&str],
    stream_s: f64,
) -> (Kid, Kid, Kid, String, Instant) {
    let comm = format!("plrrx{}", SEQ.load(Ordering::SeqCst));
    let rx = net.receiver(&comm);
    let original = affinity(rx.pid());
    assert_eq!(cpus(&original).map(|v| v.contains(&1)), Some(true));
    let cfg = net.config(&comm, extra);
    let d = net.daemon(&cfg, args);
    // The daemon warms up and sees the idle connection before the stream starts.
    let tx = net.sender(6.0 * INTERVAL_MS as f64 / 1000.0, stream_s);
    let started = tx.expect_line("start", Duration::from_secs(10));
    (rx, d, tx, original, started)
}

/// Waits for the sender's "stop" (within `limit`), then asserts the receiver is given
/// back its `original` affinity within the idle timeout and 2 intervals.
fn restored_in_time(net: &Net, rx: &Kid, tx: &Kid, original: &str, limit: Duration) {
    let stopped = tx.expect_line("stop", limit);
    let within = Duration::from_millis(TIMEOUT_MS) + interval() * 2;
    let back = wait_for(within + interval() * 4, || affinity(rx.pid()) == original);
    let Some(back) = back else {
        panic!(
            "not restored (now {}); log:\n{}",
            affinity(rx.pid()),
            net.logs()
        );
    };
    let took = back.duration_since(stopped);
    eprintln!("restored to {original} {took:?} after the stream stopped");
    assert!(
        took <= within + Duration::from_millis(100),
        "restored after {took:?} > {within:?}; log:\n{}",
        net.logs()
    );
}

/// Threshold 1.0: CPU 1 takes the receiver whatever else this shared machine runs.
const ANY_LOAD: &str = "cpu_load_threshold = 1.0\n";

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn pins_the_receiver_to_the_rps_cpu_and_restores_it_when_quiet() {
    placer_testkit::require_root();
    let Some(_g) = setup() else { return };
    let net = Net::new();
    let (rx, _d, tx, original, started) = scenario(&net, ANY_LOAD, &[], 3.0);
    let pinned = wait_for(interval() * 4, || affinity(rx.pid()) == "1");
    let Some(pinned) = pinned else {
        panic!(
            "receiver not pinned to CPU 1 (now {}); daemon log:\n{}",
            affinity(rx.pid()),
            net.logs()
        );
    };
    let took = pinned.duration_since(started);
    eprintln!("pinned to CPU 1 {took:?} after the stream started");
    // Polling granularity (20 ms) and the cycle's own time on top of 2 intervals.
    assert!(
        took <= interval() * 2 + Duration::from_millis(100),
        "pinned after {took:?}"
    );
    // While streaming it stays.
    std::thread::sleep(interval() * 3);
    assert_eq!(affinity(rx.pid()), "1");
    restored_in_time(&net, &rx, &tx, &original, Duration::from_secs(10));
    // The journal entry leaves right after the restore.
    let gone = wait_for(Duration::from_secs(1), || net.journal_empty());
    assert!(gone.is_some(), "journal still lists the receiver");
}

/// Two CPU hogs and two fork loops per CPU (they run until dropped).
fn cpu_hogs_and_fork_loops() -> Vec<Kid> {
    (0..4)
        .flat_map(|_| {
            [
                Kid::spawn(Command::new("sh").args(["-c", "while :; do :; done"])),
                Kid::spawn(Command::new("sh").args(["-c", "while :; do /bin/true; done"])),
            ]
        })
        .collect()
}

/// A sender that, `n` times: connects, prints `start I`, streams `stream_s` at
/// SENDER_BYTES_PER_S, waits until the receiver's kernel has every byte (its send queue
/// empty: the stream has ended on the wire), prints `stop I`, idles `gap_s` with the
/// connection open, and closes it.
fn repeating_sender(net: &Net, n: u32, stream_s: f64, gap_s: f64) -> Kid {
    let code = "import socket,sys,time,fcntl,struct,termios\n\
        open('/proc/self/comm','w').write('plrtx')\n\
        n,stream,gap,rate=int(sys.argv[3]),float(sys.argv[4]),float(sys.argv[5]),float(sys.argv[6])\n\
        b=b'x'*65536\n\
        for i in range(n):\n\
        \x20c=socket.create_connection((sys.argv[1],int(sys.argv[2])))\n\
        \x20print('start',i,flush=True)\n\
        \x20t0=time.time(); k=0\n\
        \x20while time.time()<t0+stream:\n\
        \x20\x20c.sendall(b); k+=len(b)\n\
        \x20\x20ahead=k/rate-(time.time()-t0)\n\
        \x20\x20if ahead>0: time.sleep(ahead)\n\
        \x20t1=time.time()\n\
        \x20while time.time()<t1+10 and struct.unpack('i',fcntl.ioctl(c,termios.TIOCOUTQ,b'0000'))[0]:\n\
        \x20\x20time.sleep(0.002)\n\
        \x20print('stop',i,flush=True)\n\
        \x20time.sleep(gap); c.close()\n\
        print('done',flush=True)\n\
        time.sleep(3600)\n";
    Kid::spawn(net.in_ns(&net.tx_ns).args([
        "python3",
        "-c",
        code,
        &net.rx_addr,
        PORT,
        &n.to_string(),
        &stream_s.to_string(),
        &gap_s.to_string(),
        &SENDER_BYTES_PER_S.to_string(),
    ]))
}

/// Issue 48: under two CPU hogs and two fork loops per CPU, with the judge of moves on
/// (the default config: its probes switch the pin on and off while the stream runs), a
/// receiver is pinned in each of 20 streams and given back within the idle timeout and 2
/// intervals of each stream's end, 20 of 20 times: its affinity is its own from then on
/// (no probe pins it again after the policy gave it back).
#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn releases_the_quiet_receiver_20_of_20_times_under_cpu_hogs_and_fork_loops() {
    placer_testkit::require_root();
    let Some(_g) = setup() else { return };
    const TRIALS: u32 = 20;
    let net = Net::new();
    let comm = format!("plrrx{}", SEQ.load(Ordering::SeqCst));
    let rx = net.receiver(&comm);
    let original = affinity(rx.pid());
    let cfg = net.config_judged(&comm, ANY_LOAD, true);
    let _d = net.daemon(&cfg, &[]);
    let _load = cpu_hogs_and_fork_loops();
    let within = Duration::from_millis(TIMEOUT_MS) + interval() * 2;
    // After each release the receiver is watched this long more: nothing pins it again.
    let watch = within + interval() * 6;
    let tx = repeating_sender(&net, TRIALS, 1.0, watch.as_secs_f64() + 0.5);
    let mut late = Vec::new();
    // The daemon's log lines of each stream, from its start to the end of its watch.
    let mut spans = Vec::new();
    for i in 0..TRIALS {
        let limit = Duration::from_secs(30);
        let from_line = net.log_lines().len();
        let started = tx.expect_line(&format!("start {i}"), limit);
        let pinned = wait_for(Duration::from_secs(5), || affinity(rx.pid()) == "1");
        assert!(
            pinned.is_some(),
            "stream {i}: not pinned; log:\n{}",
            net.logs()
        );
        let stopped = tx.expect_line(&format!("stop {i}"), limit);
        // The last time the affinity became its own: the release (a probe's off arm
        // before it does not count, since a later arm or the pin changes it again).
        let mut was = affinity(rx.pid());
        let mut released = (was == original).then_some(stopped);
        while stopped.elapsed() < watch {
            let now = affinity(rx.pid());
            if now != was {
                released = (now == original).then(Instant::now);
                was = now;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let took = released.map(|r| r.saturating_duration_since(stopped));
        eprintln!(
            "stream {i}: pinned {:?} after its start, released {took:?} after its end",
            pinned.map(|p| p.duration_since(started))
        );
        spans.push(from_line..net.log_lines().len());
        match took {
            Some(t) if t <= within + Duration::from_millis(100) => {}
            _ => late.push((i, took, affinity(rx.pid()))),
        }
    }
    if let Some(&(first, ..)) = late.first() {
        // The whole log stays for a look at what came before.
        let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join("release-under-load.log");
        let lines = net.log_lines();
        let _ = std::fs::write(&kept, lines.join("\n"));
        let span = spans[first as usize].clone();
        let shown = &lines[span.start.min(lines.len())..span.end.min(lines.len())];
        panic!(
            "released late or not at all (stream, after, affinity now): {late:?}; the log of \
             stream {first} ({} lines; the whole log in {}):\n{}",
            shown.len(),
            kept.display(),
            shown[..shown.len().min(400)].join("\n")
        );
    }
}

/// A burner pinned to CPU 1 makes the receive CPU busy: it takes at least half of CPU 1
/// whoever else runs there, so with a threshold of 0.5 CPU 1 is always too busy.
const BUSY_AT_HALF: &str = "cpu_load_threshold = 0.5\n";
/// Starts the burner on CPU 1.
fn burner(net: &Net) -> Kid {
    let k = Kid::spawn(net.in_ns(&net.rx_ns).args([
        "taskset",
        "-c",
        "1",
        "python3",
        "-c",
        "import sys\nopen('/proc/self/comm','w').write('plrburn')\nprint('burning',flush=True)\nwhile True: pass\n",
    ]));
    k.expect_line("burning", Duration::from_secs(10));
    // Let CPU 1's load show in a full interval.
    std::thread::sleep(interval() * 2);
    k
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn busy_receive_cpu_gives_its_cache_neighbour() {
    placer_testkit::require_root();
    let Some(_g) = setup() else { return };
    let net = Net::new();
    let _burn = burner(&net);
    let (rx, _d, _tx, original, _started) = scenario(
        &net,
        &format!("{BUSY_AT_HALF}when_busy = \"cache_neighbour\"\n"),
        &[],
        3.0,
    );
    let moved = wait_for(interval() * 6, || affinity(rx.pid()) != original);
    let now = affinity(rx.pid());
    match moved {
        Some(_) => assert_eq!(
            now,
            "0",
            "pinned elsewhere than CPU 0; log:\n{}",
            net.logs()
        ),
        None => {
            // CPU 0 itself may be busy with other work on this shared machine: then the
            // rule says leave it alone, and the daemon must say so.
            let note = net.decisions_note(rx.pid());
            assert!(
                note.contains("busy too"),
                "neither pinned to CPU 0 nor explained: {note}; log:\n{}",
                net.logs()
            );
            eprintln!("CPU 0 was busy too: left alone ({note})");
        }
    }
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn busy_receive_cpu_and_leave_configured_leaves_it_alone() {
    placer_testkit::require_root();
    let Some(_g) = setup() else { return };
    let net = Net::new();
    let _burn = burner(&net);
    let (rx, _d, _tx, original, _started) = scenario(
        &net,
        &format!("{BUSY_AT_HALF}when_busy = \"leave\"\n"),
        &[],
        3.0,
    );
    let moved = wait_for(interval() * 6, || affinity(rx.pid()) != original);
    assert!(
        moved.is_none(),
        "pinned to {} although when_busy = leave",
        affinity(rx.pid())
    );
    let note = net.decisions_note(rx.pid());
    assert!(
        note.contains("when_busy = leave"),
        "{note}; log:\n{}",
        net.logs()
    );
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn sigterm_restores() {
    placer_testkit::require_root();
    let Some(_g) = setup() else { return };
    let net = Net::new();
    let (rx, mut d, _tx, original, _started) = scenario(&net, ANY_LOAD, &[], 30.0);
    assert!(
        wait_for(interval() * 4, || affinity(rx.pid()) == "1").is_some(),
        "{}",
        net.logs()
    );
    d.signal(libc::SIGTERM);
    let st = d
        .wait_exit(Duration::from_secs(5))
        .expect("daemon exits on SIGTERM");
    assert!(st.success(), "{st:?}; log:\n{}", net.logs());
    assert_eq!(affinity(rx.pid()), original);
    assert!(net.journal_empty(), "the daemon exited with a journal left");
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn sigkill_then_placer_restore_restores() {
    placer_testkit::require_root();
    let Some(_g) = setup() else { return };
    let net = Net::new();
    let (rx, mut d, _tx, original, _started) = scenario(&net, ANY_LOAD, &[], 30.0);
    assert!(
        wait_for(interval() * 4, || affinity(rx.pid()) == "1").is_some(),
        "{}",
        net.logs()
    );
    d.signal(libc::SIGKILL);
    d.wait_exit(Duration::from_secs(5)).expect("killed");
    assert_eq!(
        affinity(rx.pid()),
        "1",
        "nothing restores after SIGKILL by itself"
    );
    let o = run(Command::new(PLACER)
        .arg("restore")
        .arg("--state-dir")
        .arg(net.state()))
    .expect("placer restore");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("restored"), "{out}");
    assert_eq!(affinity(rx.pid()), original);
    assert!(net.journal_empty());
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn sigkill_then_new_daemon_restores_at_start() {
    placer_testkit::require_root();
    let Some(_g) = setup() else { return };
    let net = Net::new();
    let (rx, mut d, mut tx, original, _started) = scenario(&net, ANY_LOAD, &[], 30.0);
    assert!(
        wait_for(interval() * 4, || affinity(rx.pid()) == "1").is_some(),
        "{}",
        net.logs()
    );
    d.signal(libc::SIGKILL);
    d.wait_exit(Duration::from_secs(5)).expect("killed");
    // The stream ends, so the new daemon has no reason to pin again.
    tx.signal(libc::SIGKILL);
    tx.wait_exit(Duration::from_secs(5)).expect("sender killed");
    let cfg = net.dir.join("placer.toml");
    let _d2 = net.daemon(&cfg, &[]);
    let back = wait_for(Duration::from_secs(5), || affinity(rx.pid()) == original);
    assert!(
        back.is_some(),
        "new daemon did not restore; log:\n{}",
        net.logs()
    );
    assert!(wait_for(Duration::from_secs(2), || net.journal_empty()).is_some());
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn dry_run_changes_nothing() {
    placer_testkit::require_root();
    let Some(_g) = setup() else { return };
    let net = Net::new();
    let (rx, d, _tx, original, _started) = scenario(&net, ANY_LOAD, &["--dry-run"], 30.0);
    let deadline = Instant::now() + interval() * 6;
    let mut would = false;
    let lines = d.lines.as_ref().expect("lines");
    while Instant::now() < deadline {
        assert_eq!(affinity(rx.pid()), original, "dry run changed the affinity");
        while let Ok((l, _)) = lines.try_recv() {
            would |= l.contains("would pin");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        would,
        "dry run never printed the pin it would do; log:\n{}",
        net.logs()
    );
    assert!(!net.state().exists(), "dry run created the state dir");
}

/// The replay host: a dry-run daemon records what it samples (`--record`); replaying the
/// recording through the engine gives, cycle by cycle, the very plans the daemon printed
/// live, the pin of the receiver among them.
#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn a_recording_replays_to_the_plans_of_the_live_run() {
    placer_testkit::require_root();
    let Some(_g) = setup() else { return };
    let net = Net::new();
    let rec = net.dir.join("live.record");
    let rec_arg = rec.display().to_string();
    let (_rx, d, _tx, _original, _started) = scenario(
        &net,
        ANY_LOAD,
        &["--dry-run", "--json", "--record", &rec_arg],
        30.0,
    );
    let deadline = Instant::now() + interval() * 8;
    let mut live: std::collections::BTreeMap<u64, serde_json::Value> = Default::default();
    let lines = d.lines.as_ref().expect("lines");
    while Instant::now() < deadline {
        while let Ok((l, _)) = lines.try_recv() {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) {
                live.insert(v["cycle"].as_u64().expect("cycle"), v["plan"].clone());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(d);
    // To regenerate the golden fixture of tests/replay_golden.rs.
    if let Ok(keep) = std::env::var("PLACER_KEEP_RECORDING") {
        std::fs::copy(&rec, keep).expect("keeping the recording");
    }
    let acted = live
        .values()
        .filter(|p| p["actions"].as_array().is_some_and(|a| !a.is_empty()))
        .count();
    assert!(
        acted > 0,
        "the live run planned nothing; log:\n{}",
        net.logs()
    );
    let out = Command::new(PLACER)
        .args(["record", "--replay", "--plans", "--json"])
        .arg(&rec)
        .output()
        .expect("placer record --replay");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed: std::collections::BTreeMap<u64, serde_json::Value> =
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("json line");
                (v["cycle"].as_u64().expect("cycle"), v["plan"].clone())
            })
            .collect();
    let mut compared = 0;
    for (cycle, plan) in &live {
        // The recording may hold a sample or two more than the lines read before the stop.
        let again = replayed
            .get(cycle)
            .unwrap_or_else(|| panic!("cycle {cycle} missing from the replay"));
        assert_eq!(again, plan, "cycle {cycle}");
        compared += 1;
    }
    eprintln!("{compared} cycles compared, {acted} with actions");
    assert!(compared >= 4, "{compared} cycles compared");
}

#[test]
fn bad_config_is_rejected_naming_the_field() {
    let dir = std::env::temp_dir().join(format!("placer-e2e-cfg-{}", uniq()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (text, field) in [
        (
            "[net_affinity]\ncpu_load_threshold = 7\n",
            "net_affinity.cpu_load_threshold",
        ),
        // (`idle_timeout` became a duration key, issue 18: a misspelt key stays unknown.)
        ("[net_affinity]\nidle_timout = 5\n", "idle_timout"),
        ("interval_ms = 1\n", "interval_ms"),
        ("[metrics]\nlisten = \"nowhere\"\n", "metrics.listen"),
    ] {
        let p = dir.join("bad.toml");
        std::fs::write(&p, text).expect("write");
        let o = run(Command::new(PLACER)
            .args(["daemon", "--once", "--dry-run", "--config"])
            .arg(&p))
        .expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "accepted {text:?}");
        assert!(
            err.contains(field),
            "{text:?}: error does not name {field}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn explain(net: &Net, pid: u32, in_ns: bool) -> serde_json::Value {
    let cfg = net.dir.join("placer.toml");
    let mut cmd = if in_ns {
        net.in_ns(&net.rx_ns)
    } else {
        Command::new("env")
    };
    cmd.arg(PLACER)
        .args(["explain", &pid.to_string(), "--json", "--config"])
        .arg(&cfg);
    let o = run(&mut cmd).expect("placer explain");
    assert!(
        o.status.success(),
        "explain failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("explain --json")
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn explain_from_the_daemon_and_without_one() {
    placer_testkit::require_root();
    let Some(_g) = setup() else { return };
    let net = Net::new();
    let (rx, mut d, _tx, original, _started) = scenario(&net, ANY_LOAD, &[], 30.0);
    assert!(
        wait_for(interval() * 4, || affinity(rx.pid()) == "1").is_some(),
        "{}",
        net.logs()
    );
    std::thread::sleep(interval() * 2);
    let e = explain(&net, rx.pid(), false);
    assert_eq!(e["source"], "daemon", "{e}");
    assert_eq!(e["allowed_cpus_now"], "1");
    assert_eq!(
        cpus(e["journal"]["previous"].as_str().unwrap_or("")),
        cpus(&original),
        "{e}"
    );
    let act = &e["decision"]["last_action"];
    assert_eq!(act["kind"], "pin_process", "{e}");
    assert!(
        act["reason"]
            .as_str()
            .unwrap_or("")
            .contains("receives on CPU 1"),
        "{e}"
    );
    assert_eq!(e["decision"]["held_by"], "net-affinity");
    d.signal(libc::SIGTERM);
    d.wait_exit(Duration::from_secs(5)).expect("daemon exits");
    // No daemon: one observation in dry run, in the receiver's namespace (its sockets).
    let e = explain(&net, rx.pid(), true);
    assert_eq!(e["source"], "dry_run", "{e}");
    assert!(e["journal"].is_null(), "{e}");
    let act = &e["decision"]["last_action"];
    assert_eq!(act["kind"], "pin_process", "{e}");
    assert!(
        act["detail"].as_str().unwrap_or("").contains("dry run"),
        "{e}"
    );
    assert_eq!(affinity(rx.pid()), original, "explain changed something");
}

const LO_RPS: &str = "/sys/class/net/lo/queues/rx-0/rps_cpus";

/// Loopback's RPS mask, put back however the test ends.
struct LoRps(String);

impl LoRps {
    fn steer_to(cpu: u32) -> LoRps {
        let before = std::fs::read_to_string(LO_RPS).expect("lo's RPS mask");
        std::fs::write(LO_RPS, format!("{:x}", 1u64 << cpu)).expect("set lo's RPS");
        LoRps(before.trim().to_string())
    }
}

impl Drop for LoRps {
    fn drop(&mut self) {
        let _ = std::fs::write(LO_RPS, &self.0);
    }
}

/// A port on 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `name value` of one metric in a Prometheus text scrape of `port`.
fn scrape(port: u16, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    c.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    c.read_to_string(&mut body).ok()?;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Issue 30, item 1: the default path. In the host's own network namespace (where the
/// process-events connector and the eBPF collector load) and with the built-in config
/// (only scope, state dir and metrics port set; `kernel_events` on), a loopback receiver
/// whose receive processing RPS steers to CPU 1 is pinned, stays managed while it
/// receives, is judged, and gets its affinity back within `idle_timeout` + 2 intervals
/// of its stream stopping. The events path once dropped a process placer had just moved
/// from its samples, so it was never judged nor given back.
#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn default_config_in_the_host_namespace_pins_judges_and_restores() {
    placer_testkit::require_root();
    let Some(_g) = setup() else { return };
    if !Path::new(LO_RPS).exists() {
        placer_testkit::skip("needs RPS on loopback");
        return;
    }
    // Built-in timing (1 s interval, idle_timeout 5 s) but a short trial for the judge: one
    // settling interval and one look at 4 on/off pairs, so a verdict comes 9 intervals
    // after the pin, while the 20 s stream still runs.
    let interval = Duration::from_secs(1);
    let idle_timeout = Duration::from_secs(5);
    let dir = placer_testkit::TempDir::new("e2e-host");
    let _rps = LoRps::steer_to(1);
    let comm = format!("plrhx{}", std::process::id() % 10_000);
    let port = free_port().to_string();
    let rx = receiver_in(Command::new("env"), &comm, "127.0.0.1", &port);
    let original = affinity(rx.pid());
    let metrics_port = free_port();
    let cfg = dir.path().join("placer.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = {:?}\n[scope]\ninclude_comm = [{comm:?}]\n\
             [metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n\
             [verify]\nsettle_intervals = 1\nfirst_look_pairs = 4\nprobe_pairs = 4\n",
            dir.path().join("state").display().to_string()
        ),
    )
    .unwrap();
    let log_path = dir.path().join("daemon.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut d = Kid::spawn(
        Command::new(PLACER)
            .args(["daemon", "--config"])
            .arg(&cfg)
            // The policy's notes (debug) say why a receiver is left alone: on a host whose
            // CPUs are all busy (other builds), the built-in threshold rightly refuses.
            .env("PLACER_LOG", "info,placer_agent=debug")
            .stderr(log),
    );
    let logs = || std::fs::read_to_string(&log_path).unwrap_or_default();
    // The daemon sees the idle connection for 2 intervals first, then a 20 s stream: long
    // enough to be pinned (within 8 intervals, room for a loaded machine), seen managed
    // and judged (horizon 5 intervals after the pin) while it still receives.
    let tx = sender_in(Command::new("env"), "127.0.0.1", &port, 2.0, 20.0);
    tx.expect_line("start", Duration::from_secs(10));
    // Pinned to one CPU: the receive CPU 1, or its cache neighbour where placer finds CPU 1
    // busy (a loaded machine: the built-in 80% threshold) or does not assume "on" pays
    // (this VM's one L3 over the package, issue 45), as its log then says.
    let one_cpu = |a: &str| a != original && a.parse::<u32>().is_ok();
    let pinned = wait_for(interval * 8, || one_cpu(&affinity(rx.pid())));
    let at = affinity(rx.pid());
    let beside =
        |l: &str| l.contains("lo receives on CPU 1, busy") || l.contains("not assumed to pay");
    // A host whose CPUs are all saturated (scripts/noise.sh's hogs): no CPU to move to, and
    // the receiver is rightly left where it is, saying so. Then this checks that branch:
    // its affinity untouched while it streams, and nothing to give back.
    let saturated = logs().lines().any(|l| {
        l.contains("least-loaded cache neighbour CPU 0 busy too")
            && l.contains(&format!("pid={} ", rx.pid()))
    });
    if pinned.is_none() && saturated {
        eprintln!("every CPU busy: checking that the receiver is left alone");
        let moved = wait_for(interval * 4, || affinity(rx.pid()) != original);
        assert!(
            moved.is_none(),
            "moved on a saturated host; log:\n{}",
            logs()
        );
        d.signal(libc::SIGTERM);
        assert!(d.wait_exit(Duration::from_secs(10)).is_some());
        assert_eq!(affinity(rx.pid()), original, "log:\n{}", logs());
        return;
    }
    assert!(
        pinned.is_some() && (at == "1" || beside(&logs())),
        "not pinned to CPU 1, nor to a neighbour of a busy CPU 1 (now {at}); log:\n{}",
        logs()
    );
    // Still managed cycles later, while it receives (the bug: 0 one cycle after the pin).
    std::thread::sleep(interval * 3);
    let managed = scrape(metrics_port, "placer_managed_processes");
    assert_eq!(managed, Some(1.0), "log:\n{}", logs());
    // Pinned, or for an interval its own mask: the judge's off arm (issue 44).
    let now = affinity(rx.pid());
    assert!(
        one_cpu(&now) || (now == original && logs().contains("judge: probing")),
        "still pinned (now {now}); log:\n{}",
        logs()
    );
    // Judged: a verdict line naming the policy, before the stream ends.
    let judged = wait_for(interval * 8, || {
        logs().contains("verdict on [net-affinity]")
    });
    assert!(judged.is_some(), "no verdict logged; log:\n{}", logs());
    let stopped = tx.expect_line("stop", Duration::from_secs(30));
    // Given back, unless the verdict undid the pin already (then it is back anyway).
    let limit = idle_timeout + interval * 2;
    let back = wait_for(limit + interval * 2, || affinity(rx.pid()) == original);
    let Some(back) = back else {
        panic!(
            "not restored (now {}); log:\n{}",
            affinity(rx.pid()),
            logs()
        );
    };
    let took = back.saturating_duration_since(stopped);
    assert!(
        took <= limit + Duration::from_millis(200),
        "restored {took:?} after the stream stopped (limit {limit:?}); log:\n{}",
        logs()
    );
    // The events path really was the one taken (not a fallback to /proc).
    let text = logs();
    assert!(
        !text.contains("source proc_events unavailable"),
        "the connector did not load, so this did not test the events path:\n{text}"
    );
    d.signal(libc::SIGTERM);
    assert!(d.wait_exit(Duration::from_secs(10)).is_some());
}

/// Issue 30, item 2: SIGHUP re-reads the config. A changed valid config is applied with the
/// daemon running and nothing put back; a broken one is refused with the reason and the
/// daemon runs on with the old one; switching the policy off puts its pin back.
#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn sighup_reloads_the_config_keeping_what_stays_valid() {
    placer_testkit::require_root();
    let Some(_g) = setup() else { return };
    let net = Net::new();
    let (rx, d, _tx, original, _started) = scenario(&net, ANY_LOAD, &[], 60.0);
    assert!(
        wait_for(interval() * 4, || affinity(rx.pid()) == "1").is_some(),
        "not pinned; log:\n{}",
        net.logs()
    );
    let comm = format!("plrrx{}", SEQ.load(Ordering::SeqCst));
    let hup = |what: &str| {
        d.signal(libc::SIGHUP);
        wait_for(Duration::from_secs(5), || net.logs().contains(what))
    };
    // A valid change (another threshold): applied, the daemon runs on, the pin stays.
    net.config(&comm, "cpu_load_threshold = 0.95\n");
    assert!(
        hup("SIGHUP: config").is_some() && net.logs().contains("applied; nothing else put back"),
        "no reload logged:\n{}",
        net.logs()
    );
    std::thread::sleep(interval() * 3);
    assert_eq!(affinity(rx.pid()), "1", "a reload put the pin back");
    assert!(!net.journal_empty());
    // A broken config: refused with the reason, the old one kept.
    std::fs::write(
        net.dir.join("placer.toml"),
        "interval = \"not a duration\"\n",
    )
    .unwrap();
    assert!(
        hup("refused, keeping the running config").is_some(),
        "no refusal logged:\n{}",
        net.logs()
    );
    std::thread::sleep(interval() * 3);
    assert_eq!(affinity(rx.pid()), "1");
    // net-affinity switched off: its pin is put back at once, the daemon still runs.
    net.config(&comm, "");
    let cfg = net.dir.join("placer.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("policies = []\n{text}")).unwrap();
    assert!(
        hup("policy net-affinity switched off").is_some(),
        "no switch-off logged:\n{}",
        net.logs()
    );
    assert!(
        wait_for(interval() * 2, || affinity(rx.pid()) == original).is_some(),
        "the switched-off policy's pin stays (now {}); log:\n{}",
        affinity(rx.pid()),
        net.logs()
    );
    assert!(net.journal_empty());
    assert!(
        Path::new(&format!("/proc/{}", d.pid())).exists(),
        "the daemon stopped on SIGHUP"
    );
}
