package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
)

// Private networks: cloud.NetworkTx, and the network fields of instances.

func network(id, tenant, name string) *cloud.Network {
	return &cloud.Network{ID: id, TenantID: tenant, Name: name, CIDR: "10.0.0.0/16", CreatedAt: t0}
}

func subnet(id, tenant, net, name string) *cloud.Subnet {
	return &cloud.Subnet{ID: id, TenantID: tenant, NetworkID: net, Name: name, CIDR: "10.0.1.0/24", Zone: "eu-1a",
		CreatedAt: t0}
}

func securityGroup(id, tenant, net, name string) *cloud.SecurityGroup {
	return &cloud.SecurityGroup{ID: id, TenantID: tenant, NetworkID: net, Name: name, CreatedAt: t0}
}

// netResource is one of the three kinds of network resources, seen
// through functions, so that one table of cases checks all three.
type netResource struct {
	kind string
	// make returns a new resource: tenant t-1's in network n-1 (named
	// "net-a") unless tenant or network say otherwise.
	make   func(id, tenant, network, name string) any
	create func(tx cloud.Tx, r any) error
	get    func(tx cloud.Tx, id string) (any, error)
	byKey  func(tx cloud.Tx, tenant, key string) (any, error)
	list   func(tx cloud.Tx, tenant, network string, ids []string) ([]string, error)
	update func(tx cloud.Tx, r any) error
	delete func(tx cloud.Tx, id string) error
	// set sets a resource's name, key and version; version reads it.
	set     func(r any, name, key string, version int64)
	version func(r any) int64
	// scoped tells whether names are unique per network (true) or per
	// tenant (networks).
	scoped bool
}

var netResources = []netResource{
	{
		kind: "network",
		make: func(id, tenant, _, name string) any { return network(id, tenant, name) },
		create: func(tx cloud.Tx, r any) error {
			return tx.CreateNetwork(ctx, r.(*cloud.Network))
		},
		get:   func(tx cloud.Tx, id string) (any, error) { return tx.GetNetwork(ctx, id) },
		byKey: func(tx cloud.Tx, tenant, key string) (any, error) { return tx.NetworkByKey(ctx, tenant, key) },
		list: func(tx cloud.Tx, tenant, _ string, ids []string) ([]string, error) {
			ns, err := tx.ListNetworks(ctx, cloud.NetworkFilter{TenantID: tenant, IDs: ids})
			out := []string{}
			for _, n := range ns {
				out = append(out, n.ID)
			}
			return out, err
		},
		update: func(tx cloud.Tx, r any) error { return tx.UpdateNetwork(ctx, r.(*cloud.Network)) },
		delete: func(tx cloud.Tx, id string) error { return tx.DeleteNetwork(ctx, id) },
		set: func(r any, name, key string, v int64) {
			n := r.(*cloud.Network)
			n.Name, n.IdempotencyKey, n.Version = name, key, v
		},
		version: func(r any) int64 { return r.(*cloud.Network).Version },
	},
	{
		kind: "subnet",
		make: func(id, tenant, net, name string) any { return subnet(id, tenant, net, name) },
		create: func(tx cloud.Tx, r any) error {
			return tx.CreateSubnet(ctx, r.(*cloud.Subnet))
		},
		get:   func(tx cloud.Tx, id string) (any, error) { return tx.GetSubnet(ctx, id) },
		byKey: func(tx cloud.Tx, tenant, key string) (any, error) { return tx.SubnetByKey(ctx, tenant, key) },
		list: func(tx cloud.Tx, tenant, net string, ids []string) ([]string, error) {
			ss, err := tx.ListSubnets(ctx, cloud.SubnetFilter{TenantID: tenant, NetworkID: net, IDs: ids})
			out := []string{}
			for _, s := range ss {
				out = append(out, s.ID)
			}
			return out, err
		},
		update: func(tx cloud.Tx, r any) error { return tx.UpdateSubnet(ctx, r.(*cloud.Subnet)) },
		delete: func(tx cloud.Tx, id string) error { return tx.DeleteSubnet(ctx, id) },
		set: func(r any, name, key string, v int64) {
			s := r.(*cloud.Subnet)
			s.Name, s.IdempotencyKey, s.Version = name, key, v
		},
		version: func(r any) int64 { return r.(*cloud.Subnet).Version },
		scoped:  true,
	},
	{
		kind: "security group",
		make: func(id, tenant, net, name string) any { return securityGroup(id, tenant, net, name) },
		create: func(tx cloud.Tx, r any) error {
			return tx.CreateSecurityGroup(ctx, r.(*cloud.SecurityGroup))
		},
		get: func(tx cloud.Tx, id string) (any, error) { return tx.GetSecurityGroup(ctx, id) },
		byKey: func(tx cloud.Tx, tenant, key string) (any, error) {
			return tx.SecurityGroupByKey(ctx, tenant, key)
		},
		list: func(tx cloud.Tx, tenant, net string, ids []string) ([]string, error) {
			gs, err := tx.ListSecurityGroups(ctx, cloud.SecurityGroupFilter{TenantID: tenant, NetworkID: net, IDs: ids})
			out := []string{}
			for _, g := range gs {
				out = append(out, g.ID)
			}
			return out, err
		},
		update: func(tx cloud.Tx, r any) error { return tx.UpdateSecurityGroup(ctx, r.(*cloud.SecurityGroup)) },
		delete: func(tx cloud.Tx, id string) error { return tx.DeleteSecurityGroup(ctx, id) },
		set: func(r any, name, key string, v int64) {
			g := r.(*cloud.SecurityGroup)
			g.Name, g.IdempotencyKey, g.Version = name, key, v
		},
		version: func(r any) int64 { return r.(*cloud.SecurityGroup).Version },
		scoped:  true,
	},
}

// seedNetworks makes tenants t-1 and t-2, t-1's networks n-1 and n-2 and
// t-2's network n-3.
func seedNetworks(t *testing.T, s cloud.Store) {
	t.Helper()
	seedTenants(t, s, "t-1", "t-2")
	inTx(t, s, func(tx cloud.Tx) error {
		for _, n := range []*cloud.Network{network("n-1", "t-1", "net-a"), network("n-2", "t-1", "net-b"),
			network("n-3", "t-2", "net-a")} {
			if err := tx.CreateNetwork(ctx, n); err != nil {
				return err
			}
		}
		return nil
	})
}

// testNetworkResources runs the same cases over networks, subnets and
// security groups: create, get, by key, list, update, delete, names and
// idempotency keys.
func testNetworkResources(t *testing.T, s cloud.Store) {
	seedNetworks(t, s)
	for _, r := range netResources {
		// Networks n-1 to n-3 exist already; the other kinds start empty.
		id := func(i int) string { return fmt.Sprintf("%s-%d", r.kind[:1], i+10) }
		create := func(x any) error { return try(s, func(tx cloud.Tx) error { return r.create(tx, x) }) }
		get := func(id string) (any, error) {
			return read(t, s, func(tx cloud.Tx) (any, error) { return r.get(tx, id) })
		}
		list := func(tenant, net string, ids ...string) []string {
			return mustRead(t, s, func(tx cloud.Tx) ([]string, error) { return r.list(tx, tenant, net, ids) })
		}

		// Create and read back.
		first := r.make(id(1), "t-1", "n-1", "web")
		r.set(first, "web", "k-1", 0)
		if err := create(first); err != nil {
			t.Fatalf("%s: create: %v", r.kind, err)
		}
		if r.version(first) != 1 {
			t.Errorf("%s: version %d after create, want 1", r.kind, r.version(first))
		}
		got, err := get(id(1))
		if err != nil {
			t.Fatalf("%s: get: %v", r.kind, err)
		}
		wantEqual(t, r.kind+" read back", got, first)
		got, err = read(t, s, func(tx cloud.Tx) (any, error) { return r.byKey(tx, "t-1", "k-1") })
		if err != nil {
			t.Fatalf("%s: by key: %v", r.kind, err)
		}
		wantEqual(t, r.kind+" by key", got, first)

		// Names, idempotency keys and missing parents.
		for _, c := range []struct {
			desc                  string
			id, tenant, net, name string
			key                   string
			code                  cloud.Code
			existing              string
			msg                   string
		}{
			{desc: "a repeated key", id: id(2), tenant: "t-1", net: "n-1", name: "other", key: "k-1",
				code: cloud.Conflict, existing: id(1)},
			// The key is looked up first: a retry is no name conflict.
			{desc: "a repeated key and name", id: id(2), tenant: "t-1", net: "n-1", name: "web", key: "k-1",
				code: cloud.Conflict, existing: id(1)},
			{desc: "a taken name", id: id(2), tenant: "t-1", net: "n-1", name: "web", code: cloud.Conflict,
				msg: `named "web"`},
			{desc: "a taken name with a new key", id: id(2), tenant: "t-1", net: "n-1", name: "web", key: "k-2",
				code: cloud.Conflict, msg: `named "web"`},
			{desc: "a taken ID", id: id(1), tenant: "t-1", net: "n-1", name: "new", code: cloud.Conflict,
				msg: "already exists"},
			{desc: "no name", id: id(2), tenant: "t-1", net: "n-1", code: cloud.Invalid},
			{desc: "no ID", tenant: "t-1", net: "n-1", name: "x", code: cloud.Invalid},
			{desc: "no tenant", id: id(2), net: "n-1", name: "x", code: cloud.Invalid},
			{desc: "a missing tenant", id: id(2), tenant: "t-9", net: "n-1", name: "x", code: cloud.NotFound},
		} {
			x := r.make(c.id, c.tenant, c.net, c.name)
			r.set(x, c.name, c.key, 0)
			err := create(x)
			wantCode(t, r.kind+": "+c.desc, err, c.code, c.msg)
			var ce *cloud.Error
			errors.As(err, &ce)
			if c.existing != "" {
				wantExisting(t, r.kind+": "+c.desc, err, c.existing)
				wantEqual(t, r.kind+": "+c.desc+": the struct now holds the first", x, first)
			} else if ce != nil && ce.Details["existing_id"] != nil {
				t.Errorf("%s: %s: carries existing_id %v", r.kind, c.desc, ce.Details["existing_id"])
			}
		}
		// The same name in another scope, and the same key in another
		// tenant, are free.
		other := r.make(id(3), "t-2", "n-3", "web")
		r.set(other, "web", "k-1", 0)
		if err := create(other); err != nil {
			t.Errorf("%s: a name and key of another tenant: %v", r.kind, err)
		}
		if r.scoped {
			if err := create(r.make(id(4), "t-1", "n-2", "web")); err != nil {
				t.Errorf("%s: a name of another network: %v", r.kind, err)
			}
			wantCode(t, r.kind+": another tenant's network",
				create(r.make(id(5), "t-1", "n-3", "x")), cloud.NotFound, "network n-3")
			wantCode(t, r.kind+": a missing network",
				create(r.make(id(5), "t-1", "n-9", "x")), cloud.NotFound, "network n-9")
			wantCode(t, r.kind+": no network",
				create(r.make(id(5), "t-1", "", "x")), cloud.Invalid, "")
		} else {
			if err := create(r.make(id(4), "t-1", "", "db")); err != nil {
				t.Errorf("%s: a second name: %v", r.kind, err)
			}
		}
		// A transaction that met a conflict can go on.
		inTx(t, s, func(tx cloud.Tx) error {
			if err := r.create(tx, r.make(id(5), "t-1", "n-1", "web")); !cloud.IsConflict(err) {
				return fmt.Errorf("%s: a taken name in a transaction: %v, want a Conflict", r.kind, err)
			}
			return r.create(tx, r.make(id(5), "t-1", "n-1", "cache"))
		})

		// Lists, in ID order.
		for _, c := range []struct {
			desc        string
			tenant, net string
			ids         []string
			want        []string
		}{
			{"tenant t-1", "t-1", "", nil, []string{id(1), id(4), id(5)}},
			{"tenant t-2", "t-2", "", nil, []string{id(3)}},
			{"by IDs", "", "", []string{id(5), id(3), "x-9"}, []string{id(3), id(5)}},
			{"by IDs of tenant t-1", "t-1", "", []string{id(5), id(3)}, []string{id(5)}},
			{"a tenant with none", "t-9", "", nil, []string{}},
		} {
			got := list(c.tenant, c.net, c.ids...)
			if r.kind == "network" {
				// Leave the seeded networks out.
				got = slices.DeleteFunc(got, func(id string) bool { return slices.Contains([]string{"n-1", "n-2", "n-3"}, id) })
			}
			wantEqual(t, r.kind+": list "+c.desc, got, c.want)
		}
		if r.scoped {
			wantEqual(t, r.kind+": list network n-1", list("", "n-1"), []string{id(1), id(5)})
			wantEqual(t, r.kind+": list network n-2 of t-1", list("t-1", "n-2"), []string{id(4)})
			wantEqual(t, r.kind+": list network n-2 of t-2", list("t-2", "n-2"), []string{})
		}

		// Updates check the version and the name.
		up, _ := get(id(1))
		r.set(up, "web-2", "k-1", 1)
		if err := try(s, func(tx cloud.Tx) error { return r.update(tx, up) }); err != nil {
			t.Fatalf("%s: update: %v", r.kind, err)
		}
		if r.version(up) != 2 {
			t.Errorf("%s: version %d after update, want 2", r.kind, r.version(up))
		}
		got, _ = get(id(1))
		wantEqual(t, r.kind+" after update", got, up)
		for _, c := range []struct {
			desc    string
			id      string
			name    string
			version int64
			code    cloud.Code
			msg     string
		}{
			{"a stale version", id(1), "web-3", 1, cloud.Conflict, "stored version is 2"},
			{"a taken name", id(1), "cache", 2, cloud.Conflict, `named "cache"`},
			{"no name", id(1), "", 2, cloud.Invalid, ""},
			{"a missing " + r.kind, id(9), "x", 1, cloud.NotFound, ""},
		} {
			x, _ := get(id(1))
			if c.id != id(1) {
				x = r.make(c.id, "t-1", "n-1", c.name)
			}
			r.set(x, c.name, "k-1", c.version)
			wantCode(t, r.kind+": update with "+c.desc, try(s, func(tx cloud.Tx) error { return r.update(tx, x) }),
				c.code, c.msg)
		}
		got, _ = get(id(1))
		wantEqual(t, r.kind+": the refused updates changed nothing", got, up)

		// Deletes.
		if err := try(s, func(tx cloud.Tx) error { return r.delete(tx, id(4)) }); err != nil {
			t.Errorf("%s: delete: %v", r.kind, err)
		}
		if _, err := get(id(4)); !cloud.IsNotFound(err) {
			t.Errorf("%s: get after delete: %v, want NotFound", r.kind, err)
		}
		wantCode(t, r.kind+": delete again", try(s, func(tx cloud.Tx) error { return r.delete(tx, id(4)) }),
			cloud.NotFound, "")
		// By key: another tenant's key, the empty key.
		for _, c := range []struct{ tenant, key string }{{"t-2", "k-2"}, {"t-1", ""}, {"t-9", "k-1"}} {
			_, err := read(t, s, func(tx cloud.Tx) (any, error) { return r.byKey(tx, c.tenant, c.key) })
			wantCode(t, fmt.Sprintf("%s: by key %q of %s", r.kind, c.key, c.tenant), err, cloud.NotFound, "")
		}
	}
}

// testNetworkDetails checks what is particular to each kind: a network's
// VNI, a subnet's zone, default and cursor, a group's rules, the default
// flags, and that a network with subnets or groups stays.
func testNetworkDetails(t *testing.T, s cloud.Store) {
	seedNetworks(t, s)
	vnis := func() map[string]uint32 {
		ns := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Network, error) {
			return tx.ListNetworks(ctx, cloud.NetworkFilter{})
		})
		out := map[string]uint32{}
		for _, n := range ns {
			out[n.ID] = n.VNI
		}
		return out
	}
	wantEqual(t, "the first VNIs", vnis(), map[string]uint32{"n-1": 1, "n-2": 2, "n-3": 3})
	// A VNI is never given again, a retry takes none, and a VNI the
	// caller sets is ignored.
	inTx(t, s, func(tx cloud.Tx) error { return tx.DeleteNetwork(ctx, "n-2") })
	n4 := network("n-4", "t-2", "net-b")
	n4.VNI = 2
	n4.IdempotencyKey = "k"
	n4.Tags = map[string]string{"team": "ml"}
	n4.Default = true
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateNetwork(ctx, n4) })
	retry := network("n-5", "t-2", "net-c")
	retry.IdempotencyKey = "k"
	wantExisting(t, "a retried network", try(s, func(tx cloud.Tx) error { return tx.CreateNetwork(ctx, retry) }), "n-4")
	// A create that fails takes no VNI: its transaction rolls back.
	wantCode(t, "a network with a taken name",
		try(s, func(tx cloud.Tx) error { return tx.CreateNetwork(ctx, network("n-5", "t-2", "net-a")) }),
		cloud.Conflict, `named "net-a"`)
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateNetwork(ctx, network("n-5", "t-1", "net-b")) })
	wantEqual(t, "VNIs after a delete", vnis(), map[string]uint32{"n-1": 1, "n-3": 3, "n-4": 4, "n-5": 5})
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Network, error) { return tx.GetNetwork(ctx, "n-4") })
	wantEqual(t, "a full network", got, n4)
	if n4.VNI != 4 || n4.CreatedAt != us(t0) {
		t.Errorf("CreateNetwork set VNI %d and CreatedAt %v, want 4 and %v", n4.VNI, n4.CreatedAt, us(t0))
	}

	// Full subnets and groups round-trip; nil and empty lists stay apart.
	sub := subnet("s-1", "t-1", "n-1", "a")
	sub.Default, sub.Cursor, sub.Tags = true, 7, map[string]string{"tier": "front"}
	sg := securityGroup("sg-1", "t-1", "n-1", "default")
	sg.Default, sg.Description = true, "all among members"
	sg.Ingress = []cloud.SecurityRule{
		{ID: "sgr-1", Protocol: cloud.ProtocolAll, GroupID: "sg-1"},
		{ID: "sgr-2", Protocol: cloud.ProtocolTCP, FromPort: 22, ToPort: 22, CIDR: "0.0.0.0/0", Description: "ssh"},
	}
	sg.Egress = []cloud.SecurityRule{{ID: "sgr-3", Protocol: cloud.ProtocolAll, CIDR: "0.0.0.0/0"}}
	empty := securityGroup("sg-2", "t-1", "n-1", "none")
	empty.Ingress = []cloud.SecurityRule{}
	inTx(t, s, func(tx cloud.Tx) error {
		for _, f := range []func() error{
			func() error { return tx.CreateSubnet(ctx, sub) },
			func() error { return tx.CreateSecurityGroup(ctx, sg) },
			func() error { return tx.CreateSecurityGroup(ctx, empty) },
		} {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	})
	wantEqual(t, "a full subnet", mustRead(t, s, func(tx cloud.Tx) (*cloud.Subnet, error) {
		return tx.GetSubnet(ctx, "s-1")
	}), sub)
	wantEqual(t, "a full group", mustRead(t, s, func(tx cloud.Tx) (*cloud.SecurityGroup, error) {
		return tx.GetSecurityGroup(ctx, "sg-1")
	}), sg)
	gotEmpty := mustRead(t, s, func(tx cloud.Tx) (*cloud.SecurityGroup, error) { return tx.GetSecurityGroup(ctx, "sg-2") })
	wantEqual(t, "a group without rules", gotEmpty, empty)
	if gotEmpty.Ingress == nil || gotEmpty.Egress != nil {
		t.Errorf("empty and nil rules must stay apart: %#v, %#v", gotEmpty.Ingress, gotEmpty.Egress)
	}

	// UpdateSubnet writes the cursor and tags, UpdateSecurityGroup the
	// rules; neither moves a resource, nor does UpdateNetwork change its
	// VNI.
	sub.Cursor, sub.Tags = 4_000_000_000, nil
	sub.CIDR, sub.Zone = "10.9.0.0/24", "eu-1b"
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateSubnet(ctx, sub) })
	sub.CIDR, sub.Zone = "10.0.1.0/24", "eu-1a"
	wantEqual(t, "an updated subnet", mustRead(t, s, func(tx cloud.Tx) (*cloud.Subnet, error) {
		return tx.GetSubnet(ctx, "s-1")
	}), sub)
	sg.Ingress, sg.Egress, sg.Description = sg.Ingress[1:], nil, "ssh only"
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateSecurityGroup(ctx, sg) })
	wantEqual(t, "an updated group", mustRead(t, s, func(tx cloud.Tx) (*cloud.SecurityGroup, error) {
		return tx.GetSecurityGroup(ctx, "sg-1")
	}), sg)
	n1 := mustRead(t, s, func(tx cloud.Tx) (*cloud.Network, error) { return tx.GetNetwork(ctx, "n-1") })
	n1.VNI, n1.Tags = 99, map[string]string{"a": "b"}
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateNetwork(ctx, n1) })
	n1.VNI = 1
	wantEqual(t, "an updated network", mustRead(t, s, func(tx cloud.Tx) (*cloud.Network, error) {
		return tx.GetNetwork(ctx, "n-1")
	}), n1)

	// One default network per tenant, one default group per network, one
	// default subnet per network and zone.
	for _, c := range []struct {
		desc   string
		create func(tx cloud.Tx) error
		err    string
	}{
		{"a second default network", func(tx cloud.Tx) error {
			n := network("n-6", "t-2", "other")
			n.Default = true
			return tx.CreateNetwork(ctx, n)
		}, "default network (n-4)"},
		{"a second default group", func(tx cloud.Tx) error {
			g := securityGroup("sg-3", "t-1", "n-1", "other")
			g.Default = true
			return tx.CreateSecurityGroup(ctx, g)
		}, "default security group (sg-1)"},
		{"a second default subnet in a zone", func(tx cloud.Tx) error {
			s := subnet("s-2", "t-1", "n-1", "b")
			s.Default = true
			return tx.CreateSubnet(ctx, s)
		}, "default subnet (s-1)"},
		{"a default subnet in another zone", func(tx cloud.Tx) error {
			s := subnet("s-2", "t-1", "n-1", "b")
			s.Default, s.Zone = true, "eu-1b"
			return tx.CreateSubnet(ctx, s)
		}, ""},
	} {
		err := try(s, c.create)
		if c.err == "" {
			wantCode(t, c.desc, err, "", "")
		} else {
			wantCode(t, c.desc, err, cloud.Conflict, c.err)
		}
	}

	// A network with subnets or groups cannot be deleted; once they are
	// gone it can.
	for _, c := range []struct {
		desc   string
		delete func(tx cloud.Tx) error
		code   cloud.Code
	}{
		{"a network with subnets and groups", func(tx cloud.Tx) error { return tx.DeleteNetwork(ctx, "n-1") }, cloud.Conflict},
		{"its subnets", func(tx cloud.Tx) error {
			return errors.Join(tx.DeleteSubnet(ctx, "s-1"), tx.DeleteSubnet(ctx, "s-2"))
		}, ""},
		{"a network with groups", func(tx cloud.Tx) error { return tx.DeleteNetwork(ctx, "n-1") }, cloud.Conflict},
		{"its groups", func(tx cloud.Tx) error {
			return errors.Join(tx.DeleteSecurityGroup(ctx, "sg-1"), tx.DeleteSecurityGroup(ctx, "sg-2"))
		}, ""},
		{"the empty network", func(tx cloud.Tx) error { return tx.DeleteNetwork(ctx, "n-1") }, ""},
		{"a missing network", func(tx cloud.Tx) error { return tx.DeleteNetwork(ctx, "n-1") }, cloud.NotFound},
	} {
		wantCode(t, "delete "+c.desc, try(s, c.delete), c.code, "")
	}
}

// testConcurrentVNIs creates networks from racing transactions: every one
// gets its own VNI, and together they take 1 to n.
func testConcurrentVNIs(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	var wg sync.WaitGroup
	nets := make([]*cloud.Network, Writers*2)
	for i := range nets {
		nets[i] = network(fmt.Sprintf("n-%02d", i), "t-1", fmt.Sprintf("net-%02d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 0; ; attempt++ {
				err := s.Tx(ctx, func(tx cloud.Tx) error { return tx.CreateNetwork(ctx, nets[i]) })
				if err == nil {
					return
				}
				if !cloud.IsConflict(err) || attempt > 100 {
					t.Errorf("create %s: %v", nets[i].ID, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var got []int
	for _, n := range nets {
		got = append(got, int(n.VNI))
	}
	slices.Sort(got)
	want := []int{}
	for i := range nets {
		want = append(want, i+1)
	}
	wantEqual(t, "the VNIs of racing creates", got, want)
}

// testNetworkInstances checks the instances' network fields: they
// round-trip through every write, the network, subnet and security group
// filters, and the addresses a subnet holds.
func testNetworkInstances(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	mk := func(id, net, sub, addr string, groups ...string) *cloud.Instance {
		return &cloud.Instance{ID: id, TenantID: "t-1", State: cloud.Running, NetworkID: net, SubnetID: sub,
			SecurityGroupIDs: groups, PrivateAddress: addr, CreatedAt: t0, UpdatedAt: t0}
	}
	// sg-1 is a prefix of sg-10, and sg_2 matches sgx2 as a LIKE pattern:
	// neither may select the other's members.
	ins := []*cloud.Instance{
		mk("i-1", "n-1", "s-1", "10.0.1.4", "sg-1"),
		mk("i-2", "n-1", "s-1", "10.0.1.5", "sg-10", "sg_2"),
		mk("i-3", "n-1", "s-2", "10.0.1.4", "sgx2", "sg-1"),
		mk("i-4", "n-2", "s-3", "10.0.1.4", "sg-3"),
		mk("i-5", "", "", ""),
		mk("i-6", "n-1", "s-1", "", "sg-1"),
	}
	ins[4].SecurityGroupIDs = []string{}
	inTx(t, s, func(tx cloud.Tx) error {
		for _, in := range ins {
			if err := tx.CreateInstance(ctx, in); err != nil {
				return err
			}
		}
		return nil
	})
	check := func(desc string, want map[string][]string) {
		t.Helper()
		for _, in := range ins {
			got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, in.ID) })
			wantEqual(t, desc+": instance "+in.ID, got, in)
		}
		for _, c := range []struct {
			name string
			f    cloud.InstanceFilter
		}{
			{"n-1", cloud.InstanceFilter{NetworkID: "n-1"}},
			{"n-2", cloud.InstanceFilter{NetworkID: "n-2"}},
			{"s-1", cloud.InstanceFilter{SubnetID: "s-1"}},
			{"s-2", cloud.InstanceFilter{SubnetID: "s-2"}},
			{"sg-1", cloud.InstanceFilter{SecurityGroupID: "sg-1"}},
			{"sg-10", cloud.InstanceFilter{SecurityGroupID: "sg-10"}},
			{"sg_2", cloud.InstanceFilter{SecurityGroupID: "sg_2"}},
			{"sgx2", cloud.InstanceFilter{SecurityGroupID: "sgx2"}},
			{"sg-", cloud.InstanceFilter{SecurityGroupID: "sg-"}},
			{"n-1, sg-1", cloud.InstanceFilter{NetworkID: "n-1", SecurityGroupID: "sg-1", SubnetID: "s-1"}},
		} {
			got := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Instance, error) { return tx.ListInstances(ctx, c.f) })
			wantEqual(t, desc+": "+c.name, ids(got), want[c.name])
			only := mustRead(t, s, func(tx cloud.Tx) ([]string, error) { return tx.InstanceIDs(ctx, c.f) })
			wantEqual(t, desc+": "+c.name+" (InstanceIDs)", only, want[c.name])
			vs := mustRead(t, s, func(tx cloud.Tx) ([]cloud.RowVersion, error) { return tx.InstanceVersions(ctx, c.f) })
			wantEqual(t, desc+": "+c.name+" (InstanceVersions)", len(vs), len(want[c.name]))
		}
	}
	check("after create", map[string][]string{
		"n-1": {"i-1", "i-2", "i-3", "i-6"}, "n-2": {"i-4"}, "s-1": {"i-1", "i-2", "i-6"}, "s-2": {"i-3"},
		"sg-1": {"i-1", "i-3", "i-6"}, "sg-10": {"i-2"}, "sg_2": {"i-2"}, "sgx2": {"i-3"}, "sg-": {},
		"n-1, sg-1": {"i-1", "i-6"},
	})
	// UpdateInstance and UpdateInstances write the fields.
	ins[0].SecurityGroupIDs = []string{"sg-10"}
	ins[4].NetworkID, ins[4].SubnetID, ins[4].SecurityGroupIDs, ins[4].PrivateAddress = "n-2", "s-3", []string{"sg-3"}, "10.0.1.9"
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateInstance(ctx, ins[0]) })
	inTx(t, s, func(tx cloud.Tx) error {
		ins[5].SecurityGroupIDs = nil
		ins[2].SubnetID = "s-1"
		ins[2].PrivateAddress = "10.0.1.6"
		stale, err := tx.UpdateInstances(ctx, []*cloud.Instance{ins[2], ins[4], ins[5]})
		if err == nil && len(stale) > 0 {
			err = fmt.Errorf("stale: %v", stale)
		}
		return err
	})
	check("after updates", map[string][]string{
		"n-1": {"i-1", "i-2", "i-3", "i-6"}, "n-2": {"i-4", "i-5"}, "s-1": {"i-1", "i-2", "i-3", "i-6"}, "s-2": {},
		"sg-1": {"i-3"}, "sg-10": {"i-1", "i-2"}, "sg_2": {"i-2"}, "sgx2": {"i-3"}, "sg-": {},
		"n-1, sg-1": {"i-3"},
	})
}

// testSubnetAddresses checks that two instances of a subnet that are not
// terminated cannot hold one address, and ListSubnetAddresses.
func testSubnetAddresses(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	mk := func(id, sub, addr string) *cloud.Instance {
		return &cloud.Instance{ID: id, TenantID: "t-1", State: cloud.Running, NetworkID: "n-1", SubnetID: sub,
			PrivateAddress: addr, CreatedAt: t0, UpdatedAt: t0}
	}
	create := func(in *cloud.Instance) error {
		return try(s, func(tx cloud.Tx) error { return tx.CreateInstance(ctx, in) })
	}
	update := func(id string, f func(*cloud.Instance)) error {
		return try(s, func(tx cloud.Tx) error {
			in, err := tx.GetInstance(ctx, id)
			if err != nil {
				return err
			}
			f(in)
			return tx.UpdateInstance(ctx, in)
		})
	}
	addrs := func(sub string) []string {
		got := mustRead(t, s, func(tx cloud.Tx) ([]string, error) { return tx.ListSubnetAddresses(ctx, sub) })
		slices.Sort(got)
		return got
	}
	for _, c := range []struct {
		desc string
		do   func() error
		code cloud.Code
		msg  string
		// want are the addresses of s-1 after the step.
		want []string
	}{
		{"the first instance", func() error { return create(mk("i-1", "s-1", "10.0.0.4")) }, "", "", []string{"10.0.0.4"}},
		{"another address", func() error { return create(mk("i-2", "s-1", "10.0.0.5")) }, "",
			"", []string{"10.0.0.4", "10.0.0.5"}},
		{"a held address", func() error { return create(mk("i-3", "s-1", "10.0.0.4")) }, cloud.Conflict,
			"10.0.0.4 is held", []string{"10.0.0.4", "10.0.0.5"}},
		{"the address in another subnet", func() error { return create(mk("i-3", "s-2", "10.0.0.4")) }, "", "",
			[]string{"10.0.0.4", "10.0.0.5"}},
		{"no address yet", func() error { return create(mk("i-4", "s-1", "")) }, "", "",
			[]string{"10.0.0.4", "10.0.0.5"}},
		{"a second without an address", func() error { return create(mk("i-5", "s-1", "")) }, "", "",
			[]string{"10.0.0.4", "10.0.0.5"}},
		{"an update to a held address", func() error {
			return update("i-4", func(in *cloud.Instance) { in.PrivateAddress = "10.0.0.5" })
		}, cloud.Conflict, "", []string{"10.0.0.4", "10.0.0.5"}},
		{"a stopped instance keeps its address", func() error {
			return update("i-2", func(in *cloud.Instance) { in.State = cloud.Stopped })
		}, "", "", []string{"10.0.0.4", "10.0.0.5"}},
		{"the address of a stopped instance", func() error { return create(mk("i-6", "s-1", "10.0.0.5")) },
			cloud.Conflict, "", []string{"10.0.0.4", "10.0.0.5"}},
		{"a terminated instance frees its address", func() error {
			return update("i-1", func(in *cloud.Instance) { in.State = cloud.Terminated })
		}, "", "", []string{"10.0.0.5"}},
		{"the freed address", func() error { return create(mk("i-6", "s-1", "10.0.0.4")) }, "", "",
			[]string{"10.0.0.4", "10.0.0.5"}},
		{"an update to another freed address", func() error {
			if err := update("i-2", func(in *cloud.Instance) { in.State = cloud.Terminated }); err != nil {
				return err
			}
			return update("i-4", func(in *cloud.Instance) { in.PrivateAddress = "10.0.0.5" })
		}, "", "", []string{"10.0.0.4", "10.0.0.5"}},
	} {
		wantCode(t, c.desc, c.do(), c.code, c.msg)
		wantEqual(t, c.desc+": addresses of s-1", addrs("s-1"), c.want)
	}
	wantEqual(t, "addresses of s-2", addrs("s-2"), []string{"10.0.0.4"})
	wantEqual(t, "addresses of a subnet without instances", addrs("s-9"), []string{})
	wantEqual(t, "addresses of no subnet", addrs(""), []string{})
}
