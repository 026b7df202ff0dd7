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
    /// What the scope lets placer manage, in words for the daemon's first log line.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        let list = |v: &[String]| v.join(", ");
        if !self.include_comm.is_empty() {
            parts.push(format!("named {}", list(&self.include_comm)));
        }
        if !self.cgroups.is_empty() {
            parts.push(format!("in cgroups {}", list(&self.cgroups)));
        }
        if !self.users.is_empty() {
            let users: Vec<String> = self.users.iter().map(u32::to_string).collect();
            parts.push(format!("of uids {}", list(&users)));
        }
        let mut out = if parts.is_empty() {
            "every process of the host ([scope] is empty)".to_string()
        } else {
            format!("the processes {}", parts.join(" and "))
        };
        if !self.exclude_comm.is_empty() {
            out.push_str(&format!(", not those named {}", list(&self.exclude_comm)));
        }
        if !self.exclude_pids.is_empty() {
            let pids: Vec<String> = self.exclude_pids.iter().map(u32::to_string).collect();
            out.push_str(&format!(", not pids {}", list(&pids)));
        }
        out + "; never kernel threads or placer itself"
    }

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

/// Which pods' containers placer manages as a Kubernetes node agent (`[kubernetes]`, the NRI
/// plugin of `placer daemon --nri`). Rules: a container outside these selectors is never
/// managed, whatever its annotations ask; inside them, its `policy.placer.io/...`
/// annotation picks the policy, else `default_policy` (none when empty); a
/// `preserve.placer.io/...` opt-out always wins. Plain strings here (QoS classes by name) so
/// that this module imports nothing of `k8s`, which imports the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesScope {
    /// Namespaces to include. Empty = all.
    pub namespaces: Vec<String>,
    /// Namespaces never to touch.
    pub exclude_namespaces: Vec<String>,
    /// Pod labels that must all be present with these values. Empty = all pods.
    pub pod_labels: std::collections::BTreeMap<String, String>,
    /// QoS classes to include (`guaranteed`, `burstable`, `best_effort`). Empty = all.
    pub qos_classes: Vec<String>,
    /// Policy for containers in scope without a `policy.placer.io` annotation; empty (`""`,
    /// as the config spells it) = leave them alone. An unknown name is refused at parse.
    #[serde(
        deserialize_with = "policy_or_empty",
        serialize_with = "policy_or_empty_out"
    )]
    pub default_policy: Option<crate::policy_kind::PolicyKind>,
    /// When placer's CPUs do not meet what the kubelet allows: `leave` the container as the
    /// kubelet set it (logged), or `refuse` its creation with the reason.
    pub on_conflict: OnConflict,
    /// Label metrics with pod and container names (off by default: bounded cardinality).
    pub metrics_labels: bool,
}

/// `""` is no policy; any other name must be one (the message lists them).
fn policy_or_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<crate::policy_kind::PolicyKind>, D::Error> {
    let name = String::deserialize(d)?;
    match name.trim() {
        "" => Ok(None),
        n => n.parse().map(Some).map_err(serde::de::Error::custom),
    }
}

fn policy_or_empty_out<S: serde::Serializer>(
    p: &Option<crate::policy_kind::PolicyKind>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.map_or("", |k| k.name()))
}

/// What to do when placer's choice and the kubelet's CPUs do not meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnConflict {
    #[default]
    Leave,
    Refuse,
}

/// The QoS class names `[kubernetes] qos_classes` accepts.
pub const QOS_CLASS_NAMES: [&str; 3] = ["guaranteed", "burstable", "best_effort"];

impl Default for KubernetesScope {
    fn default() -> Self {
        KubernetesScope {
            namespaces: Vec::new(),
            exclude_namespaces: vec!["kube-system".into()],
            pod_labels: Default::default(),
            qos_classes: Vec::new(),
            default_policy: None,
            on_conflict: OnConflict::Leave,
            metrics_labels: false,
        }
    }
}

impl KubernetesScope {
    /// Whether a pod (namespace, labels, QoS class name) is inside the selectors.
    pub fn admits_pod(
        &self,
        namespace: &str,
        labels: &std::collections::BTreeMap<String, String>,
        qos: Option<&str>,
    ) -> bool {
        if self.exclude_namespaces.iter().any(|n| n == namespace) {
            return false;
        }
        if !self.namespaces.is_empty() && !self.namespaces.iter().any(|n| n == namespace) {
            return false;
        }
        if !self
            .pod_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
        {
            return false;
        }
        // A pod whose class is unknown is in scope only when no class filter is set.
        self.qos_classes.is_empty() || qos.is_some_and(|q| self.qos_classes.iter().any(|c| c == q))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_scope_says_what_it_lets_placer_manage() {
        let all = Scope::default().describe();
        assert!(all.starts_with("every process of the host"), "{all}");
        let s = Scope {
            include_comm: vec!["iperf3".into(), "redis*".into()],
            exclude_pids: vec![7],
            ..Default::default()
        };
        assert_eq!(
            s.describe(),
            "the processes named iperf3, redis*, not pids 7; never kernel threads or placer itself"
        );
    }

    #[test]
    fn kubernetes_scope_selects_by_namespace_labels_and_qos() {
        let none = BTreeMap::new();
        let d = KubernetesScope::default();
        assert!(d.admits_pod("default", &none, None));
        assert!(!d.admits_pod("kube-system", &none, Some("burstable")));
        let s = KubernetesScope {
            namespaces: vec!["web".into()],
            pod_labels: [("tier".to_string(), "front".to_string())].into(),
            qos_classes: vec!["burstable".into()],
            ..Default::default()
        };
        let front: BTreeMap<String, String> = [("tier".to_string(), "front".to_string())].into();
        assert!(s.admits_pod("web", &front, Some("burstable")));
        assert!(!s.admits_pod("db", &front, Some("burstable")));
        assert!(!s.admits_pod("web", &none, Some("burstable")));
        assert!(!s.admits_pod("web", &front, Some("guaranteed")));
        assert!(!s.admits_pod("web", &front, None));
    }

    #[test]
    fn default_policy_is_a_kind_or_none_and_an_unknown_name_is_refused() {
        use crate::policy_kind::PolicyKind;
        let parse = |v: &str| {
            crate::config::Config::from_toml(&format!("[kubernetes]\ndefault_policy = {v:?}\n"))
                .map(|c| c.kubernetes.default_policy)
        };
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("smt-energy").unwrap(), Some(PolicyKind::SmtEnergy));
        let err = parse("smt-enrgy").unwrap_err().to_string();
        assert!(
            err.contains("smt-enrgy") && err.contains("net-affinity"),
            "{err}"
        );
        // Written back as the config spells it: a name, or "" for none.
        let c = crate::config::Config::default();
        let text = toml::to_string(&c.kubernetes).unwrap();
        assert!(text.contains("default_policy = \"\""), "{text}");
    }
}
