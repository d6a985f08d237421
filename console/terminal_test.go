package console_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/console"
	"github.com/gpucloud/gpucloud/httpapi"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// countingTerminals counts the sessions the console asks for and refuses
// each as not running, so that a test sees whether the console reached
// the relay at all.
type countingTerminals struct{ calls atomic.Int32 }

func (c *countingTerminals) Terminal(w http.ResponseWriter, r *http.Request, actor service.Actor, id string, command []string, cols, rows uint16) error {
	c.calls.Add(1)
	return &cloud.Error{Code: cloud.Conflict, Message: "counted"}
}

// newTerminalWorld is a world whose console has terms as its Terminals.
func newTerminalWorld(t *testing.T, terms console.Terminals) *world {
	w := &world{}
	st := sqliteStore(t)
	w.API = testkit.NewAPI(t, st, func(svc *service.Services) http.Handler {
		limiter := httpapi.NewLimiter(httpapi.RateLimits{}, svc)
		mux := http.NewServeMux()
		mux.Handle("/v1/", httpapi.New(svc, httpapi.Options{Limiter: limiter}))
		mux.Handle("/", console.New(svc, console.Options{Limiter: limiter, Terminals: terms}))
		return mux
	})
	w.acme = w.Member("acme", "alice")
	in, err := w.acme.Client.CreateInstance(context.Background(), api.CreateInstanceRequest{Name: "acme-term", Offering: "h100.1x"}, "")
	if err != nil {
		t.Fatal(err)
	}
	w.acmeIn = in
	return w
}

// TestTerminalSocketRefusesOtherOrigins: the terminal's WebSocket is
// refused, before the session cookie is even read and before the relay
// is asked, unless its Origin is the console's own: a page of another
// site cannot open a shell with the cookie the browser would send
// (cross-site WebSocket hijacking).
func TestTerminalSocketRefusesOtherOrigins(t *testing.T) {
	terms := &countingTerminals{}
	w := newTerminalWorld(t, terms)
	b := w.browser(t)
	b.login(w.acme.Token)
	path := "/instances/" + w.acmeIn.ID + "/terminal/ws"
	host := strings.TrimPrefix(w.URL, "http://")
	ws := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": console.TerminalSubprotocol}
	with := func(extra map[string]string) map[string]string {
		h := map[string]string{}
		for k, v := range ws {
			h[k] = v
		}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		header map[string]string
	}{
		{"no Origin", nil},
		{"another site", map[string]string{"Origin": "https://evil.example"}},
		{"another port", map[string]string{"Origin": "http://" + strings.Split(host, ":")[0] + ":1"}},
		{"null", map[string]string{"Origin": "null"}},
		{"not http", map[string]string{"Origin": "file://" + host}},
		{"same Origin, marked cross-site", map[string]string{"Origin": w.URL, "Sec-Fetch-Site": "cross-site"}},
	} {
		p := b.do("GET", path, nil, with(tc.header))
		if p.status != http.StatusForbidden || !strings.Contains(p.body, "cross-site WebSocket refused") {
			t.Errorf("%s: %d %q", tc.name, p.status, p.body)
		}
	}
	if n := terms.calls.Load(); n != 0 {
		t.Fatalf("the relay was asked %d times for refused origins", n)
	}
	// The console's own Origin reaches the relay (which refuses here).
	if code, reason := dialTerminal(t, w, b.cookie, w.acmeIn.ID); code != 4409 || reason != "counted" {
		t.Errorf("own origin: closed %d %q, want the relay's refusal", code, reason)
	}
	if n := terms.calls.Load(); n != 1 {
		t.Fatalf("the relay was asked %d times for the console's own origin, want 1", n)
	}
	// Without a session the socket is refused, and nothing is asked.
	anon := w.browser(t)
	if p := anon.do("GET", path, nil, with(map[string]string{"Origin": w.URL})); p.status != http.StatusUnauthorized {
		t.Errorf("no session: %d %q", p.status, p.body)
	}
	if n := terms.calls.Load(); n != 1 {
		t.Fatalf("the relay was asked without a session")
	}
}

// TestTerminalOnInstancePage: the instance page offers the terminal (and
// loads xterm.js) only when the instance runs and the server has a
// relay, and says why not otherwise; its CSP still allows only the
// console's own scripts.
func TestTerminalOnInstancePage(t *testing.T) {
	w := newTerminalWorld(t, &countingTerminals{})
	b := w.browser(t)
	b.login(w.acme.Token)
	path := "/instances/" + w.acmeIn.ID
	p := b.get(path)
	if p.status != http.StatusOK || !strings.Contains(p.body, "No terminal: the instance is pending.") ||
		strings.Contains(p.body, "term-open") || strings.Contains(p.body, "xterm.js") {
		t.Fatalf("pending instance: %d, terminal offered or no reason", p.status)
	}
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "style-src 'self';") || !strings.Contains(csp, "script-src 'self';") {
		t.Errorf("the CSP of an instance page without a terminal: %q", csp)
	}
	now := testkit.Epoch
	testkit.Walk(t, w.Store, w.acmeIn.ID, cloud.Running, testkit.Via{}, now)
	p = b.get(path)
	if !strings.Contains(p.body, `id="term-open" data-ws="/instances/`+w.acmeIn.ID+`/terminal/ws"`) ||
		!strings.Contains(p.body, `src="/static/xterm/xterm.js"`) || !strings.Contains(p.body, `src="/static/terminal.js"`) {
		t.Fatalf("running instance: no terminal offered")
	}
	// xterm.js writes <style> elements: inline style, never script.
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "style-src 'self' 'unsafe-inline';") || !strings.Contains(csp, "script-src 'self';") {
		t.Errorf("the CSP of an instance page with a terminal: %q", csp)
	}
	testkit.Walk(t, w.Store, w.acmeIn.ID, cloud.Stopped, testkit.Via{}, now)
	if p = b.get(path); !strings.Contains(p.body, "No terminal: the instance is stopped.") || strings.Contains(p.body, "term-open") {
		t.Fatalf("stopped instance: terminal offered or no reason")
	}
	for _, f := range []string{"/static/xterm/xterm.js", "/static/xterm/addon-fit.js", "/static/xterm/xterm.css", "/static/terminal.js", "/static/xterm/LICENSE.xterm"} {
		if p := b.get(f); p.status != http.StatusOK || len(p.body) == 0 {
			t.Errorf("%s: %d", f, p.status)
		}
	}
}

// TestNoTerminalWithoutRelay: a console without Terminals says so on a
// running instance's page, and its socket refuses with that reason.
func TestNoTerminalWithoutRelay(t *testing.T) {
	w := newTerminalWorld(t, nil)
	b := w.browser(t)
	b.login(w.acme.Token)
	if p := b.get("/instances/" + w.acmeIn.ID); !strings.Contains(p.body, "No terminal: this server has no terminal relay.") {
		t.Fatalf("no reason shown")
	}
}

// relayWorld is a world whose console's terminal is the API's exec relay
// (httpapi.NewWithExec), as controlplane serves them.
func relayWorld(t *testing.T, st cloud.Store) *world {
	w := &world{}
	w.API = testkit.NewAPI(t, st, func(svc *service.Services) http.Handler {
		limiter := httpapi.NewLimiter(httpapi.RateLimits{}, svc)
		apiHandler, exec := httpapi.NewWithExec(svc, httpapi.Options{Limiter: limiter})
		mux := http.NewServeMux()
		mux.Handle("/v1/", apiHandler)
		mux.Handle("/", console.New(svc, console.Options{Limiter: limiter, Terminals: exec}))
		return mux
	})
	ctx := context.Background()
	w.acme, w.glob = w.Member("acme", "alice"), w.Member("globex", "bob")
	var err error
	if w.acmeIn, err = w.acme.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "acme-train", Offering: "h100.1x"}, ""); err != nil {
		t.Fatal(err)
	}
	if w.globIn, err = w.glob.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: "globex-secret", Offering: "h100.1x"}, ""); err != nil {
		t.Fatal(err)
	}
	return w
}

// dialTerminal opens the terminal socket of instance id as a page of
// the console would (its Origin, the session cookie, the subprotocol),
// and answers how the server closed it.
func dialTerminal(t *testing.T, w *world, cookie, id string) (websocket.StatusCode, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{}
	h.Set("Origin", w.URL)
	h.Set("Cookie", console.SessionCookie+"="+cookie)
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(w.URL, "http")+"/instances/"+id+"/terminal/ws?cols=100&rows=30",
		&websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{console.TerminalSubprotocol}})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial the terminal of %s: %d %v", id, status, err)
	}
	defer ws.CloseNow()
	_, _, err = ws.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) {
		t.Fatalf("the terminal of %s: read %v, want a close", id, err)
	}
	return ce.Code, ce.Reason
}

// TestTerminalRules: the console's terminal obeys the API's exec rules,
// which service.Sessions checks for both: another tenant's running
// instance is "not found" exactly like a missing one (and records no
// session), a stopped instance says it is stopped, and a running one
// whose host's agent is not connected says so; each as the socket's
// close (4000 + the API's status) with the API's message, which the page
// shows.
func TestTerminalRules(t *testing.T) {
	testkit.EachStore(t, testTerminalRules)
}

func testTerminalRules(t *testing.T, st cloud.Store) {
	w := relayWorld(t, st)
	now := testkit.Epoch
	testkit.Walk(t, w.Store, w.acmeIn.ID, cloud.Running, testkit.Via{}, now)
	testkit.Walk(t, w.Store, w.globIn.ID, cloud.Running, testkit.Via{}, now)
	b := w.browser(t)
	b.login(w.acme.Token)

	code, reason := dialTerminal(t, w, b.cookie, w.globIn.ID)
	missCode, missReason := dialTerminal(t, w, b.cookie, "i-doesnotexist")
	if code != 4404 || strings.Contains(reason, "globex") ||
		strings.ReplaceAll(reason, w.globIn.ID, "X") != strings.ReplaceAll(missReason, "i-doesnotexist", "X") || missCode != code {
		t.Errorf("another tenant's instance: %d %q; a missing one: %d %q", code, reason, missCode, missReason)
	}
	evs, err := w.glob.Client.InstanceEvents(context.Background(), w.globIn.ID, client.EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Events {
		if strings.HasPrefix(string(e.Kind), "session.") {
			t.Errorf("acme's refused terminal left an event on globex's instance: %+v", e)
		}
	}

	// Running, but no agent holds a control channel here.
	if code, reason := dialTerminal(t, w, b.cookie, w.acmeIn.ID); code != 4503 || !strings.Contains(reason, "agent") {
		t.Errorf("running instance without its agent: %d %q", code, reason)
	}

	testkit.Walk(t, w.Store, w.acmeIn.ID, cloud.Stopped, testkit.Via{}, now)
	if code, reason := dialTerminal(t, w, b.cookie, w.acmeIn.ID); code != 4409 || !strings.Contains(reason, "is stopped") {
		t.Errorf("stopped instance: %d %q", code, reason)
	}
}
