package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
)

// TestUpAllReduce follows the README's two-node all-reduce through
// `gpucloud up` on containers and the CLI: examples/allreduce built
// static, an image with it as torchrun (written here as `docker build`
// and `docker save` would, then `images import` into up's containerd),
// the llm-finetune blueprint applied unchanged with nodes on two hosts,
// and each node's line in `instances logs`: the worker's master is the
// head's address, and both all-reduces check out.
func TestUpAllReduce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cloud")
	}
	needContainers(t)
	dir := t.TempDir()
	tarball := writeAllReduceImage(t, dir)
	began := time.Now()
	cmd, out, wait := startUp(t, "--runtime", "containerd", "--agent-metrics-listen", "")
	m := regexp.MustCompile(`containerd \(socket (\S+/ctr/containerd\.sock);`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no containerd socket in the output:\n%s", out)
	}
	cli := upCLI(t, out)

	if o := cli("images", "import", tarball, "--containerd-socket", m[1]); !strings.Contains(o, "imported docker.io/gpucloud/allreduce:1") {
		t.Fatalf("images import:\n%s", o)
	}
	file := filepath.Join(dir, "ft.yaml")
	if err := os.WriteFile(file, []byte(cli("stacks", "blueprints", "show", "llm-finetune")), 0o600); err != nil {
		t.Fatal(err)
	}
	cli("stacks", "apply", file, "--name", "ft", "--param", "image=docker.io/gpucloud/allreduce:1",
		"--param", "network=ft", "--param", "checkpoint_gib=10", "--param", "checkpoint_kind=shared", "--wait", "--timeout", "2m")
	var view struct {
		Outputs struct {
			HeadID      string   `json:"head_id"`
			HeadAddress string   `json:"head_address"`
			WorkerIDs   []string `json:"worker_ids"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(cli("stacks", "show", "ft", "-o", "json")), &view); err != nil {
		t.Fatal(err)
	}
	o := view.Outputs
	if o.HeadID == "" || o.HeadAddress == "" || len(o.WorkerIDs) != 1 {
		t.Fatalf("the stack's outputs: %+v", o)
	}
	line := regexp.MustCompile(`allreduce: rank=(\d) world=2 master=(\S+) .* algbw=(\S+) GB/s busbw=\S+ GB/s ok\n`)
	for rank, id := range []string{o.HeadID, o.WorkerIDs[0]} {
		var logs string
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if logs = cli("instances", "logs", id); strings.Contains(logs, " ok\n") || strings.Contains(logs, " FAIL: ") {
				break
			}
		}
		lm := line.FindStringSubmatch(logs)
		if lm == nil || lm[1] != string(rune('0'+rank)) {
			t.Fatalf("rank %d (%s): logs %q", rank, id, logs)
		}
		// The checkpoint volume is shared: each node, on its own host,
		// sees the file the other left in it.
		if !strings.Contains(logs, "holds ranks=0,1\n") {
			t.Errorf("rank %d: the shared checkpoint volume does not hold both ranks' files: %q", rank, logs)
		}
		if rank == 1 && lm[2] != o.HeadAddress+":29500" {
			t.Errorf("the worker's master is %s, want head_address %s:29500", lm[2], o.HeadAddress)
		}
		t.Logf("rank %d at %v: %s", rank, time.Since(began).Round(time.Millisecond), strings.TrimSpace(lm[0]))
	}
	// Two hosts: each instance's events name the host it was placed on
	// (a stopped instance holds none).
	hosts := map[string]bool{}
	for _, id := range []string{o.HeadID, o.WorkerIDs[0]} {
		d := cli("instances", "describe", id)
		if hm := regexp.MustCompile(`placed on (\S+)`).FindStringSubmatch(d); hm != nil {
			hosts[hm[1]] = true
		} else {
			t.Errorf("describe %s names no host:\n%s", id, d)
		}
	}
	if len(hosts) != 2 {
		t.Errorf("the nodes ran on %v, want two hosts", hosts)
	}
	t.Logf("the nodes ran on %v", hosts)
	cli("stacks", "destroy", "ft", "--wait", "--timeout", "2m")

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err, rest := wait(); err != nil || !strings.Contains(rest, "gpucloud stopped") {
		t.Errorf("after SIGINT: %v, %q; want exit 0 after \"gpucloud stopped\"", err, rest)
	}
}

// writeAllReduceImage builds examples/allreduce statically and writes an
// image tarball of busybox and it as /usr/local/bin/torchrun, named
// docker.io/gpucloud/allreduce:1, as the README's docker build and save
// make it.
func writeAllReduceImage(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "torchrun")
	build := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-o", bin, "./examples/allreduce")
	build.Dir = filepath.Join("..", "..") // the module's root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/allreduce: %v\n%s", err, b)
	}
	prog, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	files, err := containerd.BaseImageFiles("")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, containerd.File{Path: "/usr/local", Mode: os.ModeDir | 0o755},
		containerd.File{Path: "/usr/local/bin", Mode: os.ModeDir | 0o755},
		containerd.File{Path: "/usr/local/bin/torchrun", Mode: 0o755, Data: prog})
	var img bytes.Buffer
	if err := containerd.WriteImage(&img, "docker.io/gpucloud/allreduce:1", files, containerd.ImageConfig{}); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, "allreduce.tar")
	if err := os.WriteFile(tarball, img.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return tarball
}
