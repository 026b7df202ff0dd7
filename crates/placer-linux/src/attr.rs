//! Small attribute files (sysfs, /proc/sys): read whole, trimmed, bounded. A sysfs attribute
//! is at most a page; the bound is well above that and keeps a root we do not trust (a
//! fixture tree, a FIFO) from making us read without end.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Most bytes read from one attribute file.
pub const MAX_ATTR_BYTES: u64 = 64 << 10;

/// The file's text, trimmed; None when it cannot be read (absent, vanished, too big).
pub fn read(path: &Path) -> Option<String> {
    read_capped(path, MAX_ATTR_BYTES)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The file's text, at most `max_bytes` (more is an `InvalidData` error, not a truncated
/// text), opened without blocking (a FIFO under a root we do not trust must not hang us).
/// Bytes that are not UTF-8 become U+FFFD: a process may name itself with any bytes
/// (`/proc/PID/stat`'s comm), and its other fields must still read.
pub fn read_capped(path: &Path, max_bytes: u64) -> std::io::Result<String> {
    let mut b = Vec::new();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?
        .take(max_bytes + 1)
        .read_to_end(&mut b)?;
    if b.len() as u64 > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: larger than {max_bytes} bytes", path.display()),
        ));
    }
    Ok(match String::from_utf8(b) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// The file's one decimal number.
pub fn read_u64(path: &Path) -> Option<u64> {
    read(path)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_trimmed_bounded_numbers() {
        let dir = placer_testkit::TempDir::new("placer-attr");
        let p = dir.path().join("a");
        std::fs::write(&p, " 1234\n").unwrap();
        assert_eq!(read(&p).as_deref(), Some("1234"));
        assert_eq!(read_u64(&p), Some(1234));
        std::fs::write(&p, "x").unwrap();
        assert_eq!(read_u64(&p), None);
        assert_eq!(read(&dir.path().join("missing")), None);
        std::fs::write(&p, "7".repeat(MAX_ATTR_BYTES as usize + 10)).unwrap();
        // Over the bound: refused, not cut to a wrong number.
        assert_eq!(read(&p), None);
        std::fs::write(&p, "7".repeat(MAX_ATTR_BYTES as usize)).unwrap();
        assert_eq!(read(&p).unwrap().len() as u64, MAX_ATTR_BYTES);
    }

    /// Issue 36: a FIFO, a link to /dev/zero and a 2 GiB file where an attribute (or
    /// numa_maps, read through [`read_capped`] too) should be: each answered at once, within
    /// the bound, as an error; nothing blocks and nothing grows past the bound.
    #[test]
    fn hostile_files_are_refused_in_bounded_time_and_memory() {
        let dir = placer_testkit::TempDir::new("placer-attr-hostile");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid, NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let big = dir.path().join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(2 << 30)
            .unwrap();
        for p in [&fifo, &zero, &big] {
            let (tx, rx) = std::sync::mpsc::channel();
            let q = p.clone();
            std::thread::spawn(move || {
                let _ = tx.send(read_capped(&q, MAX_ATTR_BYTES).map(|s| s.len()));
            });
            let r = rx
                .recv_timeout(std::time::Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("{}: read took over 5 s", p.display()));
            match r {
                // A FIFO without a writer reads empty at once (no data, no hang).
                Ok(n) => assert!(p == &fifo && n == 0, "{}: {n} bytes", p.display()),
                Err(e) => assert!(
                    e.to_string().contains("larger than"),
                    "{}: {e}",
                    p.display()
                ),
            }
            assert_eq!(read(p).filter(|s| !s.is_empty()), None, "{}", p.display());
        }
    }
}
