//! Test and benchmark support, the one copy of it: two network namespaces (`placer-a-PID-N`,
//! `placer-b-PID-N`) joined by a veth pair (10.201.0.1/24 in A, 10.201.0.2/24 in B), removed
//! on drop (deleting a namespace destroys the devices in it); RPS steering inside a
//! namespace; commands and threads run inside one; a TCP stream from A to B. Names include
//! the pid and a per-process counter (other agents run the same tests at the same time), so
//! `scripts/reap-tests.sh` can remove what a killed run left.

use crate::error::{LinuxError, Result};
use crate::knobs::tc::{s, TcCtx};
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static SEQ: AtomicU32 = AtomicU32::new(0);

pub struct VethPair {
    pub ns_a: String,
    pub ns_b: String,
    pub dev_a: String,
    pub dev_b: String,
    pub addr_a: IpAddr,
    pub addr_b: IpAddr,
    /// Pin [`stream`]'s sender and receiver threads to this CPU.
    pub pin_cpu: Option<u32>,
}

/// Why the real network tests cannot run here, if so.
pub fn unavailable_reason() -> Option<String> {
    if !crate::sys::is_root() {
        return Some("needs root (network namespaces, tc)".into());
    }
    for prog in ["ip", "tc"] {
        if Command::new(prog).arg("-V").output().is_err() {
            return Some(format!("`{prog}` not found"));
        }
    }
    None
}

impl VethPair {
    pub fn new() -> Result<VethPair> {
        let pid = std::process::id();
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{}", pid % 1_000_000, n);
        let p = VethPair {
            ns_a: format!("placer-a-{pid}-{n}"),
            ns_b: format!("placer-b-{pid}-{n}"),
            dev_a: format!("pva{tag}"),
            dev_b: format!("pvb{tag}"),
            addr_a: "10.201.0.1".parse().expect("literal address"),
            addr_b: "10.201.0.2".parse().expect("literal address"),
            pin_cpu: None,
        };
        let host = TcCtx::host();
        host.run("ip", &s(&["netns", "add", &p.ns_a]))?;
        // From here on, Drop cleans up whatever exists.
        host.run("ip", &s(&["netns", "add", &p.ns_b]))?;
        host.run(
            "ip",
            &s(&[
                "link", "add", &p.dev_a, "netns", &p.ns_a, "type", "veth", "peer", "name",
                &p.dev_b, "netns", &p.ns_b,
            ]),
        )?;
        for (ns, dev, addr) in [(&p.ns_a, &p.dev_a, p.addr_a), (&p.ns_b, &p.dev_b, p.addr_b)] {
            host.run(
                "ip",
                &s(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]),
            )?;
            host.run("ip", &s(&["-n", ns, "link", "set", dev, "up"]))?;
            host.run("ip", &s(&["-n", ns, "link", "set", "lo", "up"]))?;
        }
        Ok(p)
    }

    /// `ip netns exec NS` with stdin closed: append the program and its arguments.
    pub fn exec(ns: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns])
            .stdin(std::process::Stdio::null());
        c
    }

    /// Runs `f` on a new thread inside network namespace `ns`.
    pub fn in_netns<T: Send + 'static>(
        ns: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<std::io::Result<T>> {
        let path = format!("/run/netns/{ns}");
        std::thread::spawn(move || {
            enter_netns(&path)?;
            Ok(f())
        })
    }
}

/// Steers receive processing of `dev` (in namespace `ns`) to `cpu` with RPS, as a
/// NIC's interrupt would: packets arriving from other CPUs are processed in NET_RX
/// softirq on `cpu`. Written through `ip netns exec NS tee` (that command mounts the
/// namespace's own /sys); the value is piped on stdin, no shell involved.
pub fn set_rps(ns: &str, dev: &str, cpu: u32) -> Result<()> {
    use std::io::Write;
    let path = format!("/sys/class/net/{dev}/queues/rx-0/rps_cpus");
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "tee", &path])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| LinuxError::Other(format!("ip netns exec {ns} tee {path}: {e}")))?;
    let mask = placer_core::CpuSet::single(cpu).to_mask_string();
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "{mask}");
    }
    let st = child
        .wait()
        .map_err(|e| LinuxError::Other(format!("tee {path}: {e}")))?;
    if !st.success() {
        return Err(LinuxError::Other(format!("tee {path}: {st}")));
    }
    Ok(())
}

/// Moves the calling thread into the network namespace at `path`.
pub fn enter_netns(path: &str) -> std::io::Result<()> {
    let file = std::fs::File::open(path)?;
    crate::sys::setns_net(&file)
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting a namespace destroys the veth ends and IFB devices inside it.
        for ns in [&self.ns_a, &self.ns_b] {
            let _ = TcCtx::host().run("ip", &s(&["netns", "del", ns]));
        }
    }
}

/// Streams TCP from namespace A to B for `secs`, calling `on_connected(local, remote)`
/// (the sender's view) before data flows; returns the receive rate (bytes/s) measured
/// after `warmup_s`.
pub fn stream(
    pair: &VethPair,
    port: u16,
    warmup_s: f64,
    secs: f64,
    on_connected: impl FnOnce(SocketAddr, SocketAddr),
) -> std::io::Result<f64> {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let (tx_ready, rx_ready) = std::sync::mpsc::channel::<()>();
    let listen = SocketAddr::new(pair.addr_b, port);
    let total = Duration::from_secs_f64(warmup_s + secs);
    let pin = pair.pin_cpu;
    let receiver = VethPair::in_netns(&pair.ns_b, move || -> std::io::Result<f64> {
        if let Some(c) = pin {
            let _ = crate::sys::pin_self(c);
        }
        let l = std::net::TcpListener::bind(listen)?;
        let _ = tx_ready.send(());
        let (mut c, _) = l.accept()?;
        c.set_read_timeout(Some(Duration::from_millis(500)))?;
        let mut buf = vec![0u8; 1 << 16];
        let start = Instant::now();
        let mut counted = 0u64;
        let mut t0: Option<Instant> = None;
        while start.elapsed() < total {
            match c.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if start.elapsed().as_secs_f64() >= warmup_s {
                        t0.get_or_insert_with(Instant::now);
                        counted += n as u64;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(e) => return Err(e),
            }
        }
        let dt = t0.map_or(0.0, |t| t.elapsed().as_secs_f64());
        Ok(if dt > 0.0 { counted as f64 / dt } else { 0.0 })
    });
    rx_ready
        .recv_timeout(Duration::from_secs(5))
        .map_err(|e| std::io::Error::other(format!("receiver did not start: {e}")))?;
    let (tx_addr, rx_addr) = std::sync::mpsc::channel();
    let (tx_go, rx_go) = std::sync::mpsc::channel::<()>();
    let sender = VethPair::in_netns(&pair.ns_a, move || -> std::io::Result<()> {
        if let Some(c) = pin {
            let _ = crate::sys::pin_self(c);
        }
        let mut c = std::net::TcpStream::connect_timeout(&listen, Duration::from_secs(5))?;
        let _ = tx_addr.send((c.local_addr()?, c.peer_addr()?));
        let _ = rx_go.recv_timeout(Duration::from_secs(10));
        c.set_write_timeout(Some(Duration::from_millis(500)))?;
        let buf = vec![0x5au8; 1 << 16];
        let start = Instant::now();
        while start.elapsed() < total + Duration::from_millis(300) {
            match c.write(&buf) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break, // receiver closed
            }
        }
        Ok(())
    });
    let (local, remote) = rx_addr
        .recv_timeout(Duration::from_secs(10))
        .map_err(|e| std::io::Error::other(format!("sender did not connect: {e}")))?;
    on_connected(local, remote);
    let _ = tx_go.send(());
    let rate = receiver
        .join()
        .map_err(|_| std::io::Error::other("receiver panicked"))???;
    let _ = sender.join();
    Ok(rate)
}

static HOST_SEQ: AtomicU32 = AtomicU32::new(0);

/// One network namespace (`placer-bn-PID-N`) joined to the host's by a veth pair: the host
/// end gets `host_addr/30`, the namespace end `peer_addr/30`, both in 10.213.0.0/16 and
/// unique per process and pair (the host end is visible to everything on the machine).
/// Removed on drop.
pub struct HostVeth {
    pub netns: String,
    pub host_if: String,
    pub peer_if: String,
    pub host_addr: std::net::Ipv4Addr,
    pub peer_addr: std::net::Ipv4Addr,
}

impl HostVeth {
    pub fn new() -> Result<HostVeth> {
        let pid = std::process::id();
        let n = HOST_SEQ.fetch_add(1, Ordering::Relaxed);
        // A /30 per (pid, n): 64 pairs per 256 addresses, 16384 slots in the /16.
        let slot = (pid.wrapping_mul(7) + n) % 16384;
        let (hi, lo) = ((slot / 64) as u8, ((slot % 64) * 4) as u8);
        let v = HostVeth {
            netns: format!("placer-bn-{pid}-{n}"),
            host_if: format!("pbn{}h{n}", pid % 100_000),
            peer_if: format!("pbn{}p{n}", pid % 100_000),
            host_addr: std::net::Ipv4Addr::new(10, 213, hi, lo + 1),
            peer_addr: std::net::Ipv4Addr::new(10, 213, hi, lo + 2),
        };
        let host = TcCtx::host();
        host.run("ip", &s(&["netns", "add", &v.netns]))?;
        // From here on, Drop cleans up whatever exists.
        host.run(
            "ip",
            &s(&[
                "link", "add", &v.host_if, "type", "veth", "peer", "name", &v.peer_if, "netns",
                &v.netns,
            ]),
        )?;
        host.run(
            "ip",
            &s(&[
                "addr",
                "add",
                &format!("{}/30", v.host_addr),
                "dev",
                &v.host_if,
            ]),
        )?;
        host.run("ip", &s(&["link", "set", &v.host_if, "up"]))?;
        host.run(
            "ip",
            &s(&[
                "-n",
                &v.netns,
                "addr",
                "add",
                &format!("{}/30", v.peer_addr),
                "dev",
                &v.peer_if,
            ]),
        )?;
        host.run("ip", &s(&["-n", &v.netns, "link", "set", &v.peer_if, "up"]))?;
        host.run("ip", &s(&["-n", &v.netns, "link", "set", "lo", "up"]))?;
        Ok(v)
    }

    /// Moves the calling thread into the namespace (its later sockets live there).
    pub fn enter(&self) -> std::io::Result<()> {
        enter_netns(&format!("/run/netns/{}", self.netns))
    }
}

impl Drop for HostVeth {
    fn drop(&mut self) {
        let host = TcCtx::host();
        let _ = host.run("ip", &s(&["link", "del", &self.host_if]));
        let _ = host.run("ip", &s(&["netns", "del", &self.netns]));
    }
}
