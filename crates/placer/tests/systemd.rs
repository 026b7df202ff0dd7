//! What the daemon says to systemd (issue 50), on sockets and files the tests make, so no
//! systemd and no root are needed: a start-up error in the journal (native protocol, and
//! `<3>` on every line of stderr when the journal's socket is absent) and as JSON with
//! `--log-format json`; sd_notify's READY, STATUS, WATCHDOG and STOPPING on a path and
//! on an abstract socket.

use placer_testkit::proc::KillOnDrop;
use placer_testkit::TempDir;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn placer() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_placer"));
    c.stdin(Stdio::null()).stdout(Stdio::null());
    c
}

/// A config the daemon refuses at start: a TOML syntax error, whose message spans lines
/// (the excerpt with a caret under the error).
fn bad_config(dir: &TempDir) -> std::path::PathBuf {
    let p = dir.path().join("bad.toml");
    std::fs::write(&p, "interval_ms = \n").expect("write config");
    p
}

/// Runs the daemon on `config` with stderr to a file and `env`; returns its stderr.
fn failing_start(
    dir: &TempDir,
    config: &std::path::Path,
    extra: &[&str],
    env: &dyn Fn(&std::path::Path) -> Vec<(String, String)>,
) -> String {
    let err = dir.path().join("stderr");
    let file = std::fs::File::create(&err).expect("stderr file");
    let st = placer()
        .args(["daemon", "--dry-run", "--config"])
        .arg(config)
        .args(extra)
        .envs(env(&err))
        .env_remove("NOTIFY_SOCKET")
        .stderr(file)
        .status()
        .expect("run placer");
    assert_eq!(st.code(), Some(1), "a refused config must fail the start");
    std::fs::read_to_string(&err).expect("stderr")
}

/// `JOURNAL_STREAM` naming the file at `p`, as systemd names stderr's stream.
fn journal_stream(p: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).expect("stat");
    format!("{}:{}", m.dev(), m.ino())
}

/// Splits a native-protocol entry into its fields (the inverse of `journal_entry`).
fn fields(mut b: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let nl = b
            .iter()
            .position(|&c| c == b'\n')
            .expect("a field ends in newline");
        let line = &b[..nl];
        if let Some(eq) = line.iter().position(|&c| c == b'=') {
            out.push((
                String::from_utf8_lossy(&line[..eq]).into(),
                line[eq + 1..].to_vec(),
            ));
            b = &b[nl + 1..];
        } else {
            let len = u64::from_le_bytes(b[nl + 1..nl + 9].try_into().unwrap()) as usize;
            out.push((
                String::from_utf8_lossy(line).into(),
                b[nl + 9..nl + 9 + len].to_vec(),
            ));
            assert_eq!(b[nl + 9 + len], b'\n');
            b = &b[nl + 10 + len..];
        }
    }
    out
}

#[test]
fn a_start_up_config_error_is_one_error_entry_in_the_journal() {
    let dir = TempDir::new("journal-native");
    let config = bad_config(&dir);
    let socket = dir.path().join("journal.socket");
    let rx = UnixDatagram::bind(&socket).expect("bind");
    rx.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let stderr = failing_start(&dir, &config, &[], &|err| {
        vec![
            ("JOURNAL_STREAM".into(), journal_stream(err)),
            ("PLACER_JOURNAL_SOCKET".into(), socket.display().to_string()),
        ]
    });
    assert_eq!(stderr, "", "everything went to the journal");
    // The last entry is the error that ended the start.
    let mut last = None;
    let mut buf = vec![0u8; 1 << 16];
    rx.set_nonblocking(false).unwrap();
    while let Ok(n) = rx.recv(&mut buf) {
        last = Some(fields(&buf[..n]));
        rx.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
    }
    let last = last.expect("no journal entry");
    let get = |k: &str| {
        last.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_else(|| panic!("no {k} in {last:?}"))
    };
    assert_eq!(get("PRIORITY"), "3");
    assert_eq!(get("SYSLOG_IDENTIFIER"), "placer");
    let msg = get("MESSAGE");
    assert!(msg.contains("bad.toml"), "{msg}");
    assert!(msg.contains('\n'), "a multi-line message, one entry: {msg}");
}

#[test]
fn without_the_journals_socket_every_stderr_line_carries_its_priority() {
    let dir = TempDir::new("journal-stream-fallback");
    let config = bad_config(&dir);
    let missing = dir.path().join("no-socket");
    let stderr = failing_start(&dir, &config, &["--log", "debug"], &|err| {
        vec![
            ("JOURNAL_STREAM".into(), journal_stream(err)),
            (
                "PLACER_JOURNAL_SOCKET".into(),
                missing.display().to_string(),
            ),
        ]
    });
    assert!(stderr.lines().count() > 1, "{stderr}");
    assert!(
        stderr.lines().all(|l| l.starts_with("<3>")),
        "a line without <3>:\n{stderr}"
    );
    assert!(stderr.contains("bad.toml"), "{stderr}");
    // Elsewhere (JOURNAL_STREAM not stderr's): the plain message, no prefix.
    let plain = failing_start(&dir, &config, &[], &|_| {
        vec![("JOURNAL_STREAM".into(), "1:1".into())]
    });
    assert!(plain.starts_with("placer: "), "{plain}");
    assert!(!plain.contains("<3>"), "{plain}");
}

#[test]
fn log_format_json_holds_for_a_start_up_error_and_an_argument_error() {
    let dir = TempDir::new("json-error");
    let config = bad_config(&dir);
    let no_journal = |_: &std::path::Path| vec![("JOURNAL_STREAM".into(), "1:1".into())];
    let stderr = failing_start(&dir, &config, &["--log-format", "json"], &no_journal);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let last = lines.last().expect("a line");
    assert_eq!(last["level"], "ERROR", "{stderr}");
    assert!(
        last["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("bad.toml")),
        "{stderr}"
    );
    // An argument clap refuses, with the format given before or after it.
    for args in [
        &["--log-format=json", "daemon", "--no-such-flag"][..],
        &["daemon", "--no-such-flag", "--log-format", "json"],
    ] {
        let o = placer()
            .args(args)
            .env("JOURNAL_STREAM", "1:1")
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        let v: serde_json::Value =
            serde_json::from_str(err.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {err:?}"));
        assert_eq!(v["level"], "ERROR");
        assert!(err.contains("--no-such-flag"), "{err}");
    }
}

/// The datagrams a notify socket received until `until` says enough, or `limit` passes.
fn receive(
    rx: &UnixDatagram,
    got: &mut Vec<(Instant, String)>,
    limit: Duration,
    until: impl Fn(&[(Instant, String)]) -> bool,
) {
    let end = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    while !until(got) && Instant::now() < end {
        rx.set_read_timeout(Some((end - Instant::now()).max(Duration::from_millis(1))))
            .unwrap();
        if let Ok(n) = rx.recv(&mut buf) {
            got.push((Instant::now(), String::from_utf8_lossy(&buf[..n]).into()));
        }
    }
}

fn has(got: &[(Instant, String)], line: &str) -> Option<usize> {
    got.iter().position(|(_, m)| m.lines().any(|l| l == line))
}

/// Starts a dry-run daemon told to notify `socket_env`, with a 2 s interval and a watchdog
/// of 400 ms: between two cycles it must feed the watchdog every 200 ms.
fn notified_daemon(dir: &TempDir, socket_env: &str) -> KillOnDrop {
    KillOnDrop(
        placer()
            .args(["daemon", "--dry-run", "--interval", "2s", "--state-dir"])
            .arg(dir.path().join("state"))
            .env("NOTIFY_SOCKET", socket_env)
            .env("WATCHDOG_USEC", "400000")
            .env_remove("WATCHDOG_PID")
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn placer"),
    )
}

#[test]
fn the_daemon_says_ready_after_its_first_cycle_feeds_the_watchdog_and_says_stopping() {
    let dir = TempDir::new("notify");
    let path = dir.path().join("notify.socket");
    let rx = UnixDatagram::bind(&path).expect("bind");
    let mut kid = notified_daemon(&dir, &path.display().to_string());
    let mut got = Vec::new();
    receive(&rx, &mut got, Duration::from_secs(30), |g| {
        has(g, "READY=1").is_some()
    });
    let ready = has(&got, "READY=1").unwrap_or_else(|| panic!("no READY=1: {got:?}"));
    let starting = got
        .iter()
        .position(|(_, m)| m.starts_with("STATUS=starting"))
        .unwrap_or_else(|| panic!("no starting status: {got:?}"));
    assert!(starting < ready, "{got:?}");
    assert!(got[ready].1.contains("STATUS=running; cycle 0"), "{got:?}");
    // 1.5 s after READY, inside the 2 s interval: the watchdog fed every 200 ms.
    let t_ready = got[ready].0;
    receive(&rx, &mut got, Duration::from_millis(1500), |_| false);
    let pings = got
        .iter()
        .filter(|(t, m)| *t > t_ready && m == "WATCHDOG=1")
        .count();
    assert!(pings >= 4, "{pings} watchdog pings in 1.5 s: {got:?}");
    let pid = kid.0.id() as libc::pid_t;
    // SAFETY: a signal to the child this test started and still holds.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    receive(&rx, &mut got, Duration::from_secs(10), |g| {
        has(g, "STOPPING=1").is_some()
    });
    assert!(has(&got, "STOPPING=1").is_some(), "{got:?}");
    let st = kid.0.wait().expect("wait");
    assert!(st.success(), "{st}");
}

#[test]
fn an_abstract_notify_socket_gets_ready_too() {
    use std::os::linux::net::SocketAddrExt;
    let dir = TempDir::new("notify-abstract");
    let name = format!("placer-test-notify-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let rx = UnixDatagram::bind_addr(&addr).expect("bind abstract");
    let _kid = notified_daemon(&dir, &format!("@{name}"));
    let mut got = Vec::new();
    receive(&rx, &mut got, Duration::from_secs(30), |g| {
        has(g, "READY=1").is_some()
    });
    assert!(has(&got, "READY=1").is_some(), "{got:?}");
}
