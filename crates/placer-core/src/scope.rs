//! Which processes placer may touch (`[scope]`) and how an app is recognised in the rules of
//! energy-qos and smt-energy. Its own module so that the policies need not import the
//! config that imports them.

use serde::{Deserialize, Serialize};

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
