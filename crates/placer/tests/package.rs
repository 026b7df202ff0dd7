//! The .deb (issue 18): `scripts/package.sh` builds it; it holds the binary, the unit, the
//! commented default config, man pages, completions and licences; extracted into a temporary
//! root, its config is accepted by its own binary and its unit passes `systemd-analyze
//! verify`; it carries md5sums, and a placer-dbgsym .ddeb holds the stripped binary's debug
//! information under its build id. Needs cargo-deb and dpkg (scripts/test.sh installs
//! cargo-deb); no root.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

use placer_testkit::TempDir;

/// Every regular file under `root`, relative to it, sorted.
fn regular_files(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let t = e.file_type().expect("file type");
            if t.is_dir() {
                dirs.push(e.path());
            } else if t.is_file() {
                let rel = e
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel);
            }
        }
    }
    out
}

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
        "./usr/lib/systemd/system/placer.service",
        "./etc/placer/placer.toml",
        "./usr/share/man/man1/placer.1.gz",
        "./usr/share/man/man1/placer-daemon.1.gz",
        "./usr/share/man/man5/placer.toml.5.gz",
        "./usr/share/bash-completion/completions/placer",
        "./usr/share/zsh/vendor-completions/_placer",
        "./usr/share/fish/vendor_completions.d/placer.fish",
        "./usr/share/doc/placer/copyright",
        "./usr/share/doc/placer/changelog.Debian.gz",
        "./usr/share/doc/placer/README.md",
        "./usr/share/doc/placer/docs/config.md",
        "./usr/share/doc/placer/docs/daemon.md",
    ] {
        assert!(list.contains(want), "{want} missing from the .deb:\n{list}");
    }
    // No placer-help(1): clap's help subcommand has no page.
    assert!(!list.contains("placer-help"), "{list}");

    // Maintainer scripts: daemon-reload after install and removal, stop before removal, and
    // the unit neither enabled nor started by the package.
    let ctl = TempDir::new("deb-control");
    assert!(ok(Command::new("dpkg-deb")
        .arg("-e")
        .arg(&deb)
        .arg(ctl.path())));
    let script = |name: &str| std::fs::read_to_string(ctl.path().join(name)).unwrap_or_default();
    assert!(
        script("postinst").contains("daemon-reload"),
        "{}",
        script("postinst")
    );
    assert!(
        script("postrm").contains("daemon-reload"),
        "{}",
        script("postrm")
    );
    let prerm = script("prerm");
    assert!(
        prerm.contains("stop placer.service") && prerm.contains("remove"),
        "{prerm}"
    );
    // Enabled again only where it was enabled before an upgrade; never started.
    let postinst = script("postinst");
    assert!(
        postinst.contains("was-enabled placer.service")
            && !postinst.contains("deb-systemd-invoke start"),
        "the package enables or starts the unit:\n{postinst}"
    );

    // The debug symbols' package beside it (cargo deb --dbgsym).
    let ddeb = PathBuf::from(
        deb.to_string_lossy()
            .replace("/placer_", "/placer-dbgsym_")
            .replace(".deb", ".ddeb"),
    );
    assert!(ddeb.exists(), "no {}", ddeb.display());

    // lintian: no errors (warnings are printed, not failed on), on both packages.
    if ok(Command::new("lintian").arg("--version")) {
        let o = Command::new("lintian")
            .args(["--fail-on", "error"])
            .arg(&deb)
            .arg(&ddeb)
            .output()
            .expect("lintian");
        let said = String::from_utf8_lossy(&o.stdout);
        eprintln!("lintian: {said}");
        assert!(
            o.status.success() && !said.lines().any(|l| l.starts_with("E:")),
            "lintian errors:\n{said}{}",
            String::from_utf8_lossy(&o.stderr)
        );
    } else {
        placer_testkit::skip("lintian not installed (apt-get install lintian)");
    }

    let root = TempDir::new("deb");
    assert!(ok(Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(root.path())));
    // The installed binary is stripped: no DWARF left in it.
    let bin = root.path().join("usr/bin/placer");
    let sections = Command::new("readelf")
        .arg("-S")
        .arg(&bin)
        .output()
        .expect("readelf (binutils)");
    let sections = String::from_utf8_lossy(&sections.stdout);
    assert!(sections.contains(".text"), "{sections}");
    // (.debug_gdb_scripts is loaded data, not debug information: it stays.)
    for unstripped in [".debug_info", ".debug_line", ".symtab"] {
        assert!(
            !sections.contains(unstripped),
            "unstripped binary ({unstripped}):\n{sections}"
        );
    }
    // md5sums (scripts/package.sh adds them): every regular file but the conffile, each
    // sum right.
    let sums = Command::new("dpkg-deb")
        .arg("-I")
        .arg(&deb)
        .arg("md5sums")
        .output()
        .expect("dpkg-deb -I md5sums");
    let sums = String::from_utf8_lossy(&sums.stdout).into_owned();
    let listed: BTreeSet<&str> = sums.lines().filter_map(|l| l.get(34..)).collect();
    let files = regular_files(root.path());
    let want: BTreeSet<&str> = files
        .iter()
        .map(String::as_str)
        .filter(|f| *f != "etc/placer/placer.toml")
        .collect();
    assert_eq!(listed, want, "md5sums:\n{sums}");
    std::fs::write(root.path().join("md5sums"), &sums).unwrap();
    let check = Command::new("md5sum")
        .args(["--check", "--quiet", "md5sums"])
        .current_dir(root.path())
        .output()
        .expect("md5sum");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    // The .ddeb holds the binary's debug information under its build id.
    let notes = Command::new("readelf")
        .arg("-n")
        .arg(&bin)
        .output()
        .expect("readelf -n");
    let notes = String::from_utf8_lossy(&notes.stdout);
    let id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build id:\n{notes}"))
        .to_string();
    let dbg = TempDir::new("ddeb");
    assert!(ok(Command::new("dpkg-deb")
        .arg("-x")
        .arg(&ddeb)
        .arg(dbg.path())));
    let debug_file = dbg.path().join(format!(
        "usr/lib/debug/.build-id/{}/{}.debug",
        &id[..2],
        &id[2..]
    ));
    let dsections = Command::new("readelf")
        .arg("-S")
        .arg(&debug_file)
        .output()
        .expect("readelf the .debug");
    let dsections = String::from_utf8_lossy(&dsections.stdout);
    assert!(
        dsections.contains(".debug_line"),
        "{}: {dsections}",
        debug_file.display()
    );
    // The shipped config sets nothing (defaults follow upgrades), and the shipped binary
    // accepts it.
    let cfg = root.path().join("etc/placer/placer.toml");
    let text = std::fs::read_to_string(&cfg).expect("config");
    assert!(text.lines().filter(|l| l.starts_with('#')).count() > 20);
    assert!(
        text.lines().all(|l| l.is_empty() || l.starts_with('#')),
        "a setting is not commented out:\n{text}"
    );
    assert!(text.contains("#interval = \"1s\""), "{text}");
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
    let units = root.path().join("usr/lib/systemd/system");
    for e in std::fs::read_dir("/lib/systemd/system")
        .expect("host units")
        .flatten()
    {
        let name = e.file_name();
        if name.to_string_lossy().ends_with(".target") {
            let _ = std::fs::copy(e.path(), units.join(name));
        }
    }
    // ExecReload's kill (procps, a dependency of the package).
    let kill = root.path().join("bin/kill");
    std::fs::create_dir_all(kill.parent().unwrap()).unwrap();
    std::fs::copy("/bin/kill", &kill).expect("the host's /bin/kill");
    let o = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(format!("--root={}", root.path().display()))
        .arg("/usr/lib/systemd/system/placer.service")
        .output()
        .expect("systemd-analyze");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success() && said.trim().is_empty(), "unit: {said}");
}

fn install_unit(root: &Path, exec: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_placer"))
        .args(["install-unit", "--root"])
        .arg(root)
        .args(["--exec", exec])
        .output()
        .expect("install-unit")
}

#[test]
fn install_unit_writes_the_shipped_unit_running_the_given_binary() {
    let root = TempDir::new("unit");
    let o = install_unit(root.path(), "/opt/placer/bin/placer");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = std::fs::read_to_string(root.path().join("etc/systemd/system/placer.service"))
        .expect("unit written");
    let shipped = std::fs::read_to_string(repo().join("dist/placer.service")).expect("dist");
    assert_eq!(
        got,
        shipped.replace(
            "ExecStart=/usr/bin/placer daemon",
            "ExecStart=/opt/placer/bin/placer daemon"
        )
    );
    assert!(got.contains("RuntimeDirectory=placer") && got.contains("CapabilityBoundingSet="));
    assert!(got.contains("ExecReload=/bin/kill -HUP $MAINPID"), "{got}");
}

/// `placer --version` names the commit it was built from: git's short hash of HEAD in a
/// checkout (build.rs reruns when HEAD moves), "unknown" where git cannot say.
#[test]
fn the_version_names_the_commit() {
    let o = Command::new(env!("CARGO_BIN_EXE_placer"))
        .arg("--version")
        .output()
        .expect("placer --version");
    let said = String::from_utf8_lossy(&o.stdout);
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let want = format!(
        "placer {} (commit {})",
        env!("CARGO_PKG_VERSION"),
        head.as_deref().unwrap_or("unknown")
    );
    assert_eq!(said.trim(), want);
}

#[test]
fn install_unit_refuses_a_binary_the_sandbox_hides() {
    let root = TempDir::new("unit-refused");
    for (exec, why) in [
        ("/root/.cargo/bin/placer", "ProtectHome=yes"),
        ("/home/me/.cargo/bin/placer", "ProtectHome=yes"),
        ("/tmp/placer", "PrivateTmp=yes"),
        ("/opt/my placer/placer", "split"),
        ("bin/placer", "absolute"),
    ] {
        let o = install_unit(root.path(), exec);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(why), "{exec}: {err}");
    }
    assert!(!root
        .path()
        .join("etc/systemd/system/placer.service")
        .exists());
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
    for name in ["placer.1", "placer-daemon.1"] {
        let page = std::fs::read_to_string(dir.path().join(name)).expect(name);
        for section in ["FILES", "SIGNALS", "EXIT STATUS", "ENVIRONMENT", "SEE ALSO"] {
            assert!(
                page.contains(&format!(".SH {section}")),
                "{name} lacks {section}"
            );
        }
        assert!(
            page.contains("SIGHUP") && page.contains("journal.json"),
            "{page}"
        );
    }
    // Every page: the sections of every page, and no page names a page that is not there.
    let written: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for name in written.iter().filter(|n| n.ends_with(".1")) {
        let page = std::fs::read_to_string(dir.path().join(name)).unwrap();
        for section in ["EXIT STATUS", "ENVIRONMENT", "SEE ALSO"] {
            assert!(
                page.contains(&format!(".SH {section}")),
                "{name} lacks {section}"
            );
        }
        for referred in page.match_indices("placer\\-").map(|(i, _)| &page[i..]) {
            // "placer\-daemon(1)" -> placer-daemon.1
            let Some(end) = referred.find("(1)") else {
                continue;
            };
            let target = referred[..end].replace("\\-", "-");
            if target
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
            {
                assert!(
                    written.contains(&format!("{target}.1")),
                    "{name} refers to {target}(1), which has no page"
                );
            }
        }
    }
    let cfg = std::fs::read_to_string(dir.path().join("placer.toml.5")).expect("placer.toml(5)");
    assert!(cfg.starts_with(".TH placer.toml 5"), "{cfg}");
    for field in [
        "interval",
        "idle_timeout",
        "min_domain_bandwidth_bytes_per_s",
    ] {
        assert!(
            cfg.contains(&format!("\\fB{field} = ")),
            "{field} missing:\n{cfg}"
        );
    }
    for shell in ["bash", "zsh", "fish"] {
        let o = Command::new(env!("CARGO_BIN_EXE_placer"))
            .args(["completions", shell])
            .output()
            .expect("completions");
        assert!(o.status.success() && o.stdout.len() > 1000, "{shell}");
        assert!(String::from_utf8_lossy(&o.stdout).contains("print-default-config"));
    }
}
