//! Per-app bandwidth limiter (seed 000's network manager): rate-limit each network app's
//! flows with tc, which bounds the softirq load the app causes.
//!
//! - Egress: a root HTB qdisc (handle `1ace:`, `default 0` so unmatched traffic bypasses
//!   shaping), one class `1ace:N` per app (rate = ceil = the app's limit), and u32 filters
//!   matching each of the app's flows (src ip+port, dst ip+port) to that class.
//! - Ingress: an `ingress` qdisc whose u32 filters redirect the app's incoming flows
//!   (`action mirred egress redirect`) to an IFB device placer creates (`plqIFINDEX`),
//!   which carries the same HTB classes. IFB rather than `police` because shaping queues
//!   instead of dropping: TCP settles at the rate instead of see-sawing below it, the same
//!   class code serves both directions, and many kernels (this VM's among them) build
//!   without `act_police` while `act_mirred` is common.
//! - Every command is an argument vector run by [`std::process::Command`] (never a
//!   shell); with a network namespace it is prefixed by `ip netns exec NS`.
//! - What placer created on a device is recorded in [`DevLimits`] (journaled before each
//!   change: previous root qdisc, whether placer created the root/ingress qdiscs and the
//!   IFB). [`restore_dev`] removes exactly that: the root qdisc only if placer created it
//!   (the kernel's default comes back), otherwise only placer's classes and filters; same
//!   for ingress. A root qdisc someone else configured is never replaced.

use crate::error::{LinuxError, Result};
use placer_core::plan::{Direction, FlowMatch};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;

/// The HTB handle placer's qdiscs use (recognisable in `tc qdisc show`).
pub const HANDLE: &str = "1ace";
/// Filter priorities: IPv4 filters of class minor N at `PRIO_V4 + N`, IPv6 at `PRIO_V6 + N`.
const PRIO_V4: u32 = 1000;
const PRIO_V6: u32 = 2000;
const MAX_MINOR: u16 = 999;

/// Where tc runs: the host's namespace or a named one (`ip netns exec NS`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TcCtx {
    pub netns: Option<String>,
    /// The namespace's inode (/proc/thread-self/ns/net) where placer ran without a name for it, so
    /// a restore elsewhere can tell it is not in that namespace (journaled with the knob).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns_inode: Option<u64>,
}

/// The inode of a network namespace file (`/proc/thread-self/ns/net`, `/run/netns/NAME`).
fn netns_inode(path: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

impl TcCtx {
    pub fn host() -> Self {
        TcCtx {
            netns: None,
            netns_inode: None,
        }
    }
    pub fn netns(name: &str) -> Self {
        TcCtx {
            netns: Some(name.to_string()),
            netns_inode: None,
        }
    }

    /// The namespace this process runs in: the host's, a named one (`ip netns exec NAME
    /// placer ...`: found by inode under /run/netns, so the journal names it and a restore
    /// from anywhere acts in it), or an unnamed one (its inode is recorded).
    pub fn current() -> Self {
        let mine = netns_inode("/proc/thread-self/ns/net");
        if mine.is_none() || mine == netns_inode("/proc/1/ns/net") {
            return TcCtx::host();
        }
        let named = std::fs::read_dir("/run/netns").ok().and_then(|rd| {
            rd.flatten().find_map(|e| {
                let p = e.path();
                (netns_inode(&p.to_string_lossy()) == mine)
                    .then(|| e.file_name().to_string_lossy().into_owned())
            })
        });
        match named {
            Some(name) => TcCtx::netns(&name),
            None => TcCtx {
                netns: None,
                netns_inode: mine,
            },
        }
    }

    /// The argument vector for `prog args` in this context (first element = program).
    pub fn argv(&self, prog: &str, args: &[String]) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(ns) = &self.netns {
            v.extend(["ip", "netns", "exec", ns.as_str()].map(String::from));
        }
        v.push(prog.to_string());
        v.extend(args.iter().cloned());
        v
    }

    /// Runs `prog args`; stdout on success, an error with the command and stderr otherwise.
    pub fn run(&self, prog: &str, args: &[String]) -> Result<String> {
        let argv = self.argv(prog, args);
        let out = Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .map_err(|e| LinuxError::Other(format!("{}: {e}", argv.join(" "))))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(LinuxError::Other(format!(
                "`{}` failed ({}): {}",
                argv.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }

    fn tc(&self, args: &[String]) -> Result<String> {
        self.run("tc", args)
    }
}

pub(crate) fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// One qdisc from `tc -j qdisc show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QdiscInfo {
    pub kind: String,
    pub handle: String,
    #[serde(default)]
    pub root: bool,
    #[serde(default)]
    pub parent: Option<String>,
}

/// Parses `tc -j qdisc show dev X`.
pub fn parse_qdiscs(json: &str) -> Result<Vec<QdiscInfo>> {
    if json.trim().is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(json).map_err(|e| LinuxError::Other(format!("tc -j qdisc show: {e}")))
}

pub fn show_qdiscs(ctx: &TcCtx, dev: &str) -> Result<Vec<QdiscInfo>> {
    parse_qdiscs(&ctx.tc(&s(&["-j", "qdisc", "show", "dev", dev]))?)
}

/// The root qdisc is the kernel's default (handle `0:`: noqueue, pfifo_fast, fq_codel, mq).
pub fn root_is_default(q: &[QdiscInfo]) -> bool {
    q.iter().filter(|q| q.root).all(|q| q.handle == "0:")
}

/// Whether placer's root HTB is there.
pub fn root_is_placers(q: &[QdiscInfo]) -> bool {
    q.iter()
        .any(|q| q.root && q.kind == "htb" && q.handle == format!("{HANDLE}:"))
}

pub fn has_ingress(q: &[QdiscInfo]) -> bool {
    q.iter().any(|q| q.kind == "ingress" || q.kind == "clsact")
}

/// One app's limit on a device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppLimit {
    pub minor: u16,
    pub rate_bytes_per_s: u64,
    pub flows: Vec<FlowMatch>,
    pub direction: Direction,
}

/// Everything placer created on one device: the journal record of the `tc` knob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DevLimits {
    pub dev: String,
    pub ctx: TcCtx,
    /// The root qdisc before placer (`noqueue 0:`), for people reading the journal.
    pub prev_root: String,
    /// Placer created the root HTB (restore deletes it; the kernel default comes back).
    pub root_created: bool,
    /// Placer created the ingress qdisc.
    pub ingress_created: bool,
    /// The IFB device placer created for ingress shaping (restore deletes it).
    pub ifb: Option<String>,
    pub apps: BTreeMap<String, AppLimit>,
}

/// `1ace:7`
pub fn classid(minor: u16) -> String {
    format!("{HANDLE}:{minor:x}")
}

fn is_v6(f: &FlowMatch) -> bool {
    f.local.is_ipv6() || f.remote.is_ipv6()
}

fn prio(minor: u16, v6: bool) -> u32 {
    (if v6 { PRIO_V6 } else { PRIO_V4 }) + u32::from(minor)
}

/// u32 match terms for packets from `src` to `dst` (unspecified IPs and port 0 are left
/// out: they match anything).
pub fn u32_match(src: &SocketAddr, dst: &SocketAddr) -> Vec<String> {
    let mut v = Vec::new();
    let fam = if src.is_ipv6() || dst.is_ipv6() {
        "ip6"
    } else {
        "ip"
    };
    let mut ip = |dir: &str, a: &IpAddr| {
        if !a.is_unspecified() {
            let len = if a.is_ipv6() { 128 } else { 32 };
            v.extend(s(&["match", fam, dir, &format!("{a}/{len}")]));
        }
    };
    ip("src", &src.ip());
    ip("dst", &dst.ip());
    for (dir, port) in [("sport", src.port()), ("dport", dst.port())] {
        if port != 0 {
            v.extend(s(&["match", fam, dir, &port.to_string(), "0xffff"]));
        }
    }
    if v.is_empty() {
        // u32 needs a selector: this one matches every packet.
        v.extend(s(&["match", "u32", "0", "0"]));
    }
    v
}

/// `tc filter add dev DEV parent 1ace: protocol ip prio P u32 <match> flowid 1ace:N`:
/// classifies packets from `src` to `dst` into the app's class.
pub fn class_filter_args(dev: &str, minor: u16, src: &SocketAddr, dst: &SocketAddr) -> Vec<String> {
    let v6 = src.is_ipv6() || dst.is_ipv6();
    let mut a = s(&["filter", "add", "dev", dev, "parent"]);
    a.push(format!("{HANDLE}:"));
    a.extend(s(&["protocol", if v6 { "ipv6" } else { "ip" }, "prio"]));
    a.push(prio(minor, v6).to_string());
    a.push("u32".into());
    a.extend(u32_match(src, dst));
    a.extend(s(&["flowid", &classid(minor)]));
    a
}

/// `tc filter add dev DEV parent ffff: ... u32 <match> action mirred egress redirect dev
/// IFB`: sends the app's incoming packets through the IFB device's HTB.
pub fn redirect_filter_args(dev: &str, ifb: &str, minor: u16, f: &FlowMatch) -> Vec<String> {
    let v6 = is_v6(f);
    let mut a = s(&["filter", "add", "dev", dev, "parent", "ffff:", "protocol"]);
    a.push(if v6 { "ipv6" } else { "ip" }.into());
    a.push("prio".into());
    a.push(prio(minor, v6).to_string());
    a.push("u32".into());
    a.extend(u32_match(&f.remote, &f.local));
    a.extend(s(&["action", "mirred", "egress", "redirect", "dev", ifb]));
    a
}

/// `tc class replace dev DEV parent 1ace: classid 1ace:N htb rate Rbps ceil Rbps quantum Q`
/// (tc's `bps` is bytes per second).
pub fn class_args(dev: &str, minor: u16, rate_bytes_per_s: u64) -> Vec<String> {
    let rate = format!("{}bps", rate_bytes_per_s.max(1));
    // HTB's default quantum (rate / r2q) is out of range for fast or slow classes and
    // makes tc warn; keep it between one MTU frame and 60 kB.
    let quantum = (rate_bytes_per_s / 10).clamp(1514, 60_000).to_string();
    let mut a = s(&["class", "replace", "dev", dev, "parent"]);
    a.push(format!("{HANDLE}:"));
    a.extend(s(&[
        "classid",
        &classid(minor),
        "htb",
        "rate",
        &rate,
        "ceil",
        &rate,
    ]));
    a.extend(s(&["quantum", &quantum]));
    a
}

fn root_htb_args(dev: &str) -> Vec<String> {
    let mut a = s(&["qdisc", "add", "dev", dev, "root", "handle"]);
    a.push(format!("{HANDLE}:"));
    a.extend(s(&["htb", "default", "0"]));
    a
}

fn ifindex(ctx: &TcCtx, dev: &str) -> Result<u32> {
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
fn remove_app(ctx: &TcCtx, rec: &DevLimits, a: &AppLimit) {
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

fn remove_app_filters(ctx: &TcCtx, rec: &DevLimits, a: &AppLimit) {
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

// ---------------------------------------------------------------------------------------
// Actuator handler: LimitBandwidth / RemoveLimit; restores the journal's `tc_qdisc` knobs.
// The journal entry's `previous` is the device's root qdisc before placer (for people);
// `applied` is the device's [`DevLimits`] as JSON, which is all a restore needs.

use crate::journal::{Entry, Knob};
use crate::knob::{Ctx, KnobHandler, Restored};
use placer_core::plan::{Action, Outcome};

/// The tc knob handler: owns the [`Limiter`] (register with `Handlers::register`).
#[derive(Debug, Default)]
pub struct TcHandler {
    pub limiter: Limiter,
    /// Network namespace the actions' devices live in (None: the host's).
    pub ctx: TcCtx,
}

fn knob_of(rec: &DevLimits) -> Knob {
    Knob::TcQdisc {
        dev: rec.dev.clone(),
        netns: rec.ctx.netns.clone(),
    }
}

fn outcome_of_tc(e: &LinuxError) -> Outcome {
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
    fn kinds(&self) -> &'static [&'static str] {
        &["tc_qdisc"]
    }

    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action) -> Option<Outcome> {
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
                    return Some(o);
                }
                if dry_run {
                    return Some(Outcome::Skipped(format!(
                        "dry run: would limit {app} on {dev} to {rate_bytes_per_s} B/s \
                         ({} flows, {direction:?})",
                        flows.len()
                    )));
                }
                self.adopt_from_journal(ctx, dev);
                let Some(journal) = ctx.journal.as_deref_mut() else {
                    return Some(Outcome::Transient("no journal".into()));
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
                Some(match r {
                    Err(e) if journal_failed => Outcome::Transient(format!("journal: {e}")),
                    Ok(LimitChange::Unchanged) => {
                        Outcome::Skipped(format!("{app} already limited on {dev}"))
                    }
                    Ok(LimitChange::Applied) => Outcome::Done,
                    Err(e) => outcome_of_tc(&e),
                })
            }
            Action::RemoveLimit { app, dev } => {
                if let Some(o) = Self::live(ctx) {
                    return Some(o);
                }
                if dry_run {
                    return Some(Outcome::Skipped(format!(
                        "dry run: would remove {app}'s limit on {dev}"
                    )));
                }
                self.adopt_from_journal(ctx, dev);
                let knob = Knob::TcQdisc {
                    dev: dev.clone(),
                    netns: self.ctx.netns.clone(),
                };
                let tctx = self.ctx.clone();
                let r = self.limiter.remove(&tctx, dev, app);
                let Some(journal) = ctx.journal.as_deref_mut() else {
                    return Some(Outcome::Transient("no journal".into()));
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
                Some(match (r, j) {
                    (Err(e), _) => outcome_of_tc(&e),
                    (_, Err(e)) => Outcome::Transient(format!("journal: {e}")),
                    _ => Outcome::Done,
                })
            }
            _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testnet::*;

    fn fm(l: &str, r: &str) -> FlowMatch {
        FlowMatch {
            local: l.parse().unwrap(),
            remote: r.parse().unwrap(),
        }
    }

    #[test]
    fn argument_vectors() {
        let f = fm("10.0.0.2:40000", "10.0.0.1:21");
        assert_eq!(
            class_filter_args("eth0", 3, &f.local, &f.remote).join(" "),
            "filter add dev eth0 parent 1ace: protocol ip prio 1003 u32 match ip src \
             10.0.0.2/32 match ip dst 10.0.0.1/32 match ip sport 40000 0xffff match ip dport \
             21 0xffff flowid 1ace:3"
        );
        assert_eq!(
            redirect_filter_args("eth0", "plq2", 3, &f).join(" "),
            "filter add dev eth0 parent ffff: protocol ip prio 1003 u32 match ip src \
             10.0.0.1/32 match ip dst 10.0.0.2/32 match ip sport 21 0xffff match ip dport \
             40000 0xffff action mirred egress redirect dev plq2"
        );
        let f6 = fm("[::]:8080", "[2001:db8::1]:0");
        assert_eq!(
            class_filter_args("eth0", 12, &f6.local, &f6.remote).join(" "),
            "filter add dev eth0 parent 1ace: protocol ipv6 prio 2012 u32 match ip6 dst \
             2001:db8::1/128 match ip6 sport 8080 0xffff flowid 1ace:c"
        );
        assert_eq!(
            class_args("eth0", 1, 2_000_000).join(" "),
            "class replace dev eth0 parent 1ace: classid 1ace:1 htb rate 2000000bps ceil \
             2000000bps quantum 60000"
        );
        let ns = TcCtx::netns("n1");
        assert_eq!(
            ns.argv("tc", &s(&["qdisc", "show"])),
            s(&["ip", "netns", "exec", "n1", "tc", "qdisc", "show"])
        );
        assert_eq!(TcCtx::host().argv("tc", &[]), s(&["tc"]));
        let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
        assert_eq!(u32_match(&any, &any), s(&["match", "u32", "0", "0"]));
    }

    #[test]
    fn parses_qdisc_json() {
        let q = parse_qdiscs(
            r#"[{"kind":"noqueue","handle":"0:","root":true,"refcnt":2,"options":{}},
                {"kind":"ingress","handle":"ffff:","parent":"ffff:fff1","options":{}}]"#,
        )
        .unwrap();
        assert!(root_is_default(&q) && has_ingress(&q) && !root_is_placers(&q));
        let q = parse_qdiscs(r#"[{"kind":"htb","handle":"1ace:","root":true}]"#).unwrap();
        assert!(root_is_placers(&q) && !root_is_default(&q) && !has_ingress(&q));
        let q = parse_qdiscs(r#"[{"kind":"htb","handle":"1:","root":true}]"#).unwrap();
        assert!(!root_is_placers(&q) && !root_is_default(&q));
        assert!(parse_qdiscs("").unwrap().is_empty());
        assert!(parse_qdiscs("not json").is_err());
    }

    /// Only the kernel's default root qdisc and no ingress qdisc, on every device of `ns`.
    fn clean(ns: &str, dev: &str) -> bool {
        let q = show_qdiscs(&TcCtx::netns(ns), dev).unwrap();
        root_is_default(&q) && !has_ingress(&q)
    }

    fn links(ns: &str) -> String {
        TcCtx::netns(ns)
            .run("ip", &s(&["-o", "link", "show"]))
            .unwrap_or_default()
    }

    fn within(rate: f64, limit: f64, tol: f64) -> bool {
        (rate - limit).abs() <= tol * limit
    }

    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_egress_and_ingress_limits_cap_the_rate_and_restore_cleanly() {
        placer_testkit::require_root();
        if let Some(why) = unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        let pair = VethPair::new().expect("veth pair");
        let limit = 2_000_000u64; // 16 Mbit/s
                                  // Unlimited first: the test can fail (the link is far faster than the limit).
        let free = stream(&pair, 5201, 0.3, 1.0, |_, _| {}).unwrap();
        assert!(free > 4.0 * limit as f64, "unlimited rate {free:.0} B/s");

        // Egress: limiter on the sender's veth, in the sender's namespace.
        let ctx_a = TcCtx::netns(&pair.ns_a);
        let mut lim = Limiter::new();
        let mut journaled = Vec::new();
        let dev_a = pair.dev_a.clone();
        let rate = {
            let lim = &mut lim;
            let journaled = &mut journaled;
            stream(&pair, 5202, 0.8, 2.5, |local, remote| {
                let flows = [FlowMatch { local, remote }];
                let ch = lim
                    .limit(
                        &ctx_a,
                        &dev_a,
                        &LimitSpec {
                            app: "sender",
                            rate_bytes_per_s: limit,
                            flows: &flows,
                            direction: Direction::Egress,
                        },
                        &mut |r| {
                            journaled.push(r.clone());
                            Ok(())
                        },
                    )
                    .unwrap();
                assert_eq!(ch, LimitChange::Applied);
            })
            .unwrap()
        };
        eprintln!("unlimited {free:.0} B/s; egress limit {limit} B/s -> {rate:.0} B/s");
        assert!(
            within(rate, limit as f64, 0.10),
            "egress-limited rate {rate:.0} B/s"
        );
        assert!(journaled
            .first()
            .is_some_and(|r| r.root_created && r.prev_root == "noqueue 0:"));
        assert!(!clean(&pair.ns_a, &pair.dev_a));
        lim.restore_all().unwrap();
        assert!(clean(&pair.ns_a, &pair.dev_a));

        // Ingress: limiter on the receiver's veth through an IFB device.
        let ctx_b = TcCtx::netns(&pair.ns_b);
        let dev_b = pair.dev_b.clone();
        let mut lim = Limiter::new();
        let rate = {
            let lim = &mut lim;
            stream(&pair, 5203, 0.8, 2.5, |local, remote| {
                // The receiver's view: local = its address, remote = the sender.
                let flows = [FlowMatch {
                    local: remote,
                    remote: local,
                }];
                lim.limit(
                    &ctx_b,
                    &dev_b,
                    &LimitSpec {
                        app: "receiver",
                        rate_bytes_per_s: limit,
                        flows: &flows,
                        direction: Direction::Ingress,
                    },
                    &mut |_| Ok(()),
                )
                .unwrap();
            })
            .unwrap()
        };
        eprintln!("ingress limit {limit} B/s -> {rate:.0} B/s");
        assert!(
            within(rate, limit as f64, 0.10),
            "ingress-limited rate {rate:.0} B/s"
        );
        let rec = lim.record(&ctx_b, &pair.dev_b).unwrap().clone();
        let ifb = rec.ifb.clone().unwrap();
        assert!(links(&pair.ns_b).contains(&ifb));
        assert!(rec.ingress_created && !rec.root_created);
        // Removing the last app restores the device: no qdiscs, no IFB.
        assert_eq!(lim.remove(&ctx_b, &pair.dev_b, "receiver").unwrap(), None);
        assert!(clean(&pair.ns_b, &pair.dev_b));
        assert!(!links(&pair.ns_b).contains(&ifb));
        // Restore is idempotent.
        restore_dev(&rec).unwrap();
    }

    /// Issue 17: placer run inside a named namespace (`ip netns exec NAME placer ...`)
    /// journals the namespace, so a restore from the host removes the qdisc where it is,
    /// instead of reporting it restored and dropping it.
    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_qdisc_set_inside_a_namespace_is_restored_there() {
        placer_testkit::require_root();
        if let Some(why) = unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        let pair = VethPair::new().expect("veth pair");
        let dev = pair.dev_a.clone();
        let ns = pair.ns_a.clone();
        // As the daemon would, from inside the namespace: its context names it.
        let rec = VethPair::in_netns(&ns, move || {
            let ctx = TcCtx::current();
            let flows = [fm("10.201.0.1:1000", "10.201.0.2:2000")];
            let mut lim = Limiter::new();
            let mut journaled = None;
            let spec = LimitSpec {
                app: "app",
                rate_bytes_per_s: 1_000_000,
                flows: &flows,
                direction: Direction::Egress,
            };
            lim.limit(&ctx, &dev, &spec, &mut |r| {
                journaled = Some(r.clone());
                Ok(())
            })
            .expect("limit");
            journaled.expect("journaled")
        })
        .join()
        .expect("thread")
        .expect("setns");
        assert_eq!(rec.ctx.netns.as_deref(), Some(ns.as_str()), "{rec:?}");
        assert_eq!(
            knob_of(&rec),
            Knob::TcQdisc {
                dev: pair.dev_a.clone(),
                netns: Some(ns.clone())
            }
        );
        // From the host namespace (this thread): removed in the namespace.
        restore_dev(&rec).expect("restore");
        let q = show_qdiscs(&TcCtx::netns(&ns), &pair.dev_a).expect("qdiscs");
        assert!(root_is_default(&q), "left behind: {q:?}");
    }

    /// Issue 17: when the journal cannot be written (a full state dir), tc changes nothing:
    /// a qdisc the journal does not cover could never be restored after a crash.
    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_failed_journal_changes_no_qdisc() {
        placer_testkit::require_root();
        if let Some(why) = unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        let pair = VethPair::new().expect("veth pair");
        let ctx = TcCtx::netns(&pair.ns_a);
        let flows = [fm("10.201.0.1:1000", "10.201.0.2:2000")];
        for direction in [Direction::Egress, Direction::Ingress, Direction::Both] {
            let mut lim = Limiter::new();
            let spec = LimitSpec {
                app: "app",
                rate_bytes_per_s: 1_000_000,
                flows: &flows,
                direction,
            };
            let r = lim.limit(&ctx, &pair.dev_a, &spec, &mut |_| {
                Err(LinuxError::Other("No space left on device".into()))
            });
            assert!(r.is_err(), "{direction:?}: limited without a journal");
            let q = show_qdiscs(&ctx, &pair.dev_a).expect("qdiscs");
            assert!(
                root_is_default(&q) && !has_ingress(&q),
                "{direction:?}: {q:?}"
            );
            assert!(
                !links(&pair.ns_a).contains("plq"),
                "{direction:?}: an IFB was created"
            );
        }
    }

    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_foreign_root_qdisc_is_not_replaced_and_same_limit_is_unchanged() {
        placer_testkit::require_root();
        if let Some(why) = unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        let pair = VethPair::new().expect("veth pair");
        let ctx = TcCtx::netns(&pair.ns_a);
        let flows = [fm("10.201.0.1:1000", "10.201.0.2:2000")];
        let mut lim = Limiter::new();
        let put = |lim: &mut Limiter, app: &str, rate: u64, direction: Direction| {
            let spec = LimitSpec {
                app,
                rate_bytes_per_s: rate,
                flows: &flows,
                direction,
            };
            lim.limit(&ctx, &pair.dev_a, &spec, &mut |_| Ok(()))
        };
        assert_eq!(
            put(&mut lim, "x", 1000, Direction::Both).unwrap(),
            LimitChange::Applied
        );
        assert_eq!(
            put(&mut lim, "x", 1000, Direction::Both).unwrap(),
            LimitChange::Unchanged
        );
        // A second app on the same device gets its own class; removing one keeps the other.
        put(&mut lim, "y", 5000, Direction::Egress).unwrap();
        let rec = lim.remove(&ctx, &pair.dev_a, "x").unwrap().unwrap();
        assert_eq!(rec.apps.len(), 1);
        let classes = ctx
            .run("tc", &s(&["class", "show", "dev", &pair.dev_a]))
            .unwrap();
        assert!(
            classes.contains("1ace:2") && !classes.contains("1ace:1 "),
            "{classes}"
        );
        lim.restore_all().unwrap();
        assert!(clean(&pair.ns_a, &pair.dev_a));
        // Someone else's root qdisc: refused, left alone.
        ctx.run(
            "tc",
            &s(&[
                "qdisc",
                "add",
                "dev",
                &pair.dev_a,
                "root",
                "handle",
                "1:",
                "htb",
            ]),
        )
        .unwrap();
        let e = put(&mut lim, "x", 1000, Direction::Egress)
            .unwrap_err()
            .to_string();
        assert!(e.contains("someone else"), "{e}");
        let q = show_qdiscs(&ctx, &pair.dev_a).unwrap();
        assert!(q.iter().any(|q| q.root && q.handle == "1:"));
    }

    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_handler_journals_and_restore_all_cleans_up() {
        placer_testkit::require_root();
        if let Some(why) = unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        use crate::actuator::Actuator;
        use placer_core::plan::Plan;
        let pair = VethPair::new().expect("veth pair");
        let state = std::env::temp_dir().join(format!("placer-tc-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state);
        // The built-in handler acts in the caller's namespace: run the actuator on a
        // thread inside the sender's namespace (tc children inherit it).
        let (st, dev) = (state.clone(), pair.dev_a.clone());
        let applied = VethPair::in_netns(&pair.ns_a, move || {
            let mut act = Actuator::new(Path::new("/"), &st);
            let mut plan = Plan::default();
            plan.push(
                "energy-qos",
                Action::LimitBandwidth {
                    app: "ftp".into(),
                    dev: dev.clone(),
                    rate_bytes_per_s: 1_000_000,
                    flows: vec![fm("10.201.0.1:1000", "10.201.0.2:21")],
                    direction: Direction::Both,
                },
                "test",
            );
            act.apply(&plan, false).remove(0).outcome
        })
        .join()
        .unwrap()
        .unwrap();
        assert_eq!(applied, Outcome::Done);
        assert!(!clean(&pair.ns_a, &pair.dev_a));
        let j = crate::journal::Journal::load(&state).unwrap();
        // The actuator ran inside the namespace: the journal names it (issue 17; it used to
        // record none, and a restore from the host then missed the qdisc).
        let e = j
            .get(&Knob::TcQdisc {
                dev: pair.dev_a.clone(),
                netns: Some(pair.ns_a.clone()),
            })
            .unwrap();
        assert_eq!(e.previous, "noqueue 0:");
        // A fresh actuator (as `placer restore` after a daemon crash) restores from the
        // journal alone.
        let st = state.clone();
        let restored = VethPair::in_netns(&pair.ns_a, move || {
            Actuator::new(Path::new("/"), &st)
                .restore_all()
                .unwrap()
                .into_iter()
                .map(|(_, r)| r)
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap()
        .unwrap();
        assert_eq!(restored, vec![Restored::Restored]);
        assert!(clean(&pair.ns_a, &pair.dev_a));
        assert!(!links(&pair.ns_a).contains("plq"));
        let _ = std::fs::remove_dir_all(&state);
    }
}
