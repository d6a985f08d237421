package upcmd

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
)

// TestUpRuntimeChoice: --runtime process runs processes and says so; auto
// falls back to processes with one line that says they are not isolated
// and why; a bad mode is refused.
func TestUpRuntimeChoice(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	u, err := startUpRuntimes(t.Context(), upRuntimeProcess, t.TempDir(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer u.close()
	if got := u.describe(); got != "workloads: plain processes (--runtime process), not isolated: a single-tenant development mode" {
		t.Errorf("process: %q", got)
	}
	drv, err := sim.New(sim.Spec{ID: "h-1", GPUs: sim.GPUSpec{Model: "L4", Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := u.forHost(context.Background(), filepath.Join(t.TempDir(), "h-1"), drv)
	if _, ok := rt.(*process.Runtime); err != nil || !ok {
		t.Errorf("forHost = %T, %v; want the process runtime", rt, err)
	}
	fallback := &upRuntimes{kind: upRuntimeProcess, why: "containerd is not installed"}
	if got := fallback.describe(); strings.Count(got, "\n") != 0 || !strings.HasPrefix(got, "warning: workloads run as plain processes, NOT isolated") ||
		!strings.Contains(got, "containerd is not installed") || !strings.Contains(got, "apt-get install containerd runc tini busybox-static") {
		t.Errorf("fallback: %q", got)
	}
	if _, err := startUpRuntimes(t.Context(), "docker", t.TempDir(), log); err == nil || !strings.Contains(err.Error(), "want auto, containerd or process") {
		t.Errorf("bad mode: %v", err)
	}
	// auto falls back, saying why, when this machine cannot run containers.
	if why := ContainerdMissing(); why != "" {
		u, err := startUpRuntimes(t.Context(), upRuntimeAuto, t.TempDir(), log)
		if err != nil || u.kind != upRuntimeProcess || u.why != why {
			t.Errorf("auto without containers: %+v, %v; want processes because %s", u, err, why)
		}
		if _, err := startUpRuntimes(t.Context(), upRuntimeContainerd, t.TempDir(), log); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("--runtime containerd without containers: %v", err)
		}
		return
	}
	// A data directory too long for a unix socket path falls back too.
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.MkdirAll(long, 0o700); err != nil {
		t.Fatal(err)
	}
	u, err = startUpRuntimes(t.Context(), upRuntimeAuto, long, log)
	if err != nil || u.kind != upRuntimeProcess || !strings.Contains(u.why, "too long for a unix socket path") {
		t.Errorf("auto with a long data directory: %+v, %v", u, err)
	}
}

// TestContainerdMissingUsesPATH: the check finds containerd, its shim and
// runc in PATH like any other program, so a PATH without them changes
// the choice; and the hint tells only a user who is not root to be root.
func TestContainerdMissingUsesPATH(t *testing.T) {
	if goruntime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("the PATH checks come after the Linux and root checks")
	}
	bin := t.TempDir()
	for _, tc := range []struct {
		have []string
		want string
	}{
		{nil, "containerd is not installed (or not in PATH)"},
		{[]string{"containerd"}, "containerd-shim-runc-v2 is not installed (Debian package containerd)"},
		{[]string{"containerd", "containerd-shim-runc-v2"}, "runc is not installed (or not in PATH)"},
	} {
		dir := filepath.Join(bin, strconv.Itoa(len(tc.have)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range tc.have {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		t.Setenv("PATH", dir)
		if got := ContainerdMissing(); got != tc.want {
			t.Errorf("PATH with %v: %q, want %q", tc.have, got, tc.want)
		}
	}
	if h := containerHint(); strings.Contains(h, "root") || !strings.Contains(h, "nftables") {
		t.Errorf("hint to root: %q", h)
	}
}
