//! The benchmarks (`placer bench ...`, `placer ab`): each module holds its arguments, its
//! measurement and its report; the binary's `cmd::bench` only dispatches to them.

pub mod ab;
pub mod bench_contention;
pub mod bench_cycle;
pub mod bench_daemon;
pub mod bench_net;
pub mod bench_overhead;
pub mod bench_qos;
pub mod bench_seeds;
pub mod bench_sim;
pub mod bench_sockets;
pub mod bench_topo;
pub mod bench_verdicts;
pub mod bench_verdicts_real;
pub mod busy;
pub mod contention_pairs;
