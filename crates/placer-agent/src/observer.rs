//! The observer behind `placer top` and `placer ab`: samples this machine (or a root),
//! derives observations, and learns the receive costs of its interfaces as it goes.

use crate::{AgentError, Result};
use placer_core::observation::{Observation, ProcObs};
use placer_core::sample::{SampleRequest, SourceStatus};
use placer_linux::sampler::Sampler;
use serde::Serialize;
use std::collections::BTreeMap;

/// One interface's learned costs, as `top` shows them.
#[derive(Serialize, Clone, Debug)]
pub struct NetCosts {
    pub rx_cpus: Vec<u32>,
    #[serde(flatten)]
    pub costs: placer_core::net_costs::Costs,
}

/// Samples twice, `interval` apart, and derives the observation.
pub struct Observer {
    pub sampler: Sampler,
    pub req: SampleRequest,
    prev: Option<placer_core::Sample>,
    /// Read once, for the interfaces' receive CPUs (None when unreadable: no costs).
    topo: Option<placer_core::Topology>,
    learners: BTreeMap<String, placer_core::net_costs::Learner>,
}

impl Observer {
    pub fn new(root: &std::path::Path, threads: bool, numa_pages: bool) -> Self {
        Observer {
            sampler: Sampler::new(root),
            req: SampleRequest {
                threads,
                sockets: true,
                counters: true,
                numa_pages,
                nics: true,
                irqs: true,
            },
            prev: None,
            topo: placer_linux::topology::read(root).ok(),
            learners: BTreeMap::new(),
        }
    }

    /// The receive costs learned so far, per interface with receive CPUs (the fallbacks
    /// are energy-qos's configured defaults).
    pub fn net_costs(&self) -> BTreeMap<String, NetCosts> {
        let fb = placer_core::policies::energy_qos::EnergyQosConfig::default().cost_fallback();
        let Some(topo) = &self.topo else {
            return BTreeMap::new();
        };
        self.learners
            .iter()
            .filter_map(|(name, l)| {
                let nic = topo.nics.iter().find(|n| &n.name == name)?;
                Some((
                    name.clone(),
                    NetCosts {
                        rx_cpus: nic.rx_cpus.to_vec(),
                        costs: l.estimate(&fb),
                    },
                ))
            })
            .collect()
    }

    pub fn sources(&mut self) -> SourceStatus {
        self.sampler.sources()
    }

    /// Processes that ran since the previous sample and were gone at the last one.
    pub fn exited(&self) -> &[placer_core::sample::ExitedProc] {
        self.prev.as_ref().map_or(&[], |s| &s.exited)
    }

    /// Takes a sample; returns the observation since the previous one (None the first time).
    pub fn step(&mut self) -> Result<Option<Observation>> {
        let cur = self
            .sampler
            .sample(self.req)
            .map_err(AgentError::Sampling)?;
        let obs = self.prev.as_ref().map(|p| Observation::new(p, &cur));
        self.prev = Some(cur);
        if let (Some(o), Some(topo)) = (&obs, &self.topo) {
            let window = placer_core::policies::energy_qos::EnergyQosConfig::default()
                .learn_window_intervals as usize;
            for nic in topo.nics.iter().filter(|n| !n.rx_cpus.is_empty()) {
                if let Some(s) = placer_core::net_costs::rx_sample(topo, o, &nic.name, &nic.rx_cpus)
                {
                    self.learners
                        .entry(nic.name.clone())
                        .or_insert_with(|| placer_core::net_costs::Learner::new(window))
                        .push_rx(s);
                }
            }
        }
        Ok(obs)
    }
}

/// The busiest processes first: by CPU share, then network rate.
pub fn busiest(obs: &Observation, n: usize) -> Vec<&ProcObs> {
    let mut v: Vec<&ProcObs> = obs.iter_procs().collect();
    v.sort_by(|a, b| {
        (b.cpu_share + b.net_bytes_per_s() / 1e9)
            .total_cmp(&(a.cpu_share + a.net_bytes_per_s() / 1e9))
            .then(a.pid.cmp(&b.pid))
    });
    v.truncate(n);
    v
}
