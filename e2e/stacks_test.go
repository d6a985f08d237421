package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/stack"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// e2eStack is a training stack on real agents: a cluster placement group,
// a checkpoint volume on the head, a public address, a head, and workers
// created once the head's private address is known, each printing its
// environment (the launcher variables the agent adds).
var e2eStack = `
parameters:
  workers: {type: integer, default: 2}
  driver: {type: integer, default: 550}
resources:
  pg: {type: placement_group, properties: {name: train, strategy: cluster}}
  ckpt: {type: volume, properties: {name: ckpt, size_gib: 100}}
  head:
    type: instance
    properties:
      name: head
      offering: h100.1x
      placement_group: ${pg.id}
      labels: ["driver>=${param.driver}"]
      volumes: ["${ckpt.id}"]
      command: ` + quotedCommand(envCommand) + `
  workers:
    type: instance
    count: ${param.workers}
    properties:
      name: worker-${count.index}
      offering: h100.1x
      placement_group: ${pg.id}
      labels: ["driver>=${param.driver}"]
      env: {HEAD_ADDR: "${head.private_address}"}
      command: ` + quotedCommand(envCommand) + `
  ip:
    type: address
    properties: {instance_id: "${head.id}"}
outputs:
  head: {value: "${head.private_address}"}
`

func quotedCommand(cmd []string) string {
	q := make([]string, len(cmd))
	for i, a := range cmd {
		q[i] = fmt.Sprintf("%q", a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TestStack runs a stack through a real server and agents, on SQLite and
// PostgreSQL: plan (cost, fit, and a driver pin no host meets), apply, the
// workers' launcher environment, a worker terminated out of band (drift,
// then the apply's repair), destroy, and the invoice that stops growing.
func TestStack(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testStack(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testStack(t, pgtest.URL(t)) })
}

func testStack(t *testing.T, db string) {
	specs := []sim.Spec{
		{ID: "sim-a", Zone: "zone-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "H100", Count: 8}},
		{ID: "sim-b", Zone: "zone-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "H100", Count: 8}},
	}
	c := startCluster(t, db, specs...)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	_, eve, _ := c.member("globex", "eve")
	req := api.StackRequest{Name: "train", Template: e2eStack}

	// Plan: six resources to create, priced, and fitting once the leader
	// has its fleet. A pin no host meets does not fit, with the reasons.
	var p *api.StackPlan
	// The leader's fleet copy follows the hosts' joins within a second.
	c.until("a plan that fits the fleet", func() (bool, string) {
		var err error
		if p, err = alice.PlanStack(ctx, req); err != nil {
			t.Fatal(err)
		}
		return p.Fit != nil && p.Fit.Known && p.Fit.Fits, fmt.Sprintf("%+v", p.Fit)
	})
	if p.Summary[stack.ActionCreate] != 6 || !p.Fit.Fits || p.Cost.OnDemand <= 0 || len(p.Fit.Lines) != 3 {
		t.Fatalf("plan: %v, fit %+v, cost %s", p.Summary, p.Fit, p.Cost.OnDemand)
	}
	pinned := req
	pinned.Parameters = map[string]string{"driver": "999"}
	np, err := alice.PlanStack(ctx, pinned)
	if err != nil || np.Fit == nil || np.Fit.Fits || !strings.Contains(np.Fit.Lines[0].Reason, "driver>=999") {
		t.Fatalf("plan with driver>=999: %+v, %v", np.Fit, err)
	}

	if _, err := alice.ApplyStack(ctx, "train", api.ApplyStackRequest{Template: e2eStack}); err != nil {
		t.Fatal(err)
	}
	v := waitStack(c, alice, "train", cloud.StackActive)
	ids := map[string]string{}
	for _, r := range v.Resources {
		ids[r.Address] = r.ID
	}
	head := c.waitState(alice, ids["head"], cloud.Running)
	if head.PrivateAddress == "" || v.Outputs["head"] != head.PrivateAddress {
		t.Fatalf("head address %q, outputs %v", head.PrivateAddress, v.Outputs)
	}
	for i := range 2 {
		id := ids[fmt.Sprintf("workers[%d]", i)]
		w := c.waitState(alice, id, cloud.Running)
		env := c.workloadEnv(alice, id, 1)
		if env["HEAD_ADDR"] != head.PrivateAddress || env["MASTER_ADDR"] != head.PrivateAddress ||
			env["NODE_RANK"] != fmt.Sprint(i+1) || env["WORLD_SIZE"] != "3" || w.HostID == "" {
			t.Errorf("worker %d on %s: env HEAD_ADDR=%q MASTER_ADDR=%q NODE_RANK=%q WORLD_SIZE=%q", i, w.HostID,
				env["HEAD_ADDR"], env["MASTER_ADDR"], env["NODE_RANK"], env["WORLD_SIZE"])
		}
		if w.Tags["gpucloud:stack"] != "train" {
			t.Errorf("worker %d tags %v", i, w.Tags)
		}
	}

	// Another tenant sees nothing of it.
	if _, err := eve.GetStack(ctx, "", "train"); cloud.ErrorCode(err) != cloud.NotFound {
		t.Errorf("globex reads acme's stack: %v", err)
	}
	if _, err := eve.DestroyStack(ctx, "", "train"); cloud.ErrorCode(err) != cloud.NotFound {
		t.Errorf("globex destroys acme's stack: %v", err)
	}

	// A worker terminated out of band: drift reports it, apply repairs it.
	victim := ids["workers[1]"]
	if _, err := alice.TerminateInstance(ctx, victim, 0); err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, victim, cloud.Terminated)
	d, err := alice.StackDrift(ctx, "", "train")
	if err != nil || d.InSync || len(d.Drift) != 1 || d.Drift[0].Address != "workers[1]" || d.Drift[0].Drift != "deleted" {
		t.Fatalf("drift = %+v, %v", d, err)
	}
	if _, err := alice.ApplyStack(ctx, "train", api.ApplyStackRequest{Template: e2eStack}); err != nil {
		t.Fatal(err)
	}
	v = waitStack(c, alice, "train", cloud.StackActive)
	for _, r := range v.Resources {
		if r.Address == "workers[1]" {
			if r.ID == victim {
				t.Fatalf("workers[1] is still %s", victim)
			}
			c.waitState(alice, r.ID, cloud.Running)
		}
	}
	if d, err := alice.StackDrift(ctx, "", "train"); err != nil || !d.InSync {
		t.Fatalf("drift after the repair = %+v, %v", d, err)
	}

	// Destroy: everything goes, and the invoice stops growing. The ledger
	// counts whole seconds: let the volume and the address live a few
	// first, so that the invoice has something of theirs to stop.
	time.Sleep(2 * time.Second)
	if _, err := alice.DestroyStack(ctx, "", "train"); err != nil {
		t.Fatal(err)
	}
	c.until("the stack to be destroyed", func() (bool, string) {
		sv, err := alice.GetStack(ctx, "", "train")
		if cloud.ErrorCode(err) == cloud.NotFound {
			return true, ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return false, string(sv.State) + " " + sv.Reason
	})
	for _, in := range c.instances(alice, client.ListInstancesOptions{}) {
		if in.State != cloud.Terminated {
			t.Errorf("instance %s (%s) is %s after destroy", in.ID, in.Name, in.State)
		}
	}
	quantities := func() map[billing.Category]int64 {
		invs, err := alice.Invoices(ctx, client.InvoicesOptions{Month: time.Now().UTC().Format("2006-01")})
		if err != nil || len(invs) != 1 {
			t.Fatalf("invoices: %v, %v", invs, err)
		}
		q := map[billing.Category]int64{}
		for _, l := range invs[0].Lines {
			q[l.Category] += l.Quantity
		}
		return q
	}
	before := quantities()
	if before[billing.CategoryVolume] == 0 || before[billing.CategoryAddress] == 0 {
		t.Errorf("the stack's volume and address were not billed: %v", before)
	}
	time.Sleep(2 * time.Second)
	if after := quantities(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the invoice still grows after destroy: %v -> %v", before, after)
	}
}

// waitStack waits until the stack is in state want, failing on failed.
func waitStack(c *cluster, cl *client.Client, name string, want cloud.StackState) *api.StackView {
	c.t.Helper()
	var v *api.StackView
	c.until("stack "+name+" to be "+string(want), func() (bool, string) {
		var err error
		if v, err = cl.GetStack(c.t.Context(), "", name); err != nil {
			c.t.Fatal(err)
		}
		if v.State == cloud.StackFailed && want != cloud.StackFailed {
			c.t.Fatalf("stack %s failed: %s", name, v.Reason)
		}
		return v.State == want, string(v.State) + " " + v.Reason
	})
	return v
}
