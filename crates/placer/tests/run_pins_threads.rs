//! Real on this machine: `placer run -n 2 -- <a program with threads>` pins every thread
//! of the program to one CPU of the planned set, in order, and sets the OMP variables.
//!
//! The threaded program is this test binary itself, run with `--exact threaded_child`:
//! it starts a worker thread, waits, then prints every task's `Cpus_allowed_list` (from
//! /proc/self/task/*/status) and its OMP_* variables (from /proc/self/environ).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

const CHILD_ENV: &str = "PLACER_RUN_TEST_CHILD";

#[test]
#[ignore = "the child half of run_pins_every_thread_and_sets_omp_env"]
fn threaded_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let worker = std::thread::spawn(|| std::thread::sleep(Duration::from_millis(2500)));
    std::thread::sleep(Duration::from_millis(1500));
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let e = e.unwrap();
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        if let Some(l) = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")) {
            println!(
                "TASK {} {}",
                e.file_name().to_string_lossy(),
                l.split_whitespace().nth(1).unwrap_or("")
            );
        }
    }
    let environ = std::fs::read("/proc/self/environ").unwrap();
    for var in environ.split(|b| *b == 0) {
        let var = String::from_utf8_lossy(var);
        if var.starts_with("OMP_") {
            println!("ENV {var}");
        }
    }
    worker.join().unwrap();
}

#[test]
fn run_pins_every_thread_and_sets_omp_env() {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let placer = env!("CARGO_BIN_EXE_placer");
    let me = std::env::current_exe().unwrap();
    // The plan first: which CPUs, in which order.
    let dry = Command::new(placer)
        .args(["run", "-n", "2", "--dry-run", "--json", "--", "true"])
        .output()
        .unwrap();
    if !dry.status.success() {
        let err = String::from_utf8_lossy(&dry.stderr);
        if err.contains("only 1 allowed") || err.contains("but only") {
            placer_testkit::skip(&format!(
                "fewer than 2 allowed CPUs here ({online:?}): {err}"
            ));
            return;
        }
        panic!("dry run failed: {err}");
    }
    let plan: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    let cpus: Vec<u32> = plan["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(cpus.len(), 2);

    let out = Command::new(placer)
        .args(["run", "-n", "2", "--watch", "5s", "--"])
        .arg(&me)
        .args([
            "--exact",
            "threaded_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "placer run failed:\n{stdout}\n{stderr}"
    );

    // placer's log: tid -> cpu, in the order it pinned them.
    let pinned: Vec<(u32, u32)> = pins(&stderr).into_iter().map(|p| (p.tid, p.cpu)).collect();
    // The k-th thread pinned got the (k mod n)-th CPU of the plan.
    for (k, (_, cpu)) in pinned.iter().enumerate() {
        assert_eq!(*cpu, cpus[k % cpus.len()], "pin #{k}: {stderr}");
    }
    let pinned: BTreeMap<u32, u32> = pinned.into_iter().collect();
    // What the child saw of its own threads.
    let tasks: Vec<(u32, String)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("TASK "))
        .map(|r| {
            let (t, c) = r.split_once(' ').unwrap();
            (t.parse().unwrap(), c.to_string())
        })
        .collect();
    assert!(
        tasks.len() >= 2,
        "main + worker expected:\n{stdout}\n{stderr}"
    );
    for (tid, allowed) in &tasks {
        let want = pinned
            .get(tid)
            .unwrap_or_else(|| panic!("task {tid} was never pinned:\n{stderr}"));
        assert_eq!(allowed, &want.to_string(), "task {tid}");
    }
    // Every CPU of the plan is used by some thread (2 CPUs, at least 2 threads).
    let used: std::collections::BTreeSet<String> = tasks.iter().map(|t| t.1.clone()).collect();
    assert_eq!(used.len(), 2, "{tasks:?}");
    let places = cpus
        .iter()
        .map(|c| format!("{{{c}}}"))
        .collect::<Vec<_>>()
        .join(",");
    for want in [
        "ENV OMP_NUM_THREADS=2".to_string(),
        format!("ENV OMP_PLACES={places}"),
        "ENV OMP_PROC_BIND=close".to_string(),
    ] {
        assert!(
            stdout.lines().any(|l| l == want),
            "{want} missing:\n{stdout}"
        );
    }
}

/// One line of `placer run`'s log: "placer run: pinned tid T -> cpu C (pid P)".
#[derive(Debug, Clone, Copy)]
struct Pin {
    tid: u32,
    cpu: u32,
    pid: u32,
}

fn pins(stderr: &str) -> Vec<Pin> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("placer run: pinned tid ")?;
            let (tid, rest) = rest.split_once(" -> cpu ")?;
            let (cpu, pid) = rest.split_once(" (pid ")?;
            Some(Pin {
                tid: tid.parse().ok()?,
                cpu: cpu.parse().ok()?,
                pid: pid.trim_end_matches(')').parse().ok()?,
            })
        })
        .collect()
}

/// Runs `placer run -n 2 --watch WATCH -- CMD...` and returns its pins and the main pid, or
/// None (after a visible skip) when fewer than 2 CPUs are allowed here.
fn run_two(watch: &str, cmd: &[&str]) -> Option<(Vec<Pin>, u32)> {
    let allowed = placer_testkit::proc::status_field(std::process::id(), "Cpus_allowed_list:")
        .unwrap_or_default();
    if allowed == "0" || !(allowed.contains(',') || allowed.contains('-')) {
        placer_testkit::skip(&format!("needs 2 allowed CPUs (allowed: {allowed})"));
        return None;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_placer"))
        .args(["run", "-n", "2", "--watch", watch, "--"])
        .args(cmd)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "placer run failed: {stderr}");
    let main: u32 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("placer run: pid "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no pid line: {stderr}"));
    Some((pins(&stderr), main))
}

#[test]
fn children_of_a_shell_go_to_different_cpus() {
    let Some((pins, main)) = run_two("200ms", &["sh", "-c", "sleep 1 & sleep 1 & wait"]) else {
        return;
    };
    let kids: Vec<&Pin> = pins.iter().filter(|p| p.pid != main).collect();
    assert_eq!(kids.len(), 2, "{pins:?}");
    assert_ne!(
        kids[0].cpu, kids[1].cpu,
        "both children on one CPU: {pins:?}"
    );
}

#[test]
fn threads_started_after_the_watch_window_are_spread() {
    let script = "import threading, time\n\
                  time.sleep(0.6)\n\
                  ts = [threading.Thread(target=time.sleep, args=(0.8,)) for _ in range(2)]\n\
                  [t.start() for t in ts]\n\
                  [t.join() for t in ts]\n";
    let Some((pins, main)) = run_two("100ms", &["python3", "-c", script]) else {
        return;
    };
    let late: Vec<&Pin> = pins
        .iter()
        .filter(|p| p.pid == main && p.tid != main)
        .collect();
    assert!(late.len() >= 2, "late threads not pinned: {pins:?}");
    assert_ne!(late[0].cpu, late[1].cpu, "{pins:?}");
}

#[test]
fn make_like_forking_spreads_over_all_cpus() {
    let Some((pins, main)) = run_two(
        "100ms",
        &["sh", "-c", "for i in 1 2 3 4; do sleep 1 & done; wait"],
    ) else {
        return;
    };
    let kids: Vec<&Pin> = pins.iter().filter(|p| p.pid != main).collect();
    assert_eq!(kids.len(), 4, "{pins:?}");
    let on_first = kids.iter().filter(|p| p.cpu == kids[0].cpu).count();
    assert_eq!(
        on_first, 2,
        "4 children on 2 CPUs should split 2/2: {pins:?}"
    );
}
