//! `placer power`: fit a power model from measurements (`fit`), or step through system
//! states measuring watts on the hardware (`calibrate`).

use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: PowerCmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum PowerCmd {
    /// Fit P = Pn + Ps*packages + Pc*cores + Pt*siblings from a CSV or a record file.
    Fit(FitArgs),
    /// Measure power per system state (cluster, frequency) on this machine.
    Calibrate(super::power_calibrate::Args),
}

/// `placer power fit` arguments (defined with the code in power_fit.rs).
pub use super::power_fit::Args as FitArgs;

#[derive(clap::Args, Debug)]
pub struct CalibrateArgs {}

pub fn run(args: Args) -> Result<()> {
    match args.cmd {
        PowerCmd::Fit(a) => super::power_fit::run(a),
        PowerCmd::Calibrate(a) => super::power_calibrate::run(a),
    }
}
