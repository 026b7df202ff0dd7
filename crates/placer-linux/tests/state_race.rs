//! Issue 36: a state dir whose parent belongs to someone else can be exchanged
//! (renameat2 RENAME_EXCHANGE) between placer's check and its use. Here an attacker thread
//! swaps the real state dir with one holding a planted journal while `restore` runs 500
//! times: the planted journal names an RPS file outside /sys (`..` in the device name) and
//! the affinity of a live process. Nothing may be written, nobody pinned.
//!
//! Uses only the API that existed before the fix (Journal::open, actuator::restore_all), so
//! it can be run against older code to see it fail.

use placer_linux::actuator::{restore_all, Handlers};
use placer_linux::journal::Journal;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let (a, b) = (
        CString::new(a.as_os_str().as_bytes()).expect("path"),
        CString::new(b.as_os_str().as_bytes()).expect("path"),
    );
    // SAFETY: two valid C strings.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn affinity_of(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim()
        .to_string()
}

fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect(")") + 2..];
    after
        .split_whitespace()
        .nth(19)
        .expect("field 22")
        .parse()
        .expect("number")
}

/// Kills and reaps the victim process even when the test fails.
struct Victim(std::process::Child);
impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[cfg_attr(
    not(placer_root),
    ignore = "needs root: chown, affinity of another process"
)]
fn rename_exchange_race_writes_nothing_and_pins_nobody() {
    placer_testkit::require_root();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let base = placer_testkit::TempDir::new("state-race");
    let parent = base.path().join("p");
    let (state, evil) = (parent.join("state"), parent.join("evil"));
    for d in [&state, &evil] {
        std::fs::create_dir_all(d).expect("mkdir");
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod");
    }
    // The attacker owns the parent (and its own directory), not the state dir.
    std::os::unix::fs::chown(&parent, Some(NOBODY), Some(NOBODY)).expect("chown");
    std::os::unix::fs::chown(&evil, Some(NOBODY), Some(NOBODY)).expect("chown");
    std::fs::write(evil.join("EVIL"), "").expect("marker");

    // The file a `..` device name reaches from /sys/class/net.
    let queue = base.path().join("victim/queues/rx-0");
    std::fs::create_dir_all(&queue).expect("victim dir");
    let victim_file = queue.join("rps_cpus");
    std::fs::write(&victim_file, "1\n").expect("victim file");
    let dev = format!("../../..{}/victim", base.path().display());

    let mut cmd = std::process::Command::new("sleep");
    cmd.arg("120");
    let victim = Victim(
        placer_testkit::proc::die_with_parent(&mut cmd)
            .spawn()
            .expect("sleep"),
    );
    let pid = victim.0.id();
    let mask = affinity_of(pid);
    let other = if cpus > 1 { "1" } else { "0" };
    let planted = format!(
        r#"{{"version":1,"entries":[
            {{"knob":"rps","dev":{dev:?},"queue":"rx-0","previous":"owned by the attacker","applied":"1"}},
            {{"knob":"proc_affinity","pid":{pid},"start_time_ticks":{},"previous":"{other}","applied":"{mask}"}}
        ]}}"#,
        start_time(pid)
    );

    // The attacker swaps the two directories back and forth; the lock lets the test put
    // the planted journal back between rounds with the names in place.
    let lock = Arc::new(Mutex::new(()));
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = {
        let (lock, stop, state, evil) = (lock.clone(), stop.clone(), state.clone(), evil.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let _g = lock.lock().expect("lock");
                if exchange(&state, &evil).is_ok() {
                    let _ = exchange(&state, &evil);
                    swaps += 1;
                }
            }
            swaps
        })
    };

    let (mut writes, mut pins, mut refused) = (0usize, 0usize, 0usize);
    let rounds = 500;
    let deadline = Instant::now() + Duration::from_secs(240);
    for _ in 0..rounds {
        assert!(Instant::now() < deadline, "the race test ran over 240 s");
        {
            let _g = lock.lock().expect("lock");
            assert!(evil.join("EVIL").exists(), "names out of place");
            std::fs::write(evil.join("journal.json"), &planted).expect("plant");
            let _ = std::fs::remove_file(state.join("journal.json"));
        }
        match Journal::open(&state) {
            Ok(mut j) => {
                let _ = restore_all(Path::new("/"), &mut j, &mut Handlers::builtin());
            }
            Err(_) => refused += 1,
        }
        if std::fs::read_to_string(&victim_file).expect("victim") != "1\n" {
            writes += 1;
            std::fs::write(&victim_file, "1\n").expect("reset");
        }
        if affinity_of(pid) != mask {
            pins += 1;
            let all = placer_core::CpuSet::parse_list(&mask).expect("mask");
            placer_linux::sys::set_affinity(pid, &all).expect("reset affinity");
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = attacker.join().expect("attacker");
    eprintln!(
        "{rounds} rounds, {swaps} swap pairs, {refused} refused, {writes} writes, {pins} pins"
    );
    assert!(swaps > 0, "the attacker never swapped");
    assert_eq!(writes, 0, "files written outside the state dir");
    assert_eq!(pins, 0, "processes pinned from a planted journal");
}
