package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/console"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/httpapi"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stackengine"
	"github.com/gpucloud/gpucloud/store/sqlite"
	"github.com/gpucloud/gpucloud/testkit"
)

// world is a server with the API and the console on one listener and
// one request limiter, as controlplane serves them, two tenants with an
// instance each, and a host.
type world struct {
	*testkit.API
	acme, glob     testkit.Member
	acmeIn, globIn *cloud.Instance
}

// newWorld is a world with the default request limits.
func newWorld(t *testing.T, st cloud.Store) *world {
	return newWorldLimited(t, st, httpapi.RateLimits{})
}

// newWorldLimited is a world whose API and console share one limiter with
// the limits lim.
func newWorldLimited(t *testing.T, st cloud.Store, lim httpapi.RateLimits) *world {
	w := &world{}
	w.API = testkit.NewAPI(t, st, func(svc *service.Services) http.Handler {
		limiter := httpapi.NewLimiter(lim, svc)
		mux := http.NewServeMux()
		mux.Handle("/v1/", httpapi.New(svc, httpapi.Options{Limiter: limiter}))
		mux.Handle("/", console.New(svc, console.Options{Limiter: limiter}))
		return mux
	})
	ctx := context.Background()
	if _, err := service.BootstrapPrices(ctx, st, catalog.Default(), testkit.Epoch.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := st.Tx(ctx, func(tx cloud.Tx) error {
		h := fleet.MockHost("h100-1", "H100", 8)
		return tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: testkit.Epoch})
	}); err != nil {
		t.Fatal(err)
	}
	w.acme, w.glob = w.Member("acme", "alice"), w.Member("globex", "bob")
	var err error
	if w.acmeIn, err = w.acme.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "acme-train", Offering: "h100.1x"}, ""); err != nil {
		t.Fatal(err)
	}
	if w.globIn, err = w.glob.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "globex-secret", Offering: "h100.mig.1g.10gb"}, ""); err != nil {
		t.Fatal(err)
	}
	return w
}

func sqliteStore(t *testing.T) cloud.Store {
	st, err := sqlite.Open(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// browser is a cookie-holding client that does not follow redirects.
type browser struct {
	t      *testing.T
	base   string
	cookie string
}

func (w *world) browser(t *testing.T) *browser { return &browser{t: t, base: w.URL} }

type page struct {
	status   int
	body     string
	location string
	header   http.Header
}

func (b *browser) do(method, path string, form url.Values, header map[string]string) page {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if b.cookie != "" {
		req.Header.Set("Cookie", console.SessionCookie+"="+b.cookie)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 10 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, c := range resp.Cookies() {
		if c.Name == console.SessionCookie {
			b.cookie = c.Value
			if c.MaxAge < 0 {
				b.cookie = ""
			}
		}
	}
	return page{status: resp.StatusCode, body: string(data), location: resp.Header.Get("Location"), header: resp.Header}
}

func (b *browser) get(path string) page { return b.do("GET", path, nil, nil) }

func (b *browser) login(token string) page {
	b.t.Helper()
	p := b.do("POST", "/login", url.Values{"token": {token}, "next": {"/instances"}}, nil)
	if p.status != http.StatusSeeOther || b.cookie == "" {
		b.t.Fatalf("login: %d %s", p.status, p.body)
	}
	return p
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func (b *browser) csrf(path string) string {
	b.t.Helper()
	m := csrfRE.FindStringSubmatch(b.get(path).body)
	if m == nil {
		b.t.Fatalf("%s has no CSRF token", path)
	}
	return m[1]
}

func TestLogin(t *testing.T) {
	w := newWorld(t, sqliteStore(t))
	b := w.browser(t)
	if p := b.get("/instances"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, "/login?next=") {
		t.Fatalf("anonymous /instances: %d %q", p.status, p.location)
	}
	for _, bad := range []string{"", "nope", "gpc_x_y", w.acme.Token + "x"} {
		p := b.do("POST", "/login", url.Values{"token": {bad}}, nil)
		if p.status != http.StatusUnauthorized || !strings.Contains(p.body, "not valid") || b.cookie != "" {
			t.Errorf("login with %q: %d, cookie %q", bad, p.status, b.cookie)
		}
	}
	// A join token is not a user's.
	jt, err := w.Admin.CreateJoinToken(context.Background(), api.CreateJoinTokenRequest{Name: "j"})
	if err != nil {
		t.Fatal(err)
	}
	if p := b.do("POST", "/login", url.Values{"token": {jt.Secret}}, nil); p.status != http.StatusUnauthorized || !strings.Contains(p.body, "cannot log in") {
		t.Errorf("join token login: %d %s", p.status, p.body)
	}
	p := b.do("POST", "/login", url.Values{"token": {w.acme.Token}, "next": {"//evil.example/x"}}, nil)
	if p.status != http.StatusSeeOther || p.location != "/instances" {
		t.Errorf("login redirect to another site: %d %q", p.status, p.location)
	}
	set := p.header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "Secure", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(set, want) {
			t.Errorf("session cookie %q lacks %s", set, want)
		}
	}
	if p := b.get("/instances"); p.status != http.StatusOK || !strings.Contains(p.body, w.acmeIn.ID) {
		t.Fatalf("/instances after login: %d", p.status)
	}
	// Revoking the token ends the session at once.
	toks, err := w.acme.Client.Tokens(context.Background(), "")
	if err != nil || len(toks) == 0 {
		t.Fatal(toks, err)
	}
	if _, err := w.Admin.RevokeToken(context.Background(), toks[0].ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if p := b.get("/instances"); p.status != http.StatusSeeOther {
		t.Errorf("/instances with a revoked token: %d", p.status)
	}
}

// TestTenantIsolation: a member sees only their own tenant's instances,
// and another tenant's instance page, log, charts and actions answer
// "not found" exactly like a missing instance, changing nothing; the
// fleet map is for admins.
func TestTenantIsolation(t *testing.T) {
	testkit.EachStore(t, testTenantIsolation)
}

func testTenantIsolation(t *testing.T, st cloud.Store) {
	w := newWorld(t, st)
	b := w.browser(t)
	b.login(w.acme.Token)
	list := b.get("/instances")
	if !strings.Contains(list.body, w.acmeIn.ID) || strings.Contains(list.body, w.globIn.ID) || strings.Contains(list.body, "globex-secret") {
		t.Errorf("acme's list shows globex's instance or misses its own")
	}
	missing := b.get("/instances/i-doesnotexist")
	for _, path := range []string{"/instances/" + w.globIn.ID, "/instances/" + w.globIn.ID + "/log", "/instances/" + w.globIn.ID + "/charts"} {
		p := b.get(path)
		if p.status != http.StatusNotFound || strings.Contains(p.body, "globex-secret") {
			t.Errorf("%s: %d", path, p.status)
		}
		if path == "/instances/"+w.globIn.ID && strings.ReplaceAll(p.body, w.globIn.ID, "X") != strings.ReplaceAll(missing.body, "i-doesnotexist", "X") {
			t.Errorf("another tenant's instance page differs from a missing one's")
		}
	}
	rows := testkit.CountRows(t, w.Store)
	tok := b.csrf("/instances/" + w.acmeIn.ID)
	for _, action := range []string{"stop", "terminate"} {
		p := b.do("POST", "/instances/"+w.globIn.ID+"/"+action, url.Values{"csrf": {tok}}, nil)
		if p.status != http.StatusNotFound {
			t.Errorf("acme %ss globex's instance: %d", action, p.status)
		}
	}
	if testkit.CountRows(t, w.Store) != rows {
		t.Errorf("refused actions changed the store")
	}
	if p := b.get("/fleet"); p.status != http.StatusForbidden {
		t.Errorf("member /fleet: %d", p.status)
	}
	if p := b.get("/billing"); p.status != http.StatusOK || strings.Contains(p.body, w.glob.TenantID) {
		t.Errorf("member /billing: %d, shows globex %v", p.status, strings.Contains(p.body, w.glob.TenantID))
	}
	if p := b.get("/instances?tenant=" + w.glob.TenantID); strings.Contains(p.body, w.globIn.ID) {
		t.Errorf("a member's tenant filter reached another tenant")
	}
	// The admin sees both, and the fleet.
	a := w.browser(t)
	a.login(w.AdminToken)
	if p := a.get("/instances"); !strings.Contains(p.body, w.acmeIn.ID) || !strings.Contains(p.body, w.globIn.ID) {
		t.Errorf("admin list misses an instance")
	}
	if p := a.get("/fleet"); p.status != http.StatusOK || !strings.Contains(p.body, "h100-1") {
		t.Errorf("admin /fleet: %d", p.status)
	}
}

// TestCSRF: a POST without the session's CSRF token, or from another
// site, changes nothing.
func TestCSRF(t *testing.T) {
	w := newWorld(t, sqliteStore(t))
	b := w.browser(t)
	b.login(w.acme.Token)
	rows := testkit.CountRows(t, w.Store)
	path := "/instances/" + w.acmeIn.ID + "/terminate"
	cases := []struct {
		name   string
		form   url.Values
		header map[string]string
	}{
		{"no token", url.Values{}, nil},
		{"another session's token", url.Values{"csrf": {strings.Repeat("ab", 32)}}, nil},
		{"cross-site origin", url.Values{"csrf": {b.csrf("/instances/" + w.acmeIn.ID)}}, map[string]string{"Origin": "https://evil.example"}},
		{"cross-site fetch", url.Values{"csrf": {b.csrf("/instances/" + w.acmeIn.ID)}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
	}
	for _, c := range cases {
		if p := b.do("POST", path, c.form, c.header); p.status != http.StatusForbidden {
			t.Errorf("%s: %d", c.name, p.status)
		}
	}
	if testkit.CountRows(t, w.Store) != rows {
		t.Fatal("a refused POST changed the store")
	}
	p := b.do("POST", path, url.Values{"csrf": {b.csrf("/instances/" + w.acmeIn.ID)}}, map[string]string{"Origin": w.URL})
	if p.status != http.StatusSeeOther {
		t.Fatalf("terminate with the token: %d %s", p.status, p.body)
	}
	if in, _ := w.acme.Client.GetInstance(context.Background(), w.acmeIn.ID); in.State != cloud.Terminated && in.State != cloud.Terminating {
		t.Errorf("after terminate: %s", in.State)
	}
}

// TestPagesRender: every page renders for an admin and a member, with the
// security headers.
func TestPagesRender(t *testing.T) {
	w := newWorld(t, sqliteStore(t))
	for _, who := range []struct {
		name  string
		token string
		pages []string
	}{
		{"admin", w.AdminToken, []string{"/instances", "/instances?state=pending&offering=h100.1x&market=on_demand", "/instances/" + w.acmeIn.ID, "/launch", "/fleet", "/spot", "/billing", "/billing?tenant=" + w.acme.TenantID, "/groups", "/stacks"}},
		{"member", w.acme.Token, []string{"/instances", "/instances/" + w.acmeIn.ID, "/launch", "/spot", "/billing", "/groups", "/stacks"}},
	} {
		b := w.browser(t)
		b.login(who.token)
		for _, path := range who.pages {
			p := b.get(path)
			if p.status != http.StatusOK {
				t.Errorf("%s %s: %d %s", who.name, path, p.status, p.body)
				continue
			}
			if !strings.Contains(p.header.Get("Content-Security-Policy"), "default-src 'self'") || p.header.Get("X-Frame-Options") != "DENY" {
				t.Errorf("%s %s: security headers %v", who.name, path, p.header)
			}
			if !strings.Contains(p.body, `<main id="main"`) || !strings.Contains(p.body, `lang="en"`) {
				t.Errorf("%s %s: not a console page", who.name, path)
			}
		}
	}
	b := w.browser(t)
	b.login(w.acme.Token)
	launch := b.get("/launch")
	for _, want := range []string{"h100.1x", "$", "/h", `<label for="o-h100.1x">`, "<th scope=\"col\">Scratch</th>", "960 GiB <span class=\"note\">at /scratch"} {
		if !strings.Contains(launch.body, want) {
			t.Errorf("/launch lacks %q", want)
		}
	}
	if p := b.get("/nope"); p.status != http.StatusNotFound {
		t.Errorf("/nope: %d", p.status)
	}
	if p := b.get("/static/console.css"); p.status != http.StatusOK || !strings.Contains(p.body, "focus-visible") {
		t.Errorf("static css: %d", p.status)
	}
}

// TestLaunch: the launch form creates the instance through the service
// (one per form even when submitted twice), and a bad offering is a
// clear error that creates nothing.
func TestLaunch(t *testing.T) {
	w := newWorld(t, sqliteStore(t))
	b := w.browser(t)
	b.login(w.acme.Token)
	page := b.get("/launch")
	key := regexp.MustCompile(`name="key" value="([^"]+)"`).FindStringSubmatch(page.body)
	tok := csrfRE.FindStringSubmatch(page.body)
	if key == nil || tok == nil {
		t.Fatal("launch form lacks its key or CSRF token")
	}
	form := url.Values{"csrf": {tok[1]}, "key": {key[1]}, "offering": {"h100.2x"}, "name": {"from-console"}, "command": {"echo hi"}, "market": {"on_demand"}}
	first := b.do("POST", "/launch", form, nil)
	second := b.do("POST", "/launch", form, nil)
	if first.status != http.StatusSeeOther || first.location != second.location || !strings.HasPrefix(first.location, "/instances/i-") {
		t.Fatalf("launch twice: %d %q, %d %q", first.status, first.location, second.status, second.location)
	}
	in, err := w.acme.Client.GetInstance(context.Background(), strings.TrimPrefix(first.location, "/instances/"))
	if err != nil || in.Name != "from-console" || in.Offering != "h100.2x" || strings.Join(in.Command, " ") != "/bin/sh -c echo hi" {
		t.Fatalf("launched %+v, %v", in, err)
	}
	rows := testkit.CountRows(t, w.Store)
	form.Set("offering", "nope.9x")
	form.Set("key", "another")
	if p := b.do("POST", "/launch", form, nil); p.status != http.StatusBadRequest || !strings.Contains(p.body, "nope.9x") {
		t.Errorf("bad offering: %d %s", p.status, p.body)
	}
	if testkit.CountRows(t, w.Store) != rows {
		t.Errorf("a refused launch changed the store")
	}
}

// TestLaunchAdvisor: the launch page's advisor ranks this cloud's
// offerings for a described workload, light inference gets a slice or a
// share first, and bad input is a clear error on the page.
func TestLaunchAdvisor(t *testing.T) {
	w := newWorld(t, sqliteStore(t))
	b := w.browser(t)
	b.login(w.acme.Token)
	p := b.get("/launch?advise=1&params=7B&precision=int8&task=inference&nodes=1&hours=8&days=30&checkpoint=0")
	if p.status != http.StatusOK || !strings.Contains(p.body, `id="advice"`) {
		t.Fatalf("advice: %d", p.status)
	}
	first := regexp.MustCompile(`<td>1</td><td><a href="/launch\?offering=([^"&]+)`).FindStringSubmatch(p.body)
	if first == nil || !(strings.Contains(first[1], ".mig.") || strings.Contains(first[1], ".shared.")) {
		t.Errorf("light inference's first option is %v, want a MIG slice or a share", first)
	}
	for _, want := range []string{"compute", "storage", "$"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("advice lacks %q", want)
		}
	}
	bad := b.get("/launch?advise=1&params=lots&precision=bf16&task=inference&nodes=1&hours=8&days=30&checkpoint=0")
	if bad.status != http.StatusOK || !strings.Contains(bad.body, `role="alert"`) || !strings.Contains(bad.body, "params") {
		t.Errorf("bad params: %d", bad.status)
	}
	// A 70B model trained on 2 nodes gets 8-GPU NVLink hosts only.
	big := b.get("/launch?advise=1&params=70B&precision=bf16&task=train&nodes=2&hours=24&days=14&checkpoint=30")
	opts := regexp.MustCompile(`<td><a href="/launch\?offering=([^"&]+)`).FindAllStringSubmatch(big.body, -1)
	if len(opts) == 0 {
		t.Fatal("no option for a 70B model on 2 nodes")
	}
	for _, m := range opts {
		if !strings.HasSuffix(m[1], ".8x") && !strings.HasSuffix(m[1], ".metal") {
			t.Errorf("a multi-node training option is %s", m[1])
		}
	}
}

// consoleStack is a small stack: a head instance, `workers` workers that
// reference it, and an output.
const consoleStack = `
parameters:
  workers: {type: integer, default: 1, min: 0, max: 4}
resources:
  head:
    type: instance
    properties: {name: head, offering: h100.1x, command: [sleep, "600"]}
  workers:
    type: instance
    count: ${param.workers}
    properties:
      name: worker-${count.index}
      offering: h100.1x
      env: {HEAD: "${head.id}"}
outputs:
  head_id: {value: "${head.id}"}
`

// stepStacks runs the stack controller's rounds over the world's store
// until no stack is applying or destroying.
func (w *world) stepStacks(t *testing.T) {
	t.Helper()
	svc := service.New(w.Store, catalog.Default(), service.Options{Now: w.Clock.Now})
	for range 20 {
		n, err := stackengine.New(svc).Step(context.Background())
		if err != nil {
			t.Fatalf("stack step: %v", err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("stacks still applying or destroying after 20 rounds")
}

// stackVersion is the stored version and state of a tenant's stack.
func (w *world) stackVersion(t *testing.T, tenant, name string) (int64, cloud.StackState) {
	t.Helper()
	ctx := context.Background()
	var st *cloud.Stack
	if err := w.Store.Tx(ctx, func(tx cloud.Tx) error {
		var err error
		st, err = tx.StackByName(ctx, tenant, name)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return st.Version, st.State
}

// TestStacks: the stacks list and a stack's page for its owner (resources
// linking to their instances, outputs, parameters, events, drift), the
// plan form, and destroy; another tenant's stack is "not found" for the
// page and for destroy, and missing from the list; a destroy without the
// session's CSRF token changes nothing.
func TestStacks(t *testing.T) {
	testkit.EachStore(t, testStacks)
}

func testStacks(t *testing.T, st cloud.Store) {
	w := newWorld(t, st)
	ctx := context.Background()
	if _, err := w.acme.Client.ApplyStack(ctx, "train", api.ApplyStackRequest{Template: consoleStack}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.glob.Client.ApplyStack(ctx, "globex-secret-stack", api.ApplyStackRequest{Template: consoleStack,
		Parameters: map[string]string{"workers": "0"}}); err != nil {
		t.Fatal(err)
	}
	w.stepStacks(t)
	v, err := w.acme.Client.GetStack(ctx, "", "train")
	if err != nil || v.State != cloud.StackActive || len(v.Resources) != 2 {
		t.Fatalf("acme's stack: %+v, %v", v, err)
	}
	headID := fmt.Sprint(v.Outputs["head_id"])

	b := w.browser(t)
	b.login(w.acme.Token)
	list := b.get("/stacks")
	if list.status != http.StatusOK || !strings.Contains(list.body, `href="/stacks/train"`) || !strings.Contains(list.body, "active") {
		t.Fatalf("acme's /stacks: %d %s", list.status, list.body)
	}
	if strings.Contains(list.body, "globex-secret-stack") {
		t.Errorf("acme's list shows globex's stack")
	}
	if !strings.Contains(list.body, `aria-current="page">Stacks</a>`) {
		t.Errorf("/stacks is not the current section")
	}
	p := b.get("/stacks/train")
	if p.status != http.StatusOK {
		t.Fatalf("/stacks/train: %d %s", p.status, p.body)
	}
	for _, want := range []string{`<a href="/instances/` + headID + `">`, "workers[0]", "head_id", headID, `<th scope="col">Resource</th>`,
		`<td>workers</td><td><code>1</code>`, `action="/stacks/train/destroy" data-confirm="Destroy stack train?`, `name="drift" value="1"`, "apply"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("/stacks/train lacks %q", want)
		}
	}
	if p := b.get("/stacks/train?drift=1"); !strings.Contains(p.body, "in sync") {
		t.Errorf("drift of an applied stack: %d, no \"in sync\"", p.status)
	}
	if _, err := w.acme.Client.TerminateInstance(ctx, headID, 0); err != nil {
		t.Fatal(err)
	}
	if p := b.get("/stacks/train?drift=1"); !strings.Contains(p.body, `<td>head</td><td>instance</td><td>`+headID+`</td><td><span class="state bad">deleted</span>`) {
		t.Errorf("drift after terminating the head: %d %s", p.status, p.body)
	}

	// Another tenant's stack is not found, exactly like a missing one,
	// for the page, drift and destroy.
	missing := b.get("/stacks/nostack")
	for _, path := range []string{"/stacks/globex-secret-stack", "/stacks/globex-secret-stack?drift=1", "/stacks/globex-secret-stack?tenant=" + w.glob.TenantID} {
		p := b.get(path)
		if p.status != http.StatusNotFound {
			t.Errorf("acme GET %s: %d", path, p.status)
		}
		if path == "/stacks/globex-secret-stack" && strings.ReplaceAll(p.body, "globex-secret-stack", "X") != strings.ReplaceAll(missing.body, "nostack", "X") {
			t.Errorf("another tenant's stack page differs from a missing one's")
		}
	}
	globVersion, _ := w.stackVersion(t, w.glob.TenantID, "globex-secret-stack")
	tok := b.csrf("/stacks/train")
	if p := b.do("POST", "/stacks/globex-secret-stack/destroy", url.Values{"csrf": {tok}}, nil); p.status != http.StatusNotFound || !strings.Contains(p.body, "Not found") {
		t.Errorf("acme destroys globex's stack: %d", p.status)
	}
	if p := b.do("POST", "/stacks/globex-secret-stack/destroy", url.Values{"csrf": {tok}, "tenant": {w.glob.TenantID}}, nil); p.status != http.StatusNotFound {
		t.Errorf("acme destroys globex's stack naming its tenant: %d", p.status)
	}
	if ver, state := w.stackVersion(t, w.glob.TenantID, "globex-secret-stack"); ver != globVersion || state != cloud.StackActive {
		t.Errorf("a refused destroy changed globex's stack: version %d → %d, %s", globVersion, ver, state)
	}

	// A destroy without the session's CSRF token, or from another site,
	// changes nothing.
	ver, _ := w.stackVersion(t, w.acme.TenantID, "train")
	rows := testkit.CountRows(t, w.Store)
	for _, c := range []struct {
		name   string
		form   url.Values
		header map[string]string
	}{
		{"no token", url.Values{}, nil},
		{"another session's token", url.Values{"csrf": {strings.Repeat("ab", 32)}}, nil},
		{"cross-site origin", url.Values{"csrf": {tok}}, map[string]string{"Origin": "https://evil.example"}},
	} {
		if p := b.do("POST", "/stacks/train/destroy", c.form, c.header); p.status != http.StatusForbidden {
			t.Errorf("destroy, %s: %d", c.name, p.status)
		}
	}
	if now, state := w.stackVersion(t, w.acme.TenantID, "train"); now != ver || state != cloud.StackActive || testkit.CountRows(t, w.Store) != rows {
		t.Fatalf("a refused destroy changed the stack: version %d → %d, %s", ver, now, state)
	}

	// The destroy: the stack is destroying, then destroyed, and gone from
	// the list; globex's stays.
	p = b.do("POST", "/stacks/train/destroy", url.Values{"csrf": {tok}}, map[string]string{"Origin": w.URL})
	if p.status != http.StatusSeeOther || p.location != "/stacks/train" {
		t.Fatalf("destroy: %d %q %s", p.status, p.location, p.body)
	}
	p = b.get("/stacks/train")
	if !strings.Contains(p.body, `id="state">destroying</span>`) || strings.Contains(p.body, `id="destroy"`) || !strings.Contains(p.body, "destroy requested by") {
		t.Errorf("after destroy: %s", p.body)
	}
	w.stepStacks(t)
	if p := b.get("/stacks/train"); p.status != http.StatusNotFound {
		t.Errorf("a destroyed stack's page: %d", p.status)
	}
	if p := b.get("/stacks"); strings.Contains(p.body, `href="/stacks/train"`) {
		t.Errorf("the list shows a destroyed stack")
	}
	for _, r := range v.Resources {
		if in, err := w.acme.Client.GetInstance(ctx, r.ID); err != nil || (in.State != cloud.Terminated && in.State != cloud.Terminating) {
			t.Errorf("%s after destroy: %+v, %v", r.Address, in, err)
		}
	}
	if _, state := w.stackVersion(t, w.glob.TenantID, "globex-secret-stack"); state != cloud.StackActive {
		t.Errorf("globex's stack is %s after acme's destroy", state)
	}

	// The admin sees every tenant's stacks, and reaches one by its tenant.
	a := w.browser(t)
	a.login(w.AdminToken)
	link := `href="/stacks/globex-secret-stack?tenant=` + w.glob.TenantID + `"`
	if p := a.get("/stacks"); !strings.Contains(p.body, link) {
		t.Errorf("admin /stacks lacks %s", link)
	}
	if p := a.get("/stacks/globex-secret-stack?tenant=" + w.glob.TenantID); p.status != http.StatusOK || !strings.Contains(p.body, `name="tenant" value="`+w.glob.TenantID+`"`) {
		t.Errorf("admin's view of globex's stack: %d", p.status)
	}
}

// TestStackPlan: the plan form shows the changes, the cost per hour and
// the fit, keeps what was typed when the template is wrong, and writes
// nothing.
func TestStackPlan(t *testing.T) {
	w := newWorld(t, sqliteStore(t))
	b := w.browser(t)
	b.login(w.acme.Token)
	tok := b.csrf("/stacks")
	rows := testkit.CountRows(t, w.Store)
	p := b.do("POST", "/stacks/plan", url.Values{"csrf": {tok}, "name": {"train"}, "template": {consoleStack}, "params": {"workers=2\n"}}, nil)
	if p.status != http.StatusOK {
		t.Fatalf("plan: %d %s", p.status, p.body)
	}
	for _, want := range []string{`id="plan-result"`, "3 to create", "<td>workers[1]</td><td>instance</td><td><strong>create</strong>", "/h</strong> on demand", `id="plan-fit">Unknown`, `<label for="p-template">`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("plan lacks %q", want)
		}
	}
	if !regexp.MustCompile(`<strong>\$[1-9][0-9]*\.[0-9]{4}/h</strong> on demand`).MatchString(p.body) {
		t.Errorf("plan's cost is not in dollars per hour")
	}
	bad := b.do("POST", "/stacks/plan", url.Values{"csrf": {tok}, "template": {"resources:\n  x:\n    type: nope\n"}}, nil)
	if bad.status != http.StatusBadRequest || !strings.Contains(bad.body, `role="alert"`) || !strings.Contains(bad.body, "line 3") || !strings.Contains(bad.body, "type: nope") {
		t.Errorf("bad template: %d %s", bad.status, bad.body)
	}
	if p := b.do("POST", "/stacks/plan", url.Values{"csrf": {tok}, "template": {consoleStack}, "params": {"workers"}}, nil); p.status != http.StatusBadRequest || !strings.Contains(p.body, "KEY=VALUE") {
		t.Errorf("bad parameters: %d", p.status)
	}
	if p := b.do("POST", "/stacks/plan", url.Values{"template": {consoleStack}}, nil); p.status != http.StatusForbidden {
		t.Errorf("plan without the CSRF token: %d", p.status)
	}
	if testkit.CountRows(t, w.Store) != rows {
		t.Errorf("a plan changed the store")
	}
}

// TestStackEventsTail: a stack's page shows its last events, newest last,
// however long its history.
func TestStackEventsTail(t *testing.T) {
	w := newWorld(t, sqliteStore(t))
	ctx := context.Background()
	stk, err := w.acme.Client.ApplyStack(ctx, "train", api.ApplyStackRequest{Template: consoleStack})
	if err != nil {
		t.Fatal(err)
	}
	other, err := w.glob.Client.ApplyStack(ctx, "other", api.ApplyStackRequest{Template: consoleStack})
	if err != nil {
		t.Fatal(err)
	}
	// 700 events, interleaved with another stack's.
	if err := w.Store.Tx(ctx, func(tx cloud.Tx) error {
		var evs []*cloud.StackEvent
		for i := range 700 {
			evs = append(evs, &cloud.StackEvent{StackID: stk.ID, Time: testkit.Epoch, Action: "apply", Outcome: "started", Message: fmt.Sprintf("bulk-%04d", i)},
				&cloud.StackEvent{StackID: other.ID, Time: testkit.Epoch, Action: "apply", Outcome: "started", Message: fmt.Sprintf("other-%04d", i)})
		}
		return tx.AppendStackEvents(ctx, evs)
	}); err != nil {
		t.Fatal(err)
	}
	b := w.browser(t)
	b.login(w.acme.Token)
	p := b.get("/stacks/train")
	got := regexp.MustCompile(`bulk-\d{4}`).FindAllString(p.body, -1)
	if len(got) != 50 || got[0] != "bulk-0650" || got[49] != "bulk-0699" || strings.Contains(p.body, "other-") {
		t.Errorf("events shown: %d, %v", len(got), got)
	}
}

// TestInstancePageNetwork: the instance page shows the instance's
// network, subnet and groups by name and ID, its private address, and
// the public address associated with it.
func TestInstancePageNetwork(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		in, err := w.acme.Client.GetInstance(ctx, w.acmeIn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if in.NetworkID == "" || in.SubnetID == "" || len(in.SecurityGroupIDs) != 1 || in.PrivateAddress == "" {
			t.Fatalf("the instance is on no network: %+v", in)
		}
		b := w.browser(t)
		b.login(w.acme.Token)
		p := b.get("/instances/" + in.ID)
		for _, want := range []string{in.NetworkID, in.SubnetID, in.SecurityGroupIDs[0], in.PrivateAddress, "172.31.0.0/16", `id="public">none`} {
			if !strings.Contains(p.body, want) {
				t.Errorf("the page lacks %q", want)
			}
		}
		ad, err := w.acme.Client.AllocateAddress(ctx, api.AllocateAddressRequest{}, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.acme.Client.AssociateAddress(ctx, ad.ID, in.ID); err != nil {
			t.Fatal(err)
		}
		if p := b.get("/instances/" + in.ID); !strings.Contains(p.body, "<code>"+ad.IP+"</code>") {
			t.Errorf("the page lacks the public address %s", ad.IP)
		}
	})
}
