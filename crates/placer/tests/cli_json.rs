//! Every `--json` output is pure JSON (issue 30, item 5): each command that takes `--json`
//! runs in a quick form and its whole stdout is parsed, as one document or as JSON lines;
//! nothing else may stand beside it (a text line before the JSON broke `bench topo --json |
//! python3 -m json.tool`). The list is checked against the commands' own `--help`, so a
//! new `--json` command cannot go untested. Commands that need root (namespaces, RPS, qdiscs)
//! run only as root and are a visible skip otherwise.

use std::path::Path;
use std::process::{Command, Stdio};

fn placer() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_placer"));
    c.stdin(Stdio::null());
    c
}

/// Every JSON document of `stdout`: the whole text, or else each non-empty line.
fn documents(stdout: &str) -> Result<Vec<serde_json::Value>, String> {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(stdout) {
        return Ok(vec![v]);
    }
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| format!("{e}: {l:?}")))
        .collect()
}

/// The subcommands (as `a b` paths) whose `--help` lists `--json`.
fn json_commands() -> Vec<String> {
    let help = |path: &[&str]| -> String {
        let o = placer()
            .args(path)
            .arg("--help")
            .output()
            .expect("placer --help");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // "Commands:" lists "  name  about"; `help` is clap's own.
    let subcommands = |text: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| *n != "help")
            .map(str::to_string)
            .collect()
    };
    let mut out = Vec::new();
    let mut stack: Vec<Vec<String>> = subcommands(&help(&[]))
        .into_iter()
        .map(|c| vec![c])
        .collect();
    while let Some(path) = stack.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        for sub in subcommands(&text) {
            let mut p = path.clone();
            p.push(sub);
            stack.push(p);
        }
        if text.lines().any(|l| l.trim_start().starts_with("--json")) {
            out.push(path.join(" "));
        }
    }
    out.sort();
    out
}

/// (command path, arguments of a quick run, needs root).
fn quick_runs(dir: &Path) -> Vec<(&'static str, Vec<String>, bool)> {
    let me = std::process::id().to_string();
    let rec = dir.join("two.rec").display().to_string();
    let fit = dir.join("fit.csv").display().to_string();
    let state = dir.join("state").display().to_string();
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    vec![
        ("topo", s(&["topo", "--json"]), false),
        // An empty state dir: nothing to put back, and it says so in JSON.
        (
            "restore",
            s(&["restore", "--no-config", "--state-dir", &state, "--json"]),
            false,
        ),
        ("top", s(&["top", "--json", "--interval", "100ms"]), false),
        (
            "daemon",
            s(&[
                "daemon",
                "--no-config",
                "--once",
                "--dry-run",
                "--json",
                "--interval",
                "100ms",
            ]),
            false,
        ),
        (
            "explain",
            s(&[
                "explain",
                &me,
                "--json",
                "--no-config",
                "--interval",
                "100ms",
            ]),
            false,
        ),
        (
            "run",
            s(&["run", "--dry-run", "--json", "-n", "1", "--", "true"]),
            false,
        ),
        (
            "plan",
            s(&["plan", "--json", "--machine", "xeon-5355x2"]),
            false,
        ),
        (
            "sim",
            s(&[
                "sim",
                "seed-002",
                "--json",
                "--duration",
                "1s",
                "--seeds",
                "1",
            ]),
            false,
        ),
        (
            "record",
            s(&["record", "--replay", "--plans", "--json", &rec]),
            false,
        ),
        (
            "power fit",
            s(&["power", "fit", &fit, "--machine", "xeon-5355x2", "--json"]),
            false,
        ),
        (
            "bench topo",
            s(&["bench", "topo", "--runs", "2", "--json"]),
            false,
        ),
        (
            "bench sockets",
            s(&[
                "bench", "sockets", "--conns", "4", "--moving", "2", "--runs", "2", "--json",
            ]),
            true,
        ),
        (
            "bench sim",
            s(&["bench", "sim", "--runs", "1", "--duration", "1s", "--json"]),
            false,
        ),
        (
            "bench cycle",
            s(&[
                "bench", "cycle", "--runs", "2", "--procs", "10", "--conns", "2", "--json",
            ]),
            false,
        ),
        (
            "bench daemon",
            s(&[
                "bench",
                "daemon",
                "--duration",
                "1s",
                "--runs",
                "1",
                "--json",
            ]),
            false,
        ),
        (
            "bench overhead",
            s(&[
                "bench",
                "overhead",
                "--duration",
                "1s",
                "--runs",
                "1",
                "--procs",
                "10",
                "--conns",
                "2",
                "--json",
            ]),
            true,
        ),
        (
            "bench net",
            s(&["bench", "net", "--duration", "1s", "--runs", "1", "--json"]),
            true,
        ),
        (
            "bench qos",
            s(&["bench", "qos", "--duration", "1s", "--runs", "1", "--json"]),
            true,
        ),
        (
            "bench verdicts",
            s(&["bench", "verdicts", "--trials", "20", "--json"]),
            false,
        ),
        (
            "bench seeds",
            s(&["bench", "seeds", "--only", "001", "--seeds", "1", "--json"]),
            false,
        ),
        (
            "bench contention",
            s(&[
                "bench",
                "contention",
                "--points",
                "1",
                "--duration",
                "200ms",
                "--json",
            ]),
            false,
        ),
    ]
}

/// Commands whose `--json` is checked by another test, with where.
const ELSEWHERE: &[(&str, &str)] = &[
    (
        "ab",
        "tests/hardening.rs ab_runs_reports_and_leaves_nothing_behind (a whole A/B run)",
    ),
    (
        "report",
        "tests/cli_edges.rs report_json_counts_equal_the_verdict_log (a written verdict log)",
    ),
];

#[test]
fn every_json_output_parses_and_holds_nothing_else() {
    let dir = placer_testkit::TempDir::new("cli-json");
    // Inputs: a two-sample recording and power measurements across package and SMT counts.
    let rec = dir.path().join("two.rec");
    let o = placer()
        .args([
            "record",
            "--interval",
            "100ms",
            "--duration",
            "100ms",
            "--no-sockets",
        ])
        .arg(&rec)
        .output()
        .expect("record");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(
        dir.path().join("fit.csv"),
        "packages,cores,siblings,watts\n0,0,0,100\n1,1,0,130\n1,2,0,150\n2,2,0,180\n1,1,1,140\n2,4,2,230\n",
    )
    .unwrap();

    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let runs = quick_runs(dir.path());
    let listed: Vec<&str> = runs
        .iter()
        .map(|r| r.0)
        .chain(ELSEWHERE.iter().map(|e| e.0))
        .collect();
    for cmd in json_commands() {
        assert!(
            listed.contains(&cmd.as_str()),
            "`placer {cmd}` takes --json but no test here runs it: add it to quick_runs"
        );
    }
    let root = placer_testkit::is_root();
    for (name, args, needs_root) in &runs {
        if *needs_root && !root {
            placer_testkit::skip(&format!("placer {name} --json needs root"));
            continue;
        }
        let o = placer().args(args).output().expect("placer");
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "placer {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!stdout.trim().is_empty(), "placer {args:?} printed nothing");
        if let Err(e) = documents(&stdout) {
            panic!("placer {args:?}: stdout is not pure JSON ({e}):\n{stdout}");
        }
    }
}
