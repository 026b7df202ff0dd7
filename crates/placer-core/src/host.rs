//! The one interface between placer's loop and a machine, real (`placer_linux::LinuxHost`)
//! or modelled (`placer_sim::SimHost`).

use crate::journal::{Entry, Restored};
use crate::plan::{ActionReport, Plan};
use crate::sample::{Sample, SampleRequest, SourceStatus};
use crate::topology::Topology;

#[derive(Debug, thiserror::Error)]
#[error("{context}: {message}")]
pub struct HostError {
    pub context: String,
    pub message: String,
}

impl HostError {
    pub fn new(context: impl Into<String>, message: impl std::fmt::Display) -> Self {
        HostError {
            context: context.into(),
            message: message.to_string(),
        }
    }
}

pub trait Host {
    /// The machine's topology (re-read on hotplug by the caller when it changes).
    fn topology(&mut self) -> Result<Topology, HostError>;
    /// Which optional sources exist and why the others do not.
    fn sources(&mut self) -> SourceStatus;
    /// One raw sample now.
    fn sample(&mut self, req: SampleRequest) -> Result<Sample, HostError>;
    /// Apply a plan; one report per action, in order. `dry_run` changes nothing.
    fn apply(&mut self, plan: &Plan, dry_run: bool) -> Vec<ActionReport>;
    /// What this host changed and has not put back yet (what a dead agent left, at start).
    fn journal(&mut self) -> Result<Vec<Entry>, HostError>;
    /// Puts back every journaled knob, newest first, only where placer's value still holds;
    /// one outcome per entry. Restore has this one owner: the agent calls it at start and
    /// stop, `placer restore` on demand.
    fn restore_all(&mut self) -> Result<Vec<(Entry, Restored)>, HostError>;
    /// Puts back the journaled knobs `which` selects, as [`Host::restore_all`] does for all
    /// (a policy switched off by a config reload: [`crate::journal::set_by`]).
    fn restore_where(
        &mut self,
        which: &dyn Fn(&Entry) -> bool,
    ) -> Result<Vec<(Entry, Restored)>, HostError>;
}
