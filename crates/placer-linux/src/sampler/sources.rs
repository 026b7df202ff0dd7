//! Where a sample's figures come from: the open `proc` directory and the files kept open
//! in it, the kernel's event sources, hardware counters and energy sensors. Probed once
//! ([`Sources::probe`]: what exists, and why the others do not), opened once; each sample
//! borrows them as [`Open`].

use super::reads::Reads;
use super::sockets::SocketReader;
use crate::activity::ActivitySource;
use crate::energy::EnergySource;
use crate::error::{LinuxError, Result};
use crate::perf::{CounterSource, PerfCounters};
use crate::sys::{Dir, Pins};
use placer_core::sample::{SampleRequest, Source, SourceKind, SourceStatus};
use std::path::{Path, PathBuf};

pub(super) struct Sources {
    pub(super) root: PathBuf,
    pub(super) proc_dir: PathBuf,
    pub(super) clk_tck: u32,
    /// The open `proc` directory (opened at the first sample: a wrong root fails it).
    proc: Option<Dir>,
    /// The machine-wide files every sample reads, kept open (this machine's root only).
    pins: Option<Pins>,
    energy: Option<EnergySource>,
    pub(super) counters: Option<Box<dyn CounterSource>>,
    /// The kernel's event sources (eBPF CPU collector, process-events connector), opened at
    /// the probe when `kernel_events` is on.
    pub(super) activity: Option<Box<dyn ActivitySource>>,
    pub(super) kernel_events: bool,
    /// What the probe found; `None`: probe again before the next sample.
    pub(super) status: Option<SourceStatus>,
    /// Rule 9: whether `/proc/loadavg`'s last pid is this root's (the real `/`, in the pid
    /// namespace its /proc shows); decided at the probe.
    pub(super) last_pid_ours: bool,
}

/// The sources, borrowed for one sample.
pub(super) struct Open<'a> {
    /// What every reader of the sample uses (the open `proc`, its kept-open files).
    pub rd: Reads<'a>,
    pub activity: Option<&'a mut (dyn ActivitySource + 'static)>,
    pub counters: Option<&'a mut (dyn CounterSource + 'static)>,
    pub energy: Option<&'a EnergySource>,
    pub root: &'a Path,
    pub last_pid_ours: bool,
}

/// A machine-wide source's line: `path` when its file exists, else why not.
fn file_source(name: SourceKind, path: &Path) -> Source {
    let available = path.exists();
    Source {
        name,
        available,
        detail: match available {
            true => path.display().to_string(),
            false => format!("{} missing", path.display()),
        },
    }
}

impl Sources {
    pub(super) fn new(root: &Path) -> Sources {
        let real_root = root == Path::new("/");
        Sources {
            root: root.to_path_buf(),
            proc_dir: root.join("proc"),
            clk_tck: crate::sys::clock_ticks_per_s(),
            proc: None,
            pins: real_root.then(Pins::default),
            energy: None,
            counters: None,
            activity: None,
            kernel_events: real_root,
            status: None,
            last_pid_ours: false,
        }
    }

    /// This machine's `/` (sock_diag, the kernel's events, `sched_getaffinity` and perf see
    /// its processes).
    pub(super) fn real_root(&self) -> bool {
        self.root == Path::new("/")
    }

    /// Finds which optional sources exist (once; again after a setter forgets the status).
    pub(super) fn probe(&mut self, sockets: &mut SocketReader) {
        if self.status.is_some() {
            return;
        }
        // The proc source names the directory; its `stat` is what must be there.
        let mut proc_src = file_source(SourceKind::Proc, &self.proc_dir.join("stat"));
        if proc_src.available {
            proc_src.detail = self.proc_dir.display().to_string();
        }
        let mut sources = vec![proc_src];
        sources.push(file_source(
            SourceKind::Interrupts,
            &self.proc_dir.join("interrupts"),
        ));
        sources.push(file_source(
            SourceKind::Softirqs,
            &self.proc_dir.join("softirqs"),
        ));
        sources.push(self.probe_sockets(sockets));
        if self.counters.is_none() && self.real_root() {
            // Seed 003's events for this CPU generation (pmu_events), else the default set.
            let events = crate::pmu_events::resolve(&self.root)
                .map(|r| r.events)
                .unwrap_or_else(|_| crate::perf::default_events());
            self.counters = Some(Box::new(PerfCounters::probe(events)));
        }
        sources.push(match &self.counters {
            Some(c) => c.status(),
            None => Source {
                name: SourceKind::PerfHw,
                available: false,
                detail: format!("no counters for root {}", self.root.display()),
            },
        });
        let (energy, es) = EnergySource::probe(&self.root);
        self.energy = Some(energy);
        sources.extend(es);
        self.probe_activity(&mut sources);
        // /proc/loadavg gives the last pid of the reader's pid namespace: rule 9 holds
        // only where that is the namespace this /proc lists (its `self` is this process).
        self.last_pid_ours = self.real_root()
            && std::fs::read_link(self.proc_dir.join("self"))
                .ok()
                .and_then(|p| p.to_str()?.parse::<u32>().ok())
                == Some(std::process::id());
        self.status = Some(SourceStatus { sources });
    }

    /// sock_diag, with the kernel's socket marks on this machine's root with its events.
    fn probe_sockets(&self, sockets: &mut SocketReader) -> Source {
        let marks = self.kernel_events && self.real_root();
        match sockets.probe(marks) {
            Some(Ok(tcp)) => Source {
                name: SourceKind::SockDiag,
                available: true,
                detail: match tcp.marks_missing() {
                    None => format!(
                        "TCP sockets of this network namespace (IPv4, IPv6); between dumps only those a segment reached are read again ({}, {})",
                        crate::bpf::TCP_MOVES_PROG_NAME,
                        crate::bpf::TCP_STATES_PROG_NAME
                    ),
                    Some(why) => format!(
                        "TCP sockets of this network namespace (IPv4, IPv6), all dumped when a segment moved (socket marks: {why})"
                    ),
                },
            },
            Some(Err(e)) => Source {
                name: SourceKind::SockDiag,
                available: false,
                detail: format!("netlink sock_diag: {e}"),
            },
            None => Source {
                name: SourceKind::SockDiag,
                available: false,
                detail: format!(
                    "not used for root {} (sock_diag sees the host's kernel)",
                    self.root.display()
                ),
            },
        }
    }

    /// The kernel's event sources: opened on this machine's root, or the scripted ones
    /// given, or none (and why).
    fn probe_activity(&mut self, sources: &mut Vec<Source>) {
        if self.kernel_events && self.activity.is_none() && self.real_root() {
            let k = crate::activity::KernelActivity::open();
            sources.extend(k.sources());
            if k.any() {
                self.activity = Some(Box::new(k));
            }
        } else if let Some(a) = &self.activity {
            sources.extend(a.sources());
        } else {
            let why = match self.kernel_events {
                true => format!("not for root {}", self.root.display()),
                false => "off (kernel_events = false)".to_string(),
            };
            for name in [SourceKind::Ebpf, SourceKind::ProcEvents] {
                sources.push(Source {
                    name,
                    available: false,
                    detail: why.clone(),
                });
            }
        }
    }

    /// The event sources' lines in the status, said again (the CPU collector was attached
    /// or detached).
    pub(super) fn refresh_activity_status(&mut self) {
        let (Some(st), Some(a)) = (&mut self.status, &self.activity) else {
            return;
        };
        for s in a.sources() {
            if let Some(e) = st.sources.iter_mut().find(|e| e.name == s.name) {
                *e = s;
            }
        }
    }

    /// The sources for one sample: the `proc` directory opened if it was not (an error
    /// when the root has none), every handle borrowed.
    pub(super) fn open<'a>(
        &'a mut self,
        buf: &'a mut String,
        req: SampleRequest,
        timed: bool,
    ) -> Result<Open<'a>> {
        let dir = match self.proc.take() {
            Some(d) => d,
            None => Dir::open(&self.proc_dir).map_err(|e| LinuxError::io(&self.proc_dir, e))?,
        };
        let proc_ = self.proc.insert(dir);
        Ok(Open {
            rd: Reads {
                root: &self.root,
                proc_,
                proc_dir: &self.proc_dir,
                pins: self.pins.as_mut(),
                buf,
                req,
                stats: Default::default(),
                cgroup_moves: None,
                timed,
            },
            activity: self.activity.as_deref_mut(),
            counters: self.counters.as_deref_mut(),
            energy: self.energy.as_ref(),
            root: &self.root,
            last_pid_ours: self.last_pid_ours,
        })
    }
}
