//! The agent's life in-process, without root: on the simulator (`SimHost`) and on the real
//! host over a temporary root (`LinuxHost`). A new agent restores what a dead one left;
//! stop restores; a dry run changes nothing; every verdict reaches the verdict log.

use placer_agent::{Agent, Options};
use placer_core::config::Config;
use placer_core::host::Host;
use placer_core::journal::{Knob, Restored};
use placer_core::plan::{Action, Plan, PlannedAction};
use placer_core::policies::PolicyKind;
use placer_core::CpuSet;
use placer_linux::LinuxHost;
use placer_sim::host::SimHost;
use placer_sim::scenario::Scenario;
use placer_testkit::{FakeRoot, TempDir};

/// Two receivers on their own NICs, each NIC's receive processing on its own CPU:
/// net-affinity pins each to its NIC's CPU within a few intervals.
const RX: &str = r#"name = "t"
machine = "xeon-5355x2"
duration_s = 3.0
policies = ["net-affinity"]
policy_interval_ms = 500
[[variants]]
name = "v"
irq = { eth0 = "0", eth1 = "1" }
[[workloads]]
kind = "rx"
name = "recv{i}"
count = 2
nic = "eth{i}"
rate_mbps = 300.0
"#;

fn sim() -> (SimHost, Config) {
    let sc = Scenario::from_toml("t", RX).expect("scenario");
    let host = sc
        .host(
            sc.variant_list()[0],
            placer_sim::host::Baseline::LinuxDefault,
            1,
        )
        .expect("host");
    let mut cfg = sc.placer_config().expect("config");
    cfg.policies = vec![PolicyKind::NetAffinity];
    cfg.metrics.enabled = false;
    (host, cfg)
}

fn sim_opts(dry_run: bool) -> Options {
    Options {
        dry_run,
        ..Default::default()
    }
}

/// Steps the agent, the simulated machine running one interval between steps, until the
/// host's journal lists something (at most 20 intervals).
fn step_until_journaled(agent: &mut Agent<SimHost>) {
    let interval_ns = agent.configured().interval.as_nanos() as u64;
    for _ in 0..20 {
        agent.step();
        if !agent.host_mut().journal().expect("journal").is_empty() {
            return;
        }
        let next = agent.host().time_ns() + interval_ns;
        agent.host_mut().run_until(next, false);
    }
    panic!("net-affinity pinned nothing in 20 intervals");
}

/// Every simulated process's affinity, by pid.
fn affinities(host: &SimHost) -> Vec<(u32, CpuSet)> {
    host.procs()
        .iter()
        .map(|p| (p.pid, host.tasks()[p.threads[0]].allowed.clone()))
        .collect()
}

#[test]
fn on_the_simulator_a_new_agent_restores_what_a_dead_one_left() {
    let (host, cfg) = sim();
    let before = affinities(&host);
    let mut agent = Agent::start(host, cfg.clone(), sim_opts(false)).expect("start");
    step_until_journaled(&mut agent);
    // Dies: no stop, no restore.
    let mut host = agent.into_host();
    let left = host.journal().expect("journal");
    assert!(
        left.iter()
            .any(|e| matches!(e.knob, Knob::ProcAffinity { .. })),
        "{left:?}"
    );
    assert_ne!(affinities(&host), before, "the dead agent pinned something");
    let agent = Agent::start(host, cfg, sim_opts(false)).expect("second start");
    let mut host = agent.into_host();
    assert!(host.journal().expect("journal").is_empty());
    assert_eq!(affinities(&host), before);
}

#[test]
fn on_the_simulator_stop_restores() {
    let (host, cfg) = sim();
    let before = affinities(&host);
    let mut agent = Agent::start(host, cfg, sim_opts(false)).expect("start");
    step_until_journaled(&mut agent);
    let (mut host, restored) = agent.stop().expect("stop");
    assert!(!restored.is_empty());
    assert!(
        restored.iter().all(|(_, r)| *r == Restored::Restored),
        "{restored:?}"
    );
    assert!(host.journal().expect("journal").is_empty());
    assert_eq!(affinities(&host), before);
}

#[test]
fn on_the_simulator_a_dry_run_changes_nothing() {
    let (host, cfg) = sim();
    let before = affinities(&host);
    let mut agent = Agent::start(host, cfg.clone(), sim_opts(false)).expect("start");
    step_until_journaled(&mut agent);
    // What a dead agent left stays as it is under a dry run, start and stop included.
    let host = agent.into_host();
    let pinned = affinities(&host);
    assert_ne!(pinned, before);
    let mut agent = Agent::start(host, cfg, sim_opts(true)).expect("dry start");
    let interval_ns = agent.configured().interval.as_nanos() as u64;
    let mut planned = 0;
    for _ in 0..6 {
        planned += agent.step().reports.len();
        let next = agent.host().time_ns() + interval_ns;
        agent.host_mut().run_until(next, false);
    }
    let (mut host, restored) = agent.stop().expect("stop");
    assert!(restored.is_empty());
    assert_eq!(affinities(&host), pinned, "{planned} planned action(s)");
    assert!(!host.journal().expect("journal").is_empty());
}

/// Verdicts have one writer, the agent, on every host: what the judge decided reaches the
/// state dir's verdict log (`placer report`'s history) from the cycle's report, on the
/// simulator as on the real host, each verdict once and in order.
#[test]
fn on_the_simulator_every_verdict_reaches_the_verdict_log() {
    let (host, cfg) = sim();
    let state = TempDir::new("placer-life-verdicts");
    let opts = Options {
        state_dir: Some(state.path().to_path_buf()),
        ..sim_opts(false)
    };
    let mut agent = Agent::start(host, cfg, opts).expect("start");
    let interval_ns = agent.configured().interval.as_nanos() as u64;
    let mut judged = Vec::new();
    // Bounded: the judge's probe ends well within 400 simulated intervals.
    for _ in 0..400 {
        judged.extend(agent.step().verdicts);
        if !judged.is_empty() {
            break;
        }
        let next = agent.host().time_ns() + interval_ns;
        agent.host_mut().run_until(next, false);
    }
    assert!(!judged.is_empty(), "no move judged in 400 intervals");
    let (logged, bad) = placer_linux::verdict_log::read(state.path()).expect("verdict log");
    assert_eq!((bad, logged.len()), (0, judged.len()));
    // Line by line, the very text of each judged verdict (not the values read back: a
    // verdict on constant windows has a NaN t, and JSON's decimals round).
    let text = std::fs::read_to_string(state.path().join(placer_linux::verdict_log::VERDICT_LOG))
        .expect("verdict log");
    let lines: Vec<&str> = text.lines().collect();
    for ((line, rec), v) in lines.iter().zip(&logged).zip(judged) {
        let rec = placer_linux::verdict_log::VerdictRecord {
            unix_ms: rec.unix_ms,
            verdict: v,
        };
        assert_eq!(*line, serde_json::to_string(&rec).expect("json"));
    }
    agent.stop().expect("stop");
}

/// Equal records, each value within JSON's decimal rounding.
fn same_record(a: &[placer_core::learned::Learned], b: &[placer_core::learned::Learned]) -> bool {
    use placer_core::learned::Learned;
    let close = |x: &[f64], y: &[f64]| {
        x.len() == y.len() && x.iter().zip(y).all(|(x, y)| (x - y).abs() <= 1e-12)
    };
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| match (a, b) {
            (Learned::NetAffinityClasses(a), Learned::NetAffinityClasses(b)) => {
                close(&a.on, &b.on) && close(&a.beside, &b.beside)
            }
        })
}

/// What the policies learned outlives the daemon (issue 45): net-affinity's record of its
/// placement classes reaches the state dir's `learned.json`, a new agent on the same state
/// dir and machine starts with it, and a record of another machine's shape is not used.
#[test]
fn on_the_simulator_what_a_daemon_learned_is_given_to_the_next_one() {
    let (host, cfg) = sim();
    let state = TempDir::new("placer-life-learned");
    let opts = || Options {
        state_dir: Some(state.path().to_path_buf()),
        ..sim_opts(false)
    };
    let file = state.path().join(placer_agent::state::LEARNED_FILE);
    let mut agent = Agent::start(host, cfg.clone(), opts()).expect("start");
    let interval_ns = agent.configured().interval.as_nanos() as u64;
    // Bounded: a pin's class is measured over 5 intervals after it.
    for _ in 0..200 {
        agent.step();
        if file.exists() {
            break;
        }
        let next = agent.host().time_ns() + interval_ns;
        agent.host_mut().run_until(next, false);
    }
    let learned = agent.configured().engine.learned();
    assert!(!learned.is_empty(), "nothing learned in 200 intervals");
    let text = std::fs::read_to_string(&file).expect("learned.json written");
    let saved = placer_core::learned::LearnedFile::parse(&text).expect("parses");
    assert!(
        same_record(&saved.learned, &learned),
        "the file holds what the engine learned: {saved:?} {learned:?}"
    );
    agent.stop().expect("stop");

    // A new daemon, a fresh machine of the same shape: it starts with the record.
    let (host, _) = sim();
    let mut agent = Agent::start(host, cfg.clone(), opts()).expect("second start");
    assert!(
        agent.configured().engine.learned().is_empty(),
        "not before the topology"
    );
    agent.step();
    let given = agent.configured().engine.learned();
    assert!(same_record(&given, &learned), "{given:?} {learned:?}");
    agent.stop().expect("stop");

    // The same record said to come from another machine's shape: not used.
    let mut other = saved.clone();
    other.shape.push_str(",L9Unified[0]");
    std::fs::write(&file, other.to_json()).expect("rewrite");
    let (host, _) = sim();
    let mut agent = Agent::start(host, cfg, opts()).expect("third start");
    agent.step();
    assert!(
        agent.configured().engine.learned().is_empty(),
        "another shape's record was used"
    );
    agent.stop().expect("stop");
}

/// A temporary root with one IRQ whose affinity placer set to CPU 1 from 0-3, as a dead
/// daemon leaves it; the state dir beside it.
struct TempHost {
    root: FakeRoot,
    state: TempDir,
}

const IRQ: u32 = 5;

impl TempHost {
    fn new() -> TempHost {
        let t = TempHost {
            root: FakeRoot::new("agent-root"),
            state: TempDir::new("agent-state"),
        };
        t.root
            .write(format!("proc/irq/{IRQ}/smp_affinity_list"), "0-3\n");
        t
    }
    fn irq_cpus(&self) -> String {
        self.root
            .read(format!("proc/irq/{IRQ}/smp_affinity_list"))
            .trim()
            .to_string()
    }
    fn host(&self) -> LinuxHost {
        LinuxHost::new(self.root.path(), self.state.path())
    }
    fn opts(&self, dry_run: bool) -> Options {
        Options {
            root: self.root.path().to_path_buf(),
            state_dir: Some(self.state.path().to_path_buf()),
            dry_run,
            ..Default::default()
        }
    }
    fn config(&self) -> Config {
        let mut cfg = Config {
            state_dir: self.state.path().display().to_string(),
            ..Default::default()
        };
        cfg.metrics.enabled = false;
        cfg
    }
    /// Sets the IRQ's affinity through the host, journaled, as an agent's plan does.
    fn set_irq(host: &mut LinuxHost) {
        let plan = Plan {
            actions: vec![PlannedAction {
                action: Action::SetIrqAffinity {
                    irq: IRQ,
                    cpus: CpuSet::parse_list("1").expect("cpus"),
                },
                policy: PolicyKind::NetAffinity,
                reason: "test".into(),
            }],
            notes: Vec::new(),
        };
        let r = host.apply(&plan, false);
        assert_eq!(r[0].outcome, placer_core::Outcome::Done, "{r:?}");
    }
}

#[test]
fn on_a_temporary_root_a_new_agent_restores_what_a_dead_one_left() {
    let t = TempHost::new();
    let mut agent = Agent::start(t.host(), t.config(), t.opts(false)).expect("start");
    TempHost::set_irq(agent.host_mut());
    assert_eq!(t.irq_cpus(), "1");
    drop(agent.into_host());
    let mut agent = Agent::start(t.host(), t.config(), t.opts(false)).expect("second start");
    assert_eq!(t.irq_cpus(), "0-3");
    assert!(agent.host_mut().journal().expect("journal").is_empty());
}

#[test]
fn on_a_temporary_root_stop_restores() {
    let t = TempHost::new();
    let mut agent = Agent::start(t.host(), t.config(), t.opts(false)).expect("start");
    TempHost::set_irq(agent.host_mut());
    assert_eq!(t.irq_cpus(), "1");
    let (mut host, restored) = agent.stop().expect("stop");
    assert_eq!(restored.len(), 1);
    assert_eq!(restored[0].1, Restored::Restored);
    assert_eq!(t.irq_cpus(), "0-3");
    assert!(host.journal().expect("journal").is_empty());
}

#[test]
fn on_a_temporary_root_a_dry_run_changes_nothing() {
    let t = TempHost::new();
    let mut agent = Agent::start(t.host(), t.config(), t.opts(false)).expect("start");
    TempHost::set_irq(agent.host_mut());
    drop(agent.into_host());
    let files = |t: &TempHost| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(t.state.path())
            .expect("state dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let state_before = files(&t);
    let journal_before =
        std::fs::read(t.state.path().join(placer_linux::journal::JOURNAL_FILE)).expect("journal");
    let mut agent = Agent::start(t.host(), t.config(), t.opts(true)).expect("dry start");
    assert_eq!(
        placer_agent::state::lock_holder(t.state.path()),
        None,
        "a dry run takes no lock"
    );
    agent.step();
    agent.step();
    let (_, restored) = agent.stop().expect("stop");
    assert!(restored.is_empty());
    assert_eq!(t.irq_cpus(), "1", "a dry run restores nothing");
    assert_eq!(files(&t), state_before, "a dry run writes no state file");
    assert_eq!(
        std::fs::read(t.state.path().join(placer_linux::journal::JOURNAL_FILE)).expect("journal"),
        journal_before
    );
}

/// Issue 30, item 2: a reload that keeps net-affinity (with another setting) puts nothing
/// back and the pins stay held; a reload that switches it off puts its pins back.
#[test]
fn on_the_simulator_a_reload_keeps_what_stays_valid_and_restores_a_policy_switched_off() {
    let (host, mut cfg) = sim();
    // The judge's probe switches would change the affinities from step to step: this is
    // about what a reload keeps.
    cfg.verify.enabled = false;
    let before = affinities(&host);
    let mut agent = Agent::start(host, cfg.clone(), sim_opts(false)).expect("start");
    step_until_journaled(&mut agent);
    let pinned = affinities(agent.host());
    let held = agent.configured().engine.held().len();
    assert!(held > 0);
    // Same policy, another setting (and one fixed at start, kept and said).
    let mut changed = cfg.clone();
    changed.net_affinity.cpu_load_threshold = 0.9;
    changed.state_dir = "/elsewhere".into();
    let r = agent.reload(changed).expect("reload");
    assert!(
        r.switched_off.is_empty() && r.switched_on.is_empty(),
        "{r:?}"
    );
    assert_eq!(r.needs_restart, vec!["state_dir"]);
    assert_eq!(
        agent.configured().config.net_affinity.cpu_load_threshold,
        0.9
    );
    assert_eq!(agent.configured().config.state_dir, cfg.state_dir);
    assert_eq!(
        affinities(agent.host()),
        pinned,
        "a reload put something back"
    );
    assert_eq!(agent.configured().engine.held().len(), held, "holds lost");
    assert!(!agent.host_mut().journal().expect("journal").is_empty());
    // The next step neither re-pins nor restores: the policy kept its state.
    agent.step();
    assert_eq!(affinities(agent.host()), pinned);
    // Switched off: its pins are put back, and nothing is journaled any more.
    let mut off = cfg;
    off.policies = vec![PolicyKind::SmtEnergy];
    let r = agent.reload(off).expect("reload");
    assert_eq!(r.switched_on, vec![PolicyKind::SmtEnergy]);
    let (name, restored) = &r.switched_off[0];
    assert_eq!(*name, PolicyKind::NetAffinity);
    assert!(
        !restored.is_empty() && restored.iter().all(|(_, r)| *r == Restored::Restored),
        "{restored:?}"
    );
    assert_eq!(affinities(agent.host()), before);
    assert!(agent.host_mut().journal().expect("journal").is_empty());
}
