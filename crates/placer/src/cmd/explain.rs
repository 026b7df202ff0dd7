//! `placer explain`. (Placeholder: filled in by its issue.)

use anyhow::{bail, Result};

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> Result<()> {
    bail!("`placer explain` is not implemented yet")
}
