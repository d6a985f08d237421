//go:build unix

package process

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/runtimetest"
)

// TestImageIgnoredWithOneWarning: a workload that names an image runs its
// command on the host all the same, and only the first such start warns.
func TestImageIgnoredWithOneWarning(t *testing.T) {
	imageWarned.Store(false)
	t.Cleanup(func() { imageWarned.Store(false) })
	var buf bytes.Buffer
	rt := New(t.TempDir()).SetLog(slog.New(slog.NewTextHandler(&buf, nil)))
	for _, id := range []string{"i-img-1", "i-img-2"} {
		st, out := runtimetest.Exec(t, rt, runtime.Spec{InstanceID: id, Image: "docker.io/library/python:3.12", Command: sh("echo ran")})
		if st.State != runtime.StateExited || st.ExitCode != 0 || out != "ran\n" {
			t.Errorf("%s: %+v, output %q; want the command run on the host", id, st, out)
		}
	}
	if n := strings.Count(buf.String(), "images are not used"); n != 1 ||
		!strings.Contains(buf.String(), "image=docker.io/library/python:3.12") || !strings.Contains(buf.String(), "instance=i-img-1") {
		t.Errorf("log %q: want one warning naming the first instance and its image", buf.String())
	}
	// A second runtime of the process does not warn again.
	buf.Reset()
	other := New(t.TempDir()).SetLog(slog.New(slog.NewTextHandler(&buf, nil)))
	runtimetest.Exec(t, other, runtime.Spec{InstanceID: "i-img-3", Image: "python", Command: sh("true")})
	if buf.Len() != 0 {
		t.Errorf("a second runtime logged %q", buf.String())
	}
}
