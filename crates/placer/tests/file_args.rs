//! Issue 48: every file placer is told to read is a regular file, opened without blocking:
//! a FIFO (no writer) or /dev/zero given to any command that takes a file is refused at
//! once with a message that says what it is, and a FIFO put in place of the daemon's config
//! neither stalls a SIGHUP reload nor delays the SIGTERM after it. And the state files
//! placer reads back: a verdict log with a byte that is not UTF-8 still reports, a journal
//! with refused entries makes `restore` fail and say how many.

use placer_testkit::TempDir;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PLACER: &str = env!("CARGO_BIN_EXE_placer");

/// Runs placer with `args`, killed after `limit`; returns its exit code (None: killed, or
/// still running at the limit) and its stderr.
fn run_bounded(args: &[&str], limit: Duration) -> (Option<i32>, String) {
    let mut child = Command::new(PLACER)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn placer");
    let t0 = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st.code();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    (code, err)
}

fn mkfifo(path: &std::path::Path) {
    let st = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(st.success(), "mkfifo {}", path.display());
}

#[test]
fn a_fifo_or_a_device_given_as_any_file_is_refused_at_once() {
    let dir = TempDir::new("file-args");
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let state = dir.path().join("state");
    let state = state.to_str().unwrap();
    for file in [fifo.to_str().unwrap(), "/dev/zero"] {
        let commands: [&[&str]; 9] = [
            &["daemon", "--once", "--dry-run", "--config", file],
            &["restore", "--state-dir", state, "--config", file],
            &["explain", "1", "--state-dir", state, "--config", file],
            &["sim", file],
            &["plan", "--policy", "speedup", "-n", "2", "--simulate", file],
            &[
                "plan",
                "--policy",
                "speedup",
                "-n",
                "2",
                "--power-model",
                file,
            ],
            &["record", "--replay", file],
            &["record", "--replay", "--plans", file],
            &["power", "fit", file],
        ];
        let what = if file == "/dev/zero" {
            "is a device"
        } else {
            "is a FIFO"
        };
        for args in commands {
            let (code, err) = run_bounded(args, Duration::from_secs(10));
            let code = code.unwrap_or_else(|| panic!("{args:?} still ran after 10 s"));
            assert!(code != 0 && code != 101, "{args:?} exited {code}: {err}");
            assert!(err.contains(what), "{args:?} does not say {what:?}: {err}");
        }
    }
}

/// A daemon in dry run on `cfg` whose stderr lines come through the returned channel.
fn daemon(cfg: &std::path::Path) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut cmd = Command::new(PLACER);
    cmd.args(["daemon", "--dry-run", "--interval", "200ms", "--config"])
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = placer_testkit::proc::die_with_parent(&mut cmd)
        .spawn()
        .expect("daemon");
    let err = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// The first line from `rx` that contains `needle`, within `limit`.
fn wait_line(rx: &std::sync::mpsc::Receiver<String>, needle: &str, limit: Duration) -> String {
    let until = Instant::now() + limit;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return l,
            Ok(_) => {}
            Err(_) => panic!("no line with {needle:?} within {limit:?}"),
        }
    }
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn a_fifo_config_on_sighup_is_refused_and_sigterm_is_not_delayed() {
    placer_testkit::require_root();
    let dir = TempDir::new("fifo-config");
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[metrics]\nenabled = false\n").unwrap();
    let (child, rx) = daemon(&cfg);
    let pid = child.id();
    let mut k = placer_testkit::proc::KillOnDrop(child);
    wait_line(&rx, "started with", Duration::from_secs(10));
    std::fs::remove_file(&cfg).unwrap();
    mkfifo(&cfg);
    let t0 = Instant::now();
    let hup = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status();
    assert!(hup.is_ok_and(|s| s.success()), "kill -HUP");
    let refused = wait_line(&rx, "SIGHUP", Duration::from_secs(5));
    assert!(
        refused.contains("refused") && refused.contains("FIFO"),
        "{refused}"
    );
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let t1 = Instant::now();
    let term = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    assert!(term.is_ok_and(|s| s.success()), "kill -TERM");
    let code = loop {
        if let Some(st) = k.0.try_wait().expect("wait") {
            break st.code();
        }
        assert!(
            t1.elapsed() < Duration::from_secs(5),
            "SIGTERM not answered within 5 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(0), "exit after SIGTERM");
}

/// A state dir of this user's, mode 0700, as placer accepts it.
fn state_dir(tag: &str) -> TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = TempDir::new(tag);
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

#[test]
fn a_report_skips_and_counts_a_line_that_is_not_utf8() {
    let d = state_dir("report-bad-byte");
    std::fs::write(d.path().join("verdicts.jsonl"), b"{\"unix_ms\": 1, \xff}\n").unwrap();
    let dir = d.path().to_str().unwrap();
    let o = Command::new(PLACER)
        .args(["report", "--no-config", "--state-dir", dir])
        .output()
        .expect("report");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("1 unreadable lines skipped"), "{out}");
}

#[test]
fn restore_fails_and_counts_the_entries_it_refused() {
    let d = state_dir("restore-refused");
    // One crafted entry and one knob journaled twice: three refused, none acted on.
    let journal = r#"{"version":1,"entries":[
        {"knob":"rps","dev":"../../tmp","queue":"rx-0","previous":"0","applied":"1"},
        {"knob":"irq_affinity","irq":5,"previous":"2","applied":"1"},
        {"knob":"irq_affinity","irq":5,"previous":"0-3","applied":"1"}
    ]}"#;
    std::fs::write(d.path().join("journal.json"), journal).unwrap();
    let dir = d.path().to_str().unwrap();
    let o = Command::new(PLACER)
        .args(["restore", "--no-config", "--state-dir", dir])
        .output()
        .expect("restore");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(!o.status.success(), "exit 0: {out}{err}");
    assert!(!out.contains("journal is empty"), "{out}");
    assert!(err.contains("3 journal entries were refused"), "{err}");
}
