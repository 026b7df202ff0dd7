//! `/proc/PID/numa_maps`: where a process's resident pages are, per NUMA node (seed 004's
//! "local / remote memory" for one process).
//!
//! Each line is one mapping: its start address, its memory policy, then `key=value`
//! tokens; `N<node>=<pages>` gives the pages of the mapping on each node, counted in the
//! mapping's own page size (`kernelpagesize_kB`, 2048 for a 2 MiB huge-page mapping):
//!
//! ```text
//! 7f5b2c000000 bind:0 anon=32 dirty=32 active=0 N0=32 kernelpagesize_kB=4
//! 7f5b40000000 default file=/dev/hugepages/x huge dirty=1 N1=1 kernelpagesize_kB=2048
//! ```
//!
//! [`parse`] is pure; [`pages_per_node`] sums the mappings into base pages per node (the
//! unit of `ProcSample::numa_pages`), so a huge page counts as 512 base pages of 4 KiB.
//! [`read`] reads one process under a root (the sampler calls it for the processes that ran).

use crate::error::{LinuxError, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// One line of numa_maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaMapping {
    pub start: u64,
    /// The policy as the kernel prints it: `default`, `bind:0`, `prefer:1`,
    /// `interleave:0-3`, `bind=static:0`, ...
    pub policy: String,
    /// `file=PATH`'s path, or `heap` / `stack` / `huge` when the kernel says so.
    pub backing: Option<String>,
    /// Pages of this mapping on each node, in units of `page_kb`.
    pub pages: BTreeMap<u32, u64>,
    /// `kernelpagesize_kB` (4 when absent).
    pub page_kb: u64,
}

impl NumaMapping {
    /// Bytes of this mapping on each node.
    pub fn bytes_per_node(&self) -> BTreeMap<u32, u64> {
        self.pages
            .iter()
            .map(|(&n, &p)| (n, p * self.page_kb * 1024))
            .collect()
    }
}

/// Parses numa_maps text. Lines whose first token is not a hex address are skipped (none
/// exist today; a future kernel's extra line should not lose the rest).
pub fn parse(text: &str) -> Vec<NumaMapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<NumaMapping> {
    let mut toks = line.split_whitespace();
    let start = u64::from_str_radix(toks.next()?, 16).ok()?;
    let policy = toks.next().unwrap_or("").to_string();
    let mut m = NumaMapping {
        start,
        policy,
        backing: None,
        pages: BTreeMap::new(),
        page_kb: 4,
    };
    for tok in toks {
        match tok.split_once('=') {
            Some(("file", path)) => m.backing = Some(path.to_string()),
            Some(("kernelpagesize_kB", v)) => {
                if let Ok(kb) = v.parse() {
                    m.page_kb = kb;
                }
            }
            Some((k, v)) => {
                let node = k.strip_prefix('N').and_then(|n| n.parse::<u32>().ok());
                if let (Some(node), Ok(pages)) = (node, v.parse::<u64>()) {
                    *m.pages.entry(node).or_default() += pages;
                }
            }
            None if matches!(tok, "heap" | "stack" | "huge") && m.backing.is_none() => {
                m.backing = Some(tok.to_string())
            }
            None => {}
        }
    }
    Some(m)
}

/// Bytes per node over all mappings.
pub fn bytes_per_node(maps: &[NumaMapping]) -> BTreeMap<u32, u64> {
    let mut out: BTreeMap<u32, u64> = BTreeMap::new();
    for m in maps {
        for (n, b) in m.bytes_per_node() {
            *out.entry(n).or_default() += b;
        }
    }
    out
}

/// Resident pages per node, in base pages of `base_page_bytes` (the machine's page size:
/// data, not read from the host running the parser).
pub fn pages_per_node(text: &str, base_page_bytes: u64) -> BTreeMap<u32, u64> {
    let base = base_page_bytes.max(1);
    bytes_per_node(&parse(text))
        .into_iter()
        .map(|(n, b)| (n, b / base))
        .collect()
}

/// Reads `ROOT/proc/PID/numa_maps` and sums it into base pages per node. `Ok(None)` when
/// the process is gone or the file does not exist (a kernel without NUMA).
pub fn read(root: &Path, pid: u32, base_page_bytes: u64) -> Result<Option<BTreeMap<u32, u64>>> {
    let path = root.join(format!("proc/{pid}/numa_maps"));
    match crate::attr::read_capped(&path, crate::sys::MAX_FILE_BYTES as u64) {
        Ok(text) => Ok(Some(pages_per_node(&text, base_page_bytes))),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidInput
            ) || e.raw_os_error() == Some(libc::ESRCH) =>
        {
            Ok(None)
        }
        Err(e) => Err(LinuxError::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
00400000 default file=/usr/bin/cat mapped=7 N0=7 kernelpagesize_kB=4
0060b000 default file=/usr/bin/cat anon=1 dirty=1 N0=1 kernelpagesize_kB=4
01d2a000 default heap anon=33 dirty=33 active=0 N0=20 N1=13 kernelpagesize_kB=4
7f5b2c000000 bind:1 anon=512 dirty=512 N1=512 kernelpagesize_kB=4
7f5b40000000 default file=/dev/hugepages/buf huge dirty=2 N2=2 kernelpagesize_kB=2048
7f5b60000000 interleave:0-3 anon=8 dirty=8 N0=2 N1=2 N2=2 N3=2 kernelpagesize_kB=4
7ffd2a1c3000 default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4
7ffd2a1f0000 default
";

    #[test]
    fn parses_each_mapping() {
        let m = parse(TEXT);
        assert_eq!(m.len(), 8);
        assert_eq!(m[0].start, 0x400000);
        assert_eq!(m[0].backing.as_deref(), Some("/usr/bin/cat"));
        assert_eq!(m[2].backing.as_deref(), Some("heap"));
        assert_eq!(m[2].pages, BTreeMap::from([(0, 20), (1, 13)]));
        assert_eq!(m[3].policy, "bind:1");
        assert_eq!(m[4].page_kb, 2048);
        assert_eq!(m[4].backing.as_deref(), Some("/dev/hugepages/buf"));
        assert_eq!(m[6].backing.as_deref(), Some("stack"));
        assert!(m[7].pages.is_empty());
        assert_eq!(m[7].page_kb, 4);
    }

    #[test]
    fn sums_per_node_in_base_pages() {
        let p = pages_per_node(TEXT, 4096);
        // node 0: 7 + 1 + 20 + 2 + 3; node 1: 13 + 512 + 2; node 2: 2 huge pages of
        // 2 MiB = 1024 base pages, + 2; node 3: 2.
        assert_eq!(p, BTreeMap::from([(0, 33), (1, 527), (2, 1026), (3, 2)]));
        // With 64 KiB base pages (arm64/ppc64 kernels) the same bytes are fewer pages.
        let p64 = pages_per_node(TEXT, 65536);
        assert_eq!(p64[&2], 2 * 2048 / 64);
    }

    #[test]
    fn junk_is_skipped_not_fatal() {
        let t = "not-hex default N0=5\n1000 default N0=x Nfoo=3 N1=4 weird\n\n";
        let m = parse(t);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].pages, BTreeMap::from([(1, 4)]));
    }

    #[test]
    fn reads_under_a_root_and_absent_is_none() {
        let root = placer_testkit::FakeRoot::new("numa-maps");
        root.proc_pid(42, &[("numa_maps", TEXT)]);
        let got = read(root.path(), 42, 4096).unwrap().unwrap();
        assert_eq!(got[&1], 527);
        assert_eq!(read(root.path(), 43, 4096).unwrap(), None);
    }

    #[test]
    fn own_process_has_pages_on_an_online_node() {
        let Ok(Some(m)) = read(Path::new("/"), std::process::id(), 4096) else {
            placer_testkit::skip("/proc/self/numa_maps unreadable (kernel without NUMA?)");
            return;
        };
        assert!(
            m.values().sum::<u64>() > 0,
            "a running process has resident pages"
        );
        let online = std::fs::read_to_string("/sys/devices/system/node/online").unwrap_or_default();
        let online = placer_core::CpuSet::parse_list(online.trim()).unwrap_or_default();
        for n in m.keys() {
            assert!(online.contains(*n), "node {n} not online ({online})");
        }
    }

    #[test]
    fn sampler_fills_numa_pages_only_when_asked() {
        let me = std::process::id();
        let mut s = crate::sampler::Sampler::new(Path::new("/"));
        let req = placer_core::sample::SampleRequest {
            numa_pages: true,
            ..Default::default()
        };
        let sample = s.sample(req).unwrap();
        let p = sample.procs.iter().find(|p| p.pid == me).unwrap();
        if read(Path::new("/"), me, 4096).ok().flatten().is_none() {
            placer_testkit::skip("no numa_maps on this kernel");
            return;
        }
        assert!(p.numa_pages.values().sum::<u64>() > 0, "{:?}", p.numa_pages);
        let plain = s.sample(Default::default()).unwrap();
        let p = plain.procs.iter().find(|p| p.pid == me).unwrap();
        assert!(p.numa_pages.is_empty());
    }
}
