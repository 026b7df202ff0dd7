//! The catalogue of machine facts placer carries as data, with their sources: the built-in
//! machines (topologies in `machines`), their whole-machine power models (seed 001's
//! `power_model::builtin`), their DVFS tables (the Exynos 5422's operating points and
//! per-CPU power, which energy-qos's `StatePowerTable::for_topology` reads) and the
//! classifier's per-machine thresholds (`[contention.classify.per_machine]`, none built in).
//! [`entries`] lists, for each built-in machine, which of these facts placer has.

use crate::classify::Thresholds;

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
    crate::machines::MACHINES
        .iter()
        .map(|&(name, description)| Entry {
            name,
            description,
            power_model: crate::power_model::builtin(name).is_some(),
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
        assert_eq!(e.len(), crate::machines::MACHINES.len());
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
