//! `placer bench sockets`: the socket stage of a sample with the kernel's socket marks
//! (only the sockets a segment reached are read again) against the same stage without
//! them (every socket dumped when a segment moved), side by side in one run.
//!
//! The bench opens `--conns` idle loopback connections and `--moving` more. Each round,
//! one byte goes each way on every moving connection, then (after 100 ms, for the delayed
//! ACKs) each of two samplers of this machine takes a sample of its sockets, in an order
//! that alternates by round: one with the marks (as the daemon runs as root), one without
//! (`kernel_events = false`). What is timed is each sampler's socket stage (the sockets
//! and their mapping to processes) in CPU time of the sampling thread. The marking
//! program's own cost per segment, in the kernel's softirq, is reported from the kernel's
//! run-time statistics.

use anyhow::{bail, Context, Result};
use placer_core::sample::{SampleRequest, SourceKind};
use placer_core::stats::median;
use placer_linux::sampler::Sampler;
use serde::Serialize;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Idle loopback connections.
    #[arg(long, default_value_t = 2000)]
    pub conns: u32,
    /// Connections that exchange a byte each way between two samples.
    #[arg(long, default_value_t = 20)]
    pub moving: u32,
    /// Measured rounds (after 3 warm-up rounds).
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    conns: u32,
    moving: u32,
    runs: usize,
    /// Reading the sockets with the marks (the moved ones read again), without their
    /// mapping to processes: median µs, and every round's.
    marks_median_us: f64,
    marks_runs_us: Vec<f64>,
    /// Without them (a dump each round).
    dump_median_us: f64,
    dump_runs_us: Vec<f64>,
    /// Median of the rounds' ratios, dump / marks.
    ratio_median: f64,
    /// The whole socket stage (reading and mapping), median µs, each way.
    marks_stage_median_us: f64,
    dump_stage_median_us: f64,
    /// Sockets the marked sampler read again, median per round (2 per moving connection
    /// when all went as designed).
    looked_up_median: f64,
    /// Rounds where the marked sampler dumped (a state changed somewhere in this
    /// namespace, or its periodic dump).
    marks_dumped_rounds: usize,
    /// Fd directories each sampler read each round (a process whose fd count moved; for
    /// this one, its count less the files its samplers keep open).
    marks_fd_scans: Vec<usize>,
    dump_fd_scans: Vec<usize>,
    /// The marking program in the kernel over the measured rounds: runs and ns per run
    /// (`null` without the kernel's run-time statistics).
    prog_runs: Option<u64>,
    prog_ns_per_run: Option<f64>,
}

fn sampler(marks: bool) -> Sampler {
    let mut s = Sampler::new(Path::new("/"));
    s.set_kernel_events(marks);
    s.set_stage_times(true);
    s
}

fn prog_totals() -> Option<(u64, u64)> {
    let all = placer_linux::bpf::program_run_times(&[placer_linux::bpf::Prog::TcpMoves]).ok()?;
    Some(
        all.iter()
            .fold((0, 0), |(t, r), p| (t + p.run_time_ns, r + p.runs)),
    )
}

pub fn run(args: Args) -> Result<()> {
    let (_kids, _idle) = super::bench_daemon::idle_load(0, args.conns)?;
    let (_k2, mut moving) = super::bench_daemon::idle_load(0, args.moving)?;
    let mut with = sampler(true);
    let mut without = sampler(false);
    let req = SampleRequest {
        sockets: true,
        ..Default::default()
    };
    with.sample(req)?;
    without.sample(req)?;
    if !with.sources().has(SourceKind::SockDiag) {
        bail!(
            "no sock_diag here: {:?}",
            with.sources().why_missing(SourceKind::SockDiag)
        );
    }
    let sources = with.sources();
    let detail = &sources
        .sources
        .iter()
        .find(|s| s.name == SourceKind::SockDiag)
        .context("sock_diag source")?
        .detail;
    if !detail.contains(placer_linux::bpf::TCP_MOVES_PROG_NAME) {
        bail!("the socket marks are not available here: {detail}");
    }
    let stats = placer_linux::bpf::RunTimeStats::enable().ok();
    let mut buf = [0u8; 1];
    let mut exchange = || -> Result<()> {
        for (c, s) in &mut moving {
            c.write_all(b"x")?;
            s.read_exact(&mut buf)?;
            s.write_all(b"y")?;
            c.read_exact(&mut buf)?;
        }
        std::thread::sleep(Duration::from_millis(100));
        Ok(())
    };
    let stage_us = |s: &mut Sampler| -> Result<(f64, f64)> {
        s.sample(req)?;
        let st = s.last_stages;
        Ok((st.socket_read_ns as f64 / 1e3, st.sockets_ns as f64 / 1e3))
    };
    let (mut m_us, mut d_us, mut ratios, mut looked) = (vec![], vec![], vec![], vec![]);
    let (mut m_stage, mut d_stage) = (vec![], vec![]);
    let mut dumped = 0;
    let (mut m_scans, mut d_scans) = (vec![], vec![]);
    let mut prog0 = None;
    for round in 0..args.runs + 3 {
        if round == 3 {
            prog0 = stats.as_ref().and_then(|_| prog_totals());
        }
        exchange()?;
        let (m, d) = if round % 2 == 0 {
            let m = stage_us(&mut with)?;
            (m, stage_us(&mut without)?)
        } else {
            let d = stage_us(&mut without)?;
            (stage_us(&mut with)?, d)
        };
        if round < 3 {
            continue;
        }
        let st = with.last_stats;
        m_scans.push(st.fd_dirs_scanned);
        d_scans.push(without.last_stats.fd_dirs_scanned);
        looked.push(st.sockets_looked_up as f64);
        dumped += usize::from(st.sockets_looked_up == 0 && !st.sockets_reused);
        m_us.push(m.0);
        d_us.push(d.0);
        m_stage.push(m.1);
        d_stage.push(d.1);
        ratios.push(d.0 / m.0.max(1e-3));
    }
    let prog = prog0.zip(stats.as_ref().and_then(|_| prog_totals()));
    let (prog_runs, prog_ns_per_run) = match prog {
        Some(((t0, r0), (t1, r1))) if r1 > r0 && t1 >= t0 => {
            (Some(r1 - r0), Some((t1 - t0) as f64 / (r1 - r0) as f64))
        }
        _ => (None, None),
    };
    let med = |v: &[f64]| median(v).unwrap_or(f64::NAN);
    let r = Report {
        conns: args.conns,
        moving: args.moving,
        runs: args.runs,
        marks_median_us: med(&m_us),
        dump_median_us: med(&d_us),
        ratio_median: med(&ratios),
        marks_stage_median_us: med(&m_stage),
        dump_stage_median_us: med(&d_stage),
        looked_up_median: med(&looked),
        marks_dumped_rounds: dumped,
        marks_fd_scans: m_scans,
        dump_fd_scans: d_scans,
        marks_runs_us: m_us,
        dump_runs_us: d_us,
        prog_runs,
        prog_ns_per_run,
    };
    if args.json {
        outln!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    outln!(
        "sockets read, {} idle + {} moving connections, {} rounds: with marks {:.1} us (read again: {:.0} sockets; dumped in {} rounds), dump {:.1} us; dump / marks {:.2}x (median of the rounds' ratios); whole socket stage (with the mapping) {:.1} us / {:.1} us",
        r.conns,
        r.moving,
        r.runs,
        r.marks_median_us,
        r.looked_up_median,
        r.marks_dumped_rounds,
        r.dump_median_us,
        r.ratio_median,
        r.marks_stage_median_us,
        r.dump_stage_median_us
    );
    if let (Some(n), Some(ns)) = (r.prog_runs, r.prog_ns_per_run) {
        outln!(
            "marking program: {n} runs, {ns:.0} ns per run (in the kernel, per segment received)"
        );
    }
    Ok(())
}
