//! Recordings of this machine: the header of a real machine (its hostname and topology read
//! under the root) and opening files. The format itself, its writer and reader are pure and
//! live in [`placer_core::record`].

pub use placer_core::record::*;
use std::io;

/// The header of a recording of the machine under `root`: its hostname is read there (so a
/// recording of a fixture tree names the fixture's host, not this one), and its topology.
pub fn header(
    root: &std::path::Path,
    interval_ms: u64,
    sources: placer_core::sample::SourceStatus,
) -> RecordHeader {
    let started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let host = crate::attr::read(&root.join("proc/sys/kernel/hostname")).unwrap_or_default();
    let mut h = RecordHeader::new(&host, started_unix_ms, interval_ms, sources);
    h.topology = crate::topology::read(root).ok();
    h.placer_pid = std::process::id();
    h
}

/// The largest recording opened (a day of a large machine at 1 s is well below it).
pub const MAX_RECORDING_BYTES: u64 = 16 << 30;

/// Opens a record file (header checked): a regular file only, not a FIFO or a device
/// ([`crate::sys::open_regular_file`]); its lines are bounded by the reader.
pub fn open(
    path: &std::path::Path,
) -> Result<RecordReader<io::BufReader<std::fs::File>>, RecordError> {
    let f = crate::sys::open_regular_file(path, MAX_RECORDING_BYTES)?;
    RecordReader::new(io::BufReader::new(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use placer_core::sample::SourceStatus;

    #[test]
    fn the_hostname_is_the_roots() {
        let dir = std::env::temp_dir().join(format!("placer-record-host-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("proc/sys/kernel")).unwrap();
        std::fs::write(dir.join("proc/sys/kernel/hostname"), "fixture-host\n").unwrap();
        let h = header(&dir, 1000, SourceStatus::default());
        let empty = header(&dir.join("nowhere"), 1000, SourceStatus::default());
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(h.host, "fixture-host");
        assert_eq!(empty.host, "");
        assert_eq!(h.placer_pid, std::process::id());
    }

    #[test]
    fn this_machine_s_header_carries_its_topology() {
        let h = header(std::path::Path::new("/"), 1000, SourceStatus::default());
        let t = h.topology.expect("the topology of /");
        assert!(!t.cpus.is_empty());
    }
}
