//! Pure parsers for the /proc files the sampler reads: text in, typed values out.
//!
//! Every parser takes the file's text and returns `None` (or skips a line) on malformed
//! content instead of failing: a truncated line or an unexpected field never panics and
//! never costs the rest of the sample. The I/O lives in [`crate::sampler`].

use placer_core::sample::{CpuTimes, NicCounters};
use placer_core::CpuSet;

/// `PF_KTHREAD` in the `flags` field (9) of /proc/PID/stat (include/linux/sched.h).
pub const PF_KTHREAD: u64 = 0x0020_0000;

/// The fields of /proc/PID/stat (or /proc/PID/task/TID/stat) the sampler keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PidStat {
    pub pid: u32,
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    pub flags: u64,
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub num_threads: u32,
    pub start_time_ticks: u64,
    /// Field 39, `processor`: the CPU the task last ran on. Absent on truncated lines.
    pub last_cpu: Option<u32>,
}

impl PidStat {
    /// Kernel threads: the PF_KTHREAD flag, or kthreadd (pid 2) and its children.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0 || self.pid == 2 || self.ppid == 2
    }
}

/// A `schedstat` line (`run_ns wait_ns slices`) of a process (its main thread) or thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedstat {
    /// Time on CPU, ns: nanosecond resolution where `stat`'s ticks have 10 ms.
    pub run_ns: u64,
    /// Timeslices run (all zero, with `run_ns`, on a kernel without schedstats).
    pub slices: u64,
}

/// What `/proc/loadavg` says beside the load averages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loadavg {
    /// Tasks (threads) the kernel has now.
    pub threads: u64,
    /// The pid the kernel handed out last, in the reader's pid namespace: it moves with
    /// every task created there, process or thread.
    pub last_pid: u32,
}

/// `/proc/loadavg` (`0.00 0.01 0.05 1/123 4567`); `None` when malformed.
pub fn parse_loadavg(text: &str) -> Option<Loadavg> {
    let mut f = text.split_ascii_whitespace().skip(3);
    let threads = f.next()?.split_once('/')?.1.parse().ok()?;
    let last_pid = f.next()?.parse().ok()?;
    Some(Loadavg { threads, last_pid })
}

/// `proc/PID/schedstat` or `proc/PID/task/TID/schedstat`; `None` when malformed.
pub fn parse_schedstat(text: &str) -> Option<Schedstat> {
    let mut f = text.split_ascii_whitespace().map(|w| w.parse::<u64>().ok());
    let (run_ns, _wait_ns, slices) = (f.next()??, f.next()??, f.next()??);
    Some(Schedstat { run_ns, slices })
}

/// Parses /proc/PID/stat. The comm sits between the first `(` and the LAST `)`, because a
/// comm may itself hold spaces and parentheses (`(sd-pam)`, `(a) b)`). Fields after comm
/// are numbered as in proc(5); fields up to `starttime` (22) are required, `processor` (39)
/// is optional.
pub fn parse_pid_stat(text: &str) -> Option<PidStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let pid = text[..open].trim().parse().ok()?;
    let comm = text[open + 1..close].to_string();
    // Walk the fields in order without collecting them (this runs for every task).
    let mut it = text[close + 1..].split_ascii_whitespace();
    let mut at = 2; // the field `it` yielded last
    let mut field = |n: usize| -> Option<&str> {
        let skip = n.checked_sub(at + 1)?;
        at = n;
        it.nth(skip)
    };
    let state = field(3)?.chars().next()?;
    let mut num = |n: usize| field(n).and_then(|s| s.parse::<u64>().ok());
    let ppid = num(4)? as u32;
    let flags = num(9)?;
    let utime_ticks = num(14)?;
    let stime_ticks = num(15)?;
    let num_threads = num(20)? as u32;
    let start_time_ticks = num(22)?;
    let last_cpu = num(39).map(|c| c as u32);
    Some(PidStat {
        pid,
        comm,
        state,
        ppid,
        flags,
        utime_ticks,
        stime_ticks,
        num_threads,
        start_time_ticks,
        last_cpu,
    })
}

/// The fields of /proc/PID/status the sampler keeps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PidStatus {
    /// Real uid (first number of the `Uid:` line).
    pub uid: Option<u32>,
    pub cpus_allowed: Option<CpuSet>,
}

/// Parses /proc/PID/status: `Uid:` and `Cpus_allowed_list:`. Missing or malformed lines
/// give `None` for that field only.
pub fn parse_status(text: &str) -> PidStatus {
    let mut out = PidStatus::default();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Uid:") {
            out.uid = v
                .split_ascii_whitespace()
                .next()
                .and_then(|s| s.parse().ok());
        } else if let Some(v) = line.strip_prefix("Cpus_allowed_list:") {
            out.cpus_allowed = CpuSet::parse_list(v.trim()).ok();
        }
    }
    out
}

/// The cgroup path systemd keeps a process in, from `/proc/PID/cgroup`: the
/// `name=systemd` hierarchy's (cgroup v1 and hybrid), else the unified one's (`0::`).
pub fn systemd_cgroup(text: &str) -> Option<&str> {
    let mut unified = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if ctrls == "name=systemd" {
            return Some(path);
        }
        if id == "0" && ctrls.is_empty() {
            unified = Some(path);
        }
    }
    unified
}

/// The service unit a systemd cgroup path is in (`/system.slice/tuned.service` or a
/// cgroup below it): its first component that names a `.service`.
pub fn service_unit(cgroup: &str) -> Option<&str> {
    cgroup
        .split('/')
        .find(|c| c.len() > ".service".len() && c.ends_with(".service"))
}

/// What Prometheus' standard `process_*` metrics say of a process (placer's own).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    /// The soft limit on open files; `None` when unlimited.
    pub max_fds: Option<u64>,
    /// Since the epoch.
    pub start_time_s: f64,
}

/// A `KEY:   N kB` line of /proc/PID/status, in bytes.
pub fn parse_status_kb(status: &str, key: &str) -> Option<u64> {
    let rest = status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?;
    let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// The soft limit of /proc/PID/limits' `Max open files` line; `None` when unlimited or
/// absent.
pub fn parse_max_open_files(limits: &str) -> Option<u64> {
    let rest = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    rest.split_whitespace().next()?.parse().ok()
}

/// The boot time (`btime`, seconds since the epoch) of /proc/stat.
pub fn parse_btime(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The `process_*` figures from a process's stat, status and limits, the boot time, its
/// count of open fds and the clock ticks per second.
pub fn process_stats(
    stat: &PidStat,
    status: &str,
    limits: &str,
    btime_s: u64,
    open_fds: u64,
    ticks_per_s: u32,
) -> ProcessStats {
    let ticks = f64::from(ticks_per_s.max(1));
    ProcessStats {
        cpu_seconds: (stat.utime_ticks + stat.stime_ticks) as f64 / ticks,
        resident_bytes: parse_status_kb(status, "VmRSS").unwrap_or(0),
        virtual_bytes: parse_status_kb(status, "VmSize").unwrap_or(0),
        open_fds,
        max_fds: parse_max_open_files(limits),
        start_time_s: btime_s as f64 + stat.start_time_ticks as f64 / ticks,
    }
}

/// Parses /proc/PID/cgroup: the v2 unified path (`0::/path`) when present, else the
/// `cpuset` hierarchy's path, else the first hierarchy's. Empty when nothing parses. A
/// unified path of `/` beside v1 hierarchies says nothing (a v1 machine lists `0::/` for
/// every process, cgroup2 mounted or not): the v1 path is taken then.
pub fn parse_cgroup(text: &str) -> String {
    let mut unified: Option<&str> = None;
    let mut first: Option<&str> = None;
    let mut cpuset: Option<&str> = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && ctrls.is_empty() {
            unified = Some(path);
            continue;
        }
        if ctrls.split(',').any(|c| c == "cpuset") {
            cpuset = Some(path);
        }
        first.get_or_insert(path);
    }
    let v1 = cpuset.or(first);
    match unified {
        Some("/") if v1.is_some() => v1,
        Some(u) => Some(u),
        None => v1,
    }
    .unwrap_or_default()
    .to_string()
}

/// Parses the `cpuN` lines of /proc/stat (the aggregate `cpu` line is skipped). Lines with
/// fewer fields than `steal` (old kernels) get zeros for the missing ones; a line whose
/// CPU id does not parse is skipped.
pub fn parse_proc_stat(text: &str) -> Vec<CpuTimes> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            continue;
        };
        // `cpu  ...` (the aggregate) has a blank here; `cpuN ...` a digit.
        if !rest.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let mut it = rest.split_ascii_whitespace();
        let Some(id) = it.next() else { continue };
        let Ok(cpu) = id.parse::<u32>() else {
            continue; // the aggregate "cpu " line, or junk
        };
        let v: Vec<u64> = it.map_while(|s| s.parse().ok()).collect();
        if v.len() < 4 {
            continue;
        }
        let g = |i: usize| v.get(i).copied().unwrap_or(0);
        out.push(CpuTimes {
            cpu,
            user: g(0),
            nice: g(1),
            system: g(2),
            idle: g(3),
            iowait: g(4),
            irq: g(5),
            softirq: g(6),
            steal: g(7),
        });
    }
    out
}

/// The machine's context switches since boot: `/proc/stat`'s `ctxt` line.
pub fn parse_context_switches(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("ctxt "))
        .and_then(|v| v.trim().parse().ok())
}

/// TCP segments received and sent (`InSegs`, `OutSegs`) from `/proc/net/snmp`, whose
/// `Tcp:` lines are a header of names and a row of values.
pub fn parse_tcp_segments(text: &str) -> Option<(u64, u64)> {
    let mut rows = text.lines().filter_map(|l| l.strip_prefix("Tcp:"));
    let names: Vec<&str> = rows.next()?.split_whitespace().collect();
    let values: Vec<&str> = rows.next()?.split_whitespace().collect();
    let get = |n: &str| -> Option<u64> {
        let i = names.iter().position(|x| *x == n)?;
        values.get(i)?.parse().ok()
    };
    Some((get("InSegs")?, get("OutSegs")?))
}

/// Each interface's cumulative counters from `/proc/net/dev` (two header lines, then
/// `name: rx_bytes rx_packets 6 more  tx_bytes tx_packets 6 more`; a long name runs into
/// its first figure, `enp0s31f6:123`), sorted by name; a malformed line is left out.
pub fn parse_net_dev(text: &str) -> Vec<NicCounters> {
    let mut v: Vec<NicCounters> = text
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            if f.len() < 10 {
                return None;
            }
            Some(NicCounters {
                name: name.trim().to_string(),
                rx_bytes: f[0],
                rx_packets: f[1],
                tx_bytes: f[8],
                tx_packets: f[9],
            })
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// The socket inode of an fd link target `socket:[12345]`, else `None`.
pub fn socket_inode(link: &[u8]) -> Option<u64> {
    let s = link.strip_prefix(b"socket:[")?.strip_suffix(b"]")?;
    std::str::from_utf8(s).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "1234 (my (odd) proc) S 1 1234 1234 0 -1 4194560 100 0 0 0 \
        250 50 0 0 20 0 3 0 98765 1000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn pid_stat_comm_with_spaces_and_parens() {
        let s = parse_pid_stat(STAT).unwrap();
        assert_eq!(s.pid, 1234);
        assert_eq!(s.comm, "my (odd) proc");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.utime_ticks, 250);
        assert_eq!(s.stime_ticks, 50);
        assert_eq!(s.num_threads, 3);
        assert_eq!(s.start_time_ticks, 98765);
        assert_eq!(s.last_cpu, Some(1));
        assert!(!s.is_kernel_thread());
    }

    #[test]
    fn pid_stat_comm_ending_in_paren() {
        let s = parse_pid_stat("7 (a) b)) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5").unwrap();
        assert_eq!(s.comm, "a) b)");
        assert_eq!(s.state, 'R');
        assert_eq!(s.last_cpu, None, "truncated before field 39");
    }

    #[test]
    fn pid_stat_kernel_thread() {
        let kt = "15 (ksoftirqd/1) S 2 0 0 0 -1 69238848 0 0 0 0 0 7 0 0 20 0 1 0 3 0 0 \
            18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0";
        let s = parse_pid_stat(kt).unwrap();
        assert!(s.flags & PF_KTHREAD != 0);
        assert!(s.is_kernel_thread());
        // kthreadd itself: pid 2, ppid 0, flag present or not.
        let k2 = parse_pid_stat("2 (kthreadd) S 0 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1").unwrap();
        assert!(k2.is_kernel_thread());
    }

    #[test]
    fn net_dev_short_and_long_names_and_junk() {
        let t = "Inter-|   Receive                                                |  Transmit\n \
            face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n\
            \x20 eth0: 5545 25325 0 0 0 0 0 0 19587 18888 0 0 0 0 0 0\n\
            \x20   lo: 47 38 0 0 0 0 0 0 47 38 0 0 0 0 0 0\n\
            enp0s31f6:123456789012 7 0 0 0 0 0 0 9 8 0 0 0 0 0 0\n\
            \x20 bad0: 1 2 three 0 0 0 0 0 4 5 0 0 0 0 0 0\n\
            \x20 cut0: 1 2 3\n";
        let v = parse_net_dev(t);
        let got: Vec<(&str, u64, u64, u64, u64)> = v
            .iter()
            .map(|n| {
                (
                    n.name.as_str(),
                    n.rx_bytes,
                    n.rx_packets,
                    n.tx_bytes,
                    n.tx_packets,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("enp0s31f6", 123_456_789_012, 7, 9, 8),
                ("eth0", 5545, 25325, 19587, 18888),
                ("lo", 47, 38, 47, 38),
            ]
        );
        assert!(parse_net_dev("").is_empty());
    }

    #[test]
    fn pid_stat_malformed_is_none() {
        for bad in [
            "",
            "1234",
            "1234 (x",
            "x) 1 (",
            "1234 (x) S 1 2",
            "abc (x) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5",
            "1 (x) S 1 1 1 0 -1 0 0 0 0 0 notanumber 2 0 0 20 0 1 0 5",
            "1 (x)",
        ] {
            assert_eq!(parse_pid_stat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn status_uid_and_allowed() {
        let t = "Name:\tbash\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\nCpus_allowed:\tf\n\
                 Cpus_allowed_list:\t0-1,3\nMems_allowed_list:\t0\n";
        let s = parse_status(t);
        assert_eq!(s.uid, Some(1000));
        assert_eq!(s.cpus_allowed.unwrap().to_vec(), vec![0, 1, 3]);
        let s = parse_status("Uid:\tx\nCpus_allowed_list:\t3-1\n");
        assert_eq!(s, PidStatus::default());
        assert_eq!(parse_status(""), PidStatus::default());
    }

    #[test]
    fn cgroup_v2_v1_and_junk() {
        assert_eq!(
            parse_cgroup("0::/user.slice/x.scope\n"),
            "/user.slice/x.scope"
        );
        let v1 = "12:memory:/m\n5:cpuset,cpu:/placer/a\n1:name=systemd:/s\n";
        assert_eq!(parse_cgroup(v1), "/placer/a");
        assert_eq!(parse_cgroup("3:memory:/m\n"), "/m");
        let hybrid = "5:cpuset:/c\n0::/u\n";
        assert_eq!(parse_cgroup(hybrid), "/u");
        // A v1 machine's `0::/` (this VM's): the cpuset path counts.
        let v1_machine = "9:name=systemd:/\n3:cpuset:/zz\n1:cpu:/\n0::/\n";
        assert_eq!(parse_cgroup(v1_machine), "/zz");
        assert_eq!(parse_cgroup("0::/\n"), "/");
        assert_eq!(parse_cgroup("garbage\n"), "");
        assert_eq!(parse_cgroup(""), "");
    }

    #[test]
    fn proc_stat_cpus() {
        let t = "cpu  10 0 5 100 1 0 2 0 0 0\ncpu0 6 0 3 50 1 0 1 0 0 0\ncpu1 4 0 2 50\n\
                 cpux 1 2 3 4\ncpu2 1 2\nintr 5 6\nctxt 9\n";
        let c = parse_proc_stat(t);
        assert_eq!(parse_context_switches(t), Some(9));
        assert_eq!(parse_context_switches("ctxt x\n"), None);
        assert_eq!(parse_context_switches("cpu 1\n"), None);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].cpu, 0);
        assert_eq!(
            (c[0].user, c[0].system, c[0].idle, c[0].softirq),
            (6, 3, 50, 1)
        );
        assert_eq!(c[1].cpu, 1);
        assert_eq!((c[1].idle, c[1].steal), (50, 0));
    }

    #[test]
    fn socket_links() {
        assert_eq!(socket_inode(b"socket:[12345]"), Some(12345));
        assert_eq!(socket_inode(b"pipe:[12345]"), None);
        assert_eq!(socket_inode(b"socket:[x]"), None);
        assert_eq!(socket_inode(b"/dev/null"), None);
    }

    #[test]
    fn schedstat_gives_the_run_time_and_timeslices() {
        let s = |run_ns, slices| Some(Schedstat { run_ns, slices });
        assert_eq!(parse_schedstat("123456789 42 7\n"), s(123_456_789, 7));
        assert_eq!(parse_schedstat("0 0 0\n"), s(0, 0));
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
        assert_eq!(parse_schedstat("12 3"), None);
    }

    #[test]
    fn loadavg_gives_the_threads_and_the_last_pid() {
        let l = |threads, last_pid| Some(Loadavg { threads, last_pid });
        assert_eq!(parse_loadavg("0.00 0.01 0.05 1/123 4567\n"), l(123, 4567));
        assert_eq!(
            parse_loadavg("12.5 9.1 3.0 14/70000 4194303"),
            l(70_000, 4_194_303)
        );
        assert_eq!(parse_loadavg("0.00 0.01 0.05 1/123"), None);
        assert_eq!(parse_loadavg("0.00 0.01 0.05 123 4567"), None);
        assert_eq!(parse_loadavg("0.00 0.01 0.05 1/x 4567"), None);
        assert_eq!(parse_loadavg(""), None);
    }

    #[test]
    fn tcp_segments_come_from_the_named_columns() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Tcp: RtoAlgorithm RtoMin InSegs OutSegs RetransSegs\n\
                    Tcp: 1 200 14612 13522 0\nUdp: InDatagrams\nUdp: 5\n";
        assert_eq!(parse_tcp_segments(text), Some((14612, 13522)));
        assert_eq!(parse_tcp_segments("Tcp: InSegs OutSegs\n"), None);
        assert_eq!(parse_tcp_segments("Tcp: InSegs\nTcp: 5\n"), None);
        assert_eq!(parse_tcp_segments(""), None);
    }

    #[test]
    fn process_stats_read_status_limits_and_btime() {
        let stat = parse_pid_stat(
            "42 (placer) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000 0 0",
        )
        .expect("stat");
        let status = "Name:\tplacer\nVmSize:\t  20480 kB\nVmRSS:\t    4096 kB\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        let p = process_stats(&stat, status, limits, 1_700_000_000, 7, 100);
        assert_eq!(
            p,
            ProcessStats {
                cpu_seconds: 3.0,
                resident_bytes: 4096 * 1024,
                virtual_bytes: 20480 * 1024,
                open_fds: 7,
                max_fds: Some(1024),
                start_time_s: 1_700_000_010.0,
            }
        );
        assert_eq!(
            parse_btime("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
        assert_eq!(
            parse_max_open_files(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
    }
}
