//! Every number the model uses, named, with its source, and overridable from a scenario's
//! `[params]` table (a partial TOML tree merged over the machine's defaults; unknown keys
//! are rejected).
//!
//! Sources are `CAL X` (a section of the project's calibration notes, CALIBRATION.md, kept
//! outside this repository), `seed NNN` (a paper docs/seeds.md summarises) or `[E]` (an
//! estimate, with the derivation in [`SOURCES`]). [`SOURCES`] maps every leaf key to its
//! source; a test checks that no parameter lacks one, and `placer sim --params MACHINE`
//! prints both.

use placer_core::catalogue;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The whole parameter tree of one simulated machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub sim: SimParams,
    pub cpu: CpuParams,
    pub smt: SmtParams,
    pub contention: ContentionParams,
    pub numa: NumaParams,
    pub power: PowerParams,
    pub net: NetParams,
    pub sched: SchedParams,
    /// Workload classes (CAL C archetypes), by name.
    pub archetypes: BTreeMap<String, Archetype>,
    /// A measured power table (`placer power calibrate`): where given, the node's watts are
    /// the table's (its base, and per cluster and frequency a busy CPU's and the active
    /// cluster's), not [`PowerParams`]' model. Set from `placer sim --power-table`, never
    /// from `[params]`.
    #[serde(skip)]
    pub power_table: Option<placer_core::power_table::StatePowerTable>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimParams {
    /// Length of one simulated tick, microseconds.
    pub tick_us: u64,
    /// USER_HZ of the simulated /proc counters.
    pub clk_tck: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuParams {
    /// Maximum frequency of the big (or only) core type, kHz.
    pub big_max_khz: u64,
    /// Maximum frequency of the little core type, kHz (unused on symmetric machines).
    pub little_max_khz: u64,
    /// DMIPS/MHz of big and little cores (relative; only the ratio matters).
    pub big_dmips_per_mhz: f64,
    pub little_dmips_per_mhz: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtParams {
    /// Multiplies every archetype's SMT gain (1.0 = the table's values).
    pub gain_scale: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentionParams {
    /// Slowdown of a task from its LLC co-runners: 1 + llc_scale * S * (1 - exp(-sum P)).
    pub llc_scale: f64,
    /// Shape of the LLC term: `saturating` (above) or `additive`
    /// (1 + llc_additive_per_pressure * S * sum P, the shape measured curves show:
    /// calibration/contention.toml).
    #[serde(default)]
    pub llc_shape: LlcShape,
    /// Slowdown per unit of co-runner pressure for a fully sensitive task (additive shape).
    #[serde(default)]
    pub llc_additive_per_pressure: f64,
    /// The LLC size the archetypes' pressures are stated for, bytes: co-runners' pressure
    /// counts by the share of the domain's LLC it takes, `sum P * this / LLC bytes`, so the
    /// same co-runners harm less on a larger LLC (occupancy: Chandra et al., HPCA'05). 0 =
    /// pressure independent of the LLC's size.
    #[serde(default)]
    pub llc_reference_bytes: f64,
    /// Peak DRAM bandwidth of one memory node, GB/s.
    pub node_bw_gbps: f64,
    /// DRAM bandwidth one core can pull alone, GB/s (a task's memory-bound fraction is its
    /// solo bandwidth over this).
    pub core_bw_gbps: f64,
    /// Loaded-latency curve: (node bandwidth utilisation 0..1 = bandwidth moved over
    /// `node_bw_gbps`, latency multiplier) points,
    /// linearly interpolated; a task's memory-bound fraction is slowed by the multiplier.
    pub loaded_latency: Vec<[f64; 2]>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaParams {
    /// Remote/local memory latency ratio per SLIT distance (distance as a string key,
    /// TOML keys are strings). A memory-bound fraction m of a task whose pages are all
    /// remote at distance d runs m * (ratio(d) - 1) slower.
    pub latency_ratio: BTreeMap<String, f64>,
    /// Automatic NUMA balancing: pages of a process migrate toward the node its threads
    /// run on at up to this rate, MB/s (0 = off: memory stays where it was first touched).
    /// Workloads bound to a memory node (`mem_node`) are left alone.
    #[serde(default)]
    pub balancing_mb_per_s: f64,
    /// CPU time a process spends migrating 1 GB of its pages (fault, copy, remap), s.
    #[serde(default)]
    pub migrate_s_per_gb: f64,
    /// Automatic NUMA balancing's task placement: a task away from its preferred node
    /// (the one holding most of its pages) tries to move there, or to swap with a task
    /// there, this often, ms (0 = off).
    #[serde(default)]
    pub task_retry_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerParams {
    /// Whole-node power with every core idle, W (seed 001's Pn; wall power).
    pub node_idle_w: f64,
    /// Extra power of a package with at least one busy core, W (Ps).
    pub package_w: f64,
    /// Extra power of one busy big (or only) core at its maximum frequency, W (Pc).
    pub big_core_w: f64,
    /// Same for a little core at its maximum frequency, W.
    pub little_core_w: f64,
    /// Extra power of a busy second SMT thread on a busy core, W (Pt).
    pub smt_sibling_w: f64,
    /// Operating points (MHz, V) of the big core type; core power scales by V^2 f from the
    /// top point. Empty: no DVFS (the core always runs at its maximum frequency).
    pub big_opp: Vec<[f64; 2]>,
    pub little_opp: Vec<[f64; 2]>,
    /// EAS energy-model dynamic-power-coefficient, uW/MHz/V^2 (used by the `eas` baseline's
    /// decisions only; the simulated watts come from the fields above).
    pub em_big_coeff: f64,
    pub em_little_coeff: f64,
    /// Static (leakage) current of a frequency domain while any of its CPUs is busy, A:
    /// the domain draws `V(f) * this` times its busiest CPU's busy fraction. 0 where the
    /// source folds static power into the idle and package terms.
    #[serde(default)]
    pub cluster_leak_a: f64,
}

fn one() -> f64 {
    1.0
}
fn ipi_local() -> f64 {
    1600.0
}
fn ipi_remote() -> f64 {
    2000.0
}

/// Shape of the simulator's LLC harm term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LlcShape {
    #[default]
    Saturating,
    Additive,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetParams {
    /// Receive protocol processing (driver + IP + TCP) per packet, cycles, charged in
    /// softirq context to the CPU that takes the queue's interrupt (or its RPS CPU).
    pub rx_softirq_cycles_per_packet: f64,
    /// Receive processing per byte in softirq context, cycles.
    pub rx_softirq_cycles_per_byte: f64,
    /// Copy to user space per byte in the receiving process, cycles.
    pub rx_copy_cycles_per_byte: f64,
    /// Extra CPU, as a fraction of the whole local receive cost, when the receiving
    /// process runs on a CPU that shares no cache with the receive-processing CPU.
    pub rx_remote_cache_extra: f64,
    /// Extra copy cost factor when a receiver allocates fresh buffers on a node other
    /// than its NIC's (multiplies the copy cost by the latency ratio to the power of this).
    pub rx_fresh_buffer_numa_exponent: f64,
    /// Copy cost of a freshly allocated (cache-cold, newly faulted) receive buffer relative
    /// to a reused, cache-hot one, before the NUMA factor (1.0 = no cold-buffer cost).
    #[serde(default = "one")]
    pub rx_fresh_buffer_copy_factor: f64,
    /// Send cost per byte and per packet in the sending process, cycles.
    pub tx_cycles_per_byte: f64,
    pub tx_cycles_per_packet: f64,
    /// Packets per interrupt (NAPI/coalescing); also the data a blocked reader finds per
    /// wake-up (its socket is woken once per receive batch).
    pub packets_per_irq: f64,
    /// Cycles the waking CPU spends sending the wake-up IPI when a blocked reader is woken
    /// on another CPU of the same package (none when it is woken on the waker's CPU).
    #[serde(default = "ipi_local")]
    pub wake_ipi_cycles: f64,
    /// The same across packages.
    #[serde(default = "ipi_remote")]
    pub wake_ipi_remote_package_cycles: f64,
    /// Extra CPU of the reader, as a fraction of the whole local receive cost, when it
    /// shares only the last-level cache with the receive CPU (not the CPU, not an L2):
    /// the socket's and the packets' cache lines come from the LLC instead of its own
    /// caches. Where the LLC is the L2 (the Xeon 5355), this class does not occur.
    #[serde(default)]
    pub rx_llc_only_extra: f64,
    /// Socket receive buffer, bytes (bounds the data in flight to a slow reader).
    pub rcvbuf_bytes: f64,
    /// Most a NIC can receive, Mbit/s, below its link rate when it sits behind a slower
    /// bus (0 = the link rate).
    #[serde(default)]
    pub nic_max_rx_mbps: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedParams {
    /// Period of the baseline's load balancing, ms.
    pub balance_interval_ms: u64,
    /// Balance only when the busiest CPU's load exceeds the idlest's by this factor
    /// (the kernel's imbalance_pct / 100).
    pub imbalance_ratio: f64,
    /// Time constant of the per-task utilisation average (PELT), ms.
    pub util_halflife_ms: f64,
    /// schedutil headroom: frequency = headroom * util * f_max.
    pub schedutil_headroom: f64,
    /// EAS turns off when any CPU's utilisation exceeds this fraction of its capacity.
    pub eas_overutilized: f64,
    /// EAS moves a task only when the energy saved exceeds this fraction.
    pub eas_margin: f64,
    /// Migrations of a running task per second that the load balancer makes on its own
    /// (other activity: kernel threads, interrupts, wakeups of other tasks): the task goes
    /// to a random allowed CPU, swapping with the task there, which spreads completion
    /// times from run to run. 0 = a deterministic balancer.
    #[serde(default)]
    pub background_migrations_per_s: f64,
    /// CPU time a migrated task loses refilling its caches: within its LLC, and across
    /// LLCs (microseconds).
    #[serde(default)]
    pub migration_cost_us: f64,
    #[serde(default)]
    pub cross_llc_migration_cost_us: f64,
}

/// A workload class: how a task uses the shared resources (CAL C archetypes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Archetype {
    /// P: harm caused to LLC co-runners, 0..1.
    pub pressure: f64,
    /// S: harm suffered from co-runners, -1..1 (negative: benefits from sharing).
    pub sensitivity: f64,
    /// Solo DRAM bandwidth, GB/s.
    pub bw_gbps: f64,
    /// Throughput gain of a core when two threads of this class share it (0.25 = the pair
    /// does 1.25x the work of one thread alone).
    pub smt_gain: f64,
    /// Speed of a big core over a little one at equal frequency.
    pub big_little_ratio: f64,
    /// Simulated hardware counters, events per 1000 instructions: LLC references and
    /// offcore request buffer full (seed 003's two signals).
    pub llc_refs_per_kinstr: f64,
    pub sq_full_per_kinstr: f64,
    /// Instructions per cycle on the reference core (for the instruction counter).
    pub ipc: f64,
}

/// Source of every parameter, by dotted key (`power.node_idle_w`); `archetypes.*` covers
/// the whole archetype table.
pub const SOURCES: &[(&str, &str)] = &[
    ("sim.tick_us", "[E] 1 ms: below every modelled time constant (balance 4 ms, policies >= 100 ms)"),
    ("sim.clk_tck", "Linux USER_HZ = 100"),
    ("cpu.big_max_khz", "machine model (placer_core::machines) max_khz; odroid: the top of placer_core::catalogue::EXYNOS5422_A15 (CAL A1)"),
    ("cpu.little_max_khz", "odroid A7 1400 MHz, CAL A1"),
    ("cpu.big_dmips_per_mhz", "CAL A2/A5: capacity-dmips-mhz A15 1024"),
    ("cpu.little_dmips_per_mhz", "CAL A2/A5: capacity-dmips-mhz A7 539"),
    ("smt.gain_scale", "[E] 1.0 = archetype gains of CAL C/B taken as given"),
    ("contention.llc_shape", "saturating [E] (CAL C archetypes); `additive` is the shape the 16-core measurement shows (calibration/contention.toml, docs/contention.md 'Harm model')"),
    ("contention.llc_additive_per_pressure", "fitted: 0.028 slowdown per streaming co-runner (calibration/contention.toml, x86-16core-llc) / P 0.9 of a streaming app = 0.031 per unit pressure"),
    ("contention.llc_reference_bytes", "[E] 8 MiB: the CAL C archetype pressures were set for seed 003's first machine, whose 4-core domains share an 8 MB L3 (X5570); the share-of-LLC scaling follows the occupancy view of Chandra, Guo, Kim, Solihin, 'Predicting inter-thread cache contention on a chip multi-processor architecture', HPCA 2005 (a co-runner's harm grows with the part of the shared cache its accesses take); docs/contention.md"),
    ("contention.llc_scale", "[E] CAL C: 'scale so worst pairs reach +100-200%': 2.0 gives antagonist(P=1)+sensitive(S=0.9) = +114%, lbm+omnetpp = +107%"),
    ("contention.node_bw_gbps", "placer_core::catalogue::Machine::memory per built-in machine (each with its source; docs/simulator.md); 40 [E] for synthetic machines"),
    ("contention.core_bw_gbps", "[E] CAL C archetype 1: a streaming hog pulls 6-10 GB/s solo -> 10"),
    ("contention.loaded_latency", "placer_core::catalogue::LOADED_LATENCY: CAL C MLC 3.11b loaded-latency curve: 3/43/83/133/159 GB/s -> 82/91/101/128/~310 ns, normalised to 159 GB/s and 82 ns"),
    ("numa.balancing_mb_per_s", "Linux automatic NUMA balancing (on by default since 3.8; seed 003's 4.2 has it, its Sec. 2.2): numa_balancing_scan_size_mb 256 per scan_period_min_ms 1000 -> at most 256 MB/s of a process's pages scanned and migrated"),
    ("numa.task_retry_ms", "Linux kernel/sched/fair.c numa_migrate_preferred: a task off its preferred node retries task_numa_migrate every min(1 s, numa_scan_period / 16); the scan period sits at numa_balancing_scan_period_min_ms = 1000 while its faults are remote and private: 62.5 ms"),
    ("numa.migrate_s_per_gb", "[E] a NUMA hinting fault + copy + remap per 4 KiB page, ~1 us: 0.25 s per GB"),
    ("numa.latency_ratio", "CAL D: 2S Intel MLC 1.7x (distance 20/21); Opteron 4P 1-hop 1.085 (16), 2-hop 1.30 (22)"),
    ("power.node_idle_w", "placer_core::catalogue::Machine::power_coefficients (each with its source): seed 001 Pn (dell-c6100, hp-dk388p); CAL B SPECpower idle for others; odroid CAL A4 3.89 W"),
    ("power.package_w", "catalogue power_coefficients: seed 001 Ps; 0 where the source folds it into idle"),
    ("power.big_core_w", "catalogue power_coefficients: seed 001 Pc; CAL B SPECpower (peak-idle)/cores for others; odroid: the top row of catalogue::EXYNOS5422_A15 (CAL A3 IPA)"),
    ("power.little_core_w", "odroid: the top row of catalogue::EXYNOS5422_A7 (CAL A3 IPA)"),
    ("power.smt_sibling_w", "catalogue power_coefficients: seed 001 Pt; [E] 27% of Pc elsewhere (CAL B)"),
    ("power.big_opp", "catalogue::EXYNOS5422_A15 voltages (CAL A1 exynos5800.dtsi)"),
    ("power.little_opp", "catalogue::EXYNOS5422_A7 voltages (CAL A1 exynos5800.dtsi)"),
    ("power.em_big_coeff", "CAL A2 dynamic-power-coefficient A15 310"),
    ("power.em_little_coeff", "CAL A2 dynamic-power-coefficient A7 90"),
    ("power.cluster_leak_a", "odroid CAL A7 (XU3 DVFS project): I = c1 T^2 e^(c2/T) + I_gate = 0.0856 A at 330 K, ~0.11 W per active cluster at 1.3 V; 0 elsewhere (folded into Pn/Ps)"),
    ("net.nic_max_rx_mbps", "odroid CAL A6: the XU4's GbE sits behind its second USB3 host, DietPi #414 measured ~280 Mbit/s; 0 (link rate) elsewhere"),
    ("net.rx_softirq_cycles_per_packet", "[E] CAL D Foong '1 GHz per 1 Gbps' = 8 cycles/byte in all; half (Cai et al.: copy is the larger part) in softirq: 4 c/B x 1448 B = 5792 cycles/packet"),
    ("net.rx_softirq_cycles_per_byte", "[E] 0: checksum offloaded; per-byte work is the copy"),
    ("net.rx_copy_cycles_per_byte", "[E] the other half of CAL D's 8 cycles/byte"),
    ("net.rx_remote_cache_extra", "seed 002 Fig. 2: receiver on a core not sharing cache with the IRQ core costs up to 27% more CPU"),
    ("net.rx_fresh_buffer_copy_factor", "[E] 1.0 by default (no cold-buffer cost); scenarios/seed-004.toml sets 2.33, the receiver CPU per GB of fresh mmap'd vs reused 64 KiB buffers measured by `placer bench net --path loopback` (docs/numa.md)"),
    ("net.rx_fresh_buffer_numa_exponent", "[E] 1.0: a fresh buffer's copy pays the full remote latency ratio (seed 004: remote ~15% below adjacent)"),
    ("net.tx_cycles_per_byte", "[E] 2 c/B: send path copies once, TSO offloads segmentation (CAL D)"),
    ("net.tx_cycles_per_packet", "[E] 1000: Clark et al. <200 instructions on the fast path, plus driver (CAL D)"),
    ("net.packets_per_irq", "[E] 8: NAPI polling under load"),
    ("net.wake_ipi_cycles", "V. Pallipadi, LKML 2012-02-06 '[RFC] Extend mwait idle to optimize away IPIs' (lkml.indiana.edu/hypermail/linux/kernel/1202.0/02819.html): smp_call_function_single to an idle CPU costs the sender ~1600 cycles within a socket on Westmere; the wakee's interrupt entry is not counted (no source)"),
    ("net.wake_ipi_remote_package_cycles", "same source: ~2000 cycles to another socket"),
    ("net.rx_llc_only_extra", "0: measured on a 16-core device (calibration/loopback-16c.toml, scripts/loopback-costs.sh): a reader sharing only the L3 with the RPS CPU spent 0.83x (0.75..0.94) the receive CPU per GB of a reader on the RPS CPU, so no extra cost is shown; the model has no negative extra"),
    ("net.rcvbuf_bytes", "Linux tcp_rmem default max 6 MB (4 MB on 2.6.x kernels) -> 4 MB"),
    ("sched.balance_interval_ms", "[E] CFS sd balance_interval ~ sd weight ms: 4 ms for a core group"),
    ("sched.imbalance_ratio", "Linux sd imbalance_pct 117-125 -> 1.25"),
    ("sched.util_halflife_ms", "Linux PELT half-life 32 ms"),
    ("sched.schedutil_headroom", "CAL E: map_util_perf x1.25"),
    ("sched.eas_overutilized", "CAL E: overutilized above 80% of capacity"),
    ("sched.eas_margin", "Linux find_energy_efficient_cpu: >6% (>>4) saving to move"),
    ("sched.background_migrations_per_s", "0 (a deterministic balancer) by default; the seed-003 scenarios set 0.02 [E], one migration per task every 50 s: seed 003's Linux 4.2 spread an app's completion over 10-81 s where its scheduler kept 2-11 s (docs/contention.md)"),
    ("sched.migration_cost_us", "Linux sysctl_sched_migration_cost 500 us (a task is cache-hot for this long)"),
    ("sched.cross_llc_migration_cost_us", "[E] refilling an 8 MiB LLC at ~4 GB/s (X5570 per-core DRAM bandwidth, CAL D) = 2 ms"),
    ("archetypes.*", "CAL C archetype table (P, S, BW, SMT gain); big/little ratio CAL A5 (1.9 compute, 1.3 memory-bound); counter rates and IPC [E] ordered as seed 003's groups (docs/simulator.md)"),
];

#[allow(clippy::too_many_arguments)]
fn arch(
    p: f64,
    s: f64,
    bw: f64,
    smt: f64,
    bl: f64,
    llc_refs: f64,
    sq_full: f64,
    ipc: f64,
) -> Archetype {
    Archetype {
        pressure: p,
        sensitivity: s,
        bw_gbps: bw,
        smt_gain: smt,
        big_little_ratio: bl,
        llc_refs_per_kinstr: llc_refs,
        sq_full_per_kinstr: sq_full,
        ipc,
    }
}

/// The CAL C archetypes (BW = midpoint of the table's range).
pub fn default_archetypes() -> BTreeMap<String, Archetype> {
    let mut m = BTreeMap::new();
    let mut add = |n: &str, a: Archetype| {
        m.insert(n.to_string(), a);
    };
    add("streaming", arch(0.9, 0.4, 8.0, 0.0, 1.3, 30.0, 12.0, 0.6));
    add(
        "bandwidth-latency",
        arch(0.8, 0.6, 6.0, 0.05, 1.3, 28.0, 9.0, 0.7),
    );
    add(
        "pointer-chasing",
        arch(0.7, 0.8, 3.5, 0.35, 1.3, 25.0, 5.0, 0.4),
    );
    add(
        "cache-sensitive",
        arch(0.5, 0.9, 2.0, 0.25, 1.4, 35.0, 2.0, 0.9),
    );
    add(
        "moderate-cache",
        arch(0.3, 0.4, 0.75, 0.25, 1.6, 10.0, 1.0, 1.2),
    );
    add(
        "compute-fp",
        arch(0.05, 0.05, 0.1, 0.10, 1.9, 1.0, 0.1, 2.0),
    );
    add(
        "compute-int",
        arch(0.05, 0.1, 0.1, 0.25, 1.9, 1.5, 0.1, 1.6),
    );
    add(
        "latency-critical",
        arch(0.4, 0.9, 2.0, 0.20, 1.5, 20.0, 2.0, 1.0),
    );
    add("net-receive", arch(0.3, 0.6, 1.0, 0.0, 1.3, 15.0, 2.0, 0.8));
    add(
        "shared-data",
        arch(0.3, -0.2, 1.0, 0.20, 1.6, 12.0, 1.0, 1.2),
    );
    add(
        "cache-antagonist",
        arch(1.0, 0.0, 10.0, 0.0, 1.3, 40.0, 15.0, 0.5),
    );
    add("idle", arch(0.0, 0.2, 0.0, 0.25, 1.9, 0.5, 0.0, 1.0));
    m
}

/// A DVFS table's voltages as OPP points: `[MHz, V]`, the voltage of every frequency up to it.
fn opp(volts: &[(u64, f64)]) -> Vec<[f64; 2]> {
    volts.iter().map(|&(mhz, v)| [mhz as f64, v]).collect()
}

/// W of one CPU busy at the table's top frequency (its last IPA row).
fn top_busy_w(t: &catalogue::DvfsTable) -> f64 {
    t.ipa_mw.last().map_or(0.0, |&(_, mw)| mw / 1000.0)
}

impl Params {
    /// Defaults for a built-in machine (its catalogue facts) or, with `None`, a synthetic
    /// one; `max_khz` is the topology's maximum frequency when known.
    pub fn for_machine(machine: Option<catalogue::Machine>, max_khz: Option<u64>) -> Params {
        let mut p = Params {
            sim: SimParams {
                tick_us: 1000,
                clk_tck: 100,
            },
            cpu: CpuParams {
                big_max_khz: max_khz.unwrap_or(2_000_000),
                little_max_khz: 1_400_000,
                big_dmips_per_mhz: 1024.0,
                little_dmips_per_mhz: 539.0,
            },
            smt: SmtParams { gain_scale: 1.0 },
            contention: ContentionParams {
                llc_scale: 2.0,
                llc_shape: LlcShape::Saturating,
                llc_additive_per_pressure: 0.031,
                llc_reference_bytes: 8.0 * 1024.0 * 1024.0,
                node_bw_gbps: 40.0,
                core_bw_gbps: 10.0,
                loaded_latency: catalogue::LOADED_LATENCY.to_vec(),
            },
            numa: NumaParams {
                latency_ratio: BTreeMap::from([
                    ("10".to_string(), 1.0),
                    ("16".to_string(), 1.085),
                    ("20".to_string(), 1.7),
                    ("21".to_string(), 1.7),
                    ("22".to_string(), 1.3),
                ]),
                balancing_mb_per_s: 256.0,
                migrate_s_per_gb: 0.25,
                task_retry_ms: 62.5,
            },
            power: PowerParams {
                node_idle_w: 66.0,
                package_w: 0.0,
                big_core_w: 15.0,
                little_core_w: 0.0,
                smt_sibling_w: 4.0,
                big_opp: Vec::new(),
                little_opp: Vec::new(),
                em_big_coeff: 310.0,
                em_little_coeff: 90.0,
                cluster_leak_a: 0.0,
            },
            net: NetParams {
                rx_softirq_cycles_per_packet: 5792.0,
                rx_softirq_cycles_per_byte: 0.0,
                rx_copy_cycles_per_byte: 4.0,
                rx_remote_cache_extra: 0.27,
                rx_fresh_buffer_numa_exponent: 1.0,
                rx_fresh_buffer_copy_factor: 1.0,
                tx_cycles_per_byte: 2.0,
                tx_cycles_per_packet: 1000.0,
                packets_per_irq: 8.0,
                wake_ipi_cycles: ipi_local(),
                wake_ipi_remote_package_cycles: ipi_remote(),
                rx_llc_only_extra: 0.0,
                rcvbuf_bytes: 4.0 * 1024.0 * 1024.0,
                nic_max_rx_mbps: 0.0,
            },
            sched: SchedParams {
                balance_interval_ms: 4,
                imbalance_ratio: 1.25,
                util_halflife_ms: 32.0,
                schedutil_headroom: 1.25,
                eas_overutilized: 0.8,
                eas_margin: 0.06,
                background_migrations_per_s: 0.0,
                migration_cost_us: 500.0,
                cross_llc_migration_cost_us: 2000.0,
            },
            archetypes: default_archetypes(),
            power_table: None,
        };
        let Some(machine) = machine else {
            return p;
        };
        let pw = &mut p.power;
        if let Some(c) = machine.power_coefficients() {
            (
                pw.node_idle_w,
                pw.package_w,
                pw.big_core_w,
                pw.smt_sibling_w,
            ) = (c.node_w, c.package_w, c.core_w, c.thread_w);
        }
        match machine {
            catalogue::Machine::OdroidXu4 => {
                (pw.node_idle_w, pw.package_w) = (3.89, 0.0);
                pw.smt_sibling_w = 0.0;
                // Per cluster: the catalogue's Exynos 5422 tables, typed there once. A
                // table's (up to MHz, V) rows are the OPP points `volts_at` reads.
                if let Some([little, big]) = machine.dvfs() {
                    (pw.big_opp, pw.big_core_w) = (opp(big.volts), top_busy_w(&big));
                    (pw.little_opp, pw.little_core_w) = (opp(little.volts), top_busy_w(&little));
                    p.cpu.big_max_khz = big.volts.last().map_or(0, |&(mhz, _)| mhz * 1000);
                }
                pw.cluster_leak_a = catalogue::EXYNOS5422_LEAK_A_PER_CLUSTER;
                p.net.nic_max_rx_mbps = 280.0;
                p.contention.core_bw_gbps = 3.0;
            }
            catalogue::Machine::DellC6100
            | catalogue::Machine::HpDk388p
            | catalogue::Machine::Xeon5355x2
            | catalogue::Machine::XeonX5570x2
            | catalogue::Machine::XeonE52697x2
            | catalogue::Machine::OpteronMagnyCours4p => {}
        }
        p.contention.node_bw_gbps = machine.memory().node_bw_bytes_per_s / 1e9;
        p
    }

    /// `self` with a partial TOML tree merged over it (tables merge key by key, anything
    /// else replaces). Unknown keys are errors naming the key.
    pub fn with_overrides(&self, overrides: &toml::Value) -> Result<Params, String> {
        let mut base = toml::Value::try_from(self).map_err(|e| e.to_string())?;
        merge(&mut base, overrides, "params")?;
        base.try_into().map_err(|e: toml::de::Error| e.to_string())
    }

    /// Every leaf key with its value and source, for `placer sim --params`.
    pub fn describe(&self) -> Vec<(String, String, &'static str)> {
        let v = toml::Value::try_from(self).unwrap_or(toml::Value::Boolean(false));
        let mut out = Vec::new();
        leaves(&v, "", &mut out);
        out.into_iter()
            .map(|(k, val)| {
                let src = source_of(&k).unwrap_or("(no source: a bug)");
                (k, val, src)
            })
            .collect()
    }

    /// The archetype `name`, or an error listing the known ones.
    pub fn archetype(&self, name: &str) -> Result<&Archetype, String> {
        self.archetypes.get(name).ok_or_else(|| {
            format!(
                "unknown class {name:?}; known: {}",
                self.archetypes
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }

    /// Remote/local latency ratio for a SLIT distance (1.0 local; nearest known key
    /// otherwise).
    pub fn numa_ratio(&self, distance: u32) -> f64 {
        if distance <= 10 {
            return 1.0;
        }
        let mut best: Option<(u32, f64)> = None;
        for (k, &v) in &self.numa.latency_ratio {
            if let Ok(d) = k.parse::<u32>() {
                let gap = d.abs_diff(distance);
                if best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, v));
                }
            }
        }
        best.map(|(_, v)| v).unwrap_or(1.0)
    }
}

/// Source of a dotted key.
pub fn source_of(key: &str) -> Option<&'static str> {
    SOURCES.iter().find_map(|(k, s)| {
        let hit = match k.strip_suffix(".*") {
            Some(prefix) => key.starts_with(prefix) && key[prefix.len()..].starts_with('.'),
            None => *k == key || key.starts_with(&format!("{k}.")),
        };
        hit.then_some(*s)
    })
}

fn merge(base: &mut toml::Value, over: &toml::Value, path: &str) -> Result<(), String> {
    match (base, over) {
        (toml::Value::Table(b), toml::Value::Table(o)) => {
            for (k, v) in o {
                let p = format!("{path}.{k}");
                match b.get_mut(k) {
                    Some(slot) => merge(slot, v, &p)?,
                    None if path == "params.archetypes" => {
                        b.insert(k.clone(), v.clone());
                    }
                    None if path == "params.numa.latency_ratio" => {
                        b.insert(k.clone(), v.clone());
                    }
                    None => return Err(format!("unknown parameter `{p}`")),
                }
            }
            Ok(())
        }
        (slot, v) => {
            *slot = v.clone();
            Ok(())
        }
    }
}

fn leaves(v: &toml::Value, prefix: &str, out: &mut Vec<(String, String)>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(v, &p, out);
            }
        }
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parameter_has_a_source() {
        for m in catalogue::Machine::ALL {
            let name = m.name();
            let p = Params::for_machine(Some(m), None);
            for (k, _, src) in p.describe() {
                assert!(!src.starts_with("(no source"), "{name}: {k} has no source");
            }
        }
    }

    #[test]
    fn overrides_merge_and_reject_unknown_keys() {
        let p = Params::for_machine(Some(catalogue::Machine::DellC6100), None);
        let o: toml::Value = toml::from_str("[power]\nnode_idle_w = 50.0\n").unwrap();
        let q = p.with_overrides(&o).unwrap();
        assert_eq!(q.power.node_idle_w, 50.0);
        assert_eq!(q.power.package_w, 25.19);
        let bad: toml::Value = toml::from_str("[power]\nnode_idle = 50.0\n").unwrap();
        let e = p.with_overrides(&bad).unwrap_err();
        assert!(e.contains("params.power.node_idle"), "{e}");
        let new_class: toml::Value = toml::from_str(
            "[archetypes.mine]\npressure=0.1\nsensitivity=0.1\nbw_gbps=1.0\nsmt_gain=0.2\n\
             big_little_ratio=1.5\nllc_refs_per_kinstr=1.0\nsq_full_per_kinstr=0.1\nipc=1.0\n",
        )
        .unwrap();
        assert!(p
            .with_overrides(&new_class)
            .unwrap()
            .archetype("mine")
            .is_ok());
    }

    #[test]
    fn numa_ratio_by_distance() {
        let p = Params::for_machine(Some(catalogue::Machine::OpteronMagnyCours4p), None);
        assert_eq!(p.numa_ratio(10), 1.0);
        assert_eq!(p.numa_ratio(16), 1.085);
        assert_eq!(p.numa_ratio(22), 1.3);
    }
}
