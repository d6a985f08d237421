package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/store/sqlite"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is one API server on loopback over a fresh in-memory SQLite store,
// bootstrapped, with two tenants ("acme" and "globex") that have one member
// each.
type env struct {
	t     *testing.T
	store cloud.Store
	srv   *httptest.Server
	clock *clock
	logs  *bytes.Buffer

	adminToken string
	admin      *client.Client
	// acme and globex are member clients of the two tenants.
	acmeID, globexID     string
	acmeToken            string
	acme, globex         *client.Client
	acmeUser, globexUser *cloud.User
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "")
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, store: st, clock: &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}, logs: &bytes.Buffer{}}
	log := slog.New(slog.NewTextHandler(&syncWriter{w: e.logs}, nil))
	e.srv = httptest.NewServer(New(st, catalog.Default(), Options{Now: e.clock.Now, Logger: log}))
	t.Cleanup(e.srv.Close)

	tok, created, err := Bootstrap(ctx, st, e.clock.Now())
	if err != nil || !created || !strings.HasPrefix(tok, "gpc_") {
		t.Fatalf("Bootstrap = %q, %v, %v", tok, created, err)
	}
	e.adminToken = tok
	e.admin = e.client(tok)
	for _, name := range []string{"acme", "globex"} {
		tn, err := e.admin.CreateTenant(ctx, name)
		if err != nil {
			t.Fatalf("create tenant %s: %v", name, err)
		}
		cu, err := e.admin.CreateUser(ctx, tn.ID, api.CreateUserRequest{Name: name + "-dev"})
		if err != nil {
			t.Fatalf("create user in %s: %v", name, err)
		}
		if name == "acme" {
			e.acmeID, e.acme, e.acmeUser, e.acmeToken = tn.ID, e.client(cu.Secret), cu.User, cu.Secret
		} else {
			e.globexID, e.globex, e.globexUser = tn.ID, e.client(cu.Secret), cu.User
		}
	}
	return e
}

func (e *env) client(token string) *client.Client {
	return client.New(e.srv.URL, token, e.srv.Client())
}

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

// counts is a snapshot of how many rows the store holds, to check that a
// failed request changed nothing.
type counts struct {
	Instances, Events, Volumes, Tokens, Tenants, Hosts int
	Attached                                           int
	Versions                                           int64
}

func (e *env) counts() counts {
	e.t.Helper()
	var c counts
	err := e.store.Tx(context.Background(), func(tx cloud.Tx) error {
		ctx := context.Background()
		c = counts{}
		ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{})
		if err != nil {
			return err
		}
		c.Instances = len(ins)
		for _, in := range ins {
			c.Versions += in.Version
		}
		evs, err := tx.ListEvents(ctx, cloud.EventFilter{})
		if err != nil {
			return err
		}
		c.Events = len(evs)
		vs, err := tx.ListVolumes(ctx, "")
		if err != nil {
			return err
		}
		c.Volumes = len(vs)
		for _, v := range vs {
			if v.InstanceID != "" {
				c.Attached++
			}
		}
		ts, err := tx.ListTokens(ctx, "")
		if err != nil {
			return err
		}
		c.Tokens = len(ts)
		for _, t := range ts {
			if t.RevokedAt != nil {
				c.Tokens += 1000
			}
		}
		tns, err := tx.ListTenants(ctx)
		if err != nil {
			return err
		}
		c.Tenants = len(tns)
		hs, err := tx.ListHosts(ctx)
		if err != nil {
			return err
		}
		c.Hosts = len(hs)
		for _, h := range hs {
			c.Versions += h.Version
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("count store rows: %v", err)
	}
	return c
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

// setState forces an instance's state, as the scheduler or agent would.
func (e *env) setState(id string, s cloud.State) *cloud.Instance {
	e.t.Helper()
	var in *cloud.Instance
	err := e.store.Tx(context.Background(), func(tx cloud.Tx) error {
		var err error
		if in, err = tx.GetInstance(context.Background(), id); err != nil {
			return err
		}
		in.State = s
		return tx.UpdateInstance(context.Background(), in)
	})
	if err != nil {
		e.t.Fatalf("set state of %s: %v", id, err)
	}
	return in
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
