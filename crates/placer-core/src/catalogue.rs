//! The catalogue of machine facts placer carries as data, with their sources: the built-in
//! machines ([`MACHINES`]; `machines` builds their topologies), their whole-machine power
//! models ([`POWER_MODELS`], read by seed 001's `power_model::builtin`), their DVFS tables (the Exynos 5422's operating points and
//! per-CPU power, which energy-qos's `StatePowerTable::for_topology` reads) and the
//! classifier's per-machine thresholds (`[contention.classify.per_machine]`, none built in).
//! [`entries`] lists, for each built-in machine, which of these facts placer has.

use crate::classify::Thresholds;

/// Names of the built-in machines, with a one-line description.
pub const MACHINES: &[(&str, &str)] = &[
    ("odroid-xu4", "Exynos 5422: 4x Cortex-A7 (CPUs 0-3) + 4x Cortex-A15 (4-7), two DVFS domains, one GbE NIC (seed 000)"),
    ("dell-c6100", "2x Xeon L5520: 2 packages x 4 cores x 2 threads, 2 NUMA nodes (seed 001)"),
    ("hp-dk388p", "2x Xeon E5-2667: 2 packages x 6 cores x 2 threads, 2 NUMA nodes (seed 001)"),
    ("xeon-5355x2", "2x quad-core Xeon 5355: L2 shared by core pairs, two 4-port GbE NICs (seed 002)"),
    ("xeon-x5570x2", "2x Xeon X5570: 2 packages x 4 cores, L3 per package, 2 NUMA nodes (seed 003)"),
    ("xeon-e5-2697x2", "2x Xeon E5-2697 v3: 2 packages x 14 cores, L3 per package, 2 NUMA nodes (seed 003)"),
    ("opteron-magny-cours-4p", "4x Opteron 6136: 4 packages x 2 dies (NUMA nodes) x 4 cores, one 10 GbE NIC (seed 004)"),
];

/// A whole-machine power model's coefficients (seed 001: `P = Pn + Ps·packages +
/// Pc·cores + Pt·extra SMT threads`), with where they were measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerModelFacts {
    pub machine: &'static str,
    pub node_w: f64,
    pub package_w: f64,
    pub core_w: f64,
    pub thread_w: f64,
    pub source: &'static str,
}

/// The built-in whole-machine power models (`power_model::builtin` reads them).
pub const POWER_MODELS: &[PowerModelFacts] = &[
    PowerModelFacts {
        machine: "dell-c6100",
        node_w: 76.11,
        package_w: 25.19,
        core_w: 9.68,
        thread_w: 2.61,
        source: "seed 001 Table 3: Dell C6100, 2x Xeon L5520, Linux 3.6.11",
    },
    PowerModelFacts {
        machine: "hp-dk388p",
        node_w: 106.41,
        package_w: 39.74,
        core_w: 11.13,
        thread_w: 2.83,
        source: "seed 001 section 2.1: HP DK388P, 2x Xeon E5-2667, Linux 2.6.32",
    },
];

/// One DVFS domain's table: operating voltage by frequency and busy-CPU power by frequency.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DvfsTable {
    /// (up to MHz, V).
    pub volts: &'static [(u64, f64)],
    /// (MHz, mW per busy CPU).
    pub ipa_mw: &'static [(u64, f64)],
}

/// Exynos 5422 OPP voltages (CALIBRATION A1, exynos5800.dtsi): (up to MHz, V).
const A15_VOLTS: &[(u64, f64)] = &[
    (800, 0.900),
    (1200, 1.000),
    (1500, 1.100),
    (1700, 1.250),
    (1800, 1.2375),
    (1900, 1.2625),
    (2000, 1.3125),
];
const A7_VOLTS: &[(u64, f64)] = &[
    (300, 0.900),
    (700, 1.000),
    (1000, 1.100),
    (1300, 1.250),
    (1400, 1.275),
];
/// Vendor IPA table, mW per busy CPU (CALIBRATION A3).
const A15_IPA_MW: &[(u64, f64)] = &[
    (800, 356.0),
    (1000, 495.0),
    (1200, 656.0),
    (1400, 842.0),
    (1600, 1077.0),
    (1800, 1377.0),
    (1900, 1638.0),
    (2000, 1888.0),
];
const A7_IPA_MW: &[(u64, f64)] = &[(800, 82.0), (1000, 118.0), (1200, 169.0), (1400, 250.0)];
/// Leakage current of an active cluster at 330 K (CALIBRATION A7: c1 T^2 e^(c2/T) + I_gate).
pub const EXYNOS5422_LEAK_A_PER_CLUSTER: f64 = 0.0856;
/// Rest of the SoC (IPA's `soc` power, CALIBRATION A3).
pub const EXYNOS5422_SOC_BASE_W: f64 = 0.5;

/// The Exynos 5422's big cluster (Cortex-A15), CALIBRATION A1 and A3.
pub const EXYNOS5422_A15: DvfsTable = DvfsTable {
    volts: A15_VOLTS,
    ipa_mw: A15_IPA_MW,
};
/// The Exynos 5422's LITTLE cluster (Cortex-A7), CALIBRATION A1 and A3.
pub const EXYNOS5422_A7: DvfsTable = DvfsTable {
    volts: A7_VOLTS,
    ipa_mw: A7_IPA_MW,
};

/// What placer knows of one built-in machine.
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: &'static str,
    pub description: &'static str,
    /// A whole-machine power model (seed 001) is built in.
    pub power_model: bool,
    /// DVFS tables by cluster (LITTLE, big), where built in.
    pub dvfs: Option<[DvfsTable; 2]>,
    /// Classifier thresholds for it, where built in (none are: they come from the config).
    pub classifier: Option<Thresholds>,
}

/// Every built-in machine with the facts placer carries for it.
pub fn entries() -> Vec<Entry> {
    MACHINES
        .iter()
        .map(|&(name, description)| Entry {
            name,
            description,
            power_model: POWER_MODELS.iter().any(|m| m.machine == name),
            dvfs: (name == "odroid-xu4").then_some([EXYNOS5422_A7, EXYNOS5422_A15]),
            classifier: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_machine_is_listed_with_its_facts() {
        let e = entries();
        assert_eq!(e.len(), MACHINES.len());
        let xu4 = e.iter().find(|x| x.name == "odroid-xu4").unwrap();
        assert!(xu4.dvfs.is_some() && !xu4.power_model);
        let dell = e.iter().find(|x| x.name == "dell-c6100").unwrap();
        assert!(dell.power_model && dell.dvfs.is_none());
        // Voltages and powers ascend with frequency in both tables.
        for t in [EXYNOS5422_A7, EXYNOS5422_A15] {
            assert!(t.volts.windows(2).all(|w| w[0].0 < w[1].0));
            assert!(t
                .ipa_mw
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
        }
    }
}
