//! The simulated machine's world state: its CPUs, tasks, processes, flows, DVFS domains and
//! meters, as [`SimHost`] holds them. The models that move this state each tick
//! (`baselines` for scheduling, `network` for receive processing, `power` for governors and
//! energy) and the host that steps them (`host`: lifecycle, tick, actuate, observe) all
//! depend on this module, and it on none of them.

use crate::machine::Machine;
use crate::params::{Archetype, Params};
use crate::rng::Rng;
use crate::workload::{Kind, ProcResult, WorkloadSpec};
use placer_core::topology::Topology;
use placer_core::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Which kernel scheduler the simulator models (`crate::baselines` implements each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Baseline {
    LinuxDefault,
    Eas,
}

#[derive(Debug, Clone, Default)]
pub struct CpuState {
    pub user_ns: f64,
    pub system_ns: f64,
    pub softirq_ns: f64,
    pub idle_ns: f64,
    pub net_rx: f64,
    pub irqs: f64,
    /// Fraction of the last tick spent in tasks, and their busy-weighted pressure, SMT
    /// gain and memory bandwidth (for the next tick's contention).
    pub busy: f64,
    pub pressure: f64,
    pub gain: f64,
    /// Fraction of the last tick in softirq.
    pub softirq: f64,
    /// PELT-like average of (busy + softirq), frequency-invariant (x cur/max khz).
    pub util_avg: f64,
    pub khz: u64,
}

#[derive(Debug, Clone)]
pub struct Task {
    pub tid: u32,
    pub proc: usize,
    pub allowed: CpuSet,
    /// CPU index (into `Machine::cpus`).
    pub cpu: usize,
    pub placed: bool,
    /// Work left in the current phase (seconds at full speed); cpu/periodic.
    pub left: f64,
    /// Runnable now (has work).
    pub runnable: bool,
    /// Was runnable last tick (a newly runnable task is "woken" and placed).
    pub was_runnable: bool,
    /// PELT-like average of the CPU share it got, frequency- and capacity-invariant (in
    /// units of the big core at its maximum frequency), as the kernel's task util.
    pub util_avg: f64,
    pub utime_ns: f64,
    pub stime_ns: f64,
    pub rt: bool,
    pub share: f64,
    /// Cumulative simulated counters.
    pub instructions: f64,
    pub cycles: f64,
    /// DRAM traffic, bytes (the class's bandwidth while it runs, scaled by its speed).
    pub mem_bytes: f64,
    /// Automatic NUMA balancing: no try to move it toward its preferred node before this
    /// time (the kernel's numa_migrate_retry).
    pub numa_retry_ns: u64,
}

#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u32,
    pub start_ticks: u64,
    pub start_ns: u64,
    pub comm: String,
    pub spec: usize,
    pub kind: Kind,
    pub class: Archetype,
    pub class_name: String,
    pub threads: Vec<usize>,
    /// Affinity before placer first pinned it.
    pub orig_allowed: Option<CpuSet>,
    /// Resident bytes per node position.
    pub mem_bytes: Vec<f64>,
    pub mem_placed: bool,
    pub bind: Option<Vec<usize>>,
    pub started: bool,
    pub exited: bool,
    pub flow: Option<usize>,
    pub result: ProcResult,
    /// cpu jobs: serial work left (thread 0) before the parallel phase.
    pub serial_left: f64,
    pub run_started_ns: u64,
    /// periodic: next release, current job's deadline.
    pub next_release_ns: u64,
    pub deadline_ns: u64,
}

#[derive(Debug, Clone)]
pub struct Flow {
    pub nic: usize,
    pub queue: usize,
    pub proc: usize,
    pub rx: bool,
    pub rate_bps: f64,
    pub packet_bytes: f64,
    /// Bytes processed by softirq, waiting for the reader.
    pub buffer: f64,
    pub limit_bps: Option<f64>,
    pub bytes: f64,
    pub segs: f64,
    pub inode: u64,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The receive-processing CPU index used in the last tick.
    pub rx_cpu: usize,
    /// Bytes offered this tick (scratch).
    pub offered: f64,
    /// The reader emptied the socket buffer in the last tick, so it blocked in recv() and
    /// the next data wakes it (a wake-up placed by the scheduler, maybe an IPI).
    pub reader_slept: bool,
    /// Loopback: the other end's flow (a receiver's local sender, a sender's receiver).
    pub peer: Option<usize>,
    /// Loopback receiver: bytes its sender sent that softirq has not processed yet.
    pub pending: f64,
}

#[derive(Debug, Clone)]
pub struct DomainState {
    pub khz: u64,
    pub governor: String,
    pub scaling_max_khz: u64,
    pub scaling_min_khz: u64,
    pub speed_khz: Option<u64>,
    pub orig: (String, u64, u64),
}

/// Totals since the measurement window opened (`SimHost::open_window`).
#[derive(Debug, Clone, Default)]
pub struct Window {
    pub start_ns: u64,
    pub busy_ns: f64,
    pub energy_j: f64,
}

/// The simulated machines' base page size: `numa_pages` counts memory in these.
pub const SIM_PAGE_BYTES: u64 = 4096;

pub struct SimHost {
    pub topo: Topology,
    pub params: Params,
    pub m: Machine,
    pub baseline: Baseline,
    pub rng: Rng,
    pub time_ns: u64,
    pub tick_ns: u64,
    pub specs: Vec<WorkloadSpec>,
    pub procs: Vec<Proc>,
    pub tasks: Vec<Task>,
    pub flows: Vec<Flow>,
    pub cpu: Vec<CpuState>,
    pub domains: Vec<DomainState>,
    pub irq_orig: BTreeMap<u32, CpuSet>,
    pub energy_j: f64,
    /// Current whole-node power, W.
    pub power_w: f64,
    pub window: Window,
    pub(crate) next_pid: u32,
    pub(crate) last_balance_ns: u64,
    // Scratch buffers reused every tick (no allocation in the hot loop).
    pub(crate) by_cpu: Vec<Vec<usize>>,
    pub(crate) speed: Vec<f64>,
    pub(crate) want: Vec<f64>,
    pub(crate) softirq_cycles: Vec<f64>,
    pub(crate) llc_pressure: Vec<f64>,
    pub(crate) node_bw: Vec<f64>,
    pub(crate) node_bw_moved: Vec<f64>,
}
