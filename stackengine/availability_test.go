package stackengine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stack"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestStackInstanceGetsTheAPIChecks: with the fleet's availability saying
// no host could ever run an offering, a stack's instance of it is refused
// with the typed error an API create of it gets (the engine is handed the
// server's services, Availability included), and an apply that creates
// one, alone or in a wave of several, fails and rolls back, naming that
// error, with no instance left.
func TestStackInstanceGetsTheAPIChecks(t *testing.T) {
	const never = "h200.mig.1g.18gb"
	avail := map[string]cloud.OfferingAvailability{never: {Hosts: 0, Reasons: map[string]int{"wrong GPU model": 2}}}
	for _, tc := range []struct {
		name  string
		count int
	}{
		{"one instance", 1},
		{"a wave of three (one transaction, then one by one)", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := testkit.Backends()[0].Open(t)
			clock := testkit.NewClock(testkit.Epoch)
			svc := service.New(st, nil, service.Options{Now: clock.Now,
				Availability: func() map[string]cloud.OfferingAvailability { return avail }})
			ctx := context.Background()
			tn := &cloud.Tenant{ID: service.NewID(service.TenantPrefix), Name: "acme", CreatedAt: clock.Now()}
			if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.CreateTenant(ctx, tn) }); err != nil {
				t.Fatal(err)
			}
			acme := service.Actor{ID: "u-acme", TenantID: tn.ID, Role: cloud.RoleMember}

			_, _, apiErr := svc.Instances.Create(ctx, acme, api.CreateInstanceRequest{Offering: never}, "")
			want, ok := apiErr.(*cloud.Error)
			if !ok || want.Code != cloud.Invalid {
				t.Fatalf("API create = %v, want invalid", apiErr)
			}
			_, _, err := createResource(ctx, svc, acme, stack.TypeInstance, "node", map[string]any{"offering": never}, "k-node")
			got, ok := err.(*cloud.Error)
			if !ok || got.Code != want.Code || got.Details["hosts"] != want.Details["hosts"] ||
				got.Details["field"] != "resources.node.properties.offering" || !strings.HasSuffix(got.Message, want.Message) {
				t.Fatalf("stack create = %#v, want the API's %#v at resources.node.properties", err, want)
			}

			tmpl := fmt.Sprintf("resources:\n  node:\n    type: instance\n    count: %d\n    properties: {offering: %s}\n", tc.count, never)
			if _, err := svc.Stacks.Apply(ctx, acme, "s", api.ApplyStackRequest{Template: tmpl}); err != nil {
				t.Fatalf("apply: %v", err)
			}
			e := New(svc)
			var v *api.StackView
			for range 10 {
				if _, err := e.Step(ctx); err != nil {
					t.Fatalf("step: %v", err)
				}
				if v, err = svc.Stacks.Get(ctx, acme, "", "s"); err != nil {
					t.Fatal(err)
				}
				if v.State != cloud.StackApplying {
					break
				}
			}
			if v.State != cloud.StackFailed || !strings.Contains(v.Reason, want.Message) || !strings.Contains(v.Reason, "rolled back") {
				t.Errorf("stack %s %q, want failed with %q, rolled back", v.State, v.Reason, want.Message)
			}
			ins, _, err := svc.Instances.List(ctx, acme, service.InstanceQuery{Limit: 100})
			if err != nil || len(ins) != 0 {
				t.Errorf("instances after the failed apply: %d, %v", len(ins), err)
			}
		})
	}
}
