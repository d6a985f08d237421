package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/stack"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// A two-node stack end to end (issue 19): the built-in llm-finetune
// blueprint, unchanged, on two simulated HGX hosts (8 H100s and 8
// InfiniBand adapters each) on a fabric, its image one whose torchrun is
// examples/allreduce. The head and the worker land on different hosts,
// the worker reaches the head at MASTER_ADDR:MASTER_PORT across the
// overlay, and the two run a ring all-reduce over TCP, check it and
// report its bandwidth.

// allReduceImage is the test's training image: the base image and
// examples/allreduce as /usr/local/bin/torchrun (on the workloads' PATH).
const allReduceImage = "docker.io/gpucloud/allreduce:1"

// allReduceHosts are two HGX H100 hosts in one zone and rack: each node
// of h100.8x takes a whole host, and the blueprint asks for an
// InfiniBand interconnect, which the server derives from the adapters.
var allReduceHosts = []sim.Spec{
	{ID: "hgx-a", Zone: "net-zone", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "H100", Count: 8}, HCAs: make(sim.HCAs, 8)},
	{ID: "hgx-b", Zone: "net-zone", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "H100", Count: 8}, HCAs: make(sim.HCAs, 8)},
}

// allReduceLine is the line each rank prints when its all-reduces are
// done and checked.
var allReduceLine = regexp.MustCompile(`allreduce: rank=(\d+) world=(\d+) master=(\S+) bytes=(\d+) iters=(\d+) time=(\S+) ` +
	`algbw=(\d+\.\d+) GB/s busbw=(\d+\.\d+) GB/s ok\n`)

// TestAllReduce applies llm-finetune with nodes=2 through the API, on
// both stores, and checks the all-reduce's lines.
func TestAllReduce(t *testing.T) {
	ch := startContainerHost(t)
	bin := buildAllReduce(t)
	ch.importImage(t, allReduceImage, containerd.File{Path: "/usr/local/bin/torchrun", Mode: 0o755, Data: bin})
	t.Run("sqlite", func(t *testing.T) { testAllReduce(t, ch, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testAllReduce(t, ch, pgtest.URL(t)) })
}

func testAllReduce(t *testing.T, ch *containerHost, db string) {
	began := time.Now()
	c := startNetClusterOf(t, ch, db, allReduceHosts...)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	src, err := stack.Blueprint("llm-finetune")
	if err != nil {
		t.Fatal(err)
	}
	params := map[string]string{"image": allReduceImage, "nodes": "2", "offering": "h100.8x",
		"checkpoint_gib": "10", "zone": allReduceHosts[0].Zone}
	if _, err := alice.ApplyStack(ctx, "ft", api.ApplyStackRequest{Template: string(src), Parameters: params}); err != nil {
		t.Fatalf("apply llm-finetune: %v", err)
	}
	v := waitStack(c, alice, "ft", cloud.StackActive)
	ids := map[string]string{}
	for _, r := range v.Resources {
		ids[r.Address] = r.ID
	}
	headID, workerID := ids["head"], ids["workers[0]"]
	if headID == "" || workerID == "" {
		t.Fatalf("the stack's resources: %+v", v.Resources)
	}
	t.Logf("stack active at %v", time.Since(began).Round(time.Millisecond))

	// Each rank prints its line and exits 0 (the instance stops); the
	// head's address is the worker's master.
	lines := map[string][]string{}
	for _, id := range []string{headID, workerID} {
		out := c.waitAllReduce(alice, id)
		m := allReduceLine.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s did not finish its all-reduce; output:\n%s", id, out)
		}
		lines[id] = m
		t.Logf("%s at %v:\n%s", id, time.Since(began).Round(time.Millisecond), out)
	}
	head := c.get(alice, headID)
	if head.PrivateAddress == "" || v.Outputs["head_address"] != head.PrivateAddress {
		t.Errorf("head address %q, outputs %v", head.PrivateAddress, v.Outputs)
	}
	for id, rank := range map[string]string{headID: "0", workerID: "1"} {
		if m := lines[id]; m[1] != rank || m[2] != "2" {
			t.Errorf("%s: rank %s of %s, want %s of 2", id, m[1], m[2], rank)
		}
	}
	if want := head.PrivateAddress + ":29500"; lines[workerID][3] != want {
		t.Errorf("the worker's master is %s, want the head's private address %s", lines[workerID][3], want)
	}
	for _, id := range []string{headID, workerID} {
		c.until(id+" to stop on its exit", func() (bool, string) {
			in := c.get(alice, id)
			return in.State == cloud.Stopped && in.Reason == cloud.ReasonExitedOK, string(in.State) + " " + in.Reason
		})
	}

	// Where they ran: the hosts of their running events, two apart.
	hosts := c.runningHosts(headID, workerID)
	if hosts[headID] == "" || hosts[workerID] == "" || hosts[headID] == hosts[workerID] {
		t.Errorf("head on %q, worker on %q: want two hosts", hosts[headID], hosts[workerID])
	}
	algbw, _ := strconv.ParseFloat(lines[workerID][7], 64)
	t.Logf("2 nodes on %s and %s over the overlay: %s bytes, algbw %.2f GB/s (%.0f MB/s), busbw %s GB/s, %s per all-reduce",
		hosts[headID], hosts[workerID], lines[workerID][4], algbw, algbw*1000, lines[workerID][8], lines[workerID][6])

	destroyFinetune(c, alice, "ft")
}

// waitAllReduce waits until an instance's output holds the all-reduce's
// last line (ok or FAIL), and returns it.
func (c *cluster) waitAllReduce(cl *client.Client, id string) string {
	c.t.Helper()
	var out string
	c.until("the all-reduce's line from "+id, func() (bool, string) {
		out = c.logs(cl, id)
		return allReduceLine.MatchString(out) || strings.Contains(out, " FAIL: "), strconv.Quote(out)
	})
	return out
}

// runningHosts are the hosts the instances' running events name.
func (c *cluster) runningHosts(ids ...string) map[string]string {
	c.t.Helper()
	out := map[string]string{}
	for _, e := range c.eventsAfter(0) {
		for _, id := range ids {
			if e.InstanceID == id && e.To == cloud.Running && e.HostID != "" {
				out[id] = e.HostID
			}
		}
	}
	return out
}

// destroyFinetune destroys the stack and checks what is left: its
// instances terminated, its network gone, and only the checkpoint volume,
// which the blueprint retains, and which the test then deletes.
func destroyFinetune(c *cluster, cl *client.Client, name string) {
	t := c.t
	ctx := t.Context()
	if _, err := cl.DestroyStack(ctx, "", name); err != nil {
		t.Fatal(err)
	}
	c.until("the stack to be destroyed", func() (bool, string) {
		sv, err := cl.GetStack(ctx, "", name)
		if cloud.ErrorCode(err) == cloud.NotFound {
			return true, ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return false, string(sv.State) + " " + sv.Reason
	})
	for _, in := range c.instances(cl, client.ListInstancesOptions{}) {
		if in.State != cloud.Terminated {
			t.Errorf("instance %s (%s) is %s after destroy", in.ID, in.Name, in.State)
		}
	}
	nets, err := cl.Networks(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		if n.Name == "llm-finetune" {
			t.Errorf("network %s (%s) is left after destroy", n.ID, n.Name)
		}
	}
	vols, err := cl.Volumes(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, vol := range vols {
		if vol.DeletedAt != nil {
			continue
		}
		kept = append(kept, vol.Name)
		if vol.Name == "llm-finetune-checkpoints" {
			if _, err := cl.DeleteVolume(ctx, vol.ID); err != nil {
				t.Errorf("delete the retained volume: %v", err)
			}
		}
	}
	if len(kept) != 1 || kept[0] != "llm-finetune-checkpoints" {
		t.Errorf("volumes after destroy: %v, want only the retained llm-finetune-checkpoints", kept)
	}
}

// buildAllReduce builds examples/allreduce, statically (no cgo), and
// returns the program.
func buildAllReduce(t *testing.T) []byte { return buildStatic(t, "allreduce") }

// buildStatic builds examples/NAME, statically (no cgo), and returns the
// program.
func buildStatic(t *testing.T, name string) []byte {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(goruntime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.CommandContext(t.Context(), gobin, "build", "-trimpath", "-o", out, "./examples/"+name)
	cmd.Dir = ".." // the module's root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build ./examples/%s: %v\n%s", name, err, stderr.String())
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// importImage writes an image of the base image's files and extra, named
// ref, and imports it into the test's containerd namespace.
func (ch *containerHost) importImage(t *testing.T, ref string, extra ...containerd.File) {
	t.Helper()
	ch.importImageWith(t, ref, containerd.ImageConfig{}, extra...)
}

// importImageWith is importImage with the image's configuration (its
// command, environment).
func (ch *containerHost) importImageWith(t *testing.T, ref string, cfg containerd.ImageConfig, extra ...containerd.File) {
	t.Helper()
	files, err := containerd.BaseImageFiles("")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"/usr/local", "/usr/local/bin"} {
		files = append(files, containerd.File{Path: d, Mode: os.ModeDir | 0o755})
	}
	files = append(files, extra...)
	var img bytes.Buffer
	if err := containerd.WriteImage(&img, ref, files, cfg); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(tarball, img.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := containerd.ImportImageFileTo(t.Context(), ch.daemon.Socket(), ch.ns, "", tarball); err != nil {
		t.Fatalf("import %s: %v", ref, err)
	}
}
