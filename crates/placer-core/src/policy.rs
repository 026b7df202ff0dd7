//! The policy interface: a pure function of topology and observation, with its own small
//! state, returning a plan. Policies never do I/O; the daemon (placer bin) and the
//! simulator (placer-sim) drive the same implementations through [`crate::host::Host`].

use crate::cpuset::CpuSet;
use crate::learned::Learned;
use crate::observation::Observation;
use crate::plan::{ActionReport, Plan};
use crate::policy_kind::PolicyKind;
use crate::sample::{ProcKey, SampleRequest};
use crate::topology::Topology;
use std::collections::{BTreeMap, BTreeSet};

pub trait Policy: Send {
    /// The policy's own memory between cycles (hysteresis, timers, what it learned); kept
    /// by the engine beside the shared part of its state, typed, created with `Default`.
    type State: Default + Send + 'static;

    /// Which policy this is: its identity in plans, verdicts and back-off keys (its
    /// `name()` is the string configs, metrics and logs show).
    fn kind(&self) -> PolicyKind;

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

    /// What this policy runs without on this topology/host (e.g. "lo: no receive CPU"):
    /// it runs, but these cases it cannot act on. Checked once at start, beside
    /// [`Policy::disabled_reason`], so the daemon says once what it will not do and why.
    fn lacks(&self, _topo: &Topology, _sources: &crate::sample::SourceStatus) -> Vec<String> {
        Vec::new()
    }

    /// Decide. Pure: same inputs and state, same plan.
    fn plan(
        &self,
        topo: &Topology,
        obs: &Observation,
        state: &mut PolicyState<Self::State>,
    ) -> Plan;

    /// Achieved / target of the QoS this policy promises `p` this interval, where it
    /// promises one and the observation shows it (the judge stops probing a move whose off
    /// arm costs it: V10 in [`crate::verifier`]). Pure.
    fn qos_ratio(
        &self,
        _topo: &Topology,
        _obs: &Observation,
        _p: &crate::observation::ProcObs,
    ) -> Option<f64> {
        None
    }

    /// What this policy learned about the machine that should outlive the daemon
    /// ([`crate::learned`]): `None` for a policy that learns nothing worth keeping.
    fn learned(&self, _state: &Self::State) -> Option<Learned> {
        None
    }

    /// Takes back what a previous daemon learned on this machine (a record of another
    /// policy's kind is ignored).
    fn relearn(&self, _state: &mut Self::State, _learned: &Learned) {}
}

/// What the engine keeps for every policy alike: the knobs it holds (maintained from
/// action outcomes), processes it must leave alone, its last outcomes.
#[derive(Default)]
pub struct Shared {
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
}

/// A policy's memory between cycles: the [`Shared`] part (its fields read through this
/// type: `state.held`) and its own typed `private` part.
#[derive(Default)]
pub struct PolicyState<S = ()> {
    pub shared: Shared,
    pub private: S,
}

impl<S> std::ops::Deref for PolicyState<S> {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl<S> std::ops::DerefMut for PolicyState<S> {
    fn deref_mut(&mut self) -> &mut Shared {
        &mut self.shared
    }
}

/// A policy as the engine holds it, whatever its state's type: the policy and its state
/// together, behind one object-safe interface.
pub trait AnyPolicy: Send {
    fn kind(&self) -> PolicyKind;
    fn wants(&self) -> SampleRequest;
    fn disabled_reason(
        &self,
        topo: &Topology,
        sources: &crate::sample::SourceStatus,
    ) -> Option<String>;
    fn lacks(&self, topo: &Topology, sources: &crate::sample::SourceStatus) -> Vec<String>;
    /// Plans with the policy's own state.
    fn plan(&mut self, topo: &Topology, obs: &Observation) -> Plan;
    /// [`Policy::qos_ratio`].
    fn qos_ratio(
        &self,
        topo: &Topology,
        obs: &Observation,
        p: &crate::observation::ProcObs,
    ) -> Option<f64>;
    fn shared(&self) -> &Shared;
    fn shared_mut(&mut self) -> &mut Shared;
    /// Takes `other`'s configuration (the same policy built from a reloaded config) and
    /// keeps this one's state: what it holds, its history. False when `other` is another
    /// policy.
    fn adopt_config(&mut self, other: Box<dyn AnyPolicy>) -> bool;
    /// [`Policy::learned`].
    fn learned(&self) -> Option<Learned>;
    /// [`Policy::relearn`].
    fn relearn(&mut self, learned: &Learned);
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any>;
}

struct WithState<P: Policy> {
    policy: P,
    state: PolicyState<P::State>,
}

impl<P: Policy + 'static> AnyPolicy for WithState<P> {
    fn kind(&self) -> PolicyKind {
        self.policy.kind()
    }
    fn wants(&self) -> SampleRequest {
        self.policy.wants()
    }
    fn disabled_reason(
        &self,
        topo: &Topology,
        sources: &crate::sample::SourceStatus,
    ) -> Option<String> {
        self.policy.disabled_reason(topo, sources)
    }
    fn lacks(&self, topo: &Topology, sources: &crate::sample::SourceStatus) -> Vec<String> {
        self.policy.lacks(topo, sources)
    }
    fn plan(&mut self, topo: &Topology, obs: &Observation) -> Plan {
        self.policy.plan(topo, obs, &mut self.state)
    }
    fn qos_ratio(
        &self,
        topo: &Topology,
        obs: &Observation,
        p: &crate::observation::ProcObs,
    ) -> Option<f64> {
        self.policy.qos_ratio(topo, obs, p)
    }
    fn shared(&self) -> &Shared {
        &self.state.shared
    }
    fn shared_mut(&mut self) -> &mut Shared {
        &mut self.state.shared
    }
    fn adopt_config(&mut self, other: Box<dyn AnyPolicy>) -> bool {
        match other.into_any().downcast::<WithState<P>>() {
            Ok(o) => {
                self.policy = o.policy;
                true
            }
            Err(_) => false,
        }
    }
    fn learned(&self) -> Option<Learned> {
        self.policy.learned(&self.state.private)
    }
    fn relearn(&mut self, learned: &Learned) {
        self.policy.relearn(&mut self.state.private, learned)
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// A policy with a fresh state, ready for the engine.
pub fn boxed<P: Policy + 'static>(policy: P) -> Box<dyn AnyPolicy> {
    Box::new(WithState {
        policy,
        state: PolicyState::default(),
    })
}

#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub cpus: CpuSet,
    pub since_s: f64,
    pub comm: String,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("now_s", &self.now_s)
            .field("held", &self.held)
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}
