//! placer-core: the pure heart of placer. CPU sets, the machine's topology, raw samples and
//! the observations derived from them, plans, policies and configuration. No I/O happens
//! here; see `placer-linux` for the real machine and `placer-sim` for modelled ones.

pub mod alloc;
pub mod amdahl;
pub mod catalogue;
pub mod classify;
pub mod coexist;
pub mod config;
pub mod config_doc;
pub mod counter_trace;
pub mod cpuset;
pub mod engine;
pub mod event_path;
pub mod host;
pub mod journal;
pub mod k8s;
pub mod learned;
pub mod machines;
pub mod mem;
pub mod net_costs;
pub mod observation;
mod observe;
pub mod plan;
pub mod policies;
pub mod policy;
pub mod policy_kind;
pub mod power_model;
pub mod power_table;
pub mod record;
pub mod replay;
pub mod rng;
pub mod sample;
pub mod scope;
pub mod stats;
pub mod topology;
pub mod units;
pub mod verdict;
pub mod verifier;

pub use cpuset::CpuSet;
pub use observation::Observation;
pub use plan::{Action, Outcome, Plan};
pub use policy::{Policy, PolicyState};
pub use sample::{ProcKey, Sample};
pub use topology::Topology;
