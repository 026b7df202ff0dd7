//! The NRI plugin's I/O half: dial the runtime's socket, multiplex it, serve the plugin
//! service (ttrpc server on connection 1), call the runtime service (ttrpc client on
//! connection 2), and keep [`State`] from what the runtime says.
//!
//! Rules:
//! - Registration as `placer` with the configured index, then the runtime configures and
//!   synchronizes the plugin; [`Plugin::connect`] returns once Synchronize arrived (or
//!   fails after `timeout`), so the daemon never decides on an empty cache.
//! - Subscribed events: RunPodSandbox, RemovePodSandbox, CreateContainer, UpdateContainer,
//!   RemoveContainer. The request handlers read the cache and [`crate::placement`] only: no
//!   sampling, no file reads.
//! - Every adjustment is a cpuset (`cpus` + `mems`); every `ContainerUpdate` names its
//!   container (`container_id`).
//! - The cpusets placer replaces after creation are journaled on disk too
//!   (`Options::journal`, rewritten whole, atomically, whenever it changes: [`StateGuard`]),
//!   so that a placer killed without its SIGTERM restore is undone by the next one: after
//!   Synchronize, [`Plugin::connect`] puts each journaled container that still exists back
//!   through the runtime (restore, not re-adopt, as the host journal does), and its cache
//!   then holds the cpusets put back. The kubelet's requests the file remembers are adopted
//!   (`State::adopt`): what the runtime reports of a container placer placed is placer's
//!   cpuset, not the kubelet's.
//! - A restore the runtime accepts is verified by re-reading the container's cgroup
//!   (`cpuset.cpus` under `Options::root`): one whose cgroup holds another cpuset is said and
//!   stays journaled, as one the runtime failed.
//! - The private listening socket that hands connection 1 to the ttrpc server is unlinked as
//!   soon as the bridge connected: nothing else can reach the plugin service.

use crate::mux::{Mux, MuxError, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::placement::{
    Container, ContainerView, CpusetJournal, CpusetUpdate, Placement, Pod, State,
};
use crate::proto::{api, api_ttrpc};
use placer_core::cpuset::CpuSet;
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tracing::{info, warn};

pub const PLUGIN_NAME: &str = "placer";
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";
/// Not 90, nri-plugins' default: before its resource policies (docs/kubernetes.md, "NRI index").
pub const DEFAULT_INDEX: u32 = 70;

#[derive(Debug, thiserror::Error)]
pub enum NriError {
    /// Said once: the error is not also a `source`, which would print it a second time.
    #[error("NRI socket {}: {error}{}", socket.display(), connect_hint(error))]
    Connect {
        socket: PathBuf,
        error: std::io::Error,
    },
    #[error("NRI: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Mux(#[from] MuxError),
    #[error("NRI ttrpc: {0}")]
    Ttrpc(String),
    #[error("NRI: the runtime did not configure and synchronize placer within {0:?}")]
    NotSynchronized(Duration),
}

/// What a failed connect most likely means: a socket nobody listens on is a runtime that is
/// down (its socket file outlives it), not NRI being disabled (then there is no file).
fn connect_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            " (the socket is there but nothing listens: is the container runtime running?)"
        }
        std::io::ErrorKind::NotFound => " (no socket: is NRI enabled in the container runtime?)",
        std::io::ErrorKind::PermissionDenied => " (placer needs root to reach the runtime)",
        _ => "",
    }
}

fn ttrpc_err(e: ttrpc::Error) -> NriError {
    NriError::Ttrpc(e.to_string())
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct Options {
    pub socket: PathBuf,
    pub index: u32,
    /// A private directory (placer's state dir) for the short-lived listening socket.
    pub private_dir: PathBuf,
    /// How long to wait for registration, Configure and Synchronize.
    pub timeout: Duration,
    /// The on-disk journal of container cpusets (None: memory only).
    pub journal: Option<PathBuf>,
    /// Filesystem root of the containers' cgroups (`/`, or `/host` in a pod), where a
    /// restore is verified.
    pub root: PathBuf,
}

/// What the handlers share with the daemon.
struct Shared {
    state: Mutex<State>,
    /// Set when Synchronize arrived; the condvar wakes `connect`.
    synced: Mutex<bool>,
    synced_cv: Condvar,
    /// Set when the runtime said Shutdown or the connection ended.
    gone: AtomicBool,
    runtime: Mutex<String>,
    journal_path: Option<PathBuf>,
    root: PathBuf,
}

impl Shared {
    fn state(&self) -> StateGuard<'_> {
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        StateGuard {
            before: guard.journal.clone(),
            guard,
            path: self.journal_path.as_deref(),
        }
    }
}

/// The state under its lock; on release, the journal file follows the journal's changes.
pub struct StateGuard<'a> {
    guard: std::sync::MutexGuard<'a, State>,
    before: CpusetJournal,
    path: Option<&'a Path>,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        if let Some(path) = self.path.filter(|_| self.guard.journal != self.before) {
            if let Err(e) = write_journal(path, &self.guard.journal) {
                warn!("NRI: writing {}: {e}", path.display());
            }
        }
    }
}

/// Replaces the journal file durably, as the host journal is (a crash leaves the old or the
/// new one; a private file, no link followed); an empty journal removes it.
fn write_journal(path: &Path, j: &CpusetJournal) -> std::io::Result<()> {
    let (dir, name) = journal_dir(path)?;
    if j.is_empty() {
        return dir.remove(&name).map_err(std::io::Error::other);
    }
    let bytes = serde_json::to_vec_pretty(j).map_err(std::io::Error::other)?;
    dir.write_durably(&name, &bytes)
        .map_err(std::io::Error::other)
}

/// The checked state dir holding the journal file `path`, and the file's name in it.
fn journal_dir(path: &Path) -> std::io::Result<(placer_linux::state_dir::StateDir, String)> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other(format!(
            "{}: not a file path",
            path.display()
        )));
    };
    let dir = placer_linux::state_dir::StateDir::open(dir).map_err(std::io::Error::other)?;
    Ok((dir, name.to_string_lossy().into_owned()))
}

/// The journal a previous placer left, if any.
fn read_journal(path: &Path) -> Option<CpusetJournal> {
    let (dir, name) = journal_dir(path).ok()?;
    let text = dir.read(&name).ok()?;
    match serde_json::from_str(&text) {
        Ok(j) => Some(j),
        Err(e) => {
            warn!("NRI: ignoring unreadable {}: {e}", path.display());
            None
        }
    }
}

/// A connected, registered plugin.
pub struct Plugin {
    shared: Arc<Shared>,
    client: api_ttrpc::RuntimeClient,
    mux: Mux,
    server: Option<ttrpc::Server>,
}

impl Plugin {
    /// Dials the runtime, registers and waits for Synchronize (module doc).
    pub fn connect(opts: &Options, state: State) -> Result<Plugin, NriError> {
        let trunk = UnixStream::connect(&opts.socket).map_err(|error| NriError::Connect {
            socket: opts.socket.clone(),
            error,
        })?;
        // Connection 1: the runtime calls placer. ttrpc's sync server wants a listening
        // socket: bind one privately, connect the bridge to it, unlink it.
        let (listener, served) = crate::mux::bridged_listener(&opts.private_dir)?;
        // Connection 2: placer calls the runtime.
        let (called, client_end) = UnixStream::pair()?;
        let mux = Mux::start(
            trunk,
            vec![
                (PLUGIN_SERVICE_CONN, served),
                (RUNTIME_SERVICE_CONN, called),
            ],
        )?;

        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            synced: Mutex::new(false),
            synced_cv: Condvar::new(),
            gone: AtomicBool::new(false),
            runtime: Mutex::new(String::new()),
            journal_path: opts.journal.clone(),
            root: opts.root.clone(),
        });
        let service: Arc<dyn api_ttrpc::Plugin + Send + Sync> = Arc::new(Service {
            shared: Arc::clone(&shared),
        });
        let mut server = ttrpc::Server::new()
            .add_listener(listener.into_raw_fd())
            .map_err(ttrpc_err)?
            .register_service(api_ttrpc::create_plugin(service));
        server.start().map_err(ttrpc_err)?;
        let client = api_ttrpc::RuntimeClient::new(
            ttrpc::Client::new(client_end.into_raw_fd()).map_err(ttrpc_err)?,
        );
        let plugin = Plugin {
            shared,
            client,
            mux,
            server: Some(server),
        };
        let req = api::RegisterPluginRequest {
            plugin_name: PLUGIN_NAME.into(),
            plugin_idx: format!("{:02}", opts.index),
            ..Default::default()
        };
        plugin
            .client
            .register_plugin(ctx(opts.timeout), &req)
            .map_err(ttrpc_err)?;
        let synced = plugin
            .shared
            .synced
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (synced, _) = plugin
            .shared
            .synced_cv
            .wait_timeout_while(synced, opts.timeout, |s| !*s)
            .unwrap_or_else(|p| p.into_inner());
        if !*synced {
            return Err(NriError::NotSynchronized(opts.timeout));
        }
        drop(synced);
        plugin.restore_left_over();
        info!(
            "NRI: registered as {PLUGIN_NAME} (index {:02}) with {}",
            opts.index,
            plugin.runtime()
        );
        Ok(plugin)
    }

    /// The runtime's name and version, as Configure said.
    pub fn runtime(&self) -> String {
        self.shared
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the runtime shut the plugin down or the connection ended.
    pub fn is_gone(&self) -> bool {
        self.shared.gone.load(Ordering::SeqCst) || self.mux.ended()
    }

    /// Runs `f` on the state, under its lock (the journal file follows its changes).
    pub fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.shared.state())
    }

    /// Puts back the container cpusets a previous placer journaled and could not restore
    /// (killed), and adopts the kubelet's requests it remembered; containers gone since are
    /// dropped from the journal file.
    fn restore_left_over(&self) {
        let Some(path) = self.shared.journal_path.as_deref() else {
            return;
        };
        let Some(left) = read_journal(path) else {
            return;
        };
        let present = self.with_state(|s| s.adopt(&left));
        if !left.previous.is_empty() {
            info!(
                "NRI: a previous placer left {} container cpuset(s) changed; putting back the {} still there",
                left.previous.len(),
                present.len()
            );
        }
        match self.update(&present) {
            Ok(failed) => {
                let failed = self.verify(&present, failed);
                // The cache held what the runtime reported at Synchronize: placer's moved
                // cpuset, which a later move would otherwise journal as the one to restore.
                self.with_state(|s| {
                    for u in present.iter().filter(|u| !failed.contains(&u.container_id)) {
                        s.restored(u);
                    }
                });
            }
            Err(e) => warn!("NRI: restoring the previous placer's cpusets: {e}"),
        }
        let current = self.with_state(|s| s.journal.clone());
        if let Err(e) = write_journal(path, &current) {
            warn!("NRI: writing {}: {e}", path.display());
        }
    }

    /// The restores in `sent` the runtime failed (`failed`) or accepted while the container's
    /// cgroup does not hold the cpuset sent (re-read, module doc), each said; their journal
    /// entries are kept.
    fn verify(&self, sent: &[CpusetUpdate], mut failed: Vec<String>) -> Vec<String> {
        for id in &failed {
            warn!("NRI: the runtime could not restore the cpuset of container {id}");
        }
        let paths: Vec<(String, String, String)> = self.with_state(|s| {
            sent.iter()
                .filter(|u| !failed.contains(&u.container_id))
                .filter_map(|u| {
                    let c = s.cache.containers.get(&u.container_id)?;
                    Some((
                        u.container_id.clone(),
                        u.cpus.clone(),
                        c.cgroups_path.clone(),
                    ))
                })
                .collect()
        });
        for (id, cpus, path) in paths {
            let Some(actual) = cgroup_cpus(&self.shared.root, &path) else {
                continue;
            };
            if CpuSet::parse_list(&cpus).ok().as_ref() != Some(&actual) {
                warn!(
                    "NRI: the runtime accepted cpuset {cpus} for container {id}, but its cgroup holds {actual}: kept in the journal"
                );
                failed.push(id);
            }
        }
        failed
    }

    pub fn explain(&self) -> Vec<ContainerView> {
        self.with_state(|s| s.explain())
    }

    /// Sends unsolicited cpuset updates; returns the ids the runtime failed to update.
    pub fn update(&self, updates: &[CpusetUpdate]) -> Result<Vec<String>, NriError> {
        if updates.is_empty() {
            return Ok(Vec::new());
        }
        let req = api::UpdateContainersRequest {
            update: updates.iter().map(container_update).collect(),
            ..Default::default()
        };
        let rsp = self
            .client
            .update_containers(ctx(Duration::from_secs(5)), &req)
            .map_err(ttrpc_err)?;
        Ok(rsp.failed.into_iter().map(|u| u.container_id).collect())
    }

    /// Puts back every cpuset placer replaced after creation (SIGTERM); returns how many.
    pub fn restore_all(&self) -> Result<usize, NriError> {
        let restores = self.with_state(|s| s.journal.restores());
        let failed = self.update(&restores)?;
        let failed = self.verify(&restores, failed);
        self.with_state(|s| {
            for u in restores
                .iter()
                .filter(|u| !failed.contains(&u.container_id))
            {
                s.restored(u);
            }
        });
        Ok(restores.len() - failed.len())
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        self.mux.close();
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}

fn ctx(timeout: Duration) -> ttrpc::context::Context {
    ttrpc::context::with_duration(timeout)
}

/// A ContainerUpdate that sets only the cpuset, and always names its container.
pub fn container_update(u: &CpusetUpdate) -> api::ContainerUpdate {
    let mut r = api::LinuxResources::new();
    r.cpu = Some(linux_cpu(&u.cpus, &u.mems)).into();
    let mut linux = api::LinuxContainerUpdate::new();
    linux.resources = Some(r).into();
    api::ContainerUpdate {
        container_id: u.container_id.clone(),
        linux: Some(linux).into(),
        ..Default::default()
    }
}

fn linux_cpu(cpus: &str, mems: &str) -> api::LinuxCPU {
    api::LinuxCPU {
        cpus: cpus.into(),
        mems: mems.into(),
        ..Default::default()
    }
}

pub fn pod_of(p: &api::PodSandbox) -> Pod {
    Pod {
        id: p.id.clone(),
        name: p.name.clone(),
        uid: p.uid.clone(),
        namespace: p.namespace.clone(),
        labels: p
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        annotations: p
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        cgroup_parent: p
            .linux
            .as_ref()
            .map(|l| l.cgroup_parent.clone())
            .unwrap_or_default(),
    }
}

pub fn container_of(c: &api::Container) -> Container {
    let linux = c.linux.as_ref();
    let cpu = linux
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.as_ref());
    Container {
        id: c.id.clone(),
        pod_id: c.pod_sandbox_id.clone(),
        name: c.name.clone(),
        annotations: c
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        cgroups_path: linux.map(|l| l.cgroups_path.clone()).unwrap_or_default(),
        cpus: cpu.map(|c| c.cpus.clone()).unwrap_or_default(),
        mems: cpu.map(|c| c.mems.clone()).unwrap_or_default(),
        cpu_quota_us: cpu.and_then(|c| c.quota.as_ref()).map(|q| q.value),
        cpu_period_us: cpu.and_then(|c| c.period.as_ref()).map(|p| p.value),
        cpu_shares: cpu.and_then(|c| c.shares.as_ref()).map(|s| s.value),
    }
}

/// The events placer subscribes to, as Configure's bit mask (bit `event - 1`).
pub fn subscribed_events() -> i32 {
    use api::Event as E;
    [
        E::RUN_POD_SANDBOX,
        E::REMOVE_POD_SANDBOX,
        E::CREATE_CONTAINER,
        E::UPDATE_CONTAINER,
        E::REMOVE_CONTAINER,
    ]
    .iter()
    .fold(0i32, |m, e| m | 1 << (*e as i32 - 1))
}

struct Service {
    shared: Arc<Shared>,
}

impl Service {
    fn state(&self) -> StateGuard<'_> {
        self.shared.state()
    }
}

fn refused(why: &str) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(
        ttrpc::Code::FAILED_PRECONDITION,
        format!("placer refuses this container: {why}"),
    ))
}

impl api_ttrpc::Plugin for Service {
    fn configure(
        &self,
        _ctx: &ttrpc::TtrpcContext,
        req: api::ConfigureRequest,
    ) -> ttrpc::Result<api::ConfigureResponse> {
        *self
            .shared
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner()) =
            format!("{} {}", req.runtime_name, req.runtime_version);
        Ok(api::ConfigureResponse {
            events: subscribed_events(),
            ..Default::default()
        })
    }

    fn synchronize(
        &self,
        _ctx: &ttrpc::TtrpcContext,
        req: api::SynchronizeRequest,
    ) -> ttrpc::Result<api::SynchronizeResponse> {
        {
            let mut st = self.state();
            for p in &req.pods {
                st.cache.upsert_pod(pod_of(p));
            }
            for c in &req.containers {
                st.cache.upsert_container(container_of(c));
            }
        }
        if !req.more {
            *self.shared.synced.lock().unwrap_or_else(|p| p.into_inner()) = true;
            self.shared.synced_cv.notify_all();
        }
        // Existing containers are not adjusted here: the engine moves them later.
        Ok(api::SynchronizeResponse {
            more: req.more,
            ..Default::default()
        })
    }

    fn shutdown(&self, _ctx: &ttrpc::TtrpcContext, _: api::Empty) -> ttrpc::Result<api::Empty> {
        info!("NRI: the runtime is shutting down");
        self.shared.gone.store(true, Ordering::SeqCst);
        Ok(api::Empty::new())
    }

    fn create_container(
        &self,
        _ctx: &ttrpc::TtrpcContext,
        req: api::CreateContainerRequest,
    ) -> ttrpc::Result<api::CreateContainerResponse> {
        let (Some(p), Some(c)) = (req.pod.as_ref(), req.container.as_ref()) else {
            return Ok(api::CreateContainerResponse::new());
        };
        let (pod, ctr) = (pod_of(p), container_of(c));
        let mut st = self.state();
        let mut rsp = api::CreateContainerResponse::new();
        match st.create(pod.clone(), ctr.clone()) {
            Placement::Cpuset {
                cpus, mems, policy, ..
            } => {
                info!(
                    "NRI: {}/{} container {}: [{policy}] cpuset {cpus} mems {mems}",
                    pod.namespace, pod.name, ctr.name
                );
                let mut r = api::LinuxResources::new();
                r.cpu = Some(linux_cpu(&cpus.to_list_string(), &mems)).into();
                let mut linux = api::LinuxContainerAdjustment::new();
                linux.resources = Some(r).into();
                let mut adjust = api::ContainerAdjustment::new();
                adjust.linux = Some(linux).into();
                rsp.adjust = Some(adjust).into();
            }
            Placement::Leave { why } => {
                // An operator who annotated the pod wants to know why nothing happened.
                let asked = pod
                    .annotations
                    .keys()
                    .chain(ctr.annotations.keys())
                    .any(|k| {
                        k.starts_with("policy.placer.io/") || k.starts_with("preserve.placer.io/")
                    });
                let line = format!(
                    "NRI: {}/{} container {}: left alone: {why}",
                    pod.namespace, pod.name, ctr.name
                );
                if asked {
                    info!("{line}");
                } else {
                    tracing::debug!("{line}");
                }
            }
            Placement::Refuse { why } => {
                warn!(
                    "NRI: {}/{} container {}: refused: {why}",
                    pod.namespace, pod.name, ctr.name
                );
                return Err(refused(&why));
            }
        }
        Ok(rsp)
    }

    fn update_container(
        &self,
        _ctx: &ttrpc::TtrpcContext,
        req: api::UpdateContainerRequest,
    ) -> ttrpc::Result<api::UpdateContainerResponse> {
        let (Some(p), Some(c)) = (req.pod.as_ref(), req.container.as_ref()) else {
            return Ok(api::UpdateContainerResponse::new());
        };
        let pod = pod_of(p);
        let mut ctr = container_of(c);
        // The kubelet's new cpuset is in the request's resources.
        if let Some(cpu) = req.linux_resources.as_ref().and_then(|r| r.cpu.as_ref()) {
            ctr.cpus = cpu.cpus.clone();
            ctr.mems = cpu.mems.clone();
        }
        let mut st = self.state();
        let mut rsp = api::UpdateContainerResponse::new();
        match st.update(pod, ctr.clone()) {
            Placement::Cpuset { cpus, mems, .. } => {
                rsp.update.push(container_update(&CpusetUpdate {
                    container_id: ctr.id.clone(),
                    cpus: cpus.to_list_string(),
                    mems,
                }));
            }
            Placement::Leave { .. } => {}
            Placement::Refuse { why } => return Err(refused(&why)),
        }
        Ok(rsp)
    }

    fn state_change(
        &self,
        _ctx: &ttrpc::TtrpcContext,
        ev: api::StateChangeEvent,
    ) -> ttrpc::Result<api::Empty> {
        use api::Event as E;
        let mut st = self.state();
        match ev.event.enum_value_or_default() {
            E::RUN_POD_SANDBOX => {
                if let Some(p) = ev.pod.as_ref() {
                    st.cache.upsert_pod(pod_of(p));
                }
            }
            E::REMOVE_POD_SANDBOX => {
                if let Some(p) = ev.pod.as_ref() {
                    for id in st.cache.remove_pod(&p.id) {
                        st.forget(&id);
                    }
                }
            }
            E::REMOVE_CONTAINER => {
                if let Some(c) = ev.container.as_ref() {
                    st.forget(&c.id);
                }
            }
            _ => {}
        }
        Ok(api::Empty::new())
    }
}

/// The cpuset the kernel holds for a container: `cpuset.cpus` of its cgroup under `root`
/// (cgroup v1's cpuset hierarchy, else the unified one). None when it cannot be found (the
/// systemd form `slice:prefix:id`, no such directory, an unset v2 cpuset): the restore is
/// then taken on the runtime's word.
pub fn cgroup_cpus(root: &Path, cgroups_path: &str) -> Option<CpuSet> {
    if cgroups_path.is_empty() || cgroups_path.contains(':') {
        return None;
    }
    let rel = cgroups_path.trim_start_matches('/');
    ["sys/fs/cgroup/cpuset", "sys/fs/cgroup"]
        .iter()
        .find_map(|base| {
            let text =
                std::fs::read_to_string(root.join(base).join(rel).join("cpuset.cpus")).ok()?;
            CpuSet::parse_list(text.trim()).ok()
        })
        .filter(|c| !c.is_empty())
}

/// The id of the container `pid` runs in, from `{root}/proc/PID/cgroup`: a kubepods path,
/// else the last component of any path as a runtime names it (`<id>`, `cri-containerd-<id>.scope`,
/// `crio-<id>.scope`), for pods whose `cgroup_parent` is not kubepods-shaped (a runtime
/// without a kubelet, a custom parent). The caller keeps only ids the runtime reported.
pub fn container_of_pid(root: &Path, pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(root.join(format!("proc/{pid}/cgroup"))).ok()?;
    let paths = || text.lines().filter_map(|l| l.splitn(3, ':').nth(2));
    paths()
        .find_map(placer_core::k8s::parse_cgroup_path)
        .map(|p| p.container_id)
        .or_else(|| paths().find_map(runtime_container_id))
}

/// A container id as the last component of a cgroup path: 64 hex digits, bare or inside a
/// runtime's scope name.
fn runtime_container_id(path: &str) -> Option<String> {
    let last = path.trim_end_matches('/').rsplit('/').next()?;
    let last = last.strip_suffix(".scope").unwrap_or(last);
    let id = last.rsplit(['-', ':']).next()?;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_mask_has_one_bit_per_subscribed_event() {
        // RunPodSandbox 1, RemovePodSandbox 3, CreateContainer 4, UpdateContainer 8,
        // RemoveContainer 11 -> bits 0, 2, 3, 7, 10.
        assert_eq!(subscribed_events(), 1 | 1 << 2 | 1 << 3 | 1 << 7 | 1 << 10);
    }

    #[test]
    fn a_container_update_names_its_container_and_sets_only_the_cpuset() {
        let u = container_update(&CpusetUpdate {
            container_id: "abc".into(),
            cpus: "0-1".into(),
            mems: "0".into(),
        });
        assert_eq!(u.container_id, "abc");
        let r = u.linux.resources.as_ref().unwrap();
        let cpu = r.cpu.as_ref().unwrap();
        assert_eq!((cpu.cpus.as_str(), cpu.mems.as_str()), ("0-1", "0"));
        assert!(cpu.shares.is_none() && cpu.quota.is_none() && cpu.period.is_none());
        assert!(r.memory.is_none() && r.pids.is_none());
    }

    #[test]
    fn pid_to_container_through_its_cgroup() {
        let tmp = placer_testkit::TempDir::new("nri-cg");
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("proc/42")).unwrap();
        std::fs::write(
            dir.join("proc/42/cgroup"),
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda_b.slice/cri-containerd-c0ffee.scope\n",
        )
        .unwrap();
        let got = container_of_pid(dir, 42);
        let none = container_of_pid(dir, 43);
        assert_eq!(got.as_deref(), Some("c0ffee"));
        assert_eq!(none, None);
    }

    #[test]
    fn a_containers_cpuset_is_read_from_its_cgroup_v1_or_v2() {
        let tmp = placer_testkit::TempDir::new("nri-cg-cpus");
        let root = tmp.path();
        let v1 = root.join("sys/fs/cgroup/cpuset/kubepods/burstable/poda/c1");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("cpuset.cpus"), "0-1\n").unwrap();
        let v2 = root.join("sys/fs/cgroup/kubepods/podb/c2");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("cpuset.cpus"), "3\n").unwrap();
        let unset = root.join("sys/fs/cgroup/kubepods/podb/c3");
        std::fs::create_dir_all(&unset).unwrap();
        std::fs::write(unset.join("cpuset.cpus"), "\n").unwrap();
        let got = |p: &str| cgroup_cpus(root, p).map(|c| c.to_list_string());
        assert_eq!(got("/kubepods/burstable/poda/c1").as_deref(), Some("0-1"));
        assert_eq!(got("/kubepods/podb/c2").as_deref(), Some("3"));
        assert_eq!(got("/kubepods/podb/c3"), None);
        assert_eq!(got("/kubepods/podb/gone"), None);
        assert_eq!(got("kubepods-podb.slice:cri-containerd:c2"), None);
    }

    #[test]
    fn pid_to_container_outside_kubepods_by_the_runtimes_name() {
        let tmp = placer_testkit::TempDir::new("nri-cg-other");
        let dir = tmp.path();
        let id = "ab".repeat(32);
        let cases = [
            (
                41,
                format!("4:cpuset:/k8s.io/{id}\n1:cpu:/k8s.io/{id}\n"),
                Some(id.clone()),
            ),
            (
                42,
                format!("0::/system.slice/cri-containerd-{id}.scope\n"),
                Some(id.clone()),
            ),
            (
                43,
                format!("0::/custom/crio-{id}.scope\n"),
                Some(id.clone()),
            ),
            // A host process: no id-shaped component.
            (
                44,
                "0::/user.slice/user-0.slice/session-1.scope\n".to_string(),
                None,
            ),
            (45, format!("0::/k8s.io/{}\n", &id[..63]), None),
        ];
        for (pid, text, want) in cases {
            std::fs::create_dir_all(dir.join(format!("proc/{pid}"))).unwrap();
            std::fs::write(dir.join(format!("proc/{pid}/cgroup")), &text).unwrap();
            assert_eq!(container_of_pid(dir, pid), want, "{text}");
        }
    }
}
