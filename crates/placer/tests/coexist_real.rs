//! Next to a real irqbalance (issue 30, item 3): with Debian's irqbalance running, `placer
//! explain` and `placer top` say that it runs and that net-affinity follows the IRQs it
//! moves. irqbalance runs with a policy script that bans every IRQ, so it moves none of
//! this machine's IRQs (other tests' receive CPUs stay where they are).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Stops irqbalance however the test ends.
struct Irqbalance(Child);

impl Drop for Irqbalance {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn placer(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_placer"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("placer");
    assert!(
        o.status.success(),
        "placer {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The pid of a live (not zombie) irqbalance, if one runs.
fn running_irqbalance() -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains("(irqbalance) ") && !s.contains(") Z "))
        })
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn explain_and_top_say_irqbalance_runs_and_net_affinity_follows_it() {
    placer_testkit::require_root();
    if let Some(why) = placer_testkit::missing_tool(&["irqbalance"]) {
        placer_testkit::skip(&format!("{why} (Debian package irqbalance)"));
        return;
    }
    let dir = placer_testkit::TempDir::new("coexist-irqbalance");
    // One already running (a host's service) is the agent to find; else start one.
    let running = running_irqbalance();
    let ours = match running {
        Some(_) => None,
        None => {
            let script = dir.path().join("ban-all.sh");
            std::fs::write(&script, "#!/bin/sh\necho ban=true\n").expect("script");
            std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .expect("chmod");
            let child = Command::new("irqbalance")
                .arg("--foreground")
                .arg(format!("--policyscript={}", script.display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("irqbalance starts");
            Some(Irqbalance(child))
        }
    };
    let pid = running.or(ours.as_ref().map(|c| c.0.id())).expect("a pid");
    let state = dir.path().join("state");
    let state = state.to_str().expect("utf-8");
    // The built-in config (net-affinity) with a state dir of its own: no daemon runs there.
    let cfg = dir.path().join("placer.toml");
    std::fs::write(&cfg, format!("state_dir = {state:?}\n")).expect("config");
    let cfg = cfg.to_str().expect("utf-8");
    let want = format!("irqbalance (pid {pid}) moves IRQs: net-affinity follows a moved IRQ");
    let me = std::process::id().to_string();
    let explained = placer(&["explain", &me, "--config", cfg, "--interval", "200ms"]);
    assert!(
        explained.contains(&format!("next to another agent: {want}")),
        "{explained}"
    );
    let top = placer(&["top", "--once", "--interval", "200ms", "--config", cfg]);
    assert!(top.contains(&want), "{top}");
    let json: serde_json::Value = serde_json::from_str(&placer(&[
        "top",
        "--json",
        "--interval",
        "200ms",
        "--config",
        cfg,
    ]))
    .expect("top --json is JSON");
    let lines = json["coexistence"].as_array().expect("coexistence listed");
    assert!(
        lines
            .iter()
            .any(|l| l.as_str().is_some_and(|l| l.starts_with(&want))),
        "{lines:?}"
    );
    // Gone: nothing said any more (only when this test started it).
    if let Some(ib) = ours {
        drop(ib);
        let top = placer(&["top", "--once", "--interval", "200ms", "--config", cfg]);
        assert!(!top.contains("irqbalance"), "{top}");
    }
}
