//! Which hardware events give seed 003's signals on this CPU, resolved to perf configs.
//!
//! The paper (docs/seeds.md, Table 1, on a Xeon X5570, Nehalem)
//! reads four things: the offcore request buffer full count (super queue full) per core,
//! LLC references (`UNC_LLC_HITS.ANY + UNC_LLC_MISS.ANY`), memory bandwidth
//! (`64 * (UNC_IMC_NORMAL_READS.ANY + UNC_IMC_WRITES.FULL.ANY)` per second) and L2 prefetch
//! requests. Placement needs them *per process*, so this module picks, per CPU generation,
//! core events that can follow a task (`perf_event_open(pid = tid, cpu = -1)`):
//!
//! | signal (rate-map name) | Nehalem/Westmere | Sandy/Ivy Bridge | Haswell..Comet Lake, Skylake-SP | Ice Lake, Tiger/Rocket Lake | AMD Zen 1/2 | AMD Zen 3/4 |
//! |---|---|---|---|---|---|---|
//! | `offcore_requests_buffer_full` | OFFCORE_REQUESTS_SQ_FULL 0xB2/0x01 | OFFCORE_REQUESTS_BUFFER.SQ_FULL 0xB2/0x01 | same 0xB2/0x01 | SQ_MISC.SQ_FULL 0xF4/0x04 (cycles) | proxy: l2_fill_pending.l2_fill_busy 0x6D/0x01 | proxy: ls_alloc_mab_count 0x5F |
//! | `llc_references` | LONGEST_LAT_CACHE.REFERENCE 0x2E/0x4F (generic cache-references) | same | same | same | proxy: l2_cache_req_stat.ic_dc_miss_in_l2 0x64/0x09 (requests that go on to L3) | same |
//! | `l2_prefetch_requests` | L2_RQSTS.PREFETCHES 0x24/0xC0 | L2_RQSTS.ALL_PF 0x24/0xC0 | L2_RQSTS.ALL_PF 0x24/0xF8 | — | l2_pf_miss_l2_l3 0x72/0xFF (to memory) | l2_pf_miss_l2_l3 0x72 |
//!
//! Sources of the codes: Intel's published event lists (intel/perfmon, as carried in Linux's
//! tools/perf/pmu-events/arch/x86/{nehalemep,westmereep-dp,sandybridge,ivybridge,haswell,
//! broadwell,skylake,skylakex,icelake}) and AMD's (tools/perf/pmu-events/arch/x86/amdzen1..4,
//! from the PPRs); only the facts (code, unit mask, meaning) are used. Intel raw configs are
//! `event | umask << 8`; AMD's are `event[7:0] | umask << 8 | event[11:8] << 32`.
//!
//! Differences from the paper, stated plainly:
//! - LLC references: the paper's `UNC_LLC_*` are uncore (per socket) events that cannot be
//!   attributed to a task; the core event LONGEST_LAT_CACHE.REFERENCE counts the same
//!   requests from the task's core (it is what perf's generic `cache-references` means on
//!   Intel), so the generic event is used.
//! - Memory bandwidth: per socket only (uncore IMC) or per resctrl monitoring group (MBM);
//!   see [`memory_bandwidth_source`]. It explains the classes; it does not classify.
//! - Ice Lake and later count super-queue-full *cycles*, not requests; AMD Zen has no
//!   "buffer full" count at all, so the listed events are proxies for the same thing (miss
//!   traffic queued off the core). Thresholds must be calibrated for them (`placer top`
//!   shows the rates) or the relative mode used.
//!
//! Fallback, in order: an unknown x86 generation or another architecture gets the generic
//! `cache-references` and `cache-misses` (PERF_COUNT_HW_CACHE_*), and the classifier uses
//! LLC misses as the aggressiveness proxy (the LLC miss rate is the classic contentiousness
//! proxy, Zhuravlev et al., ASPLOS 2010); without a core PMU at all (virtual machines such as
//! this one) the `contention` policy is disabled with the reason from [`pmu_status`].
//! libpfm4 is not used: these few events are tabled here; a libpfm4 feature could resolve
//! names for other CPUs later.

use crate::error::{LinuxError, Result};
use placer_core::sample::CounterEvent;
use std::path::{Path, PathBuf};

/// CPU identity from /proc/cpuinfo (first processor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuId {
    pub vendor: String,
    pub family: u32,
    pub model: u32,
    pub model_name: String,
}

/// The generations with tabled events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uarch {
    IntelNehalem,
    IntelWestmere,
    IntelSandyBridge,
    IntelIvyBridge,
    /// Haswell, Broadwell, Skylake (client and SP/Cascade Lake), Kaby/Coffee/Comet Lake.
    IntelHaswellToSkylake,
    /// Ice Lake (client/server), Tiger Lake, Rocket Lake.
    IntelIceLake,
    AmdZen12,
    AmdZen34,
    /// Anything else: generic events only.
    Generic,
}

impl Uarch {
    pub fn name(self) -> &'static str {
        match self {
            Uarch::IntelNehalem => "intel-nehalem",
            Uarch::IntelWestmere => "intel-westmere",
            Uarch::IntelSandyBridge => "intel-sandybridge",
            Uarch::IntelIvyBridge => "intel-ivybridge",
            Uarch::IntelHaswellToSkylake => "intel-haswell..skylake",
            Uarch::IntelIceLake => "intel-icelake",
            Uarch::AmdZen12 => "amd-zen1/2",
            Uarch::AmdZen34 => "amd-zen3/4",
            Uarch::Generic => "generic",
        }
    }
}

/// Parses the first processor block of /proc/cpuinfo. Pure. None without vendor/family/model
/// (e.g. Arm's cpuinfo, which has no `vendor_id`).
pub fn parse_cpuinfo(text: &str) -> Option<CpuId> {
    let (mut vendor, mut family, mut model, mut name) = (None, None, None, String::new());
    for line in text.lines() {
        if line.trim().is_empty() && vendor.is_some() {
            break; // end of the first processor block
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "vendor_id" => vendor = Some(v.to_string()),
            "cpu family" => family = v.parse().ok(),
            "model" => model = v.parse().ok(),
            "model name" => name = v.to_string(),
            _ => {}
        }
    }
    Some(CpuId {
        vendor: vendor?,
        family: family?,
        model: model?,
        model_name: name,
    })
}

/// The generation of a CPU (Intel family 6 display models; AMD family 0x17/0x19).
pub fn uarch(id: &CpuId) -> Uarch {
    match (id.vendor.as_str(), id.family, id.model) {
        ("GenuineIntel", 6, 26 | 30 | 31 | 46) => Uarch::IntelNehalem,
        ("GenuineIntel", 6, 37 | 44 | 47) => Uarch::IntelWestmere,
        ("GenuineIntel", 6, 42 | 45) => Uarch::IntelSandyBridge,
        ("GenuineIntel", 6, 58 | 62) => Uarch::IntelIvyBridge,
        (
            "GenuineIntel",
            6,
            60 | 63 | 69 | 70 | 61 | 71 | 79 | 86 | 78 | 94 | 85 | 142 | 158 | 165 | 166,
        ) => Uarch::IntelHaswellToSkylake,
        ("GenuineIntel", 6, 106 | 108 | 125 | 126 | 140 | 141 | 167) => Uarch::IntelIceLake,
        ("AuthenticAMD" | "HygonGenuine", 0x17 | 0x18, _) => Uarch::AmdZen12,
        ("AuthenticAMD", 0x19, _) => Uarch::AmdZen34,
        _ => Uarch::Generic,
    }
}

fn intel(event: u64, umask: u64) -> u64 {
    event | umask << 8
}

fn amd(event: u64, umask: u64) -> u64 {
    (event & 0xff) | umask << 8 | (event >> 8) << 32
}

fn raw(name: &str, config: u64) -> CounterEvent {
    CounterEvent::Raw {
        name: name.to_string(),
        config,
    }
}

/// Per-task events for seed 003 on `u`: cycles and instructions first, then the signals
/// under their rate-map names ([`placer_core::classify`]).
pub fn events_for(u: Uarch) -> Vec<CounterEvent> {
    use placer_core::classify::{BUFFER_FULL, L2_PREFETCH, LLC_REFERENCES};
    let mut v = vec![CounterEvent::Cycles, CounterEvent::Instructions];
    let bf = |c| raw(BUFFER_FULL, c);
    let pf = |c| raw(L2_PREFETCH, c);
    match u {
        Uarch::IntelNehalem | Uarch::IntelWestmere => {
            v.extend([bf(intel(0xB2, 0x01)), CounterEvent::LlcReferences]);
            v.push(pf(intel(0x24, 0xC0)));
        }
        Uarch::IntelSandyBridge | Uarch::IntelIvyBridge => {
            v.extend([bf(intel(0xB2, 0x01)), CounterEvent::LlcReferences]);
            v.push(pf(intel(0x24, 0xC0)));
        }
        Uarch::IntelHaswellToSkylake => {
            v.extend([bf(intel(0xB2, 0x01)), CounterEvent::LlcReferences]);
            v.push(pf(intel(0x24, 0xF8)));
        }
        Uarch::IntelIceLake => {
            v.extend([bf(intel(0xF4, 0x04)), CounterEvent::LlcReferences]);
        }
        Uarch::AmdZen12 => {
            v.extend([
                bf(amd(0x6D, 0x01)),
                raw(LLC_REFERENCES, amd(0x64, 0x09)),
                pf(amd(0x72, 0xFF)),
            ]);
        }
        Uarch::AmdZen34 => {
            v.extend([
                bf(amd(0x5F, 0x00)),
                raw(LLC_REFERENCES, amd(0x64, 0x09)),
                pf(amd(0x72, 0xFF)),
            ]);
        }
        Uarch::Generic => {
            v.extend([CounterEvent::LlcReferences, CounterEvent::LlcMisses]);
        }
    }
    v
}

/// Whether a core PMU is visible under `root` (sysfs `event_source/devices/cpu`, or the
/// hybrid `cpu_core`); Err with the reason otherwise.
pub fn pmu_status(root: &Path) -> std::result::Result<String, String> {
    let dir = root.join("sys/bus/event_source/devices");
    for name in ["cpu", "cpu_core", "armv8_pmuv3_0"] {
        let t = dir.join(name).join("type");
        if let Ok(s) = std::fs::read_to_string(&t) {
            return Ok(format!("core PMU `{name}` (perf type {})", s.trim()));
        }
    }
    Err(format!(
        "no core PMU under {} (no `cpu`/`cpu_core` device): hardware counters unavailable, \
         e.g. a virtual machine without a virtual PMU",
        dir.display()
    ))
}

/// What was chosen for this machine, for logs and `placer top`.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    pub cpu: Option<CpuId>,
    pub uarch: Uarch,
    pub events: Vec<CounterEvent>,
    pub pmu: std::result::Result<String, String>,
    pub memory_bandwidth: MemBwSource,
    /// Set when proxies or generic events stand in for the paper's signals.
    pub note: Option<String>,
}

/// Resolves events and sources for the machine under `root`.
pub fn resolve(root: &Path) -> Result<Resolution> {
    let path = root.join("proc/cpuinfo");
    let cpu = match std::fs::read_to_string(&path) {
        Ok(t) => parse_cpuinfo(&t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(LinuxError::io(path, e)),
    };
    let u = cpu.as_ref().map_or(Uarch::Generic, uarch);
    let note = match u {
        Uarch::Generic => Some(
            "unknown CPU generation: generic cache-references/cache-misses; LLC misses stand in \
             for buffer-full (calibrate thresholds or use relative mode)"
                .to_string(),
        ),
        Uarch::IntelIceLake => {
            Some("super-queue-full counts cycles on this generation: calibrate thresholds".into())
        }
        Uarch::AmdZen12 | Uarch::AmdZen34 => Some(
            "AMD Zen has no buffer-full event: miss-buffer occupancy is the proxy; calibrate \
             thresholds or use relative mode"
                .into(),
        ),
        _ => None,
    };
    Ok(Resolution {
        events: events_for(u),
        uarch: u,
        cpu,
        pmu: pmu_status(root),
        memory_bandwidth: memory_bandwidth_source(root, u),
        note,
    })
}

/// Where memory bandwidth can be read on this machine.
#[derive(Debug, Clone, PartialEq)]
pub enum MemBwSource {
    /// resctrl memory-bandwidth monitoring: per monitoring group, `mbm_total_bytes` under
    /// each `mon_data/mon_L3_*` (a group holding one process gives that process's bytes).
    ResctrlMbm {
        resctrl: PathBuf,
    },
    /// Uncore memory-controller PMUs, per socket (system-wide counting, one CPU per socket):
    /// (perf type, read config, write config) per PMU; each count is 64 bytes.
    UncoreImc {
        pmus: Vec<(String, u32, u64, u64)>,
    },
    None(String),
}

/// Finds a memory bandwidth source: resctrl MBM first (per process), then uncore IMC (per
/// socket: Nehalem's `UNC_IMC_NORMAL_READS.ANY` 0x2C/0x07 and `UNC_IMC_WRITES.FULL.ANY`
/// 0x2F/0x07 on the `uncore` PMU as in the paper; Sandy Bridge-EP and later servers'
/// CAS_COUNT.RD 0x04/0x03 and CAS_COUNT.WR 0x04/0x0C on `uncore_imc_N`).
pub fn memory_bandwidth_source(root: &Path, u: Uarch) -> MemBwSource {
    let resctrl = root.join("sys/fs/resctrl");
    if let Ok(f) = std::fs::read_to_string(resctrl.join("info/L3_MON/mon_features")) {
        if f.lines().any(|l| l.trim() == "mbm_total_bytes") {
            return MemBwSource::ResctrlMbm { resctrl };
        }
    }
    let dir = root.join("sys/bus/event_source/devices");
    let mut pmus = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&dir) {
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for n in names {
            let codes = match (u, n.as_str()) {
                (Uarch::IntelNehalem | Uarch::IntelWestmere, "uncore") => {
                    Some((intel(0x2C, 0x07), intel(0x2F, 0x07)))
                }
                (_, n) if n.starts_with("uncore_imc_") => {
                    Some((intel(0x04, 0x03), intel(0x04, 0x0C)))
                }
                _ => None,
            };
            let ty = std::fs::read_to_string(dir.join(&n).join("type"))
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok());
            if let (Some((r, w)), Some(ty)) = (codes, ty) {
                pmus.push((n, ty, r, w));
            }
        }
    }
    if !pmus.is_empty() {
        return MemBwSource::UncoreImc { pmus };
    }
    MemBwSource::None(
        "no resctrl MBM (sys/fs/resctrl/info/L3_MON) and no uncore memory-controller PMU".into(),
    )
}

/// Total bytes counted by a resctrl monitoring group (`""` = the default group): the sum of
/// `mbm_total_bytes` over its `mon_data/mon_L3_*` domains. `Unavailable` readings (a domain
/// that cannot count) are skipped.
pub fn read_mbm_total_bytes(resctrl: &Path, group: &str) -> Result<u64> {
    let base = if group.is_empty() {
        resctrl.join("mon_data")
    } else {
        resctrl.join("mon_groups").join(group).join("mon_data")
    };
    let rd = std::fs::read_dir(&base).map_err(|e| LinuxError::io(&base, e))?;
    let mut total = 0u64;
    for e in rd.filter_map(|e| e.ok()) {
        if !e.file_name().to_string_lossy().starts_with("mon_L3_") {
            continue;
        }
        let p = e.path().join("mbm_total_bytes");
        let s = std::fs::read_to_string(&p).map_err(|err| LinuxError::io(&p, err))?;
        match s.trim().parse::<u64>() {
            Ok(v) => total += v,
            Err(_) if s.trim() == "Unavailable" => {}
            Err(_) => return Err(LinuxError::parse(&p, format!("not a byte count: {s:?}"))),
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use placer_core::classify::{BUFFER_FULL, L2_PREFETCH, LLC_REFERENCES};
    use placer_testkit::FakeRoot;

    const X5570: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 26\nmodel name\t: Intel(R) Xeon(R) CPU           X5570  @ 2.93GHz\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n";

    fn config_of(ev: &[CounterEvent], name: &str) -> Option<u64> {
        ev.iter().find_map(|e| match e {
            CounterEvent::Raw { name: n, config } if n == name => Some(*config),
            _ => None,
        })
    }

    #[test]
    fn parses_cpuinfo_and_identifies_generations() {
        let id = parse_cpuinfo(X5570).unwrap();
        assert_eq!((id.family, id.model), (6, 26));
        assert!(id.model_name.contains("X5570"));
        assert_eq!(uarch(&id), Uarch::IntelNehalem);
        let mk = |v: &str, f, m| CpuId {
            vendor: v.into(),
            family: f,
            model: m,
            model_name: String::new(),
        };
        assert_eq!(
            uarch(&mk("GenuineIntel", 6, 63)),
            Uarch::IntelHaswellToSkylake
        ); // E5-2697 v3
        assert_eq!(uarch(&mk("GenuineIntel", 6, 45)), Uarch::IntelSandyBridge);
        assert_eq!(uarch(&mk("GenuineIntel", 6, 167)), Uarch::IntelIceLake); // this VM's CPU
        assert_eq!(uarch(&mk("AuthenticAMD", 0x17, 1)), Uarch::AmdZen12);
        assert_eq!(uarch(&mk("AuthenticAMD", 0x19, 0x11)), Uarch::AmdZen34);
        assert_eq!(uarch(&mk("AuthenticAMD", 0x10, 9)), Uarch::Generic); // Magny-Cours
        assert_eq!(uarch(&mk("GenuineIntel", 15, 6)), Uarch::Generic); // NetBurst
        assert_eq!(parse_cpuinfo("processor : 0\nBogoMIPS : 50\n"), None); // Arm
    }

    #[test]
    fn event_tables_encode_configs() {
        let n = events_for(Uarch::IntelNehalem);
        assert_eq!(config_of(&n, BUFFER_FULL), Some(0x01B2));
        assert_eq!(config_of(&n, L2_PREFETCH), Some(0xC024));
        assert!(n.contains(&CounterEvent::LlcReferences));
        let h = events_for(Uarch::IntelHaswellToSkylake);
        assert_eq!(config_of(&h, L2_PREFETCH), Some(0xF824));
        let i = events_for(Uarch::IntelIceLake);
        assert_eq!(config_of(&i, BUFFER_FULL), Some(0x04F4));
        let z = events_for(Uarch::AmdZen12);
        assert_eq!(config_of(&z, LLC_REFERENCES), Some(0x0964));
        assert_eq!(config_of(&z, BUFFER_FULL), Some(0x016D));
        assert_eq!(
            amd(0x1C0, 0x02),
            0x1_0000_02C0,
            "event bits 11:8 go to config 35:32"
        );
        let g = events_for(Uarch::Generic);
        assert!(g.contains(&CounterEvent::LlcMisses) && config_of(&g, BUFFER_FULL).is_none());
        // Every table has cycles and instructions and both classifying signals (or the
        // generic pair).
        for u in [
            Uarch::IntelNehalem,
            Uarch::IntelWestmere,
            Uarch::IntelSandyBridge,
            Uarch::IntelIvyBridge,
            Uarch::IntelHaswellToSkylake,
            Uarch::IntelIceLake,
            Uarch::AmdZen12,
            Uarch::AmdZen34,
        ] {
            let e = events_for(u);
            let names: Vec<&str> = e.iter().map(|x| x.name()).collect();
            for want in ["cycles", "instructions", BUFFER_FULL, LLC_REFERENCES] {
                assert!(names.contains(&want), "{} lacks {want}", u.name());
            }
        }
    }

    #[test]
    fn resolve_on_temp_roots() {
        let r = FakeRoot::new("pmu-resolve");
        r.write("proc/cpuinfo", X5570);
        let res = resolve(r.path()).unwrap();
        assert_eq!(res.uarch, Uarch::IntelNehalem);
        assert!(res.note.is_none());
        let e = res.pmu.unwrap_err();
        assert!(e.contains("no core PMU"), "{e}");
        assert!(matches!(res.memory_bandwidth, MemBwSource::None(_)));
        r.write("sys/bus/event_source/devices/cpu/type", "4\n");
        r.write("sys/bus/event_source/devices/uncore/type", "9\n");
        let res = resolve(r.path()).unwrap();
        assert!(res.pmu.unwrap().contains("perf type 4"));
        assert_eq!(
            res.memory_bandwidth,
            MemBwSource::UncoreImc {
                pmus: vec![("uncore".into(), 9, 0x072C, 0x072F)]
            }
        );
        // No cpuinfo: generic, with a note.
        let empty = FakeRoot::new("pmu-empty");
        let res = resolve(empty.path()).unwrap();
        assert_eq!(res.uarch, Uarch::Generic);
        assert!(res.note.unwrap().contains("generic"));
    }

    #[test]
    fn resctrl_mbm_sums_domains() {
        let r = FakeRoot::new("pmu-mbm");
        let rc = "sys/fs/resctrl";
        r.write(
            format!("{rc}/info/L3_MON/mon_features"),
            "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n",
        );
        r.write(
            format!("{rc}/mon_groups/app1/mon_data/mon_L3_00/mbm_total_bytes"),
            "1000\n",
        );
        r.write(
            format!("{rc}/mon_groups/app1/mon_data/mon_L3_01/mbm_total_bytes"),
            "24\n",
        );
        r.write(
            format!("{rc}/mon_groups/app1/mon_data/mon_L3_02/mbm_total_bytes"),
            "Unavailable\n",
        );
        let src = memory_bandwidth_source(r.path(), Uarch::IntelHaswellToSkylake);
        let MemBwSource::ResctrlMbm { resctrl } = src else {
            panic!("expected resctrl, got {src:?}");
        };
        assert_eq!(read_mbm_total_bytes(&resctrl, "app1").unwrap(), 1024);
        let err = read_mbm_total_bytes(&resctrl, "nope")
            .unwrap_err()
            .to_string();
        assert!(err.contains("mon_groups/nope"), "{err}");
    }

    #[test]
    fn fixture_machines_from_lscpu_dumps() {
        // Real cpuinfo files from util-linux's test dumps, in the crate's test fixtures.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lscpu");
        if std::process::Command::new("tar")
            .arg("--version")
            .output()
            .is_err()
        {
            placer_testkit::skip("no tar");
            return;
        }
        let t = FakeRoot::new("pmu-fixtures");
        for (tarball, top, want) in [
            (
                "x86_64-epyc_7451.tar.gz",
                "x86_64-epyc_7451",
                Uarch::AmdZen12,
            ),
            ("x86_64-64cpu.tar.gz", "x86_64-64cpu", Uarch::IntelNehalem), // Xeon X7550
        ] {
            assert_eq!(t.unpack(&dir.join(tarball)), t.join(top));
            let res = resolve(&t.join(top)).unwrap();
            assert_eq!(res.uarch, want, "{tarball}");
        }
    }
}
