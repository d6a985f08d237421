package service_test

import (
	"context"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestStackSetRules: SetRules makes a group's rules exactly those given,
// keeping the rules it has and nothing else; bad rules are typed errors
// that change nothing; another tenant's group, or a rule naming another
// tenant's group, is not_found.
func TestStackSetRules(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		g := f.group(f.acme, n.ID, "web")
		peer := f.group(f.acme, n.ID, "peer")
		other := f.group(f.globex, f.network(f.globex, "main", "10.0.0.0/16").ID, "theirs")
		egress := g.Egress // the default: all to 0.0.0.0/0
		ssh := api.AuthorizeRequest{Protocol: "tcp", FromPort: 22, ToPort: 22, CIDR: "10.0.0.0/8"}
		self := api.AuthorizeRequest{Protocol: "ALL", Group: g.ID}

		out, err := f.svc.Networks.SetRules(ctx, f.acme, g.ID, []api.AuthorizeRequest{ssh, self}, []api.AuthorizeRequest{{Protocol: "all", CIDR: "0.0.0.0/0"}})
		if err != nil || len(out.Ingress) != 2 || out.Ingress[1].Protocol != "all" || len(out.Egress) != 1 || out.Egress[0].ID != egress[0].ID {
			t.Fatalf("first set: %+v, %v", out, err)
		}
		kept := out.Ingress[0].ID
		version := out.Version
		// The same rules again: nothing is written.
		if again, err := f.svc.Networks.SetRules(ctx, f.acme, g.ID, []api.AuthorizeRequest{self, ssh}, []api.AuthorizeRequest{{Protocol: "all", CIDR: "0.0.0.0/0"}}); err != nil || again.Version != version {
			t.Fatalf("the same rules again: version %d -> %d, %v", version, again.Version, err)
		}
		// Drop the self rule, add one from the peer group, no egress.
		out, err = f.svc.Networks.SetRules(ctx, f.acme, g.ID, []api.AuthorizeRequest{ssh, {Protocol: "udp", FromPort: 53, ToPort: 53, Group: peer.ID}}, nil)
		if err != nil || len(out.Ingress) != 2 || out.Ingress[0].ID != kept || out.Ingress[1].GroupID != peer.ID || len(out.Egress) != 0 {
			t.Fatalf("second set: %+v, %v", out, err)
		}

		before := f.state()
		for _, tc := range []struct {
			name    string
			ingress []api.AuthorizeRequest
			code    cloud.Code
			field   string
		}{
			{"bad protocol", []api.AuthorizeRequest{{Protocol: "gre", CIDR: "0.0.0.0/0"}}, cloud.Invalid, "ingress[0].protocol"},
			{"no peer", []api.AuthorizeRequest{ssh, {Protocol: "all"}}, cloud.Invalid, "ingress[1].cidr"},
			{"twice", []api.AuthorizeRequest{ssh, ssh}, cloud.Invalid, "ingress[1]"},
			{"another tenant's peer", []api.AuthorizeRequest{{Protocol: "all", Group: other.ID}}, cloud.NotFound, "ingress[0].group"},
		} {
			_, err := f.svc.Networks.SetRules(ctx, f.acme, g.ID, tc.ingress, nil)
			if ce := ahCode(t, err, tc.code); ce.Details["field"] != tc.field {
				t.Errorf("%s: %v names %v, want %s", tc.name, err, ce.Details["field"], tc.field)
			}
		}
		_, err = f.svc.Networks.SetRules(ctx, f.globex, g.ID, nil, nil)
		ahHidden(t, err, "security group", g.ID)
		f.unchanged(before, "refused SetRules")
	})
}
