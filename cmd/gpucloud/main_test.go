package main

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// runMainEnv makes the test binary run main() instead of the tests, so
// that a test can start gpucloud as a process exactly as the built binary
// runs: main's exit code, signals and all.
const runMainEnv = "GPUCLOUD_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// startUp starts `gpucloud up` as a process on a free port with its own
// data directory and CLI configuration, and returns it once it says it is
// up, with what it printed so far and a function that waits for it to
// exit and returns its error (nil: exit status 0) and the rest of its
// output.
// flags are the flags besides the port, the data directory and
// --no-nvml (noMetrics: serve no agent metrics).
func startUp(t *testing.T, flags ...string) (cmd *exec.Cmd, first string, wait func() (error, string)) {
	t.Helper()
	dir := t.TempDir()
	args := []string{"up", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--no-nvml", "--agent-interval", "100ms"}
	cmd = exec.Command(os.Args[0], append(args, flags...)...)
	// A process up started and left behind (a killed up's) may hold the
	// output pipe open: Wait returns this long after up itself exited.
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "GPUCLOUD_CONFIG="+filepath.Join(dir, "config.yaml"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The reader keeps every line in memory and never blocks on the test:
	// a reader that waited for the test to take each line stalled up's
	// output once the test stopped reading (after "Press Ctrl-C"), and
	// with it up itself and every Wait on it.
	var (
		mu       sync.Mutex
		lines    []string
		more     = make(chan struct{}, 1)
		readDone = make(chan struct{})
	)
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			select {
			case more <- struct{}{}:
			default:
			}
		}
	}()
	// Wait must follow the reads' end (StdoutPipe's rule): it runs once
	// the reader has seen the pipe close, or WaitDelay after up exited.
	exited := make(chan struct{})
	var waitErr error
	go func() {
		<-readDone
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
			return
		default:
		}
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			// A process up left holds the pipe: close it from our side.
			_ = stdout.Close()
			<-exited
		}
	})
	from := func(i int) string {
		mu.Lock()
		defer mu.Unlock()
		if i >= len(lines) {
			return ""
		}
		return strings.Join(lines[i:], "\n") + "\n"
	}
	deadline := time.After(2 * time.Minute)
	seen := 0
	for {
		mu.Lock()
		n := len(lines)
		for ; seen < n; seen++ {
			if strings.HasPrefix(lines[seen], "Press Ctrl-C") {
				ready := seen + 1
				first := strings.Join(lines[:ready], "\n") + "\n"
				mu.Unlock()
				return cmd, first, func() (error, string) {
					<-exited
					return waitErr, from(ready)
				}
			}
		}
		mu.Unlock()
		select {
		case <-more:
		case <-readDone:
			select {
			case <-more:
			default:
				mu.Lock()
				done := seen == len(lines)
				mu.Unlock()
				if done {
					t.Fatalf("gpucloud up exited before it was up:\n%s", from(0))
				}
			}
		case <-deadline:
			t.Fatalf("gpucloud up is not up after 2 minutes:\n%s", from(0))
		}
	}
}

// noMetrics are the flags of an `up` that serves no agent metrics, with
// its workloads as processes (TestUpContainers runs containers).
var noMetrics = []string{"--agent-metrics-listen", "", "--runtime", "process"}

// TestUpExitsZeroOnSignal: Ctrl-C (SIGINT) or a service manager's SIGTERM
// stops `gpucloud up` cleanly, and the process exits 0.
func TestUpExitsZeroOnSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cloud")
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, out, wait := startUp(t, noMetrics...)
			if !strings.Contains(out, "gpucloud is up: https://127.0.0.1:") || !strings.Contains(out, "TLS 1.3 with the cloud's own CA sha256:") ||
				!strings.Contains(out, "workloads: plain processes (--runtime process), not isolated") {
				t.Fatalf("output:\n%s", out)
			}
			// The operator's secrets are the operator's alone.
			data := strings.TrimSuffix(strings.SplitN(strings.SplitN(out, "data in ", 2)[1], ")", 2)[0], "/")
			for name, want := range map[string]os.FileMode{"": 0o700, "gpucloud.db": 0o600, "admin-token": 0o600, "ca.crt": 0o644} {
				st, err := os.Stat(filepath.Join(data, name))
				if err != nil || st.Mode().Perm() != want {
					t.Errorf("%s/%s: mode %v, %v; want %v", data, name, st.Mode().Perm(), err, want)
				}
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			type result struct {
				err  error
				rest string
			}
			done := make(chan result, 1)
			go func() {
				err, rest := wait()
				done <- result{err, rest}
			}()
			select {
			case r := <-done:
				if r.err != nil {
					t.Fatalf("gpucloud up after %s: %v, want exit status 0", sig, r.err)
				}
				if !strings.Contains(r.rest, "gpucloud stopped") {
					t.Errorf("output after %s: %q, want the clean shutdown's \"gpucloud stopped\"", sig, r.rest)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("gpucloud up still running 30s after %s", sig)
			}
		})
	}
}

// TestUpAgentMetricsPortTaken: when the default agent metrics port is
// taken (another `gpucloud up`), `up` serves them on a free port instead
// and says where.
func TestUpAgentMetricsPortTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cloud")
	}
	// Hold the default port unless someone else already does.
	if ln, err := net.Listen("tcp", "127.0.0.1:9400"); err == nil {
		defer ln.Close()
	}
	// Without the flag: its default, 127.0.0.1:9400.
	cmd, out, wait := startUp(t, "--runtime", "process")
	m := regexp.MustCompile(`agent metrics: http://127\.0\.0\.1:(\d+)/metrics`).FindStringSubmatch(out)
	if m == nil || m[1] == "9400" {
		t.Errorf("agent metrics not moved off the taken port:\n%s", out)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err, _ := wait(); err != nil {
		t.Errorf("exit: %v", err)
	}
}

// TestUpServerPortTaken: an up whose server port is taken says so, exits
// non-zero and leaves its new data directory without a database, so that
// the same command with another port then starts.
func TestUpServerPortTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cloud")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cmd := exec.Command(os.Args[0], "up", "--listen", ln.Addr().String(), "--data-dir", data, "--no-nvml", "--runtime", "process")
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "GPUCLOUD_CONFIG="+filepath.Join(dir, "config.yaml"))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cannot listen on "+ln.Addr().String()) {
		t.Fatalf("up on a taken port: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(data, "gpucloud.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the failed up left a database: %v", err)
	}
}
