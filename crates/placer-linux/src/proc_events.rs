//! The process-events connector (`NETLINK_CONNECTOR`, `CN_IDX_PROC`): the kernel tells
//! placer of every fork, exec and exit, so that the sampler learns of new and gone processes
//! without listing /proc, and sees a process that started and exited between two samples.
//!
//! The socket is non-blocking with a large receive buffer and is drained at each sample (no
//! thread). When the buffer overflowed (`ENOBUFS`), events were lost and [`Events::lost`]
//! tells the sampler to list /proc once. Needs root (CAP_NET_ADMIN) and the initial network
//! namespace (the kernel sends proc events there only); [`ProcEvents::open`] says why not.
//! The message parse is a pure function of the bytes, tested on built messages.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

const NETLINK_CONNECTOR: libc::c_int = 11;
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const NLMSG_HDR: usize = 16;
const CN_MSG: usize = 20;

const PROC_EVENT_FORK: u32 = 0x1;
const PROC_EVENT_EXEC: u32 = 0x2;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;

/// One event, reduced to what the sampler uses (processes, not threads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcEvent {
    /// A new process (a fork whose child is a thread-group leader), and its parent.
    Fork { pid: u32, parent: u32 },
    /// A process replaced its image (its comm and maps changed).
    Exec { pid: u32 },
    /// A process ended (its thread-group leader exited).
    Exit { pid: u32 },
    /// Anything else (thread births and deaths, uid changes, ...).
    Other,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

/// Parses one netlink datagram from the connector into its events (one per message).
pub fn parse(buf: &[u8]) -> Vec<ProcEvent> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLMSG_HDR <= buf.len() {
        let Some(len) = u32_at(buf, at).map(|l| l as usize) else {
            break;
        };
        if len < NLMSG_HDR || at + len > buf.len() {
            break;
        }
        let msg = &buf[at..at + len];
        // cn_msg: id.idx, id.val, seq, ack, len (u16), flags (u16); then struct proc_event.
        let ev = &msg[NLMSG_HDR.min(msg.len())..];
        if u32_at(ev, 0) == Some(CN_IDX_PROC) && u32_at(ev, 4) == Some(CN_VAL_PROC) {
            let data = &ev[CN_MSG.min(ev.len())..];
            // proc_event: what, cpu, timestamp_ns (u64), then the event's data at 16.
            let e = match u32_at(data, 0) {
                Some(PROC_EVENT_FORK) => {
                    match (u32_at(data, 20), u32_at(data, 24), u32_at(data, 28)) {
                        (Some(parent), Some(pid), Some(tgid)) if pid == tgid => {
                            ProcEvent::Fork { pid, parent }
                        }
                        _ => ProcEvent::Other,
                    }
                }
                Some(PROC_EVENT_EXEC) => match (u32_at(data, 16), u32_at(data, 20)) {
                    (Some(pid), Some(tgid)) if pid == tgid => ProcEvent::Exec { pid },
                    _ => ProcEvent::Other,
                },
                Some(PROC_EVENT_EXIT) => match (u32_at(data, 16), u32_at(data, 20)) {
                    (Some(pid), Some(tgid)) if pid == tgid => ProcEvent::Exit { pid },
                    _ => ProcEvent::Other,
                },
                Some(_) => ProcEvent::Other,
                None => break,
            };
            if e != ProcEvent::Other {
                out.push(e);
            }
        }
        // Messages are 4-byte aligned.
        at += (len + 3) & !3;
    }
    out
}

/// What a drain found since the previous one, in order.
#[derive(Debug, Default, Clone)]
pub struct Events {
    pub events: Vec<ProcEvent>,
    /// The receive buffer overflowed: some events are missing; list /proc once.
    pub lost: bool,
}

/// A listening connector socket.
pub struct ProcEvents {
    fd: OwnedFd,
    buf: Vec<u8>,
}

/// Whether this process is in the initial network namespace (the connector's only one):
/// kthreadd (pid 2), a kernel thread, always is (pid 1 may be unreadable in a sandbox).
fn in_initial_netns() -> io::Result<bool> {
    let me = std::fs::metadata("/proc/self/ns/net")?;
    let init = std::fs::metadata("/proc/2/ns/net")?;
    use std::os::unix::fs::MetadataExt;
    Ok(me.ino() == init.ino() && me.dev() == init.dev())
}

impl ProcEvents {
    pub fn open() -> io::Result<ProcEvents> {
        if !in_initial_netns()? {
            return Err(io::Error::other(
                "not in the initial network namespace (the kernel sends process events there only)",
            ));
        }
        // A second's events of a fork-heavy machine fit in 4 MiB (each message ~ 80 bytes).
        let fd = crate::sys::netlink_socket(NETLINK_CONNECTOR, CN_IDX_PROC, |raw| {
            let size: libc::c_int = 4 << 20;
            // SAFETY: a valid int option value of the right size.
            unsafe {
                libc::setsockopt(
                    raw,
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUFFORCE,
                    (&raw const size).cast(),
                    std::mem::size_of::<libc::c_int>() as u32,
                );
            }
        })?;
        let raw = fd.as_raw_fd();
        let mut msg = Vec::with_capacity(NLMSG_HDR + CN_MSG + 4);
        let total = (NLMSG_HDR + CN_MSG + 4) as u32;
        msg.extend_from_slice(&total.to_ne_bytes());
        msg.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&std::process::id().to_ne_bytes());
        msg.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        msg.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&0u32.to_ne_bytes()); // ack
        msg.extend_from_slice(&4u16.to_ne_bytes()); // len
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        // SAFETY: msg is a valid buffer of its length.
        let sent = unsafe { libc::send(raw, msg.as_ptr().cast(), msg.len(), 0) };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ProcEvents {
            fd,
            buf: vec![0; 64 * 1024],
        })
    }

    /// Everything received since the previous drain (never blocks).
    pub fn drain(&mut self) -> Events {
        let mut out = Events::default();
        let end = crate::sys::recv_waiting(self.fd.as_fd(), &mut self.buf, |m| {
            out.events.extend(parse(m))
        });
        out.lost = end.lost;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(what: u32, data: &[u32]) -> Vec<u8> {
        let mut ev = Vec::new();
        ev.extend_from_slice(&what.to_ne_bytes());
        ev.extend_from_slice(&0u32.to_ne_bytes()); // cpu
        ev.extend_from_slice(&0u64.to_ne_bytes()); // timestamp
        for d in data {
            ev.extend_from_slice(&d.to_ne_bytes());
        }
        let mut m = Vec::new();
        let len = (NLMSG_HDR + CN_MSG + ev.len()) as u32;
        m.extend_from_slice(&len.to_ne_bytes());
        m.extend_from_slice(&[0u8; 12]);
        m.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        m.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        m.extend_from_slice(&[0u8; 8]);
        m.extend_from_slice(&(ev.len() as u16).to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&ev);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    #[test]
    fn forks_of_processes_execs_and_exits_parse_threads_do_not() {
        let mut buf = message(PROC_EVENT_FORK, &[10, 10, 11, 11]);
        buf.extend(message(PROC_EVENT_FORK, &[11, 11, 12, 11])); // a thread of 11
        buf.extend(message(PROC_EVENT_EXEC, &[11, 11]));
        buf.extend(message(PROC_EVENT_EXIT, &[12, 11, 0, 17, 10, 10])); // the thread
        buf.extend(message(PROC_EVENT_EXIT, &[11, 11, 0, 17, 10, 10]));
        buf.extend(message(0x200, &[11, 11, 0x6f6f66, 0, 0, 0])); // comm
        assert_eq!(
            parse(&buf),
            vec![
                ProcEvent::Fork {
                    pid: 11,
                    parent: 10
                },
                ProcEvent::Exec { pid: 11 },
                ProcEvent::Exit { pid: 11 },
            ]
        );
    }

    #[test]
    fn truncated_and_foreign_messages_are_ignored() {
        let full = message(PROC_EVENT_EXEC, &[5, 5]);
        assert!(parse(&full[..full.len() - 8]).is_empty());
        let mut foreign = message(PROC_EVENT_EXEC, &[5, 5]);
        foreign[NLMSG_HDR] = 9; // another connector index
        assert!(parse(&foreign).is_empty());
        assert!(parse(&[]).is_empty());
    }

    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_events_show_a_process_that_lived_between_two_drains() {
        placer_testkit::require_root();
        let mut ev = match ProcEvents::open() {
            Ok(e) => e,
            Err(e) => {
                placer_testkit::skip(&format!("process events unavailable: {e}"));
                return;
            }
        };
        ev.drain();
        let mut c = std::process::Command::new("true").spawn().expect("true");
        let pid = c.id();
        c.wait().unwrap();
        let t = std::time::Instant::now();
        let mut seen = Vec::new();
        while t.elapsed().as_secs() < 2 {
            seen.extend(ev.drain().events);
            if seen.contains(&ProcEvent::Exit { pid }) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            seen.iter()
                .any(|e| matches!(e, ProcEvent::Fork { pid: p, .. } if *p == pid)),
            "{seen:?}"
        );
        assert!(seen.contains(&ProcEvent::Exec { pid }), "{seen:?}");
        assert!(seen.contains(&ProcEvent::Exit { pid }), "{seen:?}");
    }
}
