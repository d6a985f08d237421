//go:build unix

package process

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/runtimetest"
	"github.com/gpucloud/gpucloud/internal/testkit"
)

// grace is short so that the SIGKILL path costs the tests little time.
const grace = 200 * time.Millisecond

func sh(script string) []string { return runtimetest.Sh(script) }

// idSeq numbers the tests' instance IDs.
var idSeq atomic.Int64

// harness runs the conformance suite on process runtimes, each in a
// directory of its own.
var harness = runtimetest.Harness{
	New: func(t *testing.T) runtime.Runtime {
		rt := New(t.TempDir())
		t.Cleanup(func() { _ = rt.StopAll(context.Background()) })
		return rt
	},
	ID:        func(*testing.T) string { return "i-" + strconv.FormatInt(idSeq.Add(1), 10) },
	Grace:     grace,
	OneStream: true,
	Environ: func(rt runtime.Runtime, s runtime.Spec) []string {
		home := s.WorkDir
		if home == "" {
			home = filepath.Join(rt.(*Runtime).base, s.InstanceID, "work")
		}
		return runtime.Environ(s, home)
	},
	Seen:    func(_ runtime.Runtime, _ runtime.Spec, dir string) string { return dir },
	Address: netip.MustParseAddr("127.0.0.1"),
}

// TestConformance runs the behaviour every runtime owes the agent.
func TestConformance(t *testing.T) { runtimetest.Run(t, harness) }

// alive reports whether a process exists and is not a zombie; an orphan
// that has been killed may linger as a zombie until init reaps it.
func alive(pid int) bool {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		i := bytes.LastIndexByte(b, ')')
		return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
	} else if _, statErr := os.Stat("/proc/self"); statErr == nil {
		return false
	}
	return syscall.Kill(pid, 0) == nil
}

func TestGroupDies(t *testing.T) {
	tests := []struct {
		desc   string
		script string
		stop   bool
	}{
		{desc: "children die when the instance is stopped", script: "sleep 30 & echo child $!; wait", stop: true},
		{desc: "children die when the leader exits by itself", script: "sleep 30 & echo child $!; sleep 0.05; exit 0"},
		{desc: "children ignoring SIGTERM die too", script: "(trap '' TERM; sleep 30) & echo child $!; wait", stop: true},
	}
	for i, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			rt := New(t.TempDir())
			id := "group-" + strconv.Itoa(i)
			if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: sh(tt.script), Grace: grace}); err != nil {
				t.Fatal(err)
			}
			out := runtimetest.WaitLog(t, rt, id, "\n")
			pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.SplitN(out, "\n", 2)[0], "child ")))
			if err != nil {
				t.Fatalf("no child pid in %q", out)
			}
			if !alive(pid) {
				t.Fatalf("child %d not running before stop", pid)
			}
			if tt.stop {
				if err := rt.Stop(t.Context(), id); err != nil {
					t.Fatal(err)
				}
			} else {
				runtimetest.Wait(t, rt, id)
			}
			testkit.Eventually(t, 0, fmt.Sprintf("child %d to die with its instance", pid), func() bool { return !alive(pid) })
		})
	}
}
