//! The .deb (issue 18): `scripts/package.sh` builds it; it holds the binary, the unit, the
//! commented default config, man pages, completions and licences; extracted into a temporary
//! root, its config is accepted by its own binary and its unit passes `systemd-analyze
//! verify`. Needs cargo-deb and dpkg (scripts/test.sh installs cargo-deb); no root.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

use placer_testkit::TempDir;

fn ok(cmd: &mut Command) -> bool {
    cmd.output().is_ok_and(|o| o.status.success())
}

#[test]
fn deb_holds_everything_and_its_unit_verifies() {
    if !ok(Command::new("cargo").args(["deb", "--version"])) {
        placer_testkit::skip("cargo-deb not installed (cargo install cargo-deb)");
        return;
    }
    if !ok(Command::new("dpkg-deb").arg("--version")) {
        placer_testkit::skip("dpkg-deb not installed");
        return;
    }
    let out = Command::new("bash")
        .arg(repo().join("scripts/package.sh"))
        .arg("dev")
        .env("PLACER_SKIP_BUILD", "1")
        .output()
        .expect("package.sh");
    assert!(
        out.status.success(),
        "package.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Relative to the repository, or absolute with CARGO_TARGET_DIR (join keeps those).
    let deb = repo().join(String::from_utf8_lossy(&out.stdout).trim());
    let list = Command::new("dpkg-deb")
        .arg("-c")
        .arg(&deb)
        .output()
        .expect("dpkg-deb -c");
    let list = String::from_utf8_lossy(&list.stdout);
    for want in [
        "./usr/bin/placer",
        "./lib/systemd/system/placer.service",
        "./etc/placer/placer.toml",
        "./usr/share/man/man1/placer.1.gz",
        "./usr/share/man/man1/placer-daemon.1.gz",
        "./usr/share/bash-completion/completions/placer",
        "./usr/share/zsh/vendor-completions/_placer",
        "./usr/share/fish/vendor_completions.d/placer.fish",
        "./usr/share/doc/placer/LICENSE-MIT",
        "./usr/share/doc/placer/LICENSE-APACHE",
        "./usr/share/doc/placer/copyright",
    ] {
        assert!(list.contains(want), "{want} missing from the .deb:\n{list}");
    }

    let root = TempDir::new("deb");
    assert!(ok(Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(root.path())));
    // The shipped config is the commented default, and the shipped binary accepts it.
    let cfg = root.path().join("etc/placer/placer.toml");
    let text = std::fs::read_to_string(&cfg).expect("config");
    assert!(text.lines().filter(|l| l.starts_with('#')).count() > 20);
    let o = Command::new(root.path().join("usr/bin/placer"))
        .args([
            "daemon",
            "--once",
            "--dry-run",
            "--interval",
            "100ms",
            "--config",
        ])
        .arg(&cfg)
        .output()
        .expect("installed placer");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    if !ok(Command::new("systemd-analyze").arg("--version")) {
        placer_testkit::skip("systemd-analyze not available: the unit is not verified");
        return;
    }
    // verify resolves the unit's dependencies (sysinit.target, ...) inside --root: give it
    // the host's target units beside ours.
    let units = root.path().join("lib/systemd/system");
    for e in std::fs::read_dir("/lib/systemd/system")
        .expect("host units")
        .flatten()
    {
        let name = e.file_name();
        if name.to_string_lossy().ends_with(".target") {
            let _ = std::fs::copy(e.path(), units.join(name));
        }
    }
    let o = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(format!("--root={}", root.path().display()))
        .arg("/lib/systemd/system/placer.service")
        .output()
        .expect("systemd-analyze");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success() && said.trim().is_empty(), "unit: {said}");
}

#[test]
fn install_unit_writes_the_shipped_unit() {
    let root = TempDir::new("unit");
    let o = Command::new(env!("CARGO_BIN_EXE_placer"))
        .args(["install-unit", "--root"])
        .arg(root.path())
        .output()
        .expect("install-unit");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = std::fs::read_to_string(root.path().join("etc/systemd/system/placer.service"))
        .expect("unit written");
    let shipped = std::fs::read_to_string(repo().join("dist/placer.service")).expect("dist");
    assert_eq!(got, shipped);
    assert!(got.contains("RuntimeDirectory=placer") && got.contains("CapabilityBoundingSet="));
}

#[test]
fn man_pages_and_completions_come_from_the_cli() {
    let dir = TempDir::new("man");
    let o = Command::new(env!("CARGO_BIN_EXE_placer"))
        .arg("man")
        .arg(dir.path())
        .output()
        .expect("man");
    assert!(o.status.success());
    let page = std::fs::read_to_string(dir.path().join("placer-daemon.1")).expect("daemon page");
    assert!(page.contains("dry\\-run"), "{page}");
    for shell in ["bash", "zsh", "fish"] {
        let o = Command::new(env!("CARGO_BIN_EXE_placer"))
            .args(["completions", shell])
            .output()
            .expect("completions");
        assert!(o.status.success() && o.stdout.len() > 1000, "{shell}");
        assert!(String::from_utf8_lossy(&o.stdout).contains("print-default-config"));
    }
}
