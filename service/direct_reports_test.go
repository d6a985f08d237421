package service_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/internal/pki"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestDirectReports: an agent's reports of what direct grants served are
// recorded once each, as session.direct events of the grant's instance
// (a detached volume's: the tenant's), only for grants the CA signed for
// the reporting host, and only with figures that can be; the instance's
// events stay its tenant's to read.
func TestDirectReports(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		ca, err := pki.NewCA("test cloud", time.Now().Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		opts := service.Options{DirectAccess: true,
			SignDirectGrant:   func(p []byte) (string, error) { return ca.SignToken(agentapi.DirectGrantPurpose, p) },
			VerifyDirectGrant: func(tok string) ([]byte, error) { return pki.VerifyToken(ca.Cert, agentapi.DirectGrantPurpose, tok) }}
		f := newVAFixture(t, st, opts)
		ctx := context.Background()
		now := f.clock.Now()
		spec := fleet.MockHost("h-direct", "L4", 1)
		spec.Zone, spec.DirectAddr, spec.DirectFingerprint = "z1", "10.0.0.1:7443", "sha256:"+strings.Repeat("0f", 32)
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			return tx.PutHost(ctx, &cloud.Host{ID: "h-direct", State: fleet.Schedulable, Spec: *spec, LastHeartbeat: now})
		}); err != nil {
			t.Fatal(err)
		}
		in, _, err := f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "l4.1x"}, "")
		if err != nil {
			t.Fatal(err)
		}
		in = testkit.Walk(t, st, in.ID, cloud.Running, testkit.Via{Host: "h-direct", Zone: "z1"}, now)
		vol, _, err := f.svc.Volumes.Create(ctx, f.acme, api.CreateVolumeRequest{Name: "data", SizeGiB: 1, Zone: "z1"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.RecordVolumeHosts(ctx, []string{vol.ID}, "h-direct", now) }); err != nil {
			t.Fatal(err)
		}
		ig, err := f.svc.Files.Grant(ctx, f.acme, "instances", in.ID, testGrantKey)
		if err != nil {
			t.Fatal(err)
		}
		fg, err := f.svc.Sessions.ForwardGrant(ctx, f.acme, in.ID, 8888, testGrantKey)
		if err != nil {
			t.Fatal(err)
		}
		vg, err := f.svc.Files.Grant(ctx, f.acme, "volumes", vol.ID, testGrantKey)
		if err != nil {
			t.Fatal(err)
		}
		agent := service.Actor{ID: "agent-h-direct", Role: cloud.RoleAgent, HostID: "h-direct"}
		first := time.Now().Add(-time.Second)
		report := func(tok string, f func(*agentapi.DirectReport)) agentapi.DirectReport {
			r := agentapi.DirectReport{Grant: tok, Connections: 2, BytesIn: 3 << 20, BytesOut: 1 << 10, First: first, Last: first.Add(1500 * time.Millisecond)}
			if f != nil {
				f(&r)
			}
			return r
		}
		send := func(t *testing.T, svc *service.Services, a service.Actor, reps ...agentapi.DirectReport) []agentapi.DirectReportResult {
			t.Helper()
			out, err := svc.Sessions.DirectReports(ctx, a, agentapi.DirectReportsRequest{Reports: reps})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Results) != len(reps) {
				t.Fatalf("%d results for %d reports", len(out.Results), len(reps))
			}
			return out.Results
		}
		directEvents := func(t *testing.T) []*cloud.Event {
			t.Helper()
			var evs []*cloud.Event
			if err := st.Tx(ctx, func(tx cloud.Tx) (err error) {
				evs, err = tx.ListEvents(ctx, cloud.EventFilter{TenantID: f.acme.TenantID, Kinds: []cloud.EventKind{cloud.EventSessionDirect}})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return evs
		}

		t.Run("refused, and nothing recorded", func(t *testing.T) {
			tampered := []byte(ig.Grant)
			tampered[len(tampered)/3] ^= 1
			for _, tt := range []struct {
				desc  string
				svc   *service.Services
				actor service.Actor
				rep   agentapi.DirectReport
				want  string
			}{
				{"another host's agent", f.svc, service.Actor{ID: "agent-h-2", Role: cloud.RoleAgent, HostID: "h-2"}, report(ig.Grant, nil), "is for host h-direct"},
				{"a changed grant", f.svc, agent, report(string(tampered), nil), "the report's grant"},
				{"no connection", f.svc, agent, report(ig.Grant, func(r *agentapi.DirectReport) { r.Connections = 0 }), "at least one connection"},
				{"negative bytes", f.svc, agent, report(ig.Grant, func(r *agentapi.DirectReport) { r.BytesOut = -1 }), "not negative"},
				{"ending before it starts", f.svc, agent, report(ig.Grant, func(r *agentapi.DirectReport) { r.Last = r.First.Add(-time.Second) }), "ends before"},
				{"long after the grant", f.svc, agent, report(ig.Grant, func(r *agentapi.DirectReport) { r.First, r.Last = first.Add(time.Hour), first.Add(time.Hour) }), "outside the grant's life"},
				{"a server that signs none", service.New(st, nil, service.Options{Now: f.clock.Now}), agent, report(ig.Grant, nil), "takes no reports"},
			} {
				before := f.counts()
				res := send(t, tt.svc, tt.actor, tt.rep)
				if res[0].Status != agentapi.ReportRefused || !strings.Contains(res[0].Error, tt.want) {
					t.Errorf("%s: %+v, want refused with %q", tt.desc, res[0], tt.want)
				}
				f.unchanged(before, tt.desc)
			}
			before := f.counts()
			if _, err := f.svc.Sessions.DirectReports(ctx, f.acme, agentapi.DirectReportsRequest{Reports: []agentapi.DirectReport{report(ig.Grant, nil)}}); cloud.ErrorCode(err) != cloud.PermissionDenied {
				t.Errorf("a tenant's report: %v", err)
			}
			many := make([]agentapi.DirectReport, agentapi.MaxDirectReports+1)
			if _, err := f.svc.Sessions.DirectReports(ctx, agent, agentapi.DirectReportsRequest{Reports: many}); cloud.ErrorCode(err) != cloud.Invalid {
				t.Errorf("%d reports: %v", len(many), err)
			}
			f.unchanged(before, "refused requests")
		})

		t.Run("recorded once", func(t *testing.T) {
			res := send(t, f.svc, agent, report(ig.Grant, nil), report(fg.Grant, func(r *agentapi.DirectReport) { r.Cut = true }),
				report(vg.Grant, nil), report(ig.Grant, nil))
			want := []string{agentapi.ReportRecorded, agentapi.ReportRecorded, agentapi.ReportRecorded, agentapi.ReportDuplicate}
			for i, r := range res {
				if r.Status != want[i] {
					t.Errorf("report %d: %+v, want %s", i, r, want[i])
				}
			}
			if res := send(t, f.svc, agent, report(vg.Grant, nil)); res[0].Status != agentapi.ReportDuplicate {
				t.Errorf("sent again: %+v", res[0])
			}
			evs := directEvents(t)
			if len(evs) != 3 {
				t.Fatalf("%d session.direct events, want 3: %+v", len(evs), evs)
			}
			bySession := map[string]*cloud.Event{}
			for _, e := range evs {
				var d map[string]any
				json.Unmarshal(e.Details, &d)
				bySession[d["session_id"].(string)] = e
				if e.Actor != f.acme.ID || e.HostID != "h-direct" || d["bytes_in"].(float64) != 3<<20 || d["duration_ms"].(float64) != 1500 {
					t.Errorf("event %+v", e)
				}
			}
			if e := bySession[ig.SessionID]; e == nil || e.InstanceID != in.ID || !strings.Contains(e.Reason, "files: instances cp --direct: direct on host h-direct: 2 connections, 3.0 MiB in, 1.0 KiB out, over 1.5s") {
				t.Errorf("the instance copy's event: %+v", e)
			}
			if e := bySession[fg.SessionID]; e == nil || e.InstanceID != in.ID || !strings.HasSuffix(e.Reason, "cut when the agent stopped") || !strings.Contains(string(e.Details), `"port":8888`) {
				t.Errorf("the forward's event: %+v", e)
			}
			if e := bySession[vg.SessionID]; e == nil || e.InstanceID != "" || !strings.Contains(string(e.Details), `"volume_id":"`+vol.ID+`"`) {
				t.Errorf("the detached volume's event: %+v", e)
			}
		})

		t.Run("a second run of a grant", func(t *testing.T) {
			// The agent restarted while the grant was valid and served
			// the client's new connections: a report of its own, whose
			// first connection is later, is recorded; sent again, it is
			// a duplicate.
			again := report(vg.Grant, func(r *agentapi.DirectReport) {
				r.First, r.Last, r.BytesIn = first.Add(30*time.Second), first.Add(40*time.Second), 5<<20
			})
			if res := send(t, f.svc, agent, again); res[0].Status != agentapi.ReportRecorded {
				t.Errorf("the second run's report: %+v", res[0])
			}
			if res := send(t, f.svc, agent, again, report(vg.Grant, nil)); res[0].Status != agentapi.ReportDuplicate || res[1].Status != agentapi.ReportDuplicate {
				t.Errorf("both runs' reports sent again: %+v", res)
			}
			var runs []float64
			for _, e := range directEvents(t) {
				var d map[string]any
				json.Unmarshal(e.Details, &d)
				if d["session_id"] == vg.SessionID {
					runs = append(runs, d["bytes_in"].(float64))
				}
			}
			if !slices.Equal(runs, []float64{3 << 20, 5 << 20}) {
				t.Errorf("the detached volume's grant has runs of %v bytes in, want 3 MiB and 5 MiB", runs)
			}
		})

		t.Run("another tenant", func(t *testing.T) {
			if _, _, err := f.svc.Instances.Events(ctx, f.globex, in.ID, 0, 100); cloud.ErrorCode(err) != cloud.NotFound {
				t.Errorf("globex reading the instance's events: %v", err)
			}
			evs, _, err := f.svc.Instances.Events(ctx, f.acme, in.ID, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range evs {
				if e.Kind == cloud.EventSessionDirect {
					n++
				}
			}
			if n != 2 {
				t.Errorf("acme reads %d session.direct events of the instance, want 2", n)
			}
		})
	})
}
