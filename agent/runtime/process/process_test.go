//go:build unix

package process

import (
	"context"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/runtimetest"
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
