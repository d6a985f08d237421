package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/stream"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestAccess: exec and port-forward through the server (TLS 1.3) and the
// host's agent (its control channel and dial-back on mutual TLS), with
// the process runtime, on both stores.
func TestAccess(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testAccess(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testAccess(t, pgtest.URL(t)) })
}

// execOut runs an exec and returns its status and output.
func execOut(t *testing.T, cl *client.Client, id string, o client.ExecOptions) (*stream.ExitStatus, string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	o.Stdout, o.Stderr = &out, &errb
	st, err := cl.Exec(t.Context(), id, o)
	return st, out.String(), errb.String(), err
}

func testAccess(t *testing.T, db string) {
	spec := sim.Spec{ID: "sim-access", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 1}}
	c := startCluster(t, db, spec)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	_, mallory, _ := c.member("globex", "mallory")
	in, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "600"},
		Env: map[string]string{"GREETING": "hi from the workload"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, in.ID, cloud.Running)

	t.Run("exec", func(t *testing.T) {
		resize := make(chan stream.Size, 1)
		// Each terminal session has its own input: a session's copy of
		// its input outlives it until the next read.
		pr, pw := io.Pipe()
		defer pw.Close()
		pr2, pw2 := io.Pipe()
		defer pw2.Close()
		cases := []struct {
			name        string
			o           client.ExecOptions
			feed        func()
			code        int
			out, errOut string
		}{
			{name: "output and exit code", o: client.ExecOptions{Command: []string{"sh", "-c", `echo "$GREETING"; echo oops >&2; exit 7`}},
				code: 7, out: "hi from the workload\n", errOut: "oops\n"},
			{name: "stdin", o: client.ExecOptions{Command: []string{"cat"}, Stdin: strings.NewReader("piped in")}, out: "piped in"},
			{name: "tty and resize", o: client.ExecOptions{Command: []string{"sh", "-c", "stty size; read x; stty size"}, TTY: true,
				Size: stream.Size{Cols: 100, Rows: 30}, Resize: resize, Stdin: pr},
				feed: func() {
					time.Sleep(300 * time.Millisecond)
					resize <- stream.Size{Cols: 132, Rows: 43}
					time.Sleep(300 * time.Millisecond)
					pw.Write([]byte("\n"))
				}, out: "30 100"},
			{name: "ctrl-c", o: client.ExecOptions{Command: []string{"sleep", "30"}, TTY: true, Stdin: pr2},
				feed: func() { time.Sleep(500 * time.Millisecond); pw2.Write([]byte{0x03}) }, code: 130},
		}
		for _, tc := range cases {
			if tc.feed != nil {
				go tc.feed()
			}
			start := time.Now()
			st, out, errOut, err := execOut(t, alice, in.ID, tc.o)
			if err != nil || st.ExitCode != tc.code {
				t.Errorf("%s: status %+v, %v; want exit %d (out %q)", tc.name, st, err, tc.code, out)
				continue
			}
			if tc.o.TTY {
				if !strings.Contains(out, tc.out) {
					t.Errorf("%s: out %q lacks %q", tc.name, out, tc.out)
				}
			} else if out != tc.out || errOut != tc.errOut {
				t.Errorf("%s: out %q err %q; want %q %q", tc.name, out, errOut, tc.out, tc.errOut)
			}
			if tc.name == "tty and resize" && !strings.Contains(out, "43 132") {
				t.Errorf("resize: out %q lacks 43 132", out)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("%s took %s", tc.name, d)
			}
		}
	})

	t.Run("port-forward", func(t *testing.T) {
		// The process runtime's instances share the host's loopback: a
		// listener there is inside the instance.
		port := loopbackEcho(t)
		conn, err := alice.PortForward(ctx, in.ID, port)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		msg := bytes.Repeat([]byte("gpucloud"), 20000) // 160 kB: several messages each way
		go conn.Write(msg)
		got := make([]byte, len(msg))
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("echo through the forward: %v", err)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		_, err := mallory.Exec(ctx, in.ID, client.ExecOptions{Command: []string{"id"}})
		wantCode(t, "another tenant's exec", err, cloud.NotFound)
		_, err = mallory.PortForward(ctx, in.ID, 22)
		wantCode(t, "another tenant's port-forward", err, cloud.NotFound)
		_, err = alice.Exec(ctx, "i-0000000000000000", client.ExecOptions{Command: []string{"id"}})
		wantCode(t, "a missing instance", err, cloud.NotFound)
		_, err = alice.Exec(ctx, in.ID, client.ExecOptions{})
		wantCode(t, "no command", err, cloud.Invalid)
	})

	t.Run("agent restart ends the session", func(t *testing.T) {
		done := make(chan struct{})
		var st *stream.ExitStatus
		var eerr error
		ready := &signalWriter{ch: make(chan struct{})}
		go func() {
			defer close(done)
			st, eerr = alice.Exec(ctx, in.ID, client.ExecOptions{Command: []string{"sh", "-c", "echo ready; exec sleep 60"}, Stdout: ready})
		}()
		select {
		case <-ready.ch:
		case <-done:
			t.Fatalf("the session ended before the restart: %+v, %v", st, eerr)
		}
		c.hosts[spec.ID].restart()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("the session outlived its agent")
		}
		if eerr != nil || st == nil || st.ExitCode != agent.ExitAgentStopped || st.Message != agent.MessageAgentStopped {
			t.Fatalf("status %+v, %v; want exit %d with %q", st, eerr, agent.ExitAgentStopped, agent.MessageAgentStopped)
		}
		// The new agent serves sessions again.
		c.until("exec after the agent restarted", func() (bool, string) {
			st, out, _, err := execOut(t, alice, in.ID, client.ExecOptions{Command: []string{"echo", "back"}})
			if err != nil {
				return false, err.Error()
			}
			return st.ExitCode == 0 && out == "back\n", out
		})
	})

	t.Run("events", func(t *testing.T) {
		// A session's end is recorded once its stream has closed, just
		// after the client has its last byte: the last one may lag.
		var ended []map[string]any
		c.until("six session.ended events", func() (bool, string) {
			page, err := alice.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 1000})
			if err != nil {
				return false, err.Error()
			}
			ended = ended[:0]
			for _, e := range page.Events {
				if e.Kind == cloud.EventSessionEnded {
					var d map[string]any
					json.Unmarshal(e.Details, &d)
					if e.Actor == "" {
						t.Errorf("ended event without its actor: %+v", e)
					}
					ended = append(ended, d)
				}
			}
			return len(ended) >= 6, fmt.Sprintf("%d session.ended events", len(ended))
		})
		// The first exec's: sessions end in their own time, so its event
		// need not come first.
		var first map[string]any
		for _, d := range ended {
			if c, _ := d["command"].(string); strings.Contains(c, "GREETING") {
				first = d
			}
		}
		if first == nil || first["exit_code"] != float64(7) || first["duration_ms"] == nil {
			t.Errorf("the first exec's ended event: %v; all: %v", first, ended)
		}
	})

	t.Run("stopped instance", func(t *testing.T) {
		if _, err := alice.StopInstance(ctx, in.ID, 0); err != nil {
			t.Fatal(err)
		}
		c.waitState(alice, in.ID, cloud.Stopped)
		_, err := alice.Exec(ctx, in.ID, client.ExecOptions{Command: []string{"id"}})
		if e := wantCode(t, "exec on a stopped instance", err, cloud.Conflict); e != nil && !strings.Contains(e.Message, "stopped") {
			t.Errorf("message %q does not name the state", e.Message)
		}
	})
}

// signalWriter closes ch at its first write.
type signalWriter struct {
	ch   chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.ch) })
	return len(p), nil
}

// loopbackEcho serves, until t ends, a TCP echo on a loopback port, which
// it answers: the process runtime's instances share the host's loopback,
// so the port stands for one inside an instance.
func loopbackEcho(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer conn.Close(); io.Copy(conn, conn) }()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
