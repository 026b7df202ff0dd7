//! `placer bench contention --app NAME=COMMAND ...`: seed 003's Fig. 1 on this machine. Each
//! app runs to completion pinned to the first CPU of LLC domain 0, alone and then beside
//! each app in turn (the partner pinned to another core of the domain and restarted whenever
//! it ends, so it presses for the victim's whole run). A cell is the victim's slowdown,
//! `T(beside) / T(alone) - 1`. The partner's CPU is on another physical core where the
//! domain has one ([`fill_order`]). The matrix is fitted to the simulator's harm model
//! ([`placer_sim::harm_fit::fit_pairs`]): per app, the pressure P and sensitivity S a
//! scenario's `[params.archetypes.NAME]` takes, in place of estimates.
//!
//! Each cell is the median of `--pairs-rounds` runs (alone too). Every run is bounded by
//! `--pairs-timeout`; a command is started in its own process group
//! (all of it is stopped with the run) and pinned before it starts (its shell waits on a
//! line from placer that comes only after the pin).

use anyhow::{bail, Context, Result};
use placer_core::CpuSet;
use placer_sim::harm_fit::{self, PairFit, PairMatrix};
use placer_sim::params::LlcShape;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `NAME=COMMAND`, split.
pub fn parse_app(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((n, c)) if !n.trim().is_empty() && !c.trim().is_empty() => {
            Ok((n.trim().to_string(), c.to_string()))
        }
        _ => Err(format!("{s:?}: expected NAME=COMMAND")),
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PairsReport {
    pub victim_cpu: u32,
    pub partner_cpu: u32,
    /// Seconds alone, per app.
    pub alone_s: Vec<f64>,
    /// Runs per cell (the cell is their median).
    #[serde(default)]
    pub rounds: u32,
    pub matrix: PairMatrix,
    /// Size of the victim's LLC, bytes (none where sysfs does not say): the pressures fitted
    /// from this matrix are stated for it, so `placer sim --pairs` takes it as the LLC
    /// reference size (`contention.llc_reference_bytes`).
    #[serde(default)]
    pub llc_bytes: Option<u64>,
    #[serde(default)]
    pub fits: Vec<PairFit>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// A command's process group, stopped (TERM, then KILL) when dropped.
pub(crate) struct Group(pub(crate) Child);

impl Drop for Group {
    fn drop(&mut self) {
        let pgid = self.0.id();
        let _ = placer_linux::sys::kill_group(pgid, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                // The shell is gone; its children may not be.
                let _ = placer_linux::sys::kill_group(pgid, libc::SIGKILL);
                // Those that came back to us (a subreaper: `placer ab`) are reaped, so
                // that none is left listed once the caller goes on.
                placer_linux::sys::reap_group(pgid, Instant::now() + Duration::from_secs(2));
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = placer_linux::sys::kill_group(pgid, libc::SIGKILL);
        let _ = self.0.wait();
        placer_linux::sys::reap_group(pgid, Instant::now() + Duration::from_secs(2));
    }
}

/// Starts `cmd` in its own process group, pinned to `cpu` before the command itself runs.
fn start(cmd: &str, cpu: u32) -> Result<Group> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("read _placer_gate; {cmd}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let mut gate = child.stdin.take().context("the gate")?;
    let g = Group(child);
    placer_linux::sys::set_affinity(g.0.id(), &CpuSet::from_iter([cpu]))
        .with_context(|| format!("pinning {cmd:?} to CPU {cpu}"))?;
    gate.write_all(b"go\n").context("opening the gate")?;
    Ok(g)
}

/// Runs `cmd` on `cpu` to completion; its wall time.
fn timed(cmd: &str, cpu: u32, timeout: Duration) -> Result<f64> {
    let mut g = start(cmd, cpu)?;
    let t0 = Instant::now();
    loop {
        if let Some(st) = g.0.try_wait()? {
            if !st.success() {
                bail!("{cmd:?} failed: {st}");
            }
            return Ok(t0.elapsed().as_secs_f64());
        }
        if t0.elapsed() > timeout {
            bail!("{cmd:?} ran past {timeout:?} (--pairs-timeout)");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `cmd` kept running on `cpu` (restarted whenever it ends) until [`Partner::stop`], or at
/// most `bound`; dropping it stops it too.
struct Partner {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Partner {
    /// Returns once the partner runs, so the victim never starts alone.
    fn start(cmd: &str, cpu: u32, bound: Duration) -> Result<Partner> {
        let stop = Arc::new(AtomicBool::new(false));
        let (cmd, flag) = (cmd.to_string(), stop.clone());
        let (running, first) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || -> Result<()> {
            let t0 = Instant::now();
            let mut g = start(&cmd, cpu)?;
            let _ = running.send(());
            while !flag.load(Ordering::Relaxed) && t0.elapsed() < bound {
                match g.0.try_wait()? {
                    // A partner that fails would press nothing: the cell would be wrong.
                    Some(st) if !st.success() => bail!("partner {cmd:?} failed: {st}"),
                    Some(_) => g = start(&cmd, cpu)?,
                    None => std::thread::sleep(Duration::from_millis(2)),
                }
            }
            // A run that failed between the last poll and the stop failed while the victim
            // ran too (on a loaded host the poll can come after the victim's end).
            match g.0.try_wait()? {
                Some(st) if !st.success() => bail!("partner {cmd:?} failed: {st}"),
                _ => Ok(()),
            }
        });
        let p = Partner {
            stop,
            thread: Some(thread),
        };
        match first.recv_timeout(Duration::from_secs(10)) {
            Ok(()) => Ok(p),
            Err(_) => {
                p.stop()?;
                bail!("the partner did not start within 10 s")
            }
        }
    }

    /// Stops the partner; its failure, if it failed while the victim ran.
    fn stop(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("the partner's thread panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for Partner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Both fits of a matrix, in the units a scenario's archetypes use (the simulator's
/// default LLC scales: `placer sim --params MACHINE`).
pub fn fits(m: &PairMatrix) -> Vec<PairFit> {
    let c = placer_sim::params::Params::for_machine(None, None).contention;
    vec![
        harm_fit::fit_pairs(m, LlcShape::Saturating, c.llc_scale),
        harm_fit::fit_pairs(m, LlcShape::Additive, c.llc_additive_per_pressure),
    ]
}

/// The median of `rounds` timed runs.
fn median_time(cmd: &str, cpu: u32, rounds: u32, timeout: Duration) -> Result<f64> {
    let ts = (0..rounds.max(1))
        .map(|_| timed(cmd, cpu, timeout))
        .collect::<Result<Vec<f64>>>()?;
    placer_core::stats::median(&ts).context("no finite run time")
}

/// This machine's topology and the allowed CPUs of its first LLC domain (at least one):
/// where both contention benchmarks put their victim and its neighbours.
pub fn llc_domain_zero() -> Result<(placer_core::Topology, Vec<u32>)> {
    let topo = placer_linux::topology::read(Path::new("/")).context("reading the topology")?;
    let local: Vec<u32> = match topo.llc_domains().first() {
        Some(d) if !d.is_empty() => d.iter().collect(),
        _ => bail!("no LLC domain with an allowed CPU"),
    };
    Ok((topo, local))
}

/// The CPUs beside `victim` in its LLC domain `local`, in the order a contention benchmark
/// fills them: one per other physical core first, then those cores' other threads, the
/// victim's own SMT siblings last (they share its core, not only its LLC, so they would
/// measure SMT contention). Also how many other cores there are.
pub fn fill_order(topo: &placer_core::Topology, local: &[u32], victim: u32) -> (Vec<u32>, usize) {
    let own_core = topo.siblings(victim);
    let mut cores_seen: Vec<CpuSet> = Vec::new();
    let (mut first, mut more, mut own) = (Vec::new(), Vec::new(), Vec::new());
    for &c in local.iter().filter(|&&c| c != victim) {
        let core = topo.siblings(c);
        if own_core.contains(c) {
            own.push(c);
        } else if cores_seen.contains(&core) {
            more.push(c);
        } else {
            cores_seen.push(core);
            first.push(c);
        }
    }
    let cores = first.len();
    first.extend(more);
    first.extend(own);
    (first, cores)
}

/// Measures the matrix of `apps` on this machine, each time the median of `rounds` runs.
pub fn measure(apps: &[(String, String)], rounds: u32, timeout: Duration) -> Result<PairsReport> {
    let (topo, local) = llc_domain_zero()?;
    let victim = local[0];
    let mut notes = Vec::new();
    let (order, other_cores) = fill_order(&topo, &local, victim);
    let partner = match order.first() {
        Some(&c) => {
            if other_cores == 0 {
                notes.push(format!(
                    "LLC domain 0 has no other core: the partner runs on CPU {c}, an SMT \
                     sibling of the victim's, so the cells include core sharing"
                ));
            }
            c
        }
        None => {
            notes.push(format!(
                "LLC domain 0 has one CPU: the partner time-shares CPU {victim} with the victim, \
                 so the cells measure time-sharing, not contention"
            ));
            victim
        }
    };
    let mut alone = Vec::new();
    for (name, cmd) in apps {
        let t = median_time(cmd, victim, rounds, timeout)?;
        eprintln!("{name} alone: {t:.2} s");
        alone.push(t);
    }
    let mut rows = Vec::new();
    for (i, (name, cmd)) in apps.iter().enumerate() {
        let mut row = Vec::new();
        for (other, partner_cmd) in apps {
            // The partner presses for as long as the victim's rounds may take.
            let p = Partner::start(partner_cmd, partner, timeout * rounds.max(1))?;
            let t = median_time(cmd, victim, rounds, timeout)?;
            p.stop()?;
            let s = t / alone[i] - 1.0;
            eprintln!("{name} beside {other}: {t:.2} s ({:+.1}%)", 100.0 * s);
            row.push(Some(s));
        }
        rows.push(row);
    }
    let matrix = PairMatrix {
        names: apps.iter().map(|(n, _)| n.clone()).collect(),
        slowdown: rows,
    };
    Ok(PairsReport {
        llc_bytes: topo.llc_of(victim).and_then(|c| c.size_bytes),
        victim_cpu: victim,
        partner_cpu: partner,
        alone_s: alone,
        rounds,
        fits: fits(&matrix),
        matrix,
        notes,
    })
}

/// Reads a matrix from FILE: a pairs report (`--json`) or a bare `{names, slowdown}`.
pub fn read_matrix(path: &Path) -> Result<PairMatrix> {
    read_pairs(path).map(|(m, _)| m)
}

/// A matrix from FILE as [`read_matrix`] reads it, and the size of the LLC it was measured
/// on where the file says (a pairs report of this version; a bare matrix does not).
pub fn read_pairs(path: &Path) -> Result<(PairMatrix, Option<u64>)> {
    let text = crate::common::read_input(path)?;
    if let Ok(r) = serde_json::from_str::<PairsReport>(&text) {
        return Ok((r.matrix, r.llc_bytes));
    }
    let m: PairMatrix = serde_json::from_str(&text)
        .with_context(|| format!("{}: neither a pairs report nor a matrix", path.display()))?;
    let n = m.names.len();
    if m.slowdown.len() != n || m.slowdown.iter().any(|r| r.len() != n) {
        bail!("{}: the matrix is not {n} x {n}", path.display());
    }
    Ok((m, None))
}

/// The matrix and its fits, for people.
pub fn print(m: &PairMatrix, fits: &[PairFit]) {
    let w = m.names.iter().map(|n| n.len()).max().unwrap_or(4).max(8);
    outln!("slowdown of the row app beside the column app:");
    let head: Vec<String> = m.names.iter().map(|n| format!("{n:>w$}")).collect();
    outln!("{:<w$} {}", "", head.join(" "));
    for (name, row) in m.names.iter().zip(&m.slowdown) {
        let cells: Vec<String> = row
            .iter()
            .map(|c| match c {
                Some(s) => format!("{:>w$}", format!("{:+.1}%", 100.0 * s)),
                None => format!("{:>w$}", "-"),
            })
            .collect();
        outln!("{name:<w$} {}", cells.join(" "));
    }
    for f in fits {
        outln!(
            "fit, llc_shape = \"{}\" (RMS residual {:.1} points; S of the most sensitive app = 1):",
            format!("{:?}", f.shape).to_lowercase(),
            100.0 * f.rms_residual
        );
        for (k, name) in f.names.iter().enumerate() {
            outln!(
                "  [params.archetypes.{}] pressure = {:.3}, sensitivity = {:.3}",
                name.replace('.', "_"),
                f.pressure[k],
                f.sensitivity[k]
            );
        }
        if !f.clamped.is_empty() {
            outln!(
                "  note: harm beyond the saturating ceiling from {} (pressure clamped)",
                f.clamped.join(", ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_fill_other_cores_first_and_the_victims_sibling_last() {
        let topo = placer_core::machines::machine("pkg:1 node:1 core:4 pu:2").unwrap();
        let local: Vec<u32> = topo.llc_domains()[0].iter().collect();
        let victim = local[0];
        let (order, cores) = fill_order(&topo, &local, victim);
        assert_eq!(cores, 3);
        assert_eq!(order.len(), local.len() - 1);
        assert!(!order.contains(&victim));
        // The first `cores` are on distinct cores, none the victim's.
        let firsts: Vec<CpuSet> = order[..cores].iter().map(|&c| topo.siblings(c)).collect();
        for (k, core) in firsts.iter().enumerate() {
            assert!(!core.contains(victim), "{order:?}");
            assert!(!firsts[..k].contains(core), "{order:?}");
        }
        // The victim's own sibling comes last.
        let last = *order.last().unwrap();
        assert!(topo.siblings(victim).contains(last), "{order:?}");
        // Without SMT the order is the domain's.
        let flat = placer_core::machines::machine("pkg:1 node:1 core:4 pu:1").unwrap();
        let local: Vec<u32> = flat.llc_domains()[0].iter().collect();
        assert_eq!(
            fill_order(&flat, &local, local[0]),
            (local[1..].to_vec(), 3)
        );
    }

    #[test]
    fn apps_are_name_equals_command() {
        assert_eq!(
            parse_app("lbm=./lbm 3000 ref.in"),
            Ok(("lbm".into(), "./lbm 3000 ref.in".into()))
        );
        // Only the first '=' splits: the command may hold more.
        assert_eq!(parse_app("a=X=1 run").unwrap().1, "X=1 run");
        assert!(parse_app("noequals").is_err());
        assert!(parse_app("=cmd").is_err() && parse_app("name=").is_err());
    }

    #[test]
    fn a_saved_report_or_a_bare_matrix_reads_back() {
        let tmp = placer_testkit::TempDir::new("pairs");
        let m = PairMatrix {
            names: vec!["a".into(), "b".into()],
            slowdown: vec![vec![Some(0.1), Some(0.5)], vec![None, Some(0.0)]],
        };
        let bare = tmp.path().join("m.json");
        std::fs::write(&bare, serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(read_matrix(&bare).unwrap(), m);
        let report = PairsReport {
            victim_cpu: 0,
            partner_cpu: 1,
            alone_s: vec![1.0, 2.0],
            rounds: 3,
            fits: fits(&m),
            matrix: m.clone(),
            llc_bytes: Some(12 << 20),
            notes: vec![],
        };
        let saved = tmp.path().join("r.json");
        std::fs::write(&saved, serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(read_matrix(&saved).unwrap(), m);
        // The report carries the LLC it was measured on; a bare matrix does not.
        assert_eq!(read_pairs(&saved).unwrap().1, Some(12 << 20));
        assert_eq!(read_pairs(&bare).unwrap().1, None);
        let ragged = tmp.path().join("bad.json");
        std::fs::write(&ragged, r#"{"names":["a","b"],"slowdown":[[0.1]]}"#).unwrap();
        assert!(read_matrix(&ragged).is_err());
    }
}
