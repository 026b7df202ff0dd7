//! Small attribute files (sysfs, /proc/sys): read whole, trimmed, bounded. A sysfs attribute
//! is at most a page; the bound is well above that and keeps a root we do not trust (a
//! fixture tree, a FIFO) from making us read without end.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Most bytes read from one attribute file.
pub const MAX_ATTR_BYTES: u64 = 64 << 10;

/// The file's text, trimmed; None when it cannot be read (absent, vanished, not text).
pub fn read(path: &Path) -> Option<String> {
    read_capped(path, MAX_ATTR_BYTES)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The file's text, at most `max_bytes` (more is an `InvalidData` error, not a truncated
/// text), opened without blocking (a FIFO under a root we do not trust must not hang us).
pub fn read_capped(path: &Path, max_bytes: u64) -> std::io::Result<String> {
    let mut s = String::new();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?
        .take(max_bytes + 1)
        .read_to_string(&mut s)?;
    if s.len() as u64 > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: larger than {max_bytes} bytes", path.display()),
        ));
    }
    Ok(s)
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
}
