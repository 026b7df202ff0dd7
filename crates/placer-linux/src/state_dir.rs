//! The daemon's state directory (journal, lock, decisions) is trusted to hold what placer
//! wrote: a journal there makes placer write affinities and qdiscs as root. So it is checked
//! before any use, as the most careful daemons do:
//! 1. it is not a symbolic link and no component of its path is one (it resolves to itself);
//! 2. it is a directory owned by this process's effective user;
//! 3. neither group nor others may write it, and no ancestor is writable by others unless
//!    sticky (/tmp is sticky: others cannot rename our directory away);
//! 4. placer creates it 0700 and tightens one it owns to 0700;
//! 5. files in it are opened without following links (O_NOFOLLOW) and created 0600, new
//!    temporary files exclusively (O_EXCL).
//!
//! Each invariant has a test below.

use crate::error::{LinuxError, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

fn refuse(dir: &Path, why: String) -> LinuxError {
    LinuxError::Other(format!(
        "refusing the state dir {}: {why} (use a directory only this user can write, e.g. /run/placer)",
        dir.display()
    ))
}

/// Checks invariants 1-3 of an existing state dir.
pub fn check(dir: &Path) -> Result<()> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| LinuxError::io(dir, e))?;
    if meta.file_type().is_symlink() {
        return Err(refuse(dir, "it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(refuse(dir, "it is not a directory".into()));
    }
    let real = std::fs::canonicalize(dir).map_err(|e| LinuxError::io(dir, e))?;
    let asked: std::path::PathBuf = if dir.is_absolute() {
        dir.components().collect()
    } else {
        std::env::current_dir()
            .map_err(|e| LinuxError::io(dir, e))?
            .join(dir)
            .components()
            .collect()
    };
    if real != asked {
        return Err(refuse(
            dir,
            format!(
                "its path goes through a symbolic link (it is {})",
                real.display()
            ),
        ));
    }
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
    for anc in real.ancestors().skip(1) {
        let m = std::fs::metadata(anc).map_err(|e| LinuxError::io(anc, e))?;
        let mode = m.permissions().mode();
        if mode & 0o002 != 0 && mode & 0o1000 == 0 {
            return Err(refuse(
                dir,
                format!(
                    "its parent {} is writable by everyone without the sticky bit",
                    anc.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Creates the state dir 0700 if missing (parents as usual), tightens it to 0700, and
/// checks it.
pub fn prepare(dir: &Path) -> Result<()> {
    if std::fs::symlink_metadata(dir).is_err() {
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(|e| LinuxError::io(parent, e))?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(LinuxError::io(dir, e)),
        }
    }
    check(dir)?;
    let meta = std::fs::metadata(dir).map_err(|e| LinuxError::io(dir, e))?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| LinuxError::io(dir, e))?;
    }
    Ok(())
}

/// Opens (creating 0600 if missing) a file of the state dir for reading and writing,
/// without following a link.
pub fn open_private(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| LinuxError::io(path, e))
}

/// Creates a new file 0600, failing if anything (a file, a link) already has the name.
pub fn create_new_private(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| LinuxError::io(path, e))
}

/// Reads a file of the state dir without following a link.
pub fn read_private(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let mut s = String::new();
    f.read_to_string(&mut s)?;
    Ok(s)
}

/// Removes temporary files (`NAME.tmp.PID`) left by a process that was killed between
/// creating and renaming them.
pub fn remove_stale_temporaries(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
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
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("placer-test-statedir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn created_0700_and_tightened() {
        let d = tmp("mode");
        prepare(&d).expect("prepare");
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare(&d).expect("prepare again");
        assert_eq!(
            std::fs::metadata(&d).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn writable_by_others_is_refused() {
        let d = tmp("ww");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare(&d).expect_err("world-writable").to_string();
        assert!(e.contains("group or others may write it"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_link_is_refused_as_the_dir_or_on_its_path() {
        let base = tmp("link");
        std::fs::create_dir_all(base.join("real/state")).unwrap();
        std::os::unix::fs::symlink(base.join("real/state"), base.join("ln")).unwrap();
        let e = prepare(&base.join("ln")).expect_err("link").to_string();
        assert!(e.contains("symbolic link"), "{e}");
        std::os::unix::fs::symlink(base.join("real"), base.join("lnparent")).unwrap();
        let e = prepare(&base.join("lnparent/state"))
            .expect_err("link on path")
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn files_are_not_followed_and_temporaries_are_exclusive() {
        let d = tmp("files");
        prepare(&d).unwrap();
        let target = d.join("target");
        std::fs::write(&target, "x").unwrap();
        std::os::unix::fs::symlink(&target, d.join("lock")).unwrap();
        assert!(open_private(&d.join("lock")).is_err(), "followed a link");
        assert!(read_private(&d.join("lock")).is_err(), "followed a link");
        assert!(create_new_private(&target).is_err(), "overwrote a file");
        let f = create_new_private(&d.join("new")).unwrap();
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn stale_temporaries_of_dead_processes_go() {
        let d = tmp("stale");
        prepare(&d).unwrap();
        // pid 2^22 + 1 is above the kernel's pid limit: never alive.
        let dead = d.join("journal.tmp.4194305");
        let mine = d.join(format!("journal.tmp.{}", std::process::id()));
        std::fs::write(&dead, "x").unwrap();
        std::fs::write(&mine, "x").unwrap();
        remove_stale_temporaries(&d);
        assert!(!dead.exists() && mine.exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
