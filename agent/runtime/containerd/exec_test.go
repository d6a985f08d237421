package containerd

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestExecAndDial: exec runs in the container as the workload's user,
// without capabilities, with its exit code, input, a terminal of the size
// asked and Ctrl-C; a port forward reaches a server listening inside the
// container's network namespace; an agent that restarts kills the exec
// processes the previous one left.
func TestExecAndDial(t *testing.T) {
	rt := newRuntime(t)
	id := newID(t)
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Grace: grace, Command: sh(
		"echo uid=$(id -u); mkdir -p www && echo hello-from-the-netns > www/index.html && exec httpd -f -p 8080 -h www")}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, id, "uid=")
	m := regexp.MustCompile(`uid=(\d+)`).FindStringSubmatch(logs(t, rt, id))
	if m == nil {
		t.Fatalf("no uid in the workload's output %q", logs(t, rt, id))
	}
	exec := func(spec runtime.ExecSpec, stdin func(w *io.PipeWriter)) (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		var out, errb lockedBuf
		spec.Stdout, spec.Stderr = &out, &errb
		if stdin != nil {
			pr, pw := io.Pipe()
			defer pw.Close()
			spec.Stdin = pr
			go stdin(pw)
		}
		code, err := rt.Exec(ctx, id, spec)
		if err != nil {
			t.Fatalf("exec %v: %v", spec.Command, err)
		}
		return code, out.String(), errb.String()
	}
	for _, c := range []struct {
		name  string
		spec  runtime.ExecSpec
		stdin func(*io.PipeWriter)
		code  int
		out   string
	}{
		{name: "the workload's user", spec: runtime.ExecSpec{Command: []string{"id", "-u"}}, out: m[1] + "\n"},
		{name: "no capabilities", spec: runtime.ExecSpec{Command: sh("grep CapEff /proc/self/status")}, out: "CapEff:\t0000000000000000\n"},
		{name: "exit code", spec: runtime.ExecSpec{Command: sh("exit 4")}, code: 4},
		{name: "env over the workload's", spec: runtime.ExecSpec{Command: sh(`echo "$LANG/$TERM/${PATH:+path}"`),
			Env: []string{"LANG=C.UTF-8", "TERM=xterm-256color"}}, out: "C.UTF-8/xterm-256color/path\n"},
		{name: "stdin", spec: runtime.ExecSpec{Command: []string{"cat"}},
			stdin: func(w *io.PipeWriter) { w.Write([]byte("into the container")); w.Close() }, out: "into the container"},
		{name: "tty size", spec: runtime.ExecSpec{Command: []string{"stty", "size"}, TTY: true, Size: runtime.TermSize{Cols: 101, Rows: 33}},
			out: "33 101"},
		{name: "ctrl-c", spec: runtime.ExecSpec{Command: []string{"sleep", "30"}, TTY: true},
			stdin: func(w *io.PipeWriter) { time.Sleep(500 * time.Millisecond); w.Write([]byte{0x03}) }, code: 130},
	} {
		code, out, errOut := exec(c.spec, c.stdin)
		if code != c.code || c.spec.TTY && !strings.Contains(out, c.out) || !c.spec.TTY && out != c.out {
			t.Errorf("%s: exit %d, out %q (err %q); want %d, %q", c.name, code, out, errOut, c.code, c.out)
		}
	}

	conn, err := rt.Dial(t.Context(), id, 8080)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	resp, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.Contains(string(resp), "hello-from-the-netns") {
		t.Errorf("through the forward: %q", resp)
	}

	// An exec left running by an agent that went away is killed by the
	// next runtime's adoption.
	left := make(chan struct{})
	go func() {
		defer close(left)
		rt.Exec(context.Background(), id, runtime.ExecSpec{Command: []string{"sleep", "1000"}, Stdout: io.Discard, Stderr: io.Discard})
	}()
	time.Sleep(500 * time.Millisecond)
	rt.mu.Lock()
	rt.insts = map[string]*inst{}
	rt.mu.Unlock()
	next := newRuntime(t)
	rt = next
	select {
	case <-left:
	case <-time.After(20 * time.Second):
		t.Fatal("the earlier agent's exec survived the adoption")
	}
	if _, out, _ := exec(runtime.ExecSpec{Command: sh("ps -o args")}, nil); strings.Contains(out, "sleep 1000") {
		t.Errorf("the earlier agent's exec still runs:\n%s", out)
	}
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
}
