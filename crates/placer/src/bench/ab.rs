//! `placer ab`: does placer help on this machine? Alternates daemon-off and daemon-on phases
//! over a workload, in one run (off, on, off, on, ...: a paired design, so slow drifts of a
//! shared machine hit both sides), and reports each phase, the median on/off ratio of each
//! metric with a 95% bootstrap interval over the rounds' ratios (resampling rounds, 2,000
//! times, fixed seed), and a verdict: helps, hurts, or no detectable difference (the
//! interval holds 1).
//!
//! Workloads: `streams:N` (N loopback TCP streams between child processes of this binary;
//! `--rps-cpu C` steers loopback receive processing to CPU C with RPS, as a NIC's interrupt
//! would, and puts the old mask back afterwards), and `cmd:'...'` (a shell command per phase:
//! its last output line is the metric, higher is better, else its runtime, lower is better).
//!
//! Nothing is left behind: the daemon runs as a child that receives SIGTERM (it restores
//! every knob) at the end of each on-phase, when this command is interrupted, and (parent
//! death signal) when this command dies; the RPS mask is restored by a guard.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{BufRead, Read, Write};

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// `streams:N` (loopback TCP streams) or `cmd:COMMAND` (run per phase).
    #[arg(long, default_value = "streams:1")]
    pub workload: String,
    /// Steer loopback receive processing to this CPU with RPS during the run.
    #[arg(long)]
    pub rps_cpu: Option<u32>,
    /// Pairs of phases (off, on).
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// Measured length of a streams phase.
    #[arg(long, default_value = "10s", value_parser = crate::common::duration_arg)]
    pub phase: Duration,
    /// Settling time at the start of each phase, not measured (the daemon's first pins).
    #[arg(long, default_value = "2s", value_parser = crate::common::duration_arg)]
    pub warmup: Duration,
    /// The daemon's config (default: the daemon's own default).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Observe the live machine instead of a synthetic workload: processes whose name
    /// starts with this (their bytes/s and CPU per GB, from /proc and sock_diag).
    #[arg(long, value_name = "COMM", conflicts_with = "workload")]
    pub observe: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Draw the first metric per phase, on/off coloured (FILE.svg or FILE.png).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Internal: a stream endpoint (`rx:ADDR` or `tx:ADDR`).
    #[arg(long, hide = true)]
    pub worker: Option<String>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// One measured phase.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub round: u32,
    pub daemon: bool,
    pub seconds: f64,
    /// Metric name -> value.
    pub metrics: std::collections::BTreeMap<String, f64>,
}

/// One metric's comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub metric: String,
    pub higher_is_better: bool,
    pub median_on_off: f64,
    pub ci95: (f64, f64),
    pub verdict: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub workload: String,
    pub rps_cpu: Option<u32>,
    pub rounds: u32,
    pub interval_method: &'static str,
    pub phases: Vec<Phase>,
    pub ratios: Vec<Ratio>,
}

/// Median and 95% bootstrap interval of `ratios` (resampling them with replacement).
pub fn bootstrap(ratios: &[f64]) -> Option<(f64, (f64, f64))> {
    let med = placer_core::stats::median(ratios)?;
    // A small fixed-seed generator: the interval is reproducible for the same data.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut meds: Vec<f64> = (0..2000)
        .filter_map(|_| {
            let s: Vec<f64> = (0..ratios.len())
                .map(|_| ratios[(next() % ratios.len() as u64) as usize])
                .collect();
            placer_core::stats::median(&s)
        })
        .collect();
    meds.sort_by(f64::total_cmp);
    let at = |q: f64| meds[((meds.len() - 1) as f64 * q).round() as usize];
    Some((med, (at(0.025), at(0.975))))
}

/// helps / hurts / no detectable difference, from the interval of on/off.
pub fn verdict(ci: (f64, f64), higher_is_better: bool) -> &'static str {
    let (better, worse) = if higher_is_better {
        (ci.0 > 1.0, ci.1 < 1.0)
    } else {
        (ci.1 < 1.0, ci.0 > 1.0)
    };
    if better {
        "helps"
    } else if worse {
        "hurts"
    } else {
        "no detectable difference"
    }
}

/// Restores an RPS mask on drop.
struct RpsGuard {
    path: PathBuf,
    previous: String,
}

impl RpsGuard {
    fn set(cpu: u32) -> Result<RpsGuard> {
        let path = PathBuf::from("/sys/class/net/lo/queues/rx-0/rps_cpus");
        let previous = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {} (RPS needs root)", path.display()))?;
        std::fs::write(&path, placer_core::CpuSet::single(cpu).to_mask_string())
            .with_context(|| format!("writing {} (needs root)", path.display()))?;
        Ok(RpsGuard {
            path,
            previous: previous.trim().to_string(),
        })
    }
}

impl Drop for RpsGuard {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.path, &self.previous) {
            eprintln!(
                "placer ab: restoring {} to {}: {e}",
                self.path.display(),
                self.previous
            );
        }
    }
}

/// A child process stopped (SIGTERM, then SIGKILL after 10 s) and reaped on drop.
pub(crate) struct Kid(pub(crate) Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = placer_linux::sys::kill(self.0.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts this binary with `args`; stdout piped, stderr to `log` (or inherited).
pub(crate) fn spawn_self(args: &[&str], log: Option<&std::path::Path>) -> Result<Child> {
    // This binary by its path (so the helpers are named placer); by /proc/self/exe when
    // the file was replaced meanwhile (a rebuild, a package upgrade).
    let exe = std::env::current_exe()
        .ok()
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("/proc/self/exe"));
    let mut cmd = Command::new(exe);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped());
    if let Some(l) = log {
        let f = std::fs::File::create(l).with_context(|| format!("creating {}", l.display()))?;
        cmd.stderr(f);
    }
    placer_linux::sys::stop_with_parent(&mut cmd)?;
    Ok(cmd.spawn()?)
}

/// The stream endpoints: a receiver prints its byte count every 100 ms.
fn worker(spec: &str) -> Result<()> {
    let (role, addr) = spec.split_once(':').context("worker spec")?;
    match role {
        "rx" => {
            let l = std::net::TcpListener::bind(addr)?;
            crate::common::write_stdout(&format!("{}\n", l.local_addr()?));
            let (mut c, _) = l.accept()?;
            let mut buf = vec![0u8; 1 << 16];
            let mut total: u64 = 0;
            let mut last = Instant::now();
            loop {
                let n = c.read(&mut buf)?;
                if n == 0 {
                    return Ok(());
                }
                total += n as u64;
                if last.elapsed() >= Duration::from_millis(100) {
                    crate::common::write_stdout(&format!("{total}\n"));
                    last = Instant::now();
                }
            }
        }
        "tx" => {
            let mut c = std::net::TcpStream::connect(addr)?;
            let buf = vec![b'x'; 1 << 16];
            loop {
                if c.write_all(&buf).is_err() {
                    return Ok(());
                }
            }
        }
        r => bail!("unknown worker role {r}"),
    }
}

/// The latest number a helper printed (one per line: cumulative bytes), kept up to date by
/// a thread reading `lines` until the helper exits.
pub(crate) fn latest_count<R: BufRead + Send + 'static>(
    lines: std::io::Lines<R>,
) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c2 = count.clone();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            if let Ok(v) = l.trim().parse::<u64>() {
                c2.store(v, Ordering::Relaxed);
            }
        }
    });
    count
}

/// Running streams: receivers report cumulative bytes on their stdout.
struct Streams {
    kids: Vec<Kid>,
    counts: Vec<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl Streams {
    fn start(n: usize) -> Result<Streams> {
        let mut kids = Vec::new();
        let mut counts = Vec::new();
        for _ in 0..n {
            let mut rx = Kid(spawn_self(&["ab", "--worker", "rx:127.0.0.1:0"], None)?);
            let out = rx.0.stdout.take().context("the receiver's stdout")?;
            let mut lines = std::io::BufReader::new(out).lines();
            let addr = lines.next().context("the receiver's address")??;
            let count = latest_count(lines);
            kids.push(rx);
            kids.push(Kid(spawn_self(
                &["ab", "--worker", &format!("tx:{addr}")],
                None,
            )?));
            counts.push(count);
        }
        Ok(Streams { kids, counts })
    }

    fn bytes(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// CPU seconds of the workers so far.
    fn cpu_s(&self) -> f64 {
        let hz = placer_linux::sys::clock_ticks_per_s() as f64;
        self.kids
            .iter()
            .filter_map(|k| std::fs::read_to_string(format!("/proc/{}/stat", k.0.id())).ok())
            .filter_map(|t| placer_linux::procfs::parse_pid_stat(&t))
            .map(|s| (s.utime_ticks + s.stime_ticks) as f64 / hz)
            .sum()
    }
}

/// Machine-wide softirq seconds so far.
fn softirq_s() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: u64 = placer_linux::procfs::parse_proc_stat(&text)
        .iter()
        .map(|c| c.softirq)
        .sum();
    ticks as f64 / placer_linux::sys::clock_ticks_per_s() as f64
}

fn sleep_or_stop(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end && !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20).min(end - Instant::now()));
    }
}

fn start_daemon(config: &Option<PathBuf>, state: &std::path::Path) -> Result<Kid> {
    let st = state.display().to_string();
    let mut args = vec!["daemon", "--state-dir", &st];
    let cfg;
    if let Some(c) = config {
        cfg = c.display().to_string();
        args.extend(["--config", &cfg]);
    } else {
        args.push("--no-config");
    }
    let log = state.with_extension("log");
    let mut kid = Kid(spawn_self(&args, Some(&log))?);
    // Give it its first sample; if it died (bad config, no root), say so.
    std::thread::sleep(Duration::from_millis(300));
    if let Ok(Some(st)) = kid.0.try_wait() {
        let err = std::fs::read_to_string(&log).unwrap_or_default();
        bail!("the daemon exited at start ({st}): {err}");
    }
    Ok(kid)
}

fn run_phase_streams(
    n: usize,
    args: &Args,
    state: &std::path::Path,
    round: u32,
    daemon: bool,
) -> Result<Phase> {
    let streams = Streams::start(n)?;
    let _daemon = if daemon {
        Some(start_daemon(&args.config, state)?)
    } else {
        None
    };
    sleep_or_stop(args.warmup);
    let (b0, c0, s0, t0) = (
        streams.bytes(),
        streams.cpu_s(),
        softirq_s(),
        Instant::now(),
    );
    sleep_or_stop(args.phase);
    let (b1, c1, s1) = (streams.bytes(), streams.cpu_s(), softirq_s());
    let secs = t0.elapsed().as_secs_f64();
    let gb = (b1.saturating_sub(b0)) as f64 / 1e9;
    let mut metrics = std::collections::BTreeMap::new();
    metrics.insert("gbit_per_s".to_string(), gb * 8.0 / secs.max(1e-9));
    // The workers' own CPU plus all softirq time (loopback receive processing).
    metrics.insert(
        "cpu_s_per_gb".to_string(),
        ((c1 - c0) + (s1 - s0)) / gb.max(1e-12),
    );
    Ok(Phase {
        round,
        daemon,
        seconds: secs,
        metrics,
    })
}

fn run_phase_observe(
    comm: &str,
    args: &Args,
    state: &std::path::Path,
    round: u32,
    daemon: bool,
) -> Result<Phase> {
    let _daemon = if daemon {
        Some(start_daemon(&args.config, state)?)
    } else {
        None
    };
    sleep_or_stop(args.warmup);
    let mut ob = crate::observer::Observer::new(std::path::Path::new("/"), false, false);
    ob.step()?;
    let t0 = Instant::now();
    sleep_or_stop(args.phase);
    let obs = ob.step()?.context("an observation over the phase")?;
    let mine: Vec<_> = obs
        .procs
        .iter()
        .filter(|p| p.comm.starts_with(comm))
        .collect();
    if mine.is_empty() {
        bail!("no process named {comm}* to observe");
    }
    let bytes: f64 = mine.iter().map(|p| p.net_bytes_per_s()).sum();
    let cpu: f64 = mine.iter().map(|p| p.cpu_share).sum();
    let mut metrics = std::collections::BTreeMap::new();
    metrics.insert("mbyte_per_s".to_string(), bytes / 1e6);
    if bytes > 0.0 {
        metrics.insert("cpu_s_per_gb".to_string(), cpu / (bytes / 1e9));
    }
    Ok(Phase {
        round,
        daemon,
        seconds: t0.elapsed().as_secs_f64(),
        metrics,
    })
}

fn run_phase_cmd(
    cmd: &str,
    args: &Args,
    state: &std::path::Path,
    round: u32,
    daemon: bool,
) -> Result<Phase> {
    let _daemon = if daemon {
        Some(start_daemon(&args.config, state)?)
    } else {
        None
    };
    sleep_or_stop(args.warmup);
    let t0 = Instant::now();
    let out = Command::new("sh")
        .args(["-c", cmd])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    let secs = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", out.status);
    }
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .and_then(|l| l.trim().parse::<f64>().ok());
    let mut metrics = std::collections::BTreeMap::new();
    match last {
        Some(v) => metrics.insert("metric".to_string(), v),
        None => metrics.insert("runtime_s".to_string(), secs),
    };
    Ok(Phase {
        round,
        daemon,
        seconds: secs,
        metrics,
    })
}

/// Per metric: on/off ratios of each round, their median, interval and verdict.
pub fn compare(phases: &[Phase]) -> Vec<Ratio> {
    let names: std::collections::BTreeSet<&String> =
        phases.iter().flat_map(|p| p.metrics.keys()).collect();
    let mut out = Vec::new();
    for name in names {
        let higher = !matches!(name.as_str(), "cpu_s_per_gb" | "runtime_s");
        let rounds: std::collections::BTreeSet<u32> = phases.iter().map(|p| p.round).collect();
        let ratios: Vec<f64> = rounds
            .iter()
            .filter_map(|r| {
                let get = |on: bool| {
                    phases
                        .iter()
                        .find(|p| p.round == *r && p.daemon == on)
                        .and_then(|p| p.metrics.get(name))
                        .copied()
                };
                let (on, off) = (get(true)?, get(false)?);
                (off > 0.0).then(|| on / off)
            })
            .collect();
        if let Some((med, ci)) = bootstrap(&ratios) {
            out.push(Ratio {
                metric: name.clone(),
                higher_is_better: higher,
                median_on_off: med,
                ci95: ci,
                verdict: verdict(ci, higher),
            });
        }
    }
    out
}

pub fn run(args: Args) -> Result<()> {
    if let Some(w) = &args.worker {
        return worker(w);
    }
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    placer_linux::sys::set_signal_handler(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP], on_signal)
        .context("installing signal handlers")?;
    let work = tempdir()?;
    let state = work.0.join("state");
    let _rps = match args.rps_cpu {
        Some(c) => Some(RpsGuard::set(c)?),
        None => None,
    };
    let mut phases = Vec::new();
    for round in 1..=args.rounds {
        for daemon in [false, true] {
            if STOP.load(Ordering::SeqCst) {
                bail!("interrupted: the daemon stopped and restored; RPS put back");
            }
            let phase = if let Some(comm) = &args.observe {
                run_phase_observe(comm, &args, &state, round, daemon)?
            } else if let Some(n) = args.workload.strip_prefix("streams:") {
                let n: usize = n.parse().context("streams:N needs a number")?;
                if !(1..=64).contains(&n) {
                    bail!("streams:N: N from 1 to 64");
                }
                run_phase_streams(n, &args, &state, round, daemon)?
            } else if let Some(cmd) = args.workload.strip_prefix("cmd:") {
                run_phase_cmd(cmd, &args, &state, round, daemon)?
            } else {
                bail!("--workload: streams:N or cmd:COMMAND");
            };
            if !args.json {
                eprintln!(
                    "round {round} daemon {}: {}",
                    if daemon { "on " } else { "off" },
                    phase
                        .metrics
                        .iter()
                        .map(|(k, v)| format!("{k} {v:.4}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            phases.push(phase);
        }
    }
    let report = Report {
        workload: args.workload.clone(),
        rps_cpu: args.rps_cpu,
        rounds: args.rounds,
        interval_method: "bootstrap over rounds' on/off ratios, 2000 resamples, 95%",
        ratios: compare(&phases),
        phases,
    };
    if let (Some(path), Some(first)) = (&args.plot, report.ratios.first()) {
        let values: Vec<(bool, f64)> = report
            .phases
            .iter()
            .map(|p| {
                (
                    p.daemon,
                    p.metrics.get(&first.metric).copied().unwrap_or(0.0),
                )
            })
            .collect();
        placer_sim::plot::phases(
            path,
            &format!("placer ab {}", report.workload),
            &first.metric,
            &values,
        )
        .with_context(|| format!("drawing {}", path.display()))?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for r in &report.ratios {
            outln!(
                "{}: on/off median {:.3} (95% interval {:.3}..{:.3}, {}): {}",
                r.metric,
                r.median_on_off,
                r.ci95.0,
                r.ci95.1,
                if r.higher_is_better {
                    "higher is better"
                } else {
                    "lower is better"
                },
                r.verdict
            );
        }
    }
    Ok(())
}

/// A private temporary directory, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> Result<TempDir> {
    let p = std::env::temp_dir().join(format!("placer-ab-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&p)
        .with_context(|| format!("creating {}", p.display()))?;
    Ok(TempDir(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_interval() {
        assert_eq!(verdict((1.05, 1.2), true), "helps");
        assert_eq!(verdict((0.8, 0.95), true), "hurts");
        assert_eq!(verdict((0.9, 1.1), true), "no detectable difference");
        assert_eq!(verdict((0.7, 0.8), false), "helps");
    }

    #[test]
    fn bootstrap_brackets_the_median() {
        let (m, (lo, hi)) = bootstrap(&[1.1, 1.2, 1.15, 1.12, 1.18]).unwrap();
        assert!(lo <= m && m <= hi && lo >= 1.1 && hi <= 1.2);
        assert!(bootstrap(&[]).is_none());
    }

    #[test]
    fn compare_pairs_rounds() {
        let ph = |round, daemon, v| Phase {
            round,
            daemon,
            seconds: 1.0,
            metrics: [("gbit_per_s".to_string(), v)].into_iter().collect(),
        };
        let r = compare(&[
            ph(1, false, 10.0),
            ph(1, true, 12.0),
            ph(2, false, 10.0),
            ph(2, true, 12.5),
        ]);
        assert_eq!(r.len(), 1);
        assert!(
            r[0].median_on_off > 1.19 && r[0].verdict == "helps",
            "{r:?}"
        );
    }
}
