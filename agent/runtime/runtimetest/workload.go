package runtimetest

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// What a workload sees and leaves: its environment, its directories, its
// output, its address and what it uses.

// testEnvironment: the workload's environment is exactly the harness's
// Environ (runtime.Environ with the paths it sees), whatever the agent's
// own environment holds and whatever the tenant's env tries to set.
func testEnvironment(t *testing.T, h Harness) {
	rt := h.New(t)
	vol := filepath.Join(t.TempDir(), "vol-data")
	scratch := filepath.Join(t.TempDir(), "scratch", "i-env")
	if err := os.MkdirAll(scratch, 0o750); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		desc string
		spec runtime.Spec
		// metadata gives the instance a metadata endpoint.
		metadata bool
	}{
		{desc: "CPU-only instance sees no GPU", spec: runtime.Spec{}},
		{desc: "whole GPUs and tenant env", spec: runtime.Spec{Devices: []string{"GPU-aaaa", "GPU-bbbb"}, GPUIndexes: []int{0, 1},
			Env: map[string]string{"MODEL": "llama", "SPACES": "a b  c"}}},
		{desc: "GPU share with MPS limits and metadata", spec: runtime.Spec{Devices: []string{"GPU-cccc"}, GPUIndexes: []int{2},
			ShareMilli: 500, ShareMemoryMiB: 20480}, metadata: true},
		{desc: "tenant cannot widen devices", spec: runtime.Spec{Devices: []string{"GPU-1"},
			Env: map[string]string{"CUDA_VISIBLE_DEVICES": "all", "GPUCLOUD_INSTANCE_ID": "other", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1T"}}},
		{desc: "volumes are passed as the paths the workload sees", spec: runtime.Spec{Volumes: []string{vol}, WorkDir: vol}},
		{desc: "the instance store is passed as the path the workload sees", spec: runtime.Spec{Scratch: scratch,
			Env: map[string]string{runtime.EnvScratch: "/elsewhere"}}},
	}
	// The agent's own environment must not leak into workloads.
	t.Setenv("CUDA_VISIBLE_DEVICES", "GPU-agent")
	t.Setenv("GPUCLOUD_TOKEN", "secret")
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := tt.spec
			s.InstanceID = h.ID(t)
			s.Command = []string{"env"}
			wantURL := ""
			if tt.metadata {
				wantURL = withMetadata(rt, &s)
			}
			st, out := Exec(t, rt, s)
			if st.ExitCode != 0 {
				t.Fatalf("env exited %d: %q", st.ExitCode, out)
			}
			got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			slices.Sort(got)
			if want := h.Environ(rt, s); !slices.Equal(got, want) {
				t.Fatalf("environment\n got %q\nwant %q", got, want)
			}
			for _, c := range []struct {
				when bool
				want string
			}{
				{wantURL != "", runtime.EnvMetadataURL + "=" + wantURL},
				{s.ShareMilli > 0, runtime.EnvMPSMemLimit + "=0=20480M"},
				{len(s.Volumes) > 0, runtime.EnvVolumes + "=" + h.Seen(rt, s, vol)},
				{s.Scratch != "", runtime.EnvScratch + "=" + h.Seen(rt, s, scratch)},
			} {
				if c.when && !slices.Contains(got, c.want) {
					t.Fatalf("%s is missing: %q", c.want, got)
				}
			}
		})
	}
}

// withMetadata gives s a metadata endpoint the way rt takes one, and
// returns the URL the workload must be told.
func withMetadata(rt runtime.Runtime, s *runtime.Spec) string {
	if m, ok := rt.(runtime.MetadataServer); ok {
		s.Metadata = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, "meta", r.URL.Path)
		})
		return m.MetadataURL()
	}
	s.MetadataURL = "http://127.0.0.1:4242"
	return s.MetadataURL
}

// testLogs: output is appended to the log file a Spec names, read in
// chunks of at most runtime.MaxLogChunk, and an offset past the end
// resumes at the end.
func testLogs(t *testing.T, h Harness) {
	const chunk = runtime.MaxLogChunk
	rt := h.New(t)
	id := h.ID(t)
	logPath := filepath.Join(t.TempDir(), "nested", "dir", "out.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, []byte("old\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	Exec(t, rt, runtime.Spec{InstanceID: id, LogPath: logPath,
		Command: Sh("echo out; echo err >&2; head -c " + strconv.Itoa(chunk+10) + " /dev/zero")})
	if all := Logs(t, rt, id); !strings.HasPrefix(all, "old\n") || !strings.Contains(all, "out\n") || !strings.Contains(all, "err\n") {
		t.Fatalf("output starts %q, want the old file's line, then out and err", all[:min(len(all), 16)])
	}
	// Unless stdout and stderr are one stream, their order is not fixed.
	first, fromFour := "old\n", ""
	if h.OneStream {
		first, fromFour = "old\nout\nerr\n", "out\nerr\n"
	}
	tests := []struct {
		desc     string
		offset   int64
		wantLen  int
		wantNext int64
		prefix   string
		wantErr  error
	}{
		{desc: "from the start, appended to the old file, capped", offset: 0, wantLen: chunk, wantNext: chunk, prefix: first},
		{desc: "from an offset", offset: 4, wantLen: chunk, wantNext: 4 + chunk, prefix: fromFour},
		{desc: "the rest", offset: chunk, wantLen: 22, wantNext: chunk + 22},
		{desc: "at the end", offset: chunk + 22, wantLen: 0, wantNext: chunk + 22},
		{desc: "past the end resumes at the end", offset: 1 << 30, wantLen: 0, wantNext: chunk + 22},
		{desc: "negative offset", offset: -1, wantErr: runtime.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			b, next, err := rt.Logs(id, tt.offset)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != tt.wantLen || next != tt.wantNext || !strings.HasPrefix(string(b), tt.prefix) {
				t.Fatalf("got %d bytes (%q...) next %d, want %d bytes next %d prefix %q",
					len(b), b[:min(len(b), 16)], next, tt.wantLen, tt.wantNext, tt.prefix)
			}
		})
	}
}

// testWorkDirAndVolumes: the workload runs in its working directory,
// which is also HOME, a relative command is found there, and what it
// writes there and in its volumes lands in the host directories. A
// working directory that is a volume is seen where the volume is.
func testWorkDirAndVolumes(t *testing.T, h Harness) {
	rt := h.New(t)
	work := filepath.Join(t.TempDir(), "instances", "wd")
	volA := filepath.Join(t.TempDir(), "vol-a")
	volB := filepath.Join(t.TempDir(), "vol-b")
	for _, d := range []string{work, volA, volB} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	s := runtime.Spec{InstanceID: h.ID(t), WorkDir: work, Volumes: []string{volA, volB}, Command: []string{"./run.sh"}}
	script := fmt.Sprintf("#!/bin/sh\npwd\necho \"$HOME\"\necho hi > $HOME/out\necho a > %s/f\necho b > %s/f\n",
		h.Seen(rt, s, volA), h.Seen(rt, s, volB))
	if err := os.WriteFile(filepath.Join(work, "run.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	st, out := Exec(t, rt, s)
	if seen := h.Seen(rt, s, work); st.ExitCode != 0 || out != seen+"\n"+seen+"\n" {
		t.Fatalf("exit %d, output %q, want pwd and HOME %s", st.ExitCode, out, seen)
	}
	for _, f := range []struct{ path, want string }{
		{filepath.Join(work, "out"), "hi\n"}, {filepath.Join(volA, "f"), "a\n"}, {filepath.Join(volB, "f"), "b\n"},
	} {
		if b, err := os.ReadFile(f.path); err != nil || string(b) != f.want {
			t.Fatalf("%s: %q, %v", f.path, b, err)
		}
	}
	s = runtime.Spec{InstanceID: h.ID(t), WorkDir: volA, Volumes: []string{volA}, Command: Sh("pwd; ls")}
	if st, out := Exec(t, rt, s); st.ExitCode != 0 || out != h.Seen(rt, s, volA)+"\nf\n" {
		t.Fatalf("a volume as the working directory: exit %d, output %q", st.ExitCode, out)
	}
}

// testScratch: the workload finds its instance store at GPUCLOUD_SCRATCH,
// writes there as its own user, and what it writes lands in the host
// directory; an instance without one has no GPUCLOUD_SCRATCH.
func testScratch(t *testing.T, h Harness) {
	rt := h.New(t)
	scratch := filepath.Join(t.TempDir(), "scratch", "i-s")
	if err := os.MkdirAll(scratch, 0o750); err != nil {
		t.Fatal(err)
	}
	s := runtime.Spec{InstanceID: h.ID(t), Scratch: scratch,
		Command: Sh(`echo "$GPUCLOUD_SCRATCH"; mkdir "$GPUCLOUD_SCRATCH/d" && echo data > "$GPUCLOUD_SCRATCH/d/f" && echo written`)}
	st, out := Exec(t, rt, s)
	if want := h.Seen(rt, s, scratch) + "\nwritten\n"; st.ExitCode != 0 || out != want {
		t.Fatalf("exit %d, output %q, want %q", st.ExitCode, out, want)
	}
	if b, err := os.ReadFile(filepath.Join(scratch, "d", "f")); err != nil || string(b) != "data\n" {
		t.Fatalf("the file written in the instance store: %q, %v", b, err)
	}
	s = runtime.Spec{InstanceID: h.ID(t), Command: Sh(`echo "[$GPUCLOUD_SCRATCH]"; test -e /scratch && echo "/scratch exists"; true`)}
	if st, out := Exec(t, rt, s); st.ExitCode != 0 || out != "[]\n" {
		t.Fatalf("without an instance store: exit %d, output %q", st.ExitCode, out)
	}
}

// testAddress: an Addresser runtime's running workload is at the
// harness's Address, or has none when that is the zero Addr; an unknown
// or exited one has none.
func testAddress(t *testing.T, h Harness) {
	rt := h.New(t)
	a, ok := rt.(runtime.Addresser)
	if !ok {
		t.Skipf("%T is no Addresser", rt)
	}
	id := h.ID(t)
	if got, ok := a.Address(id); ok {
		t.Fatalf("unknown instance: address %s", got)
	}
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: Sh("echo ready; exec sleep 30"), Grace: h.Grace}); err != nil {
		t.Fatal(err)
	}
	WaitLog(t, rt, id, "ready")
	if got, ok := a.Address(id); ok != h.Address.IsValid() || got != h.Address {
		t.Fatalf("running instance: address %s, %v; want %s", got, ok, h.Address)
	}
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if got, ok := a.Address(id); ok {
		t.Fatalf("stopped instance: address %s", got)
	}
}

// testResources: a ResourceReader sees a workload's memory (a shell
// holding 20 MB in a variable) and its CPU time growing (a busy loop in a
// child process), the same CPU time a UsageReader reports; an unknown or
// exited workload has none.
func testResources(t *testing.T, h Harness) {
	rt := h.New(t)
	rr, ok := rt.(runtime.ResourceReader)
	if !ok {
		t.Skipf("%T is no ResourceReader", rt)
	}
	ur, _ := rt.(runtime.UsageReader)
	id := h.ID(t)
	if _, ok := rr.Resources(id); ok {
		t.Fatal("resources of an unknown workload")
	}
	if ur != nil {
		if _, ok := ur.Usage(id); ok {
			t.Fatal("usage of an unknown workload")
		}
	}
	script := `x=$(head -c 20000000 /dev/zero | tr '\0' a); sh -c 'while :; do :; done' & echo ready; wait`
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: Sh(script), Grace: h.Grace}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop(t.Context(), id) })
	WaitLog(t, rt, id, "ready")
	first, ok := rr.Resources(id)
	if !ok {
		t.Fatal("no resources of a running workload")
	}
	var r runtime.Resources
	Eventually(t, "the workload to hold 20 MB and its CPU time to grow by 0.1 s", func() (bool, string) {
		r, ok = rr.Resources(id)
		return ok && r.MemoryBytes >= 20_000_000 && r.CPUSeconds >= first.CPUSeconds+0.1, fmt.Sprintf("%+v, %v", r, ok)
	})
	if r.MemoryBytes > 1<<30 {
		t.Errorf("memory %d bytes for a 20 MB shell", r.MemoryBytes)
	}
	if ur != nil {
		if cpu, ok := ur.Usage(id); !ok || cpu < r.CPUSeconds {
			t.Errorf("Usage %v (%v) behind Resources' CPU time %v", cpu, ok, r.CPUSeconds)
		}
	}
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if _, ok := rr.Resources(id); ok {
		t.Fatal("resources of an exited workload")
	}
	if ur != nil {
		if _, ok := ur.Usage(id); ok {
			t.Fatal("usage of an exited workload")
		}
	}
}
