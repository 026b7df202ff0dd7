//! placer-testkit: what placer's tests (and its benchmarks, which are tests run by hand) share.
//!
//! # The root-test convention
//! A test that needs root is marked
//! `#[cfg_attr(not(placer_root), ignore = "needs root")]` and starts with [`require_root`].
//! The crate's build script calls [`build::emit_root_cfg`], which sets `placer_root` when the
//! build runs as root. So:
//! 1. without root, such a test is *ignored*: `cargo test` lists it as ignored and the test
//!    script counts it as skipped, never as passed;
//! 2. with `PLACER_REQUIRE_ROOT=1` (set by CI) a build without root fails, so CI cannot pass by
//!    skipping;
//! 3. a root test that finds a tool or kernel feature missing calls [`skip`], which prints a
//!    visible `SKIPPED:` line, and is a failure under `PLACER_REQUIRE_ROOT=1`.

pub mod cgroup;
pub mod fake_root;
pub mod lab;
pub mod proc;

pub use fake_root::FakeRoot;

/// A small deterministic generator (xorshift64*): the same faults, resamples and orders on
/// every run of a test that draws from it.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// The environment variable that turns every skip into a failure.
pub const REQUIRE_ROOT_ENV: &str = "PLACER_REQUIRE_ROOT";

/// Whether skips are failures (`PLACER_REQUIRE_ROOT=1`).
pub fn skips_are_failures() -> bool {
    std::env::var(REQUIRE_ROOT_ENV).is_ok_and(|v| v == "1")
}

/// Whether this process runs with effective uid 0 (read from /proc: no unsafe needed).
pub fn is_root() -> bool {
    proc::effective_uid() == Some(0)
}

/// First line of every root test: such tests are ignored when built without root, so getting
/// here without root means the build ran as root and the test as someone else.
#[track_caller]
pub fn require_root() {
    assert!(
        is_root(),
        "this test needs root: it was built as root (cfg placer_root) but runs as another user"
    );
}

/// A root test cannot run here for `reason` (a missing tool or kernel feature): prints a
/// visible line, or fails under `PLACER_REQUIRE_ROOT=1`. The caller returns after it.
#[track_caller]
pub fn skip(reason: &str) {
    assert!(
        !skips_are_failures(),
        "{REQUIRE_ROOT_ENV}=1 and this test would skip: {reason}"
    );
    eprintln!("SKIPPED: {reason}");
}

/// The first of `tools` not found on PATH, as a reason for [`skip`].
pub fn missing_tool(tools: &[&str]) -> Option<String> {
    tools.iter().find_map(|t| {
        let found = std::process::Command::new(t)
            .arg("-V")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok();
        (!found).then(|| format!("`{t}` not found"))
    })
}

/// For build scripts (`[build-dependencies] placer-testkit`).
pub mod build {
    /// Sets cfg `placer_root` when building as root; fails the build when
    /// `PLACER_REQUIRE_ROOT=1` and not root.
    pub fn emit_root_cfg() {
        println!("cargo::rustc-check-cfg=cfg(placer_root)");
        println!("cargo::rerun-if-env-changed={}", super::REQUIRE_ROOT_ENV);
        // Builds by another user must not reuse this decision: cargo reruns the script when
        // these change.
        println!("cargo::rerun-if-env-changed=USER");
        println!("cargo::rerun-if-env-changed=SUDO_USER");
        if super::is_root() {
            println!("cargo::rustc-cfg=placer_root");
        } else if super::skips_are_failures() {
            panic!(
                "{}=1 but the tests are built without root: root tests would be skipped",
                super::REQUIRE_ROOT_ENV
            );
        }
    }
}

/// (major, minor) of `containerd --version`'s output (`containerd github.com/containerd/
/// containerd 1.7.24 <commit>`, or with a distribution's `v` prefix or `~ds1` suffix).
pub fn containerd_version(text: &str) -> Option<(u32, u32)> {
    text.split_whitespace().find_map(|w| {
        let w = w.trim_start_matches('v');
        let mut it = w.split(['.', '~', '-', '+']);
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        Some((major, minor))
    })
}

/// A directory under the system temp dir, named `placer-test-TAG-PID-N`, removed on drop
/// (even when the test fails); the reaper (scripts/reap-tests.sh) removes those of dead
/// test processes.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("placer-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("creating a temporary directory");
        TempDir(p)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A small tmpfs (`size` as mount takes it, e.g. `64k`; mode 0700) mounted on a fresh
/// temporary directory, unmounted before the directory is removed on drop: a filesystem a
/// test can fill (ENOSPC). `None` where it cannot be mounted (without root).
pub struct SmallTmpfs {
    mnt: std::path::PathBuf,
    // Dropped after `drop` has unmounted `mnt`.
    _dir: TempDir,
}

impl SmallTmpfs {
    pub fn mount(tag: &str, size: &str) -> Option<SmallTmpfs> {
        let dir = TempDir::new(tag);
        let mnt = dir.path().join("fs");
        std::fs::create_dir(&mnt).ok()?;
        std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},mode=0700"))
            .arg(format!("placer-test-{tag}"))
            .arg(&mnt)
            .status()
            .is_ok_and(|s| s.success())
            .then_some(SmallTmpfs { mnt, _dir: dir })
    }

    pub fn path(&self) -> &std::path::Path {
        &self.mnt
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.mnt).status();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn missing_tool_names_it() {
        assert_eq!(
            super::missing_tool(&["placer-no-such-tool-xyz"]).as_deref(),
            Some("`placer-no-such-tool-xyz` not found")
        );
    }
}

#[cfg(test)]
mod version_tests {
    #[test]
    fn containerd_versions_are_read_from_their_banners() {
        use super::containerd_version as v;
        assert_eq!(
            v("containerd github.com/containerd/containerd 1.7.24 61f9fd88"),
            Some((1, 7))
        );
        assert_eq!(v("containerd containerd.io v2.0.0 207ad711"), Some((2, 0)));
        assert_eq!(
            v("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1"),
            Some((1, 6))
        );
        assert_eq!(v("no version here"), None);
    }
}
