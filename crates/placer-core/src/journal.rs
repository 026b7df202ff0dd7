//! What a host changed and how it put it back: the journal's entries ([`Knob`], [`Entry`])
//! and a restore's outcome ([`Restored`]). Types only: each host keeps its own journal (the
//! real host durably in its state dir, `placer_linux::journal`; the simulator in memory), and
//! `Host::journal` / `Host::restore_all` expose it so the agent restores through any host.

use serde::{Deserialize, Serialize};

/// A knob placer can change.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "knob", rename_all = "snake_case")]
pub enum Knob {
    /// CPU affinity of every thread of a process (value: CPU list).
    ProcAffinity { pid: u32, start_time_ticks: u64 },
    /// /proc/irq/N/smp_affinity_list (value: CPU list).
    IrqAffinity { irq: u32 },
    /// /sys/class/net/DEV/queues/QUEUE/rps_cpus (value: hex mask as the kernel prints it).
    Rps { dev: String, queue: String },
    /// cpufreq policyN/scaling_max_freq (value: kHz).
    CpufreqMax { domain: u32 },
    /// cpufreq policyN/scaling_governor (value: governor, and `name:speed_khz` for userspace).
    CpufreqGovernor { domain: u32 },
    /// Root qdisc setup of a device (value: JSON the tc handler understands).
    TcQdisc { dev: String, netns: Option<String> },
    /// Memory policy of a process (value: JSON the memory handler understands).
    MemPolicy { pid: u32, start_time_ticks: u64 },
}

/// The kinds of knob: what a host's handler is chosen by. Matched exhaustively (from an
/// action, [`KnobKind::of`]; from a journal entry, [`Knob::kind`]; to a handler, the
/// actuator's), so a knob or an action added without a handler does not compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KnobKind {
    ProcAffinity,
    IrqAffinity,
    Rps,
    CpufreqMax,
    CpufreqGovernor,
    TcQdisc,
    MemPolicy,
}

impl KnobKind {
    /// The kind of knob `action` changes.
    pub fn of(action: &crate::plan::Action) -> KnobKind {
        use crate::plan::Action;
        match action {
            Action::PinProcess { .. }
            | Action::PinThread { .. }
            | Action::RestoreProcess { .. } => KnobKind::ProcAffinity,
            Action::SetIrqAffinity { .. } | Action::RestoreIrq { .. } => KnobKind::IrqAffinity,
            Action::SetRps { .. } => KnobKind::Rps,
            // RestoreFrequency puts back both of a domain's knobs; one handler holds both.
            Action::CapFrequency { .. } | Action::RestoreFrequency { .. } => KnobKind::CpufreqMax,
            Action::SetGovernor { .. } => KnobKind::CpufreqGovernor,
            Action::LimitBandwidth { .. } | Action::RemoveLimit { .. } => KnobKind::TcQdisc,
            Action::BindMemory { .. } | Action::RestoreMemory { .. } => KnobKind::MemPolicy,
        }
    }

    /// The name in the journal file and messages.
    pub fn name(self) -> &'static str {
        match self {
            KnobKind::ProcAffinity => "proc_affinity",
            KnobKind::IrqAffinity => "irq_affinity",
            KnobKind::Rps => "rps",
            KnobKind::CpufreqMax => "cpufreq_max",
            KnobKind::CpufreqGovernor => "cpufreq_governor",
            KnobKind::TcQdisc => "tc_qdisc",
            KnobKind::MemPolicy => "mem_policy",
        }
    }
}

impl std::fmt::Display for KnobKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Knob {
    /// The kind of this knob (its handler's key).
    pub fn kind(&self) -> KnobKind {
        match self {
            Knob::ProcAffinity { .. } => KnobKind::ProcAffinity,
            Knob::IrqAffinity { .. } => KnobKind::IrqAffinity,
            Knob::Rps { .. } => KnobKind::Rps,
            Knob::CpufreqMax { .. } => KnobKind::CpufreqMax,
            Knob::CpufreqGovernor { .. } => KnobKind::CpufreqGovernor,
            Knob::TcQdisc { .. } => KnobKind::TcQdisc,
            Knob::MemPolicy { .. } => KnobKind::MemPolicy,
        }
    }
}

impl std::fmt::Display for Knob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Knob::ProcAffinity { pid, .. } => write!(f, "affinity of pid {pid}"),
            Knob::IrqAffinity { irq } => write!(f, "affinity of IRQ {irq}"),
            Knob::Rps { dev, queue } => write!(f, "RPS CPUs of {dev}/{queue}"),
            Knob::CpufreqMax { domain } => write!(f, "scaling_max_freq of policy{domain}"),
            Knob::CpufreqGovernor { domain } => write!(f, "governor of policy{domain}"),
            Knob::TcQdisc { dev, netns } => match netns {
                Some(ns) => write!(f, "qdisc of {dev} in netns {ns}"),
                None => write!(f, "qdisc of {dev}"),
            },
            Knob::MemPolicy { pid, .. } => write!(f, "memory policy of pid {pid}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(flatten)]
    pub knob: Knob,
    /// The value before placer's first change.
    pub previous: String,
    /// What placer last set.
    pub applied: String,
    /// Context for people: the process's comm, the policy.
    #[serde(default)]
    pub label: String,
    /// When placer first changed it (Unix time, seconds).
    #[serde(default)]
    pub since_unix_s: u64,
    /// Process affinity: threads whose own value before placer differed from `previous`
    /// (an app that pins its threads itself), by tid. Restore gives each its own back.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub thread_previous: std::collections::BTreeMap<u32, String>,
    /// Process affinity: a mask placer is moving the threads through on their way back to
    /// `previous` (the judge's off arm, V12 in [`crate::verifier`]), journaled before the
    /// first thread is put on it, so that a daemon killed between the two steps leaves a
    /// mask the next restore knows as placer's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transit: Option<String>,
}

/// What became of one journaled knob on restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// Put back to its previous value.
    Restored,
    /// Its object no longer exists (the process exited, the device is gone).
    Gone(String),
    /// Someone else changed it since placer did: left as they set it.
    ChangedElsewhere(String),
    /// Could not be restored now; the entry stays in the journal.
    Failed(String),
}

impl Restored {
    /// Whether the entry leaves the journal.
    pub fn settled(&self) -> bool {
        !matches!(self, Restored::Failed(_))
    }
    pub fn kind(&self) -> &'static str {
        match self {
            Restored::Restored => "restored",
            Restored::Gone(_) => "gone",
            Restored::ChangedElsewhere(_) => "changed_elsewhere",
            Restored::Failed(_) => "failed",
        }
    }
}

/// Whether `entry` is a knob that `policy` set, given the processes it held: what a policy
/// switched off by a config reload leaves to put back. Process affinity and memory policy
/// are set by whichever policy holds the process; frequency caps, governors and qdiscs only
/// by energy-qos; no policy sets IRQ affinity or RPS. A match per knob kind, so a new kind
/// cannot compile without saying who sets it.
pub fn set_by(entry: &Entry, policy: crate::policies::PolicyKind, held: &[crate::ProcKey]) -> bool {
    use crate::policies::PolicyKind;
    let holds = |pid: u32, start_time_ticks: u64| {
        held.iter()
            .any(|k| k.pid == pid && k.start_time_ticks == start_time_ticks)
    };
    match entry.knob {
        Knob::ProcAffinity {
            pid,
            start_time_ticks,
        }
        | Knob::MemPolicy {
            pid,
            start_time_ticks,
        } => holds(pid, start_time_ticks),
        Knob::CpufreqMax { .. } | Knob::CpufreqGovernor { .. } | Knob::TcQdisc { .. } => {
            policy == PolicyKind::EnergyQos
        }
        Knob::IrqAffinity { .. } | Knob::Rps { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policies::PolicyKind;
    use crate::ProcKey;

    fn entry(knob: Knob) -> Entry {
        Entry {
            knob,
            previous: String::new(),
            applied: String::new(),
            label: String::new(),
            since_unix_s: 0,
            thread_previous: Default::default(),
            transit: None,
        }
    }

    #[test]
    fn a_policy_set_the_knobs_of_what_it_held_and_only_energy_qos_sets_caps_and_qdiscs() {
        let held = [ProcKey {
            pid: 7,
            start_time_ticks: 70,
        }];
        let mine = entry(Knob::ProcAffinity {
            pid: 7,
            start_time_ticks: 70,
        });
        let reused_pid = entry(Knob::ProcAffinity {
            pid: 7,
            start_time_ticks: 71,
        });
        let memory = entry(Knob::MemPolicy {
            pid: 7,
            start_time_ticks: 70,
        });
        let cap = entry(Knob::CpufreqMax { domain: 0 });
        let qdisc = entry(Knob::TcQdisc {
            dev: "eth0".into(),
            netns: None,
        });
        let irq = entry(Knob::IrqAffinity { irq: 3 });
        for kind in PolicyKind::ALL {
            assert!(set_by(&mine, kind, &held) && set_by(&memory, kind, &held));
            assert!(!set_by(&reused_pid, kind, &held) && !set_by(&mine, kind, &[]));
            let qos = kind == PolicyKind::EnergyQos;
            assert_eq!(
                (set_by(&cap, kind, &[]), set_by(&qdisc, kind, &[])),
                (qos, qos)
            );
            assert!(!set_by(&irq, kind, &held));
        }
    }
}
