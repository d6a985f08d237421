package stackengine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stack"
	"github.com/gpucloud/gpucloud/stackengine"
	"github.com/gpucloud/gpucloud/testkit"
)

// netTemplate is a cluster on a network of its own: a subnet, a group
// that opens a port among its members (and all traffic among them), a
// second group an SSH rule from a CIDR names, and nodes in both.
const netTemplate = `
parameters:
  port: {type: integer, default: 29500}
  nodes: {type: integer, default: 2}
resources:
  net:
    type: network
    properties: {name: train, cidr: 10.42.0.0/16}
  sub:
    type: subnet
    properties: {network: "${net.id}", name: nodes, cidr: 10.42.0.0/20, zone: local-a}
  admin:
    type: security_group
    properties:
      network: ${net.id}
      name: admin
      ingress: [{protocol: tcp, from_port: 22, to_port: 22, cidr: 192.0.2.0/24}]
      egress: []
  rdzv:
    type: security_group
    properties:
      network: ${net.id}
      name: rendezvous
      description: rendezvous and NCCL among the nodes
      ingress:
        - {protocol: tcp, from_port: "${param.port}", to_port: "${param.port}", group: self}
        - {protocol: all, group: self}
        - {protocol: tcp, from_port: 8080, to_port: 8080, group: "${admin.id}"}
  nodes:
    type: instance
    count: ${param.nodes}
    properties:
      name: node-${count.index}
      offering: l4.1x
      subnet: ${sub.id}
      security_groups: ["${rdzv.id}", "${admin.id}"]
outputs:
  vpc: ${net.id}
`

// netState is what of a tenant's networks a stack made: its networks,
// subnets and security groups (by the stack's tag) and its instances.
type netState struct {
	nets    []*cloud.Network
	subs    []*cloud.Subnet
	groups  []*cloud.SecurityGroup
	nodes   []*cloud.Instance
	nonDflt int // the tenant's networks other than the default one
}

func readNets(t *testing.T, svc *service.Services, a service.Actor, name string) netState {
	t.Helper()
	ctx := context.Background()
	var s netState
	ns, err := svc.Networks.ListNetworks(ctx, a, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if !n.Default {
			s.nonDflt++
		}
		if n.Tags[service.TagStack] == name {
			s.nets = append(s.nets, n)
		}
	}
	subs, err := svc.Networks.ListSubnets(ctx, a, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range subs {
		if sub.Tags[service.TagStack] == name {
			s.subs = append(s.subs, sub)
		}
	}
	gs, err := svc.Networks.ListSecurityGroups(ctx, a, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if g.Tags[service.TagStack] == name {
			s.groups = append(s.groups, g)
		}
	}
	s.nodes = stackInstances(t, svc, a, name)
	return s
}

// ruleWords renders rules for comparison: "tcp 29500-29500 self".
func ruleWords(g *cloud.SecurityGroup, rules []cloud.SecurityRule) []string {
	var out []string
	for _, r := range rules {
		peer := r.CIDR
		switch r.GroupID {
		case "":
		case g.ID:
			peer = "self"
		default:
			peer = "group " + r.GroupID
		}
		out = append(out, fmt.Sprintf("%s %d-%d %s", r.Protocol, r.FromPort, r.ToPort, peer))
	}
	slices.Sort(out)
	return out
}

func groupNamed(gs []*cloud.SecurityGroup, name string) *cloud.SecurityGroup {
	for _, g := range gs {
		if g.Name == name {
			return g
		}
	}
	return nil
}

// TestStackNetworks: an apply creates the network, then its subnet and
// groups with their rules, then the nodes in them; a change to a group's
// rules updates it in place (the nodes stay); rules changed outside the
// stack are drift that the next apply repairs; a destroy leaves nothing.
func TestStackNetworks(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		svc, ctx := f.svc, context.Background()
		apply := func(params map[string]string) *api.StackView {
			t.Helper()
			if _, err := svc.Stacks.Apply(ctx, f.acme, "train", api.ApplyStackRequest{Template: netTemplate, Parameters: params}); err != nil {
				t.Fatal(err)
			}
			return runStack(t, svc, f.acme, "train", 10)
		}
		p, err := svc.Stacks.Plan(ctx, f.acme, api.StackRequest{Name: "train", Template: netTemplate})
		if err != nil || p.Summary[stack.ActionCreate] != 6 {
			t.Fatalf("plan: %+v, %v", p, err)
		}
		if v := apply(nil); v.State != cloud.StackActive || len(v.Resources) != 6 {
			t.Fatalf("apply: %s %q, %d resources", v.State, v.Reason, len(v.Resources))
		}
		s := readNets(t, svc, f.acme, "train")
		if len(s.nets) != 1 || len(s.subs) != 1 || len(s.groups) != 2 || len(s.nodes) != 2 {
			t.Fatalf("made %d networks, %d subnets, %d groups, %d nodes", len(s.nets), len(s.subs), len(s.groups), len(s.nodes))
		}
		net, sub := s.nets[0], s.subs[0]
		rdzv, admin := groupNamed(s.groups, "rendezvous"), groupNamed(s.groups, "admin")
		if net.CIDR != "10.42.0.0/16" || sub.NetworkID != net.ID || sub.Zone != "local-a" || rdzv == nil || admin == nil ||
			rdzv.NetworkID != net.ID || rdzv.Description != "rendezvous and NCCL among the nodes" {
			t.Fatalf("network %+v, subnet %+v, groups %+v %+v", net, sub, rdzv, admin)
		}
		wantRdzv := []string{"all 0-0 self", "tcp 29500-29500 self", "tcp 8080-8080 group " + admin.ID}
		if got := ruleWords(rdzv, rdzv.Ingress); !slices.Equal(got, wantRdzv) {
			t.Errorf("rendezvous ingress %v, want %v", got, wantRdzv)
		}
		if got := ruleWords(rdzv, rdzv.Egress); !slices.Equal(got, []string{"all 0-0 0.0.0.0/0"}) {
			t.Errorf("rendezvous egress %v, want the default", got)
		}
		if got := ruleWords(admin, admin.Ingress); !slices.Equal(got, []string{"tcp 22-22 192.0.2.0/24"}) || len(admin.Egress) != 0 {
			t.Errorf("admin ingress %v, egress %v", got, admin.Egress)
		}
		for _, in := range s.nodes {
			if in.SubnetID != sub.ID || in.NetworkID != net.ID || !slices.Equal(in.SecurityGroupIDs, []string{rdzv.ID, admin.ID}) ||
				!strings.HasPrefix(in.PrivateAddress, "10.42.") {
				t.Errorf("node %s: subnet %s, network %s, groups %v, address %s", in.Name, in.SubnetID, in.NetworkID, in.SecurityGroupIDs, in.PrivateAddress)
			}
		}
		v, _ := svc.Stacks.Get(ctx, f.acme, "", "train")
		if v.Outputs["vpc"] != net.ID {
			t.Errorf("outputs %v", v.Outputs)
		}
		statuses := map[string]string{}
		for _, r := range v.Resources {
			statuses[r.Address] = r.Type + " " + r.ID + ": " + r.Status
		}
		for addr, want := range map[string]string{
			"net":  fmt.Sprintf("network %s: 10.42.0.0/16, vni %d", net.ID, net.VNI),
			"sub":  "subnet " + sub.ID + ": 10.42.0.0/20 in local-a",
			"rdzv": "security_group " + rdzv.ID + ": 3 ingress, 1 egress rules",
		} {
			if statuses[addr] != want {
				t.Errorf("%s: %q, want %q", addr, statuses[addr], want)
			}
		}
		if !slices.ContainsFunc(p.Cost.Lines, func(l api.StackCostLine) bool {
			return l.Address == "net" && l.OnDemand == 0 && strings.Contains(l.What, "network")
		}) {
			t.Errorf("cost lines %+v", p.Cost.Lines)
		}
		// The creates went in dependency order.
		evs, _ := svc.Stacks.Events(ctx, f.acme, "", "train", 0, 0)
		at := map[string]int{}
		for i, ev := range evs {
			if ev.Action == "create" && ev.Outcome == "succeeded" {
				at[ev.Address] = i
			}
		}
		for _, order := range [][2]string{{"net", "sub"}, {"net", "admin"}, {"admin", "rdzv"}, {"sub", "nodes[0]"}, {"rdzv", "nodes[1]"}} {
			if at[order[0]] >= at[order[1]] {
				t.Errorf("%s created after %s: %v", order[0], order[1], at)
			}
		}
		if p, err := svc.Stacks.Plan(ctx, f.acme, api.StackRequest{Name: "train", Template: netTemplate}); err != nil || !planIsEmpty(p) {
			t.Fatalf("plan of the applied template: %+v, %v", p, err)
		}

		// Another port: the group changes in place; the nodes stay.
		args := map[string]string{"port": "29600"}
		p, err = svc.Stacks.Plan(ctx, f.acme, api.StackRequest{Name: "train", Template: netTemplate, Parameters: args})
		if err != nil || p.Summary[stack.ActionUpdate] != 1 || p.Summary[stack.ActionReplace] != 0 {
			t.Fatalf("plan of another port: %+v, %v", p.Summary, err)
		}
		if v := apply(args); v.State != cloud.StackActive {
			t.Fatalf("apply another port: %s %q", v.State, v.Reason)
		}
		s2 := readNets(t, svc, f.acme, "train")
		rdzv2 := groupNamed(s2.groups, "rendezvous")
		wantRdzv[1] = "tcp 29600-29600 self"
		slices.Sort(wantRdzv)
		if rdzv2 == nil || rdzv2.ID != rdzv.ID || !slices.Equal(ruleWords(rdzv2, rdzv2.Ingress), wantRdzv) {
			t.Fatalf("rendezvous after the update: %+v", rdzv2)
		}
		kept := func(old *cloud.SecurityRule) bool {
			return slices.ContainsFunc(rdzv2.Ingress, func(r cloud.SecurityRule) bool { return r.ID == old.ID })
		}
		for _, r := range rdzv.Ingress {
			if want := r.FromPort != 29500; kept(&r) != want {
				t.Errorf("rule %s (%s %d) kept = %v, want %v", r.ID, r.Protocol, r.FromPort, !want, want)
			}
		}
		if ids := func(ins []*cloud.Instance) []string {
			var out []string
			for _, in := range ins {
				out = append(out, in.ID)
			}
			slices.Sort(out)
			return out
		}; !slices.Equal(ids(s.nodes), ids(s2.nodes)) {
			t.Errorf("the nodes were replaced by a rule change")
		}

		// A rule revoked behind the stack's back is drift; the next apply
		// authorizes it again.
		if _, err := svc.Networks.Revoke(ctx, f.acme, admin.ID, api.RevokeRequest{AuthorizeRequest: api.AuthorizeRequest{
			Direction: api.Ingress, Protocol: "tcp", FromPort: 22, ToPort: 22, CIDR: "192.0.2.0/24"}}, 0); err != nil {
			t.Fatal(err)
		}
		d, err := svc.Stacks.Drift(ctx, f.acme, "", "train")
		if err != nil || len(d) != 1 || d[0].Address != "admin" || d[0].Drift != "changed" || d[0].Diffs[0].Path != "properties.ingress" {
			t.Fatalf("drift = %+v, %v", d, err)
		}
		if v := apply(args); v.State != cloud.StackActive {
			t.Fatalf("repair: %s %q", v.State, v.Reason)
		}
		if d, err := svc.Stacks.Drift(ctx, f.acme, "", "train"); err != nil || len(d) != 0 {
			t.Fatalf("drift after the repair = %+v, %v", d, err)
		}
		g, _ := svc.Networks.GetSecurityGroup(ctx, f.acme, admin.ID)
		if got := ruleWords(g, g.Ingress); !slices.Equal(got, []string{"tcp 22-22 192.0.2.0/24"}) {
			t.Errorf("admin ingress after the repair: %v", got)
		}

		// Another tenant sees none of it.
		for _, err := range []error{
			second(svc.Networks.GetNetwork(ctx, f.globex, net.ID)),
			second(svc.Networks.GetSubnet(ctx, f.globex, sub.ID)),
			second(svc.Networks.GetSecurityGroup(ctx, f.globex, rdzv.ID)),
		} {
			if cloud.ErrorCode(err) != cloud.NotFound {
				t.Errorf("globex reads acme's stack network: %v", err)
			}
		}

		// Destroy: the nodes, then the groups and the subnet, then the
		// network; nothing is left.
		if _, err := svc.Stacks.Destroy(ctx, f.acme, "", "train"); err != nil {
			t.Fatal(err)
		}
		if v := runStack(t, svc, f.acme, "train", 10); v != nil {
			t.Fatalf("after destroy: %s %q", v.State, v.Reason)
		}
		if s := readNets(t, svc, f.acme, "train"); len(s.nets)+len(s.subs)+len(s.groups)+len(s.nodes)+s.nonDflt != 0 {
			t.Errorf("left: %d networks, %d subnets, %d groups, %d nodes", len(s.nets), len(s.subs), len(s.groups), len(s.nodes))
		}
		evs, _ = svc.Stacks.Events(ctx, f.acme, "", "train", 0, 0)
		for _, ev := range evs {
			if ev.Action == "delete" && ev.Outcome != "succeeded" {
				t.Errorf("a delete did not succeed at once: %+v", ev)
			}
		}
	})
}

func second[T any](_ T, err error) error { return err }

// TestStackNetworkRenameRefused: replacing a network under the name it
// has is refused at apply, before anything changes.
func TestStackNetworkRenameRefused(t *testing.T) {
	st := testkit.Backends()[0].Open(t)
	f := newFixture(t, st)
	svc, ctx := f.svc, context.Background()
	tmpl := "parameters:\n  cidr: {type: string, default: 10.0.0.0/16}\n  name: {type: string, default: a}\n" +
		"resources:\n  net: {type: network, properties: {name: \"${param.name}\", cidr: \"${param.cidr}\"}}\n"
	if _, err := svc.Stacks.Apply(ctx, f.acme, "n", api.ApplyStackRequest{Template: tmpl}); err != nil {
		t.Fatal(err)
	}
	runStack(t, svc, f.acme, "n", 10)
	_, err := svc.Stacks.Apply(ctx, f.acme, "n", api.ApplyStackRequest{Template: tmpl, Parameters: map[string]string{"cidr": "10.1.0.0/16"}})
	if cloud.ErrorCode(err) != cloud.Invalid || !strings.Contains(err.Error(), "change its name too") {
		t.Fatalf("a replacement under the same name: %v", err)
	}
	if _, err := svc.Stacks.Apply(ctx, f.acme, "n", api.ApplyStackRequest{Template: tmpl, Parameters: map[string]string{"cidr": "10.1.0.0/16", "name": "b"}}); err != nil {
		t.Fatal(err)
	}
	if v := runStack(t, svc, f.acme, "n", 10); v.State != cloud.StackActive {
		t.Fatalf("replace with a new name: %s %q", v.State, v.Reason)
	}
	s := readNets(t, svc, f.acme, "n")
	if len(s.nets) != 1 || s.nets[0].Name != "b" || s.nets[0].CIDR != "10.1.0.0/16" {
		t.Errorf("networks after the replacement: %+v", s.nets)
	}
}

// TestStackNetworkForeignReferences: a template that names another
// tenant's subnet, network or security group by ID gets not_found, and
// the apply creates nothing (it rolls back) and leaves the other tenant's
// as they were.
func TestStackNetworkForeignReferences(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		svc, ctx := f.svc, context.Background()
		n, _, err := svc.Networks.CreateNetwork(ctx, f.globex, api.CreateNetworkRequest{Name: "secret", CIDR: "10.9.0.0/16"}, "")
		if err != nil {
			t.Fatal(err)
		}
		sub, _, err := svc.Networks.CreateSubnet(ctx, f.globex, api.CreateSubnetRequest{Network: n.ID, Name: "s", CIDR: "10.9.0.0/24", Zone: "local-a"}, "")
		if err != nil {
			t.Fatal(err)
		}
		g, _, err := svc.Networks.CreateSecurityGroup(ctx, f.globex, api.CreateSecurityGroupRequest{Network: n.ID, Name: "g"}, "")
		if err != nil {
			t.Fatal(err)
		}
		own := "  net: {type: network, properties: {name: mine, cidr: 10.9.0.0/16}}\n"
		for i, tc := range []struct{ resources, field string }{
			{"  a: {type: instance, properties: {offering: l4.1x, subnet: " + sub.ID + "}}\n", "subnet"},
			{own + "  s: {type: subnet, properties: {network: " + n.ID + ", name: s, cidr: 10.9.0.0/24, zone: local-a}}\n", "network"},
			{own + "  g: {type: security_group, properties: {network: " + n.ID + ", name: g}}\n", "network"},
			{own + "  g: {type: security_group, properties: {network: \"${net.id}\", name: g, ingress: [{protocol: all, group: " + g.ID + "}]}}\n", "group"},
			{own + "  s: {type: subnet, properties: {network: \"${net.id}\", name: s, cidr: 10.9.0.0/24, zone: local-a}}\n" +
				"  a: {type: instance, properties: {offering: l4.1x, subnet: \"${s.id}\", security_groups: [" + g.ID + "]}}\n", "security_groups[0]"},
		} {
			name := fmt.Sprintf("steal-%d", i)
			if _, err := svc.Stacks.Apply(ctx, f.acme, name, api.ApplyStackRequest{Template: "resources:\n" + tc.resources}); err != nil {
				t.Fatal(err)
			}
			v := runStack(t, svc, f.acme, name, 10)
			if v.State != cloud.StackFailed || !strings.Contains(v.Reason, "not found") || !strings.Contains(v.Reason, tc.field) {
				t.Errorf("%s: %s %q, want failed on %s as for a missing resource", name, v.State, v.Reason, tc.field)
			}
			if s := readNets(t, svc, f.acme, name); len(s.nets)+len(s.subs)+len(s.groups)+len(s.nodes) != 0 || len(v.Resources) != 0 {
				t.Errorf("%s: acme kept %d networks, %d subnets, %d groups, %d instances", name, len(s.nets), len(s.subs), len(s.groups), len(s.nodes))
			}
		}
		gs, _ := svc.Networks.ListSecurityGroups(ctx, f.globex, "", n.ID)
		subs, _ := svc.Networks.ListSubnets(ctx, f.globex, "", n.ID)
		ins, _, _ := svc.Instances.List(ctx, f.globex, service.InstanceQuery{Limit: 100})
		if len(gs) != 2 || len(subs) != 1 || len(ins) != 0 {
			t.Errorf("globex's network after acme's tries: %d groups, %d subnets, %d instances", len(gs), len(subs), len(ins))
		}
		if got, _ := svc.Networks.GetSecurityGroup(ctx, f.globex, g.ID); len(got.Ingress) != 0 {
			t.Errorf("globex's group got rules: %+v", got.Ingress)
		}
	})
}

// TestStackNetworkCrashResumes: an apply cut short between its creates
// and their record resumes and makes each network, subnet and group once,
// with its rules.
func TestStackNetworkCrashResumes(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		ctx := context.Background()
		crash := &crashingStore{Store: st}
		crash.after.Store(1 << 40)
		svc := service.New(crash, nil, service.Options{Now: f.clock.Now})
		if _, err := svc.Stacks.Apply(ctx, f.acme, "train", api.ApplyStackRequest{Template: netTemplate}); err != nil {
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
		if v := runStack(t, svc, f.acme, "train", 10); v.State != cloud.StackActive {
			t.Fatalf("after the crashes: %s %q", v.State, v.Reason)
		}
		s := readNets(t, svc, f.acme, "train")
		if len(s.nets) != 1 || len(s.subs) != 1 || len(s.groups) != 2 || len(s.nodes) != 2 {
			t.Fatalf("%d networks, %d subnets, %d groups, %d nodes; want one network and subnet, two groups and nodes",
				len(s.nets), len(s.subs), len(s.groups), len(s.nodes))
		}
		if r := groupNamed(s.groups, "rendezvous"); len(r.Ingress) != 3 {
			t.Errorf("rendezvous ingress %+v", r.Ingress)
		}
	})
}

// TestStackBlueprintLLMFinetuneNetwork: the llm-finetune blueprint makes
// its own network, subnet and rendezvous group, and puts the head and the
// workers in them; the workers learn the head's private address. A
// destroy leaves nothing of the network (the checkpoint volume is
// retained).
func TestStackBlueprintLLMFinetuneNetwork(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		svc, ctx := f.svc, context.Background()
		src, err := stack.Blueprint("llm-finetune")
		if err != nil {
			t.Fatal(err)
		}
		req := api.ApplyStackRequest{Template: string(src), Parameters: map[string]string{"nodes": "3", "checkpoint_gib": "10"}}
		if _, err := svc.Stacks.Apply(ctx, f.acme, "ft", req); err != nil {
			t.Fatal(err)
		}
		if v := runStack(t, svc, f.acme, "ft", 10); v.State != cloud.StackActive {
			t.Fatalf("apply: %s %q", v.State, v.Reason)
		}
		s := readNets(t, svc, f.acme, "ft")
		if len(s.nets) != 1 || len(s.subs) != 1 || len(s.groups) != 1 || len(s.nodes) != 3 {
			t.Fatalf("made %d networks, %d subnets, %d groups, %d nodes", len(s.nets), len(s.subs), len(s.groups), len(s.nodes))
		}
		net, sub, g := s.nets[0], s.subs[0], s.groups[0]
		if net.Name != "llm-finetune" || net.CIDR != "10.42.0.0/16" || sub.CIDR != "10.42.0.0/20" || sub.Zone != "local-a" || g.Name != "rendezvous" {
			t.Errorf("network %s %s, subnet %s %s, group %s", net.Name, net.CIDR, sub.CIDR, sub.Zone, g.Name)
		}
		want := []string{"all 0-0 self", "tcp 29500-29500 self"}
		if got := ruleWords(g, g.Ingress); !slices.Equal(got, want) {
			t.Errorf("rendezvous ingress %v, want %v", got, want)
		}
		if got := ruleWords(g, g.Egress); !slices.Equal(got, []string{"all 0-0 0.0.0.0/0"}) {
			t.Errorf("rendezvous egress %v", got)
		}
		var head *cloud.Instance
		for _, in := range s.nodes {
			if in.Name == "llm-head" {
				head = in
			}
		}
		if head == nil {
			t.Fatal("no head")
		}
		for _, in := range s.nodes {
			if in.SubnetID != sub.ID || !slices.Equal(in.SecurityGroupIDs, []string{g.ID}) || !slices.Equal(in.Zones, []string{"local-a"}) {
				t.Errorf("%s: subnet %s, groups %v, zones %v", in.Name, in.SubnetID, in.SecurityGroupIDs, in.Zones)
			}
			if in != head && in.Env["MASTER_ADDR"] != head.PrivateAddress {
				t.Errorf("%s: MASTER_ADDR %q, want the head's %s", in.Name, in.Env["MASTER_ADDR"], head.PrivateAddress)
			}
		}
		if _, err := svc.Stacks.Destroy(ctx, f.acme, "", "ft"); err != nil {
			t.Fatal(err)
		}
		runStack(t, svc, f.acme, "ft", 10)
		if s := readNets(t, svc, f.acme, "ft"); len(s.nets)+len(s.subs)+len(s.groups)+len(s.nodes)+s.nonDflt != 0 {
			t.Errorf("left: %d networks, %d subnets, %d groups, %d nodes", len(s.nets), len(s.subs), len(s.groups), len(s.nodes))
		}
	})
}
