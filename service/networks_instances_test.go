package service_test

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestDefaultNetwork: a tenant is made with its default network
// (172.31.0.0/16), subnet (any zone) and group, silently; its instances
// without a subnet use them and place as they did before networks (no
// zone added). A tenant made before default networks came with tenants
// gets its own from its first create.
func TestDefaultNetwork(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		if rows := f.state(); rows.Networks != 2 || rows.Subnets != 2 || rows.SecurityGroups != 2 {
			t.Errorf("two new tenants: %+v, want a network, subnet and group each", rows)
		}
		before := f.state()
		a, err := f.create(f.acme, "")
		if err != nil {
			t.Fatal(err)
		}
		if after := f.state(); after.Networks != before.Networks || after.Events != before.Events+1 {
			t.Errorf("first create: %+v -> %+v, want no network and only the instance's event", before, after)
		}
		b, err := f.create(f.acme, "")
		if err != nil {
			t.Fatal(err)
		}
		ns, err := f.svc.Networks.ListNetworks(ctx, f.acme, "")
		if err != nil || len(ns) != 1 {
			t.Fatalf("networks %+v %v", ns, err)
		}
		n := ns[0]
		subs, _ := f.svc.Networks.ListSubnets(ctx, f.acme, "", n.ID)
		g := f.defaultGroupOf(f.acme, n.ID)
		if !n.Default || n.Name != "default" || n.CIDR != service.DefaultNetworkCIDR || len(subs) != 1 ||
			!subs[0].Default || subs[0].Zone != "" || subs[0].CIDR != service.DefaultNetworkCIDR {
			t.Fatalf("default network %+v, subnets %+v", n, subs)
		}
		for i, in := range []*cloud.Instance{a, b} {
			want := []string{"172.31.0.4", "172.31.0.5"}[i]
			if in.NetworkID != n.ID || in.SubnetID != subs[0].ID || !slices.Equal(in.SecurityGroupIDs, []string{g.ID}) ||
				in.PrivateAddress != want || len(in.Zones) != 0 {
				t.Errorf("instance %d: %+v, want address %s", i, in, want)
			}
		}
		// globex's default network is its own, with the same CIDR.
		gl, err := f.create(f.globex, "")
		if err != nil || gl.NetworkID == n.ID || gl.PrivateAddress != "172.31.0.4" {
			t.Errorf("globex: %+v %v", gl, err)
		}
		// A tenant without one (made before tenants came with their
		// default network) gets it from its first create, and its
		// listing makes it too.
		old := f.legacyTenant("old")
		before = f.state()
		in, err := f.create(old, "")
		if err != nil {
			t.Fatal(err)
		}
		if after := f.state(); after.Networks != before.Networks+1 || after.Subnets != before.Subnets+1 ||
			after.SecurityGroups != before.SecurityGroups+1 || after.Events != before.Events+1 {
			t.Errorf("first create of a tenant without a network: %+v -> %+v, want a network, subnet and group and only the instance's event", before, after)
		}
		if in.PrivateAddress != "172.31.0.4" || in.NetworkID == n.ID || in.NetworkID == gl.NetworkID {
			t.Errorf("old tenant's instance: %+v", in)
		}
		older := f.legacyTenant("older")
		ns, err = f.svc.Networks.ListNetworks(ctx, f.admin, older.TenantID)
		if err != nil || len(ns) != 1 || !ns[0].Default || ns[0].TenantID != older.TenantID {
			t.Errorf("admin's listing of a tenant without a network: %+v %v", ns, err)
		}
	})
}

// legacyTenant makes a tenant with a member and a quota as tenants were
// made before default networks came with them: in the store, without a
// network. It answers the member.
func (f nsFixture) legacyTenant(name string) service.Actor {
	f.t.Helper()
	ctx := context.Background()
	tn, u := "tn-"+name, "u-"+name
	err := f.st.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: tn, Name: name, CreatedAt: f.clock.Now()}); err != nil {
			return err
		}
		if err := tx.PutQuota(ctx, service.DefaultQuota(tn)); err != nil {
			return err
		}
		return tx.CreateUser(ctx, &cloud.User{ID: u, TenantID: tn, Name: "user-" + name, Role: cloud.RoleMember, CreatedAt: f.clock.Now()})
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return service.Actor{ID: u, TenantID: tn, Role: cloud.RoleMember}
}

// TestDefaultNetworkRace: concurrent first creates of a tenant without a
// default network end with one, every instance on it with its own
// address: of a tenant with a quota (whose lock makes them take turns)
// and of one without (the operator's, whose creates race and retry).
func TestDefaultNetworkRace(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		for _, a := range []service.Actor{f.legacyTenant("old"), f.admin} {
			raceDefault(t, f, a)
		}
	})
}

func raceDefault(t *testing.T, f nsFixture, a service.Actor) {
	{
		const n = 8
		before := f.state()
		var wg sync.WaitGroup
		ins := make([]*cloud.Instance, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ins[i], errs[i] = f.create(a, "")
			}()
		}
		wg.Wait()
		addrs := map[string]bool{}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("create %d: %v", i, errs[i])
			}
			if addrs[ins[i].PrivateAddress] || ins[i].NetworkID != ins[0].NetworkID {
				t.Errorf("instance %d: %+v", i, ins[i])
			}
			addrs[ins[i].PrivateAddress] = true
		}
		if rows := f.state(); rows.Networks != before.Networks+1 || rows.Subnets != before.Subnets+1 || rows.SecurityGroups != before.SecurityGroups+1 {
			t.Errorf("after %d concurrent first creates of %s: %+v -> %+v", n, a.TenantID, before, rows)
		}
	}
}

// TestInstanceNetworkChoice: the request's subnet and groups, their
// checks, and the subnet's zone as the instance's.
func TestInstanceNetworkChoice(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		s := f.subnet(f.acme, n.ID, "a", "10.0.1.0/24", "zone-a")
		far := f.network(f.acme, "far", "10.9.0.0/16")
		farSub := f.subnet(f.acme, far.ID, "a", "10.9.1.0/24", "zone-a")
		web, db := f.group(f.acme, n.ID, "web"), f.group(f.acme, n.ID, "db")
		farGroup := f.group(f.acme, far.ID, "x")
		var six []string
		for i := range 6 {
			six = append(six, f.group(f.acme, n.ID, "g"+string(rune('0'+i))).ID)
		}
		dflt := f.defaultGroupOf(f.acme, n.ID)
		for _, tc := range []struct {
			what          string
			req           api.CreateInstanceRequest
			code          cloud.Code
			field         string
			groups, zones []string
		}{
			{"subnet, default group", api.CreateInstanceRequest{Subnet: s.ID}, "", "", []string{dflt.ID}, []string{"zone-a"}},
			{"two groups", api.CreateInstanceRequest{Subnet: s.ID, SecurityGroups: []string{web.ID, db.ID}}, "", "", []string{web.ID, db.ID}, []string{"zone-a"}},
			{"five groups", api.CreateInstanceRequest{Subnet: s.ID, SecurityGroups: six[:5]}, "", "", six[:5], []string{"zone-a"}},
			{"zones that include the subnet's", api.CreateInstanceRequest{Subnet: s.ID, Zones: []string{"zone-b", "zone-a"}}, "", "", []string{dflt.ID}, []string{"zone-a"}},
			{"six groups", api.CreateInstanceRequest{Subnet: s.ID, SecurityGroups: six}, cloud.Invalid, "security_groups", nil, nil},
			{"a group twice", api.CreateInstanceRequest{Subnet: s.ID, SecurityGroups: []string{web.ID, web.ID}}, cloud.Invalid, "security_groups[1]", nil, nil},
			{"another network's group", api.CreateInstanceRequest{Subnet: s.ID, SecurityGroups: []string{farGroup.ID}}, cloud.Invalid, "security_groups[0]", nil, nil},
			{"a group of a network, default subnet", api.CreateInstanceRequest{SecurityGroups: []string{web.ID}}, cloud.Invalid, "security_groups[0]", nil, nil},
			{"a missing group", api.CreateInstanceRequest{Subnet: s.ID, SecurityGroups: []string{"sg-nope"}}, cloud.NotFound, "security_groups[0]", nil, nil},
			{"a missing subnet", api.CreateInstanceRequest{Subnet: "subnet-nope"}, cloud.NotFound, "subnet", nil, nil},
			{"zones that exclude the subnet's", api.CreateInstanceRequest{Subnet: s.ID, Zones: []string{"zone-b"}}, cloud.Invalid, "zones", nil, nil},
			{"the far subnet, this network's group", api.CreateInstanceRequest{Subnet: farSub.ID, SecurityGroups: []string{web.ID}}, cloud.Invalid, "security_groups[0]", nil, nil},
		} {
			tc.req.Offering = "l4.1x"
			before := f.state()
			in, _, err := f.svc.Instances.Create(ctx, f.acme, tc.req, "")
			if tc.code == "" {
				if err != nil || in.SubnetID != tc.req.Subnet || in.NetworkID != n.ID || !slices.Equal(in.SecurityGroupIDs, tc.groups) ||
					!slices.Equal(in.Zones, tc.zones) || !netip.MustParsePrefix(s.CIDR).Contains(netip.MustParseAddr(in.PrivateAddress)) {
					t.Errorf("%s: %+v %v", tc.what, in, err)
				}
				continue
			}
			if ce := ahCode(t, err, tc.code); ce.Details["field"] != tc.field {
				t.Errorf("%s: %v, want field %s", tc.what, err, tc.field)
			}
			f.unchanged(before, "refused create: "+tc.what)
		}
	})
}

// TestInstanceIdempotencyNetwork: a retry with the same key answers the
// first instance (its address too); another subnet or groups under the
// key is a conflict naming them.
func TestInstanceIdempotencyNetwork(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		s := f.subnet(f.acme, n.ID, "a", "10.0.1.0/24", "zone-a")
		s2 := f.subnet(f.acme, n.ID, "b", "10.0.2.0/24", "zone-a")
		web := f.group(f.acme, n.ID, "web")
		req := api.CreateInstanceRequest{Offering: "l4.1x", Subnet: s.ID, SecurityGroups: []string{web.ID}}
		first, created, err := f.svc.Instances.Create(ctx, f.acme, req, "key-1")
		if err != nil || !created {
			t.Fatal(err)
		}
		before := f.state()
		again, created, err := f.svc.Instances.Create(ctx, f.acme, req, "key-1")
		if err != nil || created || again.ID != first.ID || again.PrivateAddress != first.PrivateAddress {
			t.Errorf("retry: %+v %v %v", again, created, err)
		}
		for _, tc := range []struct {
			field string
			req   api.CreateInstanceRequest
		}{
			{"subnet", api.CreateInstanceRequest{Offering: "l4.1x", Subnet: s2.ID, SecurityGroups: []string{web.ID}}},
			{"security_groups", api.CreateInstanceRequest{Offering: "l4.1x", Subnet: s.ID, SecurityGroups: []string{f.defaultGroupOf(f.acme, n.ID).ID}}},
		} {
			_, _, err := f.svc.Instances.Create(ctx, f.acme, tc.req, "key-1")
			if ce := ahCode(t, err, cloud.Conflict); !slices.Contains(ce.Details["fields"].([]string), tc.field) {
				t.Errorf("%s: %+v", tc.field, ce)
			}
		}
		f.unchanged(before, "retries")
	})
}

// TestAddressAllocation: in a /28 the 11 usable addresses are .4 to .14
// (base, +1, +2, +3 and broadcast reserved); an address is kept across
// stop and start; the 12th create is insufficient_capacity naming the
// subnet; a terminated instance's address is given again.
func TestAddressAllocation(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 1)
		n := f.network(f.acme, "small", "10.0.0.0/28")
		s := f.subnet(f.acme, n.ID, "all", "10.0.0.0/28", "zone-a")
		var ins []*cloud.Instance
		for i := range 11 {
			in, err := f.create(f.acme, s.ID)
			if err != nil {
				t.Fatalf("create %d: %v", i, err)
			}
			if want := netip.AddrFrom4([4]byte{10, 0, 0, byte(4 + i)}).String(); in.PrivateAddress != want {
				t.Errorf("create %d: address %s, want %s", i, in.PrivateAddress, want)
			}
			ins = append(ins, in)
		}
		before := f.state()
		_, err := f.create(f.acme, s.ID)
		ce := ahCode(t, err, cloud.InsufficientCapacity)
		if ce.Details["subnet_id"] != s.ID || !strings.Contains(ce.Message, s.ID) || !strings.Contains(ce.Message, "10.0.0.0/28") {
			t.Errorf("exhausted: %+v", ce)
		}
		f.unchanged(before, "a create in a full subnet")

		// Stop and start keep the address.
		kept := ins[3]
		testkit.Walk(t, st, kept.ID, cloud.Stopped, testkit.Via{Host: "h-a"}, f.clock.Now())
		if _, err := f.svc.Instances.Act(ctx, f.acme, kept.ID, service.Start, 0); err != nil {
			t.Fatal(err)
		}
		if got := f.instance(kept.ID); got.PrivateAddress != kept.PrivateAddress || got.State != cloud.Pending {
			t.Errorf("after stop and start: %s %s, want %s", got.State, got.PrivateAddress, kept.PrivateAddress)
		}
		// Terminate one: its address is free again, and the next create
		// gets it.
		gone := ins[6]
		if _, err := f.svc.Instances.Act(ctx, f.acme, gone.ID, service.Terminate, 0); err != nil {
			t.Fatal(err)
		}
		in, err := f.create(f.acme, s.ID)
		if err != nil || in.PrivateAddress != gone.PrivateAddress {
			t.Fatalf("after a terminate: %+v %v, want %s", in, err, gone.PrivateAddress)
		}
	})
}

// TestAddressProperty: over random creates and terminates in a /28, no
// two instances that are not terminated share an address, every address
// is usable, and a create fails exactly when 11 instances hold one.
func TestAddressProperty(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		s := f.subnet(f.acme, f.network(f.acme, "p", "10.7.0.16/28").ID, "p", "10.7.0.16/28", "z")
		rng := rand.New(rand.NewPCG(19, 28))
		var live []*cloud.Instance
		for step := range 80 {
			if len(live) > 0 && rng.IntN(5) < 2 {
				i := rng.IntN(len(live))
				if _, err := f.svc.Instances.Act(ctx, f.acme, live[i].ID, service.Terminate, 0); err != nil {
					t.Fatalf("step %d: terminate: %v", step, err)
				}
				live = slices.Delete(live, i, i+1)
				continue
			}
			in, err := f.create(f.acme, s.ID)
			if len(live) == 11 {
				ahCode(t, err, cloud.InsufficientCapacity)
				continue
			}
			if err != nil {
				t.Fatalf("step %d with %d live: %v", step, len(live), err)
			}
			live = append(live, in)
			seen := map[string]bool{}
			for _, o := range live {
				a := netip.MustParseAddr(o.PrivateAddress).As4()
				if seen[o.PrivateAddress] || a[3] < 16+4 || a[3] > 16+14 || a[2] != 0 {
					t.Fatalf("step %d: address %s given twice or outside the usable range", step, o.PrivateAddress)
				}
				seen[o.PrivateAddress] = true
			}
		}
	})
}

// TestNetworkDeleteRefusals: a network, subnet or group in use is a
// conflict naming the instances (or rules); the default subnet and group
// go with their network only; a network's delete takes its subnets and
// groups.
func TestNetworkDeleteRefusals(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		s := f.subnet(f.acme, n.ID, "a", "10.0.1.0/24", "z")
		web, named := f.group(f.acme, n.ID, "web"), f.group(f.acme, n.ID, "named")
		g, err := f.svc.Networks.Authorize(ctx, f.acme, web.ID, api.AuthorizeRequest{Direction: api.Ingress, Protocol: "tcp",
			FromPort: 5432, ToPort: 5432, Group: named.ID}, 0)
		if err != nil {
			t.Fatal(err)
		}
		in, err := f.create(f.acme, s.ID, web.ID)
		if err != nil {
			t.Fatal(err)
		}
		before := f.state()
		for _, tc := range []struct {
			what, want string
			err        error
		}{
			{"network", in.ID, f.svc.Networks.DeleteNetwork(ctx, f.acme, n.ID)},
			{"subnet", in.ID, f.svc.Networks.DeleteSubnet(ctx, f.acme, s.ID)},
			{"group with a member", in.ID, f.svc.Networks.DeleteSecurityGroup(ctx, f.acme, web.ID)},
			{"group a rule names", web.ID + "/" + g.Ingress[0].ID, f.svc.Networks.DeleteSecurityGroup(ctx, f.acme, named.ID)},
			{"default group", n.ID, f.svc.Networks.DeleteSecurityGroup(ctx, f.acme, f.defaultGroupOf(f.acme, n.ID).ID)},
		} {
			ce := ahCode(t, tc.err, cloud.Conflict)
			if !strings.Contains(ce.Message, tc.want) {
				t.Errorf("%s: %v, want it named", tc.what, ce)
			}
			if ids, ok := ce.Details["instance_ids"].([]string); ok && !slices.Equal(ids, []string{in.ID}) {
				t.Errorf("%s: details %+v", tc.what, ce.Details)
			}
		}
		f.unchanged(before, "refused deletes")
		if _, err := f.svc.Instances.Act(ctx, f.acme, in.ID, service.Terminate, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.Networks.DeleteSecurityGroup(ctx, f.acme, web.ID); err != nil {
			t.Fatalf("a group without members: %v", err)
		}
		if err := f.svc.Networks.DeleteNetwork(ctx, f.acme, n.ID); err != nil {
			t.Fatalf("an empty network: %v", err)
		}
		for _, err := range []error{second(f.svc.Networks.GetSubnet(ctx, f.acme, s.ID)), second(f.svc.Networks.GetSecurityGroup(ctx, f.acme, named.ID))} {
			ahCode(t, err, cloud.NotFound)
		}
		// The default network: its subnet goes with it only, and it is
		// deleted when empty like any other; the next need makes a new one.
		d, err := f.create(f.acme, "")
		if err != nil {
			t.Fatal(err)
		}
		ahCode(t, f.svc.Networks.DeleteSubnet(ctx, f.acme, d.SubnetID), cloud.Conflict)
		ahCode(t, f.svc.Networks.DeleteNetwork(ctx, f.acme, d.NetworkID), cloud.Conflict)
		if _, err := f.svc.Instances.Act(ctx, f.acme, d.ID, service.Terminate, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.Networks.DeleteNetwork(ctx, f.acme, d.NetworkID); err != nil {
			t.Fatal(err)
		}
		if e, err := f.create(f.acme, ""); err != nil || e.NetworkID == d.NetworkID {
			t.Errorf("after the default network's delete: %+v %v", e, err)
		}
	})
}

// TestNetworkEvents: creates, deletes and rule changes are events of the
// tenant.
func TestNetworkEvents(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		s := f.subnet(f.acme, n.ID, "a", "10.0.1.0/24", "z")
		g := f.group(f.acme, n.ID, "web")
		g, _ = f.svc.Networks.Authorize(ctx, f.acme, g.ID, api.AuthorizeRequest{Direction: api.Ingress, Protocol: "all", CIDR: "10.0.0.0/8"}, 0)
		if _, err := f.svc.Networks.Revoke(ctx, f.acme, g.ID, api.RevokeRequest{RuleID: g.Ingress[0].ID}, 0); err != nil {
			t.Fatal(err)
		}
		for _, err := range []error{f.svc.Networks.DeleteSecurityGroup(ctx, f.acme, g.ID), f.svc.Networks.DeleteSubnet(ctx, f.acme, s.ID),
			f.svc.Networks.DeleteNetwork(ctx, f.acme, n.ID)} {
			if err != nil {
				t.Fatal(err)
			}
		}
		evs, _, err := f.svc.Instances.EventLog(ctx, f.admin, cloud.EventFilter{TenantID: f.acme.TenantID, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, e := range evs {
			if e.Actor == f.acme.ID {
				kinds = append(kinds, string(e.Kind))
			}
		}
		want := []string{"network.created", "security_group.created", "subnet.created", "security_group.created",
			"security_group.rules", "security_group.rules", "security_group.deleted", "subnet.deleted", "network.deleted"}
		if !slices.Equal(kinds, want) {
			t.Errorf("events %v, want %v", kinds, want)
		}
	})
}

// TestAssignmentNetwork: an instance's assignment carries its place on
// its network: VNI, CIDRs, gateway, address, MAC, groups, the public
// address associated with it, and its DNS names.
func TestAssignmentNetwork(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 2)
		n := f.network(f.acme, "train", "10.0.0.0/16")
		s := f.subnet(f.acme, n.ID, "a", "10.0.1.0/24", "zone-a")
		in, _, err := f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "l4.1x", Name: "Head", Subnet: s.ID}, "")
		if err != nil {
			t.Fatal(err)
		}
		testkit.Walk(t, st, in.ID, cloud.Running, testkit.Via{Host: "h-a"}, f.clock.Now())
		ad, _, err := f.svc.Addresses.Allocate(ctx, f.acme, api.AllocateAddressRequest{InstanceID: in.ID}, "")
		if err != nil {
			t.Fatal(err)
		}
		legacy := f.amUpdate(f.placed(f.acme, "h-a", cloud.Running).ID, func(in *cloud.Instance) {
			in.NetworkID, in.SubnetID, in.SecurityGroupIDs = "", "", nil
		})
		as, err := f.svc.Agents.Assignments(ctx, service.AgentActor("h-a"))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]*agentapi.InstanceNetwork{}
		for _, a := range as {
			got[a.InstanceID] = a.Network
		}
		want := &agentapi.InstanceNetwork{NetworkID: n.ID, NetworkName: "train", VNI: n.VNI, CIDR: "10.0.0.0/16",
			SubnetID: s.ID, SubnetCIDR: "10.0.1.0/24", Gateway: "10.0.1.1", Address: "10.0.1.4", MAC: "02:00:0a:00:01:04",
			SecurityGroups: []string{f.defaultGroupOf(f.acme, n.ID).ID}, PublicAddress: ad.IP,
			DNSNames: []string{"head.train.internal", in.ID + ".internal"}}
		if g := got[in.ID]; g == nil || g.NetworkID != want.NetworkID || g.VNI != want.VNI || g.Gateway != want.Gateway ||
			g.Address != want.Address || g.MAC != want.MAC || !slices.Equal(g.SecurityGroups, want.SecurityGroups) ||
			g.PublicAddress != want.PublicAddress || !slices.Equal(g.DNSNames, want.DNSNames) || g.CIDR != want.CIDR ||
			g.SubnetCIDR != want.SubnetCIDR || g.NetworkName != want.NetworkName || g.SubnetID != want.SubnetID {
			t.Errorf("network %+v, want %+v", g, want)
		}
		if g, ok := got[legacy.ID]; !ok || g != nil {
			t.Errorf("an instance without a network: %+v %v", g, ok)
		}
	})
}

func TestInstanceDNSNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"web-1", []string{"web-1.n.internal", "i-1.internal"}},
		{"Web", []string{"web.n.internal", "i-1.internal"}},
		{"under_score", []string{"i-1.internal"}},
		{"dot.ted", []string{"i-1.internal"}},
		{"", []string{"i-1.internal"}},
	} {
		if got := service.InstanceDNSNames(&cloud.Instance{ID: "i-1", Name: tc.name}, "n"); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestGroupTemplateNetwork: an autoscaling group's template may name a
// subnet and groups, checked as an instance create checks them (another
// tenant's subnet is not_found; groups need the subnet), with the
// subnet's zone as the template's; its members are launched in them.
func TestGroupTemplateNetwork(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newNSFixture(t, st)
		ctx := context.Background()
		n := f.network(f.acme, "main", "10.0.0.0/16")
		s := f.subnet(f.acme, n.ID, "a", "10.0.1.0/24", "zone-a")
		web := f.group(f.acme, n.ID, "web")
		theirs := f.subnet(f.globex, f.network(f.globex, "x", "10.0.0.0/16").ID, "b", "10.0.1.0/24", "zone-a")
		spec := func(subnet string, groups ...string) api.CreateGroupRequest {
			one := 1
			return api.CreateGroupRequest{Name: "g", Min: 0, Max: 2, Desired: &one,
				Template: cloud.GroupTemplate{Offerings: []string{"l4.1x"}, Subnet: subnet, SecurityGroups: groups}}
		}
		before := f.state()
		for _, tc := range []struct {
			what  string
			req   api.CreateGroupRequest
			code  cloud.Code
			field string
		}{
			{"another tenant's subnet", spec(theirs.ID), cloud.NotFound, "template.subnet"},
			{"groups without a subnet", spec("", web.ID), cloud.Invalid, "template.security_groups"},
			{"a missing group", spec(s.ID, "sg-nope"), cloud.NotFound, "template.security_groups[0]"},
		} {
			_, _, err := f.svc.Groups.Create(ctx, f.acme, tc.req, "")
			if ce := ahCode(t, err, tc.code); ce.Details["field"] != tc.field {
				t.Errorf("%s: %v, want field %s", tc.what, err, tc.field)
			}
		}
		f.unchanged(before, "refused groups")
		g, _, err := f.svc.Groups.Create(ctx, f.acme, spec(s.ID, web.ID), "")
		if err != nil || g.Template.Subnet != s.ID || !slices.Equal(g.Template.Zones, []string{"zone-a"}) {
			t.Fatalf("group %+v %v", g, err)
		}
		var in *cloud.Instance
		err = st.Tx(ctx, func(tx cloud.Tx) error {
			var err error
			in, err = service.LaunchGroupMember(ctx, tx, f.svc.Catalog(), g, service.LaunchSpec{Offering: "l4.1x", Seq: 1}, "groups", f.clock.Now())
			return err
		})
		if err != nil || in.SubnetID != s.ID || !slices.Equal(in.SecurityGroupIDs, []string{web.ID}) || in.PrivateAddress != "10.0.1.4" {
			t.Errorf("member %+v %v", in, err)
		}
	})
}
