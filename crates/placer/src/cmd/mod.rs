//! One module per subcommand.

pub mod ab;
pub mod bench;
pub mod bench_contention;
pub mod bench_cycle;
pub mod bench_daemon;
pub mod bench_net;
pub mod bench_overhead;
pub mod bench_qos;
pub mod bench_sim;
pub mod bench_topo;
pub mod daemon;
pub mod explain;
pub mod install;
pub mod plan;
pub mod power;
pub mod power_calibrate;
pub mod power_fit;
pub mod record;
pub mod restore;
pub mod run;
pub mod sim;
pub mod top;
pub mod topo;
