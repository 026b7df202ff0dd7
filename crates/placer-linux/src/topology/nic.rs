//! Network interfaces and the CPUs that do their receive processing.
//!
//! Every entry of `sys/class/net` is listed (physical, virtio, veth, lo, bridges, ifb):
//! policies decide which matter. For each:
//! - `node`: `device/numa_node`, else the parent device's (virtio sits under PCI);
//!   -1 = unknown;
//! - queue IRQs: the device's `msi_irqs` (or its parent's, for virtio), else the legacy
//!   `device/irq`, else every `/proc/interrupts` line naming the interface
//!   (`eth0`, `eth0-TxRx-3`, `i40e-eth0-TxRx-0`). Only receive-side vectors are kept:
//!   names with `rx`, `input` or `comp` (mlx5), or names without `tx`/`output`/`config`/
//!   `async`/`misc`/`ctrl`/`cmd`/`event`/`lsc` (a single shared vector);
//! - each IRQ's CPUs: `/proc/irq/N/effective_affinity` where it lies inside
//!   `smp_affinity` (mask, else `smp_affinity_list`), else the latter (see [`irq_cpus`]);
//! - RPS: `queues/rx-N/rps_cpus` (mask; all zero = off);
//! - an IRQ joins queue `rx-N` when its name ends in N (`virtio2-input.N`,
//!   `eth0-TxRx-N`), or `rx-0` when it is the only receive vector and has no number;
//! - `rx_cpus` = union of the IRQ CPUs and RPS CPUs. Empty for lo/veth with RPS off: the
//!   receive work then runs on the sending CPU (netif_rx on the sender's softirq).
//!
//! Addresses: IPv6 from `proc/net/if_inet6` (any root); IPv4 from `getifaddrs(3)` only
//! when the root is `/` (a fixture tree has no way to hold them).

use super::fs::Files;
use super::parse;
use crate::error::Result;
use placer_core::topology::{Nic, NicQueue};
use placer_core::CpuSet;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Per NIC, per queue, the `rx-N` directory it came from (None: an IRQ without one):
/// where [`refresh`] finds its RPS CPUs again.
pub type RxDirs = Vec<Vec<Option<u32>>>;

/// Every interface, and each of its queues' `rx-N`.
pub fn read_nics(files: &Files, live: bool) -> Result<(Vec<Nic>, RxDirs)> {
    let names = files.entries("sys/class/net")?;
    if names.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let irq_names = files
        .parse("proc/interrupts", parse::interrupts)?
        .unwrap_or_default();
    let mut addrs: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
    for (ifname, a) in files
        .parse("proc/net/if_inet6", parse::if_inet6)?
        .unwrap_or_default()
    {
        addrs.entry(ifname).or_default().push(IpAddr::V6(a));
    }
    if live {
        for (ifname, a) in ipv4_addrs() {
            addrs.entry(ifname).or_default().push(IpAddr::V4(a));
        }
    }
    let (mut out, mut rx_dirs) = (Vec::new(), Vec::new());
    for name in names {
        let (mut nic, rx) = read_nic(files, &name, &irq_names)?;
        if let Some(mut a) = addrs.remove(&name) {
            a.sort();
            a.dedup();
            nic.addrs = a;
        }
        out.push(nic);
        rx_dirs.push(rx);
    }
    Ok((out, rx_dirs))
}

/// `nics` (as [`read_nics`] gave them, with `rx_dirs`) with what moves while
/// the interfaces stay the same read again: each queue's IRQ CPUs and RPS CPUs, and the
/// NIC's receive CPUs from them.
pub fn refresh(files: &Files, nics: &mut [Nic], rx_dirs: &RxDirs) -> Result<()> {
    for (nic, rx) in nics.iter_mut().zip(rx_dirs) {
        for (q, n) in nic.queues.iter_mut().zip(rx) {
            if let Some(n) = n {
                q.rps_cpus = rps_cpus(files, &nic.name, *n)?;
            }
            if let Some(irq) = q.irq {
                q.irq_cpus = irq_cpus(files, irq)?;
            }
        }
        nic.rx_cpus = rx_cpus(&nic.queues);
    }
    Ok(())
}

fn rps_cpus(files: &Files, name: &str, rx: u32) -> Result<CpuSet> {
    Ok(files
        .parse(
            &format!("sys/class/net/{name}/queues/rx-{rx}/rps_cpus"),
            parse::cpuset_mask,
        )?
        .unwrap_or_default())
}

fn rx_cpus(queues: &[NicQueue]) -> CpuSet {
    queues.iter().fold(CpuSet::new(), |acc, q| {
        acc.union(&q.irq_cpus).union(&q.rps_cpus)
    })
}

/// Whether an IRQ name is a receive (or combined) vector.
pub fn is_rx_irq_name(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    if l.contains("rx") || l.contains("input") || l.contains("comp") {
        return true;
    }
    const NOT_RX: &[&str] = &[
        "tx", "output", "config", "async", "misc", "ctrl", "cmd", "event", "lsc",
    ];
    !NOT_RX.iter().any(|w| l.contains(w))
}

/// Whether IRQ name `irq_name` names interface `ifname` (legacy/shared lines).
fn names_interface(irq_name: &str, ifname: &str) -> bool {
    irq_name.split(", ").any(|part| {
        part == ifname
            || part.starts_with(&format!("{ifname}-"))
            || part.contains(&format!("-{ifname}-"))
    })
}

fn read_nic(
    files: &Files,
    name: &str,
    irq_names: &BTreeMap<u32, String>,
) -> Result<(Nic, Vec<Option<u32>>)> {
    let base = format!("sys/class/net/{name}");
    let dev = format!("{base}/device");
    let node = match files.parse(&format!("{dev}/numa_node"), parse::opt_id)? {
        Some(n) => n,
        None => files
            .parse(&format!("{dev}/../numa_node"), parse::opt_id)?
            .flatten(),
    };
    // `speed` fails with EINVAL on links that are down: that is "unknown", not broken.
    let speed_mbps = files
        .text(&format!("{base}/speed"))
        .ok()
        .flatten()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .and_then(|v| u64::try_from(v).ok());

    let mut irqs: Vec<u32> = Vec::new();
    if files.exists(&dev) {
        irqs = files.numbered(&format!("{dev}/msi_irqs"), "")?;
        if irqs.is_empty() {
            irqs = files.numbered(&format!("{dev}/../msi_irqs"), "")?;
        }
        if irqs.is_empty() {
            if let Some(Some(i)) = files.parse(&format!("{dev}/irq"), parse::opt_id)? {
                if i != 0 {
                    irqs.push(i);
                }
            }
        }
    }
    if irqs.is_empty() {
        irqs = irq_names
            .iter()
            .filter(|(_, n)| names_interface(n, name))
            .map(|(i, _)| *i)
            .collect();
    }
    // Keep receive vectors; when a device's vectors are all unnamed in /proc/interrupts
    // (fixture without it), keep them all rather than guess.
    let rx_irqs: Vec<(u32, String)> = irqs
        .iter()
        .map(|i| (*i, irq_names.get(i).cloned().unwrap_or_default()))
        .filter(|(_, n)| n.is_empty() || is_rx_irq_name(n))
        .collect();

    let rx_queues = files.numbered(&format!("{base}/queues"), "rx-")?;
    let mut queues: Vec<NicQueue> = Vec::new();
    let mut rx_dirs: Vec<Option<u32>> = Vec::new();
    for q in &rx_queues {
        let rps = rps_cpus(files, name, *q)?;
        rx_dirs.push(Some(*q));
        queues.push(NicQueue {
            name: format!("rx-{q}"),
            irq: None,
            irq_cpus: CpuSet::new(),
            rps_cpus: rps,
        });
    }
    let single_unnumbered = rx_irqs.len() == 1 && parse::trailing_number(&rx_irqs[0].1).is_none();
    for (irq, irq_name) in rx_irqs {
        let cpus = irq_cpus(files, irq)?;
        let qnum = if single_unnumbered {
            Some(0)
        } else {
            parse::trailing_number(&irq_name)
        };
        let slot = qnum.and_then(|n| {
            queues
                .iter()
                .position(|q| q.irq.is_none() && q.name == format!("rx-{n}"))
        });
        let label = if irq_name.is_empty() {
            format!("irq-{irq}")
        } else {
            irq_name
        };
        match slot {
            Some(i) => {
                queues[i].name = label;
                queues[i].irq = Some(irq);
                queues[i].irq_cpus = cpus;
            }
            None => {
                rx_dirs.push(None);
                queues.push(NicQueue {
                    name: label,
                    irq: Some(irq),
                    irq_cpus: cpus,
                    rps_cpus: CpuSet::new(),
                })
            }
        }
    }
    let nic = Nic {
        name: name.to_string(),
        node,
        rx_cpus: rx_cpus(&queues),
        queues,
        speed_mbps,
        addrs: Vec::new(),
    };
    Ok((nic, rx_dirs))
}

/// The CPUs that take an IRQ: its effective affinity (x86 delivers each interrupt to one
/// CPU of the mask) when that lies inside the written mask, else the mask. A write to
/// `smp_affinity` reads back at once but `effective_affinity` follows only at the queue's
/// next interrupt (never while it is idle): an effective CPU outside the mask is stale, and
/// the mask is what the next interrupt honours.
fn irq_cpus(files: &Files, irq: u32) -> Result<CpuSet> {
    let mask = files
        .cpuset_pair(
            &format!("proc/irq/{irq}/smp_affinity_list"),
            &format!("proc/irq/{irq}/smp_affinity"),
        )?
        .unwrap_or_default();
    let effective = files.cpuset_pair(
        &format!("proc/irq/{irq}/effective_affinity_list"),
        &format!("proc/irq/{irq}/effective_affinity"),
    )?;
    Ok(match effective {
        Some(e) if !e.is_empty() && e.is_subset(&mask) => e,
        _ => mask,
    })
}

/// IPv4 addresses of this machine's interfaces (live root only).
fn ipv4_addrs() -> Vec<(String, std::net::Ipv4Addr)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we only read and then free once.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut p = head;
        while !p.is_null() {
            let ifa = &*p;
            if !ifa.ifa_addr.is_null()
                && i32::from((*ifa.ifa_addr).sa_family) == libc::AF_INET
                && !ifa.ifa_name.is_null()
            {
                let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                let addr = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                let name = std::ffi::CStr::from_ptr(ifa.ifa_name)
                    .to_string_lossy()
                    .into_owned();
                out.push((name, addr));
            }
            p = ifa.ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rx_names() {
        assert!(is_rx_irq_name("virtio2-input.0"));
        assert!(is_rx_irq_name("eth0-TxRx-3"));
        assert!(is_rx_irq_name("mlx5_comp3@pci:0000:81:00.0"));
        assert!(is_rx_irq_name("eth0"));
        assert!(!is_rx_irq_name("virtio2-output.0"));
        assert!(!is_rx_irq_name("virtio2-config"));
        assert!(!is_rx_irq_name("eth0-tx-1"));
        assert!(!is_rx_irq_name("mlx5_async0@pci:0000:81:00.0"));
    }

    #[test]
    fn irq_cpus_are_the_effective_ones_unless_stale() {
        let dir = placer_testkit::TempDir::new("irq-effective");
        let irq = |n: u32, mask: &str, eff: Option<&str>| {
            let d = dir.path().join(format!("proc/irq/{n}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("smp_affinity_list"), mask).unwrap();
            if let Some(e) = eff {
                std::fs::write(d.join("effective_affinity_list"), e).unwrap();
            }
        };
        irq(30, "0-7\n", Some("5\n")); // delivered to one CPU of a wide mask
        irq(31, "2\n", Some("6\n")); // just written to 2; no interrupt since
        irq(32, "3\n", None); // a kernel without effective_affinity
        let files = Files::new(dir.path());
        let set = |s: &str| parse::cpuset_list(s).unwrap();
        assert_eq!(irq_cpus(&files, 30).unwrap(), set("5"));
        assert_eq!(irq_cpus(&files, 31).unwrap(), set("2"));
        assert_eq!(irq_cpus(&files, 32).unwrap(), set("3"));
    }

    #[test]
    fn interface_names() {
        assert!(names_interface("eth0-TxRx-3", "eth0"));
        assert!(names_interface("i40e-eth0-TxRx-0", "eth0"));
        assert!(names_interface("ehci_hcd:usb1, eth0", "eth0"));
        assert!(!names_interface("eth01-TxRx-0", "eth0"));
        assert!(!names_interface("veth0", "eth0"));
    }
}
