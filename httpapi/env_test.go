package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// env is one API server on loopback (testkit.API) over a fresh store,
// bootstrapped, with two tenants ("acme" and "globex") that have one member
// each. Its fields name the API's parts as the tests of this package
// always have.
type env struct {
	*testkit.API
	t     *testing.T
	store cloud.Store
	srv   *httptest.Server
	clock *testkit.Clock
	// logs is what the server logged.
	logs *bytes.Buffer

	adminToken string
	admin      *client.Client
	// acme and globex are member clients of the two tenants.
	acmeID, globexID     string
	acmeToken            string
	acme, globex         *client.Client
	acmeUser, globexUser *cloud.User
}

// newEnv starts the env over a fresh in-memory SQLite store, or over on
// when given (onBothStores gives each backend's).
func newEnv(t *testing.T, on ...cloud.Store) *env {
	t.Helper()
	return newEnvWith(t, Options{}, on...)
}

// newEnvWith is newEnv with the handler's options opts (their logger is
// the env's).
func newEnvWith(t *testing.T, opts Options, on ...cloud.Store) *env {
	t.Helper()
	st := on
	if len(st) == 0 {
		st = []cloud.Store{testkit.Backends()[0].Open(t)}
	}
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewTextHandler(&syncWriter{w: logs}, nil))
	a := testkit.NewAPI(t, st[0], func(svc *service.Services) http.Handler {
		opts.Logger = log
		return New(svc, opts)
	})
	acme, globex := a.Member("acme", "acme-dev"), a.Member("globex", "globex-dev")
	return &env{API: a, t: t, store: a.Store, srv: a.Server, clock: a.Clock, logs: logs,
		adminToken: a.AdminToken, admin: a.Admin,
		acmeID: acme.TenantID, acme: acme.Client, acmeUser: acme.User, acmeToken: acme.Token,
		globexID: globex.TenantID, globex: globex.Client, globexUser: globex.User}
}

func (e *env) client(token string) *client.Client { return e.Client(token) }

// syncWriter lets the handler goroutines and the test share a buffer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// counts is a snapshot of the store's rows (testkit.Rows), to check that
// a failed request changed nothing.
type counts = testkit.Rows

func (e *env) counts() counts {
	e.t.Helper()
	return e.Rows()
}

// unchanged fails the test if the store changed since before.
func (e *env) unchanged(before counts, what string) {
	e.t.Helper()
	if after := e.counts(); after != before {
		e.t.Errorf("%s changed the store: before %+v, after %+v", what, before, after)
	}
}

// raw sends a request with the given token (none if "") and returns the
// status, the headers and the body.
func (e *env) raw(method, path, token string, body io.Reader, header map[string]string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// decodeErr decodes an error body, failing the test if it does not have
// the API's error shape.
func decodeErr(t *testing.T, b []byte) errorBody {
	t.Helper()
	var eb errorBody
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&eb); err != nil || eb.Code == "" || eb.Message == "" || eb.Details == nil {
		t.Fatalf("error body %s does not have the shape {code, message, details}: %v", b, err)
	}
	return eb
}

// wantCode fails unless err is a *cloud.Error with the code.
func wantCode(t *testing.T, err error, code cloud.Code) *cloud.Error {
	t.Helper()
	if got := cloud.ErrorCode(err); got != code {
		t.Fatalf("error = %v (code %q), want code %q", err, got, code)
	}
	ce, ok := err.(*cloud.Error)
	if !ok {
		t.Fatalf("error %T is not a *cloud.Error", err)
	}
	return ce
}

// putHost stores a schedulable host with gpus GPUs of model.
func (e *env) putHost(id, model string, gpus int) *cloud.Host {
	e.t.Helper()
	h := &cloud.Host{ID: id, State: fleet.Schedulable, Spec: *fleet.MockHost(id, model, gpus), LastHeartbeat: e.clock.Now()}
	if err := e.store.Tx(context.Background(), func(tx cloud.Tx) error { return tx.PutHost(context.Background(), h) }); err != nil {
		e.t.Fatalf("put host: %v", err)
	}
	return h
}

// setState moves an instance to state s, as the scheduler and the agent
// would, step by step (testkit.Walk: through scheduled, on testkit.Host,
// when it must).
func (e *env) setState(id string, s cloud.State) *cloud.Instance {
	e.t.Helper()
	return testkit.Walk(e.t, e.store, id, s, testkit.Via{}, e.clock.Now())
}

// mustCreate creates an instance of offering for c.
func (e *env) mustCreate(c *client.Client, offering string) *cloud.Instance {
	e.t.Helper()
	in, err := c.CreateInstance(context.Background(), api.CreateInstanceRequest{Offering: offering}, "")
	if err != nil {
		e.t.Fatalf("create %s: %v", offering, err)
	}
	return in
}

// raiseQuota lifts a tenant's quota far above the default (as an admin
// would for a tenant that needs more), for tests that create more
// instances than a new tenant may hold.
func (e *env) raiseQuota(tenant string) {
	e.t.Helper()
	if _, err := e.admin.SetQuota(context.Background(), tenant, api.QuotaSpec{Instances: 10_000, GPUsPerModel: 10_000}); err != nil {
		e.t.Fatalf("raise the quota of %s: %v", tenant, err)
	}
}
