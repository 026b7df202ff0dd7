//! Pure parsers of the text files the topology reader uses: each takes the file's text
//! and returns a value or a message; [`super::fs::Files`] adds the file name to errors.
//! None of them panics on any input (fuzzed in the tests below).

use placer_core::topology::CacheKind;
use placer_core::CpuSet;
use std::collections::BTreeMap;

/// A CPU set in either Linux form: a `*_list`/`cpulist` file (list) or a mask file.
pub fn cpuset_list(text: &str) -> Result<CpuSet, String> {
    CpuSet::parse_list(text).map_err(|e| e.to_string())
}

pub fn cpuset_mask(text: &str) -> Result<CpuSet, String> {
    CpuSet::parse_mask(text).map_err(|e| e.to_string())
}

/// A signed decimal integer file (`physical_package_id` may be -1).
pub fn int(text: &str) -> Result<i64, String> {
    let t = text.trim();
    t.parse::<i64>()
        .map_err(|_| format!("expected an integer, found {t:?}"))
}

/// An unsigned decimal integer file.
pub fn uint(text: &str) -> Result<u64, String> {
    let t = text.trim();
    t.parse::<u64>()
        .map_err(|_| format!("expected an unsigned integer, found {t:?}"))
}

/// A kernel id that is -1 (or any negative value) when unknown.
pub fn opt_id(text: &str) -> Result<Option<u32>, String> {
    let v = int(text)?;
    if v < 0 {
        return Ok(None);
    }
    u32::try_from(v)
        .map(Some)
        .map_err(|_| format!("id {v} out of range"))
}

/// A cache `size` file: `32K`, `4096K`, `1M`, or a plain byte count.
pub fn cache_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (num, mul) = match t.as_bytes().last() {
        Some(b'K') | Some(b'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some(b'M') | Some(b'm') => (&t[..t.len() - 1], 1 << 20),
        Some(b'G') | Some(b'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let v: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad cache size {t:?}"))?;
    v.checked_mul(mul)
        .ok_or_else(|| format!("cache size {t:?} overflows"))
}

/// A cache `type` file. `Unknown` (and other kinds the kernel may add) give `None`, so
/// the cache is skipped rather than misfiled.
pub fn cache_kind(text: &str) -> Result<Option<CacheKind>, String> {
    match text.trim() {
        "Data" => Ok(Some(CacheKind::Data)),
        "Instruction" => Ok(Some(CacheKind::Instruction)),
        "Unified" => Ok(Some(CacheKind::Unified)),
        "" => Err("empty cache type".into()),
        _ => Ok(None),
    }
}

/// A node `distance` row: whitespace-separated distances.
pub fn distance_row(text: &str) -> Result<Vec<u32>, String> {
    text.split_whitespace()
        .map(|w| w.parse::<u32>().map_err(|_| format!("bad distance {w:?}")))
        .collect()
}

/// `MemTotal` in bytes from a node `meminfo` (`Node 0 MemTotal:  123 kB`) or from
/// `/proc/meminfo` (`MemTotal:  123 kB`). `None` when the line is absent.
pub fn meminfo_total_bytes(text: &str) -> Result<Option<u64>, String> {
    for line in text.lines() {
        let Some((key, val)) = line.split_once(':') else {
            continue;
        };
        if key.split_whitespace().last() != Some("MemTotal") {
            continue;
        }
        let mut it = val.split_whitespace();
        let n: u64 = it
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("bad MemTotal line {line:?}"))?;
        let mul = match it.next() {
            Some("kB") | Some("KB") | Some("kb") => 1024,
            None => 1,
            Some(u) => return Err(format!("unknown unit {u:?} in {line:?}")),
        };
        return n
            .checked_mul(mul)
            .map(Some)
            .ok_or_else(|| format!("MemTotal overflows in {line:?}"));
    }
    Ok(None)
}

/// The per-processor facts of `/proc/cpuinfo` the reader may fall back on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuinfoEntry {
    pub processor: u32,
    pub physical_id: Option<u32>,
    pub core_id: Option<u32>,
}

/// Parses `/proc/cpuinfo` blocks that start with `processor : N`. Blocks without a
/// numeric processor line (s390's header, Arm's trailer) are ignored.
pub fn cpuinfo(text: &str) -> Result<Vec<CpuinfoEntry>, String> {
    let mut out: Vec<CpuinfoEntry> = Vec::new();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        let num = || {
            v.parse::<u32>()
                .map_err(|_| format!("bad value {v:?} for {k:?}"))
        };
        match k {
            "processor" => {
                // s390 writes `processor 0: version = ...`; only plain numbers start a block.
                if let Ok(p) = v.parse::<u32>() {
                    out.push(CpuinfoEntry {
                        processor: p,
                        ..Default::default()
                    });
                }
            }
            "physical id" => {
                if let Some(e) = out.last_mut() {
                    e.physical_id = Some(num()?);
                }
            }
            "core id" => {
                if let Some(e) = out.last_mut() {
                    e.core_id = Some(num()?);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// `/proc/interrupts`: IRQ number -> its name (the last column; for lines such as
/// `38: 0 1658 PCI-MSIX-0000:00:03.0 1-edge virtio2-input.0` the name is
/// `virtio2-input.0`; several devices sharing a legacy IRQ are joined by ", ").
pub fn interrupts(text: &str) -> Result<BTreeMap<u32, String>, String> {
    let mut lines = text.lines();
    let ncpu = match lines.next() {
        Some(h) => h
            .split_whitespace()
            .filter(|w| w.starts_with("CPU"))
            .count(),
        None => return Ok(BTreeMap::new()),
    };
    let mut out = BTreeMap::new();
    for line in lines {
        let Some((irq, rest)) = line.split_once(':') else {
            continue;
        };
        let Ok(irq) = irq.trim().parse::<u32>() else {
            continue; // NMI, LOC, ... are not device IRQs
        };
        // Skip the per-CPU counts, then the chip name and the hwirq/trigger word(s); the
        // device name(s) are what remains after the last word ending in "-edge"/"-level"
        // (or, for chips without it, the last word).
        let words: Vec<&str> = rest.split_whitespace().skip(ncpu).collect();
        let name = match words.iter().rposition(|w| {
            w.ends_with("-edge")
                || w.ends_with("-level")
                || w.ends_with("-fasteoi")
                || matches!(*w, "Edge" | "Level")
        }) {
            Some(i) if i + 1 < words.len() => words[i + 1..].join(" "),
            _ => words.last().map(|s| s.to_string()).unwrap_or_default(),
        };
        out.insert(irq, name);
    }
    Ok(out)
}

/// A line of `/proc/self/mountinfo`: root within the filesystem, mount point, type and
/// super options (where cgroup v1 lists its controllers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub root: String,
    pub mount_point: String,
    pub fs_type: String,
    pub options: String,
}

/// Parses `/proc/self/mountinfo` (`36 35 98:0 /mnt1 /mnt2 rw - ext3 /dev/root rw`).
pub fn mountinfo(text: &str) -> Result<Vec<Mount>, String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (pre, post) = line
            .split_once(" - ")
            .ok_or_else(|| format!("no ' - ' separator in {line:?}"))?;
        let pre: Vec<&str> = pre.split_whitespace().collect();
        let post: Vec<&str> = post.split_whitespace().collect();
        if pre.len() < 5 || post.is_empty() {
            return Err(format!("short mountinfo line {line:?}"));
        }
        out.push(Mount {
            root: unescape_mount(pre[3]),
            mount_point: unescape_mount(pre[4]),
            fs_type: post[0].to_string(),
            options: post.get(2).unwrap_or(&"").to_string(),
        });
    }
    Ok(out)
}

/// Parses `/proc/mounts` (`none /dev/cpuset cpuset rw 0 0`); the root is always `/`.
pub fn mounts(text: &str) -> Result<Vec<Mount>, String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 4 {
            return Err(format!("short mounts line {line:?}"));
        }
        out.push(Mount {
            root: "/".into(),
            mount_point: unescape_mount(w[1]),
            fs_type: w[2].to_string(),
            options: w[3].to_string(),
        });
    }
    Ok(out)
}

/// Mount tables escape space, tab, newline and backslash as `\040` etc.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cpuset cgroup of this process from `/proc/self/cgroup`: `(true, path)` for a
/// v1 hierarchy carrying the `cpuset` controller, `(false, path)` for the v2 `0::` line.
/// Returns the v1 entry when both exist.
pub fn cgroup_cpuset(text: &str) -> Result<Option<(bool, String)>, String> {
    let mut v2 = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut it = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (it.next(), it.next(), it.next()) else {
            return Err(format!("bad cgroup line {line:?}"));
        };
        if ctrls.split(',').any(|c| c == "cpuset") {
            return Ok(Some((true, path.to_string())));
        }
        if id == "0" && ctrls.is_empty() {
            v2 = Some((false, path.to_string()));
        }
    }
    Ok(v2)
}

/// `Cpus_allowed_list` from `/proc/self/status`, `None` when the line is absent.
pub fn status_cpus_allowed(text: &str) -> Result<Option<CpuSet>, String> {
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Cpus_allowed_list:") {
            return cpuset_list(v).map(Some);
        }
    }
    Ok(None)
}

/// `Mems_allowed_list` of /proc/PID/status.
pub fn status_mems_allowed(text: &str) -> Result<Option<CpuSet>, String> {
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Mems_allowed_list:") {
            return cpuset_list(v).map(Some);
        }
    }
    Ok(None)
}

/// `/proc/net/if_inet6`: (interface, address) pairs.
pub fn if_inet6(text: &str) -> Result<Vec<(String, std::net::Ipv6Addr)>, String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 6 || w[0].len() != 32 {
            return Err(format!("bad if_inet6 line {line:?}"));
        }
        let v = u128::from_str_radix(w[0], 16).map_err(|_| format!("bad address {:?}", w[0]))?;
        out.push((w[5].to_string(), std::net::Ipv6Addr::from(v)));
    }
    Ok(out)
}

/// The trailing number of an IRQ or queue name (`virtio2-input.3` -> 3,
/// `eth0-TxRx-12` -> 12, `rx-0` -> 0).
pub fn trailing_number(name: &str) -> Option<u32> {
    let digits = name
        .bytes()
        .rev()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 {
        return None;
    }
    name[name.len() - digits..].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes_and_kinds() {
        assert_eq!(cache_size("32K\n"), Ok(32 * 1024));
        assert_eq!(cache_size("1M"), Ok(1 << 20));
        assert_eq!(cache_size("512"), Ok(512));
        assert!(cache_size("K").is_err());
        assert!(cache_size("99999999999999999999G").is_err());
        assert_eq!(cache_kind("Data\n"), Ok(Some(CacheKind::Data)));
        assert_eq!(cache_kind("Unknown"), Ok(None));
        assert!(cache_kind("").is_err());
    }

    #[test]
    fn ids() {
        assert_eq!(opt_id("-1\n"), Ok(None));
        assert_eq!(opt_id("36"), Ok(Some(36)));
        assert!(opt_id("x").is_err());
        assert!(opt_id("99999999999").is_err());
    }

    #[test]
    fn meminfo_forms() {
        assert_eq!(
            meminfo_total_bytes("Node 3 MemTotal:       1024 kB\nNode 3 MemFree: 1 kB\n"),
            Ok(Some(1 << 20))
        );
        assert_eq!(meminfo_total_bytes("MemTotal: 2 kB"), Ok(Some(2048)));
        assert_eq!(meminfo_total_bytes("MemFree: 2 kB"), Ok(None));
        assert!(meminfo_total_bytes("Node 0 MemTotal: lots").is_err());
    }

    #[test]
    fn cpuinfo_blocks() {
        let t = "processor\t: 0\nphysical id\t: 1\ncore id\t\t: 5\n\nprocessor\t: 1\n\
                 physical id\t: 0\n\nvendor_id : IBM\nprocessor 0: version = FF\n";
        let v = cpuinfo(t).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].physical_id, v[0].core_id), (Some(1), Some(5)));
        assert_eq!((v[1].physical_id, v[1].core_id), (Some(0), None));
        assert!(cpuinfo("processor : 0\ncore id : x\n").is_err());
    }

    #[test]
    fn interrupts_names() {
        let t = "           CPU0       CPU1\n\
   26:          0         13  IO-APIC   4-edge      ttyS0\n\
   38:          0       1658 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\n\
  120:          1          0  IR-PCI-MSI 1048576-edge  eth0-TxRx-0\n\
   19:          1          0   IO-APIC  19-fasteoi   ehci_hcd:usb1, eth0\n\
  NMI:          0          0   Non-maskable interrupts\n\
  ERR:          0\n";
        let m = interrupts(t).unwrap();
        assert_eq!(m[&38], "virtio2-input.0");
        assert_eq!(m[&120], "eth0-TxRx-0");
        assert_eq!(m[&26], "ttyS0");
        assert_eq!(m[&19], "ehci_hcd:usb1, eth0");
        assert_eq!(m.len(), 4);
    }

    #[test]
    fn mount_tables() {
        let mi = "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n\
                  41 31 0:38 /x /sys/fs/cgroup/uni\\040fied rw - cgroup2 cgroup2 rw\n";
        let m = mountinfo(mi).unwrap();
        assert_eq!(m[0].options, "rw,cpuset");
        assert_eq!(m[1].mount_point, "/sys/fs/cgroup/uni fied");
        assert_eq!(m[1].root, "/x");
        assert!(mountinfo("1 2 3\n").is_err());
        let m = mounts("none /dev/cpuset cpuset rw 0 0\n").unwrap();
        assert_eq!(m[0].fs_type, "cpuset");
        assert!(mounts("none /dev\n").is_err());
    }

    #[test]
    fn cgroup_lines() {
        assert_eq!(
            cgroup_cpuset("4:memory:/m\n3:cpuset:/a/b\n0::/u\n"),
            Ok(Some((true, "/a/b".into())))
        );
        assert_eq!(cgroup_cpuset("0::/u\n"), Ok(Some((false, "/u".into()))));
        assert_eq!(cgroup_cpuset("1:name=systemd:/\n"), Ok(None));
        assert!(cgroup_cpuset("garbage\n").is_err());
    }

    #[test]
    fn inet6() {
        let v = if_inet6("fd000000000000000000000000000002 04 40 00 82     eth0\n").unwrap();
        assert_eq!(v[0].0, "eth0");
        assert_eq!(v[0].1, "fd00::2".parse::<std::net::Ipv6Addr>().unwrap());
        assert!(if_inet6("zz 1 2 3 4 eth0").is_err());
    }

    #[test]
    fn trailing_numbers() {
        assert_eq!(trailing_number("virtio2-input.3"), Some(3));
        assert_eq!(trailing_number("eth0-TxRx-12"), Some(12));
        assert_eq!(trailing_number("virtio2-config"), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        // The readers must return Ok or Err, never panic, on arbitrary text.
        #[test]
        fn parsers_never_panic(s in "\\PC{0,80}") {
            let _ = cpuset_list(&s);
            let _ = cpuset_mask(&s);
            let _ = cache_size(&s);
            let _ = distance_row(&s);
            let _ = meminfo_total_bytes(&s);
            let _ = cpuinfo(&s);
            let _ = interrupts(&s);
            let _ = mountinfo(&s);
            let _ = mounts(&s);
            let _ = cgroup_cpuset(&s);
            let _ = status_cpus_allowed(&s);
            let _ = if_inet6(&s);
            let _ = opt_id(&s);
        }

        #[test]
        fn structured_garbage_never_panics(
            lines in proptest::collection::vec("[0-9a-fA-Fx:,\\- kBMK\\\\]{0,30}", 0..6)
        ) {
            let s = lines.join("\n");
            let _ = cpuset_list(&s);
            let _ = cpuset_mask(&s);
            let _ = interrupts(&s);
            let _ = mountinfo(&s);
            let _ = meminfo_total_bytes(&s);
            let _ = distance_row(&s);
        }
    }
}
