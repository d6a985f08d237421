package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/httpapi"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// cloudEnv is a real API server on loopback (testkit.API) over an
// in-memory SQLite store, bootstrapped, on a settable clock that the CLI
// reads too (so that ages, expiry times and invoices come out exact), with
// the CLI's environment isolated from the user's: no config file, no
// GPUCLOUD_* variables.
type cloudEnv struct {
	*testkit.API
	t      *testing.T
	st     cloud.Store
	url    string
	admin  string // the bootstrap admin token
	config string // the config file path the CLI uses
	clock  *testkit.Clock

	mu sync.Mutex
	// asked counts the requests the server got, by "METHOD /path", and
	// answered is the highest of those counts whose request it answered.
	asked, answered map[string]int
}

// cliEpoch is where the clock of the CLI's tests starts.
var cliEpoch = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

func newCloudEnv(t *testing.T) *cloudEnv {
	t.Helper()
	config := filepath.Join(t.TempDir(), "gpucloud", "config.yaml")
	t.Setenv(cliconfig.EnvConfig, config)
	t.Setenv(cliconfig.EnvServer, "")
	t.Setenv(cliconfig.EnvToken, "")
	oldPoll, oldNow := pollEvery, clockNow
	pollEvery = 5 * time.Millisecond
	t.Cleanup(func() { pollEvery, clockNow = oldPoll, oldNow })

	e := &cloudEnv{t: t, config: config, asked: map[string]int{}, answered: map[string]int{}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := testkit.NewAPI(t, testkit.Backends()[0].Open(t), func(svc *service.Services) http.Handler {
		h := httpapi.New(svc, httpapi.Options{Logger: log})
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			route := r.Method + " " + r.URL.Path
			e.mu.Lock()
			e.asked[route]++
			n := e.asked[route]
			e.mu.Unlock()
			h.ServeHTTP(w, r)
			e.mu.Lock()
			e.answered[route] = max(e.answered[route], n)
			e.mu.Unlock()
		})
	})
	a.Clock.Set(cliEpoch)
	clockNow = a.Clock.Now
	e.API, e.st, e.url, e.admin, e.clock = a, a.Store, a.URL, a.AdminToken, a.Clock
	return e
}

// askedAgain waits until the server has answered a request for route
// ("GET /v1/instances/i-...") that came after the call: one that saw
// whatever the test changed before it. It is how a test knows that the
// CLI, polling, has seen a change, rather than hoping it has after a
// sleep.
func (e *cloudEnv) askedAgain(route string) {
	e.t.Helper()
	e.mu.Lock()
	n := e.asked[route]
	e.mu.Unlock()
	testkit.Eventually(e.t, 0, "the CLI to ask for "+route+" again", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.answered[route] > n
	})
}

// start runs the CLI as token in the background (as as does), while the
// test plays the scheduler or the agent; the function it returns waits
// for the CLI to exit and returns what as would.
func (e *cloudEnv) start(token string, args ...string) (wait func() (code int, stdout, stderr string)) {
	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.code, r.out, r.errOut = run(e.t, append([]string{"--server", e.url, "--token", token}, args...)...)
		done <- r
	}()
	return func() (int, string, string) {
		e.t.Helper()
		select {
		case r := <-done:
			return r.code, r.out, r.errOut
		case <-time.After(testkit.WaitTimeout):
			e.t.Fatalf("%v: still running after %s", args, testkit.WaitTimeout)
			return 0, "", ""
		}
	}
}

// as runs the CLI with the server and the given token on the command line.
func (e *cloudEnv) as(token string, args ...string) (code int, stdout, stderr string) {
	e.t.Helper()
	return run(e.t, append([]string{"--server", e.url, "--token", token}, args...)...)
}

// ok runs the CLI as token and fails the test unless it exits 0.
func (e *cloudEnv) ok(token string, args ...string) string {
	e.t.Helper()
	code, out, errOut := e.as(token, args...)
	if code != 0 {
		e.t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
	}
	return out
}

// member creates a tenant with one member through the CLI and returns the
// tenant's ID and the member's token.
func (e *cloudEnv) member(tenant, user string) (tenantID, token string) {
	e.t.Helper()
	var tn cloud.Tenant
	decodeJSON(e.t, e.ok(e.admin, "tenants", "create", tenant, "-o", "json"), &tn)
	var cu api.CreatedUser
	decodeJSON(e.t, e.ok(e.admin, "tenants", "add-user", tenant, "--name", user, "-o", "json"), &cu)
	if cu.User.TenantID != tn.ID || !strings.HasPrefix(cu.Secret, "gpc_") {
		e.t.Fatalf("add-user answered %+v", cu)
	}
	return tn.ID, cu.Secret
}

// update changes an instance in the store, as the scheduler or an agent
// would; its state changes only by move.
func (e *cloudEnv) update(id string, fn func(*cloud.Instance)) {
	e.t.Helper()
	ctx := context.Background()
	err := e.st.Tx(ctx, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(ctx, id)
		if err != nil {
			return err
		}
		state := in.State
		fn(in)
		if in.State != state {
			return fmt.Errorf("update changed the state of %s to %s: move it", id, in.State)
		}
		return tx.UpdateInstance(ctx, in)
	})
	if err != nil {
		e.t.Error(err)
	}
}

// move moves an instance to state to at the clock's time, step by step as
// the scheduler and the agent would (testkit.Walk, which places it at at
// if its way passes through scheduled), with the events the store meters.
func (e *cloudEnv) move(id string, to cloud.State, via testkit.Via) *cloud.Instance {
	e.t.Helper()
	return testkit.Walk(e.t, e.st, id, to, via, e.clock.Now())
}

func decodeJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
}

// closedURL returns the URL of a server that has gone away.
func closedURL() string {
	srv := httptest.NewServer(nil)
	srv.Close()
	return srv.URL
}

func TestCloudConfigPrecedence(t *testing.T) {
	e := newCloudEnv(t)
	dead := closedURL()

	// Nothing configured: one line that says what to do.
	code, out, errOut := run(t, "offerings")
	oneLine(t, code, errOut, "no gpucloud server configured", "`gpucloud up`", "`gpucloud login --server URL --token TOKEN`")
	if out != "" {
		t.Errorf("stdout %q", out)
	}

	// The file alone is enough.
	if err := cliconfig.Write(e.config, e.url, e.admin, nil); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run(t, "offerings"); code != 0 || !strings.Contains(out, "h100.mig.3g.40gb") {
		t.Fatalf("file config: exit %d, stderr %q", code, errOut)
	}

	// The environment overrides the file ...
	t.Setenv(cliconfig.EnvServer, dead)
	code, _, errOut = run(t, "offerings")
	oneLine(t, code, errOut, "cannot reach the gpucloud server at "+dead+": is `gpucloud up` running?")
	t.Setenv(cliconfig.EnvToken, "gpc_tk-0000000000000000_wrong")
	t.Setenv(cliconfig.EnvServer, e.url)
	code, _, errOut = run(t, "offerings")
	oneLine(t, code, errOut, "invalid, revoked or expired token (unauthenticated)", "$"+cliconfig.EnvToken)

	// ... and the flags override the environment.
	if code, _, errOut := run(t, "offerings", "--token", e.admin, "--server", e.url); code != 0 {
		t.Fatalf("flags: exit %d, stderr %q", code, errOut)
	}
	t.Setenv(cliconfig.EnvToken, e.admin)
	code, _, errOut = run(t, "offerings", "--server", dead)
	oneLine(t, code, errOut, "cannot reach the gpucloud server at "+dead)

	// A server that is not a URL is named with where it came from.
	code, _, errOut = run(t, "offerings", "--server", "localhost:7878")
	oneLine(t, code, errOut, `server "localhost:7878" is not a URL such as http://127.0.0.1:8080`, "--server")
}

func TestConfigPath(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(cliconfig.EnvConfig, filepath.Join(dir, "explicit.yaml"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "xdg"))
	if got := cliconfig.Path(); got != filepath.Join(dir, "explicit.yaml") {
		t.Errorf("with $%s: %s", cliconfig.EnvConfig, got)
	}
	t.Setenv(cliconfig.EnvConfig, "")
	if got := cliconfig.Path(); got != filepath.Join(dir, "xdg", "gpucloud", "config.yaml") {
		t.Errorf("with XDG_CONFIG_HOME: %s", got)
	}
	// A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
	t.Setenv("XDG_CONFIG_HOME", "relative")
	t.Setenv("HOME", dir)
	if got := cliconfig.Path(); got != filepath.Join(dir, ".config", "gpucloud", "config.yaml") {
		t.Errorf("with HOME only: %s", got)
	}
}

func TestLoginWritesPrivateConfig(t *testing.T) {
	e := newCloudEnv(t)

	// A wrong token is caught before anything is written.
	code, _, errOut := run(t, "login", "--server", e.url, "--token", "gpc_tk-0000000000000000_nope")
	oneLine(t, code, errOut, "(unauthenticated)")
	if _, err := os.Stat(e.config); !os.IsNotExist(err) {
		t.Fatalf("config written after a failed login: %v", err)
	}
	code, _, errOut = run(t, "login", "--server", e.url)
	if code != ExitUsage || !strings.Contains(errOut, "login needs --server URL and --token TOKEN") {
		t.Errorf("login without token: exit %d, %q", code, errOut)
	}

	code, out, errOut := run(t, "login", "--server", e.url+"/", "--token", e.admin)
	if code != 0 || !strings.Contains(out, "Logged in to "+e.url+"; saved to "+e.config) {
		t.Fatalf("login: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	st, err := os.Stat(e.config)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v, want 0600", st.Mode().Perm())
	}
	if dst, _ := os.Stat(filepath.Dir(e.config)); dst.Mode().Perm() != 0o700 {
		t.Errorf("config dir mode %v, want 0700", dst.Mode().Perm())
	}
	var fc cliconfig.File
	b, _ := os.ReadFile(e.config)
	if err := yaml.Unmarshal(b, &fc); err != nil || fc.Server != e.url || fc.Token != e.admin {
		t.Errorf("config %q: %+v, %v", b, fc, err)
	}
	// Later commands need no flags, and no warning since the file is private.
	if code, out, errOut := run(t, "tenants", "list"); code != 0 || !strings.Contains(out, "operator") || errOut != "" {
		t.Errorf("after login: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// A config readable by others draws a warning.
	if err := os.Chmod(e.config, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, errOut := run(t, "tenants", "list"); !strings.Contains(errOut, "warning: "+e.config+" holds a token and is readable by other users") {
		t.Errorf("no warning for a 0644 config: %q", errOut)
	}

	// --skip-verify saves without asking the server.
	dead := closedURL()
	if code, _, errOut := run(t, "login", "--server", dead, "--token", "gpc_x", "--skip-verify"); code != 0 {
		t.Fatalf("login --skip-verify: exit %d, %q", code, errOut)
	}
	b, _ = os.ReadFile(e.config)
	if !strings.Contains(string(b), dead) {
		t.Errorf("config after --skip-verify: %q", b)
	}
}

func TestWriteConfigErrors(t *testing.T) {
	if err := cliconfig.Write("", "http://x", "t", nil); err == nil || !strings.Contains(err.Error(), cliconfig.EnvConfig) {
		t.Errorf("empty path: %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cliconfig.Write(filepath.Join(file, "config.yaml"), "http://x", "t", nil); err == nil {
		t.Error("config under a regular file: no error")
	}
}

func TestOfferingsFromServer(t *testing.T) {
	e := newCloudEnv(t)
	out := e.ok(e.admin, "offerings", "--mode", "mig", "--model", "h100")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "NAME") || len(lines) != 6 {
		t.Fatalf("mig offerings on H100:\n%s", out)
	}
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, "h100.mig.") || !strings.Contains(l, "H100-80GB-SXM") {
			t.Errorf("row %q", l)
		}
	}
	var offs []map[string]any
	if err := yaml.Unmarshal([]byte(e.ok(e.admin, "offerings", "--mode", "shared", "-o", "yaml")), &offs); err != nil || len(offs) == 0 {
		t.Fatalf("yaml: %v", err)
	}
	for _, o := range offs {
		if o["mode"] != "shared" || o["share_milli"] == nil {
			t.Errorf("yaml offering %v", o)
		}
	}
	if out := e.ok(e.admin, "offerings", "--mode", "mig", "--model", "T4"); !strings.Contains(out, "no offerings with mode mig on model T4") {
		t.Errorf("empty result: %q", out)
	}
	code, _, errOut := e.as(e.admin, "offerings", "--mode", "vm")
	if code != ExitUsage || !strings.Contains(errOut, `--mode "vm"`) {
		t.Errorf("bad mode: exit %d, %q", code, errOut)
	}
}
