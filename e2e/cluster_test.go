package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/files"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/testkit"
)

// Timing of the whole cloud: the scheduler and the agents poll every 20 ms;
// every wait of a test is testkit's (until).
const (
	scheduleInterval = 20 * time.Millisecond
	agentInterval    = 20 * time.Millisecond
)

// logger is where the server and the agents log: nowhere, unless
// GPUCLOUD_E2E_LOG names a level ("debug", "info", "warn"), then stderr.
func logger() *slog.Logger {
	lvl := os.Getenv("GPUCLOUD_E2E_LOG")
	if lvl == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(lvl)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// cluster is a running cloud: the server, and one agent per simulated
// host, each with its own process runtime and metadata service.
type cluster struct {
	t     *testing.T
	srv   *controlplane.Replica
	hc    *http.Client
	admin *client.Client
	hosts map[string]*simHost
	// lastEvent is the ID of the newest event a snapshot saw.
	lastEvent int64
	// prev is the snapshot after the last refused request, while a run
	// of refused requests goes on (see refused).
	prev *snapshot
}

// simHost is one joined host and the agent that runs it.
type simHost struct {
	id   string
	spec sim.Spec
	sim  *sim.Host
	rt   hostRuntime
	md   *metadata.Endpoints
	ag   *agent.Agent
	// dir is the agent's data directory (volumes live under it).
	dir string
	// api is the agent's own client (its credential), for looking at the
	// host's assignments as the agent sees them.
	api *agentapi.Client
	// cred is the agent's credential, for trying it on tenant routes.
	cred string
	// directAhead is how far (nanoseconds) the direct listener's clock is
	// ahead of the wall clock.
	directAhead atomic.Int64
	// hc is the agent's HTTP client: it trusts the cloud's CA and presents
	// the client certificate the join issued (mutual TLS), without which
	// the server refuses cred.
	hc *http.Client
	// restart stops the host's agent and starts a new one on the same
	// runtime and data directory, as an agent process restarted would.
	restart func()
}

// hostRuntime is a host's workload runtime as the cluster uses it: the
// process runtime (trackingRuntime) or the containerd one
// (trackingContainers, containers_test.go), remembering every workload it
// started so that a test can ask which of them still run.
type hostRuntime interface {
	runtime.Runtime
	StopAll(ctx context.Context) error
	// running lists the workloads the runtime still runs.
	running() []string
}

// tracker remembers the workloads a runtime started.
type tracker struct {
	mu      sync.Mutex
	started []string
}

// record notes a workload that started (err nil) and returns err.
func (tr *tracker) record(id string, err error) error {
	if err == nil {
		tr.mu.Lock()
		if !slices.Contains(tr.started, id) {
			tr.started = append(tr.started, id)
		}
		tr.mu.Unlock()
	}
	return err
}

// runningOf lists the started workloads that rt still runs.
func (tr *tracker) runningOf(rt runtime.Runtime) []string {
	tr.mu.Lock()
	ids := slices.Clone(tr.started)
	tr.mu.Unlock()
	var out []string
	for _, id := range ids {
		if st, err := rt.Status(id); err == nil && st.State == runtime.StateRunning {
			out = append(out, id)
		}
	}
	return out
}

// trackingRuntime is the process runtime with a tracker.
type trackingRuntime struct {
	*process.Runtime
	tracker
}

func (r *trackingRuntime) Start(ctx context.Context, s runtime.Spec) error {
	return r.record(s.InstanceID, r.Runtime.Start(ctx, s))
}

func (r *trackingRuntime) running() []string { return r.runningOf(r.Runtime) }

// startCluster starts a server on db over loopback and joins one simulated
// host per spec through a join token, each with a running agent. Cleanup
// stops the agents, then every workload, then the server.
func startCluster(t *testing.T, db string, specs ...sim.Spec) *cluster {
	t.Helper()
	return startClusterWith(t, db, nil, specs...)
}

// startClusterWith is startCluster with a change to the server's
// configuration (a scaled clock, spot market settings).
func startClusterWith(t *testing.T, db string, tune func(*controlplane.Config), specs ...sim.Spec) *cluster {
	t.Helper()
	return startClusterTuned(t, db, tune, nil, specs...)
}

// startClusterTuned is startClusterWith with a change to every agent's
// configuration as well (its clock, how often it samples utilization);
// tuneAgent may be nil.
func startClusterTuned(t *testing.T, db string, tune func(*controlplane.Config), tuneAgent func(*agent.Config), specs ...sim.Spec) *cluster {
	t.Helper()
	return startClusterOn(t, db, tune, tuneAgent, nil, specs...)
}

// startClusterOn is startClusterTuned with the runtime of each host made
// by newRuntime from the host's simulated driver and data directory (the
// process runtime when nil; containerCluster passes containers).
func startClusterOn(t *testing.T, db string, tune func(*controlplane.Config), tuneAgent func(*agent.Config),
	newRuntime func(t *testing.T, h *sim.Host, dir string) hostRuntime, specs ...sim.Spec) *cluster {
	t.Helper()
	if newRuntime == nil {
		newRuntime = func(_ *testing.T, _ *sim.Host, dir string) hostRuntime {
			return &trackingRuntime{Runtime: process.New(filepath.Join(dir, "runtime"))}
		}
	}
	// Made first, so that it is removed last, after the workloads that
	// write into it are gone.
	base := t.TempDir()
	log := logger()
	ctx := t.Context()
	cfg := controlplane.Config{DB: db, Listen: "127.0.0.1:0", ScheduleInterval: scheduleInterval, Log: log}
	if tune != nil {
		tune(&cfg)
	}
	srv, err := controlplane.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start server on %s: %v", db, err)
	}
	t.Cleanup(func() {
		shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Close(shut); err != nil {
			t.Errorf("close server: %v", err)
		}
	})
	if srv.AdminToken == "" {
		t.Fatal("the first start of the server created no admin token")
	}
	hc := srv.HTTPClient() // trusts the cloud's CA: the API is TLS 1.3
	hc.Timeout = 15 * time.Second
	t.Cleanup(hc.CloseIdleConnections)
	c := &cluster{t: t, srv: srv, hc: hc, admin: client.New(srv.URL, srv.AdminToken, hc), hosts: map[string]*simHost{}}
	c.until("the server to lead", func() (bool, string) { return srv.IsLeader(), "not leader" })

	// The token expires an hour after now on the server's clock, which
	// may be a test's scaled one.
	now := time.Now
	if cfg.Now != nil {
		now = cfg.Now
	}
	jt, err := c.admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "e2e", ExpiresAt: new(now().Add(time.Hour)), MaxUses: len(specs)})
	if err != nil {
		t.Fatalf("create join token: %v", err)
	}
	agentCtx, stopAgents := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		stopAgents()
		wg.Wait()
		shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, h := range c.hosts {
			if err := h.rt.StopAll(shut); err != nil {
				t.Errorf("host %s: stop workloads: %v", h.id, err)
			}
			if err := h.ag.ReleaseVolumes(); err != nil {
				t.Errorf("host %s: unmount volumes: %v", h.id, err)
			}
			h.md.Close()
		}
	})
	for _, spec := range specs {
		drv, err := sim.New(spec)
		if err != nil {
			t.Fatal(err)
		}
		joined, err := agent.Join(ctx, agentapi.NewClient(srv.URL, "", hc), jt.Secret, drv)
		if err != nil {
			t.Fatalf("host %s: %v", spec.ID, err)
		}
		if joined.HostID != spec.ID {
			t.Fatalf("host %s joined as %s", spec.ID, joined.HostID)
		}
		ahc := agentHTTPClient(t, srv, joined)
		dir := filepath.Join(base, spec.ID)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		h := &simHost{id: joined.HostID, spec: drv.Spec(), sim: drv, md: metadata.New(), dir: dir,
			rt:  newRuntime(t, drv, dir),
			api: agentapi.NewClient(srv.URL, joined.Credential, ahc), cred: joined.Credential, hc: ahc}
		acfg := agent.Config{
			Driver: drv, Runtime: h.rt, Metadata: h.md, DataDir: dir,
			Interval: agentInterval, ManageMIG: true, Log: log.With("host", h.id),
		}
		if tuneAgent != nil {
			tuneAgent(&acfg)
		}
		if cfg.DirectAccess || !cfg.TLS.Plain {
			// A cloud with direct copies on: each agent listens for them on
			// loopback, as up's do. Every agent of a TLS cloud takes
			// tunnelled sessions, as up's and the agent command's do.
			var (
				d   *files.Direct
				ln  net.Listener
				err error
			)
			if cfg.DirectAccess {
				d, ln, acfg.DirectAddr, acfg.DirectFingerprint, err = files.ListenDirect("127.0.0.1:0", "", h.id, srv.CAPEM(), dir, files.ForAgent(acfg), acfg.Log)
			} else {
				d, acfg.DirectFingerprint, err = files.NewDirect(h.id, srv.CAPEM(), dir, files.ForAgent(acfg), acfg.Log)
			}
			if err != nil {
				t.Fatal(err)
			}
			acfg.Tunnels = d
			d.Reports = files.NewReporter(h.api.ReportDirect, dir, acfg.Log)
			// A test moves the listener's clock past its grants' expiry
			// (simHost.directAhead) to have them reported.
			d.Now = func() time.Time { return time.Now().Add(time.Duration(h.directAhead.Load())) }
			d.SweepEvery = 100 * time.Millisecond
			wg.Go(func() {
				if err := d.Serve(agentCtx, ln); err != nil {
					t.Errorf("direct files listener of %s: %v", h.id, err)
				}
			})
		}
		c.hosts[h.id] = h
		var mu sync.Mutex
		stop, done := func() {}, make(chan struct{})
		run := func() {
			mu.Lock()
			defer mu.Unlock()
			ctx, cancel := context.WithCancel(agentCtx)
			stopped := make(chan struct{})
			stop, done = cancel, stopped
			ag := agent.New(h.api, acfg)
			h.ag = ag // the cleanup unmounts the volumes it mounted
			wg.Go(func() {
				defer close(stopped)
				if err := ag.Run(ctx); err != nil {
					t.Errorf("agent of %s: %v", h.id, err)
				}
			})
		}
		h.restart = func() {
			mu.Lock()
			stop()
			<-done
			mu.Unlock()
			run()
		}
		run()
	}
	return c
}

// agentHTTPClient is the HTTP client of a joined agent, as the agent
// command makes it: trusting the cloud's CA and presenting the client
// certificate of the join (the server refuses the credential without it).
func agentHTTPClient(t *testing.T, srv *controlplane.Replica, joined *agent.Joined) *http.Client {
	t.Helper()
	if strings.HasPrefix(srv.URL, "http://") {
		// A plain-HTTP server (a benchmark's baseline) issues no
		// client certificate.
		return &http.Client{Timeout: 15 * time.Second}
	}
	cert, ok, err := joined.TLSCertificate()
	if err != nil || !ok {
		t.Fatalf("host %s: the join's client certificate: %v (issued: %v)", joined.HostID, err, ok)
	}
	hc, err := agentapi.TLSClient(srv.CAPEM(), cert)
	if err != nil {
		t.Fatal(err)
	}
	hc.Timeout = 15 * time.Second
	t.Cleanup(hc.CloseIdleConnections)
	return hc
}

// until waits until cond holds (testkit.EventuallySays), failing the test
// with what cond last said.
func (c *cluster) until(what string, cond func() (bool, string)) {
	c.t.Helper()
	testkit.EventuallySays(c.t, 0, what, cond)
}

// member creates a tenant and a member user in it, and returns the
// tenant, a client holding the member's token, and the token.
func (c *cluster) member(tenant, user string) (*cloud.Tenant, *client.Client, string) {
	c.t.Helper()
	ctx := c.t.Context()
	tn, err := c.admin.CreateTenant(ctx, tenant)
	if err != nil {
		c.t.Fatalf("create tenant %s: %v", tenant, err)
	}
	u, err := c.admin.CreateUser(ctx, tn.ID, api.CreateUserRequest{Name: user})
	if err != nil {
		c.t.Fatalf("create user %s: %v", user, err)
	}
	if u.User.Role != cloud.RoleMember || u.Secret == "" {
		c.t.Fatalf("user %s: role %s, secret %q; want a member with a token", user, u.User.Role, u.Secret)
	}
	return tn, client.New(c.srv.URL, u.Secret, c.hc), u.Secret
}

// get reads an instance, failing the test on error.
func (c *cluster) get(cl *client.Client, id string) *cloud.Instance {
	c.t.Helper()
	in, err := cl.GetInstance(c.t.Context(), id)
	if err != nil {
		c.t.Fatalf("get instance %s: %v", id, err)
	}
	return in
}

// waitState waits until the instance is in state want and returns it. A
// failed, lost or terminated instance that was not expected to be ends the
// wait at once, with its reason.
func (c *cluster) waitState(cl *client.Client, id string, want cloud.State) *cloud.Instance {
	c.t.Helper()
	var in *cloud.Instance
	c.until(fmt.Sprintf("instance %s to be %s", id, want), func() (bool, string) {
		in = c.get(cl, id)
		if in.State != want && (in.State == cloud.Failed || in.State == cloud.Lost || in.State == cloud.Terminated) {
			c.t.Fatalf("instance %s (%s) is %s, want %s: %s", id, in.Offering, in.State, want, in.Reason)
		}
		return in.State == want, fmt.Sprintf("%s (%s)", in.State, in.Reason)
	})
	return in
}

// instances lists every instance the client sees (all pages).
func (c *cluster) instances(cl *client.Client, o client.ListInstancesOptions) []*cloud.Instance {
	c.t.Helper()
	var out []*cloud.Instance
	o.Limit = 1000
	for {
		page, err := cl.ListInstances(c.t.Context(), o)
		if err != nil {
			c.t.Fatalf("list instances: %v", err)
		}
		out = append(out, page.Instances...)
		if page.Next == "" {
			return out
		}
		o.After = page.Next
	}
}

// eventsAfter returns the audit trail after the event with the given ID
// (admin); 0 gives all of it.
func (c *cluster) eventsAfter(id int64) []*cloud.Event {
	c.t.Helper()
	var out []*cloud.Event
	o := client.EventsOptions{Limit: 1000}
	if id > 0 {
		o.After = strconv.FormatInt(id, 10)
	}
	for {
		page, err := c.admin.Events(c.t.Context(), o)
		if err != nil {
			c.t.Fatalf("list events: %v", err)
		}
		out = append(out, page.Events...)
		if page.Next == "" {
			return out
		}
		o.After = page.Next
	}
}

// hostSpecs reads the hosts as the server records them (admin).
func (c *cluster) hostSpecs() map[string]*cloud.Host {
	c.t.Helper()
	hs, err := c.admin.Hosts(c.t.Context())
	if err != nil {
		c.t.Fatalf("list hosts: %v", err)
	}
	out := map[string]*cloud.Host{}
	for _, h := range hs {
		out[h.ID] = h
	}
	return out
}

// snapshot is what a refused request must leave as it was: every
// instance (state, version, host), the audit trail (the ID of its newest
// event), the volumes and the tenants.
type snapshot struct {
	Instances map[string]string
	LastEvent int64
	Volumes   int
	Tenants   int
}

func (c *cluster) snapshot() snapshot {
	c.t.Helper()
	s := snapshot{Instances: map[string]string{}}
	for _, in := range c.instances(c.admin, client.ListInstancesOptions{}) {
		s.Instances[in.ID] = fmt.Sprintf("%s v%d on %q", in.State, in.Version, in.HostID)
	}
	// Only the events after the newest one seen so far are read: the
	// trail is long, and a snapshot is taken around every bad request.
	if evs := c.eventsAfter(c.lastEvent); len(evs) > 0 {
		c.lastEvent = evs[len(evs)-1].ID
	}
	s.LastEvent = c.lastEvent
	vols, err := c.admin.Volumes(c.t.Context(), "")
	if err != nil {
		c.t.Fatalf("list volumes: %v", err)
	}
	s.Volumes = len(vols)
	ts, err := c.admin.Tenants(c.t.Context())
	if err != nil {
		c.t.Fatalf("list tenants: %v", err)
	}
	s.Tenants = len(ts)
	return s
}

// answer is a raw HTTP answer: its status and, for an error, its body.
type answer struct {
	status int
	err    cloud.Error
	body   []byte
}

// raw sends one request as a hand-written client would: any body, any
// headers, token or none.
func (c *cluster) raw(method, path, token, contentType string, body []byte, header map[string]string) answer {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	a.body, err = io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: read answer: %v", method, path, err)
	}
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(a.body, &a.err); err != nil {
			c.t.Fatalf("%s %s: %d answer is not the API's error shape: %v: %q", method, path, resp.StatusCode, err, a.body)
		}
	}
	return a
}

// logs reads an instance's whole output through the API.
func (c *cluster) logs(cl *client.Client, id string) string {
	c.t.Helper()
	var b strings.Builder
	var off int64
	for {
		page, err := cl.InstanceLogs(c.t.Context(), id, off)
		if err != nil {
			c.t.Fatalf("logs of %s: %v", id, err)
		}
		b.WriteString(page.Data)
		if page.Offset == off || page.Data == "" {
			return b.String()
		}
		off = page.Offset
	}
}

// Markers around the environment a workload prints.
const (
	envBegin = "--- e2e env begin ---"
	envEnd   = "--- e2e env end ---"
)

// envCommand prints the workload's environment between the markers and
// then waits to be stopped.
var envCommand = []string{"/bin/sh", "-c", "echo '" + envBegin + "'; env; echo '" + envEnd + "'; exec sleep 600"}

// workloadEnv waits until the instance's output holds run printed
// environments (1 for the first run) and returns the last one.
func (c *cluster) workloadEnv(cl *client.Client, id string, run int) map[string]string {
	c.t.Helper()
	var out string
	c.until(fmt.Sprintf("the output of %s to show its environment (run %d)", id, run), func() (bool, string) {
		out = c.logs(cl, id)
		return strings.Count(out, envEnd) >= run, fmt.Sprintf("%d bytes of output", len(out))
	})
	if n := strings.Count(out, envEnd); n != run {
		c.t.Fatalf("instance %s printed its environment %d times, want %d (it ran more often than started?):\n%s", id, n, run, out)
	}
	block := out[strings.LastIndex(out, envBegin)+len(envBegin) : strings.LastIndex(out, envEnd)]
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			c.t.Fatalf("instance %s: environment line %q has no '='", id, line)
		}
		env[k] = v
	}
	return env
}

// fetchMetadata reads GET /v1/instance from a workload's metadata URL.
func (c *cluster) fetchMetadata(url string) (*metadata.Document, error) {
	tok, err := metadata.Token(c.t.Context(), c.hc, url, time.Minute)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(c.t.Context(), http.MethodGet, url+"/v1/instance", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(metadata.TokenHeader, tok)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s/v1/instance: %d %s", url, resp.StatusCode, b)
	}
	var doc metadata.Document
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	return &doc, nil
}

// placementFleet builds a fleet from the hosts the server records and
// applies the placement of every instance that holds one, as the
// scheduler's rebuild does: an Apply that fails means two placements want
// the same thing. It returns the fleet, already checked.
func (c *cluster) placementFleet() *fleet.Fleet {
	c.t.Helper()
	f := fleet.New()
	hosts := c.hostSpecs()
	ids := make([]string, 0, len(hosts))
	for id := range hosts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		spec := hosts[id].Spec
		spec.ID, spec.State = id, hosts[id].State
		if err := f.AddHost(&spec, catalog.Default()); err != nil {
			c.t.Fatalf("host %s: %v", id, err)
		}
	}
	for _, in := range c.instances(c.admin, client.ListInstancesOptions{States: cloud.HoldingStates()}) {
		if in.Placement == nil {
			c.t.Fatalf("instance %s is %s but has no placement", in.ID, in.State)
		}
		p := *in.Placement
		p.ID = in.ID
		p.Devices = slices.Clone(p.Devices)
		if h := f.Host(p.HostID); h != nil {
			for i, d := range p.Devices {
				if d.Kind == fleet.MIGSlice && d.GPU < len(h.GPUs) {
					// The agent switched MIG mode on already, or not yet.
					p.Devices[i].EnableMIG = !h.GPUs[d.GPU].MIG
				}
			}
		}
		if err := f.Apply(&p); err != nil {
			c.t.Errorf("placement of %s (%s) does not fit beside the others: %v", in.ID, in.Offering, err)
		}
	}
	if err := f.Check(); err != nil {
		c.t.Errorf("fleet check: %v", err)
	}
	return f
}

// overlaps checks the placements of the given instances against each
// other directly, without the fleet's bookkeeping: no whole GPU twice, no
// MIG memory slot twice, at most 1000 milli shared per GPU, no GPU used in
// two ways, and a bare-metal host alone.
func overlaps(ins []*cloud.Instance) []error {
	type gpuKey struct {
		host string
		gpu  int
	}
	var errs []error
	whole := map[gpuKey]string{}
	slots := map[gpuKey]uint8{}
	milli := map[gpuKey]int{}
	kinds := map[gpuKey]map[fleet.DeviceKind]bool{}
	perHost := map[string][]string{}
	metal := map[string]string{}
	for _, in := range ins {
		p := in.Placement
		if p == nil {
			continue
		}
		perHost[p.HostID] = append(perHost[p.HostID], in.ID)
		if p.Metal {
			metal[p.HostID] = in.ID
		}
		for _, d := range p.Devices {
			k := gpuKey{p.HostID, d.GPU}
			if kinds[k] == nil {
				kinds[k] = map[fleet.DeviceKind]bool{}
			}
			kinds[k][d.Kind] = true
			switch d.Kind {
			case fleet.Whole:
				if prev := whole[k]; prev != "" {
					errs = append(errs, fmt.Errorf("%s gpu %d held whole by %s and %s", k.host, k.gpu, prev, in.ID))
				}
				whole[k] = in.ID
			case fleet.MIGSlice:
				m := uint8((1<<d.MIGSlots)-1) << d.MIGStart
				if d.MIGSlots <= 0 || slots[k]&m != 0 {
					errs = append(errs, fmt.Errorf("%s gpu %d: MIG slots %d+%d of %s overlap another instance or are empty", k.host, k.gpu, d.MIGStart, d.MIGSlots, in.ID))
				}
				slots[k] |= m
			case fleet.Share:
				milli[k] += d.Milli
				if milli[k] > fleet.MilliPerGPU {
					errs = append(errs, fmt.Errorf("%s gpu %d: %d milli shared", k.host, k.gpu, milli[k]))
				}
			default:
				errs = append(errs, fmt.Errorf("%s: unknown device kind %q", in.ID, d.Kind))
			}
		}
	}
	for k, ks := range kinds {
		if len(ks) > 1 {
			errs = append(errs, fmt.Errorf("%s gpu %d is used as %v at once", k.host, k.gpu, ks))
		}
	}
	for host, id := range metal {
		if len(perHost[host]) != 1 {
			errs = append(errs, fmt.Errorf("bare-metal host %s (%s) has neighbours: %v", host, id, perHost[host]))
		}
	}
	return errs
}

// wantCode checks an API error's code.
func wantCode(t *testing.T, what string, err error, code cloud.Code) *cloud.Error {
	t.Helper()
	var ce *cloud.Error
	if !errors.As(err, &ce) {
		t.Fatalf("%s: got %v, want a %s API error", what, err, code)
	}
	if ce.Code != code {
		t.Fatalf("%s: got %s (%s), want %s", what, ce.Code, ce.Message, code)
	}
	return ce
}
