package service_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestAgentsReportPrivateAddress: a running report's private address is
// recorded on an instance made before private networks existed (no
// subnet), canonical; a malformed one is refused before anything is
// written, and another host's agent cannot set it.
func TestAgentsReportPrivateAddress(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 1)
		f.putHost("h-b", 1)
		in := f.amUpdate(f.placed(f.acme, "h-a", cloud.Starting).ID, func(in *cloud.Instance) {
			in.NetworkID, in.SubnetID, in.SecurityGroupIDs, in.PrivateAddress = "", "", nil, ""
		})
		report := func(host, addr string) error {
			return f.svc.Agents.Report(ctx, service.AgentActor(host), in.ID,
				agentapi.StatusReport{Phase: agentapi.PhaseRunning, PrivateAddress: addr})
		}

		before := f.state()
		for _, bad := range []string{"not-an-ip", "10.0.0.256", "fe80::1%eth0", "0.0.0.0", "::", "224.0.0.1", " 10.0.0.1", "10.0.0.1/24"} {
			if ce := ahCode(t, report("h-a", bad), cloud.Invalid); ce.Details["field"] != "private_address" {
				t.Errorf("address %q: %+v", bad, ce)
			}
		}
		ahHidden(t, report("h-b", "10.240.0.9"), "instance", in.ID)
		f.unchanged(before, "refused addresses")
		if got := f.instance(in.ID); got.State != cloud.Starting || got.PrivateAddress != "" {
			t.Fatalf("after refused reports: %s %q", got.State, got.PrivateAddress)
		}

		if err := report("h-a", "10.240.0.5"); err != nil {
			t.Fatal(err)
		}
		if got := f.instance(in.ID); got.State != cloud.Running || got.PrivateAddress != "10.240.0.5" {
			t.Fatalf("after the running report: %s %q", got.State, got.PrivateAddress)
		}
		// Already running: a new address is recorded (IPv4-mapped as
		// IPv4), a report without one keeps it.
		if err := report("h-a", "::ffff:10.240.0.6"); err != nil {
			t.Fatal(err)
		}
		if got := f.instance(in.ID); got.PrivateAddress != "10.240.0.6" {
			t.Fatalf("after a second address: %q", got.PrivateAddress)
		}
		before = f.state()
		if err := report("h-a", ""); err != nil {
			t.Fatal(err)
		}
		if err := report("h-a", "10.240.0.6"); err != nil {
			t.Fatal(err)
		}
		f.unchanged(before, "reports without a new address")
		if got := f.instance(in.ID); got.PrivateAddress != "10.240.0.6" {
			t.Fatalf("after a report without an address: %q", got.PrivateAddress)
		}
	})
}

// TestAgentsReportServerAddress: the address the server gave an instance
// on a private network stays when its agent reports another; a report of
// the same address changes nothing.
func TestAgentsReportServerAddress(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 1)
		in := f.placed(f.acme, "h-a", cloud.Starting)
		given := in.PrivateAddress
		if in.SubnetID == "" || given == "" {
			t.Fatalf("created without a network: %+v", in)
		}
		for _, tc := range []struct{ name, addr string }{{"another", "10.240.0.5"}, {"the same", given}, {"none", ""}} {
			if err := f.svc.Agents.Report(ctx, service.AgentActor("h-a"), in.ID,
				agentapi.StatusReport{Phase: agentapi.PhaseRunning, PrivateAddress: tc.addr}); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got := f.instance(in.ID); got.State != cloud.Running || got.PrivateAddress != given {
				t.Fatalf("after reporting %s address: %s %q, want %q", tc.name, got.State, got.PrivateAddress, given)
			}
		}
	})
}

// countingStore counts the ListInstances calls of its transactions.
type countingStore struct {
	cloud.Store
	lists *atomic.Int64
}

func (s countingStore) Tx(ctx context.Context, fn func(cloud.Tx) error) error {
	return s.Store.Tx(ctx, func(tx cloud.Tx) error { return fn(countingTx{Tx: tx, lists: s.lists}) })
}

type countingTx struct {
	cloud.Tx
	lists *atomic.Int64
}

func (tx countingTx) ListInstances(ctx context.Context, f cloud.InstanceFilter) ([]*cloud.Instance, error) {
	tx.lists.Add(1)
	return tx.Tx.ListInstances(ctx, f)
}

// TestAgentsAssignmentsStack: a job of three instances on two hosts gets
// ranks, peers by rank and the launchers' environment; MASTER_ADDR
// appears once rank 0 reported its address; a stopped peer's kept address
// is not shown; failed members are left out; another tenant's instances
// with the very same tags are never peers, and its master's address is
// never this job's. The assignments read one listing per tenant, however
// many instances.
func TestAgentsAssignmentsStack(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 4)
		f.putHost("h-b", 2)
		member := func(a service.Actor, host string, rank, world int, job string) *cloud.Instance {
			in := f.placed(a, host, cloud.Starting)
			return f.amUpdate(in.ID, func(in *cloud.Instance) {
				// Made before private networks: the agent reports the
				// address (an instance on a network has the server's).
				in.NetworkID, in.SubnetID, in.SecurityGroupIDs, in.PrivateAddress = "", "", nil, ""
				in.Tags = map[string]string{"team": "ml", service.TagStack: "llm", service.TagStackResource: "worker",
					service.TagStackJob: job, service.TagStackRank: strconv.Itoa(rank), service.TagStackWorld: strconv.Itoa(world)}
			})
		}
		r0 := member(f.acme, "h-a", 0, 3, "worker")
		r1 := member(f.acme, "h-a", 1, 3, "worker")
		r2 := member(f.acme, "h-b", 2, 3, "worker")
		failed := member(f.acme, "h-b", 1, 3, "worker") // an earlier rank 1 that failed
		testkit.Move(t, st, failed.ID, cloud.Failed, nil, f.clock.Now())
		other := member(f.acme, "h-b", 0, 1, "eval") // the same stack, another job
		plain := f.placed(f.acme, "h-a", cloud.Starting)
		g0 := member(f.globex, "h-a", 0, 2, "worker") // globex's job with acme's tags
		g1 := member(f.globex, "h-b", 1, 2, "worker")

		// globex's rank 0 runs and reported its address first.
		run := func(host string, in *cloud.Instance, addr string) {
			t.Helper()
			if err := f.svc.Agents.Report(ctx, service.AgentActor(host), in.ID,
				agentapi.StatusReport{Phase: agentapi.PhaseRunning, PrivateAddress: addr}); err != nil {
				t.Fatal(err)
			}
		}
		run("h-a", g0, "10.9.9.9")

		var lists atomic.Int64
		svc := service.New(countingStore{Store: st, lists: &lists}, nil, service.Options{Now: f.clock.Now})
		assignments := func(host string) map[string]agentapi.Assignment {
			t.Helper()
			lists.Store(0)
			as, err := svc.Agents.Assignments(ctx, service.AgentActor(host))
			if err != nil {
				t.Fatal(err)
			}
			// The host's instances, then one listing per tenant with jobs.
			if n := lists.Load(); n != 3 {
				t.Errorf("assignments of %s listed instances %d times, want 3", host, n)
			}
			out := map[string]agentapi.Assignment{}
			for _, a := range as {
				out[a.InstanceID] = a
			}
			return out
		}
		type peer = agentapi.Peer
		check := func(a agentapi.Assignment, rank, world int, master string, peers ...peer) {
			t.Helper()
			s := a.Stack
			if s == nil {
				t.Fatalf("%s: no stack", a.InstanceID)
			}
			if s.Name != "llm" || s.Resource != "worker" || s.Rank != rank || s.WorldSize != world {
				t.Errorf("%s: stack %s/%s rank %d of %d, want llm/worker rank %d of %d", a.InstanceID, s.Name, s.Resource, s.Rank, s.WorldSize, rank, world)
			}
			if len(s.Peers) != len(peers) {
				t.Fatalf("%s: peers %+v, want %+v", a.InstanceID, s.Peers, peers)
			}
			for i := range peers {
				if s.Peers[i] != peers[i] {
					t.Errorf("%s: peer %d is %+v, want %+v", a.InstanceID, i, s.Peers[i], peers[i])
				}
			}
			want := map[string]string{"MASTER_PORT": "29500", "WORLD_SIZE": strconv.Itoa(world), "NNODES": strconv.Itoa(world),
				"RANK": strconv.Itoa(rank), "NODE_RANK": strconv.Itoa(rank)}
			if master != "" {
				want["MASTER_ADDR"] = master
			}
			if len(s.Env) != len(want) {
				t.Errorf("%s: env %v, want %v", a.InstanceID, s.Env, want)
			}
			for k, v := range want {
				if s.Env[k] != v {
					t.Errorf("%s: env %s=%q, want %q", a.InstanceID, k, s.Env[k], v)
				}
			}
		}

		ha, hb := assignments("h-a"), assignments("h-b")
		job := []peer{{Rank: 0, InstanceID: r0.ID}, {Rank: 1, InstanceID: r1.ID}, {Rank: 2, InstanceID: r2.ID}}
		check(ha[r0.ID], 0, 3, "", job...)
		check(ha[r1.ID], 1, 3, "", job...)
		check(hb[r2.ID], 2, 3, "", job...)
		check(hb[other.ID], 0, 1, "", peer{Rank: 0, InstanceID: other.ID})
		check(ha[g0.ID], 0, 2, "10.9.9.9", peer{Rank: 0, InstanceID: g0.ID, Address: "10.9.9.9"}, peer{Rank: 1, InstanceID: g1.ID})
		check(hb[g1.ID], 1, 2, "10.9.9.9", peer{Rank: 0, InstanceID: g0.ID, Address: "10.9.9.9"}, peer{Rank: 1, InstanceID: g1.ID})
		if a, ok := ha[plain.ID]; !ok || a.Stack != nil {
			t.Errorf("an instance in no stack: %+v", a)
		}
		if _, ok := hb[failed.ID]; ok {
			t.Errorf("the failed member is assigned")
		}

		// Rank 0 and 2 run and report their addresses: MASTER_ADDR is rank
		// 0's on both hosts.
		run("h-a", r0, "10.240.0.2")
		run("h-b", r2, "10.240.1.3")
		ha, hb = assignments("h-a"), assignments("h-b")
		job[0].Address, job[2].Address = "10.240.0.2", "10.240.1.3"
		check(ha[r0.ID], 0, 3, "10.240.0.2", job...)
		check(ha[r1.ID], 1, 3, "10.240.0.2", job...)
		check(hb[r2.ID], 2, 3, "10.240.0.2", job...)
		check(ha[g0.ID], 0, 2, "10.9.9.9", peer{Rank: 0, InstanceID: g0.ID, Address: "10.9.9.9"}, peer{Rank: 1, InstanceID: g1.ID})

		// Rank 2 stops: it stays a member, its kept address is not shown.
		if _, err := f.svc.Instances.Act(ctx, f.acme, r2.ID, service.Stop, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.Agents.Report(ctx, service.AgentActor("h-b"), r2.ID, agentapi.StatusReport{Phase: agentapi.PhaseStopped}); err != nil {
			t.Fatal(err)
		}
		if got := f.instance(r2.ID); got.State != cloud.Stopped || got.PrivateAddress != "10.240.1.3" {
			t.Fatalf("stopped rank 2: %s %q", got.State, got.PrivateAddress)
		}
		ha = assignments("h-a")
		job[2].Address = ""
		check(ha[r1.ID], 1, 3, "10.240.0.2", job...)
	})
}

// TestAgentsReportImageTime: a running report's image time lands on the
// running event's details (image_ms), where an endpoint's cold start
// reads it; an impossible one is refused, naming the field, and changes
// nothing.
func TestAgentsReportImageTime(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 1)
		in := f.placed(f.acme, "h-a", cloud.Starting)
		report := func(ms int64) error {
			return f.svc.Agents.Report(ctx, service.AgentActor("h-a"), in.ID, agentapi.StatusReport{Phase: agentapi.PhaseRunning, ImageMillis: ms})
		}
		before := f.state()
		for _, bad := range []int64{-1, 24*3600*1000 + 1} {
			if ce := ahCode(t, report(bad), cloud.Invalid); ce.Details["field"] != "image_ms" {
				t.Errorf("image_ms %d: %+v", bad, ce)
			}
			err := f.svc.Agents.Report(ctx, service.AgentActor("h-a"), in.ID, agentapi.StatusReport{Phase: agentapi.PhaseRunning, StartMillis: bad})
			if ce := ahCode(t, err, cloud.Invalid); ce.Details["field"] != "start_ms" {
				t.Errorf("start_ms %d: %+v", bad, ce)
			}
		}
		f.unchanged(before, "refused image times")
		if err := report(7); err != nil {
			t.Fatal(err)
		}
		var evs []*cloud.Event
		if err := st.Tx(ctx, func(tx cloud.Tx) (err error) {
			evs, err = tx.ListEvents(ctx, cloud.EventFilter{InstanceID: in.ID, Kinds: []cloud.EventKind{cloud.EventInstanceState}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ev := range evs {
			if ev.To == cloud.Running {
				found = true
				if string(ev.Details) != `{"image_ms":7}` {
					t.Errorf("the running event's details: %s", ev.Details)
				}
			}
		}
		if !found {
			t.Fatalf("no running event in %+v", evs)
		}
	})
}
