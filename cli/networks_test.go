package cli

import (
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
)

// TestNetworksCommands: networks, subnets and security-groups through the
// CLI, an instance in them, its describe, and another tenant that sees
// none of it.
func TestNetworksCommands(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	_, other := e.member("globex", "gary")

	if out := e.ok(tok, "networks", "list"); !strings.Contains(out, "default") || !strings.Contains(out, "172.31.0.0/16") {
		t.Errorf("the first listing shows the default network:\n%s", out)
	}
	var n cloud.Network
	decodeJSON(t, e.ok(tok, "networks", "create", "train", "--cidr", "10.0.0.0/16", "-o", "json"), &n)
	if n.Name != "train" || !strings.HasPrefix(n.ID, "vpc-") {
		t.Fatalf("network %+v", n)
	}
	var s cloud.Subnet
	decodeJSON(t, e.ok(tok, "subnets", "create", "a", "--network", n.ID, "--cidr", "10.0.1.0/24", "--zone", "zone-a", "-o", "json"), &s)
	var g cloud.SecurityGroup
	decodeJSON(t, e.ok(tok, "security-groups", "create", "web", "--network", n.ID, "--description", "the web tier", "-o", "json"), &g)
	if s.NetworkID != n.ID || g.NetworkID != n.ID {
		t.Fatalf("subnet %+v, group %+v", s, g)
	}
	decodeJSON(t, e.ok(tok, "security-groups", "authorize", g.ID, "--ingress", "--port", "22", "--cidr", "0.0.0.0/0", "-o", "json"), &g)
	decodeJSON(t, e.ok(tok, "security-groups", "authorize", g.ID, "--ingress", "--protocol", "udp", "--ports", "8000-8100", "--group", g.ID, "-o", "json"), &g)
	if len(g.Ingress) != 2 || g.Ingress[0].Protocol != "tcp" || g.Ingress[0].FromPort != 22 || g.Ingress[1].ToPort != 8100 || g.Ingress[1].GroupID != g.ID {
		t.Fatalf("rules %+v", g.Ingress)
	}
	out := e.ok(tok, "security-groups", "describe", g.ID)
	for _, want := range []string{"tcp 22  from 0.0.0.0/0", "udp 8000-8100  from group " + g.ID, "all  to 0.0.0.0/0", "the web tier"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
	if out := e.ok(tok, "networks", "describe", n.ID); !strings.Contains(out, s.ID) || !strings.Contains(out, g.ID) || !strings.Contains(out, "10.0.1.0/24") {
		t.Errorf("networks describe:\n%s", out)
	}
	if out := e.ok(tok, "subnets", "list", "--network", n.ID); !strings.Contains(out, s.ID) || !strings.Contains(out, "zone-a") {
		t.Errorf("subnets list:\n%s", out)
	}

	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "--subnet", s.ID, "--security-group", g.ID, "-o", "json"), &in)
	if in.SubnetID != s.ID || in.PrivateAddress != "10.0.1.4" || len(in.SecurityGroupIDs) != 1 {
		t.Fatalf("instance %+v", in)
	}
	var ad cloud.Address
	decodeJSON(t, e.ok(tok, "addresses", "allocate", "--instance", in.ID, "-o", "json"), &ad)
	out = e.ok(tok, "instances", "describe", in.ID)
	for _, want := range []string{n.ID, s.ID, g.ID, "10.0.1.4", ad.IP} {
		if !strings.Contains(out, want) {
			t.Errorf("instances describe lacks %q:\n%s", want, out)
		}
	}

	// Usage errors say what is missing.
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"--cidr is required", []string{"networks", "create", "x"}},
		{"--network is required", []string{"subnets", "create", "x", "--cidr", "10.0.2.0/24", "--zone", "z"}},
		{"give one of --ingress and --egress", []string{"security-groups", "authorize", g.ID, "--port", "1", "--cidr", "0.0.0.0/0"}},
		{"give one of --cidr and --group", []string{"security-groups", "authorize", g.ID, "--ingress", "--port", "1"}},
		{"--protocol is required", []string{"security-groups", "authorize", g.ID, "--ingress", "--cidr", "0.0.0.0/0"}},
		{"--ports", []string{"security-groups", "authorize", g.ID, "--ingress", "--ports", "80", "--cidr", "0.0.0.0/0"}},
	} {
		e.usage(tok, tc.want, tc.args...)
	}
	// Deletes are refused while the instance lives, naming it.
	code, _, errOut := e.as(tok, "subnets", "delete", s.ID)
	oneLine(t, code, errOut, in.ID)

	// Another tenant: not found everywhere, and its lists are its own.
	for _, args := range [][]string{
		{"networks", "describe", n.ID}, {"networks", "delete", n.ID},
		{"subnets", "describe", s.ID}, {"subnets", "delete", s.ID},
		{"security-groups", "describe", g.ID}, {"security-groups", "delete", g.ID},
		{"security-groups", "revoke", g.ID, "--rule", g.Ingress[0].ID},
		{"security-groups", "authorize", g.ID, "--egress", "--protocol", "all", "--cidr", "10.0.0.0/8"},
		{"instances", "create", "--offering", "l4.1x", "--subnet", s.ID},
	} {
		code, _, errOut := e.as(other, args...)
		oneLine(t, code, errOut, "(not_found)")
	}
	if out := e.ok(other, "security-groups", "list"); strings.Contains(out, g.ID) {
		t.Errorf("globex lists acme's group:\n%s", out)
	}

	// Revoke by fields and by ID, then clean up.
	decodeJSON(t, e.ok(tok, "security-groups", "revoke", g.ID, "--ingress", "--port", "22", "--cidr", "0.0.0.0/0", "-o", "json"), &g)
	decodeJSON(t, e.ok(tok, "security-groups", "revoke", g.ID, "--rule", g.Ingress[0].ID, "-o", "json"), &g)
	if len(g.Ingress) != 0 {
		t.Errorf("after the revokes: %+v", g.Ingress)
	}
	e.ok(tok, "instances", "terminate", in.ID)
	for _, args := range [][]string{{"security-groups", "delete", g.ID}, {"subnets", "delete", s.ID}, {"networks", "delete", n.ID}} {
		if out := e.ok(tok, args...); !strings.Contains(out, "deleted") {
			t.Errorf("%v: %s", args, out)
		}
	}
}

// TestSpotRequestsNetwork: a spot request on a subnet with a group through
// the CLI: its launch is there, describe and list show them; a pool in
// another zone and another tenant's subnet are refused in one line.
func TestSpotRequestsNetwork(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	_, other := e.member("globex", "gary")
	var n cloud.Network
	decodeJSON(t, e.ok(tok, "networks", "create", "train", "--cidr", "10.0.0.0/16", "-o", "json"), &n)
	var s cloud.Subnet
	decodeJSON(t, e.ok(tok, "subnets", "create", "a", "--network", n.ID, "--cidr", "10.0.1.0/24", "--zone", "zone-a", "-o", "json"), &s)
	var g, g2 cloud.SecurityGroup
	decodeJSON(t, e.ok(tok, "security-groups", "create", "web", "--network", n.ID, "-o", "json"), &g)
	decodeJSON(t, e.ok(tok, "security-groups", "create", "db", "--network", n.ID, "-o", "json"), &g2)

	var r cloud.SpotRequest
	decodeJSON(t, e.ok(tok, "spot", "requests", "create", "--offering", "l4.1x", "--subnet", s.ID,
		"--security-group", g.ID, "--security-group", g2.ID, "-o", "json", "--", "python", "train.py"), &r)
	if r.Subnet != s.ID || strings.Join(r.SecurityGroups, ",") != g.ID+","+g2.ID || r.InstanceID == "" {
		t.Fatalf("spot request %+v", r)
	}
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "describe", r.InstanceID, "-o", "json"), &in)
	if in.SubnetID != s.ID || in.PrivateAddress != "10.0.1.4" || strings.Join(in.SecurityGroupIDs, ",") != g.ID+","+g2.ID ||
		strings.Join(in.Zones, ",") != "zone-a" {
		t.Errorf("launch %+v", in)
	}
	out := e.ok(tok, "spot", "requests", "describe", r.ID)
	for _, want := range []string{s.ID, g.ID + ", " + g2.ID} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
	if out := e.ok(tok, "spot", "requests", "list"); !strings.Contains(out, "SUBNET") || !strings.Contains(out, s.ID) {
		t.Errorf("list:\n%s", out)
	}
	// Without a subnet, describe says the defaults.
	var plain cloud.SpotRequest
	decodeJSON(t, e.ok(tok, "spot", "requests", "create", "--offering", "l4.1x", "-o", "json"), &plain)
	if out := e.ok(tok, "spot", "requests", "describe", plain.ID); !strings.Contains(out, "the tenant's default subnet") {
		t.Errorf("describe of a request without a subnet:\n%s", out)
	}

	code, _, errOut := e.as(tok, "spot", "requests", "create", "--offering", "l4.1x", "--zone", "zone-b", "--subnet", s.ID)
	oneLine(t, code, errOut, "pools[0].zone", "invalid_argument")
	code, _, errOut = e.as(other, "spot", "requests", "create", "--offering", "l4.1x", "--subnet", s.ID)
	oneLine(t, code, errOut, "(not_found)")
}

// TestRuleText: a rule on one line, with its description and, for a rule
// a stack's security_group_rule made, its owner.
func TestRuleText(t *testing.T) {
	for _, tc := range []struct {
		r    cloud.SecurityRule
		dir  string
		want string
	}{
		{cloud.SecurityRule{ID: "sgr-1", Protocol: "tcp", FromPort: 22, ToPort: 22, CIDR: "10.0.0.0/8"}, "from", "sgr-1 tcp 22  from 10.0.0.0/8"},
		{cloud.SecurityRule{ID: "sgr-2", Protocol: "all", GroupID: "sg-1", Description: "nodes"}, "from", "sgr-2 all  from group sg-1  (nodes)"},
		{cloud.SecurityRule{ID: "sgr-3", Protocol: "udp", FromPort: 53, ToPort: 54, CIDR: "0.0.0.0/0", Owner: "stack-stk-1-dns-g1"}, "to",
			"sgr-3 udp 53-54  to 0.0.0.0/0  [owned by stack-stk-1-dns-g1]"},
	} {
		if got := ruleText(tc.r, tc.dir); got != tc.want {
			t.Errorf("ruleText(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}
