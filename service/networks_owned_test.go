package service_test

import (
	"context"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestOwnedRules: a rule made for an owner is answered again to the same
// owner (one rule, one event); only its owner reads, describes and
// revokes it (another owner, and another tenant, get not_found and change
// nothing); a group's own rule list keeps it, refuses to give it twice,
// and counts it towards the limit.
func TestOwnedRules(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		g := f.group(f.acme, n.ID, "web")
		ssh := api.AuthorizeRequest{Direction: api.Ingress, Protocol: "tcp", FromPort: 22, ToPort: 22, CIDR: "192.0.2.0/24"}
		_, r, err := f.svc.Networks.AuthorizeOwned(ctx, f.acme, g.ID, ssh, "stack-a")
		if err != nil || r.Owner != "stack-a" || r.ID == "" {
			t.Fatalf("authorize: %+v %v", r, err)
		}
		before := f.state()
		if _, again, err := f.svc.Networks.AuthorizeOwned(ctx, f.acme, g.ID, ssh, "stack-a"); err != nil || again.ID != r.ID {
			t.Errorf("the same owner again: %+v %v", again, err)
		}
		f.unchanged(before, "the same owner's authorize again")
		// Another owner's identical rule allows what it does already.
		if _, _, err := f.svc.Networks.AuthorizeOwned(ctx, f.acme, g.ID, ssh, "stack-b"); cloud.ErrorCode(err) != cloud.Conflict {
			t.Errorf("another owner, the same rule: %v", err)
		}
		for _, tc := range []struct {
			what  string
			call  func() error
			quiet bool
		}{
			{"another owner reads", func() error { _, _, err := f.svc.Networks.OwnedRule(ctx, f.acme, g.ID, r.ID, "stack-b"); return err }, true},
			{"another owner revokes", func() error { return f.svc.Networks.RevokeOwned(ctx, f.acme, g.ID, r.ID, "stack-b") }, true},
			{"no owner revokes", func() error { return f.svc.Networks.RevokeOwned(ctx, f.acme, g.ID, r.ID, "") }, true},
			{"another owner describes", func() error { return f.svc.Networks.DescribeOwned(ctx, f.acme, g.ID, r.ID, "stack-b", "x") }, true},
			{"another tenant revokes", func() error { return f.svc.Networks.RevokeOwned(ctx, f.globex, g.ID, r.ID, "stack-a") }, true},
			{"another tenant authorizes", func() error {
				_, _, err := f.svc.Networks.AuthorizeOwned(ctx, f.globex, g.ID, ssh, "stack-g")
				return err
			}, true},
		} {
			before := f.state()
			if err := tc.call(); cloud.ErrorCode(err) != cloud.NotFound {
				t.Errorf("%s: %v, want not_found", tc.what, err)
			}
			f.unchanged(before, tc.what)
		}
		if err := f.svc.Networks.DescribeOwned(ctx, f.acme, g.ID, r.ID, "stack-a", "admins"); err != nil {
			t.Fatal(err)
		}
		if dir, got, err := f.svc.Networks.OwnedRule(ctx, f.acme, g.ID, r.ID, "stack-a"); err != nil || dir != api.Ingress || got.ID != r.ID || got.Description != "admins" {
			t.Errorf("read after describe: %s %+v %v", dir, got, err)
		}

		// The group's own list keeps the owned rule, and will not give
		// it twice.
		web := api.AuthorizeRequest{Protocol: "tcp", FromPort: 80, ToPort: 80, CIDR: "0.0.0.0/0"}
		out, err := f.svc.Networks.SetRules(ctx, f.acme, g.ID, []api.AuthorizeRequest{web}, nil)
		if err != nil || len(out.Ingress) != 2 || len(out.Egress) != 0 {
			t.Fatalf("set rules: %+v %v", out, err)
		}
		before = f.state()
		_, err = f.svc.Networks.SetRules(ctx, f.acme, g.ID, []api.AuthorizeRequest{web, ssh}, nil)
		if ce := ahCode(t, err, cloud.Conflict); ce.Details["field"] != "ingress[1]" || ce.Details["rule_id"] != r.ID {
			t.Errorf("a listed rule an owner has: %+v", ce)
		}
		var many []api.AuthorizeRequest
		for p := 1000; len(many) < 60; p++ {
			many = append(many, api.AuthorizeRequest{Protocol: "tcp", FromPort: p, ToPort: p, CIDR: "0.0.0.0/0"})
		}
		if _, err := f.svc.Networks.SetRules(ctx, f.acme, g.ID, many, nil); cloud.ErrorCode(err) != cloud.QuotaExceeded {
			t.Errorf("60 listed rules and an owned one: %v", err)
		}
		f.unchanged(before, "refused rule lists")

		if err := f.svc.Networks.RevokeOwned(ctx, f.acme, g.ID, r.ID, "stack-a"); err != nil {
			t.Fatal(err)
		}
		if got, _ := f.svc.Networks.GetSecurityGroup(ctx, f.acme, g.ID); len(got.Ingress) != 1 || got.Ingress[0].FromPort != 80 {
			t.Errorf("after the owner's revoke: %+v", got.Ingress)
		}
	})
}
