//! What ran, and which processes came and went, since the previous sample, told by the
//! kernel instead of found by reading all of /proc: the sampler's event sources.
//!
//! [`KernelActivity`] combines the eBPF CPU collector ([`crate::bpf`]: which processes ran
//! and for how long, including those that already exited) and the process-events connector
//! ([`crate::proc_events`]: forks, execs, exits). Either may be missing (no root, no BTF or
//! raw tracepoints, another network namespace); the sampler then falls back to the /proc
//! path for that part, and `placer top` / the daemon say so once through the sources.
//! Beside them, a count of the kernel's cgroup moves ([`crate::bpf::CgroupMoves`]) lets the
//! sampler keep an idle process's cgroup without reading its file while nothing moved.

use crate::bpf::{CgroupMoves, CpuCollector, ProcCpu};
use crate::proc_events::{ProcEvent, ProcEvents};
use placer_core::sample::{Source, SourceKind};

/// One drain of the event sources.
#[derive(Debug, Default, Clone)]
pub struct Activity {
    /// Processes that ran since the previous drain (CPU ns, comm, the threads that ran in
    /// tid order); `None` = unknown (no collector, or it failed this time): every
    /// process's `stat` must be read.
    pub ran: Option<crate::pid::PidMap<ProcCpu>>,
    /// Process births, execs and exits in order; `None` = unknown (no connector, or events
    /// were lost): /proc must be listed.
    pub events: Option<Vec<ProcEvent>>,
    /// The kernel's count of cgroup moves ([`crate::bpf::CgroupMoves`]), taken before any
    /// file of the sample is read; `None` = unknown: a process's `cgroup` file must be read
    /// again at its refresh.
    pub cgroup_moves: Option<u64>,
}

/// A source of [`Activity`]: the kernel's ([`KernelActivity`]) or a script (benchmarks on
/// generated /proc trees, where the generator knows what it made run).
pub trait ActivitySource: Send {
    fn drain(&mut self) -> Activity;
    /// `ebpf` and `proc_events` entries for [`placer_core::sample::SourceStatus`].
    fn sources(&self) -> Vec<Source>;
    /// Whether the CPU collector is attached now; `None`: there is none to attach or
    /// detach (it could not be opened, or the source is scripted).
    fn cpu_attached(&self) -> Option<bool> {
        None
    }
    /// Attaches (a fresh collector: the next drain says `ran: None`, so that sample reads
    /// every process and later drains are complete) or detaches the CPU collector; the
    /// error says why not.
    fn set_cpu_attached(&mut self, _on: bool) -> Result<(), String> {
        Err("this source has no CPU collector to attach".into())
    }
    /// The next `n` drains are taken and let go (`ran: None`): those samples read every
    /// process, which is how the sampler measures what that path costs while attached.
    fn discard_next_drains(&mut self, _n: u32) {}
    /// The collector's programs' cumulative time in the kernel (ns, counted while
    /// [`crate::bpf::RunTimeStats`] is held by anyone): the switch program's and the tick
    /// program's; `None` when detached.
    fn cpu_run_time_ns(&self) -> Option<(u64, u64)> {
        None
    }
}

/// The real kernel's event sources, each opened once (or its error kept to say why not).
pub struct KernelActivity {
    cpu: Cpu,
    /// The collector was attached since the last drain: the next says `ran: None`.
    fresh: bool,
    /// Drains to take and let go ([`ActivitySource::discard_next_drains`]).
    discard: u32,
    events: Result<ProcEvents, String>,
    moves: Result<CgroupMoves, String>,
}

/// The CPU collector: attached, let go (its map's size kept for the next attach), or not
/// to be had (why).
enum Cpu {
    On(CpuCollector),
    Detached { capacity: u32 },
    Off(String),
}

impl KernelActivity {
    pub fn open() -> KernelActivity {
        KernelActivity {
            cpu: match CpuCollector::open() {
                Ok(c) => Cpu::On(c),
                Err(e) => Cpu::Off(e.to_string()),
            },
            fresh: false,
            discard: 0,
            events: ProcEvents::open().map_err(|e| e.to_string()),
            moves: CgroupMoves::open().map_err(|e| e.to_string()),
        }
    }

    /// Whether at least one source works.
    pub fn any(&self) -> bool {
        !matches!(self.cpu, Cpu::Off(_)) || self.events.is_ok()
    }

    /// The CPU collector's map size (None without the collector).
    pub fn cpu_capacity(&self) -> Option<u32> {
        match &self.cpu {
            Cpu::On(c) => Some(c.capacity()),
            Cpu::Detached { .. } | Cpu::Off(_) => None,
        }
    }

    /// A collector whose map holds `capacity` threads in place of this one's (tests: a
    /// small map to fill).
    pub fn resize_cpu(&mut self, capacity: u32) -> std::io::Result<()> {
        let c = CpuCollector::open_for(capacity)?;
        // Attached before the old one goes: no instant without a collector.
        self.cpu = Cpu::On(c);
        Ok(())
    }

    /// Replaces a full collector by one with twice the map, up to the largest.
    fn grow(&mut self) {
        let Some(cap) = self.cpu_capacity() else {
            return;
        };
        if cap >= crate::bpf::MAX_THREADS {
            return;
        }
        let want = cap.saturating_mul(2).min(crate::bpf::MAX_THREADS);
        match self.resize_cpu(want) {
            Ok(()) => tracing::info!("eBPF collector: its map filled up; now {want} threads"),
            Err(e) => tracing::warn!("eBPF collector: a map of {want} threads: {e}"),
        }
    }
}

impl ActivitySource for KernelActivity {
    fn drain(&mut self) -> Activity {
        let ran = match &mut self.cpu {
            // Attached since the last drain: what its map holds is only since then, and
            // this sample reads every process; the next drain is complete.
            Cpu::On(_) if std::mem::take(&mut self.fresh) => None,
            // Drained (the next drain holds only what ran after this sample's full read),
            // and not trusted.
            Cpu::On(c) if self.discard > 0 => {
                self.discard -= 1;
                if let Ok(d) = c.drain() {
                    if d.lost_full {
                        self.grow();
                    }
                }
                None
            }
            Cpu::On(c) => match c.drain() {
                Ok(d) if !d.lost_full => Some(d.procs),
                // The map filled up: some processes went unaccounted (this sample reads
                // them all); from now on a map twice as big, where there is room.
                Ok(_) => {
                    self.grow();
                    None
                }
                Err(e) => {
                    tracing::debug!("eBPF drain: {e}");
                    None
                }
            },
            Cpu::Detached { .. } | Cpu::Off(_) => None,
        };
        let events = match &mut self.events {
            Ok(ev) => {
                let d = ev.drain();
                (!d.lost).then_some(d.events)
            }
            Err(_) => None,
        };
        let cgroup_moves = self.moves.as_ref().ok().and_then(|m| {
            m.count()
                .map_err(|e| tracing::debug!("cgroup-move count: {e}"))
                .ok()
        });
        Activity {
            ran,
            events,
            cgroup_moves,
        }
    }

    fn sources(&self) -> Vec<Source> {
        vec![
            Source {
                name: SourceKind::Ebpf,
                available: !matches!(self.cpu, Cpu::Off(_)),
                detail: match (&self.cpu, &self.moves) {
                    (Cpu::Detached { .. }, _) => format!(
                        "CPU collector ({}) detached: at this machine's rate of context switches it costs more than reading every /proc/PID/stat, which each sample does now; attached again when it is the cheaper",
                        crate::bpf::PROG_NAME,
                    ),
                    (Cpu::On(_), Ok(_)) => format!(
                        "CPU time per thread from sched_switch and the tick ({}); idle processes are not read; cgroup moves counted ({}): an idle process's cgroup is read again only after one",
                        crate::bpf::PROG_NAME,
                        crate::bpf::CGROUP_MOVES_PROG_NAME,
                    ),
                    (Cpu::On(_), Err(e)) => format!(
                        "CPU time per thread from sched_switch and the tick ({}); idle processes are not read; cgroup-move counter: {e}: an idle process's cgroup is read again at each refresh",
                        crate::bpf::PROG_NAME,
                    ),
                    (Cpu::Off(e), _) => format!("eBPF CPU collector: {e}; reading every /proc/PID/stat"),
                },
            },
            Source {
                name: SourceKind::ProcEvents,
                available: self.events.is_ok(),
                detail: match &self.events {
                    Ok(_) => "process-events connector (fork, exec, exit)".into(),
                    Err(e) => format!("process-events connector: {e}; listing /proc"),
                },
            },
        ]
    }

    fn cpu_attached(&self) -> Option<bool> {
        match self.cpu {
            Cpu::On(_) => Some(true),
            Cpu::Detached { .. } => Some(false),
            Cpu::Off(_) => None,
        }
    }

    fn set_cpu_attached(&mut self, on: bool) -> Result<(), String> {
        match (&self.cpu, on) {
            (Cpu::Off(why), _) => Err(why.clone()),
            (Cpu::On(_), true) | (Cpu::Detached { .. }, false) => Ok(()),
            // Dropping the collector drops its links (the programs leave the tracepoints)
            // and its maps.
            (Cpu::On(c), false) => {
                self.cpu = Cpu::Detached {
                    capacity: c.capacity(),
                };
                Ok(())
            }
            (&Cpu::Detached { capacity }, true) => {
                let c = CpuCollector::open_for(capacity).map_err(|e| e.to_string())?;
                self.cpu = Cpu::On(c);
                self.fresh = true;
                Ok(())
            }
        }
    }

    fn discard_next_drains(&mut self, n: u32) {
        self.discard = n;
    }

    fn cpu_run_time_ns(&self) -> Option<(u64, u64)> {
        match &self.cpu {
            Cpu::On(c) => c.run_time_ns().ok(),
            Cpu::Detached { .. } | Cpu::Off(_) => None,
        }
    }
}

/// A scripted source: what the next drains return, in order (then "nothing ran, nothing
/// happened"). For benchmarks and tests on generated /proc trees.
/// Clones share the script, so the caller keeps feeding the one the sampler drains.
#[derive(Debug, Default, Clone)]
pub struct ScriptedActivity {
    pub script: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<Activity>>>,
}

impl ScriptedActivity {
    pub fn push(&self, a: Activity) {
        self.script
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(a);
    }
}

impl ActivitySource for ScriptedActivity {
    fn drain(&mut self) -> Activity {
        let next = self
            .script
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        next.unwrap_or(Activity {
            ran: Some(Default::default()),
            events: Some(Vec::new()),
            cgroup_moves: None,
        })
    }
    fn sources(&self) -> Vec<Source> {
        [SourceKind::Ebpf, SourceKind::ProcEvents]
            .into_iter()
            .map(|name| Source {
                name,
                available: true,
                detail: "scripted".into(),
            })
            .collect()
    }
}
