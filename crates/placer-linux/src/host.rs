//! [`LinuxHost`]: the real machine behind placer's [`Host`] interface.

use crate::actuator::Actuator;
use crate::sampler::Sampler;
use placer_core::host::{Host, HostError};
use placer_core::plan::{ActionReport, Plan};
use placer_core::sample::{Sample, SampleRequest, SourceStatus};
use placer_core::Topology;
use std::path::{Path, PathBuf};

pub struct LinuxHost {
    pub root: PathBuf,
    pub sampler: Sampler,
    pub actuator: Actuator,
    /// Other agents sharing placer's knobs, looked for at each topology read.
    pub coexist: crate::coexist::Detector,
    /// The topology, its machine part read again on hotplug.
    pub topology: crate::topology::Reader,
}

impl LinuxHost {
    pub fn new(root: &Path, state_dir: &Path) -> Self {
        LinuxHost {
            root: root.to_path_buf(),
            sampler: Sampler::new(root),
            actuator: Actuator::new(root, state_dir),
            coexist: Default::default(),
            topology: crate::topology::Reader::new(root),
        }
    }
}

impl Host for LinuxHost {
    fn topology(&mut self) -> Result<Topology, HostError> {
        let mut topo = self
            .topology
            .read()
            .map_err(|e| HostError::new("topology", e))?;
        // Who else manages IRQs and cpufreq, at each refresh: agents start and stop. The
        // processes as the sampler last read them, once it has; /proc before that.
        let governors = crate::coexist::placer_governors(&self.actuator.state_dir);
        topo.coexistence = match self.sampler.known_processes() {
            Some(procs) => self.coexist.among(&self.root, procs, &governors),
            None => self.coexist.detect(&self.root, &governors),
        };
        Ok(topo)
    }
    fn sources(&mut self) -> SourceStatus {
        self.sampler.sources()
    }
    fn sample(&mut self, req: SampleRequest) -> Result<Sample, HostError> {
        self.sampler
            .sample(req)
            .map_err(|e| HostError::new("sample", e))
    }
    fn apply(&mut self, plan: &Plan, dry_run: bool) -> Vec<ActionReport> {
        let reports = self.actuator.apply(plan, dry_run);
        // The sampler caches idle processes' affinity: make the next sample re-read the
        // processes this plan touched.
        for a in &plan.actions {
            if let Some(k) = a.action.proc() {
                self.sampler.invalidate(k.pid);
            }
        }
        reports
    }
    fn journal(&mut self) -> Result<Vec<placer_core::journal::Entry>, HostError> {
        let j = self
            .actuator
            .journal()
            .map_err(|e| HostError::new("journal", e))?;
        Ok(j.entries().to_vec())
    }
    fn restore_all(
        &mut self,
    ) -> Result<Vec<(placer_core::journal::Entry, placer_core::journal::Restored)>, HostError> {
        self.actuator
            .restore_all()
            .map_err(|e| HostError::new("restore", e))
    }
    fn restore_where(
        &mut self,
        which: &dyn Fn(&placer_core::journal::Entry) -> bool,
    ) -> Result<Vec<(placer_core::journal::Entry, placer_core::journal::Restored)>, HostError> {
        self.actuator
            .restore_where(which)
            .map_err(|e| HostError::new("restore", e))
    }
}
