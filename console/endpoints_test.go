package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/httpapi"
	"github.com/gpucloud/gpucloud/testkit"
)

var (
	keyIdemRE   = regexp.MustCompile(`name="idempotency_key" value="([^"]+)"`)
	keySecretRE = regexp.MustCompile(`<code id="new-key-secret">(gpc_ek-[^<]+)</code>`)
)

// TestEndpointPages: the endpoints' list and an endpoint's page show the
// tenant's endpoints, their jobs (and which key sent them) and keys; the
// key form makes one key per form, shows its secret once, refuses bad
// input and a missing CSRF token with nothing written; a revoke takes the
// key out of use; another tenant's endpoint is not found on every page
// and form, exactly as a missing one.
func TestEndpointPages(t *testing.T) {
	testkit.EachStore(t, testEndpointPages)
}

func testEndpointPages(t *testing.T, st cloud.Store) {
	w := newWorld(t, st)
	ctx := context.Background()
	spec := cloud.EndpointSpec{Image: "ghcr.io/acme/echo:1", Offerings: []string{"l4.1x"}}
	ep, err := w.acme.Client.CreateEndpoint(ctx, api.CreateEndpointRequest{Name: "echo", EndpointSpec: spec}, "")
	if err != nil {
		t.Fatal(err)
	}
	gep, err := w.glob.Client.CreateEndpoint(ctx, api.CreateEndpointRequest{Name: "globex-private", EndpointSpec: spec}, "")
	if err != nil {
		t.Fatal(err)
	}
	job, err := w.acme.Client.RunJob(ctx, "echo", json.RawMessage(`{"n":1}`), "")
	if err != nil {
		t.Fatal(err)
	}

	b := w.browser(t)
	b.login(w.acme.Token)
	list := b.get("/endpoints")
	if list.status != http.StatusOK || !strings.Contains(list.body, "/endpoints/"+ep.ID) || !strings.Contains(list.body, "1 queued, 0 running") ||
		strings.Contains(list.body, gep.ID) || strings.Contains(list.body, "globex-private") {
		t.Errorf("acme's /endpoints: %d %s", list.status, list.body)
	}
	pg := b.get("/endpoints/" + ep.ID)
	for _, want := range []string{"Endpoint echo", "ghcr.io/acme/echo:1", job.ID, "a user's token", "No keys.", `id="create-key"`, "No cold starts yet.",
		`id="warm">none`, `id="cost">$0.00 so far in`} {
		if !strings.Contains(pg.body, want) {
			t.Errorf("the endpoint's page lacks %q", want)
		}
	}
	if byName := b.get("/endpoints/echo"); byName.status != http.StatusOK {
		t.Errorf("/endpoints/echo: %d", byName.status)
	}
	csrf := csrfRE.FindStringSubmatch(pg.body)[1]
	idem := keyIdemRE.FindStringSubmatch(pg.body)[1]

	// Bad input and a missing CSRF token write nothing.
	rows := testkit.CountRows(t, w.Store)
	for _, c := range []struct {
		form   url.Values
		status int
	}{
		{url.Values{"csrf": {csrf}, "name": {"app"}, "rate": {"fast"}}, http.StatusBadRequest},
		{url.Values{"csrf": {csrf}, "name": {"app"}, "rate": {"5000"}}, http.StatusBadRequest},
		{url.Values{"csrf": {csrf}, "name": {""}}, http.StatusBadRequest},
		{url.Values{"name": {"app"}}, http.StatusForbidden},
	} {
		if p := b.do("POST", "/endpoints/"+ep.ID+"/keys", c.form, nil); p.status != c.status {
			t.Errorf("key form %v: %d, want %d", c.form, p.status, c.status)
		}
	}
	if testkit.CountRows(t, w.Store) != rows {
		t.Error("refused key forms wrote")
	}

	// The form makes a key and shows its secret once; sent again, it
	// makes no second key and shows no secret.
	form := url.Values{"csrf": {csrf}, "idempotency_key": {idem}, "name": {"web-app"}, "rate": {"10"}}
	made := b.do("POST", "/endpoints/"+ep.ID+"/keys", form, nil)
	m := keySecretRE.FindStringSubmatch(made.body)
	if made.status != http.StatusCreated || m == nil || !strings.Contains(made.body, "only this once") {
		t.Fatalf("key form: %d %s", made.status, made.body)
	}
	secret := m[1]
	again := b.do("POST", "/endpoints/"+ep.ID+"/keys", form, nil)
	if again.status != http.StatusOK || strings.Contains(again.body, secret) || !strings.Contains(again.body, "not shown again") {
		t.Errorf("the form sent again: %d", again.status)
	}
	keys, err := w.acme.Client.EndpointKeys(ctx, "echo", true)
	if err != nil || len(keys) != 1 || keys[0].Rate != 10 || keys[0].Burst != 20 {
		t.Fatalf("keys after the form: %v %v", keys, err)
	}
	if p := b.get("/endpoints/" + ep.ID); strings.Contains(p.body, secret) || !strings.Contains(p.body, keys[0].ID) {
		t.Errorf("the page after the form shows the secret, or not the key")
	}
	kj, err := w.Client(secret).RunJob(ctx, "echo", nil, "")
	if err != nil {
		t.Fatalf("the console's key runs a job: %v", err)
	}
	if p := b.get("/endpoints/" + ep.ID); !strings.Contains(p.body, "key "+keys[0].ID) || !strings.Contains(p.body, kj.ID) {
		t.Errorf("the page does not show which key sent job %s", kj.ID)
	}

	// Another tenant finds nothing of it, as a missing endpoint.
	g := w.browser(t)
	g.login(w.glob.Token)
	missing := g.get("/endpoints/ep-doesnotexist")
	gcsrf := g.csrf("/endpoints/" + gep.ID)
	rows = testkit.CountRows(t, w.Store)
	if p := g.get("/endpoints/" + ep.ID); p.status != http.StatusNotFound || strings.Contains(p.body, "echo:1") ||
		strings.ReplaceAll(p.body, ep.ID, "X") != strings.ReplaceAll(missing.body, "ep-doesnotexist", "X") {
		t.Errorf("globex's view of acme's endpoint: %d", p.status)
	}
	if p := g.get("/endpoints/echo"); p.status != http.StatusNotFound {
		t.Errorf("globex's /endpoints/echo: %d", p.status)
	}
	if p := g.get("/endpoints"); strings.Contains(p.body, ep.ID) {
		t.Error("globex's list shows acme's endpoint")
	}
	if p := g.do("POST", "/endpoints/"+ep.ID+"/keys", url.Values{"csrf": {gcsrf}, "name": {"x"}}, nil); p.status != http.StatusNotFound {
		t.Errorf("globex makes a key of acme's endpoint: %d", p.status)
	}
	if p := g.do("POST", "/endpoints/"+ep.ID+"/keys/"+keys[0].ID+"/revoke", url.Values{"csrf": {gcsrf}}, nil); p.status != http.StatusNotFound {
		t.Errorf("globex revokes acme's key: %d", p.status)
	}
	if p := g.do("POST", "/endpoints/"+gep.ID+"/keys/"+keys[0].ID+"/revoke", url.Values{"csrf": {gcsrf}}, nil); p.status != http.StatusNotFound {
		t.Errorf("globex revokes acme's key through its own endpoint: %d", p.status)
	}
	if testkit.CountRows(t, w.Store) != rows {
		t.Error("globex's refused forms wrote")
	}

	// The revoke form takes the key out of use.
	if p := b.do("POST", "/endpoints/"+ep.ID+"/keys/"+keys[0].ID+"/revoke", url.Values{"csrf": {csrf}}, nil); p.status != http.StatusSeeOther {
		t.Fatalf("revoke: %d %s", p.status, p.body)
	}
	if p := b.get("/endpoints/" + ep.ID); !strings.Contains(p.body, "No keys.") {
		t.Error("the revoked key is still listed")
	}
	// The API trusts a key it looked up for its key cache time; past it,
	// the revoked key opens nothing.
	w.Clock.Advance(httpapi.DefaultKeyCacheTTL)
	if _, err := w.Client(secret).JobStatus(ctx, "echo", kj.ID); cloud.ErrorCode(err) != cloud.Unauthenticated {
		t.Errorf("the revoked key: %v", err)
	}
}
