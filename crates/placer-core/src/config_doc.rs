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

/// One field of the config file, for its manual page.
#[derive(Clone, Debug)]
pub struct FieldDoc {
    /// "" for the top level, else the TOML table (`net_affinity`, `contention.classify`).
    pub section: String,
    pub field: String,
    /// The default as TOML text (`"1s"`, `true`, `["net-affinity"]`).
    pub default: String,
    /// Its meaning, from docs/config.md (empty when undocumented, which a test forbids).
    pub meaning: String,
}

/// Every field of the default config in file order, with its default and meaning.
pub fn field_table() -> Vec<FieldDoc> {
    let docs = field_docs();
    let text = Config::default().to_toml();
    let mut out: Vec<FieldDoc> = Vec::new();
    let mut section = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = h.trim_matches(['[', ']']).to_string();
        } else if let Some((key, value)) = line.split_once(" = ") {
            if key.starts_with(' ') || key.is_empty() {
                continue;
            }
            let mut default = value.to_string();
            // A multi-line array: joined onto one line.
            if default == "[" {
                for more in lines.by_ref() {
                    let more = more.trim();
                    if more == "]" {
                        break;
                    }
                    default.push_str(more);
                    default.push(' ');
                }
                default = format!("{}]", default.trim_end().trim_end_matches(','));
            }
            out.push(FieldDoc {
                meaning: docs
                    .get(&(section.clone(), key.to_string()))
                    .cloned()
                    .unwrap_or_default(),
                section: section.clone(),
                field: key.to_string(),
                default,
            });
        }
    }
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

/// The config file the package installs: [`commented_default_toml`] with every setting and
/// section header commented out (`#key = value`, `#[section]`), so that a host that never
/// edited it follows the defaults of each new version instead of pinning today's values;
/// removing one `#` sets that one field.
pub fn shipped_config_toml() -> String {
    let mut out = String::from(
        "# placer's configuration (docs/config.md, placer.toml(5)). Every setting below is\n\
         # commented out and shows its built-in default, which follows upgrades; remove the\n\
         # leading '#' of a setting (and of its [section] line) to change it.\n",
    );
    for line in commented_default_toml().lines().skip(2) {
        if line.is_empty() || line.starts_with('#') {
            out.push_str(line);
        } else {
            out.push('#');
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_table_lists_every_field_with_its_meaning() {
        let t = field_table();
        assert!(t.len() > 60, "{}", t.len());
        assert!(t.iter().all(|f| !f.meaning.is_empty()), "{t:?}");
        let order = t
            .iter()
            .find(|f| f.section == "numa_local" && f.field == "target_order")
            .expect("numa_local.target_order");
        assert_eq!(order.default, "[\"cpus\", \"nic\", \"pages\"]");
        let interval = t.iter().find(|f| f.field == "interval").expect("interval");
        assert_eq!(
            (interval.section.as_str(), interval.default.as_str()),
            ("", "\"1s\"")
        );
    }

    #[test]
    fn the_shipped_config_sets_nothing_and_uncommented_gives_the_default() {
        let text = shipped_config_toml();
        // Nothing set: every line is a comment or blank.
        assert!(
            text.lines().all(|l| l.is_empty() || l.starts_with('#')),
            "{text}"
        );
        assert_eq!(
            Config::from_toml(&text).expect("parses").to_toml(),
            Config::default().to_toml()
        );
        // Each commented setting, uncommented, is the default's own line.
        let uncommented: String = text
            .lines()
            .map(|l| match l.strip_prefix('#') {
                // A setting, or an indented line of a multi-line array; "# " is prose.
                Some(rest) if rest.starts_with("    ") || !rest.starts_with(' ') => rest,
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let settings = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            settings(&uncommented),
            settings(&Config::default().to_toml())
        );
    }

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
