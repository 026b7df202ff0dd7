//! The built-in default config as commented TOML (`placer daemon --print-default-config`, the
//! .deb's /etc/placer/placer.toml). The comments come from the field tables of
//! docs/config.md, so the page and the output cannot drift apart:
//! 1. every field of the default config has a row in docs/config.md (tested);
//! 2. the commented text parses back to exactly `Config::default()` (tested).

use crate::config::Config;
use std::collections::HashMap;

const CONFIG_DOC: &str = include_str!("../../../docs/config.md");

/// (section, field) -> meaning, from the `| `field` | default | meaning |` rows under the
/// `## `[section]`` headings ("" for the top level).
fn field_docs() -> HashMap<(String, String), String> {
    let mut out = HashMap::new();
    let mut section = String::new();
    for line in CONFIG_DOC.lines() {
        if let Some(h) = line
            .strip_prefix("## ")
            .or_else(|| line.strip_prefix("### "))
        {
            section = h
                .split('`')
                .nth(1)
                .and_then(|s| s.strip_prefix('['))
                .and_then(|s| s.strip_suffix(']'))
                .unwrap_or("")
                .to_string();
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // "| `field` | default | meaning |" splits into ["", field, default, meaning, ""].
        if cells.len() >= 5 && cells[1].starts_with('`') && cells[1].ends_with('`') {
            let field = cells[1].trim_matches('`').to_string();
            out.insert((section.clone(), field), cells[3].to_string());
        }
    }
    out
}

fn wrap_comment(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() + 1 + word.len() > width && line.len() > 1 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// The fields of the default config that docs/config.md does not describe, as
/// `section.field` (empty when the page is complete).
pub fn undocumented_fields() -> Vec<String> {
    let docs = field_docs();
    let mut missing = Vec::new();
    walk(&Config::default().to_toml(), |section, field| {
        if !docs.contains_key(&(section.to_string(), field.to_string())) {
            missing.push(if section.is_empty() {
                field.to_string()
            } else {
                format!("{section}.{field}")
            });
        }
    });
    missing
}

/// Calls `f(section, field)` for each `field = ...` line of a TOML text.
fn walk(toml_text: &str, mut f: impl FnMut(&str, &str)) {
    let mut section = String::new();
    for line in toml_text.lines() {
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = h.trim_matches(['[', ']']).to_string();
        } else if let Some((key, _)) = line.split_once(" = ") {
            if !key.starts_with(' ') && !key.is_empty() {
                f(&section, key.trim());
            }
        }
    }
}

/// The default config, each field preceded by its meaning from docs/config.md.
pub fn commented_default_toml() -> String {
    let docs = field_docs();
    let mut section = String::new();
    let mut out = String::from(
        "# placer's configuration (docs/config.md). Every field is optional; a missing field\n\
         # takes the default shown. Durations: \"250ms\", \"1s\", \"2m\" or a number of seconds.\n\n",
    );
    for line in Config::default().to_toml().lines() {
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = h.trim_matches(['[', ']']).to_string();
        } else if let Some((key, _)) = line.split_once(" = ") {
            if !key.starts_with(' ') {
                if let Some(doc) = docs.get(&(section.clone(), key.trim().to_string())) {
                    out.push_str(&wrap_comment(&doc.replace('`', ""), 96));
                }
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_field_is_documented() {
        assert_eq!(undocumented_fields(), Vec::<String>::new());
    }

    #[test]
    fn commented_default_parses_to_the_default() {
        let text = commented_default_toml();
        assert!(text.contains("# Time between two samples/plans"), "{text}");
        let parsed = Config::from_toml(&text).expect("parses");
        assert_eq!(parsed.to_toml(), Config::default().to_toml());
    }

    #[test]
    fn comments_are_wrapped() {
        assert!(commented_default_toml()
            .lines()
            .all(|l| l.len() <= 100 || !l.starts_with('#')));
    }
}
