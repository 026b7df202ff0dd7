//! The house rules a newcomer relies on, checked on the sources: no import circle between
//! the top-level modules of any crate (a module and the modules it uses can be read in
//! order), no `unsafe` in the binary (system calls live in `placer_linux::sys`), and no
//! I/O in placer-core (what lets the simulator and replays run the daemon's code).
//!
//! A module's dependencies are the `crate::NAME` paths in its non-test code (comments and
//! the `#[cfg(test)]` tail of a file are left out); `NAME` counts when it is another
//! top-level module of the same crate (a file `src/NAME.rs` or a directory `src/NAME/`).

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

/// The top-level module a file under `src` belongs to (`None`: the crate root).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.trim_end_matches(".rs").to_string();
    (!matches!(name.as_str(), "lib" | "main")).then_some(name)
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

/// Identifiers right after `crate::`, and the first segment of each item of a
/// `use crate::{...}` group.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let id = ident(item.trim());
                if !id.is_empty() {
                    out.insert(id);
                }
            }
        } else {
            let id = ident(after);
            if !id.is_empty() {
                out.insert(id);
            }
        }
        rest = after;
    }
    out
}

/// The module graph of one crate: module -> modules it uses.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top_module(src, f)).collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for f in &files {
        let Some(m) = top_module(src, f) else {
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for dep in crate_paths(&code(&text)) {
            if dep != m && modules.contains(&dep) {
                g.get_mut(&m).unwrap().insert(dep);
            }
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
fn no_crate_has_an_import_circle_between_its_modules() {
    let crates = workspace().join("crates");
    let mut checked = 0;
    for e in std::fs::read_dir(&crates).unwrap().flatten() {
        let src = e.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let g = graph(&src);
        checked += g.len();
        if let Some(c) = a_cycle(&g) {
            panic!(
                "{}: modules import each other: {}",
                e.file_name().to_string_lossy(),
                c.join(" -> ")
            );
        }
    }
    assert!(checked > 50, "only {checked} modules found");
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
