package service_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// nsFixture is ahFixture with helpers for networks.
type nsFixture struct{ *ahFixture }

func newNSFixture(t *testing.T, st cloud.Store) nsFixture { return nsFixture{newAHFixture(t, st)} }

func (f nsFixture) network(a service.Actor, name, cidr string) *cloud.Network {
	f.t.Helper()
	n, _, err := f.svc.Networks.CreateNetwork(context.Background(), a, api.CreateNetworkRequest{Name: name, CIDR: cidr}, "")
	if err != nil {
		f.t.Fatalf("create network %s: %v", name, err)
	}
	return n
}

func (f nsFixture) subnet(a service.Actor, network, name, cidr, zone string) *cloud.Subnet {
	f.t.Helper()
	s, _, err := f.svc.Networks.CreateSubnet(context.Background(), a, api.CreateSubnetRequest{Network: network, Name: name, CIDR: cidr, Zone: zone}, "")
	if err != nil {
		f.t.Fatalf("create subnet %s: %v", name, err)
	}
	return s
}

func (f nsFixture) group(a service.Actor, network, name string) *cloud.SecurityGroup {
	f.t.Helper()
	g, _, err := f.svc.Networks.CreateSecurityGroup(context.Background(), a, api.CreateSecurityGroupRequest{Network: network, Name: name}, "")
	if err != nil {
		f.t.Fatalf("create group %s: %v", name, err)
	}
	return g
}

// create creates an l4.1x instance of a with the network fields given.
func (f nsFixture) create(a service.Actor, subnet string, groups ...string) (*cloud.Instance, error) {
	in, _, err := f.svc.Instances.Create(context.Background(), a, api.CreateInstanceRequest{Offering: "l4.1x", Subnet: subnet, SecurityGroups: groups}, "")
	return in, err
}

// defaultGroupOf reads the default group of network n.
func (f nsFixture) defaultGroupOf(a service.Actor, n string) *cloud.SecurityGroup {
	f.t.Helper()
	gs, err := f.svc.Networks.ListSecurityGroups(context.Background(), a, "", n)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, g := range gs {
		if g.Default {
			return g
		}
	}
	f.t.Fatalf("network %s has no default group: %+v", n, gs)
	return nil
}

// wantField fails unless err is invalid_argument naming field.
func wantField(t *testing.T, err error, field string) {
	t.Helper()
	ce := ahCode(t, err, cloud.Invalid)
	if ce.Details["field"] != field {
		t.Errorf("error %v names field %v, want %s", err, ce.Details["field"], field)
	}
}

func TestNetworkCreateRules(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		f.network(f.acme, "taken", "10.1.0.0/16")
		for _, tc := range []struct {
			name, cidr string
			code       cloud.Code
			field      string
		}{
			{"ok", "10.0.0.0/16", "", ""},
			{"small", "10.2.0.0/28", "", ""},
			{"too-big", "10.0.0.0/15", cloud.Invalid, "cidr"},
			{"too-small", "10.0.0.0/29", cloud.Invalid, "cidr"},
			{"host-bits", "10.0.0.1/16", cloud.Invalid, "cidr"},
			{"ipv6", "fd00::/64", cloud.Invalid, "cidr"},
			{"no-mask", "10.0.0.0", cloud.Invalid, "cidr"},
			{"no-cidr", "", cloud.Invalid, "cidr"},
			{"Upper", "10.3.0.0/16", cloud.Invalid, "name"},
			{"-dash", "10.3.0.0/16", cloud.Invalid, "name"},
			{"", "10.3.0.0/16", cloud.Invalid, "name"},
			{"taken", "10.4.0.0/16", cloud.Conflict, "name"},
			{"default", "10.5.0.0/16", cloud.Invalid, "name"},
		} {
			before := f.state()
			n, created, err := f.svc.Networks.CreateNetwork(ctx, f.acme, api.CreateNetworkRequest{Name: tc.name, CIDR: tc.cidr}, "")
			if tc.code == "" {
				if err != nil || !created || n.CIDR != tc.cidr || n.TenantID != f.acme.TenantID || n.Default || n.VNI == 0 {
					t.Errorf("%s: %+v %v %v", tc.name, n, created, err)
					continue
				}
				g := f.defaultGroupOf(f.acme, n.ID)
				if len(g.Ingress) != 1 || g.Ingress[0].GroupID != g.ID || g.Ingress[0].Protocol != cloud.ProtocolAll ||
					len(g.Egress) != 1 || g.Egress[0].CIDR != "0.0.0.0/0" || g.Name != "default" {
					t.Errorf("%s: default group %+v", tc.name, g)
				}
				continue
			}
			if ce := ahCode(t, err, tc.code); ce.Details["field"] != tc.field {
				t.Errorf("%s %s: %v, want field %s", tc.name, tc.cidr, err, tc.field)
			}
			f.unchanged(before, "refused network "+tc.name)
		}
		// Another tenant may use the same name and CIDR.
		if n := f.network(f.globex, "taken", "10.1.0.0/16"); n.TenantID != f.globex.TenantID {
			t.Errorf("globex's network: %+v", n)
		}
	})
}

func TestSubnetCreateRules(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		first := f.subnet(f.acme, n.ID, "a", "10.0.1.0/24", "zone-x")
		other := f.network(f.globex, "theirs", "10.0.0.0/16")
		for _, tc := range []struct {
			what        string
			req         api.CreateSubnetRequest
			code        cloud.Code
			field, more string
		}{
			{"inside", api.CreateSubnetRequest{Network: n.ID, Name: "b", CIDR: "10.0.2.0/28", Zone: "zone-x"}, "", "", ""},
			{"outside", api.CreateSubnetRequest{Network: n.ID, Name: "c", CIDR: "10.1.0.0/24", Zone: "zone-x"}, cloud.Invalid, "cidr", "not inside"},
			{"the whole network", api.CreateSubnetRequest{Network: n.ID, Name: "c", CIDR: "10.0.0.0/16", Zone: "zone-x"}, cloud.Invalid, "cidr", "overlaps subnet"},
			{"overlap", api.CreateSubnetRequest{Network: n.ID, Name: "c", CIDR: "10.0.1.128/25", Zone: "zone-x"}, cloud.Invalid, "cidr", first.ID},
			{"too small", api.CreateSubnetRequest{Network: n.ID, Name: "c", CIDR: "10.0.3.0/29", Zone: "zone-x"}, cloud.Invalid, "cidr", "/16 to /28"},
			{"host bits", api.CreateSubnetRequest{Network: n.ID, Name: "c", CIDR: "10.0.3.1/24", Zone: "zone-x"}, cloud.Invalid, "cidr", "host bits"},
			{"no zone", api.CreateSubnetRequest{Network: n.ID, Name: "c", CIDR: "10.0.3.0/24"}, cloud.Invalid, "zone", ""},
			{"no network", api.CreateSubnetRequest{Name: "c", CIDR: "10.0.3.0/24", Zone: "zone-x"}, cloud.Invalid, "network", ""},
			{"name taken", api.CreateSubnetRequest{Network: n.ID, Name: "a", CIDR: "10.0.3.0/24", Zone: "zone-x"}, cloud.Conflict, "name", first.ID},
			{"another tenant's network", api.CreateSubnetRequest{Network: other.ID, Name: "c", CIDR: "10.0.3.0/24", Zone: "zone-x"}, cloud.NotFound, "network", other.ID},
			{"missing network", api.CreateSubnetRequest{Network: "vpc-nope", Name: "c", CIDR: "10.0.3.0/24", Zone: "zone-x"}, cloud.NotFound, "network", "vpc-nope"},
		} {
			before := f.state()
			s, _, err := f.svc.Networks.CreateSubnet(ctx, f.acme, tc.req, "")
			if tc.code == "" {
				if err != nil || s.NetworkID != n.ID || s.Zone != "zone-x" || s.Default {
					t.Errorf("%s: %+v %v", tc.what, s, err)
				}
				continue
			}
			ce := ahCode(t, err, tc.code)
			if ce.Details["field"] != tc.field || !strings.Contains(ce.Message, tc.more) {
				t.Errorf("%s: %v, want field %s and %q", tc.what, err, tc.field, tc.more)
			}
			f.unchanged(before, "refused subnet: "+tc.what)
		}
		// With hosts, a zone must be one of theirs.
		f.putHost("h-a", 1)
		_, _, err := f.svc.Networks.CreateSubnet(ctx, f.acme, api.CreateSubnetRequest{Network: n.ID, Name: "z", CIDR: "10.0.9.0/24", Zone: "nowhere"}, "")
		wantField(t, err, "zone")
		f.subnet(f.acme, n.ID, "z", "10.0.9.0/24", fleet.MockZone)
	})
}

func TestAuthorizeRevokeRules(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		g := f.group(f.acme, n.ID, "web")
		peer := f.group(f.acme, n.ID, "peer")
		far := f.group(f.acme, f.network(f.acme, "far", "10.9.0.0/16").ID, "far")
		theirs := f.group(f.globex, f.network(f.globex, "x", "10.0.0.0/16").ID, "theirs")
		if len(g.Ingress) != 0 || len(g.Egress) != 1 || g.Egress[0].CIDR != "0.0.0.0/0" {
			t.Fatalf("a new group: %+v", g)
		}
		in := func(proto string, from, to int, cidr, group string) api.AuthorizeRequest {
			return api.AuthorizeRequest{Direction: api.Ingress, Protocol: proto, FromPort: from, ToPort: to, CIDR: cidr, Group: group}
		}
		for _, tc := range []struct {
			what  string
			req   api.AuthorizeRequest
			code  cloud.Code
			field string
		}{
			{"tcp 22 from anywhere", in("tcp", 22, 22, "0.0.0.0/0", ""), "", ""},
			{"udp range from a group", in("udp", 8000, 8100, "", peer.ID), "", ""},
			{"all from itself", in("all", 0, 0, "", g.ID), "", ""},
			{"icmp from a block", in("ICMP", 0, 0, "192.168.0.0/16", ""), "", ""},
			{"egress tcp", api.AuthorizeRequest{Direction: api.Egress, Protocol: "tcp", FromPort: 443, ToPort: 443, CIDR: "10.0.0.0/8"}, "", ""},
			{"duplicate", in("tcp", 22, 22, "0.0.0.0/0", ""), cloud.Conflict, ""},
			{"no direction", api.AuthorizeRequest{Protocol: "tcp", FromPort: 1, ToPort: 1, CIDR: "0.0.0.0/0"}, cloud.Invalid, "direction"},
			{"unknown protocol", in("sctp", 1, 1, "0.0.0.0/0", ""), cloud.Invalid, "protocol"},
			{"no protocol", in("", 1, 1, "0.0.0.0/0", ""), cloud.Invalid, "protocol"},
			{"tcp without ports", in("tcp", 0, 0, "0.0.0.0/0", ""), cloud.Invalid, "from_port"},
			{"port 0", in("tcp", 0, 10, "0.0.0.0/0", ""), cloud.Invalid, "from_port"},
			{"port too high", in("tcp", 1, 65536, "0.0.0.0/0", ""), cloud.Invalid, "to_port"},
			{"from after to", in("tcp", 10, 9, "0.0.0.0/0", ""), cloud.Invalid, "to_port"},
			{"icmp with ports", in("icmp", 1, 1, "0.0.0.0/0", ""), cloud.Invalid, "from_port"},
			{"all with ports", in("all", 0, 5, "0.0.0.0/0", ""), cloud.Invalid, "from_port"},
			{"no peer", in("tcp", 1, 1, "", ""), cloud.Invalid, "cidr"},
			{"both peers", in("tcp", 1, 1, "0.0.0.0/0", peer.ID), cloud.Invalid, "cidr"},
			{"bad cidr", in("tcp", 1, 1, "10.0.0.1/8", ""), cloud.Invalid, "cidr"},
			{"ipv6 cidr", in("tcp", 1, 1, "::/0", ""), cloud.Invalid, "cidr"},
			{"another network's group", in("tcp", 1, 1, "", far.ID), cloud.Invalid, "group"},
			{"another tenant's group", in("tcp", 1, 1, "", theirs.ID), cloud.NotFound, "group"},
			{"a missing group", in("tcp", 1, 1, "", "sg-nope"), cloud.NotFound, "group"},
		} {
			before := f.state()
			got, err := f.svc.Networks.Authorize(ctx, f.acme, g.ID, tc.req, 0)
			if tc.code == "" {
				if err != nil || got.Version != g.Version+1 {
					t.Fatalf("%s: %+v %v", tc.what, got, err)
				}
				g = got
				continue
			}
			if ce := ahCode(t, err, tc.code); ce.Details["field"] != nil && ce.Details["field"] != tc.field || tc.field != "" && ce.Details["field"] != tc.field {
				t.Errorf("%s: %v, want field %q", tc.what, err, tc.field)
			}
			f.unchanged(before, "refused rule: "+tc.what)
		}
		if len(g.Ingress) != 4 || len(g.Egress) != 2 || g.Ingress[3].Protocol != "icmp" || !strings.HasPrefix(g.Ingress[0].ID, "sgr-") {
			t.Fatalf("rules after authorize: %+v", g)
		}
		// A stale If-Match is a conflict; the current one works.
		_, err := f.svc.Networks.Authorize(ctx, f.acme, g.ID, in("tcp", 80, 80, "0.0.0.0/0", ""), g.Version-1)
		ahCode(t, err, cloud.Conflict)
		// Revoke by ID, then by fields; what matches nothing is not_found.
		g2, err := f.svc.Networks.Revoke(ctx, f.acme, g.ID, api.RevokeRequest{RuleID: g.Ingress[0].ID}, g.Version)
		if err != nil || len(g2.Ingress) != 3 || g2.Version != g.Version+1 {
			t.Fatalf("revoke by ID: %+v %v", g2, err)
		}
		g3, err := f.svc.Networks.Revoke(ctx, f.acme, g.ID, api.RevokeRequest{AuthorizeRequest: in("udp", 8000, 8100, "", peer.ID)}, 0)
		if err != nil || len(g3.Ingress) != 2 || slices.ContainsFunc(g3.Ingress, func(r cloud.SecurityRule) bool { return r.GroupID == peer.ID }) {
			t.Fatalf("revoke by fields: %+v %v", g3, err)
		}
		for _, req := range []api.RevokeRequest{{RuleID: g.Ingress[0].ID}, {RuleID: "sgr-nope"},
			{AuthorizeRequest: in("tcp", 22, 22, "0.0.0.0/0", "")}, {AuthorizeRequest: api.AuthorizeRequest{Direction: api.Egress, Protocol: "all", CIDR: "10.0.0.0/8"}}} {
			_, err := f.svc.Networks.Revoke(ctx, f.acme, g.ID, req, 0)
			ahCode(t, err, cloud.NotFound)
		}
	})
}

func TestAuthorizeLimit(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		g := f.group(f.acme, f.network(f.acme, "main", "10.0.0.0/16").ID, "many")
		for port := 1; port <= service.MaxRulesPerDirection; port++ {
			if _, err := f.svc.Networks.Authorize(ctx, f.acme, g.ID, api.AuthorizeRequest{Direction: api.Ingress, Protocol: "tcp",
				FromPort: port, ToPort: port, CIDR: "0.0.0.0/0"}, 0); err != nil {
				t.Fatalf("rule %d: %v", port, err)
			}
		}
		before := f.state()
		_, err := f.svc.Networks.Authorize(ctx, f.acme, g.ID, api.AuthorizeRequest{Direction: api.Ingress, Protocol: "tcp",
			FromPort: 9999, ToPort: 9999, CIDR: "0.0.0.0/0"}, 0)
		ahCode(t, err, cloud.QuotaExceeded)
		f.unchanged(before, "the 61st ingress rule")
		// Egress has a budget of its own (one rule so far).
		if _, err := f.svc.Networks.Authorize(ctx, f.acme, g.ID, api.AuthorizeRequest{Direction: api.Egress, Protocol: "udp",
			FromPort: 53, ToPort: 53, CIDR: "0.0.0.0/0"}, 0); err != nil {
			t.Fatal(err)
		}
	})
}

// TestNetworksIdempotency: the same key and request answer the first
// resource (created false); the same key with another request is a
// conflict naming the fields; another tenant's key is its own.
func TestNetworksIdempotency(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		type call func(a service.Actor, variant bool) (string, bool, error)
		for _, tc := range []struct {
			kind  string
			call  call
			field string
		}{
			{"network", func(a service.Actor, v bool) (string, bool, error) {
				req := api.CreateNetworkRequest{Name: "keyed", CIDR: "10.1.0.0/16"}
				if v {
					req.CIDR = "10.2.0.0/16"
				}
				r, c, err := f.svc.Networks.CreateNetwork(ctx, a, req, "k-net")
				return idOf(r), c, err
			}, "cidr"},
			{"subnet", func(a service.Actor, v bool) (string, bool, error) {
				req := api.CreateSubnetRequest{Network: n.ID, Name: "keyed", CIDR: "10.0.1.0/24", Zone: "z"}
				if v {
					req.Zone = "y"
				}
				r, c, err := f.svc.Networks.CreateSubnet(ctx, a, req, "k-sub")
				return idOf(r), c, err
			}, "zone"},
			{"security group", func(a service.Actor, v bool) (string, bool, error) {
				req := api.CreateSecurityGroupRequest{Network: n.ID, Name: "keyed"}
				if v {
					req.Description = "other"
				}
				r, c, err := f.svc.Networks.CreateSecurityGroup(ctx, a, req, "k-sg")
				return idOf(r), c, err
			}, "description"},
		} {
			id, created, err := tc.call(f.acme, false)
			if err != nil || !created {
				t.Fatalf("%s: first create %v %v", tc.kind, created, err)
			}
			before := f.state()
			again, created, err := tc.call(f.acme, false)
			if err != nil || created || again != id {
				t.Errorf("%s: retry answered %s %v %v, want %s", tc.kind, again, created, err, id)
			}
			_, _, err = tc.call(f.acme, true)
			ce := ahCode(t, err, cloud.Conflict)
			if ce.Details["existing_id"] != id || !slices.Contains(ce.Details["fields"].([]string), tc.field) {
				t.Errorf("%s: key reused: %+v", tc.kind, ce)
			}
			f.unchanged(before, tc.kind+" retries")
		}
		// globex's key of the same name is its own.
		if _, created, err := f.svc.Networks.CreateNetwork(ctx, f.globex, api.CreateNetworkRequest{Name: "keyed", CIDR: "10.2.0.0/16"}, "k-net"); err != nil || !created {
			t.Errorf("globex's key: %v %v", created, err)
		}
	})
}

func idOf[T interface{ Owner() string }](r T) string {
	switch v := any(r).(type) {
	case *cloud.Network:
		if v != nil {
			return v.ID
		}
	case *cloud.Subnet:
		if v != nil {
			return v.ID
		}
	case *cloud.SecurityGroup:
		if v != nil {
			return v.ID
		}
	}
	return ""
}

// TestNetworksTenantIsolation: another tenant's network, subnet and group
// answer not_found to every call, and an instance cannot use them.
func TestNetworksTenantIsolation(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		s := f.subnet(f.acme, n.ID, "a", "10.0.1.0/24", "z")
		g := f.group(f.acme, n.ID, "web")
		before := f.state()
		rule := api.AuthorizeRequest{Direction: api.Ingress, Protocol: "tcp", FromPort: 22, ToPort: 22, CIDR: "0.0.0.0/0"}
		for _, tc := range []struct {
			what, kind, id string
			err            error
		}{
			{"get network", "network", n.ID, second(f.svc.Networks.GetNetwork(ctx, f.globex, n.ID))},
			{"delete network", "network", n.ID, f.svc.Networks.DeleteNetwork(ctx, f.globex, n.ID)},
			{"list subnets of the network", "network", n.ID, second(f.svc.Networks.ListSubnets(ctx, f.globex, "", n.ID))},
			{"list groups of the network", "network", n.ID, second(f.svc.Networks.ListSecurityGroups(ctx, f.globex, "", n.ID))},
			{"get subnet", "subnet", s.ID, second(f.svc.Networks.GetSubnet(ctx, f.globex, s.ID))},
			{"delete subnet", "subnet", s.ID, f.svc.Networks.DeleteSubnet(ctx, f.globex, s.ID)},
			{"get group", "security group", g.ID, second(f.svc.Networks.GetSecurityGroup(ctx, f.globex, g.ID))},
			{"delete group", "security group", g.ID, f.svc.Networks.DeleteSecurityGroup(ctx, f.globex, g.ID)},
			{"authorize", "security group", g.ID, second(f.svc.Networks.Authorize(ctx, f.globex, g.ID, rule, 0))},
			{"revoke", "security group", g.ID, second(f.svc.Networks.Revoke(ctx, f.globex, g.ID, api.RevokeRequest{RuleID: g.Egress[0].ID}, 0))},
		} {
			ahHidden(t, tc.err, tc.kind, tc.id)
		}
		f.unchanged(before, "another tenant's calls")
		// globex's lists show none of acme's.
		subs, _ := f.svc.Networks.ListSubnets(ctx, f.globex, "", "")
		gs, _ := f.svc.Networks.ListSecurityGroups(ctx, f.globex, "", "")
		ns, _ := f.svc.Networks.ListNetworks(ctx, f.globex, "")
		for _, id := range append(append(ids(subs), ids(gs)...), ids(ns)...) {
			if id == n.ID || id == s.ID || id == g.ID {
				t.Errorf("globex lists acme's %s", id)
			}
		}
		// globex's instances cannot use acme's subnet or group.
		_, err := f.create(f.globex, s.ID)
		ahCode(t, err, cloud.NotFound)
		own := f.network(f.globex, "own", "10.0.0.0/16")
		ownSub := f.subnet(f.globex, own.ID, "a", "10.0.1.0/24", "z")
		_, err = f.create(f.globex, ownSub.ID, g.ID)
		if ce := ahCode(t, err, cloud.NotFound); ce.Details["field"] != "security_groups[0]" {
			t.Errorf("another tenant's group: %+v", ce)
		}
		// An admin sees and may use acme's.
		if _, err := f.svc.Networks.GetSubnet(ctx, f.admin, s.ID); err != nil {
			t.Errorf("admin: %v", err)
		}
	})
}

func second[T any](_ T, err error) error { return err }

func ids[T interface{ Owner() string }](rs []T) []string {
	var out []string
	for _, r := range rs {
		out = append(out, idOf(r))
	}
	return out
}

var _ = fmt.Sprint
