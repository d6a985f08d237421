package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/testkit"
)

func keyTestEndpoint(name string, mode cloud.EndpointMode) api.CreateEndpointRequest {
	return api.CreateEndpointRequest{Name: name, EndpointSpec: cloud.EndpointSpec{Image: "ghcr.io/acme/echo:1", Offerings: []string{"l4.1x"}, Mode: mode}}
}

// TestEndpointKeysAPI: over the real server, a tenant makes a key (its
// secret once), and the key runs jobs and reads and cancels them on its
// endpoint; it gets not_found on the tenant's other endpoints and on
// another tenant's, 403 on every other route, its own bucket at its own
// rate (429 with Retry-After over it, the tenant's user unaffected);
// another tenant can neither list nor revoke it; a revoke takes effect at
// once on the server that made it and within the key cache time on
// another replica.
func TestEndpointKeysAPI(t *testing.T) {
	// The limiter runs on the env's clock, which exists once the env does.
	var clk atomic.Pointer[testkit.Clock]
	e := newEnvWith(t, Options{Limits: RateLimits{Now: func() time.Time {
		if c := clk.Load(); c != nil {
			return c.Now()
		}
		return testkit.Epoch
	}}})
	clk.Store(e.clock)
	ctx := context.Background()
	a, err := e.acme.CreateEndpoint(ctx, keyTestEndpoint("a", cloud.EndpointQueue), "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.acme.CreateEndpoint(ctx, keyTestEndpoint("b", cloud.EndpointQueue), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.acme.CreateEndpoint(ctx, keyTestEndpoint("web", cloud.EndpointHTTP), ""); err != nil {
		t.Fatal(err)
	}
	g, err := e.globex.CreateEndpoint(ctx, keyTestEndpoint("a", cloud.EndpointQueue), "")
	if err != nil {
		t.Fatal(err)
	}

	ck, err := e.acme.CreateEndpointKey(ctx, "a", api.CreateEndpointKeyRequest{Name: "app"}, "idem-1")
	if err != nil || ck.Secret == "" || ck.Key.EndpointID != a.ID {
		t.Fatalf("create key: %+v %v", ck, err)
	}
	if again, err := e.acme.CreateEndpointKey(ctx, a.ID, api.CreateEndpointKeyRequest{Name: "app"}, "idem-1"); err != nil ||
		again.Key.ID != ck.Key.ID || again.Secret != "" {
		t.Errorf("retried create: %+v %v", again, err)
	}
	status, _, body := e.raw("POST", "/v1/endpoints/a/keys", e.acmeToken, strings.NewReader(`{"name":"x","rate":5000}`), nil)
	if eb := decodeErr(t, body); status != http.StatusBadRequest || eb.Details["field"] != "rate" {
		t.Errorf("a rate over the cap: %d %s", status, body)
	}
	key := e.client(ck.Secret)

	// The key's calls on its endpoint.
	j, err := key.RunJob(ctx, "a", json.RawMessage(`{"n":1}`), "")
	if err != nil || j.KeyID != ck.Key.ID || j.State != cloud.JobQueued {
		t.Fatalf("run through the key: %+v %v", j, err)
	}
	if got, err := key.JobStatus(ctx, a.ID, j.ID); err != nil || got.ID != j.ID {
		t.Errorf("status through the key: %+v %v", got, err)
	}
	if got, err := key.RunJobSync(ctx, "a", nil, 0, ""); err != nil || got.KeyID != ck.Key.ID {
		t.Errorf("runsync through the key: %+v %v", got, err)
	}
	if got, err := key.CancelJob(ctx, "a", j.ID); err != nil || got.State != cloud.JobCancelled {
		t.Errorf("cancel through the key: %+v %v", got, err)
	}
	// A key of its own rate: over its burst, 429 with Retry-After, and
	// neither the tenant's user nor the other key is held back.
	slow, err := e.acme.CreateEndpointKey(ctx, "a", api.CreateEndpointKeyRequest{Name: "slow", Rate: 1, Burst: 2}, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if status, _, body := e.raw("GET", "/v1/endpoints/a/status/"+j.ID, slow.Secret, nil, nil); status != http.StatusOK {
			t.Errorf("the slow key's call %d: %d %s", i, status, body)
		}
	}
	status, h, body := e.raw("GET", "/v1/endpoints/a/status/"+j.ID, slow.Secret, nil, nil)
	if status != http.StatusTooManyRequests || h.Get("Retry-After") != "1" || !strings.Contains(string(body), slow.Key.ID) {
		t.Errorf("over the key's burst: %d %v %s", status, h, body)
	}
	if _, err := e.acme.JobStatus(ctx, "a", j.ID); err != nil {
		t.Errorf("the user's own call while the key is limited: %v", err)
	}
	if _, err := key.JobStatus(ctx, "a", j.ID); err != nil {
		t.Errorf("the other key's call while one is limited: %v", err)
	}
	e.clock.Advance(time.Second)
	if status, _, body := e.raw("GET", "/v1/endpoints/a/status/"+j.ID, slow.Secret, nil, nil); status != http.StatusOK {
		t.Errorf("the slow key a second later: %d %s", status, body)
	}

	// Another endpoint, of the tenant or another, is not_found; every
	// other route is 403.
	before := e.counts()
	for _, ref := range []string{"b", b.ID, g.ID} {
		if _, err := key.RunJob(ctx, ref, nil, ""); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("the key runs on %s: %v", ref, err)
		}
		if _, err := key.JobStatus(ctx, ref, j.ID); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("the key reads its job through %s: %v", ref, err)
		}
	}
	if status, _, body := e.raw("POST", "/v1/endpoints/web/http/hello", ck.Secret, strings.NewReader(`{}`), nil); status != http.StatusNotFound {
		t.Errorf("the key on the tenant's HTTP endpoint: %d %s", status, body)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/endpoints"}, {"GET", "/v1/endpoints/a"}, {"PATCH", "/v1/endpoints/a"}, {"DELETE", "/v1/endpoints/a"},
		{"GET", "/v1/endpoints/a/keys"}, {"POST", "/v1/endpoints/a/keys"}, {"DELETE", "/v1/endpoints/a/keys/" + ck.Key.ID},
		{"GET", "/v1/instances"}, {"POST", "/v1/tokens"}, {"GET", "/v1/tenants"}, {"GET", "/v1/agent/assignments"},
	} {
		status, _, body := e.raw(c.method, c.path, ck.Secret, strings.NewReader(`{}`), nil)
		if status != http.StatusForbidden || decodeErr(t, body).Code != cloud.PermissionDenied {
			t.Errorf("the key on %s %s: %d %s, want 403", c.method, c.path, status, body)
		}
	}
	// Another tenant neither lists, makes nor revokes the key.
	for _, ref := range []string{"a", a.ID} {
		if ks, err := e.globex.EndpointKeys(ctx, ref, true); ref == a.ID && cloud.ErrorCode(err) != cloud.NotFound || ref == "a" && len(ks) != 0 {
			t.Errorf("globex lists %s's keys: %v", ref, err)
		}
		if _, err := e.globex.RevokeEndpointKey(ctx, ref, ck.Key.ID); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("globex revokes through %s: %v", ref, err)
		}
	}
	if _, err := e.globex.CreateEndpointKey(ctx, a.ID, api.CreateEndpointKeyRequest{Name: "x"}, ""); cloud.ErrorCode(err) != cloud.NotFound {
		t.Errorf("globex makes a key of acme's endpoint: %v", err)
	}
	e.unchanged(before, "refused calls")
	if ks, err := e.acme.EndpointKeys(ctx, "a", false); err != nil || len(ks) != 2 || ks[0].ID != min(ck.Key.ID, slow.Key.ID) {
		t.Errorf("acme lists: %v %v", ks, err)
	}

	// A second replica over the same services trusts the key for its
	// cache time after a revoke through the first; the first at once.
	other := httptest.NewServer(New(e.Services, Options{}))
	t.Cleanup(other.Close)
	call := func(base string) int {
		req, _ := http.NewRequest("GET", base+"/v1/endpoints/a/status/"+j.ID, nil)
		req.Header.Set("Authorization", "Bearer "+ck.Secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := call(other.URL); s != http.StatusOK {
		t.Fatalf("the key on the second replica: %d", s)
	}
	if s := call(e.srv.URL); s != http.StatusOK {
		t.Fatalf("the key on the first replica: %d", s)
	}
	if _, err := e.acme.RevokeEndpointKey(ctx, "a", ck.Key.ID); err != nil {
		t.Fatal(err)
	}
	if s := call(e.srv.URL); s != http.StatusUnauthorized {
		t.Errorf("a revoked key on the replica that revoked it: %d, want 401", s)
	}
	if s := call(other.URL); s != http.StatusOK {
		t.Errorf("a revoked key on the other replica within its cache time: %d (a cached key answers 200 until the cache time ends)", s)
	}
	e.clock.Advance(DefaultKeyCacheTTL)
	if s := call(other.URL); s != http.StatusUnauthorized {
		t.Errorf("a revoked key on the other replica after %v: %d, want 401", DefaultKeyCacheTTL, s)
	}
}
