package stackengine_test

import (
	"context"
	"errors"
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

// ruleTemplate puts rules on SHARED, a group the stack does not own, and
// on its own group, whose own rule list it also sets.
const ruleTemplate = `
parameters:
  port: {type: integer, default: 22}
  desc: {type: string, default: ssh}
  web: {type: integer, default: 80}
resources:
  own:
    type: security_group
    properties:
      network: NET
      name: own
      ingress: [{protocol: tcp, from_port: "${param.web}", to_port: "${param.web}", cidr: 10.0.0.0/8}]
  ssh:
    type: security_group_rule
    properties: {security_group: SHARED, direction: ingress, protocol: tcp, from_port: "${param.port}", to_port: "${param.port}", cidr: 192.0.2.0/24, description: "${param.desc}"}
  from_own:
    type: security_group_rule
    properties: {security_group: SHARED, direction: ingress, protocol: all, group: "${own.id}"}
  on_own:
    type: security_group_rule
    properties: {security_group: "${own.id}", direction: ingress, protocol: udp, from_port: 53, to_port: 53, cidr: 10.1.0.0/16}
`

// ruleIn finds g's ingress rule of protocol proto and port (0: none).
func ruleIn(g *cloud.SecurityGroup, proto string, port int) *cloud.SecurityRule {
	for i, r := range g.Ingress {
		if r.Protocol == proto && r.FromPort == port {
			return &g.Ingress[i]
		}
	}
	return nil
}

// TestStackSecurityGroupRule: rules on a group the stack does not own
// and on its own: made with the stack's ownership, left alone by the own
// group's rule list and its drift, a description updated in place, a
// port change replacing the rule, a revoked rule drift that the next
// apply makes again; a destroy revokes only the stack's own rules (not
// the API's, nor one authorized by hand where the stack's was), and
// another tenant's stack cannot put a rule on the group.
func TestStackSecurityGroupRule(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		svc, ctx := f.svc, context.Background()
		n, _, err := svc.Networks.CreateNetwork(ctx, f.acme, api.CreateNetworkRequest{Name: "shared", CIDR: "10.0.0.0/16"}, "")
		if err != nil {
			t.Fatal(err)
		}
		shared, _, err := svc.Networks.CreateSecurityGroup(ctx, f.acme, api.CreateSecurityGroupRequest{Network: n.ID, Name: "shared"}, "")
		if err != nil {
			t.Fatal(err)
		}
		https := api.AuthorizeRequest{Direction: api.Ingress, Protocol: "tcp", FromPort: 443, ToPort: 443, CIDR: "0.0.0.0/0"}
		if _, err := svc.Networks.Authorize(ctx, f.acme, shared.ID, https, 0); err != nil {
			t.Fatal(err)
		}
		tmpl := strings.NewReplacer("NET", n.ID, "SHARED", shared.ID).Replace(ruleTemplate)
		apply := func(params map[string]string) {
			t.Helper()
			if _, err := svc.Stacks.Apply(ctx, f.acme, "rules", api.ApplyStackRequest{Template: tmpl, Parameters: params}); err != nil {
				t.Fatal(err)
			}
			if v := runStack(t, svc, f.acme, "rules", 10); v.State != cloud.StackActive {
				t.Fatalf("apply %v: %s %q", params, v.State, v.Reason)
			}
		}
		read := func(id string) *cloud.SecurityGroup {
			t.Helper()
			g, err := svc.Networks.GetSecurityGroup(ctx, f.acme, id)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		planOf := func(params map[string]string) *api.StackPlan {
			t.Helper()
			p, err := svc.Stacks.Plan(ctx, f.acme, api.StackRequest{Name: "rules", Template: tmpl, Parameters: params})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		apply(nil)
		g := read(shared.ID)
		own := groupNamed(readNets(t, svc, f.acme, "rules").groups, "own")
		if own == nil {
			t.Fatal("no own group")
		}
		ssh, fromOwn, api443 := ruleIn(g, "tcp", 22), ruleIn(g, "all", 0), ruleIn(g, "tcp", 443)
		if len(g.Ingress) != 3 || ssh == nil || fromOwn == nil || api443 == nil || ssh.Owner == "" || fromOwn.GroupID != own.ID ||
			fromOwn.Owner == "" || fromOwn.Owner == ssh.Owner || api443.Owner != "" || ssh.Description != "ssh" {
			t.Fatalf("shared ingress %+v", g.Ingress)
		}
		own = read(own.ID)
		if onOwn, web := ruleIn(own, "udp", 53), ruleIn(own, "tcp", 80); len(own.Ingress) != 2 || onOwn == nil || onOwn.Owner == "" || web == nil || web.Owner != "" {
			t.Fatalf("own ingress %+v", own.Ingress)
		}
		onOwnID := ruleIn(own, "udp", 53).ID
		if p := planOf(nil); !planIsEmpty(p) {
			t.Fatalf("plan of the applied template: %+v", p.Summary)
		}

		// The own group's rule list changes; the rule on_own owns stays.
		apply(map[string]string{"web": "8080"})
		own = read(own.ID)
		if len(own.Ingress) != 2 || ruleIn(own, "tcp", 8080) == nil || ruleIn(own, "udp", 53) == nil || ruleIn(own, "udp", 53).ID != onOwnID {
			t.Errorf("own ingress after its list changed: %+v", own.Ingress)
		}

		// A description changes in place; a port replaces the rule.
		params := map[string]string{"web": "8080", "desc": "admins"}
		if p := planOf(params); p.Summary[stack.ActionUpdate] != 1 || p.Summary[stack.ActionReplace] != 0 {
			t.Fatalf("plan of a description: %+v", p.Summary)
		}
		apply(params)
		if r := ruleIn(read(shared.ID), "tcp", 22); r == nil || r.ID != ssh.ID || r.Description != "admins" {
			t.Errorf("after the description: %+v", r)
		}
		params["port"] = "2222"
		if p := planOf(params); p.Summary[stack.ActionReplace] != 1 {
			t.Fatalf("plan of a port: %+v", p.Summary)
		}
		apply(params)
		g = read(shared.ID)
		if ruleIn(g, "tcp", 22) != nil || ruleIn(g, "tcp", 2222) == nil || ruleIn(g, "tcp", 443) == nil || len(g.Ingress) != 3 {
			t.Errorf("after the port: %+v", g.Ingress)
		}

		// Revoked behind the stack's back: drift; the next apply makes it
		// again, with a new ID.
		old := ruleIn(g, "tcp", 2222)
		if _, err := svc.Networks.Revoke(ctx, f.acme, shared.ID, api.RevokeRequest{RuleID: old.ID}, 0); err != nil {
			t.Fatal(err)
		}
		d, err := svc.Stacks.Drift(ctx, f.acme, "", "rules")
		if err != nil || len(d) != 1 || d[0].Address != "ssh" {
			t.Fatalf("drift = %+v, %v", d, err)
		}
		apply(params)
		if r := ruleIn(read(shared.ID), "tcp", 2222); r == nil || r.ID == old.ID || r.Owner == "" {
			t.Errorf("after the repair: %+v", r)
		}
		if d, err := svc.Stacks.Drift(ctx, f.acme, "", "rules"); err != nil || len(d) != 0 {
			t.Errorf("drift after the repair = %+v, %v", d, err)
		}

		// Another tenant's stack cannot put a rule on the group.
		steal := "resources:\n  r: {type: security_group_rule, properties: {security_group: " + shared.ID +
			", direction: ingress, protocol: all, cidr: 0.0.0.0/0}}\n"
		if _, err := svc.Stacks.Apply(ctx, f.globex, "steal", api.ApplyStackRequest{Template: steal}); err != nil {
			t.Fatal(err)
		}
		if v := runStack(t, svc, f.globex, "steal", 10); v.State != cloud.StackFailed || !strings.Contains(v.Reason, "not found") {
			t.Errorf("globex's rule on acme's group: %s %q", v.State, v.Reason)
		}

		// The stack's ssh rule is revoked and the same rule authorized by
		// hand: the destroy leaves that one, and the API's, alone.
		mine := ruleIn(read(shared.ID), "tcp", 2222)
		if _, err := svc.Networks.Revoke(ctx, f.acme, shared.ID, api.RevokeRequest{RuleID: mine.ID}, 0); err != nil {
			t.Fatal(err)
		}
		byHand := api.AuthorizeRequest{Direction: api.Ingress, Protocol: "tcp", FromPort: 2222, ToPort: 2222, CIDR: "192.0.2.0/24"}
		if _, err := svc.Networks.Authorize(ctx, f.acme, shared.ID, byHand, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Stacks.Destroy(ctx, f.acme, "", "rules"); err != nil {
			t.Fatal(err)
		}
		if v := runStack(t, svc, f.acme, "rules", 10); v != nil {
			t.Fatalf("after destroy: %s %q", v.State, v.Reason)
		}
		g = read(shared.ID)
		var left []string
		for _, r := range g.Ingress {
			left = append(left, r.Protocol+" "+r.Owner)
		}
		if len(g.Ingress) != 2 || ruleIn(g, "tcp", 443) == nil || ruleIn(g, "tcp", 2222) == nil || slices.ContainsFunc(g.Ingress, func(r cloud.SecurityRule) bool { return r.Owner != "" }) {
			t.Errorf("shared after the destroy: %v", left)
		}
		if _, err := svc.Networks.GetSecurityGroup(ctx, f.acme, own.ID); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("the stack's own group after the destroy: %v", err)
		}
	})
}

// TestStackRulePlanChecks: a security_group_rule's fields are checked at
// plan, as an authorize checks them, even when its group is a reference
// known only after apply.
func TestStackRulePlanChecks(t *testing.T) {
	st := testkit.Backends()[0].Open(t)
	f := newFixture(t, st)
	ctx := context.Background()
	head := "resources:\n  net: {type: network, properties: {name: n, cidr: 10.0.0.0/16}}\n" +
		"  sg: {type: security_group, properties: {network: \"${net.id}\", name: g}}\n"
	for _, tc := range []struct{ rule, field string }{
		{"{security_group: \"${sg.id}\", direction: ingress, protocol: gre, cidr: 0.0.0.0/0}", "resources.r.properties.protocol"},
		{"{security_group: \"${sg.id}\", direction: ingress, protocol: tcp, cidr: 0.0.0.0/0}", "resources.r.properties.from_port"},
		{"{security_group: \"${sg.id}\", direction: sideways, protocol: all, cidr: 0.0.0.0/0}", "resources.r.properties.direction"},
		{"{security_group: \"${sg.id}\", direction: ingress, protocol: all, cidr: 0.0.0.0/0, group: \"${sg.id}\"}", "resources.r.properties.cidr"},
		{"{direction: ingress, protocol: all, cidr: 0.0.0.0/0}", "resources.r.properties.security_group"},
		{"{security_group: \"${sg.id}\", direction: ingress, protocol: all, cidr: 0.0.0.0/0, port: 1}", "resources.r.properties"},
	} {
		_, err := f.svc.Stacks.Plan(ctx, f.acme, api.StackRequest{Name: "checks", Template: head + "  r: {type: security_group_rule, properties: " + tc.rule + "}\n"})
		ce, _ := err.(*cloud.Error)
		if ce == nil || ce.Code != cloud.Invalid || ce.Details["field"] != tc.field {
			t.Errorf("%s: %v (%+v), want invalid_argument on %s", tc.rule, err, ce, tc.field)
		}
	}
	ok := head + "  r: {type: security_group_rule, properties: {security_group: \"${sg.id}\", direction: egress, protocol: udp, from_port: 53, to_port: 53, group: \"${sg.id}\"}}\n"
	if p, err := f.svc.Stacks.Plan(ctx, f.acme, api.StackRequest{Name: "checks", Template: ok}); err != nil || p.Summary[stack.ActionCreate] != 3 {
		t.Errorf("a good rule: %+v %v", p, err)
	}
}

// TestStackRuleCrashResumes: an apply cut short between a rule's create
// and its record resumes and makes each rule once: the retry with the
// same key answers the rule the first try made, rather than a conflict
// with it.
func TestStackRuleCrashResumes(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		ctx := context.Background()
		n, _, err := f.svc.Networks.CreateNetwork(ctx, f.acme, api.CreateNetworkRequest{Name: "shared", CIDR: "10.0.0.0/16"}, "")
		if err != nil {
			t.Fatal(err)
		}
		shared, _, err := f.svc.Networks.CreateSecurityGroup(ctx, f.acme, api.CreateSecurityGroupRequest{Network: n.ID, Name: "shared"}, "")
		if err != nil {
			t.Fatal(err)
		}
		crash := &crashingStore{Store: st}
		crash.after.Store(1 << 40)
		svc := service.New(crash, nil, service.Options{Now: f.clock.Now})
		tmpl := strings.NewReplacer("NET", n.ID, "SHARED", shared.ID).Replace(ruleTemplate)
		if _, err := svc.Stacks.Apply(ctx, f.acme, "rules", api.ApplyStackRequest{Template: tmpl}); err != nil {
			t.Fatal(err)
		}
		for round := range 2 {
			crash.writes.Store(0)
			crash.after.Store(int64(round + 1))
			if _, err := stackengine.New(svc).Step(ctx); !errors.Is(err, errCrash) {
				t.Fatalf("round %d: %v, want the crash", round, err)
			}
		}
		crash.after.Store(1 << 40)
		if v := runStack(t, svc, f.acme, "rules", 10); v.State != cloud.StackActive {
			t.Fatalf("after the crashes: %s %q", v.State, v.Reason)
		}
		g, err := svc.Networks.GetSecurityGroup(ctx, f.acme, shared.ID)
		if err != nil || len(g.Ingress) != 2 || ruleIn(g, "tcp", 22) == nil || ruleIn(g, "all", 0) == nil {
			t.Fatalf("shared ingress %+v %v", g, err)
		}
		v, _ := svc.Stacks.Get(ctx, f.acme, "", "rules")
		for _, r := range v.Resources {
			if r.Address == "ssh" && r.ID != ruleIn(g, "tcp", 22).ID {
				t.Errorf("the stack records rule %s, the group has %+v", r.ID, g.Ingress)
			}
		}
	})
}
