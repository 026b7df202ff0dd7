//! The simulated machine's world state: its CPUs, tasks, processes, flows, DVFS domains and
//! meters, as [`SimHost`] holds them (its `World`), apart from the buffers a tick reuses
//! (its `Scratch`). The models that move this state each tick
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

/// A simulated machine behind the [`Host`](placer_core::host::Host) interface: the world it
/// models and the buffers one step reuses. Fields are private to the crate: the model modules
/// (`baselines`, `network`, `power`) and the host's own files move the state; everything else
/// reads it through `SimHost`'s methods.
pub struct SimHost {
    pub(crate) world: World,
    pub(crate) scratch: Scratch,
}

/// The simulated world: the machine and its model, what runs on it, and every value that
/// carries from one tick to the next (time, averages, counters, meters, the random state).
/// Everything a sample reports or a plan changes lives here.
pub(crate) struct World {
    pub(crate) topo: Topology,
    pub(crate) params: Params,
    pub(crate) m: Machine,
    pub(crate) baseline: Baseline,
    pub(crate) rng: Rng,
    pub(crate) time_ns: u64,
    pub(crate) tick_ns: u64,
    pub(crate) specs: Vec<WorkloadSpec>,
    pub(crate) procs: Vec<Proc>,
    pub(crate) tasks: Vec<Task>,
    pub(crate) flows: Vec<Flow>,
    pub(crate) cpu: Vec<CpuState>,
    pub(crate) domains: Vec<DomainState>,
    /// Each IRQ's affinity before placer first moved it.
    pub(crate) irq_orig: BTreeMap<u32, CpuSet>,
    pub(crate) energy_j: f64,
    /// Current whole-node power, W.
    pub(crate) power_w: f64,
    pub(crate) window: Window,
    pub(crate) next_pid: u32,
    pub(crate) last_balance_ns: u64,
    /// Memory-controller load per node position, GB/s, relaxed toward what the last tick
    /// moved (the next tick's contention).
    pub(crate) node_bw: Vec<f64>,
    /// Each task's wanted CPU share in the last tick; load balancing reads it as demand.
    pub(crate) want: Vec<f64>,
}

/// Buffers a tick fills and reads again before it ends: kept between ticks only so that a
/// step allocates nothing (they are resized or zeroed where they are filled, and no value
/// in them is read in a later tick).
pub(crate) struct Scratch {
    /// Tasks on each CPU index this tick.
    pub(crate) by_cpu: Vec<Vec<usize>>,
    /// Each task's speed this tick (fraction of full speed, from its co-runners).
    pub(crate) speed: Vec<f64>,
    /// Softirq cycles each CPU index owes this tick.
    pub(crate) softirq_cycles: Vec<f64>,
    /// Summed busy-weighted pressure per LLC domain this tick.
    pub(crate) llc_pressure: Vec<f64>,
    /// Bandwidth moved per node position this tick, GB/s.
    pub(crate) node_bw_moved: Vec<f64>,
}

/// Read-only views of the world, for the scenario runner, the oracle and tests.
impl SimHost {
    /// Simulated time since creation, ns.
    pub fn time_ns(&self) -> u64 {
        self.world.time_ns
    }

    /// The modelled machine (its CPUs, LLC domains and nodes).
    pub fn machine(&self) -> &Machine {
        &self.world.m
    }

    /// The model parameters this host runs with.
    pub fn params(&self) -> &Params {
        &self.world.params
    }

    /// The workloads, indexed by `Proc::spec`.
    pub fn specs(&self) -> &[WorkloadSpec] {
        &self.world.specs
    }

    /// Every process, started or not, in creation order.
    pub fn procs(&self) -> &[Proc] {
        &self.world.procs
    }

    /// Every thread, indexed by `Proc::threads`.
    pub fn tasks(&self) -> &[Task] {
        &self.world.tasks
    }

    /// Every flow, indexed by `Proc::flow`.
    pub fn flows(&self) -> &[Flow] {
        &self.world.flows
    }

    /// Totals since the measurement window opened.
    pub fn window(&self) -> &Window {
        &self.world.window
    }

    /// Whole-node power in the last tick, W.
    pub fn power_w(&self) -> f64 {
        self.world.power_w
    }

    /// Restricts thread `ti` to the CPU with id `cpu_id`, as a placement under test would
    /// (the oracle's exhaustive search).
    pub(crate) fn pin_task(&mut self, ti: usize, cpu_id: u32) {
        self.world.tasks[ti].allowed = CpuSet::single(cpu_id);
    }
}
