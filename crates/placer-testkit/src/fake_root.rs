//! [`FakeRoot`]: a temporary directory standing for `/` (the root every placer reader and
//! knob takes), with what tests write into it: a pid's `/proc` files, a sysfs node, any
//! file, a link, or a fixture tarball unpacked. Removed on drop, even when the test fails.
//! The one temporary tree of the tests; [`crate::TempDir`] is the plain directory under it.

use crate::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

pub struct FakeRoot {
    dir: TempDir,
}

impl FakeRoot {
    /// An empty root under the system temp dir, named after `tag`.
    pub fn new(tag: &str) -> FakeRoot {
        FakeRoot {
            dir: TempDir::new(tag),
        }
    }

    /// The root's path (what `--root` or a reader's `root` argument takes).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `rel` under the root.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path().join(rel)
    }

    /// Writes `text` to `rel` under the root, creating its directories; returns its path.
    pub fn write(&self, rel: impl AsRef<Path>, text: &str) -> PathBuf {
        let p = self.join(rel);
        std::fs::create_dir_all(p.parent().expect("a file has a parent"))
            .unwrap_or_else(|e| panic!("creating the directory of {}: {e}", p.display()));
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
        p
    }

    /// Writes a sysfs node: `sys/REL` (`devices/system/cpu/cpufreq/policy0/scaling_max_freq`)
    /// holding `value` and a newline, as the kernel prints it.
    pub fn sys(&self, rel: &str, value: &str) -> PathBuf {
        self.write(format!("sys/{rel}"), &format!("{value}\n"))
    }

    /// Writes `/proc/PID/NAME` for each `(NAME, text)` (`stat`, `status`, `task/TID/stat`).
    pub fn proc_pid(&self, pid: u32, files: &[(&str, &str)]) -> PathBuf {
        for (name, text) in files {
            self.write(format!("proc/{pid}/{name}"), text);
        }
        self.join(format!("proc/{pid}"))
    }

    /// The text of `rel` under the root, without its trailing whitespace.
    pub fn read(&self, rel: impl AsRef<Path>) -> String {
        let p = self.join(rel);
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
            .trim_end()
            .to_string()
    }

    /// Removes `rel` (a file or a whole directory).
    pub fn remove(&self, rel: impl AsRef<Path>) {
        let p = self.join(rel);
        let r = if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        r.unwrap_or_else(|e| panic!("removing {}: {e}", p.display()));
    }

    /// A symbolic link `rel` -> `target` (as sysfs's class links).
    pub fn symlink(&self, rel: impl AsRef<Path>, target: impl AsRef<Path>) {
        let p = self.join(rel);
        std::fs::create_dir_all(p.parent().expect("a link has a parent")).expect("mkdir");
        std::os::unix::fs::symlink(target, &p)
            .unwrap_or_else(|e| panic!("linking {}: {e}", p.display()));
    }

    /// Unpacks `tarball` (`.tar.gz` or `.tar.bz2`, with the `tar` command) into the root;
    /// returns the one top-level directory it holds (a snapshot's own root).
    pub fn unpack(&self, tarball: &Path) -> PathBuf {
        let mut child = self.start_unpack(tarball);
        let st = child.wait().expect("waiting for tar");
        assert!(st.success(), "tar failed on {}", tarball.display());
        self.top_dir(tarball)
    }

    /// Several tarballs, each into a root of its own, by concurrent `tar` processes (the
    /// fixture tests' main cost is creating the snapshots' files): (root, its top dir).
    pub fn unpack_each(tag: &str, tarballs: &[PathBuf]) -> Vec<(FakeRoot, PathBuf)> {
        let jobs: Vec<(FakeRoot, Child)> = tarballs
            .iter()
            .map(|t| {
                let name = t.file_name().unwrap_or_default().to_string_lossy();
                let root = FakeRoot::new(&format!("{tag}-{name}"));
                let child = root.start_unpack(t);
                (root, child)
            })
            .collect();
        jobs.into_iter()
            .zip(tarballs)
            .map(|((root, mut child), tarball)| {
                let st = child.wait().expect("waiting for tar");
                assert!(st.success(), "tar failed on {}", tarball.display());
                let top = root.top_dir(tarball);
                (root, top)
            })
            .collect()
    }

    fn start_unpack(&self, tarball: &Path) -> Child {
        let flag = if tarball.to_string_lossy().ends_with(".bz2") {
            "-xjf"
        } else {
            "-xzf"
        };
        Command::new("tar")
            .arg("--no-same-owner")
            .arg(flag)
            .arg(tarball)
            .arg("-C")
            .arg(self.path())
            .spawn()
            .expect("running tar")
    }

    /// The top-level directory `tarball` created: its file name without the extension, or
    /// the root's only directory.
    fn top_dir(&self, tarball: &Path) -> PathBuf {
        let name = tarball.file_name().unwrap_or_default().to_string_lossy();
        let stem = name.split(".tar").next().unwrap_or_default();
        let named = self.join(stem);
        if !stem.is_empty() && named.is_dir() {
            return named;
        }
        let tops: Vec<PathBuf> = std::fs::read_dir(self.path())
            .expect("reading the root")
            .map(|e| e.expect("an entry").path())
            .filter(|p| p.is_dir())
            .collect();
        assert_eq!(tops.len(), 1, "{}: expected one top dir", tarball.display());
        tops[0].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_proc_and_sysfs_files_and_cleans_up() {
        let root = FakeRoot::new("fake-root");
        let p = root.proc_pid(
            42,
            &[("stat", "42 (x) S 1\n"), ("task/43/stat", "43 (x) S")],
        );
        assert_eq!(p, root.join("proc/42"));
        assert_eq!(root.read("proc/42/task/43/stat"), "43 (x) S");
        root.sys("class/net/eth0/mtu", "1500");
        assert_eq!(
            std::fs::read_to_string(root.join("sys/class/net/eth0/mtu")).unwrap(),
            "1500\n"
        );
        root.symlink("sys/class/net/lo", "../../devices/virtual/net/lo");
        assert!(root.join("sys/class/net/lo").is_symlink());
        root.remove("proc/42");
        assert!(!root.join("proc/42").exists());
        let kept = root.path().to_path_buf();
        drop(root);
        assert!(!kept.exists(), "the root is removed on drop");
    }

    #[test]
    fn unpacks_a_tarball_to_its_top_dir() {
        if let Some(why) = crate::missing_tool(&["tar"]) {
            crate::skip(&why);
            return;
        }
        let src = FakeRoot::new("fake-root-src");
        src.write("snap/proc/cpuinfo", "processor\t: 0\n");
        let tarball = src.join("snap.tar.gz");
        let ok = Command::new("tar")
            .arg("-czf")
            .arg(&tarball)
            .arg("-C")
            .arg(src.path())
            .arg("snap")
            .status()
            .expect("tar");
        assert!(ok.success());
        let root = FakeRoot::new("fake-root-unpack");
        let top = root.unpack(&tarball);
        assert_eq!(top, root.join("snap"));
        assert_eq!(root.read("snap/proc/cpuinfo"), "processor\t: 0");
        let each = FakeRoot::unpack_each("fake-root-each", &[tarball.clone(), tarball]);
        assert_eq!(each.len(), 2);
        assert!(each.iter().all(|(r, top)| top == &r.join("snap")));
        assert_ne!(each[0].0.path(), each[1].0.path());
    }
}
