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

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// The request message (nlmsghdr + inet_diag_req_v2) dumping TCP sockets of `family`.
pub fn build_request(family: u8, seq: u32) -> Vec<u8> {
    let len = NLMSG_HDR_LEN + REQ_LEN;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.push(family);
    m.push(libc::IPPROTO_TCP as u8);
    m.push(1 << (INET_DIAG_INFO - 1)); // idiag_ext: ask for tcp_info
    m.push(0);
    m.extend_from_slice(&STATES.to_ne_bytes());
    m.resize(len, 0); // inet_diag_sockid: all zero = every socket
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

/// Parses one `inet_diag_msg` (with its attributes) into a socket sample.
fn parse_diag_msg(m: &[u8]) -> Option<SocketSample> {
    if m.len() < DIAG_MSG_LEN {
        return None;
    }
    let family = m[0];
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
    Some(s)
}

/// Parses one received datagram of a dump (several netlink messages), appending sockets.
/// Truncated or unknown messages are skipped; the rest of the datagram still counts.
pub fn parse_chunk(buf: &[u8], out: &mut Vec<SocketSample>) -> Chunk {
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
                if let Some(s) = parse_diag_msg(body) {
                    out.push(s);
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
        })
    }

    /// Every TCP socket (IPv4 and IPv6) of the current network namespace.
    pub fn tcp_sockets(&mut self) -> io::Result<Vec<SocketSample>> {
        let mut out = Vec::new();
        for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
            self.dump(family, &mut out)?;
        }
        Ok(out)
    }

    fn dump(&mut self, family: u8, out: &mut Vec<SocketSample>) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let req = build_request(family, self.seq);
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
        let mut out = Vec::new();
        assert_eq!(parse_chunk(&buf, &mut out), Chunk::More);
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].local, out[0].remote, out[0].inode), (a, b, 4242));
        assert_eq!((out[0].bytes_acked, out[0].bytes_received), (1000, 2000));
        assert_eq!((out[0].segs_out, out[0].segs_in), (10, 20));
        assert_eq!((out[0].data_segs_in, out[0].data_segs_out), (15, 5));
        assert_eq!((out[1].local, out[1].remote), (c, d));
        assert_eq!((out[1].bytes_acked, out[1].segs_in), (0, 0));
        let done = nl(NLMSG_DONE, &[0; 4]);
        assert_eq!(parse_chunk(&done, &mut out), Chunk::Done);
        let err = nl(NLMSG_ERROR, &(-libc::EPERM).to_ne_bytes());
        assert_eq!(parse_chunk(&err, &mut out), Chunk::Error(libc::EPERM));
        // Garbage never panics.
        assert_eq!(parse_chunk(&[0xff; 7], &mut out), Chunk::More);
        assert_eq!(parse_chunk(&[0xff; 40], &mut out), Chunk::More);
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
        let socks = sd.tcp_sockets().unwrap();
        let me = c.local_addr().unwrap();
        let s = socks.iter().find(|s| s.local == me).expect("client socket");
        assert_eq!(s.remote, l.local_addr().unwrap());
        assert_eq!(s.state, 1);
        assert!(s.inode != 0);
        // bytes_acked counts the acknowledged SYN too on some kernels.
        assert!((5000..=5001).contains(&s.bytes_acked), "{s:?}");
        let peer = socks.iter().find(|s| s.remote == me).expect("server side");
        assert_eq!(peer.bytes_received, 5000);
    }
}
