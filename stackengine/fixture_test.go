package stackengine_test

import (
	"context"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stackengine"
	"github.com/gpucloud/gpucloud/testkit"
)

// fixture is the scaffolding of the engine's tests: the services over a
// fresh store, built once as a server builds them, the engine over the
// same services, two tenants (acme and globex) with a member each, and an
// admin of a third tenant.
type fixture struct {
	t                   *testing.T
	st                  cloud.Store
	clock               *testkit.Clock
	svc                 *service.Services
	engine              *stackengine.Engine
	acme, globex, admin service.Actor
}

func newFixture(t *testing.T, st cloud.Store) *fixture {
	return newFixtureWith(t, st, service.Options{})
}

// newFixtureWith is newFixture with the services' options opts (their
// clock is the fixture's).
func newFixtureWith(t *testing.T, st cloud.Store, opts service.Options) *fixture {
	t.Helper()
	f := &fixture{t: t, st: st, clock: testkit.NewClock(testkit.Epoch)}
	opts.Now = f.clock.Now
	f.svc = service.New(st, nil, opts)
	f.engine = stackengine.New(f.svc)
	ctx := context.Background()
	tenant := func(name string) string {
		// Names are unique in a store, which a test may share between
		// fixtures.
		id := service.NewID(service.TenantPrefix)
		tn := &cloud.Tenant{ID: id, Name: name + "-" + id[len(service.TenantPrefix):], CreatedAt: f.clock.Now()}
		if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.CreateTenant(ctx, tn) }); err != nil {
			t.Fatalf("create tenant %s: %v", name, err)
		}
		return tn.ID
	}
	f.acme = service.Actor{ID: "u-acme", TenantID: tenant("acme"), Role: cloud.RoleMember}
	f.globex = service.Actor{ID: "u-globex", TenantID: tenant("globex"), Role: cloud.RoleMember}
	f.admin = service.Actor{ID: "u-admin", TenantID: tenant("ops"), Role: cloud.RoleAdmin}
	return f
}

// counts is what the fixture's store holds.
func (f *fixture) counts() testkit.Rows { return testkit.CountRows(f.t, f.st) }

// instance creates an instance of a, outside any stack.
func (f *fixture) instance(a service.Actor, zones ...string) *cloud.Instance {
	f.t.Helper()
	in, _, err := f.svc.Instances.Create(context.Background(), a, api.CreateInstanceRequest{Offering: "l4.1x", Zones: zones}, "")
	if err != nil {
		f.t.Fatalf("create instance: %v", err)
	}
	return in
}

// hidden checks that err reads exactly like a missing kind id: another
// tenant's resource does not leak.
func hidden(t *testing.T, err error, kind, id string) {
	t.Helper()
	if got := cloud.ErrorCode(err); got != cloud.NotFound {
		t.Fatalf("error %v, want %s", err, cloud.NotFound)
	}
	ce, _ := err.(*cloud.Error)
	missing := service.NotFound(kind, id).(*cloud.Error)
	if ce == nil || ce.Message != missing.Message || ce.Details["kind"] != kind || ce.Details["id"] != id {
		t.Errorf("error %v, want it to read like a missing %s: %v", err, kind, missing)
	}
}
