//! One tick of the simulated machine (see `host`'s module doc for the order of its steps):
//! process lifecycle, scheduling, governors, network receive processing, CPU sharing,
//! progress and energy; and running ticks until a time or until every process is done.

use crate::machine;
use crate::workload::Kind;
use crate::world::*;

/// Fraction of the way a node's memory-controller load moves toward the bandwidth moved
/// in the last tick. A numerical device, not a time constant of the hardware: relaxing by
/// a fraction a is stable while the loop gain g (how much the moved bandwidth falls per
/// unit of load, through the loaded-latency curve's slope) keeps a (1 + g) < 2. The
/// steepest segment of CAL C's curve (1.56x at 0.84 to 3.8x at 1.0) gives g of about 6
/// per unit of demand over capacity; 0.1 allows g up to 19, and settles in tens of ticks.
const BW_RELAXATION: f64 = 0.1;

impl SimHost {
    pub fn time_s(&self) -> f64 {
        self.world.time_ns as f64 / 1e9
    }

    /// Opens the measurement window now: throughput, utilisation and energy are counted
    /// from here.
    pub fn open_window(&mut self) {
        self.world.window = Window {
            start_ns: self.world.time_ns,
            busy_ns: 0.0,
            energy_j: 0.0,
        };
        for p in &mut self.world.procs {
            p.result.work_done_s = 0.0;
            p.result.rx_bytes = 0.0;
            p.result.tx_bytes = 0.0;
            p.result.jobs = 0;
            p.result.deadline_misses = 0;
        }
    }

    /// How long the measurement window has been open, s (at least 1 ns, so rates over it
    /// stay finite).
    pub fn window_s(&self) -> f64 {
        ((self.world.time_ns - self.world.window.start_ns) as f64 / 1e9).max(1e-9)
    }

    /// Whether every finite job (a `cpu` workload with `work_s` and no `repeat`) has
    /// finished; false when there is none.
    pub fn all_done(&self) -> bool {
        let mut any = false;
        for p in &self.world.procs {
            let s = &self.world.specs[p.spec];
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
        while self.world.time_ns < until_ns {
            self.tick();
            if stop_when_done && self.all_done() {
                break;
            }
        }
    }

    pub(crate) fn start_proc(&mut self, pi: usize) {
        let s = &self.world.specs[self.world.procs[pi].spec];
        let (kind, work, serial, threads, rt_work) = (
            s.kind,
            s.work_s,
            s.serial_fraction,
            s.threads.max(1),
            s.work_ms / 1000.0,
        );
        let p = &mut self.world.procs[pi];
        p.started = true;
        p.run_started_ns = self.world.time_ns;
        match kind {
            Kind::Cpu => {
                let w = work.unwrap_or(f64::INFINITY);
                if serial > 0.0 {
                    p.serial_left = w * serial;
                    for (k, &t) in p.threads.iter().enumerate() {
                        self.world.tasks[t].left = if k == 0 { w * serial } else { 0.0 };
                    }
                } else {
                    p.serial_left = 0.0;
                    for &t in &p.threads {
                        self.world.tasks[t].left = w / threads as f64;
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
    pub(crate) fn lifecycle(&mut self) {
        let now = self.world.time_ns;
        for pi in 0..self.world.procs.len() {
            if self.world.procs[pi].exited {
                continue;
            }
            if !self.world.procs[pi].started {
                if self.world.procs[pi].start_ns > now {
                    continue;
                }
                self.start_proc(pi);
            }
            let spec = &self.world.specs[self.world.procs[pi].spec];
            match spec.kind {
                Kind::Periodic => {
                    let period_ns = (spec.period_ms * 1e6) as u64;
                    let deadline_ns = (spec.deadline_ms.unwrap_or(spec.period_ms) * 1e6) as u64;
                    let work = spec.work_ms / 1000.0;
                    let t = self.world.procs[pi].threads[0];
                    let p = &mut self.world.procs[pi];
                    if self.world.tasks[t].left > 0.0 && now >= p.deadline_ns && p.deadline_ns > 0 {
                        // Missed: the rest of the job is dropped. Counted in the window
                        // when the job was released in it.
                        if p.deadline_ns - deadline_ns >= self.world.window.start_ns {
                            p.result.deadline_misses += 1;
                        }
                        self.world.tasks[t].left = 0.0;
                    }
                    if now >= p.next_release_ns {
                        if now >= self.world.window.start_ns {
                            p.result.jobs += 1;
                        }
                        p.deadline_ns = now + deadline_ns;
                        p.next_release_ns += period_ns.max(1);
                        p.run_started_ns = now;
                        self.world.tasks[t].left = work;
                    }
                    self.world.tasks[t].runnable = self.world.tasks[t].left > 0.0;
                }
                Kind::Cpu => {
                    for &t in &self.world.procs[pi].threads {
                        self.world.tasks[t].runnable = self.world.tasks[t].left > 0.0;
                    }
                }
                Kind::Rx => {
                    // Blocked in recv() while its socket is empty; data arriving (last
                    // tick's, as the softirq goes on) wakes it, and a wake-up is placed
                    // anew by the scheduler.
                    let t = self.world.procs[pi].threads[0];
                    self.world.tasks[t].runnable = match self.world.procs[pi].flow {
                        Some(f) => {
                            let fl = &self.world.flows[f];
                            if fl.reader_slept {
                                self.world.tasks[t].was_runnable = false;
                            }
                            !fl.reader_slept || fl.offered > 0.0
                        }
                        None => false,
                    };
                }
                Kind::Tx => {
                    let t = self.world.procs[pi].threads[0];
                    self.world.tasks[t].runnable = true;
                }
            }
        }
    }

    /// Advances one tick.
    pub fn tick(&mut self) {
        let dt = self.world.tick_ns as f64 * 1e-9;
        self.lifecycle();
        crate::baselines::schedule(self);
        crate::power::governors(self);
        // Tasks per CPU.
        for v in &mut self.scratch.by_cpu {
            v.clear();
        }
        for (i, t) in self.world.tasks.iter().enumerate() {
            if t.runnable && t.placed {
                self.scratch.by_cpu[t.cpu].push(i);
            }
        }
        for (c, st) in self.world.cpu.iter_mut().enumerate() {
            st.khz = match self.world.m.cpus[c].freq_domain {
                Some(d) => self.world.domains[d].khz,
                None => self.world.m.cpus[c].max_khz,
            };
        }
        // Step 4: network softirq.
        crate::network::softirq(self, dt);
        // Step 6 inputs: contention from the previous tick.
        self.scratch.llc_pressure.iter_mut().for_each(|x| *x = 0.0);
        for (c, st) in self.world.cpu.iter().enumerate() {
            self.scratch.llc_pressure[self.world.m.cpus[c].llc] += st.pressure;
        }
        let ntasks = self.world.tasks.len();
        self.scratch.speed.resize(ntasks, 0.0);
        self.world.want.resize(ntasks, 0.0);
        let node_bw_cap = self.world.params.contention.node_bw_gbps.max(1e-9);
        for ti in 0..ntasks {
            let t = &self.world.tasks[ti];
            if !(t.runnable && t.placed) {
                self.world.want[ti] = 0.0;
                continue;
            }
            let c = t.cpu;
            let p = &self.world.procs[t.proc];
            let a = &p.class;
            let info = &self.world.m.cpus[c];
            let st = &self.world.cpu[c];
            let base = machine::base_speed(&self.world.params, info, a, st.khz);
            let (mut sib_busy, mut sib_gain) = (0.0, 0.0);
            for &s in &info.siblings {
                sib_busy += self.world.cpu[s].busy;
                sib_gain += self.world.cpu[s].gain;
            }
            let smt = if sib_busy > 0.0 {
                let g = (a.smt_gain + sib_gain / sib_busy) / 2.0 * self.world.params.smt.gain_scale;
                machine::smt_factor(sib_busy.min(1.0), g)
            } else {
                1.0
            };
            let sum_p = machine::llc_share_pressure(
                &self.world.params,
                (self.scratch.llc_pressure[info.llc] - st.pressure).max(0.0),
                self.world.m.llc_bytes.get(info.llc).copied().unwrap_or(0.0),
            );
            let llc = machine::llc_slowdown(&self.world.params, a, sum_p);
            let mf = machine::mem_fraction(&self.world.params, a);
            let mut mem = 1.0;
            if mf > 0.0 {
                let total: f64 = p.mem_bytes.iter().sum();
                let here = self.world.m.node_pos(info.node);
                if total > 0.0 {
                    let mut extra = 0.0;
                    for (n, &b) in p.mem_bytes.iter().enumerate() {
                        if b <= 0.0 {
                            continue;
                        }
                        let frac = b / total;
                        let ratio = self.world.params.numa_ratio(self.world.m.distance[here][n]);
                        let lat = machine::loaded_latency(
                            &self.world.params,
                            self.world.node_bw[n] / node_bw_cap,
                        );
                        extra += frac * (ratio * lat - 1.0);
                    }
                    mem = 1.0 + mf * extra;
                }
            }
            self.scratch.speed[ti] = base * smt / (llc * mem);
        }
        // Step 5: wants and shares, per CPU.
        let cap_s = dt; // CPU-seconds available per tick on one CPU
        for c in 0..self.world.m.cpus.len() {
            let avail = (1.0 - self.world.cpu[c].softirq).max(0.0);
            let khz = self.world.cpu[c].khz as f64;
            let cycles = khz * 1e3 * dt;
            // Wants.
            for k in 0..self.scratch.by_cpu[c].len() {
                let ti = self.scratch.by_cpu[c][k];
                let w = crate::network::task_want(self, ti, c, cycles, cap_s);
                self.world.want[ti] = w;
            }
            // Real-time tasks first, then max-min fair share.
            let mut left = avail;
            let list = std::mem::take(&mut self.scratch.by_cpu[c]);
            for &ti in &list {
                if self.world.tasks[ti].rt {
                    let g = self.world.want[ti].min(left);
                    self.world.tasks[ti].share = g;
                    left -= g;
                }
            }
            let mut normal: Vec<usize> = list
                .iter()
                .copied()
                .filter(|&t| !self.world.tasks[t].rt)
                .collect();
            normal.sort_by(|&a, &b| self.world.want[a].total_cmp(&self.world.want[b]));
            let mut remaining = normal.len();
            for &ti in &normal {
                let fair = left / remaining as f64;
                let g = self.world.want[ti].min(fair);
                self.world.tasks[ti].share = g;
                left -= g;
                remaining -= 1;
            }
            self.scratch.by_cpu[c] = list;
        }
        // Step 6: progress and accounting.
        let tick = self.world.tick_ns as f64;
        let in_window = self.world.time_ns >= self.world.window.start_ns;
        self.scratch.node_bw_moved.iter_mut().for_each(|x| *x = 0.0);
        for c in 0..self.world.m.cpus.len() {
            let (mut busy, mut press, mut gain, mut user, mut sys) = (0.0, 0.0, 0.0, 0.0, 0.0);
            let list = std::mem::take(&mut self.scratch.by_cpu[c]);
            let khz = self.world.cpu[c].khz as f64;
            for &ti in &list {
                let share = self.world.tasks[ti].share;
                if share <= 0.0 {
                    continue;
                }
                let system = crate::network::progress(self, ti, c, share, dt, in_window);
                let pi = self.world.tasks[ti].proc;
                let p = &self.world.procs[pi];
                let a = &p.class;
                busy += share;
                press += share * a.pressure;
                gain += share * a.smt_gain;
                // DRAM traffic as the counters count it, and the memory-controller load it
                // puts on the nodes holding the process's pages (below).
                let moved_gbps = share * a.bw_gbps * self.scratch.speed[ti].min(1.0);
                let total: f64 = p.mem_bytes.iter().sum();
                if total > 0.0 {
                    for (n, &b) in p.mem_bytes.iter().enumerate() {
                        self.scratch.node_bw_moved[n] += moved_gbps * b / total;
                    }
                }
                let t = &mut self.world.tasks[ti];
                t.cycles += share * dt * khz * 1e3;
                t.mem_bytes += moved_gbps * dt * 1e9;
                t.instructions += share * dt * khz * 1e3 * a.ipc * self.scratch.speed[ti].min(1.0);
                if system {
                    t.stime_ns += share * tick;
                    sys += share;
                } else {
                    t.utime_ns += share * tick;
                    user += share;
                }
            }
            self.scratch.by_cpu[c] = list;
            let st = &mut self.world.cpu[c];
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
                self.world.window.busy_ns += total_busy * tick;
            }
        }
        crate::network::note_blocked_readers(self);
        // Memory-controller load for the next tick: the bandwidth the tasks moved (summed
        // in step 6, each one's solo bandwidth scaled by its speed, as the DRAM counters
        // count it), not what they would move alone: a controller cannot carry more than
        // its peak, and a slowed task asks for less. Load and speed form a fixed point (the
        // real queue settles within microseconds); it is reached by relaxing the load a
        // fixed fraction of the way each tick, which stays stable where the loaded-latency
        // curve is steep (see `BW_RELAXATION`).
        for (load, &moved) in self
            .world
            .node_bw
            .iter_mut()
            .zip(&self.scratch.node_bw_moved)
        {
            *load += BW_RELAXATION * (moved - *load);
        }
        // Averages (PELT-like) and per-task shares reset.
        let decay = 0.5f64.powf(dt * 1000.0 / self.world.params.sched.util_halflife_ms.max(1e-3));
        for t in &mut self.world.tasks {
            let info = &self.world.m.cpus[t.cpu];
            let scale = machine::capacity(&self.world.params, info)
                * self.world.cpu[t.cpu].khz as f64
                / info.max_khz.max(1) as f64;
            t.util_avg = t.util_avg * decay + t.share * scale * (1.0 - decay);
            t.was_runnable = t.runnable;
            t.share = 0.0;
        }
        for (c, st) in self.world.cpu.iter_mut().enumerate() {
            let inv = st.khz as f64 / self.world.m.cpus[c].max_khz.max(1) as f64;
            let u = ((st.busy + st.softirq).min(1.0)) * inv;
            st.util_avg = st.util_avg * decay + u * (1.0 - decay);
        }
        // Step 7: power and energy.
        self.world.power_w = crate::power::node_power_w(self);
        self.world.energy_j += self.world.power_w * dt;
        if in_window {
            self.world.window.energy_j += self.world.power_w * dt;
        }
        self.world.time_ns += self.world.tick_ns;
    }
}
