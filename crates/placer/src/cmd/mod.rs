//! One module per subcommand.

pub mod bench;
pub mod config;
pub mod daemon;
pub mod explain;
pub mod install;
pub mod plan;
pub mod power;
pub mod power_calibrate;
pub mod power_fit;
pub mod record;
pub mod report;
pub mod restore;
pub mod run;
pub mod sim;
pub mod top;
pub mod topo;
