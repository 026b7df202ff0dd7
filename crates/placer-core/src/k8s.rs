//! Kubernetes facts a node agent needs, parsed without I/O (issue 19's pure half; the NRI
//! plugin that feeds them is not built yet): which policy a pod or container asks for in
//! its annotations, what the kubelet's CPU manager pinned, which pod and container a cgroup
//! path belongs to, and how placer's choice of CPUs meets the kubelet's.
//!
//! Rules (each tested):
//! - **Annotations.** `policy.placer.io/container.NAME` beats `policy.placer.io/pod`; an
//!   opt-out `preserve.placer.io/container.NAME` or `preserve.placer.io/pod` set to `true`
//!   beats both (placer leaves the container alone). A policy name placer does not know is
//!   an error naming the annotation, not a silent no-op.
//! - **Kubelet CPU manager state** (`/var/lib/kubelet/cpu_manager_state`): with policy
//!   `none` nothing is pinned; with `static`, `entries` are the containers pinned
//!   exclusively and `defaultCpuSet` the shared pool.
//! - **Cgroup paths**: cgroupfs (`/kubepods/burstable/pod<uid>/<id>`), systemd
//!   (`.../kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope`,
//!   also `crio-` and `docker-`), and the runtime's `slice:prefix:id` form
//!   (`kubepods-burstable-pod<uid>.slice:cri-containerd:<id>`) give the QoS class, the pod
//!   UID (with dashes) and the container ID.
//! - **No fight with the kubelet**: a container the static policy pinned exclusively is
//!   never touched; any other gets placer's CPUs intersected with the shared pool (static)
//!   or with the cpuset the kubelet asks for; an empty intersection is refused with the
//!   reason, never widened.

use crate::cpuset::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const POD_POLICY: &str = "policy.placer.io/pod";
pub const CONTAINER_POLICY_PREFIX: &str = "policy.placer.io/container.";
pub const POD_PRESERVE: &str = "preserve.placer.io/pod";
pub const CONTAINER_PRESERVE_PREFIX: &str = "preserve.placer.io/container.";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum K8sError {
    #[error("annotation {annotation}: unknown policy {given:?} (known: {known})")]
    UnknownPolicy {
        annotation: String,
        given: String,
        known: String,
    },
    #[error("kubelet CPU manager state: {0}")]
    KubeletState(String),
    /// A preserve annotation that is not a boolean: refused rather than read as "false",
    /// which would place a container its owner may have meant to keep.
    #[error("annotation {annotation}: {value:?} is not a boolean (true/yes/1 or false/no/0): container left alone")]
    NotABoolean { annotation: String, value: String },
}

/// The most of an annotation's value an error (and so a log line) quotes.
pub const MAX_QUOTED_VALUE_CHARS: usize = 64;

/// An annotation's value as an error quotes it: its first [`MAX_QUOTED_VALUE_CHARS`]
/// characters and its length when longer (a pod's owner can write a MiB of value; the log
/// needs to see which value, not all of it).
fn clip(v: &str) -> String {
    match v.char_indices().nth(MAX_QUOTED_VALUE_CHARS) {
        None => v.to_string(),
        Some((end, _)) => format!("{}... ({} bytes in all)", &v[..end], v.len()),
    }
}

/// What a container's annotations ask of placer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Selection {
    /// Place it with this policy; `from` names the annotation that said so.
    Policy {
        policy: crate::policy_kind::PolicyKind,
        from: String,
    },
    /// Leave it alone (`preserve.placer.io/...`).
    Preserved { from: String },
    /// Nothing said: the TOML scope decides.
    Unspecified,
}

/// A boolean annotation's value; `None` when it is neither spelling.
fn boolean(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Some(true),
        "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

/// The selection for container `container` of a pod with `annotations`.
pub fn selection(
    annotations: &BTreeMap<String, String>,
    container: &str,
) -> Result<Selection, K8sError> {
    let c_preserve = format!("{CONTAINER_PRESERVE_PREFIX}{container}");
    for key in [c_preserve.as_str(), POD_PRESERVE] {
        let Some(v) = annotations.get(key) else {
            continue;
        };
        match boolean(v) {
            Some(true) => return Ok(Selection::Preserved { from: key.into() }),
            Some(false) => {}
            None => {
                return Err(K8sError::NotABoolean {
                    annotation: key.into(),
                    value: clip(v),
                })
            }
        }
    }
    let c_policy = format!("{CONTAINER_POLICY_PREFIX}{container}");
    for key in [c_policy.as_str(), POD_POLICY] {
        if let Some(p) = annotations.get(key) {
            let p = p.trim();
            // The annotation is where a pod's policy is constructed: from here on, a kind.
            let Ok(policy) = p.parse::<crate::policy_kind::PolicyKind>() else {
                return Err(K8sError::UnknownPolicy {
                    annotation: key.into(),
                    given: clip(p),
                    known: crate::config::POLICY_NAMES.join(", "),
                });
            };
            return Ok(Selection::Policy {
                policy,
                from: key.into(),
            });
        }
    }
    Ok(Selection::Unspecified)
}

/// The kubelet's CPU manager policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CpuManager {
    None,
    Static {
        /// The shared pool (`defaultCpuSet`).
        shared: CpuSet,
        /// (pod UID, container name) -> CPUs pinned exclusively.
        exclusive: BTreeMap<(String, String), CpuSet>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawState {
    policy_name: String,
    #[serde(default)]
    default_cpu_set: String,
    #[serde(default)]
    entries: BTreeMap<String, BTreeMap<String, String>>,
}

/// Parses `cpu_manager_state`.
pub fn parse_cpu_manager_state(text: &str) -> Result<CpuManager, K8sError> {
    let raw: RawState =
        serde_json::from_str(text).map_err(|e| K8sError::KubeletState(e.to_string()))?;
    let cpus = |s: &str, what: &str| {
        CpuSet::parse_list(s.trim())
            .map_err(|e| K8sError::KubeletState(format!("{what} {s:?}: {e}")))
    };
    match raw.policy_name.as_str() {
        "none" => Ok(CpuManager::None),
        "static" => {
            let mut exclusive = BTreeMap::new();
            for (pod, containers) in &raw.entries {
                for (c, set) in containers {
                    exclusive.insert((pod.clone(), c.clone()), cpus(set, "entry")?);
                }
            }
            Ok(CpuManager::Static {
                shared: cpus(&raw.default_cpu_set, "defaultCpuSet")?,
                exclusive,
            })
        }
        other => Err(K8sError::KubeletState(format!(
            "unknown policyName {other:?} (none, static)"
        ))),
    }
}

/// A pod's QoS class, as its cgroup path shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    /// The name `[kubernetes] qos_classes` uses (one of `scope::QOS_CLASS_NAMES`).
    pub fn name(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "guaranteed",
            QosClass::Burstable => "burstable",
            QosClass::BestEffort => "best_effort",
        }
    }
}

/// What a container's cgroup path says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodCgroup {
    pub qos: QosClass,
    /// With dashes, as the API shows it.
    pub pod_uid: String,
    pub container_id: String,
}

/// Parses a container's cgroup path (module doc); None when it is not a pod's container.
pub fn parse_cgroup_path(path: &str) -> Option<PodCgroup> {
    // The runtime's systemd form: "kubepods-burstable-pod<uid>.slice:cri-containerd:<id>".
    if let [slice, _prefix, id] = path.split(':').collect::<Vec<_>>().as_slice() {
        let (qos, uid) = pod_of_slice(slice.trim_start_matches('/').rsplit('/').next()?)?;
        return Some(PodCgroup {
            qos,
            pod_uid: uid,
            container_id: id.to_string(),
        });
    }
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let last = *parts.last()?;
    if let Some(scope) = last.strip_suffix(".scope") {
        // systemd: the container's scope under its pod's slice.
        let id = ["cri-containerd-", "crio-", "docker-", "containerd-"]
            .iter()
            .find_map(|p| scope.strip_prefix(p))?;
        let (qos, uid) = pod_of_slice(parts.get(parts.len().checked_sub(2)?)?)?;
        return Some(PodCgroup {
            qos,
            pod_uid: uid,
            container_id: id.to_string(),
        });
    }
    // cgroupfs: /kubepods[/burstable|/besteffort]/pod<uid>/<id>
    let k = parts.iter().position(|p| *p == "kubepods")?;
    let rest = &parts[k + 1..];
    let (qos, rest) = match rest.first() {
        Some(&"burstable") => (QosClass::Burstable, &rest[1..]),
        Some(&"besteffort") => (QosClass::BestEffort, &rest[1..]),
        _ => (QosClass::Guaranteed, rest),
    };
    match rest {
        [pod, id] => Some(PodCgroup {
            qos,
            pod_uid: pod.strip_prefix("pod")?.to_string(),
            container_id: id.to_string(),
        }),
        _ => None,
    }
}

/// `kubepods-burstable-pod<uid_>.slice` -> (Burstable, uid with dashes).
pub fn pod_of_slice(slice: &str) -> Option<(QosClass, String)> {
    let name = slice.strip_suffix(".slice")?;
    let name = name.strip_prefix("kubepods-")?;
    let (qos, pod) = if let Some(r) = name.strip_prefix("burstable-") {
        (QosClass::Burstable, r)
    } else if let Some(r) = name.strip_prefix("besteffort-") {
        (QosClass::BestEffort, r)
    } else {
        (QosClass::Guaranteed, name)
    };
    let uid = pod.strip_prefix("pod")?;
    (!uid.is_empty()).then(|| (qos, uid.replace('_', "-")))
}

/// Why placer may give a container none of the CPUs it wants.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAllowed {
    /// Pinned by the static CPU manager: never placer's to move, whatever the policy says.
    #[error(
        "the kubelet's static CPU manager pinned {container} to CPUs {cpus} exclusively: \
         placer leaves it alone"
    )]
    Exclusive { container: String, cpus: CpuSet },
    /// The kubelet allows CPUs, but none of those placer wants. `bound` names the
    /// kubelet's own sets (its request, its shared pool), never their meeting with placer's.
    #[error("placer's CPUs {want} do not meet the CPUs the kubelet allows ({bound}): not moved")]
    Conflict { want: CpuSet, bound: KubeletBound },
}

/// What the kubelet allows a container, as a conflict names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletBound {
    /// The cpuset the kubelet asked for the container (None: none).
    pub requested: Option<CpuSet>,
    /// The static CPU manager's shared pool (None: no static CPU manager).
    pub shared_pool: Option<CpuSet>,
}

impl std::fmt::Display for KubeletBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.requested, &self.shared_pool) {
            (Some(r), Some(p)) => write!(f, "cpuset {r}, shared pool {p}"),
            (Some(r), None) => write!(f, "cpuset {r}"),
            (None, Some(p)) => write!(f, "shared pool {p}"),
            (None, None) => write!(f, "any CPU"),
        }
    }
}

/// The CPUs placer may give a container, or why none.
pub fn allowed_cpus(
    want: &CpuSet,
    kubelet: &CpuManager,
    pod_uid: &str,
    container: &str,
    requested: Option<&CpuSet>,
) -> Result<CpuSet, NotAllowed> {
    let shared_pool = match kubelet {
        CpuManager::Static { shared, exclusive } => {
            if let Some(set) = exclusive.get(&(pod_uid.to_string(), container.to_string())) {
                return Err(NotAllowed::Exclusive {
                    container: container.to_string(),
                    cpus: set.clone(),
                });
            }
            Some(shared)
        }
        CpuManager::None => None,
    };
    let requested = requested.filter(|r| !r.is_empty());
    let mut got = want.clone();
    for bound in [shared_pool, requested].into_iter().flatten() {
        got = got.intersection(bound);
    }
    if got.is_empty() {
        return Err(NotAllowed::Conflict {
            want: want.clone(),
            bound: KubeletBound {
                requested: requested.cloned(),
                shared_pool: shared_pool.cloned(),
            },
        });
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn qos_class_names_are_the_configs() {
        let names = [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ]
        .map(QosClass::name);
        assert_eq!(names, crate::scope::QOS_CLASS_NAMES);
    }

    #[test]
    fn annotations_select_by_container_then_pod_and_preserve_wins() {
        let a = ann(&[
            ("policy.placer.io/pod", "contention"),
            ("policy.placer.io/container.web", "net-affinity"),
        ]);
        assert_eq!(
            selection(&a, "web").unwrap(),
            Selection::Policy {
                policy: crate::policy_kind::PolicyKind::NetAffinity,
                from: "policy.placer.io/container.web".into()
            }
        );
        assert_eq!(
            selection(&a, "sidecar").unwrap(),
            Selection::Policy {
                policy: crate::policy_kind::PolicyKind::Contention,
                from: POD_POLICY.into()
            }
        );
        let mut p = a.clone();
        p.insert("preserve.placer.io/container.web".into(), "true".into());
        assert!(matches!(
            selection(&p, "web").unwrap(),
            Selection::Preserved { .. }
        ));
        assert!(matches!(
            selection(&p, "sidecar").unwrap(),
            Selection::Policy { .. }
        ));
        p.insert(POD_PRESERVE.into(), "yes".into());
        assert!(matches!(
            selection(&p, "sidecar").unwrap(),
            Selection::Preserved { .. }
        ));
        // "false" is no opt-out.
        let f = ann(&[(POD_PRESERVE, "false"), (POD_POLICY, "numa-local")]);
        assert!(matches!(
            selection(&f, "x").unwrap(),
            Selection::Policy { .. }
        ));
        assert_eq!(selection(&ann(&[]), "x").unwrap(), Selection::Unspecified);
        let e = selection(&ann(&[(POD_POLICY, "fastest")]), "x").unwrap_err();
        assert!(e.to_string().contains("policy.placer.io/pod"), "{e}");
    }

    #[test]
    fn a_preserve_annotation_that_is_no_boolean_is_refused_with_its_value() {
        let maybe = ann(&[(POD_PRESERVE, "maybe"), (POD_POLICY, "smt-energy")]);
        let e = selection(&maybe, "x").unwrap_err();
        assert!(
            matches!(&e, K8sError::NotABoolean { annotation, value }
                if annotation == POD_PRESERVE && value == "maybe"),
            "{e}"
        );
        assert!(e.to_string().contains("\"maybe\""), "{e}");
        let c = ann(&[("preserve.placer.io/container.x", "perhaps")]);
        assert!(selection(&c, "x").is_err());
        // Issue 48: a MiB of value is quoted by its start and its length, in one short line
        // (multi-byte characters cut on a boundary).
        for long in ["y".repeat(1 << 20), "é".repeat(1 << 19)] {
            for key in [POD_PRESERVE, POD_POLICY] {
                let e = selection(&ann(&[(key, &long)]), "x")
                    .unwrap_err()
                    .to_string();
                assert!(e.len() < 400, "{} bytes", e.len());
                assert!(e.contains(&format!("({} bytes in all)", long.len())), "{e}");
            }
        }
        // Every spelling of false is accepted as false.
        for v in ["false", "No", "0", " FALSE "] {
            let f = ann(&[(POD_PRESERVE, v)]);
            assert_eq!(selection(&f, "x").unwrap(), Selection::Unspecified, "{v}");
        }
    }

    #[test]
    fn kubelet_state_static_and_none() {
        let s = r#"{"policyName":"static","defaultCpuSet":"0-1,6-7",
            "entries":{"3f1c-aa":{"db":"2-5"}},"checksum":1234}"#;
        let CpuManager::Static { shared, exclusive } = parse_cpu_manager_state(s).unwrap() else {
            panic!("static")
        };
        assert_eq!(shared.to_list_string(), "0-1,6-7");
        assert_eq!(
            exclusive[&("3f1c-aa".to_string(), "db".to_string())].to_list_string(),
            "2-5"
        );
        let n = r#"{"policyName":"none","defaultCpuSet":"","checksum":1}"#;
        assert_eq!(parse_cpu_manager_state(n).unwrap(), CpuManager::None);
        assert!(parse_cpu_manager_state(r#"{"policyName":"magic"}"#).is_err());
        assert!(parse_cpu_manager_state("{").is_err());
        assert!(parse_cpu_manager_state(
            r#"{"policyName":"static","defaultCpuSet":"x","entries":{}}"#
        )
        .is_err());
    }

    #[test]
    fn cgroup_paths_of_both_drivers_and_the_runtime_form() {
        let uid = "6b8f0d2e-1c3a-4b5d-9e7f-0a1b2c3d4e5f";
        let us = uid.replace('-', "_");
        for (path, qos) in [
            (format!("/kubepods/burstable/pod{uid}/abc123"), QosClass::Burstable),
            (format!("/kubepods/pod{uid}/abc123"), QosClass::Guaranteed),
            (format!("/kubepods/besteffort/pod{uid}/abc123"), QosClass::BestEffort),
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{us}.slice/cri-containerd-abc123.scope"
                ),
                QosClass::Burstable,
            ),
            (
                format!("/kubepods.slice/kubepods-pod{us}.slice/crio-abc123.scope"),
                QosClass::Guaranteed,
            ),
            (
                format!("kubepods-besteffort-pod{us}.slice:cri-containerd:abc123"),
                QosClass::BestEffort,
            ),
        ] {
            let c = parse_cgroup_path(&path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!(c.qos, qos, "{path}");
            assert_eq!(c.pod_uid, uid, "{path}");
            assert_eq!(c.container_id, "abc123", "{path}");
        }
        for not_pod in [
            "/system.slice/sshd.service",
            "/user.slice",
            "/",
            "/kubepods",
        ] {
            assert_eq!(parse_cgroup_path(not_pod), None, "{not_pod}");
        }
    }

    #[test]
    fn placer_never_widens_what_the_kubelet_allows() {
        let set = |s: &str| CpuSet::parse_list(s).unwrap();
        let st = CpuManager::Static {
            shared: set("0-1,6-7"),
            exclusive: [(("pod1".to_string(), "db".to_string()), set("2-5"))].into(),
        };
        // Exclusively pinned: refused, whatever placer wants.
        let e = allowed_cpus(&set("2-3"), &st, "pod1", "db", None).unwrap_err();
        assert!(e.to_string().contains("exclusively"), "{e}");
        // Shared pool: intersected.
        assert_eq!(
            allowed_cpus(&set("1-2"), &st, "pod2", "web", None).unwrap(),
            set("1")
        );
        // Outside the pool entirely: refused, not widened.
        assert!(allowed_cpus(&set("3-4"), &st, "pod2", "web", None).is_err());
        // With the kubelet's requested cpuset (UpdateContainer) as well.
        assert_eq!(
            allowed_cpus(&set("0-7"), &CpuManager::None, "p", "c", Some(&set("4-5"))).unwrap(),
            set("4-5")
        );
        assert_eq!(
            allowed_cpus(&set("0-1,6-7"), &st, "p", "c", Some(&set("1,6"))).unwrap(),
            set("1,6")
        );
    }

    #[test]
    fn a_conflict_names_the_kubelets_cpusets_not_their_empty_meeting() {
        let set = |s: &str| CpuSet::parse_list(s).unwrap();
        let e = allowed_cpus(&set("1"), &CpuManager::None, "p", "c", Some(&set("0"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "placer's CPUs 1 do not meet the CPUs the kubelet allows (cpuset 0): not moved"
        );
        let st = CpuManager::Static {
            shared: set("4-7"),
            exclusive: Default::default(),
        };
        let e = allowed_cpus(&set("1"), &st, "p", "c", Some(&set("0-5"))).unwrap_err();
        assert!(
            e.to_string().contains("(cpuset 0-5, shared pool 4-7)"),
            "{e}"
        );
        let e = allowed_cpus(&set("1"), &st, "p", "c", None).unwrap_err();
        assert!(e.to_string().contains("(shared pool 4-7)"), "{e}");
    }
}
