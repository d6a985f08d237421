package containerd

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// TestProgramNotLookedUpOnHost: the program check tells the tenant nothing
// about the host's files. Each case starts a workload whose program leads
// to a host path outside the image, once an executable file of the host
// and once a path the host does not have: the two outcomes are the same,
// and neither runs the host's file.
func TestProgramNotLookedUpOnHost(t *testing.T) {
	rt := newRuntime(t)
	onHost, err := os.Executable() // an executable host file, not in the image
	if err != nil {
		t.Fatal(err)
	}
	// The missing target has the same base name, so that programs found
	// along a PATH are named alike.
	missing := filepath.Join("/nonexistent", filepath.Base(onHost))
	link := func(t *testing.T, target, at string) {
		t.Helper()
		if err := os.Symlink(target, at); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		desc string
		// spec is the workload whose program leads to target, with the
		// work dir and a volume (named "vol") it may use.
		spec func(t *testing.T, work, vol, target string) runtime.Spec
	}{
		{desc: "absolute path outside the image", spec: func(t *testing.T, work, vol, target string) runtime.Spec {
			return runtime.Spec{WorkDir: work, Command: []string{target}}
		}},
		{desc: "absolute symlink in the work dir", spec: func(t *testing.T, work, vol, target string) runtime.Spec {
			link(t, target, filepath.Join(work, "prog"))
			return runtime.Spec{WorkDir: work, Command: []string{"./prog"}}
		}},
		{desc: "relative symlink out of the work dir", spec: func(t *testing.T, work, vol, target string) runtime.Spec {
			link(t, strings.Repeat("../", 40)+strings.TrimPrefix(target, "/"), filepath.Join(work, "prog"))
			return runtime.Spec{WorkDir: work, Command: []string{"./prog"}}
		}},
		{desc: "symlinked directory in a volume", spec: func(t *testing.T, work, vol, target string) runtime.Spec {
			link(t, filepath.Dir(target), filepath.Join(vol, "bin"))
			return runtime.Spec{WorkDir: work, Volumes: []string{vol},
				Command: []string{path.Join(VolumesDir, "vol", "bin", filepath.Base(target))}}
		}},
		{desc: "PATH through a symlinked directory of the work dir", spec: func(t *testing.T, work, vol, target string) runtime.Spec {
			link(t, filepath.Dir(target), filepath.Join(work, "bin"))
			return runtime.Spec{WorkDir: work, Command: []string{filepath.Base(target)},
				Env: map[string]string{"PATH": path.Join(WorkDir, "bin")}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var got, out [2]string
			for i, target := range []string{onHost, missing} {
				vol := filepath.Join(t.TempDir(), "vol")
				if err := os.Mkdir(vol, 0o755); err != nil {
					t.Fatal(err)
				}
				s := tt.spec(t, t.TempDir(), vol, target)
				s.InstanceID = newID(t)
				got[i] = strings.NewReplacer(target, "TARGET", s.InstanceID, "ID").Replace(programOutcome(t, rt, s))
				// The init names its child's PID, which varies.
				got[i] = initPID.ReplaceAllString(got[i], "$1")
				// The output of a workload whose init fails at once is
				// sometimes lost (the log is empty): the outputs are
				// compared where both came.
				got[i], out[i], _ = strings.Cut(got[i], ": ")
			}
			if out[0] != "" && out[1] != "" && out[0] != out[1] {
				got[0], got[1] = got[0]+": "+out[0], got[1]+": "+out[1]
			}
			if got[0] != got[1] {
				t.Fatalf("a program the host has and one it lacks differ:\n host has it: %s\nhost lacks it: %s", got[0], got[1])
			}
			if strings.HasPrefix(got[0], "exit 0") {
				t.Fatalf("the workload ran: %s", got[0])
			}
		})
	}
}

// TestProgramInMount: a program in the instance's own mounts is still
// checked there before the container is made, symlinks inside them
// followed.
func TestProgramInMount(t *testing.T) {
	rt := newRuntime(t)
	tests := []struct {
		desc, program string
		// link is a symlink made in the work dir: name and target.
		link [2]string
		want string
	}{
		{desc: "missing program", program: "./train",
			want: `refused: program "./train" is not an executable file in the container: ` + runtime.ErrInvalid.Error()},
		{desc: "symlink to a missing file inside", program: "./train", link: [2]string{"train", "gone.sh"},
			want: `refused: program "./train" is not an executable file in the container: ` + runtime.ErrInvalid.Error()},
		{desc: "symlink to a script inside", program: "./train", link: [2]string{"train", "sub/run.sh"}, want: "exit 0: ran\n"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			work := t.TempDir()
			if err := os.MkdirAll(filepath.Join(work, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(work, "sub", "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if tt.link[0] != "" {
				if err := os.Symlink(tt.link[1], filepath.Join(work, tt.link[0])); err != nil {
					t.Fatal(err)
				}
			}
			s := runtime.Spec{InstanceID: newID(t), WorkDir: work, Command: []string{tt.program}}
			got := strings.ReplaceAll(programOutcome(t, rt, s), "start "+s.InstanceID+": ", "")
			if got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// initPID matches the PID in tini's messages ("[FATAL tini (7)]").
var initPID = regexp.MustCompile(`(tini) \(\d+\)`)

// programOutcome starts s and says how it ended: refused with the error
// (which must wrap ErrInvalid), or its exit code and output.
func programOutcome(t *testing.T, rt *Runtime, s runtime.Spec) string {
	t.Helper()
	if err := rt.Start(t.Context(), s); err != nil {
		if !errors.Is(err, runtime.ErrInvalid) {
			t.Fatalf("start: %v, want a refusal wrapping ErrInvalid or a start", err)
		}
		return "refused: " + err.Error()
	}
	st, out := wait(t, rt, s.InstanceID), logs(t, rt, s.InstanceID)
	return fmt.Sprintf("exit %d: %s", st.ExitCode, out)
}
