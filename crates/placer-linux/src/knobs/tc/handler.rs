//! The actuator's tc handler: LimitBandwidth / RemoveLimit; restores the journal's
//! `tc_qdisc` knobs. The journal entry's `previous` is the device's root qdisc before placer
//! (for people); `applied` is the device's [`DevLimits`] as JSON, which is all a restore
//! needs.

use super::ctx::*;
use super::limiter::*;
use crate::error::LinuxError;
use crate::journal::{Entry, Knob};
use crate::knob::{Ctx, KnobHandler, Restored};
use placer_core::plan::{Action, Outcome};
use placer_core::policy_kind::PolicyKind;
use std::path::Path;

// ---------------------------------------------------------------------------------------
// Actuator handler: LimitBandwidth / RemoveLimit; restores the journal's `tc_qdisc` knobs.
// The journal entry's `previous` is the device's root qdisc before placer (for people);
// `applied` is the device's [`DevLimits`] as JSON, which is all a restore needs.

/// The tc knob handler: owns the [`Limiter`] (the actuator's for `tc_qdisc`).
#[derive(Debug, Default)]
pub struct TcHandler {
    pub limiter: Limiter,
    /// Network namespace the actions' devices live in (None: the host's).
    pub ctx: TcCtx,
}

pub(crate) fn knob_of(rec: &DevLimits) -> Knob {
    Knob::TcQdisc {
        dev: rec.dev.clone(),
        netns: rec.ctx.netns.clone(),
    }
}

pub(crate) fn outcome_of_tc(e: &LinuxError) -> Outcome {
    let m = e.to_string();
    if m.contains("someone else") || m.contains("Cannot find device") || m.contains("not found") {
        Outcome::Permanent(m)
    } else {
        Outcome::Transient(m)
    }
}

impl TcHandler {
    fn live(ctx: &Ctx<'_>) -> Option<Outcome> {
        (ctx.root != std::path::Path::new("/")).then(|| {
            Outcome::Permanent(format!(
                "tc acts on the running kernel; root {} is not /",
                ctx.root.display()
            ))
        })
    }

    fn adopt_from_journal(&mut self, ctx: &Ctx<'_>, dev: &str) {
        if self.limiter.record(&self.ctx, dev).is_some() {
            return;
        }
        let knob = Knob::TcQdisc {
            dev: dev.to_string(),
            netns: self.ctx.netns.clone(),
        };
        if let Some(rec) = ctx
            .entry(&knob)
            .and_then(|e| serde_json::from_str::<DevLimits>(&e.applied).ok())
        {
            self.limiter.adopt(rec);
        }
    }
}

impl KnobHandler for TcHandler {
    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action, _policy: PolicyKind) -> Outcome {
        let dry_run = ctx.dry_run();
        match action {
            Action::LimitBandwidth {
                app,
                dev,
                rate_bytes_per_s,
                flows,
                direction,
            } => {
                if let Some(o) = Self::live(ctx) {
                    return o;
                }
                if dry_run {
                    return Outcome::Skipped(format!(
                        "dry run: would limit {app} on {dev} to {rate_bytes_per_s} B/s \
                         ({} flows, {direction:?})",
                        flows.len()
                    ));
                }
                self.adopt_from_journal(ctx, dev);
                let Some(journal) = ctx.journal.as_deref_mut() else {
                    return Outcome::Transient("no journal".into());
                };
                let spec = LimitSpec {
                    app,
                    rate_bytes_per_s: *rate_bytes_per_s,
                    flows,
                    direction: *direction,
                };
                let tctx = self.ctx.clone();
                let mut journal_failed = false;
                let r = self.limiter.limit(&tctx, dev, &spec, &mut |rec| {
                    let value = serde_json::to_string(rec).unwrap_or_default();
                    journal
                        .record(knob_of(rec), &rec.prev_root, &value, app)
                        .inspect_err(|_| journal_failed = true)
                        .map(|_| ())
                });
                match r {
                    Err(e) if journal_failed => Outcome::Transient(format!("journal: {e}")),
                    Ok(LimitChange::Unchanged) => {
                        Outcome::Skipped(format!("{app} already limited on {dev}"))
                    }
                    Ok(LimitChange::Applied) => Outcome::Done,
                    Err(e) => outcome_of_tc(&e),
                }
            }
            Action::RemoveLimit { app, dev } => {
                if let Some(o) = Self::live(ctx) {
                    return o;
                }
                if dry_run {
                    return Outcome::Skipped(format!(
                        "dry run: would remove {app}'s limit on {dev}"
                    ));
                }
                self.adopt_from_journal(ctx, dev);
                let knob = Knob::TcQdisc {
                    dev: dev.clone(),
                    netns: self.ctx.netns.clone(),
                };
                let tctx = self.ctx.clone();
                let r = self.limiter.remove(&tctx, dev, app);
                let Some(journal) = ctx.journal.as_deref_mut() else {
                    return Outcome::Transient("no journal".into());
                };
                let j = match &r {
                    Ok(None) => journal.remove(&knob),
                    Ok(Some(rec)) => journal
                        .record(
                            knob,
                            &rec.prev_root,
                            &serde_json::to_string(rec).unwrap_or_default(),
                            app,
                        )
                        .map(|_| ()),
                    Err(_) => Ok(()),
                };
                match (r, j) {
                    (Err(e), _) => outcome_of_tc(&e),
                    (_, Err(e)) => Outcome::Transient(format!("journal: {e}")),
                    _ => Outcome::Done,
                }
            }
            _ => crate::knob::not_mine("tc", action),
        }
    }

    fn restore(&mut self, _root: &Path, entry: &Entry) -> Restored {
        let rec: DevLimits = match serde_json::from_str(&entry.applied) {
            Ok(r) => r,
            Err(e) => return Restored::Failed(format!("{}: bad journal value: {e}", entry.knob)),
        };
        self.limiter
            .devs
            .remove(&(rec.ctx.netns.clone(), rec.dev.clone()));
        if show_qdiscs(&rec.ctx, &rec.dev).is_err() {
            return Restored::Gone(format!("{} is gone", entry.knob));
        }
        match restore_dev(&rec) {
            Ok(()) => Restored::Restored,
            Err(e) => Restored::Failed(e.to_string()),
        }
    }
}
