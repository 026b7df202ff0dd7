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

use crate::machine::Machine;
use crate::params::Params;
use crate::rng::Rng;
use crate::workload::{instance_name, Kind, ProcResult, WorkloadSpec};
use placer_core::host::{Host, HostError};
use placer_core::plan::{ActionReport, Outcome, Plan};
use placer_core::sample::*;
use placer_core::topology::Topology;
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
        let (m_llc, m_nodes) = (m.n_llc, m.node_ids.len());
        let mut host = SimHost {
            world: World {
                cpu: m
                    .cpus
                    .iter()
                    .map(|c| CpuState {
                        khz: c.max_khz,
                        ..Default::default()
                    })
                    .collect(),
                node_bw: vec![0.0; m.node_ids.len()],
                want: Vec::new(),
                topo,
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
                params,
                m,
            },
            scratch: Scratch {
                by_cpu: vec![Vec::new(); n],
                speed: Vec::new(),
                softirq_cycles: vec![0.0; n],
                llc_pressure: vec![0.0; m_llc],
                node_bw_moved: vec![0.0; m_nodes],
            },
        };
        for s in specs {
            host.add_workload(s)?;
        }
        host.link_loopback_peers()?;
        Ok(host)
    }

    /// Pairs each loopback receiver (an `rx` workload with `peer`) with its local sender:
    /// instance `i` of the receiver with the `tx` process named `peer` with `{i}` replaced,
    /// on the same NIC. A sender without its own rate sends as fast as it can.
    fn link_loopback_peers(&mut self) -> Result<(), SimError> {
        for si in 0..self.world.specs.len() {
            let Some(peer) = self.world.specs[si].peer.clone() else {
                continue;
            };
            let receivers: Vec<usize> = (0..self.world.procs.len())
                .filter(|&p| self.world.procs[p].spec == si)
                .collect();
            for (i, &rp) in receivers.iter().enumerate() {
                let name = instance_name(&peer, i as u32);
                let rf = self.world.procs[rp].flow.expect("rx processes have a flow");
                let sender = self.world.procs.iter().position(|p| {
                    p.kind == Kind::Tx
                        && p.result.name == name
                        && p.flow
                            .is_some_and(|f| self.world.flows[f].nic == self.world.flows[rf].nic)
                });
                let Some(sp) = sender else {
                    return Err(SimError::Invalid(format!(
                        "workload {:?}: no tx process {name:?} on the same NIC to be its peer",
                        self.world.specs[si].name
                    )));
                };
                let sf = self.world.procs[sp].flow.expect("tx processes have a flow");
                self.world.flows[rf].peer = Some(sf);
                self.world.flows[sf].peer = Some(rf);
                if self.world.specs[self.world.procs[sp].spec]
                    .rate_mbps
                    .is_none()
                {
                    self.world.flows[sf].rate_bps = f64::INFINITY;
                }
            }
        }
        Ok(())
    }

    /// Adds a workload (its processes start at their `start_s`).
    pub fn add_workload(&mut self, s: WorkloadSpec) -> Result<(), SimError> {
        let spec_idx = self.world.specs.len();
        let class = self
            .world
            .params
            .archetype(&s.class_name())
            .map_err(SimError::Invalid)?
            .clone();
        let all = self.world.topo.online();
        for i in 0..s.count {
            let pid = self.world.next_pid;
            self.world.next_pid += s.threads.max(1) + 1;
            let comm: String = instance_name(&s.name, i).chars().take(15).collect();
            let start_ns = (s.start_s.max(0.0) * 1e9) as u64;
            let allowed = s
                .cpus
                .clone()
                .map(|c| c.intersection(&all))
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| all.clone());
            let pidx = self.world.procs.len();
            let mut threads = Vec::new();
            let nthreads = if matches!(s.kind, Kind::Cpu) {
                s.threads
            } else {
                1
            };
            for t in 0..nthreads {
                threads.push(self.world.tasks.len());
                self.world.tasks.push(Task {
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
                    numa_retry_ns: 0,
                });
            }
            let mut mem_bytes = vec![0.0; self.world.m.node_ids.len()];
            let mem_placed = if let Some(node) = s.mem_node {
                mem_bytes[self.world.m.node_pos(node)] = s.mem_mb * 1e6;
                true
            } else {
                false
            };
            let flow = match s.kind {
                Kind::Rx | Kind::Tx => {
                    let nic_name = instance_name(s.nic.as_deref().unwrap_or("eth0"), i);
                    let nic = self
                        .world
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
                    let fidx = self.world.flows.len();
                    let nq = self.world.topo.nics[nic].queues.len().max(1);
                    let ip = self.world.topo.nics[nic].addrs[0];
                    let line = self.world.topo.nics[nic].speed_mbps.unwrap_or(1000) as f64;
                    self.world.flows.push(Flow {
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
                        reader_slept: true,
                        peer: None,
                        pending: 0.0,
                    });
                    Some(fidx)
                }
                _ => None,
            };
            self.world.procs.push(Proc {
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
        self.world.specs.push(s);
        Ok(())
    }
}

impl Host for SimHost {
    fn topology(&mut self) -> Result<Topology, HostError> {
        Ok(self.current_topology())
    }

    fn sources(&mut self) -> SourceStatus {
        let src = |name: SourceKind, available: bool, detail: &str| Source {
            name,
            available,
            detail: detail.into(),
        };
        let dvfs = !self.world.topo.freq_domains.is_empty();
        SourceStatus {
            sources: vec![
                src(SourceKind::Proc, true, "simulated /proc"),
                src(SourceKind::SockDiag, true, "simulated sockets"),
                src(SourceKind::Interrupts, true, "simulated /proc/interrupts"),
                src(
                    SourceKind::PerfHw,
                    true,
                    "simulated counters (CAL C archetype rates)",
                ),
                src(
                    SourceKind::Rapl,
                    true,
                    "simulated whole-node energy meter (sim:node)",
                ),
                src(
                    SourceKind::Cpufreq,
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

    fn journal(&mut self) -> Result<Vec<placer_core::journal::Entry>, HostError> {
        Ok(self.journal_entries())
    }

    fn restore_all(
        &mut self,
    ) -> Result<Vec<(placer_core::journal::Entry, placer_core::journal::Restored)>, HostError> {
        Ok(self.restore_journal(&|_| true))
    }
    fn restore_where(
        &mut self,
        which: &dyn Fn(&placer_core::journal::Entry) -> bool,
    ) -> Result<Vec<(placer_core::journal::Entry, placer_core::journal::Restored)>, HostError> {
        Ok(self.restore_journal(which))
    }
}
