//! `placer topo`: the machine's topology as a tree or JSON.

use crate::common::MachineArgs;
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Print JSON (the documented contract) instead of a tree.
    #[arg(long)]
    pub json: bool,
    /// List the built-in machine models.
    #[arg(long)]
    pub list_machines: bool,
}

pub fn run(args: Args) -> Result<()> {
    if args.list_machines {
        for (name, desc) in placer_core::machines::MACHINES {
            println!("{name:24} {desc}");
        }
        return Ok(());
    }
    let topo = args.machine.topology()?;
    println!("{}", serde_json::to_string_pretty(&topo)?);
    Ok(())
}
