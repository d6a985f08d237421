package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
)

// TestUpContainers runs `gpucloud up --runtime containerd`: it starts its
// own containerd, an instance runs in a container (its own hostname, as
// nobody, in the image it names), its output reaches `instances logs`, and
// Ctrl-C stops the containers and the daemon and exits 0. It needs root,
// containerd, runc, tini and busybox-static: in CI (CI set) it fails
// without them, elsewhere it skips saying why.
func TestUpContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cloud")
	}
	needContainers(t)
	began := time.Now()
	cmd, out, wait := startUp(t, "--runtime", "containerd", "--agent-metrics-listen", "")
	t.Logf("up with containers started in %v", time.Since(began).Round(time.Millisecond))
	m := regexp.MustCompile(`workloads: containers on a private containerd \(socket (\S+/ctr/containerd\.sock); default image docker\.io/gpucloud/base:1\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("up does not say its workloads run in containers:\n%s", out)
	}
	socket := m[1]
	cli := upCLI(t, out)

	created := time.Now()
	var in struct {
		ID, Image, State string
	}
	js := cli("instances", "create", "--offering", "h100.1x", "--image", "gpucloud/base:1", "--wait", "-o", "json", "--",
		"sh", "-c", "echo host=$(hostname) uid=$(id -u); exec sleep 600")
	if err := json.Unmarshal([]byte(js), &in); err != nil {
		t.Fatalf("instances create: %v\n%s", err, js)
	}
	t.Logf("create to running (--wait) in %v", time.Since(created).Round(time.Millisecond))
	if in.State != "running" || in.Image != "docker.io/gpucloud/base:1" {
		t.Errorf("created %+v, want running in docker.io/gpucloud/base:1", in)
	}
	// The container's hostname, and a user of its own (not nobody).
	want := regexp.MustCompile(`host=` + regexp.QuoteMeta(in.ID) + ` uid=(\d+)\n`)
	var logs string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if logs = cli("instances", "logs", in.ID); want.MatchString(logs) {
			break
		}
	}
	if m := want.FindStringSubmatch(logs); m == nil {
		t.Errorf("instances logs: %q, want %q (the container's hostname and user)", logs, want)
	} else if uid, _ := strconv.Atoi(m[1]); uid < containerd.DefaultUIDBase {
		t.Errorf("the workload runs as %d, not a user of its own", uid)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if err, rest := wait(); err != nil || !strings.Contains(rest, "gpucloud stopped") {
		t.Errorf("after SIGINT: %v, %q; want exit 0 after \"gpucloud stopped\"", err, rest)
	}
	t.Logf("stopped in %v", time.Since(stopped).Round(time.Millisecond))
	// Neither the daemon nor a shim of its containers is left.
	if pids := processesWith(filepath.Dir(socket)); len(pids) > 0 {
		t.Errorf("processes of up's containerd left running: %v", pids)
	}
}

// needContainers skips a test without what containers need, and fails it
// in CI (CI set), saying why.
func needContainers(t *testing.T) {
	t.Helper()
	if why := containersMissing(); why != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("this test must run in CI: %s", why)
		}
		t.Skipf("skipping: %s", why)
	}
}

// upCLI returns the CLI of the up whose output so far is out (the CLI
// configuration it names): each call runs gpucloud with args and returns
// its standard output, failing the test, with both outputs, on an error.
func upCLI(t *testing.T, out string) func(args ...string) string {
	t.Helper()
	cm := regexp.MustCompile(`CLI configured in (\S+); try:`).FindStringSubmatch(out)
	if cm == nil {
		t.Fatalf("no CLI configuration in up's output:\n%s", out)
	}
	return func(args ...string) string {
		t.Helper()
		c := exec.Command(os.Args[0], args...)
		c.Env = append(os.Environ(), runMainEnv+"=1", "GPUCLOUD_CONFIG="+cm[1])
		var stderr strings.Builder
		c.Stderr = &stderr
		b, err := c.Output()
		if err != nil {
			t.Fatalf("gpucloud %s: %v\n%s%s", strings.Join(args, " "), err, b, stderr.String())
		}
		return string(b)
	}
}

// containersMissing says why this machine cannot run containers, or "".
func containersMissing() string {
	if os.Geteuid() != 0 {
		return "containers need root"
	}
	// The programs, found as .ci/tools.sh checks for them: by name in
	// PATH (where up's containerd finds its shim and runc too), and
	// busybox statically linked at the path up's base image is made from.
	for _, tool := range []struct{ name, pkg string }{
		{"containerd", "containerd"}, {"containerd-shim-runc-v2", "containerd"}, {"runc", "runc"}, {"tini-static", "tini"},
	} {
		if _, err := exec.LookPath(tool.name); err != nil {
			return fmt.Sprintf("%s is not in PATH (Debian package %s; .ci/tools.sh installs it)", tool.name, tool.pkg)
		}
	}
	if _, err := containerd.BaseImageFiles(""); err != nil {
		return err.Error() + "; .ci/tools.sh installs it"
	}
	return ""
}

// processesWith lists the processes whose command line mentions s.
func processesWith(s string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && e.Name() != fmt.Sprint(os.Getpid()) && strings.Contains(string(b), s) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}
