//! The daemon's state directory (journal, lock, decisions) is trusted to hold what placer
//! wrote: a journal there makes placer write affinities and qdiscs as root. So it is opened
//! once, by handle, and checked on that handle, as the most careful daemons do:
//! 1. its path is walked component by component from `/` with `openat(O_NOFOLLOW)`: no
//!    component is a symbolic link, and no `..`;
//! 2. every ancestor is owned by root or by this user, and writable by group or others only
//!    when sticky (/tmp): no one else can rename or exchange (RENAME_EXCHANGE) a directory
//!    on the path, so what was checked is what is used;
//! 3. the directory itself is owned by this process's effective user, and neither group nor
//!    others may write it; placer creates it 0700 (`mkdirat` under a checked parent, so no
//!    side effect before the check) and tightens one it owns to 0700 (`fchmod`);
//! 4. every file in it is opened with `openat` relative to the handle, without following a
//!    link (O_NOFOLLOW), created 0600, temporary files exclusively (O_EXCL), renamed with
//!    `renameat` and made durable with an fsync of the handle.
//!
//! Each invariant has a test below.

use crate::error::{LinuxError, Result};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// State files are small (the journal of 6,000 entries is about 1.5 MB): a bigger one is
/// not placer's and is refused rather than read into memory.
pub const MAX_STATE_FILE_BYTES: u64 = 64 << 20;

fn refuse(dir: &Path, why: String) -> LinuxError {
    LinuxError::Other(format!(
        "refusing the state dir {}: {why} (use a directory only this user can write, e.g. /run/placer)",
        dir.display()
    ))
}

/// An open, checked state directory: every file is reached through this handle.
#[derive(Debug)]
pub struct StateDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// Whether a missing path is created.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Missing {
    Create,
    Refuse,
}

fn absolute(dir: &Path) -> Result<PathBuf> {
    if dir.is_absolute() {
        Ok(dir.to_path_buf())
    } else {
        Ok(std::env::current_dir()
            .map_err(|e| LinuxError::io(dir, e))?
            .join(dir))
    }
}

/// Invariant 2 on an ancestor's handle.
fn check_ancestor(dir: &Path, at: &Path, f: &File) -> Result<()> {
    let m = f.metadata().map_err(|e| LinuxError::io(at, e))?;
    let me = crate::sys::effective_uid();
    if m.uid() != 0 && m.uid() != me {
        return Err(refuse(
            dir,
            format!(
                "its parent {} is owned by uid {}, neither root nor this user (uid {me})",
                at.display(),
                m.uid()
            ),
        ));
    }
    let mode = m.permissions().mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(refuse(
            dir,
            format!(
                "its parent {} is writable by group or others without the sticky bit (mode {:04o})",
                at.display(),
                mode & 0o7777
            ),
        ));
    }
    Ok(())
}

impl StateDir {
    /// Opens and checks an existing state dir; nothing is created or changed.
    pub fn open(dir: &Path) -> Result<StateDir> {
        StateDir::walk(dir, Missing::Refuse)
    }

    /// Opens the state dir, creating it 0700 (and missing parents 0755) under checked
    /// parents, tightens it to 0700 and checks it.
    pub fn prepare(dir: &Path) -> Result<StateDir> {
        let d = StateDir::walk(dir, Missing::Create)?;
        let f = File::from(d.fd.try_clone().map_err(|e| LinuxError::io(dir, e))?);
        let mode = f.metadata().map_err(|e| LinuxError::io(dir, e))?.mode();
        if mode & 0o077 != 0 {
            f.set_permissions(std::fs::Permissions::from_mode(0o700))
                .map_err(|e| LinuxError::io(dir, e))?;
        }
        Ok(d)
    }

    fn walk(dir: &Path, missing: Missing) -> Result<StateDir> {
        let abs = absolute(dir)?;
        let names: Vec<&std::ffi::OsStr> = abs
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(Ok(n)),
                Component::ParentDir => Some(Err(())),
                _ => None,
            })
            .collect::<std::result::Result<_, ()>>()
            .map_err(|()| refuse(dir, "its path has a `..` component".into()))?;
        let Some((last, parents)) = names.split_last() else {
            return Err(refuse(dir, "it is the root directory".into()));
        };
        let ancestor_flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let mut at = PathBuf::from("/");
        let mut cur = File::from(
            crate::sys::openat(None, Path::new("/"), ancestor_flags, 0)
                .map_err(|e| LinuxError::io("/", e))?,
        );
        check_ancestor(dir, &at, &cur)?;
        let link_or = |at: &Path, e: std::io::Error| -> LinuxError {
            // The message only: the decision was the kernel's refusal to follow.
            if std::fs::symlink_metadata(at).is_ok_and(|m| m.file_type().is_symlink()) {
                refuse(
                    dir,
                    format!(
                        "its path goes through a symbolic link ({} is one)",
                        at.display()
                    ),
                )
            } else if e.raw_os_error() == Some(libc::ENOTDIR) {
                refuse(dir, format!("{} is not a directory", at.display()))
            } else {
                LinuxError::io(at, e)
            }
        };
        let step = |cur: &File, at: &Path, name: &std::ffi::OsStr, flags, mode| {
            let open = || crate::sys::openat(Some(cur.as_fd()), Path::new(name), flags, 0);
            match open() {
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && missing == Missing::Create => {
                    match crate::sys::mkdirat(cur.as_fd(), Path::new(name), mode) {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                        Err(e) => return Err(LinuxError::io(at, e)),
                    }
                    open().map_err(|e| link_or(at, e))
                }
                r => r.map_err(|e| link_or(at, e)),
            }
        };
        for name in parents {
            at.push(name);
            let fd = step(&cur, &at, name, ancestor_flags, 0o755)?;
            cur = File::from(fd);
            check_ancestor(dir, &at, &cur)?;
        }
        at.push(last);
        let fd = step(
            &cur,
            &at,
            last,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0o700,
        )?;
        let f = File::from(fd);
        let meta = f.metadata().map_err(|e| LinuxError::io(dir, e))?;
        let me = crate::sys::effective_uid();
        if meta.uid() != me {
            return Err(refuse(
                dir,
                format!(
                    "it is owned by uid {}, not by this user (uid {me})",
                    meta.uid()
                ),
            ));
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o022 != 0 {
            return Err(refuse(
                dir,
                format!("group or others may write it (mode {mode:04o})"),
            ));
        }
        Ok(StateDir {
            fd: f.into(),
            path: abs,
        })
    }

    /// The path it was opened by (for messages: files are reached through the handle).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in it, for messages.
    pub fn display(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn open_at(&self, name: &str, flags: libc::c_int) -> std::io::Result<File> {
        if name.contains('/') || name == ".." || name == "." || name.is_empty() {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        crate::sys::openat(
            Some(self.fd.as_fd()),
            Path::new(name),
            flags | libc::O_NOFOLLOW,
            0o600,
        )
        .map(File::from)
    }

    /// Opens (creating 0600 if missing) file `name` for reading and writing.
    pub fn open_file(&self, name: &str) -> Result<File> {
        self.open_at(name, libc::O_RDWR | libc::O_CREAT)
            .map_err(|e| LinuxError::io(self.display(name), e))
    }

    /// Opens an existing file `name` for reading and writing; None when it is missing.
    pub fn open_existing(&self, name: &str) -> Result<Option<File>> {
        match self.open_at(name, libc::O_RDWR) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(LinuxError::io(self.display(name), e)),
        }
    }

    /// Creates a new file `name` 0600, failing if anything (a file, a link) has the name.
    pub fn create_new(&self, name: &str) -> Result<File> {
        self.open_at(name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL)
            .map_err(|e| LinuxError::io(self.display(name), e))
    }

    /// Reads file `name` (at most [`MAX_STATE_FILE_BYTES`]); a regular file only.
    pub fn read(&self, name: &str) -> std::io::Result<String> {
        String::from_utf8(self.read_bytes(name)?)
            .map_err(|_| std::io::Error::other(format!("{name} is not UTF-8: not placer's")))
    }

    /// [`StateDir::read`] without the text check, for a file read line by line whose
    /// torn or corrupt lines are skipped.
    pub fn read_bytes(&self, name: &str) -> std::io::Result<Vec<u8>> {
        let f = self.open_at(name, libc::O_RDONLY | libc::O_NONBLOCK)?;
        if !f.metadata()?.is_file() {
            return Err(std::io::Error::other(format!(
                "{name} is not a regular file"
            )));
        }
        let mut b = Vec::new();
        f.take(MAX_STATE_FILE_BYTES + 1).read_to_end(&mut b)?;
        if b.len() as u64 > MAX_STATE_FILE_BYTES {
            return Err(std::io::Error::other(format!(
                "{name} is over {MAX_STATE_FILE_BYTES} bytes: not placer's"
            )));
        }
        Ok(b)
    }

    /// Removes file `name` if it is there.
    pub fn remove(&self, name: &str) -> Result<()> {
        match crate::sys::unlinkat(self.fd.as_fd(), Path::new(name)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(LinuxError::io(self.display(name), e)),
        }
    }

    /// Writes `bytes` to `name` via a temporary file (`NAME.tmp.PID`), fsync and rename,
    /// then fsyncs the directory so the rename itself survives a crash: a crash leaves the
    /// old or the new file, never a torn one.
    pub fn write_durably(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.replace(name, bytes, true)
    }

    /// Replaces `name` atomically (temporary file and rename) without fsync: for files
    /// rewritten often and only informative (decisions).
    pub fn write_replace(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.replace(name, bytes, false)
    }

    fn replace(&self, name: &str, bytes: &[u8], durable: bool) -> Result<()> {
        let tmp = format!("{name}.tmp.{}", std::process::id());
        let io = |n: &str| {
            let p = self.display(n);
            move |e| LinuxError::io(p, e)
        };
        // Ours from an earlier attempt (same pid) at most; never follow or reuse a name.
        let _ = self.remove(&tmp);
        let written = (|| {
            let mut f = self.create_new(&tmp)?;
            f.write_all(bytes).map_err(io(&tmp))?;
            if durable {
                f.sync_all().map_err(io(&tmp))?;
            }
            crate::sys::renameat(self.fd.as_fd(), Path::new(&tmp), Path::new(name))
                .map_err(io(name))
        })();
        if written.is_err() {
            // A full disk leaves a partial temporary: not worth keeping.
            let _ = self.remove(&tmp);
        }
        written?;
        if durable {
            let _ = File::from(self.fd.try_clone().map_err(io(name))?).sync_all();
        }
        Ok(())
    }

    /// Removes temporary files (`NAME.tmp.PID`) left by a process that was killed between
    /// creating and renaming them.
    pub fn remove_stale_temporaries(&self) {
        // The handle's own directory, not a path looked up again.
        let listing = format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&self.fd)
        );
        let Ok(rd) = std::fs::read_dir(listing) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let Some((_, pid)) = name.rsplit_once(".tmp.") else {
                continue;
            };
            let alive = pid
                .parse::<u32>()
                .is_ok_and(|p| p == std::process::id() || crate::sys::process_alive(p));
            if !alive {
                let _ = self.remove(&name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path not created yet, in a fake root removed on drop (even when the test fails).
    struct Tmp(PathBuf, #[allow(dead_code)] placer_testkit::FakeRoot);
    fn tmp(tag: &str) -> Tmp {
        let root = placer_testkit::FakeRoot::new(&format!("statedir-{tag}"));
        Tmp(root.join("d"), root)
    }

    #[test]
    fn created_0700_and_tightened() {
        let t = tmp("mode");
        let d = t.0.join("a/state");
        StateDir::prepare(&d).expect("prepare");
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o750)).unwrap();
        StateDir::prepare(&d).expect("prepare again");
        assert_eq!(
            std::fs::metadata(&d).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }

    #[test]
    fn writable_by_others_is_refused() {
        let t = tmp("ww");
        std::fs::create_dir_all(&t.0).unwrap();
        std::fs::set_permissions(&t.0, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = StateDir::prepare(&t.0)
            .expect_err("world-writable")
            .to_string();
        assert!(e.contains("group or others may write it"), "{e}");
    }

    /// Issue 36: a group-writable (not sticky) parent could exchange directories under the
    /// check; it is refused, and nothing is created beneath it.
    #[test]
    fn a_group_writable_parent_is_refused_before_any_mkdir() {
        let t = tmp("gw");
        std::fs::create_dir_all(&t.0).unwrap();
        std::fs::set_permissions(&t.0, std::fs::Permissions::from_mode(0o775)).unwrap();
        let e = StateDir::prepare(&t.0.join("x/state"))
            .expect_err("group-writable parent")
            .to_string();
        assert!(e.contains("writable by group or others"), "{e}");
        assert!(!t.0.join("x").exists(), "created beneath a refused parent");
        std::fs::set_permissions(&t.0, std::fs::Permissions::from_mode(0o1777)).unwrap();
        StateDir::prepare(&t.0.join("x/state")).expect("sticky parent is fine");
    }

    /// Issue 36: a parent owned by another user is refused (root: chown).
    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root: chown")]
    fn a_parent_owned_by_another_user_is_refused() {
        placer_testkit::require_root();
        let t = tmp("owner");
        std::fs::create_dir_all(t.0.join("state")).unwrap();
        std::os::unix::fs::chown(&t.0, Some(65534), Some(65534)).unwrap();
        let e = StateDir::open(&t.0.join("state"))
            .expect_err("parent owned by nobody")
            .to_string();
        assert!(e.contains("owned by uid 65534"), "{e}");
    }

    #[test]
    fn a_link_is_refused_as_the_dir_or_on_its_path_and_nothing_made_through_it() {
        let t = tmp("link");
        let base = &t.0;
        std::fs::create_dir_all(base.join("real/state")).unwrap();
        std::os::unix::fs::symlink(base.join("real/state"), base.join("ln")).unwrap();
        let e = StateDir::prepare(&base.join("ln"))
            .expect_err("link")
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        std::os::unix::fs::symlink(base.join("real"), base.join("lnparent")).unwrap();
        let e = StateDir::prepare(&base.join("lnparent/new/state"))
            .expect_err("link on path")
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(!base.join("real/new").exists(), "mkdir through a link");
        let e = StateDir::open(&base.join("real/../real/state"))
            .expect_err("dot-dot")
            .to_string();
        assert!(e.contains(".."), "{e}");
    }

    #[test]
    fn open_creates_nothing() {
        let t = tmp("nocreate");
        assert!(StateDir::open(&t.0.join("state")).is_err());
        assert!(!t.0.exists());
    }

    #[test]
    fn files_are_not_followed_and_temporaries_are_exclusive() {
        let t = tmp("files");
        let d = StateDir::prepare(&t.0).unwrap();
        let target = t.0.join("target");
        std::fs::write(&target, "x").unwrap();
        std::os::unix::fs::symlink(&target, t.0.join("lock")).unwrap();
        assert!(d.open_file("lock").is_err(), "followed a link");
        assert!(d.read("lock").is_err(), "followed a link");
        assert!(d.create_new("target").is_err(), "overwrote a file");
        assert!(d.open_file("../x").is_err(), "left the directory");
        let f = d.create_new("new").unwrap();
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        d.write_durably("j", b"hello").unwrap();
        assert_eq!(d.read("j").unwrap(), "hello");
    }

    /// A FIFO planted in the state dir is not waited on.
    #[test]
    fn a_fifo_is_not_read() {
        let t = tmp("fifo");
        let d = StateDir::prepare(&t.0).unwrap();
        let c = std::ffi::CString::new(t.0.join("journal.json").to_str().unwrap()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t0 = std::time::Instant::now();
        assert!(d.read("journal.json").is_err());
        assert!(t0.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn stale_temporaries_of_dead_processes_go() {
        let t = tmp("stale");
        let d = StateDir::prepare(&t.0).unwrap();
        // pid 2^22 + 1 is above the kernel's pid limit: never alive.
        let dead = t.0.join("journal.tmp.4194305");
        let mine = t.0.join(format!("journal.tmp.{}", std::process::id()));
        std::fs::write(&dead, "x").unwrap();
        std::fs::write(&mine, "x").unwrap();
        d.remove_stale_temporaries();
        assert!(!dead.exists() && mine.exists());
    }
}
