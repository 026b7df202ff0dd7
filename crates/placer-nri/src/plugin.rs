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
//! - **Never hangs, never deaf** (issue 36). The plugin service is served here, on
//!   connection 1 itself (no listening socket, no ttrpc server and its thread joins), one
//!   request at a time within the runtime's 2 s budget: every request gets a reply, an
//!   error status when it cannot be decoded, names an unknown method or is not a request;
//!   a broken stream (EOF, a header over ttrpc's 4 MiB, a reply the runtime does not read
//!   within [`WRITE_TIMEOUT`]) is the runtime gone: what placer changed is put back through
//!   the runtime while it can still be reached, then the trunk is closed and
//!   [`Plugin::is_gone`] says so (the daemon restores the host and exits 1). Nothing on
//!   any path waits for a thread to end: dropping the plugin closes the trunk, and every
//!   thread ends on its EOF.

use crate::mux::{Mux, MuxError, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::placement::{
    Container, ContainerView, CpusetJournal, CpusetUpdate, Placement, Pod, State,
};
use crate::proto::{api, api_ttrpc};
use crate::wire::{self, WireError};
use placer_core::cpuset::CpuSet;
use protobuf::Message;
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tracing::{info, warn};
use ttrpc::proto::Status;

pub const PLUGIN_NAME: &str = "placer";
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";
/// Not 90, nri-plugins' default: before its resource policies (docs/kubernetes.md, "NRI index").
pub const DEFAULT_INDEX: u32 = 70;
/// The plugin service's name on the wire (api.proto's package and service).
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// How long a reply may wait for the runtime to read it before the stream counts as broken.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// A request handled slower than this is said (the runtime gives up at 2 s).
const SLOW_REQUEST: Duration = Duration::from_millis(500);

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
    #[error("NRI: the connection to the runtime ended or broke during registration")]
    GoneWhileRegistering,
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
    /// Placer's calls to the runtime (connection 2).
    client: api_ttrpc::RuntimeClient,
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

/// Replaces the journal file atomically (temporary file and rename: a placer killed at any
/// point leaves the old or the new one; a private file, no link followed), without fsync:
/// what it protects against is a placer that dies, whose writes the page cache keeps; a
/// machine that crashes restarts every container with the kubelet's cpuset anyway. Each
/// CreateContainer of a managed container rewrites it, in the pod's path: two fsyncs there
/// cost milliseconds (docs/kubernetes.md, "Cost at creation"). An empty journal removes it.
fn write_journal(path: &Path, j: &CpusetJournal) -> std::io::Result<()> {
    let (dir, name) = journal_dir(path)?;
    if j.is_empty() {
        return dir.remove(&name).map_err(std::io::Error::other);
    }
    let bytes = serde_json::to_vec_pretty(j).map_err(std::io::Error::other)?;
    dir.write_replace(&name, &bytes)
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
    mux: Arc<Mux>,
}

impl Plugin {
    /// Dials the runtime, registers and waits for Synchronize (module doc).
    pub fn connect(opts: &Options, state: State) -> Result<Plugin, NriError> {
        let trunk = UnixStream::connect(&opts.socket).map_err(|error| NriError::Connect {
            socket: opts.socket.clone(),
            error,
        })?;
        // Connection 1: the runtime calls placer (served by `serve`).
        let (served, serve_end) = UnixStream::pair()?;
        // Connection 2: placer calls the runtime.
        let (called, client_end) = UnixStream::pair()?;
        let mux = Arc::new(Mux::start(
            trunk,
            vec![
                (PLUGIN_SERVICE_CONN, served),
                (RUNTIME_SERVICE_CONN, called),
            ],
        )?);
        let client = api_ttrpc::RuntimeClient::new(
            ttrpc::Client::new(client_end.into_raw_fd()).map_err(ttrpc_err)?,
        );
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            synced: Mutex::new(false),
            synced_cv: Condvar::new(),
            gone: AtomicBool::new(false),
            runtime: Mutex::new(String::new()),
            journal_path: opts.journal.clone(),
            root: opts.root.clone(),
            client,
        });
        let service = Service {
            shared: Arc::clone(&shared),
        };
        let trunk_mux = Arc::clone(&mux);
        std::thread::Builder::new()
            .name("nri-serve".into())
            .spawn(move || serve(serve_end, &service, &trunk_mux))?;
        let plugin = Plugin { shared, mux };
        let req = api::RegisterPluginRequest {
            plugin_name: PLUGIN_NAME.into(),
            plugin_idx: format!("{:02}", opts.index),
            ..Default::default()
        };
        plugin
            .shared
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
            .wait_timeout_while(synced, opts.timeout, |s| {
                !*s && !plugin.shared.gone.load(Ordering::SeqCst)
            })
            .unwrap_or_else(|p| p.into_inner());
        if plugin.shared.gone.load(Ordering::SeqCst) {
            return Err(NriError::GoneWhileRegistering);
        }
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
        self.shared.with_state(f)
    }

    /// Puts back the container cpusets a previous placer journaled and could not restore
    /// (killed), and adopts the kubelet's requests it remembered; containers gone since are
    /// dropped from the journal file.
    fn restore_left_over(&self) {
        let Some(path) = self.shared.journal_path.as_deref() else {
            return;
        };
        let Some(mut left) = read_journal(path) else {
            return;
        };
        for why in left.refuse_unreadable() {
            warn!("NRI: {}: refusing {why}", path.display());
        }
        let present = self.with_state(|s| s.adopt(&left));
        if !left.previous.is_empty() {
            info!(
                "NRI: a previous placer left {} container cpuset(s) changed; putting back the {} still there",
                left.previous.len(),
                present.len()
            );
        }
        match self.shared.update(&present) {
            Ok(failed) => {
                let failed = self.shared.verify(&present, failed);
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

    pub fn explain(&self) -> Vec<ContainerView> {
        self.with_state(|s| s.explain())
    }

    /// Sends unsolicited cpuset updates; returns the ids the runtime failed to update.
    pub fn update(&self, updates: &[CpusetUpdate]) -> Result<Vec<String>, NriError> {
        self.shared.update(updates)
    }

    /// Puts back every cpuset placer replaced after creation (SIGTERM); returns how many.
    pub fn restore_all(&self) -> Result<usize, NriError> {
        self.shared.restore_all()
    }
}

impl Shared {
    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state())
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
            let Some(actual) = cgroup_cpus(&self.root, &path) else {
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
    /// Ends the trunk; every thread ends on its EOF (none is waited for).
    fn drop(&mut self) {
        // Expected: the serve thread ends quietly on the EOF.
        self.shared.gone.store(true, Ordering::SeqCst);
        self.mux.close();
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

fn refused(why: &str) -> Status {
    ttrpc::get_status(
        ttrpc::Code::FAILED_PRECONDITION,
        format!("placer refuses this container: {why}"),
    )
}

impl Service {
    fn configure(&self, req: api::ConfigureRequest) -> Result<api::ConfigureResponse, Status> {
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
        req: api::SynchronizeRequest,
    ) -> Result<api::SynchronizeResponse, Status> {
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

    fn shutdown(&self, _: api::Empty) -> Result<api::Empty, Status> {
        info!("NRI: the runtime is shutting down");
        self.shared.gone.store(true, Ordering::SeqCst);
        Ok(api::Empty::new())
    }

    fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> Result<api::CreateContainerResponse, Status> {
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
            Placement::Invalid { why } => warn!(
                "NRI: {}/{} container {}: {why}",
                pod.namespace, pod.name, ctr.name
            ),
        }
        Ok(rsp)
    }

    fn update_container(
        &self,
        req: api::UpdateContainerRequest,
    ) -> Result<api::UpdateContainerResponse, Status> {
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
            Placement::Invalid { why } => warn!(
                "NRI: {}/{} container {}: update: {why}",
                p.namespace, p.name, ctr.name
            ),
            Placement::Refuse { why } => return Err(refused(&why)),
        }
        Ok(rsp)
    }

    fn state_change(&self, ev: api::StateChangeEvent) -> Result<api::Empty, Status> {
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

/// `method`'s request `body` decoded, handled by `f`, its reply encoded; an undecodable
/// body is an error status (the request is answered, never dropped).
fn call<Q: protobuf::Message, R: protobuf::Message>(
    method: &str,
    body: &[u8],
    f: impl FnOnce(Q) -> Result<R, Status>,
) -> Result<Vec<u8>, Status> {
    let req = Q::parse_from_bytes(body).map_err(|e| {
        ttrpc::get_status(
            ttrpc::Code::INVALID_ARGUMENT,
            format!("placer cannot decode this {method} request: {e}"),
        )
    })?;
    f(req)?.write_to_bytes().map_err(|e| {
        ttrpc::get_status(
            ttrpc::Code::INTERNAL,
            format!("placer cannot encode its {method} reply: {e}"),
        )
    })
}

impl Service {
    /// One request of the plugin service: its reply, or the error status to answer with;
    /// and its method, when the envelope decoded.
    fn dispatch(&self, request: &[u8]) -> (String, Result<Vec<u8>, Status>) {
        let req = match ttrpc::proto::Request::parse_from_bytes(request) {
            Ok(r) => r,
            Err(e) => {
                let s = ttrpc::get_status(
                    ttrpc::Code::INVALID_ARGUMENT,
                    format!("placer cannot decode this ttrpc request: {e}"),
                );
                return (String::new(), Err(s));
            }
        };
        let reply = self.handle(&req);
        (req.method, reply)
    }

    fn handle(&self, req: &ttrpc::proto::Request) -> Result<Vec<u8>, Status> {
        let (m, body) = (req.method.as_str(), req.payload.as_slice());
        if req.service != PLUGIN_SERVICE {
            return Err(ttrpc::get_status(
                ttrpc::Code::UNIMPLEMENTED,
                format!("placer serves {PLUGIN_SERVICE}, not {:?}", req.service),
            ));
        }
        match m {
            "Configure" => call(m, body, |q| self.configure(q)),
            "Synchronize" => call(m, body, |q| self.synchronize(q)),
            "Shutdown" => call(m, body, |q| self.shutdown(q)),
            "CreateContainer" => call(m, body, |q| self.create_container(q)),
            "UpdateContainer" => call(m, body, |q| self.update_container(q)),
            "StateChange" => call(m, body, |q| self.state_change(q)),
            _ => Err(ttrpc::get_status(
                ttrpc::Code::UNIMPLEMENTED,
                format!("placer does not serve {PLUGIN_SERVICE}/{m:?}"),
            )),
        }
    }
}

/// Serves the plugin service on `conn` (connection 1) until the stream ends or breaks
/// (module doc); then puts back what placer changed while the runtime can still be
/// reached, marks the runtime gone and closes the trunk. Never waits for another thread.
fn serve(mut conn: UnixStream, svc: &Service, mux: &Mux) {
    let end = loop {
        let (mh, payload) = match wire::read_message(&mut conn) {
            Ok(m) => m,
            Err(e) => break e,
        };
        let t0 = std::time::Instant::now();
        let (method, reply) = if wire::is_request(&mh) {
            svc.dispatch(&payload)
        } else {
            let s = ttrpc::get_status(
                ttrpc::Code::INVALID_ARGUMENT,
                format!(
                    "placer serves requests only, not a message of type {}",
                    mh.type_
                ),
            );
            (String::new(), Err(s))
        };
        if let Err(s) = &reply {
            warn!("NRI: answering a request with an error: {}", s.message);
        }
        let took = t0.elapsed();
        if took > SLOW_REQUEST {
            warn!("NRI: a {method} request took {took:?} (the runtime's budget is 2 s)");
        }
        // placer's own handling time, from the decoded request to the encoded reply (the
        // cost in the pod's path, docs/kubernetes.md; PLACER_LOG=placer_nri=debug).
        tracing::debug!("NRI: {method} handled in {} us", took.as_micros());
        let (rh, body) = wire::response(mh.stream_id, reply);
        if let Err(e) = conn
            .set_write_timeout(Some(WRITE_TIMEOUT))
            .and_then(|()| wire::write_message(&mut conn, rh, &body))
        {
            break WireError::Io(e);
        }
    };
    // Gone already: the runtime said Shutdown, or placer itself let go of the plugin.
    let expected = svc.shared.gone.load(Ordering::SeqCst);
    if !matches!(end, WireError::Closed) || !expected {
        warn!("NRI: the plugin connection ended: {end}; the runtime is taken as gone");
    }
    // A broken plugin connection on a working trunk: put the containers back while the
    // runtime can still be reached (a closed trunk leaves them to the journal file).
    if !mux.ended() && !expected {
        match svc.shared.restore_all() {
            Ok(n) if n > 0 => info!("NRI: {n} container cpuset(s) put back through the runtime"),
            Ok(_) => {}
            Err(e) => warn!("NRI: putting container cpusets back: {e}"),
        }
    }
    svc.shared.gone.store(true, Ordering::SeqCst);
    // A connect still waiting for Synchronize fails now, not at its timeout.
    let _synced = svc.shared.synced.lock().unwrap_or_else(|p| p.into_inner());
    svc.shared.synced_cv.notify_all();
    mux.close();
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
