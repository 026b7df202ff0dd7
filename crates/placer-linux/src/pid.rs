//! Who a pid is: its start time (the identity that survives pid reuse) and its threads,
//! read under a root.

use std::path::Path;

/// Start time (field 22 of /proc/PID/stat) of a process under `root`; None if gone.
pub fn start_time_ticks(root: &Path, pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(root.join(format!("proc/{pid}/stat"))).ok()?;
    parse_start_time(&text)
}

/// Field 22 of a stat line (the one stat parser, `procfs::parse_pid_stat`, reads it).
pub fn parse_start_time(stat: &str) -> Option<u64> {
    crate::procfs::parse_pid_stat(stat).map(|s| s.start_time_ticks)
}

/// Thread ids of a process under `root`, sorted.
pub fn task_ids(root: &Path, pid: u32) -> std::io::Result<Vec<u32>> {
    let mut v: Vec<u32> = std::fs::read_dir(root.join(format!("proc/{pid}/task")))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}
