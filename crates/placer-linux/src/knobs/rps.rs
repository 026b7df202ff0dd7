//! Receive packet steering: one file per receive queue, a CPU mask.

use crate::journal::{Entry, Knob};
use crate::knob::{CpuFileKnob, Ctx, KnobHandler, Restored};
use placer_core::plan::{Action, Outcome};
use placer_core::CpuSet;
use std::path::{Path, PathBuf};

/// /sys/class/net/DEV/queues/QUEUE/rps_cpus.
pub struct RpsHandler;

impl CpuFileKnob for RpsHandler {
    fn path(&self, root: &Path, knob: &Knob) -> Option<PathBuf> {
        match knob {
            Knob::Rps { dev, queue } => {
                Some(root.join(format!("sys/class/net/{dev}/queues/{queue}/rps_cpus")))
            }
            _ => None,
        }
    }
    fn parse(&self, text: &str) -> Option<CpuSet> {
        CpuSet::parse_mask(text.trim()).ok()
    }
    fn format(&self, cpus: &CpuSet) -> String {
        cpus.to_mask_string()
    }
}

impl KnobHandler for RpsHandler {
    fn kinds(&self) -> &'static [&'static str] {
        &["rps"]
    }
    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action) -> Option<Outcome> {
        let dry_run = ctx.dry_run();
        match action {
            Action::SetRps { dev, queue, cpus } => Some(self.set(
                ctx,
                Knob::Rps {
                    dev: dev.clone(),
                    queue: queue.clone(),
                },
                cpus,
                dev,
                dry_run,
            )),
            _ => None,
        }
    }
    fn restore(&mut self, root: &Path, entry: &Entry) -> Restored {
        self.put_back(root, entry)
    }
}
