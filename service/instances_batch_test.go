package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// burstResult is one create of a concurrent burst.
type burstResult struct {
	in      *cloud.Instance
	created bool
	err     error
}

// burst sends the creates at once, each on its own goroutine, and answers
// them in order.
func burst(svc *service.Services, creates []func() (*cloud.Instance, bool, error)) []burstResult {
	out := make([]burstResult, len(creates))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, c := range creates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i].in, out[i].created, out[i].err = c()
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// TestCreateBurstQuotaAndAddresses: concurrent creates of one tenant,
// which the service commits together, never take the tenant past its
// quota: exactly the quota's worth succeed, the rest are quota_exceeded,
// every instance has its own address, and each answer is the instance
// the store holds. Sent again with the same keys, the winners answer
// their instances (created false) and nothing more is written.
func TestCreateBurstQuotaAndAddresses(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		const quota, sent = 12, 30
		if _, err := f.svc.Accounts.SetQuota(ctx, f.admin, f.acme.TenantID, api.QuotaSpec{Instances: quota}); err != nil {
			t.Fatal(err)
		}
		creates := make([]func() (*cloud.Instance, bool, error), sent)
		for i := range creates {
			creates[i] = func() (*cloud.Instance, bool, error) {
				return f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "l4.1x"}, fmt.Sprintf("k-%d", i))
			}
		}
		check := func(round int, res []burstResult) map[string]string {
			t.Helper()
			byKey := map[string]string{}
			addrs := map[string]bool{}
			for i, r := range res {
				switch {
				case r.err == nil:
					if r.created != (round == 0) || r.in.IdempotencyKey != fmt.Sprintf("k-%d", i) {
						t.Errorf("round %d create %d: created %v, key %q", round, i, r.created, r.in.IdempotencyKey)
					}
					if addrs[r.in.PrivateAddress] || r.in.PrivateAddress == "" {
						t.Errorf("round %d create %d: address %q given twice or not at all", round, i, r.in.PrivateAddress)
					}
					addrs[r.in.PrivateAddress] = true
					stored, err := f.svc.Instances.Get(ctx, f.acme, r.in.ID)
					if err != nil || stored.PrivateAddress != r.in.PrivateAddress || stored.Version != r.in.Version {
						t.Errorf("round %d create %d: answered %+v, stored %+v %v", round, i, r.in, stored, err)
					}
					byKey[r.in.IdempotencyKey] = r.in.ID
				case cloud.ErrorCode(r.err) != cloud.QuotaExceeded:
					t.Errorf("round %d create %d: %v, want quota_exceeded", round, i, r.err)
				}
			}
			if len(byKey) != quota {
				t.Errorf("round %d: %d creates succeeded, want the quota's %d", round, len(byKey), quota)
			}
			return byKey
		}
		first := check(0, burst(f.svc, creates))
		before := f.state()
		again := check(1, burst(f.svc, creates))
		for k, id := range again {
			if first[k] != id {
				t.Errorf("key %s: %s, then %s", k, first[k], id)
			}
		}
		f.unchanged(before, "the burst sent again")
	})
}

// TestCreateBurstKeysPerTenant: two tenants' bursts with the same keys,
// and an admin's creates for one of them among its member's, each get
// their own tenant's instances: a key names an instance of one tenant
// only, and no answer carries another tenant's instance. A key sent twice
// in a burst with the same request is one instance; with another request,
// a conflict.
func TestCreateBurstKeysPerTenant(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		const n = 16
		for _, a := range []service.Actor{f.acme, f.globex} {
			if _, err := f.svc.Accounts.SetQuota(ctx, f.admin, a.TenantID, api.QuotaSpec{Instances: 100, GPUsPerModel: 100}); err != nil {
				t.Fatal(err)
			}
		}
		var creates []func() (*cloud.Instance, bool, error)
		type sent struct {
			tenant, key, offering string
		}
		var sends []sent
		add := func(a service.Actor, tenant, key, offering string) {
			creates = append(creates, func() (*cloud.Instance, bool, error) {
				spec := api.CreateInstanceRequest{Offering: offering}
				if a.Admin() {
					spec.Tenant = tenant
				}
				return f.svc.Instances.Create(ctx, a, spec, key)
			})
			sends = append(sends, sent{tenant, key, offering})
		}
		for i := range n {
			key := fmt.Sprintf("shared-%d", i)
			add(f.acme, f.acme.TenantID, key, "l4.1x")
			add(f.globex, f.globex.TenantID, key, "l4.1x")
			if i%2 == 0 {
				add(f.admin, f.acme.TenantID, key, "l4.1x") // the same request: the same instance
			} else {
				add(f.acme, f.acme.TenantID, key, "l4.2x") // another request: a conflict
			}
		}
		res := burst(f.svc, creates)
		ids := map[[2]string]string{}
		conflicts := 0
		for i, r := range res {
			s := sends[i]
			if r.err != nil {
				if cloud.ErrorCode(r.err) != cloud.Conflict {
					t.Errorf("create %d %+v: %v", i, s, r.err)
				}
				conflicts++
				continue
			}
			if r.in.TenantID != s.tenant || r.in.IdempotencyKey != s.key {
				t.Fatalf("create %d %+v answered %s's instance %s (key %q)", i, s, r.in.TenantID, r.in.ID, r.in.IdempotencyKey)
			}
			k := [2]string{s.tenant, s.key}
			if id, ok := ids[k]; ok && id != r.in.ID {
				t.Errorf("key %v: instances %s and %s", k, id, r.in.ID)
			}
			ids[k] = r.in.ID
		}
		// Of each acme key sent with two offerings, one request won and the
		// other is a conflict.
		if conflicts != n/2 || len(ids) != 2*n {
			t.Errorf("%d conflicts, %d instances; want %d and %d", conflicts, len(ids), n/2, 2*n)
		}
		for _, a := range []service.Actor{f.acme, f.globex} {
			ins, _, err := f.svc.Instances.List(ctx, a, service.InstanceQuery{Limit: 100})
			if err != nil || len(ins) != n {
				t.Errorf("%s lists %d instances (%v), want %d", a.TenantID, len(ins), err, n)
			}
		}
	})
}

// TestCreateBurstCancelled: a create whose caller has gone before its
// turn writes nothing and answers the context's error; the others of its
// burst are unaffected.
func TestCreateBurstCancelled(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		gone, cancel := context.WithCancel(context.Background())
		cancel()
		before := f.state()
		if _, _, err := f.svc.Instances.Create(gone, f.acme, api.CreateInstanceRequest{Offering: "l4.1x"}, "gone"); err == nil {
			t.Fatal("a cancelled create succeeded")
		}
		f.unchanged(before, "a cancelled create")
		ctx := context.Background()
		creates := make([]func() (*cloud.Instance, bool, error), 8)
		for i := range creates {
			c := ctx
			if i%2 == 1 {
				c = gone
			}
			creates[i] = func() (*cloud.Instance, bool, error) {
				return f.svc.Instances.Create(c, f.acme, api.CreateInstanceRequest{Offering: "l4.1x"}, fmt.Sprintf("c-%d", i))
			}
		}
		for i, r := range burst(f.svc, creates) {
			if (r.err == nil) != (i%2 == 0) {
				t.Errorf("create %d: %v", i, r.err)
			}
		}
		ins, _, err := f.svc.Instances.List(ctx, f.acme, service.InstanceQuery{Limit: 100})
		if err != nil || len(ins) != 4 {
			t.Errorf("%d instances (%v), want the 4 whose callers waited", len(ins), err)
		}
	})
}
