package containerd

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/runtimetest"
)

// The package's tests share one private containerd, started by TestMain in
// a temporary directory, with the test image imported. Without root,
// containerd, runc, tini or busybox-static they fail when CI is set and
// skip otherwise, saying why.

// testImage is the tests' image: the base image plus device nodes that
// the tests' device cgroups must deny (/testdev); the simulated host has
// four GPUs and two RDMA adapters.
const testImage = "docker.io/gpucloud/test:1"

var env struct {
	// skip is why the containerd tests cannot run here; empty when they
	// can.
	skip   string
	daemon *Daemon
	// ns is the containerd namespace (and cgroup parent) of this run.
	ns string
	// devDir holds the simulated host's fake GPU device nodes.
	devDir string
	// host is the simulated host that made them.
	host *sim.Host
	tmp  string
}

func TestMain(m *testing.M) {
	code := func() int {
		var err error
		env.tmp, err = os.MkdirTemp("", "gcctd")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(env.tmp)
		env.skip = setUp()
		defer tearDown()
		return m.Run()
	}()
	os.Exit(code)
}

// setUp starts the daemon and imports the test image; it returns why the
// tests cannot run, or "".
func setUp() string {
	if os.Geteuid() != 0 {
		return "containers need root (runc with cgroup limits)"
	}
	// The programs, found as .ci/tools.sh checks for them: by name in
	// PATH, where containerd finds its shim and runc too. busybox is
	// checked by BaseImageFiles below: statically linked, at
	// DefaultBusybox.
	containerd, err := containerTools()
	if err != nil {
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := StartDaemon(context.Background(), filepath.Join(env.tmp, "d"), DaemonConfig{Binary: containerd})
	if err != nil {
		return "cannot start containerd: " + err.Error()
	}
	env.daemon = d
	env.ns = "gpucloud-test-" + strconv.Itoa(os.Getpid())
	env.host, err = sim.New(sim.Spec{ID: "h-test", GPUs: sim.GPUSpec{Model: "H100", Count: 4}, HCAs: make(sim.HCAs, 2)})
	if err != nil {
		return err.Error()
	}
	env.devDir = filepath.Join(env.tmp, "dev")
	if err := env.host.MakeDeviceNodes(env.devDir); err != nil {
		return "fake device nodes: " + err.Error()
	}
	var img bytes.Buffer
	files, err := BaseImageFiles("")
	if err != nil {
		return err.Error()
	}
	files = append(files,
		File{Path: "/testdev/nvidia0", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o666, Major: sim.NVIDIAMajor, Minor: 0},
		File{Path: "/testdev/uverbs1", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o666, Major: sim.UverbsMajor, Minor: sim.UverbsMinorBase + 1},
		File{Path: "/testdev/nvidia-cap", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o666, Major: capsMajor(), Minor: int64(sim.MIGCapMinor(2, 1, -1))},
		// Another partition's render node, which an AMD workload's device
		// cgroup must deny (TestAMDPartitionDevices).
		File{Path: "/testdev/renderD138", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o666, Major: sim.DRMMajor, Minor: 138},
	)
	if err := WriteImage(&img, testImage, files, ImageConfig{}); err != nil {
		return err.Error()
	}
	var base bytes.Buffer
	if err := WriteBaseImage(&base, ""); err != nil {
		return err.Error()
	}
	r, err := New(ctx, Config{Socket: d.Socket(), Namespace: env.ns, BaseDir: env.tmp})
	if err != nil {
		return err.Error()
	}
	defer r.Close()
	for _, b := range []*bytes.Buffer{&img, &base} {
		if _, err := r.ImportImage(ctx, b); err != nil {
			return err.Error()
		}
	}
	return ""
}

// containerTools finds containerd, containerd-shim-runc-v2, runc and
// tini-static in PATH, as .ci/tools.sh does, and returns containerd's
// path; the error names the first one missing.
func containerTools() (string, error) {
	var containerd string
	for _, tool := range []struct{ name, pkg string }{
		{"containerd", "containerd"}, {"containerd-shim-runc-v2", "containerd"}, {"runc", "runc"}, {"tini-static", "tini"},
	} {
		p, err := exec.LookPath(tool.name)
		if err != nil {
			return "", fmt.Errorf("%s is not in PATH (Debian package %s; .ci/tools.sh installs it)", tool.name, tool.pkg)
		}
		if tool.name == "containerd" {
			containerd = p
		}
	}
	return containerd, nil
}

// capsMajor is the major of the fake nvidia-caps nodes.
func capsMajor() int64 {
	ma, _, err := charDevice(filepath.Join(env.devDir, "nvidia-caps", "nvidia-cap1"))
	if err != nil {
		return 0
	}
	return ma
}

func tearDown() {
	if env.daemon == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if r, err := New(ctx, Config{Socket: env.daemon.Socket(), Namespace: env.ns, BaseDir: env.tmp}); err == nil {
		closeRuntime(r)
	}
	_ = env.daemon.Close()
	// The namespace's cgroup parents, now empty.
	if ds, err := filepath.Glob(filepath.Join(cgroupRoot, "*", env.ns)); err == nil {
		for _, d := range ds {
			_ = os.Remove(d)
		}
	}
	_ = os.Remove(filepath.Join(cgroupRoot, env.ns))
}

// need skips or fails a test that needs containerd when it cannot run.
func need(t testing.TB) {
	t.Helper()
	if env.skip == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("the container runtime tests must run in CI: %s", env.skip)
	}
	t.Skipf("skipping the container runtime tests: %s", env.skip)
}

// newRuntime returns a runtime on the shared daemon, with the tests'
// image as its default, closed (its containers stopped and removed) when
// the test ends.
func newRuntime(t testing.TB, mod ...func(*Config)) *Runtime {
	t.Helper()
	need(t)
	cfg := Config{
		Socket: env.daemon.Socket(), Namespace: env.ns, BaseDir: t.TempDir(),
		DefaultImage: testImage, NoPull: true, DevDir: env.devDir,
		MIGMinors: filepath.Join(env.devDir, sim.MIGMinorsFile),
	}
	for _, f := range mod {
		f(&cfg)
	}
	r, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeRuntime(r) })
	return r
}

// closeRuntime stops and removes every container the runtime knows. The
// tests share one namespace, which a new runtime adopts the containers
// of: top-level tests do not run in parallel.
func closeRuntime(r *Runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = r.StopAll(ctx)
	r.mu.Lock()
	ids := make([]string, 0, len(r.insts))
	for id := range r.insts {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		_ = r.Remove(id)
	}
	_ = r.Close()
}

// idSeq numbers instance IDs: the tests share one containerd namespace.
var idSeq atomic.Int64

// newID is an instance ID unique within the run.
func newID(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-", "'", "", ",", "", "(", "", ")", "").Replace(strings.ToLower(t.Name()))
	var b strings.Builder
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		}
	}
	name = b.String()
	if len(name) > 60 {
		name = name[:60]
	}
	name = strings.Trim(regexp.MustCompile(`[-_.]{2,}`).ReplaceAllString(name, "-"), "-_.")
	return fmt.Sprintf("%s-%d", name, idSeq.Add(1))
}

func sh(script string) []string { return runtimetest.Sh(script) }

// Shorter names for the suite's helpers, which the package's own tests use
// throughout.
var (
	logs    = runtimetest.Logs
	waitLog = runtimetest.WaitLog
	wait    = runtimetest.Wait
	run     = runtimetest.Exec
	// hostProcesses returns the PIDs of host processes whose command
	// line holds every one of args.
	hostProcesses = runtimetest.HostProcesses
)

// harness runs the conformance suite on runtimes of the shared daemon.
var harness = runtimetest.Harness{
	New:        func(t *testing.T) runtime.Runtime { return newRuntime(t) },
	ID:         func(t *testing.T) string { return newID(t) },
	Grace:      grace,
	StartSlack: time.Second,
	Environ: func(rt runtime.Runtime, s runtime.Spec) []string {
		lay, err := layout(withWorkDir(rt.(*Runtime), s))
		if err != nil {
			return []string{"no layout: " + err.Error()}
		}
		return containerEnv(s, lay)
	},
	Seen: func(rt runtime.Runtime, s runtime.Spec, dir string) string {
		lay, _ := layout(withWorkDir(rt.(*Runtime), s))
		for _, b := range lay.binds {
			if b[0] == filepath.Clean(dir) {
				return b[1]
			}
		}
		return "(not mounted)"
	},
	LeftBehind: func(t *testing.T, rt runtime.Runtime, id string) string { return leftBehind(t, rt.(*Runtime), id) },
}

// withWorkDir fills the working directory the runtime picks.
func withWorkDir(rt *Runtime, s runtime.Spec) runtime.Spec {
	if s.WorkDir == "" {
		s.WorkDir = filepath.Join(rt.cfg.BaseDir, s.InstanceID, "work")
	}
	return s
}

// leftBehind says whether containerd still holds a container of id.
func leftBehind(t *testing.T, rt *Runtime, id string) string {
	if _, err := rt.client.LoadContainer(rt.nsCtx(t.Context()), id); err == nil {
		return "a container"
	}
	return ""
}

// hostNamespace is the host's namespace link of a kind ("pid", "net").
func hostNamespace(kind string) string {
	s, _ := os.Readlink("/proc/self/ns/" + kind)
	return s
}
