//! Samples built from the simulated machine's state, exactly as the real sampler would
//! report them (per-CPU ticks, per-process times, sockets, IRQ and softirq counts, energy,
//! simulated hardware counters), and its current topology.

use crate::machine;
use crate::world::*;
use placer_core::sample::*;
use placer_core::topology::Topology;
use std::collections::BTreeMap;

impl SimHost {
    /// The topology as the host currently has it (IRQ affinities, RPS, frequency caps).
    pub fn current_topology(&self) -> Topology {
        let mut t = self.world.topo.clone();
        for (d, st) in t.freq_domains.iter_mut().zip(&self.world.domains) {
            d.governor = Some(st.governor.clone());
            d.scaling_max_khz = Some(st.scaling_max_khz);
            d.scaling_min_khz = Some(st.scaling_min_khz);
        }
        t
    }

    pub(crate) fn ticks(&self, ns: f64) -> u64 {
        (ns / (1e9 / self.world.params.sim.clk_tck.max(1) as f64)) as u64
    }

    /// The raw sample of the current state.
    pub fn build_sample(&self, req: SampleRequest) -> Sample {
        let cpu_ids: Vec<u32> = self.world.m.cpus.iter().map(|c| c.id).collect();
        let cpus = self
            .world
            .cpu
            .iter()
            .zip(&self.world.m.cpus)
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
        for p in &self.world.procs {
            if !p.started || p.exited {
                continue;
            }
            let t0 = &self.world.tasks[p.threads[0]];
            let (ut, st) = p.threads.iter().fold((0.0, 0.0), |(u, s), &t| {
                (
                    u + self.world.tasks[t].utime_ns,
                    s + self.world.tasks[t].stime_ns,
                )
            });
            let threads = if req.threads {
                p.threads
                    .iter()
                    .map(|&t| {
                        let t = &self.world.tasks[t];
                        ThreadSample {
                            tid: t.tid,
                            comm: p.comm.as_str().into(),
                            state: if t.runnable { 'R' } else { 'S' },
                            utime_ticks: self.ticks(t.utime_ns),
                            stime_ticks: self.ticks(t.stime_ns),
                            last_cpu: t.placed.then(|| self.world.m.cpus[t.cpu].id),
                            allowed: t.allowed.clone(),
                            cpu_ns: None,
                        }
                    })
                    .collect::<std::sync::Arc<[_]>>()
            } else {
                Default::default()
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
                    .map(|(n, b)| (self.world.m.node_ids[n], (b / SIM_PAGE_BYTES as f64) as u64))
                    .collect()
            } else {
                BTreeMap::new()
            };
            procs.push(std::sync::Arc::new(ProcSample {
                pid: p.pid,
                start_time_ticks: p.start_ticks,
                comm: p.comm.as_str().into(),
                state: if p.threads.iter().any(|&t| self.world.tasks[t].runnable) {
                    'R'
                } else {
                    'S'
                },
                ppid: 1,
                uid: Some(1000),
                utime_ticks: self.ticks(ut),
                stime_ticks: self.ticks(st),
                last_cpu: t0.placed.then(|| self.world.m.cpus[t0.cpu].id),
                allowed: t0.allowed.clone(),
                cgroup: format!(
                    "/placer-sim/{}",
                    self.world.specs[p.spec].name.replace("{i}", "")
                )
                .into(),
                num_threads: p.threads.len() as u32,
                kernel_thread: false,
                threads,
                socket_inodes: p
                    .flow
                    .map(|f| vec![self.world.flows[f].inode])
                    .unwrap_or_default(),
                counters,
                numa_pages,
            }));
        }
        let sockets = self
            .world
            .flows
            .iter()
            .filter(|f| self.world.procs[f.proc].started && !self.world.procs[f.proc].exited)
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
        for nic in &self.world.topo.nics {
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
        for (c, st) in self.world.cpu.iter().enumerate() {
            let id = self.world.m.cpus[c].id;
            let owners: Vec<usize> = irqs
                .iter()
                .enumerate()
                .filter(|(_, i)| {
                    self.queue_of_irq(i.irq.parse().unwrap_or(u32::MAX))
                        .is_some_and(|(n, q)| {
                            self.world.topo.nics[n].queues[q].irq_cpus.first() == Some(id)
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
            .world
            .cpu
            .iter()
            .zip(&self.world.m.cpus)
            .map(|(st, info)| SoftirqCounts {
                cpu: info.id,
                net_rx: st.net_rx as u64,
                net_tx: 0,
            })
            .collect();
        let mut energy = vec![EnergyCounter {
            domain: "sim:node".into(),
            energy_uj: (self.world.energy_j * 1e6) as u64,
            max_range_uj: None,
        }];
        energy.truncate(1);
        let mut nics = Vec::new();
        let mut cpu_freqs = Vec::new();
        if req.nics {
            nics = self
                .world
                .topo
                .nics
                .iter()
                .enumerate()
                .map(|(n, nic)| {
                    let mut c = placer_core::sample::NicCounters {
                        name: nic.name.clone(),
                        ..Default::default()
                    };
                    for f in self.world.flows.iter().filter(|f| f.nic == n) {
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
            if !self.world.topo.freq_domains.is_empty() {
                cpu_freqs = self
                    .world
                    .cpu
                    .iter()
                    .zip(&self.world.m.cpus)
                    .map(|(st, info)| placer_core::sample::CpuFreq {
                        cpu: info.id,
                        khz: st.khz,
                    })
                    .collect();
            }
        }
        Sample {
            time_ns: self.world.time_ns,
            clk_tck: self.world.params.sim.clk_tck,
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

    pub(crate) fn counters_of(&self, p: &Proc) -> Vec<CounterValue> {
        let (mut ins, mut cyc, mut bytes) = (0.0, 0.0, 0.0);
        for &t in &p.threads {
            ins += self.world.tasks[t].instructions;
            cyc += self.world.tasks[t].cycles;
            bytes += self.world.tasks[t].mem_bytes;
        }
        let a = &p.class;
        let refs = ins / 1000.0 * a.llc_refs_per_kinstr;
        let enabled = (self.world.time_ns - p.run_started_ns.min(self.world.time_ns)).max(1);
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
                refs * (machine::mem_fraction(&self.world.params, a)).max(0.05),
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
