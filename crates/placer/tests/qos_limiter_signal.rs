//! The bandwidth limiter is removed when placer gets SIGTERM: `placer bench qos --hold`
//! installs a limit (root HTB, ingress qdisc, IFB) on a veth in a namespace this test
//! created, and after SIGTERM the device has only the kernel's default qdisc again.
//! Needs root; skips otherwise.

use placer_linux::knobs::tc::{has_ingress, root_is_default, root_is_placers, show_qdiscs, TcCtx};
use placer_linux::testnet;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use placer_testkit::proc::KillOnDrop;

fn links(ns: &str) -> String {
    TcCtx::netns(ns)
        .run("ip", &["-o".to_string(), "link".into(), "show".into()])
        .unwrap_or_default()
}

fn check_signal_restores(sig: libc::c_int) {
    let pair = testnet::VethPair::new().expect("veth pair");
    let child =
        placer_testkit::proc::die_with_parent(&mut Command::new(env!("CARGO_BIN_EXE_placer")))
            .args([
                "bench",
                "qos",
                "--hold",
                "--netns",
                &pair.ns_a,
                "--dev",
                &pair.dev_a,
                "--rate-bytes-per-s",
                "1000000",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn placer");
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let ready = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("placer ready");
    assert!(ready.starts_with("ready"), "{ready}");
    let ctx = TcCtx::netns(&pair.ns_a);
    let q = show_qdiscs(&ctx, &pair.dev_a).unwrap();
    assert!(root_is_placers(&q) && has_ingress(&q), "{q:?}");
    assert!(links(&pair.ns_a).contains("plq"));

    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.0.id() as libc::pid_t, sig) };
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "placer did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    let q = show_qdiscs(&ctx, &pair.dev_a).unwrap();
    assert!(
        root_is_default(&q) && !has_ingress(&q),
        "left behind: {q:?}"
    );
    assert!(!links(&pair.ns_a).contains("plq"));
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn sigterm_removes_the_limit() {
    placer_testkit::require_root();
    if let Some(why) = testnet::unavailable_reason() {
        placer_testkit::skip(&why);
        return;
    }
    check_signal_restores(libc::SIGTERM);
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn sigint_removes_the_limit() {
    placer_testkit::require_root();
    if let Some(why) = testnet::unavailable_reason() {
        placer_testkit::skip(&why);
        return;
    }
    check_signal_restores(libc::SIGINT);
}
