//! Finds the other agents that manage IRQ affinity or cpufreq under a root
//! ([`placer_core::coexist`] decides what placer does about them):
//! - processes by their `comm` (`ROOT/proc/PID/stat`, zombies left out): irqbalance,
//!   tuned, tuned-ppd, power-profiles-daemon, auto-cpufreq, each only when it is what that
//!   agent is (run by root from a root-owned program of a system directory, [`impostor`]);
//! - cpufreq policies whose governor is not the kernel's default and not one placer set
//!   (the journal's governor knobs, passed in). The default is `cpufreq.default_governor=`
//!   on the kernel command line, else the kernel config's `CONFIG_CPU_FREQ_DEFAULT_GOV_*`
//!   (`ROOT/boot/config-RELEASE`); an active-mode P-state driver (intel_pstate,
//!   amd-pstate-epp) offers only `performance` and `powersave` and starts in `powersave`
//!   unless that default is `performance`. Where the default cannot be known, governors
//!   are not judged (a guess would take caps away from a host nobody else manages).

use placer_core::coexist::{Agent, AgentKind, Coexistence, ForeignGovernor};
use std::collections::BTreeSet;
use std::path::Path;

/// Who else manages IRQ affinity or cpufreq under `root`; `placer_governors`: the cpufreq
/// policies whose governor placer set (its journal).
pub fn detect(root: &Path, placer_governors: &BTreeSet<u32>) -> Coexistence {
    Detector::default().detect(root, placer_governors)
}

/// [`detect`] for a daemon that asks at every topology refresh: most looks list /proc and
/// read only new pids and the agents found before (still alive, not a zombie); every
/// [`FULL_LOOK_EVERY`]th reads every process, for one that became an agent by exec under
/// the same pid (a wrapper script's `exec irqbalance`).
#[derive(Default)]
pub struct Detector {
    /// Pids seen at the previous look, and the agent each one is (None: not one).
    seen: crate::pid::PidMap<Option<AgentKind>>,
    looks: u64,
    /// Impostors already logged (name, reason), so that one restarted or flapping is
    /// logged once, not at every look.
    logged: BTreeSet<(AgentKind, String)>,
}

/// Impostor reasons remembered for logging once; beyond this many, no more are logged.
const MAX_LOGGED: usize = 256;

/// One look in this many reads every process.
pub const FULL_LOOK_EVERY: u64 = 6;

impl Detector {
    /// The agents among processes already read, as `(pid, comm, state)`, and the foreign
    /// governors under `root`. The daemon's sampler holds every process's last `stat`, so
    /// a topology refresh reads no file of a process not named like an agent: a comm
    /// changes by an exec (the sampler reads such a process in full at once) or by the
    /// process itself (it ran, and was read again).
    pub fn among<'a>(
        &mut self,
        root: &Path,
        procs: impl Iterator<Item = (u32, &'a str, char)>,
        placer_governors: &BTreeSet<u32>,
    ) -> Coexistence {
        let mut agents: Vec<Agent> = procs
            .filter(|(_, _, state)| !matches!(state, 'Z' | 'X'))
            .filter_map(|(pid, comm, _)| {
                let kind = AgentKind::from_comm(comm)?;
                self.vetted(root, pid, kind).then_some(Agent { kind, pid })
            })
            .collect();
        agents.sort_by_key(|a| (a.kind, a.pid));
        Coexistence {
            agents,
            foreign_governors: foreign_governors(root, placer_governors),
        }
    }

    /// Whether `pid`, named like `kind`, is what that agent is ([`impostor`]); an impostor
    /// is logged the first time it (or another with its name and reason) is seen.
    fn vetted(&mut self, root: &Path, pid: u32, kind: AgentKind) -> bool {
        let Some(why) = impostor(root, pid, kind) else {
            return true;
        };
        if self.logged.len() < MAX_LOGGED && self.logged.insert((kind, why.clone())) {
            tracing::warn!(
                "pid {pid} is named {} but {why}: not taken for that agent",
                kind.name()
            );
        }
        false
    }

    pub fn detect(&mut self, root: &Path, placer_governors: &BTreeSet<u32>) -> Coexistence {
        let pids = crate::pid::process_ids(root).unwrap_or_default();
        let full = self.looks.is_multiple_of(FULL_LOOK_EVERY);
        self.looks += 1;
        let mut seen: crate::pid::PidMap<Option<AgentKind>> = Default::default();
        let mut agents = Vec::new();
        for pid in pids {
            let kind = match self.seen.get(&pid) {
                Some(None) if !full => None,
                // New, an agent before (it may have exited since), or a full look.
                _ => agent_of(root, pid).filter(|&k| self.vetted(root, pid, k)),
            };
            if let Some(kind) = kind {
                agents.push(Agent { kind, pid });
            }
            seen.insert(pid, kind);
        }
        self.seen = seen;
        agents.sort_by_key(|a| (a.kind, a.pid));
        Coexistence {
            agents,
            foreign_governors: foreign_governors(root, placer_governors),
        }
    }
}

/// The agent process `pid` is, if it is one and alive.
fn agent_of(root: &Path, pid: u32) -> Option<AgentKind> {
    let stat = crate::attr::read(&root.join(format!("proc/{pid}/stat")))?;
    let st = crate::procfs::parse_pid_stat(&stat)?;
    // A zombie no longer manages anything (its parent has not reaped it yet).
    if matches!(st.state, 'Z' | 'X') {
        return None;
    }
    AgentKind::from_comm(&st.comm)
}

/// Directories whose programs are the system's (the package manager's, root's alone).
const SYSTEM_DIRS: [&str; 4] = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"];
/// Trees whose programs are the system's (helpers, interpreters, snaps).
const SYSTEM_TREES: [&str; 4] = ["/usr/lib/", "/usr/libexec/", "/lib/", "/snap/"];

/// Why process `pid` under `root`, named like `kind`, is not that agent (None: it may be):
/// an agent runs as root (real and effective uid 0), from a root-owned executable in a
/// system directory that nobody else may write, and where systemd manages the services
/// (`ROOT/run/systemd/system` exists), in that agent's unit (`tuned.service`). A name is
/// anyone's to take; these are not. Where placer may not read the executable's link
/// (`placer top` as a user), the uid (and the unit) decide; without systemd (this VM's
/// init), uid and executable.
pub fn impostor(root: &Path, pid: u32, kind: AgentKind) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let proc = root.join(format!("proc/{pid}"));
    let status = crate::attr::read(&proc.join("status"))?;
    let uids: Vec<&str> = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    match uids.as_slice() {
        [real, effective, ..] if *real == "0" && *effective == "0" => {}
        [real, ..] => return Some(format!("runs as uid {real}, not root")),
        [] => return Some("has no uid in its status".into()),
    }
    let exe = proc.join("exe");
    let link = match std::fs::read_link(&exe) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return None,
        Err(e) => return Some(format!("its executable cannot be read ({e})")),
    };
    let text = link.to_string_lossy();
    // A program upgraded under a running daemon reads "(deleted)"; its inode still counts.
    let path = Path::new(text.strip_suffix(" (deleted)").unwrap_or(&text));
    let plain = path.is_absolute()
        && path
            .components()
            .all(|c| !matches!(c, std::path::Component::ParentDir));
    let in_system = plain
        && (path
            .parent()
            .is_some_and(|d| SYSTEM_DIRS.iter().any(|s| d == Path::new(s)))
            || SYSTEM_TREES.iter().any(|t| path.starts_with(t)));
    if !in_system {
        return Some(format!(
            "runs {}, not a program of a system directory",
            path.display()
        ));
    }
    match std::fs::metadata(&exe) {
        Ok(m) if m.is_file() && m.uid() == 0 && m.mode() & 0o022 == 0 => {
            unit_check(root, pid, kind)
        }
        Ok(_) => Some(format!(
            "runs {}, which is not a root-owned file only root may change",
            path.display()
        )),
        Err(e) => Some(format!("its executable cannot be read ({e})")),
    }
}

/// Where systemd manages the services, why `pid` is not in `kind`'s unit (None: it is, or
/// there is no systemd to ask).
fn unit_check(root: &Path, pid: u32, kind: AgentKind) -> Option<String> {
    // sd_booted(3)'s test: systemd is the init that runs the services.
    if !root.join("run/systemd/system").is_dir() {
        return None;
    }
    let Some(text) = crate::attr::read(&root.join(format!("proc/{pid}/cgroup"))) else {
        return Some("its cgroup cannot be read".into());
    };
    let want = format!("{}.service", kind.name());
    let cgroup = crate::procfs::systemd_cgroup(&text).unwrap_or("");
    match crate::procfs::service_unit(cgroup) {
        Some(unit) if unit == want => None,
        Some(unit) => Some(format!("runs in the unit {unit}, not {want}")),
        None => Some(format!(
            "runs outside any service unit (cgroup {cgroup:?}), not in {want}"
        )),
    }
}

/// [`detect`], with the governors placer set read from the journal in `state_dir`
/// (read-only: a dry run creates no state dir; an unreadable journal counts as none).
pub fn detect_beside(root: &Path, state_dir: &Path) -> Coexistence {
    Detector::default().detect(root, &placer_governors(state_dir))
}

/// The cpufreq policies whose governor placer's journal in `state_dir` says it set.
pub fn placer_governors(state_dir: &Path) -> BTreeSet<u32> {
    crate::journal::Journal::load(state_dir)
        .map(|j| {
            j.entries()
                .iter()
                .filter_map(|e| match e.knob {
                    crate::journal::Knob::CpufreqGovernor { domain } => Some(domain),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The kernel's default governor under `root`, None when it cannot be known.
pub fn default_governor(root: &Path) -> Option<String> {
    let cmdline = crate::attr::read(&root.join("proc/cmdline")).unwrap_or_default();
    if let Some(g) = cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix("cpufreq.default_governor="))
    {
        return Some(g.to_string());
    }
    let release = crate::attr::read(&root.join("proc/sys/kernel/osrelease"))?;
    let config = std::fs::read_to_string(root.join(format!("boot/config-{release}"))).ok()?;
    config.lines().find_map(|l| {
        l.strip_prefix("CONFIG_CPU_FREQ_DEFAULT_GOV_")?
            .strip_suffix("=y")
            .map(str::to_ascii_lowercase)
    })
}

/// Drivers that are their own governor: only `performance` and `powersave`, starting in
/// `powersave` unless the kernel's default is `performance`.
const ACTIVE_PSTATE_DRIVERS: [&str; 2] = ["intel_pstate", "amd-pstate-epp"];

fn foreign_governors(root: &Path, placer_governors: &BTreeSet<u32>) -> Vec<ForeignGovernor> {
    let base = root.join("sys/devices/system/cpu/cpufreq");
    let Ok(rd) = std::fs::read_dir(&base) else {
        return Vec::new();
    };
    let mut domains: Vec<u32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("policy")?.parse().ok())
        .filter(|d| !placer_governors.contains(d))
        .collect();
    if domains.is_empty() {
        return Vec::new();
    }
    domains.sort_unstable();
    let Some(kernel_default) = default_governor(root) else {
        return Vec::new();
    };
    domains
        .into_iter()
        .filter_map(|domain| {
            let dir = base.join(format!("policy{domain}"));
            let governor = crate::attr::read(&dir.join("scaling_governor"))?;
            let driver = crate::attr::read(&dir.join("scaling_driver")).unwrap_or_default();
            let default = if ACTIVE_PSTATE_DRIVERS.contains(&driver.as_str())
                && kernel_default != "performance"
            {
                "powersave".to_string()
            } else {
                kernel_default.clone()
            };
            (governor != default).then_some(ForeignGovernor {
                domain,
                governor,
                default,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use placer_testkit::TempDir;

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn policy(root: &Path, domain: u32, governor: &str, driver: &str) {
        let d = format!("sys/devices/system/cpu/cpufreq/policy{domain}");
        put(
            root,
            &format!("{d}/scaling_governor"),
            &format!("{governor}\n"),
        );
        put(root, &format!("{d}/scaling_driver"), &format!("{driver}\n"));
    }

    /// Processes (pid, comm, state) and the agents among them.
    const PROCS: [(u32, &str, char); 7] = [
        (1, "systemd", 'S'),
        (412, "irqbalance", 'S'),
        (812, "power-profiles-", 'D'),
        (900, "tuned", 'R'),
        (901, "irqbalance-x", 'S'),
        // Exited, not reaped yet; dead.
        (902, "irqbalance", 'Z'),
        (903, "irqbalance", 'X'),
    ];
    const AGENTS: [(AgentKind, u32); 3] = [
        (AgentKind::Irqbalance, 412),
        (AgentKind::Tuned, 900),
        (AgentKind::PowerProfilesDaemon, 812),
    ];

    /// What makes `pid` pass for a system program: uid `uid` and its executable `exe`.
    fn runs(root: &Path, pid: u32, uid: u32, exe: &str) {
        put(
            root,
            &format!("proc/{pid}/status"),
            &format!("Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
        );
        let link = root.join(format!("proc/{pid}/exe"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(exe, link).unwrap();
    }

    /// A root-owned program of a system directory that every Linux has.
    const SYSTEM_PROGRAM: &str = "/usr/bin/env";

    /// Every process of [`PROCS`] a system program run by root.
    fn all_system(root: &Path) {
        for (pid, ..) in PROCS {
            runs(root, pid, 0, SYSTEM_PROGRAM);
        }
    }

    fn kinds(c: &Coexistence) -> Vec<(AgentKind, u32)> {
        c.agents.iter().map(|a| (a.kind, a.pid)).collect()
    }

    #[test]
    fn finds_agents_by_comm_and_ignores_the_rest() {
        let t = TempDir::new("coexist-procs");
        let r = t.path();
        let stat = |pid: u32, comm: &str, state: char| {
            format!(
                "{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100\n"
            )
        };
        for (pid, comm, state) in PROCS {
            put(r, &format!("proc/{pid}/stat"), &stat(pid, comm, state));
        }
        all_system(r);
        // Not a process: no number.
        put(r, "proc/self/stat", &stat(7, "irqbalance", 'S'));
        let c = detect(r, &BTreeSet::new());
        assert_eq!(kinds(&c), AGENTS);
        assert!(c.foreign_governors.is_empty(), "no cpufreq here");
        assert!(detect(&r.join("nonexistent"), &BTreeSet::new()).is_empty());
    }

    #[test]
    fn agents_among_known_processes_by_comm_without_zombies() {
        let t = TempDir::new("coexist-among");
        all_system(t.path());
        let c = Detector::default().among(t.path(), PROCS.into_iter(), &BTreeSet::new());
        assert_eq!(kinds(&c), AGENTS);
    }

    /// Issue 48: a process named like an agent is one only when run by root from a
    /// root-owned program of a system directory that only root may change.
    #[test]
    fn a_process_named_like_an_agent_is_ignored_unless_it_is_a_system_program_run_by_root() {
        let t = TempDir::new("coexist-impostor");
        let r = t.path();
        for (pid, comm, state) in PROCS {
            put(
                r,
                &format!("proc/{pid}/stat"),
                &format!("{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100\n"),
            );
        }
        all_system(r);
        // A user's own copy, and a program outside the system's directories.
        let own = r.join("tuned");
        std::fs::write(&own, "#!/bin/sh\n").unwrap();
        let own = own.to_str().unwrap().to_string();
        runs(r, 412, 65534, SYSTEM_PROGRAM);
        runs(r, 812, 0, &own);
        runs(r, 900, 0, "/usr/bin/../../tmp/tuned");
        let mut d = Detector::default();
        assert!(d
            .among(r, PROCS.into_iter(), &BTreeSet::new())
            .agents
            .is_empty());
        assert!(impostor(r, 412, AgentKind::Irqbalance)
            .unwrap()
            .contains("uid 65534"));
        assert!(impostor(r, 812, AgentKind::PowerProfilesDaemon)
            .unwrap()
            .contains("system directory"));
        assert!(impostor(r, 900, AgentKind::Tuned)
            .unwrap()
            .contains("system directory"));
        assert_eq!(d.detect(r, &BTreeSet::new()).agents, vec![]);
        // Run by root from the system's program, each is one again.
        all_system(r);
        assert_eq!(
            kinds(&Detector::default().detect(r, &BTreeSet::new())),
            AGENTS
        );
    }

    /// Issue 48: where systemd runs the services, an agent is also in its own unit; a
    /// root-run copy elsewhere (a login session, another unit) is not that agent. Without
    /// systemd, uid and executable decide.
    #[test]
    fn under_systemd_an_agent_runs_in_its_own_unit() {
        let t = TempDir::new("coexist-unit");
        let r = t.path();
        let stat = |pid: u32| {
            format!("{pid} (tuned) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100\n")
        };
        let cgroups = [
            (20, "0::/system.slice/tuned.service\n"),
            (21, "0::/user.slice/user-1000.slice/session-2.scope\n"),
            (22, "0::/system.slice/evil.service\n"),
            // Hybrid v1: systemd's own hierarchy says, not the controllers' nor `0::/`.
            (
                23,
                "12:cpuset:/\n1:name=systemd:/system.slice/tuned.service\n0::/\n",
            ),
            (24, "0::/system.slice/tuned.service/worker\n"),
        ];
        for (pid, cg) in cgroups {
            put(r, &format!("proc/{pid}/stat"), &stat(pid));
            put(r, &format!("proc/{pid}/cgroup"), cg);
            runs(r, pid, 0, SYSTEM_PROGRAM);
        }
        let pids = |c: &Coexistence| c.agents.iter().map(|a| a.pid).collect::<Vec<_>>();
        // No systemd: every one is tuned (a root-owned system program run by root).
        assert_eq!(
            pids(&Detector::default().detect(r, &BTreeSet::new())),
            vec![20, 21, 22, 23, 24]
        );
        std::fs::create_dir_all(r.join("run/systemd/system")).unwrap();
        assert_eq!(
            pids(&Detector::default().detect(r, &BTreeSet::new())),
            vec![20, 23, 24]
        );
        let why = |pid| impostor(r, pid, AgentKind::Tuned).unwrap_or_default();
        assert!(why(21).contains("outside any service unit"), "{}", why(21));
        assert!(
            why(22).contains("unit evil.service, not tuned.service"),
            "{}",
            why(22)
        );
        std::fs::remove_file(r.join("proc/20/cgroup")).unwrap();
        assert!(why(20).contains("cgroup cannot be read"), "{}", why(20));
    }

    #[test]
    fn a_detector_reads_each_process_once_and_rechecks_its_agents() {
        let t = TempDir::new("coexist-cache");
        let r = t.path();
        let stat = |pid: u32, comm: &str, state: char| {
            format!(
                "{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100\n"
            )
        };
        put(r, "proc/10/stat", &stat(10, "bash", 'S'));
        put(r, "proc/11/stat", &stat(11, "irqbalance", 'S'));
        for pid in [10, 11] {
            runs(r, pid, 0, SYSTEM_PROGRAM);
        }
        let mut d = Detector::default();
        let pids = |c: &Coexistence| c.agents.iter().map(|a| a.pid).collect::<Vec<_>>();
        assert_eq!(pids(&d.detect(r, &BTreeSet::new())), vec![11]);
        // A known non-agent is not read again (its file unreadable now changes nothing)...
        std::fs::write(r.join("proc/10/stat"), "garbage").unwrap();
        // ...an agent is: it became a zombie.
        put(r, "proc/11/stat", &stat(11, "irqbalance", 'Z'));
        put(r, "proc/12/stat", &stat(12, "tuned", 'S'));
        runs(r, 12, 0, SYSTEM_PROGRAM);
        assert_eq!(pids(&d.detect(r, &BTreeSet::new())), vec![12]);
        // Gone from /proc: forgotten.
        std::fs::remove_dir_all(r.join("proc/12")).unwrap();
        assert!(d.detect(r, &BTreeSet::new()).is_empty());
        // pid 10 execs irqbalance: found at the next full look, not before.
        put(r, "proc/10/stat", &stat(10, "irqbalance", 'S'));
        let looks: Vec<Vec<u32>> = (0..FULL_LOOK_EVERY)
            .map(|_| pids(&d.detect(r, &BTreeSet::new())))
            .collect();
        let first = looks.iter().position(|p| p == &vec![10]).expect("found");
        // Three looks so far (the first one full): the next full one is look 6.
        assert_eq!(first as u64, FULL_LOOK_EVERY - 3, "{looks:?}");
        assert!(looks[..first].iter().all(Vec::is_empty), "{looks:?}");
    }

    /// Issue 48 on the real /proc: a `tuned` run by nobody (a copy of `sleep` under that
    /// name, in a directory of the test's) is no agent; the same copy run by root is not
    /// either (not a system program), so only the uid check is tested by the first.
    #[test]
    #[cfg_attr(not(placer_root), ignore = "needs root")]
    fn a_tuned_run_by_nobody_is_no_agent() {
        use std::os::unix::process::CommandExt;
        placer_testkit::require_root();
        let t = TempDir::new("coexist-fake-tuned");
        let fake = t.path().join("tuned");
        std::fs::copy("/bin/sleep", &fake).expect("copy sleep");
        std::fs::set_permissions(
            t.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let start = |uid: Option<u32>| {
            let mut c = std::process::Command::new(&fake);
            c.arg("30");
            if let Some(u) = uid {
                c.uid(u).gid(u);
            }
            placer_testkit::proc::KillOnDrop(c.spawn().expect("fake tuned"))
        };
        let none = BTreeSet::new();
        let root = Path::new("/");
        for uid in [Some(65534), None] {
            let kid = start(uid);
            let pid = kid.0.id();
            // Its comm is set at exec: wait for it (bounded).
            let t0 = std::time::Instant::now();
            while crate::attr::read(&root.join(format!("proc/{pid}/comm"))).as_deref()
                != Some("tuned")
            {
                assert!(t0.elapsed() < std::time::Duration::from_secs(5), "no exec");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let why = impostor(root, pid, AgentKind::Tuned).expect("an impostor");
            assert!(
                why.contains(if uid.is_some() {
                    "uid 65534"
                } else {
                    "system directory"
                }),
                "{why}"
            );
            let c = detect(root, &none);
            assert!(c.agents.iter().all(|a| a.pid != pid), "{c:?}");
        }
    }

    #[test]
    fn a_governor_is_foreign_when_neither_default_nor_placers() {
        let t = TempDir::new("coexist-gov");
        let r = t.path();
        policy(r, 0, "schedutil", "acpi-cpufreq");
        policy(r, 4, "performance", "acpi-cpufreq");
        policy(r, 8, "userspace", "acpi-cpufreq");
        // Default unknown: nothing judged.
        assert!(detect(r, &BTreeSet::new()).is_empty());
        put(r, "proc/sys/kernel/osrelease", "6.1.0-test\n");
        put(
            r,
            "boot/config-6.1.0-test",
            "CONFIG_CPU_FREQ=y\n# CONFIG_CPU_FREQ_DEFAULT_GOV_PERFORMANCE is not set\nCONFIG_CPU_FREQ_DEFAULT_GOV_SCHEDUTIL=y\n",
        );
        assert_eq!(default_governor(r).as_deref(), Some("schedutil"));
        let placer_set = BTreeSet::from([8]);
        let c = detect(r, &placer_set);
        assert_eq!(
            c.foreign_governors,
            vec![ForeignGovernor {
                domain: 4,
                governor: "performance".into(),
                default: "schedutil".into()
            }],
            "policy0 has the default, policy8's governor is placer's"
        );
        assert_eq!(detect(r, &BTreeSet::new()).foreign_governors.len(), 2);
        // The command line overrides the build's default.
        put(
            r,
            "proc/cmdline",
            "quiet cpufreq.default_governor=performance\n",
        );
        let c = detect(r, &placer_set);
        assert_eq!(c.foreign_governors.len(), 1);
        assert_eq!(c.foreign_governors[0].domain, 0);
    }

    #[test]
    fn an_active_pstate_driver_starts_in_powersave() {
        let t = TempDir::new("coexist-pstate");
        let r = t.path();
        put(r, "proc/cmdline", "cpufreq.default_governor=schedutil\n");
        policy(r, 0, "powersave", "intel_pstate");
        policy(r, 1, "performance", "intel_pstate");
        let c = detect(r, &BTreeSet::new());
        let got: Vec<(u32, &str)> = c
            .foreign_governors
            .iter()
            .map(|g| (g.domain, g.governor.as_str()))
            .collect();
        assert_eq!(got, vec![(1, "performance")]);
    }
}
