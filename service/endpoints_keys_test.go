package service_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestEndpointKeys: a key is made with its defaults and shown once, a
// retry answers it without its secret, bad input is refused naming the
// field with nothing written, the limit holds, another tenant can neither
// list, revoke nor use it, a key calls its own endpoint only and nothing
// but its invoke verbs, and a revoked key opens nothing.
func TestEndpointKeys(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		a, _, err := f.svc.Endpoints.Create(ctx, f.acme, echoEndpoint("a"), "")
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := f.svc.Endpoints.Create(ctx, f.acme, echoEndpoint("b"), "")
		if err != nil {
			t.Fatal(err)
		}
		ck, created, err := f.svc.Endpoints.CreateKey(ctx, f.acme, "a", api.CreateEndpointKeyRequest{Name: "app"}, "k1")
		if err != nil || !created {
			t.Fatalf("create key: %+v %v %v", ck, created, err)
		}
		k := ck.Key
		if k.Rate != service.DefaultKeyRate || k.Burst != service.DefaultKeyBurst || k.EndpointID != a.ID || k.TenantID != f.acme.TenantID ||
			!strings.HasPrefix(ck.Secret, service.SecretPrefix+k.ID+"_") || !service.IsEndpointKey(ck.Secret) {
			t.Errorf("created key: %+v secret %q", k, ck.Secret)
		}
		// A retry answers the same key, without its secret.
		again, created, err := f.svc.Endpoints.CreateKey(ctx, f.acme, a.ID, api.CreateEndpointKeyRequest{Name: "app", Rate: 100, Burst: 200}, "k1")
		if err != nil || created || again.Key.ID != k.ID || again.Secret != "" {
			t.Errorf("retry: %+v %v %v", again, created, err)
		}
		if _, _, err := f.svc.Endpoints.CreateKey(ctx, f.acme, "a", api.CreateEndpointKeyRequest{Name: "app", Rate: 5}, "k1"); codeOf(err) != cloud.Conflict ||
			!strings.Contains(err.Error(), "rate") {
			t.Errorf("reused key with another rate: %v, want a conflict naming rate", err)
		}

		before := f.counts()
		for _, tc := range []struct {
			req   api.CreateEndpointKeyRequest
			field string
		}{
			{api.CreateEndpointKeyRequest{}, "name"},
			{api.CreateEndpointKeyRequest{Name: "bad name"}, "name"},
			{api.CreateEndpointKeyRequest{Name: "x", Rate: -1}, "rate"},
			{api.CreateEndpointKeyRequest{Name: "x", Rate: service.MaxKeyRate + 1}, "rate"},
			{api.CreateEndpointKeyRequest{Name: "x", Burst: -5}, "burst"},
			{api.CreateEndpointKeyRequest{Name: "x", Rate: 10, Burst: service.MaxKeyBurst + 1}, "burst"},
		} {
			_, _, err := f.svc.Endpoints.CreateKey(ctx, f.acme, "a", tc.req, "")
			var ce *cloud.Error
			if codeOf(err) != cloud.Invalid || !asError(err, &ce) || ce.Details["field"] != tc.field {
				t.Errorf("%+v: %v, want invalid_argument naming %s", tc.req, err, tc.field)
			}
		}
		if _, _, err := f.svc.Endpoints.CreateKey(ctx, f.acme, "nope", api.CreateEndpointKeyRequest{Name: "x"}, ""); codeOf(err) != cloud.NotFound {
			t.Errorf("key for a missing endpoint: %v", err)
		}
		f.unchanged(before, "refused key creates")

		// Another tenant lists, revokes and makes nothing, by name or ID,
		// and a key of its own endpoint named alike is no key of acme's.
		for _, ref := range []string{"a", a.ID} {
			if ks, err := f.svc.Endpoints.Keys(ctx, f.globex, ref, true); codeOf(err) != cloud.NotFound {
				t.Errorf("globex lists %s's keys: %v %v", ref, ks, err)
			}
			if _, err := f.svc.Endpoints.RevokeKey(ctx, f.globex, ref, k.ID); codeOf(err) != cloud.NotFound {
				t.Errorf("globex revokes on %s: %v", ref, err)
			}
			if _, _, err := f.svc.Endpoints.CreateKey(ctx, f.globex, ref, api.CreateEndpointKeyRequest{Name: "x"}, ""); codeOf(err) != cloud.NotFound {
				t.Errorf("globex makes a key of %s: %v", ref, err)
			}
		}
		ga, _, err := f.svc.Endpoints.Create(ctx, f.globex, echoEndpoint("a"), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Endpoints.RevokeKey(ctx, f.globex, ga.ID, k.ID); codeOf(err) != cloud.NotFound {
			t.Errorf("globex revokes acme's key through its own endpoint: %v", err)
		}
		// A key of endpoint b is not revoked through a.
		kb, _, err := f.svc.Endpoints.CreateKey(ctx, f.acme, "b", api.CreateEndpointKeyRequest{Name: "other", Rate: 5}, "")
		if err != nil || kb.Key.Burst != 10 {
			t.Fatalf("key of b: %+v %v", kb, err)
		}
		if _, err := f.svc.Endpoints.RevokeKey(ctx, f.acme, "a", kb.Key.ID); codeOf(err) != cloud.NotFound {
			t.Errorf("b's key revoked through a: %v", err)
		}
		ks, err := f.svc.Endpoints.Keys(ctx, f.acme, "a", false)
		if err != nil || len(ks) != 1 || ks[0].ID != k.ID {
			t.Fatalf("acme lists a's keys: %v %v", ks, err)
		}
		if b, _ := json.Marshal(ks); strings.Contains(string(b), ck.Secret[len(ck.Secret)-20:]) || strings.Contains(string(b), "hash") {
			t.Errorf("a listed key shows its secret or hash: %s", b)
		}

		// The key authenticates, as an actor of its own endpoint only.
		got, err := f.svc.Endpoints.KeyOf(ctx, ck.Secret)
		if err != nil || got.ID != k.ID || got.LastUsedAt == nil {
			t.Fatalf("KeyOf: %+v %v", got, err)
		}
		for _, bad := range []string{ck.Secret[:len(ck.Secret)-1] + "x", ck.Secret + "x", "gpc_ek-0_x", "gpc_" + k.ID, "gpc_tk-00_" + ck.Secret[len(service.SecretPrefix+k.ID+"_"):]} {
			if _, err := f.svc.Endpoints.KeyOf(ctx, bad); codeOf(err) != cloud.NotFound {
				t.Errorf("KeyOf(%q): %v, want not_found", bad, err)
			}
		}
		ka := service.KeyActor(got)
		j, created, err := f.svc.Endpoints.Submit(ctx, ka, "a", json.RawMessage(`{"x":1}`), "")
		if err != nil || !created || j.KeyID != k.ID {
			t.Fatalf("a key's submit: %+v %v", j, err)
		}
		if got, err := f.svc.Endpoints.Job(ctx, ka, a.ID, j.ID); err != nil || got.KeyID != k.ID {
			t.Errorf("a key reads its job: %+v %v", got, err)
		}
		f.clock.Advance(time.Millisecond)
		uj, _, err := f.svc.Endpoints.Submit(ctx, f.acme, "a", nil, "")
		if err != nil || uj.KeyID != "" {
			t.Errorf("a user's job: %+v %v", uj, err)
		}
		if jobs := f.jobs(a.ID); len(jobs) != 2 || jobs[0].ID != uj.ID || jobs[1].ID != j.ID {
			t.Errorf("ListJobs: %v, want the user's job, then the key's", jobs)
		}
		before = f.counts()
		for _, ref := range []string{"b", b.ID, ga.ID} {
			if _, _, err := f.svc.Endpoints.Submit(ctx, ka, ref, nil, ""); codeOf(err) != cloud.NotFound {
				t.Errorf("a's key submits to %s: %v, want not_found", ref, err)
			}
			if _, err := f.svc.Endpoints.Get(ctx, ka, ref); codeOf(err) != cloud.NotFound {
				t.Errorf("a's key reads %s: %v, want not_found", ref, err)
			}
		}
		if _, err := f.svc.Endpoints.Job(ctx, ka, "b", j.ID); codeOf(err) != cloud.NotFound {
			t.Errorf("a's key reads its job through b: %v", err)
		}
		denied := map[string]error{}
		_, _, denied["create endpoint"] = f.svc.Endpoints.Create(ctx, ka, echoEndpoint("c"), "")
		_, denied["list endpoints"] = f.svc.Endpoints.List(ctx, ka, "", false)
		_, denied["update"] = f.svc.Endpoints.Update(ctx, ka, "a", api.UpdateEndpointRequest{Max: new(5)}, 0)
		_, denied["delete"] = f.svc.Endpoints.Delete(ctx, ka, "a")
		_, denied["describe"] = f.svc.Endpoints.Describe(ctx, ka, "a")
		_, _, denied["create key"] = f.svc.Endpoints.CreateKey(ctx, ka, "a", api.CreateEndpointKeyRequest{Name: "x"}, "")
		_, denied["list keys"] = f.svc.Endpoints.Keys(ctx, ka, "a", false)
		_, denied["revoke key"] = f.svc.Endpoints.RevokeKey(ctx, ka, "a", k.ID)
		for verb, err := range denied {
			if codeOf(err) != cloud.PermissionDenied {
				t.Errorf("a key's %s: %v, want permission_denied", verb, err)
			}
		}
		f.unchanged(before, "a key's refused calls")
		if c, err := f.svc.Endpoints.Cancel(ctx, ka, "a", j.ID); err != nil || c.State != cloud.JobCancelled {
			t.Errorf("a key cancels its job: %+v %v", c, err)
		}

		// Revoked: the key opens nothing, and a second revoke answers it.
		f.clock.Advance(time.Second)
		r, err := f.svc.Endpoints.RevokeKey(ctx, f.acme, "a", k.ID)
		if err != nil || r.RevokedAt == nil {
			t.Fatalf("revoke: %+v %v", r, err)
		}
		if r2, err := f.svc.Endpoints.RevokeKey(ctx, f.acme, "a", k.ID); err != nil || !r2.RevokedAt.Equal(*r.RevokedAt) {
			t.Errorf("revoke again: %+v %v", r2, err)
		}
		if _, err := f.svc.Endpoints.KeyOf(ctx, ck.Secret); codeOf(err) != cloud.NotFound {
			t.Errorf("a revoked key authenticates: %v", err)
		}
		if ks, err := f.svc.Endpoints.Keys(ctx, f.acme, "a", false); err != nil || len(ks) != 0 {
			t.Errorf("live keys after the revoke: %v %v", ks, err)
		}
		if ks, err := f.svc.Endpoints.Keys(ctx, f.acme, "a", true); err != nil || len(ks) != 1 || ks[0].RevokedAt == nil {
			t.Errorf("all keys after the revoke: %v %v", ks, err)
		}
		// A deleted endpoint's keys open nothing.
		if _, err := f.svc.Endpoints.KeyOf(ctx, kb.Secret); err != nil {
			t.Fatalf("b's key: %v", err)
		}
		if _, err := f.svc.Endpoints.Delete(ctx, f.acme, "b"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.svc.Endpoints.CreateKey(ctx, f.acme, b.ID, api.CreateEndpointKeyRequest{Name: "late"}, ""); codeOf(err) != cloud.Conflict {
			t.Errorf("a key for a deleting endpoint: %v", err)
		}
	})
}

// TestEndpointKeyLimit: an endpoint holds at most MaxKeysPerEndpoint live
// keys; a revoked one frees its place.
func TestEndpointKeyLimit(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		if _, _, err := f.svc.Endpoints.Create(ctx, f.acme, echoEndpoint("a"), ""); err != nil {
			t.Fatal(err)
		}
		var first string
		for i := range service.MaxKeysPerEndpoint {
			ck, _, err := f.svc.Endpoints.CreateKey(ctx, f.acme, "a", api.CreateEndpointKeyRequest{Name: "k"}, "")
			if err != nil {
				t.Fatalf("key %d: %v", i, err)
			}
			if i == 0 {
				first = ck.Key.ID
			}
		}
		before := f.counts()
		if _, _, err := f.svc.Endpoints.CreateKey(ctx, f.acme, "a", api.CreateEndpointKeyRequest{Name: "k"}, ""); codeOf(err) != cloud.QuotaExceeded {
			t.Fatalf("key over the limit: %v", err)
		}
		f.unchanged(before, "a key over the limit")
		if _, err := f.svc.Endpoints.RevokeKey(ctx, f.acme, "a", first); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.svc.Endpoints.CreateKey(ctx, f.acme, "a", api.CreateEndpointKeyRequest{Name: "k"}, ""); err != nil {
			t.Errorf("a key after a revoke: %v", err)
		}
	})
}

func asError(err error, ce **cloud.Error) bool {
	e, ok := err.(*cloud.Error)
	*ce = e
	return ok
}

// jobs lists an endpoint's jobs, newest first, through the store.
func (f *vaFixture) jobs(endpoint string) []*cloud.Job {
	f.t.Helper()
	var out []*cloud.Job
	if err := f.st.Tx(context.Background(), func(tx cloud.Tx) (err error) { out, err = tx.ListJobs(context.Background(), endpoint, 10); return }); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// TestKeyLimitsProperty: for any rate and burst, CheckKeyLimits either
// refuses naming the field at fault, or leaves a rate and burst within
// their caps, the asked values kept and the defaults filled in.
func TestKeyLimitsProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() int {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return rng.IntN(5000) - 100
		case 2:
			return rng.IntN(2001)
		}
		return rng.IntN(1 << 30)
	}
	for range 10000 {
		req := api.CreateEndpointKeyRequest{Name: "k", Rate: pick(), Burst: pick()}
		got := req
		err := service.CheckKeyLimits(&got)
		var ce *cloud.Error
		switch {
		case err != nil && asError(err, &ce):
			field := ce.Details["field"]
			rateBad := req.Rate < 0 || req.Rate > service.MaxKeyRate
			if field == "rate" != rateBad || field != "rate" && field != "burst" {
				t.Fatalf("%+v: refused naming %v", req, field)
			}
		case err != nil:
			t.Fatalf("%+v: %v", req, err)
		default:
			if got.Rate < 1 || got.Rate > service.MaxKeyRate || got.Burst < 1 || got.Burst > service.MaxKeyBurst ||
				req.Rate != 0 && got.Rate != req.Rate || req.Burst != 0 && got.Burst != req.Burst ||
				req.Rate == 0 && got.Rate != service.DefaultKeyRate || req.Burst == 0 && got.Burst != min(2*got.Rate, service.MaxKeyBurst) {
				t.Fatalf("%+v: accepted as %+v", req, got)
			}
		}
	}
}
