//! Which policy: the identity plans, notes, verdicts, back-off keys and journal labels carry.
//! A module of its own, below `plan` and `policy`, so that they can name it without
//! importing the policies (which import them).

use serde::{Deserialize, Serialize};

/// The policies placer has, as the config names them (`policies = ["net-affinity"]`): an
/// unknown name is refused when the config is parsed, and building one
/// (`engine::policies_from_config`) is an exhaustive match, so a new kind without a policy
/// does not compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    NetAffinity,
    SmtEnergy,
    Contention,
    EnergyQos,
    NumaLocal,
}

impl PolicyKind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::NetAffinity,
        PolicyKind::SmtEnergy,
        PolicyKind::Contention,
        PolicyKind::EnergyQos,
        PolicyKind::NumaLocal,
    ];

    /// The name in configs, plans, metrics and logs (each policy's `NAME`); the same as
    /// its serde name (a test checks).
    pub const fn name(self) -> &'static str {
        match self {
            PolicyKind::NetAffinity => "net-affinity",
            PolicyKind::SmtEnergy => "smt-energy",
            PolicyKind::Contention => "contention",
            PolicyKind::EnergyQos => "energy-qos",
            PolicyKind::NumaLocal => "numa-local",
        }
    }

    pub fn parse(name: &str) -> Option<PolicyKind> {
        PolicyKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyKind::parse(s).ok_or_else(|| {
            let known: Vec<&str> = PolicyKind::ALL.iter().map(|k| k.name()).collect();
            format!("unknown policy {s:?}; known: {}", known.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde_and_parse() {
        for k in PolicyKind::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("{:?}", k.name()));
            assert_eq!(serde_json::from_str::<PolicyKind>(&json).unwrap(), k);
            assert_eq!(k.name().parse::<PolicyKind>(), Ok(k));
        }
        assert!("nope"
            .parse::<PolicyKind>()
            .unwrap_err()
            .contains("net-affinity"));
    }
}
