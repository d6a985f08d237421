package service_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

func amPtr(v float64) *float64 { return &v }

// amUpdate changes a stored instance as another writer (the group
// controller, the API) would.
func (f *ahFixture) amUpdate(id string, change func(*cloud.Instance)) *cloud.Instance {
	f.t.Helper()
	var in *cloud.Instance
	err := f.st.Tx(context.Background(), func(tx cloud.Tx) error {
		var err error
		if in, err = tx.GetInstance(context.Background(), id); err != nil {
			return err
		}
		change(in)
		return tx.UpdateInstance(context.Background(), in)
	})
	if err != nil {
		f.t.Fatalf("update instance %s: %v", id, err)
	}
	return in
}

// amMetrics lists the metric points of a tenant.
func (f *ahFixture) amMetrics(tenant string) []cloud.MetricPoint {
	f.t.Helper()
	var ps []cloud.MetricPoint
	err := f.st.Tx(context.Background(), func(tx cloud.Tx) (err error) {
		ps, err = tx.ListMetrics(context.Background(), cloud.MetricFilter{TenantID: tenant})
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return ps
}

func TestAgentsReportMetrics(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 2)
		f.putHost("h-b", 2)
		inA := f.placed(f.acme, "h-a", cloud.Running)
		inA = f.amUpdate(inA.ID, func(in *cloud.Instance) { in.GroupID = "g-1" })
		inA2 := f.placed(f.globex, "h-a", cloud.Starting)
		inB := f.placed(f.acme, "h-b", cloud.Running)
		agentA := service.AgentActor("h-a")
		now := f.clock.Now()
		good := agentapi.InstanceSample{InstanceID: inA.ID, At: now.Add(-time.Second), GPUUtilization: amPtr(0.5), CPUUtilization: amPtr(0.25),
			GPUMemoryUsedBytes: new(uint64(40 << 30))}

		// Refused reports write nothing.
		for _, c := range []struct {
			desc  string
			actor service.Actor
			rep   agentapi.MetricsReport
			code  cloud.Code
			field string
		}{
			{"a member", f.acme, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{good}}, cloud.PermissionDenied, ""},
			{"another host's instance", agentA, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{good,
				{InstanceID: inB.ID, At: now, GPUUtilization: amPtr(0.1)}}}, cloud.NotFound, "samples[1].instance_id"},
			{"an unknown instance", agentA, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{
				{InstanceID: "i-nope", At: now, GPUUtilization: amPtr(0.1)}, good}}, cloud.NotFound, "samples[0].instance_id"},
			{"above 1", agentA, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{good,
				{InstanceID: inA.ID, At: now, CPUUtilization: amPtr(1.01)}}}, cloud.Invalid, "samples[1].cpu_utilization"},
			{"negative", agentA, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{
				{InstanceID: inA.ID, At: now, GPUUtilization: amPtr(-0.1)}}}, cloud.Invalid, "samples[0].gpu_utilization"},
			{"NaN", agentA, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{
				{InstanceID: inA.ID, At: now, GPUUtilization: amPtr(math.NaN())}}}, cloud.Invalid, "samples[0].gpu_utilization"},
			{"infinite", agentA, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{
				{InstanceID: inA.ID, At: now, GPUUtilization: amPtr(math.Inf(1))}}}, cloud.Invalid, "samples[0].gpu_utilization"},
			{"no value", agentA, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{
				{InstanceID: inA.ID, At: now}}}, cloud.Invalid, "samples[0]"},
			{"no time", agentA, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{
				{InstanceID: inA.ID, GPUUtilization: amPtr(0.1)}}}, cloud.Invalid, "samples[0].at"},
			{"no instance", agentA, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{
				{At: now, GPUUtilization: amPtr(0.1)}}}, cloud.Invalid, "samples[0].instance_id"},
			{"GPU memory beyond any host", agentA, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{
				{InstanceID: inA.ID, At: now, GPUMemoryUsedBytes: new(uint64(service.MaxGPUMemoryBytes + 1))}}}, cloud.Invalid, "samples[0].gpu_memory_used_bytes"},
			{"too many", agentA, agentapi.MetricsReport{Samples: make([]agentapi.InstanceSample, agentapi.MaxMetricSamples+1)}, cloud.Invalid, "samples"},
		} {
			err := f.svc.Agents.ReportMetrics(ctx, c.actor, c.rep)
			ce := ahCode(t, err, c.code)
			if c.field != "" && ce.Details["field"] != c.field {
				t.Errorf("%s: details %v, want field %s", c.desc, ce.Details, c.field)
			}
			if c.code == cloud.NotFound {
				if id, _ := ce.Details["id"].(string); id == "" || id == inA.ID {
					t.Errorf("%s: details %v do not name the refused instance", c.desc, ce.Details)
				}
			}
		}
		if ps := append(f.amMetrics(f.acme.TenantID), f.amMetrics(f.globex.TenantID)...); len(ps) != 0 {
			t.Fatalf("refused reports wrote %+v", ps)
		}
		if err := f.svc.Agents.ReportMetrics(ctx, agentA, agentapi.MetricsReport{}); err != nil {
			t.Fatalf("empty report: %v", err)
		}

		// A good report: points with the instance's tenant and group; a
		// time far ahead is the server's now, a little ahead is kept.
		ahead := agentapi.InstanceSample{InstanceID: inA.ID, At: now.Add(10 * time.Minute), CPUUtilization: amPtr(1)}
		slightly := agentapi.InstanceSample{InstanceID: inA2.ID, At: now.Add(30 * time.Second), GPUUtilization: amPtr(0)}
		if err := f.svc.Agents.ReportMetrics(ctx, agentA, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{good, ahead, slightly}}); err != nil {
			t.Fatal(err)
		}
		want := []cloud.MetricPoint{
			{TenantID: f.acme.TenantID, Name: cloud.MetricGPUUtilization, InstanceID: inA.ID, GroupID: "g-1", At: now.Add(-time.Second), Value: 0.5},
			{TenantID: f.acme.TenantID, Name: cloud.MetricCPUUtilization, InstanceID: inA.ID, GroupID: "g-1", At: now.Add(-time.Second), Value: 0.25},
			{TenantID: f.acme.TenantID, Name: cloud.MetricGPUMemoryUsed, InstanceID: inA.ID, GroupID: "g-1", At: now.Add(-time.Second), Value: 40 << 30},
			{TenantID: f.acme.TenantID, Name: cloud.MetricCPUUtilization, InstanceID: inA.ID, GroupID: "g-1", At: now, Value: 1},
		}
		got := f.amMetrics(f.acme.TenantID)
		if len(got) != len(want) {
			t.Fatalf("acme's points %+v, want %+v", got, want)
		}
		for i := range want {
			g := got[i]
			g.At = g.At.UTC()
			if g != want[i] {
				t.Errorf("point %d: %+v, want %+v", i, g, want[i])
			}
		}
		if got := f.amMetrics(f.globex.TenantID); len(got) != 1 || got[0].InstanceID != inA2.ID || got[0].GroupID != "" ||
			got[0].Name != cloud.MetricGPUUtilization || !got[0].At.Equal(now.Add(30*time.Second)) || got[0].Value != 0 {
			t.Fatalf("globex's points %+v", got)
		}

		// An agent whose clock is 10 minutes slow says when it sent the
		// report: its sample of 3 s before sending lands 3 s before the
		// server's now, not 10 minutes in the past (where the group
		// controller would take it for stale).
		slow := now.Add(-10 * time.Minute)
		late := agentapi.InstanceSample{InstanceID: inA.ID, At: slow.Add(-3 * time.Second), GPUUtilization: amPtr(0.75)}
		if err := f.svc.Agents.ReportMetrics(ctx, agentA, agentapi.MetricsReport{Samples: []agentapi.InstanceSample{late}, SentAt: slow}); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range f.amMetrics(f.acme.TenantID) {
			if p.Value == 0.75 {
				found = true
				if !p.At.Equal(now.Add(-3 * time.Second)) {
					t.Fatalf("a slow agent's sample: %+v, want it at %v", p, now.Add(-3*time.Second))
				}
			}
		}
		if !found {
			t.Fatal("the slow agent's sample was not written")
		}
	})
}

func TestAgentsScaleInLock(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 2)
		f.putHost("h-b", 2)
		in := f.placed(f.acme, "h-a", cloud.Running)
		in = f.amUpdate(in.ID, func(in *cloud.Instance) { in.ScaleIn = &cloud.ScaleIn{Protected: true} })
		stopped := f.placed(f.acme, "h-a", cloud.Stopping)
		stopped = testkit.Move(t, st, stopped.ID, cloud.Stopped, nil, f.clock.Now())
		agentA, agentB := service.AgentActor("h-a"), service.AgentActor("h-b")
		lockEvents := func() []*cloud.Event {
			var out []*cloud.Event
			for _, e := range ahEvents(t, st, cloud.EventFilter{InstanceID: in.ID}) {
				if e.Kind == cloud.EventInstanceScaleIn {
					out = append(out, e)
				}
			}
			return out
		}

		before := f.state()
		for _, c := range []struct {
			desc  string
			actor service.Actor
			id    string
			req   agentapi.LockRequest
			code  cloud.Code
		}{
			{"a member", f.acme, in.ID, agentapi.LockRequest{Locked: true}, cloud.PermissionDenied},
			{"another host's agent", agentB, in.ID, agentapi.LockRequest{Locked: true}, cloud.NotFound},
			{"an unknown instance", agentA, "i-nope", agentapi.LockRequest{Locked: true}, cloud.NotFound},
			{"a stopped instance", agentA, stopped.ID, agentapi.LockRequest{Locked: true}, cloud.NotFound},
			{"a control character", agentA, in.ID, agentapi.LockRequest{Locked: true, Reason: "a\tb"}, cloud.Invalid},
			{"a long reason", agentA, in.ID, agentapi.LockRequest{Locked: true, Reason: strings.Repeat("x", 201)}, cloud.Invalid},
			{"invalid UTF-8", agentA, in.ID, agentapi.LockRequest{Locked: true, Reason: "\xff"}, cloud.Invalid},
		} {
			_, err := f.svc.Agents.SetScaleInLock(ctx, c.actor, c.id, c.req)
			if cloud.ErrorCode(err) != c.code {
				t.Errorf("%s: %v, want %s", c.desc, err, c.code)
			}
		}
		f.unchanged(before, "refused locks")

		f.clock.Advance(time.Minute)
		lockedAt := f.clock.Now()
		si, err := f.svc.Agents.SetScaleInLock(ctx, agentA, in.ID, agentapi.LockRequest{Locked: true, Reason: "saving step 1200"})
		if err != nil || !si.Protected || si.Lock == nil || si.Lock.Reason != "saving step 1200" || !si.Lock.At.Equal(lockedAt) {
			t.Fatalf("lock = %+v, %v", si, err)
		}
		stored := f.instance(in.ID)
		if !stored.ScaleIn.Held() || !stored.ScaleIn.Protected || stored.ScaleIn.Lock == nil || stored.ScaleIn.Lock.Reason != "saving step 1200" ||
			stored.Version != in.Version+1 {
			t.Fatalf("stored %+v (version %d, was %d)", stored.ScaleIn, stored.Version, in.Version)
		}
		evs := lockEvents()
		if len(evs) != 1 || evs[0].Actor != "agent:h-a" || evs[0].HostID != "h-a" || evs[0].TenantID != f.acme.TenantID ||
			!strings.Contains(evs[0].Reason, "saving step 1200") {
			t.Fatalf("events %+v", evs)
		}

		// The same lock again changes nothing, not even its time.
		f.clock.Advance(time.Minute)
		si, err = f.svc.Agents.SetScaleInLock(ctx, agentA, in.ID, agentapi.LockRequest{Locked: true, Reason: "saving step 1200"})
		if err != nil || si.Lock == nil || !si.Lock.At.Equal(lockedAt) || len(lockEvents()) != 1 || f.instance(in.ID).Version != stored.Version {
			t.Fatalf("repeated lock = %+v, %v; %d events", si, err, len(lockEvents()))
		}

		// Release: the tenant's protection stays.
		si, err = f.svc.Agents.SetScaleInLock(ctx, agentA, in.ID, agentapi.LockRequest{Reason: "ignored"})
		if err != nil || !si.Protected || si.Lock != nil {
			t.Fatalf("release = %+v, %v", si, err)
		}
		if stored := f.instance(in.ID); stored.ScaleIn == nil || !stored.ScaleIn.Protected || stored.ScaleIn.Lock != nil {
			t.Fatalf("stored after release %+v", stored.ScaleIn)
		}
		if evs := lockEvents(); len(evs) != 2 || !strings.Contains(evs[1].Reason, "released") {
			t.Fatalf("events %+v", evs)
		}
		// Releasing what is not held changes nothing.
		if _, err := f.svc.Agents.SetScaleInLock(ctx, agentA, in.ID, agentapi.LockRequest{}); err != nil || len(lockEvents()) != 2 {
			t.Fatalf("second release: %v, %d events", err, len(lockEvents()))
		}

		// Without protection, a released instance holds nothing: {}.
		f.amUpdate(in.ID, func(in *cloud.Instance) { in.ScaleIn = nil })
		if _, err := f.svc.Agents.SetScaleInLock(ctx, agentA, in.ID, agentapi.LockRequest{Locked: true}); err != nil {
			t.Fatal(err)
		}
		si, err = f.svc.Agents.SetScaleInLock(ctx, agentA, in.ID, agentapi.LockRequest{})
		if err != nil || si == nil || si.Held() || si.Protected || si.Lock != nil {
			t.Fatalf("release without protection = %+v, %v", si, err)
		}
		if stored := f.instance(in.ID); stored.ScaleIn.Held() {
			t.Fatalf("stored %+v", stored.ScaleIn)
		}
	})
}

// staleStore makes the first n instance writes lose a race, as when
// another writer changed the instance between the read and the write.
type staleStore struct {
	cloud.Store
	n int
}

type staleTx struct {
	cloud.Tx
	s *staleStore
}

func (s *staleStore) Tx(ctx context.Context, fn func(cloud.Tx) error) error {
	return s.Store.Tx(ctx, func(tx cloud.Tx) error { return fn(&staleTx{Tx: tx, s: s}) })
}

func (t *staleTx) UpdateInstance(ctx context.Context, in *cloud.Instance) error {
	if t.s.n > 0 {
		t.s.n--
		return cloud.Errorf(cloud.Conflict, "instance %s changed", in.ID)
	}
	return t.Tx.UpdateInstance(ctx, in)
}

// TestAgentsScaleInLockRetry: a lock write that loses a race is retried
// once, with the instance read again.
func TestAgentsScaleInLockRetry(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		f.putHost("h-a", 1)
		in := f.placed(f.acme, "h-a", cloud.Running)
		stale := &staleStore{Store: st, n: 1}
		svc := service.New(stale, nil, service.Options{Now: f.clock.Now})
		si, err := svc.Agents.SetScaleInLock(context.Background(), service.AgentActor("h-a"), in.ID, agentapi.LockRequest{Locked: true})
		if err != nil || si.Lock == nil || stale.n != 0 {
			t.Fatalf("after one lost race: %+v, %v", si, err)
		}
		stale.n = 2
		_, err = svc.Agents.SetScaleInLock(context.Background(), service.AgentActor("h-a"), in.ID, agentapi.LockRequest{})
		if cloud.ErrorCode(err) != cloud.Conflict || stale.n != 0 {
			t.Fatalf("after two lost races: %v (%d left)", err, stale.n)
		}
		if got := f.instance(in.ID); got.ScaleIn == nil || got.ScaleIn.Lock == nil {
			t.Fatalf("the refused release changed %+v", got.ScaleIn)
		}
	})
}
