//! End to end through a real container runtime (issues 19, 35): containerd 1.7 or later with
//! NRI on, runc, and crictl as the kubelet's stand-in (`scripts/cri-tools.sh` installs them;
//! `scripts/test.sh` runs it first). Root tests; a missing runtime is a visible skip, a
//! failure under `PLACER_REQUIRE_ROOT=1`.
//!
//! Each test runs a private containerd (its own root, state, runc root and sockets under a
//! temporary directory; CRI with `restrict_oom_score_adj`, without which runc cannot start a
//! pod without CAP_SYS_RESOURCE; no registry: the image is a locally built OCI tarball of the
//! static busybox) whose pods have a kubepods `cgroup_parent`, as a kubelet's do. The tests
//! take turns (one lock), and each leaves no pod, cgroup directory, runc state or process.
//! What they check:
//! - a pod annotated for smt-energy gets placer's cpuset at creation, and its process runs there;
//! - D1: a container the kubelet set no cpuset on, moved by the engine, gets every online CPU
//!   back on SIGTERM (an empty cpuset is "unchanged" to the runtime);
//! - D2: kill -9, restart, move, SIGTERM returns the kubelet's cpuset;
//! - D3: a cpuset placer substitutes in a resize (UpdateContainer) is put back on SIGTERM;
//! - D4: a restarted placer moves a container it placed at creation outside that cpuset.

use placer_testkit::proc::{die_with_parent, KillOnDrop};
use placer_testkit::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs a command to completion; its stdout. Panics with its output on failure.
fn sh(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Polls `f` every 100 ms for at most `limit`.
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn sha256(path: &Path) -> String {
    let out = sh(Command::new("sha256sum").arg(path));
    out.split_whitespace().next().expect("a digest").to_string()
}

/// Copies `file` in as a blob of an OCI layout; (digest, size).
fn blob(layout: &Path, file: &Path) -> (String, u64) {
    let hex = sha256(file);
    let dst = layout.join("blobs/sha256").join(&hex);
    std::fs::create_dir_all(dst.parent().expect("parent")).expect("blobs dir");
    std::fs::copy(file, &dst).expect("blob");
    (
        format!("sha256:{hex}"),
        std::fs::metadata(&dst).expect("size").len(),
    )
}

/// Writes `value` to `file` and adds it as a blob; (digest, size).
fn json_blob(layout: &Path, file: &Path, value: &serde_json::Value) -> (String, u64) {
    std::fs::write(file, value.to_string()).expect("json blob");
    blob(layout, file)
}

/// An OCI image tarball of the static busybox, named `docker.io/library/placer-e2e:1`.
fn image_tarball(d: &Path) -> PathBuf {
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("busybox (Debian: busybox-static)");
    let rootfs = d.join("rootfs");
    std::fs::create_dir_all(rootfs.join("bin")).expect("rootfs");
    std::fs::copy(&busybox, rootfs.join("bin/busybox")).expect("busybox");
    std::os::unix::fs::symlink("busybox", rootfs.join("bin/sh")).expect("sh");
    let layout = d.join("layout");
    std::fs::create_dir_all(&layout).expect("layout");
    let layer = d.join("layer.tar");
    sh(Command::new("tar")
        .arg("-C")
        .arg(&rootfs)
        .arg("-cf")
        .arg(&layer)
        .arg("."));
    let (layer_digest, layer_size) = blob(&layout, &layer);
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": ["/bin/sh", "-c", "sleep 3600"]},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    });
    let (cfg_digest, cfg_size) = json_blob(&layout, &d.join("config.json"), &config);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": cfg_digest, "size": cfg_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": layer_size}],
    });
    let (man_digest, man_size) = json_blob(&layout, &d.join("manifest.json"), &manifest);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": man_digest, "size": man_size,
                       "annotations": {"io.containerd.image.name": IMAGE,
                                       "org.opencontainers.image.ref.name": "1"}}],
    });
    std::fs::write(layout.join("index.json"), index.to_string()).expect("index");
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .expect("oci-layout");
    let tarball = d.join("image.tar");
    sh(Command::new("tar")
        .arg("-C")
        .arg(&layout)
        .arg("-cf")
        .arg(&tarball)
        .arg("."));
    tarball
}

const IMAGE: &str = "docker.io/library/placer-e2e:1";

/// The tests share the machine's two CPUs and cgroup tree: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Why the CRI tests cannot run here, if they cannot.
fn runtime_missing() -> Option<String> {
    if let Some(m) = placer_testkit::missing_tool(&["runc", "crictl", "ctr"]) {
        return Some(format!(
            "{m} (scripts/cri-tools.sh installs the CRI runtime)"
        ));
    }
    let version = Command::new("containerd").arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&version.stdout);
    match placer_testkit::containerd_version(&text) {
        Some(v) if v >= (1, 7) => None,
        _ => Some(format!(
            "containerd >= 1.7 (NRI) needed, found {:?} (scripts/cri-tools.sh)",
            text.trim()
        )),
    }
    .or_else(|| {
        ["/bin/busybox", "/usr/bin/busybox"]
            .iter()
            .all(|p| !Path::new(p).exists())
            .then(|| "busybox-static not installed".to_string())
    })
}

/// A private containerd, its pods and the placers started against it; all removed on drop.
struct Rig {
    tmp: TempDir,
    endpoint: String,
    nri_sock: PathBuf,
    containerd: Option<KillOnDrop>,
    placer: Option<Placer>,
    pods: Vec<String>,
    /// The pods' cgroup parents (relative to each hierarchy), removed at the end.
    parents: Vec<String>,
    uid_prefix: String,
    /// PLACER_LOG for the placers started (None: their default).
    log_filter: Option<&'static str>,
    /// A tmpfs for placer's state dir (None: a directory of the rig's): the default state
    /// dir, /run/placer, is a tmpfs on systemd hosts and in the DaemonSet's hostPath, and
    /// the journal's rename on ext4 costs more than the rest of a request (docs/kubernetes.md).
    /// Unmounted after the rig's teardown has stopped placer.
    state_fs: Option<placer_testkit::SmallTmpfs>,
    _turn: std::sync::MutexGuard<'static, ()>,
}

struct Placer {
    child: KillOnDrop,
    log: PathBuf,
}

impl Placer {
    fn logged(&self, s: &str) -> bool {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .contains(s)
    }
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Rig {
    /// None (after a visible skip) where the runtime is missing.
    fn start(tag: &str) -> Option<Rig> {
        placer_testkit::require_root();
        if let Some(why) = runtime_missing() {
            placer_testkit::skip(&why);
            return None;
        }
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let tmp = TempDir::new(&format!("cri-{tag}"));
        let d = tmp.path().to_path_buf();
        let image = image_tarball(&d);
        let sock = d.join("containerd.sock");
        let nri_sock = d.join("nri.sock");
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{nri}"
  plugin_path = "{d}/nri-plugins"
  plugin_config_path = "{d}/nri-conf"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    Root = "{d}/runc"
"#,
            d = d.display(),
            sock = sock.display(),
            nri = nri_sock.display(),
        );
        std::fs::write(d.join("containerd.toml"), config).expect("containerd config");
        let log = std::fs::File::create(d.join("containerd.log")).expect("log");
        let containerd = KillOnDrop(
            die_with_parent(
                Command::new("containerd")
                    .arg("--config")
                    .arg(d.join("containerd.toml"))
                    .stdout(log.try_clone().expect("dup"))
                    .stderr(log),
            )
            .spawn()
            .expect("containerd"),
        );
        let rig = Rig {
            endpoint: format!("unix://{}", sock.display()),
            nri_sock: nri_sock.clone(),
            containerd: Some(containerd),
            placer: None,
            pods: Vec::new(),
            parents: Vec::new(),
            uid_prefix: format!("placer-e2e-{}-{tag}-", std::process::id()),
            log_filter: None,
            state_fs: None,
            tmp,
            _turn: turn,
        };
        wait_for("containerd's NRI socket", Duration::from_secs(30), || {
            sock.exists() && nri_sock.exists()
        });
        sh(Command::new("ctr")
            .arg("--address")
            .arg(&sock)
            .args(["-n", "k8s.io", "images", "import"])
            .arg(&image));
        Some(rig)
    }

    fn d(&self) -> &Path {
        self.tmp.path()
    }

    /// placer's state dir: on the rig's tmpfs when it has one.
    fn state_dir(&self) -> PathBuf {
        self.state_fs
            .as_ref()
            .map_or_else(|| self.d().join("placer"), |f| f.path().to_path_buf())
    }

    fn crictl(&self, args: &[&str]) -> String {
        sh(Command::new("crictl")
            .args(["--runtime-endpoint", &self.endpoint])
            .args(["--image-endpoint", &self.endpoint])
            .args(["--timeout", "20s"])
            .args(args))
    }

    fn inspect(&self, id: &str) -> serde_json::Value {
        serde_json::from_str(&self.crictl(&["inspect", id])).expect("inspect JSON")
    }

    /// The cpuset the runtime applied to a container (its OCI spec; "" = none).
    fn cpuset(&self, id: &str) -> String {
        self.inspect(id)
            .pointer("/info/runtimeSpec/linux/resources/cpu/cpus")
            .and_then(|c| c.as_str())
            .unwrap_or_default()
            .to_string()
    }

    /// Where the container's process may run (the kernel's view, not the spec's).
    fn allowed(&self, id: &str) -> String {
        let pid = self
            .inspect(id)
            .pointer("/info/pid")
            .and_then(|p| p.as_u64())
            .expect("container pid") as u32;
        placer_testkit::proc::status_field(pid, "Cpus_allowed_list:").expect("status")
    }

    /// A pod named `name` with `annotations`, in a kubepods cgroup as a kubelet's pod is.
    fn pod(&mut self, name: &str, annotations: &[(&str, &str)]) -> String {
        let uid = format!("{}{name}", self.uid_prefix);
        let parent = format!("/kubepods/burstable/pod{uid}");
        let ann: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        let file = self.d().join(format!("pod-{name}.json"));
        std::fs::write(
            &file,
            serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "uid": uid, "attempt": 0},
                "annotations": ann,
                "log_directory": self.d().join("logs").display().to_string(),
                "linux": {"cgroup_parent": parent,
                          "security_context": {"namespace_options": {"network": 2}}},
            })
            .to_string(),
        )
        .expect("pod.json");
        self.parents.push(parent);
        let id = self.crictl(&["runp", file.to_str().expect("utf-8")]);
        self.pods.push(id.clone());
        id
    }

    /// A started container spinning on one CPU in `pod` (named as in [`Rig::pod`]), with
    /// a one-CPU quota and, when given, the kubelet's cpuset.
    fn container(&self, pod: &str, pod_name: &str, kubelet_cpus: Option<&str>) -> String {
        let mut res = serde_json::json!({"cpu_period": 100000, "cpu_quota": 100000});
        if let Some(c) = kubelet_cpus {
            res["cpuset_cpus"] = c.into();
        }
        let file = self.d().join(format!("ctr-{pod_name}.json"));
        std::fs::write(
            &file,
            serde_json::json!({
                "metadata": {"name": "app"},
                "image": {"image": IMAGE},
                "command": ["/bin/sh", "-c", "while :; do :; done"],
                "log_path": format!("{pod_name}.log"),
                "linux": {"resources": res},
            })
            .to_string(),
        )
        .expect("container.json");
        let pod_file = self.d().join(format!("pod-{pod_name}.json"));
        let id = self.crictl(&[
            "create",
            pod,
            file.to_str().expect("utf-8"),
            pod_file.to_str().expect("utf-8"),
        ]);
        self.crictl(&["start", &id]);
        id
    }

    /// Starts placer as the NRI plugin with `config` (its state dir is kept across restarts).
    fn start_placer(&mut self, config: &str) {
        assert!(self.placer.is_none(), "one placer at a time");
        let d = self.d().to_path_buf();
        std::fs::write(d.join("placer.toml"), config).expect("placer config");
        let n = std::fs::read_dir(&d).map(|r| r.count()).unwrap_or(0);
        let log = d.join(format!("placer-{n}.log"));
        let file = std::fs::File::create(&log).expect("log");
        let child = KillOnDrop(
            die_with_parent(
                Command::new(placer_bin())
                    .arg("daemon")
                    .arg("--config")
                    .arg(d.join("placer.toml"))
                    .arg("--state-dir")
                    .arg(self.state_dir())
                    .args(["--nri", "--nri-socket"])
                    .arg(&self.nri_sock)
                    .args(["--interval", "250ms"])
                    .envs(self.log_filter.map(|f| ("PLACER_LOG", f)))
                    .stdout(file.try_clone().expect("dup"))
                    .stderr(file),
            )
            .spawn()
            .expect("placer"),
        );
        let p = Placer { child, log };
        wait_for("placer's registration", Duration::from_secs(20), || {
            p.logged("NRI: registered")
        });
        self.placer = Some(p);
    }

    fn placer_log(&self) -> String {
        self.placer.as_ref().map(Placer::log).unwrap_or_default()
    }

    /// SIGTERM (placer restores what it journaled) or SIGKILL; waits for the exit.
    fn stop_placer(&mut self, signal: i32) {
        let mut p = self.placer.take().expect("a running placer");
        placer_linux::sys::kill(p.child.0.id(), signal).expect("signal to placer");
        wait_for("placer to exit", Duration::from_secs(20), || {
            p.child.0.try_wait().expect("wait").is_some()
        });
    }

    /// The NRI journal placer keeps in its state dir (Null when there is none).
    fn journal(&self) -> serde_json::Value {
        std::fs::read_to_string(self.state_dir().join("nri-journal.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(serde_json::Value::Null)
    }

    /// The engine config of these tests: smt-energy on the processes of this rig's pods
    /// (by their cgroup parent), every pin kept (no verdicts on a shared 2-vCPU machine).
    fn engine_config(&self, pods: &[&str]) -> String {
        let apps: Vec<String> = pods
            .iter()
            .map(|p| {
                format!(
                    "{{ cgroup = \"/kubepods/burstable/pod{}{p}\" }}",
                    self.uid_prefix
                )
            })
            .collect();
        format!(
            "policies = [\"smt-energy\"]\n[metrics]\nenabled = false\n[verify]\nenabled = false\n\
             [smt_energy]\nmin_cpu_share = 0.1\nshrink_after_s = 600.0\napps = [{}]\n",
            apps.join(", ")
        )
    }

    /// What the rig left behind: cgroup dirs of its pods, runc state, processes naming its
    /// directory.
    fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        for parent in &self.parents {
            for h in std::fs::read_dir("/sys/fs/cgroup")
                .into_iter()
                .flatten()
                .flatten()
            {
                let dir = h.path().join(parent.trim_start_matches('/'));
                if dir.exists() {
                    left.push(dir.display().to_string());
                }
            }
        }
        let runc = self.d().join("runc/k8s.io");
        for e in std::fs::read_dir(&runc).into_iter().flatten().flatten() {
            left.push(format!("runc state {}", e.path().display()));
        }
        let me = self.d().display().to_string();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(&me) && !cmd.contains("cri_e2e") {
                left.push(format!(
                    "process {}: {cmd}",
                    e.file_name().to_string_lossy()
                ));
            }
        }
        left
    }

    /// Removes the pods, stops the runtime, unmounts, removes the pods' cgroup dirs.
    fn teardown(&mut self) {
        if let Some(mut p) = self.placer.take() {
            let _ = placer_linux::sys::kill(p.child.0.id(), libc::SIGKILL);
            let _ = p.child.0.wait();
        }
        for pod in std::mem::take(&mut self.pods) {
            let _ = Command::new("crictl")
                .args(["--runtime-endpoint", &self.endpoint, "rmp", "-f", &pod])
                .output();
        }
        drop(self.containerd.take());
        for dir in ["state", "root"] {
            let _ = Command::new("umount")
                .arg("-R")
                .arg("-l")
                .arg(self.d().join(dir))
                .output();
        }
        // containerd 1.7 keeps its shims' sockets in a fixed directory; empty once they
        // exited (remove_dir leaves a directory in use alone).
        let _ = std::fs::remove_dir("/run/containerd/s");
        let _ = std::fs::remove_dir("/run/containerd");
        // runc creates a pod's parents and removes only its containers' own dirs.
        for parent in &self.parents {
            for h in std::fs::read_dir("/sys/fs/cgroup")
                .into_iter()
                .flatten()
                .flatten()
            {
                let mut dir = h.path().join(parent.trim_start_matches('/'));
                for _ in 0..3 {
                    let _ = std::fs::remove_dir(&dir);
                    if !dir.pop() {
                        break;
                    }
                }
            }
        }
    }

    /// Tears down and asserts nothing is left.
    fn finish(mut self) {
        self.teardown();
        let left = self.leftovers();
        assert!(left.is_empty(), "left behind: {left:#?}");
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// `cpus` as parsed, for comparisons that do not depend on the list's spelling.
fn set(cpus: &str) -> placer_core::CpuSet {
    placer_core::CpuSet::parse_list(cpus).unwrap_or_else(|e| panic!("cpuset {cpus:?}: {e}"))
}

/// Every online CPU of this machine, as the kernel lists them.
fn online() -> String {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .expect("online CPUs")
        .trim()
        .to_string()
}

/// Waits until the journal lists container `id` as changed after creation, and the change
/// reached the container: the journal is written before the update is sent, so a placer
/// killed at once could leave the container as it was (seen in CI: d2 found it unmoved).
fn wait_journaled(rig: &Rig, id: &str) {
    let previous = || {
        rig.journal()
            .pointer(&format!("/previous/{id}/0"))
            .and_then(|c| c.as_str().map(str::to_string))
    };
    wait_for(
        &format!("placer to move container {id}"),
        Duration::from_secs(30),
        || previous().is_some(),
    );
    let before = set(&previous().unwrap_or_default());
    wait_for(
        &format!("the move of container {id} to reach it"),
        Duration::from_secs(10),
        || {
            let now = rig.cpuset(id);
            !now.is_empty() && set(&now) != before
        },
    );
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn a_pod_annotated_for_smt_energy_gets_placers_cpuset_through_cri() {
    let Some(mut rig) = Rig::start("create") else {
        return;
    };
    rig.start_placer("policies = [\"smt-energy\"]\n[metrics]\nenabled = false\n");
    let pod = rig.pod("a", &[("policy.placer.io/pod", "smt-energy")]);
    let id = rig.container(&pod, "a", None);
    let at_creation = rig.cpuset(&id);
    assert_eq!(
        set(&at_creation).len(),
        1,
        "placer's cpuset at creation: {at_creation:?}"
    );
    assert_eq!(
        set(&rig.allowed(&id)),
        set(&at_creation),
        "the container's process runs on placer's cpuset"
    );
    // A preserve annotation that is no boolean: left alone, and said.
    let kept = rig.pod(
        "b",
        &[
            ("policy.placer.io/pod", "smt-energy"),
            ("preserve.placer.io/pod", "maybe"),
        ],
    );
    let kept_id = rig.container(&kept, "b", None);
    assert_eq!(rig.cpuset(&kept_id), "", "{}", rig.placer_log());
    assert!(
        rig.placer_log().contains("\"maybe\" is not a boolean"),
        "{}",
        rig.placer_log()
    );
    rig.stop_placer(libc::SIGTERM);
    // Nothing changed after creation: the creation cpuset stands.
    assert_eq!(rig.cpuset(&id), at_creation);
    println!("cri e2e: cpuset at creation {at_creation}");
    rig.finish();
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn d1_an_unrestricted_container_moved_by_the_engine_gets_every_cpu_back() {
    let Some(mut rig) = Rig::start("d1") else {
        return;
    };
    // contention sets nothing at creation; the engine's smt-energy moves the process later.
    let pod = rig.pod("a", &[("policy.placer.io/pod", "contention")]);
    let id = rig.container(&pod, "a", None);
    assert_eq!(rig.cpuset(&id), "");
    let cfg = rig.engine_config(&["a"]);
    rig.start_placer(&cfg);
    wait_journaled(&rig, &id);
    let moved = rig.cpuset(&id);
    assert!(
        !moved.is_empty() && set(&moved) != set(&online()),
        "moved to {moved:?}"
    );
    rig.stop_placer(libc::SIGTERM);
    assert_eq!(
        set(&rig.cpuset(&id)),
        set(&online()),
        "{}",
        rig.placer_log()
    );
    assert_eq!(set(&rig.allowed(&id)), set(&online()));
    rig.finish();
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn d2_kill_restart_move_then_sigterm_returns_the_kubelets_cpuset() {
    let Some(mut rig) = Rig::start("d2") else {
        return;
    };
    let kubelet = online();
    let pod = rig.pod("a", &[("policy.placer.io/pod", "contention")]);
    let id = rig.container(&pod, "a", Some(&kubelet));
    let cfg = rig.engine_config(&["a"]);
    rig.start_placer(&cfg);
    wait_journaled(&rig, &id);
    rig.stop_placer(libc::SIGKILL);
    let moved = rig.cpuset(&id);
    assert_ne!(set(&moved), set(&kubelet), "placer moved it");
    // The next placer puts the left-over back, then its engine moves the container again.
    rig.start_placer(&cfg);
    wait_for("the left-over restore", Duration::from_secs(10), || {
        rig.placer_log().contains("putting back the 1 still there")
    });
    wait_journaled(&rig, &id);
    rig.stop_placer(libc::SIGTERM);
    assert_eq!(set(&rig.cpuset(&id)), set(&kubelet), "{}", rig.placer_log());
    rig.finish();
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn d3_a_cpuset_substituted_in_a_resize_is_put_back() {
    let Some(mut rig) = Rig::start("d3") else {
        return;
    };
    // No engine moves: only the creation cpuset and the resize.
    rig.start_placer("policies = [\"smt-energy\"]\n[metrics]\nenabled = false\n");
    let pod = rig.pod("a", &[("policy.placer.io/pod", "smt-energy")]);
    let id = rig.container(&pod, "a", None);
    let at_creation = rig.cpuset(&id);
    // The kubelet resizes the container to every CPU; placer keeps its own inside.
    let kubelet = online();
    rig.crictl(&["update", "--cpuset-cpus", &kubelet, &id]);
    assert_eq!(
        set(&rig.cpuset(&id)),
        set(&at_creation),
        "placer's cpuset kept in the resize"
    );
    rig.stop_placer(libc::SIGTERM);
    assert_eq!(set(&rig.cpuset(&id)), set(&kubelet), "{}", rig.placer_log());
    rig.finish();
}

#[test]
#[cfg_attr(not(placer_root), ignore = "needs root")]
fn d4_a_restarted_placer_moves_containers_it_placed_at_creation() {
    let Some(mut rig) = Rig::start("d4") else {
        return;
    };
    if set(&online()).len() < 2 {
        placer_testkit::skip("needs 2 CPUs");
        return;
    }
    // The first placer places both containers on the same first CPU at creation, moves
    // nothing, and stops (a DaemonSet rollout).
    rig.start_placer("policies = [\"smt-energy\"]\n[metrics]\nenabled = false\n");
    let a = rig.pod("a", &[("policy.placer.io/pod", "smt-energy")]);
    let a = rig.container(&a, "a", None);
    let b = rig.pod("b", &[("policy.placer.io/pod", "smt-energy")]);
    let b = rig.container(&b, "b", None);
    assert_eq!(rig.cpuset(&a), rig.cpuset(&b));
    rig.stop_placer(libc::SIGTERM);
    // The next one's engine gives the two spinners a CPU each: one leaves its creation CPU,
    // which only the kubelet's request (any CPU), not placer's own cpuset, allows.
    let cfg = rig.engine_config(&["a", "b"]);
    rig.start_placer(&cfg);
    wait_for(
        "the two containers on different CPUs",
        Duration::from_secs(30),
        || {
            set(&rig.cpuset(&a))
                .intersection(&set(&rig.cpuset(&b)))
                .is_empty()
        },
    );
    rig.stop_placer(libc::SIGTERM);
    rig.finish();
}

/// Wall time of `crictl create` for `n` containers in `pod`, in milliseconds each.
fn create_times_ms(rig: &Rig, pod: &str, pod_name: &str, tag: &str, n: usize) -> Vec<f64> {
    let pod_file = rig.d().join(format!("pod-{pod_name}.json"));
    (0..n)
        .map(|i| {
            let file = rig.d().join(format!("lat-{tag}-{i}.json"));
            std::fs::write(
                &file,
                serde_json::json!({
                    "metadata": {"name": format!("{tag}{i}")},
                    "image": {"image": IMAGE},
                    "command": ["/bin/sh", "-c", "sleep 3600"],
                    "log_path": format!("{tag}{i}.log"),
                    "linux": {"resources": {"cpu_period": 100000, "cpu_quota": 100000}},
                })
                .to_string(),
            )
            .expect("container.json");
            let t0 = Instant::now();
            rig.crictl(&[
                "create",
                pod,
                file.to_str().expect("utf-8"),
                pod_file.to_str().expect("utf-8"),
            ]);
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect()
}

/// The `q` quantile (nearest rank) of `v`.
/// The placer binary the rig starts: this build's, or `PLACER_BIN` (the latency measurement
/// is quoted for a release build, which a test build does not make).
fn placer_bin() -> std::path::PathBuf {
    std::env::var_os("PLACER_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_placer").into())
}

/// A percentile bootstrap 95% interval of `quantile(with, q) - quantile(without, q)`: 2,000
/// resamples of each side, from a fixed seed so that a rerun on the same data agrees.
fn added_interval_ms(without: &[f64], with: &[f64], q: f64) -> (f64, f64) {
    let mut rng = placer_testkit::Rng(0x9e37_79b9_7f4a_7c15);
    let mut diffs: Vec<f64> = (0..2000)
        .map(|_| {
            let a: Vec<f64> = (0..without.len())
                .map(|_| without[rng.below(without.len())])
                .collect();
            let b: Vec<f64> = (0..with.len())
                .map(|_| with[rng.below(with.len())])
                .collect();
            quantile(&b, q) - quantile(&a, q)
        })
        .collect();
    diffs.sort_by(f64::total_cmp);
    (diffs[50], diffs[1949])
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1]
}

/// The cost in the pod's path (docs/kubernetes.md, "Cost at creation"): `crictl create` of
/// `PLACER_CRI_LATENCY_N` (default 100) containers without placer, then as many with placer
/// registered and placing each (smt-energy pod), alternating in blocks of 10 so that the
/// machine's drift falls on both; and, beside it, placer's own handling time of each
/// CreateContainer (timed by the plugin from the decoded request to the encoded reply, as
/// nri-plugins time theirs, read from its debug log). Run by hand: it prints, it does not
/// judge.
#[test]
#[ignore = "a measurement, run by hand: PLACER_BIN=target/release/placer cargo test -p placer --test cri_e2e -- --ignored cri_create_latency --nocapture"]
fn cri_create_latency() {
    let Some(mut rig) = Rig::start("latency") else {
        return;
    };
    let n: usize = std::env::var("PLACER_CRI_LATENCY_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let pod = rig.pod("lat", &[("policy.placer.io/pod", "smt-energy")]);
    rig.log_filter = Some("info,ttrpc=warn,placer_nri=debug");
    // The state dir where a deployment has it: on a tmpfs (PLACER_CRI_STATE_DISK=1: on the
    // rig's disk, to see what the journal's rename costs there).
    if std::env::var_os("PLACER_CRI_STATE_DISK").is_none() {
        rig.state_fs = Some(
            placer_testkit::SmallTmpfs::mount("cri-state", "16m").expect("a tmpfs for the state"),
        );
    }
    let (mut without, mut with, mut own) = (Vec::new(), Vec::new(), Vec::new());
    for block in 0..n.div_ceil(10) {
        let k = 10.min(n - block * 10);
        without.extend(create_times_ms(
            &rig,
            &pod,
            "lat",
            &format!("off{block}x"),
            k,
        ));
        rig.start_placer("policies = [\"smt-energy\"]\n[metrics]\nenabled = false\n");
        with.extend(create_times_ms(
            &rig,
            &pod,
            "lat",
            &format!("on{block}x"),
            k,
        ));
        own.extend(rig.placer_log().lines().filter_map(|l| {
            let us = l.split("NRI: CreateContainer handled in ").nth(1)?;
            us.strip_suffix(" us")?
                .parse::<f64>()
                .ok()
                .map(|us| us / 1e3)
        }));
        rig.stop_placer(libc::SIGTERM);
    }
    for (what, v) in [
        ("without placer", &without),
        ("with placer", &with),
        ("placer's own handling", &own),
    ] {
        println!(
            "CreateContainer {what}: n={} p50 {:.3} ms p99 {:.3} ms",
            v.len(),
            quantile(v, 0.5),
            quantile(v, 0.99)
        );
    }
    for q in [0.5, 0.99] {
        let (lo, hi) = added_interval_ms(&without, &with, q);
        println!(
            "CreateContainer added by placer at q{q}: {:.3} ms (bootstrap 95% interval {lo:.3}..{hi:.3} ms)",
            quantile(&with, q) - quantile(&without, q)
        );
    }
    rig.finish();
}
