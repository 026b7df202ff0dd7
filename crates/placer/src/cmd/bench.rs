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
    Topo(placer::bench::bench_topo::Args),
    /// The socket stage with the kernel's socket marks against a dump each sample.
    Sockets(placer::bench::bench_sockets::Args),
    /// Cost of one sample+observe cycle.
    Cycle(placer::bench::bench_cycle::Args),
    /// Daemon cycle overhead and reaction time of net-affinity.
    Daemon(placer::bench::bench_daemon::Args),
    /// placer's CPU share next to another agent's (irqbalance, numad, a command) on one load.
    Overhead(placer::bench::bench_overhead::Args),
    /// Simulator speed: 10 simulated seconds of 64 tasks on 64 CPUs.
    Sim(placer::bench::bench_sim::Args),
    /// ttcp-style TCP benchmark of buffer reuse and NUMA placement (seed 004).
    Net(placer::bench::bench_net::Args),
    /// Deadline misses of a periodic task under a network stream, with and without the limiter.
    Qos(placer::bench::bench_qos::Args),
    /// Slowdown of a pointer chase beside streaming co-runners on its LLC domain, with fits
    /// of the harm model (seed 003).
    Contention(placer::bench::bench_contention::Args),
    /// The seeds' simulated figures the docs quote, each with what it rests on; seed 003 over
    /// seeds 1..=N (`--write REPO` puts them into the docs).
    Seeds(placer::bench::bench_seeds::Args),
    /// False-positive rate and power of the verdicts on noisy, autocorrelated series of known
    /// true effect.
    Verdicts(placer::bench::bench_verdicts::Args),
}

pub fn run(args: Args) -> Result<()> {
    match args.what {
        BenchCmd::Topo(a) => placer::bench::bench_topo::run(a),
        BenchCmd::Sockets(a) => placer::bench::bench_sockets::run(a),
        BenchCmd::Cycle(a) => placer::bench::bench_cycle::run(a),
        BenchCmd::Daemon(a) => placer::bench::bench_daemon::run(a),
        BenchCmd::Overhead(a) => placer::bench::bench_overhead::run(a),
        BenchCmd::Qos(a) => placer::bench::bench_qos::run(a),
        BenchCmd::Contention(a) => placer::bench::bench_contention::run(a),
        BenchCmd::Net(a) => placer::bench::bench_net::run(a),
        BenchCmd::Sim(a) => placer::bench::bench_sim::run(a),
        BenchCmd::Seeds(a) => placer::bench::bench_seeds::run(a),
        BenchCmd::Verdicts(a) => placer::bench::bench_verdicts::run(a),
    }
}
