package httpapi

import (
	"context"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

func TestAddressAllocationOrder(t *testing.T) { onBothStores(t, testAddressAllocationOrder) }

func testAddressAllocationOrder(t *testing.T, e *env) {
	ctx := context.Background()
	// The default pool's first address.
	a, err := e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{Zone: "zone-a"}, "")
	if err != nil || a.IP != "203.0.113.1" || !strings.HasPrefix(a.ID, "eip-") || a.TenantID != e.acmeID || a.Zone != "zone-a" {
		t.Fatalf("first address = %+v, %v", a, err)
	}

	// A /30 has two addresses to give: .1 and .2.
	acme := e.serverWith(t, e.acmeToken, func(o *service.Options) { o.AddressPool = "198.51.100.4/30" })
	one, err := acme.AllocateAddress(ctx, api.AllocateAddressRequest{}, "")
	if err != nil || one.IP != "198.51.100.5" {
		t.Fatalf("first of the /30 = %+v, %v", one, err)
	}
	two, err := acme.AllocateAddress(ctx, api.AllocateAddressRequest{}, "")
	if err != nil || two.IP != "198.51.100.6" {
		t.Fatalf("second of the /30 = %+v, %v", two, err)
	}
	before := e.billingCounts()
	_, err = acme.AllocateAddress(ctx, api.AllocateAddressRequest{}, "")
	if ce := wantCode(t, err, cloud.InsufficientCapacity); ce.Details["pool"] != "198.51.100.4/30" {
		t.Errorf("exhausted: %v", ce)
	}
	e.billingUnchanged(before, "allocation from an exhausted pool")

	// Release gives the lowest address back; releasing again changes
	// nothing.
	rel, err := acme.ReleaseAddress(ctx, one.ID)
	if err != nil || rel.ReleasedAt == nil {
		t.Fatalf("release = %+v, %v", rel, err)
	}
	before = e.billingCounts()
	again, err := acme.ReleaseAddress(ctx, one.ID)
	if err != nil || again.ReleasedAt == nil || !again.ReleasedAt.Equal(*rel.ReleasedAt) {
		t.Errorf("release again = %+v, %v", again, err)
	}
	e.billingUnchanged(before, "releasing a released address")
	if got, err := acme.GetAddress(ctx, one.ID); err != nil || got.ReleasedAt == nil {
		t.Errorf("get a released address = %+v, %v", got, err)
	}
	three, err := acme.AllocateAddress(ctx, api.AllocateAddressRequest{}, "")
	if err != nil || three.IP != "198.51.100.5" || three.ID == one.ID {
		t.Errorf("after release = %+v, %v", three, err)
	}

	if as, err := e.acme.Addresses(ctx, "", false); err != nil || len(as) != 3 {
		t.Errorf("acme addresses = %v, %v", as, err)
	}
	if as, err := e.acme.Addresses(ctx, "", true); err != nil || len(as) != 4 {
		t.Errorf("acme addresses with released = %v, %v", as, err)
	}
	if as, err := e.globex.Addresses(ctx, "", true); err != nil || len(as) != 0 {
		t.Errorf("globex addresses = %v, %v", as, err)
	}
	if as, err := e.admin.Addresses(ctx, e.acmeID, false); err != nil || len(as) != 3 {
		t.Errorf("admin: acme's addresses = %v, %v", as, err)
	}

	// An unusable pool fails allocations, not the server.
	bad := e.serverWith(t, e.acmeToken, func(o *service.Options) { o.AddressPool = "not a pool" })
	before = e.billingCounts()
	_, err = bad.AllocateAddress(ctx, api.AllocateAddressRequest{}, "")
	wantCode(t, err, cloud.Internal)
	e.billingUnchanged(before, "allocation from a bad pool")
}

func TestAddressAssociation(t *testing.T) { onBothStores(t, testAddressAssociation) }

func testAddressAssociation(t *testing.T, e *env) {
	ctx := context.Background()
	in := e.mustCreate(e.acme, "l4.1x")
	other := e.mustCreate(e.acme, "l4.1x")
	gin := e.mustCreate(e.globex, "l4.1x")
	a, err := e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{InstanceID: in.ID}, "")
	if err != nil || a.InstanceID != in.ID {
		t.Fatalf("allocate with instance = %+v, %v", a, err)
	}
	b, err := e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{}, "")
	if err != nil || b.IP != "203.0.113.2" {
		t.Fatalf("second = %+v, %v", b, err)
	}

	before := e.billingCounts()
	// Associating where it is changes nothing; elsewhere is a conflict.
	if got, err := e.acme.AssociateAddress(ctx, a.ID, in.ID); err != nil || got.InstanceID != in.ID {
		t.Errorf("associate again = %+v, %v", got, err)
	}
	_, err = e.acme.AssociateAddress(ctx, a.ID, other.ID)
	wantCode(t, err, cloud.Conflict)
	// Another tenant's address or instance is not found.
	_, err = e.globex.AssociateAddress(ctx, b.ID, gin.ID)
	wantCode(t, err, cloud.NotFound)
	_, err = e.globex.ReleaseAddress(ctx, b.ID)
	wantCode(t, err, cloud.NotFound)
	_, err = e.globex.DisassociateAddress(ctx, a.ID)
	wantCode(t, err, cloud.NotFound)
	// GET /v1/addresses/{id}: the owner reads it, another tenant finds
	// nothing; the admin reads any.
	if got, err := e.acme.GetAddress(ctx, a.ID); err != nil || got.ID != a.ID || got.InstanceID != in.ID {
		t.Errorf("get own address = %+v, %v", got, err)
	}
	_, err = e.globex.GetAddress(ctx, a.ID)
	wantCode(t, err, cloud.NotFound)
	_, err = e.acme.GetAddress(ctx, "addr-nosuch")
	wantCode(t, err, cloud.NotFound)
	if got, err := e.admin.GetAddress(ctx, b.ID); err != nil || got.ID != b.ID {
		t.Errorf("admin get = %+v, %v", got, err)
	}
	_, err = e.acme.AssociateAddress(ctx, b.ID, gin.ID)
	if ce := wantCode(t, err, cloud.Invalid); ce.Details["field"] != "instance_id" {
		t.Errorf("another tenant's instance: %v", ce)
	}
	_, err = e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{InstanceID: gin.ID}, "")
	wantCode(t, err, cloud.Invalid)
	_, err = e.acme.AssociateAddress(ctx, b.ID, "")
	wantCode(t, err, cloud.Invalid)
	_, err = e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{Zone: "zone a"}, "")
	wantCode(t, err, cloud.Invalid)
	_, err = e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{Tenant: e.globexID}, "")
	wantCode(t, err, cloud.NotFound)
	e.billingUnchanged(before, "rejected address actions")

	// Zones must agree once the instance has one.
	e.move(other.ID, cloud.Running, "zone-b")
	zb, err := e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{InstanceID: other.ID}, "")
	if err != nil || zb.Zone != "zone-b" {
		t.Errorf("zone from the instance = %+v, %v", zb, err)
	}
	za, err := e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{Zone: "zone-a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	before = e.billingCounts()
	_, err = e.acme.AssociateAddress(ctx, za.ID, other.ID)
	wantCode(t, err, cloud.Invalid)
	e.billingUnchanged(before, "address in another zone")

	// Disassociate, twice; a terminated instance takes no address.
	if got, err := e.acme.DisassociateAddress(ctx, a.ID); err != nil || got.InstanceID != "" {
		t.Errorf("disassociate = %+v, %v", got, err)
	}
	before = e.billingCounts()
	if got, err := e.acme.DisassociateAddress(ctx, a.ID); err != nil || got.InstanceID != "" {
		t.Errorf("disassociate again = %+v, %v", got, err)
	}
	e.billingUnchanged(before, "disassociating a disassociated address")
	if _, err := e.acme.TerminateInstance(ctx, in.ID, 0); err != nil {
		t.Fatal(err)
	}
	before = e.billingCounts()
	_, err = e.acme.AssociateAddress(ctx, a.ID, in.ID)
	wantCode(t, err, cloud.Conflict)
	e.billingUnchanged(before, "associate with a terminated instance")

	// Release disassociates; a released address takes no instance.
	// An address without a zone goes with any instance.
	if got, err := e.acme.AssociateAddress(ctx, b.ID, other.ID); err != nil || got.InstanceID != other.ID {
		t.Errorf("zoneless address to a zone-b instance = %+v, %v", got, err)
	}
	rel, err := e.acme.ReleaseAddress(ctx, zb.ID)
	if err != nil || rel.InstanceID != "" || rel.ReleasedAt == nil {
		t.Errorf("release associated = %+v, %v", rel, err)
	}
	_, err = e.acme.AssociateAddress(ctx, zb.ID, other.ID)
	wantCode(t, err, cloud.Conflict)
}
