//! `placer power calibrate` on a machine without cpufreq or power sensors explains why and
//! exits non-zero (no table produced).

use std::process::Command;

#[test]
fn calibrate_without_hardware_explains_and_fails() {
    let root = std::env::temp_dir().join(format!("placer-calib-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_placer"))
        .args(["power", "calibrate", "--root"])
        .arg(&root)
        .output()
        .expect("run placer");
    let _ = std::fs::remove_dir_all(&root);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot calibrate"), "{err}");
    assert!(err.contains("no cpufreq"), "{err}");
    assert!(err.contains("no power sensor"), "{err}");
    assert!(err.contains("model"), "{err}");
    assert!(out.stdout.is_empty());
}
