//! Facts about processes read from /proc, without unsafe code.

/// The effective uid of this process (the second field of `Uid:` in /proc/self/status).
pub fn effective_uid() -> Option<u32> {
    status_field(std::process::id(), "Uid:")?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// One field of /proc/PID/status, trimmed, without its name.
pub fn status_field(pid: u32, field: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field).map(|v| v.trim().to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_own_uid() {
        assert!(super::effective_uid().is_some());
    }
}

/// Makes `cmd`'s child receive SIGKILL when the test thread that spawned it dies, so an
/// interrupted or crashed test run leaves no daemon, burner or sender behind.
pub fn die_with_parent(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Starts `cmd`'s child at `nice` (a negative value needs root): set before its exec, so
/// every thread it creates inherits it.
pub fn with_nice(cmd: &mut std::process::Command, nice: i32) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: setpriority(2) is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpriority(libc::PRIO_PROCESS, 0, nice) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod nice_tests {
    #[test]
    fn a_child_starts_at_its_nice_value() {
        // A positive value needs no privilege; field 19 of stat is the nice value.
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "cut -d' ' -f19 /proc/self/stat"]);
        let out = super::with_nice(&mut cmd, 7).output().expect("sh");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7");
    }
}

#[cfg(test)]
mod death_tests {
    #[test]
    fn child_dies_with_the_thread_that_spawned_it() {
        // The parent-death signal fires when the spawning thread exits: spawn from a thread
        // that ends at once; a sleep not so marked would live for 30 s.
        let pid = std::thread::spawn(|| {
            let mut cmd = std::process::Command::new("sleep");
            cmd.arg("30");
            let child = super::die_with_parent(&mut cmd).spawn().expect("sleep");
            let pid = child.id();
            std::mem::forget(child);
            pid
        })
        .join()
        .expect("spawner");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            // Killed, it stays a zombie (we are its parent process and never wait for it).
            let state = super::status_field(pid, "State:").unwrap_or_default();
            if state.is_empty() || state.starts_with('Z') {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "child {pid} outlived its parent thread"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// A child process killed and reaped when the guard drops, however the test ends.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child that sleeps (30 s at most) until the guard drops.
pub fn sleeper() -> KillOnDrop {
    KillOnDrop(
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep"),
    )
}

/// A child shell spinning on a CPU (a builtin loop: all its time is its own) until the
/// guard drops.
pub fn spinner() -> KillOnDrop {
    KillOnDrop(
        std::process::Command::new("sh")
            .arg("-c")
            .arg("while :; do :; done")
            .spawn()
            .expect("sh"),
    )
}

/// Spins for `ms` of wall time in a child that then exits and is reaped; its pid.
pub fn short_lived_spinner(ms: u64) -> u32 {
    let s = spinner();
    std::thread::sleep(std::time::Duration::from_millis(ms));
    s.0.id()
}
