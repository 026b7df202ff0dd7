//! `SimHost`: a modelled machine stepping in fixed ticks, behind the same
//! [`Host`](placer_core::host::Host) interface as the real machine.
//!
//! Each tick (default 1 ms), in order:
//! 1. processes whose start time came are created; periodic tasks release jobs and count
//!    missed deadlines;
//! 2. the baseline scheduler ([`crate::baselines`]) places new and woken tasks and, every
//!    balance interval, balances load; tasks never run outside their allowed CPUs;
//! 3. frequency governors pick each DVFS domain's frequency;
//! 4. network receive processing runs in softirq context on each flow's receive CPU
//!    (its queue's IRQ CPU, or its RPS CPU), ahead of every task ([`crate::network`]);
//! 5. each CPU's remaining time is shared: real-time tasks first, then a max-min fair
//!    share among normal tasks (a fluid model of CFS);
//! 6. tasks progress at the speed [`crate::machine`] models from the previous tick's
//!    co-runners (SMT sibling, LLC domain, node bandwidth) and their memory's node;
//! 7. power is integrated into energy ([`crate::power`]).
//!
//! Samples are built from the state (per-CPU ticks, per-process times, sockets, IRQ and
//! softirq counts, energy in uJ, simulated hardware counters); plans are applied to it.
//! Determinism: all randomness comes from the host's own [`Rng`], seeded at creation.

use crate::machine::{self, Machine};
use crate::params::Params;
use crate::rng::Rng;
use crate::workload::{instance_name, Kind, ProcResult, WorkloadSpec};
use placer_core::host::{Host, HostError};
use placer_core::plan::{Action, ActionReport, Outcome, Plan};
use placer_core::sample::*;
use placer_core::topology::Topology;
use placer_core::CpuSet;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

pub use crate::world::*;

/// Errors building a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{0}")]
    Invalid(String),
}

impl SimHost {
    /// A machine `topo` (named `machine` for its parameter defaults) running `specs`,
    /// under `baseline`, seeded with `seed`.
    pub fn new(
        machine_name: &str,
        mut topo: Topology,
        params: Params,
        specs: Vec<WorkloadSpec>,
        baseline: Baseline,
        seed: u64,
    ) -> Result<SimHost, SimError> {
        for s in &specs {
            s.validate().map_err(SimError::Invalid)?;
            params
                .archetype(&s.class_name())
                .map_err(|e| SimError::Invalid(format!("workload {:?}: {e}", s.name)))?;
        }
        // Give every NIC an address so flows map to their NIC (Topology::nic_for_addr).
        for (k, nic) in topo.nics.iter_mut().enumerate() {
            if nic.addrs.is_empty() {
                nic.addrs.push(IpAddr::V4(Ipv4Addr::new(10, 0, k as u8, 1)));
            }
        }
        let m = Machine::new(machine_name, &topo, &params);
        let n = m.cpus.len();
        if n == 0 {
            return Err(SimError::Invalid("the machine has no online CPU".into()));
        }
        let domains = topo
            .freq_domains
            .iter()
            .map(|d| {
                let max = d
                    .scaling_max_khz
                    .or(d.max_khz)
                    .unwrap_or(params.cpu.big_max_khz);
                let min = d.scaling_min_khz.or(d.min_khz).unwrap_or(max);
                let gov = d.governor.clone().unwrap_or_else(|| "performance".into());
                DomainState {
                    khz: max,
                    governor: gov.clone(),
                    scaling_max_khz: max,
                    scaling_min_khz: min,
                    speed_khz: None,
                    orig: (gov, max, min),
                }
            })
            .collect();
        let tick_ns = params.sim.tick_us.max(1) * 1000;
        let mut host = SimHost {
            cpu: m
                .cpus
                .iter()
                .map(|c| CpuState {
                    khz: c.max_khz,
                    ..Default::default()
                })
                .collect(),
            by_cpu: vec![Vec::new(); n],
            softirq_cycles: vec![0.0; n],
            llc_pressure: vec![0.0; m.n_llc],
            node_bw: vec![0.0; m.node_ids.len()],
            topo,
            m,
            baseline,
            rng: Rng::new(seed),
            time_ns: 0,
            tick_ns,
            specs: Vec::new(),
            procs: Vec::new(),
            tasks: Vec::new(),
            flows: Vec::new(),
            domains,
            irq_orig: BTreeMap::new(),
            energy_j: 0.0,
            power_w: 0.0,
            window: Window::default(),
            // Above Linux's PID_MAX_LIMIT (4,194,304): never a real pid (placer's own included).
            next_pid: 5_000_000,
            last_balance_ns: 0,
            speed: Vec::new(),
            want: Vec::new(),
            params,
        };
        for s in specs {
            host.add_workload(s)?;
        }
        Ok(host)
    }

    /// Adds a workload (its processes start at their `start_s`).
    pub fn add_workload(&mut self, s: WorkloadSpec) -> Result<(), SimError> {
        let spec_idx = self.specs.len();
        let class = self
            .params
            .archetype(&s.class_name())
            .map_err(SimError::Invalid)?
            .clone();
        let all = self.topo.online();
        for i in 0..s.count {
            let pid = self.next_pid;
            self.next_pid += s.threads.max(1) + 1;
            let comm: String = instance_name(&s.name, i).chars().take(15).collect();
            let start_ns = (s.start_s.max(0.0) * 1e9) as u64;
            let allowed = s
                .cpus
                .clone()
                .map(|c| c.intersection(&all))
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| all.clone());
            let pidx = self.procs.len();
            let mut threads = Vec::new();
            let nthreads = if matches!(s.kind, Kind::Cpu) {
                s.threads
            } else {
                1
            };
            for t in 0..nthreads {
                threads.push(self.tasks.len());
                self.tasks.push(Task {
                    tid: pid + t,
                    proc: pidx,
                    allowed: allowed.clone(),
                    cpu: 0,
                    placed: false,
                    left: 0.0,
                    runnable: false,
                    was_runnable: false,
                    util_avg: 0.0,
                    utime_ns: 0.0,
                    stime_ns: 0.0,
                    rt: s.rt,
                    share: 0.0,
                    instructions: 0.0,
                    cycles: 0.0,
                    mem_bytes: 0.0,
                });
            }
            let mut mem_bytes = vec![0.0; self.m.node_ids.len()];
            let mem_placed = if let Some(node) = s.mem_node {
                mem_bytes[self.m.node_pos(node)] = s.mem_mb * 1e6;
                true
            } else {
                false
            };
            let flow = match s.kind {
                Kind::Rx | Kind::Tx => {
                    let nic_name = instance_name(s.nic.as_deref().unwrap_or("eth0"), i);
                    let nic = self
                        .topo
                        .nics
                        .iter()
                        .position(|n| n.name == nic_name)
                        .ok_or_else(|| {
                            SimError::Invalid(format!(
                                "workload {:?}: no NIC {nic_name:?} on this machine",
                                s.name
                            ))
                        })?;
                    let fidx = self.flows.len();
                    let nq = self.topo.nics[nic].queues.len().max(1);
                    let ip = self.topo.nics[nic].addrs[0];
                    let line = self.topo.nics[nic].speed_mbps.unwrap_or(1000) as f64;
                    self.flows.push(Flow {
                        nic,
                        queue: fidx % nq,
                        proc: pidx,
                        rx: s.kind == Kind::Rx,
                        rate_bps: s.rate_mbps.unwrap_or(line) * 1e6 / 8.0,
                        packet_bytes: s.packet_bytes,
                        buffer: 0.0,
                        limit_bps: None,
                        bytes: 0.0,
                        segs: 0.0,
                        inode: 900_000 + fidx as u64,
                        local: SocketAddr::new(ip, 5001 + fidx as u16),
                        remote: SocketAddr::new(
                            IpAddr::V4(Ipv4Addr::new(10, 1, (fidx % 250) as u8, 2)),
                            40_000 + fidx as u16,
                        ),
                        rx_cpu: 0,
                        offered: 0.0,
                    });
                    Some(fidx)
                }
                _ => None,
            };
            self.procs.push(Proc {
                pid,
                start_ticks: start_ns / 10_000_000 + 1 + u64::from(i),
                start_ns,
                comm,
                spec: spec_idx,
                kind: s.kind,
                class: class.clone(),
                class_name: s.class_name(),
                threads,
                orig_allowed: None,
                mem_bytes,
                mem_placed,
                bind: None,
                started: false,
                exited: false,
                flow,
                result: ProcResult {
                    name: instance_name(&s.name, i),
                    kind: format!("{:?}", s.kind).to_lowercase(),
                    ..Default::default()
                },
                serial_left: 0.0,
                run_started_ns: start_ns,
                next_release_ns: start_ns,
                deadline_ns: 0,
            });
        }
        self.specs.push(s);
        Ok(())
    }

    pub fn time_s(&self) -> f64 {
        self.time_ns as f64 / 1e9
    }

    /// Opens the measurement window now: throughput, utilisation and energy are counted
    /// from here.
    pub fn open_window(&mut self) {
        self.window = Window {
            start_ns: self.time_ns,
            busy_ns: 0.0,
            energy_j: 0.0,
        };
        for p in &mut self.procs {
            p.result.work_done_s = 0.0;
            p.result.rx_bytes = 0.0;
            p.result.tx_bytes = 0.0;
            p.result.jobs = 0;
            p.result.deadline_misses = 0;
        }
    }

    /// Whether every finite job (a `cpu` workload with `work_s` and no `repeat`) has
    /// finished; false when there is none.
    pub fn all_done(&self) -> bool {
        let mut any = false;
        for p in &self.procs {
            let s = &self.specs[p.spec];
            if s.kind == Kind::Cpu && s.work_s.is_some() && !s.repeat {
                any = true;
                if !p.exited {
                    return false;
                }
            }
        }
        any
    }

    /// Runs until `until_ns` (or until every job finished, when `stop_when_done`).
    pub fn run_until(&mut self, until_ns: u64, stop_when_done: bool) {
        while self.time_ns < until_ns {
            self.tick();
            if stop_when_done && self.all_done() {
                break;
            }
        }
    }

    fn start_proc(&mut self, pi: usize) {
        let s = &self.specs[self.procs[pi].spec];
        let (kind, work, serial, threads, rt_work) = (
            s.kind,
            s.work_s,
            s.serial_fraction,
            s.threads.max(1),
            s.work_ms / 1000.0,
        );
        let p = &mut self.procs[pi];
        p.started = true;
        p.run_started_ns = self.time_ns;
        match kind {
            Kind::Cpu => {
                let w = work.unwrap_or(f64::INFINITY);
                if serial > 0.0 {
                    p.serial_left = w * serial;
                    for (k, &t) in p.threads.iter().enumerate() {
                        self.tasks[t].left = if k == 0 { w * serial } else { 0.0 };
                    }
                } else {
                    p.serial_left = 0.0;
                    for &t in &p.threads {
                        self.tasks[t].left = w / threads as f64;
                    }
                }
            }
            Kind::Periodic => {
                let _ = rt_work;
            }
            Kind::Rx | Kind::Tx => {}
        }
    }

    /// Step 1: starts, periodic releases and deadlines, runnable flags.
    fn lifecycle(&mut self) {
        let now = self.time_ns;
        for pi in 0..self.procs.len() {
            if self.procs[pi].exited {
                continue;
            }
            if !self.procs[pi].started {
                if self.procs[pi].start_ns > now {
                    continue;
                }
                self.start_proc(pi);
            }
            let spec = &self.specs[self.procs[pi].spec];
            match spec.kind {
                Kind::Periodic => {
                    let period_ns = (spec.period_ms * 1e6) as u64;
                    let deadline_ns = (spec.deadline_ms.unwrap_or(spec.period_ms) * 1e6) as u64;
                    let work = spec.work_ms / 1000.0;
                    let t = self.procs[pi].threads[0];
                    let p = &mut self.procs[pi];
                    if self.tasks[t].left > 0.0 && now >= p.deadline_ns && p.deadline_ns > 0 {
                        // Missed: the rest of the job is dropped. Counted in the window
                        // when the job was released in it.
                        if p.deadline_ns - deadline_ns >= self.window.start_ns {
                            p.result.deadline_misses += 1;
                        }
                        self.tasks[t].left = 0.0;
                    }
                    if now >= p.next_release_ns {
                        if now >= self.window.start_ns {
                            p.result.jobs += 1;
                        }
                        p.deadline_ns = now + deadline_ns;
                        p.next_release_ns += period_ns.max(1);
                        p.run_started_ns = now;
                        self.tasks[t].left = work;
                    }
                    self.tasks[t].runnable = self.tasks[t].left > 0.0;
                }
                Kind::Cpu => {
                    for &t in &self.procs[pi].threads {
                        self.tasks[t].runnable = self.tasks[t].left > 0.0;
                    }
                }
                Kind::Rx | Kind::Tx => {
                    let t = self.procs[pi].threads[0];
                    self.tasks[t].runnable = true;
                }
            }
        }
    }

    /// Advances one tick.
    pub fn tick(&mut self) {
        let dt = self.tick_ns as f64 * 1e-9;
        self.lifecycle();
        crate::baselines::schedule(self);
        crate::power::governors(self);
        // Tasks per CPU.
        for v in &mut self.by_cpu {
            v.clear();
        }
        for (i, t) in self.tasks.iter().enumerate() {
            if t.runnable && t.placed {
                self.by_cpu[t.cpu].push(i);
            }
        }
        for (c, st) in self.cpu.iter_mut().enumerate() {
            st.khz = match self.m.cpus[c].freq_domain {
                Some(d) => self.domains[d].khz,
                None => self.m.cpus[c].max_khz,
            };
        }
        // Step 4: network softirq.
        crate::network::softirq(self, dt);
        // Step 6 inputs: contention from the previous tick.
        self.llc_pressure.iter_mut().for_each(|x| *x = 0.0);
        for (c, st) in self.cpu.iter().enumerate() {
            self.llc_pressure[self.m.cpus[c].llc] += st.pressure;
        }
        let ntasks = self.tasks.len();
        self.speed.resize(ntasks, 0.0);
        self.want.resize(ntasks, 0.0);
        let node_bw_cap = self.params.contention.node_bw_gbps.max(1e-9);
        for ti in 0..ntasks {
            let t = &self.tasks[ti];
            if !(t.runnable && t.placed) {
                self.want[ti] = 0.0;
                continue;
            }
            let c = t.cpu;
            let p = &self.procs[t.proc];
            let a = &p.class;
            let info = &self.m.cpus[c];
            let st = &self.cpu[c];
            let base = machine::base_speed(&self.params, info, a, st.khz);
            let (mut sib_busy, mut sib_gain) = (0.0, 0.0);
            for &s in &info.siblings {
                sib_busy += self.cpu[s].busy;
                sib_gain += self.cpu[s].gain;
            }
            let smt = if sib_busy > 0.0 {
                let g = (a.smt_gain + sib_gain / sib_busy) / 2.0 * self.params.smt.gain_scale;
                machine::smt_factor(sib_busy.min(1.0), g)
            } else {
                1.0
            };
            let sum_p = (self.llc_pressure[info.llc] - st.pressure).max(0.0);
            let llc = machine::llc_slowdown(&self.params, a, sum_p);
            let mf = machine::mem_fraction(&self.params, a);
            let mut mem = 1.0;
            if mf > 0.0 {
                let total: f64 = p.mem_bytes.iter().sum();
                let here = self.m.node_pos(info.node);
                if total > 0.0 {
                    let mut extra = 0.0;
                    for (n, &b) in p.mem_bytes.iter().enumerate() {
                        if b <= 0.0 {
                            continue;
                        }
                        let frac = b / total;
                        let ratio = self.params.numa_ratio(self.m.distance[here][n]);
                        let lat =
                            machine::loaded_latency(&self.params, self.node_bw[n] / node_bw_cap);
                        extra += frac * (ratio * lat - 1.0);
                    }
                    mem = 1.0 + mf * extra;
                }
            }
            self.speed[ti] = base * smt / (llc * mem);
        }
        // Step 5: wants and shares, per CPU.
        let cap_s = dt; // CPU-seconds available per tick on one CPU
        for c in 0..self.m.cpus.len() {
            let avail = (1.0 - self.cpu[c].softirq).max(0.0);
            let khz = self.cpu[c].khz as f64;
            let cycles = khz * 1e3 * dt;
            // Wants.
            for k in 0..self.by_cpu[c].len() {
                let ti = self.by_cpu[c][k];
                let w = crate::network::task_want(self, ti, c, cycles, cap_s);
                self.want[ti] = w;
            }
            // Real-time tasks first, then max-min fair share.
            let mut left = avail;
            let list = std::mem::take(&mut self.by_cpu[c]);
            for &ti in &list {
                if self.tasks[ti].rt {
                    let g = self.want[ti].min(left);
                    self.tasks[ti].share = g;
                    left -= g;
                }
            }
            let mut normal: Vec<usize> = list
                .iter()
                .copied()
                .filter(|&t| !self.tasks[t].rt)
                .collect();
            normal.sort_by(|&a, &b| self.want[a].total_cmp(&self.want[b]));
            let mut remaining = normal.len();
            for &ti in &normal {
                let fair = left / remaining as f64;
                let g = self.want[ti].min(fair);
                self.tasks[ti].share = g;
                left -= g;
                remaining -= 1;
            }
            self.by_cpu[c] = list;
        }
        // Step 6: progress and accounting.
        let tick = self.tick_ns as f64;
        let in_window = self.time_ns >= self.window.start_ns;
        for c in 0..self.m.cpus.len() {
            let (mut busy, mut press, mut gain, mut user, mut sys) = (0.0, 0.0, 0.0, 0.0, 0.0);
            let list = std::mem::take(&mut self.by_cpu[c]);
            let khz = self.cpu[c].khz as f64;
            for &ti in &list {
                let share = self.tasks[ti].share;
                if share <= 0.0 {
                    continue;
                }
                let system = crate::network::progress(self, ti, c, share, dt, in_window);
                let pi = self.tasks[ti].proc;
                let a = &self.procs[pi].class;
                busy += share;
                press += share * a.pressure;
                gain += share * a.smt_gain;
                let t = &mut self.tasks[ti];
                t.cycles += share * dt * khz * 1e3;
                t.mem_bytes += share * dt * a.bw_gbps * 1e9 * self.speed[ti].min(1.0);
                t.instructions += share * dt * khz * 1e3 * a.ipc * self.speed[ti].min(1.0);
                if system {
                    t.stime_ns += share * tick;
                    sys += share;
                } else {
                    t.utime_ns += share * tick;
                    user += share;
                }
            }
            self.by_cpu[c] = list;
            let st = &mut self.cpu[c];
            let soft = st.softirq.min(1.0);
            let total_busy = (busy + soft).min(1.0);
            st.user_ns += user * tick;
            st.system_ns += sys * tick;
            st.softirq_ns += soft * tick;
            st.idle_ns += (1.0 - total_busy) * tick;
            st.busy = busy;
            st.pressure = press;
            st.gain = gain;
            if in_window {
                self.window.busy_ns += total_busy * tick;
            }
        }
        // Node bandwidth demand for the next tick.
        self.node_bw.iter_mut().for_each(|x| *x = 0.0);
        for t in &self.tasks {
            if t.share <= 0.0 {
                continue;
            }
            let p = &self.procs[t.proc];
            let total: f64 = p.mem_bytes.iter().sum();
            if total <= 0.0 {
                continue;
            }
            for (n, &b) in p.mem_bytes.iter().enumerate() {
                self.node_bw[n] += t.share * p.class.bw_gbps * b / total;
            }
        }
        // Averages (PELT-like) and per-task shares reset.
        let decay = 0.5f64.powf(dt * 1000.0 / self.params.sched.util_halflife_ms.max(1e-3));
        for t in &mut self.tasks {
            let info = &self.m.cpus[t.cpu];
            let scale = machine::capacity(&self.params, info) * self.cpu[t.cpu].khz as f64
                / info.max_khz.max(1) as f64;
            t.util_avg = t.util_avg * decay + t.share * scale * (1.0 - decay);
            t.was_runnable = t.runnable;
            t.share = 0.0;
        }
        for (c, st) in self.cpu.iter_mut().enumerate() {
            let inv = st.khz as f64 / self.m.cpus[c].max_khz.max(1) as f64;
            let u = ((st.busy + st.softirq).min(1.0)) * inv;
            st.util_avg = st.util_avg * decay + u * (1.0 - decay);
        }
        // Step 7: power and energy.
        self.power_w = crate::power::node_power_w(self);
        self.energy_j += self.power_w * dt;
        if in_window {
            self.window.energy_j += self.power_w * dt;
        }
        self.time_ns += self.tick_ns;
    }

    /// The topology as the host currently has it (IRQ affinities, RPS, frequency caps).
    pub fn current_topology(&self) -> Topology {
        let mut t = self.topo.clone();
        for (d, st) in t.freq_domains.iter_mut().zip(&self.domains) {
            d.governor = Some(st.governor.clone());
            d.scaling_max_khz = Some(st.scaling_max_khz);
            d.scaling_min_khz = Some(st.scaling_min_khz);
        }
        t
    }

    fn find_proc(&self, key: &ProcKey) -> Option<usize> {
        self.procs.iter().position(|p| {
            p.pid == key.pid && p.start_ticks == key.start_time_ticks && p.started && !p.exited
        })
    }

    fn set_proc_allowed(&mut self, pi: usize, cpus: &CpuSet) {
        for k in 0..self.procs[pi].threads.len() {
            let t = self.procs[pi].threads[k];
            self.tasks[t].allowed = cpus.clone();
        }
    }

    fn apply_one(&mut self, a: &Action) -> Outcome {
        let online = self.topo.online();
        match a {
            Action::PinProcess { proc, cpus, .. } => {
                let Some(pi) = self.find_proc(proc) else {
                    return Outcome::Permanent(format!("pid {} has exited", proc.pid));
                };
                let c = cpus.intersection(&online);
                if c.is_empty() {
                    return Outcome::Permanent(format!("no online CPU in {cpus}"));
                }
                let t0 = self.procs[pi].threads[0];
                if self.tasks[t0].allowed == c {
                    return Outcome::Skipped("already so".into());
                }
                if self.procs[pi].orig_allowed.is_none() {
                    self.procs[pi].orig_allowed = Some(self.tasks[t0].allowed.clone());
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
                let Some(&t) = self.procs[pi]
                    .threads
                    .iter()
                    .find(|&&t| self.tasks[t].tid == *tid)
                else {
                    return Outcome::Permanent(format!("no thread {tid}"));
                };
                if self.procs[pi].orig_allowed.is_none() {
                    self.procs[pi].orig_allowed = Some(self.tasks[t].allowed.clone());
                }
                self.tasks[t].allowed = c;
                Outcome::Done
            }
            Action::RestoreProcess { proc, .. } => {
                let Some(pi) = self.find_proc(proc) else {
                    return Outcome::Permanent(format!("pid {} has exited", proc.pid));
                };
                match self.procs[pi].orig_allowed.take() {
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
                        let cur = self.topo.nics[n].queues[q].irq_cpus.clone();
                        self.irq_orig.entry(*irq).or_insert(cur);
                        self.topo.nics[n].queues[q].irq_cpus = c;
                        self.refresh_rx_cpus(n);
                        Outcome::Done
                    }
                    None => Outcome::Permanent(format!("no IRQ {irq} in this model")),
                }
            }
            Action::RestoreIrq { irq } => {
                match (self.irq_orig.remove(irq), self.queue_of_irq(*irq)) {
                    (Some(orig), Some((n, q))) => {
                        self.topo.nics[n].queues[q].irq_cpus = orig;
                        self.refresh_rx_cpus(n);
                        Outcome::Done
                    }
                    _ => Outcome::Skipped("not changed".into()),
                }
            }
            Action::SetRps { dev, queue, cpus } => {
                let Some(n) = self.topo.nics.iter().position(|x| &x.name == dev) else {
                    return Outcome::Permanent(format!("no device {dev}"));
                };
                let Some(q) = self.topo.nics[n]
                    .queues
                    .iter()
                    .enumerate()
                    .position(|(i, x)| &x.name == queue || *queue == format!("rx-{i}"))
                else {
                    return Outcome::Permanent(format!("no queue {queue} on {dev}"));
                };
                self.topo.nics[n].queues[q].rps_cpus = cpus.intersection(&online);
                self.refresh_rx_cpus(n);
                Outcome::Done
            }
            Action::CapFrequency { domain, max_khz } => match self.domain_idx(*domain) {
                Some(d) => {
                    let st = &mut self.domains[d];
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
                    let st = &mut self.domains[d];
                    st.governor = governor.clone();
                    st.speed_khz = *speed_khz;
                    Outcome::Done
                }
                None => Outcome::Permanent(format!("no cpufreq domain {domain} in this model")),
            },
            Action::RestoreFrequency { domain } => match self.domain_idx(*domain) {
                Some(d) => {
                    let st = &mut self.domains[d];
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
                for f in &mut self.flows {
                    let on_dev = self.topo.nics[f.nic].name == *dev;
                    let matches = if flows.is_empty() {
                        self.procs[f.proc].comm == *app
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
                for f in &mut self.flows {
                    if self.topo.nics[f.nic].name == *dev && self.procs[f.proc].comm == *app {
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
                    .filter(|n| self.m.node_ids.contains(n))
                    .map(|&n| self.m.node_pos(n))
                    .collect();
                if pos.is_empty() {
                    return Outcome::Permanent(format!("no such node in {nodes:?}"));
                }
                let p = &mut self.procs[pi];
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
                self.procs[pi].bind = None;
                Outcome::Done
            }
        }
    }

    fn queue_of_irq(&self, irq: u32) -> Option<(usize, usize)> {
        for (n, nic) in self.topo.nics.iter().enumerate() {
            if let Some(q) = nic.queues.iter().position(|q| q.irq == Some(irq)) {
                return Some((n, q));
            }
        }
        None
    }

    fn refresh_rx_cpus(&mut self, n: usize) {
        let nic = &mut self.topo.nics[n];
        nic.rx_cpus = nic.queues.iter().fold(CpuSet::new(), |a, q| {
            a.union(&q.irq_cpus).union(&q.rps_cpus)
        });
    }

    fn domain_idx(&self, id: u32) -> Option<usize> {
        self.topo.freq_domains.iter().position(|d| d.id == id)
    }

    fn ticks(&self, ns: f64) -> u64 {
        (ns / (1e9 / self.params.sim.clk_tck.max(1) as f64)) as u64
    }

    /// The raw sample of the current state.
    pub fn build_sample(&self, req: SampleRequest) -> Sample {
        let cpu_ids: Vec<u32> = self.m.cpus.iter().map(|c| c.id).collect();
        let cpus = self
            .cpu
            .iter()
            .zip(&self.m.cpus)
            .map(|(st, info)| CpuTimes {
                cpu: info.id,
                user: self.ticks(st.user_ns),
                system: self.ticks(st.system_ns),
                softirq: self.ticks(st.softirq_ns),
                idle: self.ticks(st.idle_ns),
                ..Default::default()
            })
            .collect();
        let mut procs = Vec::new();
        for p in &self.procs {
            if !p.started || p.exited {
                continue;
            }
            let t0 = &self.tasks[p.threads[0]];
            let (ut, st) = p.threads.iter().fold((0.0, 0.0), |(u, s), &t| {
                (u + self.tasks[t].utime_ns, s + self.tasks[t].stime_ns)
            });
            let threads = if req.threads {
                p.threads
                    .iter()
                    .map(|&t| {
                        let t = &self.tasks[t];
                        ThreadSample {
                            tid: t.tid,
                            comm: p.comm.as_str().into(),
                            state: if t.runnable { 'R' } else { 'S' },
                            utime_ticks: self.ticks(t.utime_ns),
                            stime_ticks: self.ticks(t.stime_ns),
                            last_cpu: t.placed.then(|| self.m.cpus[t.cpu].id),
                            allowed: t.allowed.clone(),
                        }
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let counters = if req.counters {
                self.counters_of(p)
            } else {
                Vec::new()
            };
            let numa_pages = if req.numa_pages {
                p.mem_bytes
                    .iter()
                    .enumerate()
                    .map(|(n, b)| (self.m.node_ids[n], (b / SIM_PAGE_BYTES as f64) as u64))
                    .collect()
            } else {
                BTreeMap::new()
            };
            procs.push(ProcSample {
                pid: p.pid,
                start_time_ticks: p.start_ticks,
                comm: p.comm.clone(),
                state: if p.threads.iter().any(|&t| self.tasks[t].runnable) {
                    'R'
                } else {
                    'S'
                },
                ppid: 1,
                uid: Some(1000),
                utime_ticks: self.ticks(ut),
                stime_ticks: self.ticks(st),
                last_cpu: t0.placed.then(|| self.m.cpus[t0.cpu].id),
                allowed: t0.allowed.clone(),
                cgroup: format!("/placer-sim/{}", self.specs[p.spec].name.replace("{i}", "")),
                num_threads: p.threads.len() as u32,
                kernel_thread: false,
                threads,
                socket_inodes: p
                    .flow
                    .map(|f| vec![self.flows[f].inode])
                    .unwrap_or_default(),
                counters,
                numa_pages,
            });
        }
        let sockets = self
            .flows
            .iter()
            .filter(|f| self.procs[f.proc].started && !self.procs[f.proc].exited)
            .map(|f| SocketSample {
                inode: f.inode,
                local: f.local,
                remote: f.remote,
                state: 1,
                bytes_acked: if f.rx { 0 } else { f.bytes as u64 },
                bytes_received: if f.rx { f.bytes as u64 } else { 0 },
                segs_in: if f.rx {
                    f.segs as u64
                } else {
                    (f.segs / 2.0) as u64
                },
                segs_out: if f.rx {
                    (f.segs / 2.0) as u64
                } else {
                    f.segs as u64
                },
                // Modelled ACKs carry no payload: data segments are the payload segments.
                data_segs_in: if f.rx { f.segs as u64 } else { 0 },
                data_segs_out: if f.rx { 0 } else { f.segs as u64 },
            })
            .collect();
        let mut irqs = Vec::new();
        for nic in &self.topo.nics {
            for q in &nic.queues {
                let Some(irq) = q.irq else { continue };
                irqs.push(IrqSample {
                    irq: irq.to_string(),
                    counts: vec![0; cpu_ids.len()],
                    cpu_ids: cpu_ids.clone(),
                    name: q.name.clone(),
                });
            }
        }
        // Per-queue interrupt counts live in the flows' receive CPUs' totals; attribute
        // each CPU's count to the queues whose IRQ points there.
        for (c, st) in self.cpu.iter().enumerate() {
            let id = self.m.cpus[c].id;
            let owners: Vec<usize> = irqs
                .iter()
                .enumerate()
                .filter(|(_, i)| {
                    self.queue_of_irq(i.irq.parse().unwrap_or(u32::MAX))
                        .is_some_and(|(n, q)| {
                            self.topo.nics[n].queues[q].irq_cpus.first() == Some(id)
                        })
                })
                .map(|(k, _)| k)
                .collect();
            if owners.is_empty() {
                continue;
            }
            let each = st.irqs / owners.len() as f64;
            for k in owners {
                irqs[k].counts[c] = each as u64;
            }
        }
        let softirqs = self
            .cpu
            .iter()
            .zip(&self.m.cpus)
            .map(|(st, info)| SoftirqCounts {
                cpu: info.id,
                net_rx: st.net_rx as u64,
                net_tx: 0,
            })
            .collect();
        let mut energy = vec![EnergyCounter {
            domain: "sim:node".into(),
            energy_uj: (self.energy_j * 1e6) as u64,
            max_range_uj: None,
        }];
        energy.truncate(1);
        let mut nics = Vec::new();
        let mut cpu_freqs = Vec::new();
        if req.nics {
            nics = self
                .topo
                .nics
                .iter()
                .enumerate()
                .map(|(n, nic)| {
                    let mut c = placer_core::sample::NicCounters {
                        name: nic.name.clone(),
                        ..Default::default()
                    };
                    for f in self.flows.iter().filter(|f| f.nic == n) {
                        if f.rx {
                            c.rx_bytes += f.bytes as u64;
                            c.rx_packets += f.segs as u64;
                        } else {
                            c.tx_bytes += f.bytes as u64;
                            c.tx_packets += f.segs as u64;
                        }
                    }
                    c
                })
                .collect();
            if !self.topo.freq_domains.is_empty() {
                cpu_freqs = self
                    .cpu
                    .iter()
                    .zip(&self.m.cpus)
                    .map(|(st, info)| placer_core::sample::CpuFreq {
                        cpu: info.id,
                        khz: st.khz,
                    })
                    .collect();
            }
        }
        Sample {
            time_ns: self.time_ns,
            clk_tck: self.params.sim.clk_tck,
            cpus,
            procs,
            sockets,
            irqs,
            softirqs,
            energy,
            power: Vec::new(),
            nics,
            cpu_freqs,
            page_bytes: SIM_PAGE_BYTES,
            // The simulator's processes are all known: none exits unseen.
            exited: Vec::new(),
        }
    }

    fn counters_of(&self, p: &Proc) -> Vec<CounterValue> {
        let (mut ins, mut cyc, mut bytes) = (0.0, 0.0, 0.0);
        for &t in &p.threads {
            ins += self.tasks[t].instructions;
            cyc += self.tasks[t].cycles;
            bytes += self.tasks[t].mem_bytes;
        }
        let a = &p.class;
        let refs = ins / 1000.0 * a.llc_refs_per_kinstr;
        let enabled = (self.time_ns - p.run_started_ns.min(self.time_ns)).max(1);
        let mk = |event: CounterEvent, v: f64| CounterValue {
            event,
            value: v as u64,
            time_enabled_ns: enabled,
            time_running_ns: enabled,
        };
        vec![
            mk(CounterEvent::Instructions, ins),
            mk(CounterEvent::Cycles, cyc),
            mk(CounterEvent::LlcReferences, refs),
            mk(
                CounterEvent::LlcMisses,
                refs * (machine::mem_fraction(&self.params, a)).max(0.05),
            ),
            mk(
                CounterEvent::Raw {
                    name: "offcore_requests_buffer_full".into(),
                    config: 0,
                },
                ins / 1000.0 * a.sq_full_per_kinstr,
            ),
            // Seed 003's memory bandwidth (64 x IMC reads + writes), as bytes.
            mk(
                CounterEvent::Raw {
                    name: "mem_bandwidth_bytes".into(),
                    config: 0,
                },
                bytes,
            ),
        ]
    }
}

impl Host for SimHost {
    fn topology(&mut self) -> Result<Topology, HostError> {
        Ok(self.current_topology())
    }

    fn sources(&mut self) -> SourceStatus {
        let src = |name: &str, available: bool, detail: &str| Source {
            name: name.into(),
            available,
            detail: detail.into(),
        };
        let dvfs = !self.topo.freq_domains.is_empty();
        SourceStatus {
            sources: vec![
                src("proc", true, "simulated /proc"),
                src("sock_diag", true, "simulated sockets"),
                src("interrupts", true, "simulated /proc/interrupts"),
                src(
                    "perf_hw",
                    true,
                    "simulated counters (CAL C archetype rates)",
                ),
                src("rapl", true, "simulated whole-node energy meter (sim:node)"),
                src(
                    "cpufreq",
                    dvfs,
                    if dvfs {
                        "simulated DVFS domains"
                    } else {
                        "this machine model has no DVFS domains"
                    },
                ),
            ],
        }
    }

    fn sample(&mut self, req: SampleRequest) -> Result<Sample, HostError> {
        Ok(self.build_sample(req))
    }

    fn apply(&mut self, plan: &Plan, dry_run: bool) -> Vec<ActionReport> {
        plan.actions
            .iter()
            .map(|pa| ActionReport {
                planned: pa.clone(),
                outcome: if dry_run {
                    Outcome::Skipped("dry run".into())
                } else {
                    self.apply_one(&pa.action)
                },
            })
            .collect()
    }
}
