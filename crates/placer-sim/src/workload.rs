//! Workloads: what a scenario runs. Each `[[workloads]]` entry of a scenario is a
//! [`WorkloadSpec`] that starts `count` processes; the kinds are
//!
//! - `cpu`: a job of `work_s` seconds (alone, one thread, on the fastest core at full
//!   speed) with `threads` threads and an Amdahl `serial_fraction`: thread 0 runs the serial
//!   part, then every thread runs `(1 - serial_fraction) * work_s / threads`. Without
//!   `work_s` it never ends (throughput = work done per second). `repeat = true` restarts it
//!   when done. The class (archetype) decides its SMT gain, contention and memory behaviour:
//!   a "memory-intensive archetype" is a `cpu` job with a memory class (`streaming`, ...).
//! - `rx`: a process receiving one TCP flow from a remote sender at `rate_mbps` (the
//!   sender's rate; the NIC's line rate and the receiver's speed bound it) on `nic`.
//! - `tx`: a process sending one flow at `rate_mbps` on `nic`.
//! - over loopback (`nic = "lo"`, added to any machine that lacks one): an `rx` workload
//!   names its local sender with `peer = "send{i}"`, a `tx` workload; the sender's bytes
//!   are what the receiver's softirq processes (on the RPS CPU, else the sender's CPU), no
//!   line rate applies, and the sender waits while the receiver's socket buffer is full.
//! - `periodic`: a real-time (SCHED_FIFO when `rt`) task releasing a job of `work_ms`
//!   every `period_ms`, to finish within `deadline_ms`; misses are counted.
//!
//! `{i}` in `name` and `nic` is replaced by the instance number (0-based).

use placer_core::CpuSet;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Cpu,
    Rx,
    Tx,
    Periodic,
}

fn one() -> u32 {
    1
}
fn mtu() -> f64 {
    1448.0
}
fn hundred() -> f64 {
    100.0
}
fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    pub kind: Kind,
    /// Process name (comm); `{i}` = instance number.
    pub name: String,
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default = "one")]
    pub threads: u32,
    #[serde(default)]
    pub serial_fraction: f64,
    /// `cpu`: total work in seconds of one thread alone at full speed; none = endless.
    #[serde(default)]
    pub work_s: Option<f64>,
    #[serde(default)]
    pub repeat: bool,
    /// Archetype name (params.archetypes); default by kind.
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub start_s: f64,
    /// Initial affinity (as `taskset` would set it); default all CPUs.
    #[serde(default)]
    pub cpus: Option<CpuSet>,
    /// Node holding the memory; default first touch on the first CPU it runs on.
    #[serde(default)]
    pub mem_node: Option<u32>,
    #[serde(default = "hundred")]
    pub mem_mb: f64,
    /// `rx`/`tx`: the NIC (`eth{i}`), the target rate and the segment size.
    #[serde(default)]
    pub nic: Option<String>,
    #[serde(default)]
    pub rate_mbps: Option<f64>,
    #[serde(default = "mtu")]
    pub packet_bytes: f64,
    /// `rx`: reuse one receive buffer (cache-hot) rather than allocate one per message.
    #[serde(default = "yes")]
    pub buffer_reuse: bool,
    /// `rx` over loopback: the local sender, a `tx` workload's instance name (`send{i}`).
    #[serde(default)]
    pub peer: Option<String>,
    /// `periodic`.
    #[serde(default)]
    pub period_ms: f64,
    #[serde(default)]
    pub work_ms: f64,
    #[serde(default)]
    pub deadline_ms: Option<f64>,
    #[serde(default)]
    pub rt: bool,
    /// `rx`/`tx`: the QoS target of each instance, bytes/s received (rx) or sent (tx);
    /// counted in the report's `qos_satisfaction` / `qos_per_watt`. None = no target.
    #[serde(default)]
    pub qos_target_bytes_per_s: Option<f64>,
    /// `cpu`: the QoS target of each instance as a share (0..=1) of its solo maximum work
    /// rate (`threads` on the fastest core at full speed, Amdahl: `1 / (serial_fraction +
    /// (1 - serial_fraction) / threads)` work-seconds per second). None = no target.
    #[serde(default)]
    pub qos_target_work_share: Option<f64>,
}

impl WorkloadSpec {
    pub fn default_class(&self) -> &'static str {
        match self.kind {
            Kind::Cpu => "compute-int",
            Kind::Rx | Kind::Tx => "net-receive",
            Kind::Periodic => "compute-int",
        }
    }

    pub fn class_name(&self) -> String {
        self.class
            .clone()
            .unwrap_or_else(|| self.default_class().to_string())
    }

    /// The solo maximum work rate of a `cpu` job (work-seconds per second): `threads` on
    /// the fastest core at full speed, Amdahl-limited by `serial_fraction`.
    pub fn solo_max_work_rate(&self) -> f64 {
        let t = f64::from(self.threads.max(1));
        1.0 / (self.serial_fraction + (1.0 - self.serial_fraction) / t)
    }

    /// The QoS target of one instance, in the unit it is measured in (bytes/s for rx/tx,
    /// work-seconds per second for cpu), if the workload declares one.
    pub fn qos_target(&self) -> Option<f64> {
        match self.kind {
            Kind::Rx | Kind::Tx => self.qos_target_bytes_per_s,
            Kind::Cpu => self
                .qos_target_work_share
                .map(|s| s * self.solo_max_work_rate()),
            Kind::Periodic => None,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let bad = |m: String| Err(format!("workload {:?}: {m}", self.name));
        if self.count == 0 || self.threads == 0 {
            return bad("count and threads must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.serial_fraction) {
            return bad("serial_fraction must be within 0..=1".into());
        }
        if let Some(t) = self.qos_target_bytes_per_s {
            if !matches!(self.kind, Kind::Rx | Kind::Tx) {
                return bad("qos_target_bytes_per_s is for rx/tx workloads".into());
            }
            if t.is_nan() || t <= 0.0 {
                return bad("qos_target_bytes_per_s must be positive".into());
            }
        }
        if let Some(t) = self.qos_target_work_share {
            if self.kind != Kind::Cpu {
                return bad("qos_target_work_share is for cpu workloads".into());
            }
            if t.is_nan() || t <= 0.0 || t > 1.0 {
                return bad("qos_target_work_share must be within (0, 1]".into());
            }
        }
        match self.kind {
            Kind::Rx | Kind::Tx => {
                if self.nic.is_none() {
                    return bad("rx/tx need `nic`".into());
                }
                if self.packet_bytes <= 0.0 {
                    return bad("packet_bytes must be positive".into());
                }
                if self.peer.is_some() && self.kind != Kind::Rx {
                    return bad("`peer` (the local sender) is for rx workloads".into());
                }
            }
            Kind::Periodic => {
                if self.period_ms <= 0.0 || self.work_ms <= 0.0 {
                    return bad("periodic needs positive period_ms and work_ms".into());
                }
            }
            Kind::Cpu => {
                if self.work_s.is_some_and(|w| w <= 0.0) {
                    return bad("work_s must be positive".into());
                }
            }
        }
        Ok(())
    }
}

/// Replaces `{i}` with the instance number.
pub fn instance_name(template: &str, i: u32) -> String {
    template.replace("{i}", &i.to_string())
}

/// Per-process results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ProcResult {
    pub name: String,
    pub kind: String,
    /// Completion time of each finished run, seconds since the process started.
    pub completions_s: Vec<f64>,
    /// Work done in the measured window, seconds of full-speed work.
    pub work_done_s: f64,
    pub rx_bytes: f64,
    pub tx_bytes: f64,
    pub jobs: u64,
    pub deadline_misses: u64,
    /// min(achieved / target, 1) over the measured window, when the workload declares a
    /// QoS target (`qos_target_bytes_per_s`, `qos_target_work_share`).
    #[serde(default)]
    pub qos_satisfaction: Option<f64>,
}
