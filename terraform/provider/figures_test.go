package provider_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestApplyTwentyFigures measures what docs/BENCHMARKS.md reports of the
// provider: a 20-instance `terraform apply` and `terraform destroy`
// (the built provider through dev_overrides; apply returns once every
// instance runs, destroy once every one is terminated), against the same
// 20 instances through `gpucloud stacks` (apply until the stack is active
// and its instances run, destroy until it is destroyed), on one in-process
// server (SQLite, TLS 1.3) with three simulated 8-GPU hosts, each way
// twice, interleaved. It runs only with GPUCLOUD_BENCH=1:
//
//	GPUCLOUD_BENCH=1 go test ./terraform/provider -run TestApplyTwentyFigures -v -count=1
func TestApplyTwentyFigures(t *testing.T) {
	if os.Getenv("GPUCLOUD_BENCH") != "1" {
		t.Skip("a measurement: GPUCLOUD_BENCH=1 runs it")
	}
	needTerraform(t)
	dir := t.TempDir()
	specs := []sim.Spec{
		{ID: "fig-a", Zone: "tf-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 8}},
		{ID: "fig-b", Zone: "tf-a", Rack: "rack-2", GPUs: sim.GPUSpec{Model: "L4", Count: 8}},
		{ID: "fig-c", Zone: "tf-a", Rack: "rack-3", GPUs: sim.GPUSpec{Model: "L4", Count: 8}},
	}
	c, stop, err := startCloud("sqlite://"+filepath.Join(dir, "gpucloud.db"), dir, specs, false)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tn := c.newTenant(t)
	ctx := t.Context()
	// Over the default quota's 16 GPUs of a model.
	if _, err := c.admin.SetQuota(ctx, tn.ID, api.QuotaSpec{Instances: 64, GPUsPerModel: 32}); err != nil {
		t.Fatal(err)
	}

	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "terraform-provider-gpucloud"), "github.com/gpucloud/gpucloud/cmd/terraform-provider-gpucloud")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build the provider: %v\n%s", err, out)
	}
	rc := filepath.Join(t.TempDir(), "terraformrc")
	if err := os.WriteFile(rc, []byte(fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"gpucloud/gpucloud\" = %q\n  }\n  direct {}\n}\n", bin)), 0o600); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	config := tn.config(`
resource "gpucloud_instance" "node" {
  count    = 20
  name     = "node-${count.index}"
  offering = "l4.1x"
  command  = ["sleep", "3600"]
  timeouts {
    create = "5m"
    delete = "5m"
  }
}`)
	if err := os.WriteFile(filepath.Join(work, "main.tf"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	tf := func(args ...string) time.Duration {
		t.Helper()
		cmd := exec.Command(terraformBin, append([]string{"-chdir=" + work}, args...)...)
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("terraform %v: %v\n%s", args, err, out.String())
		}
		return time.Since(start)
	}
	running := func() int {
		page, err := tn.Client.ListInstances(ctx, client.ListInstancesOptions{States: []cloud.State{cloud.Running}, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Instances)
	}
	const template = `resources:
  node:
    type: instance
    count: 20
    properties:
      name: node-${count.index}
      offering: l4.1x
      command: [sleep, "3600"]
`
	stack := func(round int) (apply, destroy time.Duration) {
		t.Helper()
		name := fmt.Sprintf("twenty-%d", round)
		start := time.Now()
		if _, err := tn.Client.ApplyStack(ctx, name, api.ApplyStackRequest{Template: template}); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(5*time.Minute, func() bool {
			v, err := tn.Client.GetStack(ctx, "", name)
			return err == nil && v.State == cloud.StackActive && running() == 20
		}); err != nil {
			t.Fatalf("stack %s: %v", name, err)
		}
		apply = time.Since(start)
		start = time.Now()
		if _, err := tn.Client.DestroyStack(ctx, "", name); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(5*time.Minute, func() bool {
			// A destroyed stack may be gone from the list (not found).
			v, err := tn.Client.GetStack(ctx, "", name)
			return (err == nil && v.State == cloud.StackDestroyed || cloud.IsNotFound(err)) && running() == 0
		}); err != nil {
			v, gerr := tn.Client.GetStack(ctx, "", name)
			t.Fatalf("stack %s destroy: %v (stack %+v, %v; %d running)", name, err, v, gerr, running())
		}
		return apply, time.Since(start)
	}
	for round := 1; round <= 2; round++ {
		apply := tf("apply", "-auto-approve", "-no-color", "-parallelism=20")
		if n := running(); n != 20 {
			t.Fatalf("after terraform apply, %d instances run, want 20", n)
		}
		destroy := tf("destroy", "-auto-approve", "-no-color", "-parallelism=20")
		if n := running(); n != 0 {
			t.Fatalf("after terraform destroy, %d instances run", n)
		}
		sApply, sDestroy := stack(round)
		t.Logf("round %d: terraform apply %.2f s, destroy %.2f s; gpucloud stacks apply %.2f s, destroy %.2f s",
			round, apply.Seconds(), destroy.Seconds(), sApply.Seconds(), sDestroy.Seconds())
	}
}
