//! A cgroup made for one test, in the hierarchy whose path `/proc/PID/cgroup` gives the
//! sampler (the unified one on cgroup v2, else v1's cpuset), removed when dropped.

use std::path::PathBuf;

/// A test's own cgroup under the hierarchy root; dropping it moves whatever is still in it
/// back to the root and removes it.
pub struct TestCgroup {
    root: PathBuf,
    pub dir: PathBuf,
    /// Its path as `/proc/PID/cgroup` shows it (`/name`).
    pub path: String,
}

impl TestCgroup {
    /// `None` when neither a v2 hierarchy nor v1's cpuset is mounted at /sys/fs/cgroup.
    pub fn create(name: &str) -> Option<TestCgroup> {
        let base = std::path::Path::new("/sys/fs/cgroup");
        let root = if base.join("cgroup.controllers").exists() {
            base.to_path_buf()
        } else if base.join("cpuset/cpuset.cpus").exists() {
            base.join("cpuset")
        } else {
            return None;
        };
        let dir = root.join(name);
        std::fs::create_dir(&dir).ok()?;
        let g = TestCgroup {
            path: format!("/{name}"),
            root,
            dir,
        };
        // A v1 cpuset takes no task before it has CPUs and memory nodes: its parent's.
        for f in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(v) = std::fs::read_to_string(g.root.join(f)) {
                if g.dir.join(f).exists() {
                    std::fs::write(g.dir.join(f), v.trim()).ok()?;
                }
            }
        }
        Some(g)
    }

    /// Moves a process (all its threads) into this cgroup.
    pub fn enter(&self, pid: u32) -> std::io::Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if let Ok(pids) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in pids.split_whitespace() {
                let _ = std::fs::write(self.root.join("cgroup.procs"), pid);
            }
        }
        // An exiting task may linger a moment; bounded.
        let t = std::time::Instant::now();
        while std::fs::remove_dir(&self.dir).is_err()
            && t.elapsed() < std::time::Duration::from_secs(2)
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
