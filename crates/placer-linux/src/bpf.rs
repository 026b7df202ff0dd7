//! The eBPF CPU collector: CPU time per thread, aggregated in the kernel, so that a sample
//! reads only the processes that ran instead of every `/proc/PID/stat`, and for those only
//! the files that running changes, not each thread's `stat`.
//!
//! One raw-tracepoint program on `sched_switch` charges the time since the previous switch
//! on this CPU to the task being switched out (the current task at that tracepoint), keyed
//! by its thread id; the same instructions on `hrtimer_expire_entry` (the scheduler tick,
//! among other timers; loaded as a program of its own, so the kernel counts the two apart)
//! charge the running task its time so far, so that a task that runs for
//! seconds without a switch (alone on its CPU) is not left uncounted until it stops: a
//! drain misses at most [`TICK_MIN_NS`] and one tick of a running task's time (the tick
//! program leaves a CPU alone that was charged less than that ago: most timers of a busy
//! machine expire right after a switch, and cost it only a clock read). Each entry holds, beside the
//! time, the thread-group id (the process), the CPU it ran on last and its comm when first
//! seen. Each sample drains the map (lookup and delete), so the map only ever holds the
//! threads that ran since the last sample and a drain costs what is active, not what
//! exists; the drain sums threads into processes. A process that
//! started, ran and exited between two samples is still in the map: its time is accounted,
//! with the comm its main thread had when it first ran in the interval.
//!
//! Why raw syscalls and a program written out as instructions here, not a loader crate and
//! a C file: the program is under 50 instructions with no kernel structure access (it uses
//! only helpers: ktime, current pid/tgid, current comm, CPU id, map ops), so it needs neither
//! BTF relocations nor a BPF compiler at build time, and it builds wherever placer builds.
//! A raw tracepoint needs no tracefs either. It needs root (CAP_BPF + CAP_PERFMON) and a
//! kernel with raw tracepoints and atomic adds (4.17 / 5.12); otherwise [`CpuCollector::open`]
//! says why and the sampler reads /proc as before.
//!
//! Known loss: an increment that lands between the drain's lookup and its delete of the
//! same entry (microseconds, once a second) is lost; the batch drain takes each bucket's
//! lock, which narrows that window to the program's own lockless add.
//!
//! Beside it, two smaller sources of the same kind: [`CgroupMoves`] (a count of the
//! kernel's cgroup moves) and [`TcpMoves`] (which TCP sockets of placer's network namespace
//! received a segment, and a count of their state changes). The socket programs do read
//! kernel structures (a socket's namespace and cookie), with `bpf_probe_read_kernel` at
//! offsets taken from the running kernel's BTF ([`crate::btf`]) when they are loaded: still
//! no compiler, no relocation and no file beside the binary.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

// bpf(2) commands and constants (include/uapi/linux/bpf.h).
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_MAP_DELETE_ELEM: libc::c_int = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_int = 4;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_PROG_GET_NEXT_ID: libc::c_int = 11;
const BPF_PROG_GET_FD_BY_ID: libc::c_int = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_int = 17;
const BPF_MAP_LOOKUP_AND_DELETE_BATCH: libc::c_int = 25;
const BPF_ENABLE_STATS: libc::c_int = 32;

const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;

/// The collector's program on `sched_switch`, as `bpftool prog` and
/// [`loaded_programs_named`] show it.
pub const PROG_NAME: &str = "placer_cpu";
/// The collector's program on the timers (`hrtimer_expire_entry`): the same instructions,
/// loaded apart so that the kernel counts its runs and time apart from the switches'.
pub const TICK_PROG_NAME: &str = "placer_tick";
/// The cgroup-move counter's program ([`CgroupMoves`]).
pub const CGROUP_MOVES_PROG_NAME: &str = "placer_cgmove";
/// The program that marks TCP sockets a segment reached ([`TcpMoves`]).
pub const TCP_MOVES_PROG_NAME: &str = "placer_tcpmove";
/// The TCP state-change counter's program ([`TcpMoves`]).
pub const TCP_STATES_PROG_NAME: &str = "placer_tcpstate";

/// Each program placer may load, by what one run of it is: a measure of its in-kernel cost
/// is taken per program and per event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prog {
    Switch,
    Tick,
    CgroupMoves,
    TcpMoves,
    TcpStates,
}

impl Prog {
    pub const ALL: [Prog; 5] = [
        Prog::Switch,
        Prog::Tick,
        Prog::CgroupMoves,
        Prog::TcpMoves,
        Prog::TcpStates,
    ];

    /// The name it is loaded under.
    pub fn name(self) -> &'static str {
        match self {
            Prog::Switch => PROG_NAME,
            Prog::Tick => TICK_PROG_NAME,
            Prog::CgroupMoves => CGROUP_MOVES_PROG_NAME,
            Prog::TcpMoves => TCP_MOVES_PROG_NAME,
            Prog::TcpStates => TCP_STATES_PROG_NAME,
        }
    }

    /// What one run of it is (the event its tracepoint fires on).
    pub fn event(self) -> &'static str {
        match self {
            Prog::Switch => "context switch",
            Prog::Tick => "timer expiry",
            Prog::CgroupMoves => "cgroup move",
            Prog::TcpMoves => "TCP segment received",
            Prog::TcpStates => "TCP state change",
        }
    }

    fn of_name(name: &[u8]) -> Option<Prog> {
        Prog::ALL.into_iter().find(|p| p.name().as_bytes() == name)
    }
}

/// The most threads the map can hold between two drains (one sample); beyond its size,
/// new threads are not accounted until the next drain (counted in [`Drain::lost_full`]
/// when seen). The map is preallocated: 65,536 entries of 32 bytes cost the kernel a few
/// MiB.
pub const MAX_THREADS: u32 = 65_536;
/// The fewest entries the map gets, whatever few threads the machine has.
pub const MIN_THREADS: u32 = 4_096;

/// The map's size for a machine with `threads` threads now: room for four times as many
/// (a power of two, as the kernel rounds its buckets), within [`MIN_THREADS`] and
/// [`MAX_THREADS`]. A drain walks every bucket, full or empty: at 65,536 that alone is
/// about 80 us per sample on a small VM.
pub fn map_capacity_for(threads: u64) -> u32 {
    let want = threads.saturating_mul(4).clamp(1, u64::from(MAX_THREADS));
    (want.next_power_of_two() as u32).clamp(MIN_THREADS, MAX_THREADS)
}

/// The threads the machine has now: the last field of `/proc/loadavg` (running/total).
pub fn threads_now() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    crate::procfs::parse_loadavg(&text).map(|l| l.threads)
}
const COMM_LEN: usize = 16;
/// Map value: CPU ns since the last drain (u64), thread-group id (u32), last CPU (u32), the
/// comm when first seen in the interval.
const VALUE_LEN: usize = 8 + 4 + 4 + COMM_LEN;

fn bpf(cmd: libc::c_int, attr: &mut [u8]) -> io::Result<libc::c_long> {
    // SAFETY: attr is a valid, writable buffer of the given size laid out as the command's
    // union member; pointers inside it point to live buffers owned by the caller.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A zeroed `union bpf_attr` image with little fields written at byte offsets (the kernel
/// rejects non-zero bytes beyond what a command uses, so everything else stays zero).
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Self {
        Attr([0; 128])
    }
    fn u32(mut self, off: usize, v: u32) -> Self {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, off: usize, v: u64) -> Self {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn name(mut self, off: usize, name: &str) -> Self {
        let b = name.as_bytes();
        let n = b.len().min(15);
        self.0[off..off + n].copy_from_slice(&b[..n]);
        self
    }
    fn call(&mut self, cmd: libc::c_int) -> io::Result<libc::c_long> {
        bpf(cmd, &mut self.0)
    }
    fn fd(&mut self, cmd: libc::c_int) -> io::Result<OwnedFd> {
        let fd = self.call(cmd)?;
        // SAFETY: the kernel returned a new file descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
    }
}

fn ptr<T>(p: *const T) -> u64 {
    p as usize as u64
}

fn map_create(kind: u32, key: u32, value: u32, entries: u32, name: &str) -> io::Result<OwnedFd> {
    Attr::new()
        .u32(0, kind)
        .u32(4, key)
        .u32(8, value)
        .u32(12, entries)
        .name(28, name)
        .fd(BPF_MAP_CREATE)
}

/// A BPF instruction (`struct bpf_insn`), built by the few constructors the program uses.
#[derive(Clone, Copy)]
#[repr(C)]
struct Insn {
    code: u8,
    regs: u8, // dst in the low nibble, src in the high one
    off: i16,
    imm: i32,
}

const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R6: u8 = 6;
const R7: u8 = 7;
const R8: u8 = 8;
const R9: u8 = 9;
const FP: u8 = 10;

// Helper ids (enum bpf_func_id).
const MAP_LOOKUP_ELEM: i32 = 1;
const MAP_UPDATE_ELEM: i32 = 2;
const KTIME_GET_NS: i32 = 5;
const GET_CURRENT_PID_TGID: i32 = 14;
const GET_CURRENT_COMM: i32 = 16;
const GET_SMP_PROCESSOR_ID: i32 = 8;
const PROBE_READ_KERNEL: i32 = 113;
const BPF_NOEXIST: i32 = 1;

/// A tiny assembler: instructions plus forward jumps to named labels, resolved at the end.
#[derive(Default)]
struct Asm {
    insns: Vec<Insn>,
    labels: HashMap<&'static str, usize>,
    fixups: Vec<(usize, &'static str)>,
}

impl Asm {
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) -> &mut Self {
        self.insns.push(Insn {
            code,
            regs: dst | (src << 4),
            off,
            imm,
        });
        self
    }
    fn mov_imm(&mut self, dst: u8, imm: i32) -> &mut Self {
        self.op(0xb7, dst, 0, 0, imm) // ALU64 | MOV | K
    }
    fn mov(&mut self, dst: u8, src: u8) -> &mut Self {
        self.op(0xbf, dst, src, 0, 0) // ALU64 | MOV | X
    }
    fn ldx_w(&mut self, dst: u8, src: u8, off: i16) -> &mut Self {
        self.op(0x61, dst, src, off, 0) // LDX | MEM | W
    }
    fn add_imm(&mut self, dst: u8, imm: i32) -> &mut Self {
        self.op(0x07, dst, 0, 0, imm) // ALU64 | ADD | K
    }
    fn sub(&mut self, dst: u8, src: u8) -> &mut Self {
        self.op(0x1f, dst, src, 0, 0) // ALU64 | SUB | X
    }
    fn rsh_imm(&mut self, dst: u8, imm: i32) -> &mut Self {
        self.op(0x77, dst, 0, 0, imm) // ALU64 | RSH | K
    }
    fn st_w_imm(&mut self, dst: u8, off: i16, imm: i32) -> &mut Self {
        self.op(0x62, dst, 0, off, imm) // ST | MEM | W
    }
    fn stx_w(&mut self, dst: u8, off: i16, src: u8) -> &mut Self {
        self.op(0x63, dst, src, off, 0) // STX | MEM | W
    }
    fn stx_dw(&mut self, dst: u8, off: i16, src: u8) -> &mut Self {
        self.op(0x7b, dst, src, off, 0) // STX | MEM | DW
    }
    fn ldx_dw(&mut self, dst: u8, src: u8, off: i16) -> &mut Self {
        self.op(0x79, dst, src, off, 0) // LDX | MEM | DW
    }
    fn atomic_add_dw(&mut self, dst: u8, off: i16, src: u8) -> &mut Self {
        self.op(0xdb, dst, src, off, 0) // STX | ATOMIC | DW, imm = BPF_ADD
    }
    /// `dst = map` (a 16-byte load of the map's fd, replaced by the map by the verifier).
    fn ld_map(&mut self, dst: u8, map: &OwnedFd) -> &mut Self {
        self.op(0x18, dst, 1, 0, map.as_raw_fd()) // LD | IMM | DW, src = BPF_PSEUDO_MAP_FD
            .op(0, 0, 0, 0, 0)
    }
    fn call(&mut self, helper: i32) -> &mut Self {
        self.op(0x85, 0, 0, 0, helper)
    }
    fn jeq_imm(&mut self, dst: u8, imm: i32, label: &'static str) -> &mut Self {
        self.fixups.push((self.insns.len(), label));
        self.op(0x15, dst, 0, 0, imm)
    }
    fn jne_imm(&mut self, dst: u8, imm: i32, label: &'static str) -> &mut Self {
        self.fixups.push((self.insns.len(), label));
        self.op(0x55, dst, 0, 0, imm)
    }
    /// Jumps when `dst < imm`, unsigned.
    fn jlt_imm(&mut self, dst: u8, imm: i32, label: &'static str) -> &mut Self {
        self.fixups.push((self.insns.len(), label));
        self.op(0xa5, dst, 0, 0, imm)
    }
    fn jne(&mut self, dst: u8, src: u8, label: &'static str) -> &mut Self {
        self.fixups.push((self.insns.len(), label));
        self.op(0x5d, dst, src, 0, 0)
    }
    /// `dst = imm` for a full 64-bit constant (a 16-byte load).
    fn ld_imm64(&mut self, dst: u8, imm: u64) -> &mut Self {
        self.op(0x18, dst, 0, 0, imm as u32 as i32)
            .op(0, 0, 0, 0, (imm >> 32) as u32 as i32)
    }
    fn ja(&mut self, label: &'static str) -> &mut Self {
        self.fixups.push((self.insns.len(), label));
        self.op(0x05, 0, 0, 0, 0)
    }
    fn exit(&mut self) -> &mut Self {
        self.op(0x95, 0, 0, 0, 0)
    }
    /// `r0 = &map[0]` (u32 key 0 at fp-4), or on to `missing` when there is no entry.
    fn lookup_first(&mut self, map: &OwnedFd, missing: &'static str) -> &mut Self {
        self.st_w_imm(FP, -4, 0)
            .ld_map(R1, map)
            .mov(R2, FP)
            .add_imm(R2, -4)
            .call(MAP_LOOKUP_ELEM)
            .jeq_imm(R0, 0, missing)
    }
    /// Inserts the key at `fp + key` with the value at `fp + value` into `map`, unless the
    /// key is there already.
    fn insert_new(&mut self, map: &OwnedFd, key: i16, value: i16) -> &mut Self {
        self.ld_map(R1, map)
            .mov(R2, FP)
            .add_imm(R2, key.into())
            .mov(R3, FP)
            .add_imm(R3, value.into())
            .mov_imm(R4, BPF_NOEXIST)
            .call(MAP_UPDATE_ELEM)
    }
    fn label(&mut self, name: &'static str) -> &mut Self {
        self.labels.insert(name, self.insns.len());
        self
    }
    fn finish(mut self) -> Vec<Insn> {
        for (at, label) in std::mem::take(&mut self.fixups) {
            let to = self.labels[label];
            self.insns[at].off = (to as isize - at as isize - 1) as i16;
        }
        self.insns
    }
}

/// The least time the tick program lets a CPU's running task go uncharged: a timer that
/// expires sooner after the CPU's last charge (a switch or a tick) exits after reading the
/// clock, and the time is charged at the next switch or tick. On a busy machine most
/// timers expire within this of a switch, and a drain still misses at most this much of a
/// running task's time (1% of a 1 s interval) plus a tick.
pub const TICK_MIN_NS: i32 = 10_000_000;

/// The accounting program (on `sched_switch`, and with `min_ns` on the tick). Stack:
/// [fp-4] u32 key (the tid), [fp-40..fp-8] the value to insert: ns at fp-40, tgid at
/// fp-32, CPU at fp-28, comm at fp-24.
fn program(last_switch: &OwnedFd, cpu: &OwnedFd, min_ns: Option<i32>) -> Vec<Insn> {
    let mut a = Asm::default();
    a.lookup_first(last_switch, "out")
        .mov(R7, R0) // &last switch time on this CPU
        .call(KTIME_GET_NS)
        .mov(R8, R0)
        .ldx_dw(R9, R7, 0)
        .jeq_imm(R9, 0, "first") // first switch seen on this CPU: no start yet
        .mov(R1, R8)
        .sub(R1, R9); // ns the current task ran since the last switch or tick here
    if let Some(min) = min_ns {
        a.jlt_imm(R1, min, "out");
    }
    a.stx_dw(R7, 0, R8)
        .mov(R8, R1)
        .call(GET_CURRENT_PID_TGID)
        .mov(R9, R0)
        .rsh_imm(R0, 32)
        .jeq_imm(R0, 0, "out") // the idle task
        .stx_w(FP, -32, R0) // tgid
        .stx_w(FP, -4, R9) // tid: the low half
        .call(GET_SMP_PROCESSOR_ID)
        .stx_w(FP, -28, R0)
        .ld_map(R1, cpu)
        .mov(R2, FP)
        .add_imm(R2, -4)
        .call(MAP_LOOKUP_ELEM)
        .jeq_imm(R0, 0, "insert")
        .atomic_add_dw(R0, 0, R8)
        .ldx_w(R1, FP, -28)
        .stx_w(R0, 12, R1) // last CPU (a plain store: the latest event wins)
        .ja("out")
        .label("insert")
        .stx_dw(FP, -40, R8)
        .mov(R1, FP)
        .add_imm(R1, -24)
        .mov_imm(R2, COMM_LEN as i32)
        .call(GET_CURRENT_COMM)
        .insert_new(cpu, -4, -40)
        .ja("out")
        .label("first")
        .stx_dw(R7, 0, R8)
        .label("out")
        .mov_imm(R0, 0)
        .exit();
    a.finish()
}

/// Loads a raw-tracepoint program; on failure, loads it again with the verifier's log to
/// say why.
fn load_program(insns: &[Insn], name: &str) -> io::Result<OwnedFd> {
    let license = c"Dual MIT/GPL";
    let load = |log: Option<&mut [u8]>| {
        let mut a = Attr::new()
            .u32(0, BPF_PROG_TYPE_RAW_TRACEPOINT)
            .u32(4, insns.len() as u32)
            .u64(8, ptr(insns.as_ptr()))
            .u64(16, ptr(license.as_ptr()))
            .name(48, name);
        if let Some(log) = log {
            a = a
                .u32(24, 1)
                .u32(28, log.len() as u32)
                .u64(32, ptr(log.as_mut_ptr()));
        }
        a.fd(BPF_PROG_LOAD)
    };
    load(None).map_err(|e| {
        let mut log = vec![0u8; 64 * 1024];
        drop(load(Some(&mut log)));
        let text = String::from_utf8_lossy(&log);
        let last = text.trim_end_matches('\0').lines().last().unwrap_or("");
        io::Error::new(e.kind(), format!("{e}; verifier: {last}"))
    })
}

/// Attaches `prog` to the raw tracepoint `tp`; the link detaches when dropped.
fn attach(prog: &OwnedFd, tp: &std::ffi::CStr) -> io::Result<OwnedFd> {
    Attr::new()
        .u64(0, ptr(tp.as_ptr()))
        .u32(8, prog.as_raw_fd() as u32)
        .fd(BPF_RAW_TRACEPOINT_OPEN)
}

/// The cgroup-move counter's program: adds one to the only entry of `count`.
fn count_program(count: &OwnedFd) -> Vec<Insn> {
    let mut a = Asm::default();
    count_one(&mut a, count);
    a.finish()
}

/// Adds one to the only entry of `count`, then exits with 0 (the "out" label).
fn count_one(a: &mut Asm, count: &OwnedFd) {
    a.lookup_first(count, "out")
        .mov_imm(R1, 1)
        .atomic_add_dw(R0, 0, R1)
        .label("out")
        .mov_imm(R0, 0)
        .exit();
}

/// The kernel's tracepoints at every change of what `/proc/PID/cgroup` says of a process
/// other than its birth: a task attached to a cgroup (a write to `cgroup.procs` or
/// `tasks`, a runtime's move), a v1 hierarchy's tasks moved to its parent (a cpuset left
/// without CPUs), a cgroup renamed, a hierarchy mounted, remounted or gone.
const CGROUP_MOVE_TRACEPOINTS: [&std::ffi::CStr; 6] = [
    c"cgroup_attach_task",
    c"cgroup_transfer_tasks",
    c"cgroup_rename",
    c"cgroup_setup_root",
    c"cgroup_remount",
    c"cgroup_destroy_root",
];

/// A count of the kernel's cgroup moves since it was opened: while it stands still, no
/// process changed cgroup, and a sleeping process's `cgroup` file need not be read again
/// (the sampler's rule 3). All of [`CGROUP_MOVE_TRACEPOINTS`] or nothing: a count that
/// misses one kind of move would vouch for a file that changed.
pub struct CgroupMoves {
    count: OwnedFd,
    _prog: OwnedFd,
    _links: Vec<OwnedFd>,
}

impl CgroupMoves {
    pub fn open() -> io::Result<CgroupMoves> {
        let count = map_create(BPF_MAP_TYPE_ARRAY, 4, 8, 1, "placer_cgmoves")?;
        let prog = load_program(&count_program(&count), CGROUP_MOVES_PROG_NAME)?;
        let links = attach_all(&prog, &CGROUP_MOVE_TRACEPOINTS)?;
        Ok(CgroupMoves {
            count,
            _prog: prog,
            _links: links,
        })
    }

    /// Moves counted so far.
    pub fn count(&self) -> io::Result<u64> {
        read_count(&self.count)
    }
}

/// Where the socket programs find what they read, from the kernel's BTF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockOffsets {
    /// `struct sock_common.skc_net`: a `possible_net_t`, whose only member is the
    /// `struct net *`.
    pub skc_net: u32,
    /// `struct net.net_cookie`: what `SO_NETNS_COOKIE` gives for a socket of that
    /// namespace.
    pub net_cookie: u32,
    /// `struct sock_common.skc_cookie`: the socket's cookie, as sock_diag gives it.
    pub skc_cookie: u32,
}

impl SockOffsets {
    /// The running kernel's (its BTF read once).
    pub fn of_running_kernel() -> Result<SockOffsets, crate::btf::BtfError> {
        let btf = crate::btf::vmlinux()?;
        let at = |strukt, member| crate::btf::member_offset(&btf, strukt, member);
        Ok(SockOffsets {
            skc_net: at("sock_common", "skc_net")?,
            net_cookie: at("net", "net_cookie")?,
            skc_cookie: at("sock_common", "skc_cookie")?,
        })
    }
}

/// Reads the u64 at `R3 + off` (a kernel address) into [fp-8] and R1; on to "out" when the
/// read fails.
fn read_kernel_u64(a: &mut Asm, off: u32) -> &mut Asm {
    a.add_imm(R3, off as i32)
        .mov(R1, FP)
        .add_imm(R1, -8)
        .mov_imm(R2, 8)
        .call(PROBE_READ_KERNEL)
        .jne_imm(R0, 0, "out")
        .ldx_dw(R1, FP, -8)
}

/// Loads the tracepoint's socket (args[0]) into R6 and goes on to "out" unless it belongs
/// to the network namespace whose cookie is `netns`: the tracepoints fire for every
/// namespace, and the sampler sees its own.
fn only_in_netns(a: &mut Asm, offs: SockOffsets, netns: u64) -> &mut Asm {
    a.ldx_dw(R6, R1, 0).mov(R3, R6);
    read_kernel_u64(a, offs.skc_net).mov(R3, R1);
    read_kernel_u64(a, offs.net_cookie)
        .ld_imm64(R2, netns)
        .jne(R1, R2, "out")
}

/// [`only_in_netns`] for a tracepoint that fires for each segment: the namespace's
/// `struct net *` is learnt from the first socket whose namespace has the cookie `netns`
/// and kept in `net`'s only entry, and from then on a socket's namespace pointer is
/// compared with it: one kernel read per segment instead of two. (The pointer stays that
/// namespace's while the programs are loaded: placer, which loads them, lives in it.)
fn only_in_netns_cached<'a>(
    a: &'a mut Asm,
    net: &OwnedFd,
    offs: SockOffsets,
    netns: u64,
) -> &'a mut Asm {
    a.ldx_dw(R6, R1, 0).mov(R3, R6);
    read_kernel_u64(a, offs.skc_net)
        .mov(R7, R1) // the socket's struct net *
        .lookup_first(net, "out")
        .mov(R8, R0)
        .ldx_dw(R1, R8, 0)
        .jeq_imm(R1, 0, "learn")
        .jne(R1, R7, "out")
        .ja("ours")
        .label("learn")
        .mov(R3, R7);
    read_kernel_u64(a, offs.net_cookie)
        .ld_imm64(R2, netns)
        .jne(R1, R2, "out")
        .stx_dw(R8, 0, R7)
        .label("ours")
}

/// The socket-move program (on `tcp_probe`, which the kernel fires at each segment an
/// established TCP socket receives, data or ACK, before it processes it): marks the
/// socket's cookie in `moved`. Stack: [fp-8] what was read last, then the cookie; [fp-16]
/// the value (1).
fn tcp_move_program(moved: &OwnedFd, net: &OwnedFd, offs: SockOffsets, netns: u64) -> Vec<Insn> {
    let mut a = Asm::default();
    only_in_netns_cached(&mut a, net, offs, netns).mov(R3, R6);
    read_kernel_u64(&mut a, offs.skc_cookie)
        // No cookie yet: no dump has seen the socket (a dump gives each its cookie), so
        // it is not one a sample holds.
        .jeq_imm(R1, 0, "out")
        .ld_map(R1, moved)
        .mov(R2, FP)
        .add_imm(R2, -8)
        .call(MAP_LOOKUP_ELEM)
        .jne_imm(R0, 0, "out") // marked already: a lookup, no write
        .st_w_imm(FP, -16, 1)
        .insert_new(moved, -8, -16)
        .label("out")
        .mov_imm(R0, 0)
        .exit();
    a.finish()
}

/// The state-change counter (on `inet_sock_set_state`): adds one to `count`'s only entry
/// for a socket of namespace `netns`.
fn tcp_state_program(count: &OwnedFd, offs: SockOffsets, netns: u64) -> Vec<Insn> {
    let mut a = Asm::default();
    only_in_netns(&mut a, offs, netns);
    count_one(&mut a, count);
    a.finish()
}

/// The most sockets [`TcpMoves`] marks between two drains; beyond that a drain says it
/// is not complete and the sampler dumps.
pub const TCP_MOVES_CAPACITY: u32 = 8192;

/// Which TCP sockets moved (received a segment) since the last drain, by socket cookie,
/// and a count of TCP state changes (`inet_sock_set_state`: a connection opened, closed
/// or changed state), so that a sample can read again only the sockets that moved and
/// dump all of them only when the set of sockets may have changed.
///
/// Why `tcp_probe` suffices for the counters a sample keeps: `bytes_received`, `segs_in`
/// and `data_segs_in` change only on a segment received, and `bytes_acked` only on an ACK
/// received, each in `tcp_rcv_established` after this tracepoint, under the socket's
/// lock; sock_diag reads `tcp_info` under the same lock. So a socket read after the drain
/// that took its mark shows at least what the marked segment brought. `segs_out` and
/// `data_segs_out` also move on sending, between ACKs: a sender's figures lag by at most
/// the segments its peer has not acknowledged yet, until its next ACK (or the sampler's
/// periodic dump). Segments received in other states (`tcp_rcv_state_process`) are not
/// marked; the state change that leads there is counted, and makes the next sample dump.
///
/// Both programs count only the sockets of one network namespace (the sampler's), by its
/// cookie: a machine whose containers open and close connections all the time does not
/// make the host's sampler dump at each sample.
pub struct TcpMoves {
    moved: OwnedFd,
    states: OwnedFd,
    _net: OwnedFd,
    _progs: [OwnedFd; 2],
    _links: Vec<OwnedFd>,
    buf: BatchBuf,
}

impl TcpMoves {
    /// Loads and attaches both programs for the sockets of the network namespace whose
    /// cookie is `netns`; where they read comes from the kernel's BTF. The error says why
    /// not (no root, no BTF, no such tracepoint).
    pub fn open(netns: u64) -> io::Result<TcpMoves> {
        let offs = SockOffsets::of_running_kernel()
            .map_err(|e| io::Error::other(format!("kernel socket layout: {e}")))?;
        let moved = map_create(
            BPF_MAP_TYPE_HASH,
            8,
            4,
            TCP_MOVES_CAPACITY,
            "placer_tcpmoved",
        )?;
        let states = map_create(BPF_MAP_TYPE_ARRAY, 4, 8, 1, "placer_tcpstates")?;
        let net = map_create(BPF_MAP_TYPE_ARRAY, 4, 8, 1, "placer_tcpnet")?;
        let mv = load_program(
            &tcp_move_program(&moved, &net, offs, netns),
            TCP_MOVES_PROG_NAME,
        )?;
        let st = load_program(
            &tcp_state_program(&states, offs, netns),
            TCP_STATES_PROG_NAME,
        )?;
        // The counter first: a socket marked is never one whose birth went uncounted.
        let mut links = attach_all(&st, &[c"inet_sock_set_state"])?;
        links.extend(attach_all(&mv, &[c"tcp_probe"])?);
        Ok(TcpMoves {
            moved,
            states,
            _net: net,
            _progs: [mv, st],
            _links: links,
            buf: BatchBuf::new(8, 4, 1024),
        })
    }

    /// The programs' cumulative time in the kernel, ns, the segment marker's and the
    /// state counter's (counted only while [`RunTimeStats`] is held by anyone).
    pub fn run_time_ns(&self) -> io::Result<(u64, u64)> {
        let of = |p: &OwnedFd| -> io::Result<u64> {
            let info = prog_info(p)?;
            Ok(u64::from_ne_bytes(
                info[192..200].try_into().expect("8 bytes"),
            ))
        };
        Ok((of(&self._progs[0])?, of(&self._progs[1])?))
    }

    /// State changes counted so far (TCP sockets of the namespace given at open).
    pub fn state_changes(&self) -> io::Result<u64> {
        read_count(&self.states)
    }

    /// Takes the cookies marked since the last drain into `out` (cleared first); `false`
    /// when the map was full, so that some moves may have gone unmarked.
    pub fn drain(&mut self, out: &mut Vec<u64>) -> io::Result<bool> {
        out.clear();
        let n = self.buf.drain(&self.moved, |k, _| {
            out.push(u64::from_ne_bytes(k.try_into().expect("8-byte key")))
        })?;
        Ok(n < TCP_MOVES_CAPACITY)
    }
}

/// The only entry of a one-entry array of u64 (a [`count_program`]'s count).
fn read_count(map: &OwnedFd) -> io::Result<u64> {
    let key = 0u32;
    let mut value = [0u8; 8];
    Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, ptr(&key))
        .u64(16, ptr(value.as_mut_ptr()))
        .call(BPF_MAP_LOOKUP_ELEM)?;
    Ok(u64::from_ne_bytes(value))
}

/// Attaches `prog` to each of `tps`, the error naming the tracepoint that failed.
fn attach_all(prog: &OwnedFd, tps: &[&std::ffi::CStr]) -> io::Result<Vec<OwnedFd>> {
    tps.iter()
        .map(|tp| {
            attach(prog, tp).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("tracepoint {}: {e}", tp.to_string_lossy()),
                )
            })
        })
        .collect()
}

/// Buffers for [`BatchBuf::drain`]: keys and values of one batch, grown when one bucket
/// holds more.
struct BatchBuf {
    key_len: usize,
    value_len: usize,
    keys: Vec<u8>,
    values: Vec<u8>,
}

impl BatchBuf {
    fn new(key_len: usize, value_len: usize, entries: usize) -> BatchBuf {
        BatchBuf {
            key_len,
            value_len,
            keys: vec![0; entries * key_len],
            values: vec![0; entries * value_len],
        }
    }

    /// Looks up and deletes every entry of hash map `map` in batches (Linux 5.6), calling
    /// `f` with each key and value; the entries taken.
    fn drain(&mut self, map: &OwnedFd, mut f: impl FnMut(&[u8], &[u8])) -> io::Result<u32> {
        let (kl, vl) = (self.key_len, self.value_len);
        // The batch token is an opaque key-sized cursor.
        let mut token = [0u8; 8];
        let mut first = true;
        let mut total = 0u32;
        loop {
            let mut next = [0u8; 8];
            let cap = (self.keys.len() / kl) as u32;
            let mut attr = Attr::new()
                .u64(0, if first { 0 } else { ptr(token.as_ptr()) })
                .u64(8, ptr(next.as_mut_ptr()))
                .u64(16, ptr(self.keys.as_mut_ptr()))
                .u64(24, ptr(self.values.as_mut_ptr()))
                .u32(32, cap)
                .u32(36, map.as_raw_fd() as u32);
            let r = attr.call(BPF_MAP_LOOKUP_AND_DELETE_BATCH);
            let count = u32::from_ne_bytes(attr.0[32..36].try_into().expect("4 bytes"));
            for i in 0..count as usize {
                f(
                    &self.keys[i * kl..(i + 1) * kl],
                    &self.values[i * vl..(i + 1) * vl],
                );
            }
            total += count;
            match r {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => break,
                // One bucket holds more than the buffer: grow it and go on from the same
                // token.
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    let n = self.keys.len() / kl * 2;
                    self.keys.resize(n * kl, 0);
                    self.values.resize(n * vl, 0);
                    continue;
                }
                Err(e) => return Err(e),
            }
            token = next;
            first = false;
        }
        Ok(total)
    }
}

/// One thread's CPU time since the previous drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadCpu {
    pub tid: u32,
    pub cpu_ns: u64,
    /// The CPU it last ran on (at its last switch-out or tick).
    pub last_cpu: u32,
}

/// One process's CPU time since the previous drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcCpu {
    /// The sum over its threads.
    pub cpu_ns: u64,
    /// The comm of its main thread when it first ran in the interval (a fork child may
    /// still carry its parent's name then), else of the first of its threads drained.
    pub comm: String,
    /// The threads that ran, in tid order.
    pub threads: Vec<ThreadCpu>,
}

/// What one drain found.
#[derive(Debug, Default, Clone)]
pub struct Drain {
    /// By thread-group id (the process id).
    pub procs: crate::pid::PidMap<ProcCpu>,
    /// The map was full at the drain (threads beyond its capacity went unaccounted).
    pub lost_full: bool,
}

/// The loaded program, its maps and its attachment; dropping it detaches and frees all.
pub struct CpuCollector {
    cpu: OwnedFd,
    _last_switch: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    /// On the tick (its link, then its program); `None` where the tracepoint is missing
    /// (a running task's time then shows at its next switch).
    tick_link: Option<(OwnedFd, OwnedFd)>,
    batch: bool,
    buf: BatchBuf,
    capacity: u32,
}

impl CpuCollector {
    /// Loads and attaches the program, its map sized for the threads the machine has
    /// ([`map_capacity_for`]); the error says why not (no root, no raw tracepoints, an
    /// old verifier).
    pub fn open() -> io::Result<CpuCollector> {
        Self::open_for(map_capacity_for(
            threads_now().unwrap_or(u64::from(MAX_THREADS)),
        ))
    }

    /// [`CpuCollector::open`] with a map of `capacity` threads.
    pub fn open_for(capacity: u32) -> io::Result<CpuCollector> {
        let last_switch = map_create(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, 1, "placer_last_sw")?;
        let cpu = map_create(
            BPF_MAP_TYPE_HASH,
            4,
            VALUE_LEN as u32,
            capacity,
            "placer_cpu_ns",
        )?;
        let prog = load_program(&program(&last_switch, &cpu, None), PROG_NAME)?;
        let link = attach(&prog, c"sched_switch")?;
        let tick = program(&last_switch, &cpu, Some(TICK_MIN_NS));
        let tick_link = load_program(&tick, TICK_PROG_NAME)
            .and_then(|tick| Ok((attach(&tick, c"hrtimer_expire_entry")?, tick)))
            .map_err(|e| tracing::debug!("eBPF collector on hrtimer_expire_entry: {e}"))
            .ok();
        Ok(CpuCollector {
            cpu,
            _last_switch: last_switch,
            _prog: prog,
            _link: link,
            tick_link,
            batch: true,
            buf: BatchBuf::new(4, VALUE_LEN, 4096),
            capacity,
        })
    }

    /// The threads its map holds between two drains.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Takes what the map gathered since the previous drain and empties it.
    pub fn drain(&mut self) -> io::Result<Drain> {
        let mut out = Drain::default();
        if self.batch {
            match self.drain_batch(&mut out) {
                Ok(()) => {
                    Self::finish(&mut out);
                    return Ok(out);
                }
                // Kernels before 5.6 have no batch ops: one entry at a time from now on.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && out.procs.is_empty() => {
                    self.batch = false
                }
                Err(e) => return Err(e),
            }
        }
        self.drain_each(&mut out)?;
        Self::finish(&mut out);
        Ok(out)
    }

    fn take(out: &mut Drain, tid: u32, v: &[u8]) {
        let word = |at: usize| u32::from_ne_bytes(v[at..at + 4].try_into().expect("4 bytes"));
        let ns = u64::from_ne_bytes(v[..8].try_into().expect("8 bytes"));
        let (tgid, last_cpu) = (word(8), word(12));
        let comm = &v[16..VALUE_LEN];
        let end = comm.iter().position(|&b| b == 0).unwrap_or(COMM_LEN);
        let comm = || String::from_utf8_lossy(&comm[..end]).into_owned();
        // The comm of the main thread, else of the first thread drained (converted once).
        let e = match out.procs.entry(tgid) {
            Entry::Vacant(v) => v.insert(ProcCpu {
                cpu_ns: 0,
                comm: comm(),
                threads: Vec::new(),
            }),
            Entry::Occupied(o) => {
                let e = o.into_mut();
                if tid == tgid {
                    e.comm = comm();
                }
                e
            }
        };
        e.cpu_ns += ns;
        e.threads.push(ThreadCpu {
            tid,
            cpu_ns: ns,
            last_cpu,
        });
    }

    /// Each process's threads in tid order, one entry per tid (the same tid twice only
    /// when the per-entry drain raced with a re-insert).
    fn finish(out: &mut Drain) {
        for p in out.procs.values_mut() {
            p.threads.sort_by_key(|t| t.tid);
            p.threads.dedup_by(|later, kept| {
                let same = later.tid == kept.tid;
                if same {
                    kept.cpu_ns += later.cpu_ns;
                    kept.last_cpu = later.last_cpu;
                }
                same
            });
        }
    }

    fn drain_batch(&mut self, out: &mut Drain) -> io::Result<()> {
        let total = self.buf.drain(&self.cpu, |k, v| {
            Self::take(
                out,
                u32::from_ne_bytes(k.try_into().expect("4-byte key")),
                v,
            )
        })?;
        out.lost_full = total >= self.capacity;
        Ok(())
    }

    fn drain_each(&mut self, out: &mut Drain) -> io::Result<()> {
        let fd = self.cpu.as_raw_fd() as u32;
        let mut keys = Vec::new();
        let mut key = 0u32;
        let mut have = false;
        loop {
            let mut next = 0u32;
            let r = Attr::new()
                .u32(0, fd)
                .u64(8, if have { ptr(&key) } else { 0 })
                .u64(16, ptr(&raw mut next))
                .call(BPF_MAP_GET_NEXT_KEY);
            match r {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => break,
                Err(e) => return Err(e),
            }
            keys.push(next);
            key = next;
            have = true;
        }
        let mut v = [0u8; VALUE_LEN];
        for k in &keys {
            let got = Attr::new()
                .u32(0, fd)
                .u64(8, ptr(k))
                .u64(16, ptr(v.as_mut_ptr()))
                .call(BPF_MAP_LOOKUP_ELEM);
            if got.is_ok() {
                let _ = Attr::new()
                    .u32(0, fd)
                    .u64(8, ptr(k))
                    .call(BPF_MAP_DELETE_ELEM);
                Self::take(out, *k, &v);
            }
        }
        out.lost_full = keys.len() as u32 >= self.capacity;
        Ok(())
    }

    /// The kernel's id of this collector's program (others of the same name may be
    /// loaded: another daemon's, a test's).
    pub fn prog_id(&self) -> io::Result<u32> {
        let info = prog_info(&self._prog)?;
        Ok(u32::from_ne_bytes(info[4..8].try_into().expect("4 bytes")))
    }

    /// This collector's programs' cumulative time in the kernel, ns, the switch program's
    /// and the tick program's: counted only while [`RunTimeStats`] is held by anyone. Its
    /// own program fds, not a walk over every loaded program.
    pub fn run_time_ns(&self) -> io::Result<(u64, u64)> {
        // struct bpf_prog_info: run_time_ns at byte 192.
        let of = |fd: &OwnedFd| -> io::Result<u64> {
            let info = prog_info(fd)?;
            Ok(u64::from_ne_bytes(
                info[192..200].try_into().expect("8 bytes"),
            ))
        };
        let tick = match &self.tick_link {
            Some((_, prog)) => of(prog)?,
            None => 0,
        };
        Ok((of(&self._prog)?, tick))
    }

    /// Whether the program also runs on the tick (a running task's time is counted
    /// before it is switched out).
    pub fn counts_running_tasks(&self) -> bool {
        self.tick_link.is_some()
    }

    /// Use the one-entry-at-a-time drain (what kernels before 5.6 get), for tests.
    pub fn force_per_entry_drain(&mut self) {
        self.batch = false;
    }
}

/// While held, the kernel counts each BPF program's run time and runs (BPF_ENABLE_STATS;
/// the count stops when the last holder closes it; needs root, Linux 5.8).
pub struct RunTimeStats(#[allow(dead_code)] OwnedFd);

impl RunTimeStats {
    pub fn enable() -> io::Result<RunTimeStats> {
        // enable_stats.type = BPF_STATS_RUN_TIME (0).
        Attr::new().u32(0, 0).fd(BPF_ENABLE_STATS).map(RunTimeStats)
    }
}

/// One loaded program's cumulative run time and runs (counted while [`RunTimeStats`] is
/// held by anyone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramRunTime {
    pub id: u32,
    pub prog: Prog,
    pub run_time_ns: u64,
    pub runs: u64,
}

/// Each loaded program of these kinds (by name), by id: a window's cost is taken per
/// program, so that a program loaded or unloaded during it (another daemon's, a test's)
/// neither counts nor makes the sum go back.
pub fn program_run_times(progs: &[Prog]) -> io::Result<Vec<ProgramRunTime>> {
    let mut found = Vec::new();
    for_each_program(|info| {
        let Some(prog) = Prog::of_name(prog_name(info)).filter(|p| progs.contains(p)) else {
            return;
        };
        let at = |o: usize| u64::from_ne_bytes(info[o..o + 8].try_into().expect("8 bytes"));
        // struct bpf_prog_info: id at byte 4, run_time_ns at 192, run_cnt at 200.
        found.push(ProgramRunTime {
            id: u32::from_ne_bytes(info[4..8].try_into().expect("4 bytes")),
            prog,
            run_time_ns: at(192),
            runs: at(200),
        });
    })?;
    Ok(found)
}

/// The ids of the BPF programs a process holds (its program and link fds' `prog_id` in
/// `/proc/PID/fdinfo`): whose programs these are, which the name alone does not say.
pub fn programs_held_by(pid: u32) -> io::Result<Vec<u32>> {
    let mut ids = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))?.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue; // closed meanwhile
        };
        ids.extend(text.lines().filter_map(|l| {
            l.strip_prefix("prog_id:")
                .and_then(|v| v.trim().parse::<u32>().ok())
        }));
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// `struct bpf_prog_info`'s name (name[16] at byte 64), without its NULs.
fn prog_name(info: &[u8]) -> &[u8] {
    let n = &info[64..80];
    &n[..n.iter().position(|&b| b == 0).unwrap_or(16)]
}

/// Calls `f` with the `struct bpf_prog_info` of every loaded program.
fn for_each_program(mut f: impl FnMut(&[u8])) -> io::Result<()> {
    let mut id = 0u32;
    loop {
        let mut attr = Attr::new().u32(0, id);
        match attr.call(BPF_PROG_GET_NEXT_ID) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(e),
        }
        id = u32::from_ne_bytes(attr.0[4..8].try_into().expect("4 bytes"));
        let Ok(fd) = Attr::new().u32(0, id).fd(BPF_PROG_GET_FD_BY_ID) else {
            continue; // unloaded meanwhile
        };
        if let Ok(info) = prog_info(&fd) {
            f(&info);
        }
    }
}

/// A loaded program's `struct bpf_prog_info` (its first 256 bytes).
fn prog_info(fd: &OwnedFd) -> io::Result<[u8; 256]> {
    let mut info = [0u8; 256];
    Attr::new()
        .u32(0, fd.as_raw_fd() as u32)
        .u32(4, info.len() as u32)
        .u64(8, ptr(info.as_mut_ptr()))
        .call(BPF_OBJ_GET_INFO_BY_FD)?;
    Ok(info)
}

/// Ids of the loaded BPF programs of these kinds (tests check nothing of placer's is left
/// loaded after it stops; needs root).
pub fn loaded_programs_named(progs: &[Prog]) -> io::Result<Vec<u32>> {
    Ok(program_run_times(progs)?
        .into_iter()
        .map(|p| p.id)
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels() {
        let mut a = Asm::default();
        a.jeq_imm(R0, 0, "b")
            .ja("b")
            .mov_imm(R0, 1)
            .label("b")
            .exit();
        let insns = a.finish();
        // jeq at 0 -> 3: off 2; ja at 1 -> 3: off 1.
        assert_eq!(insns[0].off, 2);
        assert_eq!(insns[1].off, 1);
        assert_eq!(insns[3].code, 0x95);
    }

    const OFFS: SockOffsets = SockOffsets {
        skc_net: 48,
        net_cookie: 200,
        skc_cookie: 96,
    };

    #[test]
    fn the_programs_end_in_exit_and_every_jump_stays_inside() {
        // Any fds do for the encoding.
        let f1 = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let f2 = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        for p in [
            program(&f1, &f2, None),
            program(&f1, &f2, Some(TICK_MIN_NS)),
            count_program(&f1),
            tcp_move_program(&f1, &f2, OFFS, 7),
            tcp_state_program(&f1, OFFS, 7),
        ] {
            assert_eq!(p.last().unwrap().code, 0x95);
            for (i, insn) in p.iter().enumerate() {
                if matches!(insn.code, 0x15 | 0x55 | 0x5d | 0x05 | 0xa5) {
                    let to = i as isize + 1 + insn.off as isize;
                    assert!(
                        to > i as isize && (to as usize) < p.len(),
                        "jump at {i} to {to}"
                    );
                }
            }
        }
    }

    /// The two real tests count loaded programs: one at a time, and not while another
    /// test of this crate loads its own collector.
    pub(crate) static REAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A real collector, this crate's turn held while it lives; `None` (said as a skip)
    /// where it cannot load.
    fn real_collector() -> Option<(std::sync::MutexGuard<'static, ()>, CpuCollector)> {
        placer_testkit::require_root();
        let one = REAL.lock().unwrap_or_else(|e| e.into_inner());
        match CpuCollector::open() {
            Ok(c) => Some((one, c)),
            Err(e) => {
                placer_testkit::skip(&format!("eBPF collector unavailable: {e}"));
                None
            }
        }
    }

    fn check_collector(per_entry: bool) {
        let Some((_one, mut c)) = real_collector() else {
            return;
        };
        if per_entry {
            c.force_per_entry_drain();
        }
        assert!(
            c.counts_running_tasks(),
            "no hrtimer_expire_entry tracepoint"
        );
        let stats = RunTimeStats::enable().unwrap();
        // This collector's program alone: other tests of this binary may load theirs (a
        // sampler on `/`) and unload them meanwhile.
        let ours = c.prog_id().unwrap();
        let run_time = || {
            program_run_times(&[Prog::Switch])
                .unwrap()
                .into_iter()
                .find(|p| p.id == ours)
                .map(|p| (p.run_time_ns, p.runs))
                .expect("loaded under its name")
        };
        let (ns0, runs0) = run_time();
        c.drain().unwrap();
        let t0 = std::time::Instant::now();
        let pid = placer_testkit::proc::short_lived_spinner(300);
        let wall_ns = t0.elapsed().as_nanos() as u64;
        let d = c.drain().unwrap();
        // The child exited before the drain, yet its CPU time is there: most of its wall
        // time (it spins; `date` children run under their own pids).
        let got = d.procs.get(&pid).map(|p| p.cpu_ns).unwrap_or(0);
        assert!(
            got > 0,
            "pid {pid} not accounted: {} procs drained",
            d.procs.len()
        );
        let all: u64 = d.procs.values().map(|p| p.cpu_ns).sum();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        assert!(
            all <= wall_ns * cpus + 50_000_000,
            "{all} ns over {cpus} CPUs x {wall_ns} ns"
        );
        assert!(d.procs.contains_key(&std::process::id()));
        // Per thread: two threads of this process that each spin until they used 100 ms of
        // CPU (by their own clock) are there under this process with that time and a CPU;
        // the process is the sum of its threads. The collector counts wall time between
        // switches, so it may add the interrupt and (in a VM) steal time the thread's own
        // clock leaves out: a quarter more at most here.
        c.drain().unwrap();
        let spin = || {
            std::thread::spawn(|| {
                let tid = crate::sys::gettid();
                let t0 = std::time::Instant::now();
                while crate::sys::thread_cpu_ns() < 100_000_000 && t0.elapsed().as_secs() < 5 {
                    std::hint::spin_loop();
                }
                (tid, crate::sys::thread_cpu_ns())
            })
        };
        let (a, b) = (spin(), spin());
        let ran = [a.join().unwrap(), b.join().unwrap()];
        let d = c.drain().unwrap();
        let me = &d.procs[&std::process::id()];
        assert!(me.threads.windows(2).all(|w| w[0].tid < w[1].tid));
        assert_eq!(me.cpu_ns, me.threads.iter().map(|t| t.cpu_ns).sum::<u64>());
        for (tid, own_ns) in ran {
            let t = me
                .threads
                .iter()
                .find(|t| t.tid == tid)
                .unwrap_or_else(|| panic!("thread {tid} not in {:?}", me.threads));
            assert!(
                own_ns >= 100_000_000,
                "thread {tid} hardly ran: {own_ns} ns"
            );
            assert!(
                t.cpu_ns >= own_ns * 95 / 100 && t.cpu_ns <= own_ns * 5 / 4 + 10_000_000,
                "{t:?} vs its own clock {own_ns} ns"
            );
            assert!((t.last_cpu as u64) < cpus, "{t:?}");
        }
        // Its own cost in the kernel was counted while the stats were on.
        let (ns1, runs1) = run_time();
        assert!(
            runs1 > runs0 && ns1 > ns0,
            "{runs0}..{runs1} runs, {ns0}..{ns1} ns"
        );
        drop(stats);
        // Drained: a second drain right away holds only what ran since.
        let again = c.drain().unwrap();
        assert!(!again.procs.contains_key(&pid));
        drop(c);
        // The kernel frees a detached program after an RCU grace period: wait for it.
        let t = std::time::Instant::now();
        while loaded_programs_named(&[Prog::Switch])
            .unwrap()
            .contains(&ours)
        {
            assert!(t.elapsed().as_secs() < 5, "program {ours} still loaded");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// A thread that is still running is charged by the tick, within the tick program's
    /// bound: at a drain, the collector has all of its own CPU clock but the last
    /// [`TICK_MIN_NS`] and two ticks (HZ 100 at the least).
    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_tick_charges_a_running_thread_within_its_bound() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let Some((_one, mut c)) = real_collector() else {
            return;
        };
        assert!(c.counts_running_tasks(), "no tick program");
        let own = std::sync::Arc::new(AtomicU64::new(0));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (own2, stop2) = (own.clone(), stop.clone());
        let last = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32 - 1;
        let spin = std::thread::spawn(move || {
            let tid = crate::sys::gettid();
            // Real-time on one CPU: no other task switches it out, so what it is charged
            // while it runs comes from the tick (the kernel's RT throttling leaves it 95%
            // of each second).
            let _ = crate::sys::pin_self(last);
            let _ = crate::sys::set_fifo(1);
            let t0 = std::time::Instant::now();
            while !stop2.load(Ordering::Relaxed) && t0.elapsed().as_secs() < 20 {
                own2.store(crate::sys::thread_cpu_ns(), Ordering::Relaxed);
            }
            tid
        });
        // Until it ran 200 ms by its own clock (a shared machine may give it less than
        // its wall time), 15 s at most.
        let t = std::time::Instant::now();
        while own.load(Ordering::Relaxed) < 200_000_000 && t.elapsed().as_secs() < 15 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let before = own.load(Ordering::Relaxed);
        let d = c.drain().unwrap();
        stop.store(true, Ordering::Relaxed);
        let tid = spin.join().unwrap();
        let got = d.procs.get(&std::process::id()).map_or(0, |p| {
            p.threads
                .iter()
                .find(|t| t.tid == tid)
                .map_or(0, |t| t.cpu_ns)
        });
        let bound = TICK_MIN_NS as u64 + 2 * 10_000_000;
        assert!(before > 100_000_000, "the thread hardly ran: {before} ns");
        assert!(
            got + bound >= before,
            "charged {got} ns while running, its own clock said {before} ns"
        );
    }

    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_collector_accounts_a_process_that_exited_between_drains_and_unloads() {
        check_collector(false);
    }

    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_collector_per_entry_drain_gives_the_same() {
        check_collector(true);
    }

    #[test]
    fn the_map_is_sized_for_the_threads_within_bounds() {
        assert_eq!(map_capacity_for(0), MIN_THREADS);
        assert_eq!(map_capacity_for(700), MIN_THREADS);
        assert_eq!(map_capacity_for(4_100), 32_768);
        assert_eq!(map_capacity_for(20_000), MAX_THREADS);
        assert_eq!(map_capacity_for(u64::MAX), MAX_THREADS);
        assert!(threads_now().is_some_and(|n| n > 0));
    }

    /// Issue 37: a map that fills up gives no processes (the sample reads them all from
    /// /proc), and the next map is twice as big.
    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn real_full_map_falls_back_and_the_collector_grows() {
        use crate::activity::{ActivitySource, KernelActivity};
        placer_testkit::require_root();
        let _one = REAL.lock().unwrap_or_else(|e| e.into_inner());
        let mut a = KernelActivity::open();
        if a.cpu_capacity().is_none() {
            placer_testkit::skip("eBPF collector unavailable");
            return;
        }
        a.resize_cpu(64).unwrap();
        a.drain();
        // More threads than the map holds, each running once.
        let threads: Vec<_> = (0..150)
            .map(|_| std::thread::spawn(|| std::hint::black_box(crate::sys::gettid())))
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(a.drain().ran.is_none(), "a full map gave processes");
        assert_eq!(a.cpu_capacity(), Some(128));
        assert!(a.drain().ran.is_some(), "the bigger map gave none");
    }
}
