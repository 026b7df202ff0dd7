//! IRQ affinity: one file per interrupt, a CPU list.

use crate::journal::{Entry, Knob};
use crate::knob::{CpuFileKnob, Ctx, KnobFs, KnobHandler, Restored};
use placer_core::plan::{Action, Outcome};
use placer_core::policy_kind::PolicyKind;
use placer_core::CpuSet;
use std::path::Path;

/// /proc/irq/N/smp_affinity_list.
pub struct IrqHandler;

impl CpuFileKnob for IrqHandler {
    fn locate(&self, knob: &Knob) -> Option<(KnobFs, String)> {
        match knob {
            Knob::IrqAffinity { irq } => {
                Some((KnobFs::Proc, format!("irq/{irq}/smp_affinity_list")))
            }
            _ => None,
        }
    }
    fn parse(&self, text: &str) -> Option<CpuSet> {
        CpuSet::parse_list(text.trim()).ok()
    }
    fn format(&self, cpus: &CpuSet) -> String {
        cpus.to_list_string()
    }
}

impl KnobHandler for IrqHandler {
    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action, _policy: PolicyKind) -> Outcome {
        let dry_run = ctx.dry_run();
        match action {
            Action::SetIrqAffinity { irq, cpus } => self.set(
                ctx,
                Knob::IrqAffinity { irq: *irq },
                cpus,
                &format!("irq {irq}"),
                dry_run,
            ),
            Action::RestoreIrq { irq } => {
                self.restore_action(ctx, Knob::IrqAffinity { irq: *irq }, dry_run)
            }
            _ => crate::knob::not_mine("IRQ affinity", action),
        }
    }
    fn restore(&mut self, root: &Path, entry: &Entry) -> Restored {
        self.put_back(root, entry)
    }
}
