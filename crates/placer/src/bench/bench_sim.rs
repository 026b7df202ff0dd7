//! `placer bench sim`: simulator speed. Simulates `--seconds` (default 10) of 64
//! single-thread tasks of mixed classes (compute, cache-sensitive, streaming,
//! pointer-chasing) on a 64-CPU synthetic machine (2 packages x 16 cores x 2 threads) under
//! linux-default with 1 ms ticks, `--runs` times, and prints the median wall time. The
//! target (issue 5): under 1 s for 10 simulated seconds on this machine.

use anyhow::Result;
use placer_sim::scenario::Scenario;
use placer_sim::Baseline;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Simulated time per run.
    #[arg(long, alias = "seconds", default_value = "10s", value_parser = crate::common::duration_arg)]
    pub duration: std::time::Duration,
    /// Number of timed runs (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Print JSON (every run's wall time).
    #[arg(long)]
    pub json: bool,
}

/// The benchmark scenario: 64 tasks on 64 CPUs.
pub const BENCH_SCENARIO: &str = r#"
name = "bench-64x64"
description = "64 tasks of mixed classes on a 64-CPU synthetic machine"
machine = "pkg:2 core:16 pu:2 numbering:smt-last"
duration_s = 10.0
[[workloads]]
kind = "cpu"
name = "fp{i}"
count = 16
class = "compute-fp"
[[workloads]]
kind = "cpu"
name = "cache{i}"
count = 16
class = "cache-sensitive"
[[workloads]]
kind = "cpu"
name = "stream{i}"
count = 16
class = "streaming"
[[workloads]]
kind = "cpu"
name = "chase{i}"
count = 16
class = "pointer-chasing"
"#;

pub fn run(args: Args) -> Result<()> {
    let sc = Scenario::from_toml("bench-64x64", BENCH_SCENARIO)?;
    let end_ns = (args.duration.as_secs_f64() * 1e9) as u64;
    let mut walls = Vec::new();
    let mut work = 0.0;
    for i in 0..args.runs.max(1) {
        let mut host = sc.host(None, Baseline::LinuxDefault, 1 + i as u64)?;
        host.open_window();
        let t0 = Instant::now();
        host.run_until(end_ns, false);
        walls.push(t0.elapsed().as_secs_f64());
        work = placer_sim::scenario::metrics_of(&host, 0).work_rate;
    }
    let median = placer_core::stats::median(&walls).unwrap_or(f64::NAN);
    let ticks = args.duration.as_secs_f64() * 1000.0;
    if args.json {
        outln!(
            "{}",
            serde_json::json!({
                "benchmark": "sim",
                "scenario": "64 tasks on 64 CPUs, 1 ms ticks",
                "simulated_s": args.duration.as_secs_f64(),
                "runs_s": walls,
                "median_s": median,
                "us_per_tick": median / ticks * 1e6,
                "work_rate": work,
            })
        );
    } else {
        outln!(
            "placer bench sim: {} simulated s of 64 tasks on 64 CPUs (1 ms ticks), {} runs: \
             median {:.3} s wall ({:.1} us per tick; {:.1}x real time); work rate {:.1} CPU-s/s",
            args.duration.as_secs_f64(),
            walls.len(),
            median,
            median / ticks * 1e6,
            args.duration.as_secs_f64() / median.max(1e-9),
            work
        );
    }
    Ok(())
}
