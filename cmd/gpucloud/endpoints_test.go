package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// TestUpEndpointSurvivesKill follows the endpoints' walk-through on `up`
// with containers (an image built with `images build` from
// examples/echoworker and imported, an endpoint with no command, a job
// from zero), then kills `up` with SIGKILL while a job runs: the next
// `up` on the same data directory runs the job again to completion. It
// needs what containers need: in CI it fails without them.
func TestUpEndpointSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cloud")
	}
	needContainers(t)
	dir := t.TempDir()
	worker := filepath.Join(dir, "echoworker")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", worker, "../../examples/echoworker")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build examples/echoworker: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	flags := []string{"--runtime", "containerd", "--agent-metrics-listen", "", "--data-dir", data}
	cmd, out, wait := startUp(t, flags...)
	stopCleanly(t, cmd)
	m := regexp.MustCompile(`socket (\S+/ctr/containerd\.sock)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("up does not say where its containerd is:\n%s", out)
	}
	cli := upCLI(t, out)
	tarball := filepath.Join(dir, "echoworker.tar")
	cli("images", "build", "docker.io/gpucloud/echoworker:1", "--add", worker+":/usr/local/bin/echoworker",
		"--cmd", "/usr/local/bin/echoworker", "-o", tarball)
	cli("images", "import", tarball, "--containerd-socket", m[1])
	cli("endpoints", "create", "echo", "--image", "docker.io/gpucloud/echoworker:1", "--offering", "l40s.1x", "--idle-timeout", "60s")

	type job struct {
		ID, State string
		Attempts  int
		Output    json.RawMessage
	}
	decode := func(s string) job {
		t.Helper()
		var j job
		if err := json.Unmarshal([]byte(s), &j); err != nil {
			t.Fatalf("%v: %s", err, s)
		}
		return j
	}
	began := time.Now()
	j := decode(cli("endpoints", "run", "echo", "--sync", "--wait", "60s", "--input", `{"first":true}`, "-o", "json"))
	var echoed struct {
		Echo map[string]bool `json:"echo"`
	}
	if err := json.Unmarshal(j.Output, &echoed); err != nil || j.State != "completed" || !echoed.Echo["first"] {
		t.Fatalf("the first job: %+v", j)
	}
	t.Logf("a job from zero on up: %v", time.Since(began).Round(time.Millisecond))

	slow := decode(cli("endpoints", "run", "echo", "--input", `{"sleep_ms":8000}`, "-o", "json"))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if s := decode(cli("endpoints", "status", "echo", slow.ID, "-o", "json")); s.State == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s did not start", slow.ID)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = wait()

	cmd, out, wait = startUp(t, flags...)
	stopCleanly(t, cmd)
	cli = upCLI(t, out)
	var last job
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if last = decode(cli("endpoints", "status", "echo", slow.ID, "-o", "json")); last.State == "completed" || last.State == "failed" {
			break
		}
	}
	if last.State != "completed" || last.Attempts < 2 {
		t.Errorf("the job that up's SIGKILL cut: %+v; want completed on a second attempt", last)
	}
	// A clean stop, which stops the containers and the daemon (the killed
	// up's daemon included: the second up took it over).
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err, rest := wait(); err != nil {
		t.Errorf("up after Ctrl-C: %v\n%s", err, rest)
	}
	// The killed up's containerd was stopped by the next up, which then
	// stopped its own: none is left.
	if pids := processesWith(data); len(pids) > 0 {
		t.Errorf("processes of up's containerd left running: %v", pids)
	}
}

// stopCleanly makes the test's end, however it ends, stop up with SIGINT
// (its containers and its containerd with it) before startUp's cleanup
// kills what is left.
func stopCleanly(t *testing.T, cmd *exec.Cmd) {
	t.Cleanup(func() {
		if cmd.ProcessState != nil || cmd.Process.Signal(syscall.SIGINT) != nil {
			return
		}
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if cmd.Process.Signal(syscall.Signal(0)) != nil {
				return
			}
		}
	})
}
