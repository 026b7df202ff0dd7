//! Raw samples: counters exactly as read from the host (ticks, bytes, microjoules), with a
//! timestamp. No rates here: [`crate::observation::Observation::new`] derives them from two
//! samples, so samples can be recorded (`placer record`) and replayed.
//!
//! Produced by `placer_linux` on a real machine and by `placer_sim::SimHost` on a modelled
//! one. Optional sources (hardware counters, energy) are empty vectors when absent; which
//! sources exist and why the others do not is in [`SourceStatus`].

use crate::cpuset::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Version of the serialized sample format (`placer record` files carry it).
pub const SAMPLE_FORMAT_VERSION: u32 = 1;

/// Identifies one process across PID reuse: same pid and same start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProcKey {
    pub pid: u32,
    /// Start time in clock ticks since boot (field 22 of /proc/PID/stat).
    pub start_time_ticks: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Sample {
    /// Monotonic time of the sample (CLOCK_MONOTONIC on Linux, simulated time in the sim).
    pub time_ns: u64,
    /// Clock ticks per second (USER_HZ) of the machine that produced the sample.
    pub clk_tck: u32,
    pub cpus: Vec<CpuTimes>,
    pub procs: Vec<std::sync::Arc<ProcSample>>,
    /// Shared: a dump that the sampler reuses (no TCP segment moved) is the last one's.
    pub sockets: std::sync::Arc<[SocketSample]>,
    pub irqs: Vec<IrqSample>,
    /// NET_RX / NET_TX softirq counts per CPU (/proc/softirqs).
    pub softirqs: Vec<SoftirqCounts>,
    /// Cumulative energy counters (powercap/RAPL, simulated meters).
    pub energy: Vec<EnergyCounter>,
    /// Instantaneous power sensors (hwmon power*_input, board sensors).
    pub power: Vec<PowerReading>,
    /// Cumulative packet and byte counters per network interface
    /// (/sys/class/net/*/statistics); empty unless a policy asked for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<NicCounters>,
    /// Current frequency per CPU (cpufreq `scaling_cur_freq`); empty without cpufreq or
    /// unless a policy asked for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu_freqs: Vec<CpuFreq>,
    /// Size of the pages `numa_pages` counts on the sampled machine, bytes (0 = unknown:
    /// recordings made before it was recorded; readers then assume 4096).
    #[serde(default)]
    pub page_bytes: u64,
    /// Processes that ran since the previous sample and were gone at this one (seen by the
    /// kernel's event sources; empty on the /proc path, which cannot see them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exited: Vec<ExitedProc>,
}

/// A process that ran in the interval and exited before the sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ExitedProc {
    pub pid: u32,
    /// Its comm when it first ran in the interval; empty when only its exit was seen.
    pub comm: String,
    /// CPU time it used in the interval, ns (`None`: only the connector saw it).
    pub cpu_ns: Option<u64>,
    /// It was never in a sample: it started after the previous one.
    pub unsampled: bool,
}

/// One interface's cumulative counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct NicCounters {
    pub name: String,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
}

/// One CPU's current frequency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CpuFreq {
    pub cpu: u32,
    pub khz: u64,
}

/// Cumulative CPU time per state, in clock ticks (/proc/stat `cpuN` lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CpuTimes {
    pub cpu: u32,
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    pub fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }
    pub fn busy(&self) -> u64 {
        self.user + self.nice + self.system + self.irq + self.softirq + self.steal
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcSample {
    pub pid: u32,
    pub start_time_ticks: u64,
    /// Shared with the sampler's cache (a sample of 8,000 idle processes copies no text).
    pub comm: std::sync::Arc<str>,
    /// Single-letter state from /proc/PID/stat (`R`, `S`, `D`, `Z`, ...).
    pub state: char,
    pub ppid: u32,
    pub uid: Option<u32>,
    /// Cumulative CPU time of all threads, ticks.
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    /// CPU the main thread last ran on (field 39 of stat).
    pub last_cpu: Option<u32>,
    /// Cpus_allowed_list of the main thread.
    pub allowed: CpuSet,
    /// Cgroup path (v2 unified path, else the cpuset or first v1 hierarchy's path).
    pub cgroup: std::sync::Arc<str>,
    pub num_threads: u32,
    /// Kernel threads (PF_KTHREAD, or children of kthreadd) are never placed.
    pub kernel_thread: bool,
    /// Per-thread detail; empty unless a policy asked for threads. Shared, not copied:
    /// a process that did not run keeps the list of its last read, and a sample taken
    /// from the sampler's cache costs one reference count, not a copy per thread.
    #[serde(default, skip_serializing_if = "no_threads")]
    pub threads: std::sync::Arc<[ThreadSample]>,
    /// Inodes of the sockets this process holds (from /proc/PID/fd, cached).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub socket_inodes: Vec<u64>,
    /// Hardware counters, summed over the process's threads; empty without a PMU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counters: Vec<CounterValue>,
    /// Resident pages per NUMA node (/proc/PID/numa_maps); empty unless asked for.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub numa_pages: BTreeMap<u32, u64>,
}

/// The node holding most of a process's pages (`numa_pages`) (lowest id on a tie); None when no page is known.
pub fn main_page_node(pages: &BTreeMap<u32, u64>) -> Option<u32> {
    pages
        .iter()
        .filter(|(_, &p)| p > 0)
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(&n, _)| n)
}

fn no_threads(t: &std::sync::Arc<[ThreadSample]>) -> bool {
    t.is_empty()
}

impl ProcSample {
    /// A sleeping user process with only its identity, its affinity and zero counters; the
    /// starting point for samples built by hand (simulator, tests, replayed traces).
    pub fn bare(pid: u32, start_time_ticks: u64, comm: &str, allowed: CpuSet) -> ProcSample {
        ProcSample {
            pid,
            start_time_ticks,
            comm: comm.into(),
            state: 'S',
            ppid: 1,
            uid: Some(0),
            utime_ticks: 0,
            stime_ticks: 0,
            last_cpu: None,
            allowed,
            cgroup: "/".into(),
            num_threads: 1,
            kernel_thread: false,
            threads: Default::default(),
            socket_inodes: Vec::new(),
            counters: Vec::new(),
            numa_pages: BTreeMap::new(),
        }
    }

    pub fn key(&self) -> ProcKey {
        ProcKey {
            pid: self.pid,
            start_time_ticks: self.start_time_ticks,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadSample {
    pub tid: u32,
    /// Shared, not copied, from sample to observation (80,000 threads make 80,000 strings).
    pub comm: std::sync::Arc<str>,
    pub state: char,
    /// As of the thread's last `stat` read: with the eBPF collector a running thread's
    /// stat is not read again, and [`ThreadSample::cpu_ns`] is the current figure.
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub last_cpu: Option<u32>,
    pub allowed: CpuSet,
    /// Cumulative CPU time kept by the sampler from the eBPF collector's per-thread time
    /// (started at the thread's ticks when first read); `None` without the collector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
}

/// One TCP socket's counters from sock_diag (INET_DIAG_INFO, struct tcp_info).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SocketSample {
    pub inode: u64,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// TCP state number as in include/net/tcp_states.h (1 = ESTABLISHED).
    pub state: u8,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_in: u64,
    pub segs_out: u64,
    /// Segments carrying data (tcpi_data_segs_in/out, Linux >= 4.6); 0 when unknown.
    /// Average segment sizes use these when non-zero: pure ACKs carry no payload.
    #[serde(default)]
    pub data_segs_in: u64,
    #[serde(default)]
    pub data_segs_out: u64,
}

/// One line of /proc/interrupts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IrqSample {
    /// The first column without its colon: `38`, `LOC`, `NMI`.
    pub irq: String,
    /// Per-CPU counts, indexed by position in the header (online CPUs in order).
    pub counts: Vec<u64>,
    /// CPU ids of the header columns (so counts map to CPU ids after hotplug).
    pub cpu_ids: Vec<u32>,
    /// The action names, e.g. `virtio2-input.0`.
    pub name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SoftirqCounts {
    pub cpu: u32,
    pub net_rx: u64,
    pub net_tx: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnergyCounter {
    /// E.g. `intel-rapl:0` (package-0), or `sim:node`.
    pub domain: String,
    pub energy_uj: u64,
    /// The counter wraps to 0 after this (max_energy_range_uj).
    pub max_range_uj: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerReading {
    pub sensor: String,
    pub power_uw: u64,
}

/// A hardware event a counter source can measure.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterEvent {
    Cycles,
    Instructions,
    LlcReferences,
    LlcMisses,
    /// A raw event resolved for this microarchitecture, named as the paper names it
    /// (`offcore_requests_buffer_full`, `l2_prefetch_requests`, ...).
    Raw {
        name: String,
        config: u64,
    },
}

impl CounterEvent {
    /// Short stable name used in reports and rate maps.
    pub fn name(&self) -> &str {
        match self {
            CounterEvent::Cycles => "cycles",
            CounterEvent::Instructions => "instructions",
            CounterEvent::LlcReferences => "llc_references",
            CounterEvent::LlcMisses => "llc_misses",
            CounterEvent::Raw { name, .. } => name,
        }
    }
}

/// A cumulative counter value with perf's multiplexing times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterValue {
    pub event: CounterEvent,
    pub value: u64,
    pub time_enabled_ns: u64,
    pub time_running_ns: u64,
}

impl CounterValue {
    /// The value scaled for multiplexing (value * enabled / running), as perf does.
    pub fn scaled(&self) -> f64 {
        if self.time_running_ns == 0 {
            return 0.0;
        }
        self.value as f64 * self.time_enabled_ns as f64 / self.time_running_ns as f64
    }
}

/// Which optional sources a host has, and why the missing ones are missing. Probed once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SourceStatus {
    pub sources: Vec<Source>,
}

/// One optional source of observation. An enum so that asking for a source that does not
/// exist does not compile (a misspelt string once read as "not missing" and enabled a
/// policy). Serialised as the snake-case names recordings already carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// `/proc/stat` and the per-process files.
    Proc,
    /// `/proc/interrupts`.
    Interrupts,
    /// `/proc/softirqs`.
    Softirqs,
    /// The netlink socket dump (TCP sockets of this network namespace).
    SockDiag,
    /// Hardware performance counters.
    PerfHw,
    /// Software performance counters (tests on machines without a PMU).
    PerfSw,
    /// RAPL powercap energy zones.
    Rapl,
    /// hwmon power sensors.
    Hwmon,
    /// cpufreq frequency domains.
    Cpufreq,
    /// The eBPF CPU-time collector.
    Ebpf,
    /// The process-events connector (fork, exec, exit).
    ProcEvents,
}

impl SourceKind {
    pub const ALL: [SourceKind; 11] = [
        SourceKind::Proc,
        SourceKind::Interrupts,
        SourceKind::Softirqs,
        SourceKind::SockDiag,
        SourceKind::PerfHw,
        SourceKind::PerfSw,
        SourceKind::Rapl,
        SourceKind::Hwmon,
        SourceKind::Cpufreq,
        SourceKind::Ebpf,
        SourceKind::ProcEvents,
    ];

    /// The name shown to people and written in recordings.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Proc => "proc",
            SourceKind::Interrupts => "interrupts",
            SourceKind::Softirqs => "softirqs",
            SourceKind::SockDiag => "sock_diag",
            SourceKind::PerfHw => "perf_hw",
            SourceKind::PerfSw => "perf_sw",
            SourceKind::Rapl => "rapl",
            SourceKind::Hwmon => "hwmon",
            SourceKind::Cpufreq => "cpufreq",
            SourceKind::Ebpf => "ebpf",
            SourceKind::ProcEvents => "proc_events",
        }
    }
}

impl std::fmt::Display for SourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    pub name: SourceKind,
    pub available: bool,
    /// What was found, or why it is missing (shown once by `placer top`/daemon).
    pub detail: String,
}

impl SourceStatus {
    pub fn has(&self, name: SourceKind) -> bool {
        self.sources.iter().any(|s| s.name == name && s.available)
    }
    pub fn why_missing(&self, name: SourceKind) -> Option<&str> {
        self.sources
            .iter()
            .find(|s| s.name == name && !s.available)
            .map(|s| s.detail.as_str())
    }
}

/// What a policy wants sampled beyond the defaults (threads are costly on big machines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SampleRequest {
    pub threads: bool,
    pub sockets: bool,
    pub counters: bool,
    pub numa_pages: bool,
    /// Interface packet/byte counters and CPU frequencies (learned network costs).
    pub nics: bool,
    /// Each IRQ's count per CPU (`/proc/interrupts`, whose read costs the kernel tens of
    /// microseconds per CPU): what `placer top` shows and recordings keep; no policy
    /// needs it.
    #[serde(default)]
    pub irqs: bool,
}

impl SampleRequest {
    pub fn union(self, o: SampleRequest) -> SampleRequest {
        SampleRequest {
            threads: self.threads || o.threads,
            sockets: self.sockets || o.sockets,
            counters: self.counters || o.counters,
            numa_pages: self.numa_pages || o.numa_pages,
            nics: self.nics || o.nics,
            irqs: self.irqs || o.irqs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_main_page_node_holds_most_pages_lowest_id_on_a_tie() {
        assert_eq!(
            main_page_node(&BTreeMap::from([(0, 5), (1, 9), (2, 9)])),
            Some(1)
        );
        assert_eq!(main_page_node(&BTreeMap::from([(3, 0)])), None);
    }

    #[test]
    fn source_kinds_keep_the_names_recordings_carry() {
        for k in SourceKind::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            assert_eq!(serde_json::from_str::<SourceKind>(&json).unwrap(), k);
        }
        let s = SourceStatus {
            sources: vec![Source {
                name: SourceKind::SockDiag,
                available: false,
                detail: "no netlink".into(),
            }],
        };
        assert_eq!(s.why_missing(SourceKind::SockDiag), Some("no netlink"));
        assert!(!s.has(SourceKind::SockDiag));
        // A source never probed is neither present nor missing (a policy needing it must
        // check `has`).
        assert_eq!(s.why_missing(SourceKind::PerfHw), None);
    }
}
