package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

func TestAddressAllocateIdempotency(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		in := f.instance(f.acme)
		other := f.instance(f.acme)
		first := api.AllocateAddressRequest{Zone: "zone-a"}
		withInstance := api.AllocateAddressRequest{InstanceID: in.ID}
		before := f.counts()
		a, created, err := f.svc.Addresses.Allocate(ctx, f.acme, first, "ip-1")
		if err != nil || !created || a.IP != "203.0.113.1" || a.Zone != "zone-a" || !strings.HasPrefix(a.ID, service.AddressPrefix) {
			t.Fatalf("allocate = %+v, %v, %v", a, created, err)
		}
		b, created, err := f.svc.Addresses.Allocate(ctx, f.acme, withInstance, "ip-2")
		if err != nil || !created || b.InstanceID != in.ID {
			t.Fatalf("allocate with an instance = %+v, %v, %v", b, created, err)
		}
		after := f.counts()
		if after.Addresses != before.Addresses+2 || after.Events != before.Events+2 || after.Usage != before.Usage+2 {
			t.Errorf("allocations: %+v -> %+v, want two addresses, events and usage entries", before, after)
		}

		// The identical request, and the same one naming the tenant, is a
		// retry: the first address, nothing written.
		for _, tc := range []struct {
			name  string
			actor service.Actor
			spec  api.AllocateAddressRequest
			key   string
			want  string
		}{
			{"identical", f.acme, first, "ip-1", a.ID},
			{"identical with an instance", f.acme, withInstance, "ip-2", b.ID},
			{"tenant sent by the member", f.acme, api.AllocateAddressRequest{Tenant: f.acme.TenantID, Zone: "zone-a"}, "ip-1", a.ID},
			{"tenant sent by an admin", f.admin, api.AllocateAddressRequest{Tenant: f.acme.TenantID, InstanceID: in.ID}, "ip-2", b.ID},
		} {
			again, created, err := f.svc.Addresses.Allocate(ctx, tc.actor, tc.spec, tc.key)
			if err != nil || created || again.ID != tc.want {
				t.Errorf("%s: %+v, created %v, %v; want address %s again", tc.name, again, created, err, tc.want)
			}
			f.unchanged(after, tc.name)
		}

		// Each field that differs is a conflict naming it alone.
		for _, tc := range []struct {
			field string
			spec  api.AllocateAddressRequest
			key   string
			want  string
		}{
			{"zone", api.AllocateAddressRequest{Zone: "zone-b"}, "ip-1", a.ID},
			{"zone", api.AllocateAddressRequest{}, "ip-1", a.ID},
			{"instance_id", api.AllocateAddressRequest{InstanceID: other.ID}, "ip-2", b.ID},
			{"zone", api.AllocateAddressRequest{InstanceID: in.ID, Zone: "zone-b"}, "ip-2", b.ID},
		} {
			_, _, err := f.svc.Addresses.Allocate(ctx, f.acme, tc.spec, tc.key)
			vaKeyConflict(t, err, tc.want, tc.field)
			f.unchanged(after, "a reused key differing in "+tc.field)
		}

		// The key stays the address's once it is released: the retry
		// answers it, released, and allocates nothing.
		rel, err := f.svc.Addresses.Release(ctx, f.acme, a.ID)
		if err != nil || rel.ReleasedAt == nil {
			t.Fatalf("release = %+v, %v", rel, err)
		}
		after = f.counts()
		again, created, err := f.svc.Addresses.Allocate(ctx, f.acme, first, "ip-1")
		if err != nil || created || again.ID != a.ID || again.ReleasedAt == nil {
			t.Errorf("retry after the release = %+v, %v, %v", again, created, err)
		}
		f.unchanged(after, "a retry of a released address")

		// Keys are the tenant's: another tenant's allocation under the same
		// key is its own address, whoever asks for it.
		for _, tc := range []struct {
			name  string
			actor service.Actor
			spec  api.AllocateAddressRequest
			key   string
		}{
			{"globex member", f.globex, first, "ip-1"},
			{"admin for globex", f.admin, api.AllocateAddressRequest{Tenant: f.globex.TenantID, Zone: "zone-a"}, "ip-2"},
		} {
			g, created, err := f.svc.Addresses.Allocate(ctx, tc.actor, tc.spec, tc.key)
			if err != nil || !created || g.TenantID != f.globex.TenantID {
				t.Errorf("%s: %+v, created %v, %v; want a new globex address", tc.name, g, created, err)
			}
		}

		for _, key := range []string{"a b", strings.Repeat("k", 256)} {
			_, _, err := f.svc.Addresses.Allocate(ctx, f.acme, first, key)
			if ce := vaCode(t, err, cloud.Invalid); ce.Details["field"] != "Idempotency-Key" {
				t.Errorf("key %q: %v", key, ce)
			}
		}
	})
}

// TestAddressPool checks what the pool hands out: the lowest free address
// first, without the network and broadcast addresses of a /30 or larger
// block; every address of a /31 or /32.
func TestAddressPool(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		ctx := context.Background()
		for _, tc := range []struct {
			pool string
			// ips are the pool's addresses in order; all of them when
			// exhausted.
			ips       []string
			exhausted bool
		}{
			{"", []string{"203.0.113.1", "203.0.113.2"}, false}, // DefaultAddressPool
			{"10.0.0.0/8", []string{"10.0.0.1", "10.0.0.2"}, false},
			{"198.51.100.4/30", []string{"198.51.100.5", "198.51.100.6"}, true},
			{"192.0.2.9/30", []string{"192.0.2.9", "192.0.2.10"}, true}, // masked to .8/30
			{"192.0.2.8/31", []string{"192.0.2.8", "192.0.2.9"}, true},
			{"192.0.2.7/32", []string{"192.0.2.7"}, true},
		} {
			f := newVAFixture(t, st, service.Options{AddressPool: tc.pool})
			var first *cloud.Address
			for _, ip := range tc.ips {
				a, _, err := f.svc.Addresses.Allocate(ctx, f.acme, api.AllocateAddressRequest{}, "")
				if err != nil || a.IP != ip {
					t.Fatalf("pool %s: %+v, %v; want %s", tc.pool, a, err, ip)
				}
				if first == nil {
					first = a
				}
			}
			if tc.exhausted {
				before := f.counts()
				_, _, err := f.svc.Addresses.Allocate(ctx, f.acme, api.AllocateAddressRequest{}, "")
				if ce := vaCode(t, err, cloud.InsufficientCapacity); ce.Details["pool"] == nil {
					t.Errorf("pool %s exhausted: %v", tc.pool, ce)
				}
				f.unchanged(before, "allocation from an exhausted pool")
			}
			// Release gives the lowest address back.
			if _, err := f.svc.Addresses.Release(ctx, f.acme, first.ID); err != nil {
				t.Fatal(err)
			}
			if a, _, err := f.svc.Addresses.Allocate(ctx, f.globex, api.AllocateAddressRequest{}, ""); err != nil || a.IP != first.IP {
				t.Errorf("pool %s after a release: %+v, %v; want %s", tc.pool, a, err, first.IP)
			}
			// Leave the next pool an empty store of addresses.
			err := st.Tx(ctx, func(tx cloud.Tx) error {
				as, err := tx.ListAddresses(ctx, "")
				for _, a := range as {
					if err == nil && a.ReleasedAt == nil {
						now := f.clock.Now()
						a.ReleasedAt = &now
						err = tx.UpdateAddress(ctx, a)
					}
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}

		// An unusable pool fails allocations, clearly, and writes nothing.
		for _, pool := range []string{"not a pool", "2001:db8::/64", "10.0.0.0"} {
			f := newVAFixture(t, st, service.Options{AddressPool: pool})
			before := f.counts()
			_, _, err := f.svc.Addresses.Allocate(ctx, f.acme, api.AllocateAddressRequest{}, "")
			if ce := vaCode(t, err, cloud.Internal); !strings.Contains(ce.Message, pool) {
				t.Errorf("pool %q: %v does not name the pool", pool, ce)
			}
			f.unchanged(before, "allocation from an unusable pool")
		}
	})
}

func TestAddressTenantIsolation(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		in := f.instance(f.acme)
		gin := f.instance(f.globex)
		a, _, err := f.svc.Addresses.Allocate(ctx, f.acme, api.AllocateAddressRequest{InstanceID: in.ID}, "")
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := f.svc.Addresses.Allocate(ctx, f.acme, api.AllocateAddressRequest{}, "")
		if err != nil {
			t.Fatal(err)
		}
		const missing = "eip-0000000000000000"

		// Globex's member sees nothing of acme's addresses, and changes
		// nothing.
		before := f.counts()
		for _, id := range []string{a.ID, b.ID, missing} {
			_, err := f.svc.Addresses.Get(ctx, f.globex, id)
			vaHidden(t, err, "address", id)
			_, err = f.svc.Addresses.Associate(ctx, f.globex, id, gin.ID)
			vaHidden(t, err, "address", id)
			_, err = f.svc.Addresses.Disassociate(ctx, f.globex, id)
			vaHidden(t, err, "address", id)
			_, err = f.svc.Addresses.Release(ctx, f.globex, id)
			vaHidden(t, err, "address", id)
		}
		if as, err := f.svc.Addresses.List(ctx, f.globex, "", true); err != nil || len(as) != 0 {
			t.Errorf("globex lists %v, %v", as, err)
		}
		_, err = f.svc.Addresses.List(ctx, f.globex, f.acme.TenantID, false)
		vaHidden(t, err, "tenant", f.acme.TenantID)
		_, _, err = f.svc.Addresses.Allocate(ctx, f.globex, api.AllocateAddressRequest{Tenant: f.acme.TenantID}, "")
		vaHidden(t, err, "tenant", f.acme.TenantID)
		// Nor does acme's member put its address on globex's instance: the
		// instance is not found, as a field of the request.
		for _, err := range []error{
			func() error { _, err := f.svc.Addresses.Associate(ctx, f.acme, b.ID, gin.ID); return err }(),
			func() error {
				_, _, err := f.svc.Addresses.Allocate(ctx, f.acme, api.AllocateAddressRequest{InstanceID: gin.ID}, "")
				return err
			}(),
		} {
			if ce := vaCode(t, err, cloud.Invalid); ce.Details["field"] != "instance_id" {
				t.Errorf("globex's instance: %v", ce)
			}
		}
		f.unchanged(before, "another tenant's reads and changes")

		// An admin reads and changes them, within one tenant.
		if got, err := f.svc.Addresses.Get(ctx, f.admin, a.ID); err != nil || got.ID != a.ID {
			t.Errorf("admin get = %+v, %v", got, err)
		}
		if as, err := f.svc.Addresses.List(ctx, f.admin, f.acme.TenantID, false); err != nil || len(as) != 2 {
			t.Errorf("admin lists acme's: %v, %v", as, err)
		}
		_, err = f.svc.Addresses.Associate(ctx, f.admin, b.ID, gin.ID)
		vaCode(t, err, cloud.Invalid)
		if got, err := f.svc.Addresses.Disassociate(ctx, f.admin, a.ID); err != nil || got.InstanceID != "" {
			t.Errorf("admin disassociate = %+v, %v", got, err)
		}
		if got, err := f.svc.Addresses.Associate(ctx, f.admin, b.ID, in.ID); err != nil || got.InstanceID != in.ID {
			t.Errorf("admin associate = %+v, %v", got, err)
		}
		if got, err := f.svc.Addresses.Release(ctx, f.admin, b.ID); err != nil || got.ReleasedAt == nil || got.InstanceID != "" {
			t.Errorf("admin release = %+v, %v", got, err)
		}
		evs, _, err := f.svc.Instances.Events(ctx, f.acme, in.ID, 0, 100)
		want := []cloud.EventKind{cloud.EventInstanceCreated, service.EventAddressAllocated, service.EventAddressDisassociated,
			service.EventAddressAssociated, service.EventAddressReleased}
		if err != nil || len(evs) != len(want) {
			t.Fatalf("instance events = %v, %v", evs, err)
		}
		for i, ev := range evs {
			if ev.Kind != want[i] {
				t.Errorf("event %d is %s, want %s", i, ev.Kind, want[i])
			}
		}
	})
}

func TestAddressAssociation(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		in := f.instance(f.acme)
		other := f.instance(f.acme)
		a, _, err := f.svc.Addresses.Allocate(ctx, f.acme, api.AllocateAddressRequest{InstanceID: in.ID}, "")
		if err != nil {
			t.Fatal(err)
		}
		za, _, err := f.svc.Addresses.Allocate(ctx, f.acme, api.AllocateAddressRequest{Zone: "zone-a"}, "")
		if err != nil {
			t.Fatal(err)
		}

		before := f.counts()
		if got, err := f.svc.Addresses.Associate(ctx, f.acme, a.ID, in.ID); err != nil || got.InstanceID != in.ID {
			t.Errorf("associate again = %+v, %v", got, err)
		}
		_, err = f.svc.Addresses.Associate(ctx, f.acme, a.ID, other.ID)
		vaCode(t, err, cloud.Conflict)
		_, err = f.svc.Addresses.Associate(ctx, f.acme, za.ID, "")
		vaCode(t, err, cloud.Invalid)
		_, _, err = f.svc.Addresses.Allocate(ctx, f.acme, api.AllocateAddressRequest{Zone: "zone a"}, "")
		vaCode(t, err, cloud.Invalid)
		f.unchanged(before, "rejected associations")

		// Zones must agree once the instance has one; the zone defaults to
		// the instance's.
		f.place(other, "zone-b")
		zb, _, err := f.svc.Addresses.Allocate(ctx, f.acme, api.AllocateAddressRequest{InstanceID: other.ID}, "")
		if err != nil || zb.Zone != "zone-b" {
			t.Errorf("zone from the instance = %+v, %v", zb, err)
		}
		before = f.counts()
		_, err = f.svc.Addresses.Associate(ctx, f.acme, za.ID, other.ID)
		vaCode(t, err, cloud.Invalid)
		_, _, err = f.svc.Addresses.Allocate(ctx, f.acme, api.AllocateAddressRequest{Zone: "zone-a", InstanceID: other.ID}, "")
		vaCode(t, err, cloud.Invalid)
		f.unchanged(before, "an address in another zone")

		// A terminated instance and a released address take no association.
		if _, err := f.svc.Addresses.Disassociate(ctx, f.acme, a.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Instances.Act(ctx, f.acme, in.ID, service.Terminate, 0); err != nil {
			t.Fatal(err)
		}
		rel, err := f.svc.Addresses.Release(ctx, f.acme, zb.ID)
		if err != nil || rel.InstanceID != "" || rel.ReleasedAt == nil {
			t.Errorf("release an associated address = %+v, %v", rel, err)
		}
		before = f.counts()
		_, err = f.svc.Addresses.Associate(ctx, f.acme, a.ID, in.ID)
		vaCode(t, err, cloud.Conflict)
		_, err = f.svc.Addresses.Associate(ctx, f.acme, zb.ID, other.ID)
		vaCode(t, err, cloud.Conflict)
		if again, err := f.svc.Addresses.Release(ctx, f.acme, zb.ID); err != nil || !again.ReleasedAt.Equal(*rel.ReleasedAt) {
			t.Errorf("release again = %+v, %v", again, err)
		}
		if got, err := f.svc.Addresses.Disassociate(ctx, f.acme, a.ID); err != nil || got.InstanceID != "" {
			t.Errorf("disassociate again = %+v, %v", got, err)
		}
		f.unchanged(before, "rejected and repeated actions")
		if as, err := f.svc.Addresses.List(ctx, f.acme, "", false); err != nil || len(as) != 2 {
			t.Errorf("unreleased addresses = %v, %v", as, err)
		}
		if as, err := f.svc.Addresses.List(ctx, f.acme, "", true); err != nil || len(as) != 3 {
			t.Errorf("every address = %v, %v", as, err)
		}
	})
}
