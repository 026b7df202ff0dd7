//! The limiter: sets, changes and removes per-app limits on a device (egress HTB, ingress
//! through the IFB), recording what it created, and removes exactly that on restore.

use super::args::*;
use super::ctx::*;
use crate::error::{LinuxError, Result};
use placer_core::plan::{Direction, FlowMatch};
use std::collections::BTreeMap;

pub(crate) fn ifindex(ctx: &TcCtx, dev: &str) -> Result<u32> {
    // `ip -o link show dev X` starts with "IFINDEX: X...".
    let t = ctx.run("ip", &s(&["-o", "link", "show", "dev", dev]))?;
    t.split(':')
        .next()
        .and_then(|x| x.trim().parse().ok())
        .ok_or_else(|| LinuxError::Other(format!("ifindex of {dev}: {t:?}")))
}

/// What a [`Limiter::limit`] call did.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitChange {
    /// Already so.
    Unchanged,
    /// Applied; journal the device record (`DevLimits`) now held by the limiter.
    Applied,
}

/// One app's limit request.
#[derive(Debug, Clone, Copy)]
pub struct LimitSpec<'a> {
    pub app: &'a str,
    pub rate_bytes_per_s: u64,
    pub flows: &'a [FlowMatch],
    pub direction: Direction,
}

/// The limiter: the devices it manages and what it created on each.
#[derive(Debug, Default)]
pub struct Limiter {
    pub devs: BTreeMap<(Option<String>, String), DevLimits>,
}

impl Limiter {
    pub fn new() -> Self {
        Limiter::default()
    }

    /// Adopts records from the journal (after a crash), so a later restore removes them.
    pub fn adopt(&mut self, rec: DevLimits) {
        self.devs
            .insert((rec.ctx.netns.clone(), rec.dev.clone()), rec);
    }

    /// The record of a device, once placer touched it.
    pub fn record(&self, ctx: &TcCtx, dev: &str) -> Option<&DevLimits> {
        self.devs.get(&(ctx.netns.clone(), dev.to_string()))
    }

    /// Limits `app`'s `flows` on `dev` to `rate_bytes_per_s` in `direction`. `journal` is
    /// called with the device record as it will be *before* each step that creates
    /// something, so a crash mid-way leaves a journal that covers it; when it fails, nothing
    /// more is created (a change the journal does not cover could never be restored).
    pub fn limit(
        &mut self,
        ctx: &TcCtx,
        dev: &str,
        spec: &LimitSpec,
        journal: &mut dyn FnMut(&DevLimits) -> Result<()>,
    ) -> Result<LimitChange> {
        let LimitSpec {
            app,
            rate_bytes_per_s,
            flows,
            direction,
        } = *spec;
        let key = (ctx.netns.clone(), dev.to_string());
        if let Some(rec) = self.devs.get(&key) {
            if let Some(a) = rec.apps.get(app) {
                if a.rate_bytes_per_s == rate_bytes_per_s
                    && a.flows == flows
                    && a.direction == direction
                {
                    return Ok(LimitChange::Unchanged);
                }
            }
        }
        let q = show_qdiscs(ctx, dev)?;
        let mut rec = match self.devs.get(&key) {
            Some(r) => r.clone(),
            None => DevLimits {
                dev: dev.to_string(),
                ctx: ctx.clone(),
                prev_root: q
                    .iter()
                    .find(|q| q.root)
                    .map_or("none".into(), |q| format!("{} {}", q.kind, q.handle)),
                root_created: false,
                ingress_created: false,
                ifb: None,
                apps: BTreeMap::new(),
            },
        };
        let egress = direction != Direction::Ingress;
        let ingress = direction != Direction::Egress;
        // Ensure the root HTB.
        if egress && !rec.root_created && !root_is_placers(&q) {
            if !root_is_default(&q) {
                let r = q.iter().find(|q| q.root);
                return Err(LinuxError::Other(format!(
                    "{dev}: root qdisc {} {} was configured by someone else; placer does not \
                     replace it",
                    r.map_or("?", |r| r.kind.as_str()),
                    r.map_or("?", |r| r.handle.as_str())
                )));
            }
            rec.root_created = true;
            journal(&rec)?;
            ctx.tc(&root_htb_args(dev))?;
        } else if egress && root_is_placers(&q) && !rec.root_created {
            // Left over from a crash whose journal we did not see: ours by its handle.
            rec.root_created = true;
        }
        // Ensure ingress + IFB.
        if ingress && rec.ifb.is_none() {
            let ifb = format!("plq{}", ifindex(ctx, dev)?);
            rec.ifb = Some(ifb.clone());
            if !has_ingress(&q) {
                rec.ingress_created = true;
            }
            journal(&rec)?;
            ctx.run("ip", &s(&["link", "add", &ifb, "type", "ifb"]))?;
            ctx.run("ip", &s(&["link", "set", &ifb, "up"]))?;
            ctx.tc(&root_htb_args(&ifb))?;
            if rec.ingress_created {
                ctx.tc(&s(&[
                    "qdisc", "add", "dev", dev, "handle", "ffff:", "ingress",
                ]))?;
            }
        }
        // The app's class and filters (replace: remove its old filters first).
        let minor = match rec.apps.get(app) {
            Some(a) => a.minor,
            None => (1..=MAX_MINOR)
                .find(|m| rec.apps.values().all(|a| a.minor != *m))
                .ok_or_else(|| LinuxError::Other(format!("{dev}: too many limited apps")))?,
        };
        if let Some(old) = rec.apps.get(app).cloned() {
            remove_app_filters(ctx, &rec, &old);
        }
        rec.apps.insert(
            app.to_string(),
            AppLimit {
                minor,
                rate_bytes_per_s,
                flows: flows.to_vec(),
                direction,
            },
        );
        journal(&rec)?;
        if egress {
            ctx.tc(&class_args(dev, minor, rate_bytes_per_s))?;
            for f in flows {
                ctx.tc(&class_filter_args(dev, minor, &f.local, &f.remote))?;
            }
        }
        if let (true, Some(ifb)) = (ingress, rec.ifb.clone()) {
            ctx.tc(&class_args(&ifb, minor, rate_bytes_per_s))?;
            for f in flows {
                ctx.tc(&class_filter_args(&ifb, minor, &f.remote, &f.local))?;
                ctx.tc(&redirect_filter_args(dev, &ifb, minor, f))?;
            }
        }
        self.devs.insert(key, rec);
        Ok(LimitChange::Applied)
    }

    /// Removes `app`'s limit on `dev`; when it was the last app there, everything placer
    /// created on the device goes. Returns the remaining record (None = device restored).
    pub fn remove(&mut self, ctx: &TcCtx, dev: &str, app: &str) -> Result<Option<DevLimits>> {
        let key = (ctx.netns.clone(), dev.to_string());
        let Some(mut rec) = self.devs.remove(&key) else {
            return Ok(None);
        };
        if let Some(a) = rec.apps.remove(app) {
            remove_app(ctx, &rec, &a);
        }
        if rec.apps.is_empty() {
            restore_dev(&rec)?;
            return Ok(None);
        }
        self.devs.insert(key, rec.clone());
        Ok(Some(rec))
    }

    /// Restores every device (shutdown, `placer restore`); the first error is returned
    /// after trying all.
    pub fn restore_all(&mut self) -> Result<()> {
        let mut first = None;
        for (_, rec) in std::mem::take(&mut self.devs) {
            if let Err(e) = restore_dev(&rec) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// Deletes an app's filters and classes; what is missing is fine (already gone).
pub(crate) fn remove_app(ctx: &TcCtx, rec: &DevLimits, a: &AppLimit) {
    remove_app_filters(ctx, rec, a);
    let _ = ctx.tc(&s(&[
        "class",
        "del",
        "dev",
        &rec.dev,
        "classid",
        &classid(a.minor),
    ]));
    if let Some(ifb) = &rec.ifb {
        let _ = ctx.tc(&s(&[
            "class",
            "del",
            "dev",
            ifb,
            "classid",
            &classid(a.minor),
        ]));
    }
}

pub(crate) fn remove_app_filters(ctx: &TcCtx, rec: &DevLimits, a: &AppLimit) {
    // Deleting by priority removes all of the app's filters of that family at once;
    // a missing filter is fine (already gone).
    for v6 in [false, true] {
        let p = prio(a.minor, v6).to_string();
        let proto = if v6 { "ipv6" } else { "ip" };
        let del = |dev: &str, parent: &str| {
            let _ = ctx.tc(&s(&[
                "filter", "del", "dev", dev, "parent", parent, "protocol", proto, "prio", &p,
            ]));
        };
        del(&rec.dev, &format!("{HANDLE}:"));
        if let Some(ifb) = &rec.ifb {
            del(&rec.dev, "ffff:");
            del(ifb, &format!("{HANDLE}:"));
        }
    }
}

/// Removes exactly what the record says placer created on its device. Missing pieces
/// (already gone, device deleted) are not errors: restore must be idempotent.
pub fn restore_dev(rec: &DevLimits) -> Result<()> {
    let ctx = &rec.ctx;
    // Set in an unnamed namespace: only a restore from inside it reaches its devices.
    if let (None, Some(ino)) = (&ctx.netns, ctx.netns_inode) {
        if netns_inode("/proc/thread-self/ns/net") != Some(ino) {
            return Err(LinuxError::Other(format!(
                "{}: set in network namespace inode {ino}, which has no name under /run/netns \
                 and is not this one: run `placer restore` inside it",
                rec.dev
            )));
        }
    }
    let dev = rec.dev.as_str();
    // Device gone: nothing on it to restore.
    let q = show_qdiscs(ctx, dev).unwrap_or_default();
    let mut err = None;
    let mut keep = |r: Result<String>| {
        if let Err(e) = r {
            err.get_or_insert(e);
        }
    };
    if !rec.root_created || (rec.ifb.is_some() && !rec.ingress_created) {
        // Some of placer's filters sit in qdiscs placer did not create: remove them one by one.
        for a in rec.apps.values() {
            remove_app(ctx, rec, a);
        }
    }
    if rec.root_created && root_is_placers(&q) {
        keep(ctx.tc(&s(&["qdisc", "del", "dev", dev, "root"])));
    }
    if rec.ingress_created && has_ingress(&q) {
        keep(ctx.tc(&s(&["qdisc", "del", "dev", dev, "ingress"])));
    }
    if let Some(ifb) = &rec.ifb {
        if ctx.run("ip", &s(&["link", "show", "dev", ifb])).is_ok() {
            keep(ctx.run("ip", &s(&["link", "del", "dev", ifb])));
        }
    }
    err.map_or(Ok(()), Err)
}
