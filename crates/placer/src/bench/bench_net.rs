//! `placer bench net`: a ttcp-style TCP benchmark of network-buffer habits (seed 004).
//!
//! A sender thread writes `--size`-byte messages for `--duration` seconds to a receiver
//! thread, over loopback or across a veth pair into a network namespace this command
//! creates and removes (names carry the pid). The receiver reads each message into:
//! - `reuse`: one buffer from a placer-bufpool pool (LIFO, so always the same, cache-hot
//!   buffer), bound to the chosen node and faulted in once;
//! - `fresh`: a new buffer per message: `--fresh-alloc mmap` (default: mmap + mbind to the
//!   node + munmap per message, the pages faulted in by the receive copy: truly new memory
//!   every time) or `malloc` (a `Vec` per message under a thread memory policy bound to the
//!   node: what a malloc/free-per-message program gets; glibc usually hands back the chunk
//!   just freed, so it measures the allocator more than fresh memory).
//!
//! `--buffer-node local|adjacent|remote|N`: local = the receiver CPU's node; adjacent =
//! another node of the same package; remote = a node of another package (seed 004's
//! three cases). On a machine without such a node the command refuses and says why (a
//! single-node machine has only `local`); `placer sim seed-004` models the Magny-Cours.
//!
//! Reported per trial and as medians per buffer mode (trials of the modes interleaved so
//! drift hits both alike): throughput, CPU seconds per GB of the sender and receiver
//! threads (getrusage RUSAGE_THREAD) and of softirq machine-wide (/proc/stat), the node
//! the receive buffer's pages were found on (move_pages query), and, when the PMU has
//! them, LLC hit ratio and node-local/remote accesses of the receiver thread
//! (perf_event_open, generic HW_CACHE LL and NODE events); otherwise why not.

use anyhow::{bail, Context, Result};
use placer_bufpool::numa::{page_nodes, set_thread_policy};
use placer_bufpool::{BufPool, Placement, PoolConfig, Region};
use placer_core::policies::numa_local::{related_node, Relation};
use placer_core::{CpuSet, Topology};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Seed 004's averages (Gbit/s), for the report.
const PAPER_REUSE_GBIT: f64 = 8.1;
const PAPER_FRESH_GBIT: f64 = 5.8;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Path between sender and receiver: `loopback`, or `veth` (a veth pair into a
    /// network namespace created for the run and removed after).
    #[arg(long, default_value = "loopback")]
    pub path: PathKind,
    /// Buffer modes to compare, comma-separated: `reuse`, `fresh` (trials interleaved).
    #[arg(long, value_delimiter = ',', default_value = "reuse,fresh")]
    pub buffers: Vec<BufMode>,
    /// How a fresh buffer is allocated: `mmap` (default; new pages every message) or
    /// `malloc` (the allocator, which often returns the chunk just freed).
    #[arg(long, default_value = "mmap")]
    pub fresh_alloc: FreshAlloc,
    /// NUMA node of the receive buffers: `local` (receiver CPU's node), `adjacent`
    /// (same package), `remote` (another package), or a node number.
    #[arg(long, default_value = "local")]
    pub buffer_node: String,
    /// Which side's buffers follow --buffers; the other side reuses one buffer.
    #[arg(long, default_value = "receiver")]
    pub side: Side,
    /// Message size in bytes (suffixes K, M: 64K).
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    pub size: usize,
    /// Length of each trial (250ms, 3s, ... or seconds).
    #[arg(long, default_value = "3s", value_parser = crate::common::duration_arg)]
    pub duration: Duration,
    /// Trials per buffer mode (the report gives medians).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// CPU of the sender thread (default: not pinned).
    #[arg(long)]
    pub sender_cpu: Option<u32>,
    /// CPU of the receiver thread (default: not pinned; `local` is then the node of the
    /// CPU it starts on).
    #[arg(long)]
    pub receiver_cpu: Option<u32>,
    /// CPUs doing receive processing (RPS) on the receiving device (`lo`, or the
    /// veth end the receiver uses), e.g. `1`; restored afterwards.
    #[arg(long)]
    pub rps_cpus: Option<String>,
    /// Filesystem root for the topology (nodes and distances).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Machine-readable output: the configuration, every trial and the medians.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PathKind {
    Loopback,
    Veth,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BufMode {
    Reuse,
    Fresh,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FreshAlloc {
    Mmap,
    Malloc,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Receiver,
    Sender,
    Both,
}

/// Parses `65536`, `64K`, `1M` (binary multiples).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1usize << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        _ => (t, 1),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size like 65536, 64K or 1M"))?;
    match n.checked_mul(mult) {
        Some(0) | None => Err(format!("{s:?}: size must be from 1 byte to 1 GiB")),
        Some(v) if v > 1 << 30 => Err(format!("{s:?}: size must be from 1 byte to 1 GiB")),
        Some(v) => Ok(v),
    }
}

/// Resolves `--buffer-node` against the topology, or explains why it cannot.
pub fn resolve_node(topo: &Topology, spec: &str, local: u32) -> Result<(u32, String)> {
    let nodes: Vec<u32> = topo.nodes.iter().map(|n| n.id).collect();
    let list = nodes
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let rel = match spec {
        "local" => return Ok((local, format!("local: node {local}, the receiver CPU's"))),
        "adjacent" => Relation::Adjacent,
        "remote" => Relation::Remote,
        n => {
            let n: u32 = n.parse().with_context(|| {
                format!("--buffer-node {n:?}: expected local, adjacent, remote or a node number")
            })?;
            if !nodes.contains(&n) {
                bail!("--buffer-node {n}: no such NUMA node (this machine has: {list})");
            }
            return Ok((n, format!("node {n}")));
        }
    };
    match related_node(topo, local, rel) {
        Some(n) => Ok((n, format!("{spec}: node {n}, {spec} to the receiver's node {local}"))),
        None if nodes.len() < 2 => bail!(
            "--buffer-node {spec}: this machine has a single NUMA node ({list}), so every buffer is local; \
             seed 004's adjacent/remote cases need a multi-node machine (`placer sim seed-004` models the \
             4-package Magny-Cours). Use --buffer-node local."
        ),
        None => bail!(
            "--buffer-node {spec}: node {local} has no {spec} node on this machine (nodes: {list}); \
             adjacent = same package, remote = another package"
        ),
    }
}

fn topology(root: &Path) -> Result<Topology> {
    placer_linux::topology::read(root)
        .with_context(|| format!("reading the topology under {}", root.display()))
}

// ---------------------------------------------------------------- host helpers

/// The median of the finite values; NaN when a phase had none.
fn median(v: Vec<f64>) -> f64 {
    placer_core::stats::median(&v).unwrap_or(f64::NAN)
}

fn pin_thread(cpu: u32) -> Result<()> {
    placer_linux::sys::pin_self(cpu).with_context(|| format!("pinning to CPU {cpu}"))
}

use placer_linux::sys::{current_cpu, thread_rusage_s as thread_cpu_s};

/// Machine-wide softirq seconds so far (summed over the `cpuN` lines of /proc/stat).
fn softirq_s(root: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(root.join("proc/stat")).ok()?;
    let cpus = placer_linux::procfs::parse_proc_stat(&text);
    if cpus.is_empty() {
        return None;
    }
    let ticks: u64 = cpus.iter().map(|c| c.softirq).sum();
    Some(ticks as f64 / placer_linux::sys::clock_ticks_per_s() as f64)
}

use placer_linux::testnet::HostVeth as Veth;

/// An RPS mask set for the run; the previous value is put back on drop.
struct Rps {
    path: PathBuf,
    before: String,
}

impl Rps {
    fn set(root: &Path, dev: &str, cpus: &str) -> Result<Rps> {
        let set = CpuSet::parse_list(cpus).with_context(|| format!("--rps-cpus {cpus:?}"))?;
        let path = root.join(format!("sys/class/net/{dev}/queues/rx-0/rps_cpus"));
        let before = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        std::fs::write(&path, set.to_mask_string())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(Rps {
            path,
            before: before.trim().to_string(),
        })
    }
}

impl Drop for Rps {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, &self.before);
    }
}

// ---------------------------------------------------------------- PMU

/// perf_event_attr up to PERF_ATTR_SIZE_VER0 (64 bytes), enough for counting.
const PERF_TYPE_HW_CACHE: u32 = 3;
const CACHE_LL: u64 = 2;
const CACHE_NODE: u64 = 6;
const RESULT_MISS: u64 = 1;

/// Receiver-thread counters: LL accesses/misses, NODE accesses/misses (node misses are
/// accesses to another node's memory).
struct Pmu {
    fds: Vec<std::fs::File>,
}

impl Pmu {
    /// Opens the four counters on the calling thread, or says why it cannot.
    fn open() -> Result<Pmu, String> {
        let mut fds = Vec::new();
        for (cache, result) in [
            (CACHE_LL, 0),
            (CACHE_LL, RESULT_MISS),
            (CACHE_NODE, 0),
            (CACHE_NODE, RESULT_MISS),
        ] {
            // perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes): type, size, config; the rest
            // zero (counting, not sampling; enabled at open).
            let mut attr = [0u8; 64];
            attr[0..4].copy_from_slice(&PERF_TYPE_HW_CACHE.to_ne_bytes());
            attr[4..8].copy_from_slice(&64u32.to_ne_bytes());
            attr[8..16].copy_from_slice(&(cache | (result << 16)).to_ne_bytes());
            match placer_linux::sys::perf_event_open(&attr, 0) {
                Ok(f) => fds.push(f),
                Err(e) => {
                    return Err(format!(
                        "PMU absent: perf_event_open of hardware cache events failed ({e}); no LLC or local/remote counts"
                    ))
                }
            }
        }
        Ok(Pmu { fds })
    }

    fn read(&mut self) -> Vec<u64> {
        self.fds
            .iter_mut()
            .map(|f| {
                let mut b = [0u8; 8];
                f.read_exact(&mut b)
                    .map(|_| u64::from_ne_bytes(b))
                    .unwrap_or(0)
            })
            .collect()
    }
}

// ---------------------------------------------------------------- one trial

#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    pub run: usize,
    pub buffers: BufMode,
    pub bytes: u64,
    pub seconds: f64,
    pub gbit_per_s: f64,
    pub receiver_cpu_s_per_gb: f64,
    pub sender_cpu_s_per_gb: f64,
    pub softirq_cpu_s_per_gb: Option<f64>,
    /// CPUs the threads ran on at the end of the trial.
    pub receiver_cpu: u32,
    pub sender_cpu: u32,
    /// Nodes the pages of the last receive buffer were on (move_pages query).
    pub buffer_pages_on_nodes: Vec<u32>,
    /// Receive buffers newly allocated (pool misses, or one per message for fresh).
    pub buffer_allocations: u64,
    pub llc_hit_ratio: Option<f64>,
    pub local_accesses: Option<u64>,
    pub remote_accesses: Option<u64>,
}

struct SideResult {
    bytes: u64,
    cpu_s: f64,
    cpu: u32,
    allocations: u64,
    page_nodes: Vec<u32>,
    pmu: Option<Vec<u64>>,
}

/// A receive or send buffer source, per the mode.
enum Source {
    Pool(BufPool),
    FreshMmap(usize, Placement),
    FreshMalloc(usize),
}

impl Source {
    fn new(mode: BufMode, alloc: FreshAlloc, size: usize, placement: Placement) -> Result<Source> {
        Ok(match (mode, alloc) {
            (BufMode::Reuse, _) => Source::Pool(BufPool::new(PoolConfig::new(size, placement))?),
            (BufMode::Fresh, FreshAlloc::Mmap) => Source::FreshMmap(size, placement),
            (BufMode::Fresh, FreshAlloc::Malloc) => {
                set_thread_policy(placement)?;
                Source::FreshMalloc(size)
            }
        })
    }

    /// Calls `f` with a buffer, recording allocations and (once asked) its pages' nodes.
    fn with<T>(
        &mut self,
        allocs: &mut u64,
        f: impl FnOnce(&mut [u8]) -> T,
    ) -> Result<(T, Vec<*const u8>)> {
        Ok(match self {
            Source::Pool(p) => {
                let mut b = p.get()?;
                let r = f(&mut b.as_mut_slice()[..]);
                let pages = b.page_addrs();
                p.put(b);
                *allocs = p.stats().allocations;
                (r, pages)
            }
            Source::FreshMmap(size, pl) => {
                let mut reg = Region::map(*size, *pl, false)?;
                *allocs += 1;
                let r = f(reg.as_mut_slice());
                (r, Vec::new())
            }
            Source::FreshMalloc(size) => {
                let mut v = vec![0u8; *size];
                *allocs += 1;
                let r = f(&mut v);
                (r, Vec::new())
            }
        })
    }
}

/// Nodes of the pages of a buffer that is still mapped, as a sorted set.
fn nodes_of(pages: &[*const u8]) -> Vec<u32> {
    let mut v: Vec<u32> = page_nodes(pages)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|s| s.ok())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn receiver(
    listener: TcpListener,
    cpu: Option<u32>,
    mut src: impl FnMut() -> Result<Source>,
    deadline: Duration,
) -> Result<SideResult> {
    if let Some(c) = cpu {
        pin_thread(c)?;
    }
    let mut source = src()?;
    listener.set_nonblocking(false)?;
    let (mut sock, _) = listener.accept().context("accepting the sender")?;
    sock.set_read_timeout(Some(deadline))?;
    let mut pmu = Pmu::open().ok();
    let (u0, s0) = thread_cpu_s();
    let mut bytes = 0u64;
    let mut allocs = 0u64;
    let mut last_pages = Vec::new();
    let mut msgs = 0u64;
    loop {
        // Fresh buffers are checked while still mapped: one query per 256 messages.
        let check = msgs.is_multiple_of(256);
        msgs += 1;
        let (n, pages) = source.with(&mut allocs, |buf| -> std::io::Result<(usize, Vec<u32>)> {
            let n = sock.read(buf)?;
            let nodes = if check && n > 0 {
                let page = placer_bufpool::numa::page_bytes();
                let addrs: Vec<*const u8> =
                    (0..n).step_by(page).map(|o| buf[o..].as_ptr()).collect();
                nodes_of(&addrs)
            } else {
                Vec::new()
            };
            Ok((n, nodes))
        })?;
        let (n, nodes) = n.context("receiving")?;
        if !nodes.is_empty() {
            last_pages = nodes;
        } else if !pages.is_empty() && last_pages.is_empty() {
            last_pages = nodes_of(&pages);
        }
        if n == 0 {
            break;
        }
        bytes += n as u64;
    }
    let (u1, s1) = thread_cpu_s();
    Ok(SideResult {
        bytes,
        cpu_s: (u1 - u0) + (s1 - s0),
        cpu: current_cpu(),
        allocations: allocs,
        page_nodes: last_pages,
        pmu: pmu.as_mut().map(Pmu::read),
    })
}

fn sender(
    addr: SocketAddr,
    cpu: Option<u32>,
    veth: Option<&Veth>,
    mut src: impl FnMut() -> Result<Source>,
    duration: Duration,
) -> Result<SideResult> {
    if let Some(v) = veth {
        v.enter().context("entering the namespace")?;
    }
    if let Some(c) = cpu {
        pin_thread(c)?;
    }
    let mut source = src()?;
    let mut sock = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connecting to {addr}"))?;
    sock.set_write_timeout(Some(Duration::from_secs(10)))?;
    let (u0, s0) = thread_cpu_s();
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut allocs = 0u64;
    while start.elapsed() < duration {
        let (r, _) = source.with(&mut allocs, |buf| {
            // Touch the message as an application filling it would.
            buf[0] = buf[0].wrapping_add(1);
            sock.write_all(buf)
        })?;
        r.context("sending")?;
        bytes += source_len(&source) as u64;
    }
    let _ = sock.shutdown(Shutdown::Write);
    let (u1, s1) = thread_cpu_s();
    Ok(SideResult {
        bytes,
        cpu_s: (u1 - u0) + (s1 - s0),
        cpu: current_cpu(),
        allocations: allocs,
        page_nodes: Vec::new(),
        pmu: None,
    })
}

fn source_len(s: &Source) -> usize {
    match s {
        Source::Pool(p) => p.config().buf_bytes,
        Source::FreshMmap(n, _) | Source::FreshMalloc(n) => *n,
    }
}

struct Setup {
    args: Args,
    placement: Placement,
    veth: Option<Veth>,
}

fn trial(setup: &Setup, run: usize, mode: BufMode) -> Result<Trial> {
    let a = &setup.args;
    let bind_ip = match &setup.veth {
        Some(v) => std::net::IpAddr::V4(v.host_addr),
        None => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
    };
    let listener = TcpListener::bind((bind_ip, 0)).context("binding the receiver")?;
    let addr = listener.local_addr()?;
    let (rx_mode, tx_mode) = match a.side {
        Side::Receiver => (mode, BufMode::Reuse),
        Side::Sender => (BufMode::Reuse, mode),
        Side::Both => (mode, mode),
    };
    let (alloc, size, pl) = (a.fresh_alloc, a.size, setup.placement);
    let duration = a.duration;
    let soft0 = softirq_s(&a.root);
    let start = Instant::now();
    let (rx, tx) = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            receiver(
                listener,
                a.receiver_cpu,
                || Source::new(rx_mode, alloc, size, pl),
                duration + Duration::from_secs(10),
            )
        });
        let tx = s.spawn(|| {
            sender(
                addr,
                a.sender_cpu,
                setup.veth.as_ref(),
                || Source::new(tx_mode, alloc, size, pl),
                duration,
            )
        });
        (rx.join(), tx.join())
    });
    let seconds = start.elapsed().as_secs_f64();
    let tx = tx.map_err(|_| anyhow::anyhow!("sender thread panicked"))??;
    let rx = rx.map_err(|_| anyhow::anyhow!("receiver thread panicked"))??;
    let soft1 = softirq_s(&a.root);
    let gb = rx.bytes as f64 / 1e9;
    let per_gb = |s: f64| if gb > 0.0 { s / gb } else { f64::NAN };
    let (llc, local, remote) = match &rx.pmu {
        Some(c) if c.len() == 4 => {
            let hit = if c[0] > 0 {
                Some(1.0 - c[1] as f64 / c[0] as f64)
            } else {
                None
            };
            (hit, Some(c[2].saturating_sub(c[3])), Some(c[3]))
        }
        _ => (None, None, None),
    };
    Ok(Trial {
        run,
        buffers: mode,
        bytes: rx.bytes,
        seconds,
        gbit_per_s: rx.bytes as f64 * 8.0 / seconds / 1e9,
        receiver_cpu_s_per_gb: per_gb(rx.cpu_s),
        sender_cpu_s_per_gb: per_gb(tx.cpu_s),
        softirq_cpu_s_per_gb: soft0.zip(soft1).map(|(a, b)| per_gb(b - a)),
        receiver_cpu: rx.cpu,
        sender_cpu: tx.cpu,
        buffer_pages_on_nodes: rx.page_nodes,
        buffer_allocations: rx.allocations,
        llc_hit_ratio: llc,
        local_accesses: local,
        remote_accesses: remote,
    })
}

// ---------------------------------------------------------------- report

#[derive(Debug, Serialize)]
pub struct ModeSummary {
    pub buffers: BufMode,
    pub trials: usize,
    pub median_gbit_per_s: f64,
    pub median_receiver_cpu_s_per_gb: f64,
    pub median_sender_cpu_s_per_gb: f64,
    pub median_softirq_cpu_s_per_gb: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub path: PathKind,
    pub size_bytes: usize,
    pub duration_s: f64,
    pub runs: usize,
    pub side: Side,
    pub fresh_alloc: FreshAlloc,
    pub buffer_node: u32,
    pub buffer_node_why: String,
    pub numa_nodes: usize,
    pub rps_cpus: Option<String>,
    pub pmu: String,
    pub trials: Vec<Trial>,
    pub summary: Vec<ModeSummary>,
    /// Median reuse throughput / median fresh throughput, when both ran.
    pub reuse_over_fresh: Option<f64>,
    pub paper_reuse_gbit_per_s: f64,
    pub paper_fresh_gbit_per_s: f64,
    pub paper_reuse_over_fresh: f64,
}

fn summarize(trials: &[Trial], modes: &[BufMode]) -> Vec<ModeSummary> {
    modes
        .iter()
        .map(|&m| {
            let t: Vec<&Trial> = trials.iter().filter(|t| t.buffers == m).collect();
            let soft: Vec<f64> = t.iter().filter_map(|t| t.softirq_cpu_s_per_gb).collect();
            ModeSummary {
                buffers: m,
                trials: t.len(),
                median_gbit_per_s: median(t.iter().map(|t| t.gbit_per_s).collect()),
                median_receiver_cpu_s_per_gb: median(
                    t.iter().map(|t| t.receiver_cpu_s_per_gb).collect(),
                ),
                median_sender_cpu_s_per_gb: median(
                    t.iter().map(|t| t.sender_cpu_s_per_gb).collect(),
                ),
                median_softirq_cpu_s_per_gb: (!soft.is_empty()).then(|| median(soft)),
            }
        })
        .collect()
}

pub fn run(mut args: Args) -> Result<()> {
    if args.buffers.is_empty() {
        bail!("--buffers: give reuse, fresh or both");
    }
    args.buffers.dedup();
    if !(0.05..=600.0).contains(&args.duration.as_secs_f64()) {
        bail!("--duration {:?}: from 50ms to 600s", args.duration);
    }
    if args.runs == 0 || args.runs > 1000 {
        bail!("--runs {}: from 1 to 1000", args.runs);
    }
    let topo = topology(&args.root)?;
    let local_cpu = args.receiver_cpu.unwrap_or_else(current_cpu);
    let local = topo.node_of(local_cpu).unwrap_or(0);
    let (node, why) = resolve_node(&topo, &args.buffer_node, local)?;
    let pmu = match Pmu::open() {
        Ok(_) => "PMU present: LL and NODE hardware cache events counted on the receiver thread"
            .to_string(),
        Err(e) => e,
    };
    let veth = match args.path {
        PathKind::Veth => Some(
            Veth::new()
                .context("creating the veth pair and namespace (needs root and iproute2)")?,
        ),
        PathKind::Loopback => None,
    };
    let _rps = match &args.rps_cpus {
        Some(c) => {
            let dev = veth.as_ref().map_or("lo", |v| v.host_if.as_str());
            Some(Rps::set(&args.root, dev, c)?)
        }
        None => None,
    };
    let setup = Setup {
        args: args.clone(),
        placement: Placement::Bind(node),
        veth,
    };
    if !args.json {
        eprintln!(
            "bench net: {:?}, {} B messages, {} s x {} runs per mode, buffers on {why}; {}",
            args.path,
            args.size,
            args.duration.as_secs_f64(),
            args.runs,
            pmu
        );
    }
    let mut trials = Vec::new();
    for run in 0..args.runs {
        for &mode in &args.buffers {
            let t = trial(&setup, run, mode).with_context(|| format!("run {run}, {mode:?}"))?;
            if !args.json {
                eprintln!(
                    "  run {run} {:<5} {:>7.2} Gbit/s  rx {:.3} s/GB  tx {:.3} s/GB  buffer pages on {:?}",
                    format!("{mode:?}").to_lowercase(),
                    t.gbit_per_s,
                    t.receiver_cpu_s_per_gb,
                    t.sender_cpu_s_per_gb,
                    t.buffer_pages_on_nodes
                );
            }
            trials.push(t);
        }
    }
    drop(setup);
    let summary = summarize(&trials, &args.buffers);
    let med = |m: BufMode| {
        summary
            .iter()
            .find(|s| s.buffers == m)
            .map(|s| s.median_gbit_per_s)
    };
    let ratio = med(BufMode::Reuse)
        .zip(med(BufMode::Fresh))
        .map(|(r, f)| r / f);
    let report = Report {
        path: args.path,
        size_bytes: args.size,
        duration_s: args.duration.as_secs_f64(),
        runs: args.runs,
        side: args.side,
        fresh_alloc: args.fresh_alloc,
        buffer_node: node,
        buffer_node_why: why,
        numa_nodes: topo.nodes.len().max(1),
        rps_cpus: args.rps_cpus.clone(),
        pmu,
        trials,
        summary,
        reuse_over_fresh: ratio,
        paper_reuse_gbit_per_s: PAPER_REUSE_GBIT,
        paper_fresh_gbit_per_s: PAPER_FRESH_GBIT,
        paper_reuse_over_fresh: PAPER_REUSE_GBIT / PAPER_FRESH_GBIT,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    outln!(
        "{:<6} {:>6} {:>12} {:>14} {:>14} {:>16}",
        "buffers",
        "trials",
        "Gbit/s (med)",
        "rx CPU s/GB",
        "tx CPU s/GB",
        "softirq s/GB"
    );
    for s in &report.summary {
        outln!(
            "{:<7} {:>6} {:>12.2} {:>14.3} {:>14.3} {:>16}",
            format!("{:?}", s.buffers).to_lowercase(),
            s.trials,
            s.median_gbit_per_s,
            s.median_receiver_cpu_s_per_gb,
            s.median_sender_cpu_s_per_gb,
            s.median_softirq_cpu_s_per_gb
                .map_or("-".into(), |v| format!("{v:.3}"))
        );
    }
    if let Some(r) = report.reuse_over_fresh {
        outln!(
            "reuse/fresh = {r:.2} (seed 004: {PAPER_REUSE_GBIT}/{PAPER_FRESH_GBIT} = {:.2})",
            report.paper_reuse_over_fresh
        );
    }
    outln!("{}", report.pmu);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use placer_core::machines::machine;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("2048M").is_err());
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn nodes_resolve_on_magny_cours_and_refuse_on_one_node() {
        let m = machine("opteron-magny-cours-4p").unwrap();
        assert_eq!(resolve_node(&m, "local", 0).unwrap().0, 0);
        assert_eq!(resolve_node(&m, "adjacent", 0).unwrap().0, 1);
        assert_eq!(resolve_node(&m, "remote", 0).unwrap().0, 2);
        assert_eq!(resolve_node(&m, "7", 0).unwrap().0, 7);
        assert!(resolve_node(&m, "8", 0).is_err());
        assert!(resolve_node(&m, "far", 0).is_err());
        let one = machine("pkg:1 core:2").unwrap();
        let e = resolve_node(&one, "remote", 0).unwrap_err().to_string();
        assert!(e.contains("single NUMA node"), "{e}");
        assert_eq!(resolve_node(&one, "local", 0).unwrap().0, 0);
    }

    /// A short run across a veth pair into a namespace of our own (skipped without root or
    /// iproute2); the namespace and the veth are gone afterwards.
    #[test]
    fn veth_trial_runs_and_cleans_up() {
        let veth = match Veth::new() {
            Ok(v) => v,
            Err(e) => {
                placer_testkit::skip(&format!("cannot create a veth pair here: {e:#}"));
                return;
            }
        };
        let (ns, host_if) = (veth.netns.clone(), veth.host_if.clone());
        let mut args = short_args();
        args.path = PathKind::Veth;
        let setup = Setup {
            args,
            placement: Placement::Bind(0),
            veth: Some(veth),
        };
        let t = trial(&setup, 0, BufMode::Fresh).unwrap();
        assert!(t.bytes > 0);
        drop(setup);
        let out = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains(&ns),
            "{ns} left behind"
        );
        assert!(
            !Path::new(&format!("/sys/class/net/{host_if}")).exists(),
            "{host_if} left behind"
        );
    }

    fn short_args() -> Args {
        Args {
            path: PathKind::Loopback,
            buffers: vec![BufMode::Reuse, BufMode::Fresh],
            fresh_alloc: FreshAlloc::Mmap,
            buffer_node: "local".into(),
            side: Side::Receiver,
            size: 64 << 10,
            duration: Duration::from_millis(200),
            runs: 1,
            sender_cpu: None,
            receiver_cpu: None,
            rps_cpus: None,
            root: "/".into(),
            json: true,
        }
    }

    /// A short real run over loopback: both modes move bytes, fresh allocates per message
    /// and reuse does not, and the buffer pages are on the bound node.
    #[test]
    fn loopback_trial_runs() {
        let args = short_args();
        let setup = Setup {
            args,
            placement: Placement::Bind(0),
            veth: None,
        };
        let r = trial(&setup, 0, BufMode::Reuse).unwrap();
        let f = trial(&setup, 0, BufMode::Fresh).unwrap();
        assert!(r.bytes > 0 && f.bytes > 0);
        assert_eq!(r.buffer_allocations, 1, "reuse maps one buffer");
        assert!(f.buffer_allocations > 1, "fresh maps one per message");
        assert_eq!(r.buffer_pages_on_nodes, vec![0]);
        assert_eq!(f.buffer_pages_on_nodes, vec![0]);
    }
}
