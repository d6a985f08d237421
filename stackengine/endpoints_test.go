package stackengine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stack"
	"github.com/gpucloud/gpucloud/stackengine"
	"github.com/gpucloud/gpucloud/testkit"
)

// epTemplate is a queue-mode endpoint at min 0 (no worker) and an
// instance that names it.
const epTemplate = `
parameters:
  name: {type: string, default: echo}
  image: {type: string, default: "busybox:1"}
  max: {type: integer, default: 2}
  mode: {type: string, default: queue}
resources:
  ep:
    type: endpoint
    properties:
      name: ${param.name}
      image: ${param.image}
      offerings: [l4.1x]
      command: [/usr/local/bin/echoworker]
      env: {GREETING: hi}
      mode: ${param.mode}
      max: ${param.max}
      retries: 1
  caller:
    type: instance
    properties: {offering: l4.1x, env: {ENDPOINT: "${ep.name}"}}
outputs:
  endpoint: ${ep.id}
`

// TestStackEndpoint: an apply creates the endpoint (through
// service.Endpoints.Create, with the stack's idempotency key) before the
// instance that names it; max changes in place (the same endpoint,
// generation 1), so does the image (generation 2); max changed outside
// the stack is drift that the next apply sets back; a new mode under the
// same name is refused, with a new name it replaces the endpoint; bad
// input fails the plan naming the property; another tenant sees nothing;
// a destroy deletes it.
func TestStackEndpoint(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		svc, ctx := f.svc, context.Background()
		apply := func(params map[string]string) *api.StackView {
			t.Helper()
			if _, err := svc.Stacks.Apply(ctx, f.acme, "serve", api.ApplyStackRequest{Template: epTemplate, Parameters: params}); err != nil {
				t.Fatal(err)
			}
			return runStack(t, svc, f.acme, "serve", 10)
		}
		plan := func(params map[string]string) (*api.StackPlan, error) {
			return svc.Stacks.Plan(ctx, f.acme, api.StackRequest{Name: "serve", Template: epTemplate, Parameters: params})
		}
		endpoint := func(ref string) *cloud.Endpoint {
			t.Helper()
			e, err := svc.Endpoints.Get(ctx, f.acme, ref)
			if err != nil {
				t.Fatalf("endpoint %s: %v", ref, err)
			}
			return e
		}
		p, err := plan(nil)
		if err != nil || p.Summary[stack.ActionCreate] != 2 {
			t.Fatalf("plan: %+v, %v", p, err)
		}
		if !slices.ContainsFunc(p.Cost.Lines, func(l api.StackCostLine) bool {
			return l.Address == "ep" && l.OnDemand == 0 && strings.Contains(l.What, "endpoint: 0 × l4.1x")
		}) {
			t.Errorf("cost lines %+v", p.Cost.Lines)
		}
		v := apply(nil)
		if v.State != cloud.StackActive || len(v.Resources) != 2 {
			t.Fatalf("apply: %s %q, %d resources", v.State, v.Reason, len(v.Resources))
		}
		e := endpoint("echo")
		if v.Outputs["endpoint"] != e.ID || e.Spec.Image != "docker.io/library/busybox:1" || e.Spec.Max != 2 || e.Spec.Retries != 1 ||
			e.Spec.Mode != cloud.EndpointQueue || e.Status.Generation != 1 || !strings.HasPrefix(e.IdempotencyKey, "stack-") {
			t.Fatalf("endpoint %+v (key %q), outputs %v", e, e.IdempotencyKey, v.Outputs)
		}
		ins := stackInstances(t, svc, f.acme, "serve")
		if len(ins) != 1 || ins[0].Env["ENDPOINT"] != "echo" {
			t.Fatalf("caller %+v", ins)
		}
		for _, r := range v.Resources {
			if r.Address == "ep" && (r.ID != e.ID || !strings.HasPrefix(r.Status, "active, queue mode, 0 of 0..2 workers")) {
				t.Errorf("ep in the stack: %+v", r)
			}
		}
		if p, err := plan(nil); err != nil || !planIsEmpty(p) {
			t.Fatalf("plan of the applied template: %+v, %v", p, err)
		}

		// max in place.
		args := map[string]string{"max": "4"}
		if p, err := plan(args); err != nil || p.Summary[stack.ActionUpdate] != 1 || p.Summary[stack.ActionReplace] != 0 {
			t.Fatalf("plan of another max: %+v, %v", p, err)
		}
		if v := apply(args); v.State != cloud.StackActive {
			t.Fatalf("apply another max: %s %q", v.State, v.Reason)
		}
		if e2 := endpoint(e.ID); e2.State != cloud.EndpointActive || e2.Spec.Max != 4 || e2.Status.Generation != 1 || len(e2.Spec.Command) != 1 {
			t.Fatalf("after max 4: %+v", e2)
		}

		// A new image in place: generation 2.
		args["image"] = "busybox:1.36"
		if p, err := plan(args); err != nil || p.Summary[stack.ActionUpdate] != 1 || p.Summary[stack.ActionReplace] != 0 {
			t.Fatalf("plan of another image: %+v, %v", p, err)
		}
		if v := apply(args); v.State != cloud.StackActive {
			t.Fatalf("apply another image: %s %q", v.State, v.Reason)
		}
		if e2 := endpoint(e.ID); e2.Spec.Image != "docker.io/library/busybox:1.36" || e2.Status.Generation != 2 || e2.Spec.Max != 4 {
			t.Fatalf("after the new image: %+v", e2)
		}

		// max changed outside the stack: drift, set back by the next apply.
		if _, err := svc.Endpoints.Update(ctx, f.acme, e.ID, api.UpdateEndpointRequest{Max: new(7)}, 0); err != nil {
			t.Fatal(err)
		}
		d, err := svc.Stacks.Drift(ctx, f.acme, "", "serve")
		if err != nil || len(d) != 1 || d[0].Address != "ep" || d[0].Diffs[0].Path != "properties.max" {
			t.Fatalf("drift = %+v, %v", d, err)
		}
		if v := apply(args); v.State != cloud.StackActive {
			t.Fatalf("repair: %s %q", v.State, v.Reason)
		}
		if e2 := endpoint(e.ID); e2.Spec.Max != 4 || e2.Status.Generation != 2 {
			t.Fatalf("after the repair: %+v", e2)
		}

		// Bad input fails the plan, naming the property.
		if _, err := plan(map[string]string{"max": "200"}); cloud.ErrorCode(err) != cloud.Invalid || !strings.Contains(err.Error(), "resources.ep.properties.max") {
			t.Fatalf("plan of max 200: %v", err)
		}

		// Another mode replaces it: refused under the same name.
		args["mode"] = "http"
		if _, err := plan(args); err == nil || !strings.Contains(err.Error(), "change its name too") {
			t.Fatalf("plan of another mode, same name: %v", err)
		}
		args["name"] = "web"
		if p, err := plan(args); err != nil || p.Summary[stack.ActionReplace] != 2 {
			t.Fatalf("plan of another mode and name: %+v, %v", p, err)
		}
		if v := apply(args); v.State != cloud.StackActive {
			t.Fatalf("apply another mode: %s %q", v.State, v.Reason)
		}
		web := endpoint("web")
		if web.ID == e.ID || web.Spec.Mode != cloud.EndpointHTTP {
			t.Fatalf("web: %+v", web)
		}
		if old := endpoint(e.ID); old.State == cloud.EndpointActive {
			t.Errorf("the replaced endpoint is %s", old.State)
		}

		// Another tenant sees none of it.
		_, err = svc.Endpoints.Get(ctx, f.globex, web.ID)
		hidden(t, err, "endpoint", web.ID)

		// Destroy: the endpoint is deleting (its controller, which these
		// tests do not run, ends its workers and marks it deleted).
		if _, err := svc.Stacks.Destroy(ctx, f.acme, "", "serve"); err != nil {
			t.Fatal(err)
		}
		if v := runStack(t, svc, f.acme, "serve", 10); v != nil {
			t.Fatalf("after destroy: %s %q", v.State, v.Reason)
		}
		es, err := svc.Endpoints.List(ctx, f.acme, "", false)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range es {
			if x.State == cloud.EndpointActive {
				t.Errorf("endpoint %s %s is active after destroy", x.ID, x.Name)
			}
		}
	})
}

// TestStackEndpointCrashResumes: an apply cut short after the endpoint's
// intent was written resumes with the same idempotency key, so one
// endpoint is made, not two.
func TestStackEndpointCrashResumes(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		ctx := context.Background()
		crash := &crashingStore{Store: st}
		crash.after.Store(1 << 40)
		svc := service.New(crash, nil, service.Options{Now: f.clock.Now})
		if _, err := svc.Stacks.Apply(ctx, f.acme, "serve", api.ApplyStackRequest{Template: epTemplate}); err != nil {
			t.Fatal(err)
		}
		// Each round writes intents, then results: let the first
		// writes through and fail the rest, for two rounds.
		for round := range 2 {
			crash.writes.Store(0)
			crash.after.Store(int64(round + 1))
			if _, err := stackengine.New(svc).Step(ctx); !errors.Is(err, errCrash) {
				t.Fatalf("round %d: %v, want the crash", round, err)
			}
		}
		crash.after.Store(1 << 40)
		if v := runStack(t, svc, f.acme, "serve", 10); v.State != cloud.StackActive {
			t.Fatalf("after the crashes: %s %q", v.State, v.Reason)
		}
		es, err := svc.Endpoints.List(ctx, f.acme, "", true)
		if err != nil || len(es) != 1 {
			t.Fatalf("endpoints %+v, %v; want one", es, err)
		}
	})
}

// epVolumesTemplate is an endpoint with a warm pool that mounts the
// stack's shared volumes (VOLUMES is its volumes property), beside a
// block volume.
const epVolumesTemplate = `
parameters:
  warm: {type: integer, default: 1}
resources:
  data:
    type: volume
    properties: {name: data, size_gib: 10, kind: shared}
  more:
    type: volume
    properties: {name: more, size_gib: 10, kind: shared}
  disk:
    type: volume
    properties: {name: disk, size_gib: 10}
  ep:
    type: endpoint
    properties:
      name: pool
      image: "busybox:1"
      offerings: [l4.1x]
      max: 3
      warm: ${param.warm}
      volumes: VOLUMES
`

// TestStackEndpointVolumes: an endpoint mounts the stack's shared volume
// by its ${data.id} and keeps a warm pool; the warm pool changes in
// place (the same generation), so do the volumes (the workers roll over:
// a new generation), to none as well; a block volume fails the apply,
// naming the property and why, and leaves the endpoint as it was.
func TestStackEndpointVolumes(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		svc, ctx := f.svc, context.Background()
		// Shared volumes need a host with the shared filesystem.
		hostID := service.NewID("h-")
		spec := fleet.MockHost(hostID, "L4", 1)
		spec.Labels = map[string]string{service.LabelSharedVolumes: "true"}
		h := &cloud.Host{ID: hostID, State: fleet.Schedulable, Spec: *spec, LastHeartbeat: f.clock.Now()}
		if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.PutHost(ctx, h) }); err != nil {
			t.Fatal(err)
		}
		tmpl := func(volumes string) string { return strings.Replace(epVolumesTemplate, "VOLUMES", volumes, 1) }
		apply := func(volumes string, params map[string]string) *api.StackView {
			t.Helper()
			if _, err := svc.Stacks.Apply(ctx, f.acme, "pool", api.ApplyStackRequest{Template: tmpl(volumes), Parameters: params}); err != nil {
				t.Fatal(err)
			}
			return runStack(t, svc, f.acme, "pool", 10)
		}
		plan := func(volumes string, params map[string]string) *api.StackPlan {
			t.Helper()
			p, err := svc.Stacks.Plan(ctx, f.acme, api.StackRequest{Name: "pool", Template: tmpl(volumes), Parameters: params})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		idOf := func(v *api.StackView, addr string) string {
			for _, r := range v.Resources {
				if r.Address == addr {
					return r.ID
				}
			}
			t.Fatalf("no %s in the stack", addr)
			return ""
		}
		check := func(what string, warm int, gen int64, vols ...string) *cloud.Endpoint {
			t.Helper()
			e, err := svc.Endpoints.Get(ctx, f.acme, "pool")
			if err != nil || e.Spec.Warm != warm || e.Status.Generation != gen || !slices.Equal(e.Spec.Volumes, vols) {
				t.Fatalf("%s: %+v (%v); want warm %d, generation %d, volumes %v", what, e, err, warm, gen, vols)
			}
			return e
		}

		v := apply(`["${data.id}"]`, nil)
		if v.State != cloud.StackActive {
			t.Fatalf("apply: %s %q", v.State, v.Reason)
		}
		data, more := idOf(v, "data"), idOf(v, "more")
		e := check("created", 1, 1, data)
		if p := plan(`["${data.id}"]`, nil); !planIsEmpty(p) {
			t.Fatalf("plan of the applied template: %+v", p)
		}
		for _, step := range []struct {
			name, volumes string
			params        map[string]string
			warm          int
			gen           int64
			vols          []string
		}{
			{"warm 2", `["${data.id}"]`, map[string]string{"warm": "2"}, 2, 1, []string{data}},
			{"another volume", `["${data.id}", "${more.id}"]`, map[string]string{"warm": "2"}, 2, 2, []string{data, more}},
			{"no volume, no warm pool", `[]`, map[string]string{"warm": "0"}, 0, 3, nil},
		} {
			if p := plan(step.volumes, step.params); p.Summary[stack.ActionUpdate] != 1 || p.Summary[stack.ActionReplace] != 0 || p.Summary[stack.ActionCreate] != 0 {
				t.Fatalf("%s: plan %+v", step.name, p.Summary)
			}
			if v := apply(step.volumes, step.params); v.State != cloud.StackActive {
				t.Fatalf("%s: apply: %s %q", step.name, v.State, v.Reason)
			}
			if got := check(step.name, step.warm, step.gen, step.vols...); got.ID != e.ID {
				t.Fatalf("%s: endpoint %s, want %s (in place)", step.name, got.ID, e.ID)
			}
			if p := plan(step.volumes, step.params); !planIsEmpty(p) {
				t.Fatalf("%s: plan after the apply: %+v", step.name, p)
			}
		}

		// A block volume: the apply fails naming the property and why;
		// the endpoint stays as it was.
		v = apply(`["${disk.id}"]`, map[string]string{"warm": "0"})
		if v.State != cloud.StackFailed || !strings.Contains(v.Reason, "volumes[0]") || !strings.Contains(v.Reason, "block volume") {
			t.Fatalf("a block volume: %s %q", v.State, v.Reason)
		}
		check("after the block volume", 0, 3)

		// Another tenant sees none of it.
		_, err := svc.Endpoints.Get(ctx, f.globex, e.ID)
		hidden(t, err, "endpoint", e.ID)
	})
}
