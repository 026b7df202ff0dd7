//! Helpers shared by the subcommands: logging, the `--root`/`--machine` choice.

use anyhow::{Context, Result};
use placer_core::Topology;
use std::path::PathBuf;

pub fn init_logging(filter: Option<&str>) {
    let filter = filter
        .map(str::to_string)
        .or_else(|| std::env::var("PLACER_LOG").ok())
        .unwrap_or_else(|| "info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
}

/// Where the topology comes from: a filesystem root or a built-in machine model.
#[derive(clap::Args, Debug, Clone)]
pub struct MachineArgs {
    /// Filesystem root holding sys/ and proc/ (a snapshot, or / for this machine).
    #[arg(long, default_value = "/", conflicts_with = "machine")]
    pub root: PathBuf,
    /// A built-in machine model (see `placer topo --list-machines`) or a synthetic spec
    /// such as "pkg:2 node:1 core:4 pu:2".
    #[arg(long)]
    pub machine: Option<String>,
}

impl MachineArgs {
    pub fn topology(&self) -> Result<Topology> {
        match &self.machine {
            Some(m) => Ok(placer_core::machines::machine(m)?),
            None => placer_linux::topology::read(&self.root)
                .with_context(|| format!("reading the topology under {}", self.root.display())),
        }
    }
}
