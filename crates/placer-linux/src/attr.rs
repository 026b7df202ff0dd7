//! Small attribute files (sysfs, /proc/sys): read whole, trimmed, bounded. A sysfs attribute
//! is at most a page; the bound is well above that and keeps a root we do not trust (a
//! fixture tree, a FIFO) from making us read without end.

use std::io::Read;
use std::path::Path;

/// Most bytes read from one attribute file.
pub const MAX_ATTR_BYTES: u64 = 64 << 10;

/// The file's text, trimmed; None when it cannot be read (absent, vanished, not text).
pub fn read(path: &Path) -> Option<String> {
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_ATTR_BYTES)
        .read_to_string(&mut s)
        .ok()?;
    Some(s.trim().to_string())
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
        assert_eq!(read(&p).unwrap().len() as u64, MAX_ATTR_BYTES);
    }
}
