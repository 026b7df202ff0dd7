//! The CPU collector's path chosen by cost (`placer_linux::sampler::paths`) on this
//! machine: detached under a storm of context switches, attached again after it, and what
//! the samples say of a known CPU burner right across both moves. A test binary of its
//! own: its storm and its sleeping processes would change what the sampler's other root
//! tests see (kept-open files, CPU shares) were they run beside them.

use placer_core::event_path::ChooserConfig;
use placer_core::sample::{SampleRequest, SourceKind};
use placer_core::Sample;
use placer_linux::sampler::Sampler;
use placer_testkit::proc::KillOnDrop;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

const STORM_CHILD_ENV: &str = "PLACER_TEST_STORM_CHILD";
/// The most a storm child lives, whatever happens to the test.
const STORM_MAX_S: u64 = 60;
/// Sleeping processes beside the test's.
const SLEEPERS: usize = 600;

/// Two children of this test binary bouncing a byte over two pipes (each byte two
/// context switches), killed and reaped when dropped; each also ends at its deadline or
/// when its pipe closes.
struct Storm(
    #[allow(dead_code)] KillOnDrop,
    #[allow(dead_code)] KillOnDrop,
);

fn storm() -> Storm {
    let child = |start: bool| {
        let mut c = std::process::Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "storm_child", "--ignored", "--test-threads=1"])
            .env(STORM_CHILD_ENV, if start { "start" } else { "echo" })
            .stderr(std::process::Stdio::null());
        placer_testkit::proc::die_with_parent(&mut c);
        c
    };
    let mut a = child(true);
    a.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut a = a.spawn().expect("storm child a");
    let (a_in, a_out) = (a.stdin.take().unwrap(), a.stdout.take().unwrap());
    let a = KillOnDrop(a);
    let mut b = child(false);
    b.stdin(a_out).stdout(a_in);
    let b = KillOnDrop(b.spawn().expect("storm child b"));
    Storm(a, b)
}

/// The child half of the storm: a byte read, the byte written back, until its pipe
/// closes or [`STORM_MAX_S`] pass. (The harness's own lines on stdout bounce too.)
#[test]
#[ignore = "the child half of real_collector_detaches_under_a_switch_storm_and_attaches_after_it"]
fn storm_child() {
    let Some(role) = std::env::var_os(STORM_CHILD_ENV) else {
        return;
    };
    let (mut inp, mut out) = (std::io::stdin().lock(), std::io::stdout().lock());
    if role == "start" {
        let _ = out.write_all(b"x");
        let _ = out.flush();
    }
    let t0 = Instant::now();
    let mut b = [0u8; 1];
    while t0.elapsed() < Duration::from_secs(STORM_MAX_S) {
        match inp.read(&mut b) {
            Ok(1) => {}
            _ => return,
        }
        if out.write_all(&b).and_then(|()| out.flush()).is_err() {
            return;
        }
    }
}

/// The spinner's CPU ticks in a sample.
fn ticks_of(x: &Sample, pid: u32) -> Option<u64> {
    let p = x.procs.iter().find(|p| p.pid == pid)?;
    Some(p.utime_ticks + p.stime_ticks)
}

/// The incremental sampler's figure for the spinner against a fresh full read taken just
/// after: within what the spinner runs between the two reads (it spins all along) and a
/// tick of rounding.
fn check_against_a_full_read(s: &mut Sampler, req: SampleRequest, pid: u32, when: &str) {
    let inc = s.sample(req).unwrap();
    let mut fresh = Sampler::new(Path::new("/"));
    fresh.set_kernel_events(false);
    let full = fresh.sample(req).unwrap();
    let (a, b) = (ticks_of(&inc, pid), ticks_of(&full, pid));
    let (Some(a), Some(b)) = (a, b) else {
        panic!("{when}: the spinner {pid} missing: incremental {a:?}, full {b:?}");
    };
    // 100 ticks a second: the fresh sampler's whole read of /proc takes well under 0.2 s.
    assert!(
        b >= a && b - a <= 20,
        "{when}: incremental {a} ticks, a full read just after {b} ({:?})",
        s.last_stats
    );
    // Its thread's time by the collector, where the sample has it, against the kernel's
    // read after it: behind by what it ran since (the full read) and the collector's
    // bound ([`placer_linux::bpf::TICK_MIN_NS`] and a tick); ahead by the interrupts its CPU
    // served while it ran (the collector charges wall time on the CPU, schedstat leaves
    // interrupt time out), 1%, and by what it ran between a drain and the read of its
    // files on each sample whose drain was not trusted (the probe's, an attach's): its
    // time starts again from its ticks read then, and the next drain holds that gap too
    // (one sample's reading of ~700 processes, tens of ms in this debug build; up to
    // three such samples here).
    let p = inc.procs.iter().find(|p| p.pid == pid).unwrap();
    if let Some(ns) = p.threads.first().and_then(|t| t.cpu_ns) {
        let truth = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
            .ok()
            .and_then(|t| placer_linux::procfs::parse_schedstat(&t))
            .map(|s| s.run_ns)
            .expect("the spinner's schedstat");
        assert!(
            ns <= truth + truth / 100 + 150_000_000 && truth.saturating_sub(ns) <= 150_000_000,
            "{when}: collector {ns} ns, schedstat {truth} ns"
        );
    }
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn real_collector_detaches_under_a_switch_storm_and_attaches_after_it() {
    placer_testkit::require_root();
    let mut s = Sampler::new(Path::new("/"));
    let src = s.sources();
    if !src.has(SourceKind::Ebpf) || !src.has(SourceKind::ProcEvents) {
        placer_testkit::skip(&format!(
            "kernel event sources: {:?} / {:?}",
            src.why_missing(SourceKind::Ebpf),
            src.why_missing(SourceKind::ProcEvents)
        ));
        return;
    }
    if placer_linux::bpf::RunTimeStats::enable().is_err() {
        placer_testkit::skip("no BPF run-time statistics (Linux 5.8) to measure the collector by");
        return;
    }
    // A short hysteresis, so that the test runs in seconds; the daemon's is longer.
    s.set_event_path_choice(Some(ChooserConfig {
        factor: 1.5,
        streak: 2,
        hold: 2,
    }));
    let req = SampleRequest {
        threads: true,
        ..Default::default()
    };
    // A machine with some processes, most of them asleep (as a server's): a full read
    // costs what it reads, the events path what ran.
    let _sleepers: Vec<KillOnDrop> = (0..SLEEPERS)
        .map(|_| {
            let mut c = std::process::Command::new("sleep");
            c.arg("120");
            placer_testkit::proc::die_with_parent(&mut c);
            KillOnDrop(c.spawn().expect("sleep"))
        })
        .collect();
    let spin = placer_testkit::proc::spinner();
    let pid = spin.0.id();
    s.sample(req).unwrap();
    assert_eq!(s.cpu_collector_attached(), Some(true));
    // The storm: sampled every 3 s, reading every process costs a few ms per second
    // here (a debug build, on a shared VM), and the collector's programs at every switch
    // of the storm (tens of thousands a second) tens of ms.
    let storm = storm();
    let t0 = Instant::now();
    while s.cpu_collector_attached() == Some(true) {
        assert!(
            t0.elapsed() < Duration::from_secs(45),
            "still attached after 45 s of the storm: {:?}",
            s.cpu_path()
        );
        std::thread::sleep(Duration::from_millis(3000));
        check_against_a_full_read(&mut s, req, pid, "storm");
    }
    eprintln!("detached after {:?}: {:?}", t0.elapsed(), s.cpu_path());
    // Still a working source, and its line says why it is not attached.
    let detached = s.sources();
    assert!(
        detached
            .sources
            .iter()
            .any(|x| x.name == SourceKind::Ebpf && x.available && x.detail.contains("detached")),
        "{detached:?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    check_against_a_full_read(&mut s, req, pid, "detached");
    drop(storm);
    // After the storm: at a quiet machine's switches the programs cost next to nothing,
    // and a sample on the events path less than one that reads every process.
    let t1 = Instant::now();
    while s.cpu_collector_attached() == Some(false) {
        assert!(
            t1.elapsed() < Duration::from_secs(25),
            "still detached 25 s after the storm: {:?}",
            s.cpu_path()
        );
        // Long enough apart that a sample trusting the drain of a collector attached at
        // its start (the instants since) would show the spinner 40 ticks behind.
        std::thread::sleep(Duration::from_millis(400));
        check_against_a_full_read(&mut s, req, pid, "after the storm");
    }
    eprintln!("attached after {:?}: {:?}", t1.elapsed(), s.cpu_path());
    std::thread::sleep(Duration::from_millis(500));
    check_against_a_full_read(&mut s, req, pid, "attached, drain trusted");
    assert!(s.last_stats.procs_skipped > 0, "{:?}", s.last_stats);
    drop(spin);
}
