//! The catalogue of machine facts placer carries as data, with their sources: the built-in
//! machines ([`Machine`]; `machines` builds their topologies), their whole-machine power
//! models ([`Machine::measured_power_model`], read by seed 001's `power_model::builtin`;
//! [`Machine::power_coefficients`], read by the simulator), their DVFS tables (the Exynos 5422's operating points and
//! per-CPU power, which `power_table::StatePowerTable::for_topology` reads) and the
//! classifier's per-machine thresholds (`[contention.classify.per_machine]`, none built in),
//! and each machine's memory bandwidth per node with the loaded-latency curve, from which
//! its sufficient-contention threshold follows ([`sufficient_contention_bytes_per_s`]).
//! [`entries`] lists, for each built-in machine, which of these facts placer has.

use crate::classify::Thresholds;

/// The smallest relative change a verdict counts by default (`[verify] min_effect`); each
/// machine's sufficient-contention threshold is set by it too. Here, a leaf module, so that
/// the config, the verdicts and the policies all reach it without importing each other.
pub const DEFAULT_MIN_EFFECT: f64 = 0.05;

/// The built-in machines. Every fact of a machine is a match on this enum (here, and the
/// topology in `machines::build`), so a machine added without its facts does not compile;
/// the simulator's parameters read the same facts, none typed twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Machine {
    OdroidXu4,
    DellC6100,
    HpDk388p,
    Xeon5355x2,
    XeonX5570x2,
    XeonE52697x2,
    OpteronMagnyCours4p,
}

impl Machine {
    /// Every built-in machine, in the order `placer topo --list` shows them.
    pub const ALL: [Machine; 7] = [
        Machine::OdroidXu4,
        Machine::DellC6100,
        Machine::HpDk388p,
        Machine::Xeon5355x2,
        Machine::XeonX5570x2,
        Machine::XeonE52697x2,
        Machine::OpteronMagnyCours4p,
    ];

    /// The name `--machine` and scenarios take.
    pub fn name(self) -> &'static str {
        match self {
            Machine::OdroidXu4 => "odroid-xu4",
            Machine::DellC6100 => "dell-c6100",
            Machine::HpDk388p => "hp-dk388p",
            Machine::Xeon5355x2 => "xeon-5355x2",
            Machine::XeonX5570x2 => "xeon-x5570x2",
            Machine::XeonE52697x2 => "xeon-e5-2697x2",
            Machine::OpteronMagnyCours4p => "opteron-magny-cours-4p",
        }
    }

    pub fn parse(name: &str) -> Option<Machine> {
        Machine::ALL.into_iter().find(|m| m.name() == name)
    }

    /// One line on what it is and which seed it comes from.
    pub fn description(self) -> &'static str {
        match self {
            Machine::OdroidXu4 => "Exynos 5422: 4x Cortex-A7 (CPUs 0-3) + 4x Cortex-A15 (4-7), two DVFS domains, one GbE NIC (seed 000)",
            Machine::DellC6100 => "2x Xeon L5520: 2 packages x 4 cores x 2 threads, 2 NUMA nodes (seed 001)",
            Machine::HpDk388p => "2x Xeon E5-2667: 2 packages x 6 cores x 2 threads, 2 NUMA nodes (seed 001)",
            Machine::Xeon5355x2 => "2x quad-core Xeon 5355: L2 shared by core pairs, two 4-port GbE NICs (seed 002)",
            Machine::XeonX5570x2 => "2x Xeon X5570: 2 packages x 4 cores, L3 per package, 2 NUMA nodes (seed 003)",
            Machine::XeonE52697x2 => "2x Xeon E5-2697 v3: 2 packages x 14 cores, L3 per package, 2 NUMA nodes (seed 003)",
            Machine::OpteronMagnyCours4p => "4x Opteron 6136: 4 packages x 2 dies (NUMA nodes) x 4 cores, one 10 GbE NIC (seed 004)",
        }
    }

    /// The whole-machine power model seed 001 measured on it, where it did
    /// (`power_model::builtin`).
    pub fn measured_power_model(self) -> Option<PowerModelFacts> {
        match self {
            Machine::DellC6100 => Some(DELL_C6100_POWER),
            Machine::HpDk388p => Some(HP_DK388P_POWER),
            Machine::OdroidXu4
            | Machine::Xeon5355x2
            | Machine::XeonX5570x2
            | Machine::XeonE52697x2
            | Machine::OpteronMagnyCours4p => None,
        }
    }

    /// The whole-machine power coefficients the simulator uses: the measured model where
    /// there is one, else the nearest published figures (each with its source); None for
    /// the odroid, whose power is per cluster and frequency ([`EXYNOS5422_A15`]).
    pub fn power_coefficients(self) -> Option<PowerModelFacts> {
        match self {
            Machine::DellC6100 | Machine::HpDk388p => self.measured_power_model(),
            Machine::XeonX5570x2 => Some(PowerModelFacts {
                source: "same Nehalem generation as seed 001's L5520 box (dell-c6100): its Pn/Ps/Pc/Pt",
                ..DELL_C6100_POWER
            }),
            Machine::Xeon5355x2 => Some(PowerModelFacts {
                node_w: 166.0,
                package_w: 0.0,
                core_w: 12.4,
                thread_w: 0.0,
                source: "CAL B SPECpower, Fujitsu RX300 S4, 2x E5440 (same 65 nm/45 nm FSB generation): idle 166 W, peak 265 W over 8 cores",
            }),
            Machine::XeonE52697x2 => Some(PowerModelFacts {
                node_w: 66.0,
                package_w: 0.0,
                core_w: 15.0,
                thread_w: 4.0,
                source: "CAL B SPECpower, IBM x3550 M3 style: (247-66)/12 = 15 W per loaded core, idle 66 W; [E] Pt 27% of Pc",
            }),
            Machine::OpteronMagnyCours4p => Some(PowerModelFacts {
                node_w: 250.0,
                package_w: 0.0,
                core_w: 9.3,
                thread_w: 0.0,
                source: "[E] RX300 S4-era idle per 2 sockets x2, 12.4 W per core x 0.75 (smaller cores at 2.4 GHz)",
            }),
            Machine::OdroidXu4 => None,
        }
    }

    /// DVFS tables by cluster (LITTLE, big), where built in.
    pub fn dvfs(self) -> Option<[DvfsTable; 2]> {
        match self {
            Machine::OdroidXu4 => Some([EXYNOS5422_A7, EXYNOS5422_A15]),
            Machine::DellC6100
            | Machine::HpDk388p
            | Machine::Xeon5355x2
            | Machine::XeonX5570x2
            | Machine::XeonE52697x2
            | Machine::OpteronMagnyCours4p => None,
        }
    }

    /// Peak memory bandwidth per NUMA node, with its source.
    pub fn memory(self) -> MemoryFacts {
        let (node_bw_bytes_per_s, source) = match self {
            Machine::DellC6100 | Machine::XeonX5570x2 => {
                (25e9, "[E] 3-channel DDR3-1066/1333 per socket (docs/simulator.md)")
            }
            Machine::HpDk388p => (40e9, "[E] CALIBRATION C MLC ~80 GB/s per modern socket, scaled to a 2012 socket (docs/simulator.md)"),
            Machine::Xeon5355x2 => (10.7e9, "front-side bus 1333 MT/s x 8 B = 10.7 GB/s for the whole machine"),
            Machine::XeonE52697x2 => (60e9, "[E] CALIBRATION C MLC ~80 GB/s per modern socket, scaled to a 2014 socket (docs/simulator.md)"),
            Machine::OpteronMagnyCours4p => (14.4e9, "CALIBRATION D: 28.8 GB/s northbridge per package, shared by its two dies"),
            Machine::OdroidXu4 => (7e9, "[E] LPDDR3 (docs/simulator.md)"),
        };
        MemoryFacts {
            node_bw_bytes_per_s,
            source,
        }
    }
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A whole-machine power model's coefficients (seed 001: `P = Pn + Ps·packages +
/// Pc·cores + Pt·extra SMT threads`), with where they come from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerModelFacts {
    pub node_w: f64,
    pub package_w: f64,
    pub core_w: f64,
    pub thread_w: f64,
    pub source: &'static str,
}

const DELL_C6100_POWER: PowerModelFacts = PowerModelFacts {
    node_w: 76.11,
    package_w: 25.19,
    core_w: 9.68,
    thread_w: 2.61,
    source: "seed 001 Table 3: Dell C6100, 2x Xeon L5520, Linux 3.6.11",
};

const HP_DK388P_POWER: PowerModelFacts = PowerModelFacts {
    node_w: 106.41,
    package_w: 39.74,
    core_w: 11.13,
    thread_w: 2.83,
    source: "seed 001 section 2.1: HP DK388P, 2x Xeon E5-2667, Linux 2.6.32",
};

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
    pub node_bw_bytes_per_s: f64,
    pub source: &'static str,
}

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
/// (docs/contention.md, "Where the two deciding quantities sit"). None when the curve never
/// costs that much.
pub fn sufficient_contention_bytes_per_s(machine: Machine, min_effect: f64) -> Option<f64> {
    Some(utilisation_at_latency(LOADED_LATENCY, min_effect)? * machine.memory().node_bw_bytes_per_s)
}

/// What placer knows of one built-in machine.
#[derive(Debug, Clone)]
pub struct Entry {
    pub machine: Machine,
    /// A whole-machine power model (seed 001) is built in.
    pub power_model: bool,
    /// DVFS tables by cluster (LITTLE, big), where built in.
    pub dvfs: Option<[DvfsTable; 2]>,
    /// Classifier thresholds for it, where built in (none are: they come from the config).
    pub classifier: Option<Thresholds>,
    /// Peak memory bandwidth per node.
    pub memory: MemoryFacts,
}

/// Every built-in machine with the facts placer carries for it.
pub fn entries() -> Vec<Entry> {
    Machine::ALL
        .into_iter()
        .map(|machine| Entry {
            machine,
            power_model: machine.measured_power_model().is_some(),
            dvfs: machine.dvfs(),
            classifier: None,
            memory: machine.memory(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_machine_is_listed_with_its_facts() {
        let e = entries();
        assert_eq!(e.len(), Machine::ALL.len());
        let xu4 = e.iter().find(|x| x.machine == Machine::OdroidXu4).unwrap();
        assert!(xu4.dvfs.is_some() && !xu4.power_model);
        let dell = e.iter().find(|x| x.machine == Machine::DellC6100).unwrap();
        assert!(dell.power_model && dell.dvfs.is_none());
        // Voltages and powers ascend with frequency in both tables.
        for t in [EXYNOS5422_A7, EXYNOS5422_A15] {
            assert!(t.volts.windows(2).all(|w| w[0].0 < w[1].0));
            assert!(t
                .ipa_mw
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
        }
        // Names round-trip; every machine but the odroid has whole-machine coefficients.
        for m in Machine::ALL {
            assert_eq!(Machine::parse(m.name()), Some(m));
            assert_eq!(m.power_coefficients().is_none(), m == Machine::OdroidXu4);
        }
        assert_eq!(Machine::parse("pkg:1 core:4"), None);
    }

    #[test]
    fn the_sufficient_contention_threshold_is_a_fact_of_each_machine() {
        // +5% on the first segment (1.0 -> 1.11 at 0.27): 0.05 / 0.11 x 0.27 of the peak.
        let u = utilisation_at_latency(LOADED_LATENCY, 0.05).unwrap();
        assert!((u - 0.05 / 0.11 * 0.27).abs() < 1e-12);
        let x5570 = sufficient_contention_bytes_per_s(Machine::XeonX5570x2, 0.05).unwrap();
        let e5 = sufficient_contention_bytes_per_s(Machine::XeonE52697x2, 0.05).unwrap();
        assert!((x5570 - 25e9 * u).abs() < 1.0, "{x5570}");
        assert!((e5 - 60e9 * u).abs() < 1.0, "{e5}");
        // Differs per machine, rises with the effect asked for, unknown machines have none.
        let all: Vec<f64> = Machine::ALL
            .iter()
            .map(|&m| sufficient_contention_bytes_per_s(m, 0.05).unwrap())
            .collect();
        assert!(all.iter().any(|&t| t != all[0]));
        assert!(sufficient_contention_bytes_per_s(Machine::XeonX5570x2, 0.2).unwrap() > x5570);
        assert_eq!(utilisation_at_latency(LOADED_LATENCY, 5.0), None);
    }
}
