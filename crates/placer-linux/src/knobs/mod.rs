//! One file per kind of knob with a handler of its own here: process affinity, IRQ
//! affinity, RPS. (Traffic control, cpufreq and memory policy keep their handlers beside
//! their own logic: `tc`, `cpufreq`, `membind`.)

pub mod irq;
pub mod proc_affinity;
pub mod rps;
