//! `placer bench contention`: the harm a latency-bound app suffers from streaming co-runners
//! on its LLC domain, measured, so that the simulator's contention model is fitted to data
//! rather than guessed (seed 003; docs/contention.md, "Harm model").
//!
//! A pointer chase (a random cyclic permutation over `--working-set` bytes, default half the
//! LLC: every load depends on the previous one, so its time per access is the memory
//! hierarchy's latency) runs pinned to the first CPU of LLC domain 0, alone and then beside
//! N streaming co-runners (each sweeps its own `--stream-bytes` buffer, read and write)
//! pinned round-robin to the domain's other CPUs (one per other physical core first, the
//! chase's own SMT sibling last: [`super::contention_pairs::fill_order`]), for each N of
//! `--points`; then, where the machine has a second LLC domain, with the co-runners there instead (the same harm should
//! mostly vanish). Each point reports the chase's time per access, its slowdown against the
//! alone point, and the co-runners' total bandwidth over the same window. The additive,
//! saturating and power shapes are fitted to the local sweep ([`placer_sim::harm_fit`]).
//! `--json` gives the points and fits; `--plot FILE` draws slowdown against co-runners.
//! `--fit` prints the fits of the data sets shipped in calibration/contention.toml and exits.
//! With `--app NAME=COMMAND` (repeated) it measures a pairwise slowdown matrix instead
//! ([`super::contention_pairs`]); `--fit-pairs FILE` fits a saved one.

use super::ab::{latest_count, spawn_self, Kid};
use super::contention_pairs;
use anyhow::{bail, Context, Result};
use placer_core::CpuSet;
use placer_sim::harm_fit::{self, HarmFit, HarmPoint};
use serde::Serialize;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Co-runner counts to measure (comma-separated); default 0,1,2,4,... up to twice the
    /// domain's other CPUs.
    #[arg(long, value_delimiter = ',')]
    pub points: Vec<u32>,
    /// Measured time per point (after 300 ms of co-runner warm-up).
    #[arg(long, default_value = "2s", value_parser = crate::common::duration_arg)]
    pub duration: Duration,
    /// The chase's working set, bytes; default half the LLC (16 MiB when unknown).
    #[arg(long)]
    pub working_set: Option<u64>,
    /// Each co-runner's buffer, bytes.
    #[arg(long, default_value_t = 512 << 20)]
    pub stream_bytes: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Draw slowdown against co-runners (FILE.svg or FILE.png).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Print the fits of the shipped data sets (calibration/contention.toml) and exit.
    #[arg(long)]
    pub fit: bool,
    /// Pairwise mode (seed 003's Fig. 1): an app as NAME=COMMAND, repeated; each runs to
    /// completion alone and beside each app in turn, and the slowdown matrix is fitted to
    /// the simulator's pressure and sensitivity per app.
    #[arg(long = "app", value_name = "NAME=COMMAND", value_parser = super::contention_pairs::parse_app)]
    pub apps: Vec<(String, String)>,
    /// Runs per pairwise cell (and alone); the cell is their median.
    #[arg(long, default_value_t = 3)]
    pub pairs_rounds: u32,
    /// Longest a pairwise run may take.
    #[arg(long, default_value = "10m", value_parser = crate::common::duration_arg)]
    pub pairs_timeout: Duration,
    /// Fit a saved pairwise matrix (a `--app ... --json` report, or {names, slowdown}) and
    /// exit.
    #[arg(long, value_name = "FILE")]
    pub fit_pairs: Option<PathBuf>,
    /// Internal: `chase:BYTES:MILLIS` or `stream:BYTES`.
    #[arg(long, hide = true)]
    pub worker: Option<String>,
}

#[derive(Debug, Serialize, Clone)]
pub struct Point {
    /// `local` (co-runners on the victim's LLC domain) or `remote` (another domain).
    pub sweep: String,
    pub co_runners: u32,
    /// CPUs the co-runners ran on (fewer than co-runners: time-shared).
    pub co_runner_cpus: Vec<u32>,
    pub ns_per_access: f64,
    pub slowdown: f64,
    pub co_runner_gbps: f64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub victim_cpu: u32,
    pub working_set_bytes: u64,
    pub stream_bytes: u64,
    pub duration_s: f64,
    pub points: Vec<Point>,
    /// Fits of the local sweep: against co-runner count, and against bandwidth.
    pub fit_by_count: HarmFit,
    pub fit_by_bandwidth: HarmFit,
    /// The sufficient-contention threshold measured here, bytes/s of co-runner traffic
    /// ([`measured_threshold_bytes_per_s`]): what `[contention]
    /// min_domain_bandwidth_bytes_per_s` takes on this machine; none when no point slowed
    /// the chase that much.
    pub sufficient_contention_bytes_per_s: Option<f64>,
    /// What the machine could not give (no second LLC domain, oversubscribed co-runners).
    pub notes: Vec<String>,
}

/// A pseudo-random cyclic permutation (Sattolo's algorithm): one cycle through every slot.
fn cycle(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = placer_core::rng::Rng::new(seed);
    let mut next: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        next.swap(i, rng.below(i));
    }
    next
}

/// Chases pointers for `millis`; prints ns per access.
fn chase(bytes: u64, millis: u64) -> Result<()> {
    let n = (bytes / 8).max(2) as usize;
    let next = cycle(n, 0x9e37_79b9_7f4a_7c15);
    let deadline = Instant::now() + Duration::from_millis(millis);
    let (mut i, mut steps) = (0usize, 0u64);
    let start = Instant::now();
    // Check the clock every 64k steps: the chase itself must dominate.
    while Instant::now() < deadline {
        for _ in 0..65_536 {
            i = next[i];
        }
        steps += 65_536;
    }
    let ns = start.elapsed().as_nanos() as f64 / steps as f64;
    // `i` printed so the chase cannot be optimised away.
    crate::common::write_stdout(&format!("{ns} {i}\n"));
    Ok(())
}

/// Streams over its buffer until killed; prints cumulative bytes every 50 ms.
fn stream(bytes: u64) -> Result<()> {
    let mut buf = vec![1u64; (bytes / 8).max(1) as usize];
    let mut total: u64 = 0;
    let mut last = Instant::now();
    loop {
        for chunk in buf.chunks_mut(1 << 16) {
            for x in chunk.iter_mut() {
                *x = x.wrapping_add(1);
            }
            // Read and write of each byte.
            total += 2 * 8 * chunk.len() as u64;
            if last.elapsed() >= Duration::from_millis(50) {
                crate::common::write_stdout(&format!("{total}\n"));
                last = Instant::now();
            }
        }
    }
}

/// A running co-runner and its byte counter.
struct CoRunner {
    _kid: Kid,
    bytes: Arc<AtomicU64>,
}

fn start_co_runner(cpu: u32, bytes: u64) -> Result<CoRunner> {
    let mut child = spawn_self(
        &[
            "bench",
            "contention",
            "--worker",
            &format!("stream:{bytes}"),
        ],
        None,
    )?;
    placer_linux::sys::set_affinity(child.id(), &CpuSet::from_iter([cpu]))
        .with_context(|| format!("pinning a co-runner to CPU {cpu}"))?;
    let out = child.stdout.take().context("co-runner stdout")?;
    Ok(CoRunner {
        _kid: Kid(child),
        bytes: latest_count(BufReader::new(out).lines()),
    })
}

/// One point: `cpus` co-runners (round-robin over `cpus`), the chase on `victim`.
fn measure(args: &Args, ws: u64, victim: u32, cpus: &[u32], n: u32) -> Result<(f64, f64)> {
    let mut co = Vec::new();
    for k in 0..n as usize {
        co.push(start_co_runner(cpus[k % cpus.len()], args.stream_bytes)?);
    }
    if n > 0 {
        // Let them fault their buffers in and reach speed.
        std::thread::sleep(Duration::from_millis(300));
    }
    let millis = args.duration.as_millis().max(100) as u64;
    let before: u64 = co.iter().map(|c| c.bytes.load(Ordering::Relaxed)).sum();
    let t0 = Instant::now();
    let mut victim_child = spawn_self(
        &[
            "bench",
            "contention",
            "--worker",
            &format!("chase:{ws}:{millis}"),
        ],
        None,
    )?;
    placer_linux::sys::set_affinity(victim_child.id(), &CpuSet::from_iter([victim]))
        .with_context(|| format!("pinning the chase to CPU {victim}"))?;
    let mut out = String::new();
    victim_child
        .stdout
        .take()
        .context("chase stdout")?
        .read_to_string(&mut out)?;
    let status = victim_child.wait()?;
    let window = t0.elapsed().as_secs_f64();
    let after: u64 = co.iter().map(|c| c.bytes.load(Ordering::Relaxed)).sum();
    if !status.success() {
        bail!("the pointer chase failed ({status})");
    }
    let ns: f64 = out
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .context("the chase's result")?;
    Ok((ns, (after.saturating_sub(before)) as f64 / window / 1e9))
}

fn print_fit(name: &str, f: &HarmFit, unit: &str) {
    outln!("{name}:");
    for s in &f.fits {
        let params = match s.shape {
            harm_fit::Shape::Additive => format!("s = {:.4} x", s.a),
            harm_fit::Shape::Saturating => {
                format!("s = {:.4} (1 - exp(-x / {:.2}))", s.a, s.b)
            }
            harm_fit::Shape::Power => format!("s = {:.5} x^{:.3}", s.a, s.b),
        };
        let res: Vec<String> = s.residuals.iter().map(|r| format!("{:+.3}", r)).collect();
        outln!(
            "  {:<10} {params:<34} (x in {unit}) AICc {:7.2}  residuals {}",
            format!("{:?}", s.shape).to_lowercase(),
            s.aicc,
            res.join(" ")
        );
    }
}

pub fn run(args: Args) -> Result<()> {
    if let Some(w) = &args.worker {
        let parts: Vec<&str> = w.split(':').collect();
        return match parts.as_slice() {
            ["chase", b, ms] => chase(b.parse()?, ms.parse()?),
            ["stream", b] => stream(b.parse()?),
            _ => bail!("unknown worker {w}"),
        };
    }
    if args.fit {
        for d in harm_fit::calibration().datasets {
            outln!("{} ({})", d.name, d.source);
            print_fit(
                "  by co-runners",
                &harm_fit::fit(&d.by_count()),
                "co-runners",
            );
            print_fit("  by bandwidth", &harm_fit::fit(&d.by_bandwidth()), "GB/s");
        }
        return Ok(());
    }
    if let Some(path) = &args.fit_pairs {
        let m = contention_pairs::read_matrix(path)?;
        let fits = contention_pairs::fits(&m);
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&fits)?);
        } else {
            contention_pairs::print(&m, &fits);
        }
        return Ok(());
    }
    if !args.apps.is_empty() {
        let r = contention_pairs::measure(&args.apps, args.pairs_rounds, args.pairs_timeout)?;
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            outln!(
                "victims on CPU {}, partners on CPU {}",
                r.victim_cpu,
                r.partner_cpu
            );
            contention_pairs::print(&r.matrix, &r.fits);
            for n in &r.notes {
                outln!("note: {n}");
            }
        }
        return Ok(());
    }
    let (topo, local) = contention_pairs::llc_domain_zero()?;
    let doms = topo.llc_domains();
    let victim = local[0];
    let mut notes = Vec::new();
    let (mut others, other_cores) = contention_pairs::fill_order(&topo, &local, victim);
    if others.is_empty() {
        notes.push(format!(
            "LLC domain 0 has one CPU: the co-runners share CPU {victim} with the chase"
        ));
        others.push(victim);
    }
    let llc = topo
        .caches
        .iter()
        .filter(|c| c.cpus.contains(victim))
        .max_by_key(|c| c.level)
        .and_then(|c| c.size_bytes);
    let ws = args.working_set.unwrap_or(llc.map_or(16 << 20, |b| b / 2));
    let points: Vec<u32> = if args.points.is_empty() {
        let top = 2 * others.len() as u32;
        std::iter::once(0)
            .chain((0..8).map(|k| 1u32 << k).take_while(|&p| p <= top))
            .collect()
    } else {
        args.points.clone()
    };
    if let Some(&max) = points.iter().max() {
        if max as usize > other_cores && other_cores < others.len() {
            notes.push(format!(
                "beyond {other_cores} co-runners they share cores (SMT) with each other or \
                 with the chase"
            ));
        }
        if max as usize > others.len() {
            notes.push(format!(
                "{max} co-runners on {} CPU(s) of domain 0: beyond {} they time-share CPUs",
                others.len(),
                others.len()
            ));
        }
    }
    let mut sweeps = vec![("local", others.clone())];
    match doms.get(1).filter(|d| !d.is_empty()) {
        Some(d) => sweeps.push(("remote", d.iter().collect())),
        None => notes.push("one LLC domain: no remote sweep".into()),
    }
    let mut out = Vec::new();
    let mut alone = None;
    for (sweep, cpus) in &sweeps {
        for &n in &points {
            if *sweep == "remote" && n == 0 {
                continue;
            }
            let (ns, gbps) = measure(&args, ws, victim, cpus, n)?;
            let base = *alone.get_or_insert(ns);
            eprintln!("{sweep} {n:>3} co-runners: {ns:.1} ns/access, {gbps:.1} GB/s");
            out.push(Point {
                sweep: sweep.to_string(),
                co_runners: n,
                co_runner_cpus: (0..n as usize).map(|k| cpus[k % cpus.len()]).collect(),
                ns_per_access: ns,
                slowdown: ns / base - 1.0,
                co_runner_gbps: gbps,
            });
        }
    }
    let local_pts = |x: &dyn Fn(&Point) -> f64| -> Vec<HarmPoint> {
        out.iter()
            .filter(|p| p.sweep == "local")
            .map(|p| HarmPoint {
                x: x(p),
                slowdown: p.slowdown,
            })
            .collect()
    };
    let report = Report {
        victim_cpu: victim,
        working_set_bytes: ws,
        stream_bytes: args.stream_bytes,
        duration_s: args.duration.as_secs_f64(),
        fit_by_count: harm_fit::fit(&local_pts(&|p| p.co_runners as f64)),
        fit_by_bandwidth: harm_fit::fit(&local_pts(&|p| p.co_runner_gbps)),
        sufficient_contention_bytes_per_s: measured_threshold_bytes_per_s(
            &out,
            placer_core::catalogue::DEFAULT_MIN_EFFECT,
        ),
        points: out,
        notes,
    };
    if let Some(path) = &args.plot {
        let series: Vec<(String, Vec<(f64, f64)>)> = ["local", "remote"]
            .iter()
            .map(|s| {
                (
                    format!("co-runners on the {s} LLC domain"),
                    report
                        .points
                        .iter()
                        .filter(|p| p.sweep == *s)
                        .map(|p| (p.co_runners as f64, 100.0 * p.slowdown))
                        .collect::<Vec<_>>(),
                )
            })
            .filter(|(_, v)| !v.is_empty())
            .collect();
        placer_sim::plot::curves(
            path,
            "pointer chase slowdown beside streaming co-runners",
            "co-runners",
            "slowdown, %",
            &series,
        )
        .with_context(|| format!("drawing {}", path.display()))?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    outln!(
        "pointer chase over {} MiB on CPU {victim}; co-runners stream {} MiB each; {:.1} s per point",
        ws >> 20,
        args.stream_bytes >> 20,
        report.duration_s
    );
    outln!(
        "{:<7} {:>10} {:>14} {:>10} {:>13}  co-runner CPUs",
        "sweep",
        "co-runners",
        "ns/access",
        "slowdown",
        "co-run GB/s"
    );
    for p in &report.points {
        let cpus = CpuSet::from_iter(p.co_runner_cpus.iter().copied()).to_list_string();
        outln!(
            "{:<7} {:>10} {:>14.1} {:>9.1}% {:>13.1}  {cpus}",
            p.sweep,
            p.co_runners,
            p.ns_per_access,
            100.0 * p.slowdown,
            p.co_runner_gbps
        );
    }
    print_fit("fit, local sweep", &report.fit_by_count, "co-runners");
    print_fit("fit, local sweep", &report.fit_by_bandwidth, "GB/s");
    let min_effect_pct = 100.0 * placer_core::catalogue::DEFAULT_MIN_EFFECT;
    match report.sufficient_contention_bytes_per_s {
        Some(b) => outln!(
            "sufficient contention here: {:.1} GB/s of co-runner traffic slows the chase by \
             {min_effect_pct:.0}% ([contention] min_domain_bandwidth_bytes_per_s = {b:.0})",
            b / 1e9
        ),
        None => outln!(
            "sufficient contention here: no point slowed the chase by {min_effect_pct:.0}% \
             (the threshold is above the traffic measured)"
        ),
    }
    for n in &report.notes {
        outln!("note: {n}");
    }
    Ok(())
}

/// The sufficient-contention threshold `points` measure, bytes/s: the co-runners' traffic
/// at which the chase first runs `min_effect` slower than alone (linear between points of
/// the local sweep), the way the catalogue derives a machine's own from its loaded-latency
/// curve (`catalogue::sufficient_contention_bytes_per_s`); None if no point slows it that
/// much.
pub fn measured_threshold_bytes_per_s(points: &[Point], min_effect: f64) -> Option<f64> {
    let mut curve: Vec<[f64; 2]> = points
        .iter()
        .filter(|p| p.sweep == "local")
        .map(|p| [p.co_runner_gbps, 1.0 + p.slowdown])
        .collect();
    // The chase alone: no traffic, no slowdown.
    curve.push([0.0, 1.0]);
    curve.sort_by(|a, b| a[0].total_cmp(&b[0]));
    placer_core::catalogue::utilisation_at_latency(&curve, min_effect).map(|gbps| gbps * 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_is_where_the_local_sweep_first_costs_the_minimum_effect() {
        let pt = |sweep: &str, gbps: f64, slowdown: f64| Point {
            sweep: sweep.into(),
            co_runners: 1,
            co_runner_cpus: vec![1],
            ns_per_access: 100.0 * (1.0 + slowdown),
            slowdown,
            co_runner_gbps: gbps,
        };
        // 2% at 4 GB/s, 8% at 10 GB/s: 5% is reached halfway, at 7 GB/s. A remote point
        // that slows more is not the local domain's traffic.
        let pts = [
            pt("local", 10.0, 0.08),
            pt("local", 4.0, 0.02),
            pt("remote", 1.0, 0.5),
        ];
        let b = measured_threshold_bytes_per_s(&pts, 0.05).unwrap();
        assert!((b - 7e9).abs() < 1.0, "{b}");
        // Never slowed that much: no threshold.
        assert_eq!(
            measured_threshold_bytes_per_s(&[pt("local", 16.0, 0.04)], 0.05),
            None
        );
    }

    #[test]
    fn the_chase_visits_every_slot_in_one_cycle() {
        for n in [2usize, 3, 17, 1000] {
            let next = cycle(n, 42);
            let (mut i, mut seen) = (0usize, vec![false; n]);
            for _ in 0..n {
                assert!(!seen[i], "slot {i} twice before the cycle closed");
                seen[i] = true;
                i = next[i];
            }
            assert_eq!(i, 0);
            assert!(seen.iter().all(|&s| s));
        }
    }
}
