//! The plugin against a runtime written here on the same wire (mux + ttrpc, the runtime's
//! side of each connection): registration, Configure/Synchronize, CreateContainer, the
//! unsolicited UpdateContainers of a later move and of the restore on stop, each naming its
//! container and carrying only a cpuset; and a placer killed after a move is undone by the
//! next one from the journal file. Every wait is bounded; the temp dir is removed even when
//! the test fails.

use placer_core::config::KubernetesScope;
use placer_core::cpuset::CpuSet;
use placer_core::k8s::CpuManager;
use placer_core::plan::{Action, PlannedAction};
use placer_core::sample::ProcKey;
use placer_nri::mux::{bridged_listener, Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use placer_nri::placement::{translate, Facts, State};
use placer_nri::plugin::{Options, Plugin};
use placer_nri::proto::{api, api_ttrpc};
use std::os::fd::IntoRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(10);

/// The runtime's service: records registrations and updates.
struct RuntimeService {
    registered: Mutex<Option<mpsc::Sender<(String, String)>>>,
    updates: Mutex<mpsc::Sender<Vec<api::ContainerUpdate>>>,
}

impl api_ttrpc::Runtime for RuntimeService {
    fn register_plugin(
        &self,
        _: &ttrpc::TtrpcContext,
        req: api::RegisterPluginRequest,
    ) -> ttrpc::Result<api::Empty> {
        if let Some(tx) = self.registered.lock().unwrap().take() {
            let _ = tx.send((req.plugin_name, req.plugin_idx));
        }
        Ok(api::Empty::new())
    }
    fn update_containers(
        &self,
        _: &ttrpc::TtrpcContext,
        req: api::UpdateContainersRequest,
    ) -> ttrpc::Result<api::UpdateContainersResponse> {
        let _ = self.updates.lock().unwrap().send(req.update);
        Ok(api::UpdateContainersResponse::new())
    }
}

/// A runtime with placer connected to it.
struct Session {
    _mux: Mux,
    _server: ttrpc::Server,
    client: api_ttrpc::PluginClient,
    updates: mpsc::Receiver<Vec<api::ContainerUpdate>>,
    plugin: Plugin,
}

fn ctx() -> ttrpc::context::Context {
    ttrpc::context::with_duration(Duration::from_secs(5))
}

/// Starts a runtime on `dir/name.sock`, connects placer (journal file `journal`), and
/// synchronizes it with `pods` and `containers`.
fn session(
    dir: &Path,
    name: &str,
    journal: &Path,
    pods: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
) -> Session {
    let sock = dir.join(format!("{name}.sock"));
    let listener = UnixListener::bind(&sock).unwrap();
    let (reg_tx, reg_rx) = mpsc::channel();
    let (upd_tx, upd_rx) = mpsc::channel();
    let bridge_dir = dir.join(format!("{name}-runtime"));
    // The runtime: accept the plugin, serve the runtime service on connection 2, call the
    // plugin service on connection 1.
    let runtime = std::thread::spawn(move || {
        let (trunk, _) = listener.accept().unwrap();
        let (rl, served) = bridged_listener(&bridge_dir).unwrap();
        let (calls, client_end) = UnixStream::pair().unwrap();
        let mux = Mux::start(
            trunk,
            vec![(RUNTIME_SERVICE_CONN, served), (PLUGIN_SERVICE_CONN, calls)],
        )
        .unwrap();
        let svc: Arc<dyn api_ttrpc::Runtime + Send + Sync> = Arc::new(RuntimeService {
            registered: Mutex::new(Some(reg_tx)),
            updates: Mutex::new(upd_tx),
        });
        let mut server = ttrpc::Server::new()
            .add_listener(rl.into_raw_fd())
            .unwrap()
            .register_service(api_ttrpc::create_runtime(svc));
        server.start().unwrap();
        let client =
            api_ttrpc::PluginClient::new(ttrpc::Client::new(client_end.into_raw_fd()).unwrap());
        (mux, server, client)
    });
    let opts = Options {
        socket: sock,
        index: 7,
        private_dir: dir.join(format!("{name}-plugin")),
        timeout: LIMIT,
        journal: Some(journal.to_path_buf()),
        root: dir.to_path_buf(),
    };
    let connect = std::thread::spawn(move || {
        let facts = Facts {
            alloc_order: vec![0, 1, 2, 3],
            node_of_cpu: (0..4).map(|c| (c, 0)).collect(),
            net_cpus: CpuSet::new(),
            kubelet: CpuManager::None,
            online: CpuSet::parse_list("0-3").unwrap(),
        };
        Plugin::connect(&opts, State::new(KubernetesScope::default(), facts))
    });
    let (name, idx) = reg_rx.recv_timeout(LIMIT).expect("registration");
    assert_eq!((name.as_str(), idx.as_str()), ("placer", "07"));
    let (mux, server, client) = runtime.join().unwrap();
    let cfg = client
        .configure(ctx(), &api::ConfigureRequest::new())
        .expect("Configure");
    assert_ne!(cfg.events, 0);
    let sync = api::SynchronizeRequest {
        pods,
        containers,
        ..Default::default()
    };
    client.synchronize(ctx(), &sync).expect("Synchronize");
    let plugin = connect.join().unwrap().expect("plugin connected");
    Session {
        _mux: mux,
        _server: server,
        client,
        updates: upd_rx,
        plugin,
    }
}

fn pod() -> api::PodSandbox {
    let mut p = api::PodSandbox::new();
    p.id = "sb1".into();
    p.name = "web-0".into();
    p.uid = "uid-1".into();
    p.namespace = "default".into();
    p.annotations
        .insert("policy.placer.io/pod".into(), "smt-energy".into());
    p
}

fn container(cpus: &str) -> api::Container {
    let mut c = api::Container::new();
    c.id = "c1".into();
    c.pod_sandbox_id = "sb1".into();
    c.name = "app".into();
    let mut cpu = api::LinuxCPU::new();
    cpu.cpus = cpus.into();
    cpu.mems = "0".into();
    let mut r = api::LinuxResources::new();
    r.cpu = Some(cpu).into();
    let mut l = api::LinuxContainer::new();
    l.resources = Some(r).into();
    c.linux = Some(l).into();
    c
}

fn cpus_of(u: &api::ContainerUpdate) -> (String, String) {
    let cpu = u.linux.resources.cpu.as_ref().expect("cpu");
    assert!(
        cpu.shares.is_none() && cpu.quota.is_none() && cpu.period.is_none(),
        "only a cpuset: {cpu:?}"
    );
    assert!(u.linux.resources.memory.is_none(), "no memory limits");
    (cpu.cpus.clone(), cpu.mems.clone())
}

/// Moves container c1's process (pid 10) to CPUs 2-3 and checks the runtime got it.
fn move_c1(s: &Session) {
    let pin = PlannedAction {
        action: Action::PinProcess {
            proc: ProcKey {
                pid: 10,
                start_time_ticks: 1,
            },
            comm: "app".into(),
            cpus: CpuSet::parse_list("2-3").unwrap(),
        },
        policy: "smt-energy".into(),
        reason: "test".into(),
    };
    let t = s
        .plugin
        .with_state(|st| translate(st, &[pin], &|pid| (pid == 10).then(|| "c1".into())));
    let updates: Vec<_> = t.updates.into_iter().map(|(_, u)| u).collect();
    assert_eq!(
        s.plugin.update(&updates).expect("UpdateContainers"),
        Vec::<String>::new()
    );
    let got = s.updates.recv_timeout(LIMIT).expect("update received");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].container_id, "c1");
    assert_eq!(cpus_of(&got[0]), ("2-3".into(), "0".into()));
}

#[test]
fn register_create_move_and_restore_through_a_runtime() {
    let dir = placer_testkit::TempDir::new("nri-fake");
    let journal = dir.path().join("nri-journal.json");
    let s = session(dir.path(), "a", &journal, vec![], vec![]);

    // Creation: a cpuset (the first CPU of the order), nothing else.
    let mut req = api::CreateContainerRequest::new();
    req.pod = Some(pod()).into();
    req.container = Some(container("0-3")).into();
    let rsp = s
        .client
        .create_container(ctx(), &req)
        .expect("CreateContainer");
    let cpu = rsp.adjust.linux.resources.cpu.as_ref().expect("cpuset");
    assert_eq!((cpu.cpus.as_str(), cpu.mems.as_str()), ("0", "0"));
    assert!(cpu.shares.is_none() && cpu.quota.is_none());

    // A later move of its process: an unsolicited update, journaled on disk.
    move_c1(&s);
    assert!(journal.exists(), "the journal file follows the move");

    // Stop: the cpuset the container had before the move (placer's from creation) comes
    // back, and the journal is empty again.
    assert_eq!(s.plugin.restore_all().expect("restore"), 1);
    let got = s.updates.recv_timeout(LIMIT).expect("restore received");
    assert_eq!(got[0].container_id, "c1");
    assert_eq!(cpus_of(&got[0]), ("0".into(), "0".into()));
    assert!(s.plugin.with_state(|st| st.journal.restores().is_empty()));
    assert_eq!(journaled(&journal), 0);
    assert!(!s.plugin.is_gone());

    // Killed after a move (no restore): the next placer, synchronized with the container
    // still running, puts its cpuset back from the journal file.
    let s2 = session(
        dir.path(),
        "b",
        &journal,
        vec![pod()],
        vec![container("0-3")],
    );
    move_c1(&s2);
    drop(s2);
    assert!(journal.exists());
    let s3 = session(
        dir.path(),
        "c",
        &journal,
        vec![pod()],
        vec![container("2-3")],
    );
    let got = s3.updates.recv_timeout(LIMIT).expect("left-over restore");
    assert_eq!(got[0].container_id, "c1");
    assert_eq!(cpus_of(&got[0]), ("0-3".into(), "0".into()));
    assert_eq!(journaled(&journal), 0, "restored: nothing left to restore");
}

/// How many containers the journal file lists to restore (0 when there is no file; the
/// file also remembers the kubelet's requests).
fn journaled(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("previous")?.as_object().map(|m| m.len()))
        .unwrap_or(0)
}

/// The host behind NriHost: records the plans it is asked to apply.
#[derive(Default)]
struct RecordingHost {
    applied: Vec<PlannedAction>,
}

impl placer_core::host::Host for RecordingHost {
    fn topology(
        &mut self,
    ) -> Result<placer_core::topology::Topology, placer_core::host::HostError> {
        Err(placer_core::host::HostError::new("test", "no topology"))
    }
    fn sources(&mut self) -> placer_core::sample::SourceStatus {
        Default::default()
    }
    fn sample(
        &mut self,
        _: placer_core::sample::SampleRequest,
    ) -> Result<placer_core::sample::Sample, placer_core::host::HostError> {
        Err(placer_core::host::HostError::new("test", "no samples"))
    }
    fn apply(
        &mut self,
        plan: &placer_core::Plan,
        _dry_run: bool,
    ) -> Vec<placer_core::plan::ActionReport> {
        self.applied.extend(plan.actions.iter().cloned());
        plan.actions
            .iter()
            .map(|a| placer_core::plan::ActionReport {
                planned: a.clone(),
                outcome: placer_core::plan::Outcome::Done,
            })
            .collect()
    }
    fn journal(
        &mut self,
    ) -> Result<Vec<placer_core::journal::Entry>, placer_core::host::HostError> {
        Ok(Vec::new())
    }
    fn restore_all(
        &mut self,
    ) -> Result<
        Vec<(placer_core::journal::Entry, placer_core::journal::Restored)>,
        placer_core::host::HostError,
    > {
        Ok(Vec::new())
    }
    fn restore_where(
        &mut self,
        _which: &dyn Fn(&placer_core::journal::Entry) -> bool,
    ) -> Result<
        Vec<(placer_core::journal::Entry, placer_core::journal::Restored)>,
        placer_core::host::HostError,
    > {
        Ok(Vec::new())
    }
}

#[test]
fn nri_host_sends_container_moves_to_the_runtime_and_the_rest_to_the_host() {
    use placer_core::host::Host;
    let dir = placer_testkit::TempDir::new("nri-host");
    std::fs::create_dir_all(dir.path().join("proc/10")).unwrap();
    std::fs::write(
        dir.path().join("proc/10/cgroup"),
        "0::/kubepods/burstable/poduid-1/c1\n",
    )
    .unwrap();
    let journal = dir.path().join("nri-journal.json");
    let s = session(
        dir.path(),
        "h",
        &journal,
        vec![pod()],
        vec![container("0-3")],
    );
    let planned = |action| PlannedAction {
        action,
        policy: "smt-energy".into(),
        reason: "test".into(),
    };
    let plan = placer_core::Plan {
        actions: vec![
            planned(Action::RestoreIrq { irq: 5 }),
            planned(Action::PinProcess {
                proc: ProcKey {
                    pid: 10,
                    start_time_ticks: 1,
                },
                comm: "app".into(),
                cpus: CpuSet::parse_list("1-2").unwrap(),
            }),
        ],
        notes: Vec::new(),
    };
    let mut inner = RecordingHost::default();
    let mut h = placer_nri::host::NriHost {
        inner: &mut inner,
        plugin: &s.plugin,
        root: dir.path(),
    };
    // A dry run sends nothing and journals nothing.
    let reports = h.apply(&plan, true);
    assert!(matches!(
        reports[1].outcome,
        placer_core::plan::Outcome::Skipped(_)
    ));
    assert!(s.updates.recv_timeout(Duration::from_millis(200)).is_err());
    assert!(!journal.exists());
    let reports = h.apply(&plan, false);
    // Reports in the plan's order: the IRQ by the host, the pin through the runtime.
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0].planned.action, Action::RestoreIrq { irq: 5 });
    assert_eq!(reports[1].outcome, placer_core::plan::Outcome::Done);
    assert!(
        reports[1].planned.reason.contains("container c1"),
        "{:?}",
        reports[1]
    );
    let got = s.updates.recv_timeout(LIMIT).expect("update");
    assert_eq!(got[0].container_id, "c1");
    assert_eq!(cpus_of(&got[0]), ("1-2".into(), "0".into()));
    // The host saw the IRQ action only (twice: dry run, then real).
    assert!(inner
        .applied
        .iter()
        .all(|a| a.action == Action::RestoreIrq { irq: 5 }));
    assert!(journal.exists());
}

#[test]
fn a_restore_the_runtime_accepts_is_verified_in_the_containers_cgroup() {
    let dir = placer_testkit::TempDir::new("nri-verify");
    let journal = dir.path().join("nri-journal.json");
    let mut c = container("0-3");
    c.linux.as_mut().unwrap().cgroups_path = "/kubepods/poduid-1/c1".into();
    let s = session(dir.path(), "v", &journal, vec![pod()], vec![c]);
    let cg = dir.path().join("sys/fs/cgroup/cpuset/kubepods/poduid-1/c1");
    std::fs::create_dir_all(&cg).unwrap();
    move_c1(&s);
    // The fake runtime says yes but changes nothing: the cgroup still holds placer's 2-3.
    std::fs::write(cg.join("cpuset.cpus"), "2-3\n").unwrap();
    assert_eq!(s.plugin.restore_all().expect("restore"), 0);
    assert!(s.updates.recv_timeout(LIMIT).is_ok());
    assert_eq!(
        journaled(&journal),
        1,
        "an unverified restore stays journaled"
    );
    // Once the cgroup holds what was sent, the restore counts and is forgotten.
    std::fs::write(cg.join("cpuset.cpus"), "0-3\n").unwrap();
    assert_eq!(s.plugin.restore_all().expect("restore"), 1);
    assert_eq!(journaled(&journal), 0);
}
