//! `placer bench qos` (seed 000): deadline misses of a periodic task that shares its CPU
//! with a TCP stream's sender, receiver and receive processing, without and with placer's
//! bandwidth limiter on the stream.
//!
//! Setup (needs root): two network namespaces joined by a veth pair (names carry the pid);
//! a sender in one streams to a receiver in the other, both pinned to `--stream-cpu`. The
//! receiving veth's RPS steers receive processing (NET_RX softirq) to `--cpu`, as a NIC
//! interrupt would (on the XU4 the GbE IRQ lands on CPU 0); with `--stream-cpu` equal to
//! `--cpu` everything shares one CPU instead. The periodic task, SCHED_FIFO by default (a
//! real-time app: only interrupts and softirq preempt it, not the other agents' builds on a
//! shared machine; `--cfs` for SCHED_OTHER), runs on `--cpu`, releases a job every
//! `--period-us`, and each job burns `--work-us` of its own CPU time
//! (CLOCK_THREAD_CPUTIME_ID, so time stolen by softirq lengthens it in wall time); a job
//! misses when it ends later than release + deadline (= period). Each phase runs `--runs`
//! times; medians are reported.
//!
//! `--hold --netns NS --dev DEV` only installs a limit on an existing device, prints
//! `ready`, and on SIGTERM/SIGINT removes it and exits: the test that a signal leaves no
//! qdiscs behind uses it.

use anyhow::{bail, Context, Result};
use placer_core::plan::{Direction, FlowMatch};
use placer_linux::knobs::tc::{LimitSpec, Limiter, TcCtx};
use placer_linux::testnet;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The limiter's rate, bytes per second.
    #[arg(long, default_value_t = 2_000_000)]
    pub rate_bytes_per_s: u64,
    /// Measured time per run (after a 1 s warm-up).
    #[arg(long, alias = "seconds", default_value = "5s", value_parser = crate::common::duration_arg)]
    pub duration: Duration,
    /// Runs per phase; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// The CPU shared by the periodic task and the stream.
    #[arg(long, default_value_t = 0)]
    pub cpu: u32,
    /// Period of the periodic task (10ms, 0.01, ...).
    #[arg(long, default_value = "10ms", value_parser = crate::common::duration_arg)]
    pub period: Duration,
    /// CPU time the periodic task burns each period.
    #[arg(long, default_value = "5ms", value_parser = crate::common::duration_arg)]
    pub work: Duration,
    /// Old spelling of --period, in microseconds.
    #[arg(long, hide = true)]
    pub period_us: Option<u64>,
    /// Old spelling of --work, in microseconds.
    #[arg(long, hide = true)]
    pub work_us: Option<u64>,
    /// The CPU of the sender and receiver threads; default: another CPU than --cpu.
    #[arg(long)]
    pub stream_cpu: Option<u32>,
    /// Run the periodic task SCHED_OTHER instead of SCHED_FIFO (priority 10).
    #[arg(long)]
    pub cfs: bool,
    /// Nice value of the periodic task under --cfs (a low value shields it from the other
    /// processes of a shared machine, not from the stream's softirq).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub nice: i32,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Only install a limit on --dev (in --netns) and hold it until SIGTERM/SIGINT.
    #[arg(long, requires = "dev")]
    pub hold: bool,
    #[arg(long)]
    pub netns: Option<String>,
    #[arg(long)]
    pub dev: Option<String>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    // Without them, SIGTERM would leave the limit installed; failing is rare enough (EINVAL
    // only) to go on with a note.
    if let Err(e) = placer_linux::sys::set_signal_handler(&[libc::SIGTERM, libc::SIGINT], on_signal)
    {
        eprintln!("placer bench qos: signal handlers not installed: {e}");
    }
}

/// Any IPv4 flow (unspecified addresses and ports match everything).
fn any_flow() -> FlowMatch {
    FlowMatch {
        local: "0.0.0.0:0".parse().expect("literal"),
        remote: "0.0.0.0:0".parse().expect("literal"),
    }
}

fn hold(args: &Args) -> Result<()> {
    let dev = args.dev.as_deref().context("--hold needs --dev")?;
    let ctx = match &args.netns {
        Some(ns) => TcCtx::netns(ns),
        None => TcCtx::current(),
    };
    install_signal_handlers();
    let mut lim = Limiter::new();
    let flows = [any_flow()];
    let spec = LimitSpec {
        app: "bench-qos",
        rate_bytes_per_s: args.rate_bytes_per_s,
        flows: &flows,
        direction: Direction::Both,
    };
    if let Err(e) = lim.limit(&ctx, dev, &spec, &mut |_| Ok(())) {
        let _ = lim.restore_all();
        return Err(e).context("installing the limit");
    }
    outln!("ready: {dev} limited to {} B/s", args.rate_bytes_per_s);
    // Bounded: at most an hour, normally until a signal.
    let start = Instant::now();
    while !STOP.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(3600) {
        std::thread::sleep(Duration::from_millis(20));
    }
    lim.restore_all().context("removing the limit")?;
    outln!("restored");
    Ok(())
}

use placer_core::stats::median;
use placer_linux::sys::thread_cpu_ns;

#[derive(Debug, Clone, Serialize)]
pub struct PeriodicResult {
    pub jobs: u64,
    pub misses: u64,
    pub median_response_us: f64,
    pub max_response_us: f64,
}

/// Runs the periodic task on `cpu` for `warmup + secs`; counts jobs released after warm-up.
fn periodic(
    cpu: u32,
    period: Duration,
    work: Duration,
    warmup: Duration,
    secs: Duration,
    fifo: bool,
    nice: i32,
) -> std::thread::JoinHandle<PeriodicResult> {
    std::thread::spawn(move || {
        // The measurement needs the pin and the priority; say so when they fail.
        if let Err(e) = placer_linux::sys::pin_self(cpu) {
            eprintln!("placer bench qos: pinning the periodic task to CPU {cpu}: {e}");
        }
        let prio = if fifo {
            placer_linux::sys::set_fifo(10)
        } else if nice != 0 {
            placer_linux::sys::set_thread_nice(nice)
        } else {
            Ok(())
        };
        if let Err(e) = prio {
            eprintln!("placer bench qos: setting the periodic task's priority: {e}");
        }
        let start = Instant::now();
        let mut resp = Vec::new();
        let mut misses = 0;
        let mut k = 0u32;
        loop {
            let release = start + period * k;
            k += 1;
            if release.duration_since(start) >= warmup + secs {
                break;
            }
            let now = Instant::now();
            if release > now {
                std::thread::sleep(release - now);
            }
            let c0 = thread_cpu_ns();
            let mut x = 0u64;
            while thread_cpu_ns() - c0 < work.as_nanos() as u64 {
                for _ in 0..1000 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            }
            let done = Instant::now();
            if release.duration_since(start) < warmup {
                continue;
            }
            let r = done.duration_since(release);
            if r > period {
                misses += 1;
            }
            resp.push(r.as_secs_f64() * 1e6);
        }
        resp.sort_by(f64::total_cmp);
        PeriodicResult {
            jobs: resp.len() as u64,
            misses,
            median_response_us: placer_core::stats::median(&resp).unwrap_or(0.0),
            max_response_us: resp.last().copied().unwrap_or(0.0),
        }
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub limited: bool,
    pub stream_bytes_per_s: f64,
    pub periodic: PeriodicResult,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub cpu: u32,
    pub period_us: u64,
    pub work_us: u64,
    pub fifo: bool,
    pub stream_cpu: u32,
    pub rate_limit_bytes_per_s: u64,
    pub runs: Vec<Run>,
    pub median_misses_unlimited: f64,
    pub median_misses_limited: f64,
    pub median_jobs: f64,
    pub median_stream_unlimited_bytes_per_s: f64,
    pub median_stream_limited_bytes_per_s: f64,
}

pub fn run(args: Args) -> Result<()> {
    if args.hold {
        return hold(&args);
    }
    if let Some(why) = testnet::unavailable_reason() {
        bail!("`placer bench qos` {why}");
    }
    let period = args.period_us.map_or(args.period, Duration::from_micros);
    let work = args.work_us.map_or(args.work, Duration::from_micros);
    if work >= period || args.runs == 0 || args.duration.is_zero() {
        bail!("need --work < --period, --runs > 0, --duration > 0");
    }
    install_signal_handlers();
    let warmup = Duration::from_secs(1);
    let secs = args.duration;
    let mut runs = Vec::new();
    let mut port = 5300u16;
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let stream_cpu = args.stream_cpu.unwrap_or((args.cpu + 1) % ncpus.max(1));
    'outer: for i in 0..args.runs {
        for limited in [false, true] {
            if STOP.load(Ordering::SeqCst) {
                break 'outer;
            }
            let mut pair = testnet::VethPair::new().context("creating the veth pair")?;
            pair.pin_cpu = Some(stream_cpu);
            if stream_cpu != args.cpu {
                testnet::set_rps(&pair.ns_b, &pair.dev_b, args.cpu)
                    .context("steering receive processing with RPS")?;
            }
            let task = periodic(args.cpu, period, work, warmup, secs, !args.cfs, args.nice);
            let mut lim = Limiter::new();
            let ctx = TcCtx::netns(&pair.ns_a);
            let mut lim_err = None;
            port += 1;
            let rate = testnet::stream(
                &pair,
                port,
                warmup.as_secs_f64(),
                secs.as_secs_f64(),
                |local, remote| {
                    if limited {
                        let flows = [FlowMatch { local, remote }];
                        let spec = LimitSpec {
                            app: "stream",
                            rate_bytes_per_s: args.rate_bytes_per_s,
                            flows: &flows,
                            direction: Direction::Egress,
                        };
                        if let Err(e) = lim.limit(&ctx, &pair.dev_a, &spec, &mut |_| Ok(())) {
                            lim_err = Some(e);
                        }
                    }
                },
            );
            let p = task
                .join()
                .map_err(|_| anyhow::anyhow!("periodic task panicked"))?;
            lim.restore_all().context("removing the limit")?;
            if let Some(e) = lim_err {
                return Err(e).context("installing the limit");
            }
            let rate = rate.context("streaming")?;
            eprintln!(
                "run {}/{} {}: stream {:.1} MB/s, {} of {} jobs missed their deadline",
                i + 1,
                args.runs,
                if limited { "limited" } else { "unlimited" },
                rate / 1e6,
                p.misses,
                p.jobs
            );
            runs.push(Run {
                limited,
                stream_bytes_per_s: rate,
                periodic: p,
            });
        }
    }
    let pick = |lim: bool, f: &dyn Fn(&Run) -> f64| {
        median(
            &runs
                .iter()
                .filter(|r| r.limited == lim)
                .map(f)
                .collect::<Vec<_>>(),
        )
        .unwrap_or(0.0)
    };
    let report = Report {
        cpu: args.cpu,
        period_us: period.as_micros() as u64,
        work_us: work.as_micros() as u64,
        fifo: !args.cfs,
        stream_cpu,
        rate_limit_bytes_per_s: args.rate_bytes_per_s,
        median_misses_unlimited: pick(false, &|r| r.periodic.misses as f64),
        median_misses_limited: pick(true, &|r| r.periodic.misses as f64),
        median_jobs: pick(false, &|r| r.periodic.jobs as f64),
        median_stream_unlimited_bytes_per_s: pick(false, &|r| r.stream_bytes_per_s),
        median_stream_limited_bytes_per_s: pick(true, &|r| r.stream_bytes_per_s),
        runs,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!(
            "periodic task: {} us work every {} us on CPU {} ({}); stream threads on CPU {}, \
             receive processing on CPU {}; {} runs x {} s",
            report.work_us,
            report.period_us,
            report.cpu,
            if report.fifo {
                "SCHED_FIFO"
            } else {
                "SCHED_OTHER"
            },
            report.stream_cpu,
            report.cpu,
            args.runs,
            args.duration.as_secs_f64()
        );
        outln!(
            "unlimited stream: {:>8.1} MB/s, deadline misses (median) {:>5} of {}",
            report.median_stream_unlimited_bytes_per_s / 1e6,
            report.median_misses_unlimited,
            report.median_jobs
        );
        outln!(
            "limited to {:.1} MB/s: {:>5.1} MB/s, deadline misses (median) {:>5} of {}",
            report.rate_limit_bytes_per_s as f64 / 1e6,
            report.median_stream_limited_bytes_per_s / 1e6,
            report.median_misses_limited,
            report.median_jobs
        );
    }
    Ok(())
}
