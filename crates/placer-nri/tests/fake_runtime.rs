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
        policy: placer_core::policies::PolicyKind::SmtEnergy,
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
        policy: placer_core::policies::PolicyKind::SmtEnergy,
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

// ---- Faults (issue 36): malformed frames and requests, oversized headers, broken
// registration. The runtime here speaks raw ttrpc messages on the plugin's connection, so
// that it can send what a ttrpc client never would.

const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// No fault may hold the plugin longer than this.
const HANG: Duration = Duration::from_secs(5);
/// The runtime's budget for one request (containerd's default plugin request timeout).
const BUDGET: Duration = Duration::from_secs(2);

use placer_testkit::Rng;

/// A runtime that calls the plugin with raw messages on connection 1 (`calls`) and serves
/// the runtime service on connection 2 with ttrpc.
struct Raw {
    calls: UnixStream,
    /// The runtime's end of the trunk, to break it by hand.
    trunk: UnixStream,
    mux: Mux,
    _server: ttrpc::Server,
    updates: mpsc::Receiver<Vec<api::ContainerUpdate>>,
    next_stream: u32,
}

impl Raw {
    fn send(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.calls.write_all(bytes).expect("write to the plugin");
    }

    /// Sends `body` as `method`'s request; the stream id used.
    fn call(&mut self, method: &str, body: Vec<u8>) -> u32 {
        let s = self.stream();
        self.send(&placer_nri::wire::request(s, PLUGIN_SERVICE, method, body));
        s
    }

    fn stream(&mut self) -> u32 {
        self.next_stream += 2;
        self.next_stream
    }

    /// The response to `stream` (code, message, reply), None when none came within `HANG`.
    fn answer(&mut self, stream: u32) -> Option<(ttrpc::Code, String, Vec<u8>)> {
        let t0 = std::time::Instant::now();
        loop {
            let left = HANG.checked_sub(t0.elapsed())?;
            self.calls.set_read_timeout(Some(left)).unwrap();
            let (mh, payload) = placer_nri::wire::read_message(&mut self.calls).ok()?;
            if mh.stream_id == stream {
                return placer_nri::wire::decode_response(&mh, &payload);
            }
        }
    }
}

fn raw_session(
    dir: &Path,
    name: &str,
    pods: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
) -> (Raw, Plugin) {
    use protobuf::Message;
    let sock = dir.join(format!("{name}.sock"));
    let listener = UnixListener::bind(&sock).unwrap();
    let opts = options(dir, name, &sock);
    let (reg_tx, reg_rx) = mpsc::channel();
    let (upd_tx, upd_rx) = mpsc::channel();
    let connect = std::thread::spawn(move || Plugin::connect(&opts, state()));
    let (trunk, _) = listener.accept().unwrap();
    let raw_trunk = trunk.try_clone().unwrap();
    let (rl, served) = bridged_listener(&dir.join(format!("{name}-runtime"))).unwrap();
    let (calls, raw_end) = UnixStream::pair().unwrap();
    let mux = Mux::start(
        trunk,
        vec![
            (RUNTIME_SERVICE_CONN, served),
            (PLUGIN_SERVICE_CONN, raw_end),
        ],
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
    reg_rx.recv_timeout(LIMIT).expect("registration");
    let mut raw = Raw {
        calls,
        trunk: raw_trunk,
        mux,
        _server: server,
        updates: upd_rx,
        next_stream: 1,
    };
    let s = raw.call(
        "Configure",
        api::ConfigureRequest::new().write_to_bytes().unwrap(),
    );
    assert_eq!(
        raw.answer(s).expect("Configure answered").0,
        ttrpc::Code::OK
    );
    let sync = api::SynchronizeRequest {
        pods,
        containers,
        ..Default::default()
    };
    let s = raw.call("Synchronize", sync.write_to_bytes().unwrap());
    assert_eq!(
        raw.answer(s).expect("Synchronize answered").0,
        ttrpc::Code::OK
    );
    let plugin = connect.join().unwrap().expect("plugin connected");
    (raw, plugin)
}

fn options(dir: &Path, name: &str, sock: &Path) -> Options {
    Options {
        socket: sock.to_path_buf(),
        index: 7,
        timeout: Duration::from_secs(2),
        journal: Some(dir.join(format!("{name}-journal.json"))),
        root: dir.to_path_buf(),
    }
}

fn state() -> State {
    let facts = Facts {
        alloc_order: vec![0, 1, 2, 3],
        node_of_cpu: (0..4).map(|c| (c, 0)).collect(),
        net_cpus: CpuSet::new(),
        kubelet: CpuManager::None,
        online: CpuSet::parse_list("0-3").unwrap(),
    };
    State::new(KubernetesScope::default(), facts)
}

fn create_request(id: &str, cpus: &str) -> Vec<u8> {
    use protobuf::Message;
    let mut c = container(cpus);
    c.id = id.into();
    let req = api::CreateContainerRequest {
        pod: Some(pod()).into(),
        container: Some(c).into(),
        ..Default::default()
    };
    req.write_to_bytes().unwrap()
}

/// The cpuset of a CreateContainer reply ("" when it adjusts nothing).
fn adjusted_cpus(reply: &[u8]) -> String {
    use protobuf::Message;
    api::CreateContainerResponse::parse_from_bytes(reply)
        .ok()
        .and_then(|r| Some(r.adjust.linux.resources.cpu.as_ref()?.cpus.clone()))
        .unwrap_or_default()
}

/// A CPU list of about `bytes` bytes that parses (ranges over the whole id space).
fn long_cpu_list(bytes: usize) -> String {
    let mut s = String::new();
    while s.len() < bytes {
        s.push_str("0-65535,");
    }
    s.push('0');
    s
}

/// Sends one malformed message of kind `i % 8`; its stream id and what it was.
fn malformed(rng: &mut Rng, raw: &mut Raw, i: usize) -> (u32, &'static str) {
    use protobuf::Message;
    let methods = [
        "Configure",
        "Synchronize",
        "CreateContainer",
        "UpdateContainer",
        "StateChange",
        "Shutdown",
    ];
    let s = raw.stream();
    let msg =
        |method: &str, body: Vec<u8>| placer_nri::wire::request(s, PLUGIN_SERVICE, method, body);
    let (bytes, what) = match i % 8 {
        0 => {
            // A frame whose payload is not a ttrpc.Request at all.
            let n = 1 + rng.below(64);
            let body = rng.bytes(n);
            let mut m: Vec<u8> =
                ttrpc::proto::MessageHeader::new_request(s, body.len() as u32).into();
            m.extend_from_slice(&body);
            (m, "garbage request envelope")
        }
        1 => {
            let m = methods[rng.below(methods.len())];
            let n = 1 + rng.below(128);
            (msg(m, rng.bytes(n)), "garbage request body")
        }
        2 => {
            // A real CreateContainer with a few bytes flipped.
            let mut body = create_request(&format!("f{i}"), "0-3");
            for _ in 0..1 + rng.below(8) {
                let k = rng.below(body.len());
                body[k] ^= 1 << rng.below(8);
            }
            (msg("CreateContainer", body), "flipped CreateContainer")
        }
        3 => {
            let (svc, m) = if rng.below(2) == 0 {
                (PLUGIN_SERVICE, "NoSuchMethod")
            } else {
                ("no.such.Service", "CreateContainer")
            };
            (
                placer_nri::wire::request(s, svc, m, Vec::new()),
                "unknown method",
            )
        }
        4 => {
            // Not a request: a response or data frame on the plugin's connection.
            let n = rng.below(32);
            let body = rng.bytes(n);
            let mut mh = ttrpc::proto::MessageHeader::new_data(s, body.len() as u32);
            mh.type_ = [2u8, 3, 0, 0x7f][rng.below(4)];
            let mut m: Vec<u8> = mh.into();
            m.extend_from_slice(&body);
            (m, "not a request")
        }
        5 => {
            let cpus = [
                long_cpu_list(1_600_000),
                "x-y".into(),
                "5-2".into(),
                "99999999".into(),
                "0,,1".into(),
                "0-3:0".into(),
            ][i / 8 % 6]
                .clone();
            (
                msg("CreateContainer", create_request(&format!("c{i}"), &cpus)),
                "CreateContainer with a bad CPU list",
            )
        }
        6 => {
            let mut c = container("0-3");
            c.id = format!("m{i}");
            let mut cpu = api::LinuxCPU::new();
            cpu.cpus = "0-3".into();
            cpu.mems = if i % 16 < 8 {
                long_cpu_list(1_600_000)
            } else {
                "zz".into()
            };
            let mut r = api::LinuxResources::new();
            r.cpu = Some(cpu).into();
            c.linux.as_mut().unwrap().resources = Some(r).into();
            let req = api::CreateContainerRequest {
                pod: Some(pod()).into(),
                container: Some(c).into(),
                ..Default::default()
            };
            (
                msg("CreateContainer", req.write_to_bytes().unwrap()),
                "CreateContainer with bad mems",
            )
        }
        _ => {
            // A valid envelope with flags and a stream id a client never uses.
            let mut m = msg(
                "StateChange",
                api::StateChangeEvent::new().write_to_bytes().unwrap(),
            );
            m[9] = rng.next_u64() as u8;
            (m, "odd flags")
        }
    };
    raw.send(&bytes);
    (s, what)
}

#[test]
fn malformed_requests_are_answered_and_later_requests_still_are() {
    let dir = placer_testkit::TempDir::new("nri-fuzz");
    let (mut raw, plugin) = raw_session(dir.path(), "z", vec![pod()], vec![]);
    let mut rng = Rng(0x005e_ed36);
    let (mut tried, mut silent, mut deaf, mut slow, mut opened) = (0, 0, 0, 0, 0);
    let t_all = std::time::Instant::now();
    for i in 0..320 {
        let t0 = std::time::Instant::now();
        let (s, what) = malformed(&mut rng, &mut raw, i);
        tried += 1;
        match raw.answer(s) {
            None => {
                silent += 1;
                eprintln!("fault {i} ({what}): no answer within {HANG:?}");
            }
            Some((code, msg, reply)) => {
                if t0.elapsed() > BUDGET {
                    slow += 1;
                    eprintln!("fault {i} ({what}): answered after {:?}", t0.elapsed());
                }
                // A bad CPU list or mems is never taken as no bound: the container is left
                // alone (fails closed).
                if matches!(i % 8, 5 | 6)
                    && code == ttrpc::Code::OK
                    && !adjusted_cpus(&reply).is_empty()
                {
                    opened += 1;
                    eprintln!(
                        "fault {i} ({what}): cpuset {} set ({msg})",
                        adjusted_cpus(&reply)
                    );
                }
            }
        }
        // Still listening: a well-formed request right after is answered.
        let probe = raw.call("StateChange", {
            use protobuf::Message;
            api::StateChangeEvent::new().write_to_bytes().unwrap()
        });
        if raw.answer(probe).map(|a| a.0) != Some(ttrpc::Code::OK) {
            deaf += 1;
            eprintln!("after fault {i} ({what}): a valid request went unanswered");
            break;
        }
        assert!(
            t_all.elapsed() < Duration::from_secs(120),
            "the fuzz run is bounded"
        );
    }
    eprintln!(
        "{tried} tried, {} failed (silent {silent}, deaf {deaf}, slow {slow}, failed open {opened})",
        silent + deaf + slow + opened
    );
    assert_eq!((silent, deaf, slow, opened), (0, 0, 0, 0));
    assert!(tried >= 300);
    assert!(!plugin.is_gone());
    // A real CreateContainer is still placed as before.
    let s = raw.call("CreateContainer", create_request("ok", "0-3"));
    let (code, _, reply) = raw.answer(s).expect("answered");
    assert_eq!(
        (code, adjusted_cpus(&reply).as_str()),
        (ttrpc::Code::OK, "0")
    );
}

/// Moves container c1 (pid 10) through the plugin and waits for the runtime to get it.
fn move_c1_raw(raw: &Raw, plugin: &Plugin) {
    let pin = PlannedAction {
        action: Action::PinProcess {
            proc: ProcKey {
                pid: 10,
                start_time_ticks: 1,
            },
            comm: "app".into(),
            cpus: CpuSet::parse_list("2-3").unwrap(),
        },
        policy: placer_core::policies::PolicyKind::SmtEnergy,
        reason: "test".into(),
    };
    let t = plugin.with_state(|st| translate(st, &[pin], &|pid| (pid == 10).then(|| "c1".into())));
    let updates: Vec<_> = t.updates.into_iter().map(|(_, u)| u).collect();
    assert_eq!(
        plugin.update(&updates).expect("update"),
        Vec::<String>::new()
    );
    raw.updates.recv_timeout(LIMIT).expect("move received");
}

/// Waits up to `HANG` for the plugin to say the runtime is gone.
fn gone_within(plugin: &Plugin) -> Option<Duration> {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < HANG {
        if plugin.is_gone() {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

#[test]
fn a_broken_stream_is_the_runtime_gone_and_what_can_be_restored_is_first() {
    use std::io::Write;
    let dir = placer_testkit::TempDir::new("nri-broken");
    let (mut tried, mut failed) = (0, 0);
    for i in 0..24 {
        let name = format!("b{i}");
        let (mut raw, plugin) = raw_session(dir.path(), &name, vec![pod()], vec![container("0-3")]);
        move_c1_raw(&raw, &plugin);
        let journal = dir.path().join(format!("{name}-journal.json"));
        assert_eq!(journaled(&journal), 1);
        let what = match i % 4 {
            0 => {
                // A ttrpc header announcing 4 GiB on the plugin's connection: the trunk
                // still works, so the moved container is put back before placer leaves.
                let mh = ttrpc::proto::MessageHeader::new_request(99, u32::MAX);
                raw.send(&Vec::<u8>::from(mh));
                "oversized ttrpc header"
            }
            1 => {
                // A mux frame announcing 4 GiB: the trunk itself is corrupt.
                let mut f = 1u32.to_be_bytes().to_vec();
                f.extend_from_slice(&u32::MAX.to_be_bytes());
                raw.trunk.write_all(&f).unwrap();
                "oversized mux frame"
            }
            2 => {
                // Half a request, then the runtime dies.
                let m = placer_nri::wire::request(99, PLUGIN_SERVICE, "StateChange", vec![1; 64]);
                raw.send(&m[..20]);
                std::thread::sleep(Duration::from_millis(20));
                raw.mux.close();
                "truncated request, then closed"
            }
            _ => {
                raw.mux.close();
                "closed between requests"
            }
        };
        tried += 1;
        let Some(after) = gone_within(&plugin) else {
            failed += 1;
            eprintln!("{what}: the plugin did not see the runtime gone within {HANG:?}");
            continue;
        };
        if i % 4 == 0 {
            // Restored through the runtime before leaving, and nothing left journaled.
            match raw.updates.recv_timeout(HANG) {
                Ok(got) if got[0].container_id == "c1" && cpus_of(&got[0]).0 == "0-3" => {}
                other => {
                    failed += 1;
                    eprintln!("{what}: no restore before leaving: {other:?}");
                }
            }
            if journaled(&journal) != 0 {
                failed += 1;
                eprintln!("{what}: still journaled after the restore");
            }
        } else if journaled(&journal) != 1 {
            // The runtime cannot be reached: the journal file keeps the move for the next
            // placer.
            failed += 1;
            eprintln!("{what}: the journal file lost the move");
        }
        // Dropping the plugin never waits on anything.
        let t0 = std::time::Instant::now();
        drop(plugin);
        if t0.elapsed() > HANG {
            failed += 1;
            eprintln!("{what}: dropping the plugin took {:?}", t0.elapsed());
        }
        eprintln!("{what}: gone after {after:?}");
    }
    eprintln!("{tried} tried, {failed} failed");
    assert_eq!(failed, 0);
}

/// A runtime that fails registration in one of six ways (`how`), raw on both connections.
fn broken_registration(listener: UnixListener, how: usize) {
    use protobuf::Message;
    use std::io::Write;
    let Ok((trunk, _)) = listener.accept() else {
        return;
    };
    if how == 0 {
        return; // accepted, then gone
    }
    let mut raw_trunk = trunk.try_clone().unwrap();
    let (mut calls, c1) = UnixStream::pair().unwrap();
    let (mut serves, c2) = UnixStream::pair().unwrap();
    let mux = Mux::start(
        trunk,
        vec![(PLUGIN_SERVICE_CONN, c1), (RUNTIME_SERVICE_CONN, c2)],
    )
    .unwrap();
    serves.set_read_timeout(Some(HANG)).unwrap();
    let Ok((mh, _)) = placer_nri::wire::read_message(&mut serves) else {
        return;
    };
    let reply = |ok: bool| {
        placer_nri::wire::response(
            mh.stream_id,
            if ok {
                Ok(api::Empty::new().write_to_bytes().unwrap())
            } else {
                Err(ttrpc::get_status(
                    ttrpc::Code::UNAVAILABLE,
                    "no plugins today",
                ))
            },
        )
    };
    match how {
        1 => drop(mux), // RegisterPlugin read, never answered: the stream breaks
        2 => {
            let (h, p) = reply(false);
            let _ = placer_nri::wire::write_message(&mut serves, h, &p);
            std::thread::sleep(Duration::from_millis(100));
        }
        3 => {
            let (h, p) = reply(true);
            let _ = placer_nri::wire::write_message(&mut serves, h, &p);
            let mut f = 1u32.to_be_bytes().to_vec();
            f.extend_from_slice(&u32::MAX.to_be_bytes());
            let _ = raw_trunk.write_all(&f);
            std::thread::sleep(Duration::from_millis(100));
        }
        4 => {
            // Configured, then a Synchronize that says more is coming, and silence.
            let (h, p) = reply(true);
            let _ = placer_nri::wire::write_message(&mut serves, h, &p);
            let conf = placer_nri::wire::request(1, PLUGIN_SERVICE, "Configure", Vec::new());
            let more = api::SynchronizeRequest {
                more: true,
                ..Default::default()
            };
            let sync = placer_nri::wire::request(
                3,
                PLUGIN_SERVICE,
                "Synchronize",
                more.write_to_bytes().unwrap(),
            );
            let _ = calls.write_all(&conf);
            let _ = calls.write_all(&sync);
            std::thread::sleep(Duration::from_secs(3));
        }
        _ => {
            let (h, p) = reply(true);
            let _ = placer_nri::wire::write_message(&mut serves, h, &p);
            let mh = ttrpc::proto::MessageHeader::new_request(1, u32::MAX);
            let _ = calls.write_all(&Vec::<u8>::from(mh));
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_broken_registration_fails_the_connect_in_bounded_time() {
    let dir = placer_testkit::TempDir::new("nri-reg");
    let (mut tried, mut failed) = (0, 0);
    for i in 0..42 {
        let name = format!("r{i}");
        let sock = dir.path().join(format!("{name}.sock"));
        let listener = UnixListener::bind(&sock).unwrap();
        let mut opts = options(dir.path(), &name, &sock);
        opts.timeout = Duration::from_secs(1);
        let runtime = std::thread::spawn(move || broken_registration(listener, i % 6));
        let (tx, rx) = mpsc::channel();
        let t0 = std::time::Instant::now();
        std::thread::spawn(move || {
            let r = Plugin::connect(&opts, state()).map(|_| ());
            let _ = tx.send(r);
        });
        tried += 1;
        match rx.recv_timeout(Duration::from_secs(1) + HANG) {
            Ok(Err(e)) => eprintln!(
                "broken registration {}: {e} after {:?}",
                i % 6,
                t0.elapsed()
            ),
            Ok(Ok(())) => {
                failed += 1;
                eprintln!("broken registration {}: connected", i % 6);
            }
            Err(_) => {
                failed += 1;
                eprintln!(
                    "broken registration {}: connect hung over {:?}",
                    i % 6,
                    Duration::from_secs(1) + HANG
                );
            }
        }
        let _ = runtime.join();
    }
    eprintln!("{tried} tried, {failed} failed");
    assert_eq!(failed, 0);
}
