//! `placer bench`: benchmarks of placer's own cost (topology read, sample/observe cycle,
//! daemon cycle and reaction, simulator speed) and of the seeds' effects (network buffers,
//! QoS under a limiter). Each prints medians of repeated runs and, with --json, the raw runs.

use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub what: BenchCmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum BenchCmd {
    /// Time to read the topology of a root (default /), median of runs.
    Topo(super::bench_topo::Args),
    /// Cost of one sample+observe cycle.
    Cycle(super::bench_cycle::Args),
    /// Daemon cycle overhead and reaction time of net-affinity.
    Daemon(super::bench_daemon::Args),
    /// placer's CPU share next to another agent's (irqbalance, numad, a command) on one load.
    Overhead(super::bench_overhead::Args),
    /// Simulator speed: 10 simulated seconds of 64 tasks on 64 CPUs.
    Sim(super::bench_sim::Args),
    /// ttcp-style TCP benchmark of buffer reuse and NUMA placement (seed 004).
    Net(super::bench_net::Args),
    /// Deadline misses of a periodic task under a network stream, with and without the limiter.
    Qos(super::bench_qos::Args),
    /// Slowdown of a pointer chase beside streaming co-runners on its LLC domain, with fits
    /// of the harm model (seed 003).
    Contention(super::bench_contention::Args),
}

pub fn run(args: Args) -> Result<()> {
    match args.what {
        BenchCmd::Topo(a) => super::bench_topo::run(a),
        BenchCmd::Cycle(a) => super::bench_cycle::run(a),
        BenchCmd::Daemon(a) => super::bench_daemon::run(a),
        BenchCmd::Overhead(a) => super::bench_overhead::run(a),
        BenchCmd::Qos(a) => super::bench_qos::run(a),
        BenchCmd::Contention(a) => super::bench_contention::run(a),
        BenchCmd::Net(a) => super::bench_net::run(a),
        BenchCmd::Sim(a) => super::bench_sim::run(a),
    }
}
