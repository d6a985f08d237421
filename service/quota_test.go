package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

func TestQuotaLimits(t *testing.T) {
	for _, c := range []struct {
		q      cloud.Quota
		limits bool
		h100   float64 // GPULimit for H100-80GB-SXM
	}{
		{cloud.Quota{}, false, 0},
		{cloud.Quota{RequestsPerSecond: 5, Burst: 9}, false, 0},
		{cloud.Quota{Instances: 1}, true, 0},
		{cloud.Quota{GPUs: map[string]float64{"L4": 2}}, true, 0},
		{cloud.Quota{GPUsPerModel: 16}, true, 16},
		{cloud.Quota{GPUs: map[string]float64{"H100-80GB-SXM": 32}, GPUsPerModel: 16}, true, 32},
		{cloud.Quota{GPUs: map[string]float64{"H100-80GB-SXM": 0}, GPUsPerModel: 16}, true, 0},
		{*service.DefaultQuota("tn-1"), true, service.DefaultGPUsPerModel},
	} {
		if got := service.Limits(&c.q); got != c.limits {
			t.Errorf("Limits(%+v) = %v, want %v", c.q, got, c.limits)
		}
		if got := service.GPULimit(&c.q, "H100-80GB-SXM"); got != c.h100 {
			t.Errorf("GPULimit(%+v, H100) = %v, want %v", c.q, got, c.h100)
		}
	}
}

// TestEnforceQuota: what one more instance may do under a quota, with the
// tenant already holding some.
func TestEnforceQuota(t *testing.T) {
	cat := catalog.Default()
	def := *service.DefaultQuota("tn-q")
	n := func(offering string, count int) []string {
		out := make([]string, count)
		for i := range out {
			out[i] = offering
		}
		return out
	}
	cat4 := func(lists ...[]string) []string {
		var out []string
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}
	for _, c := range []struct {
		name       string
		quota      *cloud.Quota // nil: none stored
		holds      []string     // offerings of live instances
		terminated int          // h100.1x instances that are terminated
		create     string
		resource   string // "" when allowed; else the refusal's resource
		perModel   bool
	}{
		{"no quota stored: no limits", nil, n("h100.1x", 40), 0, "h100.8x", "", false},
		{"the default: 16 H100 of 16", &def, n("h100.1x", 15), 0, "h100.1x", "", false},
		{"the default: a 17th H100", &def, n("h100.1x", 16), 0, "h100.1x", "gpus", true},
		{"the default caps each model on its own", &def, n("h100.1x", 16), 0, "l4.1x", "", false},
		{"the default: terminated instances do not count", &def, n("h100.1x", 15), 10, "h100.1x", "", false},
		{"the default: two bare-metal hosts, not three", &def, n("h100.metal", 2), 0, "h100.metal", "gpus", true},
		{"the default: 64 instances", &def, cat4(n("h100.1x", 16), n("a100.1x", 16), n("l4.1x", 16), n("l40s.1x", 16)), 0, "t4.1x", "instances", false},
		{"a model's own limit beats the per-model one", &cloud.Quota{GPUs: map[string]float64{"H100-80GB-SXM": 32}, GPUsPerModel: 16},
			n("h100.8x", 3), 0, "h100.8x", "", false},
		{"a model's own limit, reached", &cloud.Quota{GPUs: map[string]float64{"H100-80GB-SXM": 32}, GPUsPerModel: 16},
			n("h100.8x", 4), 0, "h100.1x", "gpus", false},
		{"a model listed with 0 has no limit", &cloud.Quota{GPUs: map[string]float64{"H100-80GB-SXM": 0}, GPUsPerModel: 1},
			n("h100.8x", 5), 0, "h100.8x", "", false},
		{"a fractional per-model limit counts MIG slices", &cloud.Quota{GPUsPerModel: 2.0 / 7},
			n("h100.mig.1g.10gb", 2), 0, "h100.mig.1g.10gb", "gpus", true},
		{"the request rate limits no instance", &cloud.Quota{RequestsPerSecond: 1, Burst: 1},
			n("h100.8x", 10), 0, "h100.8x", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := testkit.Backends()[0].Open(t)
			ctx := context.Background()
			err := st.Tx(ctx, func(tx cloud.Tx) error {
				if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "tn-q", Name: "q", CreatedAt: testkit.Epoch}); err != nil {
					return err
				}
				if c.quota != nil {
					q := *c.quota
					q.TenantID = "tn-q"
					if err := tx.PutQuota(ctx, &q); err != nil {
						return err
					}
				}
				for i, o := range append(c.holds, n("h100.1x", c.terminated)...) {
					in := &cloud.Instance{ID: fmt.Sprintf("i-%04d", i), TenantID: "tn-q", Offering: o,
						State: cloud.Pending, Market: cloud.MarketOnDemand, CreatedAt: testkit.Epoch, UpdatedAt: testkit.Epoch}
					if i >= len(c.holds) {
						in.State = cloud.Terminated
					}
					if err := tx.CreateInstance(ctx, in); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			o, err := cat.Offering(c.create)
			if err != nil {
				t.Fatal(err)
			}
			err = st.Tx(ctx, func(tx cloud.Tx) error { return service.EnforceQuota(ctx, tx, cat, "tn-q", o) })
			if c.resource == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			ce, ok := err.(*cloud.Error)
			if !ok || ce.Code != cloud.QuotaExceeded || ce.Details["resource"] != c.resource {
				t.Fatalf("got %v, want quota_exceeded on %s", err, c.resource)
			}
			if _, pm := ce.Details["per_model"]; pm != c.perModel {
				t.Errorf("details %v: per_model %v, want %v", ce.Details, pm, c.perModel)
			}
		})
	}
}

// TestDefaultQuota: a new tenant starts with the default quota, the
// operator tenant with none, and the default holds under concurrent
// creates, which run at serializable isolation once a quota limits them.
func TestDefaultQuota(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		if q, err := f.svc.Accounts.Quota(ctx, f.admin, service.OperatorTenant); err != nil || service.Limits(&q.Quota) {
			t.Errorf("operator quota = %+v, %v; want none", q.Quota, err)
		}
		const creates, workers = 24, 8
		var wg sync.WaitGroup
		results := make(chan error, creates)
		jobs := make(chan int, creates)
		for i := range creates {
			jobs <- i
		}
		close(jobs)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range jobs {
					var err error
					// A create that lost its serialization races is
					// retried with its key, as a client would.
					for try := 0; try < 20; try++ {
						_, _, err = f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "h100.1x"}, fmt.Sprint("k-", i))
						if !cloud.IsConflict(err) {
							break
						}
					}
					results <- err
				}
			}()
		}
		wg.Wait()
		close(results)
		made := 0
		for err := range results {
			switch cloud.ErrorCode(err) {
			case "":
				made++
			case cloud.QuotaExceeded:
			default:
				t.Errorf("create: %v", err)
			}
		}
		q, err := f.svc.Accounts.Quota(ctx, f.acme, f.acme.TenantID)
		if err != nil {
			t.Fatal(err)
		}
		if made != service.DefaultGPUsPerModel || q.Used.GPUs["H100-80GB-SXM"] != service.DefaultGPUsPerModel {
			t.Errorf("%d of %d concurrent h100.1x creates made, using %v; want exactly %d", made, creates, q.Used.GPUs, service.DefaultGPUsPerModel)
		}
		// A per-model cap alone limits creates too (they must not take the
		// read-committed path that skips the count).
		if _, err := f.svc.Accounts.SetQuota(ctx, f.admin, f.acme.TenantID, api.QuotaSpec{GPUsPerModel: service.DefaultGPUsPerModel}); err != nil {
			t.Fatal(err)
		}
		_, _, err = f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "h100.1x"}, "")
		if cloud.ErrorCode(err) != cloud.QuotaExceeded {
			t.Errorf("a create over the per-model cap alone: %v, want quota_exceeded", err)
		}
		// An admin raises it, and the tenant goes on.
		if _, err := f.svc.Accounts.SetQuota(ctx, f.admin, f.acme.TenantID, api.QuotaSpec{Instances: 100, GPUsPerModel: 20}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "h100.4x"}, ""); err != nil {
			t.Errorf("create after the raise: %v", err)
		}
	})
}

// TestGroupMinUnderPerModelQuota: a group whose min cannot fit the
// per-model cap with any of its offerings is refused; one that fits with
// one of them is made.
func TestGroupMinUnderPerModelQuota(t *testing.T) {
	f := newAHFixture(t, testkit.Backends()[0].Open(t))
	ctx := context.Background()
	for _, c := range []struct {
		offerings []string
		min       int
		refused   bool
	}{
		{[]string{"h100.8x"}, 3, true},          // 24 GPUs of a 16 cap
		{[]string{"h100.8x", "l4.8x"}, 3, true}, // neither fits
		{[]string{"h100.8x", "l4.1x"}, 3, false},
		{[]string{"h100.8x"}, 2, false},
	} {
		spec := api.CreateGroupRequest{Name: fmt.Sprintf("g%d%v", c.min, c.refused), Template: cloud.GroupTemplate{Offerings: c.offerings}, Min: c.min, Max: 10}
		_, _, err := f.svc.Groups.Create(ctx, f.acme, spec, "")
		if got := cloud.ErrorCode(err) == cloud.QuotaExceeded; got != c.refused || !c.refused && err != nil {
			t.Errorf("%v min %d: %v, want refused %v", c.offerings, c.min, err, c.refused)
		}
	}
}
