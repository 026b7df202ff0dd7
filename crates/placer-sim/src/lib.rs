//! placer-sim: modelled machines (performance, power, contention, network, NUMA),
//! workloads and baseline schedulers, behind the same `Host` interface as the real machine,
//! so placer's real policies run on the seeds' servers and boards.
//! (Placeholder: the simulator issue fills it in.)
