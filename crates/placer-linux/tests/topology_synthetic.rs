//! The topology reader on small trees written by the test: every feature on a known
//! answer (NIC queues and IRQs, RPS, cgroup v1/v2 cpusets, cpufreq, capacities), and
//! malformed input (truncated list, garbage mask, missing node directory, distance row of
//! the wrong length, ...) giving an error that names the file, never a panic.

use placer_core::topology::{CacheKind, CoreType};
use placer_core::CpuSet;
use placer_linux::topology::read;
use placer_testkit::FakeRoot;
use std::path::Path;

/// A fake root with the helpers these tests chain.
struct Root(FakeRoot);

impl Root {
    fn new() -> Root {
        Root(FakeRoot::new("topo-syn"))
    }
    fn write(&self, rel: &str, text: &str) -> &Self {
        self.0.write(rel, text);
        self
    }
    fn remove(&self, rel: &str) {
        self.0.remove(rel);
    }
    fn symlink(&self, rel: &str, target: &str) {
        self.0.symlink(rel, target);
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
}

const C: &str = "sys/devices/system/cpu";

/// 2 nodes x 1 package x 2 cores x 2 threads = 8 CPUs (0-3 node 0, 4-7 node 1; SMT
/// siblings n, n+2 inside each half... kept simple: {0,1},{2,3},{4,5},{6,7}), L1d per
/// core, L3 per node, CPU 7 offline, a virtio NIC and a veth.
fn machine() -> Root {
    let r = Root::new();
    r.write(&format!("{C}/present"), "0-7\n")
        .write(&format!("{C}/online"), "0-6\n");
    for cpu in 0..8u32 {
        let t = format!("{C}/cpu{cpu}/topology");
        if cpu == 7 {
            r.write(&format!("{C}/cpu7/online"), "0\n");
            continue;
        }
        let core = cpu / 2;
        let sib = format!("{}-{}", core * 2, (core * 2 + 1).min(6));
        r.write(
            &format!("{t}/physical_package_id"),
            &format!("{}\n", cpu / 4),
        )
        .write(&format!("{t}/core_id"), &format!("{}\n", core % 2))
        .write(&format!("{t}/die_id"), "0\n")
        .write(&format!("{t}/thread_siblings_list"), &format!("{sib}\n"))
        .write(
            &format!("{t}/core_siblings_list"),
            if cpu < 4 { "0-3\n" } else { "4-6\n" },
        )
        .write(
            &format!("{C}/cpu{cpu}/cpu_capacity"),
            if cpu < 4 { "1024\n" } else { "400\n" },
        );
        let c = format!("{C}/cpu{cpu}/cache");
        r.write(&format!("{c}/index0/level"), "1\n")
            .write(&format!("{c}/index0/type"), "Data\n")
            .write(&format!("{c}/index0/size"), "32K\n")
            .write(&format!("{c}/index0/shared_cpu_list"), &format!("{sib}\n"))
            .write(&format!("{c}/index1/level"), "3\n")
            .write(&format!("{c}/index1/type"), "Unified\n")
            .write(&format!("{c}/index1/size"), "8192K\n")
            .write(
                &format!("{c}/index1/shared_cpu_map"),
                if cpu < 4 { "0f\n" } else { "1f0\n" },
            );
    }
    let n = "sys/devices/system/node";
    r.write(&format!("{n}/online"), "0-1\n")
        .write(&format!("{n}/possible"), "0-1\n")
        .write(&format!("{n}/node0/cpulist"), "0-3\n")
        .write(&format!("{n}/node0/distance"), "10 21\n")
        .write(
            &format!("{n}/node0/meminfo"),
            "Node 0 MemTotal:       1048576 kB\nNode 0 MemFree: 1 kB\n",
        )
        .write(&format!("{n}/node1/cpumap"), "00000070\n")
        .write(&format!("{n}/node1/distance"), "21 10\n");
    let p = format!("{C}/cpufreq/policy0");
    r.write(&format!("{p}/related_cpus"), "0 1 2 3\n")
        .write(&format!("{p}/cpuinfo_min_freq"), "400000\n")
        .write(&format!("{p}/cpuinfo_max_freq"), "2000000\n")
        .write(
            &format!("{p}/scaling_available_frequencies"),
            "400000 1000000 2000000 \n",
        )
        .write(&format!("{p}/scaling_governor"), "schedutil\n")
        .write(
            &format!("{p}/scaling_available_governors"),
            "performance schedutil\n",
        )
        .write(&format!("{p}/scaling_max_freq"), "1000000\n");
    // virtio NIC: IRQs on the parent PCI device, names in /proc/interrupts.
    let pci = "sys/devices/pci0000:00/0000:00:03.0";
    r.write(&format!("{pci}/numa_node"), "1\n")
        .write(&format!("{pci}/msi_irqs/37"), "msix\n")
        .write(&format!("{pci}/msi_irqs/38"), "msix\n")
        .write(&format!("{pci}/msi_irqs/39"), "msix\n")
        .write(&format!("{pci}/msi_irqs/40"), "msix\n")
        .write(
            &format!("{pci}/virtio2/net/eth0/queues/rx-0/rps_cpus"),
            "00\n",
        )
        .write(
            &format!("{pci}/virtio2/net/eth0/queues/rx-1/rps_cpus"),
            "0c\n",
        );
    r.symlink(
        "sys/class/net/eth0",
        &format!("../../../{pci}/virtio2/net/eth0"),
    );
    r.symlink(
        &format!("{pci}/virtio2/net/eth0/device"),
        "../../../virtio2",
    );
    r.write(
        "proc/interrupts",
        "           CPU0       CPU1\n\
          37:          0          0 PCI-MSIX-0000:00:03.0   0-edge      virtio2-config\n\
          38:          0       1658 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\n\
          39:       1237          0 PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0\n\
          40:          5          0 PCI-MSIX-0000:00:03.0   3-edge      virtio2-input.1\n\
         LOC:      41055      43335   Local timer interrupts\n",
    )
    .write("proc/irq/38/smp_affinity_list", "1\n")
    .write("proc/irq/40/smp_affinity", "01\n");
    // veth: no device, no IRQ; RPS on CPU 5.
    r.write("sys/devices/virtual/net/veth0/queues/rx-0/rps_cpus", "20\n");
    r.symlink("sys/class/net/veth0", "../../devices/virtual/net/veth0");
    r.write(
        "proc/net/if_inet6",
        "fd000000000000000000000000000002 04 40 00 82     eth0\n",
    );
    r
}

#[test]
fn reads_every_feature() {
    let r = machine();
    let t = read(r.path()).unwrap();
    t.validate().unwrap();
    let s = |l: &str| CpuSet::parse_list(l).unwrap();
    assert_eq!(t.present(), s("0-7"));
    assert_eq!(t.online(), s("0-6"));
    assert_eq!(t.allowed(), s("0-6"), "no cpuset files: no restriction");
    let c7 = t.cpu(7).unwrap();
    assert!(!c7.online && c7.package.is_none() && c7.core.is_none());
    assert_eq!(
        t.cores(),
        vec![s("0-1"), s("2-3"), s("4-5"), s("6")],
        "cores from sibling lists"
    );
    assert_eq!(t.cpu(5).unwrap().core, Some(2));
    assert_eq!(t.cpu(5).unwrap().core_id, Some(0));
    assert_eq!(t.cpu(5).unwrap().package, Some(1));
    assert_eq!(t.cpu(5).unwrap().node, Some(1));
    assert_eq!(t.siblings(2), s("2-3"));
    // caches: L1d per core, L3 per package (mask form), deduplicated.
    let l1: Vec<_> = t.caches.iter().filter(|c| c.level == 1).collect();
    assert_eq!(l1.len(), 4);
    assert!(l1
        .iter()
        .all(|c| c.kind == CacheKind::Data && c.size_bytes == Some(32768)));
    let l3: Vec<_> = t
        .caches
        .iter()
        .filter(|c| c.level == 3)
        .map(|c| c.cpus.clone())
        .collect();
    assert_eq!(
        l3,
        vec![s("0-3"), s("4-7")],
        "L3 map restricted to present CPUs"
    );
    // nodes
    assert_eq!(t.nodes.len(), 2);
    assert_eq!(t.node(0).unwrap().memory_bytes, Some(1 << 30));
    assert_eq!(t.node(1).unwrap().cpus, s("4-6"));
    assert_eq!(t.node(1).unwrap().distances[&0], 21);
    // capacities: 1024 vs 400 -> big / little
    assert_eq!(t.cpu(0).unwrap().core_type, Some(CoreType::Big));
    assert_eq!(t.cpu(4).unwrap().core_type, Some(CoreType::Little));
    // cpufreq
    let f = &t.freq_domains[0];
    assert_eq!(f.cpus, s("0-3"));
    assert_eq!((f.min_khz, f.max_khz), (Some(400_000), Some(2_000_000)));
    assert_eq!(f.available_khz, vec![400_000, 1_000_000, 2_000_000]);
    assert_eq!(f.governor.as_deref(), Some("schedutil"));
    assert_eq!(f.scaling_max_khz, Some(1_000_000));
    assert_eq!(f.available_governors.len(), 2);
    assert_eq!(t.cpu(2).unwrap().max_khz, Some(2_000_000));
    assert_eq!(t.cpu(5).unwrap().max_khz, None);
    // NIC: node from the PCI parent, receive IRQs 38 and 40 matched to rx-0/rx-1,
    // config/output vectors dropped, RPS of rx-1 added.
    let eth = t.nic("eth0").unwrap();
    assert_eq!(eth.node, Some(1));
    let q: Vec<_> = eth
        .queues
        .iter()
        .map(|q| (q.name.as_str(), q.irq))
        .collect();
    assert_eq!(
        q,
        vec![("virtio2-input.0", Some(38)), ("virtio2-input.1", Some(40))]
    );
    assert_eq!(eth.queues[0].irq_cpus, s("1"));
    assert_eq!(eth.queues[1].irq_cpus, s("0"), "smp_affinity mask fallback");
    assert_eq!(eth.queues[1].rps_cpus, s("2-3"));
    assert_eq!(eth.rx_cpus, s("0-3"));
    assert_eq!(
        eth.addrs,
        vec!["fd00::2".parse::<std::net::IpAddr>().unwrap()]
    );
    let veth = t.nic("veth0").unwrap();
    assert_eq!(veth.node, None);
    assert_eq!(veth.rx_cpus, s("5"), "veth receive = its RPS CPUs");
    assert!(veth.queues.iter().all(|q| q.irq.is_none()));
}

#[test]
fn cgroup_v1_cpuset_and_status() {
    let r = machine();
    r.write("proc/self/cgroup", "5:memory:/x\n3:cpuset:/job\n0::/\n")
        .write(
            "proc/self/mountinfo",
            "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n",
        )
        .write("sys/fs/cgroup/cpuset/job/cpuset.cpus", "1-5\n")
        .write("proc/self/status", "Name:\tx\nCpus_allowed_list:\t0-4\n");
    let t = read(r.path()).unwrap();
    assert_eq!(t.allowed(), CpuSet::parse_list("1-4").unwrap());
}

#[test]
fn cgroup_v2_walks_up_and_old_cpuset_fs() {
    let r = machine();
    r.write("proc/self/cgroup", "0::/a/b\n")
        .write(
            "proc/self/mountinfo",
            "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        )
        .write("sys/fs/cgroup/a/cpuset.cpus.effective", "2-3\n");
    let t = read(r.path()).unwrap();
    assert_eq!(t.allowed(), CpuSet::parse_list("2-3").unwrap());

    let r = machine();
    r.write("proc/self/cpuset", "/dummy\n")
        .write("proc/mounts", "none /dev/cpuset cpuset rw 0 0\n")
        .write("dev/cpuset/dummy/cpus", "0,6\n");
    let t = read(r.path()).unwrap();
    assert_eq!(t.allowed(), CpuSet::parse_list("0,6").unwrap());
}

#[test]
fn masks_only_and_cpuinfo_fallback() {
    // Old kernels: masks only; no topology dir at all: cpuinfo.
    let r = Root::new();
    r.write(&format!("{C}/cpu0/topology/thread_siblings"), "3\n")
        .write(&format!("{C}/cpu1/topology/thread_siblings"), "3\n")
        .write(&format!("{C}/cpu0/topology/physical_package_id"), "0\n")
        .write(&format!("{C}/cpu1/topology/physical_package_id"), "0\n");
    let t = read(r.path()).unwrap();
    assert_eq!(t.cores(), vec![CpuSet::parse_list("0-1").unwrap()]);

    let r = Root::new();
    r.write(&format!("{C}/cpu0/uevent"), "")
        .write(&format!("{C}/cpu1/uevent"), "")
        .write(&format!("{C}/cpu2/uevent"), "")
        .write(
            "proc/cpuinfo",
            "processor\t: 0\nphysical id\t: 0\ncore id\t: 0\n\nprocessor\t: 1\nphysical id\t: 0\ncore id\t: 0\n\nprocessor\t: 2\nphysical id\t: 1\ncore id\t: 0\n",
        );
    let t = read(r.path()).unwrap();
    assert_eq!(t.cpu(2).unwrap().package, Some(1));
    assert_eq!(
        t.cores(),
        vec![CpuSet::parse_list("0-1").unwrap(), CpuSet::single(2)]
    );
    assert_eq!(t.siblings(1), CpuSet::parse_list("0-1").unwrap());
}

#[test]
fn node_cpus_from_links_when_no_cpumap() {
    let r = machine();
    r.remove("sys/devices/system/node/node1/cpumap");
    for c in [4, 5, 6] {
        r.write(
            &format!("sys/devices/system/node/node1/cpu{c}/online"),
            "1\n",
        );
    }
    let t = read(r.path()).unwrap();
    assert_eq!(t.node(1).unwrap().cpus, CpuSet::parse_list("4-6").unwrap());
    assert_eq!(t.cpu(6).unwrap().node, Some(1));
}

#[test]
fn empty_root_is_unknown_not_error() {
    let r = Root::new();
    let t = read(r.path()).unwrap();
    assert!(t.cpus.is_empty() && t.nodes.is_empty() && t.nics.is_empty());
}

#[test]
fn malformed_inputs_name_the_file() {
    // (file written, its broken content, the name the error must carry)
    let cases: &[(&str, &str, &str)] = &[
        ("cpu/online", "0-\n", "cpu/online"),
        ("cpu/present", "0-3,,5\n", "cpu/present"),
        (
            "cpu/cpu0/topology/thread_siblings",
            "zz,03\n",
            "cpu0/topology/thread_siblings",
        ),
        ("node/node1/cpumap", "00,7g\n", "node1/cpumap"),
        (
            "cpu/cpu2/topology/physical_package_id",
            "one\n",
            "physical_package_id",
        ),
        ("node/node0/distance", "10 21 30\n", "node0/distance"),
        ("node/node1/distance", "21 x\n", "node1/distance"),
        ("node/node0/cpulist", "3-1\n", "node0/cpulist"),
        (
            "node/node0/meminfo",
            "Node 0 MemTotal: many kB\n",
            "node0/meminfo",
        ),
        (
            "cpu/cpu2/cache/index0/size",
            "lots\n",
            "cpu2/cache/index0/size",
        ),
        (
            "cpu/cpu4/cache/index1/shared_cpu_map",
            "f0,,\n",
            "index1/shared_cpu_map",
        ),
        (
            "cpu/cpu0/cache/index0/level",
            "\u{1}\n",
            "cpu0/cache/index0/level",
        ),
        (
            "cpu/cpufreq/policy0/cpuinfo_max_freq",
            "fast\n",
            "policy0/cpuinfo_max_freq",
        ),
        ("cpu/cpu0/cpu_capacity", "-3\n", "cpu0/cpu_capacity"),
        ("/proc/irq/38/smp_affinity", "g\n", "irq/38/smp_affinity"),
        ("/proc/self/cgroup", "garbage\n", "proc/self/cgroup"),
        ("/proc/net/if_inet6", "xyz 1 2\n", "if_inet6"),
    ];
    for (file, text, named) in cases {
        let r = machine();
        let path = match file.strip_prefix('/') {
            Some(p) => p.to_string(),
            None => format!("sys/devices/system/{file}"),
        };
        r.write(&path, text);
        if path.ends_with("smp_affinity") {
            r.remove("proc/irq/38/smp_affinity_list"); // so the mask is read
        }
        let err = read(r.path()).expect_err(&format!("no error for broken {file}"));
        let msg = err.to_string();
        assert!(msg.contains(named), "error {msg:?} does not name {named}");
    }
    // A node listed online whose directory is missing.
    let r = machine();
    r.remove("sys/devices/system/node/node1");
    let msg = read(r.path()).unwrap_err().to_string();
    assert!(msg.contains("node/node1"), "{msg}");
}

/// Issue 17, as hwloc: nodes outside the cpuset's mems are marked not allowed.
#[test]
fn nodes_outside_the_cpuset_mems_are_not_allowed() {
    let r = machine();
    r.write("proc/self/status", "Name:\tx\nMems_allowed_list:\t1\n");
    let t = read(r.path()).unwrap();
    assert!(t.nodes.len() >= 2);
    assert!(!t.node(0).unwrap().allowed);
    assert!(t.node(1).unwrap().allowed);
}

/// Issue 17, as hwloc: a kernel without /sys/devices/system/node has one node holding every
/// CPU and all memory.
#[test]
fn no_node_directory_means_one_node_with_everything() {
    let r = machine();
    std::fs::remove_dir_all(r.path().join("sys/devices/system/node")).unwrap();
    r.write("proc/meminfo", "MemTotal:       2048 kB\nMemFree: 1 kB\n");
    let t = read(r.path()).unwrap();
    assert_eq!(t.nodes.len(), 1);
    let n = &t.nodes[0];
    assert_eq!(n.cpus, t.present());
    assert_eq!(n.memory_bytes, Some(2048 * 1024));
    assert!(t.cpus.iter().all(|c| c.node == Some(0)));
}

/// Issue 37: the daemon's reader reads the machine part (CPUs, caches, nodes) again only
/// on hotplug or every FULL_READ_EVERY reads, and what moves without hotplug at each
/// read; every read equals a fresh one where the key covers the change.
#[test]
fn a_reader_reads_the_machine_again_on_hotplug_and_the_rest_each_time() {
    use placer_linux::topology::{Reader, FULL_READ_EVERY};
    let r = machine();
    let mut reader = Reader::new(r.path());
    let fresh = |r: &Root| read(r.path()).unwrap();
    assert_eq!(reader.read().unwrap(), fresh(&r));
    assert_eq!(reader.read().unwrap(), fresh(&r));
    assert_eq!(reader.machine_reads(), 1, "the machine part was read again");
    // An IRQ's affinity, RPS, the cpuset's CPUs and mems, a governor: seen at once.
    r.write("proc/irq/38/smp_affinity_list", "0\n")
        .write(
            &format!("{C}/cpufreq/policy0/scaling_governor"),
            "performance\n",
        )
        .write(
            "proc/self/status",
            "Name:\tx\nCpus_allowed_list:\t0-2\nMems_allowed_list:\t1\n",
        )
        .write(
            "sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0/queues/rx-0/rps_cpus",
            "30\n",
        );
    let t = reader.read().unwrap();
    assert_eq!(t, fresh(&r));
    assert_eq!(t.allowed(), CpuSet::parse_list("0-2").unwrap());
    assert!(!t.node(0).unwrap().allowed);
    let eth0 = t.nics.iter().find(|n| n.name == "eth0").unwrap();
    assert!(eth0
        .queues
        .iter()
        .any(|q| q.irq == Some(38) && q.irq_cpus == CpuSet::parse_list("0").unwrap()));
    assert!(eth0
        .queues
        .iter()
        .any(|q| q.rps_cpus == CpuSet::parse_list("4-5").unwrap()));
    assert_eq!(reader.machine_reads(), 1);
    // Hotplug: CPU 6 goes offline.
    r.write(&format!("{C}/online"), "0-5\n");
    let t = reader.read().unwrap();
    assert_eq!(t, fresh(&r));
    assert!(!t.cpu(6).unwrap().online);
    assert_eq!(reader.machine_reads(), 2);
    // A cache's size, which no key covers, shows at the next full read and not before.
    for cpu in 0..7 {
        r.write(&format!("{C}/cpu{cpu}/cache/index0/size"), "48K\n");
    }
    let l1_bytes = |t: &placer_core::Topology| {
        t.caches
            .iter()
            .find(|c| c.level == 1)
            .and_then(|c| c.size_bytes)
    };
    let reads_since_full = 1; // the hotplug read was a full one
    for _ in reads_since_full..FULL_READ_EVERY {
        assert_eq!(l1_bytes(&reader.read().unwrap()), Some(32 * 1024));
    }
    let t = reader.read().unwrap();
    assert_eq!(l1_bytes(&t), Some(48 * 1024));
    assert_eq!(t, fresh(&r));
    assert_eq!(reader.machine_reads(), 3);
}

/// Issue 37: the NICs are read in full only when the link watch (here: the test) says
/// they changed, or at a full read; each queue's IRQ and RPS CPUs at every read.
#[test]
fn a_reader_reads_the_nics_again_only_on_a_link_change() {
    use placer_linux::topology::{Reader, FULL_READ_EVERY};
    let r = machine();
    let mut reader = Reader::told_of_link_changes(r.path());
    let fresh = |r: &Root| read(r.path()).unwrap();
    assert_eq!(reader.read().unwrap(), fresh(&r));
    // IRQ affinity and RPS move: seen without reading the NICs in full.
    r.write("proc/irq/38/smp_affinity_list", "0\n").write(
        "sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0/queues/rx-1/rps_cpus",
        "30\n",
    );
    let t = reader.read().unwrap();
    assert_eq!(t, fresh(&r));
    let eth0 = t.nics.iter().find(|n| n.name == "eth0").unwrap();
    assert_eq!(eth0.rx_cpus, CpuSet::parse_list("0,4-5").unwrap());
    assert_eq!(reader.nic_reads(), 1);
    // A new interface: not there until the watch says so.
    let has_veth1 = |t: &placer_core::Topology| t.nics.iter().any(|n| n.name == "veth1");
    r.write("sys/devices/virtual/net/veth1/queues/rx-0/rps_cpus", "00\n");
    r.symlink("sys/class/net/veth1", "../../devices/virtual/net/veth1");
    assert!(!has_veth1(&reader.read().unwrap()));
    reader.links_changed();
    let t = reader.read().unwrap();
    assert!(has_veth1(&t));
    assert_eq!(t, fresh(&r));
    assert_eq!(reader.nic_reads(), 2);
    // A full read reads them too, untold.
    r.write("sys/devices/virtual/net/veth2/queues/rx-0/rps_cpus", "00\n");
    r.symlink("sys/class/net/veth2", "../../devices/virtual/net/veth2");
    let mut reads = 0;
    while !reader
        .read()
        .unwrap()
        .nics
        .iter()
        .any(|n| n.name == "veth2")
    {
        reads += 1;
        assert!(reads < FULL_READ_EVERY, "never read in full");
    }
    assert_eq!(reader.nic_reads(), 3);
}

#[test]
fn an_x86_cluster_id_of_65535_is_unknown() {
    // x86 kernels that know no cluster write 65535 (their BAD_APICID) in cluster_id; the
    // JSON contract (docs/topology.md) says unknown is null.
    let r = Root::new();
    for cpu in 0..2 {
        r.write(&format!("{C}/cpu{cpu}/topology/thread_siblings"), "3\n")
            .write(&format!("{C}/cpu{cpu}/topology/physical_package_id"), "0\n")
            .write(&format!("{C}/cpu{cpu}/topology/cluster_id"), "65535\n");
    }
    let t = read(r.path()).unwrap();
    assert!(t.cpus.iter().all(|c| c.cluster.is_none()), "{:?}", t.cpus);
    let r = Root::new();
    r.write(&format!("{C}/cpu0/topology/physical_package_id"), "0\n")
        .write(&format!("{C}/cpu0/topology/cluster_id"), "8\n");
    assert_eq!(read(r.path()).unwrap().cpus[0].cluster, Some(8));
}

/// Issue 48: a `tuned` run by nobody (a copy of `sleep` under that name, a real process
/// shown in a fake root beside its fake cpufreq tree) is no agent: the host's topology
/// names none, and energy-qos plans its frequency caps; were it taken for tuned (as a
/// match on its name alone did), energy-qos would plan none.
#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn energy_qos_plans_its_caps_beside_a_tuned_run_by_nobody() {
    use placer_core::coexist::{Agent, AgentKind};
    use placer_core::host::Host;
    use placer_core::observation::{Observation, ProcObs};
    use placer_core::plan::Action;
    use placer_core::policies::energy_qos::{EnergyQos, EnergyQosConfig, QosApp};
    use placer_core::policy::{Policy, PolicyState};
    use std::os::unix::process::CommandExt;
    placer_testkit::require_root();
    let r = machine();
    let bin = placer_testkit::TempDir::new("fake-tuned");
    let fake = bin.path().join("tuned");
    std::fs::copy("/bin/sleep", &fake).expect("copy sleep");
    std::fs::set_permissions(
        bin.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let kid = placer_testkit::proc::KillOnDrop(
        std::process::Command::new(&fake)
            .arg("30")
            .uid(65534)
            .gid(65534)
            .spawn()
            .expect("fake tuned"),
    );
    let pid = kid.0.id();
    // Its comm is set at exec: wait for it (bounded).
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).map_or(true, |c| c.trim() != "tuned")
    {
        assert!(t0.elapsed() < std::time::Duration::from_secs(5), "no exec");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    r.symlink(&format!("proc/{pid}"), &format!("/proc/{pid}"));
    let state = placer_testkit::TempDir::new("fake-tuned-state");
    let mut host = placer_linux::host::LinuxHost::new(r.path(), state.path());
    let topo = host.topology().expect("topology");
    assert!(topo.coexistence.agents.is_empty(), "{:?}", topo.coexistence);
    assert!(
        !topo.freq_domains.is_empty(),
        "the fake cpufreq tree is read"
    );
    let app = QosApp {
        name: "parsec".into(),
        matches: placer_core::config::AppMatch {
            comm: Some("blackscholes".into()),
            ..Default::default()
        },
        target_perf_share: Some(0.5),
        ..Default::default()
    };
    let policy = EnergyQos::new(EnergyQosConfig {
        apps: vec![app],
        ..Default::default()
    });
    let obs = Observation {
        procs: vec![std::sync::Arc::new(ProcObs {
            state: 'R',
            uid: Some(1000),
            cpu_share: 1.0,
            last_cpu: Some(0),
            ..ProcObs::bare(4242, 100, "blackscholes", CpuSet::first_n(4))
        })],
        ..Default::default()
    };
    let caps = |t: &placer_core::Topology| {
        let plan = policy.plan(t, &obs, &mut PolicyState::default());
        plan.actions
            .iter()
            .filter(|a| matches!(a.action, Action::CapFrequency { .. }))
            .count()
    };
    assert!(
        caps(&topo) > 0,
        "energy-qos plans its caps beside the impostor"
    );
    // The control: tuned itself (by its kind) takes the caps away.
    let mut owned = topo.clone();
    owned.coexistence.agents = vec![Agent {
        kind: AgentKind::Tuned,
        pid,
    }];
    assert_eq!(caps(&owned), 0, "left to a real tuned");
}
