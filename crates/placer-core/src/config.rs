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
    pub policies: Vec<String>,
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
}

fn default_topology_refresh_ms() -> u64 {
    10_000
}

impl Default for Config {
    fn default() -> Self {
        Config {
            interval_ms: 1000,
            state_dir: "/run/placer".into(),
            policies: vec!["net-affinity".into()],
            scope: Scope::default(),
            metrics: Metrics::default(),
            net_affinity: Default::default(),
            smt_energy: Default::default(),
            contention: Default::default(),
            energy_qos: Default::default(),
            numa_local: Default::default(),
            topology_refresh_ms: default_topology_refresh_ms(),
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
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            enabled: true,
            listen: "127.0.0.1:9464".into(),
        }
    }
}

/// Which processes placer may manage. Kernel threads and placer itself are always out.
/// A process is in scope when it matches every non-empty include list and no exclude.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Scope {
    /// Process names (comm) to include; `*` at the end matches a prefix. Empty = all.
    pub include_comm: Vec<String>,
    /// Process names never to touch.
    pub exclude_comm: Vec<String>,
    /// Cgroup path prefixes to include. Empty = all.
    pub cgroups: Vec<String>,
    /// User ids to include. Empty = all.
    pub users: Vec<u32>,
    /// Pids never to touch (besides placer's own, always excluded).
    pub exclude_pids: Vec<u32>,
}

/// Matches `name` against a pattern: exact, or prefix when the pattern ends in `*`.
pub fn comm_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

impl Scope {
    /// Whether a process may be managed. `self_pid` is placer's own pid.
    pub fn admits(&self, p: &crate::observation::ProcObs, self_pid: u32) -> bool {
        if p.kernel_thread || p.pid == self_pid || self.exclude_pids.contains(&p.pid) {
            return false;
        }
        if self
            .exclude_comm
            .iter()
            .any(|pat| comm_matches(pat, &p.comm))
        {
            return false;
        }
        if !self.include_comm.is_empty()
            && !self
                .include_comm
                .iter()
                .any(|pat| comm_matches(pat, &p.comm))
        {
            return false;
        }
        if !self.cgroups.is_empty()
            && !self
                .cgroups
                .iter()
                .any(|c| p.cgroup.starts_with(c.as_str()))
        {
            return false;
        }
        if !self.users.is_empty() && !p.uid.is_some_and(|u| self.users.contains(&u)) {
            return false;
        }
        true
    }
}

/// How an app is recognised in QoS and SMT-energy rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AppMatch {
    pub comm: Option<String>,
    pub cgroup: Option<String>,
    pub user: Option<u32>,
}

impl AppMatch {
    pub fn matches(&self, p: &crate::observation::ProcObs) -> bool {
        let any = self.comm.is_some() || self.cgroup.is_some() || self.user.is_some();
        any && self
            .comm
            .as_deref()
            .is_none_or(|c| comm_matches(c, &p.comm))
            && self
                .cgroup
                .as_deref()
                .is_none_or(|c| p.cgroup.starts_with(c))
            && self.user.is_none_or(|u| p.uid == Some(u))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config: {0}")]
    Parse(String),
    #[error("config field `{field}`: {message}")]
    Invalid { field: String, message: String },
}

/// Names of the policies placer knows.
pub const POLICY_NAMES: &[&str] = &[
    "net-affinity",
    "smt-energy",
    "contention",
    "energy-qos",
    "numa-local",
];

impl Config {
    /// Parses TOML, rejecting unknown keys (toml's message names the key) and bad values.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        c.validate()?;
        Ok(c)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, message: String| {
            Err(ConfigError::Invalid {
                field: field.into(),
                message,
            })
        };
        if self.interval_ms < 10 {
            return invalid(
                "interval_ms",
                format!("{} is below the minimum of 10", self.interval_ms),
            );
        }
        if self.state_dir.is_empty() {
            return invalid("state_dir", "must not be empty".into());
        }
        for p in &self.policies {
            if !POLICY_NAMES.contains(&p.as_str()) {
                return invalid(
                    "policies",
                    format!("unknown policy {p:?}; known: {}", POLICY_NAMES.join(", ")),
                );
            }
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
        Ok(())
    }
}
