//! Receive packet steering: one file per receive queue, a CPU mask.

use crate::journal::{valid_dev_name, valid_queue_name, Entry, Knob};
use crate::knob::{CpuFileKnob, Ctx, KnobFs, KnobHandler, Restored};
use placer_core::plan::{Action, Outcome};
use placer_core::policy_kind::PolicyKind;
use placer_core::CpuSet;
use std::path::Path;

/// /sys/class/net/DEV/queues/QUEUE/rps_cpus.
pub struct RpsHandler;

impl CpuFileKnob for RpsHandler {
    fn locate(&self, knob: &Knob) -> Option<(KnobFs, String)> {
        match knob {
            Knob::Rps { dev, queue } if valid_dev_name(dev) && valid_queue_name(queue) => Some((
                KnobFs::Sys,
                format!("class/net/{dev}/queues/{queue}/rps_cpus"),
            )),
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
    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action, _policy: PolicyKind) -> Outcome {
        let dry_run = ctx.dry_run();
        match action {
            Action::SetRps { dev, queue, cpus } => self.set(
                ctx,
                Knob::Rps {
                    dev: dev.clone(),
                    queue: queue.clone(),
                },
                cpus,
                dev,
                dry_run,
            ),
            _ => crate::knob::not_mine("RPS", action),
        }
    }
    fn restore(&mut self, root: &Path, entry: &Entry) -> Restored {
        self.put_back(root, entry)
    }
}
