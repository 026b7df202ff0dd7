//! The command line's edge cases (issues 17 and 18): bad input exits non-zero with a message,
//! a closed pipe or a missing terminal never panics (exit 101), one duration grammar holds for
//! every command, and logs carry no escape codes off a terminal. None of these needs root:
//! `--dry-run` changes nothing and `topo`/`sim` only read.

use std::process::{Command, Stdio};

fn placer() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_placer"));
    c.stdin(Stdio::null());
    c
}

/// Runs `placer ARGS | head -c1`-like: reads one byte of stdout, then closes the pipe while
/// placer is still writing, and returns placer's exit status.
fn with_closed_pipe(args: &[&str]) -> std::process::ExitStatus {
    use std::io::Read;
    let mut child = placer()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn placer");
    let mut out = child.stdout.take().expect("stdout");
    let mut one = [0u8; 1];
    let _ = out.read(&mut one);
    drop(out);
    child.wait().expect("wait")
}

#[test]
fn closed_pipe_is_not_a_panic() {
    for args in [
        &["topo", "--machine", "xeon-5355x2", "--json"][..],
        &["sim", "--list"],
        &["daemon", "--print-default-config"],
    ] {
        let st = with_closed_pipe(args);
        assert_ne!(st.code(), Some(101), "{args:?} panicked on a closed pipe");
        assert!(st.success(), "{args:?}: {st}");
    }
}

#[test]
fn bad_durations_are_refused_with_a_message() {
    for (args, needle) in [
        (
            &[
                "daemon",
                "--once",
                "--dry-run",
                "--interval",
                "100000000000000000000s",
            ][..],
            "too large",
        ),
        (
            &[
                "daemon",
                "--once",
                "--dry-run",
                "--interval",
                "18446744073709551615ms",
            ],
            "24h",
        ),
        (
            &["record", "--interval", "0", "/nonexistent/rec"],
            "greater than zero",
        ),
        (&["top", "--once", "--interval", "0"], "greater than zero"),
        (&["sim", "seed-002", "--duration=-1s"], "bad duration"),
    ] {
        let o = placer().args(args).output().expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} accepted");
        assert_ne!(o.status.code(), Some(101), "{args:?} panicked: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn one_duration_grammar_everywhere() {
    // A bare number is seconds for the daemon as for `top` (it was an error before).
    let o = placer()
        .args(["daemon", "--interval", "1", "--once", "--dry-run"])
        .output()
        .expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for args in [
        &["bench", "net", "--help"][..],
        &["sim", "--help"],
        &["run", "--help"],
    ] {
        let o = placer().args(args).output().expect("help");
        assert!(o.status.success(), "{args:?}");
    }
    // `--duration 2s` parses for sim (it took only a float before).
    let o = placer()
        .args([
            "sim",
            "seed-002",
            "--duration",
            "2s",
            "--seeds",
            "1",
            "--policy",
            "linux-default",
        ])
        .output()
        .expect("sim");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn bad_root_is_an_error() {
    let o = placer()
        .args(["topo", "--root", "/nonexistent"])
        .output()
        .expect("run");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no CPUs found"));
}

#[test]
fn top_without_a_terminal_prints_once() {
    let o = placer()
        .args(["top", "--interval", "200ms"])
        .output()
        .expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("CPU"));
}

#[test]
fn logs_off_a_terminal_have_no_escape_codes() {
    let o = placer()
        .args([
            "daemon",
            "--once",
            "--dry-run",
            "--interval",
            "100ms",
            "--log",
            "debug",
        ])
        .output()
        .expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!o.stderr.is_empty(), "expected some log lines at debug");
    assert!(!o.stderr.contains(&0x1b), "escape byte in the log");
    let o = placer()
        .args([
            "--log-format",
            "json",
            "daemon",
            "--once",
            "--dry-run",
            "--interval",
            "100ms",
            "--log",
            "debug",
        ])
        .output()
        .expect("run");
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stderr);
    let first = text.lines().next().expect("a log line");
    let v: serde_json::Value = serde_json::from_str(first).expect("a JSON log line");
    assert!(v.get("level").is_some(), "{first}");
}

/// Under systemd with stderr connected to the journal (`JOURNAL_STREAM` names stderr's
/// device and inode), each log line starts with its syslog priority for journald; with
/// the variable naming another stream (inherited by a child writing elsewhere), it does not.
#[test]
fn journald_gets_priority_prefixes_only_when_stderr_is_the_journal() {
    use std::os::unix::fs::MetadataExt;
    let dir = placer_testkit::TempDir::new("journal-stream");
    let run = |stream: &dyn Fn(&std::path::Path) -> String| -> String {
        let path = dir.path().join("stderr");
        let file = std::fs::File::create(&path).expect("stderr file");
        let st = placer()
            .args(["daemon", "--once", "--dry-run", "--interval", "100ms"])
            .args(["--log", "debug", "--state-dir"])
            .arg(dir.path().join("state"))
            .env("JOURNAL_STREAM", stream(&path))
            // No journal's socket: each event goes to stderr, every line with its priority
            // (tests/systemd.rs has the native protocol).
            .env("PLACER_JOURNAL_SOCKET", dir.path().join("no-socket"))
            .stdout(Stdio::null())
            .stderr(file)
            .status()
            .expect("run");
        assert!(st.success());
        std::fs::read_to_string(&path).expect("log")
    };
    let journal = run(&|p| {
        let m = std::fs::metadata(p).expect("stat");
        format!("{}:{}", m.dev(), m.ino())
    });
    let lines: Vec<&str> = journal.lines().filter(|l| l.starts_with('<')).collect();
    assert!(lines.iter().any(|l| l.starts_with("<6> INFO")), "{journal}");
    assert!(
        journal.lines().all(|l| l.starts_with('<')),
        "a line without its priority:\n{journal}"
    );
    let elsewhere = run(&|_| "1:1".to_string());
    assert!(!elsewhere.contains("<6>"), "{elsewhere}");
    assert!(elsewhere.contains("INFO"), "{elsewhere}");
}

/// Runs the placer binary as uid/gid 65534 (a copy readable by that user), for the
/// permission messages.
fn as_nobody(args: &[&str]) -> std::process::Output {
    let copy = std::env::temp_dir().join(format!("placer-nobody-{}", std::process::id()));
    std::fs::copy(env!("CARGO_BIN_EXE_placer"), &copy).expect("copy binary");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&copy)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("setpriv");
    let _ = std::fs::remove_file(&copy);
    o
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn non_root_cases_say_root_is_needed() {
    placer_testkit::require_root();
    // pid 1 belongs to root: a non-root explain cannot see its sockets and must say so
    // rather than report "no network traffic".
    let o = as_nobody(&["explain", "1", "--interval", "200ms"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("cannot see its sockets without root"), "{out}");
    assert!(!out.contains("(no network traffic"), "{out}");
    let o = as_nobody(&[
        "daemon",
        "--once",
        "--interval",
        "100ms",
        "--state-dir",
        "/nonexistent/placer-state",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not running as root"), "{err}");
}

/// Issue 17: reads under --root are bounded: a FIFO planted in a snapshot errors out
/// instead of hanging, a link to /dev/zero instead of reading forever.
#[test]
fn special_files_under_root_error_out() {
    let dir = placer_testkit::TempDir::new("fifo-root");
    let cpu = dir.path().join("sys/devices/system/cpu");
    std::fs::create_dir_all(cpu.join("cpu0")).unwrap();
    for (name, make) in [
        ("present", &["mkfifo"][..]),
        ("online", &["ln", "-s", "/dev/zero"][..]),
    ] {
        let f = cpu.join(name);
        let _ = std::fs::remove_file(&f);
        let ok = Command::new(make[0])
            .args(&make[1..])
            .arg(&f)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "{make:?} {name}");
        let mut child = placer()
            .args(["topo", "--root"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("placer topo hung on a {name} special file");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut err = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(!status.success(), "{name}: accepted");
        assert!(err.contains("not a regular file"), "{name}: {err}");
        std::fs::remove_file(&f).unwrap();
    }
}

/// `bench overhead` against `sleep 100`, one run of 1 s on `procs` sleepers and 2
/// connections, then `extra`.
fn overhead_vs_sleep<'a>(procs: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "bench",
        "overhead",
        "--vs",
        "sleep 100",
        "--procs",
        procs,
        "--conns",
        "2",
        "--duration",
        "1s",
        "--runs",
        "1",
    ];
    v.extend(extra);
    v
}

/// Issue 16: `placer bench overhead` measures placer and another agent on one load, one
/// after the other, and says when the other cannot run.
#[test]
fn bench_overhead_compares_with_another_agent() {
    let o = placer()
        .args(overhead_vs_sleep("5", &["--json"]))
        .output()
        .expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let agents = v["agents"].as_array().expect("agents");
    assert_eq!(agents.len(), 2);
    assert_eq!(agents[0]["agent"], "placer");
    assert!(
        agents.iter().all(|a| a["cpu_percent_of_one"].is_number()),
        "{v}"
    );
    // As root the daemon's eBPF program loads and its in-kernel time is measured; the other
    // agent has none.
    if placer_testkit::proc::effective_uid() == Some(0) {
        assert!(agents[0]["in_kernel_percent_of_one"].is_number(), "{v}");
    }
    assert!(agents[1]["in_kernel_percent_of_one"].is_null(), "{v}");
    let o = placer()
        .args([
            "bench",
            "overhead",
            "--vs",
            "no-such-agent-xyz",
            "--procs",
            "1",
            "--conns",
            "1",
            "--duration",
            "1s",
            "--runs",
            "1",
        ])
        .output()
        .expect("run");
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("not measured"));
}

/// The processes whose environment holds `mark` (the bench's helpers inherit it).
fn marked_processes(mark: &str) -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == mark.as_bytes()))
        })
        .collect()
}

/// Waits (at most 10 s) until no process carries `mark`; the ones left.
fn marked_left_after(mark: &str) -> Vec<u32> {
    let t = std::time::Instant::now();
    loop {
        let left = marked_processes(mark);
        if left.is_empty() || t.elapsed() > std::time::Duration::from_secs(10) {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn netns_list() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Issue 46: `bench overhead --background` runs a busy machine's events beside the
/// measurement and reports them with each program's cost per event; nothing it started
/// outlives it, whether it ends or is killed in the middle.
#[test]
fn bench_overhead_busy_mode_reports_per_event_and_leaves_nothing() {
    let mark = format!("PLACER_BUSY_TEST={}", std::process::id());
    let (key, value) = mark.split_once('=').unwrap();
    let netns = netns_list();
    let args = overhead_vs_sleep(
        "3",
        &[
            "--background",
            "switches:2000,stream:1,stream-gbit:0.2",
            "--json",
        ],
    );
    let o = placer().args(&args).env(key, value).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["background"]["switches_per_s"], 2000, "{v}");
    assert_eq!(v["background"]["streams"], 1, "{v}");
    let agents = v["agents"].as_array().expect("agents");
    assert_eq!(agents.len(), 2);
    for a in agents {
        let b = &a["background"];
        // The ping-pong ran in every window, never faster than asked (a busy shared VM
        // may lag it: its pinned CPU is shared), and the stream moved data.
        let pp = b["pingpong_switches_per_s"].as_f64().expect("rate");
        assert!((100.0..=2_200.0).contains(&pp), "{a}");
        assert!(
            b["machine_switches_per_s"].as_f64().unwrap() >= pp * 0.9,
            "{a}"
        );
        assert!(b["stream_gbit_per_s"].as_f64().unwrap() > 0.0, "{a}");
        assert!(b["segments_per_s"].as_f64().unwrap() > 0.0, "{a}");
    }
    if placer_testkit::proc::effective_uid() == Some(0) {
        // Per program: the switch program ran at least as often as the ping-pong
        // switched, each with a cost per run.
        let progs = agents[0]["programs"].as_array().expect("programs");
        let sw = progs
            .iter()
            .find(|p| p["program"] == "placer_cpu")
            .unwrap_or_else(|| panic!("no placer_cpu in {progs:?}"));
        assert_eq!(sw["event"], "context switch");
        assert!(sw["runs_per_s"].as_f64().unwrap() >= 100.0, "{sw}");
        assert!(sw["ns_per_run"].as_f64().unwrap() > 0.0, "{sw}");
        assert!(agents[1]["programs"].as_array().unwrap().is_empty());
    }
    assert_eq!(marked_left_after(&mark), Vec::<u32>::new());
    // Killed in the middle of a window: its daemon, sleepers and the other agent go too.
    let long: Vec<&str> = args
        .iter()
        .map(|&a| if a == "1s" { "20s" } else { a })
        .filter(|&a| a != "--json")
        .collect();
    let mut child = placer()
        .args(long)
        .env(key, value)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert!(!marked_processes(&mark).is_empty(), "nothing running?");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(marked_left_after(&mark), Vec::<u32>::new());
    assert_eq!(netns_list(), netns);
}

/// `energy_qos.power_table`: a table is loaded (its source shows in the plan's notes) and a
/// malformed one stops the daemon with the line at fault.
#[test]
fn power_tables_are_loaded_or_refused_with_their_line() {
    let dir = placer_testkit::TempDir::new("placer-power-table");
    let table = "# hand-made\nsource test bench\nbase_w 0.7\n4294967295 0 0.9 0.1\n";
    std::fs::write(dir.path().join("t.table"), table).unwrap();
    std::fs::write(
        dir.path().join("cfg.toml"),
        "policies = [\"energy-qos\"]\n[energy_qos]\npower_table = \"t.table\"\n\
         [[energy_qos.apps]]\nname = \"me\"\nmatch = { comm = \"sleep\" }\n\
         target_perf_share = 0.5\n",
    )
    .unwrap();
    // A process for the app to match, killed when the test ends however it ends.
    let _sleeper = placer_testkit::proc::sleeper();
    let run = || {
        placer()
            .args(["daemon", "--once", "--dry-run", "--json", "--config"])
            .arg(dir.path().join("cfg.toml"))
            .output()
            .unwrap()
    };
    let o = run();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("source measured:"), "{out}");
    assert!(out.contains("(test bench)"), "{out}");
    std::fs::write(
        dir.path().join("t.table"),
        "base_w 0.7\n0 800000 0.9 0.1\n0 600000 0.9 0.1\n",
    )
    .unwrap();
    let o = run();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("t.table: line 3: "), "{err}");
}

/// `placer bench contention` runs on this machine: a point alone and beside co-runners,
/// each with its time per access and slowdown, and the three fitted shapes.
#[test]
fn bench_contention_measures_and_fits() {
    let o = placer()
        .args([
            "bench",
            "contention",
            "--points",
            "0,1,2",
            "--duration",
            "500ms",
            "--stream-bytes",
            "33554432",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pts = j["points"].as_array().unwrap();
    let local: Vec<&serde_json::Value> = pts.iter().filter(|p| p["sweep"] == "local").collect();
    assert_eq!(local.len(), 3, "{j}");
    assert_eq!(local[0]["slowdown"].as_f64(), Some(0.0));
    for p in &local {
        assert!(p["ns_per_access"].as_f64().unwrap() > 0.0, "{p}");
    }
    assert!(local[2]["co_runner_gbps"].as_f64().unwrap() > 0.0, "{j}");
    assert_eq!(j["fit_by_count"]["fits"].as_array().unwrap().len(), 3);
    // The shipped data sets' fits print.
    let o = placer()
        .args(["bench", "contention", "--fit"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("x86-16core-llc"));
}

/// `placer bench contention --app ...`: the pairwise matrix (seed 003's Fig. 1) is measured
/// here, each cell a victim's slowdown beside a partner kept running, fitted to pressure and
/// sensitivity; a partner still running when its victim ends, and a victim past
/// `--pairs-timeout`, are stopped with their whole process group; the saved report fits
/// again with `--fit-pairs`.
#[test]
fn bench_contention_measures_a_pairwise_matrix() {
    // The sleeper's duration marks its processes (a child of the shell, not the shell).
    let marker = format!("2.{}", std::process::id());
    // Its stderr away from ours: an orphan holding our pipe would make `output()` wait
    // for it and hide it.
    let sleeper = format!("sleeper=sleep {marker} 2>/dev/null; true");
    let dir = placer_testkit::TempDir::new("pairs-cli");
    let left = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
            .filter(|c| String::from_utf8_lossy(c).contains(&marker))
            .count()
    };
    let none_left = |what: &str| {
        // Well under the sleep's own 2 s: an orphan left to end by itself is caught.
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(700);
        while left() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(left(), 0, "{what} left its processes behind");
    };
    let o = placer()
        .args([
            "bench",
            "contention",
            // The sleeper first: the last cells are the spin's, beside a sleeper stopped
            // when the spin ends, and checked for before its sleep could end by itself.
            "--app",
            &sleeper,
            "--app",
            "spin=i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done",
            "--pairs-rounds",
            "1",
            "--pairs-timeout",
            "20s",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    none_left("a partner outliving its victim");
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = j["matrix"]["slowdown"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{j}");
    for r in rows {
        let cells = r.as_array().unwrap();
        assert_eq!(cells.len(), 2);
        assert!(cells.iter().all(|c| c.as_f64().unwrap().is_finite()), "{j}");
    }
    // The sleeper takes its 2.x s whoever runs beside it.
    assert!(j["alone_s"][0].as_f64().unwrap() >= 2.0, "{j}");
    assert_eq!(j["fits"].as_array().unwrap().len(), 2, "{j}");
    // The report names the size of the LLC its apps ran on (the victim's last-level cache
    // in sysfs, where sysfs lists caches), for `placer sim --pairs`.
    let victim = j["victim_cpu"].as_u64().unwrap();
    let last_level = (0..8).rev().find_map(|i| {
        std::fs::read_to_string(format!(
            "/sys/devices/system/cpu/cpu{victim}/cache/index{i}/size"
        ))
        .ok()
    });
    if let Some(size) = last_level {
        let kib: u64 = size.trim().trim_end_matches('K').parse().unwrap();
        assert_eq!(j["llc_bytes"].as_u64(), Some(kib * 1024), "{j}");
    }
    let saved = dir.path().join("pairs.json");
    std::fs::write(&saved, &o.stdout).unwrap();
    let o = placer()
        .args(["bench", "contention", "--fit-pairs"])
        .arg(&saved)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("[params.archetypes.spin] pressure = "),
        "{out}"
    );
    // A run past the timeout fails, says so, and is stopped whole.
    let o = placer()
        .args(["bench", "contention", "--app", &sleeper])
        .args(["--pairs-rounds", "1", "--pairs-timeout", "300ms"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("--pairs-timeout"), "{err}");
    none_left("a timed-out run");
    // A partner that fails (here: every run after its first, alone) fails the cell instead
    // of leaving the victim to run alone. The victim outlives the partner's failing run: it
    // waits (at most 10 s) while a shell running the partner's command is alive, so the
    // failure comes before the victim's end whatever the host's load.
    let flag = dir.path().join("ran-once");
    let mark = format!("flaky-{}", std::process::id());
    let flaky = format!(
        "flaky=: {mark}; if [ -e {f} ]; then exit 3; fi; touch {f}",
        f = flag.display()
    );
    // `[:]` keeps the pattern from matching the victim's own command line; `^sh -c` keeps
    // it from matching placer's.
    let ok = format!(
        "ok=i=0; while pgrep -f '^sh -c .*[:] {mark};' >/dev/null && [ $i -lt 200 ]; do \
         sleep 0.05; i=$((i+1)); done"
    );
    let o = placer()
        .args(["bench", "contention", "--app", &ok, "--app", &flaky])
        .args(["--pairs-rounds", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("partner") && err.contains("failed"), "{err}");
}

/// Issue 32: `placer report --json` is pure JSON and its counts are the verdict log's, per
/// policy; `--since` leaves older verdicts out; a torn line is counted, not fatal.
#[test]
fn report_json_counts_equal_the_verdict_log() {
    use placer_core::policies::PolicyKind;
    use placer_core::verdict::{Comparison, Judgement, Metric, Verdict, VerdictKind};
    use placer_linux::verdict_log::{append, VerdictRecord, VERDICT_LOG};
    let dir = placer_testkit::TempDir::new("report");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let rec = |pid: u32, policy, kind, ratio: f64, unix_ms| VerdictRecord {
        unix_ms,
        verdict: Verdict {
            policy,
            proc: placer_core::sample::ProcKey {
                pid,
                start_time_ticks: 1,
            },
            comm: format!("p{pid}"),
            judgement: Judgement {
                kind,
                main: Some(Comparison {
                    metric: Metric::CpuShare,
                    before_mean: 1.0,
                    after_mean: ratio,
                    change: ratio - 1.0,
                    t: 0.0,
                    rho: 0.0,
                    significant: false,
                    beyond_noise: false,
                    paired: Some(placer_core::verdict::Paired {
                        pairs: 24,
                        p_value: 0.5,
                        alpha: 0.01,
                        ratio_ci95: (ratio, ratio),
                    }),
                }),
                guard: None,
                why: String::new(),
            },
            backoff_intervals: None,
            trial: Some(u64::from(pid)),
        },
    };
    let records = [
        rec(1, PolicyKind::NetAffinity, VerdictKind::Kept, 0.8, now_ms),
        rec(2, PolicyKind::NetAffinity, VerdictKind::Kept, 0.9, now_ms),
        rec(3, PolicyKind::NetAffinity, VerdictKind::Undone, 1.2, now_ms),
        rec(
            4,
            PolicyKind::EnergyQos,
            VerdictKind::Inconclusive,
            1.0,
            now_ms,
        ),
        // Two days old: out of --since 1h.
        rec(
            5,
            PolicyKind::EnergyQos,
            VerdictKind::Undone,
            0.5,
            now_ms - 172_800_000,
        ),
    ];
    for r in &records {
        append(dir.path(), r).unwrap();
    }
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join(VERDICT_LOG))
        .unwrap()
        .write_all(b"{\"torn")
        .unwrap();
    let report = |extra: &[&str]| -> serde_json::Value {
        let o = placer()
            .args(["report", "--json", "--no-config", "--state-dir"])
            .arg(dir.path())
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).expect("pure JSON")
    };
    for (extra, window) in [
        (&[][..], &records[..]),
        (&["--since", "1h"][..], &records[..4]),
    ] {
        let v = report(extra);
        assert_eq!(v["verdicts"], window.len(), "{v}");
        assert_eq!(v["unreadable_lines"], 1);
        for p in v["policies"].as_array().unwrap() {
            let kind: PolicyKind = serde_json::from_value(p["policy"].clone()).unwrap();
            let mine: Vec<&VerdictRecord> =
                window.iter().filter(|r| r.verdict.policy == kind).collect();
            let count = |k| {
                mine.iter()
                    .filter(|r| r.verdict.judgement.kind == k)
                    .count()
            };
            assert_eq!(p["moves"], mine.len(), "{p}");
            assert_eq!(p["kept"], count(VerdictKind::Kept), "{p}");
            assert_eq!(p["undone"], count(VerdictKind::Undone), "{p}");
            assert_eq!(p["inconclusive"], count(VerdictKind::Inconclusive), "{p}");
        }
        let total: u64 = v["policies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["moves"].as_u64().unwrap())
            .sum();
        assert_eq!(total as usize, window.len());
    }
    // net-affinity's CPU-share effects: median 0.9 of 0.8, 0.9, 1.2.
    let v = report(&[]);
    let na = &v["policies"][0];
    assert_eq!(na["policy"], "net-affinity");
    assert_eq!(na["effects"][0]["median_ratio"], 0.9);
    // An empty state dir: no verdicts, not an error.
    let empty = placer_testkit::TempDir::new("report-empty");
    let o = placer()
        .args(["report", "--no-config", "--state-dir"])
        .arg(empty.path())
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("0 verdicts"));
}

/// Issue 47: a mistyped `--state-dir` is an error naming it, for report and restore alike
/// (it read as "0 verdicts" / "nothing to restore").
#[test]
fn a_state_dir_that_does_not_exist_is_named() {
    let dir = placer_testkit::TempDir::new("no-state");
    let missing = dir.path().join("typo");
    for cmd in [&["report"][..], &["restore"][..]] {
        let o = placer()
            .args(cmd)
            .args(["--no-config", "--state-dir"])
            .arg(&missing)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{cmd:?}: {err}");
        assert!(
            err.contains("no such state dir") && err.contains(&*missing.to_string_lossy()),
            "{cmd:?}: {err}"
        );
    }
}

/// Issue 47: `topo --list-machines --json` is JSON, one object per built-in machine.
#[test]
fn list_machines_speaks_json_when_asked() {
    let o = placer()
        .args(["topo", "--list-machines", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let list = v.as_array().unwrap();
    assert!(!list.is_empty());
    assert!(list
        .iter()
        .all(|m| m["name"].is_string() && m["description"].is_string()));
    let plain = placer().args(["topo", "--list-machines"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout).lines().count(),
        list.len()
    );
}

/// Issue 47 item 5: a first run says once, at its first cycle, what each policy runs
/// without on this machine: with the built-in config, net-affinity names the interfaces it
/// cannot act on (loopback has no receive CPU without RPS), or says why it is off.
#[test]
fn a_first_run_says_what_each_policy_runs_without() {
    let o = placer()
        .args(["daemon", "--once", "--dry-run"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let about = |needle: &str| err.lines().filter(|l| l.contains(needle)).count();
    let lacks = err
        .lines()
        .find(|l| l.contains("policy net-affinity runs without: "));
    match lacks {
        Some(l) => {
            let named = l
                .split("runs without: ")
                .nth(1)
                .and_then(|rest| rest.split(": no known receive CPU").next())
                .unwrap_or("");
            assert!(
                named.split(", ").any(|n| n == "lo") && l.contains(": no known receive CPU"),
                "{err}"
            );
        }
        None => assert_eq!(about("policy net-affinity disabled: "), 1, "{err}"),
    }
    assert!(about("runs without: ") <= 1, "said more than once:\n{err}");
}

/// Issue 47 item 6: every column `top` prints is explained in `placer top --help` (the
/// columns are taken from a real `--once` table, so a new column without its line fails).
#[test]
fn top_help_explains_every_column_it_prints() {
    let once = placer()
        .args(["top", "--once", "--interval", "200ms"])
        .output()
        .expect("top --once");
    assert!(
        once.status.success(),
        "{}",
        String::from_utf8_lossy(&once.stderr)
    );
    let table = String::from_utf8_lossy(&once.stdout);
    let headers: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("CPU ") || l.trim_start().starts_with("PID COMM"))
        .flat_map(str::split_whitespace)
        .filter(|w| !["CPU", "PID", "COMM"].contains(w))
        .collect();
    assert!(headers.len() >= 12, "headers {headers:?} in:\n{table}");
    let help = placer().args(["top", "--help"]).output().expect("help");
    let help = String::from_utf8_lossy(&help.stdout).replace('\n', " ");
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for h in headers {
        assert!(
            help.contains(&format!("{h} (")) || help.contains(&format!("{h} and ")),
            "column {h} is not explained in `placer top --help`:\n{help}"
        );
    }
}

/// Issue 51: `placer sim` takes what a user measured: a saved pairwise matrix (`bench
/// contention --app ... --json`, here a bare one) sets the named apps' harm; a power table
/// (`power calibrate --out`) is read, and a malformed one refused with its line.
#[test]
fn sim_reads_a_measured_matrix_and_power_table() {
    let dir = placer_testkit::TempDir::new("placer-sim-measured");
    let sim = |extra: &[&str]| {
        placer()
            .args([
                "sim",
                "seed-003-6",
                "--seeds",
                "1",
                "--policy",
                "linux-default",
            ])
            .args(["--duration", "2s"])
            .args(extra)
            .output()
            .unwrap()
    };
    let m = dir.path().join("m.json");
    let write = |names: &str| {
        std::fs::write(
            &m,
            format!(r#"{{"names":[{names}],"slowdown":[[null,0.3],[0.5,null]]}}"#),
        )
        .unwrap()
    };
    write(r#""lbm","omnetpp""#);
    let o = sim(&["--pairs", m.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    write(r#""lbm","no-such-app""#);
    let o = sim(&["--pairs", m.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("no-such-app"), "{err}");

    let t = dir.path().join("t.table");
    std::fs::write(&t, "source test bench\nbase_w 0.7\n4294967295 0 0.9 0.1\n").unwrap();
    let o = sim(&["--power-table", t.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(&t, "base_w nonsense\n").unwrap();
    let o = sim(&["--power-table", t.to_str().unwrap()]);
    assert!(!o.status.success());
}

/// Issue 51: `placer bench seeds` re-renders seed 003's summaries from the per-seed file
/// (no simulation), as docs/seeds.md holds them; a part it does not know is refused.
#[test]
fn bench_seeds_renders_the_docs_blocks_from_the_per_seed_file() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = placer()
        .args(["bench", "seeds", "--only", "003", "--per-seed"])
        .arg(root.join("docs/seed-003-seeds.md"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let doc = std::fs::read_to_string(root.join("docs/seeds.md")).unwrap();
    let block = placer_sim::seed_figures::block(&doc, "seed-003").expect("seed-003 block");
    assert!(out.contains(block), "{out}");
    let o = placer()
        .args(["bench", "seeds", "--only", "999"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("999"));
}

/// Issue 44 item 5: with nothing judged, `report` says why from the daemon's last notes
/// (most frequent first), and it shows what the judge can see on this machine: the saved
/// staged-move calibration with its date, or that none was measured. Both in text and JSON.
#[test]
fn report_says_why_nothing_was_judged_and_what_the_judge_can_see() {
    use placer::bench::bench_verdicts_real::{Class, ClassResult, Saved, SAVED};
    use placer_agent::state::{Decisions, ProcDecision};
    use placer_core::policies::PolicyKind;
    let dir = placer_testkit::TempDir::new("report-why");
    let report = |json: bool| {
        let o = placer()
            .args(["report", "--no-config", "--state-dir"])
            .arg(dir.path())
            .args(if json { &["--json"][..] } else { &[][..] })
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // No daemon ever ran here: said so, and the judge's power is not measured.
    let text = report(false);
    assert!(
        text.contains("no daemon has run with this state dir"),
        "{text}"
    );
    assert!(text.contains("not measured"), "{text}");
    // A daemon's last decisions: three processes, two with the same note.
    let note = |pid: u32, text: &str| {
        (
            pid,
            ProcDecision {
                pid,
                comm: format!("p{pid}"),
                notes: vec![(PolicyKind::NetAffinity, text.to_string())],
                ..Default::default()
            },
        )
    };
    let lo = "lo has no known receive CPU";
    let d = Decisions {
        daemon_pid: 1,
        interval_ms: 1000,
        procs: [note(10, lo), note(11, "under the threshold"), note(12, lo)]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    d.write(dir.path()).unwrap();
    let text = report(false);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let at = |needle: &str| lines.iter().position(|l| l.contains(needle));
    assert!(
        at("3 process(es) seen, 0 held, no move judged").is_some(),
        "{text}"
    );
    let (two, one) = (
        at(&format!("2 process(es): {lo}")),
        at("1 process(es): under the threshold"),
    );
    assert!(two.is_some() && one.is_some() && two < one, "{text}");
    // A saved calibration: its line, with its date, in text and JSON.
    let saved = Saved {
        at_unix_s: 1_795_000_000,
        interval_ms: 250,
        settings: placer_core::config::Config::default()
            .verify
            .probe(PolicyKind::NetAffinity),
        classes: vec![ClassResult {
            class: Class::Harm20,
            intended_ratio: 0.8,
            moves: 8,
            kept: 0,
            undone: 8,
            inconclusive: 0,
            acted_ci95: (0.63, 1.0),
            undone_ci95: (0.63, 1.0),
            kept_ci95: (0.0, 0.37),
            median_s_to_verdict: 6.5,
            max_s_to_verdict: 6.5,
            median_measured_ratio: 0.79,
        }],
        cut_short: false,
        nice: -20,
    };
    std::fs::write(
        dir.path().join(SAVED),
        serde_json::to_string(&saved).unwrap(),
    )
    .unwrap();
    let text = report(false);
    assert!(
        text.contains("unix time 1795000000") && text.contains("Harm20 undone 8/8 (63..100%)"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&report(true)).expect("pure JSON");
    assert_eq!(v["calibration"]["at_unix_s"], 1_795_000_000u64, "{v}");
    assert_eq!(v["calibration"]["classes"][0]["undone"], 8, "{v}");
    assert!(
        v["why_no_verdicts"][1]
            .as_str()
            .is_some_and(|l| l.contains(lo)),
        "{v}"
    );
}
