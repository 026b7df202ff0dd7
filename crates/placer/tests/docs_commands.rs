//! The docs' command lines still parse (issue 30, item 6): every `placer ...` line in a code
//! block of README.md and docs/*.md, and every inline `placer ...` span, names only
//! subcommands and flags that the binary's own `--help` lists. A renamed or removed flag
//! fails here with the file and line that still names it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One command line found in a doc.
#[derive(Debug)]
struct DocCommand {
    file: String,
    line: usize,
    text: String,
}

/// The words after `placer` of each command line in `md`: fenced and indented code blocks
/// (a line's `$ ` prompt, `sudo`, a `target/release/` path dropped; `\` continuations
/// joined), and inline code spans that start with `placer `.
fn commands_in(file: &str, md: &str) -> Vec<DocCommand> {
    let mut out: Vec<DocCommand> = Vec::new();
    let mut fenced = false;
    // In a block with `$ ` prompts, only the prompted lines are commands (the rest is
    // their output, which may start with "placer").
    let mut prompted = false;
    let lines: Vec<&str> = md.lines().collect();
    let mut pending: Option<(usize, String)> = None;
    // The line the last command found ended on.
    let mut continues: Option<usize> = None;
    for (i, raw) in lines.iter().enumerate() {
        let n = i + 1;
        if raw.trim_start().starts_with("```") {
            fenced = !fenced;
            prompted = fenced
                && lines[i + 1..]
                    .iter()
                    .take_while(|l| !l.trim_start().starts_with("```"))
                    .any(|l| l.trim_start().starts_with("$ "));
            continue;
        }
        let indented = !fenced && raw.starts_with("    ") && !raw.trim().starts_with('-');
        if fenced || indented {
            let line = raw.trim();
            if prompted && pending.is_none() && !line.starts_with("$ ") {
                continue;
            }
            let (start, text) = match pending.take() {
                Some((s, t)) => (s, format!("{t} {line}")),
                None => (n, line.to_string()),
            };
            if let Some(t) = text.strip_suffix('\\') {
                pending = Some((start, t.to_string()));
                continue;
            }
            // A synopsis wrapped without `\`: the next line goes on with `[--x` or `--x`.
            if let (Some(prev), true) = (out.last_mut(), text.starts_with(['[', '-'])) {
                if continues == Some(n - 1) {
                    prev.text = format!("{} {text}", prev.text);
                    continues = Some(n);
                    continue;
                }
            }
            if let Some(cmd) = placer_words(&text) {
                out.push(DocCommand {
                    file: file.to_string(),
                    line: start,
                    text: cmd,
                });
                continues = Some(n);
            }
            continue;
        }
        pending = None;
        // Inline spans: `placer ...`.
        for (k, span) in raw.split('`').enumerate() {
            if k % 2 == 1 {
                if let Some(rest) = span.strip_prefix("placer ") {
                    out.push(DocCommand {
                        file: file.to_string(),
                        line: n,
                        text: rest.to_string(),
                    });
                }
            }
        }
    }
    out
}

/// The words after the `placer` program in a shell line, up to the end of that command
/// (`|`, `;`, `&&`, `#`, `>`); None when the line does not run placer.
fn placer_words(line: &str) -> Option<String> {
    let line = line.strip_prefix("$ ").unwrap_or(line);
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| {
        let w = w.trim_matches('"');
        // `PLACER_BIN=target/release/placer cargo test ...` sets a variable; cargo runs.
        w == "placer" || (w.ends_with("/placer") && !w.contains('='))
    })?;
    // Only as the program: first word, or after sudo / an environment assignment / `time`.
    let before = &words[..at];
    let program = before
        .iter()
        .all(|w| *w == "sudo" || *w == "time" || *w == "exec" || w.contains('='));
    if !program {
        return None;
    }
    // A `|` followed by a flag is a synopsis's alternative (`S | --times N`), not a pipe.
    let rest: Vec<&str> = words[at + 1..]
        .iter()
        .enumerate()
        .take_while(|&(k, w)| {
            let alternative = *w == "|"
                && words
                    .get(at + 2 + k)
                    .is_some_and(|n| n.starts_with(['-', '[']));
            alternative || !matches!(*w, "|" | ";" | "&&" | "||" | "#" | ">" | "2>&1" | "&")
        })
        .map(|(_, w)| *w)
        .collect();
    Some(rest.join(" "))
}

/// What `placer PATH --help` lists: subcommands and flags (long and short).
#[derive(Debug, Default, Clone)]
struct Help {
    subcommands: BTreeSet<String>,
    flags: BTreeSet<String>,
}

fn parse_help(text: &str) -> Help {
    let mut h = Help::default();
    let mut section = "";
    for l in text.lines() {
        if !l.starts_with(' ') && l.ends_with(':') {
            section = l.trim_end_matches(':');
            continue;
        }
        let t = l.trim_start();
        match section {
            "Commands" if l.starts_with("  ") => {
                if let Some(name) = t.split_whitespace().next() {
                    h.subcommands.insert(name.to_string());
                }
            }
            _ if t.starts_with('-') => {
                // "-n, --count <COUNT>  help..." : the names before the first double space.
                let head = t.split("  ").next().unwrap_or(t);
                for w in head.split([',', ' ']) {
                    let w = w.split(['=', '[', '<']).next().unwrap_or("");
                    if w.starts_with('-') && w.len() > 1 {
                        h.flags.insert(w.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    h
}

/// `placer PATH --help`, parsed once per path.
struct Helps {
    cache: BTreeMap<Vec<String>, Help>,
}

impl Helps {
    fn get(&mut self, path: &[String]) -> Help {
        if let Some(h) = self.cache.get(path) {
            return h.clone();
        }
        let o = Command::new(env!("CARGO_BIN_EXE_placer"))
            .args(path)
            .arg("--help")
            .stdin(Stdio::null())
            .output()
            .expect("placer --help");
        assert!(o.status.success(), "placer {path:?} --help failed");
        let h = parse_help(&String::from_utf8_lossy(&o.stdout));
        self.cache.insert(path.to_vec(), h.clone());
        h
    }
}

/// What is wrong with one command line: an unknown flag, or a word where a subcommand
/// must be. Flags after a bare `--` belong to the command placer runs.
fn check(helps: &mut Helps, words: &str) -> Vec<String> {
    // A quoted argument is one value (`--vs "other-placer daemon --dry-run"`), not flags.
    let mut unquoted = String::new();
    let mut quote: Option<char> = None;
    for c in words.chars() {
        match (quote, c) {
            (None, '"' | '\'') => {
                quote = Some(c);
                unquoted.push_str("ARG");
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, c) => unquoted.push(c),
        }
    }
    let tokens: Vec<&str> = unquoted.split_whitespace().collect();
    let mut path: Vec<String> = Vec::new();
    let mut i = 0;
    // Descend through subcommands while the next word names one.
    loop {
        let h = helps.get(&path);
        if h.subcommands.is_empty() {
            break;
        }
        let Some(w) = tokens.get(i) else { break };
        if w.starts_with('-') {
            break;
        }
        // A synopsis's alternatives (`topo|cycle|daemon`, `[--json]`) and placeholders
        // (`SUBCOMMAND`, `...`) are not commands to check.
        let w = w.trim_matches(|c| c == '[' || c == ']');
        if w.contains('|') || w.chars().all(|c| c.is_ascii_uppercase() || c == '.') {
            return Vec::new();
        }
        if !h.subcommands.contains(w) {
            return vec![format!(
                "`{w}` is not a subcommand of `placer {}` (it has: {})",
                path.join(" "),
                h.subcommands.iter().cloned().collect::<Vec<_>>().join(", ")
            )];
        }
        path.push(w.to_string());
        i += 1;
    }
    let h = helps.get(&path);
    let mut bad = Vec::new();
    for t in &tokens[i..] {
        if *t == "--" {
            break;
        }
        // Flags inside synopsis brackets and alternatives: `[--machine`, `NAME|--root`.
        for part in t.split('|') {
            let part = part.trim_start_matches(['[', '(', '"', '\'']);
            let flag = part
                .split(['=', ']', ')', ',', '"', '\'', '`'])
                .next()
                .unwrap_or("");
            let long = flag.starts_with("--")
                && flag.len() > 2
                && flag[2..]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            let short = flag.len() == 2
                && flag.starts_with('-')
                && flag.as_bytes()[1].is_ascii_alphabetic();
            if (long || short) && !h.flags.contains(flag) {
                bad.push(format!("`placer {}` has no flag {flag}", path.join(" ")));
            }
        }
    }
    bad
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn doc_files() -> Vec<PathBuf> {
    let mut v = vec![repo_root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .expect("docs/")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

#[test]
fn every_flag_the_docs_name_is_accepted() {
    let mut helps = Helps {
        cache: BTreeMap::new(),
    };
    let mut failures = Vec::new();
    let mut checked = 0;
    for f in doc_files() {
        let name = f
            .strip_prefix(repo_root())
            .unwrap_or(&f)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&f).expect("read doc");
        for c in commands_in(&name, &text) {
            checked += 1;
            for why in check(&mut helps, &c.text) {
                failures.push(format!(
                    "{}:{}: placer {}\n    {why}",
                    c.file, c.line, c.text
                ));
            }
        }
    }
    eprintln!("{checked} doc command lines checked");
    // The docs hold well over a hundred command lines; far fewer means the extraction broke.
    assert!(checked > 100, "only {checked} command lines found");
    assert!(
        failures.is_empty(),
        "{} doc command line(s) name what placer does not accept:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The checker itself: a flag or subcommand the binary lacks is caught, in a code block, an
/// indented block and an inline span; real ones pass.
#[test]
fn a_nonexistent_flag_or_subcommand_is_caught() {
    let md = "\
```
$ placer top --once --json | python3 -m json.tool
```

```
placer top --no-such-flag
sudo ./target/release/placer bench topo --json \\
    --bogus 3
```

    placer frobnicate --json

    placer run [-n N] [--machine NAME]
               [--watch 10s] [--no-ompx] -- CMD ARGS

Run `placer sim --not-a-flag` or `placer plan --machine dell-c6100 --policy speedup`.

```
$ placer explain 42
placer set its affinity to 1
$ placer bench overhead --vs \"other daemon --dry-run\" --nope
```
";
    let cmds = commands_in("t.md", md);
    let texts: Vec<&str> = cmds.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(
        texts,
        vec![
            "top --once --json",
            "top --no-such-flag",
            "bench topo --json --bogus 3",
            "frobnicate --json",
            "run [-n N] [--machine NAME] [--watch 10s] [--no-ompx] -- CMD ARGS",
            "sim --not-a-flag",
            "plan --machine dell-c6100 --policy speedup",
            "explain 42",
            "bench overhead --vs \"other daemon --dry-run\" --nope",
        ]
    );
    let mut helps = Helps {
        cache: BTreeMap::new(),
    };
    let verdicts: Vec<usize> = texts.iter().map(|t| check(&mut helps, t).len()).collect();
    assert_eq!(verdicts, vec![0, 1, 1, 1, 1, 1, 0, 0, 1], "{texts:?}");
    assert_eq!(cmds[2].line, 7, "a continued line counts from its first");
}
