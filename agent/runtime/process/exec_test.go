//go:build unix

package process

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// syncBuf is a bytes.Buffer safe for the copy goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func startSleeper(t *testing.T) (*Runtime, string) {
	t.Helper()
	r := New(t.TempDir())
	id := "i-exec"
	if err := r.Start(context.Background(), runtime.Spec{InstanceID: id, Command: []string{"sleep", "60"},
		Env: map[string]string{"GREETING": "hello from the workload"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background(), id) })
	return r, id
}

// TestExec: a command runs in the workload's environment and directory,
// its output and exit code come back, stdin reaches it, a terminal has
// the size asked and then resized, 0x03 on a terminal interrupts, and an
// unknown workload or program is an error.
func TestExec(t *testing.T) {
	r, id := startSleeper(t)
	resize := make(chan runtime.TermSize, 1)
	cases := []struct {
		name   string
		spec   runtime.ExecSpec
		stdin  func(w *io.PipeWriter)
		code   int
		stdout string
		stderr string
	}{
		{name: "env and dir", spec: runtime.ExecSpec{Command: []string{"sh", "-c", `echo "$GREETING"; basename "$PWD"; echo oops >&2; exit 3`}},
			code: 3, stdout: "hello from the workload\nwork\n", stderr: "oops\n"},
		{name: "env over the workload's", spec: runtime.ExecSpec{Command: []string{"sh", "-c", `echo "$GREETING/$LANG"`},
			Env: []string{"LANG=C.UTF-8", "GREETING=hello from the session"}},
			stdout: "hello from the session/C.UTF-8\n"},
		{name: "stdin", spec: runtime.ExecSpec{Command: []string{"sh", "-c", "read l; echo got:$l"}},
			stdin: func(w *io.PipeWriter) { w.Write([]byte("abc\n")) }, stdout: "got:abc\n"},
		{name: "stdin eof", spec: runtime.ExecSpec{Command: []string{"cat"}},
			stdin: func(w *io.PipeWriter) { w.Write([]byte("all of it")); w.Close() }, stdout: "all of it"},
		{name: "tty size", spec: runtime.ExecSpec{Command: []string{"stty", "size"}, TTY: true, Size: runtime.TermSize{Cols: 101, Rows: 33}},
			stdout: "33 101"},
		{name: "tty resize", spec: runtime.ExecSpec{Command: []string{"sh", "-c", "read x; stty size"}, TTY: true,
			Size: runtime.TermSize{Cols: 80, Rows: 24}, Resize: resize},
			stdin: func(w *io.PipeWriter) {
				resize <- runtime.TermSize{Cols: 120, Rows: 50}
				time.Sleep(200 * time.Millisecond)
				w.Write([]byte("\n"))
			}, stdout: "50 120"},
		{name: "ctrl-c", spec: runtime.ExecSpec{Command: []string{"sleep", "30"}, TTY: true},
			stdin: func(w *io.PipeWriter) { time.Sleep(300 * time.Millisecond); w.Write([]byte{0x03}) }, code: 130},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var out, errb syncBuf
			c.spec.Stdout, c.spec.Stderr = &out, &errb
			if c.stdin != nil {
				pr, pw := io.Pipe()
				defer pw.Close()
				c.spec.Stdin = pr
				go c.stdin(pw)
			}
			start := time.Now()
			code, err := r.Exec(ctx, id, c.spec)
			if err != nil || code != c.code {
				t.Fatalf("exit %d, %v; want %d (out %q)", code, err, c.code, out.String())
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("took %s", time.Since(start))
			}
			if got := out.String(); c.spec.TTY && !strings.Contains(got, c.stdout) || !c.spec.TTY && got != c.stdout {
				t.Errorf("stdout %q, want %q", got, c.stdout)
			}
			if errb.String() != c.stderr {
				t.Errorf("stderr %q, want %q", errb.String(), c.stderr)
			}
		})
	}
	for _, c := range []struct {
		name, id string
		cmd      []string
		want     error
	}{
		{"unknown workload", "i-none", []string{"true"}, runtime.ErrNotFound},
		{"no such program", id, []string{"no-such-program-xyz"}, runtime.ErrInvalid},
	} {
		if _, err := r.Exec(context.Background(), c.id, runtime.ExecSpec{Command: c.cmd, Stdout: io.Discard, Stderr: io.Discard}); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestExecKilledWithContext: a session that ends kills its command.
func TestExecKilledWithContext(t *testing.T) {
	r, id := startSleeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := r.Exec(ctx, id, runtime.ExecSpec{Command: []string{"sleep", "30"}, Stdout: io.Discard, Stderr: io.Discard})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("%v after %s", err, time.Since(start))
	}
}

// TestDial: a port forward reaches a listener on the host's loopback,
// only for a running workload.
func TestDial(t *testing.T) {
	r, id := startSleeper(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := r.Dial(context.Background(), id, ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	if string(b) != "hi" {
		t.Fatalf("read %q", b)
	}
	if _, err := r.Dial(context.Background(), "i-none", 1); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("unknown workload: %v", err)
	}
}
