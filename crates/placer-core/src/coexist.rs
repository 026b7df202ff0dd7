//! Other agents that manage knobs placer also uses, and what placer does about them.
//!
//! - **irqbalance** moves IRQ affinities (every 10 s by default). placer never writes an
//!   IRQ's affinity, so nothing is fought over; net-affinity *follows* a moved IRQ: its
//!   receive CPUs are the IRQs' effective CPUs as of the latest topology refresh, and a
//!   held receiver whose target changed for `repin_after_intervals` is moved there. placer
//!   does not ban its receive CPUs from irqbalance: irqbalance reads its banned CPUs and IRQs
//!   (`IRQBALANCE_BANNED_CPULIST`, `--banirq`, `--policyscript`) only at its start, from
//!   its own service's configuration, so banning would mean editing another package's
//!   files and restarting its service; and banning a CPU moves every IRQ *off* it, the
//!   opposite of what a receiver placed beside its IRQ wants.
//! - **cpufreq owners** (tuned, power-profiles-daemon, auto-cpufreq, or a governor other
//!   than the kernel's default that placer did not set): energy-qos leaves the frequency
//!   caps alone unless `energy_qos.take_over_cpufreq` says to take over.
//!
//! The host detects (placer-linux `coexist`, on a root path); the decisions and their
//! wording are here, pure, so that the daemon, `explain` and `top` say the same.

use serde::{Deserialize, Serialize};

/// What the config says about the knobs other agents share, as [`Coexistence::statements`]
/// reads it (`Config::coexist_stance`; kept apart so that this module, which the topology
/// holds, does not depend on the config and its policies).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stance {
    pub net_affinity: bool,
    pub topology_refresh_ms: u64,
    pub repin_after_intervals: u32,
    pub energy_qos: bool,
    pub take_over_cpufreq: bool,
}

/// An agent placer knows by its process name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentKind {
    Irqbalance,
    Tuned,
    TunedPpd,
    PowerProfilesDaemon,
    AutoCpufreq,
}

/// Which of placer's knobs an agent manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owns {
    IrqAffinity,
    Cpufreq,
}

impl AgentKind {
    pub const ALL: [AgentKind; 5] = [
        AgentKind::Irqbalance,
        AgentKind::Tuned,
        AgentKind::TunedPpd,
        AgentKind::PowerProfilesDaemon,
        AgentKind::AutoCpufreq,
    ];

    /// The program's name.
    pub fn name(self) -> &'static str {
        match self {
            AgentKind::Irqbalance => "irqbalance",
            AgentKind::Tuned => "tuned",
            AgentKind::TunedPpd => "tuned-ppd",
            AgentKind::PowerProfilesDaemon => "power-profiles-daemon",
            AgentKind::AutoCpufreq => "auto-cpufreq",
        }
    }

    pub fn owns(self) -> Owns {
        match self {
            AgentKind::Irqbalance => Owns::IrqAffinity,
            AgentKind::Tuned
            | AgentKind::TunedPpd
            | AgentKind::PowerProfilesDaemon
            | AgentKind::AutoCpufreq => Owns::Cpufreq,
        }
    }

    /// The agent whose process has this `comm` (the kernel keeps its first 15 bytes:
    /// `power-profiles-daemon` reads `power-profiles-`).
    pub fn from_comm(comm: &str) -> Option<AgentKind> {
        const TASK_COMM_BYTES: usize = 15;
        AgentKind::ALL.into_iter().find(|k| {
            let n = k.name();
            comm == &n[..n.len().min(TASK_COMM_BYTES)]
        })
    }
}

/// A running agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    pub kind: AgentKind,
    pub pid: u32,
}

/// A cpufreq policy whose governor is not the kernel's default and was not set by placer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignGovernor {
    pub domain: u32,
    pub governor: String,
    pub default: String,
}

/// Who else manages placer's knobs on this machine (empty for a modelled machine).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Coexistence {
    pub agents: Vec<Agent>,
    pub foreign_governors: Vec<ForeignGovernor>,
}

impl Coexistence {
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty() && self.foreign_governors.is_empty()
    }

    fn owning(&self, what: Owns) -> impl Iterator<Item = &Agent> {
        self.agents.iter().filter(move |a| a.kind.owns() == what)
    }

    /// Who else owns cpufreq, said in a few words ("tuned (pid 812)", "governor
    /// powersave on policy0, not the default schedutil"); None when nobody does.
    pub fn cpufreq_owner(&self) -> Option<String> {
        let mut who: Vec<String> = self
            .owning(Owns::Cpufreq)
            .map(|a| format!("{} (pid {})", a.kind.name(), a.pid))
            .collect();
        if let Some(g) = self.foreign_governors.first() {
            let more = self.foreign_governors.len() - 1;
            who.push(format!(
                "governor {} on policy{}{}, not the default {}",
                g.governor,
                g.domain,
                if more > 0 {
                    format!(" (and {more} more)")
                } else {
                    String::new()
                },
                g.default
            ));
        }
        (!who.is_empty()).then(|| who.join(", "))
    }

    /// Whether energy-qos may write frequency caps: nobody else owns cpufreq, or the
    /// config says to take over.
    pub fn may_cap_frequency(&self, take_over: bool) -> bool {
        take_over || self.cpufreq_owner().is_none()
    }

    /// What placer does next to each agent found, one line each, for the daemon's log,
    /// `explain` and `top`.
    pub fn statements(&self, cfg: &Stance) -> Vec<String> {
        let mut out = Vec::new();
        for a in self.owning(Owns::IrqAffinity) {
            let what = if cfg.net_affinity {
                let refresh = if cfg.topology_refresh_ms == 0 {
                    "never: topology_refresh is 0, so net-affinity keeps the CPUs it read at start"
                        .to_string()
                } else {
                    format!(
                        "within topology_refresh ({} ms) + repin_after_intervals ({}) intervals",
                        cfg.topology_refresh_ms, cfg.repin_after_intervals
                    )
                };
                format!(
                    "net-affinity follows a moved IRQ: a held receiver moves to its IRQ's new \
                     CPU {refresh}; placer never writes IRQ affinity and bans nothing from {}",
                    a.kind.name()
                )
            } else {
                "placer never writes IRQ affinity (net-affinity is off)".to_string()
            };
            out.push(format!(
                "{} (pid {}) moves IRQs: {what}",
                a.kind.name(),
                a.pid
            ));
        }
        if let Some(who) = self.cpufreq_owner() {
            let what = if !cfg.energy_qos {
                "placer does not touch cpufreq (energy-qos is off)"
            } else if cfg.take_over_cpufreq {
                "energy-qos caps frequencies anyway (energy_qos.take_over_cpufreq = true)"
            } else {
                "energy-qos leaves frequency caps alone (energy_qos.take_over_cpufreq = false)"
            };
            out.push(format!("cpufreq is managed by {who}: {what}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(agents: &[(AgentKind, u32)], governors: &[(u32, &str, &str)]) -> Coexistence {
        Coexistence {
            agents: agents
                .iter()
                .map(|&(kind, pid)| Agent { kind, pid })
                .collect(),
            foreign_governors: governors
                .iter()
                .map(|&(domain, g, d)| ForeignGovernor {
                    domain,
                    governor: g.into(),
                    default: d.into(),
                })
                .collect(),
        }
    }

    #[test]
    fn agents_are_known_by_their_truncated_comm() {
        assert_eq!(
            AgentKind::from_comm("irqbalance"),
            Some(AgentKind::Irqbalance)
        );
        assert_eq!(
            AgentKind::from_comm("power-profiles-"),
            Some(AgentKind::PowerProfilesDaemon)
        );
        assert_eq!(AgentKind::from_comm("tuned"), Some(AgentKind::Tuned));
        assert_eq!(AgentKind::from_comm("tuned-ppd"), Some(AgentKind::TunedPpd));
        assert_eq!(AgentKind::from_comm("irqbalanc"), None);
        assert_eq!(AgentKind::from_comm("power-profiles"), None);
        assert_eq!(AgentKind::from_comm("bash"), None);
    }

    #[test]
    fn energy_qos_caps_only_when_nobody_else_owns_cpufreq_or_told_to_take_over() {
        let none = Coexistence::default();
        assert!(none.may_cap_frequency(false));
        let irq = with(&[(AgentKind::Irqbalance, 7)], &[]);
        assert!(
            irq.may_cap_frequency(false),
            "irqbalance is no cpufreq owner"
        );
        let tuned = with(&[(AgentKind::Tuned, 9)], &[]);
        assert!(!tuned.may_cap_frequency(false));
        assert!(tuned.may_cap_frequency(true));
        let gov = with(&[], &[(0, "powersave", "schedutil")]);
        assert!(!gov.may_cap_frequency(false));
        assert_eq!(
            gov.cpufreq_owner().as_deref(),
            Some("governor powersave on policy0, not the default schedutil")
        );
    }

    #[test]
    fn statements_say_what_placer_does_next_to_each_agent() {
        let mut cfg = crate::config::Config::default().coexist_stance();
        let c = with(
            &[(AgentKind::Irqbalance, 7), (AgentKind::Tuned, 9)],
            &[(0, "powersave", "schedutil"), (4, "powersave", "schedutil")],
        );
        let s = c.statements(&cfg);
        assert_eq!(s.len(), 2, "{s:?}");
        assert!(
            s[0].starts_with("irqbalance (pid 7) moves IRQs: net-affinity follows a moved IRQ")
                && s[0].contains("topology_refresh (10000 ms)"),
            "{}",
            s[0]
        );
        assert_eq!(
            s[1],
            "cpufreq is managed by tuned (pid 9), governor powersave on policy0 (and 1 more), \
             not the default schedutil: placer does not touch cpufreq (energy-qos is off)"
        );
        cfg.net_affinity = false;
        cfg.energy_qos = true;
        let s = c.statements(&cfg);
        assert!(s[0].ends_with("placer never writes IRQ affinity (net-affinity is off)"));
        assert!(
            s[1].ends_with("leaves frequency caps alone (energy_qos.take_over_cpufreq = false)")
        );
        cfg.take_over_cpufreq = true;
        assert!(c.statements(&cfg)[1].contains("caps frequencies anyway"));
        assert!(Coexistence::default().statements(&cfg).is_empty());
    }
}
