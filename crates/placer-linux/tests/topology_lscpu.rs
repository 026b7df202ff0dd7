//! placer's topology reader against util-linux `lscpu` on util-linux's sysfs dumps
//! (tests/fixtures/lscpu, GPL-2.0-or-later test data; see its README).
//!
//! Compared for each dump: the number of present CPUs, the online and offline lists, the
//! NUMA node CPU lists and the cache instance counts of the summary; and from the
//! `--parse` CSV, the partition of the listed CPUs by Core, Socket, Node and each cache
//! column. Exceptions, with reasons, are in [`exception`].

mod topology_util;

use placer_core::topology::CacheKind;
use placer_core::{CpuSet, Topology};
use std::collections::BTreeMap;
use topology_util::*;

struct Expected {
    present: usize,
    online: CpuSet,
    offline: CpuSet,
    nodes: BTreeMap<u32, CpuSet>,
    /// "L1d" -> instances
    cache_instances: BTreeMap<String, usize>,
    /// column name -> partition of the listed CPUs
    columns: BTreeMap<String, Partition>,
    listed: CpuSet,
}

fn parse_expected(text: &str) -> Expected {
    let mut e = Expected {
        present: 0,
        online: CpuSet::new(),
        offline: CpuSet::new(),
        nodes: BTreeMap::new(),
        cache_instances: BTreeMap::new(),
        columns: BTreeMap::new(),
        listed: CpuSet::new(),
    };
    let mut lines = text.lines();
    for line in lines.by_ref() {
        if line.starts_with("# ") {
            break;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "CPU(s)" => e.present = v.parse().unwrap(),
            "On-line CPU(s) list" => e.online = CpuSet::parse_list(v).unwrap(),
            "Off-line CPU(s) list" => e.offline = CpuSet::parse_list(v).unwrap(),
            _ => {
                if let Some(n) = k
                    .strip_prefix("NUMA node")
                    .and_then(|r| r.strip_suffix(" CPU(s)"))
                {
                    e.nodes
                        .insert(n.parse().unwrap(), CpuSet::parse_list(v).unwrap());
                } else if let Some(level) = k.strip_suffix(" cache") {
                    if let Some(i) = v.find(" instance") {
                        let n = v[..i].rsplit('(').next().unwrap().trim();
                        e.cache_instances
                            .insert(level.to_string(), n.parse().unwrap());
                    }
                }
            }
        }
    }
    // The first `# CPU,...` header starts the logical --parse section.
    let header = lines
        .by_ref()
        .find(|l| l.starts_with("# CPU,"))
        .expect("no --parse section");
    let cols: Vec<&str> = header.trim_start_matches("# ").split(',').collect();
    let mut keyed: BTreeMap<String, BTreeMap<String, CpuSet>> = BTreeMap::new();
    for line in lines {
        if line.trim().is_empty() || line.starts_with('#') {
            break;
        }
        let vals: Vec<&str> = line.split(',').collect();
        let cpu: u32 = vals[0].parse().unwrap();
        e.listed.insert(cpu);
        for (c, v) in cols.iter().zip(&vals).skip(1) {
            if c.is_empty() || v.is_empty() || *v == "-" {
                continue;
            }
            keyed
                .entry(c.to_string())
                .or_default()
                .entry(v.to_string())
                .or_default()
                .insert(cpu);
        }
    }
    e.columns = keyed
        .into_iter()
        .map(|(k, m)| (k, m.into_values().collect()))
        .collect();
    e
}

/// (level, kind) of an lscpu cache column (`L1d`, `L1i`, `L2`, `L2d`, ...); `None` kind
/// means unified or data.
fn cache_col(name: &str) -> Option<(u8, Option<CacheKind>)> {
    let r = name.strip_prefix('L')?;
    let level: u8 = r[..1].parse().ok()?;
    Some(match &r[1..] {
        "d" => (level, Some(CacheKind::Data)),
        "i" => (level, Some(CacheKind::Instruction)),
        "" => (level, None),
        _ => return None,
    })
}

fn ours(topo: &Topology, shown: &CpuSet, col: &str) -> Option<Partition> {
    Some(match col {
        "Core" => ours_by(topo, shown, |c| c.core),
        "Socket" => ours_by(topo, shown, |c| c.package),
        "Node" => ours_by(topo, shown, |c| c.node),
        _ => {
            let (level, kind) = cache_col(col)?;
            ours_caches(topo, shown, level, kind)
        }
    })
}

/// Where lscpu's answer is a questionable reading of the hardware: (dump, column) ->
/// what is checked instead, and why.
fn exception(dump: &str, col: &str) -> Option<&'static str> {
    match (dump, col) {
        ("vmware_fpe", "Core") => Some(
            "refine: AMD Piledriver modules are reported by the kernel as thread siblings, \
             but the two CPUs of a module have distinct core_ids and private L1d caches: \
             they are two integer cores sharing a front end (hwloc shows them as two \
             cores, see 64amd64-4s2n4ca2co). placer's cores must each lie inside one of \
             lscpu's",
        ),
        ("arm-A510-A710-A715-X3", "Core") => Some(
            "refine: lscpu numbers cores by the kernel's core_id, which on this Arm SoC \
             restarts in each cluster, so it joins CPUs 0,3,5,7 of three clusters into \
             one 'core'; no CPU here has an SMT sibling. placer's cores (one CPU each) \
             must each lie inside one of lscpu's",
        ),
        ("arm-A510-A710-A715-X3", "Socket") => Some(
            "refine: the kernel gives each cluster its own physical_package_id (0-2, \
             3-6, 7) while lscpu's logical view puts the SoC in one socket. placer keeps \
             the kernel's packages, which must each lie inside lscpu's socket",
        ),
        _ => None,
    }
}

fn refines(fine: &Partition, coarse: &Partition) -> bool {
    fine.iter().all(|f| coarse.iter().any(|c| f.is_subset(c))) && union_of(fine) == union_of(coarse)
}

#[test]
fn lscpu_dumps_match_expected() {
    let dir = lscpu_dir();
    let mut dumps: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            n.strip_suffix(".tar.gz").map(str::to_string)
        })
        .collect();
    dumps.sort();
    assert!(!dumps.is_empty());
    let mut failures = Vec::new();
    let mut compared = 0;
    let paths: Vec<_> = dumps
        .iter()
        .map(|n| dir.join(format!("{n}.tar.gz")))
        .collect();
    let unpacked = unpack_all(&paths);
    for (name, u) in dumps.iter().zip(&unpacked) {
        let exp_path = dir.join(format!("lscpu-{name}"));
        let Ok(text) = std::fs::read_to_string(&exp_path) else {
            eprintln!("{name}: no expected output, skipped");
            continue;
        };
        let exp = parse_expected(&text);
        let topo = placer_linux::topology::read(&u.root).unwrap_or_else(|e| panic!("{name}: {e}"));
        topo.validate().unwrap();
        let mut fail = |m: String| failures.push(format!("{name}: {m}"));
        if topo.cpus.len() != exp.present {
            fail(format!(
                "CPU(s): ours {}, lscpu {}",
                topo.cpus.len(),
                exp.present
            ));
        }
        if topo.online() != exp.online {
            fail(format!(
                "online: ours {}, lscpu {}",
                topo.online(),
                exp.online
            ));
        }
        let offline = topo.present().difference(&topo.online());
        if offline != exp.offline {
            fail(format!("offline: ours {offline}, lscpu {}", exp.offline));
        }
        for (id, cpus) in &exp.nodes {
            let ours = topo.node(*id).map(|n| n.cpus.clone());
            if ours.as_ref() != Some(cpus) {
                fail(format!("node {id}: ours {ours:?}, lscpu {cpus}"));
            }
        }
        for (lvl, n) in &exp.cache_instances {
            if let Some((level, kind)) = cache_col(lvl) {
                let got = ours_caches(&topo, &topo.online(), level, kind).len();
                if got != *n {
                    fail(format!("{lvl} instances: ours {got}, lscpu {n}"));
                }
            }
        }
        if exp.listed != topo.online() {
            fail(format!(
                "--parse lists {}, ours online {}",
                exp.listed,
                topo.online()
            ));
        }
        for (col, want) in &exp.columns {
            let Some(got) = ours(&topo, &exp.listed, col) else {
                continue;
            };
            compared += 1;
            match exception(name, col) {
                Some(why) => {
                    eprintln!("{name}: {col}: {why}");
                    if !refines(&got, want) {
                        fail(format!(
                            "{col}: ours {} does not refine lscpu {}",
                            show(&got),
                            show(want)
                        ));
                    }
                }
                None => {
                    if &got != want {
                        fail(format!("{col}: ours {} / lscpu {}", show(&got), show(want)));
                    }
                }
            }
        }
    }
    assert!(compared > 30, "only {compared} columns compared");
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}
