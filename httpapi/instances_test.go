package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/testkit"
)

func TestCreateInstance(t *testing.T) {
	e := newEnv(t)
	before := e.counts()
	body := `{"name":"train-1","offering":"H100.MIG.3g.40gb","zones":["zone-a"],"labels":["driver >= 550"],
		"command":["python","train.py"],"env":{"EPOCHS":"3"},"tags":{"team":"ml"}}`
	status, h, b := e.raw("POST", "/v1/instances", e.acmeToken, strings.NewReader(body), nil)
	if status != http.StatusCreated {
		t.Fatalf("status %d, body %s", status, b)
	}
	var in cloud.Instance
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^i-[0-9a-f]{16}$`).MatchString(in.ID) {
		t.Errorf("ID %q is not i- and 16 hex characters", in.ID)
	}
	if in.State != cloud.Pending || in.TenantID != e.acmeID || in.Version != 1 {
		t.Errorf("instance = %+v, want pending in tenant %s at version 1", in, e.acmeID)
	}
	if in.Offering != "h100.mig.3g.40gb" {
		t.Errorf("offering %q, want the catalog's spelling", in.Offering)
	}
	if len(in.Labels) != 1 || in.Labels[0] != "driver>=550" {
		t.Errorf("labels %q, want the canonical selector", in.Labels)
	}
	if h.Get("ETag") != `"1"` || h.Get("Location") != "/v1/instances/"+in.ID {
		t.Errorf("ETag %q, Location %q", h.Get("ETag"), h.Get("Location"))
	}
	after := e.counts()
	if after.Instances != before.Instances+1 || after.Events != before.Events+1 {
		t.Errorf("counts %+v -> %+v, want one instance and one event more", before, after)
	}
	evs, err := e.acme.InstanceEvents(context.Background(), in.ID, client.EventsOptions{})
	if err != nil || len(evs.Events) != 1 || evs.Events[0].Kind != cloud.EventInstanceCreated || evs.Events[0].To != cloud.Pending {
		t.Fatalf("events = %+v, %v; want one instance.created", evs, err)
	}
	got, err := e.acme.GetInstance(context.Background(), in.ID)
	if err != nil || got.ID != in.ID || got.Env["EPOCHS"] != "3" || got.Tags["team"] != "ml" {
		t.Errorf("GetInstance = %+v, %v", got, err)
	}
}

// TestCreateInstanceRejects sends what a new user might get wrong; each
// must fail with the right status and code and leave the store unchanged.
func TestCreateInstanceRejects(t *testing.T) {
	e := newEnv(t)
	big := `{"offering":"h100.1x","command":["` + strings.Repeat("x", 2<<20) + `"]}`
	manyArgs := `{"offering":"h100.1x","command":[` + strings.Repeat(`"a",`, 300) + `"a"]}`
	longArg := `{"offering":"h100.1x","command":["` + strings.Repeat("y", 70<<10) + `"]}`
	tests := []struct {
		name    string
		token   string
		path    string
		body    string
		header  map[string]string
		status  int
		code    cloud.Code
		message string // a substring of the message
	}{
		{name: "unknown offering", body: `{"offering":"h100.9x"}`, status: 400, code: cloud.Invalid, message: `unknown offering "h100.9x"`},
		{name: "no offering", body: `{"name":"x"}`, status: 400, code: cloud.Invalid, message: "offering: is required"},
		{name: "truncated JSON", body: `{"offering": `, status: 400, code: cloud.Invalid, message: "malformed JSON"},
		{name: "syntax error", body: `{"offering" "h100.1x"}`, status: 400, code: cloud.Invalid, message: "malformed JSON at byte"},
		{name: "unknown field", body: `{"offering":"h100.1x","count":2}`, status: 400, code: cloud.Invalid, message: `unknown field "count"`},
		{name: "wrong type", body: `{"offering":5}`, status: 400, code: cloud.Invalid, message: `field "offering" must be a string`},
		{name: "array body", body: `[]`, status: 400, code: cloud.Invalid, message: "must be a JSON object"},
		{name: "trailing data", body: `{"offering":"h100.1x"} {}`, status: 400, code: cloud.Invalid, message: "unexpected data after"},
		{name: "empty body", body: ``, status: 400, code: cloud.Invalid, message: "empty"},
		{name: "not JSON content type", body: `{"offering":"h100.1x"}`, header: map[string]string{"Content-Type": "text/plain"}, status: 415, code: cloud.Invalid, message: "application/json"},
		{name: "2 MiB body", body: big, status: 413, code: cloud.Invalid, message: "larger than the limit"},
		{name: "bad label", body: `{"offering":"h100.1x","labels":["driver>="]}`, status: 400, code: cloud.Invalid, message: "labels[0]"},
		{name: "bad zone", body: `{"offering":"h100.1x","zones":["a b"]}`, status: 400, code: cloud.Invalid, message: "zones[0]"},
		{name: "long name", body: `{"offering":"h100.1x","name":"` + strings.Repeat("n", 64) + `"}`, status: 400, code: cloud.Invalid, message: "limit is 63"},
		{name: "bad env name", body: `{"offering":"h100.1x","env":{"1X":"a"}}`, status: 400, code: cloud.Invalid, message: "not a variable name"},
		{name: "NUL in command", body: `{"offering":"h100.1x","command":["a\u0000b"]}`, status: 400, code: cloud.Invalid, message: "NUL"},
		{name: "too many arguments", body: manyArgs, status: 400, code: cloud.Invalid, message: "301 arguments"},
		{name: "oversized command", body: longArg, status: 400, code: cloud.Invalid, message: "command: is"},
		{name: "unknown volume", body: `{"offering":"h100.1x","volumes":["v-0000000000000000"]}`, status: 400, code: cloud.Invalid, message: "volumes[0]"},
		{name: "volume twice", body: `{"offering":"h100.1x","volumes":["v-1","v-1"]}`, status: 400, code: cloud.Invalid, message: "given once"},
		{name: "bad idempotency key", body: `{"offering":"h100.1x"}`, header: map[string]string{"Idempotency-Key": "a b"}, status: 400, code: cloud.Invalid, message: "Idempotency-Key"},
		{name: "member names another tenant", path: "/v1/instances?tenant=" + e.globexID, body: `{"offering":"h100.1x"}`, status: 404, code: cloud.NotFound, message: "tenant"},
		{name: "member names another tenant in body", body: `{"offering":"h100.1x","tenant":"` + e.globexID + `"}`, status: 404, code: cloud.NotFound, message: "tenant"},
		{name: "admin names unknown tenant", token: e.adminToken, body: `{"offering":"h100.1x","tenant":"tn-nope"}`, status: 404, code: cloud.NotFound, message: "tenant"},
		{name: "tenant twice, differently", token: e.adminToken, path: "/v1/instances?tenant=" + e.acmeID, body: `{"offering":"h100.1x","tenant":"` + e.globexID + `"}`, status: 400, code: cloud.Invalid, message: "tenant"},
		{name: "missing token", token: "-", body: `{"offering":"h100.1x"}`, status: 401, code: cloud.Unauthenticated, message: "missing Authorization"},
		{name: "wrong token", token: "gpc_tk-0000000000000000_AAAA", body: `{"offering":"h100.1x"}`, status: 401, code: cloud.Unauthenticated, message: "invalid"},
		{name: "not a gpucloud token", token: "hunter2", body: `{"offering":"h100.1x"}`, status: 401, code: cloud.Unauthenticated, message: "invalid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			token := tc.token
			switch token {
			case "":
				token = e.acmeToken
			case "-":
				token = ""
			}
			path := tc.path
			if path == "" {
				path = "/v1/instances"
			}
			before := e.counts()
			status, h, b := e.raw("POST", path, token, strings.NewReader(tc.body), tc.header)
			eb := decodeErr(t, b)
			if status != tc.status || eb.Code != tc.code || !strings.Contains(eb.Message, tc.message) {
				t.Errorf("got %d %s %q, want %d %s containing %q", status, eb.Code, eb.Message, tc.status, tc.code, tc.message)
			}
			if status == 401 && h.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
			e.unchanged(before, tc.name)
		})
	}
}

func TestUnknownOfferingListsKnown(t *testing.T) {
	e := newEnv(t)
	_, err := e.acme.CreateInstance(context.Background(), api.CreateInstanceRequest{Offering: "h100.mig.3g"}, "")
	ce := wantCode(t, err, cloud.Invalid)
	known, _ := ce.Details["known"].([]any)
	if ce.Details["field"] != "offering" || len(known) == 0 || !strings.HasPrefix(known[0].(string), "h100.mig.") {
		t.Errorf("details %v, want field offering and similar offerings first", ce.Details)
	}
}

func TestIdempotentCreate(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	before := e.counts()
	req := `{"offering":"l4.1x","name":"web"}`
	s1, _, b1 := e.raw("POST", "/v1/instances", e.acmeToken, strings.NewReader(req), map[string]string{"Idempotency-Key": "k-1"})
	s2, _, b2 := e.raw("POST", "/v1/instances", e.acmeToken, strings.NewReader(req), map[string]string{"Idempotency-Key": "k-1"})
	var i1, i2 cloud.Instance
	json.Unmarshal(b1, &i1)
	json.Unmarshal(b2, &i2)
	if s1 != 201 || s2 != 200 || i1.ID == "" || i1.ID != i2.ID {
		t.Fatalf("first %d %s, second %d %s: want 201 then 200 with the same ID", s1, b1, s2, b2)
	}
	after := e.counts()
	if after.Instances != before.Instances+1 || after.Events != before.Events+1 {
		t.Errorf("counts %+v -> %+v: want one instance and one event", before, after)
	}

	// Another tenant may use the same key for its own instance.
	other, err := e.globex.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Name: "web"}, "k-1")
	if err != nil || other.ID == i1.ID {
		t.Errorf("globex with the same key: %+v, %v; want a new instance", other, err)
	}

	// The same key for a different instance is a mistake, not a retry.
	mid := e.counts()
	_, err = e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.2x", Name: "web"}, "k-1")
	ce := wantCode(t, err, cloud.Conflict)
	if ce.Details["existing_id"] != i1.ID {
		t.Errorf("details %v, want existing_id %s", ce.Details, i1.ID)
	}
	e.unchanged(mid, "reused key")
}

func TestQuota(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.admin.SetQuota(ctx, e.acmeID, api.QuotaSpec{Instances: 2}); err != nil {
		t.Fatal(err)
	}
	first, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x"}, "q-1")
	if err != nil {
		t.Fatal(err)
	}
	e.mustCreate(e.acme, "l4.1x")
	before := e.counts()
	// A retry of a create that succeeded is not a new instance, so the
	// quota does not refuse it.
	if again, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x"}, "q-1"); err != nil || again.ID != first.ID {
		t.Errorf("retry at the quota = %v, %v; want %s", again, err, first.ID)
	}
	_, err = e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x"}, "")
	ce := wantCode(t, err, cloud.QuotaExceeded)
	if ce.Details["limit"] != 2.0 || ce.Details["used"] != 2.0 || ce.Details["requested"] != 1.0 {
		t.Errorf("details %v, want limit 2, used 2, requested 1", ce.Details)
	}
	e.unchanged(before, "create over quota")
	status, _, b := e.raw("POST", "/v1/instances", e.acmeToken, strings.NewReader(`{"offering":"l4.1x"}`), nil)
	if status != http.StatusTooManyRequests || decodeErr(t, b).Code != cloud.QuotaExceeded {
		t.Errorf("status %d body %s, want 429 quota_exceeded", status, b)
	}
	// Stopped instances count; terminated ones do not.
	if _, err := e.acme.TerminateInstance(ctx, first.ID, 0); err != nil {
		t.Fatal(err)
	}
	e.mustCreate(e.acme, "l4.1x")
	// Another tenant is not limited by acme's quota.
	e.mustCreate(e.globex, "l4.1x")
}

func TestGPUQuota(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.admin.SetQuota(ctx, e.acmeID, api.QuotaSpec{GPUs: map[string]float64{"H100": 1}}); err != nil {
		t.Fatal(err)
	}
	// Two 3g MIG instances hold 6/7 of an H100.
	e.mustCreate(e.acme, "h100.mig.3g.40gb")
	e.mustCreate(e.acme, "h100.mig.3g.40gb")
	before := e.counts()
	for _, o := range []string{"h100.mig.3g.40gb", "h100.1x", "h100.metal"} {
		_, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: o}, "")
		ce := wantCode(t, err, cloud.QuotaExceeded)
		if ce.Details["model"] != "H100-80GB-SXM" || ce.Details["resource"] != "gpus" {
			t.Errorf("%s: details %v", o, ce.Details)
		}
	}
	e.unchanged(before, "creates over the GPU quota")
	// One more 1g slice fits exactly (7/7), and other models are free.
	e.mustCreate(e.acme, "h100.mig.1g.10gb")
	e.mustCreate(e.acme, "a100.8x")
	q, err := e.acme.Quota(ctx, e.acmeID)
	if err != nil || q.Used.Instances != 4 || q.Used.GPUs["A100-80GB-SXM"] != 8 {
		t.Errorf("quota = %+v, %v", q, err)
	}
}

// TestOtherTenantsInstance checks that another tenant's instance answers
// exactly like a missing one on every route, and that nothing changes.
func TestOtherTenantsInstance(t *testing.T) {
	e := newEnv(t)
	in := e.mustCreate(e.acme, "l4.1x")
	gt := e.globexToken(t)
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/v1/instances/" + in.ID, ""},
		{"POST", "/v1/instances/" + in.ID + "/stop", ""},
		{"POST", "/v1/instances/" + in.ID + "/start", ""},
		{"POST", "/v1/instances/" + in.ID + "/terminate", ""},
		{"GET", "/v1/instances/" + in.ID + "/events", ""},
	} {
		before := e.counts()
		var body *strings.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		status, _, b := e.rawBody(tc.method, tc.path, gt, body)
		missing := strings.Replace(tc.path, in.ID, "i-0000000000000000", 1)
		mstatus, _, mb := e.rawBody(tc.method, missing, gt, body)
		eb, meb := decodeErr(t, b), decodeErr(t, mb)
		if status != 404 || eb.Code != cloud.NotFound || mstatus != 404 ||
			strings.ReplaceAll(eb.Message, in.ID, "X") != strings.ReplaceAll(meb.Message, "i-0000000000000000", "X") {
			t.Errorf("%s %s: %d %s; missing: %d %s", tc.method, tc.path, status, b, mstatus, mb)
		}
		e.unchanged(before, tc.method+" "+tc.path)
	}
	page, err := e.globex.ListInstances(context.Background(), client.ListInstancesOptions{})
	if err != nil || len(page.Instances) != 0 {
		t.Errorf("globex lists %+v, %v; want nothing", page, err)
	}
	if in2, err := e.admin.GetInstance(context.Background(), in.ID); err != nil || in2.ID != in.ID {
		t.Errorf("admin GetInstance = %v, %v", in2, err)
	}
}

// globexToken makes a second token for the globex member and returns it.
func (e *env) globexToken(t *testing.T) string {
	t.Helper()
	ct, err := e.globex.CreateToken(context.Background(), api.CreateTokenRequest{Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	return ct.Secret
}

// rawBody is raw with an optional body.
func (e *env) rawBody(method, path, token string, body *strings.Reader) (int, http.Header, []byte) {
	if body == nil {
		return e.raw(method, path, token, nil, nil)
	}
	return e.raw(method, path, token, body, nil)
}

func TestListInstances(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var ids []string
	for range 5 {
		ids = append(ids, e.mustCreate(e.acme, "l4.1x").ID)
	}
	e.mustCreate(e.acme, "a100.1x")
	e.mustCreate(e.globex, "l4.1x")
	e.setState(ids[0], cloud.Running)
	e.setStateHost(ids[1], cloud.Running, "host-1")

	// Paging visits every acme instance once, in ID order.
	var seen []string
	opts := client.ListInstancesOptions{Limit: 2}
	for pages := 0; ; pages++ {
		page, err := e.acme.ListInstances(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range page.Instances {
			seen = append(seen, in.ID)
		}
		if page.Next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		opts.After = page.Next
	}
	if len(seen) != 6 {
		t.Errorf("paged through %d instances, want 6: %v", len(seen), seen)
	}
	for _, tc := range []struct {
		name string
		c    *client.Client
		opts client.ListInstancesOptions
		want int
	}{
		{"running", e.acme, client.ListInstancesOptions{States: []cloud.State{cloud.Running}}, 2},
		{"running or pending", e.acme, client.ListInstancesOptions{States: []cloud.State{cloud.Running, cloud.Pending}}, 6},
		{"offering, any spelling", e.acme, client.ListInstancesOptions{Offering: "A100.1x"}, 1},
		{"host", e.acme, client.ListInstancesOptions{Host: "host-1"}, 1},
		{"admin sees all", e.admin, client.ListInstancesOptions{}, 7},
		{"admin one tenant", e.admin, client.ListInstancesOptions{Tenant: e.globexID}, 1},
		{"member names own tenant", e.acme, client.ListInstancesOptions{Tenant: e.acmeID}, 6},
	} {
		page, err := tc.c.ListInstances(ctx, tc.opts)
		if err != nil || len(page.Instances) != tc.want {
			t.Errorf("%s: %d instances, %v; want %d", tc.name, len(page.Instances), err, tc.want)
		}
	}
	for _, q := range []string{"state=sleeping", "limit=0", "limit=abc", "limit=1001", "tenant=" + e.globexID} {
		status, _, b := e.raw("GET", "/v1/instances?"+q, e.acmeToken, nil, nil)
		if eb := decodeErr(t, b); status/100 != 4 {
			t.Errorf("?%s: %d %v, want a 4xx", q, status, eb)
		}
	}
}

// setStateHost moves an instance to state s as setState does, placing it
// on host.
func (e *env) setStateHost(id string, s cloud.State, host string) *cloud.Instance {
	e.t.Helper()
	return testkit.Walk(e.t, e.store, id, s, testkit.Via{Host: host}, e.clock.Now())
}

func TestInstanceEventsPaging(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	in := e.mustCreate(e.acme, "l4.1x")
	e.setState(in.ID, cloud.Running)
	for _, f := range []func(context.Context, string, int64) (*cloud.Instance, error){
		e.acme.StopInstance, e.acme.TerminateInstance,
	} {
		if _, err := f(ctx, in.ID, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Six events: created, the three moves to running (scheduled,
	// starting, running), stop and terminate.
	p1, err := e.acme.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 4})
	if err != nil || len(p1.Events) != 4 || p1.Next == "" {
		t.Fatalf("page 1 = %+v, %v", p1, err)
	}
	p2, err := e.acme.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 4, After: p1.Next})
	if err != nil || len(p2.Events) != 2 || p2.Next != "" {
		t.Fatalf("page 2 = %+v, %v", p2, err)
	}
	if ev := p2.Events[1]; ev.From != cloud.Stopping || ev.To != cloud.Terminating || ev.Actor != e.acmeUser.ID {
		t.Errorf("last event %+v", ev)
	}
	all, err := e.admin.Events(ctx, client.EventsOptions{Instance: in.ID})
	if err != nil || len(all.Events) != 6 {
		t.Errorf("admin events = %+v, %v", all, err)
	}
	_, err = e.acme.Events(ctx, client.EventsOptions{})
	wantCode(t, err, cloud.PermissionDenied)
}

// TestConcurrentIdempotentCreate races creates with one key: exactly one
// instance and one event result, and every caller gets its ID.
func TestConcurrentIdempotentCreate(t *testing.T) {
	e := newEnv(t)
	before := e.counts()
	const n = 8
	ids := make(chan string, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			in, err := e.acme.CreateInstance(context.Background(), api.CreateInstanceRequest{Offering: "t4.1x"}, "race")
			if err != nil {
				errs <- err
				return
			}
			ids <- in.ID
		}()
	}
	first := ""
	for range n {
		select {
		case err := <-errs:
			t.Fatal(err)
		case id := <-ids:
			if first == "" {
				first = id
			}
			if id != first {
				t.Errorf("IDs %s and %s for one key", first, id)
			}
		}
	}
	if after := e.counts(); after.Instances != before.Instances+1 || after.Events != before.Events+1 {
		t.Errorf("counts %+v -> %+v", before, after)
	}
}

func TestAdminCreatesForTenant(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	in, err := e.admin.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Tenant: e.globexID}, "")
	if err != nil || in.TenantID != e.globexID {
		t.Fatalf("admin create for globex = %+v, %v", in, err)
	}
	status, _, b := e.raw("POST", "/v1/instances?tenant="+e.acmeID, e.adminToken, strings.NewReader(`{"offering":"l4.1x"}`), nil)
	var got cloud.Instance
	if json.Unmarshal(b, &got); status != 201 || got.TenantID != e.acmeID {
		t.Errorf("?tenant=acme: %d %s", status, b)
	}
	own := e.mustCreate(e.admin, "l4.1x")
	if own.TenantID != OperatorTenant {
		t.Errorf("admin's default tenant %s, want %s", own.TenantID, OperatorTenant)
	}
	if _, err := e.globex.GetInstance(ctx, in.ID); err != nil {
		t.Errorf("globex cannot see the instance made for it: %v", err)
	}
}

func TestListInstancesByMarket(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tx := func(fn func(cloud.Tx) error) {
		if err := e.store.Tx(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	tx(func(tx cloud.Tx) error {
		for _, in := range []*cloud.Instance{
			{ID: "i-od", TenantID: e.acmeID, Offering: "h100.1x", State: cloud.Pending, CreatedAt: now, UpdatedAt: now},
			{ID: "i-spot", TenantID: e.acmeID, Offering: "h100.1x", State: cloud.Pending, Market: cloud.MarketSpot, CreatedAt: now, UpdatedAt: now},
		} {
			if err := tx.CreateInstance(ctx, in); err != nil {
				return err
			}
		}
		return nil
	})
	for market, want := range map[cloud.Market]string{cloud.MarketSpot: "i-spot", cloud.MarketOnDemand: "i-od"} {
		page, err := e.acme.ListInstances(ctx, client.ListInstancesOptions{Market: market})
		if err != nil || len(page.Instances) != 1 || page.Instances[0].ID != want {
			t.Fatalf("market %s: %+v %v", market, page, err)
		}
	}
	_, err := e.acme.ListInstances(ctx, client.ListInstancesOptions{Market: "cheap"})
	if cloud.ErrorCode(err) != cloud.Invalid {
		t.Fatalf("bad market: %v", err)
	}
}

// TestListInstancesByName: ?name selects one exact name among what the
// caller may see; another tenant's instance of that name never answers.
func TestListInstancesByName(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	create := func(c *client.Client, name string) *cloud.Instance {
		in, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Name: name}, "")
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	web := create(e.acme, "web")
	create(e.acme, "web-2")
	gweb, gdb := create(e.globex, "web"), create(e.globex, "db")
	for _, tc := range []struct {
		name string
		c    *client.Client
		opts client.ListInstancesOptions
		want []string
	}{
		{"own name", e.acme, client.ListInstancesOptions{Name: "web"}, []string{web.ID}},
		{"another tenant's name", e.acme, client.ListInstancesOptions{Name: "db"}, nil},
		{"exact, not a prefix", e.acme, client.ListInstancesOptions{Name: "we"}, nil},
		{"the other tenant sees its own", e.globex, client.ListInstancesOptions{Name: "web"}, []string{gweb.ID}},
		{"admin, one tenant", e.admin, client.ListInstancesOptions{Name: "db", Tenant: e.globexID}, []string{gdb.ID}},
	} {
		page, err := tc.c.ListInstances(ctx, tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []string
		for _, in := range page.Instances {
			got = append(got, in.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	page, err := e.admin.ListInstances(ctx, client.ListInstancesOptions{Name: "web"})
	if err != nil || len(page.Instances) != 2 {
		t.Errorf("admin ?name=web: %+v, %v; want both tenants' web", page, err)
	}
}
