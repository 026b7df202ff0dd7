//! Golden plans: a real recording (a dry-run daemon on this project's test machine, a
//! receiver streaming 20 MB/s in a network namespace with RPS on CPU 1, scope = the
//! receiver; recorded by `daemon_e2e::a_recording_replays_to_the_plans_of_the_live_run`
//! with `PLACER_KEEP_RECORDING`) replayed through the engine must give exactly the plans
//! kept beside it, which that test showed equal to the plans the daemon printed live. A
//! change to the engine or a policy that changes a decision on this trace fails here;
//! when the change is meant, regenerate with `PLACER_BLESS=1` and say why in the commit.

use std::path::Path;
use std::process::Command;

const PLACER: &str = env!("CARGO_BIN_EXE_placer");

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/replay")
        .join(name)
}

/// The plans `placer record --replay --plans --json` gives for a gzipped fixture, with
/// `--config` when given (text of a placer.toml).
fn plans_of(record_gz: &str, config: Option<&str>) -> Vec<serde_json::Value> {
    let dir = std::env::temp_dir().join(format!(
        "placer-golden-{}-{}",
        std::process::id(),
        config.is_some()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let rec = dir.join("trace.record");
    let unzipped = Command::new("gzip")
        .arg("-dc")
        .arg(fixture(record_gz))
        .output()
        .expect("gzip");
    assert!(unzipped.status.success());
    std::fs::write(&rec, &unzipped.stdout).unwrap();
    let mut cmd = Command::new(PLACER);
    cmd.args(["record", "--replay", "--plans", "--json"]);
    if let Some(text) = config {
        let cfg = dir.join("placer.toml");
        std::fs::write(&cfg, text).unwrap();
        cmd.arg("--config").arg(cfg);
    }
    let out = cmd.arg(&rec).output().expect("placer");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn the_net_affinity_recording_replays_to_its_golden_plans() {
    let got = plans_of("net-affinity-pin.record.gz", None);
    let golden_path = fixture("net-affinity-pin.plans.jsonl");
    if std::env::var("PLACER_BLESS").is_ok_and(|v| v == "1") {
        let text: String = got.iter().map(|v| format!("{v}\n")).collect();
        std::fs::write(&golden_path, text).unwrap();
    }
    let golden: Vec<serde_json::Value> = std::fs::read_to_string(&golden_path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), golden.len(), "cycles");
    for (g, want) in got.iter().zip(&golden) {
        assert_eq!(g, want, "cycle {}", want["cycle"]);
    }
    // What the trace is about: the receiver pinned to the receive CPU once it streams.
    let pins = golden
        .iter()
        .filter(|v| {
            v["plan"]["actions"].as_array().is_some_and(|a| {
                a.iter().any(|x| {
                    x["action"]["kind"] == "pin_process"
                        && x["action"]["cpus"] == serde_json::json!([1])
                })
            })
        })
        .count();
    assert!(pins >= 5, "{pins} cycles pin the receiver to CPU 1");
}

#[test]
fn another_config_changes_the_replayed_decision() {
    // The same trace with net-affinity's intensity threshold above the stream's rate: no pin.
    let got = plans_of(
        "net-affinity-pin.record.gz",
        Some("[net_affinity]\nintensive_bytes_per_s = 1000000000\ncpu_load_threshold = 1.0\n"),
    );
    assert!(got.len() >= 10, "{got:?}");
    assert!(
        got.iter().all(|v| v["plan"]["actions"]
            .as_array()
            .is_some_and(|a| a.is_empty())),
        "{got:?}"
    );
}
