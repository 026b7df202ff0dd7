//! The daemon's configuration: TOML, every field documented and defaulted, unknown keys
//! rejected. `Config::default()` is the built-in default used when no file is given;
//! `docs/config.md` and `placer daemon --print-default-config` show it.

use crate::policies;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Time between two samples/plans, milliseconds.
    pub interval_ms: u64,
    /// Directory for the journal of changed knobs (must survive a daemon crash, not a
    /// reboot: knobs do not survive a reboot either).
    pub state_dir: String,
    /// Policies to run, in order; later policies do not touch what earlier ones hold.
    pub policies: Vec<policies::PolicyKind>,
    /// Which processes placer may touch at all.
    pub scope: Scope,
    pub metrics: Metrics,
    pub net_affinity: policies::net_affinity::NetAffinityConfig,
    pub smt_energy: policies::smt_energy::SmtEnergyConfig,
    pub contention: policies::contention::ContentionConfig,
    pub energy_qos: policies::energy_qos::EnergyQosConfig,
    pub numa_local: policies::numa_local::NumaLocalConfig,
    /// Re-read the topology (NIC IRQ affinity and RPS CPUs, hotplug) this often,
    /// milliseconds; 0 = only at start.
    #[serde(default = "default_topology_refresh_ms")]
    pub topology_refresh_ms: u64,
    /// Learn what ran and which processes came and went from the kernel (an eBPF CPU
    /// collector on sched_switch, the process-events connector) instead of reading every
    /// process each interval; each falls back to /proc, said once, where it cannot load.
    #[serde(default = "default_kernel_events")]
    pub kernel_events: bool,
    /// Verdicts on moves: does a pin pay? (crate::verdict)
    pub verify: Verify,
    /// Which pods' containers the NRI plugin manages (`placer daemon --nri`).
    #[serde(default)]
    pub kubernetes: KubernetesScope,
}

/// How moves are judged (`[verify]`): defaults for every policy, and per-policy overrides
/// under `[verify.policy.NAME]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Verify {
    /// Judge each pin by probing it (briefly undoing and re-applying it in a random on/off
    /// pattern, one interval each) and undo the ones that made things worse.
    pub enabled: bool,
    /// Intervals after a pin before probing starts.
    pub settle_intervals: u32,
    /// On/off pairs at the first look (a clear effect is decided there).
    pub first_look_pairs: u32,
    /// On/off pairs at the last look: the longest a move is probed (a move is decided
    /// after at most settle_intervals + 2 x probe_pairs intervals).
    pub probe_pairs: u32,
    /// The most often the whole rule (metric and guard, every look) may act on a move that
    /// changes nothing.
    pub alpha: f64,
    /// Ignored: moves were once judged on a window after them; accepted so that older
    /// configs still load.
    pub horizon_intervals: u32,
    /// Ignored: moves were once judged against a window before them; accepted so that
    /// older configs still load.
    pub window_intervals: u32,
    /// The smallest relative change that counts (0.05 = 5%), beyond the noise test.
    pub min_effect: f64,
    /// Intervals a policy waits before moving a process again after its first undone
    /// move; doubles with each further one.
    pub backoff_intervals: u64,
    /// Overrides per policy.
    pub policy: std::collections::BTreeMap<policies::PolicyKind, VerifyPolicy>,
}

impl Default for Verify {
    fn default() -> Self {
        Verify {
            enabled: true,
            settle_intervals: 2,
            first_look_pairs: 12,
            probe_pairs: 24,
            alpha: 0.05,
            horizon_intervals: 5,
            window_intervals: 5,
            min_effect: crate::catalogue::DEFAULT_MIN_EFFECT,
            backoff_intervals: 10,
            policy: Default::default(),
        }
    }
}

/// One policy's overrides of [`Verify`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyPolicy {
    pub verify: Option<bool>,
    /// Ignored (see `[verify] horizon_intervals`).
    pub horizon_intervals: Option<u32>,
    pub probe_pairs: Option<u32>,
    pub min_effect: Option<f64>,
}

impl Verify {
    /// (judge at all, horizon, min effect) for `policy`.
    pub fn for_policy(&self, policy: policies::PolicyKind) -> (bool, u32, f64) {
        let o = self.policy.get(&policy);
        (
            o.and_then(|o| o.verify).unwrap_or(self.enabled),
            o.and_then(|o| o.horizon_intervals)
                .unwrap_or(self.horizon_intervals),
            o.and_then(|o| o.min_effect).unwrap_or(self.min_effect),
        )
    }

    /// How `policy`'s moves are probed ([`crate::verifier`]).
    pub fn probe(&self, policy: policies::PolicyKind) -> crate::verifier::ProbeSettings {
        let o = self.policy.get(&policy);
        let probe_pairs = o.and_then(|o| o.probe_pairs).unwrap_or(self.probe_pairs);
        crate::verifier::ProbeSettings {
            settle_intervals: self.settle_intervals,
            first_look_pairs: self.first_look_pairs.min(probe_pairs),
            probe_pairs,
            alpha: self.alpha,
            min_effect: self.for_policy(policy).2,
        }
    }

    fn validate(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, m: String| Err((f.to_string(), m));
        let pairs = std::iter::once(("probe_pairs".to_string(), Some(self.probe_pairs))).chain(
            self.policy
                .iter()
                .map(|(n, o)| (format!("policy.{n}.probe_pairs"), o.probe_pairs)),
        );
        let min = crate::verifier::MIN_PAIRS as u32;
        for (f, p) in pairs {
            if let Some(p) = p {
                if !(min..=500).contains(&p) {
                    return bad(&f, format!("{p} is outside {min}..=500"));
                }
            }
        }
        if !(min..=500).contains(&self.first_look_pairs) {
            return bad(
                "first_look_pairs",
                format!("{} is outside {min}..=500", self.first_look_pairs),
            );
        }
        if self.settle_intervals > 100 {
            return bad(
                "settle_intervals",
                format!("{} is above 100", self.settle_intervals),
            );
        }
        if !(self.alpha > 0.0 && self.alpha <= 0.2) {
            return bad("alpha", format!("{} is not in (0, 0.2]", self.alpha));
        }
        let horizons = std::iter::once((
            "horizon_intervals".to_string(),
            Some(self.horizon_intervals),
        ))
        .chain(
            self.policy
                .iter()
                .map(|(n, o)| (format!("policy.{n}.horizon_intervals"), o.horizon_intervals)),
        );
        for (f, h) in horizons {
            if let Some(h) = h {
                if !(2..=1000).contains(&h) {
                    return bad(&f, format!("{h} is outside 2..=1000"));
                }
            }
        }
        if !(2..=1000).contains(&self.window_intervals) {
            return bad(
                "window_intervals",
                format!("{} is outside 2..=1000", self.window_intervals),
            );
        }
        let effects = std::iter::once(("min_effect".to_string(), Some(self.min_effect))).chain(
            self.policy
                .iter()
                .map(|(n, o)| (format!("policy.{n}.min_effect"), o.min_effect)),
        );
        for (f, e) in effects {
            if let Some(e) = e {
                if !(0.0..1.0).contains(&e) {
                    return bad(&f, format!("{e} is not in [0, 1)"));
                }
            }
        }
        if !(1..=1024).contains(&self.backoff_intervals) {
            return bad(
                "backoff_intervals",
                format!("{} is outside 1..=1024", self.backoff_intervals),
            );
        }
        // Unknown policy names cannot get here: the keys are `PolicyKind`s, and serde
        // refuses any other name listing the valid ones.
        Ok(())
    }
}

fn default_kernel_events() -> bool {
    true
}

fn default_topology_refresh_ms() -> u64 {
    10_000
}

impl Config {
    /// What this config says about the knobs other agents share ([`crate::coexist`]).
    pub fn coexist_stance(&self) -> crate::coexist::Stance {
        let runs = |k: policies::PolicyKind| self.policies.contains(&k);
        crate::coexist::Stance {
            net_affinity: runs(policies::PolicyKind::NetAffinity),
            topology_refresh_ms: self.topology_refresh_ms,
            repin_after_intervals: self.net_affinity.repin_after_intervals,
            energy_qos: runs(policies::PolicyKind::EnergyQos),
            take_over_cpufreq: self.energy_qos.take_over_cpufreq,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            interval_ms: 1000,
            state_dir: "/run/placer".into(),
            policies: vec![policies::PolicyKind::NetAffinity],
            scope: Scope::default(),
            metrics: Metrics::default(),
            net_affinity: Default::default(),
            smt_energy: Default::default(),
            contention: Default::default(),
            energy_qos: Default::default(),
            numa_local: Default::default(),
            topology_refresh_ms: default_topology_refresh_ms(),
            kernel_events: default_kernel_events(),
            verify: Verify::default(),
            kubernetes: KubernetesScope::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Metrics {
    /// Serve Prometheus text metrics.
    pub enabled: bool,
    /// Address to listen on; loopback by default so nothing is exposed unasked.
    pub listen: String,
    /// A Unix socket to serve on instead of `listen` (an absolute path; empty: none):
    /// created mode 0600, so only root (and whom the operator lets in) can connect.
    pub unix_socket: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            enabled: true,
            // Not 9464 (OpenTelemetry's Prometheus exporter) nor inside 9100-9999, which the
            // Prometheus default port allocations list has taken whole (docs/daemon.md).
            listen: "127.0.0.1:10464".into(),
            unix_socket: String::new(),
        }
    }
}

pub use crate::scope::{comm_matches, AppMatch, KubernetesScope, OnConflict, Scope};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config: {0}")]
    Parse(String),
    #[error("config field `{field}`: {message}")]
    Invalid { field: String, message: String },
}

/// Names of the policies placer knows (of [`policies::PolicyKind::ALL`], in that order).
pub const POLICY_NAMES: &[&str] = &[
    policies::net_affinity::NAME,
    policies::smt_energy::NAME,
    policies::contention::NAME,
    policies::energy_qos::NAME,
    policies::numa_local::NAME,
];

/// The unit of an old numeric duration key.
#[derive(Debug, Clone, Copy)]
enum OldUnit {
    Ms,
    S,
    Us,
}

/// serde's "unknown field `x`, expected one of `a`, `b`" names the fields as the struct has
/// them, which for durations are the deprecated keys (`interval_ms`): say the current names
/// instead, and the nearest one when the unknown key looks like a typo of it.
fn current_key_names(message: &str) -> String {
    const EXPECTED: &str = ", expected one of ";
    let Some(at) = message.find(EXPECTED) else {
        return message.to_string();
    };
    let list_start = at + EXPECTED.len();
    let list_end = message[list_start..]
        .find('\n')
        .map_or(message.len(), |i| list_start + i);
    let names: Vec<&str> = message[list_start..list_end]
        .split(", ")
        .map(|n| n.trim_matches('`'))
        .map(|n| DURATION_KEYS.iter().find(|k| k.2 == n).map_or(n, |k| k.1))
        .collect();
    let unknown = message[..at]
        .rsplit_once("unknown field `")
        .map(|(_, rest)| rest.trim_end_matches('`'));
    let nearest = unknown.and_then(|u| {
        names
            .iter()
            .map(|n| (edit_distance(u, n), *n))
            .min()
            .filter(|(d, n)| *d <= (n.len() / 3).max(2))
            .map(|(_, n)| n)
    });
    let listed: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    let mut out = format!("{}{EXPECTED}{}", &message[..at], listed.join(", "));
    if let Some(n) = nearest {
        out += &format!(" (did you mean `{n}`?)");
    }
    out += &message[list_end..];
    out
}

/// Levenshtein distance (insertions, deletions, substitutions), for key suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(diag + usize::from(ca != *cb));
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Duration keys in the one grammar (`"250ms"`, `"1s"`, `"2m"`, or a number of seconds) and
/// the numeric keys they replace, which are still read with a deprecation note:
/// (table path, `[]` = each table of an array, new key, old key, old key's unit).
const DURATION_KEYS: &[(&str, &str, &str, OldUnit)] = &[
    ("", "interval", "interval_ms", OldUnit::Ms),
    ("", "topology_refresh", "topology_refresh_ms", OldUnit::Ms),
    (
        "net_affinity",
        "idle_timeout",
        "idle_timeout_ms",
        OldUnit::Ms,
    ),
    ("net_affinity", "min_hold", "min_hold_ms", OldUnit::Ms),
    ("smt_energy", "shrink_after", "shrink_after_s", OldUnit::S),
    ("numa_local", "quiet", "quiet_s", OldUnit::S),
    ("energy_qos.apps[]", "period", "period_us", OldUnit::Us),
    ("energy_qos.apps[]", "deadline", "deadline_us", OldUnit::Us),
    ("energy_qos.apps[]", "work", "work_us", OldUnit::Us),
];

/// The tables at `path` ("" = the root; "a.b[]" = each table of array b in table a).
fn tables_at<'a>(root: &'a mut toml::Table, path: &str) -> Vec<&'a mut toml::Table> {
    let mut cur = vec![root];
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (name, each) = match part.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (part, false),
        };
        let mut next = Vec::new();
        for t in cur {
            match (t.get_mut(name), each) {
                (Some(toml::Value::Table(sub)), false) => next.push(sub),
                (Some(toml::Value::Array(items)), true) => {
                    next.extend(items.iter_mut().filter_map(|v| v.as_table_mut()))
                }
                _ => {}
            }
        }
        cur = next;
    }
    cur
}

fn field_name(path: &str, key: &str) -> String {
    let p = path.replace("[]", "");
    if p.is_empty() {
        key.to_string()
    } else {
        format!("{p}.{key}")
    }
}

/// Rewrites new duration keys to the numeric fields the structs hold; returns deprecation
/// notes for old keys found.
fn translate_durations(table: &mut toml::Table) -> Result<Vec<String>, ConfigError> {
    let mut notes = Vec::new();
    for &(path, new, old, unit) in DURATION_KEYS {
        for t in tables_at(table, path) {
            if t.contains_key(new) && t.contains_key(old) {
                return Err(ConfigError::Invalid {
                    field: field_name(path, new),
                    message: format!("given twice, as `{new}` and as the deprecated `{old}`"),
                });
            }
            if let Some(v) = t.remove(new) {
                let field = field_name(path, new);
                let invalid = |message: String| ConfigError::Invalid {
                    field: field.clone(),
                    message,
                };
                let d = match &v {
                    toml::Value::String(s) => {
                        crate::units::parse_duration(s).map_err(|e| invalid(e.to_string()))?
                    }
                    toml::Value::Integer(i) => u64::try_from(*i)
                        .map(std::time::Duration::from_secs)
                        .map_err(|_| invalid(format!("{i} is negative")))?,
                    toml::Value::Float(f) => std::time::Duration::try_from_secs_f64(*f)
                        .map_err(|_| invalid(format!("{f} is not a duration")))?,
                    other => {
                        return Err(invalid(format!(
                            "expected a duration such as \"1s\", got {other}"
                        )))
                    }
                };
                let too_large = || invalid(format!("{v} is too large"));
                let value = match unit {
                    OldUnit::Ms => {
                        toml::Value::Integer(i64::try_from(d.as_millis()).map_err(|_| too_large())?)
                    }
                    OldUnit::Us => {
                        toml::Value::Integer(i64::try_from(d.as_micros()).map_err(|_| too_large())?)
                    }
                    OldUnit::S => toml::Value::Float(d.as_secs_f64()),
                };
                t.insert(old.to_string(), value);
            } else if let Some(v) = t.get(old) {
                notes.push(format!(
                    "config key `{}` is deprecated: write `{new} = \"{}\"`",
                    field_name(path, old),
                    old_as_duration(v, unit)
                        .map(crate::units::format_duration)
                        .unwrap_or_else(|| v.to_string()),
                ));
            }
        }
    }
    Ok(notes)
}

fn old_as_duration(v: &toml::Value, unit: OldUnit) -> Option<std::time::Duration> {
    let f = v.as_float().or_else(|| v.as_integer().map(|i| i as f64))?;
    let secs = match unit {
        OldUnit::Ms => f / 1e3,
        OldUnit::S => f,
        OldUnit::Us => f / 1e6,
    };
    std::time::Duration::try_from_secs_f64(secs).ok()
}

impl Config {
    /// Parses TOML, rejecting unknown keys (toml's message names the key) and bad values.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Ok(Config::from_toml_with_notes(text)?.0)
    }

    /// [`Config::from_toml`], also returning notes for deprecated keys (to be logged).
    pub fn from_toml_with_notes(text: &str) -> Result<(Config, Vec<String>), ConfigError> {
        let parse = |e: toml::de::Error| ConfigError::Parse(current_key_names(&e.to_string()));
        let mut table: toml::Table = text.parse().map_err(parse)?;
        let uses_new_keys = DURATION_KEYS.iter().any(|&(path, new, _, _)| {
            tables_at(&mut table, path)
                .iter()
                .any(|t| t.contains_key(new))
        });
        let notes = translate_durations(&mut table)?;
        // Without new keys, parse the text itself so that errors keep their line numbers.
        let c: Config = if uses_new_keys {
            Config::deserialize(toml::Value::Table(table)).map_err(parse)?
        } else {
            toml::from_str(text).map_err(parse)?
        };
        c.validate()?;
        Ok((c, notes))
    }

    /// The config as TOML, durations in the one grammar (`interval = "1s"`).
    pub fn to_toml(&self) -> String {
        let Ok(toml::Value::Table(mut table)) = toml::Value::try_from(self) else {
            return String::new();
        };
        for &(path, new, old, unit) in DURATION_KEYS {
            for t in tables_at(&mut table, path) {
                if let Some(v) = t.remove(old) {
                    let text = old_as_duration(&v, unit)
                        .map(crate::units::format_duration)
                        .unwrap_or_default();
                    t.insert(new.to_string(), toml::Value::String(text));
                }
            }
        }
        toml::to_string_pretty(&table).unwrap_or_default()
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, message: String| {
            Err(ConfigError::Invalid {
                field: field.into(),
                message,
            })
        };
        // Upper bounds keep every count and period far from overflow and from absurd memory
        // (a day between cycles; the sizes below the largest machines).
        const DAY_MS: u64 = 24 * 3600 * 1000;
        if self.interval_ms < 10 {
            return invalid(
                "interval_ms",
                format!("{} is below the minimum of 10", self.interval_ms),
            );
        }
        if self.interval_ms > DAY_MS {
            return invalid(
                "interval_ms",
                format!("{} ms is longer than a day", self.interval_ms),
            );
        }
        if self.topology_refresh_ms > DAY_MS {
            return invalid(
                "topology_refresh_ms",
                format!("{} ms is longer than a day", self.topology_refresh_ms),
            );
        }
        if self.state_dir.is_empty() {
            return invalid("state_dir", "must not be empty".into());
        }
        for q in &self.kubernetes.qos_classes {
            if !crate::scope::QOS_CLASS_NAMES.contains(&q.as_str()) {
                return invalid(
                    "kubernetes.qos_classes",
                    format!(
                        "unknown QoS class {q:?} ({})",
                        crate::scope::QOS_CLASS_NAMES.join(", ")
                    ),
                );
            }
        }
        if !std::path::Path::new(&self.state_dir).is_absolute() {
            return invalid(
                "state_dir",
                format!("{:?} is relative: give an absolute path (the daemon's working directory is not its state)", self.state_dir),
            );
        }
        for (field, patterns) in [
            ("scope.include_comm", &self.scope.include_comm),
            ("scope.exclude_comm", &self.scope.exclude_comm),
        ] {
            for p in patterns {
                // The kernel keeps 15 bytes of a command name: a longer pattern never matches.
                if p.trim_end_matches('*').len() > 15 {
                    return invalid(
                        field,
                        format!(
                            "{p:?} is longer than 15 bytes, the most a process name (comm) holds"
                        ),
                    );
                }
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for p in &self.policies {
            if !seen.insert(p) {
                return invalid("policies", format!("{:?} is listed twice", p.name()));
            }
        }
        if self.metrics.enabled
            && !self.metrics.unix_socket.is_empty()
            && !std::path::Path::new(&self.metrics.unix_socket).is_absolute()
        {
            return invalid(
                "metrics.unix_socket",
                format!("{:?} is not an absolute path", self.metrics.unix_socket),
            );
        }
        if self.metrics.enabled && self.metrics.listen.parse::<std::net::SocketAddr>().is_err() {
            return invalid(
                "metrics.listen",
                format!("{:?} is not an address:port", self.metrics.listen),
            );
        }
        // Each policy validates its own section; errors are prefixed with the section name.
        let section = |name: &str, r: Result<(), (String, String)>| {
            r.map_err(|(f, m)| ConfigError::Invalid {
                field: format!("{name}.{f}"),
                message: m,
            })
        };
        section("net_affinity", self.net_affinity.validate())?;
        section("smt_energy", self.smt_energy.validate())?;
        section("energy_qos", self.energy_qos.validate())?;
        section("numa_local", self.numa_local.validate())?;
        section("contention", self.contention.validate())?;
        section("verify", self.verify.validate())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_key_is_answered_with_current_names_and_the_nearest() {
        let e = Config::from_toml("interval_m = \"1s\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`interval`") && !e.contains("`interval_ms`"),
            "{e}"
        );
        assert!(e.contains("did you mean `interval`?"), "{e}");
        let e = Config::from_toml("[net_affinity]\nidle_timeot = \"1s\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `idle_timeout`?"), "{e}");
        assert!(
            !e.contains("idle_timeout_ms") && !e.contains("min_hold_ms"),
            "{e}"
        );
        // Nothing near: no suggestion.
        let e = Config::from_toml("zzzzzzzz = 1\n").unwrap_err().to_string();
        assert!(!e.contains("did you mean"), "{e}");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn duration_keys_take_the_cli_grammar() {
        let c = Config::from_toml(
            "interval = \"250ms\"\ntopology_refresh = 0\n\
             [net_affinity]\nidle_timeout = \"2m\"\nmin_hold = 3\n\
             [numa_local]\nquiet = \"1.5s\"\n",
        )
        .expect("parses");
        assert_eq!(c.interval_ms, 250);
        assert_eq!(c.topology_refresh_ms, 0);
        assert_eq!(c.net_affinity.idle_timeout_ms, 120_000);
        assert_eq!(c.net_affinity.min_hold_ms, 3000);
        assert_eq!(c.numa_local.quiet_s, 1.5);
    }

    #[test]
    fn verify_overrides_are_typed_and_unknown_policies_refused() {
        let c = Config::from_toml("[verify.policy.energy-qos]\nmin_effect = 0.1\n").unwrap();
        assert_eq!(
            c.verify.for_policy(policies::PolicyKind::EnergyQos),
            (true, 5, 0.1)
        );
        assert_eq!(
            c.verify.for_policy(policies::PolicyKind::NetAffinity),
            (true, 5, 0.05)
        );
        let e = Config::from_toml("[verify.policy.net-afinity]\nverify = false\n")
            .unwrap_err()
            .to_string();
        for k in policies::PolicyKind::ALL {
            assert!(e.contains(k.name()), "{e}");
        }
        assert!(e.contains("net-afinity"), "{e}");
        // A typed config writes back the same names.
        let text = toml::to_string(&c).unwrap();
        assert!(text.contains("[verify.policy.energy-qos]"), "{text}");
        assert_eq!(Config::from_toml(&text).unwrap(), c);
    }

    #[test]
    fn old_duration_keys_still_read_with_a_note() {
        let (c, notes) =
            Config::from_toml_with_notes("interval_ms = 500\n[smt_energy]\nshrink_after_s = 4.0\n")
                .expect("parses");
        assert_eq!(c.interval_ms, 500);
        assert_eq!(c.smt_energy.shrink_after_s, 4.0);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].contains("`interval_ms` is deprecated: write `interval = \"500ms\"`"),
            "{notes:?}"
        );
        assert!(notes[1].contains("smt_energy.shrink_after_s"), "{notes:?}");
    }

    #[test]
    fn bad_duration_keys_name_the_field() {
        for (text, field) in [
            ("interval = \"fast\"", "interval"),
            ("interval = \"1s\"\ninterval_ms = 1000", "interval"),
            (
                "[net_affinity]\nidle_timeout = -1",
                "net_affinity.idle_timeout",
            ),
            ("interval = \"5ms\"", "interval_ms"),
        ] {
            let e = Config::from_toml(text).expect_err(text).to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
    }

    #[test]
    fn a_metrics_unix_socket_is_an_absolute_path() {
        let e = Config::from_toml("[metrics]\nunix_socket = \"m.sock\"\n")
            .expect_err("relative")
            .to_string();
        assert!(e.contains("metrics.unix_socket"), "{e}");
        let c = Config::from_toml("[metrics]\nunix_socket = \"/run/placer/m.sock\"\n").unwrap();
        assert_eq!(c.metrics.unix_socket, "/run/placer/m.sock");
    }

    #[test]
    fn rt_app_durations_in_an_array_of_tables() {
        let c = Config::from_toml(
            "[[energy_qos.apps]]\nname = \"rt\"\nmatch = { comm = \"x\" }\n\
             period = \"10ms\"\ndeadline = \"10ms\"\nwork = \"2ms\"\n",
        )
        .expect("parses");
        let a = &c.energy_qos.apps[0];
        assert_eq!(
            (a.period_us, a.deadline_us, a.work_us),
            (Some(10_000), Some(10_000), Some(2_000))
        );
    }

    #[test]
    fn to_toml_writes_durations_and_round_trips() {
        let text = Config::default().to_toml();
        assert!(text.contains("interval = \"1s\""), "{text}");
        assert!(!text.contains("interval_ms"), "{text}");
        assert_eq!(Config::from_toml(&text).expect("parses"), Config::default());
    }

    /// Issue 17: every out-of-range value is refused, naming the field.
    #[test]
    fn out_of_range_values_name_the_field() {
        for (text, field) in [
            (
                "[[energy_qos.apps]]\nname = \"a\"\nmatch = { comm = \"x\" }\n\
                 target_perf_share = 0.5\nthreads = 4294967295\n",
                "energy_qos.apps[0].threads",
            ),
            ("[numa_local]\nquiet_s = nan\n", "numa_local.quiet_s"),
            ("[numa_local]\nquiet_s = inf\n", "numa_local.quiet_s"),
            (
                "[scope]\ninclude_comm = [\"a-very-long-process-name\"]\n",
                "scope.include_comm",
            ),
            ("state_dir = \"relative/dir\"\n", "state_dir"),
            (
                "policies = [\"net-affinity\", \"net-affinity\"]\n",
                "policies",
            ),
            ("interval = \"2d\"\n", "interval"),
            ("interval_ms = 100000000000\n", "interval_ms"),
            ("[smt_energy]\nmax_units = 4000000000\n", "smt_energy"),
            (
                "[energy_qos]\nmax_search_states = 0\n",
                "energy_qos.max_search_states",
            ),
            (
                "[contention.classify]\nsmoothing_intervals = 100000\n",
                "smoothing_intervals",
            ),
        ] {
            let e = Config::from_toml(text).expect_err(text).to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
        // A 15-byte name with a prefix star still fits.
        assert!(Config::from_toml("[scope]\ninclude_comm = [\"abcdefghijklmno*\"]\n").is_ok());
    }
}
