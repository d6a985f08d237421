package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cliRun runs the CLI of the up whose output is out with args and stdin,
// and returns its exit code and outputs (no failure on a non-zero exit).
func cliRun(t *testing.T, out, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cm := regexp.MustCompile(`CLI configured in (\S+); try:`).FindStringSubmatch(out)
	if cm == nil {
		t.Fatalf("no CLI configuration in up's output:\n%s", out)
	}
	c := exec.Command(os.Args[0], args...)
	c.Env = append(os.Environ(), runMainEnv+"=1", "GPUCLOUD_CONFIG="+cm[1])
	c.Stdin = strings.NewReader(stdin)
	var so, se strings.Builder
	c.Stdout, c.Stderr = &so, &se
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, so.String(), se.String()
}

// TestUpExecContainers: on `up` with containers, `instances exec` runs as
// the workload's user (id -u matches the workload's own), passes stdin,
// exits with the remote exit code, and `instances port-forward` reaches a
// server inside the container's network namespace (through a tunnel, the
// relay with --relay, and the relay again where --direct finds no direct
// sessions). Containers as
// TestUpContainers needs them (CI fails without them).
func TestUpExecContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cloud")
	}
	needContainers(t)
	up, out, wait := startUp(t, "--runtime", "containerd", "--agent-metrics-listen", "")
	cli := upCLI(t, out)
	var in struct{ ID string }
	js := cli("instances", "create", "--offering", "h100.1x", "--image", "gpucloud/base:1", "--wait", "-o", "json", "--",
		"sh", "-c", "echo uid=$(id -u); mkdir -p www && echo hello-through-the-relay > www/index.html && exec httpd -f -p 8080 -h www")
	if err := json.Unmarshal([]byte(js), &in); err != nil {
		t.Fatalf("instances create: %v\n%s", err, js)
	}
	m := workloadUID(t, cli, in.ID)
	for _, c := range []struct {
		name, stdin string
		args        []string
		code        int
		out         string
	}{
		{"the workload's user", "", []string{"--", "id", "-u"}, 0, m[1] + "\n"},
		{"stdin", "typed", []string{"-i", "--", "cat"}, 0, "typed"},
		{"exit code", "", []string{"--", "sh", "-c", "exit 42"}, 42, ""},
		// -it with input that is not a terminal runs without one, and
		// says so: the whole script runs.
		{"-it with piped input", "echo piped; exit 3\n", []string{"-it", "--", "sh"}, 3, "piped\n"},
	} {
		code, so, se := cliRun(t, out, c.stdin, append([]string{"instances", "exec", in.ID}, c.args...)...)
		if code != c.code || so != c.out {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, %q", c.name, code, so, se, c.code, c.out)
		}
		if tty := strings.Contains(se, "Unable to use a TTY"); tty != (c.name == "-it with piped input") {
			t.Errorf("%s: stderr %q", c.name, se)
		}
	}

	// By default through a tunnel (docs/ACCESS.md, "Tunnels"), which
	// `up`'s agents take without any setting: no fallback said.
	addr, stderr := startPortForward(t, out, in.ID, "0:8080")
	getThrough(t, addr, "hello-through-the-relay", 2) // each connection is a session of its own
	if se := stderr(); se != "" {
		t.Errorf("port-forward through a tunnel said %q", se)
	}
	// --relay through the server's relay.
	addr, stderr = startPortForward(t, out, "--relay", in.ID, "0:8080")
	getThrough(t, addr, "hello-through-the-relay", 1)
	if se := stderr(); se != "" {
		t.Errorf("port-forward --relay said %q", se)
	}
	// --direct on a cloud that takes none says so and goes through the
	// server.
	addr, stderr = startPortForward(t, out, "--direct", in.ID, "0:8080")
	getThrough(t, addr, "hello-through-the-relay", 1)
	if se := stderr(); !strings.Contains(se, "no direct forward (permission_denied") || !strings.Contains(se, "forwarding through the server") {
		t.Errorf("port-forward --direct without direct sessions said %q", se)
	}
	// up stops its containers and its containerd before the test's
	// directories go.
	if err := up.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err, rest := wait(); err != nil {
		t.Errorf("after SIGINT: %v, %q", err, rest)
	}
}

// startPortForward runs `gpucloud instances port-forward ARGS` against
// up's CLI configuration until the test ends, and returns the local
// address it forwards from and what it has written to stderr so far.
func startPortForward(t *testing.T, upOut string, args ...string) (string, func() string) {
	t.Helper()
	pf := exec.Command(os.Args[0], append([]string{"instances", "port-forward"}, args...)...)
	pf.Env = append(os.Environ(), runMainEnv+"=1", "GPUCLOUD_CONFIG="+regexp.MustCompile(`CLI configured in (\S+); try:`).FindStringSubmatch(upOut)[1])
	pr, pw := io.Pipe()
	var mu sync.Mutex
	var stderr bytes.Buffer
	pf.Stdout, pf.Stderr = pw, writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return stderr.Write(p) })
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pf.Process.Kill(); pf.Wait() })
	line, err := bufio.NewReader(pr).ReadString('\n')
	go io.Copy(io.Discard, pr)
	lm := regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:\d+) -> \d+\n$`).FindStringSubmatch(line)
	if err != nil || lm == nil {
		t.Fatalf("port-forward %q said %q, %v", args, line, err)
	}
	return lm[1], func() string { mu.Lock(); defer mu.Unlock(); return stderr.String() }
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// getThrough GETs / at addr n times, each expecting want in the body.
func getThrough(t *testing.T, addr, want string, n int) {
	t.Helper()
	for range n {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Fatalf("through the port-forward: %q", b)
		}
	}
}

// workloadUID waits (at most 20 s) for an instance's workload to print
// "uid=N" and returns the match, N in [1]: the host uid its container
// runs as.
func workloadUID(t *testing.T, cli func(...string) string, id string) []string {
	t.Helper()
	want := regexp.MustCompile(`uid=(\d+)\n`)
	var logs string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !want.MatchString(logs); time.Sleep(100 * time.Millisecond) {
		logs = cli("instances", "logs", id)
	}
	m := want.FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("no uid in the workload's output %q", logs)
	}
	return m
}
