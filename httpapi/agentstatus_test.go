package httpapi

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	control "github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
)

// schedule runs one scheduler step, as the leader's loop would, over the
// store the services write (so that the agents' watches note its
// placements), and returns how many instances it placed.
func (e *env) schedule() int {
	e.t.Helper()
	s := control.NewScheduler(e.Services.Store(), nil)
	s.Now = e.clock.Now
	s.Log = slog.New(slog.NewTextHandler(&syncWriter{w: e.logs}, nil))
	n, err := s.Step(context.Background())
	if err != nil {
		e.t.Fatalf("scheduler step: %v", err)
	}
	return n
}

func (e *env) instance(id string) *cloud.Instance {
	e.t.Helper()
	in, err := e.admin.GetInstance(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

// moves returns an instance's state changes as "from>to" strings.
func (e *env) moves(id string) []string {
	e.t.Helper()
	evs, err := e.admin.InstanceEvents(context.Background(), id, client.EventsOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs.Events {
		if ev.From != "" {
			out = append(out, string(ev.From)+">"+string(ev.To))
		}
	}
	return out
}

func intp(n int) *int { return &n }

// assignments lists an agent's assignments.
func (e *env) assignments(agent *agentConn) []agentapi.Assignment {
	e.t.Helper()
	as, err := agent.Assignments(context.Background())
	if err != nil {
		e.t.Fatalf("assignments: %v", err)
	}
	return as.Assignments
}

func TestAgentLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	agent, host := e.join(inventory("node-1", "L4", 1))
	in := e.mustCreate(e.acme, "l4.1x")
	if n := e.schedule(); n != 1 {
		t.Fatalf("placed %d, want 1", n)
	}
	as := e.assignments(agent)
	if len(as) != 1 {
		t.Fatalf("assignments = %+v", as)
	}
	a := as[0]
	if a.InstanceID != in.ID || a.TenantID != e.acmeID || a.Offering != "l4.1x" || a.Desired != agentapi.DesiredRun ||
		a.GraceSeconds != 30 || a.Placement == nil || a.Placement.HostID != host || a.Placement.Devices[0].UUID != "GPU-node-1-0" {
		t.Errorf("assignment %+v", a)
	}

	report := func(phase string, code *int) {
		t.Helper()
		if err := agent.ReportStatus(ctx, in.ID, agentapi.StatusReport{Phase: phase, ExitCode: code}); err != nil {
			t.Fatalf("report %s: %v", phase, err)
		}
	}
	report(agentapi.PhaseStarting, nil)
	report(agentapi.PhaseRunning, nil)
	report(agentapi.PhaseRunning, nil)  // a repeat changes nothing
	report(agentapi.PhaseStarting, nil) // a late report changes nothing
	if got := e.instance(in.ID); got.State != cloud.Running || got.HostID != host {
		t.Errorf("after running: %s on %q", got.State, got.HostID)
	}

	if _, err := e.acme.StopInstance(ctx, in.ID, 0); err != nil {
		t.Fatal(err)
	}
	as = e.assignments(agent)
	if len(as) != 1 || as[0].Desired != agentapi.DesiredStop {
		t.Fatalf("assignments after stop: %+v", as)
	}
	report(agentapi.PhaseRunning, nil) // the stop wins
	v := e.host(host).Version
	report(agentapi.PhaseStopped, nil)
	got := e.instance(in.ID)
	if got.State != cloud.Stopped || got.HostID != "" || got.Placement != nil {
		t.Errorf("after stopped: %+v", got)
	}
	if h := e.host(host); h.Version != v {
		t.Errorf("release: host version %d, want %d (a release does not write the host)", h.Version, v)
	}
	if as := e.assignments(agent); len(as) != 0 {
		t.Errorf("assignments after the release: %+v", as)
	}
	want := []string{"pending>scheduled", "scheduled>starting", "starting>running", "running>stopping", "stopping>stopped"}
	if m := e.moves(in.ID); !slices.Equal(m, want) {
		t.Errorf("moves %v, want %v", m, want)
	}
	// A repeat of the final report, after the release, answers 204 and
	// changes nothing.
	report(agentapi.PhaseStopped, nil)
	if m := e.moves(in.ID); len(m) != len(want) {
		t.Errorf("a repeated stopped report added events: %v", m)
	}
	// The GPU is free again: another instance fits on the one-GPU host.
	other := e.mustCreate(e.acme, "l4.1x")
	if n := e.schedule(); n != 1 || e.instance(other.ID).HostID != host {
		t.Errorf("after the release the scheduler placed %d", n)
	}
	// Starting the stopped instance again leaves it pending: the host is
	// full.
	if _, err := e.acme.StartInstance(ctx, in.ID, 0); err != nil {
		t.Fatal(err)
	}
	if n := e.schedule(); n != 0 {
		t.Errorf("placed %d on a full host", n)
	}
}

func TestAgentExitAndFailure(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	agent, host := e.join(inventory("node-1", "L4", 4))
	var ids []string
	for i := 0; i < 4; i++ {
		ids = append(ids, e.mustCreate(e.acme, "l4.1x").ID)
	}
	if n := e.schedule(); n != 4 {
		t.Fatalf("placed %d", n)
	}
	for _, id := range ids[:3] {
		if err := agent.ReportStatus(ctx, id, agentapi.StatusReport{Phase: agentapi.PhaseRunning}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		id     string
		rep    agentapi.StatusReport
		state  cloud.State
		reason string
		moves  []string
	}{
		{ids[0], agentapi.StatusReport{Phase: agentapi.PhaseExited, ExitCode: intp(0)}, cloud.Stopped, "exited with code 0",
			[]string{"running>stopping", "stopping>stopped"}},
		{ids[1], agentapi.StatusReport{Phase: agentapi.PhaseExited, ExitCode: intp(3), Message: "CUDA out of memory\nat line 4"},
			cloud.Failed, "exit code 3: CUDA out of memory at line 4", []string{"running>failed"}},
		{ids[2], agentapi.StatusReport{Phase: agentapi.PhaseFailed, Message: "MIG layout: busy"}, cloud.Failed, "MIG layout: busy",
			[]string{"running>failed"}},
		{ids[3], agentapi.StatusReport{Phase: agentapi.PhaseFailed}, cloud.Failed, "could not start", []string{"scheduled>failed"}},
	} {
		if err := agent.ReportStatus(ctx, c.id, c.rep); err != nil {
			t.Fatalf("%+v: %v", c.rep, err)
		}
		got := e.instance(c.id)
		if got.State != c.state || !strings.Contains(got.Reason, c.reason) || got.HostID != "" {
			t.Errorf("%+v: %s %q on %q, want %s %q", c.rep, got.State, got.Reason, got.HostID, c.state, c.reason)
		}
		if m := e.moves(c.id); !slices.Equal(m[len(m)-len(c.moves):], c.moves) {
			t.Errorf("%+v: moves %v, want them to end with %v", c.rep, m, c.moves)
		}
	}
	if e.instance(ids[1]).Reason != "exit code 3: CUDA out of memory at line 4" {
		t.Errorf("reason %q", e.instance(ids[1]).Reason)
	}
	if n := e.host(host).Spec.GPUs; len(n) != 4 {
		t.Errorf("host GPUs %d", len(n))
	}
	// Every GPU is free again.
	for i := 0; i < 4; i++ {
		e.mustCreate(e.acme, "l4.1x")
	}
	if n := e.schedule(); n != 4 {
		t.Errorf("after the releases the scheduler placed %d of 4", n)
	}

	before := e.counts()
	as := e.assignments(agent)
	for _, rep := range []agentapi.StatusReport{{}, {Phase: "crashed"}, {Phase: agentapi.PhaseExited}} {
		wantCode(t, agent.ReportStatus(ctx, as[0].InstanceID, rep), cloud.Invalid)
	}
	e.unchanged(before, "invalid reports")
}

func TestAgentTerminate(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	agent, host := e.join(inventory("node-1", "L4", 2))
	a, b := e.mustCreate(e.acme, "l4.1x"), e.mustCreate(e.acme, "l4.1x")
	e.schedule()
	for _, id := range []string{a.ID, b.ID} {
		if err := agent.ReportStatus(ctx, id, agentapi.StatusReport{Phase: agentapi.PhaseRunning}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.acme.TerminateInstance(ctx, id, 0); err != nil {
			t.Fatal(err)
		}
	}
	as := e.assignments(agent)
	if len(as) != 2 || as[0].Desired != agentapi.DesiredStop || as[1].Desired != agentapi.DesiredStop {
		t.Fatalf("assignments of terminating instances: %+v", as)
	}
	v := e.host(host).Version
	if err := agent.ReportStatus(ctx, a.ID, agentapi.StatusReport{Phase: agentapi.PhaseStopped}); err != nil {
		t.Fatal(err)
	}
	if err := agent.ReportStatus(ctx, b.ID, agentapi.StatusReport{Phase: agentapi.PhaseExited, ExitCode: intp(137)}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a.ID, b.ID} {
		if got := e.instance(id); got.State != cloud.Terminated || got.HostID != "" || got.Placement != nil {
			t.Errorf("%s: %+v", id, got)
		}
		if m := e.moves(id); m[len(m)-1] != "terminating>terminated" {
			t.Errorf("%s: moves %v", id, m)
		}
		// Repeats answer 204.
		if err := agent.ReportStatus(ctx, id, agentapi.StatusReport{Phase: agentapi.PhaseStopped}); err != nil {
			t.Errorf("repeat: %v", err)
		}
	}
	if h := e.host(host); h.Version != v {
		t.Errorf("host version %d, want %d (a release does not write the host)", h.Version, v)
	}
}

func TestAgentOtherHost(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	agentA, _ := e.join(inventory("node-a", "L4", 1))
	agentB, hostB := e.join(inventory("node-b", "H100", 1))
	in := e.mustCreate(e.acme, "h100.1x")
	e.schedule()
	if got := e.instance(in.ID); got.HostID != hostB {
		t.Fatalf("placed on %q", got.HostID)
	}
	before := e.counts()
	wantCode(t, agentA.ReportStatus(ctx, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseRunning}), cloud.NotFound)
	wantCode(t, agentA.AppendLogs(ctx, in.ID, []byte("x")), cloud.NotFound)
	wantCode(t, agentA.ReportStatus(ctx, "i-nothing", agentapi.StatusReport{Phase: agentapi.PhaseRunning}), cloud.NotFound)
	if as := e.assignments(agentA); len(as) != 0 {
		t.Errorf("host A sees %+v", as)
	}
	e.unchanged(before, "another host's reports")

	if err := agentB.ReportStatus(ctx, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseExited, ExitCode: intp(1)}); err != nil {
		t.Fatal(err)
	}
	// After the release only B's repeat is answered 204; output read
	// after the final report is still B's to send.
	wantCode(t, agentA.ReportStatus(ctx, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseExited, ExitCode: intp(1)}), cloud.NotFound)
	if err := agentB.ReportStatus(ctx, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseExited, ExitCode: intp(1)}); err != nil {
		t.Errorf("repeat by B: %v", err)
	}
	wantCode(t, agentB.ReportStatus(ctx, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseRunning}), cloud.NotFound)
	wantCode(t, agentB.ReportStatus(ctx, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseStopped}), cloud.NotFound)
	if err := agentB.AppendLogs(ctx, in.ID, []byte("last words\n")); err != nil {
		t.Errorf("logs after the final report: %v", err)
	}
	wantCode(t, agentA.AppendLogs(ctx, in.ID, []byte("x")), cloud.NotFound)
}

func TestAgentLostInstance(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	agent, _ := e.join(inventory("node-1", "L4", 1))
	in := e.mustCreate(e.acme, "l4.1x")
	e.schedule()
	if err := agent.ReportStatus(ctx, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseRunning}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	if _, err := service.MarkSilentHosts(ctx, e.store, e.clock.Now(), control.DefaultHeartbeatTimeout); err != nil {
		t.Fatal(err)
	}
	if err := errOf(agent.Heartbeat(ctx, agentapi.HeartbeatRequest{})); err != nil {
		t.Fatal(err)
	}
	// The instance was lost while the host was silent: the agent must
	// stop it, and its reports are not the host's any more.
	wantCode(t, agent.ReportStatus(ctx, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseExited, ExitCode: intp(0)}), cloud.NotFound)
	if got := e.instance(in.ID); got.State != cloud.Lost {
		t.Errorf("state %s, want lost", got.State)
	}
	if as := e.assignments(agent); len(as) != 0 {
		t.Errorf("assignments %+v", as)
	}
}

func TestAgentMIGClaim(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	inv := inventory("node-1", "H100", 1)
	agent, host := e.join(inv)
	in := e.mustCreate(e.acme, "h100.mig.3g.40gb")
	e.schedule()
	p := e.instance(in.ID).Placement
	if p == nil || p.Devices[0].Kind != fleet.MIGSlice {
		t.Fatalf("placement %+v", p)
	}
	// The agent creates the MIG instance and reports it; the server ties
	// it to the allocation, so that the scheduler counts it once.
	d := p.Devices[0]
	inv.Host.GPUs[0].MIG = true
	inv.Host.GPUs[0].Instances = []fleet.MIGInstance{{ProfileID: d.MIGProfileID, Start: d.MIGStart}}
	if err := errOf(agent.Heartbeat(ctx, agentapi.HeartbeatRequest{Inventory: inv})); err != nil {
		t.Fatal(err)
	}
	if got := e.host(host).Spec.GPUs[0].Instances; len(got) != 1 || got[0].Alloc != in.ID {
		t.Errorf("spec MIG instances %+v", got)
	}
	second := e.mustCreate(e.acme, "h100.mig.3g.40gb")
	if n := e.schedule(); n != 1 {
		t.Fatalf("placed %d", n)
	}
	if p2 := e.instance(second.ID).Placement; p2.Devices[0].MIGStart == d.MIGStart {
		t.Errorf("second instance on the first one's slots: %+v", p2.Devices[0])
	}
	if strings.Contains(e.logs.String(), "does not fit") {
		t.Errorf("the scheduler could not rebuild: %s", e.logs.String())
	}
}

func TestStopGrace(t *testing.T) {
	e := newEnv(t)
	agent, _ := e.join(inventory("node-1", "L4", 1))
	e.mustCreate(e.acme, "l4.1x")
	e.schedule()
	srv := httptest.NewServer(New(service.New(e.store, nil, service.Options{Now: e.clock.Now, StopGrace: 90 * time.Second}), Options{}))
	defer srv.Close()
	c := agentapi.NewClient(srv.URL, agent.token, srv.Client())
	as, err := c.Assignments(context.Background())
	if err != nil || len(as.Assignments) != 1 || as.Assignments[0].GraceSeconds != 90 {
		t.Errorf("assignments with StopGrace 90s: %+v, %v", as, err)
	}
}

func TestLogs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	agent, _ := e.join(inventory("node-1", "L4", 1))
	in := e.mustCreate(e.acme, "l4.1x")
	e.schedule()

	page, err := e.acme.InstanceLogs(ctx, in.ID, 0)
	if err != nil || *page != (api.LogPage{}) {
		t.Fatalf("logs before any output: %+v, %v", page, err)
	}
	// "wörld" is cut inside the ö: the page waits for its second byte.
	for _, chunk := range []string{"hello\n", "w\xc3"} {
		if err := agent.AppendLogs(ctx, in.ID, []byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	page, err = e.acme.InstanceLogs(ctx, in.ID, 0)
	if err != nil || page.Data != "hello\nw" || page.Offset != 7 || page.Start != 0 {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	if err := agent.AppendLogs(ctx, in.ID, []byte("\xb6rld\n")); err != nil {
		t.Fatal(err)
	}
	page, err = e.acme.InstanceLogs(ctx, in.ID, page.Offset)
	if err != nil || page.Data != "örld\n" || page.Offset != 13 || page.Start != 7 {
		t.Fatalf("second page: %+v, %v", page, err)
	}
	page, err = e.acme.InstanceLogs(ctx, in.ID, page.Offset)
	if err != nil || page.Data != "" || page.Offset != 13 {
		t.Fatalf("nothing new: %+v, %v", page, err)
	}
	if page, err := e.admin.InstanceLogs(ctx, in.ID, 0); err != nil || page.Data != "hello\nwörld\n" {
		t.Errorf("admin: %+v, %v", page, err)
	}
	_, err = e.globex.InstanceLogs(ctx, in.ID, 0)
	wantCode(t, err, cloud.NotFound)
	_, err = e.acme.InstanceLogs(ctx, in.ID, 14)
	wantCode(t, err, cloud.Invalid)
	_, err = e.client(agent.token).InstanceLogs(ctx, in.ID, 0)
	wantCode(t, err, cloud.PermissionDenied)
	if status, _, _ := e.raw("GET", "/v1/instances/"+in.ID+"/logs?offset=-1", e.acmeToken, nil, nil); status != 400 {
		t.Errorf("negative offset: %d", status)
	}

	path := "/v1/agent/instances/" + in.ID + "/logs"
	status, _, _ := e.raw("POST", path, agent.token, strings.NewReader(`{"a":1}`), nil)
	if status != 415 {
		t.Errorf("JSON body: %d, want 415", status)
	}
	big := bytes.Repeat([]byte("x"), service.MaxLogChunk+1)
	status, _, _ = e.raw("POST", path, agent.token, bytes.NewReader(big), map[string]string{"Content-Type": "text/plain"})
	if status != 413 {
		t.Errorf("a chunk over 1 MiB: %d, want 413", status)
	}
	status, _, _ = e.raw("POST", path, agent.token, bytes.NewReader(big[:service.MaxLogChunk]), map[string]string{"Content-Type": "application/octet-stream"})
	if status != 204 {
		t.Errorf("a chunk of exactly 1 MiB: %d, want 204", status)
	}
	page, err = e.acme.InstanceLogs(ctx, in.ID, 13)
	if err != nil || len(page.Data) != service.MaxLogPage || page.Offset != 13+service.MaxLogPage {
		t.Errorf("a full page: %d bytes, offset %d, %v", len(page.Data), page.Offset, err)
	}
}
