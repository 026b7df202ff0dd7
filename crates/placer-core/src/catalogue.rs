//! The catalogue of machine facts placer carries as data, with their sources: the built-in
//! machines ([`MACHINES`]; `machines` builds their topologies), their whole-machine power
//! models ([`POWER_MODELS`], read by seed 001's `power_model::builtin`), their DVFS tables (the Exynos 5422's operating points and
//! per-CPU power, which energy-qos's `StatePowerTable::for_topology` reads) and the
//! classifier's per-machine thresholds (`[contention.classify.per_machine]`, none built in),
//! and each machine's memory bandwidth per node with the loaded-latency curve, from which
//! its sufficient-contention threshold follows ([`sufficient_contention_bytes_per_s`]).
//! [`entries`] lists, for each built-in machine, which of these facts placer has.

use crate::classify::Thresholds;

/// The smallest relative change a verdict counts by default (`[verify] min_effect`); each
/// machine's sufficient-contention threshold is set by it too. Here, a leaf module, so that
/// the config, the verdicts and the policies all reach it without importing each other.
pub const DEFAULT_MIN_EFFECT: f64 = 0.05;

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

/// One machine's peak memory bandwidth per NUMA node, with its source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryFacts {
    pub machine: &'static str,
    pub node_bw_bytes_per_s: f64,
    pub source: &'static str,
}

/// Peak memory bandwidth per node of the built-in machines (the simulator's
/// `contention.node_bw_gbps` and the threshold below both read it).
pub const MEMORY: &[MemoryFacts] = &[
    MemoryFacts {
        machine: "dell-c6100",
        node_bw_bytes_per_s: 25e9,
        source: "[E] 3-channel DDR3-1066/1333 per socket (docs/simulator.md)",
    },
    MemoryFacts {
        machine: "hp-dk388p",
        node_bw_bytes_per_s: 40e9,
        source: "[E] CALIBRATION C MLC ~80 GB/s per modern socket, scaled to a 2012 socket (docs/simulator.md)",
    },
    MemoryFacts {
        machine: "xeon-5355x2",
        node_bw_bytes_per_s: 10.7e9,
        source: "front-side bus 1333 MT/s x 8 B = 10.7 GB/s for the whole machine",
    },
    MemoryFacts {
        machine: "xeon-x5570x2",
        node_bw_bytes_per_s: 25e9,
        source: "[E] 3-channel DDR3-1066/1333 per socket (docs/simulator.md)",
    },
    MemoryFacts {
        machine: "xeon-e5-2697x2",
        node_bw_bytes_per_s: 60e9,
        source: "[E] CALIBRATION C MLC ~80 GB/s per modern socket, scaled to a 2014 socket (docs/simulator.md)",
    },
    MemoryFacts {
        machine: "opteron-magny-cours-4p",
        node_bw_bytes_per_s: 14.4e9,
        source: "CALIBRATION D: 28.8 GB/s northbridge per package, shared by its two dies",
    },
    MemoryFacts {
        machine: "odroid-xu4",
        node_bw_bytes_per_s: 7e9,
        source: "[E] LPDDR3 (docs/simulator.md)",
    },
];

/// Loaded latency relative to idle against node bandwidth relative to its peak:
/// CALIBRATION C, Intel MLC 3.11b on a 2S Intel (3/43/83/133/159 GB/s -> 82/91/101/128/~310
/// ns), normalised to 159 GB/s and 82 ns; the simulator's default curve.
pub const LOADED_LATENCY: &[[f64; 2]] = &[
    [0.0, 1.0],
    [0.27, 1.11],
    [0.52, 1.23],
    [0.84, 1.56],
    [1.0, 3.8],
];

/// The memory facts of a built-in machine.
pub fn memory(machine: &str) -> Option<&'static MemoryFacts> {
    MEMORY.iter().find(|m| m.machine == machine)
}

/// The node bandwidth share at which `curve` (as [`LOADED_LATENCY`]) first reaches a
/// latency of `1 + min_effect`, by linear interpolation; None if it never does.
pub fn utilisation_at_latency(curve: &[[f64; 2]], min_effect: f64) -> Option<f64> {
    let target = 1.0 + min_effect;
    if curve.first()?[1] >= target {
        return Some(curve[0][0]);
    }
    curve.windows(2).find_map(|w| {
        let ([x0, y0], [x1, y1]) = (w[0], w[1]);
        (y1 >= target && y1 > y0).then(|| x0 + (target - y0) / (y1 - y0) * (x1 - x0))
    })
}

/// A machine's sufficient-contention threshold, bytes/s of one domain: the traffic at which
/// the loaded-latency curve costs a latency-bound app `min_effect` (the verdicts' minimum
/// effect), i.e. where moving apps apart can first show a gain the verdict would keep
/// (docs/contention.md, "Where the two deciding quantities sit"). None for a machine
/// without memory facts.
pub fn sufficient_contention_bytes_per_s(machine: &str, min_effect: f64) -> Option<f64> {
    let m = memory(machine)?;
    Some(utilisation_at_latency(LOADED_LATENCY, min_effect)? * m.node_bw_bytes_per_s)
}

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
    /// Peak memory bandwidth per node, where known.
    pub memory: Option<MemoryFacts>,
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
            memory: memory(name).copied(),
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
        assert!(e.iter().all(|x| x.memory.is_some()));
    }

    #[test]
    fn the_sufficient_contention_threshold_is_a_fact_of_each_machine() {
        // +5% on the first segment (1.0 -> 1.11 at 0.27): 0.05 / 0.11 x 0.27 of the peak.
        let u = utilisation_at_latency(LOADED_LATENCY, 0.05).unwrap();
        assert!((u - 0.05 / 0.11 * 0.27).abs() < 1e-12);
        let x5570 = sufficient_contention_bytes_per_s("xeon-x5570x2", 0.05).unwrap();
        let e5 = sufficient_contention_bytes_per_s("xeon-e5-2697x2", 0.05).unwrap();
        assert!((x5570 - 25e9 * u).abs() < 1.0, "{x5570}");
        assert!((e5 - 60e9 * u).abs() < 1.0, "{e5}");
        // Differs per machine, rises with the effect asked for, unknown machines have none.
        let all: Vec<f64> = MACHINES
            .iter()
            .map(|(n, _)| sufficient_contention_bytes_per_s(n, 0.05).unwrap())
            .collect();
        assert!(all.iter().any(|&t| t != all[0]));
        assert!(sufficient_contention_bytes_per_s("xeon-x5570x2", 0.2).unwrap() > x5570);
        assert_eq!(
            sufficient_contention_bytes_per_s("pkg:1 core:4", 0.05),
            None
        );
        assert_eq!(utilisation_at_latency(LOADED_LATENCY, 5.0), None);
    }
}
