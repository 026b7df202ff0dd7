//! Per-task hardware counters (perf_event_open) behind the [`CounterSource`] trait, with a
//! replay source for recorded counter data.
//!
//! [`PerfCounters`] opens one counter per (thread, event) with `pid = tid, cpu = -1` and
//! `read_format = TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING`, so a multiplexed counter can be
//! scaled (`value * enabled / running`, see `CounterValue::scaled`). A process's values are
//! the sums over its threads; a thread that exits keeps contributing its last values (they
//! are retired into the process's total), so the process's counters never go backwards.
//! Only user processes are counted, and at most [`MAX_TASKS`] threads in all, to bound
//! the number of open file descriptors.
//!
//! Without a PMU (virtual machines, this one) opening a hardware event fails; the probe
//! reports `no hardware counters: <errno>` once and the source is off. The same machinery
//! is exercised on software events (task-clock) in tests, and [`ReplayCounters`] feeds
//! recorded values through the same trait.

use placer_core::sample::{CounterEvent, CounterValue, Source, SourceKind};
use std::collections::{HashMap, HashSet, VecDeque};

const PERF_TYPE_HARDWARE: u32 = 0;
pub const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_TYPE_HW_CACHE: u32 = 3;
const PERF_TYPE_RAW: u32 = 4;
const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 2;
/// Bound on counted threads (each costs one fd per event).
pub const MAX_TASKS: usize = 4096;

/// Where per-process counter values come from.
pub trait CounterSource: Send {
    /// Whether the source works here, and why not.
    fn status(&self) -> Source;
    /// Cumulative counters of process `pid` (threads `tids`), or empty when unavailable.
    fn read(&mut self, pid: u32, tids: &[u32]) -> Vec<CounterValue>;
    /// Called once per sample with the pids still alive, to release the others.
    fn retain(&mut self, alive: &crate::pid::PidSet);
}

/// The perf type and config of an event.
pub fn event_code(e: &CounterEvent) -> (u32, u64) {
    match e {
        CounterEvent::Cycles => (PERF_TYPE_HARDWARE, 0),
        CounterEvent::Instructions => (PERF_TYPE_HARDWARE, 1),
        // PERF_COUNT_HW_CACHE_REFERENCES / MISSES are the LLC on x86.
        CounterEvent::LlcReferences => (PERF_TYPE_HARDWARE, 2),
        CounterEvent::LlcMisses => (PERF_TYPE_HARDWARE, 3),
        CounterEvent::Raw { config, .. } => (PERF_TYPE_RAW, *config),
    }
}

/// The standard event set.
pub fn default_events() -> Vec<CounterEvent> {
    vec![
        CounterEvent::Cycles,
        CounterEvent::Instructions,
        CounterEvent::LlcReferences,
        CounterEvent::LlcMisses,
    ]
}

/// perf_event_open(2) of one event on one task.
fn open_counter(ty: u32, config: u64, tid: i32) -> Result<std::fs::File, std::io::Error> {
    // struct perf_event_attr, PERF_ATTR_SIZE_VER1 (72 bytes): type, size, config,
    // sample_period, sample_type, read_format, flag bits, wakeup, bp_type, config1, config2.
    let mut attr = [0u8; 72];
    attr[0..4].copy_from_slice(&ty.to_ne_bytes());
    attr[4..8].copy_from_slice(&72u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&config.to_ne_bytes());
    let rf = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    attr[32..40].copy_from_slice(&rf.to_ne_bytes());
    let exclude_hv: u64 = 1 << 6;
    attr[40..48].copy_from_slice(&exclude_hv.to_ne_bytes());
    crate::sys::perf_event_open(&attr, tid)
}

/// [value, time enabled, time running] of one counter.
fn read_counter(mut f: &std::fs::File) -> Option<[u64; 3]> {
    use std::io::Read;
    let mut b = [0u8; 24];
    f.read_exact(&mut b).ok()?;
    let word = |i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
    Some([word(0), word(1), word(2)])
}

/// A task's counters; the files close on drop.
struct TaskCounters {
    fds: Vec<std::fs::File>,
}

#[derive(Default)]
struct ProcCounters {
    tasks: HashMap<u32, TaskCounters>,
    /// Per event: [value, enabled, running] of threads that exited.
    retired: Vec<[u64; 3]>,
    last: HashMap<u32, Vec<[u64; 3]>>,
}

/// Live perf_event_open counters.
pub struct PerfCounters {
    events: Vec<(CounterEvent, u32, u64)>,
    status: Source,
    procs: HashMap<u32, ProcCounters>,
    open_tasks: usize,
}

impl PerfCounters {
    /// Probes the PMU by opening the first event on this thread.
    pub fn probe(events: Vec<CounterEvent>) -> PerfCounters {
        let events = events
            .into_iter()
            .map(|e| {
                let (t, c) = event_code(&e);
                (e, t, c)
            })
            .collect();
        Self::with_codes(events, SourceKind::PerfHw)
    }

    /// Any (event, perf type, config) list; tests use software events here.
    pub fn with_codes(events: Vec<(CounterEvent, u32, u64)>, name: SourceKind) -> PerfCounters {
        let status = match events.first() {
            None => Source {
                name,
                available: false,
                detail: "no events configured".into(),
            },
            Some((_, t, c)) => match open_counter(*t, *c, 0) {
                Ok(_probe) => Source {
                    name,
                    available: true,
                    detail: format!("{} event(s) per task", events.len()),
                },
                Err(e) => Source {
                    name,
                    available: false,
                    detail: format!(
                        "no hardware counters: {e}{}",
                        if *t == PERF_TYPE_HARDWARE || *t == PERF_TYPE_HW_CACHE {
                            " (no PMU, or perf_event_paranoid)"
                        } else {
                            ""
                        }
                    ),
                },
            },
        };
        PerfCounters {
            events,
            status,
            procs: HashMap::new(),
            open_tasks: 0,
        }
    }
}

impl CounterSource for PerfCounters {
    fn status(&self) -> Source {
        self.status.clone()
    }

    fn read(&mut self, pid: u32, tids: &[u32]) -> Vec<CounterValue> {
        if !self.status.available {
            return Vec::new();
        }
        let nev = self.events.len();
        let pc = self.procs.entry(pid).or_default();
        if pc.retired.is_empty() {
            pc.retired = vec![[0; 3]; nev];
        }
        // Threads gone since the last read: retire their last values.
        let live: HashSet<u32> = tids.iter().copied().collect();
        let gone: Vec<u32> = pc
            .tasks
            .keys()
            .filter(|t| !live.contains(t))
            .copied()
            .collect();
        for t in gone {
            pc.tasks.remove(&t);
            self.open_tasks -= 1;
            if let Some(last) = pc.last.remove(&t) {
                for (r, l) in pc.retired.iter_mut().zip(last) {
                    for k in 0..3 {
                        r[k] += l[k];
                    }
                }
            }
        }
        for &t in tids {
            if pc.tasks.contains_key(&t) || self.open_tasks >= MAX_TASKS {
                continue;
            }
            let mut fds = Vec::with_capacity(nev);
            for (_, ty, cfg) in &self.events {
                match open_counter(*ty, *cfg, t as i32) {
                    Ok(fd) => fds.push(fd),
                    Err(_) => break,
                }
            }
            let tc = TaskCounters { fds };
            if tc.fds.len() == nev {
                pc.tasks.insert(t, tc);
                self.open_tasks += 1;
            }
        }
        let mut sum = pc.retired.clone();
        for (&t, tc) in &pc.tasks {
            let vals: Vec<[u64; 3]> = tc
                .fds
                .iter()
                .map(|fd| read_counter(fd).unwrap_or_default())
                .collect();
            for (s, v) in sum.iter_mut().zip(&vals) {
                for k in 0..3 {
                    s[k] += v[k];
                }
            }
            pc.last.insert(t, vals);
        }
        self.events
            .iter()
            .zip(sum)
            .map(|((e, _, _), v)| CounterValue {
                event: e.clone(),
                value: v[0],
                time_enabled_ns: v[1],
                time_running_ns: v[2],
            })
            .collect()
    }

    fn retain(&mut self, alive: &crate::pid::PidSet) {
        let before = self.procs.len();
        let mut closed = 0;
        self.procs.retain(|pid, pc| {
            let keep = alive.contains(pid);
            if !keep {
                closed += pc.tasks.len();
            }
            keep
        });
        self.open_tasks -= closed;
        debug_assert!(self.procs.len() <= before);
    }
}

/// Replays recorded counter values: per pid, a queue of successive readings.
#[derive(Debug, Default)]
pub struct ReplayCounters {
    pub readings: HashMap<u32, VecDeque<Vec<CounterValue>>>,
}

impl ReplayCounters {
    /// Builds a replay from recorded samples (their per-process counters).
    pub fn from_samples<'a>(samples: impl IntoIterator<Item = &'a placer_core::Sample>) -> Self {
        let mut r = ReplayCounters::default();
        for s in samples {
            for p in &s.procs {
                if !p.counters.is_empty() {
                    r.readings
                        .entry(p.pid)
                        .or_default()
                        .push_back(p.counters.clone());
                }
            }
        }
        r
    }
}

impl CounterSource for ReplayCounters {
    fn status(&self) -> Source {
        Source {
            name: SourceKind::PerfHw,
            available: true,
            detail: format!(
                "replaying recorded counters of {} pid(s)",
                self.readings.len()
            ),
        }
    }
    fn read(&mut self, pid: u32, _tids: &[u32]) -> Vec<CounterValue> {
        self.readings
            .get_mut(&pid)
            .and_then(|q| q.pop_front())
            .unwrap_or_default()
    }
    fn retain(&mut self, _alive: &crate::pid::PidSet) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_probe_reports_once_with_reason() {
        let p = PerfCounters::probe(default_events());
        let s = p.status();
        assert_eq!(s.name, SourceKind::PerfHw);
        if !s.available {
            assert!(
                s.detail.starts_with("no hardware counters: "),
                "{}",
                s.detail
            );
        }
    }

    fn thread_cpu_ns() -> u64 {
        crate::sys::thread_cpu_ns()
    }

    #[test]
    fn software_task_clock_counts_and_sums_threads() {
        // task-clock (PERF_COUNT_SW_TASK_CLOCK = 1) exercises the open/read/sum path
        // without a PMU.
        let ev = CounterEvent::Raw {
            name: "task_clock".into(),
            config: 1,
        };
        let mut p = PerfCounters::with_codes(vec![(ev, PERF_TYPE_SOFTWARE, 1)], SourceKind::PerfSw);
        if !p.status().available {
            placer_testkit::skip(&p.status().detail);
            return;
        }
        let tid = crate::sys::gettid();
        let pid = std::process::id();
        let a = p.read(pid, &[tid]);
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        // Burn 40 ms of this thread's CPU (bounded in wall time on a loaded machine).
        let cpu0 = thread_cpu_ns();
        while thread_cpu_ns() - cpu0 < 40_000_000 && t0.elapsed().as_secs() < 10 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let b = p.read(pid, &[tid]);
        assert_eq!(b.len(), 1);
        assert!(b[0].value >= a[0].value + 30_000_000, "{a:?} {b:?} {x}");
        assert!(b[0].time_enabled_ns >= b[0].time_running_ns);
        // The thread "exits" from the counter's point of view: values are retired, not lost.
        let c = p.read(pid, &[]);
        assert!(c[0].value >= b[0].value);
        p.retain(&crate::pid::PidSet::default());
        assert_eq!(p.open_tasks, 0);
    }

    #[test]
    fn replay_gives_recorded_values_in_order() {
        let v = |n| {
            vec![CounterValue {
                event: CounterEvent::Instructions,
                value: n,
                time_enabled_ns: n,
                time_running_ns: n,
            }]
        };
        let mut r = ReplayCounters::default();
        r.readings.insert(5, VecDeque::from(vec![v(1), v(2)]));
        assert_eq!(r.read(5, &[]), v(1));
        assert_eq!(r.read(5, &[]), v(2));
        assert!(r.read(5, &[]).is_empty());
        assert!(r.read(6, &[]).is_empty());
    }
}
