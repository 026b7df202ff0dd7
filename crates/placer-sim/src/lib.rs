//! placer-sim: modelled machines (performance, power, contention, network, NUMA),
//! workloads and baseline schedulers, behind the same `Host` interface as the real machine,
//! so placer's real policies run on the seeds' servers and boards.
//!
//! Modules: [`params`] (every model number, named, sourced, overridable), [`machine`]
//! (performance model), [`workload`], [`network`], [`power`], [`baselines`]
//! (`linux-default`, `eas`), [`host`] (`SimHost`), [`scenario`] (TOML scenarios and the
//! runner), [`report`] (tables, JSON), [`oracle`] (exhaustive search for small cases).
//! docs/simulator.md describes the model and every parameter's source.

pub mod alloc_sweep;
pub mod baselines;
pub mod harm_fit;
pub mod host;
pub mod machine;
pub mod network;
pub mod params;
pub mod power;
pub use placer_core::rng;
mod actuate;
mod observe;
mod tick;
pub mod workload;
pub mod world;

pub use baselines::Baseline;
pub use host::SimHost;
pub use params::Params;
pub mod oracle;
pub mod plot;
pub mod report;
pub mod scenario;
pub mod seed_figures;
