//! The daemon's host seen through the NRI plugin: the engine's plans go to the real host,
//! except the moves of processes in managed containers, which become container cpuset
//! updates sent to the runtime (`placement::translate`). Reports keep the plan's order.

use crate::placement::translate;
use crate::plugin::{container_of_pid, Plugin};
use placer_core::host::{Host, HostError};
use placer_core::plan::{ActionReport, Outcome, Plan};
use placer_core::sample::{Sample, SampleRequest, SourceStatus};
use placer_core::topology::Topology;
use std::path::Path;

pub struct NriHost<'a, H: Host + ?Sized> {
    pub inner: &'a mut H,
    pub plugin: &'a Plugin,
    /// Root of /proc (tests use a fixture).
    pub root: &'a Path,
}

impl<H: Host + ?Sized> Host for NriHost<'_, H> {
    fn topology(&mut self) -> Result<Topology, HostError> {
        self.inner.topology()
    }
    fn sources(&mut self) -> SourceStatus {
        self.inner.sources()
    }
    fn sample(&mut self, req: SampleRequest) -> Result<Sample, HostError> {
        self.inner.sample(req)
    }

    fn apply(&mut self, plan: &Plan, dry_run: bool) -> Vec<ActionReport> {
        let root = self.root;
        let container_of = |pid: u32| container_of_pid(root, pid);
        let t = self.plugin.with_state(|st| {
            if dry_run {
                // A dry run journals nothing.
                translate(&mut st.clone(), &plan.actions, &container_of)
            } else {
                translate(st, &plan.actions, &container_of)
            }
        });
        let mut out: Vec<Option<ActionReport>> = vec![None; plan.actions.len()];
        let host_plan = Plan {
            actions: t.host.iter().map(|(_, a)| a.clone()).collect(),
            notes: Vec::new(),
        };
        for ((i, _), r) in t.host.iter().zip(self.inner.apply(&host_plan, dry_run)) {
            out[*i] = Some(r);
        }
        let updates: Vec<_> = t.updates.iter().map(|(_, u)| u.clone()).collect();
        let result = if dry_run {
            Ok(Vec::new())
        } else {
            self.plugin.update(&updates)
        };
        for (i, u) in &t.updates {
            let mut planned = plan.actions[*i].clone();
            planned.reason = format!(
                "{} (container {} cpuset {} through NRI)",
                planned.reason, u.container_id, u.cpus
            );
            let outcome = match &result {
                _ if dry_run => Outcome::Skipped("dry run".into()),
                Ok(failed) if failed.contains(&u.container_id) => {
                    Outcome::Transient("the runtime failed the container update".into())
                }
                Ok(_) => Outcome::Done,
                Err(e) => Outcome::Transient(e.to_string()),
            };
            out[*i] = Some(ActionReport { planned, outcome });
        }
        for (i, outcome) in &t.dropped {
            out[*i] = Some(ActionReport {
                planned: plan.actions[*i].clone(),
                outcome: outcome.clone(),
            });
        }
        out.into_iter()
            .zip(&plan.actions)
            .map(|(r, planned)| {
                r.unwrap_or_else(|| ActionReport {
                    planned: planned.clone(),
                    outcome: Outcome::Skipped("not applied".into()),
                })
            })
            .collect()
    }
    /// The host's journal; the containers' cpusets have their own (`Plugin::restore_all`).
    fn journal(&mut self) -> Result<Vec<placer_core::journal::Entry>, HostError> {
        self.inner.journal()
    }
    fn restore_all(
        &mut self,
    ) -> Result<Vec<(placer_core::journal::Entry, placer_core::journal::Restored)>, HostError> {
        self.inner.restore_all()
    }
    fn restore_where(
        &mut self,
        which: &dyn Fn(&placer_core::journal::Entry) -> bool,
    ) -> Result<Vec<(placer_core::journal::Entry, placer_core::journal::Restored)>, HostError> {
        self.inner.restore_where(which)
    }
}
