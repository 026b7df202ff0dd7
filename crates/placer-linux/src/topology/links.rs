//! Whether this network namespace's interfaces or their addresses changed since the last
//! look: an rtnetlink socket in the link and address groups (what `ip monitor` listens
//! to). The kernel sends a message when an interface comes or goes, changes state, speed
//! or name, and when an address is added or removed; a NIC's queues and IRQs only change
//! with a device that comes, goes or resets, which sends one too. Nothing is parsed: any
//! message, or one lost to a full buffer, means "read the NICs again".

use std::io;
use std::os::fd::{AsFd, OwnedFd};

pub struct LinkWatch {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl LinkWatch {
    /// A socket of this thread's network namespace, joined to the link and IPv4/IPv6
    /// address groups.
    pub fn open() -> io::Result<LinkWatch> {
        let groups = libc::RTMGRP_LINK | libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR;
        let fd = crate::sys::netlink_socket(libc::NETLINK_ROUTE, groups as u32, |_| {})?;
        Ok(LinkWatch {
            fd,
            buf: vec![0; 16 * 1024],
        })
    }

    /// Whether a message came (or was lost) since the last call; never blocks, and
    /// leaves the socket empty. A socket that fails says "changed": the only safe answer.
    pub fn changed(&mut self) -> bool {
        let mut any = false;
        let end = crate::sys::recv_waiting(self.fd.as_fd(), &mut self.buf, |_| any = true);
        any || end.lost || end.failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a namespace of its own, where nothing else moves: quiet until an address is
    /// added, then a change, then quiet again.
    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_an_address_added_is_a_change_and_then_quiet() {
        use crate::testnet::VethPair;
        if let Some(why) = crate::testnet::unavailable_reason() {
            placer_testkit::skip(&why);
            return;
        }
        let pair = VethPair::new().unwrap();
        let (ns, dev) = (pair.ns_a.clone(), pair.dev_a.clone());
        let seen = VethPair::in_netns(&ns.clone(), move || {
            let mut w = LinkWatch::open().unwrap();
            let quiet_at_first = !w.changed();
            let st = std::process::Command::new("ip")
                .args(["-n", &ns, "addr", "add", "10.201.9.1/32", "dev", &dev])
                .status()
                .unwrap();
            assert!(st.success());
            let t = std::time::Instant::now();
            let mut changed = false;
            while !changed && t.elapsed() < std::time::Duration::from_secs(5) {
                changed = w.changed();
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            (quiet_at_first, changed, w.changed())
        })
        .join()
        .unwrap()
        .unwrap();
        drop(pair);
        assert_eq!(seen, (true, true, false), "(quiet, changed, quiet after)");
    }
}
