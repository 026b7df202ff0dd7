//! `placer daemon --nri` against NRI's own runtime side: builds and runs the Go test in
//! crates/placer-nri/conformance (the `adaptation` package containerd and CRI-O embed, at
//! the tag placer's api.proto comes from). Skipped, with the reason printed, when `go` is
//! absent or the Go modules cannot be downloaded (a failure under `PLACER_REQUIRE_ROOT=1`,
//! as CI runs: CI cannot pass by skipping it); a Go build or test failure is a failure.
//! Every step is bounded in time and killed on drop.

use placer_testkit::proc::KillOnDrop;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn go() -> Option<PathBuf> {
    if let Some(g) = std::env::var_os("GO") {
        return Some(PathBuf::from(g)).filter(|p| p.exists());
    }
    let std_path = Path::new("/usr/local/go/bin/go");
    if std_path.exists() {
        return Some(std_path.to_path_buf());
    }
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join("go"))
        .find(|p| p.exists())
}

/// Runs `cmd` for at most `limit`; (success, stdout + stderr).
fn run(cmd: &mut Command, limit: Duration) -> (bool, String) {
    let dir = placer_testkit::TempDir::new("nri-conf");
    let log = dir.path().join("out.log");
    let f = std::fs::File::create(&log).expect("log file");
    let child = placer_testkit::proc::die_with_parent(
        cmd.stdout(f.try_clone().expect("dup"))
            .stderr(f)
            .stdin(Stdio::null()),
    )
    .spawn()
    .expect("spawn go");
    let mut child = KillOnDrop(child);
    let t0 = Instant::now();
    let ok = loop {
        if let Some(st) = child.0.try_wait().expect("wait") {
            break st.success();
        }
        if t0.elapsed() > limit {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(child);
    let mut out = std::fs::read_to_string(&log).unwrap_or_default();
    if t0.elapsed() > limit {
        out.push_str(&format!("\n(killed after {limit:?})"));
    }
    (ok, out)
}

#[test]
fn nri_adaptation_drives_placer() {
    let Some(go) = go() else {
        // Visible, and a failure where skips are (CI: PLACER_REQUIRE_ROOT=1).
        placer_testkit::skip("nri_conformance: no `go` (set GO=/path/to/go or install Go)");
        return;
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../placer-nri/conformance");
    let base = |args: &[&str]| {
        let mut c = Command::new(&go);
        c.args(args)
            .current_dir(&dir)
            // No toolchain download; go.sum pins the modules.
            .env("GOTOOLCHAIN", "local")
            .env("GOFLAGS", "-mod=readonly");
        c
    };
    let (ok, out) = run(&mut base(&["mod", "download"]), Duration::from_secs(180));
    if !ok {
        placer_testkit::skip(&format!(
            "nri_conformance: the Go modules could not be downloaded:\n{out}"
        ));
        return;
    }
    let tmp = placer_testkit::TempDir::new("nri-conf-bin");
    let test_bin = tmp.path().join("conformance.test");
    // A cold build of the NRI modules on two loaded cores took over 240 s once (CI's first
    // run on a fresh machine has no build cache): the bound is for a hang, not a speed.
    let (ok, out) = run(
        &mut base(&["test", "-c", "-o", test_bin.to_str().expect("utf-8 path")]),
        Duration::from_secs(600),
    );
    if !ok {
        panic!("building the Go conformance test failed:\n{out}");
    }
    let (ok, out) = run(
        Command::new(&test_bin)
            .args(["-test.v", "-test.count=1", "-test.timeout=90s"])
            .current_dir(&dir)
            .env("PLACER_BIN", env!("CARGO_BIN_EXE_placer")),
        Duration::from_secs(120),
    );
    drop(tmp);
    println!("{out}");
    assert!(ok, "the NRI conformance test failed:\n{out}");
    assert!(out.contains("--- PASS: TestPlacerConformance"), "{out}");
}

/// The sample config of deploy/kubernetes/configmap.yaml is a valid placer config.
#[test]
fn the_daemonsets_sample_config_is_valid() {
    let yaml = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/configmap.yaml"),
    )
    .expect("configmap.yaml");
    let start = yaml.find("placer.toml: |").expect("placer.toml key") + "placer.toml: |".len();
    let toml: String = yaml[start..]
        .lines()
        .skip(1)
        .map_while(|l| {
            l.strip_prefix("    ")
                .or((l.trim().is_empty()).then_some(""))
        })
        .collect::<Vec<_>>()
        .join("\n");
    let (cfg, notes) = placer_core::config::Config::from_toml_with_notes(&toml)
        .unwrap_or_else(|e| panic!("{e}\n{toml}"));
    assert!(notes.is_empty(), "{notes:?}");
    cfg.validate().expect("valid");
    assert_eq!(
        cfg.kubernetes.exclude_namespaces,
        ["kube-system", "placer-system"]
    );
    assert!(cfg.metrics.enabled);
}
