//go:build unix

package process

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// TestImageRefused: a workload that names an image is refused with a
// runtime.ImageError (an ErrInvalid) that names the image, and nothing of
// it runs on the host, so no record is left.
func TestImageRefused(t *testing.T) {
	rt := New(t.TempDir())
	tests := []struct {
		id, image string
	}{
		{"i-img-1", "docker.io/library/python:3.12"},
		{"i-img-2", "python"},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "ran")
			err := rt.Start(t.Context(), runtime.Spec{InstanceID: tt.id, Image: tt.image, Command: sh("touch " + mark)})
			var ie *runtime.ImageError
			if !errors.As(err, &ie) || !errors.Is(err, runtime.ErrInvalid) || ie.Image != tt.image || ie.InstanceID != tt.id {
				t.Fatalf("error %v, want an ImageError for %s wrapping ErrInvalid", err, tt.image)
			}
			want := "instance " + tt.id + " names image " + tt.image + ", but this host runs workloads as processes, which cannot run images"
			if err.Error() != want {
				t.Errorf("message %q, want %q", err, want)
			}
			if _, err := rt.Status(tt.id); !errors.Is(err, runtime.ErrNotFound) {
				t.Errorf("the refused start left a record: %v", err)
			}
			if _, err := os.Stat(mark); err == nil {
				t.Error("the command ran on the host")
			}
		})
	}
}

// TestProgramSymlinkNotFollowedOut: a program in the working directory is
// looked up within it. A symlink that leads out of it is refused with the
// same message whether its target exists on the host or not; one that
// stays inside works.
func TestProgramSymlinkNotFollowedOut(t *testing.T) {
	hostProgram, err := os.Executable() // an executable file outside the work dir
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	tests := []struct {
		desc, program string
		// link, when set, is the target of a symlink made at at, a name
		// in the work dir.
		link, at string
		// runs says the start succeeds; otherwise it fails with ErrInvalid
		// and this message, with WORK for the work dir.
		runs bool
	}{
		{desc: "absolute symlink to an executable host file", program: "./host", link: hostProgram, at: "host"},
		{desc: "absolute symlink to a missing host file", program: "./missing", link: "/nonexistent/program", at: "missing"},
		{desc: "relative symlink out to an executable host file", program: "./up",
			link: strings.Repeat("../", 40) + strings.TrimPrefix(hostProgram, "/"), at: "up"},
		{desc: "directory symlink out of the work dir", program: "./outdir/prog", link: outside, at: "outdir"},
		{desc: "absolute name under the work dir through a symlink out", program: "WORK/abs", link: hostProgram, at: "abs"},
		{desc: "symlink inside the work dir", program: "./inside", link: "real.sh", at: "inside", runs: true},
		{desc: "a program on the host named absolutely", program: "/bin/sh", runs: true},
	}
	for i, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			work := t.TempDir()
			if err := os.WriteFile(filepath.Join(work, "real.sh"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(outside, "prog"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			program := strings.Replace(tt.program, "WORK", work, 1)
			if tt.link != "" {
				if err := os.Symlink(tt.link, filepath.Join(work, tt.at)); err != nil {
					t.Fatal(err)
				}
			}
			rt := New(t.TempDir())
			id := "i-link-" + string(rune('a'+i))
			err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, WorkDir: work, Command: []string{program}})
			if tt.runs {
				if err != nil {
					t.Fatalf("start: %v", err)
				}
				if st, _ := rt.Wait(t.Context(), id); st.ExitCode != 0 {
					t.Fatalf("exit %d", st.ExitCode)
				}
				return
			}
			hint := "a relative path starts there; "
			if filepath.IsAbs(program) {
				hint = ""
			}
			want := "program \"" + program + "\" is not an executable file in the instance's working directory " + work +
				" (" + hint + "a symlink out of it is not followed): " + runtime.ErrInvalid.Error()
			if !errors.Is(err, runtime.ErrInvalid) || !strings.HasSuffix(err.Error(), want) {
				t.Fatalf("error %v, want one ending %q", err, want)
			}
		})
	}
}
