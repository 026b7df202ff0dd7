//! The network model: NIC line rate, receive processing in softirq context on the receive
//! CPU ahead of every task, the copy in the receiving process (dearer when the process
//! runs on a CPU sharing no cache with the receive CPU: seed 002), sends, and the
//! per-task progress of every workload kind.
//!
//! A receive flow offers `min(sender rate, fair share of the NIC's line rate, limit)` each
//! tick, bounded by the free space of its socket buffer (TCP flow control: a slow reader
//! closes the window). The receive CPU processes what its capacity allows
//! (`rx_softirq_cycles_per_packet` per segment plus `rx_softirq_cycles_per_byte`); what it
//! cannot process is lost for that tick (the sender backs off). Processed bytes wait in the
//! socket buffer until the receiver copies them (`rx_copy_cycles_per_byte`, plus
//! `rx_llc_only_extra` of the whole local receive cost when only the LLC is shared and
//! `rx_remote_cache_extra` when no cache is).
//!
//! Readers block: a reader that emptied its socket buffer sleeps in recv() (not runnable,
//! no CPU) and the receive CPU's softirq wakes it when data comes, once per receive batch,
//! paying a wake-up IPI when the reader is on another CPU (`wake_cycles`); the scheduler
//! places each wake-up (`baselines`: towards the waker as Linux's wake_affine does).

use crate::machine::CacheDistance;
use crate::workload::Kind;
use crate::world::SimHost;

/// The CPU index doing receive processing for flow `f` (its queue's RPS CPU, else the
/// first CPU of the queue's IRQ affinity; over loopback without RPS, the sender's CPU,
/// where netif_rx queued the packet).
pub fn rx_cpu_of(h: &SimHost, f: usize) -> usize {
    let fl = &h.world.flows[f];
    let q = &h.world.topo.nics[fl.nic].queues[fl.queue];
    let id = if !q.rps_cpus.is_empty() {
        let v = q.rps_cpus.to_vec();
        v[f % v.len()]
    } else if let Some(sender) = fl.peer.filter(|_| q.irq_cpus.is_empty()) {
        return reader_cpu(h, sender);
    } else {
        q.irq_cpus.first().unwrap_or(0)
    };
    h.world.m.idx(id).unwrap_or(0)
}

/// Step 4 of the tick: softirq receive processing.
pub fn softirq(h: &mut SimHost, dt: f64) {
    for x in h.scratch.softirq_cycles.iter_mut() {
        *x = 0.0;
    }
    let net = h.world.params.net.clone();
    // Active receive flows per NIC share its line rate.
    let mut active = vec![0usize; h.world.topo.nics.len()];
    for f in &h.world.flows {
        let p = &h.world.procs[f.proc];
        if f.rx && f.peer.is_none() && p.started && !p.exited {
            active[f.nic] += 1;
        }
    }
    for fi in 0..h.world.flows.len() {
        let (started, exited) = {
            let p = &h.world.procs[h.world.flows[fi].proc];
            (p.started, p.exited)
        };
        if !h.world.flows[fi].rx || !started || exited {
            h.world.flows[fi].offered = 0.0;
            continue;
        }
        let rc = rx_cpu_of(h, fi);
        let f = &mut h.world.flows[fi];
        // Loopback: what the local sender sent (no line rate; its window bounds it).
        let rate_bps = if f.peer.is_some() {
            f.pending / dt
        } else {
            f.rate_bps
        };
        let mut line_mbps = h.world.topo.nics[f.nic].speed_mbps.unwrap_or(1000) as f64;
        if net.nic_max_rx_mbps > 0.0 {
            line_mbps = line_mbps.min(net.nic_max_rx_mbps);
        }
        if f.peer.is_some() {
            line_mbps = f64::INFINITY;
        }
        let line_bps = line_mbps * 1e6 / 8.0;
        let mut rate = rate_bps.min(line_bps / active[f.nic].max(1) as f64);
        if let Some(l) = f.limit_bps {
            rate = rate.min(l);
        }
        let offered = (rate * dt).min((net.rcvbuf_bytes - f.buffer).max(0.0));
        f.offered = offered;
        f.rx_cpu = rc;
        h.scratch.softirq_cycles[rc] += offered * net.rx_softirq_cycles_per_byte
            + offered / f.packet_bytes * net.rx_softirq_cycles_per_packet;
        let wake = wake_cycles(h, fi, rc, offered);
        h.scratch.softirq_cycles[rc] += wake;
    }
    let little_ratio = h
        .world
        .params
        .archetypes
        .get("net-receive")
        .map(|a| a.big_little_ratio)
        .unwrap_or(1.0);
    let mut grant = vec![1.0; h.world.cpu.len()];
    for (c, g) in grant.iter_mut().enumerate() {
        let mut cap = h.world.cpu[c].khz as f64 * 1e3 * dt;
        if h.world.m.cpus[c].little {
            cap /= little_ratio;
        }
        let demand = h.scratch.softirq_cycles[c];
        h.world.cpu[c].softirq = if cap > 0.0 {
            (demand / cap).min(1.0)
        } else {
            0.0
        };
        if demand > cap && demand > 0.0 {
            *g = cap / demand;
        }
    }
    for f in h.world.flows.iter_mut() {
        if f.offered <= 0.0 {
            continue;
        }
        let done = f.offered * grant[f.rx_cpu];
        if f.peer.is_some() {
            f.pending -= done;
        }
        f.buffer += done;
        f.bytes += done;
        let pkts = done / f.packet_bytes;
        f.segs += pkts;
        let irqs = pkts / net.packets_per_irq.max(1.0);
        h.world.cpu[f.rx_cpu].net_rx += irqs;
        h.world.cpu[f.rx_cpu].irqs += irqs;
    }
}

/// Cycles the receiving process spends per byte of flow `f` when it runs on CPU `c`.
pub fn rx_cost_per_byte(h: &SimHost, f: usize, c: usize) -> f64 {
    let n = &h.world.params.net;
    let fl = &h.world.flows[f];
    let local_total = n.rx_softirq_cycles_per_byte
        + n.rx_softirq_cycles_per_packet / fl.packet_bytes
        + n.rx_copy_cycles_per_byte;
    let mut copy = n.rx_copy_cycles_per_byte;
    let p = &h.world.procs[fl.proc];
    if !h.world.specs[p.spec].buffer_reuse {
        // A fresh buffer per message lives on the process's memory node; the copy pays
        // the latency ratio between it and the NIC's node.
        let nic_node = h.world.topo.nics[fl.nic].node.unwrap_or(0);
        let mem_node = p
            .mem_bytes
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
            .unwrap_or(0);
        let d = h.world.m.distance[h.world.m.node_pos(nic_node)][mem_node];
        copy *= n.rx_fresh_buffer_copy_factor
            * h.world
                .params
                .numa_ratio(d)
                .powf(n.rx_fresh_buffer_numa_exponent);
    }
    // The socket's and the packets' lines were last written on the receive CPU.
    let extra = match h.world.m.cache_distance(c, fl.rx_cpu) {
        CacheDistance::SameCpu | CacheDistance::SharedL2 => 0.0,
        CacheDistance::SharedLlc => n.rx_llc_only_extra * local_total,
        CacheDistance::None => n.rx_remote_cache_extra * local_total,
    };
    copy + extra
}

/// The CPU the reader of receive flow `f` is on (its process's first thread).
pub fn reader_cpu(h: &SimHost, f: usize) -> usize {
    h.world.tasks[h.world.procs[h.world.flows[f].proc].threads[0]].cpu
}

/// Cycles the receive CPU `rc` spends waking the blocked reader of flow `f` for `bytes`
/// of data: one wake-up per receive batch (`packets_per_irq` packets), each an IPI when
/// the reader is on another CPU; nothing while the reader is busy (it is not asleep).
pub fn wake_cycles(h: &SimHost, f: usize, rc: usize, bytes: f64) -> f64 {
    let fl = &h.world.flows[f];
    let reader = reader_cpu(h, f);
    if !fl.reader_slept || reader == rc {
        return 0.0;
    }
    let n = &h.world.params.net;
    let wakeups = bytes / (fl.packet_bytes * n.packets_per_irq.max(1.0));
    let ipi = if h.world.m.cpus[reader].package == h.world.m.cpus[rc].package {
        n.wake_ipi_cycles
    } else {
        n.wake_ipi_remote_package_cycles
    };
    wakeups * ipi
}

/// After the tick's progress: a reader that emptied its socket buffer blocked in recv()
/// (the next data wakes it).
pub fn note_blocked_readers(h: &mut SimHost) {
    for f in h.world.flows.iter_mut().filter(|f| f.rx) {
        f.reader_slept = f.buffer < 1.0;
    }
}

fn tx_cost_per_byte(h: &SimHost, f: usize) -> f64 {
    let n = &h.world.params.net;
    n.tx_cycles_per_byte + n.tx_cycles_per_packet / h.world.flows[f].packet_bytes
}

/// The rate flow `f`'s sender may send at, bytes/s: its own rate within the NIC's line
/// rate, or over loopback what the receiver's socket buffer has room for this tick (TCP's
/// window: the sender waits, using no CPU, while it is full).
fn tx_rate(h: &SimHost, f: usize, dt: f64) -> f64 {
    let fl = &h.world.flows[f];
    let line = match fl.peer {
        Some(r) => {
            let rx = &h.world.flows[r];
            (h.world.params.net.rcvbuf_bytes - rx.pending - rx.buffer).max(0.0) / dt
        }
        None => h.world.topo.nics[fl.nic].speed_mbps.unwrap_or(1000) as f64 * 1e6 / 8.0,
    };
    let mut r = fl.rate_bps.min(line);
    if let Some(l) = fl.limit_bps {
        r = r.min(l);
    }
    r
}

/// Effective cycles of CPU `c` in `cycles` for a task of the process's class (little
/// cores do less per cycle).
fn eff_cycles(h: &SimHost, ti: usize, c: usize, cycles: f64) -> f64 {
    if h.world.m.cpus[c].little {
        cycles
            / h.world.procs[h.world.tasks[ti].proc]
                .class
                .big_little_ratio
                .max(1e-9)
    } else {
        cycles
    }
}

/// The fraction of CPU `c` task `ti` wants this tick (`cycles` = the CPU's cycles in one
/// tick, `dt` = tick seconds).
pub fn task_want(h: &SimHost, ti: usize, c: usize, cycles: f64, dt: f64) -> f64 {
    let t = &h.world.tasks[ti];
    let p = &h.world.procs[t.proc];
    match p.kind {
        Kind::Cpu | Kind::Periodic => {
            let s = h.scratch.speed[ti];
            if s <= 0.0 {
                return 0.0;
            }
            (t.left / (s * dt)).min(1.0)
        }
        Kind::Rx => {
            let Some(f) = p.flow else { return 0.0 };
            let need = h.world.flows[f].buffer * rx_cost_per_byte(h, f, c);
            let have = eff_cycles(h, ti, c, cycles);
            if have <= 0.0 {
                return 0.0;
            }
            (need / have).min(1.0)
        }
        Kind::Tx => {
            let Some(f) = p.flow else { return 0.0 };
            let need = tx_rate(h, f, dt) * dt * tx_cost_per_byte(h, f);
            let have = eff_cycles(h, ti, c, cycles);
            if have <= 0.0 {
                return 0.0;
            }
            (need / have).min(1.0)
        }
    }
}

/// Applies `share` of CPU `c` for one tick to task `ti`. Returns true when the time is
/// system time (network syscalls), false for user time.
pub fn progress(
    h: &mut SimHost,
    ti: usize,
    c: usize,
    share: f64,
    dt: f64,
    in_window: bool,
) -> bool {
    let pi = h.world.tasks[ti].proc;
    let kind = h.world.procs[pi].kind;
    let cycles = h.world.cpu[c].khz as f64 * 1e3 * dt * share;
    match kind {
        Kind::Cpu | Kind::Periodic => {
            let work = share * h.scratch.speed[ti] * dt;
            let done = work.min(h.world.tasks[ti].left);
            h.world.tasks[ti].left -= done;
            if in_window {
                h.world.procs[pi].result.work_done_s += done;
            }
            if h.world.tasks[ti].left <= 1e-12 {
                h.world.tasks[ti].left = 0.0;
                // It finished `share` of the way into the tick.
                let finish_ns = h.world.time_ns as f64 + share * h.world.tick_ns as f64;
                if kind == Kind::Cpu {
                    cpu_phase_done(h, pi, finish_ns);
                } else if in_window {
                    let p = &mut h.world.procs[pi];
                    p.result
                        .completions_s
                        .push((finish_ns - p.run_started_ns as f64) / 1e9);
                }
            }
            false
        }
        Kind::Rx => {
            if let Some(f) = h.world.procs[pi].flow {
                let per_byte = rx_cost_per_byte(h, f, c).max(1e-9);
                let bytes = (eff_cycles(h, ti, c, cycles) / per_byte).min(h.world.flows[f].buffer);
                h.world.flows[f].buffer -= bytes;
                if in_window {
                    h.world.procs[pi].result.rx_bytes += bytes;
                }
            }
            true
        }
        Kind::Tx => {
            if let Some(f) = h.world.procs[pi].flow {
                let per_byte = tx_cost_per_byte(h, f).max(1e-9);
                let bytes = (eff_cycles(h, ti, c, cycles) / per_byte).min(tx_rate(h, f, dt) * dt);
                let fl = &mut h.world.flows[f];
                fl.bytes += bytes;
                fl.segs += bytes / fl.packet_bytes;
                if let Some(r) = fl.peer {
                    h.world.flows[r].pending += bytes;
                }
                if in_window {
                    h.world.procs[pi].result.tx_bytes += bytes;
                }
            }
            true
        }
    }
}

/// A `cpu` job's thread finished its part: start the parallel phase after the serial one,
/// or complete the job when every thread is done.
fn cpu_phase_done(h: &mut SimHost, pi: usize, finish_ns: f64) {
    let spec = h.world.specs[h.world.procs[pi].spec].clone();
    let p = &mut h.world.procs[pi];
    if p.serial_left > 0.0 {
        p.serial_left = 0.0;
        let w = spec.work_s.unwrap_or(f64::INFINITY);
        let per = w * (1.0 - spec.serial_fraction) / p.threads.len() as f64;
        if per > 0.0 {
            for &t in &p.threads {
                h.world.tasks[t].left = per;
            }
            return;
        }
    }
    if p.threads.iter().any(|&t| h.world.tasks[t].left > 0.0) {
        return;
    }
    p.result
        .completions_s
        .push((finish_ns - p.run_started_ns as f64) / 1e9);
    if spec.repeat {
        p.started = false;
        p.start_ns = h.world.time_ns + h.world.tick_ns;
    } else {
        p.exited = true;
        for &t in &p.threads {
            h.world.tasks[t].runnable = false;
        }
    }
}
