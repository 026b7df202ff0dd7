//! Plans applied to the simulated machine: each action changes the world state the way
//! the real knob would (affinity, IRQ affinity, RPS, frequency caps, bandwidth limits,
//! memory placement), with the outcome the real actuator would report.

use crate::world::*;
use placer_core::plan::{Action, Outcome};
use placer_core::sample::ProcKey;
use placer_core::CpuSet;

impl SimHost {
    pub(crate) fn find_proc(&self, key: &ProcKey) -> Option<usize> {
        self.world.procs.iter().position(|p| {
            p.pid == key.pid && p.start_ticks == key.start_time_ticks && p.started && !p.exited
        })
    }

    pub(crate) fn set_proc_allowed(&mut self, pi: usize, cpus: &CpuSet) {
        for k in 0..self.world.procs[pi].threads.len() {
            let t = self.world.procs[pi].threads[k];
            self.world.tasks[t].allowed = cpus.clone();
        }
    }

    pub(crate) fn apply_one(&mut self, a: &Action) -> Outcome {
        let online = self.world.topo.online();
        match a {
            Action::PinProcess { proc, cpus, .. } => {
                let Some(pi) = self.find_proc(proc) else {
                    return Outcome::Permanent(format!("pid {} has exited", proc.pid));
                };
                let c = cpus.intersection(&online);
                if c.is_empty() {
                    return Outcome::Permanent(format!("no online CPU in {cpus}"));
                }
                let t0 = self.world.procs[pi].threads[0];
                if self.world.tasks[t0].allowed == c {
                    return Outcome::Skipped("already so".into());
                }
                if self.world.procs[pi].orig_allowed.is_none() {
                    self.world.procs[pi].orig_allowed = Some(self.world.tasks[t0].allowed.clone());
                }
                self.set_proc_allowed(pi, &c);
                Outcome::Done
            }
            Action::PinThread { proc, tid, cpus } => {
                let Some(pi) = self.find_proc(proc) else {
                    return Outcome::Permanent(format!("pid {} has exited", proc.pid));
                };
                let c = cpus.intersection(&online);
                if c.is_empty() {
                    return Outcome::Permanent(format!("no online CPU in {cpus}"));
                }
                let Some(&t) = self.world.procs[pi]
                    .threads
                    .iter()
                    .find(|&&t| self.world.tasks[t].tid == *tid)
                else {
                    return Outcome::Permanent(format!("no thread {tid}"));
                };
                if self.world.procs[pi].orig_allowed.is_none() {
                    self.world.procs[pi].orig_allowed = Some(self.world.tasks[t].allowed.clone());
                }
                self.world.tasks[t].allowed = c;
                Outcome::Done
            }
            Action::RestoreProcess { proc, .. } => {
                let Some(pi) = self.find_proc(proc) else {
                    return Outcome::Permanent(format!("pid {} has exited", proc.pid));
                };
                match self.world.procs[pi].orig_allowed.take() {
                    Some(orig) => {
                        self.set_proc_allowed(pi, &orig);
                        Outcome::Done
                    }
                    None => Outcome::Skipped("not pinned".into()),
                }
            }
            Action::SetIrqAffinity { irq, cpus } => {
                let c = cpus.intersection(&online);
                if c.is_empty() {
                    return Outcome::Permanent(format!("no online CPU in {cpus}"));
                }
                match self.queue_of_irq(*irq) {
                    Some((n, q)) => {
                        let cur = self.world.topo.nics[n].queues[q].irq_cpus.clone();
                        self.world.irq_orig.entry(*irq).or_insert(cur);
                        self.world.topo.nics[n].queues[q].irq_cpus = c;
                        self.refresh_rx_cpus(n);
                        Outcome::Done
                    }
                    None => Outcome::Permanent(format!("no IRQ {irq} in this model")),
                }
            }
            Action::RestoreIrq { irq } => {
                match (self.world.irq_orig.remove(irq), self.queue_of_irq(*irq)) {
                    (Some(orig), Some((n, q))) => {
                        self.world.topo.nics[n].queues[q].irq_cpus = orig;
                        self.refresh_rx_cpus(n);
                        Outcome::Done
                    }
                    _ => Outcome::Skipped("not changed".into()),
                }
            }
            Action::SetRps { dev, queue, cpus } => {
                let Some(n) = self.world.topo.nics.iter().position(|x| &x.name == dev) else {
                    return Outcome::Permanent(format!("no device {dev}"));
                };
                let Some(q) = self.world.topo.nics[n]
                    .queues
                    .iter()
                    .enumerate()
                    .position(|(i, x)| &x.name == queue || *queue == format!("rx-{i}"))
                else {
                    return Outcome::Permanent(format!("no queue {queue} on {dev}"));
                };
                self.world.topo.nics[n].queues[q].rps_cpus = cpus.intersection(&online);
                self.refresh_rx_cpus(n);
                Outcome::Done
            }
            Action::CapFrequency { domain, max_khz } => match self.domain_idx(*domain) {
                Some(d) => {
                    let st = &mut self.world.domains[d];
                    st.scaling_max_khz = (*max_khz).max(st.scaling_min_khz);
                    Outcome::Done
                }
                None => Outcome::Permanent(format!("no cpufreq domain {domain} in this model")),
            },
            Action::SetGovernor {
                domain,
                governor,
                speed_khz,
            } => match self.domain_idx(*domain) {
                Some(d) => {
                    let known = [
                        "performance",
                        "powersave",
                        "schedutil",
                        "userspace",
                        "ondemand",
                    ];
                    if !known.contains(&governor.as_str()) {
                        return Outcome::Permanent(format!("no governor {governor}"));
                    }
                    let st = &mut self.world.domains[d];
                    st.governor = governor.clone();
                    st.speed_khz = *speed_khz;
                    Outcome::Done
                }
                None => Outcome::Permanent(format!("no cpufreq domain {domain} in this model")),
            },
            Action::RestoreFrequency { domain } => match self.domain_idx(*domain) {
                Some(d) => {
                    let st = &mut self.world.domains[d];
                    (st.governor, st.scaling_max_khz, st.scaling_min_khz) = st.orig.clone();
                    st.speed_khz = None;
                    Outcome::Done
                }
                None => Outcome::Permanent(format!("no cpufreq domain {domain} in this model")),
            },
            Action::LimitBandwidth {
                app,
                dev,
                rate_bytes_per_s,
                flows,
                ..
            } => {
                let mut hit = 0;
                for f in &mut self.world.flows {
                    let on_dev = self.world.topo.nics[f.nic].name == *dev;
                    let matches = if flows.is_empty() {
                        self.world.procs[f.proc].comm == *app
                    } else {
                        flows
                            .iter()
                            .any(|m| m.local == f.local && m.remote == f.remote)
                    };
                    if on_dev && matches {
                        f.limit_bps = Some(*rate_bytes_per_s as f64);
                        hit += 1;
                    }
                }
                if hit == 0 {
                    Outcome::Permanent(format!("no flow of {app} on {dev}"))
                } else {
                    Outcome::Done
                }
            }
            Action::RemoveLimit { app, dev } => {
                for f in &mut self.world.flows {
                    if self.world.topo.nics[f.nic].name == *dev
                        && self.world.procs[f.proc].comm == *app
                    {
                        f.limit_bps = None;
                    }
                }
                Outcome::Done
            }
            Action::BindMemory {
                proc,
                nodes,
                migrate_max_bytes,
            } => {
                let Some(pi) = self.find_proc(proc) else {
                    return Outcome::Permanent(format!("pid {} has exited", proc.pid));
                };
                let pos: Vec<usize> = nodes
                    .iter()
                    .filter(|n| self.world.m.node_ids.contains(n))
                    .map(|&n| self.world.m.node_pos(n))
                    .collect();
                if pos.is_empty() {
                    return Outcome::Permanent(format!("no such node in {nodes:?}"));
                }
                let p = &mut self.world.procs[pi];
                let mut budget = *migrate_max_bytes as f64;
                for n in 0..p.mem_bytes.len() {
                    if pos.contains(&n) || budget <= 0.0 {
                        continue;
                    }
                    let mv = p.mem_bytes[n].min(budget);
                    p.mem_bytes[n] -= mv;
                    p.mem_bytes[pos[0]] += mv;
                    budget -= mv;
                }
                p.bind = Some(pos);
                Outcome::Done
            }
            Action::RestoreMemory { proc } => {
                let Some(pi) = self.find_proc(proc) else {
                    return Outcome::Permanent(format!("pid {} has exited", proc.pid));
                };
                self.world.procs[pi].bind = None;
                Outcome::Done
            }
        }
    }

    pub(crate) fn queue_of_irq(&self, irq: u32) -> Option<(usize, usize)> {
        for (n, nic) in self.world.topo.nics.iter().enumerate() {
            if let Some(q) = nic.queues.iter().position(|q| q.irq == Some(irq)) {
                return Some((n, q));
            }
        }
        None
    }

    pub(crate) fn refresh_rx_cpus(&mut self, n: usize) {
        let nic = &mut self.world.topo.nics[n];
        nic.rx_cpus = nic.queues.iter().fold(CpuSet::new(), |a, q| {
            a.union(&q.irq_cpus).union(&q.rps_cpus)
        });
    }

    pub(crate) fn domain_idx(&self, id: u32) -> Option<usize> {
        self.world.topo.freq_domains.iter().position(|d| d.id == id)
    }
}

/// The simulator's journal: what it keeps the original of (a process's and an IRQ's
/// affinity), as the real host's journal lists them, so the agent's start and stop restore
/// through a `SimHost` as they do through the real host.
impl SimHost {
    pub(crate) fn journal_entries(&self) -> Vec<placer_core::journal::Entry> {
        use placer_core::journal::{Entry, Knob};
        let procs = self
            .world
            .procs
            .iter()
            .filter(|p| !p.exited)
            .filter_map(|p| {
                let orig = p.orig_allowed.as_ref()?;
                Some(Entry {
                    knob: Knob::ProcAffinity {
                        pid: p.pid,
                        start_time_ticks: p.start_ticks,
                    },
                    previous: orig.to_string(),
                    applied: self.world.tasks[*p.threads.first()?].allowed.to_string(),
                    label: p.comm.clone(),
                    since_unix_s: 0,
                    thread_previous: Default::default(),
                    transit: None,
                })
            });
        let irqs = self.world.irq_orig.iter().filter_map(|(irq, orig)| {
            let (n, q) = self.queue_of_irq(*irq)?;
            Some(Entry {
                knob: Knob::IrqAffinity { irq: *irq },
                previous: orig.to_string(),
                applied: self.world.topo.nics[n].queues[q].irq_cpus.to_string(),
                label: String::new(),
                since_unix_s: 0,
                thread_previous: Default::default(),
                transit: None,
            })
        });
        procs.chain(irqs).collect()
    }

    /// Puts every journaled knob back, through the same paths as the restore actions.
    pub(crate) fn restore_journal(
        &mut self,
        which: &dyn Fn(&placer_core::journal::Entry) -> bool,
    ) -> Vec<(placer_core::journal::Entry, placer_core::journal::Restored)> {
        use placer_core::journal::{Knob, Restored};
        let entries = self.journal_entries();
        entries
            .into_iter()
            .filter(|e| which(e))
            .map(|e| {
                let action = match &e.knob {
                    Knob::ProcAffinity {
                        pid,
                        start_time_ticks,
                    } => Action::RestoreProcess {
                        proc: ProcKey {
                            pid: *pid,
                            start_time_ticks: *start_time_ticks,
                        },
                        comm: e.label.clone(),
                        via: None,
                    },
                    Knob::IrqAffinity { irq } => Action::RestoreIrq { irq: *irq },
                    other => {
                        let r = Restored::Failed(format!("the simulator does not journal {other}"));
                        return (e, r);
                    }
                };
                let r = match self.apply_one(&action) {
                    Outcome::Done => Restored::Restored,
                    Outcome::Skipped(w) | Outcome::Permanent(w) => Restored::Gone(w),
                    Outcome::Transient(w) => Restored::Failed(w),
                };
                (e, r)
            })
            .collect()
    }
}
