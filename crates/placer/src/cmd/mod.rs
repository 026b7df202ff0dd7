//! One module per subcommand.

pub mod bench;
pub mod bench_daemon;
pub mod daemon;
pub mod explain;
pub mod plan;
pub mod power;
pub mod record;
pub mod restore;
pub mod run;
pub mod sim;
pub mod top;
pub mod topo;
