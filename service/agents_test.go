package service_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// ahInventory is what an agent on a host with gpus GPUs of model reports.
func ahInventory(id, model string, gpus int) *agentapi.Inventory {
	h := fleet.MockHost(id, model, gpus)
	h.State = ""
	delete(h.Labels, "driver")
	return &agentapi.Inventory{Host: *h, Driver: "550.54.15", CUDA: "12.4"}
}

// joinActor makes a join token for a fleet (100 joins) and returns its
// actor (as the transport authenticates it) and its ID.
func (f *ahFixture) joinActor(name string) (service.Actor, string) {
	f.t.Helper()
	return f.joinActorN(name, 100)
}

// joinActorN is joinActor for a token of maxJoins joins (0: the default).
func (f *ahFixture) joinActorN(name string, maxJoins int) (service.Actor, string) {
	f.t.Helper()
	jt, err := f.svc.Accounts.CreateJoinToken(context.Background(), f.admin, name, nil, maxJoins)
	if err != nil {
		f.t.Fatalf("create join token: %v", err)
	}
	return service.Actor{ID: jt.Token.UserID, TenantID: jt.Token.TenantID, Role: jt.Token.Role}, jt.Token.ID
}

// token finds the live token of a secret (NotFound when revoked).
func (f *ahFixture) token(secret string) (*cloud.Token, error) {
	var tk *cloud.Token
	err := f.st.Tx(context.Background(), func(tx cloud.Tx) (err error) {
		tk, err = tx.TokenByHash(context.Background(), service.HashToken(secret), f.clock.Now())
		return err
	})
	return tk, err
}

func ahInt(n int) *int { return &n }

func TestAgentsReportPath(t *testing.T) {
	type rep = agentapi.StatusReport
	for _, c := range []struct {
		from   cloud.State
		rep    rep
		path   []cloud.State
		reason string
		// reclaim is the spot reclaim stopping the instance, if any.
		reclaim string
	}{
		{cloud.Scheduled, rep{Phase: agentapi.PhaseStarting}, []cloud.State{cloud.Starting}, "the agent is starting the workload", ""},
		{cloud.Starting, rep{Phase: agentapi.PhaseStarting}, nil, "the agent is starting the workload", ""},
		{cloud.Running, rep{Phase: agentapi.PhaseStarting}, nil, "the agent is starting the workload", ""},
		{cloud.Scheduled, rep{Phase: agentapi.PhaseRunning}, []cloud.State{cloud.Starting, cloud.Running}, "the workload is running", ""},
		{cloud.Starting, rep{Phase: agentapi.PhaseRunning, Message: "pid 7"}, []cloud.State{cloud.Running}, "the workload is running: pid 7", ""},
		{cloud.Running, rep{Phase: agentapi.PhaseRunning}, nil, "the workload is running", ""},
		{cloud.Stopping, rep{Phase: agentapi.PhaseRunning}, nil, "the workload is running", ""},
		{cloud.Stopping, rep{Phase: agentapi.PhaseStopped}, []cloud.State{cloud.Stopped}, "the agent stopped the workload", ""},
		{cloud.Terminating, rep{Phase: agentapi.PhaseStopped}, []cloud.State{cloud.Terminated}, "the agent stopped the workload", ""},
		{cloud.Running, rep{Phase: agentapi.PhaseStopped}, nil, "the agent stopped the workload", ""},
		{cloud.Running, rep{Phase: agentapi.PhaseExited, ExitCode: ahInt(0)}, []cloud.State{cloud.Stopping, cloud.Stopped}, cloud.ReasonExitedOK, ""},
		{cloud.Stopping, rep{Phase: agentapi.PhaseExited, ExitCode: ahInt(0)}, []cloud.State{cloud.Stopped}, cloud.ReasonExitedOK, ""},
		{cloud.Terminating, rep{Phase: agentapi.PhaseExited, ExitCode: ahInt(0)}, []cloud.State{cloud.Terminated}, cloud.ReasonExitedOK, ""},
		{cloud.Stopped, rep{Phase: agentapi.PhaseExited, ExitCode: ahInt(0)}, nil, cloud.ReasonExitedOK, ""},
		{cloud.Running, rep{Phase: agentapi.PhaseExited, ExitCode: ahInt(3), Message: "oom"}, []cloud.State{cloud.Failed}, "exit code 3: oom", ""},
		{cloud.Stopping, rep{Phase: agentapi.PhaseExited, ExitCode: ahInt(137)}, []cloud.State{cloud.Failed}, "exit code 137", ""},
		{cloud.Terminating, rep{Phase: agentapi.PhaseExited, ExitCode: ahInt(1)}, []cloud.State{cloud.Terminated}, "exit code 1", ""},
		{cloud.Failed, rep{Phase: agentapi.PhaseExited, ExitCode: ahInt(1)}, nil, "exit code 1", ""},
		{cloud.Scheduled, rep{Phase: agentapi.PhaseFailed}, []cloud.State{cloud.Failed}, "the agent could not start the workload", ""},
		{cloud.Starting, rep{Phase: agentapi.PhaseFailed, Message: "MIG layout: busy"}, []cloud.State{cloud.Failed}, "MIG layout: busy", ""},
		{cloud.Terminating, rep{Phase: agentapi.PhaseFailed}, []cloud.State{cloud.Terminated}, "the agent could not start the workload", ""},
		// A spot reclaim's stop says it was a reclaim, not the agent's whim.
		{cloud.Stopping, rep{Phase: agentapi.PhaseStopped}, []cloud.State{cloud.Stopped}, "reclaimed (capacity): stopped at the notice's deadline", "capacity"},
		{cloud.Terminating, rep{Phase: agentapi.PhaseStopped, Message: "SIGTERM after 3s"}, []cloud.State{cloud.Terminated}, "reclaimed (price): stopped at the notice's deadline: SIGTERM after 3s", "price"},
		{cloud.Terminating, rep{Phase: agentapi.PhaseExited, ExitCode: ahInt(143)}, []cloud.State{cloud.Terminated}, "reclaimed (capacity): exit code 143", "capacity"},
		{cloud.Stopping, rep{Phase: agentapi.PhaseExited, ExitCode: ahInt(0)}, []cloud.State{cloud.Stopped}, "reclaimed (capacity): " + cloud.ReasonExitedOK, "capacity"},
		// A report that changes nothing keeps its plain reason.
		{cloud.Running, rep{Phase: agentapi.PhaseStopped}, nil, "the agent stopped the workload", "capacity"},
	} {
		path, reason := service.ReportPath(c.from, c.rep, c.reclaim)
		if !slices.Equal(path, c.path) || reason != c.reason {
			t.Errorf("from %s, report %+v: %v %q, want %v %q", c.from, c.rep, path, reason, c.path, c.reason)
		}
		for i, to := range path {
			from := c.from
			if i > 0 {
				from = path[i-1]
			}
			if !cloud.CanMove(from, to) {
				t.Errorf("from %s, report %+v: illegal move %s -> %s", c.from, c.rep, from, to)
			}
		}
	}
}

func TestAgentsJoin(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		join, jtID := f.joinActor("rack-1")

		before := f.state()
		_, _, _, _, err := f.svc.Agents.Join(ctx, f.admin, "tk-x", ahInventory("node-1", "L4", 1), nil, "")
		ahCode(t, err, cloud.PermissionDenied)
		_, _, _, _, err = f.svc.Agents.Join(ctx, join, jtID, nil, nil, "")
		ahCode(t, err, cloud.Invalid)
		bad := ahInventory("no spaces", "L4", 1)
		_, _, _, _, err = f.svc.Agents.Join(ctx, join, jtID, bad, nil, "")
		if ce := ahCode(t, err, cloud.Invalid); ce.Details["field"] != "inventory.host.id" {
			t.Errorf("bad host ID: %+v", ce)
		}
		bad = ahInventory("node-1", "L4", 2)
		bad.Host.GPUs[1].UUID = bad.Host.GPUs[0].UUID
		_, _, _, _, err = f.svc.Agents.Join(ctx, join, jtID, bad, nil, "")
		ahCode(t, err, cloud.Invalid)
		f.unchanged(before, "refused joins")

		id, cred, _, created, err := f.svc.Agents.Join(ctx, join, jtID, ahInventory("node-1", "L4", 1), nil, "")
		if err != nil || id != "node-1" || !created || !strings.HasPrefix(cred, service.SecretPrefix) {
			t.Fatalf("Join = %q, %q, %v, %v", id, cred, created, err)
		}
		tk, err := f.token(cred)
		if err != nil || tk.Role != cloud.RoleAgent || tk.HostID != "node-1" || tk.UserID != f.admin.ID {
			t.Fatalf("agent credential %+v, %v", tk, err)
		}
		h := f.host("node-1")
		if h.State != fleet.Schedulable || h.Spec.State != fleet.Schedulable || len(h.Spec.GPUs) != 1 ||
			h.Spec.Labels["driver"] != "550.54.15" || h.Spec.Labels["cuda"] != "12.4" || !h.LastHeartbeat.Equal(f.clock.Now()) {
			t.Errorf("joined host %+v", h)
		}
		evs := ahEvents(t, st, cloud.EventFilter{HostID: "node-1"})
		if len(evs) != 1 || evs[0].Kind != service.EventHostJoined || evs[0].Actor != service.AgentActor("node-1").ID || !strings.Contains(evs[0].Reason, jtID) {
			t.Errorf("join events %+v", evs)
		}

		// Without a host ID the service names the host.
		inv := ahInventory("", "L4", 1)
		inv.Host.GPUs[0].UUID += "-b"
		if id, _, _, created, err := f.svc.Agents.Join(ctx, join, jtID, inv, nil, ""); err != nil || !created || !strings.HasPrefix(id, service.HostPrefix) ||
			f.host(id).Spec.ID != id {
			t.Errorf("Join without ID = %q, %v, %v", id, created, err)
		}

		// A re-join, with the host's current credential, keeps the host's
		// state, replaces its spec, and revokes its earlier credential.
		if _, err := f.svc.Hosts.Cordon(ctx, f.admin, "node-1", 0); err != nil {
			t.Fatal(err)
		}
		v := f.host("node-1").Version
		f.clock.Advance(time.Hour)
		id, cred2, _, created, err := f.svc.Agents.Join(ctx, join, jtID, ahInventory("node-1", "L4", 2), nil, tk.ID)
		if err != nil || id != "node-1" || created {
			t.Fatalf("re-join = %q, %v, %v", id, created, err)
		}
		h = f.host("node-1")
		if h.Version != v+1 || len(h.Spec.GPUs) != 2 || h.State != fleet.Cordoned || h.Spec.State != fleet.Cordoned || !h.LastHeartbeat.Equal(f.clock.Now()) {
			t.Errorf("re-joined host %+v (version was %d)", h, v)
		}
		if _, err := f.token(cred); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("the earlier credential: %v, want it revoked", err)
		}
		if tk, err := f.token(cred2); err != nil || tk.HostID != "node-1" {
			t.Errorf("the new credential: %+v, %v", tk, err)
		}
		var kinds []cloud.EventKind
		for _, ev := range ahEvents(t, st, cloud.EventFilter{HostID: "node-1"}) {
			kinds = append(kinds, ev.Kind)
		}
		if want := []cloud.EventKind{service.EventHostJoined, service.EventHostCordoned, service.EventHostRejoined}; !slices.Equal(kinds, want) {
			t.Errorf("events %v, want %v", kinds, want)
		}
	})
}

func TestAgentsHeartbeat(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		join, jtID := f.joinActor("rack-1")
		inv := ahInventory("node-1", "H100", 2)
		if _, _, _, _, err := f.svc.Agents.Join(ctx, join, jtID, inv, nil, ""); err != nil {
			t.Fatal(err)
		}
		agent := service.AgentActor("node-1")
		v := f.host("node-1").Version

		before := f.state()
		ahCode(t, f.svc.Agents.Heartbeat(ctx, f.acme, nil), cloud.PermissionDenied)
		ahCode(t, f.svc.Agents.Heartbeat(ctx, service.Actor{ID: "u-x", Role: cloud.RoleAgent}, nil), cloud.PermissionDenied)
		other := ahInventory("node-2", "H100", 2)
		ahCode(t, f.svc.Agents.Heartbeat(ctx, agent, other), cloud.Invalid)
		ahHidden(t, f.svc.Agents.Heartbeat(ctx, service.AgentActor("node-9"), nil), "host", "node-9")
		f.unchanged(before, "refused heartbeats")

		f.clock.Advance(10 * time.Second)
		if err := f.svc.Agents.Heartbeat(ctx, agent, nil); err != nil {
			t.Fatal(err)
		}
		if h := f.host("node-1"); h.Version != v || !h.LastHeartbeat.Equal(f.clock.Now()) {
			t.Errorf("heartbeat without inventory: version %d (was %d), last %v", h.Version, v, h.LastHeartbeat)
		}
		f.clock.Advance(10 * time.Second)
		if err := f.svc.Agents.Heartbeat(ctx, agent, inv); err != nil {
			t.Fatal(err)
		}
		if h := f.host("node-1"); h.Version != v || !h.LastHeartbeat.Equal(f.clock.Now()) {
			t.Errorf("heartbeat with the same inventory: version %d (was %d)", h.Version, v)
		}
		inv.Host.GPUs[0].MIG = true
		inv.Host.GPUs[0].Instances = []fleet.MIGInstance{{ProfileID: 9, Start: 4}}
		if err := f.svc.Agents.Heartbeat(ctx, agent, inv); err != nil {
			t.Fatal(err)
		}
		h := f.host("node-1")
		if g := h.Spec.GPUs[0]; h.Version != v+1 || !g.MIG || len(g.Instances) != 1 || g.Instances[0].Slots != 4 || g.Instances[0].Slices != 3 {
			t.Errorf("heartbeat with a new inventory: version %d (was %d), gpu 0 %+v", h.Version, v, g)
		}

		// A silent host was marked unhealthy; its next heartbeat heals it.
		f.setHostState("node-1", fleet.Unhealthy)
		if err := f.svc.Agents.Heartbeat(ctx, agent, nil); err != nil {
			t.Fatal(err)
		}
		if h := f.host("node-1"); h.State != fleet.Schedulable || h.Spec.State != fleet.Schedulable {
			t.Errorf("after the heartbeat of an unhealthy host: %s", h.State)
		}
		var got []string
		for _, ev := range ahEvents(t, st, cloud.EventFilter{HostID: "node-1"}) {
			got = append(got, string(ev.Kind)+" by "+ev.Actor)
		}
		by := " by " + agent.ID
		want := []string{"host.joined" + by, "host.inventory" + by, "host.healthy" + by}
		if !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
	})
}

func TestAgentsAssignments(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 2)
		f.putHost("h-b", 1)
		run := f.placed(f.acme, "h-a", cloud.Running)
		stop := f.placed(f.globex, "h-a", cloud.Stopping)
		f.placed(f.acme, "h-b", cloud.Running)

		_, err := f.svc.Agents.Assignments(ctx, f.admin)
		ahCode(t, err, cloud.PermissionDenied)
		as, err := f.svc.Agents.Assignments(ctx, service.AgentActor("h-a"))
		if err != nil || len(as) != 2 {
			t.Fatalf("assignments = %+v, %v", as, err)
		}
		for _, a := range as {
			want := map[string]string{run.ID: agentapi.DesiredRun, stop.ID: agentapi.DesiredStop}[a.InstanceID]
			if a.Desired != want || a.GraceSeconds != 30 || a.Placement == nil || a.Placement.HostID != "h-a" || a.Offering != "l4.1x" {
				t.Errorf("assignment %+v, want desired %q", a, want)
			}
		}
		if as, err := f.svc.Agents.Assignments(ctx, service.AgentActor("h-c")); err != nil || len(as) != 0 {
			t.Errorf("assignments of an empty host = %+v, %v", as, err)
		}
		// The grace period is the services' option, in whole seconds up.
		svc := service.New(st, nil, service.Options{Now: f.clock.Now, StopGrace: 1500 * time.Millisecond})
		if as, err := svc.Agents.Assignments(ctx, service.AgentActor("h-b")); err != nil || len(as) != 1 || as[0].GraceSeconds != 2 {
			t.Errorf("assignments with a 1.5s grace = %+v, %v", as, err)
		}
	})
}

// TestAgentsReport: reports move instances through MoveInstance, with the
// agent as actor; a final report releases the allocation without touching
// the host's version; stray and repeated reports change nothing.
func TestAgentsReport(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 2)
		f.putHost("h-b", 1)
		agent := service.AgentActor("h-a")
		in := f.placed(f.acme, "h-a", cloud.Scheduled)
		report := func(a service.Actor, id, phase string, code *int, msg string) error {
			return f.svc.Agents.Report(ctx, a, id, agentapi.StatusReport{Phase: phase, ExitCode: code, Message: msg})
		}

		before := f.state()
		ahCode(t, report(agent, in.ID, "", nil, ""), cloud.Invalid)
		ahCode(t, report(agent, in.ID, "dancing", nil, ""), cloud.Invalid)
		ahCode(t, report(agent, in.ID, agentapi.PhaseExited, nil, ""), cloud.Invalid)
		ahCode(t, report(f.acme, in.ID, agentapi.PhaseRunning, nil, ""), cloud.PermissionDenied)
		ahHidden(t, report(service.AgentActor("h-b"), in.ID, agentapi.PhaseRunning, nil, ""), "instance", in.ID)
		ahHidden(t, report(agent, "i-missing", agentapi.PhaseRunning, nil, ""), "instance", "i-missing")
		f.unchanged(before, "refused reports")

		v := f.host("h-a").Version
		if err := report(agent, in.ID, agentapi.PhaseRunning, nil, ""); err != nil {
			t.Fatal(err)
		}
		before = f.state()
		for _, phase := range []string{agentapi.PhaseRunning, agentapi.PhaseStarting} {
			if err := report(agent, in.ID, phase, nil, ""); err != nil {
				t.Errorf("late %s: %v", phase, err)
			}
		}
		f.unchanged(before, "repeated and late reports")
		if _, err := f.svc.Instances.Act(ctx, f.acme, in.ID, service.Stop, 0); err != nil {
			t.Fatal(err)
		}
		before = f.state()
		if err := report(agent, in.ID, agentapi.PhaseRunning, nil, ""); err != nil {
			t.Fatal(err)
		}
		f.unchanged(before, "a running report for an instance asked to stop")
		if err := report(agent, in.ID, agentapi.PhaseStopped, nil, "SIGTERM\nafter 3s"); err != nil {
			t.Fatal(err)
		}
		got := f.instance(in.ID)
		if got.State != cloud.Stopped || got.HostID != "" || got.Placement != nil || got.Reason != "the agent stopped the workload: SIGTERM after 3s" {
			t.Errorf("after stopped: %+v", got)
		}
		if h := f.host("h-a"); h.Version != v {
			t.Errorf("a status report changed the host's version: %d, was %d", h.Version, v)
		}
		var moves []string
		for _, ev := range ahEvents(t, st, cloud.EventFilter{InstanceID: in.ID}) {
			if ev.Actor == agent.ID {
				moves = append(moves, string(ev.From)+">"+string(ev.To))
				if ev.HostID != "h-a" || ev.Kind != cloud.EventInstanceState {
					t.Errorf("agent's event %+v", ev)
				}
			}
		}
		if want := []string{"scheduled>starting", "starting>running", "stopping>stopped"}; !slices.Equal(moves, want) {
			t.Errorf("the agent's moves %v, want %v", moves, want)
		}
		// A repeat of the final report, after the release, changes nothing
		// and is no error; from another host it is not found.
		before = f.state()
		if err := report(agent, in.ID, agentapi.PhaseStopped, nil, ""); err != nil {
			t.Errorf("repeated final report: %v", err)
		}
		ahHidden(t, report(service.AgentActor("h-b"), in.ID, agentapi.PhaseStopped, nil, ""), "instance", in.ID)
		ahHidden(t, report(agent, in.ID, agentapi.PhaseFailed, nil, ""), "instance", in.ID)
		f.unchanged(before, "reports after the release")

		// A terminated instance's volumes are detached.
		vol := &cloud.Volume{ID: service.NewID(service.VolumePrefix), TenantID: f.acme.TenantID, Name: "data", SizeGiB: 1, CreatedAt: f.clock.Now()}
		if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.CreateVolume(ctx, vol) }); err != nil {
			t.Fatal(err)
		}
		term := f.placed(f.acme, "h-a", cloud.Terminating, vol.ID)
		if err := report(agent, term.ID, agentapi.PhaseExited, ahInt(0), ""); err != nil {
			t.Fatal(err)
		}
		if got := f.instance(term.ID); got.State != cloud.Terminated || got.HostID != "" {
			t.Errorf("after exited while terminating: %+v", got)
		}
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			v, err := tx.GetVolume(ctx, vol.ID)
			if err == nil && v.InstanceID != "" {
				t.Errorf("volume still attached to %s", v.InstanceID)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}

		// Failures and exits move running instances to failed, with the
		// cleaned message as reason.
		bad := f.placed(f.globex, "h-a", cloud.Running)
		if err := report(agent, bad.ID, agentapi.PhaseExited, ahInt(3), "CUDA out of memory\nat line 4"); err != nil {
			t.Fatal(err)
		}
		if got := f.instance(bad.ID); got.State != cloud.Failed || got.Reason != "exit code 3: CUDA out of memory at line 4" {
			t.Errorf("after exit 3: %s %q", got.State, got.Reason)
		}
		if h := f.host("h-a"); h.Version != v {
			t.Errorf("status reports changed the host's version: %d, was %d", h.Version, v)
		}
	})
}

// TestAgentsLogs: an agent appends the output of its host's instances (and
// of the one it ran last), the instance's tenant and admins read it, and
// another tenant's member gets a missing instance's answer.
func TestAgentsLogs(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 1)
		f.putHost("h-b", 1)
		agent := service.AgentActor("h-a")
		in := f.placed(f.acme, "h-a", cloud.Running)

		before := f.state()
		ahHidden(t, f.svc.Agents.AppendLog(ctx, service.AgentActor("h-b"), in.ID, []byte("x")), "instance", in.ID)
		ahHidden(t, f.svc.Agents.AppendLog(ctx, agent, "i-missing", []byte("x")), "instance", "i-missing")
		ahCode(t, f.svc.Agents.AppendLog(ctx, f.acme, in.ID, []byte("x")), cloud.PermissionDenied)
		ahCode(t, f.svc.Agents.AppendLog(ctx, agent, in.ID, make([]byte, service.MaxLogChunk+1)), cloud.Invalid)
		f.unchanged(before, "refused log chunks")

		if err := f.svc.Agents.AppendLog(ctx, agent, in.ID, []byte("hello ")); err != nil {
			t.Fatal(err)
		}
		// After the final report the host that ran it still ships output.
		if _, err := f.svc.Instances.Act(ctx, f.acme, in.ID, service.Stop, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.Agents.Report(ctx, agent, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseStopped}); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.Agents.AppendLog(ctx, agent, in.ID, []byte("world")); err != nil {
			t.Errorf("output after the release: %v", err)
		}
		ahHidden(t, f.svc.Agents.AppendLog(ctx, service.AgentActor("h-b"), in.ID, []byte("x")), "instance", in.ID)

		for _, a := range []service.Actor{f.acme, f.admin} {
			c, err := f.svc.Agents.Logs(ctx, a, in.ID, 0)
			if err != nil || string(c.Data) != "hello world" || c.Start != 0 || c.End != 11 {
				t.Errorf("%s reads %+v, %v", a.ID, c, err)
			}
		}
		if c, err := f.svc.Agents.Logs(ctx, f.acme, in.ID, 6); err != nil || string(c.Data) != "world" || c.Start != 6 {
			t.Errorf("from offset 6: %+v, %v", c, err)
		}
		_, err := f.svc.Agents.Logs(ctx, f.globex, in.ID, 0)
		ahHidden(t, err, "instance", in.ID)
		_, err = f.svc.Agents.Logs(ctx, f.globex, "i-missing", 0)
		ahHidden(t, err, "instance", "i-missing")
		for _, off := range []int64{-1, 12} {
			_, err = f.svc.Agents.Logs(ctx, f.acme, in.ID, off)
			if ce := ahCode(t, err, cloud.Invalid); ce.Details["field"] != "offset" {
				t.Errorf("offset %d: %+v", off, ce)
			}
		}
	})
}

// TestReportRecordsVisibleDevices: the running report's device UUIDs (a
// MIG slice's own) land on the placement in device order; a report whose
// count does not match the placement is ignored; a malformed UUID is
// invalid and changes nothing.
func TestReportRecordsVisibleDevices(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 2)
		in := f.placed(f.acme, "h-a", cloud.Starting)
		in = f.amUpdate(in.ID, func(in *cloud.Instance) {
			in.Placement.Devices = []fleet.Device{{GPU: 0, UUID: "GPU-parent", Kind: fleet.MIGSlice, MIGProfile: "3g.40gb"}}
		})
		agentA := service.AgentActor("h-a")
		before := f.state()
		err := f.svc.Agents.Report(ctx, agentA, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseRunning, Devices: []string{"MIG bad\n"}})
		ahCode(t, err, cloud.Invalid)
		f.unchanged(before, "a malformed device UUID")
		if err := f.svc.Agents.Report(ctx, agentA, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseRunning, Devices: []string{"MIG-1234"}}); err != nil {
			t.Fatal(err)
		}
		got, err := f.svc.Instances.Get(ctx, f.admin, in.ID)
		if err != nil || got.State != cloud.Running || got.Placement.Devices[0].VisibleUUID != "MIG-1234" || got.Placement.Devices[0].UUID != "GPU-parent" {
			t.Fatalf("after the running report: %+v, %v", got.Placement, err)
		}
		// Already running: a later report with other UUIDs updates them;
		// one with the wrong count is ignored.
		if err := f.svc.Agents.Report(ctx, agentA, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseRunning, Devices: []string{"MIG-5678"}}); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.Agents.Report(ctx, agentA, in.ID, agentapi.StatusReport{Phase: agentapi.PhaseRunning, Devices: []string{"a", "b"}}); err != nil {
			t.Fatal(err)
		}
		got, _ = f.svc.Instances.Get(ctx, f.admin, in.ID)
		if got.Placement.Devices[0].VisibleUUID != "MIG-5678" {
			t.Errorf("visible UUID %q, want MIG-5678", got.Placement.Devices[0].VisibleUUID)
		}
	})
}

// TestAgentsReportReclaimed: the stopped report of a spot instance that
// the scheduler reclaimed at its notice's deadline says it was reclaimed;
// one that its tenant stopped during the notice says what it always did.
func TestAgentsReportReclaimed(t *testing.T) {
	for _, c := range []struct {
		name   string
		action string
		// tenantStop stops the instance by the API before the deadline.
		tenantStop bool
		want       cloud.State
		reason     string
	}{
		{"terminated by a capacity reclaim", cloud.ActionTerminate, false, cloud.Terminated, "reclaimed (capacity): stopped at the notice's deadline"},
		{"stopped by a capacity reclaim", cloud.ActionStop, false, cloud.Stopped, "reclaimed (capacity): stopped at the notice's deadline"},
		{"stopped by its tenant under notice", cloud.ActionTerminate, true, cloud.Stopped, "the agent stopped the workload"},
	} {
		t.Run(c.name, func(t *testing.T) {
			testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
				f := newAHFixture(t, st)
				ctx := context.Background()
				f.putHost("h-a", 2)
				in := f.placed(f.acme, "h-a", cloud.Running)
				now := f.clock.Now()
				f.amUpdate(in.ID, func(in *cloud.Instance) {
					in.Market = cloud.MarketSpot
					in.Interruption = &cloud.Interruption{Action: c.action, Reason: cloud.ReclaimCapacity, NoticedAt: now, Deadline: now}
				})
				if c.tenantStop {
					if _, err := f.svc.Instances.Act(ctx, f.acme, in.ID, service.Stop, 0); err != nil {
						t.Fatal(err)
					}
				} else if _, err := service.ApplySchedule(ctx, st, service.Controller("scheduler"), &service.SchedulePlan{Deadlines: []string{in.ID}}, now); err != nil {
					t.Fatal(err)
				}
				if err := f.svc.Agents.Report(ctx, service.AgentActor("h-a"), in.ID, agentapi.StatusReport{Phase: agentapi.PhaseStopped}); err != nil {
					t.Fatal(err)
				}
				if got := f.instance(in.ID); got.State != c.want || got.Reason != c.reason {
					t.Errorf("after the stopped report: %s %q, want %s %q", got.State, got.Reason, c.want, c.reason)
				}
			})
		})
	}
}
