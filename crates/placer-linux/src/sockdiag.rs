//! TCP socket counters through sock_diag netlink (NETLINK_SOCK_DIAG, `inet_diag_req_v2`).
//!
//! One dump per address family (IPv4, IPv6) asks for every TCP socket except LISTEN,
//! TIME_WAIT and NEW_SYN_RECV (they carry no flow and no owning inode) with the
//! `INET_DIAG_INFO` extension, whose payload is `struct tcp_info`; we keep `bytes_acked`,
//! `bytes_received`, `segs_out`, `segs_in`, `data_segs_in/out`, the state, the 4-tuple and
//! the socket inode. sock_diag sees the sockets of the network namespace the calling
//! process runs in — run placer inside a namespace (`ip netns exec`) to see that
//! namespace's flows.
//!
//! Beside the dump, [`SockDiag::lookup`] reads given sockets only: one exact request
//! (`inet_diag_sockid` with the socket's cookie, as the dump gave it) per socket, many in
//! one datagram, their answers taken with few system calls. The kernel then finds each
//! socket by its 4-tuple's hash instead of walking every bucket of its TCP table.
//!
//! Raw libc sockets rather than a netlink crate: the exchange is one request and a dump,
//! the layouts are fixed kernel ABI (include/uapi/linux/inet_diag.h, tcp.h), and the parse
//! is a pure function of the received bytes, tested on built messages. `struct tcp_info`
//! grew over kernel versions, so each field is read only when the attribute is long
//! enough to hold it (older kernels give 0).

use placer_core::sample::SocketSample;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const INET_DIAG_INFO: u16 = 2;
const NLMSG_HDR_LEN: usize = 16;
const REQ_LEN: usize = 56;
const DIAG_MSG_LEN: usize = 72;

// Offsets in struct tcp_info (include/uapi/linux/tcp.h).
const TCPI_BYTES_ACKED: usize = 120;
const TCPI_BYTES_RECEIVED: usize = 128;
const TCPI_SEGS_OUT: usize = 136;
const TCPI_SEGS_IN: usize = 140;
const TCPI_DATA_SEGS_IN: usize = 152;
const TCPI_DATA_SEGS_OUT: usize = 156;

/// TCP states asked for: all but LISTEN (10), TIME_WAIT (6) and NEW_SYN_RECV (12).
const STATES: u32 = 0xfff & !(1 << 10) & !(1 << 6) & !(1 << 12);

/// Whether a dump gives sockets in `state` ([`STATES`]): an exact request finds a socket
/// whatever its state (a `TIME_WAIT` one, without `tcp_info`), which a dump would not list.
fn listed_state(state: u8) -> bool {
    state < 32 && STATES & (1 << state) != 0
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// `inet_diag_sockid`'s length: ports, addresses, interface, cookie.
const SOCKID_LEN: usize = 48;
/// Exact requests sent in one datagram: their answers must fit the socket's receive
/// buffer (about 1.5 KiB each of the default 208 KiB) before they are read.
const LOOKUP_BATCH: usize = 64;
/// Room for one answer (a `tcp_info` and a few small attributes: under 512 bytes today).
const ANSWER_LEN: usize = 2048;

/// A socket as sock_diag names it: its family and `inet_diag_sockid` (ports, addresses,
/// interface, cookie), what an exact request needs to find it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketId {
    pub family: u8,
    id: [u8; SOCKID_LEN],
}

impl SocketId {
    /// The kernel's cookie of the socket (`sock_gen_cookie`, unique while the machine
    /// runs).
    pub fn cookie(&self) -> u64 {
        let lo = u32::from_ne_bytes(self.id[40..44].try_into().expect("4 bytes"));
        let hi = u32::from_ne_bytes(self.id[44..48].try_into().expect("4 bytes"));
        u64::from(lo) | (u64::from(hi) << 32)
    }
}

/// Appends a request (nlmsghdr + inet_diag_req_v2) for TCP sockets of `family`: a dump of
/// all but [`STATES`]' exclusions when `id` is `None`, else the one socket `id` names.
fn push_request(m: &mut Vec<u8>, family: u8, id: Option<&[u8; SOCKID_LEN]>, seq: u32) {
    let len = NLMSG_HDR_LEN + REQ_LEN;
    let start = m.len();
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = match id {
        None => libc::NLM_F_REQUEST | libc::NLM_F_DUMP,
        Some(_) => libc::NLM_F_REQUEST,
    } as u16;
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.push(family);
    m.push(libc::IPPROTO_TCP as u8);
    m.push(1 << (INET_DIAG_INFO - 1)); // idiag_ext: ask for tcp_info
    m.push(0);
    m.extend_from_slice(&STATES.to_ne_bytes());
    match id {
        Some(id) => m.extend_from_slice(id),
        None => m.resize(start + len, 0), // inet_diag_sockid: all zero = every socket
    }
}

/// The request message dumping TCP sockets of `family`.
pub fn build_request(family: u8, seq: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(NLMSG_HDR_LEN + REQ_LEN);
    push_request(&mut m, family, None, seq);
    m
}

/// What one received datagram held.
#[derive(Debug, PartialEq)]
pub enum Chunk {
    /// More messages follow.
    More,
    /// NLMSG_DONE was seen.
    Done,
    /// The kernel answered with an error (positive errno).
    Error(i32),
}

fn u16_ne(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_ne(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_ne(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn addr(family: u8, raw: &[u8], port_be: &[u8]) -> Option<SocketAddr> {
    let port = u16::from_be_bytes(port_be.try_into().ok()?);
    let ip = if family == libc::AF_INET as u8 {
        IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
    } else {
        let a: [u8; 16] = raw.try_into().ok()?;
        IpAddr::V6(Ipv6Addr::from(a))
    };
    Some(SocketAddr::new(ip, port))
}

/// Parses one `inet_diag_msg` (with its attributes) into a socket sample and its id.
fn parse_diag_msg(m: &[u8]) -> Option<(SocketSample, SocketId)> {
    if m.len() < DIAG_MSG_LEN {
        return None;
    }
    let family = m[0];
    let id = SocketId {
        family,
        id: m[4..4 + SOCKID_LEN].try_into().ok()?,
    };
    let state = m[1];
    let local = addr(family, &m[8..24], &m[4..6])?;
    let remote = addr(family, &m[24..40], &m[6..8])?;
    let inode = u32_ne(m, 68)? as u64;
    let mut s = SocketSample {
        inode,
        local,
        remote,
        state,
        bytes_acked: 0,
        bytes_received: 0,
        segs_in: 0,
        segs_out: 0,
        data_segs_in: 0,
        data_segs_out: 0,
    };
    let mut at = align4(DIAG_MSG_LEN);
    while at + 4 <= m.len() {
        let len = u16_ne(m, at)? as usize;
        let ty = u16_ne(m, at + 2)?;
        if len < 4 || at + len > m.len() {
            break;
        }
        if ty == INET_DIAG_INFO {
            let info = &m[at + 4..at + len];
            s.bytes_acked = u64_ne(info, TCPI_BYTES_ACKED).unwrap_or(0);
            s.bytes_received = u64_ne(info, TCPI_BYTES_RECEIVED).unwrap_or(0);
            s.segs_out = u32_ne(info, TCPI_SEGS_OUT).unwrap_or(0) as u64;
            s.segs_in = u32_ne(info, TCPI_SEGS_IN).unwrap_or(0) as u64;
            s.data_segs_in = u32_ne(info, TCPI_DATA_SEGS_IN).unwrap_or(0) as u64;
            s.data_segs_out = u32_ne(info, TCPI_DATA_SEGS_OUT).unwrap_or(0) as u64;
        }
        at += align4(len);
    }
    Some((s, id))
}

/// Sockets and their ids, in the same order.
#[derive(Debug, Default, Clone)]
pub struct Found {
    pub sockets: Vec<SocketSample>,
    pub ids: Vec<SocketId>,
}

/// Parses one received datagram of a dump (several netlink messages), appending sockets.
/// Truncated or unknown messages are skipped; the rest of the datagram still counts.
pub fn parse_chunk(buf: &[u8], out: &mut Found) -> Chunk {
    let mut at = 0;
    while at + NLMSG_HDR_LEN <= buf.len() {
        let (Some(len), Some(ty)) = (u32_ne(buf, at), u16_ne(buf, at + 4)) else {
            break;
        };
        let len = len as usize;
        if len < NLMSG_HDR_LEN || at + len > buf.len() {
            break;
        }
        let body = &buf[at + NLMSG_HDR_LEN..at + len];
        match ty {
            NLMSG_DONE => return Chunk::Done,
            NLMSG_ERROR => {
                let e = u32_ne(body, 0).map(|v| v as i32).unwrap_or(-libc::EIO);
                if e != 0 {
                    return Chunk::Error(-e);
                }
            }
            SOCK_DIAG_BY_FAMILY => {
                if let Some((s, id)) = parse_diag_msg(body) {
                    out.sockets.push(s);
                    out.ids.push(id);
                }
            }
            _ => {}
        }
        at += align4(len);
    }
    Chunk::More
}

/// An open NETLINK_SOCK_DIAG socket, reused across samples.
pub struct SockDiag {
    fd: libc::c_int,
    seq: u32,
    buf: Vec<u8>,
    /// [`LOOKUP_BATCH`] answers of [`ANSWER_LEN`] bytes.
    answers: Vec<u8>,
}

impl SockDiag {
    pub fn open() -> io::Result<SockDiag> {
        // SAFETY: plain socket(2) call; the fd is owned by the returned value.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // A dump never blocks for long, but never hang a sample on it either.
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: tv outlives the call and its size is passed.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
        }
        Ok(SockDiag {
            fd,
            seq: 0,
            buf: vec![0; 64 * 1024],
            answers: vec![0; LOOKUP_BATCH * ANSWER_LEN],
        })
    }

    /// Every TCP socket (IPv4 and IPv6) of the current network namespace.
    pub fn tcp_sockets(&mut self) -> io::Result<Found> {
        let mut out = Found::default();
        for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
            self.dump(family, &mut out)?;
        }
        Ok(out)
    }

    /// The cookie of the network namespace this socket (and so each dump) sees
    /// (`SO_NETNS_COOKIE`, Linux 5.14).
    pub fn netns_cookie(&self) -> io::Result<u64> {
        const SO_NETNS_COOKIE: libc::c_int = 71;
        let mut v = 0u64;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        // SAFETY: v and len are valid for writes of the given size.
        let r = unsafe {
            libc::getsockopt(
                self.fd,
                libc::SOL_SOCKET,
                SO_NETNS_COOKIE,
                &mut v as *mut u64 as *mut libc::c_void,
                &mut len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(v)
    }

    fn send(&self, req: &[u8]) -> io::Result<()> {
        // SAFETY: sockaddr_nl zeroed is a valid "to the kernel" address.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: req and sa are valid for the given lengths.
        let n = unsafe {
            libc::sendto(
                self.fd,
                req.as_ptr() as *const libc::c_void,
                req.len(),
                0,
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The sockets `ids` name as they are now, in their order: `None` for one that is
    /// gone. Exact requests, [`LOOKUP_BATCH`] to a datagram, their answers read with
    /// `recvmmsg`.
    pub fn lookup(&mut self, ids: &[SocketId]) -> io::Result<Vec<Option<SocketSample>>> {
        let mut out = vec![None; ids.len()];
        let mut req = Vec::with_capacity(LOOKUP_BATCH * (NLMSG_HDR_LEN + REQ_LEN));
        for (batch, chunk) in ids.chunks(LOOKUP_BATCH).enumerate() {
            req.clear();
            let first = self.seq.wrapping_add(1);
            for id in chunk {
                self.seq = self.seq.wrapping_add(1);
                push_request(&mut req, id.family, Some(&id.id), self.seq);
            }
            self.send(&req)?;
            let base = batch * LOOKUP_BATCH;
            let mut answered = 0;
            // Bounded: each round takes at least one answer, or fails (the receive
            // timeout); stale answers of an earlier, failed exchange are skipped by seq.
            for _ in 0..4 * LOOKUP_BATCH {
                if answered == chunk.len() {
                    break;
                }
                for m in self.receive_many(chunk.len() - answered)? {
                    let a = &self.answers[m.0 * ANSWER_LEN..m.0 * ANSWER_LEN + m.1];
                    let Some(seq) = u32_ne(a, 8) else { continue };
                    let at = seq.wrapping_sub(first) as usize;
                    if at >= chunk.len() {
                        continue;
                    }
                    answered += 1;
                    let mut found = Found::default();
                    match parse_chunk(a, &mut found) {
                        // No such socket, or its 4-tuple now names another (cookie).
                        Chunk::Error(e) if e == libc::ENOENT || e == libc::ESTALE => {}
                        Chunk::Error(e) => return Err(io::Error::from_raw_os_error(e)),
                        // A socket in a state a dump leaves out is gone for a sample.
                        _ => out[base + at] = found.sockets.pop().filter(|s| listed_state(s.state)),
                    }
                }
            }
            if answered < chunk.len() {
                return Err(io::Error::other("sock_diag: answers missing"));
            }
        }
        Ok(out)
    }

    /// Receives up to `want` datagrams into `answers`, waiting for the first only: each
    /// (slot, length).
    fn receive_many(&mut self, want: usize) -> io::Result<Vec<(usize, usize)>> {
        let want = want.min(LOOKUP_BATCH);
        let mut iovs: Vec<libc::iovec> = self
            .answers
            .chunks_mut(ANSWER_LEN)
            .take(want)
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: an all-zero mmsghdr is valid (no name, no control data).
        let mut msgs: Vec<libc::mmsghdr> =
            (0..want).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        let n = loop {
            // SAFETY: msgs and the buffers their iovecs point to live across the call.
            let n = unsafe {
                libc::recvmmsg(
                    self.fd,
                    msgs.as_mut_ptr(),
                    want as libc::c_uint,
                    libc::MSG_WAITFORONE,
                    std::ptr::null_mut(),
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        msgs[..n]
            .iter()
            .enumerate()
            .map(|(i, m)| {
                if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                    Err(io::Error::other("sock_diag: an answer was truncated"))
                } else {
                    Ok((i, m.msg_len as usize))
                }
            })
            .collect()
    }

    fn dump(&mut self, family: u8, out: &mut Found) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let req = build_request(family, self.seq);
        self.send(&req)?;
        // Bounded: a dump of even a million sockets ends well within this many datagrams.
        for _ in 0..1_000_000 {
            // SAFETY: buf is valid for its length.
            let n = unsafe {
                libc::recv(
                    self.fd,
                    self.buf.as_mut_ptr() as *mut libc::c_void,
                    self.buf.len(),
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            match parse_chunk(&self.buf[..n as usize], out) {
                Chunk::More => {}
                Chunk::Done => return Ok(()),
                Chunk::Error(e) => return Err(io::Error::from_raw_os_error(e)),
            }
        }
        Err(io::Error::other("sock_diag dump did not end"))
    }
}

impl Drop for SockDiag {
    fn drop(&mut self) {
        // SAFETY: fd is owned by self and closed once.
        unsafe { libc::close(self.fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response message as the kernel builds it, for the parser tests.
    fn diag_msg(local: SocketAddr, remote: SocketAddr, inode: u32, info_len: usize) -> Vec<u8> {
        let mut m = vec![0u8; DIAG_MSG_LEN];
        let (fam, l, r) = match (local.ip(), remote.ip()) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mut l = [0; 16];
                let mut r = [0; 16];
                l[..4].copy_from_slice(&a.octets());
                r[..4].copy_from_slice(&b.octets());
                (libc::AF_INET as u8, l, r)
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => (libc::AF_INET6 as u8, a.octets(), b.octets()),
            _ => unreachable!(),
        };
        m[0] = fam;
        m[1] = 1;
        m[4..6].copy_from_slice(&local.port().to_be_bytes());
        m[6..8].copy_from_slice(&remote.port().to_be_bytes());
        m[8..24].copy_from_slice(&l);
        m[24..40].copy_from_slice(&r);
        m[68..72].copy_from_slice(&inode.to_ne_bytes());
        let mut info = vec![0u8; info_len];
        let mut put = |at: usize, v: &[u8]| {
            if at + v.len() <= info.len() {
                info[at..at + v.len()].copy_from_slice(v);
            }
        };
        put(TCPI_BYTES_ACKED, &1000u64.to_ne_bytes());
        put(TCPI_BYTES_RECEIVED, &2000u64.to_ne_bytes());
        put(TCPI_SEGS_OUT, &10u32.to_ne_bytes());
        put(TCPI_SEGS_IN, &20u32.to_ne_bytes());
        put(TCPI_DATA_SEGS_IN, &15u32.to_ne_bytes());
        put(TCPI_DATA_SEGS_OUT, &5u32.to_ne_bytes());
        // An unrelated attribute first, then INET_DIAG_INFO.
        m.extend_from_slice(&6u16.to_ne_bytes());
        m.extend_from_slice(&99u16.to_ne_bytes());
        m.extend_from_slice(&[1, 2, 0, 0]);
        m.extend_from_slice(&((info_len + 4) as u16).to_ne_bytes());
        m.extend_from_slice(&INET_DIAG_INFO.to_ne_bytes());
        m.extend_from_slice(&info);
        m.resize(align4(m.len()), 0);
        nl(SOCK_DIAG_BY_FAMILY, &m)
    }

    fn nl(ty: u16, body: &[u8]) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&((NLMSG_HDR_LEN + body.len()) as u32).to_ne_bytes());
        h.extend_from_slice(&ty.to_ne_bytes());
        h.extend_from_slice(&[0; 10]);
        h.extend_from_slice(body);
        h.resize(align4(h.len()), 0);
        h
    }

    #[test]
    fn request_layout() {
        let r = build_request(libc::AF_INET as u8, 7);
        assert_eq!(r.len(), 72);
        assert_eq!(u32_ne(&r, 0), Some(72));
        assert_eq!(u16_ne(&r, 4), Some(SOCK_DIAG_BY_FAMILY));
        assert_eq!(u32_ne(&r, 8), Some(7));
        assert_eq!(r[16], libc::AF_INET as u8);
        assert_eq!(r[17], 6);
        assert_eq!(r[18], 2, "INET_DIAG_INFO bit");
        assert_eq!(u32_ne(&r, 20).unwrap() & (1 << 1), 2, "ESTABLISHED asked");
        assert_eq!(u32_ne(&r, 20).unwrap() & (1 << 10), 0, "LISTEN not asked");
    }

    #[test]
    fn parses_v4_v6_done_and_truncation() {
        let a: SocketAddr = "10.0.0.1:5001".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:40000".parse().unwrap();
        let c: SocketAddr = "[fe80::1]:22".parse().unwrap();
        let d: SocketAddr = "[fe80::2]:50000".parse().unwrap();
        let mut buf = diag_msg(a, b, 4242, 232);
        buf.extend(diag_msg(c, d, 7, 104)); // old kernel: tcp_info ends before bytes_acked
        buf.extend(nl(SOCK_DIAG_BY_FAMILY, &[1, 2, 3])); // truncated diag msg: skipped
        let mut found = Found::default();
        assert_eq!(parse_chunk(&buf, &mut found), Chunk::More);
        assert_eq!(found.ids.len(), 2);
        assert_eq!(found.ids[0].family, libc::AF_INET as u8);
        let out = &found.sockets;
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].local, out[0].remote, out[0].inode), (a, b, 4242));
        assert_eq!((out[0].bytes_acked, out[0].bytes_received), (1000, 2000));
        assert_eq!((out[0].segs_out, out[0].segs_in), (10, 20));
        assert_eq!((out[0].data_segs_in, out[0].data_segs_out), (15, 5));
        assert_eq!((out[1].local, out[1].remote), (c, d));
        assert_eq!((out[1].bytes_acked, out[1].segs_in), (0, 0));
        let mut out = Found::default();
        let done = nl(NLMSG_DONE, &[0; 4]);
        assert_eq!(parse_chunk(&done, &mut out), Chunk::Done);
        let err = nl(NLMSG_ERROR, &(-libc::EPERM).to_ne_bytes());
        assert_eq!(parse_chunk(&err, &mut out), Chunk::Error(libc::EPERM));
        // Garbage never panics.
        assert_eq!(parse_chunk(&[0xff; 7], &mut out), Chunk::More);
        assert_eq!(parse_chunk(&[0xff; 40], &mut out), Chunk::More);
        assert!(out.sockets.is_empty() && out.ids.is_empty());
    }

    #[test]
    fn sees_a_loopback_connection() {
        let mut sd = match SockDiag::open() {
            Ok(s) => s,
            Err(e) => {
                placer_testkit::skip(&format!("no sock_diag: {e}"));
                return;
            }
        };
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, _) = l.accept().unwrap();
        use std::io::Write;
        (&c).write_all(&[7u8; 5000]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let found = sd.tcp_sockets().unwrap();
        let socks = &found.sockets;
        let me = c.local_addr().unwrap();
        let s = socks.iter().find(|s| s.local == me).expect("client socket");
        assert_eq!(s.remote, l.local_addr().unwrap());
        assert_eq!(s.state, 1);
        assert!(s.inode != 0);
        // bytes_acked counts the acknowledged SYN too on some kernels.
        assert!((5000..=5001).contains(&s.bytes_acked), "{s:?}");
        let peer = socks.iter().find(|s| s.remote == me).expect("server side");
        assert_eq!(peer.bytes_received, 5000);
        // An exact lookup of both sockets gives what the dump gave, and after more bytes,
        // what a new dump gives; a closed socket is gone.
        let at = |f: &dyn Fn(&SocketSample) -> bool| found.ids[socks.iter().position(f).unwrap()];
        let ids = [at(&|s| s.local == me), at(&|s| s.remote == me)];
        let got = sd.lookup(&ids).unwrap();
        assert_eq!(got[0].as_ref(), Some(s));
        assert_eq!(got[1].as_ref(), Some(peer));
        (&c).write_all(&[7u8; 3000]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let got = sd.lookup(&ids).unwrap();
        let again = sd.tcp_sockets().unwrap();
        for g in got.iter().flatten() {
            let d = again.sockets.iter().find(|x| x.inode == g.inode).unwrap();
            assert_eq!(g, d);
        }
        assert_eq!(got[1].as_ref().unwrap().bytes_received, 8000);
        drop(c);
        drop(_s);
        std::thread::sleep(std::time::Duration::from_millis(50));
        // Closed: the client goes on in FIN_WAIT/TIME_WAIT; the server side is gone or
        // closing. A socket with a cookie that no longer matches is gone.
        let mut stale = ids[0];
        stale.id[40] ^= 0xff;
        assert_eq!(sd.lookup(&[stale]).unwrap(), vec![None]);
    }

    #[test]
    fn a_lookup_keeps_only_the_states_a_dump_lists() {
        assert!(listed_state(1), "ESTABLISHED");
        assert!(listed_state(8), "CLOSE_WAIT");
        for gone in [6, 10, 12, 13, 200] {
            assert!(!listed_state(gone), "{gone}");
        }
    }

    #[test]
    fn an_exact_request_carries_the_id_and_no_dump_flag() {
        let mut id = SocketId {
            family: libc::AF_INET6 as u8,
            id: [0; SOCKID_LEN],
        };
        for (i, b) in id.id.iter_mut().enumerate() {
            *b = i as u8;
        }
        assert_eq!(
            id.cookie(),
            u64::from_ne_bytes([40, 41, 42, 43, 44, 45, 46, 47])
        );
        let mut m = Vec::new();
        push_request(&mut m, id.family, Some(&id.id), 9);
        assert_eq!(m.len(), NLMSG_HDR_LEN + REQ_LEN);
        assert_eq!(u16_ne(&m, 6), Some(libc::NLM_F_REQUEST as u16));
        assert_eq!(u32_ne(&m, 8), Some(9));
        assert_eq!(m[16], libc::AF_INET6 as u8);
        assert_eq!(&m[24..], &id.id[..]);
        // Two requests in one buffer, each whole.
        push_request(&mut m, id.family, None, 10);
        assert_eq!(m.len(), 2 * (NLMSG_HDR_LEN + REQ_LEN));
        assert_eq!(&m[72..], &build_request(id.family, 10)[..]);
    }
}
