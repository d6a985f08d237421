package stack

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fakeCloud applies plans to a state, as the stack service would, with
// IDs from a counter.
type fakeCloud struct{ next int }

// apply applies a plan to a copy of prior and returns the new state.
func (f *fakeCloud) apply(t testing.TB, b *Bound, prior *State, plan *PlanResult) *State {
	t.Helper()
	st := &State{Parameters: b.Parameters, Resources: map[string]*ResourceState{}}
	if prior != nil {
		for a, r := range prior.Resources {
			cp := *r
			st.Resources[a] = &cp
		}
	}
	for _, ch := range plan.Changes {
		switch ch.Action {
		case ActionDelete, ActionRetain:
			delete(st.Resources, ch.Address)
			continue
		case ActionNone, ActionStart:
			st.Resources[ch.Address].DeletionPolicy = ch.DeletionPolicy
			continue
		}
		props, err := b.Resolve(ch.Address, st.Attrs())
		if err != nil {
			t.Fatalf("apply %s: %v", ch.Address, err)
		}
		rs := st.Resources[ch.Address]
		if ch.Action != ActionUpdate {
			f.next++
			id := fmt.Sprintf("id-%d", f.next)
			rs = &ResourceState{ID: id, Attributes: map[string]any{}}
			for _, a := range Types[ch.Type].Attributes {
				rs.Attributes[a] = id + "." + a
			}
			rs.Attributes["size_gib"] = 10
		}
		rs.Type, rs.Properties, rs.DependsOn, rs.DeletionPolicy = ch.Type, props, ch.DependsOn, ch.DeletionPolicy
		st.Resources[ch.Address] = rs
	}
	// The service stores the state as JSON.
	js, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	return &back
}

// bindSrc parses and binds a template with args.
func bindSrc(t testing.TB, src string, args map[string]string) *Bound {
	t.Helper()
	b, err := mustParse(t, src).Bind(args)
	if err != nil {
		t.Fatalf("Bind: %v", err)
	}
	return b
}

// planOf plans or fails.
func planOf(t testing.TB, b *Bound, prior *State, live map[string]Live) *PlanResult {
	t.Helper()
	p, err := Plan(b, prior, live)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	return p
}

// actions writes a plan as "addr:action" words.
func actions(p *PlanResult) string {
	var w []string
	for _, c := range p.Changes {
		w = append(w, c.Address+":"+string(c.Action))
	}
	return strings.Join(w, " ")
}

const planBase = `
parameters:
  offering: {type: string, default: h100.1x}
  workers: {type: integer, default: 2}
  desired: {type: integer, default: 1}
  vol_policy: {type: string, default: delete}
resources:
  vol:
    type: volume
    properties: {name: data, size_gib: 100}
  head:
    type: instance
    properties:
      offering: ${param.offering}
      volumes: ["${vol.id}"]
      env: {A: "1"}
  workers:
    type: instance
    count: ${param.workers}
    properties:
      offering: h100.1x
      env: {HEAD: "${head.private_address}"}
  grp:
    type: group
    properties:
      name: g
      min: 0
      max: 4
      desired: ${param.desired}
      template: {offerings: [l4.1x]}
`

func TestPlan(t *testing.T) {
	cloud := &fakeCloud{}
	b0 := bindSrc(t, planBase, nil)
	p0 := planOf(t, b0, nil, nil)
	if got := actions(p0); got != "vol:create grp:create head:create workers[0]:create workers[1]:create" {
		t.Fatalf("first plan: %s", got)
	}
	if p0.Summary[ActionCreate] != 5 || p0.Empty() {
		t.Errorf("summary %v", p0.Summary)
	}
	if p0.Changes[2].Properties["volumes"].([]any)[0] != Unknown {
		t.Errorf("head's volume should be unknown before apply: %v", p0.Changes[2].Properties)
	}
	s0 := cloud.apply(t, b0, nil, p0)

	tests := []struct {
		name   string
		src    string
		args   map[string]string
		live   map[string]Live
		want   string
		reason map[string]string // address -> reason fragment
	}{
		{name: "same", want: "vol:none grp:none head:none workers[0]:none workers[1]:none"},
		{name: "update group in place", args: map[string]string{"desired": "3"},
			want:   "vol:none grp:update head:none workers[0]:none workers[1]:none",
			reason: map[string]string{"grp": "properties.desired changed: 1 -> 3 (updates in place)"}},
		{name: "replace propagates", args: map[string]string{"offering": "h100.8x"},
			want: "vol:none grp:none head:replace workers[0]:replace workers[1]:replace",
			reason: map[string]string{
				"head":       "properties.offering changed: h100.1x -> h100.8x (cannot change in place)",
				"workers[1]": "properties.env.HEAD refers to head, which is being replaced (cannot change in place)",
			}},
		{name: "scale in deletes", args: map[string]string{"workers": "1"},
			want:   "vol:none grp:none head:none workers[0]:none workers[1]:delete",
			reason: map[string]string{"workers[1]": "removed from the template"}},
		{name: "scale out creates", args: map[string]string{"workers": "3"},
			want: "vol:none grp:none head:none workers[0]:none workers[1]:none workers[2]:create"},
		{name: "terminated outside", live: map[string]Live{"workers[0]": {Gone: true}},
			want:   "vol:none grp:none head:none workers[0]:replace workers[1]:none",
			reason: map[string]string{"workers[0]": "terminated outside the stack"}},
		{name: "volume deleted outside", live: map[string]Live{"vol": {Gone: true}},
			want:   "vol:replace grp:none head:replace workers[0]:replace workers[1]:replace",
			reason: map[string]string{"vol": "deleted outside the stack", "head": "properties.volumes refers to vol, which is being replaced"}},
		{name: "stopped outside", live: map[string]Live{"head": {Stopped: true}},
			want:   "vol:none grp:none head:start workers[0]:none workers[1]:none",
			reason: map[string]string{"head": "stopped outside the stack"}},
		{name: "group drift repaired", live: map[string]Live{"grp": {Changed: []FieldDiff{{Path: "properties.desired", Old: 1, New: 4}}}},
			want:   "vol:none grp:update head:none workers[0]:none workers[1]:none",
			reason: map[string]string{"grp": "properties.desired changed outside the stack: 4 (the template says 1) (updates in place)"}},
		{name: "drift matching the template", args: map[string]string{"desired": "4"},
			live: map[string]Live{"grp": {Changed: []FieldDiff{{Path: "properties.desired", Old: 1, New: 4}}}},
			want: "vol:none grp:update head:none workers[0]:none workers[1]:none"},
		{name: "numbers compare by value", src: strings.Replace(planBase, "  vol:\n    type: volume\n    properties: {name: data, size_gib: 100}", "  vol:\n    type: volume\n    properties: {name: data, size_gib: 100.0}", 1),
			want: "vol:none grp:none head:none workers[0]:none workers[1]:none"},
		{name: "group name replaces", src: strings.Replace(planBase, "name: g\n", "name: g2\n", 1),
			want:   "vol:none grp:replace head:none workers[0]:none workers[1]:none",
			reason: map[string]string{"grp": "properties.name changed: g -> g2 (cannot change in place)"}},
		{name: "removed resources", src: "resources:\n  vol:\n    type: volume\n    properties: {name: data, size_gib: 100}\n",
			want: "vol:none workers[0]:delete workers[1]:delete grp:delete head:delete"},
		{name: "nested map change", src: strings.Replace(planBase, `env: {A: "1"}`, `env: {A: "2", B: "x"}`, 1),
			want:   "vol:none grp:none head:replace workers[0]:replace workers[1]:replace",
			reason: map[string]string{"head": "properties.env.A changed: 1 -> 2 (cannot change in place); 1 more difference"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			if src == "" {
				src = planBase
			}
			b := bindSrc(t, src, tt.args)
			p := planOf(t, b, s0, tt.live)
			if got := actions(p); got != tt.want {
				t.Errorf("plan:\n got %s\nwant %s", got, tt.want)
			}
			for addr, frag := range tt.reason {
				found := false
				for _, c := range p.Changes {
					if c.Address == addr {
						found = true
						if !strings.Contains(c.Reason, frag) {
							t.Errorf("%s: reason %q, want %q", addr, c.Reason, frag)
						}
					}
				}
				if !found {
					t.Errorf("no change for %s", addr)
				}
			}
			if tt.name == "same" && !p.Empty() {
				t.Error("same template: plan not empty")
			}
			next := cloud.apply(t, b, s0, p)
			if again := planOf(t, b, next, nil); !again.Empty() {
				t.Errorf("after apply, the plan is not empty: %s", actions(again))
			}
		})
	}
}

func TestPlanTypeChange(t *testing.T) {
	cloud := &fakeCloud{}
	b := bindSrc(t, "resources:\n  x: {type: volume}\n", nil)
	s := cloud.apply(t, b, nil, planOf(t, b, nil, nil))
	b2 := bindSrc(t, "resources:\n  x: {type: address}\n", nil)
	p := planOf(t, b2, s, nil)
	if actions(p) != "x:replace" || p.Changes[0].Reason != "type changed: volume -> address" {
		t.Errorf("plan %s: %q", actions(p), p.Changes[0].Reason)
	}
}

func TestPlanRetain(t *testing.T) {
	cloud := &fakeCloud{}
	src := "resources:\n  keep: {type: volume, deletion_policy: retain}\n  drop: {type: volume}\n"
	b := bindSrc(t, src, nil)
	s := cloud.apply(t, b, nil, planOf(t, b, nil, nil))
	b2 := bindSrc(t, "resources: {}\n", nil)
	p := planOf(t, b2, s, nil)
	if actions(p) != "drop:delete keep:retain" || p.Summary[ActionRetain] != 1 || p.Summary[ActionDelete] != 1 {
		t.Errorf("removal: %s %v", actions(p), p.Summary)
	}
	// Changing only the policy is recorded, not empty.
	b3 := bindSrc(t, "resources:\n  keep: {type: volume}\n  drop: {type: volume}\n", nil)
	p3 := planOf(t, b3, s, nil)
	if p3.Empty() || !strings.Contains(p3.Changes[0].Reason, "deletion_policy changed: retain -> delete") {
		t.Errorf("policy change: %s %q", actions(p3), p3.Changes[0].Reason)
	}
	d := PlanDestroy(s)
	if actions(d) != "drop:delete keep:retain" {
		t.Errorf("destroy: %s", actions(d))
	}
	// A retained resource that is replaced leaves the old one alive.
	b4 := bindSrc(t, "resources:\n  keep: {type: volume, deletion_policy: retain, properties: {size_gib: 5}}\n", nil)
	p4 := planOf(t, b4, s, nil)
	if !strings.Contains(p4.Changes[0].Reason, "the old one is left alive") {
		t.Errorf("replace retained: %q", p4.Changes[0].Reason)
	}
}

func TestPlanCommitments(t *testing.T) {
	cloud := &fakeCloud{}
	src := "resources:\n  c:\n    type: commitment\n    properties: {plan: reserved, offering: h100.8x, quantity: 1, term: 1y}\n  i: {type: instance, properties: {offering: h100.8x}}\n"
	b := bindSrc(t, src, nil)
	s := cloud.apply(t, b, nil, planOf(t, b, nil, nil))

	_, err := Plan(bindSrc(t, strings.Replace(src, "quantity: 1", "quantity: 2", 1), nil), s, nil)
	if err == nil || !strings.Contains(err.Error(), "c: a commitment is a contract and cannot be changed or replaced (properties.quantity changed: 1 -> 2") {
		t.Errorf("update: %v", err)
	}
	_, err = Plan(b, s, map[string]Live{"c": {Gone: true}})
	if err == nil || !strings.Contains(err.Error(), "ended or cancelled outside the stack") {
		t.Errorf("gone: %v", err)
	}
	without := "resources:\n  i: {type: instance, properties: {offering: h100.8x}}\n"
	_, err = Plan(bindSrc(t, without, nil), s, nil)
	if err == nil || !strings.Contains(err.Error(), "cannot be cancelled: to let the stack forget it, set its deletion_policy to retain") {
		t.Errorf("delete: %v", err)
	}
	p, err := Plan(bindSrc(t, without, nil), s, map[string]Live{"c": {Gone: true}})
	if err != nil || actions(p) != "i:none c:retain" {
		t.Errorf("ended commitment removed: %v %v", err, p)
	}
	// Retain, apply, then remove: forgotten.
	retained := strings.Replace(src, "type: commitment\n", "type: commitment\n    deletion_policy: retain\n", 1)
	br := bindSrc(t, retained, nil)
	pr := planOf(t, br, s, nil)
	s2 := cloud.apply(t, br, s, pr)
	p2 := planOf(t, bindSrc(t, without, nil), s2, nil)
	if actions(p2) != "i:none c:retain" {
		t.Errorf("retained commitment removed: %s", actions(p2))
	}
	d := PlanDestroy(s)
	if actions(d) != "c:retain i:delete" || !strings.Contains(d.Changes[0].Reason, "a commitment is a contract") {
		t.Errorf("destroy: %s %q", actions(d), d.Changes[0].Reason)
	}
}

func TestPlanDestroyOrder(t *testing.T) {
	cloud := &fakeCloud{}
	b := bindSrc(t, planBase, nil)
	s := cloud.apply(t, b, nil, planOf(t, b, nil, nil))
	d := PlanDestroy(s)
	if got := actions(d); got != "workers[0]:delete workers[1]:delete head:delete grp:delete vol:delete" {
		t.Errorf("destroy order: %s", got)
	}
	if PlanDestroy(nil).Empty() != true {
		t.Error("destroying nothing is not empty")
	}
	if after := cloud.apply(t, b, s, d); len(after.Resources) != 0 {
		t.Errorf("left %v", after.Resources)
	}
}

const planNetwork = `
parameters:
  cidr: {type: string, default: 10.0.0.0/16}
  net_name: {type: string, default: n}
  sub_name: {type: string, default: s}
  sub_cidr: {type: string, default: 10.0.0.0/24}
  port: {type: integer, default: 22}
  desc: {type: string, default: d}
resources:
  net:
    type: network
    properties: {name: "${param.net_name}", cidr: "${param.cidr}"}
  sub:
    type: subnet
    properties: {network: "${net.id}", name: "${param.sub_name}", cidr: "${param.sub_cidr}", zone: z}
  sg:
    type: security_group
    properties:
      network: ${net.id}
      name: sg
      description: ${param.desc}
      ingress:
        - {protocol: tcp, from_port: "${param.port}", to_port: "${param.port}", group: self}
  node:
    type: instance
    properties: {offering: h100.1x, subnet: "${sub.id}", security_groups: ["${sg.id}"]}
`

// TestPlanNetworks: a network, subnet and security group are created in
// the order their references give, a group's rules change in place,
// names and CIDRs replace (with what depends on them), and a replacement
// that keeps a unique name is refused.
func TestPlanNetworks(t *testing.T) {
	cloud := &fakeCloud{}
	b0 := bindSrc(t, planNetwork, nil)
	p0 := planOf(t, b0, nil, nil)
	if got := actions(p0); got != "net:create sub:create sg:create node:create" {
		t.Fatalf("first plan: %s", got)
	}
	node := b0.byAddr["node"]
	if !slices.Contains(node.DependsOn, "sub") || !slices.Contains(node.DependsOn, "sg") {
		t.Errorf("node depends on %v", node.DependsOn)
	}
	s0 := cloud.apply(t, b0, nil, p0)
	if d := PlanDestroy(s0); actions(d) != "node:delete sg:delete sub:delete net:delete" {
		t.Errorf("destroy order: %s", actions(d))
	}
	for _, tc := range []struct {
		name string
		args map[string]string
		want string // the plan's actions
		err  string // a plan error's text
	}{
		{"same", nil, "net:none sub:none sg:none node:none", ""},
		{"group rules", map[string]string{"port": "2222"}, "net:none sub:none sg:update node:none", ""},
		{"group description", map[string]string{"desc": "other"}, "", "sg: the security_group is replaced"},
		{"subnet name", map[string]string{"sub_name": "s2"}, "net:none sub:replace sg:none node:replace", ""},
		{"subnet cidr only", map[string]string{"sub_cidr": "10.0.1.0/24"}, "", "change its name too"},
		{"network cidr and name", map[string]string{"cidr": "10.1.0.0/16", "net_name": "n2", "sub_cidr": "10.1.0.0/24"},
			"net:replace sub:replace sg:replace node:replace", ""},
		{"network cidr only", map[string]string{"cidr": "10.1.0.0/16", "sub_cidr": "10.1.0.0/24"}, "", "net: the network is replaced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Plan(bindSrc(t, planNetwork, tc.args), s0, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("plan: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := actions(p); got != tc.want {
				t.Errorf("plan %s, want %s", got, tc.want)
			}
		})
	}
	// Gone: a replacement may keep its name, since the old one is gone.
	p, err := Plan(bindSrc(t, planNetwork, map[string]string{"cidr": "10.1.0.0/16", "sub_cidr": "10.1.0.0/24"}), s0, map[string]Live{"net": {Gone: true}})
	if err != nil || actions(p) != "net:replace sub:replace sg:replace node:replace" {
		t.Errorf("the network deleted outside the stack: %v, %v", actions(p), err)
	}
	// Drift of the rules: the live rules differ from the applied ones.
	live := map[string]Live{"sg": {Changed: []FieldDiff{{Path: "properties.ingress", Old: s0.Resources["sg"].Properties["ingress"], New: []any{}}}}}
	p = planOf(t, b0, s0, live)
	if actions(p) != "net:none sub:none sg:update node:none" || !strings.Contains(p.Changes[2].Reason, "changed outside the stack") {
		t.Errorf("drifted rules: %s %q", actions(p), p.Changes[2].Reason)
	}
}

const planEndpoint = `
parameters:
  name: {type: string, default: echo}
  image: {type: string, default: "busybox:1"}
  max: {type: integer, default: 2}
  concurrency: {type: integer, default: 1}
  mode: {type: string, default: queue}
  port: {type: integer, default: 8080}
  spot: {type: boolean, default: false}
  zone: {type: string, default: z}
resources:
  ep:
    type: endpoint
    properties:
      name: ${param.name}
      image: ${param.image}
      offerings: [l4.1x]
      mode: ${param.mode}
      port: ${param.port}
      spot: ${param.spot}
      zones: ["${param.zone}"]
      max: ${param.max}
      concurrency: ${param.concurrency}
  client:
    type: instance
    properties: {offering: l4.1x, env: {ENDPOINT: "${ep.name}", STATE: "${ep.state}"}}
`

// TestPlanEndpoints: an endpoint is created before what refers to it;
// what its workers run, its sizes and times change in place; its mode,
// port, spot and zones replace it, which keeping its name (unique among
// the tenant's live endpoints) is refused.
func TestPlanEndpoints(t *testing.T) {
	cloud := &fakeCloud{}
	b0 := bindSrc(t, planEndpoint, nil)
	p0 := planOf(t, b0, nil, nil)
	if got := actions(p0); got != "ep:create client:create" {
		t.Fatalf("first plan: %s", got)
	}
	s0 := cloud.apply(t, b0, nil, p0)
	if d := PlanDestroy(s0); actions(d) != "client:delete ep:delete" {
		t.Errorf("destroy order: %s", actions(d))
	}
	for _, tc := range []struct {
		name string
		args map[string]string
		want string // the plan's actions
		err  string // a plan error's text
	}{
		{"same", nil, "ep:none client:none", ""},
		{"max", map[string]string{"max": "4"}, "ep:update client:none", ""},
		{"image and concurrency", map[string]string{"image": "busybox:1.36", "concurrency": "2"}, "ep:update client:none", ""},
		{"mode and name", map[string]string{"mode": "http", "name": "web"}, "ep:replace client:replace", ""},
		{"port and name", map[string]string{"port": "9000", "name": "web"}, "ep:replace client:replace", ""},
		{"spot and name", map[string]string{"spot": "true", "name": "web"}, "ep:replace client:replace", ""},
		{"mode only", map[string]string{"mode": "http"}, "", "change its name too"},
		{"zones only", map[string]string{"zone": "y"}, "", "ep: the endpoint is replaced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Plan(bindSrc(t, planEndpoint, tc.args), s0, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("plan: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := actions(p); got != tc.want {
				t.Errorf("plan %s, want %s", got, tc.want)
			}
		})
	}
	// Deleted outside the stack: the replacement may keep its name.
	p, err := Plan(bindSrc(t, planEndpoint, map[string]string{"mode": "http"}), s0, map[string]Live{"ep": {Gone: true}})
	if err != nil || actions(p) != "ep:replace client:replace" {
		t.Errorf("the endpoint deleted outside the stack: %v, %v", actions(p), err)
	}
}

// planEndpointVolumes is an endpoint with a warm pool that mounts the
// stack's shared volumes: VOLUMES is its volumes property.
const planEndpointVolumes = `
parameters:
  warm: {type: integer, default: 1}
  size: {type: integer, default: 10}
resources:
  data:
    type: volume
    properties:
      name: data
      size_gib: ${param.size}
      kind: shared
  more:
    type: volume
    properties: {name: more, size_gib: 10, kind: shared}
  ep:
    type: endpoint
    properties:
      name: echo
      image: "busybox:1"
      offerings: [l4.1x]
      warm: ${param.warm}
      volumes: VOLUMES
`

// TestPlanEndpointVolumes: an endpoint's volumes may name a stack
// volume's id (the volume is created first, deleted last); other volumes,
// none, a replaced volume (its new id unknown at plan time) and another
// warm pool change the endpoint in place, never replace it.
func TestPlanEndpointVolumes(t *testing.T) {
	cloud := &fakeCloud{}
	src := func(volumes string) string { return strings.Replace(planEndpointVolumes, "VOLUMES", volumes, 1) }
	b0 := bindSrc(t, src(`["${data.id}"]`), nil)
	p0 := planOf(t, b0, nil, nil)
	if got := actions(p0); got != "data:create more:create ep:create" {
		t.Fatalf("first plan: %s", got)
	}
	if deps := p0.Changes[2].DependsOn; !slices.Contains(deps, "data") {
		t.Errorf("ep depends on %v, want data", deps)
	}
	s0 := cloud.apply(t, b0, nil, p0)
	if got, want := s0.Resources["ep"].Properties["volumes"], s0.Resources["data"].Attributes["id"]; !reflect.DeepEqual(got, []any{want}) {
		t.Fatalf("applied volumes %v, want [%s]", got, want)
	}
	if d := PlanDestroy(s0); actions(d) != "ep:delete more:delete data:delete" && actions(d) != "ep:delete data:delete more:delete" {
		t.Errorf("destroy order: %s", actions(d))
	}
	for _, tc := range []struct {
		name, volumes string
		args          map[string]string
		want          string
	}{
		{"same", `["${data.id}"]`, nil, "data:none more:none ep:none"},
		{"another volume too", `["${data.id}", "${more.id}"]`, nil, "data:none more:none ep:update"},
		{"another order", `["${more.id}", "${data.id}"]`, nil, "data:none more:none ep:update"},
		{"none", `[]`, nil, "data:none more:none ep:update"},
		{"the volume replaced", `["${data.id}"]`, map[string]string{"size": "20"}, "data:replace more:none ep:update"},
		{"another warm pool", `["${data.id}"]`, map[string]string{"warm": "2"}, "data:none more:none ep:update"},
		{"no warm pool", `["${data.id}"]`, map[string]string{"warm": "0"}, "data:none more:none ep:update"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planOf(t, bindSrc(t, src(tc.volumes), tc.args), s0, nil)
			if got := actions(p); got != tc.want {
				t.Errorf("plan %s, want %s", got, tc.want)
			}
		})
	}
}
