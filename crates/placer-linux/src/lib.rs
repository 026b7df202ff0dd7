//! placer-linux: the real machine. Every read and write of /proc, /sys and cgroupfs goes
//! through a root path passed in as a value, so the readers run on fixture trees captured
//! from real machines and on writable temporary trees as well as on `/`.

pub mod activity;
pub mod actuator;
pub mod attr;
pub mod bpf;
pub mod btf;
pub mod coexist;
pub mod error;
pub mod host;
pub mod journal;
pub mod knob;
pub mod knobs;
pub mod numa_maps;
pub mod pmu_events;
pub mod power_meter;
pub mod sampler;
pub mod testnet;
pub mod topology;
pub mod verdict_log;

pub use error::{LinuxError, Result};
pub use host::LinuxHost;
pub mod energy;
pub mod interrupts;
pub mod perf;
pub mod pid;
pub mod proc_events;
pub mod procfs;
pub mod record;
pub mod sockdiag;
pub mod state_dir;
pub mod sys;
