//! Applies plans to the machine, journaling every knob's previous value first.
//! (Placeholder: the placement-loop issue fills it in.)

use placer_core::plan::{ActionReport, Outcome, Plan};
use std::path::{Path, PathBuf};

pub struct Actuator {
    pub root: PathBuf,
    pub state_dir: PathBuf,
}

impl Actuator {
    pub fn new(root: &Path, state_dir: &Path) -> Self {
        Actuator {
            root: root.to_path_buf(),
            state_dir: state_dir.to_path_buf(),
        }
    }
    pub fn apply(&mut self, plan: &Plan, _dry_run: bool) -> Vec<ActionReport> {
        plan.actions
            .iter()
            .map(|a| ActionReport {
                planned: a.clone(),
                outcome: Outcome::Permanent("actuator not implemented yet".into()),
            })
            .collect()
    }
}
