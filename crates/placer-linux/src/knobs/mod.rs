//! Every knob handler, one module per kind of knob: process affinity, IRQ affinity, RPS,
//! cpufreq (frequency cap and governor), traffic control (`tc`: qdiscs and their filters)
//! and memory policy (`membind`); the last three with the logic their handler drives.

pub mod cpufreq;
pub mod irq;
pub mod membind;
pub mod proc_affinity;
pub mod rps;
pub mod tc;
