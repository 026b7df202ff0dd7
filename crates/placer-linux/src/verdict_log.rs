//! The daemon's verdict log: every verdict, typed, one JSON record per line in the state
//! dir (`verdicts.jsonl`, 0600, no link followed), appended as the engine judges. The
//! journal's entries go when their knob is restored, so the history `placer report` needs
//! is kept here; past [`ROTATE_BYTES`] the file becomes `verdicts.jsonl.1` (one generation
//! kept), so it stays bounded on a host that runs for months.

use crate::error::{LinuxError, Result};
use placer_core::verdict::Verdict;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub const VERDICT_LOG: &str = "verdicts.jsonl";

/// Size past which the log is rotated.
pub const ROTATE_BYTES: u64 = 4 << 20;

/// One verdict with the wall-clock time it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictRecord {
    pub unix_ms: u64,
    pub verdict: Verdict,
}

/// Appends `rec` to the state dir's log (rotating it first when it is too big).
pub fn append(state_dir: &Path, rec: &VerdictRecord) -> Result<()> {
    let path = state_dir.join(VERDICT_LOG);
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.len() > ROTATE_BYTES) {
        let old = state_dir.join(format!("{VERDICT_LOG}.1"));
        std::fs::rename(&path, &old).map_err(|e| LinuxError::io(&path, e))?;
    }
    let mut line = serde_json::to_string(rec).map_err(|e| LinuxError::io(&path, e.into()))?;
    line.push('\n');
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| LinuxError::io(&path, e))
}

/// Every record of the log (the rotated generation first), and the number of lines that
/// did not parse (a torn last line after a crash, a line with bytes that are not UTF-8).
pub fn read(state_dir: &Path) -> Result<(Vec<VerdictRecord>, usize)> {
    let mut out = Vec::new();
    let mut bad = 0;
    if !state_dir.exists() {
        return Ok((out, bad));
    }
    // Read through the checked state dir's handle, as every state file is.
    let dir = crate::state_dir::StateDir::open(state_dir)?;
    for name in [format!("{VERDICT_LOG}.1"), VERDICT_LOG.to_string()] {
        let path = state_dir.join(&name);
        let bytes = match dir.read_bytes(&name) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(LinuxError::io(&path, e)),
        };
        // Line by line, each decoded on its own: a corrupt byte costs its line only.
        for l in bytes.split(|&b| b == b'\n') {
            let Ok(l) = std::str::from_utf8(l) else {
                bad += 1;
                continue;
            };
            if l.trim().is_empty() {
                continue;
            }
            match serde_json::from_str(l) {
                Ok(r) => out.push(r),
                Err(_) => bad += 1,
            }
        }
    }
    Ok((out, bad))
}

#[cfg(test)]
mod tests {
    use super::*;
    use placer_core::policy_kind::PolicyKind;
    use placer_core::verdict::{Judgement, VerdictKind};

    fn rec(pid: u32, unix_ms: u64) -> VerdictRecord {
        VerdictRecord {
            unix_ms,
            verdict: Verdict {
                policy: PolicyKind::NetAffinity,
                proc: placer_core::sample::ProcKey {
                    pid,
                    start_time_ticks: 1,
                },
                comm: "rx".into(),
                judgement: Judgement {
                    kind: VerdictKind::Kept,
                    main: None,
                    guard: None,
                    why: "w".into(),
                },
                backoff_intervals: None,
                trial: None,
            },
        }
    }

    #[test]
    fn records_round_trip_and_a_torn_line_is_counted() {
        let dir = placer_testkit::TempDir::new("verdict-log");
        append(dir.path(), &rec(1, 10)).unwrap();
        append(dir.path(), &rec(2, 20)).unwrap();
        let path = dir.path().join(VERDICT_LOG);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"unix_ms\": 3, \"verd").unwrap();
        let (got, bad) = read(dir.path()).unwrap();
        assert_eq!(got, vec![rec(1, 10), rec(2, 20)]);
        assert_eq!(bad, 1);
        // Issue 48: a byte that is not UTF-8 costs its own line, not the log.
        f.write_all(b"\n{\"unix_ms\": \xff}\n").unwrap();
        append(dir.path(), &rec(4, 40)).unwrap();
        let (got, bad) = read(dir.path()).unwrap();
        assert_eq!(got, vec![rec(1, 10), rec(2, 20), rec(4, 40)]);
        assert_eq!(bad, 2);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_big_log_is_rotated_and_both_generations_read() {
        let dir = placer_testkit::TempDir::new("verdict-log-rotate");
        let path = dir.path().join(VERDICT_LOG);
        append(dir.path(), &rec(1, 10)).unwrap();
        // Grow it past the limit with blank lines (ignored by the reader).
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&vec![b'\n'; ROTATE_BYTES as usize + 1])
            .unwrap();
        append(dir.path(), &rec(2, 20)).unwrap();
        assert!(dir.path().join(format!("{VERDICT_LOG}.1")).exists());
        let (got, bad) = read(dir.path()).unwrap();
        assert_eq!(got, vec![rec(1, 10), rec(2, 20)]);
        assert_eq!(bad, 0);
        assert!(std::fs::metadata(&path).unwrap().len() < 1000);
    }
}
