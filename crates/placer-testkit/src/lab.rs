//! The lab: a two-socket, SMT, multi-node machine emulated by qemu (TCG), for tests that need
//! a real kernel with that shape (NUMA page placement, SMT siblings, a multi-queue NIC's IRQs).
//!
//! A guest boots Debian's own kernel (the uncompressed payload of `/boot/vmlinuz-*`, which
//! qemu starts directly through its PVH note, skipping decompression) with a small
//! initramfs: busybox-static and the virtio, virtio-net, 9p and overlay modules in dependency order
//! (`modules.dep`). Its `/init` mounts the host's root read-only over 9p, mounts the guest's
//! own proc, sys, dev and tmpfs /run over it, and a tmpfs layer over the host's /tmp (an
//! overlay: the host's files stay visible, writes stay in the guest), and runs the command
//! in a chroot there, so the guest runs the host's own binaries by their host paths (a test
//! binary, the `placer` it was built with, `lscpu`) without copying them, wherever the
//! checkout and its target dir are. The command's output goes to a
//! second serial port, the kernel's to the first; both come back in [`Output`]. A third port
//! carries the init's heartbeat, every [`HEARTBEAT`], by which the host tells a hung guest
//! kernel from a quiet command ([`Guest::wait`]).
//!
//! The kernel payload and initramfs are built once and cached under `target/placer-lab/`
//! (or `$PLACER_LAB_CACHE`), keyed by the kernel, busybox and this module's init script:
//! a changed input builds new ones.
//!
//! The NIC is a 4-queue virtio-net on a tap in a network namespace the lab creates
//! (`placer-lab-PID`, host side [`HOST_ADDR`], guest [`GUEST_ADDR`]) and deletes on drop; the
//! namespace has no other interface, so no traffic leaves it. Senders run in it with
//! [`Guest::netns`]. One guest runs at a time (an exclusive lock on [`LOCK_PATH`]): a boot
//! takes both host cores.
//!
//! What the lab cannot show: timing. TCG runs guest code at a fraction of native speed, so
//! no performance figure comes from it; it checks what the kernel answers.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The environment variable set in the guest: code that runs on both sides tells them apart.
pub const GUEST_ENV: &str = "PLACER_LAB_GUEST";
/// The lock every guest run holds: one guest at a time on the host.
pub const LOCK_PATH: &str = "/tmp/placer-lab.lock";
/// The host side of the tap, in the lab's namespace.
pub const HOST_ADDR: &str = "10.231.0.1";
/// The guest's virtio-net address (set by the init script).
pub const GUEST_ADDR: &str = "10.231.0.2";
/// The guest NIC's queue pairs.
pub const NIC_QUEUES: u32 = 4;
const TAP: &str = "plab0";
const EXIT_MARK: &str = "PLACER-LAB-EXIT=";
/// How often a running guest's init beats on its third serial port.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// The heartbeat loop's pid, in the guest (a test stops it to see a hang called).
pub const HEARTBEAT_PID_PATH: &str = "/run/lab-heartbeat.pid";
const HEARTBEAT_FILE: &str = "heartbeat.log";

/// Whether this process runs inside a lab guest.
pub fn in_guest() -> bool {
    std::env::var_os(GUEST_ENV).is_some()
}

/// A machine shape the lab boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `2s2c2t-2n`: 2 sockets x 2 cores x 2 threads, a NUMA node per socket (distance 21).
    S2C2T2N,
    /// `2s2d2c2t-4n`: 2 sockets x 2 dies x 2 cores x 2 threads, a node per die (an L3 each).
    S2D2C2T4N,
}

impl Shape {
    pub const ALL: [Shape; 2] = [Shape::S2C2T2N, Shape::S2D2C2T4N];

    pub fn name(self) -> &'static str {
        match self {
            Shape::S2C2T2N => "2s2c2t-2n",
            Shape::S2D2C2T4N => "2s2d2c2t-4n",
        }
    }

    pub fn parse(name: &str) -> Option<Shape> {
        Shape::ALL.into_iter().find(|s| s.name() == name)
    }

    /// (sockets, dies per socket, cores per die, threads per core, nodes).
    pub fn dims(self) -> (u32, u32, u32, u32, u32) {
        match self {
            Shape::S2C2T2N => (2, 1, 2, 2, 2),
            Shape::S2D2C2T4N => (2, 2, 2, 2, 4),
        }
    }

    pub fn cpus(self) -> u32 {
        let (s, d, c, t, _) = self.dims();
        s * d * c * t
    }

    pub fn nodes(self) -> u32 {
        self.dims().4
    }

    /// The NUMA distance between two nodes: 10 local, 21 to another socket, 15 to the
    /// other die of the same socket.
    pub fn distance(self, a: u32, b: u32) -> u32 {
        let per_socket = self.nodes() / self.dims().0;
        if a == b {
            10
        } else if a / per_socket == b / per_socket {
            15
        } else {
            21
        }
    }

    const NODE_MIB: u32 = 512;

    fn qemu_args(self) -> Vec<String> {
        let (s, d, c, t, n) = self.dims();
        let mut a: Vec<String> = vec![
            "-accel".into(),
            "tcg,thread=multi".into(),
            // An Intel vendor: TCG shows no SMT siblings with an AMD one.
            "-cpu".into(),
            "max,vendor=GenuineIntel,family=6,model=85,stepping=4".into(),
            "-smp".into(),
            format!("{},sockets={s},dies={d},cores={c},threads={t}", self.cpus()),
            "-m".into(),
            format!("{}M", n * Self::NODE_MIB),
        ];
        let per_node = self.cpus() / n;
        for i in 0..n {
            a.push("-object".into());
            a.push(format!(
                "memory-backend-ram,id=m{i},size={}M",
                Self::NODE_MIB
            ));
            a.push("-numa".into());
            a.push(format!(
                "node,nodeid={i},cpus={}-{},memdev=m{i}",
                i * per_node,
                (i + 1) * per_node - 1
            ));
        }
        for i in 0..n {
            for j in i + 1..n {
                a.push("-numa".into());
                a.push(format!("dist,src={i},dst={j},val={}", self.distance(i, j)));
            }
        }
        a
    }
}

/// Why the lab could not run a command.
#[derive(Debug)]
pub enum LabError {
    /// A tool or file the lab needs is missing here (qemu, the kernel, busybox): a skip
    /// reason, a failure under `PLACER_REQUIRE_ROOT=1`.
    Missing(String),
    /// Building the images, the namespace or the guest failed.
    Failed(String),
}

impl std::fmt::Display for LabError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LabError::Missing(s) => write!(f, "the lab cannot run here: {s}"),
            LabError::Failed(s) => write!(f, "the lab failed: {s}"),
        }
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> LabError {
    LabError::Failed(format!("{what}: {e}"))
}

/// What a guest run gave back.
#[derive(Debug)]
pub struct Output {
    /// The command's exit status in the guest; None when the guest ended without saying
    /// (killed at the time limit, crashed, the command never started).
    pub status: Option<i32>,
    /// The command's stdout and stderr, as the guest wrote them.
    pub output: String,
    /// The guest kernel's console (boot messages, panics).
    pub console: String,
    /// Whether the host killed the guest at the time limit.
    pub timed_out: bool,
    /// Why the host killed the guest as hung, if it did (see [`Guest::wait`]).
    pub hung: Option<Hang>,
}

/// How a guest was seen to hang.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hang {
    /// The init's heartbeat stopped: the guest kernel no longer runs a shell loop.
    Heartbeat,
    /// The command said nothing for the watch's output limit while the guest kernel
    /// reported stalls (RCU stalls, soft lockups, a starved kthread): the emulator's hang.
    StalledKernel,
    /// The command said nothing for the watch's output limit, the kernel nothing wrong: the
    /// command itself is stuck, which is a result.
    Command,
}

impl Hang {
    /// Whether the hang is the emulator's (worth another boot), not the command's.
    pub fn is_the_emulators(self) -> bool {
        match self {
            Hang::Heartbeat | Hang::StalledKernel => true,
            Hang::Command => false,
        }
    }
}

/// When [`Guest::wait`] calls a running guest hung.
#[derive(Debug, Clone, Copy)]
pub struct Watch {
    /// The heartbeat, once begun, silent this long.
    pub heartbeat_silence: Duration,
    /// The command's output, once begun, silent this long: longer than any bounded wait
    /// of the command's.
    pub output_silence: Duration,
}

/// Whether a guest's console shows its kernel stalled (the messages Linux prints when a
/// CPU or its RCU grace-period kthread gets no time).
pub fn console_shows_stalls(console: &str) -> bool {
    [
        "detected stalls",
        "soft lockup",
        "kthread starved",
        "wakeup didn't happen",
    ]
    .iter()
    .any(|m| console.contains(m))
}

impl Output {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
}

/// The kernel payload and initramfs the guests boot.
#[derive(Debug, Clone)]
pub struct Images {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
}

/// The newest Debian kernel in /boot with its modules: (vmlinuz, modules dir, release).
fn debian_kernel() -> Result<(PathBuf, PathBuf, String), LabError> {
    let mut best: Option<(PathBuf, PathBuf, String)> = None;
    let entries = std::fs::read_dir("/boot").map_err(|e| failed("/boot", e))?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("vmlinuz-"))
        .collect();
    names.sort();
    for n in names {
        let release = n.trim_start_matches("vmlinuz-").to_string();
        let modules = PathBuf::from("/lib/modules").join(&release);
        if modules.join("modules.dep").is_file() {
            best = Some((PathBuf::from("/boot").join(&n), modules, release));
        }
    }
    best.ok_or_else(|| {
        LabError::Missing("no /boot/vmlinuz-* with its modules (install linux-image-amd64)".into())
    })
}

/// The uncompressed kernel inside a bzImage: the xz stream after the setup code,
/// decompressed by `xz` (trailing bytes after the stream are ignored with `--single-stream`).
fn extract_payload(vmlinuz: &Path, out: &Path) -> Result<(), LabError> {
    let image = std::fs::read(vmlinuz).map_err(|e| failed("reading the kernel", e))?;
    const XZ_MAGIC: &[u8] = b"\xfd7zXZ\x00";
    let at = image
        .windows(XZ_MAGIC.len())
        .position(|w| w == XZ_MAGIC)
        .ok_or_else(|| LabError::Missing(format!("{} is not xz-compressed", vmlinuz.display())))?;
    let mut child = Command::new("xz")
        .args(["-dc", "--single-stream"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| LabError::Missing(format!("xz: {e}")))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let payload = image[at..].to_vec();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(&payload);
    });
    let mut elf = Vec::new();
    child
        .stdout
        .take()
        .expect("piped stdout")
        .read_to_end(&mut elf)
        .map_err(|e| failed("xz", e))?;
    let _ = writer.join();
    let _ = child.wait();
    if !elf.starts_with(b"\x7fELF") {
        return Err(LabError::Failed(format!(
            "{}: the xz payload is not an ELF kernel",
            vmlinuz.display()
        )));
    }
    write_atomically(out, &elf)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), LabError> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| failed("writing the lab cache", e))?;
    std::fs::rename(&tmp, path).map_err(|e| failed("writing the lab cache", e))
}

/// The modules to load, dependencies first, from `modules.dep`.
fn module_closure(modules_dir: &Path, wanted: &[&str]) -> Result<Vec<String>, LabError> {
    let dep = std::fs::read_to_string(modules_dir.join("modules.dep"))
        .map_err(|e| failed("modules.dep", e))?;
    let deps: std::collections::HashMap<String, Vec<String>> = dep
        .lines()
        .filter_map(|l| {
            let (m, rest) = l.split_once(':')?;
            Some((
                m.to_string(),
                rest.split_whitespace().map(String::from).collect(),
            ))
        })
        .collect();
    let by_name = |name: &str| {
        deps.keys()
            .find(|k| {
                let file = k.rsplit('/').next().unwrap_or(k);
                file.strip_suffix(".ko") == Some(name)
            })
            .cloned()
    };
    let mut order: Vec<String> = Vec::new();
    // Depth-first, dependencies before dependents; modules.dep lists each module's full
    // closure, deepest last, so its list is loaded in reverse.
    fn visit(
        m: &str,
        deps: &std::collections::HashMap<String, Vec<String>>,
        order: &mut Vec<String>,
    ) {
        if order.iter().any(|o| o == m) {
            return;
        }
        for d in deps.get(m).into_iter().flatten().rev() {
            visit(d, deps, order);
        }
        order.push(m.to_string());
    }
    for w in wanted {
        match by_name(w) {
            Some(m) => visit(&m, &deps, &mut order),
            // Built into this kernel: nothing to load.
            None => continue,
        }
    }
    Ok(order)
}

/// The guest's /init. `lab.cmd=PATH` names the script (a host path, `%` and spaces
/// written `%25` and `%20`, read over 9p). The guest's /tmp is the host's (read-only, over
/// 9p) under a tmpfs layer: a checkout or `CARGO_TARGET_DIR` under the host's /tmp, where
/// the test binary and its inputs are, stays visible, and the guest can still write there.
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules/order); do insmod /modules/$m || echo "lab: insmod $m failed"; done
cmd=$(sed -n 's/.*lab\.cmd=\([^ ]*\).*/\1/p' /proc/cmdline | sed 's/%20/ /g; s/%25/%/g')
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose host /host || echo "lab: 9p mount failed"
cp "/host$cmd" /lab-cmd.sh
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
mount -t devtmpfs dev /host/dev
mount -t tmpfs ovl /ovl && mkdir /ovl/upper /ovl/work
mount -t overlay -o lowerdir=/host/tmp,upperdir=/ovl/upper,workdir=/ovl/work tmp /host/tmp || {
  echo "lab: no overlay on /tmp: the host's /tmp is hidden in the guest"
  mount -t tmpfs tmp /host/tmp
}
mount -t tmpfs run /host/run
cp /lab-cmd.sh /host/tmp/lab-cmd.sh
ip link set lo up
for i in /sys/class/net/*; do
  n=${i##*/}; [ "$n" = lo ] && continue
  ip addr add GUEST_ADDR/24 dev "$n"; ip link set "$n" up
done
stty -F /dev/ttyS1 raw -echo 2>/dev/null
# A heartbeat on its own port: a guest whose kernel hangs (a TCG vCPU starved in an IPI)
# stops beating, while a check that is merely quiet does not.
( while sleep HEARTBEAT_S; do echo . > /dev/ttyS2; done ) &
echo $! > /hostHEARTBEAT_PID
chroot /host /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp TMPDIR=/tmp \
  GUEST_ENV=1 /bin/sh /tmp/lab-cmd.sh > /dev/ttyS1 2>&1
echo "EXIT_MARK$?" > /dev/ttyS1
sync
poweroff -f
"#;

fn init_script() -> String {
    INIT.replace("GUEST_ADDR", GUEST_ADDR)
        .replace("GUEST_ENV", GUEST_ENV)
        .replace("EXIT_MARK", EXIT_MARK)
        .replace("HEARTBEAT_S", &HEARTBEAT.as_secs().to_string())
        .replace("HEARTBEAT_PID", HEARTBEAT_PID_PATH)
}

/// A newc cpio archive of `files` (path in the archive, mode, contents); directories are
/// entries with no contents.
fn cpio_newc(entries: &[(String, u32, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut push = |name: &str, mode: u32, data: &[u8], ino: usize| {
        let header = format!(
            "070701{ino:08X}{mode:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}",
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out.extend_from_slice(data);
        while out.len() % 4 != 0 {
            out.push(0);
        }
    };
    for (i, (name, mode, data)) in entries.iter().enumerate() {
        push(name, *mode, data, i + 1);
    }
    push("TRAILER!!!", 0, &[], 0);
    out
}

fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PLACER_LAB_CACHE") {
        return PathBuf::from(d);
    }
    // Integration tests run with the crate's dir as cwd; the workspace's target/ is the
    // first ancestor holding one (CARGO_TARGET_DIR wins when set).
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(t).join("placer-lab");
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    cwd.ancestors()
        .find(|a| a.join("target").is_dir() && a.join("Cargo.lock").is_file())
        .map(|a| a.join("target/placer-lab"))
        .unwrap_or_else(|| std::env::temp_dir().join("placer-lab-cache"))
}

/// FNV-1a over the inputs: a cache key, not a security boundary.
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.iter().chain(&[0xff]) {
            h ^= *b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

fn file_stamp(p: &Path) -> Vec<u8> {
    let m = std::fs::metadata(p).ok();
    let mtime = m
        .as_ref()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{}:{}:{mtime}", p.display(), m.map_or(0, |m| m.len())).into_bytes()
}

/// Removes the cache's earlier builds (names starting with `prefix`) before a new one.
fn remove_stale(dir: &Path, prefix: &str) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(prefix) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Builds (or finds in the cache) the kernel payload and the initramfs. Callers hold the
/// lab's lock ([`Guest::start`] does), so two builds never race.
pub fn images() -> Result<Images, LabError> {
    let (vmlinuz, modules_dir, release) = debian_kernel()?;
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| LabError::Missing("busybox not found (install busybox-static)".into()))?;
    // The *_diag modules serve sock_diag, which the kernel would load on demand with a
    // modprobe the initramfs does not have.
    let wanted = [
        "virtio_pci",
        "virtio_net",
        "9pnet_virtio",
        "9p",
        "tcp_diag",
        "udp_diag",
        "unix_diag",
        // The guest's /tmp: the host's under a tmpfs layer.
        "overlay",
    ];
    let modules = module_closure(&modules_dir, &wanted)?;
    let init = init_script();
    let key = fnv(&[
        &file_stamp(&vmlinuz),
        &file_stamp(&busybox),
        init.as_bytes(),
        modules.join(" ").as_bytes(),
    ]);
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).map_err(|e| failed("creating the lab cache", e))?;
    let kernel_key = fnv(&[&file_stamp(&vmlinuz)]);
    let kernel = dir.join(format!("vmlinux-{release}-{kernel_key:016x}"));
    let initrd = dir.join(format!("initrd-{key:016x}.cpio"));
    if !kernel.is_file() {
        remove_stale(&dir, "vmlinux-");
        extract_payload(&vmlinuz, &kernel)?;
    }
    if !initrd.is_file() {
        remove_stale(&dir, "initrd-");
        let bb = std::fs::read(&busybox).map_err(|e| failed("reading busybox", e))?;
        let mut entries: Vec<(String, u32, Vec<u8>)> =
            ["bin", "proc", "sys", "dev", "host", "modules", "ovl"]
                .iter()
                .map(|d| (d.to_string(), 0o040755, Vec::new()))
                .collect();
        entries.push(("bin/busybox".into(), 0o100755, bb));
        entries.push(("init".into(), 0o100755, init.into_bytes()));
        let mut order = String::new();
        for m in &modules {
            let file = m.rsplit('/').next().unwrap_or(m).to_string();
            let data = std::fs::read(modules_dir.join(m)).map_err(|e| failed(m, e))?;
            entries.push((format!("modules/{file}"), 0o100644, data));
            order.push_str(&file);
            order.push('\n');
        }
        entries.push(("modules/order".into(), 0o100644, order.into_bytes()));
        write_atomically(&initrd, &cpio_newc(&entries))?;
    }
    Ok(Images { kernel, initrd })
}

fn run_ip(args: &[&str]) -> Result<(), LabError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| LabError::Missing(format!("ip: {e}")))?;
    if !out.status.success() {
        return Err(LabError::Failed(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The lab's network namespace with the tap in it; deleted (with the tap) on drop.
struct Netns(String);

impl Netns {
    fn create() -> Result<Netns, LabError> {
        let name = format!("placer-lab-{}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        run_ip(&["netns", "add", &name])?;
        let ns = Netns(name);
        let n = ns.0.as_str();
        run_ip(&["-n", n, "link", "set", "lo", "up"])?;
        run_ip(&[
            "-n",
            n,
            "tuntap",
            "add",
            "dev",
            TAP,
            "mode",
            "tap",
            "multi_queue",
        ])?;
        run_ip(&[
            "-n",
            n,
            "addr",
            "add",
            &format!("{HOST_ADDR}/24"),
            "dev",
            TAP,
        ])?;
        run_ip(&["-n", n, "link", "set", TAP, "up"])?;
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.0])
            .stderr(Stdio::null())
            .status();
    }
}

/// The emulator's nice value. A TCG guest is CPU-bound and its kernel's timers stall when
/// the host starves it (RCU stalls, then a guest past its limit): beside `scripts/noise.sh`
/// (CPU hogs, streams and a fork loop) at nice 0, both lab guests ran out their 420 s,
/// where they take 5 minutes together on a quiet host. At -10 a guest outweighs ten
/// ordinary tasks (set where the tests run as root, which the lab needs anyway).
pub const EMULATOR_NICE: i32 = -10;

/// A guest being run; see [`run`] for the one-call form.
pub struct Guest {
    child: crate::proc::KillOnDrop,
    netns: Netns,
    dir: crate::TempDir,
    deadline: Instant,
    _lock: std::fs::File,
}

impl Guest {
    /// Boots `shape` and runs `script` (sh, in the guest's chroot of the host's root, as
    /// root, with [`GUEST_ENV`] set). The guest is killed `limit` after the boot starts.
    pub fn start(shape: Shape, script: &str, limit: Duration) -> Result<Guest, LabError> {
        if !crate::is_root() {
            return Err(LabError::Missing(
                "the lab needs root (tap, namespace)".into(),
            ));
        }
        let qemu = "qemu-system-x86_64";
        if let Some(m) = crate::missing_tool(&[qemu, "ip"]) {
            return Err(LabError::Missing(format!(
                "{m} (install qemu-system-x86, iproute2)"
            )));
        }
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK_PATH)
            .map_err(|e| failed(LOCK_PATH, e))?;
        lock.lock().map_err(|e| failed("locking the lab", e))?;
        let images = images()?;
        let dir = crate::TempDir::new("lab");
        let cmd = dir.path().join("cmd.sh");
        std::fs::write(&cmd, script).map_err(|e| failed("writing the guest's script", e))?;
        let netns = Netns::create()?;
        let mut q = Command::new("ip");
        q.args(["netns", "exec", &netns.0, qemu]);
        q.args(shape.qemu_args());
        q.args(["-kernel", &images.kernel.to_string_lossy()]);
        q.args(["-initrd", &images.initrd.to_string_lossy()]);
        q.args([
            "-append",
            &format!(
                "console=ttyS0 quiet panic=-1 lab.cmd={}",
                // One word on the kernel's command line, whatever the temporary dir.
                cmd.to_string_lossy()
                    .replace('%', "%25")
                    .replace(' ', "%20")
            ),
        ]);
        q.args([
            "-display",
            "none",
            "-no-reboot",
            "-nodefaults",
            "-monitor",
            "none",
        ]);
        q.args([
            "-serial",
            &format!("file:{}", dir.path().join("console.log").display()),
        ]);
        q.args([
            "-serial",
            &format!("file:{}", dir.path().join("output.log").display()),
        ]);
        q.args([
            "-serial",
            &format!("file:{}", dir.path().join(HEARTBEAT_FILE).display()),
        ]);
        q.args([
            "-virtfs",
            "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap",
        ]);
        q.args([
            "-netdev",
            &format!(
                "tap,id=n0,ifname={TAP},script=no,downscript=no,queues={NIC_QUEUES},vhost=off"
            ),
            "-device",
            &format!(
                "virtio-net-pci,netdev=n0,mq=on,vectors={}",
                2 * NIC_QUEUES + 2
            ),
        ]);
        q.stdin(Stdio::null()).stdout(Stdio::null()).stderr(
            std::fs::File::create(dir.path().join("qemu.log")).map_or(Stdio::null(), Stdio::from),
        );
        crate::proc::die_with_parent(&mut q);
        if crate::is_root() {
            crate::proc::with_nice(&mut q, EMULATOR_NICE);
        }
        let child = q.spawn().map_err(|e| failed("starting qemu", e))?;
        Ok(Guest {
            child: crate::proc::KillOnDrop(child),
            netns,
            dir,
            deadline: Instant::now() + limit,
            _lock: lock,
        })
    }

    /// The lab's network namespace, for `ip netns exec NAME ...` senders.
    pub fn netns(&self) -> &str {
        &self.netns.0
    }

    /// The command's output so far.
    pub fn output_so_far(&self) -> String {
        read_lossy(&self.dir.path().join("output.log"))
    }

    /// Waits until the guest's command has said something or the guest has ended (true),
    /// or `limit` has passed (false): a boot that hung. Under TCG, a vCPU thread starved on
    /// two busy host cores can stall the guest kernel's stop_machine for minutes (seen in
    /// CI: "soft lockup ... migration/N" from the first seconds, nothing run).
    pub fn started_within(&mut self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if !self.output_so_far().is_empty() || matches!(self.child.0.try_wait(), Ok(Some(_))) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }

    /// Waits until the guest powers off or the time limit passes (then kills it). With a
    /// `watch`, a guest seen hung by it is killed too ([`Output::hung`] says how).
    pub fn wait(mut self, watch: Option<Watch>) -> Output {
        let mut timed_out = false;
        let mut hung = None;
        let mut beats = Silence::of(self.dir.path().join(HEARTBEAT_FILE));
        let mut said = Silence::of(self.dir.path().join("output.log"));
        loop {
            if let Ok(Some(_)) = self.child.0.try_wait() {
                break;
            }
            let now = Instant::now();
            if let Some(w) = watch {
                if beats.for_at_least(now, w.heartbeat_silence) {
                    hung = Some(Hang::Heartbeat);
                } else if said.for_at_least(now, w.output_silence) {
                    let console = read_lossy(&self.dir.path().join("console.log"));
                    hung = Some(if console_shows_stalls(&console) {
                        Hang::StalledKernel
                    } else {
                        Hang::Command
                    });
                }
            }
            timed_out = now >= self.deadline;
            if hung.is_some() || timed_out {
                let _ = self.child.0.kill();
                let _ = self.child.0.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let raw = read_lossy(&self.dir.path().join("output.log")).replace('\r', "");
        let mut status = None;
        let mut output = String::new();
        for line in raw.lines() {
            match line.strip_prefix(EXIT_MARK) {
                Some(s) => status = s.trim().parse().ok(),
                None => {
                    output.push_str(line);
                    output.push('\n');
                }
            }
        }
        let mut console = read_lossy(&self.dir.path().join("console.log")).replace('\r', "");
        let qemu_log = read_lossy(&self.dir.path().join("qemu.log"));
        if !qemu_log.trim().is_empty() {
            console.push_str("\n[qemu] ");
            console.push_str(&qemu_log);
        }
        Output {
            status,
            output,
            console,
            timed_out,
            hung,
        }
    }
}

/// How long a growing file has not grown (once it has begun).
struct Silence {
    path: PathBuf,
    len: u64,
    since: Instant,
}

impl Silence {
    fn of(path: PathBuf) -> Silence {
        Silence {
            path,
            len: 0,
            since: Instant::now(),
        }
    }

    /// Whether the file, once begun, has not grown for `limit` by `now`.
    fn for_at_least(&mut self, now: Instant, limit: Duration) -> bool {
        let len = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        if len != self.len {
            (self.len, self.since) = (len, now);
        }
        self.len > 0 && now.duration_since(self.since) >= limit
    }
}

fn read_lossy(p: &Path) -> String {
    std::fs::read(p)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Boots `shape`, runs `script` in it and returns what it said, killing the guest at
/// `limit`. See [`Guest::start`].
pub fn run(shape: Shape, script: &str, limit: Duration) -> Result<Output, LabError> {
    Ok(Guest::start(shape, script, limit)?.wait(None))
}

/// Shell-quotes one word for a guest script.
pub fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_have_their_names_and_sizes() {
        for s in Shape::ALL {
            assert_eq!(Shape::parse(s.name()), Some(s));
        }
        assert_eq!(Shape::S2C2T2N.cpus(), 8);
        assert_eq!(Shape::S2D2C2T4N.cpus(), 16);
        assert_eq!(Shape::S2D2C2T4N.distance(0, 1), 15);
        assert_eq!(Shape::S2D2C2T4N.distance(1, 2), 21);
        assert_eq!(Shape::S2C2T2N.distance(0, 1), 21);
        let a = Shape::S2D2C2T4N.qemu_args().join(" ");
        assert!(
            a.contains("-smp 16,sockets=2,dies=2,cores=2,threads=2"),
            "{a}"
        );
        assert!(a.contains("node,nodeid=3,cpus=12-15,memdev=m3"), "{a}");
    }

    #[test]
    fn silence_counts_from_the_last_growth_once_begun() {
        let dir = crate::TempDir::new("lab-silence");
        let f = dir.path().join("beats");
        let t0 = Instant::now();
        let s10 = Duration::from_secs(10);
        let mut s = Silence::of(f.clone());
        assert!(
            !s.for_at_least(t0 + s10 * 100, s10),
            "not begun: never silent"
        );
        std::fs::write(&f, ".").unwrap();
        assert!(!s.for_at_least(t0, s10));
        assert!(!s.for_at_least(t0 + s10 / 2, s10));
        assert!(s.for_at_least(t0 + s10, s10));
        std::fs::write(&f, "..").unwrap();
        assert!(
            !s.for_at_least(t0 + s10 * 2, s10),
            "grew: silence starts again"
        );
        assert!(s.for_at_least(t0 + s10 * 3, s10));
    }

    #[test]
    fn stalls_are_told_from_a_quiet_console() {
        assert!(console_shows_stalls(
            "[ 95.7] rcu: rcu_preempt kthread timer wakeup didn't happen for 5246 jiffies!"
        ));
        assert!(console_shows_stalls(
            "watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [migration/3:27]"
        ));
        assert!(!console_shows_stalls(
            "[ 0.1] smpboot: Total of 16 processors activated\n[ 2.0] virtio_net virtio0 eth0"
        ));
        assert!(Hang::Heartbeat.is_the_emulators() && !Hang::Command.is_the_emulators());
    }

    #[test]
    fn modules_load_after_their_dependencies() {
        let dir = crate::TempDir::new("lab-modules");
        std::fs::write(
            dir.path().join("modules.dep"),
            "k/virtio_net.ko: k/net_failover.ko k/failover.ko k/virtio.ko k/virtio_ring.ko\n\
             k/virtio.ko: k/virtio_ring.ko\nk/virtio_ring.ko:\nk/failover.ko:\n\
             k/net_failover.ko: k/failover.ko\n",
        )
        .unwrap();
        let order = module_closure(dir.path(), &["virtio_net", "not_a_module"]).unwrap();
        let pos = |m: &str| order.iter().position(|o| o == m).unwrap();
        assert_eq!(order.len(), 5, "{order:?}");
        assert!(pos("k/virtio_ring.ko") < pos("k/virtio.ko"));
        assert!(pos("k/failover.ko") < pos("k/net_failover.ko"));
        assert_eq!(pos("k/virtio_net.ko"), 4);
    }

    #[test]
    fn cpio_entries_are_aligned_and_trailed() {
        let a = cpio_newc(&[("init".into(), 0o100755, b"abc".to_vec())]);
        assert!(a.starts_with(b"070701"));
        assert_eq!(a.len() % 4, 0);
        let s = String::from_utf8_lossy(&a);
        assert!(s.contains("init\0") && s.contains("abc") && s.contains("TRAILER!!!"));
    }
}
