package service_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// spotOn is a spot request for l4.1x in pools (zones; "" is any zone) on
// subnet with groups.
func spotOn(subnet string, groups []string, zones ...string) api.CreateSpotRequestRequest {
	r := api.CreateSpotRequestRequest{Subnet: subnet, SecurityGroups: groups}
	for _, z := range zones {
		r.Pools = append(r.Pools, cloud.Pool{Offering: "l4.1x", Zone: z})
	}
	return r
}

// TestSpotRequestNetwork: a spot request's subnet and groups are checked
// as an instance create's (the tenant's, of the subnet's network, 1 to 5)
// and the subnet's zone must suit every pool; a refused request writes
// nothing, another tenant's subnet or group is not_found; the launch is
// on the subnet with the groups, in the subnet's zone.
func TestSpotRequestNetwork(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		s := f.subnet(f.acme, n.ID, "a", "10.0.1.0/24", "zone-a")
		web, db := f.group(f.acme, n.ID, "web"), f.group(f.acme, n.ID, "db")
		far := f.network(f.acme, "far", "10.9.0.0/16")
		farGroup := f.group(f.acme, far.ID, "x")
		gn := f.network(f.globex, "theirs", "10.0.0.0/16")
		theirSub, theirGroup := f.subnet(f.globex, gn.ID, "a", "10.0.1.0/24", "zone-a"), f.group(f.globex, gn.ID, "web")
		var six []string
		for i := range 6 {
			six = append(six, f.group(f.acme, n.ID, "g"+string(rune('0'+i))).ID)
		}
		dflt := f.defaultGroupOf(f.acme, n.ID)

		for _, tc := range []struct {
			what   string
			req    api.CreateSpotRequestRequest
			code   cloud.Code
			field  string
			sub    *cloud.Subnet
			groups []string
			zones  []string
		}{
			{what: "subnet and groups, a pool of any zone", req: spotOn(s.ID, []string{web.ID, db.ID}, "zone-a", ""),
				sub: s, groups: []string{web.ID, db.ID}, zones: []string{"zone-a"}},
			{what: "subnet, default group", req: spotOn(s.ID, nil, "zone-a"), sub: s, groups: []string{dflt.ID}, zones: []string{"zone-a"}},
			{what: "a pool of any zone first", req: spotOn(s.ID, []string{web.ID}, "", "zone-a"), sub: s, groups: []string{web.ID}, zones: []string{"zone-a"}},
			{what: "five groups", req: spotOn(s.ID, six[:5], "zone-a"), sub: s, groups: six[:5], zones: []string{"zone-a"}},

			{what: "another tenant's subnet", req: spotOn(theirSub.ID, nil, "zone-a"), code: cloud.NotFound, field: "subnet"},
			{what: "another tenant's group", req: spotOn(s.ID, []string{theirGroup.ID}, "zone-a"), code: cloud.NotFound, field: "security_groups[0]"},
			{what: "a missing subnet", req: spotOn("subnet-nope", nil, "zone-a"), code: cloud.NotFound, field: "subnet"},
			{what: "a missing group", req: spotOn(s.ID, []string{web.ID, "sg-nope"}, "zone-a"), code: cloud.NotFound, field: "security_groups[1]"},
			{what: "another network's group", req: spotOn(s.ID, []string{farGroup.ID}, "zone-a"), code: cloud.Invalid, field: "security_groups[0]"},
			{what: "six groups", req: spotOn(s.ID, six, "zone-a"), code: cloud.Invalid, field: "security_groups"},
			{what: "a group twice", req: spotOn(s.ID, []string{web.ID, web.ID}, "zone-a"), code: cloud.Invalid, field: "security_groups[1]"},
			{what: "the first pool in another zone", req: spotOn(s.ID, nil, "zone-b"), code: cloud.Invalid, field: "pools[0].zone"},
			{what: "a backup pool in another zone", req: spotOn(s.ID, nil, "zone-a", "", "zone-b"), code: cloud.Invalid, field: "pools[2].zone"},
			// Without a subnet the groups are the default network's, as
			// for an instance create.
			{what: "a network's group, default subnet", req: spotOn("", []string{web.ID}, "zone-a"), code: cloud.Invalid, field: "security_groups[0]"},
		} {
			before := f.state()
			r, created, err := f.svc.Spot.Create(ctx, f.acme, tc.req, "")
			if tc.code != "" {
				if ce := ahCode(t, err, tc.code); ce.Details["field"] != tc.field {
					t.Errorf("%s: %v, want field %s", tc.what, err, tc.field)
				}
				if created || r != nil {
					t.Errorf("%s: created %v %+v", tc.what, created, r)
				}
				f.unchanged(before, "refused spot request: "+tc.what)
				continue
			}
			if err != nil || !created || r.Subnet != tc.req.Subnet || !slices.Equal(r.SecurityGroups, tc.req.SecurityGroups) {
				t.Errorf("%s: %+v %v", tc.what, r, err)
				continue
			}
			in := f.instance(r.InstanceID)
			if in.SubnetID != tc.sub.ID || in.NetworkID != n.ID || !slices.Equal(in.SecurityGroupIDs, tc.groups) ||
				!slices.Equal(in.Zones, tc.zones) || in.SpotRequestID != r.ID ||
				!netip.MustParsePrefix(tc.sub.CIDR).Contains(netip.MustParseAddr(in.PrivateAddress)) {
				t.Errorf("%s: launch %+v", tc.what, in)
			}
			// The request reads back with its network.
			got, err := f.svc.Spot.Get(ctx, f.acme, r.ID)
			if err != nil || got.Subnet != r.Subnet || !slices.Equal(got.SecurityGroups, r.SecurityGroups) {
				t.Errorf("%s: read back %+v %v", tc.what, got, err)
			}
		}
		// Without a subnet the launch is on the default subnet, of any
		// zone, so pools in two zones are fine.
		r, _, err := f.svc.Spot.Create(ctx, f.acme, spotOn("", nil, "zone-b", "zone-a"), "")
		if err != nil || r.Subnet != "" || r.SecurityGroups != nil {
			t.Fatalf("default network: %+v %v", r, err)
		}
		if in := f.instance(r.InstanceID); in.SubnetID == "" || in.SubnetID == s.ID || !strings.HasPrefix(in.PrivateAddress, "172.31.") ||
			!slices.Equal(in.Zones, []string{"zone-b"}) {
			t.Errorf("default network launch %+v", in)
		}
		// globex sees none of acme's requests.
		if rs, err := f.svc.Spot.List(ctx, f.globex, ""); err != nil || len(rs) != 0 {
			t.Errorf("globex lists %+v %v", rs, err)
		}
	})
}

// TestSpotRequestNetworkIdempotency: a retry with the same key answers the
// first request and launches nothing; the key with another subnet, other
// groups, or without them, is a conflict naming the field.
func TestSpotRequestNetworkIdempotency(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		s, s2 := f.subnet(f.acme, n.ID, "a", "10.0.1.0/24", "zone-a"), f.subnet(f.acme, n.ID, "b", "10.0.2.0/24", "zone-a")
		web, db := f.group(f.acme, n.ID, "web"), f.group(f.acme, n.ID, "db")
		req := spotOn(s.ID, []string{web.ID}, "zone-a")
		first, created, err := f.svc.Spot.Create(ctx, f.acme, req, "key-1")
		if err != nil || !created {
			t.Fatal(err)
		}
		before := f.state()
		again, created, err := f.svc.Spot.Create(ctx, f.acme, req, "key-1")
		if err != nil || created || again.ID != first.ID || again.InstanceID != first.InstanceID {
			t.Errorf("retry: %+v %v %v", again, created, err)
		}
		for _, tc := range []struct {
			field string
			req   api.CreateSpotRequestRequest
		}{
			{"subnet", spotOn(s2.ID, []string{web.ID}, "zone-a")},
			{"subnet", spotOn("", []string{web.ID}, "zone-a")},
			{"security_groups", spotOn(s.ID, []string{db.ID}, "zone-a")},
			{"security_groups", spotOn(s.ID, []string{web.ID, db.ID}, "zone-a")},
			{"security_groups", spotOn(s.ID, nil, "zone-a")},
		} {
			_, created, err := f.svc.Spot.Create(ctx, f.acme, tc.req, "key-1")
			ce := ahCode(t, err, cloud.Conflict)
			if fields, _ := ce.Details["fields"].([]string); created || !slices.Contains(fields, tc.field) {
				t.Errorf("%s: %+v", tc.field, ce)
			}
		}
		f.unchanged(before, "retries")
	})
}

// TestSpotRelaunchNetwork: the market's relaunch of a persistent request
// is on its subnet with its groups, in another of the subnet's addresses;
// a relaunch into a full subnet is refused (recorded on the request,
// which stays open) and does not fail the market's plan.
func TestSpotRelaunchNetwork(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		market := service.Controller("market")
		n := f.network(f.acme, "small", "10.0.0.0/28")
		s := f.subnet(f.acme, n.ID, "all", "10.0.0.0/28", "zone-a")
		web := f.group(f.acme, n.ID, "web")
		req := spotOn(s.ID, []string{web.ID}, "zone-a", "")
		req.Type = cloud.SpotPersistent
		r, _, err := f.svc.Spot.Create(ctx, f.acme, req, "")
		if err != nil {
			t.Fatal(err)
		}
		first := f.instance(r.InstanceID)
		apply := func(r *cloud.SpotRequest, in *cloud.Instance, terminate bool) {
			t.Helper()
			mv := service.SpotMove{RequestID: r.ID, Version: r.Version, InstanceID: in.ID, InstanceVersion: in.Version,
				Launch: &service.SpotRelaunch{Pool: r.Pools[1], Why: "test"}}
			if terminate {
				mv.Instance = &service.Move{To: cloud.Terminated, Reason: "relaunch"}
			}
			if _, err := service.ApplyMarketPlan(ctx, st, catalog.Default(), market, &service.MarketPlan{Moves: []service.SpotMove{mv}}, f.clock.Now()); err != nil {
				t.Fatalf("apply: %v", err)
			}
		}
		apply(r, first, true)
		r, _ = f.svc.Spot.Get(ctx, f.acme, r.ID)
		next := f.instance(r.InstanceID)
		if next.ID == first.ID || next.SubnetID != s.ID || !slices.Equal(next.SecurityGroupIDs, []string{web.ID}) ||
			!slices.Equal(next.Zones, []string{"zone-a"}) || next.PrivateAddress == "" || next.PrivateAddress == first.PrivateAddress {
			t.Errorf("relaunch %+v after %+v", next, first)
		}

		// Fill the subnet's other ten addresses, then relaunch while the
		// current launch still holds its own.
		for i := range 10 {
			if _, err := f.create(f.acme, s.ID); err != nil {
				t.Fatalf("create %d: %v", i, err)
			}
		}
		before := f.state()
		apply(r, next, false)
		got, _ := f.svc.Spot.Get(ctx, f.acme, r.ID)
		if got.State != cloud.SpotOpen || !strings.HasPrefix(got.Reason, service.ReasonRelaunchRefused) || !strings.Contains(got.Reason, s.ID) ||
			got.InstanceID != next.ID {
			t.Errorf("relaunch into a full subnet: %+v", got)
		}
		if after := f.state(); after.Instances != before.Instances || after.SpotRequests != before.SpotRequests {
			t.Errorf("a refused relaunch: %+v -> %+v", before, after)
		}
	})
}

// TestSpotNetworkDeleteRefusals: a subnet, a group or a network that a
// spot request which may still launch names cannot be deleted (a conflict
// naming the request, nothing changed), as a volume it names cannot;
// once the request is cancelled (its instance terminated) they can.
func TestSpotNetworkDeleteRefusals(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		s := f.subnet(f.acme, n.ID, "a", "10.0.1.0/24", "zone-a")
		web := f.group(f.acme, n.ID, "web")
		r, _, err := f.svc.Spot.Create(ctx, f.acme, spotOn(s.ID, []string{web.ID}, "zone-a"), "")
		if err != nil {
			t.Fatal(err)
		}
		// The launch holds the subnet as any instance does; terminated, the
		// request alone still holds it.
		if _, err := f.svc.Instances.Act(ctx, f.acme, r.InstanceID, service.Terminate, 0); err != nil {
			t.Fatal(err)
		}
		if got, _ := f.svc.Spot.Get(ctx, f.acme, r.ID); got.State == cloud.SpotCancelled || got.State == cloud.SpotClosed {
			t.Fatalf("the request after its instance's terminate: %+v", got)
		}
		before := f.state()
		for _, tc := range []struct {
			what string
			del  func() error
		}{
			{"subnet", func() error { return f.svc.Networks.DeleteSubnet(ctx, f.acme, s.ID) }},
			{"group", func() error { return f.svc.Networks.DeleteSecurityGroup(ctx, f.acme, web.ID) }},
			{"network", func() error { return f.svc.Networks.DeleteNetwork(ctx, f.acme, n.ID) }},
		} {
			ce := ahCode(t, tc.del(), cloud.Conflict)
			if ce.Details["spot_request_id"] != r.ID || !strings.Contains(ce.Message, "cancel the request") {
				t.Errorf("%s: %+v", tc.what, ce)
			}
		}
		f.unchanged(before, "refused deletes")
		if _, err := f.svc.Spot.Cancel(ctx, f.acme, r.ID, false, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.Networks.DeleteSecurityGroup(ctx, f.acme, web.ID); err != nil {
			t.Errorf("delete the group after the cancel: %v", err)
		}
		if err := f.svc.Networks.DeleteSubnet(ctx, f.acme, s.ID); err != nil {
			t.Errorf("delete the subnet after the cancel: %v", err)
		}
		if err := f.svc.Networks.DeleteNetwork(ctx, f.acme, n.ID); err != nil {
			t.Errorf("delete the network after the cancel: %v", err)
		}
	})
}
