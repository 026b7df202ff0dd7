//! The house rules a newcomer relies on, checked on the sources: no import circle between
//! the modules of any crate, at any depth (a module and the modules it uses can be read in
//! order), no `unsafe` in the binary (system calls live in `placer_linux::sys`), no I/O in
//! placer-core (what lets the simulator and replays run the daemon's code), and no identity
//! looked up by its name where a type names it (sources, knob kinds, policies).
//!
//! A module's dependencies are the `crate::`, `self::` and `super::` paths in its non-test
//! code (comments and the `#[cfg(test)]` tail of a file are left out), resolved to module
//! paths: a file in module `a::b` naming `crate::a::c::X` uses its sibling `c` (a file
//! `src/a/c.rs` or a directory `src/a/c/`). Siblings, the children of one module, must not
//! use each other in a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under `src` (`tc/handler.rs` -> `[tc, handler]`,
/// `tc/mod.rs` -> `[tc]`; the crate root is `[]`).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut path: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_str()
                .unwrap()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if matches!(path.last().map(String::as_str), Some("mod"))
        || (path.len() == 1 && matches!(path[0].as_str(), "lib" | "main"))
    {
        path.pop();
    }
    path
}

/// The code of a file without comments and without its test module.
fn code(text: &str) -> String {
    let body = text.split("#[cfg(test)]").next().unwrap_or("");
    body.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module-relative paths a file's code names: each `crate::`, `self::` and
/// `super::` path (and each item of a `{...}` group after one) resolved against the file's
/// module path `at`, as its leading identifiers (`crate::a::{b::X, c}` -> `[a, b, X]`,
/// `[a, c]`), each with the keyword it starts with.
fn module_refs(code: &str, at: &[String]) -> Vec<(&'static str, Vec<String>)> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    // Leading `a::b::c` identifiers of `s`, and what follows them.
    fn segments(s: &str, is_ident: impl Fn(char) -> bool) -> (Vec<String>, &str) {
        let mut segs = Vec::new();
        let mut rest = s.trim_start();
        loop {
            let id: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            if id.is_empty() {
                return (segs, rest);
            }
            rest = &rest[id.len()..];
            segs.push(id);
            match rest.strip_prefix("::") {
                Some(r) if !r.starts_with('{') => rest = r,
                Some(r) => return (segs, r),
                None => return (segs, rest),
            }
        }
    }
    let mut out = Vec::new();
    for (i, _) in code.match_indices("::") {
        let head_start = code[..i].rfind(|c: char| !is_ident(c)).map_or(0, |j| j + 1);
        let head = &code[head_start..i];
        // Only the first `::` of a path (not one inside `a::b::c`, nor after `super::`).
        let before = code[..head_start].trim_end();
        if before.ends_with("::") {
            continue;
        }
        let (head, mut base): (&'static str, Vec<String>) = match head {
            "crate" => ("crate", Vec::new()),
            "self" => ("self", at.to_vec()),
            "super" => ("super", at[..at.len().saturating_sub(1)].to_vec()),
            _ => continue,
        };
        let mut rest = &code[i + 2..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        let (segs, after) = segments(rest, is_ident);
        let mut prefix = base;
        prefix.extend(segs);
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let (item_segs, _) = segments(item, is_ident);
                if !item_segs.is_empty() {
                    let mut p = prefix.clone();
                    p.extend(item_segs);
                    out.push((head, p));
                }
            }
        } else if !prefix.is_empty() {
            out.push((head, prefix));
        }
    }
    out
}

/// Identifiers right after `crate::`, and the first segment of each item of a
/// `use crate::{...}` group.
fn crate_paths(code: &str) -> BTreeSet<String> {
    module_refs(code, &[])
        .into_iter()
        .filter(|(head, _)| *head == "crate")
        .map(|(_, p)| p[0].clone())
        .collect()
}

/// The module graphs of one crate, one per module that has submodules (the crate root
/// included): parent -> (child -> children of the same parent it uses). A child uses a
/// sibling when any file in it names a path into the sibling.
type Graphs = BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>>;

fn graphs(src: &Path) -> Graphs {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(src, f)).collect();
    let mut g: Graphs = BTreeMap::new();
    for m in modules.iter().filter(|m| !m.is_empty()) {
        let (parent, name) = m.split_at(m.len() - 1);
        g.entry(parent.to_vec())
            .or_default()
            .entry(name[0].clone())
            .or_default();
    }
    for f in &files {
        let at = module_path(src, f);
        let text = std::fs::read_to_string(f).unwrap();
        for (_, target) in module_refs(&code(&text), &at) {
            // Where the two paths part: siblings under their common parent.
            let common = at.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common >= at.len() || common >= target.len() {
                continue;
            }
            let parent = at[..common].to_vec();
            let sibling = target[..=common].to_vec();
            if !modules.contains(&sibling) {
                continue;
            }
            g.entry(parent)
                .or_default()
                .entry(at[common].clone())
                .or_default()
                .insert(target[common].clone());
        }
    }
    g
}

/// One cycle of the graph, if there is any (depth-first search with colours).
fn a_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        v: &str,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(v.to_string(), 1);
        stack.push(v.to_string());
        for w in &g[v] {
            match state.get(w).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|x| x == w).unwrap();
                    let mut c = stack[at..].to_vec();
                    c.push(w.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(g, w, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(v.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for v in g.keys() {
        if state.get(v).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(g, v, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_checker_finds_a_planted_circle_and_reads_groups() {
    let paths = crate_paths(&code(
        "use crate::{a::X, b};\nfn f() { crate::c::g(); }\n// crate::d in a comment\n",
    ));
    assert_eq!(paths.into_iter().collect::<Vec<_>>(), vec!["a", "b", "c"]);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("a".into(), ["b".to_string()].into());
    g.insert("b".into(), ["c".to_string()].into());
    g.insert("c".into(), BTreeSet::new());
    assert_eq!(a_cycle(&g), None);
    g.get_mut("c").unwrap().insert("a".into());
    assert_eq!(
        a_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

#[test]
fn the_checker_resolves_nested_and_relative_paths() {
    let at = ["tc".to_string(), "handler".to_string()];
    let refs = module_refs(
        &code("use super::{ctx::*, limiter::Limiter};\nuse crate::knob::Ctx;\nfn f() { self::g(); super::super::x::y(); }\n"),
        &at,
    );
    let refs: Vec<String> = refs.iter().map(|(_, p)| p.join("::")).collect();
    assert_eq!(
        refs,
        vec![
            "tc::ctx",
            "tc::limiter::Limiter",
            "knob::Ctx",
            "tc::handler::g",
            "x::y"
        ]
    );
    assert_eq!(
        module_path(Path::new("s"), Path::new("s/tc/mod.rs")),
        vec!["tc".to_string()]
    );
    // A planted circle between two nested siblings is found.
    let dir = placer_testkit::TempDir::new("layout-nested");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("outer")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod outer;\n").unwrap();
    std::fs::write(src.join("outer/mod.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(src.join("outer/a.rs"), "use super::b::B;\n").unwrap();
    std::fs::write(src.join("outer/b.rs"), "fn f() { crate::outer::a::g(); }\n").unwrap();
    let g = graphs(&src);
    let inner = &g[&vec!["outer".to_string()]];
    assert_eq!(
        a_cycle(inner),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
    std::fs::write(src.join("outer/b.rs"), "fn f() {}\n").unwrap();
    assert_eq!(a_cycle(&graphs(&src)[&vec!["outer".to_string()]]), None);
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let crates = workspace().join("crates");
    let (mut checked, mut nested) = (0, 0);
    for e in std::fs::read_dir(&crates).unwrap().flatten() {
        let src = e.path().join("src");
        if !src.is_dir() {
            continue;
        }
        for (parent, g) in graphs(&src) {
            checked += g.len();
            nested += usize::from(!parent.is_empty());
            if let Some(c) = a_cycle(&g) {
                panic!(
                    "{}: modules of {} import each other: {}",
                    e.file_name().to_string_lossy(),
                    if parent.is_empty() {
                        "the crate root".to_string()
                    } else {
                        parent.join("::")
                    },
                    c.join(" -> ")
                );
            }
        }
    }
    assert!(checked > 50, "only {checked} modules found");
    assert!(nested > 5, "only {nested} modules with submodules found");
}

#[test]
fn the_binary_holds_no_unsafe() {
    let mut files = Vec::new();
    rust_files(&workspace().join("crates/placer/src"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let code = code(&text);
        assert!(
            !code.contains("unsafe ") && !code.contains("unsafe{"),
            "{} uses unsafe (system calls belong in placer_linux::sys)",
            f.display()
        );
    }
}

/// The ways Rust code reaches the operating system (files, sockets, processes, the
/// environment, the clock, sleeping, raw system calls); generic `std::io::{Read, Write}`
/// over a caller's reader is not among them (the record format is written that way), nor
/// are `std::net`'s address types.
const OS_IO: &[&str] = &[
    "std::fs",
    "TcpListener",
    "TcpStream",
    "UdpSocket",
    "std::process",
    "std::env",
    "std::os",
    "std::thread::sleep",
    "SystemTime::now",
    "Instant::now",
    "std::io::stdin",
    "std::io::stdout",
    "std::io::stderr",
    "libc::",
    "File::",
];

/// The OS paths of [`OS_IO`] a file's non-test code names.
fn os_io_uses(code: &str) -> Vec<&'static str> {
    OS_IO.iter().copied().filter(|p| code.contains(p)).collect()
}

#[test]
fn the_io_checker_finds_a_planted_read() {
    let text = "fn f() { let _ = std::fs::read(\"x\"); }\n// TcpStream in a comment\n";
    assert_eq!(os_io_uses(&code(text)), vec!["std::fs"]);
    assert!(os_io_uses(&code("fn f(w: &mut impl std::io::Write) {}\n")).is_empty());
    let tail = "fn f() {}\n#[cfg(test)]\nmod tests { fn g() { std::fs::read(\"x\"); } }\n";
    assert!(os_io_uses(&code(tail)).is_empty());
}

#[test]
fn placer_core_does_no_io() {
    let mut files = Vec::new();
    rust_files(&workspace().join("crates/placer-core/src"), &mut files);
    assert!(files.len() > 20, "only {} files found", files.len());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let uses = os_io_uses(&code(&text));
        assert!(
            uses.is_empty(),
            "{} reaches the OS ({}): placer-core is pure, I/O belongs in placer-linux",
            f.display(),
            uses.join(", ")
        );
    }
}

/// Whether code reaches into the policies (`placer_core::policies::...`), whose types a
/// host file must not need: what hosts share with policies is in core's shared modules.
fn uses_policy_internals(code: &str) -> bool {
    code.contains("placer_core::policies")
}

#[test]
fn host_files_import_no_policy_internals() {
    assert!(uses_policy_internals(
        "use placer_core::policies::energy_qos::StatePowerTable;"
    ));
    assert!(!uses_policy_internals(
        "use placer_core::power_table::StatePowerTable;"
    ));
    let files = non_test_code(&workspace().join("crates/placer-linux/src"));
    assert!(files.len() > 20, "only {} files found", files.len());
    for (f, code) in files {
        assert!(
            !uses_policy_internals(&code),
            "{} imports from placer_core::policies: move what it needs to a shared module of core",
            f.display()
        );
    }
}

/// The non-test code of every `.rs` file under `dir`, by path.
fn non_test_code(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f, code(&text))
        })
        .collect()
}

/// Every source directory of the workspace's crates.
fn crate_sources() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(workspace().join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

/// The ways code looks an identity up by its name where a type names it: a handler found
/// by its kind's name, a policy named by a literal in the host's code.
fn name_lookups(code: &str, policy_names: &[String]) -> Vec<String> {
    let mut found: Vec<String> = ["kinds().contains"]
        .iter()
        .filter(|p| code.contains(*p))
        .map(|p| p.to_string())
        .collect();
    found.extend(
        policy_names
            .iter()
            .map(|n| format!("{n:?}"))
            .filter(|lit| code.contains(lit.as_str())),
    );
    found
}

fn policy_names() -> Vec<String> {
    placer_core::policies::PolicyKind::ALL
        .iter()
        .map(|k| k.name().to_string())
        .collect()
}

#[test]
fn the_name_lookup_checker_finds_planted_lookups() {
    let names = policy_names();
    let planted = "fn f(h: &H) -> bool { h.kinds().contains(&\"rps\") }\nfn g() { j.record(k, \"energy-qos\"); }\n";
    assert_eq!(
        name_lookups(&code(planted), &names),
        vec!["kinds().contains".to_string(), "\"energy-qos\"".to_string()]
    );
    let in_a_test =
        "fn f() {}\n#[cfg(test)]\nmod tests { fn g() { p.push(\"numa-local\", a, \"t\"); } }\n";
    assert!(name_lookups(&code(in_a_test), &names).is_empty());
    assert_eq!(
        source_lookups(&code(
            "fn f(s: &Sources) { s.why_missing(\"sock_diag\"); s.has(\"rapl\"); }\n"
        )),
        vec!["why_missing(\"", ".has(\""]
    );
}

#[test]
fn no_knob_kind_or_policy_is_looked_up_by_its_name() {
    let names = policy_names();
    for src in crate_sources() {
        // Policy names are data everywhere else (configs, plans, metrics); the host's code
        // is handed the planned action's typed policy.
        let host = src.ends_with("placer-linux/src");
        for (f, code) in non_test_code(&src) {
            let found: Vec<String> = name_lookups(&code, if host { &names } else { &[] });
            assert!(
                found.is_empty(),
                "{} looks up by name: {} (match the kind's enum: KnobKind, PolicyKind)",
                f.display(),
                found.join(", ")
            );
        }
    }
}

/// Where a policy's identity is held as a string: a `policy` field or parameter typed as
/// text, a policy trait naming itself by a string, a kind parsed back from a name.
fn string_identities(code: &str) -> Vec<String> {
    let mut found: Vec<String> = [
        "policy: String",
        "policy: &str",
        "policy: Option<String>",
        "policy: &'static str",
        "policies: Vec<(String",
        "disabled: Vec<(String",
        "fn name(&self) -> &'static str",
        "PolicyKind::parse(",
    ]
    .into_iter()
    .filter(|p| code.contains(p))
    .map(str::to_string)
    .collect();
    found.sort();
    found
}

#[test]
fn the_string_identity_checker_finds_planted_strings() {
    let planted = "pub struct PlannedAction { pub policy: String }\n\
                   trait Policy { fn name(&self) -> &'static str; }\n\
                   fn f(n: &str) { let k = PolicyKind::parse(n); }\n";
    assert_eq!(
        string_identities(&code(planted)),
        vec![
            "PolicyKind::parse(".to_string(),
            "fn name(&self) -> &'static str".to_string(),
            "policy: String".to_string(),
        ]
    );
    assert!(string_identities(&code("pub struct A { pub policy: PolicyKind }\n")).is_empty());
}

/// Issue 32: no identity is a string after construction. A policy is its `PolicyKind` in
/// every plan, note, lease break, verdict, report and decision record, in the engine's and
/// the policy trait's interfaces and in the actuator's journal labels; a name becomes a kind
/// only where names come in (`FromStr`, which the config and the command line use).
#[test]
fn no_policy_identity_is_a_string_after_construction() {
    let ws = workspace().join("crates");
    let carriers = [
        "placer-core/src/plan.rs",
        "placer-core/src/policy.rs",
        "placer-core/src/engine.rs",
        "placer-core/src/verdict.rs",
        "placer-agent/src/state.rs",
        "placer-agent/src/explain.rs",
        "placer-linux/src/knob.rs",
        "placer-linux/src/actuator.rs",
        "placer-core/src/k8s.rs",
        "placer-core/src/scope.rs",
        "placer-nri/src/placement.rs",
        "placer-nri/src/plugin.rs",
    ];
    for f in carriers {
        let text = std::fs::read_to_string(ws.join(f)).unwrap();
        let found = string_identities(&code(&text));
        assert!(
            found.is_empty(),
            "{f} holds a policy as a string: {} (carry the PolicyKind)",
            found.join(", ")
        );
    }
    // Nowhere else is a kind parsed back from its name.
    for src in crate_sources() {
        for (f, code) in non_test_code(&src) {
            if f.ends_with("placer-core/src/policy_kind.rs") {
                continue;
            }
            assert!(
                !code.contains("PolicyKind::parse("),
                "{} turns a policy name back into its kind",
                f.display()
            );
        }
    }
}

/// A source asked for by its name: an unknown name answers "not missing".
fn source_lookups(code: &str) -> Vec<&'static str> {
    ["why_missing(\"", ".has(\""]
        .into_iter()
        .filter(|p| code.contains(p))
        .collect()
}

// Sources are typed (`SourceKind`): a lookup by name could name a source that does not
// exist and read as "not missing".
#[test]
fn no_source_is_asked_for_by_its_name() {
    for src in crate_sources() {
        for (f, code) in non_test_code(&src) {
            let found = source_lookups(&code);
            assert!(
                found.is_empty(),
                "{} asks for a source by its name ({}): use SourceKind",
                f.display(),
                found.join(", ")
            );
        }
    }
}

/// Issue 31: the daemon's life is a library (placer-agent); the binary's `cmd/daemon.rs`
/// keeps arguments, signals and printing, under 200 lines.
#[test]
fn the_daemon_command_stays_wiring() {
    let f = workspace().join("crates/placer/src/cmd/daemon.rs");
    let lines = std::fs::read_to_string(&f)
        .expect("cmd/daemon.rs")
        .lines()
        .count();
    assert!(
        lines < 200,
        "{}: {lines} lines; move the logic into placer-agent",
        f.display()
    );
}
