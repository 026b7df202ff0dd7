//! End to end through a real container runtime (issue 19): containerd 1.7 or later with
//! NRI on, runc, and crictl as the kubelet's stand-in. Runs as root where those are
//! installed (the build sets cfg `placer_cri`, see `placer_testkit::build::emit_cri_cfg`);
//! elsewhere the test is `ignored` with the reason. Debian bookworm ships containerd
//! 1.6.20 (no NRI) and no crictl, so on this project's machines it does not run.
//!
//! What it checks, on a private containerd (its own root, state and sockets under a
//! temporary directory; no registry: the image is a locally built OCI tarball of the
//! static busybox):
//! 1. a pod annotated `policy.placer.io/pod: smt-energy` gets, at creation, the cpuset
//!    placer returns (one CPU for a one-CPU quota), and its process runs on it;
//! 2. every cpuset placer changed after creation is in its NRI journal, and on SIGTERM
//!    placer puts each back through the runtime (the journal is then empty).

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
                       "annotations": {"io.containerd.image.name": "docker.io/library/placer-e2e:1",
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

struct Cri {
    endpoint: String,
}

impl Cri {
    fn crictl(&self, args: &[&str]) -> String {
        sh(Command::new("crictl")
            .args([
                "--runtime-endpoint",
                &self.endpoint,
                "--image-endpoint",
                &self.endpoint,
            ])
            .args(["--timeout", "20s"])
            .args(args))
    }
    fn inspect(&self, id: &str) -> serde_json::Value {
        serde_json::from_str(&self.crictl(&["inspect", id])).expect("inspect JSON")
    }
    /// The cpuset the runtime applied to a container (its OCI spec).
    fn cpuset(&self, id: &str) -> String {
        self.inspect(id)
            .pointer("/info/runtimeSpec/linux/resources/cpu/cpus")
            .and_then(|c| c.as_str())
            .unwrap_or_default()
            .to_string()
    }
    fn pid(&self, id: &str) -> u32 {
        self.inspect(id)
            .pointer("/info/pid")
            .and_then(|p| p.as_u64())
            .expect("container pid") as u32
    }
}

/// Stops and removes the pod, then the runtime, even when the test fails.
struct Teardown<'a> {
    cri: &'a Cri,
    pod: Option<String>,
    containerd: Option<KillOnDrop>,
    state: PathBuf,
}

impl Drop for Teardown<'_> {
    fn drop(&mut self) {
        if let Some(pod) = &self.pod {
            let _ = Command::new("crictl")
                .args(["--runtime-endpoint", &self.cri.endpoint, "rmp", "-f", pod])
                .output();
        }
        drop(self.containerd.take());
        // Mounts the runtime left (rootfs, shm) under its private dirs.
        let _ = Command::new("umount")
            .arg("-R")
            .arg("-l")
            .arg(&self.state)
            .output();
    }
}

#[test]
#[cfg_attr(
    not(all(placer_root, placer_cri)),
    ignore = "needs root, containerd >= 1.7 (NRI), runc and crictl: Debian bookworm has containerd 1.6.20 and no crictl"
)]
fn a_pod_annotated_for_smt_energy_gets_placers_cpuset_through_cri() {
    placer_testkit::require_root();
    let tmp = TempDir::new("cri");
    let d = tmp.path();
    let image = image_tarball(d);
    let sock = d.join("containerd.sock");
    let nri_sock = d.join("nri.sock");
    let config = format!(
        r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{nri}"
  plugin_path = "{d}/nri-plugins"
  plugin_config_path = "{d}/nri-conf"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/placer-e2e:1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
"#,
        root = d.join("root").display(),
        state = d.join("state").display(),
        sock = sock.display(),
        nri = nri_sock.display(),
        d = d.display(),
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
    let cri = Cri {
        endpoint: format!("unix://{}", sock.display()),
    };
    let mut teardown = Teardown {
        cri: &cri,
        pod: None,
        containerd: Some(containerd),
        state: d.join("state"),
    };
    wait_for("containerd's NRI socket", Duration::from_secs(30), || {
        sock.exists() && nri_sock.exists()
    });
    sh(Command::new("ctr")
        .arg("--address")
        .arg(&sock)
        .args(["-n", "k8s.io", "images", "import"])
        .arg(&image));

    // placer as the NRI plugin; its host engine touches no process outside the pod.
    let state_dir = d.join("placer");
    std::fs::write(
        d.join("placer.toml"),
        "policies = [\"smt-energy\"]\n[metrics]\nenabled = false\n",
    )
    .expect("placer config");
    let placer_log = d.join("placer.log");
    let plog = std::fs::File::create(&placer_log).expect("log");
    let mut placer = KillOnDrop(
        die_with_parent(
            Command::new(env!("CARGO_BIN_EXE_placer"))
                .arg("daemon")
                .arg("--config")
                .arg(d.join("placer.toml"))
                .arg("--state-dir")
                .arg(&state_dir)
                .args(["--nri", "--nri-socket"])
                .arg(&nri_sock)
                .args(["--interval", "250ms"])
                .stdout(plog.try_clone().expect("dup"))
                .stderr(plog),
        )
        .spawn()
        .expect("placer"),
    );
    let logged = |s: &str| {
        std::fs::read_to_string(&placer_log)
            .unwrap_or_default()
            .contains(s)
    };
    wait_for("placer's registration", Duration::from_secs(20), || {
        logged("NRI: registered")
    });

    let pod_json = d.join("pod.json");
    std::fs::write(
        &pod_json,
        serde_json::json!({
            "metadata": {"name": "e2e", "namespace": "default", "uid": "placer-e2e-1", "attempt": 0},
            "annotations": {"policy.placer.io/pod": "smt-energy"},
            "log_directory": d.join("logs").display().to_string(),
            "linux": {"security_context": {"namespace_options": {"network": 2}}},
        })
        .to_string(),
    )
    .expect("pod.json");
    let ctr_json = d.join("container.json");
    std::fs::write(
        &ctr_json,
        serde_json::json!({
            "metadata": {"name": "app"},
            "image": {"image": "docker.io/library/placer-e2e:1"},
            "command": ["/bin/sh", "-c", "while :; do :; done"],
            "log_path": "app.log",
            "linux": {"resources": {"cpu_period": 100000, "cpu_quota": 100000}},
        })
        .to_string(),
    )
    .expect("container.json");
    let pod = cri.crictl(&["runp", pod_json.to_str().expect("utf-8")]);
    teardown.pod = Some(pod.clone());
    let id = cri.crictl(&[
        "create",
        &pod,
        ctr_json.to_str().expect("utf-8"),
        pod_json.to_str().expect("utf-8"),
    ]);
    cri.crictl(&["start", &id]);

    // 1. The cpuset at creation: one CPU for a one-CPU quota, and the process runs there.
    let at_creation = cri.cpuset(&id);
    let cpus = placer_core::CpuSet::parse_list(&at_creation)
        .unwrap_or_else(|e| panic!("cpuset {at_creation:?}: {e}"));
    assert_eq!(
        cpus.len(),
        1,
        "placer's cpuset at creation: {at_creation:?}"
    );
    let pid = cri.pid(&id);
    let allowed = placer_testkit::proc::status_field(pid, "Cpus_allowed_list").expect("status");
    assert_eq!(
        allowed, at_creation,
        "the container's process runs on placer's cpuset"
    );

    // 2. Let the engine run a few cycles (the spinning container may be moved), then stop
    // placer: every journaled cpuset is put back through the runtime.
    std::thread::sleep(Duration::from_secs(3));
    let journal_file = state_dir.join("nri-journal.json");
    let journal: serde_json::Value = std::fs::read_to_string(&journal_file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    let previous = journal
        .pointer("/previous")
        .and_then(|p| p.as_object())
        .cloned()
        .unwrap_or_default();
    placer_linux::sys::kill(placer.0.id(), libc::SIGTERM).expect("SIGTERM to placer");
    wait_for("placer to exit", Duration::from_secs(20), || {
        placer.0.try_wait().expect("wait").is_some()
    });
    for (cid, before) in &previous {
        let want = before.get(0).and_then(|c| c.as_str()).unwrap_or_default();
        assert_eq!(cri.cpuset(cid), want, "container {cid} put back on SIGTERM");
    }
    if previous.is_empty() {
        // Nothing changed after creation: the creation cpuset stands.
        assert_eq!(cri.cpuset(&id), at_creation);
    }
    println!(
        "cri e2e: cpuset at creation {at_creation}; {} container(s) moved and restored",
        previous.len()
    );
}
