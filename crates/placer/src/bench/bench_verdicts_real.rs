//! `placer bench verdicts --real`: the judge's power and placebo rate measured with real
//! processes on this machine. Each staged move pins a CPU-bound worker from CPU A to CPU B
//! through the daemon's actuator (journaled, restored), timed the way real triggers are (the
//! worker was stopped and starts at the move), and the daemon's judge
//! (`placer_core::verifier::Verifier`, smt-energy's expectation: CPU share) probes it from
//! the daemon's sampler, its switches applied by the same actuator. The classes (A and B
//! the first two CPUs this process may use):
//! - placebo (mask): the worker may run on A and B and is "pinned" to A and B: the arms are
//!   identical, so anything acted on is a false action;
//! - placebo (CPU): from A to B with nothing else of the bench running: equivalent only on a
//!   quiet symmetric machine (on a busy one, the CPUs differ and this is a real move);
//! - harm -10 / -20 / -40%: from A and B to B alone, where a hog takes 10 / 20 / 40% of the
//!   CPU, so the worker keeps 1 - duty of it there;
//! - gain +25%: from A, where the hog (20%) runs, to A and B (1 / 0.8).
//!
//! The hog's duty is CPU time it consumes (its own thread's clock), not a share of each
//! 10 ms of wall time it spends spinning: while the worker runs a slice on the hog's CPU the
//! wall clock moves and the hog does not run, so a wall-time hog got less than its duty,
//! and how much less depended on the kernel's slices and the machine's load (on the busy VM,
//! 2026-11-28, the 20% wall-time hog staged -1% where -10% was meant, the 40% one -12% for
//! -20%; on the quiet VM 0.885 and 0.705).
//!
//! Needs two CPUs (it uses the first two this process may run on). Stops each move at its
//! verdict and the whole run at `--max-duration`, reporting what it has.
//!
//! On a shared machine a hog at nice 0 is one task among many, and the staged harm is
//! diluted by everyone else's load (the busy run in docs/daemon.md). So the worker, the hog
//! and the thread that samples and judges run at `--nice` (default -20: a CFS weight 87
//! times a nice-0 task's): against each other they share the CPUs as on a quiet machine,
//! and the background gets what they leave. Each sets its own nice on its own thread
//! (the spinners are killed at the class's end, the judging thread ends with the run).
//! Where the kernel groups tasks by session (`sched_autogroup_enabled`), CPU is shared
//! between sessions' groups first and a nice value only counts inside its group, so the
//! run also sets its session's group to `--nice` (`/proc/self/autogroup`) and puts the old
//! value back at its end; run it in a session of its own (`setsid`) so that nothing else
//! shares that weight. Needs root (CAP_SYS_NICE) below 0.

use anyhow::{bail, Context, Result};
use placer_core::host::Host;
use placer_core::observation::Observation;
use placer_core::plan::{Action, Outcome, Plan};
use placer_core::policies::PolicyKind;
use placer_core::sample::SampleRequest;
use placer_core::verdict::{Point, VerdictKind};
use placer_core::verifier::{Arm, Seen, Verifier};
use placer_core::CpuSet;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The file `--save` writes in the state dir and `placer report` reads.
pub const SAVED: &str = "judge-calibration.json";

/// One class of staged moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Class {
    PlaceboMask,
    Placebo,
    Harm10,
    Harm20,
    Harm40,
    Gain25,
}

impl Class {
    pub const ALL: [Class; 6] = [
        Class::PlaceboMask,
        Class::Placebo,
        Class::Harm10,
        Class::Harm20,
        Class::Harm40,
        Class::Gain25,
    ];

    /// (hog duty, the hog on the target CPU B, else on CPU A).
    fn hog(self) -> Option<(f64, bool)> {
        match self {
            Class::PlaceboMask | Class::Placebo => None,
            Class::Harm10 => Some((0.1, true)),
            Class::Harm20 => Some((0.2, true)),
            Class::Harm40 => Some((0.4, true)),
            Class::Gain25 => Some((0.2, false)),
        }
    }

    /// The intended on/off ratio of the worker's CPU share: on the hog's CPU it keeps what
    /// the hog leaves (the hog's duty is under half a CPU, its fair share against the
    /// worker, so it gets all of it).
    pub fn intended_ratio(self) -> f64 {
        match self.hog() {
            None => 1.0,
            Some((d, true)) => 1.0 - d,
            Some((d, false)) => 1.0 / (1.0 - d),
        }
    }
}

/// One class's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassResult {
    pub class: Class,
    pub intended_ratio: f64,
    pub moves: usize,
    pub kept: usize,
    pub undone: usize,
    pub inconclusive: usize,
    pub acted_ci95: (f64, f64),
    pub undone_ci95: (f64, f64),
    pub kept_ci95: (f64, f64),
    /// Median seconds from the pin to the verdict.
    pub median_s_to_verdict: f64,
    /// The longest of them (the targets bound the time to an undo).
    #[serde(default)]
    pub max_s_to_verdict: f64,
    /// Median measured on/off ratio of the main metric.
    pub median_measured_ratio: f64,
}

/// What `--save` keeps and `placer report` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Saved {
    /// Unix seconds of the run's end.
    pub at_unix_s: u64,
    pub interval_ms: u64,
    pub settings: placer_core::verifier::ProbeSettings,
    pub classes: Vec<ClassResult>,
    /// The run stopped at --max-duration before every move was made.
    pub cut_short: bool,
    /// The nice value of the worker, the hog and the judging thread (0 in runs before it
    /// was a setting).
    #[serde(default)]
    pub nice: i32,
}

impl Saved {
    pub fn read(state_dir: &std::path::Path) -> Option<Saved> {
        let text = std::fs::read_to_string(state_dir.join(SAVED)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// "judge measured here on DATE: placebo acted 2/40 (..), a -20% move undone 38/40 ..."
    pub fn summary_line(&self) -> String {
        let parts: Vec<String> = self
            .classes
            .iter()
            .map(|c| {
                let (what, k, ci) = match c.class {
                    Class::PlaceboMask | Class::Placebo => {
                        ("placebo acted", c.kept + c.undone, c.acted_ci95)
                    }
                    Class::Gain25 => ("gain undone", c.undone, c.undone_ci95),
                    _ => ("undone", c.undone, c.undone_ci95),
                };
                format!(
                    "{:?} {what} {k}/{} ({:.0}..{:.0}%)",
                    c.class,
                    c.moves,
                    100.0 * ci.0,
                    100.0 * ci.1
                )
            })
            .collect();
        format!(
            "the judge measured on this machine (placer bench verdicts --real, unix time {}, {} ms intervals{}): {}",
            self.at_unix_s,
            self.interval_ms,
            if self.cut_short { ", cut short" } else { "" },
            parts.join("; ")
        )
    }
}

/// The hidden role of a spawned copy of this binary: at `nice`, consume `duty` of a CPU
/// (its own CPU time: module doc) until its parent is gone or `max` passed. It spins while
/// it is owed CPU time and sleeps while it is ahead, so its bursts last about 10 ms of
/// wall time at most; CPU it could not get for more than one period is forgiven, not
/// caught up in one long burst.
pub fn spin(duty: f64, nice: i32, max: Duration) -> Result<()> {
    placer_linux::sys::set_thread_nice(nice).context("setting the spinner's nice")?;
    let duty = duty.clamp(0.0, 1.0);
    let start = Instant::now();
    let parent = std::os::unix::process::parent_id();
    let period_ns = 10_000_000.0;
    let cpu0 = placer_linux::sys::thread_cpu_ns();
    let mut forgiven_ns = 0.0;
    while start.elapsed() < max && std::os::unix::process::parent_id() == parent {
        let used_ns = (placer_linux::sys::thread_cpu_ns() - cpu0) as f64 + forgiven_ns;
        let owed_ns = duty * start.elapsed().as_nanos() as f64 - used_ns;
        if owed_ns > period_ns {
            forgiven_ns += owed_ns - period_ns;
        }
        if owed_ns > 0.0 || duty >= 1.0 {
            // A burst of about 100 us between looks at the clocks.
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_micros(100) {
                std::hint::spin_loop();
            }
        } else {
            let ahead_s = -owed_ns / duty.max(1e-3) / 1e9;
            std::thread::sleep(Duration::from_secs_f64(ahead_s.min(period_ns / 1e9)));
        }
    }
    Ok(())
}

/// A spawned spinner, killed on drop.
struct Spinner(std::process::Child);

impl Spinner {
    fn start(duty: f64, nice: i32, cpus: &CpuSet, max: Duration) -> Result<Spinner> {
        let mut cmd = std::process::Command::new(std::env::current_exe()?);
        cmd.args([
            "bench",
            "verdicts",
            "--spin",
            &duty.to_string(),
            "--nice",
            &nice.to_string(),
            "--spin-seconds",
            &max.as_secs().to_string(),
        ]);
        placer_linux::sys::set_affinity_on_spawn(&mut cmd, cpus)?;
        placer_linux::sys::stop_with_parent(&mut cmd)?;
        Ok(Spinner(cmd.spawn().context("starting a spinner")?))
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a staged run is asked to do.
#[derive(Debug, Clone)]
pub struct RealRun {
    /// Moves per class.
    pub moves: usize,
    pub classes: Vec<Class>,
    /// Between samples.
    pub interval: Duration,
    pub max_duration: Duration,
    /// Of the worker, the hog and the judging thread.
    pub nice: i32,
    pub settings: placer_core::verifier::ProbeSettings,
}

/// Runs the staged moves on a thread of its own at `run.nice` (so the nice ends with it),
/// handing what is measured so far to `progress` after each class.
pub fn run_real(run: &RealRun, progress: &mut (dyn FnMut(&Saved) + Send)) -> Result<Saved> {
    std::thread::scope(|s| {
        s.spawn(|| {
            placer_linux::sys::set_thread_nice(run.nice)
                .context("setting the judging thread's nice (below 0 needs root)")?;
            let _group = AutogroupNice::set(std::path::Path::new("/"), run.nice)?;
            run_classes(run, progress)
        })
        .join()
        .unwrap_or_else(|_| bail!("the staged run panicked"))
    })
}

fn run_classes(run: &RealRun, progress: &mut (dyn FnMut(&Saved) + Send)) -> Result<Saved> {
    let RealRun {
        moves,
        interval,
        max_duration,
        nice,
        settings,
        ..
    } = *run;
    let allowed = placer_linux::sys::get_affinity(placer_linux::sys::gettid())?;
    let cpus: Vec<u32> = allowed.iter().take(2).collect();
    if cpus.len() < 2 {
        bail!("--real needs two CPUs; this process may run on {allowed}");
    }
    let (a, b) = (CpuSet::single(cpus[0]), CpuSet::single(cpus[1]));
    let both = a.union(&b);
    let state = private_state_dir()?;
    let mut host = placer_linux::host::LinuxHost::new(std::path::Path::new("/"), &state.0);
    let req = SampleRequest::default();
    let deadline = Instant::now() + max_duration;
    let policy = PolicyKind::SmtEnergy;
    let mut classes = Vec::new();
    let mut cut_short = false;
    let saved = |classes: &[ClassResult], cut_short| Saved {
        at_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        interval_ms: interval.as_millis() as u64,
        settings,
        classes: classes.to_vec(),
        cut_short,
        nice,
    };
    'classes: for &class in &run.classes {
        let hog = class
            .hog()
            .map(|(d, on_b)| Spinner::start(d, nice, if on_b { &b } else { &a }, max_duration))
            .transpose()?;
        // (the worker's own CPUs, the pin's).
        let (own, pinned) = match class {
            Class::PlaceboMask => (&both, &both),
            Class::Placebo => (&a, &b),
            Class::Harm10 | Class::Harm20 | Class::Harm40 => (&both, &b),
            Class::Gain25 => (&a, &both),
        };
        let worker = Spinner::start(1.0, nice, own, max_duration)?;
        let (mut kept, mut undone, mut inconclusive) = (0, 0, 0);
        let (mut times, mut ratios) = (Vec::new(), Vec::new());
        let mut verifier = Verifier::new();
        for _ in 0..moves {
            if Instant::now() >= deadline {
                cut_short = true;
                break;
            }
            // Trigger: the worker was stopped and starts at the move.
            placer_linux::sys::kill(worker.pid(), libc::SIGSTOP)?;
            std::thread::sleep(interval * 2);
            let mut prev = host.sample(req)?;
            placer_linux::sys::kill(worker.pid(), libc::SIGCONT)?;
            std::thread::sleep(interval);
            let cur = host.sample(req)?;
            let obs = Observation::new(&prev, &cur);
            prev = cur;
            let Some((k, ran_on)) = obs
                .iter_procs()
                .find(|p| p.pid == worker.pid())
                .map(|p| (p.key(), p.last_cpu))
            else {
                bail!("the worker {} is not in the sample", worker.pid());
            };
            let comm = "placer".to_string();
            let mut pin = Plan::default();
            pin.push(
                policy,
                Action::PinProcess {
                    proc: k,
                    comm: comm.clone(),
                    cpus: pinned.clone(),
                },
                "staged move",
            );
            let r = host.apply(&pin, false);
            // The placebo's pin to the mask it has is "already on": its arms are too.
            let placebo = class == Class::PlaceboMask;
            if !matches!(
                r.first().map(|r| &r.outcome),
                Some(Outcome::Done) | Some(Outcome::Skipped(_)) if placebo
            ) && !matches!(r.first().map(|r| &r.outcome), Some(Outcome::Done))
            {
                bail!("the staged pin failed: {r:?}");
            }
            let pinned_at = Instant::now();
            verifier.start(
                vec![placer_core::verifier::NewPin {
                    policy,
                    proc: k,
                    comm: comm.clone(),
                    cpus: pinned.clone(),
                    own: own.clone(),
                    ran_on,
                }],
                &|_| settings,
            );
            let mut cycle = 0u64;
            let verdict = loop {
                std::thread::sleep(interval.saturating_sub(Duration::from_millis(1)));
                let cur = host.sample(req)?;
                let obs = Observation::new(&prev, &cur);
                prev = cur;
                cycle += 1;
                let index = obs.index();
                let step = verifier.observe(
                    |key| {
                        let p = index.get(&key)?;
                        Some(Seen {
                            point: Point {
                                cpu_share: p.cpu_share,
                                bytes_per_s: 0.0,
                                instructions_per_s: None,
                            },
                            affinity: &p.allowed_cpus,
                            qos_ratio: None,
                        })
                    },
                    cycle,
                    &|_| settings,
                    1,
                );
                let mut probes = Plan::default();
                for s in &step.switches {
                    let action = match s.arm {
                        Arm::On => Action::PinProcess {
                            proc: s.proc,
                            comm: comm.clone(),
                            cpus: s.cpus.clone(),
                        },
                        Arm::Off => Action::RestoreProcess {
                            proc: s.proc,
                            comm: comm.clone(),
                            via: s.via.clone(),
                        },
                    };
                    probes.push(policy, action, "probe");
                }
                let reports = host.apply(&probes, false);
                verifier.applied(|_, key| {
                    reports.iter().any(|r| {
                        r.planned.action.proc() == Some(key)
                            && matches!(r.outcome, Outcome::Done | Outcome::Skipped(_))
                    })
                });
                if let Some(v) = step.verdicts.into_iter().next() {
                    break Some(v);
                }
                if !step.released.is_empty() || verifier.trials() == 0 {
                    break None;
                }
                if Instant::now() >= deadline {
                    cut_short = true;
                    break None;
                }
            };
            // Back to its own CPU for the next move, whatever the verdict.
            let mut back = Plan::default();
            back.push(
                policy,
                Action::RestoreProcess {
                    proc: k,
                    comm: comm.clone(),
                    via: None,
                },
                "staged move ends",
            );
            host.apply(&back, false);
            let Some(v) = verdict else {
                if cut_short {
                    break;
                }
                continue;
            };
            times.push(pinned_at.elapsed().as_secs_f64());
            if let Some(c) = &v.judgement.main {
                ratios.push(1.0 + c.change);
            }
            match v.judgement.kind {
                VerdictKind::Kept => kept += 1,
                VerdictKind::Undone => undone += 1,
                VerdictKind::Inconclusive => inconclusive += 1,
            }
        }
        drop(worker);
        drop(hog);
        let n = kept + undone + inconclusive;
        classes.push(ClassResult {
            class,
            intended_ratio: class.intended_ratio(),
            moves: n,
            kept,
            undone,
            inconclusive,
            acted_ci95: ci95(kept + undone, n),
            undone_ci95: ci95(undone, n),
            kept_ci95: ci95(kept, n),
            median_s_to_verdict: placer_core::stats::median(&times).unwrap_or(f64::NAN),
            max_s_to_verdict: times.iter().copied().fold(f64::NAN, f64::max),
            median_measured_ratio: placer_core::stats::median(&ratios).unwrap_or(f64::NAN),
        });
        progress(&saved(&classes, cut_short));
        if cut_short {
            break 'classes;
        }
    }
    let _ = host.restore_all();
    Ok(saved(&classes, cut_short))
}

/// The Clopper-Pearson 95% interval of `k` of `n` (counts as this module keeps them).
pub(crate) fn ci95(k: usize, n: usize) -> (f64, f64) {
    placer_core::stats::clopper_pearson_95(k as u64, n as u64)
}

/// This session's scheduling group at a nice value, the one before put back on drop
/// (module doc); nothing where the kernel has no autogroups.
struct AutogroupNice {
    path: std::path::PathBuf,
    before: i32,
}

impl AutogroupNice {
    fn set(root: &std::path::Path, nice: i32) -> Result<Option<AutogroupNice>> {
        let path = root.join("proc/self/autogroup");
        // "/autogroup-153 nice 0"
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(None);
        };
        let before = text
            .split_whitespace()
            .skip_while(|w| *w != "nice")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("{}: {text:?}", path.display()))?;
        std::fs::write(&path, nice.to_string())
            .with_context(|| format!("setting {} to {nice}", path.display()))?;
        Ok(Some(AutogroupNice { path, before }))
    }
}

impl Drop for AutogroupNice {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, self.before.to_string());
    }
}

/// A private state dir for the run's journal, removed on drop.
struct StateDir(std::path::PathBuf);

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn private_state_dir() -> Result<StateDir> {
    let dir = std::env::temp_dir().join(format!("placer-verdicts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // The journal's state dir must be placer's own: private.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(StateDir(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// The staged harm rests on this: beside a worker spinning on its CPU, the hog gets its
    /// duty of CPU time, neither less (starved) nor more (catching up in long bursts).
    #[test]
    fn the_hog_takes_its_duty_beside_a_worker_on_its_cpu() {
        let me = placer_linux::sys::get_affinity(placer_linux::sys::gettid()).unwrap();
        let cpu = CpuSet::single(me.first().expect("a CPU"));
        let stop = AtomicBool::new(false);
        let duty = 0.2;
        let share = std::thread::scope(|s| {
            s.spawn(|| {
                placer_linux::sys::set_affinity(placer_linux::sys::gettid(), &cpu).unwrap();
                // Bounded: the hog's thread ends within its 2 s, then this one.
                let t0 = Instant::now();
                while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(10) {
                    std::hint::spin_loop();
                }
            });
            let hog = s.spawn(|| {
                placer_linux::sys::set_affinity(placer_linux::sys::gettid(), &cpu).unwrap();
                let (c0, t0) = (placer_linux::sys::thread_cpu_ns(), Instant::now());
                spin(duty, 0, Duration::from_secs(2)).unwrap();
                (placer_linux::sys::thread_cpu_ns() - c0) as f64 / t0.elapsed().as_nanos() as f64
            });
            let share = hog.join().unwrap();
            stop.store(true, Ordering::Relaxed);
            share
        });
        assert!(
            (duty * 0.75..=duty * 1.25).contains(&share),
            "the hog took {share:.3} of its CPU for a duty of {duty}"
        );
    }
}
