// Conformance of `placer daemon --nri` against NRI's own runtime side (the adaptation
// package containerd and CRI-O embed), at the tag placer's api.proto comes from (v0.8.0).
//
// The test starts an adaptation on a temporary socket, starts placer (PLACER_BIN) on it,
// waits for placer to register and synchronize, then drives pod and container events and
// checks what placer answers: a cpuset (and nothing but a cpuset) for the container whose
// pod asks for smt-energy, nothing for the preserved one, container_id in every update.
// Every wait is bounded.
package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
)

const waitLimit = 20 * time.Second

func pod(id, uid string, ann map[string]string) *adaptation.PodSandbox {
	return &adaptation.PodSandbox{
		Id:          id,
		Name:        "pod-" + id,
		Uid:         uid,
		Namespace:   "default",
		Annotations: ann,
		Linux: &adaptation.LinuxPodSandbox{
			CgroupParent: "/kubepods/burstable/pod" + uid,
		},
	}
}

func container(id string, p *adaptation.PodSandbox) *adaptation.Container {
	return &adaptation.Container{
		Id:           id,
		PodSandboxId: p.Id,
		Name:         "app",
		State:        adaptation.ContainerState_CONTAINER_CREATED,
		Linux: &adaptation.LinuxContainer{
			CgroupsPath: "/kubepods/burstable/pod" + p.Uid + "/" + id,
			Resources: &adaptation.LinuxResources{
				Cpu: &adaptation.LinuxCPU{
					Quota:  &adaptation.OptionalInt64{Value: 100000},
					Period: &adaptation.OptionalUInt64{Value: 100000},
					Shares: &adaptation.OptionalUInt64{Value: 1024},
				},
			},
		},
	}
}

// checkCpusetOnly fails when placer touched anything but cpus and mems.
func checkCpusetOnly(t *testing.T, what string, r *adaptation.LinuxResources) {
	t.Helper()
	if r == nil {
		return
	}
	if c := r.Cpu; c != nil {
		if c.Shares != nil && c.Shares.Value != 1024 || c.Quota != nil && c.Quota.Value != 100000 ||
			c.Period != nil && c.Period.Value != 100000 || c.RealtimeRuntime != nil || c.RealtimePeriod != nil {
			t.Errorf("%s: placer changed CPU shares/quota/period: %+v", what, c)
		}
	}
	if m := r.Memory; m != nil && (m.Limit != nil || m.Reservation != nil || m.Swap != nil) {
		t.Errorf("%s: placer set memory limits: %+v", what, m)
	}
	if r.Pids != nil || len(r.HugepageLimits) > 0 || len(r.Unified) > 0 {
		t.Errorf("%s: placer set other limits: %+v", what, r)
	}
}

func TestPlacerConformance(t *testing.T) {
	bin := os.Getenv("PLACER_BIN")
	if bin == "" {
		t.Fatal("PLACER_BIN is not set (the Rust test runner sets it)")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "nri.sock")
	for _, d := range []string{"plugins", "conf.d", "state"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	synced := make(chan struct{}, 1)
	updates := make(chan []*adaptation.ContainerUpdate, 16)
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		synced <- struct{}{}
		return err
	}
	updateFn := func(_ context.Context, u []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		updates <- u
		return nil, nil
	}
	// External connections stay enabled (no WithDisabledExternalConnections): placer is an
	// external plugin that dials the socket, as on a node.
	nri, err := adaptation.New("conformance", "v0.8.0", syncFn, updateFn,
		adaptation.WithSocketPath(sock),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := nri.Start(); err != nil {
		t.Fatal(err)
	}
	defer nri.Stop()
	// Start synchronizes the (absent) pre-installed plugins through syncFn: not placer.
	select {
	case <-synced:
	default:
	}

	// The host engine must touch nothing on this machine: a scope no process matches.
	cfg := filepath.Join(dir, "placer.toml")
	if err := os.WriteFile(cfg, []byte(`policies = ["smt-energy"]
kernel_events = false
[scope]
include_comm = ["no-such-proc-x"]
[metrics]
enabled = false
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "daemon", "--config", cfg, "--state-dir", filepath.Join(dir, "state"),
		"--nri", "--nri-socket", sock, "--nri-index", "42", "--interval", "200ms")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		t.Logf("placer's log:\n%s", logs.String())
	}()

	select {
	case <-synced:
	case err := <-exited:
		t.Fatalf("placer exited before registering: %v", err)
	case <-time.After(waitLimit):
		t.Fatalf("placer did not register and synchronize within %v", waitLimit)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()

	placed := pod("sb-placed", "uid-placed", map[string]string{"policy.placer.io/pod": "smt-energy"})
	kept := pod("sb-kept", "uid-kept", map[string]string{
		"policy.placer.io/pod":   "smt-energy",
		"preserve.placer.io/pod": "true",
	})
	for _, p := range []*adaptation.PodSandbox{placed, kept} {
		if err := nri.RunPodSandbox(ctx, &adaptation.StateChangeEvent{Pod: p}); err != nil {
			t.Fatalf("RunPodSandbox %s: %v", p.Id, err)
		}
	}

	// The selected container gets a cpuset, and only that.
	c1 := container("c-placed", placed)
	rsp, err := nri.CreateContainer(ctx, &adaptation.CreateContainerRequest{Pod: placed, Container: c1})
	if err != nil {
		t.Fatalf("CreateContainer (smt-energy): %v", err)
	}
	adj := rsp.GetAdjust()
	cpus := adj.GetLinux().GetResources().GetCpu().GetCpus()
	if cpus == "" {
		t.Fatalf("CreateContainer (smt-energy): no cpuset in %+v", adj)
	}
	checkCpusetOnly(t, "CreateContainer (smt-energy)", adj.GetLinux().GetResources())
	for _, u := range rsp.GetUpdate() {
		if u.GetContainerId() == "" {
			t.Errorf("CreateContainer: an update without container_id: %+v", u)
		}
	}
	t.Logf("smt-energy container got cpuset %q mems %q", cpus, adj.GetLinux().GetResources().GetCpu().GetMems())

	// The preserved one: nothing.
	c2 := container("c-kept", kept)
	rsp, err = nri.CreateContainer(ctx, &adaptation.CreateContainerRequest{Pod: kept, Container: c2})
	if err != nil {
		t.Fatalf("CreateContainer (preserved): %v", err)
	}
	if got := rsp.GetAdjust().GetLinux().GetResources().GetCpu().GetCpus(); got != "" {
		t.Errorf("CreateContainer (preserved): placer set cpuset %q", got)
	}
	checkCpusetOnly(t, "CreateContainer (preserved)", rsp.GetAdjust().GetLinux().GetResources())
	if len(rsp.GetUpdate()) != 0 {
		t.Errorf("CreateContainer (preserved): updates %+v", rsp.GetUpdate())
	}

	// The kubelet resizes the selected container and offers every CPU: placer keeps its
	// choice (inside what the kubelet asks for), so the update carries placer's cpuset.
	all := "0"
	if n := runtime.NumCPU(); n > 1 {
		all = fmt.Sprintf("0-%d", n-1)
	}
	ask := &adaptation.LinuxResources{Cpu: &adaptation.LinuxCPU{
		Cpus:   all,
		Quota:  &adaptation.OptionalInt64{Value: 100000},
		Period: &adaptation.OptionalUInt64{Value: 100000},
		Shares: &adaptation.OptionalUInt64{Value: 1024},
	}}
	ursp, err := nri.UpdateContainer(ctx, &adaptation.UpdateContainerRequest{Pod: placed, Container: c1, LinuxResources: ask})
	if err != nil {
		t.Fatalf("UpdateContainer: %v", err)
	}
	seen := false
	for _, u := range ursp.GetUpdate() {
		if u.GetContainerId() == "" {
			t.Errorf("UpdateContainer: an update without container_id: %+v", u)
		}
		checkCpusetOnly(t, "UpdateContainer", u.GetLinux().GetResources())
		if u.GetContainerId() == c1.Id {
			seen = true
			if got := u.GetLinux().GetResources().GetCpu().GetCpus(); got != cpus {
				t.Errorf("UpdateContainer: cpuset %q, want placer's %q (the kubelet offered %q)", got, cpus, all)
			}
		}
	}
	if !seen {
		t.Errorf("UpdateContainer: no update for %s in %+v", c1.Id, ursp.GetUpdate())
	}

	for _, c := range []struct {
		p *adaptation.PodSandbox
		c *adaptation.Container
	}{{placed, c1}, {kept, c2}} {
		if err := nri.RemoveContainer(ctx, &adaptation.StateChangeEvent{Pod: c.p, Container: c.c}); err != nil {
			t.Errorf("RemoveContainer %s: %v", c.c.Id, err)
		}
		if err := nri.RemovePodSandbox(ctx, &adaptation.StateChangeEvent{Pod: c.p}); err != nil {
			t.Errorf("RemovePodSandbox %s: %v", c.p.Id, err)
		}
	}

	select {
	case u := <-updates:
		for _, x := range u {
			if x.GetContainerId() == "" {
				t.Errorf("unsolicited UpdateContainers without container_id: %+v", x)
			}
		}
	default:
	}

	// SIGTERM: placer restores and exits cleanly while the runtime is still there.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("placer exited with %v after SIGTERM", err)
		}
	case <-time.After(waitLimit):
		t.Errorf("placer did not exit within %v of SIGTERM", waitLimit)
	}
}
