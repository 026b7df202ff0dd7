//! placer's topology reader against hwloc's expected output for hwloc's Linux snapshots
//! (tests/fixtures/hwloc, BSD-3 from hwloc). For each `.test` descriptor the snapshot is
//! unpacked into a temporary directory and read; the expected `.console` tree or `.xml`
//! is parsed into facts and compared:
//! - the set of PUs shown (online and allowed; online only with `--disallowed`);
//! - the partition of those PUs by package, core, die, NUMA node and each cache
//!   (level, kind);
//! - the NUMA distance matrix, mapped to OS node ids.
//!
//! hwloc-only interpretations are not compared: `Group` objects, memory-side caches,
//! CPU kinds' efficiency ranks, memory sizes. Where hwloc hides a NUMA node because the
//! cpuset's `mems` exclude it (16amd64-8n2c-cpusets: nodes 0 and 5-7), its CPUs have no
//! node in hwloc's output; placer lists every node (memory placement reads `mems`
//! itself), so the node partition is compared on the CPUs hwloc attaches to a node.
//! Two readings follow hwloc rather than the raw files, both documented in
//! docs/topology.md: masks are preferred to `*_list` files, and AMD module "siblings"
//! with distinct `core_id`s are split into cores (64amd64-4s2n4ca2co).

mod topology_util;

use placer_core::topology::{CacheKind, CoreType};
use placer_core::{CpuSet, Topology};
use std::collections::BTreeMap;
use topology_util::*;

/// What hwloc's expected output says.
#[derive(Default, Debug)]
struct Expected {
    pus: CpuSet,
    /// Category ("Package", "Core", "Die", "NUMANode", "L2Cache", "L1dCache", ...) ->
    /// partition of PUs.
    parts: BTreeMap<String, Partition>,
    /// (os node, os node) -> distance.
    distances: BTreeMap<(u32, u32), u32>,
    /// CPU kinds as (efficiency rank, CPUs).
    kinds: Vec<(u64, CpuSet)>,
}

#[derive(Debug)]
struct Obj {
    ty: String,
    os: Option<u32>,
    logical: Option<u32>,
    parent: Option<usize>,
}

/// Parses an `lstopo --of console -v` tree and its latency matrix.
fn parse_console(text: &str) -> Expected {
    let mut objs: Vec<Obj> = Vec::new();
    let mut stack: Vec<(usize, usize)> = Vec::new(); // (indent, obj index)
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.peek() {
        if line.trim_start().starts_with("depth ") {
            break;
        }
        let line = lines.next().unwrap();
        if line.trim().is_empty() {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let mut words = line.split_whitespace();
        let ty = words.next().unwrap().to_string();
        let logical = line
            .split("L#")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok());
        let os = line
            .split("(P#")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok());
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let parent = stack.last().map(|(_, o)| *o);
        objs.push(Obj {
            ty,
            os,
            logical,
            parent,
        });
        stack.push((indent, objs.len() - 1));
    }
    let mut exp = Expected::default();
    // NUMA nodes hang off the object whose CPUs they cover.
    let mut node_at: BTreeMap<usize, u32> = BTreeMap::new();
    let mut logical_node: BTreeMap<u32, u32> = BTreeMap::new();
    for o in &objs {
        if o.ty == "NUMANode" {
            if let (Some(p), Some(os)) = (o.parent, o.os) {
                node_at.insert(p, os);
            }
            if let (Some(l), Some(os)) = (o.logical, o.os) {
                logical_node.insert(l, os);
            }
        }
    }
    let mut keyed: BTreeMap<String, BTreeMap<usize, CpuSet>> = BTreeMap::new();
    for o in objs.iter().filter(|o| o.ty == "PU") {
        let pu = o.os.expect("PU without P#");
        exp.pus.insert(pu);
        let mut a = o.parent;
        let mut node_found = false;
        while let Some(i) = a {
            let t = &objs[i].ty;
            let is_cat = (t.starts_with('L') && t.ends_with("Cache"))
                || matches!(t.as_str(), "Package" | "Core" | "Die");
            let cat = is_cat.then(|| t.clone());
            if let Some(c) = cat {
                keyed.entry(c).or_default().entry(i).or_default().insert(pu);
            }
            if !node_found {
                if let Some(&n) = node_at.get(&i) {
                    keyed
                        .entry("NUMANode".into())
                        .or_default()
                        .entry(n as usize)
                        .or_default()
                        .insert(pu);
                    node_found = true;
                }
            }
            a = objs[i].parent;
        }
    }
    exp.parts = keyed
        .into_iter()
        .map(|(k, m)| (k, m.into_values().collect()))
        .collect();
    // Latency matrix and CPU kinds.
    let rest: Vec<&str> = lines.collect();
    for l in &rest {
        if let Some(r) = l.strip_prefix("CPU kind #") {
            let w: Vec<&str> = r.split_whitespace().collect();
            // "0 efficiency 0 cpuset 0x000ff000"
            exp.kinds
                .push((w[2].parse().unwrap(), CpuSet::parse_mask(w[4]).unwrap()));
        }
    }
    if let Some(h) = rest
        .iter()
        .position(|l| l.starts_with("Relative latency matrix"))
    {
        let by_os = rest[h].contains("os indexes");
        let cols: Vec<u32> = rest[h + 1]
            .split_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap())
            .collect();
        let to_os = |i: u32| if by_os { i } else { logical_node[&i] };
        for row in &rest[h + 2..h + 2 + cols.len()] {
            let w: Vec<u32> = row.split_whitespace().map(|w| w.parse().unwrap()).collect();
            for (j, d) in w[1..].iter().enumerate() {
                exp.distances.insert((to_os(w[0]), to_os(cols[j])), *d);
            }
        }
    }
    exp
}

fn attr<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let pat = format!(" {name}=\"");
    let i = line.find(&pat)? + pat.len();
    let j = line[i..].find('"')?;
    Some(&line[i..i + j])
}

/// Parses an hwloc v3 XML: object cpusets and the `distances2` matrix.
fn parse_xml(text: &str) -> Expected {
    let mut exp = Expected::default();
    let mut keyed: BTreeMap<String, Partition> = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let l = line.trim();
        if l.starts_with("<object ") {
            let ty = attr(l, "type").unwrap().to_string();
            let Some(cs) = attr(l, "cpuset") else {
                continue;
            };
            let cpus = CpuSet::parse_mask(cs).unwrap();
            let cat = if ty.starts_with('L') && ty.ends_with("Cache") {
                let level = &ty[1..2];
                match attr(l, "cache_type") {
                    Some("1") => format!("L{level}dCache"),
                    Some("2") => format!("L{level}iCache"),
                    _ => format!("L{level}Cache"),
                }
            } else {
                ty.clone()
            };
            if ty == "PU" {
                exp.pus = exp.pus.union(&cpus);
            } else if (matches!(ty.as_str(), "Package" | "Core" | "Die" | "NUMANode")
                || cat.ends_with("Cache"))
                && !cpus.is_empty()
            {
                keyed.entry(cat).or_default().insert(cpus);
            }
        } else if l.starts_with("<cpukind ") {
            let cpus = CpuSet::parse_mask(attr(l, "cpuset").unwrap()).unwrap();
            let eff = attr(l, "forced_efficiency")
                .map(|e| e.parse().unwrap())
                .unwrap_or(exp.kinds.len() as u64);
            exp.kinds.push((eff, cpus));
        } else if l.starts_with("<distances2 ") && attr(l, "type") == Some("NUMANode") {
            assert_eq!(attr(l, "indexing"), Some("os"));
            let mut ids: Vec<u32> = Vec::new();
            let mut vals: Vec<u32> = Vec::new();
            for l in lines.by_ref() {
                let l = l.trim();
                if l.starts_with("</distances2") {
                    break;
                }
                let inner = l
                    .split_once('>')
                    .and_then(|(_, r)| r.split_once('<'))
                    .map(|(v, _)| v)
                    .unwrap_or("");
                let nums = inner.split_whitespace().map(|w| w.parse::<u32>().unwrap());
                if l.starts_with("<indexes") {
                    ids.extend(nums);
                } else if l.starts_with("<u64values") {
                    vals.extend(nums);
                }
            }
            for (k, d) in vals.iter().enumerate() {
                let (i, j) = (k / ids.len(), k % ids.len());
                exp.distances.insert((ids[i], ids[j]), *d);
            }
        }
    }
    exp.parts = keyed;
    exp
}

/// Our partition for an hwloc category.
fn ours(topo: &Topology, shown: &CpuSet, cat: &str) -> Option<Partition> {
    Some(match cat {
        "Package" => ours_by(topo, shown, |c| c.package),
        "Core" => ours_by(topo, shown, |c| c.core),
        "Die" => ours_by(topo, shown, |c| {
            c.die.map(|d| d + 1000 * c.package.unwrap_or(0))
        }),
        "NUMANode" => ours_by(topo, shown, |c| c.node),
        _ if cat.starts_with('L') && cat.ends_with("Cache") => {
            let level: u8 = cat[1..2].parse().ok()?;
            let kind = match &cat[2..3] {
                "d" => CacheKind::Data,
                "i" => CacheKind::Instruction,
                _ => CacheKind::Unified,
            };
            if cat.starts_with("MemCache") {
                return None;
            }
            ours_caches(topo, shown, level, Some(kind))
        }
        _ => return None,
    })
}

struct Case {
    name: String,
    source: String,
    target: String,
    disallowed: bool,
}

fn cases() -> Vec<Case> {
    let dir = fixtures_dir();
    let mut v = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "test"))
        .collect();
    names.sort();
    for p in names {
        let text = std::fs::read_to_string(&p).unwrap();
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
        };
        v.push(Case {
            name: p.file_stem().unwrap().to_string_lossy().into_owned(),
            source: get("source:").unwrap(),
            target: get("target:").unwrap(),
            disallowed: get("options:").is_some_and(|o| o.contains("--disallowed")),
        });
    }
    v
}

#[test]
fn hwloc_snapshots_match_expected_partitions() {
    let dir = fixtures_dir();
    let cases = cases();
    assert!(cases.len() >= 15, "fixtures missing in {}", dir.display());
    // Unpack each tarball once, all at the same time.
    let mut sources: Vec<String> = cases.iter().map(|c| c.source.clone()).collect();
    sources.sort();
    sources.dedup();
    let paths: Vec<_> = sources.iter().map(|s| dir.join(s)).collect();
    let mut roots: BTreeMap<String, (Unpacked, Topology)> = BTreeMap::new();
    for (src, u) in sources.iter().zip(unpack_all(&paths)) {
        let topo = placer_linux::topology::read(&u.root).unwrap_or_else(|e| panic!("{src}: {e}"));
        topo.validate().unwrap();
        roots.insert(src.clone(), (u, topo));
    }
    let mut failures: Vec<String> = Vec::new();
    let mut compared = 0;
    for case in &cases {
        let topo = &roots[&case.source].1;
        let text = std::fs::read_to_string(dir.join(&case.target)).unwrap();
        let exp = if case.target.ends_with(".xml") {
            parse_xml(&text)
        } else {
            parse_console(&text)
        };
        let shown = if case.disallowed {
            topo.online()
        } else {
            topo.allowed()
        };
        let mut fail = |m: String| failures.push(format!("{}: {m}", case.name));
        if shown != exp.pus {
            fail(format!("PUs: ours {shown}, hwloc {}", exp.pus));
            continue;
        }
        for (cat, want) in &exp.parts {
            let Some(got) = ours(topo, &shown, cat) else {
                continue;
            };
            // hwloc may leave CPUs outside any object of a category (a NUMA node it hid
            // because the cpuset's mems exclude it): compare on the CPUs it covers.
            let covered = union_of(want);
            let got = restrict(&got, &covered);
            compared += 1;
            if &got != want {
                fail(format!("{cat}: ours {} / hwloc {}", show(&got), show(want)));
            }
        }
        // CPU kinds: with two kinds, the less efficient (lower rank) must be placer's
        // little CPUs. The `-nomidr` output is hwloc's own frequency/capacity heuristic
        // splitting by cluster too (four kinds), advisory only; one kind = no core types.
        let mut kinds = exp.kinds.clone();
        kinds.sort();
        let typed = |t: CoreType| -> CpuSet {
            shown
                .iter()
                .filter(|&c| topo.cpu(c).unwrap().core_type == Some(t))
                .collect()
        };
        match kinds.len() {
            0 => {}
            1 => {
                if !typed(CoreType::Big).is_empty() || !typed(CoreType::Little).is_empty() {
                    fail("hwloc sees one CPU kind, placer has core types".into());
                }
            }
            2 => {
                compared += 1;
                let (little, big) = (
                    kinds[0].1.intersection(&shown),
                    kinds[1].1.intersection(&shown),
                );
                if typed(CoreType::Little) != little || typed(CoreType::Big) != big {
                    fail(format!(
                        "kinds: ours little {} big {}, hwloc {little} / {big}",
                        typed(CoreType::Little),
                        typed(CoreType::Big)
                    ));
                }
            }
            n => eprintln!(
                "{}: {n} CPU kinds (hwloc heuristic), not compared",
                case.name
            ),
        }
        for (&(a, b), &d) in &exp.distances {
            let ours = topo.node(a).and_then(|n| n.distances.get(&b)).copied();
            if ours != Some(d) {
                fail(format!("distance {a}->{b}: ours {ours:?}, hwloc {d}"));
            }
        }
    }
    assert!(compared > 80, "only {compared} partitions compared");
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

#[test]
fn console_parser_reads_tree_and_matrix() {
    let t = "Machine (P#0 total=1GiB)\n  Package L#0 (P#0)\n    NUMANode L#0 (P#3 local=1GiB)\n    L2Cache L#0 (size=1KiB)\n      Core L#0 (P#0)\n        PU L#0 (P#0)\n        PU L#1 (P#2)\n  Package L#1 (P#1)\n    NUMANode L#1 (P#7)\n    Core L#1 (P#0)\n      PU L#2 (P#1)\ndepth 0: 1 Machine\nRelative latency matrix (name NUMALatency kind 5) between 2 NUMANodes (depth -3) by logical indexes:\n  index     0     1\n      0    10    20\n      1    21    10\n";
    let e = parse_console(t);
    assert_eq!(e.pus.to_list_string(), "0-2");
    let s = |l: &str| CpuSet::parse_list(l).unwrap();
    assert_eq!(
        e.parts["NUMANode"],
        [s("0,2"), s("1")].into_iter().collect::<Partition>()
    );
    assert_eq!(e.parts["L2Cache"].len(), 1);
    assert_eq!(e.distances[&(3, 7)], 20);
    assert_eq!(e.distances[&(7, 3)], 21);
}
