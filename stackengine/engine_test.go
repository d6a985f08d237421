package stackengine_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stack"
	"github.com/gpucloud/gpucloud/stackengine"
	"github.com/gpucloud/gpucloud/testkit"
)

// stackTemplate is a training stack: a cluster placement group, a
// checkpoint volume on the head, a head and `workers` workers that
// reference it, and a public address on the head.
const stackTemplate = `
description: a small training cluster
parameters:
  workers: {type: integer, default: 2, min: 0, max: 8}
resources:
  pg:
    type: placement_group
    properties: {name: train, strategy: cluster}
  ckpt:
    type: volume
    properties: {name: ckpt, size_gib: 10}
  head:
    type: instance
    properties:
      name: head
      offering: l4.1x
      placement_group: ${pg.id}
      volumes: ["${ckpt.id}"]
      command: [sleep, "600"]
  workers:
    type: instance
    count: ${param.workers}
    properties:
      name: worker-${count.index}
      offering: l4.1x
      placement_group: ${pg.id}
      env: {HEAD: "${head.id}"}
      command: [sleep, "600"]
  ip:
    type: address
    properties: {instance_id: "${head.id}"}
outputs:
  head_id: {value: "${head.id}"}
`

// planIsEmpty says whether a plan changes nothing.
func planIsEmpty(p *api.StackPlan) bool {
	for a, n := range p.Summary {
		if a != stack.ActionNone && n > 0 {
			return false
		}
	}
	return true
}

// runStack runs stack rounds until the stack is no longer applying or
// destroying, at most n rounds, and answers it.
func runStack(t *testing.T, svc *service.Services, a service.Actor, name string, n int) *api.StackView {
	t.Helper()
	ctx := context.Background()
	for range n {
		if _, err := stackengine.New(svc).Step(ctx); err != nil {
			t.Fatalf("step: %v", err)
		}
		v, err := svc.Stacks.Get(ctx, a, "", name)
		if cloud.ErrorCode(err) == cloud.NotFound {
			return nil // destroyed
		}
		if err != nil {
			t.Fatal(err)
		}
		if v.State != cloud.StackApplying && v.State != cloud.StackDestroying {
			return v
		}
	}
	v, _ := svc.Stacks.Get(ctx, a, "", name)
	t.Fatalf("stack %s still %s after %d rounds: %s", name, v.State, n, v.Reason)
	return nil
}

// stackInstances lists the tenant's instances that carry the stack's tag
// and are not terminated.
func stackInstances(t *testing.T, svc *service.Services, a service.Actor, name string) []*cloud.Instance {
	t.Helper()
	ins, _, err := svc.Instances.List(context.Background(), a, service.InstanceQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []*cloud.Instance
	for _, in := range ins {
		if in.Tags[service.TagStack] == name && in.State != cloud.Terminated {
			out = append(out, in)
		}
	}
	return out
}

func TestStackLifecycle(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		svc, ctx := f.svc, context.Background()
		req := api.StackRequest{Name: "train", Template: stackTemplate}

		p, err := svc.Stacks.Plan(ctx, f.acme, req)
		if err != nil {
			t.Fatal(err)
		}
		if p.Exists || p.Summary[stack.ActionCreate] != 6 || len(p.Changes) != 6 {
			t.Fatalf("plan of a new stack: %+v", p.Summary)
		}
		before := f.counts()
		if _, err := svc.Stacks.Plan(ctx, f.acme, req); err != nil || f.counts() != before {
			t.Fatalf("a plan wrote: %v", err)
		}

		sv, err := svc.Stacks.Apply(ctx, f.acme, req.Name, api.ApplyStackRequest{Template: req.Template, Parameters: req.Parameters})
		if err != nil || sv.State != cloud.StackApplying {
			t.Fatalf("apply = %+v, %v", sv, err)
		}
		v := runStack(t, svc, f.acme, "train", 10)
		if v.State != cloud.StackActive || len(v.Resources) != 6 {
			t.Fatalf("after apply: %s %q, %d resources", v.State, v.Reason, len(v.Resources))
		}
		ins := stackInstances(t, svc, f.acme, "train")
		if len(ins) != 3 {
			t.Fatalf("%d instances, want 3", len(ins))
		}
		var head *cloud.Instance
		ranks := map[string]bool{}
		for _, in := range ins {
			if in.Name == "head" {
				head = in
			}
			if in.Tags[service.TagStackJob] != "pg" || in.Tags[service.TagStackWorld] != "3" || in.PlacementGroupID == "" {
				t.Errorf("instance %s tags %v, group %q", in.Name, in.Tags, in.PlacementGroupID)
			}
			ranks[in.Tags[service.TagStackRank]] = true
		}
		if head == nil || head.Tags[service.TagStackRank] != "0" || len(ranks) != 3 || len(head.Volumes) != 1 {
			t.Fatalf("head %+v, ranks %v", head, ranks)
		}
		for _, in := range ins {
			if in.Name != "head" && in.Env["HEAD"] != head.ID {
				t.Errorf("%s has HEAD=%q, want %s", in.Name, in.Env["HEAD"], head.ID)
			}
		}
		if v.Outputs["head_id"] != head.ID {
			t.Errorf("outputs %v", v.Outputs)
		}
		vol, err := svc.Volumes.Get(ctx, f.acme, head.Volumes[0])
		if err != nil || vol.Tags[service.TagStack] != "train" {
			t.Errorf("volume %+v, %v: want the stack's tag", vol, err)
		}

		// Applying the same template again changes nothing.
		if p, err := svc.Stacks.Plan(ctx, f.acme, req); err != nil || !planIsEmpty(p) {
			t.Fatalf("plan of the applied template: %+v, %v", p, err)
		}

		// A worker terminated behind the stack's back: drift says so, the
		// next apply replaces it.
		var worker *cloud.Instance
		for _, in := range ins {
			if in.Name == "worker-1" {
				worker = in
			}
		}
		if _, err := svc.Instances.Act(ctx, f.acme, worker.ID, service.Terminate, 0); err != nil {
			t.Fatal(err)
		}
		d, err := svc.Stacks.Drift(ctx, f.acme, "", "train")
		if err != nil || len(d) != 1 || d[0].Address != "workers[1]" || d[0].Drift != "deleted" {
			t.Fatalf("drift = %+v, %v", d, err)
		}
		if _, err := svc.Stacks.Apply(ctx, f.acme, req.Name, api.ApplyStackRequest{Template: req.Template, Parameters: req.Parameters}); err != nil {
			t.Fatal(err)
		}
		runStack(t, svc, f.acme, "train", 10)
		if d, err := svc.Stacks.Drift(ctx, f.acme, "", "train"); err != nil || len(d) != 0 {
			t.Fatalf("drift after the repair = %+v, %v", d, err)
		}
		if ins := stackInstances(t, svc, f.acme, "train"); len(ins) != 3 {
			t.Fatalf("%d instances after the repair, want 3", len(ins))
		}

		// Another template: one worker fewer.
		req2 := req
		req2.Parameters = map[string]string{"workers": "1"}
		p, err = svc.Stacks.Plan(ctx, f.acme, req2)
		if err != nil || p.Summary[stack.ActionDelete] != 1 {
			t.Fatalf("plan to 1 worker: %+v, %v", p, err)
		}
		if _, err := svc.Stacks.Apply(ctx, f.acme, req2.Name, api.ApplyStackRequest{Template: req2.Template, Parameters: req2.Parameters}); err != nil {
			t.Fatal(err)
		}
		if v := runStack(t, svc, f.acme, "train", 10); v.State != cloud.StackActive || len(v.Resources) != 5 {
			t.Fatalf("after scaling in: %s %q %d", v.State, v.Reason, len(v.Resources))
		}
		if ins := stackInstances(t, svc, f.acme, "train"); len(ins) != 2 {
			t.Fatalf("%d instances, want 2", len(ins))
		}

		// Another tenant sees none of it.
		for _, err := range []error{
			func() error { _, err := svc.Stacks.Get(ctx, f.globex, "", "train"); return err }(),
			func() error { _, err := svc.Stacks.Destroy(ctx, f.globex, "", "train"); return err }(),
			func() error { _, err := svc.Stacks.Drift(ctx, f.globex, "", "train"); return err }(),
			func() error { _, err := svc.Stacks.Events(ctx, f.globex, "", "train", 0, 0); return err }(),
		} {
			hidden(t, err, "stack", "train")
		}
		if l, err := svc.Stacks.List(ctx, f.globex, ""); err != nil || len(l) != 0 {
			t.Errorf("globex lists %v, %v", l, err)
		}

		// Destroy: everything goes.
		if _, err := svc.Stacks.Destroy(ctx, f.acme, "", "train"); err != nil {
			t.Fatal(err)
		}
		if v := runStack(t, svc, f.acme, "train", 10); v != nil {
			t.Fatalf("after destroy: %s %q", v.State, v.Reason)
		}
		if ins := stackInstances(t, svc, f.acme, "train"); len(ins) != 0 {
			t.Errorf("%d instances left", len(ins))
		}
		vs, _ := svc.Volumes.List(ctx, f.acme, "")
		as, _ := svc.Addresses.List(ctx, f.acme, "", false)
		gs, _ := svc.Placement.List(ctx, f.acme, "")
		if len(vs)+len(as)+len(gs) != 0 {
			t.Errorf("left: %d volumes, %d addresses, %d placement groups", len(vs), len(as), len(gs))
		}
		// A destroyed stack's events stay readable by its name, every
		// deletion included, and by its own tenant only.
		evs, err := svc.Stacks.Events(ctx, f.acme, "", "train", 0, 0)
		if err != nil {
			t.Fatalf("events of a destroyed stack: %v", err)
		}
		var destroy []string
		for _, ev := range evs {
			if ev.Action == "delete" || ev.Action == "destroy" {
				destroy = append(destroy, cmp.Or(ev.Address, "stack")+" "+ev.Action+" "+ev.Outcome)
			}
		}
		for _, want := range []string{"stack destroy started", "pg delete succeeded", "ckpt delete succeeded",
			"ip delete succeeded", "head delete succeeded", "workers[0] delete succeeded", "stack destroy succeeded"} {
			if !slices.Contains(destroy, want) {
				t.Errorf("the destroy's events lack %q: %q", want, destroy)
			}
		}
		_, err = svc.Stacks.Events(ctx, f.globex, "", "train", 0, 0)
		hidden(t, err, "stack", "train")
		_, err = svc.Stacks.Events(ctx, f.acme, "", "nope", 0, 0)
		hidden(t, err, "stack", "nope")
	})
}

// TestStackRollback: a step that fails rolls back what the apply created,
// unless keep-on-failure.
func TestStackRollback(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		svc, ctx := f.svc, context.Background()
		// Two instances fit the tenant's quota; the third does not.
		if _, err := svc.Accounts.SetQuota(ctx, f.admin, f.acme.TenantID, api.QuotaSpec{Instances: 2}); err != nil {
			t.Fatal(err)
		}
		tmpl := `
resources:
  data: {type: volume, properties: {name: data, size_gib: 5}}
  nodes:
    type: instance
    count: 3
    depends_on: [data]
    properties: {offering: l4.1x}
`
		for _, keep := range []bool{false, true} {
			name := fmt.Sprintf("quota-%v", keep)
			if _, err := svc.Stacks.Apply(ctx, f.acme, name, api.ApplyStackRequest{Template: tmpl, KeepOnFailure: keep}); err != nil {
				t.Fatal(err)
			}
			v := runStack(t, svc, f.acme, name, 10)
			if v.State != cloud.StackFailed || !strings.Contains(v.Reason, "quota") {
				t.Fatalf("%s: %s %q, want failed on the quota", name, v.State, v.Reason)
			}
			ins := stackInstances(t, svc, f.acme, name)
			vs, _ := svc.Volumes.List(ctx, f.acme, "")
			if keep {
				if len(ins) != 2 || len(vs) != 1 || len(v.Resources) != 3 {
					t.Errorf("kept on failure: %d instances, %d volumes, %d resources", len(ins), len(vs), len(v.Resources))
				}
			} else if len(ins) != 0 || len(vs) != 0 || len(v.Resources) != 0 || !strings.Contains(v.Reason, "rolled back") {
				t.Errorf("rolled back: %d instances, %d volumes, %d resources, %q", len(ins), len(vs), len(v.Resources), v.Reason)
			}
		}
	})
}

// crashingStore fails every stack record write after the first `after`
// ones, as a server that dies after sending its creates and before
// recording them.
type crashingStore struct {
	cloud.Store
	writes, after atomic.Int64
}

type crashingTx struct {
	cloud.Tx
	s *crashingStore
}

var errCrash = errors.New("crash")

func (s *crashingStore) Tx(ctx context.Context, fn func(cloud.Tx) error) error {
	return s.Store.Tx(ctx, func(tx cloud.Tx) error { return fn(&crashingTx{Tx: tx, s: s}) })
}

func (t *crashingTx) UpdateStack(ctx context.Context, st *cloud.Stack) error {
	if n := t.s.writes.Add(1); n > t.s.after.Load() {
		return errCrash
	}
	return t.Tx.UpdateStack(ctx, st)
}

// TestStackCrashResumes: an apply cut short between its creates and their
// record resumes on the next round and creates nothing twice.
func TestStackCrashResumes(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		ctx := context.Background()
		crash := &crashingStore{Store: st}
		crash.after.Store(1 << 40)
		svc := service.New(crash, nil, service.Options{Now: f.clock.Now})
		req := api.StackRequest{Name: "train", Template: stackTemplate, Parameters: map[string]string{"workers": "4"}}
		if _, err := svc.Stacks.Apply(ctx, f.acme, req.Name, api.ApplyStackRequest{Template: req.Template, Parameters: req.Parameters}); err != nil {
			t.Fatal(err)
		}
		// Each round writes intents, then results: let the first intents
		// through and fail everything after, for a few rounds.
		for round := range 3 {
			crash.writes.Store(0)
			crash.after.Store(int64(round + 1))
			if _, err := stackengine.New(svc).Step(ctx); !errors.Is(err, errCrash) {
				t.Fatalf("round %d: %v, want the crash", round, err)
			}
		}
		crash.after.Store(1 << 40)
		v := runStack(t, svc, f.acme, "train", 10)
		if v.State != cloud.StackActive {
			t.Fatalf("after the crashes: %s %q", v.State, v.Reason)
		}
		ins := stackInstances(t, svc, f.acme, "train")
		if len(ins) != 5 {
			t.Fatalf("%d instances, want 5 (head and 4 workers)", len(ins))
		}
		names := []string{}
		for _, in := range ins {
			names = append(names, in.Name)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"head", "worker-0", "worker-1", "worker-2", "worker-3"}) {
			t.Errorf("instances %v", names)
		}
		vs, _ := svc.Volumes.List(ctx, f.acme, "")
		gs, _ := svc.Placement.List(ctx, f.acme, "")
		if len(vs) != 1 || len(gs) != 1 {
			t.Errorf("%d volumes, %d placement groups; want one of each", len(vs), len(gs))
		}
	})
}

// TestStackBlueprintsPlan: every built-in blueprint plans with its
// defaults against the real create bodies (a property the API does not
// take fails the plan), and applies: its resources are created.
func TestStackBlueprintsPlan(t *testing.T) {
	st := testkit.Backends()[0].Open(t)
	f := newFixture(t, st)
	ctx := context.Background()
	for _, bp := range stack.Blueprints() {
		src, err := stack.Blueprint(bp.Name)
		if err != nil {
			t.Fatal(err)
		}
		p, err := f.svc.Stacks.Plan(ctx, f.acme, api.StackRequest{Name: bp.Name, Template: string(src)})
		if err != nil {
			t.Errorf("blueprint %s: %v", bp.Name, err)
			continue
		}
		if p.Summary[stack.ActionCreate] == 0 || len(p.Cost.Lines) == 0 {
			t.Errorf("blueprint %s plans %v, cost %+v", bp.Name, p.Summary, p.Cost)
		}
	}
}

// TestStackProperty: applying a random template T1, then T2, leaves
// exactly T2's resources; applying T2 again plans nothing; destroying
// leaves nothing.
func TestStackProperty(t *testing.T) {
	st := testkit.Backends()[0].Open(t)
	f := newFixture(t, st)
	svc, ctx := f.svc, context.Background()
	gen := func(seed int) (string, int) {
		workers, vol, names := seed%4, seed%3 != 0, seed%2 == 0
		var b strings.Builder
		b.WriteString("resources:\n")
		n := workers
		if vol {
			b.WriteString("  data: {type: volume, properties: {name: data, size_gib: 5}}\n")
		}
		name := "w"
		if names {
			name = "x"
		}
		// Some templates put the nodes on a network of their own, with a
		// group whose rules vary.
		place := ""
		if seed%3 != 1 {
			fmt.Fprintf(&b, "  net: {type: network, properties: {name: n%d, cidr: 10.%d.0.0/16}}\n", seed%2, seed%2)
			fmt.Fprintf(&b, "  sub: {type: subnet, properties: {network: \"${net.id}\", name: s, cidr: 10.%d.0.0/24, zone: z}}\n", seed%2)
			fmt.Fprintf(&b, "  sg: {type: security_group, properties: {network: \"${net.id}\", name: g, ingress: [{protocol: tcp, from_port: %d, to_port: %d, group: self}]}}\n",
				22+seed%4, 22+seed%4)
			place = `, subnet: "${sub.id}", security_groups: ["${sg.id}"]`
		}
		fmt.Fprintf(&b, "  nodes:\n    type: instance\n    count: %d\n    properties: {name: \"%s-${count.index}\", offering: l4.1x%s}\n", workers, name, place)
		if seed%5 == 0 {
			b.WriteString("  solo: {type: instance, properties: {offering: l4.2x}}\n")
			n++
		}
		return b.String(), n
	}
	for i := range 6 {
		t1, _ := gen(i*7 + 1)
		t2, want := gen(i*5 + 2)
		name := fmt.Sprintf("prop-%d", i)
		for _, tmpl := range []string{t1, t2} {
			if _, err := svc.Stacks.Apply(ctx, f.acme, name, api.ApplyStackRequest{Template: tmpl}); err != nil {
				t.Fatal(err)
			}
			if v := runStack(t, svc, f.acme, name, 10); v.State != cloud.StackActive {
				t.Fatalf("%s: %s %q", name, v.State, v.Reason)
			}
		}
		if got := len(stackInstances(t, svc, f.acme, name)); got != want {
			t.Errorf("%s: %d instances after T1 then T2, want %d\nT1:\n%s\nT2:\n%s", name, got, want, t1, t2)
		}
		if p, err := svc.Stacks.Plan(ctx, f.acme, api.StackRequest{Name: name, Template: t2}); err != nil || !planIsEmpty(p) {
			t.Errorf("%s: applying T2 again plans %v, %v", name, p.Summary, err)
		}
		if _, err := svc.Stacks.Destroy(ctx, f.acme, "", name); err != nil {
			t.Fatal(err)
		}
		runStack(t, svc, f.acme, name, 10)
		if got := len(stackInstances(t, svc, f.acme, name)); got != 0 {
			t.Errorf("%s: %d instances after destroy", name, got)
		}
	}
	if vs, _ := svc.Volumes.List(ctx, f.acme, ""); len(vs) != 0 {
		t.Errorf("%d volumes left", len(vs))
	}
	ns, _ := svc.Networks.ListNetworks(ctx, f.acme, "")
	subs, _ := svc.Networks.ListSubnets(ctx, f.acme, "", "")
	gs, _ := svc.Networks.ListSecurityGroups(ctx, f.acme, "", "")
	for _, n := range ns {
		if !n.Default {
			t.Errorf("network %s (%s) left", n.ID, n.Name)
		}
	}
	for _, sub := range subs {
		if !sub.Default {
			t.Errorf("subnet %s (%s) left", sub.ID, sub.Name)
		}
	}
	for _, g := range gs {
		if !g.Default {
			t.Errorf("security group %s (%s) left", g.ID, g.Name)
		}
	}
}

// TestStackForeignReferences: a template that names another tenant's
// volume, placement group or instance by ID gets nothing of them: the
// apply fails as for a missing one, rolls back, and the other tenant's
// resources are as they were.
func TestStackForeignReferences(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		svc, ctx := f.svc, context.Background()
		vol, _, err := svc.Volumes.Create(ctx, f.globex, api.CreateVolumeRequest{Name: "secret", SizeGiB: 5}, "")
		if err != nil {
			t.Fatal(err)
		}
		pg, _, err := svc.Placement.Create(ctx, f.globex, api.CreatePlacementGroupRequest{Name: "g", Strategy: cloud.PlacementSpread}, "")
		if err != nil {
			t.Fatal(err)
		}
		in := f.instance(f.globex)
		for i, props := range []string{
			`{offering: l4.1x, volumes: ["` + vol.ID + `"]}`,
			`{offering: l4.1x, placement_group: "` + pg.ID + `"}`,
		} {
			name := fmt.Sprintf("steal-%d", i)
			tmpl := "resources:\n  a: {type: instance, properties: " + props + "}\n"
			if _, err := svc.Stacks.Apply(ctx, f.acme, name, api.ApplyStackRequest{Template: tmpl}); err != nil {
				t.Fatal(err)
			}
			v := runStack(t, svc, f.acme, name, 10)
			if v.State != cloud.StackFailed || !strings.Contains(v.Reason, "not found") {
				t.Errorf("%s: %s %q, want failed as for a missing resource", name, v.State, v.Reason)
			}
		}
		tmpl := "resources:\n  ip: {type: address, properties: {instance_id: \"" + in.ID + "\"}}\n"
		if _, err := svc.Stacks.Apply(ctx, f.acme, "steal-ip", api.ApplyStackRequest{Template: tmpl}); err != nil {
			t.Fatal(err)
		}
		if v := runStack(t, svc, f.acme, "steal-ip", 10); v.State != cloud.StackFailed {
			t.Errorf("an address on another tenant's instance: %s %q", v.State, v.Reason)
		}
		if got, err := svc.Volumes.Get(ctx, f.globex, vol.ID); err != nil || got.InstanceID != "" || got.DeletedAt != nil {
			t.Errorf("globex's volume after acme's tries: %+v, %v", got, err)
		}
		if as, _ := svc.Addresses.List(ctx, f.globex, "", false); len(as) != 0 {
			t.Errorf("globex's instance got addresses: %v", as)
		}
		if ins := stackInstances(t, svc, f.acme, "steal-0"); len(ins) != 0 {
			t.Errorf("acme kept %d instances of a failed, rolled-back stack", len(ins))
		}
	})
}
