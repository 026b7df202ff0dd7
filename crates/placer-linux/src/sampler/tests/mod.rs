//! The sampler's tests on fixture roots and, as root, on this machine's /proc.

mod equivalence;

use super::*;
use crate::pid::PidMap;
use crate::sys::{Dir, Pins};
use placer_core::sample::SourceKind;
use placer_testkit::TempDir;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use system::read_nic_counters;

/// A writable fixture root (the testkit's temporary directory) with a `proc` in it.
fn tree(tag: &str) -> TempDir {
    let t = TempDir::new(&format!("sampler-{tag}"));
    fs::create_dir_all(t.path().join("proc")).unwrap();
    t
}

/// Writes `text` at `proc/rel` under the fixture root.
fn put(t: &TempDir, rel: &str, text: &str) {
    let p = t.path().join("proc").join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

/// A user process `pid` named `comm` with `ut` user ticks, started at tick 500,
/// allowed CPUs 0-1, in cgroup /a: its stat, status and cgroup files.
fn put_proc(t: &TempDir, pid: u32, comm: &str, ut: u64) {
    put(
        t,
        &format!("{pid}/stat"),
        &stat_line(pid, comm, 1, 0, ut, 500),
    );
    put(
        t,
        &format!("{pid}/status"),
        "Uid:\t0\nCpus_allowed_list:\t0-1\n",
    );
    put(t, &format!("{pid}/cgroup"), "0::/a\n");
}

fn stat_line(pid: u32, comm: &str, ppid: u32, flags: u64, ut: u64, start: u64) -> String {
    format!(
        "{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 {flags} 0 0 0 0 {ut} 3 0 0 20 0 1 0 {start} \
         1000 100 1 1 1 1 1 1 0 0 0 0 0 0 0 17 1 0 0"
    )
}

/// CPU frequencies: read at each sample where cpufreq is; where no CPU had a file, not
/// looked for again before LIST_EVERY samples (a VM has none to find each second).
#[test]
fn cpu_frequencies_are_looked_for_again_only_every_listing() {
    let t = tree("cpufreq");
    put(
        &t,
        "stat",
        "cpu  1 2 3 4\ncpu0 1 2 3 4 5 6 7 8\ncpu1 1 2 3 4\n",
    );
    let mut s = Sampler::new(t.path());
    let req = SampleRequest {
        nics: true,
        ..Default::default()
    };
    assert!(s.sample(req).unwrap().cpu_freqs.is_empty());
    let f = t
        .path()
        .join("sys/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq");
    fs::create_dir_all(f.parent().unwrap()).unwrap();
    fs::write(&f, "1800000\n").unwrap();
    let mut found = None;
    for n in 2..=LIST_EVERY + 1 {
        if !s.sample(req).unwrap().cpu_freqs.is_empty() {
            found = Some(n);
            break;
        }
    }
    assert_eq!(
        found,
        Some(LIST_EVERY + 1),
        "looked for at sample 1 + LIST_EVERY"
    );
    // Once there, read every sample: a change shows at once.
    fs::write(&f, "2400000\n").unwrap();
    let x = s.sample(req).unwrap();
    assert_eq!(
        x.cpu_freqs,
        vec![placer_core::sample::CpuFreq {
            cpu: 1,
            khz: 2_400_000
        }]
    );
}

/// Issue 36: a FIFO, a link to /dev/zero and a 2 GiB sparse file at each file the
/// sampler reads under a root: every sample ends within 5 s, memory stays bounded, and
/// /proc/stat's case is an error naming the file. Before, the FIFO hung the sampler for
/// ever, /dev/zero grew it without end and the 2 GiB file was read whole.
#[test]
fn hostile_files_at_sampler_paths_are_bounded() {
    let hostile = ["fifo", "zero", "sparse"];
    for rel in [
        "stat",
        "interrupts",
        "softirqs",
        "100/stat",
        "100/status",
        "100/cgroup",
    ] {
        for kind in hostile {
            let t = tree(&format!("hostile-{}-{kind}", rel.replace('/', "-")));
            put(&t, "stat", "cpu  1 2 3 4\ncpu0 1 2 3 4 5 6 7 8\n");
            put(&t, "interrupts", "  CPU0\n 30: 1 PCI-MSI 1-edge eth0\n");
            put(&t, "softirqs", "  CPU0\nNET_RX: 4\nNET_TX: 6\n");
            put(&t, "100/stat", &stat_line(100, "a", 1, 0, 42, 500));
            put(
                &t,
                "100/status",
                "Uid:\t0\t0\t0\t0\nCpus_allowed_list:\t0\n",
            );
            put(&t, "100/cgroup", "0::/\n");
            let p = t.path().join("proc").join(rel);
            fs::remove_file(&p).unwrap();
            match kind {
                "fifo" => {
                    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
                    // SAFETY: a valid path.
                    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
                }
                "zero" => std::os::unix::fs::symlink("/dev/zero", &p).unwrap(),
                _ => fs::File::create(&p).unwrap().set_len(2 << 30).unwrap(),
            }
            let root = t.path().to_path_buf();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut s = Sampler::new(&root);
                let r = s.sample(SampleRequest {
                    threads: true,
                    ..Default::default()
                });
                let _ = tx.send(r.map(|_| ()).map_err(|e| e.to_string()));
            });
            let r = rx
                .recv_timeout(std::time::Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("{rel} as {kind}: the sample took over 5 s"));
            if rel == "stat" && kind != "fifo" {
                let e = r.expect_err("an unreadable /proc/stat is an error");
                assert!(e.contains("stat") && e.contains("larger than"), "{e}");
            }
        }
    }
    let hwm_kib: u64 = fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert!(hwm_kib < 1 << 20, "peak RSS {hwm_kib} KiB");
}

#[test]
fn fixture_tree_with_malformed_and_vanished_processes() {
    let t = tree("fix");
    put(
        &t,
        "stat",
        "cpu  1 2 3 4\ncpu0 1 2 3 4 5 6 7 8\ncpu1 1 1 1 1\n",
    );
    put(
        &t,
        "interrupts",
        "  CPU0 CPU1\n 30: 1 2 PCI-MSI 1-edge eth0\n",
    );
    put(&t, "softirqs", "  CPU0 CPU1\nNET_RX: 4 5\nNET_TX: 6 7\n");
    put(&t, "100/stat", &stat_line(100, "a b) (c", 1, 0, 42, 500));
    put(
        &t,
        "100/status",
        "Uid:\t1000\t1000\t1000\t1000\nCpus_allowed_list:\t0-1\n",
    );
    put(&t, "100/cgroup", "0::/work\n");
    put(&t, "101/stat", "101 (trunc) S 1 1");
    put(&t, "102/stat", &stat_line(102, "gone", 1, 0, 1, 1)); // no status: exited
    put(
        &t,
        "103/stat",
        &stat_line(103, "kworker/0:1", 2, 0x0020_0000, 0, 7),
    );
    put(&t, "self/stat", "not a pid dir");
    let mut s = Sampler::new(t.path());
    let src = s.sources();
    assert!(src.has(SourceKind::Proc) && src.has(SourceKind::Interrupts));
    assert!(
        !src.has(SourceKind::SockDiag)
            && !src.has(SourceKind::Rapl)
            && !src.has(SourceKind::PerfHw)
    );
    let sample = s
        .sample(SampleRequest {
            sockets: true,
            threads: true,
            irqs: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(sample.cpus.len(), 2);
    assert_eq!(sample.irqs.len(), 1);
    // Not asked for: /proc/interrupts is not read.
    let unasked = SampleRequest {
        irqs: false,
        ..SampleRequest::default()
    };
    assert!(Sampler::new(t.path())
        .sample(unasked)
        .unwrap()
        .irqs
        .is_empty());
    assert_eq!(sample.softirqs[1].net_tx, 7);
    let pids: Vec<u32> = sample.procs.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![100, 103]);
    let p = &sample.procs[0];
    assert_eq!(&*p.comm, "a b) (c");
    assert_eq!(p.uid, Some(1000));
    assert_eq!(p.allowed.to_vec(), vec![0, 1]);
    assert_eq!(&*p.cgroup, "/work");
    assert_eq!((p.utime_ticks, p.start_time_ticks), (42, 500));
    assert!(sample.procs[1].kernel_thread);
    assert_eq!(s.last_stats.dropped_procs, 2);
}

#[test]
fn numa_maps_are_read_again_only_for_processes_that_ran() {
    let t = tree("numa");
    put(&t, "stat", "cpu0 1 2 3 4\n");
    put_proc(&t, 100, "idle", 42);
    let maps = |n0: u32, n1: u32| {
        format!(
            "7f0000000000 default anon={} N0={n0} N1={n1} kernelpagesize_kB=4\n",
            n0 + n1
        )
    };
    put(&t, "100/numa_maps", &maps(10, 0));
    let mut s = Sampler::new(t.path());
    s.set_refresh_every(1000);
    let req = SampleRequest {
        numa_pages: true,
        ..Default::default()
    };
    let pages = |s: &mut Sampler| s.sample(req).unwrap().procs[0].numa_pages.clone();
    assert_eq!(pages(&mut s).get(&0).copied(), Some(10));
    // Pages moved while it slept (someone migrated them): its last map stands...
    put(&t, "100/numa_maps", &maps(0, 10));
    assert_eq!(pages(&mut s).get(&0).copied(), Some(10));
    // ...until it runs.
    put(&t, "100/stat", &stat_line(100, "idle", 1, 0, 43, 500));
    let now = pages(&mut s);
    assert_eq!(
        (now.get(&0).copied(), now.get(&1).copied()),
        (Some(0), Some(10))
    );
}

/// An idle process's sample is the cache's, shared from sample to sample (not copied),
/// with its pages; a stage not asked for leaves nothing from an earlier sample; a
/// process that runs gets a sample of its own, and the next sample shares that.
#[test]
fn idle_processes_are_shared_from_sample_to_sample_with_their_pages() {
    let t = tree("shared");
    put(&t, "stat", "cpu0 1 2 3 4\n");
    for pid in [100, 101] {
        put_proc(&t, pid, "idle", 42);
        put(
            &t,
            &format!("{pid}/numa_maps"),
            "7f0000000000 default anon=3 N0=1 N1=2 kernelpagesize_kB=4\n",
        );
    }
    let mut s = Sampler::new(t.path());
    s.set_refresh_every(1000);
    let pages = SampleRequest {
        numa_pages: true,
        ..Default::default()
    };
    let of = |x: &Sample, pid: u32| x.procs.iter().find(|p| p.pid == pid).unwrap().clone();
    let _first = s.sample(pages).unwrap();
    let a = s.sample(pages).unwrap();
    let b = s.sample(pages).unwrap();
    for pid in [100, 101] {
        assert!(Arc::ptr_eq(&of(&a, pid), &of(&b, pid)), "pid {pid} copied");
        assert_eq!(of(&b, pid).numa_pages.get(&1).copied(), Some(2));
    }
    // Not asked for: no pages, though the cache held some.
    let c = s.sample(SampleRequest::default()).unwrap();
    assert!(c.procs.iter().all(|p| p.numa_pages.is_empty()));
    let d = s.sample(pages).unwrap();
    assert_eq!(of(&d, 100).numa_pages.get(&1).copied(), Some(2));
    // 101 runs: its own sample, with its new ticks; 100 stays shared.
    put(&t, "101/stat", &stat_line(101, "idle", 1, 0, 43, 500));
    let e = s.sample(pages).unwrap();
    assert!(Arc::ptr_eq(&of(&d, 100), &of(&e, 100)));
    assert!(!Arc::ptr_eq(&of(&d, 101), &of(&e, 101)));
    assert_eq!((of(&d, 101).utime_ticks, of(&e, 101).utime_ticks), (42, 43));
    assert_eq!(of(&e, 101).numa_pages.get(&1).copied(), Some(2));
    let f = s.sample(pages).unwrap();
    assert!(
        Arc::ptr_eq(&of(&e, 101), &of(&f, 101)),
        "101 idle again: shared"
    );
}

#[test]
fn idle_processes_come_from_the_cache_until_they_run_or_refresh() {
    let t = tree("cache");
    put(&t, "stat", "cpu0 1 2 3 4\n");
    put_proc(&t, 100, "idle", 42);
    put(
        &t,
        "100/task/100/stat",
        &stat_line(100, "idle", 1, 0, 42, 500),
    );
    put(&t, "100/task/100/status", "Cpus_allowed_list:\t0-1\n");
    let mut s = Sampler::new(t.path());
    s.set_refresh_every(1000);
    let req = SampleRequest {
        threads: true,
        ..Default::default()
    };
    let allowed = |s: &mut Sampler| s.sample(req).unwrap().procs[0].allowed.to_vec();
    assert_eq!(allowed(&mut s), vec![0, 1]);
    // Someone pins the sleeping process: not seen while it does not run...
    put(&t, "100/status", "Uid:\t0\nCpus_allowed_list:\t1\n");
    assert_eq!(allowed(&mut s), vec![0, 1]);
    assert_eq!(s.last_stats.procs_reread, 0);
    // ...seen at once after invalidate (placer's own actuator)...
    s.invalidate(100);
    assert_eq!(allowed(&mut s), vec![1]);
    // ...and when it runs.
    put(&t, "100/status", "Uid:\t0\nCpus_allowed_list:\t0\n");
    put(&t, "100/stat", &stat_line(100, "idle", 1, 0, 43, 500));
    assert_eq!(allowed(&mut s), vec![0]);
    assert_eq!(s.last_stats.procs_reread, 1);
    // refresh_every 1: always exact.
    s.set_refresh_every(1);
    put(&t, "100/status", "Uid:\t0\nCpus_allowed_list:\t1\n");
    assert_eq!(allowed(&mut s), vec![1]);
    let sample = s.sample(req).unwrap();
    assert_eq!(sample.procs[0].threads.len(), 1, "threads kept");
}

/// Rule 8: without the collector, a single-threaded process whose schedstat says what
/// it said before its last stat is not read; one whose schedstat moved, one with two
/// threads, and one whose schedstat is all zero always are.
#[test]
fn rule8_an_unmoved_schedstat_spares_a_single_threaded_process_its_stat() {
    let t = tree("schedstat");
    put(&t, "stat", "cpu0 1 2 3 4\n");
    put_proc(&t, 100, "one", 42);
    put(&t, "100/schedstat", "5000 10 7\n");
    put_proc(&t, 101, "two", 42);
    put(&t, "101/stat", &two(101, 42));
    put(&t, "101/schedstat", "5000 10 7\n");
    put_proc(&t, 102, "zeros", 42);
    put(&t, "102/schedstat", "0 0 0\n");
    let mut s = Sampler::new(t.path());
    s.set_refresh_every(1000);
    let req = SampleRequest::default();
    let ticks = |s: &mut Sampler| -> Vec<u64> {
        s.sample(req)
            .unwrap()
            .procs
            .iter()
            .map(|p| p.utime_ticks)
            .collect()
    };
    assert_eq!(ticks(&mut s), vec![42, 42, 42]);
    // The stat files move (a test's tree, not a kernel): 100's schedstat will say it
    // did not run, so its stat goes unread; 101 and 102 are read.
    for pid in [100, 102] {
        put(
            &t,
            &format!("{pid}/stat"),
            &stat_line(pid, "x", 1, 0, 43, 500),
        );
    }
    put(&t, "101/stat", &two(101, 43));
    // The first sample after the first read learns each schedstat with its stat.
    ticks(&mut s);
    for pid in [100, 102] {
        put(
            &t,
            &format!("{pid}/stat"),
            &stat_line(pid, "x", 1, 0, 44, 500),
        );
    }
    put(&t, "101/stat", &two(101, 44));
    assert_eq!(ticks(&mut s), vec![43, 44, 44]);
    assert_eq!(s.last_stats.schedstat_spared, 1);
    // It ran: read in full.
    put(&t, "100/schedstat", "9000 10 8\n");
    assert_eq!(ticks(&mut s), vec![44, 44, 44]);
    assert_eq!(s.last_stats.schedstat_spared, 0);
    // Its new schedstat learned with that stat: spared again from the next sample.
    assert_eq!(ticks(&mut s), vec![44, 44, 44]);
    assert_eq!(s.last_stats.schedstat_spared, 1);
    // A process with its stat and no schedstat: not looked for again, for any.
    fs::remove_file(t.path().join("proc/102/schedstat")).unwrap();
    ticks(&mut s);
    put(&t, "100/stat", &stat_line(100, "x", 1, 0, 45, 500));
    assert_eq!(ticks(&mut s), vec![45, 44, 44]);
    assert_eq!(s.last_stats.schedstat_spared, 0);
}

/// A `stat` line of a process or thread of a process with two threads.
fn two(pid: u32, ut: u64) -> String {
    stat_line(pid, "w", 1, 0, ut, 500).replace(" 20 0 1 0 ", " 20 0 2 0 ")
}

/// A tree with process 100 and its threads 100 and 101 (5 user ticks each).
fn two_thread_tree(tag: &str) -> TempDir {
    let t = tree(tag);
    put(&t, "stat", "cpu0 1 2 3 4\n");
    put(&t, "100/stat", &two(100, 10));
    put(&t, "100/status", "Uid:\t0\nCpus_allowed_list:\t0-1\n");
    put(&t, "100/cgroup", "0::/a\n");
    for tid in [100, 101] {
        put(&t, &format!("100/task/{tid}/stat"), &two(tid, 5));
        put(
            &t,
            &format!("100/task/{tid}/status"),
            "Cpus_allowed_list:\t0-1\n",
        );
    }
    t
}

#[test]
fn a_running_process_with_an_unchanged_thread_count_is_not_listed_again() {
    let t = two_thread_tree("tids");
    let mut s = Sampler::new(t.path());
    s.set_refresh_every(1000);
    let req = SampleRequest {
        threads: true,
        ..Default::default()
    };
    let tids = |s: &mut Sampler| -> Vec<u32> {
        s.sample(req).unwrap().procs[0]
            .threads
            .iter()
            .map(|t| t.tid)
            .collect()
    };
    assert_eq!(tids(&mut s), vec![100, 101]);
    // Thread 101 exits and 102 starts between two samples: the same count, but 101's
    // read fails, so the directory is listed after all.
    std::fs::remove_dir_all(t.path().join("proc/100/task/101")).unwrap();
    put(&t, "100/task/102/stat", &two(102, 1));
    put(&t, "100/task/102/status", "Cpus_allowed_list:\t1\n");
    put(&t, "100/stat", &two(100, 20));
    assert_eq!(tids(&mut s), vec![100, 102]);
    // The process runs on with two threads: the known ones are read, the directory is
    // not listed (an entry the count does not account for is not picked up).
    put(&t, "100/task/103/stat", &two(103, 1));
    put(&t, "100/stat", &two(100, 30));
    assert_eq!(tids(&mut s), vec![100, 102]);
    assert_eq!(s.last_stats.procs_reread, 1);
}

#[test]
fn with_the_collector_a_running_process_threads_come_from_its_times_not_their_files() {
    use crate::activity::{Activity, ScriptedActivity};
    use crate::bpf::{ProcCpu, ThreadCpu};
    let t = two_thread_tree("bpf-threads");
    // Idle neighbours, so that the rotating refresh window is elsewhere for a while.
    for pid in 200..210 {
        put_proc(&t, pid, "idle", 1);
    }
    let mut s = Sampler::new(t.path());
    s.set_refresh_every(1000);
    let script = ScriptedActivity::default();
    s.set_activity_source(Box::new(script.clone()));
    let req = SampleRequest {
        threads: true,
        ..Default::default()
    };
    let ran = |threads: &[(u32, u64, u32)]| {
        let threads: Vec<ThreadCpu> = threads
            .iter()
            .map(|&(tid, cpu_ns, last_cpu)| ThreadCpu {
                tid,
                cpu_ns,
                last_cpu,
            })
            .collect();
        let mut m = PidMap::default();
        m.insert(
            100,
            ProcCpu {
                cpu_ns: threads.iter().map(|t| t.cpu_ns).sum(),
                comm: "w".into(),
                threads,
            },
        );
        Activity {
            ran: Some(m),
            events: Some(Vec::new()),
            cgroup_moves: None,
        }
    };
    let proc100 = |x: &Sample| x.procs.iter().find(|p| p.pid == 100).unwrap().clone();
    // First sample: files read, each thread's time starts at its ticks (5 + 3 stime).
    script.push(ran(&[]));
    let s1 = s.sample(req).unwrap();
    let tick_ns = 1_000_000_000 / u64::from(s1.clk_tck);
    let ns = |x: &Sample| -> Vec<(u32, Option<u64>, Option<u32>)> {
        proc100(x)
            .threads
            .iter()
            .map(|t| (t.tid, t.cpu_ns, t.last_cpu))
            .collect()
    };
    assert_eq!(
        ns(&s1),
        vec![
            (100, Some(8 * tick_ns), Some(1)),
            (101, Some(8 * tick_ns), Some(1))
        ]
    );
    // It runs, both threads: their files are not read (101's is gone and would make
    // the read fail), the collector's times and CPUs are added.
    std::fs::remove_file(t.path().join("proc/100/task/101/stat")).unwrap();
    put(&t, "100/stat", &two(100, 20));
    script.push(ran(&[(100, 30_000_000, 0), (101, 20_000_000, 1)]));
    let s2 = s.sample(req).unwrap();
    assert_eq!(s.last_stats.threads_from_collector, 2);
    assert_eq!(
        ns(&s2),
        vec![
            (100, Some(8 * tick_ns + 30_000_000), Some(0)),
            (101, Some(8 * tick_ns + 20_000_000), Some(1))
        ]
    );
    let o = placer_core::Observation::new(&s1, &s2);
    let dt_s = (s2.time_ns - s1.time_ns) as f64 / 1e9;
    let shares: Vec<(u32, f64)> = o
        .proc(100)
        .unwrap()
        .threads
        .iter()
        .map(|t| (t.tid, t.cpu_share * dt_s))
        .collect();
    assert_eq!(shares.len(), 2);
    assert!((shares[0].1 - 0.030).abs() < 1e-9 && (shares[1].1 - 0.020).abs() < 1e-9);
    // A thread the collector names that the last read did not know: the files are
    // read (101's is gone: the directory is listed and 102 found); known threads'
    // times go on, the new one starts at its ticks.
    put(&t, "100/task/102/stat", &two(102, 1));
    put(&t, "100/task/102/status", "Cpus_allowed_list:\t1\n");
    put(&t, "100/stat", &two(100, 30));
    script.push(ran(&[(100, 1_000_000, 1), (102, 5_000_000, 1)]));
    let s3 = s.sample(req).unwrap();
    assert_eq!(s.last_stats.threads_from_collector, 0);
    assert_eq!(
        ns(&s3),
        vec![
            (100, Some(8 * tick_ns + 31_000_000), Some(1)),
            (102, Some(4 * tick_ns), Some(1))
        ]
    );
    // It runs less than a tick: its stat is as it was (the idle shortcut's key), yet
    // the collector's time is not dropped (on a busy host a thread can get under a
    // tick per sample for many samples in a row: 38 ms were lost so in 15 s).
    script.push(ran(&[(102, 2_000_000, 0)]));
    let s3b = s.sample(req).unwrap();
    assert_eq!(s.last_stats.threads_from_collector, 2);
    assert_eq!(
        ns(&s3b),
        vec![
            (100, Some(8 * tick_ns + 31_000_000), Some(1)),
            (102, Some(4 * tick_ns + 2_000_000), Some(0))
        ]
    );
    // Without the collector (its map filled): ticks only, no collector time.
    put(&t, "100/stat", &two(100, 40));
    script.push(Activity {
        ran: None,
        events: Some(Vec::new()),
        cgroup_moves: None,
    });
    let s4 = s.sample(req).unwrap();
    assert!(ns(&s4).iter().all(|t| t.1.is_none()), "{:?}", ns(&s4));
}

#[test]
fn on_the_events_path_an_invalidated_process_is_read_again_not_dropped() {
    use crate::activity::{Activity, ScriptedActivity};
    let t = tree("events-invalidate");
    put(&t, "stat", "cpu0 1 2 3 4\n");
    for pid in [100, 200] {
        put_proc(&t, pid, "w", 10);
    }
    let mut s = Sampler::new(t.path());
    s.set_refresh_every(1000);
    let script = ScriptedActivity::default();
    s.set_activity_source(Box::new(script.clone()));
    let quiet = || Activity {
        ran: Some(PidMap::default()),
        events: Some(Vec::new()),
        cgroup_moves: None,
    };
    let req = SampleRequest::default();
    script.push(quiet());
    assert_eq!(s.sample(req).unwrap().procs.len(), 2);
    // placer pins the sleeping 100 and invalidates it: the next sample, which takes its
    // process set from the cache and the (empty) events, still has it, read again.
    put(&t, "100/status", "Uid:\t0\nCpus_allowed_list:\t1\n");
    s.invalidate(100);
    script.push(quiet());
    let x = s.sample(req).unwrap();
    assert!(!s.last_stats.listed);
    let p = x.procs.iter().find(|p| p.pid == 100).expect("100 dropped");
    assert_eq!(p.allowed.to_vec(), vec![1]);
    // And in the samples after.
    script.push(quiet());
    assert_eq!(s.sample(req).unwrap().procs.len(), 2);
}

/// Rules 3 and 7: an idle process in the refresh window has its allowed CPUs (its
/// threads' too) and cgroup read again but not its stat (a stat made different here
/// is not seen, a kernel thread whose stat is gone stays), unless its parent exited.
#[test]
fn on_the_events_path_an_idle_refresh_reads_affinity_and_cgroup_not_stat() {
    use crate::activity::{Activity, ScriptedActivity};
    use crate::proc_events::ProcEvent;
    let t = two_thread_tree("events-refresh");
    put(&t, "200/stat", &stat_line(200, "kw", 2, 0x0020_0000, 0, 7));
    let mut s = Sampler::new(t.path());
    // Every process in the window at every sample.
    s.set_refresh_every(1);
    let script = ScriptedActivity::default();
    s.set_activity_source(Box::new(script.clone()));
    let quiet = |events: Vec<ProcEvent>| Activity {
        ran: Some(PidMap::default()),
        events: Some(events),
        cgroup_moves: None,
    };
    let req = SampleRequest {
        threads: true,
        ..Default::default()
    };
    script.push(quiet(Vec::new()));
    let x = s.sample(req).unwrap();
    assert_eq!(x.procs.len(), 2);
    // Another tool moves the sleeping 100 and its thread 101; its stat says something
    // it could not say without running (more ticks, another parent).
    put(
        &t,
        "100/status",
        "Uid:	0
Cpus_allowed_list:	1
",
    );
    put(
        &t,
        "100/task/101/status",
        "Cpus_allowed_list:	0
",
    );
    put(
        &t,
        "100/cgroup",
        "0::/b
",
    );
    put(&t, "100/stat", &two(100, 99).replacen(" S 1 ", " S 7 ", 1));
    std::fs::remove_file(t.path().join("proc/200/stat")).unwrap();
    script.push(quiet(Vec::new()));
    let x = s.sample(req).unwrap();
    assert_eq!(s.last_stats.procs_refreshed, 2, "{:?}", s.last_stats);
    assert_eq!(s.last_stats.procs_reread, 0);
    let p = x.procs.iter().find(|p| p.pid == 100).expect("100");
    assert_eq!(p.allowed.to_vec(), vec![1]);
    assert_eq!(&*p.cgroup, "/b");
    let allowed: Vec<(u32, Vec<u32>)> = p
        .threads
        .iter()
        .map(|t| (t.tid, t.allowed.to_vec()))
        .collect();
    assert_eq!(allowed, vec![(100, vec![0, 1]), (101, vec![0])]);
    assert_eq!((p.ppid, p.utime_ticks), (1, 10));
    assert!(
        x.procs.iter().any(|p| p.pid == 200),
        "kernel thread dropped"
    );
    // Rule 7: its parent exits; its stat is read again and the new parent shows.
    script.push(quiet(vec![ProcEvent::Exit { pid: 1 }]));
    let x = s.sample(req).unwrap();
    let p = x.procs.iter().find(|p| p.pid == 100).expect("100");
    assert_eq!(p.ppid, 7);
    assert_eq!(s.last_stats.procs_refreshed, 1, "{:?}", s.last_stats);
}

#[test]
fn a_running_process_keeps_its_cgroup_until_refresh_but_shows_its_affinity() {
    let t = tree("cg");
    put(&t, "stat", "cpu0 1 2 3 4\n");
    put_proc(&t, 100, "w", 10);
    let mut s = Sampler::new(t.path());
    s.set_refresh_every(1000);
    let req = SampleRequest::default();
    let look = |s: &mut Sampler| {
        let p = s.sample(req).unwrap().procs.remove(0);
        (p.cgroup.to_string(), p.allowed.to_vec())
    };
    assert_eq!(look(&mut s), ("/a".to_string(), vec![0, 1]));
    put(&t, "100/cgroup", "0::/b\n");
    put(&t, "100/status", "Uid:\t0\nCpus_allowed_list:\t1\n");
    put(&t, "100/stat", &stat_line(100, "w", 1, 0, 20, 500));
    assert_eq!(look(&mut s), ("/a".to_string(), vec![1]));
    s.invalidate(100);
    assert_eq!(look(&mut s), ("/b".to_string(), vec![1]));
}

#[test]
fn wrong_root_is_an_error() {
    let mut s = Sampler::new(Path::new("/nonexistent-placer-root"));
    assert!(s.sample(SampleRequest::default()).is_err());
    assert!(!s.sources().has(SourceKind::Proc));
}

#[test]
fn this_machine_maps_a_socket_to_this_process_and_caches() {
    on_a_quiet_network(true, |mut s| {
        let req = SampleRequest {
            sockets: true,
            ..Default::default()
        };
        s.sample(req).unwrap();
        let first_scans = s.last_stats.fd_dirs_scanned;
        assert!(first_scans > 0);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_srv, _) = l.accept().unwrap();
        let me = std::process::id();
        let sample = s.sample(req).unwrap();
        let p = sample.procs.iter().find(|p| p.pid == me).unwrap();
        let cl = c.local_addr().unwrap();
        let mine: Vec<_> = sample
            .sockets
            .iter()
            .filter(|s| p.socket_inodes.contains(&s.inode))
            .filter(|s| s.local == cl || s.remote == cl)
            .collect();
        assert!(
            mine.iter().any(|s| s.local == c.local_addr().unwrap()),
            "{mine:?}"
        );
        assert_eq!(mine.len(), 2, "client and accepted socket");
        // Nothing changed: the next sample re-reads (almost) no fd directory, and keeps the
        // mapping (the last one's as it stands when neither the dump nor an fd moved).
        let mapped = |x: &Sample| {
            let p = x.procs.iter().find(|p| p.pid == me).unwrap();
            x.sockets
                .iter()
                .filter(|s| p.socket_inodes.contains(&s.inode))
                .filter(|s| s.local == cl || s.remote == cl)
                .count()
        };
        let x = s.sample(req).unwrap();
        assert!(
            s.last_stats.fd_dirs_scanned < first_scans / 2 + 3,
            "{} vs {first_scans}",
            s.last_stats.fd_dirs_scanned
        );
        assert!(!s.last_stats.full_rescan);
        assert_eq!(mapped(&x), 2);
        let mut reused = 0;
        for _ in 0..5 {
            // Some CPU ticks run: this process is read afresh while the mapping stands.
            let spin = std::time::Instant::now();
            while spin.elapsed() < std::time::Duration::from_millis(25) {
                std::hint::black_box(0u64);
            }
            let x = s.sample(req).unwrap();
            assert_eq!(mapped(&x), 2);
            reused += usize::from(s.last_stats.sockets_reused);
        }
        // Other tests' traffic may move segments in some samples, not in all.
        assert!(reused > 0, "the dump was never reused");
    });
}

#[test]
fn this_process_keeping_files_open_does_not_read_its_own_fd_list_again() {
    // Its samplers keep other processes' files open and let them go as processes come
    // and go: the process's fd count moves by hundreds with no socket among them, and
    // its own fd list (hundreds of fstat calls, then the whole mapping again) need not
    // be read. Other tests of this binary open sockets meanwhile: some attempts may
    // read it for them, not all. In a network namespace of its own: the host's own TCP
    // traffic (scripts/noise.sh) would have the dump and the mapping done every time.
    on_a_quiet_network(true, |mut s| {
        let req = SampleRequest {
            sockets: true,
            ..Default::default()
        };
        s.sample(req).unwrap();
        s.sample(req).unwrap();
        let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        let (mut spared, mut moved_most) = (0, 0);
        for _ in 0..5 {
            let before = fds();
            // Another sampler's first sample on the /proc path keeps files open.
            let mut other = Sampler::new(Path::new("/"));
            other.set_kernel_events(false);
            other.set_sock_diag(false);
            other.sample(SampleRequest::default()).unwrap();
            let moved = fds().abs_diff(before);
            moved_most = moved_most.max(moved);
            // Some CPU ticks run before each sample: the collector sees this process run,
            // and its fd count is looked at (rule 4).
            let ran = |s: &mut Sampler| {
                let spin = std::time::Instant::now();
                while spin.elapsed() < std::time::Duration::from_millis(25) {
                    std::hint::black_box(0u64);
                }
                s.sample(req).unwrap();
            };
            ran(&mut s);
            spared += usize::from(moved > 20 && !s.last_stats.own_fds_scanned);
            drop(other);
            ran(&mut s);
        }
        assert!(
            moved_most > 20,
            "the other sampler kept {moved_most} files open"
        );
        assert!(
            spared > 0,
            "this process's fd list was read again at every attempt"
        );
    });
}

/// A sampler of this machine, with the kernel's event sources or without them (then
/// every process is read each sample, an idle one from the cache), `None` (skipped)
/// without sock_diag.
fn sock_diag_sampler(events: bool) -> Option<Sampler> {
    let mut s = Sampler::new(Path::new("/"));
    s.set_kernel_events(events);
    if !s.sources().has(SourceKind::SockDiag) {
        placer_testkit::skip(&format!(
            "{:?}",
            s.sources().why_missing(SourceKind::SockDiag)
        ));
        return None;
    }
    Some(s)
}

/// Runs `f` with a sampler of this machine as [`sock_diag_sampler`] gives it, on a thread
/// of its own in a network namespace of its own (root): these tests count the samples
/// in which no segment moved, and the host's other TCP traffic moves segments in every
/// one. The kernel's event sources are opened first, here, in the host's namespace (the
/// process-events connector speaks only there). Without root, in the host's namespace.
fn on_a_quiet_network(events: bool, f: impl FnOnce(Sampler) + Send) {
    let activity = events.then(crate::activity::KernelActivity::open);
    std::thread::scope(|scope| {
        let t = scope.spawn(move || {
            if crate::sys::is_root() {
                crate::sys::unshare_net_with_loopback()
                    .expect("a network namespace of the test's own");
            }
            let mut s = Sampler::new(Path::new("/"));
            s.set_kernel_events(events);
            if let Some(a) = activity.filter(|a| a.any()) {
                s.set_activity_source(Box::new(a));
            }
            if !s.sources().has(SourceKind::SockDiag) {
                placer_testkit::skip(&format!(
                    "{:?}",
                    s.sources().why_missing(SourceKind::SockDiag)
                ));
                return;
            }
            f(s)
        });
        if let Err(panic) = t.join() {
            std::panic::resume_unwind(panic);
        }
    });
}

fn sock_diag_sampler_without_events() -> Option<Sampler> {
    sock_diag_sampler(false)
}

/// `bash -c script` (its stdin piped), killed and reaped on drop.
struct Bash(std::process::Child);

impl Bash {
    fn run(script: &str) -> Bash {
        Bash(
            std::process::Command::new("bash")
                .args(["-c", script])
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        )
    }
    /// The socket inodes its process owns in `x`.
    fn owned(&self, x: &Sample) -> Vec<u64> {
        x.procs
            .iter()
            .find(|p| p.pid == self.0.id())
            .map(|p| p.socket_inodes.clone())
            .unwrap_or_default()
    }
}

impl Drop for Bash {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_idle_process_that_closed_its_socket_owns_none_while_the_mapping_stands() {
    // While neither the dump nor an fd moves, the socket stage looks only at the
    // sockets' owners and trusts every other sample, as the cache holds it, to own
    // none. A process that closed its socket without running a whole tick keeps its
    // cached sample, and its copy without threads (they were asked for earlier) is
    // the one the stage empties: the cache must take that too, or the next samples
    // show the closed socket's inode.
    use std::io::Write;
    on_a_quiet_network(false, |mut s| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let child = Bash::run(&format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port}; read -r _ <&3; exec 3>&-; exec sleep 60"
        ));
        let pid = child.0.id();
        let (mut srv, _) = l.accept().unwrap();
        let with_threads = SampleRequest {
            sockets: true,
            threads: true,
            ..Default::default()
        };
        let without = SampleRequest {
            threads: false,
            ..with_threads
        };
        use std::time::Duration;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // Mapped in a sample with threads: the cache holds bash's threads and socket.
        while child.owned(&s.sample(with_threads).unwrap()).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "bash's socket never mapped"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        srv.write_all(b"x\n").unwrap();
        let fd3 = format!("/proc/{pid}/fd/3");
        while Path::new(&fd3).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "bash never closed its socket"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut reused = 0;
        for _ in 0..10 {
            let x = s.sample(without).unwrap();
            assert_eq!(
                child.owned(&x),
                Vec::<u64>::new(),
                "a closed socket still owned"
            );
            reused += usize::from(s.last_stats.sockets_reused && !s.last_stats.full_rescan);
        }
        // Other tests' traffic may move segments in some samples, not in all.
        assert!(reused > 0, "the dump was never reused");
    });
}

#[test]
fn without_the_collector_a_socket_a_sleeping_process_opens_is_mapped() {
    // On the /proc path only processes whose stat changed get their fd count looked
    // at: a sleeping process that wakes to open a socket is mapped either way, by its
    // fd count when its stat changed, else through the dump, whose new socket no
    // cached process owns (every fd list is read again).
    use std::io::Write;
    let Some(mut s) = sock_diag_sampler_without_events() else {
        return;
    };
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let mut child = Bash::run(&format!(
        "read -r _; exec 3<>/dev/tcp/127.0.0.1/{port}; exec sleep 60"
    ));
    let req = SampleRequest {
        sockets: true,
        ..Default::default()
    };
    for _ in 0..3 {
        assert!(child.owned(&s.sample(req).unwrap()).is_empty());
    }
    child.0.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let (_srv, _) = l.accept().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let x = loop {
        let x = s.sample(req).unwrap();
        if !child.owned(&x).is_empty() || std::time::Instant::now() > deadline {
            break x;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let owned = child.owned(&x);
    let cl = x
        .sockets
        .iter()
        .find(|k| k.remote.port() == port && owned.contains(&k.inode));
    assert!(cl.is_some(), "bash's socket not mapped: {owned:?}");
}

#[test]
fn nic_counters_from_net_dev_are_sysfs_figures() {
    // Sysfs read before, the sampler's one file after: the same interfaces, each
    // counter at least what sysfs said (they only grow) and, with this machine's
    // traffic, not far past it.
    let sys = Path::new("/sys/class/net");
    let read = |n: &str, f: &str| -> u64 {
        crate::attr::read_u64(&sys.join(n).join("statistics").join(f)).unwrap()
    };
    let mut names: Vec<String> = fs::read_dir(sys)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    let before: Vec<[u64; 4]> = names
        .iter()
        .map(|n| {
            [
                read(n, "rx_bytes"),
                read(n, "rx_packets"),
                read(n, "tx_bytes"),
                read(n, "tx_packets"),
            ]
        })
        .collect();
    let proc = Dir::open(Path::new("/proc")).unwrap();
    let got = read_nic_counters(Some(&mut Pins::default()), &proc, &mut String::new());
    let got_names: Vec<&str> = got.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        got_names,
        names.iter().map(String::as_str).collect::<Vec<_>>()
    );
    for (n, b) in got.iter().zip(&before) {
        let now = [n.rx_bytes, n.rx_packets, n.tx_bytes, n.tx_packets];
        for (x, y) in now.iter().zip(b) {
            assert!(x >= y && x - y < 1 << 30, "{}: {now:?} after {b:?}", n.name);
        }
    }
}

use placer_testkit::proc::spinner;

/// Threads of this process that spin until stopped (at most 10 s).
struct SpinThreads {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handles: Vec<std::thread::JoinHandle<u32>>,
}
impl SpinThreads {
    fn start(n: usize) -> SpinThreads {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let handles = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let tid = crate::sys::gettid();
                    let t0 = std::time::Instant::now();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed)
                        && t0.elapsed().as_secs() < 10
                    {
                        std::hint::spin_loop();
                    }
                    tid
                })
            })
            .collect();
        SpinThreads { stop, handles }
    }
    /// Stops them; their tids.
    fn stop(mut self) -> Vec<u32> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        std::mem::take(&mut self.handles)
            .into_iter()
            .map(|h| h.join().expect("spin thread"))
            .collect()
    }
}
impl Drop for SpinThreads {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn event_sampler() -> Option<Sampler> {
    let mut s = Sampler::new(Path::new("/"));
    let src = s.sources();
    if !src.has(SourceKind::Ebpf) || !src.has(SourceKind::ProcEvents) {
        placer_testkit::skip(&format!(
            "kernel event sources: {:?} / {:?}",
            src.why_missing(SourceKind::Ebpf),
            src.why_missing(SourceKind::ProcEvents)
        ));
        return None;
    }
    Some(s)
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn real_process_that_lives_between_two_samples_is_seen_and_accounted() {
    placer_testkit::require_root();
    let Some(mut s) = event_sampler() else {
        return;
    };
    let req = SampleRequest::default();
    s.sample(req).unwrap();
    s.sample(req).unwrap();
    // The truth is the kernel's own account of the child's CPU time just before it is
    // killed (schedstat, ns), not its wall time: on a loaded machine a 200 ms spinner
    // may get well under 200 ms of CPU.
    let spin = spinner();
    let pid = spin.0.id();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let truth_ns: u64 = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|t| crate::procfs::parse_schedstat(&t))
        .map(|s| s.run_ns)
        .expect("the spinner's schedstat");
    drop(spin);
    let sample = s.sample(req).unwrap();
    assert!(!sample.procs.iter().any(|p| p.pid == pid));
    let x = sample
        .exited
        .iter()
        .find(|x| x.pid == pid)
        .unwrap_or_else(|| panic!("{pid} not in {:?}", sample.exited));
    assert!(x.unsampled);
    let ns = x.cpu_ns.expect("the collector's time");
    // What it ran after the schedstat read (until the kill) is a few ms at most.
    assert!(
        ns >= truth_ns * 95 / 100 && ns <= truth_ns + 50_000_000,
        "collector {ns} ns, schedstat {truth_ns} ns"
    );
    assert!(
        truth_ns > 10_000_000,
        "the spinner hardly ran: {truth_ns} ns"
    );
    assert!(s.last_stats.procs_skipped > 0, "{:?}", s.last_stats);
}

/// Rule 3 on this machine: an idle process's refresh reads no `status` while
/// `sched_getaffinity` says what it said at its last refresh, and reads it when another
/// process changed its affinity or one of its threads'. (Threads of this test process
/// that come and go read it in full, which shows the thread's change too.)
#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn real_idle_refresh_reads_status_only_when_its_affinity_moved() {
    use crate::activity::{Activity, ScriptedActivity};
    placer_testkit::require_root();
    let mine = crate::sys::get_affinity(0).unwrap();
    let Some(first) = mine.iter().next().filter(|_| mine.len() >= 2) else {
        placer_testkit::skip("fewer than two CPUs to move a process between");
        return;
    };
    let child = placer_testkit::proc::sleeper();
    let pid = child.0.id();
    // A thread of this process that sleeps until told to stop (at most 30 s).
    let (stop, parked) = std::sync::mpsc::channel::<()>();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let sleeper = std::thread::spawn(move || {
        tid_tx.send(crate::sys::gettid()).unwrap();
        let _ = parked.recv_timeout(std::time::Duration::from_secs(30));
    });
    let tid = tid_rx.recv().unwrap();
    let mut s = Sampler::new(Path::new("/"));
    // Every process in the window, at most IDLE_REFRESH_BUDGET a sample.
    s.set_refresh_every(1);
    let script = ScriptedActivity::default();
    s.set_activity_source(Box::new(script.clone()));
    let req = SampleRequest {
        threads: true,
        ..Default::default()
    };
    // The collector's word: nothing ran (the child sleeps), nothing came or went.
    let mut sample = |s: &mut Sampler| {
        script.push(Activity {
            ran: Some(PidMap::default()),
            events: Some(Vec::new()),
            cgroup_moves: None,
        });
        s.sample(req).unwrap()
    };
    let n = sample(&mut s).procs.len();
    // A sweep takes every process through the window at least once.
    let sweep = |s: &mut Sampler, sample: &mut dyn FnMut(&mut Sampler) -> Sample| {
        let mut spared = 0;
        let mut last = None;
        for _ in 0..n.div_ceil(IDLE_REFRESH_BUDGET) + 1 {
            last = Some(sample(s));
            spared += s.last_stats.status_spared;
        }
        (spared, last.unwrap())
    };
    let allowed = |x: &Sample| {
        let me = x.procs.iter().find(|p| p.pid == std::process::id());
        (
            x.procs
                .iter()
                .find(|p| p.pid == pid)
                .map(|p| p.allowed.to_vec()),
            me.and_then(|p| p.threads.iter().find(|t| t.tid == tid))
                .map(|t| t.allowed.to_vec()),
        )
    };
    // The first sweep reads every status (nothing seen yet), the second spares them.
    let (_, x) = sweep(&mut s, &mut sample);
    assert_eq!(allowed(&x), (Some(mine.to_vec()), Some(mine.to_vec())));
    let (spared, _) = sweep(&mut s, &mut sample);
    assert!(spared > 0, "no status spared");
    let one: placer_core::CpuSet = [first].into_iter().collect();
    crate::sys::set_affinity(pid, &one).unwrap();
    crate::sys::set_affinity(tid, &one).unwrap();
    let (_, x) = sweep(&mut s, &mut sample);
    assert_eq!(allowed(&x), (Some(vec![first]), Some(vec![first])));
    let _ = stop.send(());
    sleeper.join().unwrap();
    drop(child);
}

/// Rule 3 with the kernel's count of cgroup moves: while it stands still no idle
/// process's `cgroup` is read again; after a sleeping process is moved, its new cgroup
/// shows within a sweep of the window.
#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn real_idle_refresh_reads_cgroup_only_after_a_counted_move() {
    use crate::activity::{Activity, ScriptedActivity};
    placer_testkit::require_root();
    let moves = match crate::bpf::CgroupMoves::open() {
        Ok(m) => m,
        Err(e) => {
            placer_testkit::skip(&format!("no cgroup-move counter: {e}"));
            return;
        }
    };
    let name = format!("placer-test-cgmove-{}", std::process::id());
    let Some(cg) = placer_testkit::cgroup::TestCgroup::create(&name) else {
        placer_testkit::skip("no cgroup hierarchy to move a process into");
        return;
    };
    let child = placer_testkit::proc::sleeper();
    let pid = child.0.id();
    let mut s = Sampler::new(Path::new("/"));
    s.set_refresh_every(1);
    let script = ScriptedActivity::default();
    s.set_activity_source(Box::new(script.clone()));
    let req = SampleRequest::default();
    // Nothing ran, nothing came or went; the count is the kernel's.
    let mut sample = |s: &mut Sampler| {
        script.push(Activity {
            ran: Some(PidMap::default()),
            events: Some(Vec::new()),
            cgroup_moves: Some(moves.count().unwrap()),
        });
        s.sample(req).unwrap()
    };
    let n = sample(&mut s).procs.len();
    let sweep = |s: &mut Sampler, sample: &mut dyn FnMut(&mut Sampler) -> Sample| {
        let (mut refreshed, mut spared) = (0, 0);
        let mut last = None;
        for _ in 0..n.div_ceil(IDLE_REFRESH_BUDGET) + 1 {
            last = Some(sample(s));
            refreshed += s.last_stats.procs_refreshed;
            spared += s.last_stats.cgroup_spared;
        }
        (refreshed, spared, last.unwrap())
    };
    let cgroup_of = |x: &Sample| {
        x.procs
            .iter()
            .find(|p| p.pid == pid)
            .map(|p| p.cgroup.to_string())
    };
    // Other tests move processes meanwhile (the count then moves and files are read,
    // as they must be): a sweep with nothing moved spares cgroup files (kernel threads
    // in the window read none to spare), and the count is checked to have stood still
    // through it.
    let t = std::time::Instant::now();
    loop {
        let c0 = moves.count().unwrap();
        let (refreshed, spared, _) = sweep(&mut s, &mut sample);
        if moves.count().unwrap() == c0 {
            assert!(spared > 0, "{spared} of {refreshed}");
            break;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "cgroups never still"
        );
    }
    let before = cgroup_of(&sample(&mut s)).expect("the child is sampled");
    assert_ne!(before, cg.path);
    let c0 = moves.count().unwrap();
    cg.enter(pid).unwrap();
    assert!(moves.count().unwrap() > c0, "the move was not counted");
    let (_, _, x) = sweep(&mut s, &mut sample);
    assert_eq!(cgroup_of(&x), Some(cg.path.clone()));
    drop(child);
}

/// A process's `stat` read through the file kept open shows its CPU time growing (the
/// text is made anew at each read), and the file is let go when the process is gone.
#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn real_stat_kept_open_is_read_anew_and_let_go_at_exit() {
    placer_testkit::require_root();
    let mut s = Sampler::new(Path::new("/"));
    s.set_kernel_events(false);
    let spin = spinner();
    let pid = spin.0.id();
    let req = SampleRequest::default();
    let ticks = |x: &Sample| {
        x.procs
            .iter()
            .find(|p| p.pid == pid)
            .map(|p| p.utime_ticks + p.stime_ticks)
    };
    let first = ticks(&s.sample(req).unwrap()).expect("sampled");
    let pinned = |s: &Sampler| s.cache.procs.stat_pins.as_ref().unwrap().contains_key(&pid);
    assert!(pinned(&s));
    // Spinning: its ticks grow, read through the same file (bounded wait).
    let t = std::time::Instant::now();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let now = ticks(&s.sample(req).unwrap()).expect("sampled");
        if now > first {
            break;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "{now} ticks"
        );
    }
    assert!(pinned(&s));
    drop(spin);
    let x = s.sample(req).unwrap();
    assert_eq!(ticks(&x), None, "gone");
    assert!(!pinned(&s), "its file let go");
}

/// Rule 8 on this machine: a sleeping single-threaded process is soon spared its
/// `stat`, and then holds a kept-open `schedstat` and no kept-open `stat` (the room
/// is the `schedstat` files'); within [`PINS_MAX`] in all.
#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn real_a_process_rule8_spares_lets_its_stat_go() {
    placer_testkit::require_root();
    let mut s = Sampler::new(Path::new("/"));
    s.set_kernel_events(false);
    let sleeper = placer_testkit::proc::sleeper();
    let pid = sleeper.0.id();
    let req = SampleRequest::default();
    let pinned = |s: &Sampler| {
        let has =
            |p: &Option<PidMap<crate::sys::PinnedFile>>| p.as_ref().unwrap().contains_key(&pid);
        (
            has(&s.cache.procs.stat_pins),
            has(&s.cache.procs.schedstat_pins),
        )
    };
    s.sample(req).unwrap();
    assert!(pinned(&s).0, "read in full first");
    // Its schedstat is learned at its second read; from the third it is spared unless
    // due (once in `refresh_every` samples): within 12 samples it is.
    let mut seen = Vec::new();
    for _ in 0..12 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        s.sample(req).unwrap();
        let n = s.cache.procs.stat_pins.as_ref().unwrap().len()
            + s.cache.procs.schedstat_pins.as_ref().unwrap().len();
        assert!(n <= procs::PINS_MAX, "{n} files kept open");
        seen.push(pinned(&s));
        if pinned(&s) == (false, true) {
            return;
        }
    }
    panic!("never spared with only its schedstat kept open: {seen:?}");
}

/// Set, [`rule9_child`] runs the test below's checks (in the pid namespace it made).
const RULE9_CHILD_ENV: &str = "PLACER_SAMPLER_RULE9_CHILD";

/// Rule 9 on this machine: without the connector, a process started between two
/// samples is in the second (its pid moved loadavg's last pid: /proc is listed), one
/// that exited is not, and while no task is created the sample does not list /proc.
/// In a pid namespace of its own (this test binary re-run under `unshare`, with its own
/// /proc): the quiet moment needs no fork anywhere in the namespace whose last pid
/// loadavg shows, and on a host with a fork loop beside it the host's never has one.
#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn real_without_events_a_new_process_is_listed_and_a_quiet_machine_is_not() {
    placer_testkit::require_root();
    if let Some(why) = placer_testkit::missing_tool(&["unshare"]) {
        placer_testkit::skip(&why);
        return;
    }
    let out = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sampler::tests::rule9_child",
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(RULE9_CHILD_ENV, "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // The child ran the checks (a filter that matched nothing would pass too).
    assert!(text.contains("1 passed"), "{text}");
}

/// The child half of the test above: rule 9's checks, in the pid namespace it made.
#[test]
#[ignore = "the child half of real_without_events_a_new_process_is_listed_and_a_quiet_machine_is_not"]
fn rule9_child() {
    if std::env::var_os(RULE9_CHILD_ENV).is_none() {
        return;
    }
    let mut s = Sampler::new(Path::new("/"));
    s.set_kernel_events(false);
    let req = SampleRequest::default();
    let has = |x: &Sample, pid: u32| x.procs.iter().any(|p| p.pid == pid);
    s.sample(req).unwrap();
    assert!(
        s.sources.last_pid_ours,
        "this /proc is placer's pid namespace's"
    );
    let sleeper = placer_testkit::proc::sleeper();
    let pid = sleeper.0.id();
    let x = s.sample(req).unwrap();
    assert!(s.last_stats.listed && has(&x, pid), "{:?}", s.last_stats);
    drop(sleeper);
    assert!(!has(&s.sample(req).unwrap(), pid), "gone");
    // A quiet moment (nothing forked on the machine between two samples) comes within
    // a few samples; then the set is the cached one.
    let t = std::time::Instant::now();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let x = s.sample(req).unwrap();
        if !s.last_stats.listed {
            assert_eq!(x.procs.len(), s.cache.last_alive.len());
            assert!(x.procs.iter().any(|p| p.pid == std::process::id()));
            break;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "listed at every sample for 20 s"
        );
    }
}

/// Without threads, a full read notes what sched_getaffinity says: the process's
/// first refresh already spares its `status`.
#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn real_first_refresh_after_a_full_read_spares_status() {
    use crate::activity::{Activity, ScriptedActivity};
    placer_testkit::require_root();
    let mut s = Sampler::new(Path::new("/"));
    let script = ScriptedActivity::default();
    s.set_activity_source(Box::new(script.clone()));
    let quiet = || Activity {
        ran: Some(PidMap::default()),
        events: Some(Vec::new()),
        cgroup_moves: None,
    };
    let req = SampleRequest::default();
    s.set_refresh_every(1);
    script.push(quiet());
    let n = s.sample(req).unwrap().procs.len();
    // One sweep: every process refreshed once (kernel threads, first by pid, read
    // nothing and spare nothing).
    let (mut refreshed, mut spared) = (0, 0);
    for _ in 0..n.div_ceil(IDLE_REFRESH_BUDGET) {
        script.push(quiet());
        s.sample(req).unwrap();
        refreshed += s.last_stats.procs_refreshed;
        spared += s.last_stats.status_spared;
    }
    assert!(refreshed > 0, "none of {n} refreshed");
    assert!(spared > 0, "{spared} of {refreshed} spared");
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn real_event_path_observes_what_the_proc_path_does() {
    placer_testkit::require_root();
    let Some(mut ev) = event_sampler() else {
        return;
    };
    let mut scan = Sampler::new(Path::new("/"));
    scan.set_kernel_events(false);
    assert!(!scan.sources().has(SourceKind::Ebpf));
    let req = SampleRequest {
        threads: true,
        ..Default::default()
    };
    // A steady load: a spinner for the whole window, and two spinning threads here
    // (the event path takes their times from the collector, the scan from their stat).
    let spin = spinner();
    let spin_pid = spin.0.id();
    let spin_start = crate::pid::start_time_ticks(Path::new("/"), spin_pid).unwrap();
    let threads = SpinThreads::start(2);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (e0, s0) = (ev.sample(req).unwrap(), scan.sample(req).unwrap());
    let (e1, s1) = (ev.sample(req).unwrap(), scan.sample(req).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (e2, s2) = (ev.sample(req).unwrap(), scan.sample(req).unwrap());
    let _ = (e0, s0);
    assert!(ev.last_stats.procs_skipped > 0, "{:?}", ev.last_stats);
    let (oe, os) = (
        placer_core::Observation::new(&e1, &e2),
        placer_core::Observation::new(&s1, &s2),
    );
    let tids = threads.stop();
    // The two paths read one after the other, so their windows differ at each end by
    // the time between their reads; on a busy host (scripts/noise.sh) that is tens of
    // ms. So compare CPU seconds over each path's own window, allowing what a task at
    // `max_cpus` could run in those gaps, the /proc path's resolution (a tick at each
    // end) and 5%. The floors only say the spinners ran (three of them share the CPUs
    // with the rest of the test suite and a busy host's hogs: 4% of a CPU was seen).
    let gaps_s = (s1.time_ns.abs_diff(e1.time_ns) + s2.time_ns.abs_diff(e2.time_ns)) as f64 / 1e9;
    let ticks_s = 2.0 / f64::from(s2.clk_tck);
    let agree = |a_share: f64, b_share: f64, max_cpus: f64| {
        let (a, b) = (a_share * oe.interval_s, b_share * os.interval_s);
        a_share > 0.01 && (a - b).abs() <= 0.05 * b + ticks_s + max_cpus * gaps_s
    };
    let share = |o: &placer_core::Observation, pid: u32| {
        o.procs.iter().find(|p| p.pid == pid).map(|p| p.cpu_share)
    };
    let (a, b) = (share(&oe, spin_pid).unwrap(), share(&os, spin_pid).unwrap());
    assert!(agree(a, b, 1.0), "spinner {a} vs {b} (gaps {gaps_s} s)");
    let thread_share = |o: &placer_core::Observation, tid: u32| {
        o.proc(std::process::id())
            .and_then(|p| p.threads.iter().find(|t| t.tid == tid))
            .map_or(0.0, |t| t.cpu_share)
    };
    for tid in tids {
        let (a, b) = (thread_share(&oe, tid), thread_share(&os, tid));
        assert!(
            agree(a, b, 1.0),
            "thread {tid}: {a} vs {b} (gaps {gaps_s} s)"
        );
    }
    assert!(
        ev.last_stats.threads_from_collector > 0,
        "{:?}",
        ev.last_stats
    );
    let total = |o: &placer_core::Observation| o.procs.iter().map(|p| p.cpu_share).sum::<f64>();
    let (ta, tb) = (total(&oe), total(&os));
    let cpus = s2.cpus.len().max(1) as f64;
    assert!(
        agree(ta, tb, cpus),
        "all processes {ta} vs {tb} (gaps {gaps_s} s)"
    );
    // The same processes, but for those born or gone between the two paths' reads: one
    // only the event path saw has exited since; one only the scan saw is younger than
    // the spinner (a fork loop beside the test makes many of both).
    let keys = |x: &Sample| {
        x.procs
            .iter()
            .map(|p| (p.pid, p.start_time_ticks))
            .collect::<std::collections::BTreeSet<_>>()
    };
    let (ka, kb) = (keys(&e2), keys(&s2));
    for &(pid, start) in ka.difference(&kb) {
        assert_ne!(
            crate::pid::start_time_ticks(Path::new("/"), pid),
            Some(start),
            "pid {pid}: seen by the event path only, and still alive"
        );
    }
    for &(pid, start) in kb.difference(&ka) {
        assert!(
            start >= spin_start,
            "pid {pid} (started at tick {start}, before the test's spinner at \
             {spin_start}): seen by the scan only"
        );
    }
    drop(spin);
}

/// Set, [`threads_child`] runs as the child of the test below.
const THREADS_CHILD_ENV: &str = "PLACER_SAMPLER_THREADS_CHILD";
/// Each worker's CPU time, by its own clock: different, so a time given to the wrong
/// thread shows, and each well over the comparison's tolerance.
const WORKER_NS: [u64; 3] = [100_000_000, 200_000_000, 300_000_000];

/// The child half of [`real_collector_thread_times_are_what_their_files_say`] (this
/// test binary re-run): three workers that wait for a line on stdin, each spin to its
/// own CPU time of [`WORKER_NS`], then wait, blocked, until the process ends.
#[test]
#[ignore = "the child half of real_collector_thread_times_are_what_their_files_say"]
fn threads_child() {
    use std::io::BufRead;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};
    if std::env::var_os(THREADS_CHILD_ENV).is_none() {
        return;
    }
    let (done_tx, done_rx) = mpsc::channel();
    let (mut gos, mut tids) = (Vec::new(), Vec::new());
    for target_ns in WORKER_NS {
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (tid_tx, tid_rx) = mpsc::channel();
        let done = done_tx.clone();
        std::thread::spawn(move || {
            tid_tx.send(crate::sys::gettid()).unwrap();
            if go_rx.recv_timeout(Duration::from_secs(30)).is_err() {
                return;
            }
            let (t0, c0) = (Instant::now(), crate::sys::thread_cpu_ns());
            while crate::sys::thread_cpu_ns() - c0 < target_ns
                && t0.elapsed() < Duration::from_secs(20)
            {
                std::hint::spin_loop();
            }
            let _ = done.send(());
            // Alive (blocked) until the process ends: the thread count stays.
            let _ = go_rx.recv_timeout(Duration::from_secs(30));
        });
        tids.push(tid_rx.recv().unwrap());
        gos.push(go_tx);
    }
    println!("TIDS {tids:?}");
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    let _ = stdin.read_line(&mut line);
    for go in &gos {
        let _ = go.send(());
    }
    for _ in &gos {
        let _ = done_rx.recv_timeout(Duration::from_secs(25));
    }
    println!("DONE");
    // Until the test kills it (or closes stdin by dying).
    let _ = stdin.read_line(&mut line);
}

/// Issue 37 item 1: with the collector, each thread's cumulative `cpu_ns` as the sampler
/// keeps it (its files read once, then advanced by the collector's time: rule 6) is
/// what the thread's own files say, within the kernel's accounting granularity.
#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn real_collector_thread_times_are_what_their_files_say() {
    use std::io::{BufRead, Write};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};
    placer_testkit::require_root();
    let _one = crate::bpf::tests::REAL
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let Some(mut s) = event_sampler() else {
        return;
    };
    // The files' figure: the thread's run time, exact ns (what its `stat` ticks are
    // cut from).
    let run_ns = |pid: u32, tid: u32| {
        fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
            .ok()
            .and_then(|t| crate::procfs::parse_schedstat(&t))
            .map(|s| s.run_ns)
    };
    if run_ns(std::process::id(), crate::sys::gettid()).is_none() {
        placer_testkit::skip("no task schedstat (CONFIG_SCHED_INFO)");
        return;
    }
    // The child on one CPU: its threads take turns, and that CPU's /proc/stat bounds
    // the time its run times leave out (below).
    let cpu = crate::sys::get_affinity(0)
        .unwrap()
        .iter()
        .last()
        .expect("an allowed CPU");
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "sampler::tests::threads_child",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(THREADS_CHILD_ENV, "1")
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped());
    crate::sys::set_affinity_on_spawn(&mut cmd, &[cpu].into_iter().collect()).unwrap();
    let mut child = placer_testkit::proc::KillOnDrop(
        placer_testkit::proc::die_with_parent(&mut cmd)
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let out = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let (line_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(|l| l.ok()) {
            if line_tx.send(l).is_err() {
                break;
            }
        }
    });
    // The child's first line with `prefix`, from there (libtest writes the test's
    // name before it), waiting at most `wait`.
    let line = |prefix: &str, wait: Duration| {
        let end = Instant::now() + wait;
        while let Ok(l) = lines.recv_timeout(end.saturating_duration_since(Instant::now())) {
            if let Some(at) = l.find(prefix) {
                return Some(l[at..].to_string());
            }
        }
        None
    };
    let workers: Vec<u32> = line("TIDS ", Duration::from_secs(10))
        .expect("the child's thread ids")
        .trim_start_matches("TIDS [")
        .trim_end_matches(']')
        .split(", ")
        .map(|t| t.parse().unwrap())
        .collect();
    assert_eq!(workers.len(), WORKER_NS.len());
    let req = SampleRequest {
        threads: true,
        ..Default::default()
    };
    let child_of = |x: &Sample| x.procs.iter().find(|p| p.pid == pid).cloned();
    // The first read of its threads, while they wait: the start of each `cpu_ns` is
    // their ticks then, with no time of a running thread between the collector's drain
    // and the files.
    let (first, start) = s
        .sample(req)
        .ok()
        .and_then(|x| Some((child_of(&x)?, x)))
        .expect("the child in the sample after it started");
    for tid in &workers {
        assert!(
            first.threads.iter().any(|t| t.tid == *tid),
            "{tid} not read"
        );
    }
    child.0.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    // Samples while the workers spin, until one taken after they all stopped (then
    // blocked: the collector has all their time, and the files stay as they are).
    let tick_ns = 1_000_000_000 / u64::from(start.clk_tck);
    let t0 = Instant::now();
    // Samples in which rule 6 gave the child's threads: a figure more than the
    // truncation (2 ticks) ahead of the thread's ticks in the same sample, which were
    // then not read again (a refresh reads them, and the figure goes on all the same).
    let (mut via_rule_6, mut stopped) = (0, false);
    let last = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(25),
            "the child's workers did not finish"
        );
        let x = s.sample(req).unwrap();
        let ahead = |t: &placer_core::sample::ThreadSample| {
            t.cpu_ns.unwrap_or(0) > (t.utime_ticks + t.stime_ticks + 2) * tick_ns
        };
        if s.last_stats.threads_from_collector > 0
            && child_of(&x).is_some_and(|p| p.threads.iter().any(ahead))
        {
            via_rule_6 += 1;
        }
        // A sample whose drain was lost (the map filled: a fork flood beside the test)
        // gives no collector figures, honestly; the next one starts them again from
        // the threads' files.
        let figures = child_of(&x).is_some_and(|p| p.threads.iter().all(|t| t.cpu_ns.is_some()));
        if stopped && figures {
            break x;
        }
        stopped = stopped || line("DONE", Duration::from_millis(100)).is_some();
    };
    assert!(via_rule_6 > 0, "rule 6 never gave the child's threads");
    let now = child_of(&last).expect("the child in the last sample");
    // Tolerance, in USER_HZ ticks. Under: the first figure is the thread's `stat`
    // utime + stime, each cut to whole ticks from its run time (2), and an increment
    // the collector adds between a drain's lookup and its delete is lost (at most one
    // scheduler tick, 1). Over: the collector counts wall time between switches, the
    // kernel's run time leaves out steal time (and with IRQ_TIME_ACCOUNTING interrupt
    // time): at most what the child's CPU's /proc/stat gives for those in the window,
    // each field cut to whole ticks (3). Cumulative figures of threads that no longer
    // run: how busy the machine is changes none of this.
    let on_cpu = |x: &Sample| {
        let c = x
            .cpus
            .iter()
            .find(|c| c.cpu == cpu)
            .expect("the child's CPU");
        c.steal + c.irq + c.softirq
    };
    let under_ns = 3 * tick_ns;
    let over_ns = (on_cpu(&last) - on_cpu(&start) + 3) * tick_ns;
    assert_eq!(now.threads.len(), first.threads.len());
    for t in now.threads.iter() {
        let got = t.cpu_ns.expect("the collector's figure");
        let truth = run_ns(pid, t.tid).expect("the thread's schedstat");
        assert!(
            got + under_ns >= truth && got <= truth + over_ns,
            "thread {}: sampler {got} ns, schedstat {truth} ns (-{under_ns}/+{over_ns})",
            t.tid
        );
    }
    for (tid, want_ns) in workers.iter().zip(WORKER_NS) {
        let truth = run_ns(pid, *tid).unwrap();
        assert!(truth >= want_ns, "worker {tid} ran {truth} ns of {want_ns}");
    }
    drop(child);
}
