//! Where tc runs (the host or a network namespace), what a device's qdiscs are, and the
//! records of what placer created on a device.

use crate::error::{LinuxError, Result};
use placer_core::plan::{Direction, FlowMatch};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::process::Command;

/// The HTB handle placer's qdiscs use (recognisable in `tc qdisc show`).
pub const HANDLE: &str = "1ace";
/// Filter priorities: IPv4 filters of class minor N at `PRIO_V4 + N`, IPv6 at `PRIO_V6 + N`.
pub(crate) const PRIO_V4: u32 = 1000;
pub(crate) const PRIO_V6: u32 = 2000;
pub(crate) const MAX_MINOR: u16 = 999;

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
pub(crate) fn netns_inode(path: &str) -> Option<u64> {
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

    pub(crate) fn tc(&self, args: &[String]) -> Result<String> {
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
