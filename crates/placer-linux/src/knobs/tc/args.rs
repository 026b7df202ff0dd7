//! The tc argument vectors: HTB classes, u32 filters for a flow (IPv4 and IPv6), ingress
//! redirects to the IFB. Pure: tested on the vectors they build.

use super::ctx::*;
use placer_core::plan::FlowMatch;
use std::net::{IpAddr, SocketAddr};

/// `1ace:7`
pub fn classid(minor: u16) -> String {
    format!("{HANDLE}:{minor:x}")
}

pub(crate) fn is_v6(f: &FlowMatch) -> bool {
    f.local.is_ipv6() || f.remote.is_ipv6()
}

pub(crate) fn prio(minor: u16, v6: bool) -> u32 {
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

pub(crate) fn root_htb_args(dev: &str) -> Vec<String> {
    let mut a = s(&["qdisc", "add", "dev", dev, "root", "handle"]);
    a.push(format!("{HANDLE}:"));
    a.extend(s(&["htb", "default", "0"]));
    a
}
