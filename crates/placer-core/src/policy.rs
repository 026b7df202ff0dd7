//! The policy interface: a pure function of topology and observation, with its own small
//! state, returning a plan. Policies never do I/O; the daemon (placer bin) and the
//! simulator (placer-sim) drive the same implementations through [`crate::host::Host`].

use crate::cpuset::CpuSet;
use crate::observation::Observation;
use crate::plan::{ActionReport, Plan};
use crate::sample::{ProcKey, SampleRequest};
use crate::topology::Topology;
use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};

pub trait Policy: Send {
    /// Stable name used in config, plans, metrics (`net-affinity`).
    fn name(&self) -> &'static str;

    /// What this policy needs sampled beyond the defaults.
    fn wants(&self) -> SampleRequest {
        SampleRequest::default()
    }

    /// Why this policy cannot run on this topology/host, if so (e.g. "no hardware
    /// performance counters"). Checked once at start; a disabled policy is reported and
    /// skipped, the others run.
    fn disabled_reason(
        &self,
        _topo: &Topology,
        _sources: &crate::sample::SourceStatus,
    ) -> Option<String> {
        None
    }

    /// Decide. Pure: same inputs and state, same plan.
    fn plan(&self, topo: &Topology, obs: &Observation, state: &mut PolicyState) -> Plan;
}

/// A policy's memory between cycles: the knobs it holds (maintained by the engine from
/// action outcomes), processes it must leave alone, and its private state.
#[derive(Default)]
pub struct PolicyState {
    /// Monotonic time of the current observation, seconds.
    pub now_s: f64,
    /// Processes this policy has pinned, with the CPUs it pinned them to.
    pub held: BTreeMap<ProcKey, Held>,
    /// Processes never to touch again (lease broken: someone else changed their affinity;
    /// or a permanent failure).
    pub released: BTreeSet<ProcKey>,
    /// The last cycle's outcomes for this policy's actions.
    pub last_reports: Vec<ActionReport>,
    /// Processes held (or acted on this cycle) by policies that run earlier: this policy
    /// must not touch them. Set by the engine before each `plan`.
    pub taken: BTreeSet<ProcKey>,
    private: Option<Box<dyn Any + Send>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub cpus: CpuSet,
    pub since_s: f64,
    pub comm: String,
}

impl PolicyState {
    /// The policy's private state, created with `Default` on first use.
    pub fn private<T: Any + Send + Default>(&mut self) -> &mut T {
        let needs_init = !matches!(&self.private, Some(b) if b.is::<T>());
        if needs_init {
            self.private = Some(Box::new(T::default()));
        }
        self.private
            .as_mut()
            .and_then(|b| b.downcast_mut::<T>())
            .expect("private state was just set to T")
    }
}

impl std::fmt::Debug for PolicyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyState")
            .field("now_s", &self.now_s)
            .field("held", &self.held)
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}
