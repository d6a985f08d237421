package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/runtimetest"
	"github.com/gpucloud/gpucloud/testkit"
)

// The contract every runtime keeps (runtimetest), and what only a
// container gives.

// grace is short so that the SIGKILL path costs the tests little time.
const grace = 300 * time.Millisecond

// TestConformance runs the behaviour every runtime owes the agent.
func TestConformance(t *testing.T) { runtimetest.Run(t, harness) }

// TestContainerStartErrors: what only a container refuses, a program of
// the host that is not in the image and an image that is not on the host
// with pulling off, leaves no record and no container behind.
func TestContainerStartErrors(t *testing.T) {
	rt := newRuntime(t)
	tests := []struct {
		desc string
		spec runtime.Spec
		// invalid says the error wraps runtime.ErrInvalid.
		invalid bool
	}{
		{desc: "program on the host but not in the container",
			spec: runtime.Spec{WorkDir: t.TempDir(), Command: []string{DefaultContainerd}}, invalid: true},
		{desc: "image not on the host and pulling off",
			spec: runtime.Spec{Image: "docker.io/library/no-such-image:0", Command: []string{"true"}}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := tt.spec
			s.InstanceID = newID(t)
			err := rt.Start(t.Context(), s)
			if err == nil || tt.invalid && !errors.Is(err, runtime.ErrInvalid) {
				t.Fatalf("error %v, want one (wrapping ErrInvalid: %v)", err, tt.invalid)
			}
			if _, err := rt.Status(s.InstanceID); !errors.Is(err, runtime.ErrNotFound) {
				t.Fatalf("the failed start left a record: %v", err)
			}
			if left := leftBehind(t, rt, s.InstanceID); left != "" {
				t.Fatalf("the failed start left %s", left)
			}
		})
	}
}

// TestVolumesMounted: the volumes, and only they, are mounted under
// VolumesDir (the runtime makes the directories of volumes that are
// missing).
func TestVolumesMounted(t *testing.T) {
	rt := newRuntime(t)
	vols := []string{filepath.Join(t.TempDir(), "vol-a"), filepath.Join(t.TempDir(), "vol-b")}
	st, out := run(t, rt, runtime.Spec{InstanceID: newID(t), Volumes: vols, Command: sh("ls " + VolumesDir)})
	if want := "vol-a\nvol-b\n"; st.ExitCode != 0 || out != want {
		t.Fatalf("exit %d, output %q, want %q", st.ExitCode, out, want)
	}
}

// TestNoProcessSurvives starts processes that leave the workload's
// process group and session, and checks that none is left on the host
// once the instance has stopped or exited.
func TestNoProcessSurvives(t *testing.T) {
	rt := newRuntime(t)
	tests := []struct {
		desc   string
		script string
		stop   bool
	}{
		{desc: "setsid child when the instance is stopped", script: "setsid sleep %s & echo ready; wait", stop: true},
		{desc: "setsid child ignoring SIGTERM when the instance is stopped", script: "setsid sh -c \"trap '' TERM; sleep %s\" & echo ready; sleep 30", stop: true},
		{desc: "setsid child when the leader exits by itself", script: "setsid sleep %s & echo ready; sleep 0.5; exit 0"},
		{desc: "double fork into a new session", script: "(setsid sh -c 'sleep %s & exit 0') ; echo ready; sleep 30", stop: true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			id := newID(t)
			mark := runtimetest.Mark()
			if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: sh(fmt.Sprintf(tt.script, mark)), Grace: grace}); err != nil {
				t.Fatal(err)
			}
			waitLog(t, rt, id, "ready")
			testkit.Eventually(t, 10*time.Second, "the escaped sleep to run", func() bool { return len(hostProcesses("sleep", mark)) > 0 })
			if tt.stop {
				if err := rt.Stop(t.Context(), id); err != nil {
					t.Fatal(err)
				}
			} else {
				wait(t, rt, id)
			}
			// Stop and Wait return once the task is deleted: nothing may
			// be left at that moment, not even a moment later.
			if pids := hostProcesses("sleep", mark); len(pids) > 0 {
				t.Fatalf("processes %v outlived their instance", pids)
			}
		})
	}
}

// TestIsolation checks what the workload sees of the host: namespaces of
// its own, its user, its processes only, no network but loopback, none of
// the host's files.
func TestIsolation(t *testing.T) {
	t.Setenv("GPUCLOUD_TOKEN", "secret")
	rt := newRuntime(t)
	id := newID(t)
	script := `for n in pid mnt ipc uts net; do echo "ns $n $(readlink /proc/self/ns/$n)"; done
echo "id $(id -u):$(id -g)"
echo "host $(hostname)"
echo "procs $(ls /proc | grep -c '^[0-9]')"
echo "init $(tr '\0\n' '  ' < /proc/1/cmdline | cut -c1-30)"
echo "ifaces $(ls /sys/class/net | tr '\n' ' ')"
echo "lo $(cat /sys/class/net/lo/operstate)"
echo "caps $(grep CapEff /proc/self/status)"
echo "nnp $(grep NoNewPrivs /proc/self/status)"
ls /work/main 2>/dev/null && echo LEAK sees the repository
ls ` + env.tmp + ` 2>/dev/null && echo LEAK sees the test directory
touch /etc/x 2>/dev/null && echo LEAK wrote /etc
cat /proc/1/environ 2>/dev/null | grep -q GPUCLOUD_TOKEN && echo LEAK sees the agent environment
echo done`
	st, out := run(t, rt, runtime.Spec{InstanceID: id, Command: sh(script)})
	if st.ExitCode != 0 {
		t.Fatalf("exit %d: %s", st.ExitCode, out)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(l, " ")
		lines[k] += v + ";"
	}
	for _, n := range []string{"pid", "mnt", "ipc", "uts", "net"} {
		if strings.Contains(out, "ns "+n+" "+hostNamespace(n)) {
			t.Errorf("the workload shares the host's %s namespace", n)
		}
	}
	uid := rt.insts[id].uid
	if uid < DefaultUIDBase || uid >= DefaultUIDBase+DefaultUIDCount {
		t.Errorf("the workload's uid %d is not one of the range's", uid)
	}
	checks := []struct{ key, want string }{
		{"id", fmt.Sprintf("%d:%d;", uid, uid)},
		{"host", id + ";"},
		{"init", InitPath + " -g -- /bin/sh -c "},
		{"ifaces", "lo ;"},
		{"caps", "CapEff:\t0000000000000000;"},
		{"nnp", "NoNewPrivs:\t1;"},
	}
	for _, c := range checks {
		if !strings.HasPrefix(lines[c.key], c.want) {
			t.Errorf("%s: %q, want %q", c.key, lines[c.key], c.want)
		}
	}
	if lines["LEAK"] != "" {
		t.Errorf("the workload %s", lines["LEAK"])
	}
	// init, the shells and the pipeline: not the host's hundreds.
	if n, err := strconv.Atoi(strings.TrimSuffix(lines["procs"], ";")); err != nil || n > 6 {
		t.Errorf("the workload sees %q processes", lines["procs"])
	}
	if !strings.Contains(out, "done") {
		t.Fatalf("output %q", out)
	}
}

// TestLimits checks the cgroup limits on the host and that the kernel
// enforces them inside.
func TestLimits(t *testing.T) {
	rt := newRuntime(t)
	id := newID(t)
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, CPUMilli: 1500, MemoryMiB: 64, PidsLimit: 20,
		Command: sh("echo ready; sleep 30"), Grace: grace}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, id, "ready")
	cg := rt.insts[id].cgroup
	v2 := false
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		v2 = true
	}
	files := map[string]string{
		filepath.Join("memory", cg, "memory.limit_in_bytes"): strconv.Itoa(64 << 20),
		filepath.Join("cpu", cg, "cpu.cfs_quota_us"):         "150000",
		filepath.Join("cpu", cg, "cpu.cfs_period_us"):        "100000",
		filepath.Join("pids", cg, "pids.max"):                "20",
	}
	if v2 {
		files = map[string]string{
			filepath.Join(cg, "memory.max"): strconv.Itoa(64 << 20), filepath.Join(cg, "cpu.max"): "150000 100000",
			filepath.Join(cg, "pids.max"): "20",
		}
	}
	for f, want := range files {
		b, err := os.ReadFile(filepath.Join(cgroupRoot, f))
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s: %q (%v), want %q", f, b, err, want)
		}
	}
	res, ok := rt.Resources(id)
	if !ok || res.MemoryBytes == 0 {
		t.Errorf("resources %+v, %v", res, ok)
	}
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.Resources(id); ok {
		t.Error("resources of an exited workload")
	}

	tests := []struct {
		desc   string
		spec   runtime.Spec
		script string
		check  func(runtime.Status, string) bool
	}{
		{desc: "memory beyond the limit is OOM-killed", spec: runtime.Spec{MemoryMiB: 32},
			// dd holds a block of bs bytes in memory.
			script: "dd if=/dev/zero of=/dev/null bs=100M count=1 && echo survived",
			check: func(st runtime.Status, out string) bool {
				return !strings.Contains(out, "survived") || st.ExitCode != 0
			}},
		{desc: "forks beyond the pids limit fail", spec: runtime.Spec{PidsLimit: 8},
			script: "i=0; while [ $i -lt 20 ]; do sleep 5 & i=$((i+1)); done 2>&1; echo spawned",
			check:  func(st runtime.Status, out string) bool { return strings.Contains(out, "can't fork") }},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := tt.spec
			s.InstanceID, s.Command, s.Grace = newID(t), sh(tt.script), grace
			st, out := run(t, rt, s)
			if !tt.check(st, out) {
				t.Fatalf("status %+v, output %q", st, out)
			}
		})
	}
}

// TestDevices checks the device cgroup against the simulated host's fake
// nodes: a node the instance was given opens with ENXIO (allowed, no
// driver behind it), any other with EPERM, even when present.
func TestDevices(t *testing.T) {
	rt := newRuntime(t)
	ctx := t.Context()
	if err := env.host.SetMIGMode(ctx, 2, true); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.host.SetMIGMode(context.Background(), 2, false) }()
	if _, err := env.host.CreateMIG(ctx, 2, 9, 4); err != nil { // 3g.40gb at slot 4
		t.Fatal(err)
	}
	defer func() { _ = env.host.DestroyMIG(context.Background(), 2, 4) }()
	gi, ci, err := env.host.MIGIDs(ctx, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	mine := "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(sim.MIGCapMinor(2, gi, -1))
	mineCI := "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(sim.MIGCapMinor(2, gi, ci))
	open := func(p string) string {
		return fmt.Sprintf("(: < %s) 2>&1 | sed 's/^/%s: /'; ", p, strings.ReplaceAll(p, "/", "_"))
	}
	tests := []struct {
		desc  string
		spec  runtime.Spec
		probe []string
		want  map[string]string
	}{
		{desc: "whole GPU 1", spec: runtime.Spec{GPUIndexes: []int{1}},
			probe: []string{"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/testdev/nvidia0"},
			want: map[string]string{
				"/dev/nvidia1": "No such device or address", "/dev/nvidiactl": "No such device or address",
				"/dev/nvidia-uvm": "No such device or address", "/dev/nvidia-uvm-tools": "No such device or address",
				"/dev/nvidia0": "o such file", "/testdev/nvidia0": "Operation not permitted",
			}},
		{desc: "MIG slice on GPU 2", spec: runtime.Spec{MIG: []runtime.MIGDevice{{GPU: 2, GI: gi, CI: ci}}},
			probe: []string{"/dev/nvidia2", mine, mineCI, "/testdev/nvidia-cap", "/testdev/nvidia0"},
			want: map[string]string{
				"/dev/nvidia2": "No such device or address", mine: "No such device or address", mineCI: "No such device or address",
				"/testdev/nvidia-cap": "Operation not permitted", "/testdev/nvidia0": "Operation not permitted",
			}},
		// Misc minor 255 belongs to no device (ENODEV), and no verbs
		// driver answers on a host without RDMA (ENXIO): both say "No
		// such device".
		{desc: "RDMA adapter 0", spec: runtime.Spec{ExtraDevices: []string{"/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"}},
			probe: []string{"/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs1", "/testdev/uverbs1", "/testdev/nvidia0"},
			want: map[string]string{
				"/dev/infiniband/uverbs0": "No such device", "/dev/infiniband/rdma_cm": "No such device",
				"/dev/infiniband/uverbs1": "o such file", "/testdev/uverbs1": "Operation not permitted", "/testdev/nvidia0": "Operation not permitted",
			}},
		{desc: "CPU only", spec: runtime.Spec{},
			probe: []string{"/dev/nvidiactl", "/testdev/nvidia0"},
			want:  map[string]string{"/dev/nvidiactl": "o such file", "/testdev/nvidia0": "Operation not permitted"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := tt.spec
			var script strings.Builder
			for _, p := range tt.probe {
				script.WriteString(open(p))
			}
			s.InstanceID, s.Command = newID(t), sh(script.String())
			_, out := run(t, rt, s)
			for p, want := range tt.want {
				prefix := strings.ReplaceAll(p, "/", "_") + ": "
				line := ""
				for _, l := range strings.Split(out, "\n") {
					if strings.HasPrefix(l, prefix) {
						line = l
					}
				}
				if !strings.Contains(line, want) {
					t.Errorf("opening %s: %q, want %q (output %q)", p, line, want, out)
				}
			}
		})
	}
}

// TestAdopt checks that a new runtime (an agent restart) finds the
// containers of the old one, running and exited.
func TestAdopt(t *testing.T) {
	old := newRuntime(t)
	running, exited := newID(t), newID(t)
	if err := old.Start(t.Context(), runtime.Spec{InstanceID: running, Command: sh("echo ready; sleep 30"), Grace: grace}); err != nil {
		t.Fatal(err)
	}
	if st, _ := run(t, old, runtime.Spec{InstanceID: exited, Command: sh("exit 5")}); st.ExitCode != 5 {
		t.Fatalf("exit %d", st.ExitCode)
	}
	waitLog(t, old, running, "ready")
	// The old runtime goes away without stopping anything.
	old.mu.Lock()
	old.insts = map[string]*inst{}
	old.mu.Unlock()
	_ = old.Close()
	rt := newRuntime(t)
	if st, err := rt.Status(running); err != nil || st.State != runtime.StateRunning {
		t.Fatalf("adopted running instance: %+v, %v", st, err)
	}
	if st, err := rt.Status(exited); err != nil || st.State != runtime.StateExited || st.ExitCode != 5 {
		t.Fatalf("adopted exited instance: %+v, %v", st, err)
	}
	if out := logs(t, rt, running); out != "ready\n" {
		t.Fatalf("adopted output %q", out)
	}
	if err := rt.Stop(t.Context(), running); err != nil {
		t.Fatal(err)
	}
	if st, _ := rt.Status(running); st.Signal != "SIGTERM" {
		t.Fatalf("stopped adopted instance: %+v", st)
	}
}

func TestNewErrors(t *testing.T) {
	need(t)
	// A dynamically linked program: all an ELF header needs to say so is
	// a program interpreter (PT_INTERP), whatever the machine has installed.
	dynamic := make([]byte, 64+56)
	copy(dynamic, "\x7fELF\x02\x01\x01")
	dynamic[0x20], dynamic[0x36], dynamic[0x38] = 64, 56, 1 // e_phoff, e_phentsize, e_phnum
	dynamic[64] = 3                                         // p_type: PT_INTERP
	dynamicInit := filepath.Join(t.TempDir(), "tini")
	if err := os.WriteFile(dynamicInit, dynamic, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		desc string
		cfg  Config
		want string
	}{
		{desc: "no containerd at the socket", cfg: Config{Socket: filepath.Join(t.TempDir(), "none.sock"), BaseDir: t.TempDir()}, want: "containerd is not reachable at"},
		{desc: "bad user", cfg: Config{Socket: env.daemon.Socket(), BaseDir: t.TempDir(), User: "nobody"}, want: "want uid:gid"},
		{desc: "dynamic init", cfg: Config{Socket: env.daemon.Socket(), BaseDir: t.TempDir(), Init: dynamicInit}, want: "not statically linked"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, err := New(t.Context(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}
