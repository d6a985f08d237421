package service_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestVolumeRoute: a volume's copy goes to the host of the running
// instance it is attached to, else to the host an instance with it was
// last placed on while that host is up, else (that host shared its
// volumes, or none was ever recorded) to an up host of its zone that
// shares them; another tenant's and a deleted volume are not_found, and a
// volume no host can serve is a conflict that says why.
func TestVolumeRoute(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		now := f.clock.Now()
		putHost := func(id, zone string, shared bool, state fleet.HostState, beat time.Time) {
			spec := fleet.MockHost(id, "L4", 1)
			spec.Zone = zone
			if shared {
				spec.Labels = map[string]string{agentapi.LabelVolumeDirShared: "true"}
			}
			h := &cloud.Host{ID: id, State: state, Spec: *spec, LastHeartbeat: beat}
			if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.PutHost(ctx, h) }); err != nil {
				t.Fatal(err)
			}
		}
		putHost("h-local", "z1", false, fleet.Schedulable, now)
		putHost("h-silent", "z1", false, fleet.Schedulable, now.Add(-time.Hour))
		putHost("h-shared-down", "z1", true, fleet.Unhealthy, now)
		putHost("h-shared", "z1", true, fleet.Schedulable, now)
		volume := func(a service.Actor, zone string) *cloud.Volume {
			v, _, err := f.svc.Volumes.Create(ctx, a, api.CreateVolumeRequest{Name: "data", SizeGiB: 1, Zone: zone}, "")
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		// withInstance places an instance with v on host and walks it to state.
		withInstance := func(v *cloud.Volume, host string, state cloud.State) *cloud.Instance {
			in, _, err := f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "l4.1x", Volumes: []string{v.ID}}, "")
			if err != nil {
				t.Fatal(err)
			}
			// Through running: the way from pending to stopped skips the
			// scheduler.
			testkit.Walk(t, st, in.ID, cloud.Running, testkit.Via{Host: host, Zone: "z1"}, now)
			return testkit.Walk(t, st, in.ID, state, testkit.Via{}, now)
		}
		running := volume(f.acme, "z1")
		runIn := withInstance(running, "h-local", cloud.Running)
		stoppedVol := volume(f.acme, "z1")
		withInstance(stoppedVol, "h-local", cloud.Stopped)
		silentVol := volume(f.acme, "z1")
		withInstance(silentVol, "h-silent", cloud.Stopped)
		sharedDownVol := volume(f.acme, "z1")
		withInstance(sharedDownVol, "h-shared-down", cloud.Stopped)
		never := volume(f.acme, "z1")
		neverOtherZone := volume(f.acme, "z2")
		deleted := volume(f.acme, "z1")
		if _, err := f.svc.Volumes.Delete(ctx, f.acme, deleted.ID); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name     string
			actor    service.Actor
			id       string
			host     string
			instance string
			code     cloud.Code
			says     string
		}{
			{"attached to a running instance", f.acme, running.ID, "h-local", runIn.ID, "", ""},
			{"an admin", f.admin, running.ID, "h-local", runIn.ID, "", ""},
			{"its instance stopped: the host it was on", f.acme, stoppedVol.ID, "h-local", "", "", ""},
			{"its host silent", f.acme, silentVol.ID, "", "", cloud.Conflict, "h-silent"},
			{"its shared host down: another shared host", f.acme, sharedDownVol.ID, "h-shared", "", "", ""},
			{"never attached: a shared host of its zone", f.acme, never.ID, "h-shared", "", "", ""},
			{"never attached, no shared host in its zone", f.acme, neverOtherZone.ID, "", "", cloud.Conflict, "never been attached"},
			{"another tenant's", f.globex, running.ID, "", "", cloud.NotFound, ""},
			{"deleted", f.acme, deleted.ID, "", "", cloud.NotFound, ""},
			{"missing", f.acme, "vol-missing", "", "", cloud.NotFound, ""},
		} {
			got, err := f.svc.Files.VolumeRoute(ctx, c.actor, c.id)
			if cloud.ErrorCode(err) != c.code && !(c.code == "" && err == nil) {
				t.Errorf("%s: %v, want %q", c.name, err, c.code)
				continue
			}
			if err != nil {
				if !strings.Contains(err.Error(), c.says) {
					t.Errorf("%s: %q does not say %q", c.name, err, c.says)
				}
				continue
			}
			if got.HostID != c.host || got.InstanceID != c.instance || got.Volume.ID != c.id {
				t.Errorf("%s: routed to host %s instance %q, want %s %q", c.name, got.HostID, got.InstanceID, c.host, c.instance)
			}
		}
	})
}

// TestVolumeSessionAudit: a detached volume's files session is recorded
// on its tenant as a started and an ended event naming the session, the
// volume, the host and (ended) how long it took; an admin's is marked.
func TestVolumeSessionAudit(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		v, _, err := f.svc.Volumes.Create(ctx, f.acme, api.CreateVolumeRequest{Name: "data", SizeGiB: 1}, "")
		if err != nil {
			t.Fatal(err)
		}
		route := &service.VolumeRoute{Volume: v, HostID: "h-1"}
		for _, c := range []struct {
			actor service.Actor
			admin bool
		}{{f.acme, false}, {f.admin, true}} {
			id := service.NewID(service.SessionPrefix)
			if err := f.svc.Files.AuditVolumeSession(ctx, c.actor, route, id, false, "volumes cp", 0); err != nil {
				t.Fatal(err)
			}
			if err := f.svc.Files.AuditVolumeSession(ctx, c.actor, route, id, true, "closed", 1500*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			var evs []*cloud.Event
			if err := st.Tx(ctx, func(tx cloud.Tx) (err error) {
				evs, err = tx.ListEvents(ctx, cloud.EventFilter{TenantID: v.TenantID,
					Kinds: []cloud.EventKind{service.EventVolumeFilesStarted, service.EventVolumeFilesEnded}})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			var mine []*cloud.Event
			for _, e := range evs {
				if details(t, e)["session_id"] == id {
					mine = append(mine, e)
				}
			}
			if len(mine) != 2 || mine[0].Kind != service.EventVolumeFilesStarted || mine[1].Kind != service.EventVolumeFilesEnded {
				t.Fatalf("events of %s: %+v", id, mine)
			}
			if mine[0].Reason != "volumes cp on host h-1" || mine[1].Reason != "closed after 1.5s on host h-1" {
				t.Errorf("reasons %q, %q", mine[0].Reason, mine[1].Reason)
			}
			end := details(t, mine[1])
			if end["volume_id"] != v.ID || end["host_id"] != "h-1" || end["duration_ms"] != float64(1500) || mine[1].Actor != c.actor.ID ||
				(end["admin"] == true) != c.admin {
				t.Errorf("ended event: %+v %v", mine[1], end)
			}
		}
	})
}

// TestFilesGrant: a direct copy's grant is refused while direct copies
// are off (nothing recorded), for another tenant (not_found), and for a
// host whose agent does not listen (conflict); otherwise it names the
// host's listener and carries signed claims for exactly the target, and
// is recorded as a session, or as a detached volume's events.
// testGrantKey is the client key the tests' grants are bound to.
var testGrantKey = "sha256:" + strings.Repeat("0c", 32)

func TestFilesGrant(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		var signed [][]byte
		opts := service.Options{DirectAccess: true, SignDirectGrant: func(p []byte) (string, error) {
			signed = append(signed, p)
			return "signed-" + strconv.Itoa(len(signed)), nil
		}}
		f := newVAFixture(t, st, opts)
		ctx := context.Background()
		now := f.clock.Now()
		fp := "sha256:" + strings.Repeat("0f", 32)
		for _, h := range []struct{ id, addr string }{{"h-direct", "10.0.0.1:7443"}, {"h-relay", ""}} {
			spec := fleet.MockHost(h.id, "L4", 1)
			spec.Zone = "z1"
			if h.addr != "" {
				spec.DirectAddr, spec.DirectFingerprint = h.addr, fp
			}
			if err := st.Tx(ctx, func(tx cloud.Tx) error {
				return tx.PutHost(ctx, &cloud.Host{ID: h.id, State: fleet.Schedulable, Spec: *spec, LastHeartbeat: now})
			}); err != nil {
				t.Fatal(err)
			}
		}
		volumeOn := func(host string, running bool) (*cloud.Volume, *cloud.Instance) {
			v, _, err := f.svc.Volumes.Create(ctx, f.acme, api.CreateVolumeRequest{Name: "data", SizeGiB: 1, Zone: "z1"}, "")
			if err != nil {
				t.Fatal(err)
			}
			in, _, err := f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "l4.1x", Volumes: []string{v.ID}}, "")
			if err != nil {
				t.Fatal(err)
			}
			in = testkit.Walk(t, st, in.ID, cloud.Running, testkit.Via{Host: host, Zone: "z1"}, now)
			if !running {
				in = testkit.Walk(t, st, in.ID, cloud.Stopped, testkit.Via{}, now)
				if _, err := f.svc.Volumes.Detach(ctx, f.acme, v.ID); err != nil {
					t.Fatal(err)
				}
				if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.RecordVolumeHosts(ctx, []string{v.ID}, host, now) }); err != nil {
					t.Fatal(err)
				}
			}
			return v, in
		}
		attached, in := volumeOn("h-direct", true)
		_, relayed := volumeOn("h-relay", true)
		detached, _ := volumeOn("h-direct", false)

		t.Run("off", func(t *testing.T) {
			off := service.New(st, nil, service.Options{Now: f.clock.Now})
			before := f.counts()
			_, err := off.Files.Grant(ctx, f.acme, "volumes", attached.ID, testGrantKey)
			if cloud.ErrorCode(err) != cloud.PermissionDenied || !strings.Contains(err.Error(), "--direct-access") {
				t.Fatalf("grant with direct copies off: %v", err)
			}
			f.unchanged(before, "a refused grant")
		})
		t.Run("another tenant", func(t *testing.T) {
			for _, k := range []struct{ kind, id string }{{"volumes", attached.ID}, {"instances", in.ID}} {
				if _, err := f.svc.Files.Grant(ctx, f.globex, k.kind, k.id, testGrantKey); cloud.ErrorCode(err) != cloud.NotFound {
					t.Errorf("globex's grant on %s: %v", k.kind, err)
				}
			}
		})
		t.Run("a host that takes none", func(t *testing.T) {
			n := len(signed)
			_, err := f.svc.Files.Grant(ctx, f.acme, "instances", relayed.ID, testGrantKey)
			if cloud.ErrorCode(err) != cloud.Conflict || !strings.Contains(err.Error(), "--direct-listen") {
				t.Fatalf("grant on host h-relay: %v", err)
			}
			if len(signed) != n {
				t.Error("a grant was signed")
			}
		})
		t.Run("no key, or not one", func(t *testing.T) {
			before, n := f.counts(), len(signed)
			for _, key := range []string{"", "sha256:12", "md5:" + strings.Repeat("0", 32), strings.Repeat("ab", 32)} {
				if _, err := f.svc.Files.Grant(ctx, f.acme, "instances", in.ID, key); cloud.ErrorCode(err) != cloud.Invalid || !strings.Contains(err.Error(), "key:") {
					t.Errorf("files grant with key %q: %v", key, err)
				}
				if _, err := f.svc.Sessions.ForwardGrant(ctx, f.acme, in.ID, 8888, key); cloud.ErrorCode(err) != cloud.Invalid {
					t.Errorf("forward grant with key %q: %v", key, err)
				}
			}
			f.unchanged(before, "grants without a key")
			if len(signed) != n {
				t.Error("a grant was signed")
			}
		})
		t.Run("not files", func(t *testing.T) {
			if _, err := f.svc.Files.Grant(ctx, f.acme, "networks", in.ID, testGrantKey); cloud.ErrorCode(err) != cloud.Invalid {
				t.Errorf("a network's grant: %v", err)
			}
		})
		check := func(t *testing.T, g *service.DirectGrant, want agentapi.FilesTarget) agentapi.DirectGrant {
			t.Helper()
			if g.HostID != "h-direct" || g.Address != "10.0.0.1:7443" || g.Fingerprint != fp || g.Grant != "signed-"+strconv.Itoa(len(signed)) {
				t.Fatalf("grant %+v", g)
			}
			var claims agentapi.DirectGrant
			if err := json.Unmarshal(signed[len(signed)-1], &claims); err != nil {
				t.Fatal(err)
			}
			// The expiry is on the wall clock, which the agent checks.
			exp := time.Unix(claims.Expires, 0)
			if claims.HostID != "h-direct" || claims.TenantID != f.acme.TenantID || claims.Actor != f.acme.ID || claims.Target != want || claims.ClientKey != testGrantKey ||
				claims.SessionID != g.SessionID || !strings.HasPrefix(claims.ID, service.DirectGrantPrefix) ||
				!exp.Equal(g.ExpiresAt) || time.Until(exp) > service.DirectGrantTTL || time.Until(exp) < service.DirectGrantTTL-time.Minute {
				t.Errorf("claims %+v (expires %s)", claims, exp)
			}
			return claims
		}
		t.Run("an attached volume", func(t *testing.T) {
			g, err := f.svc.Files.Grant(ctx, f.acme, "volumes", attached.ID, testGrantKey)
			if err != nil {
				t.Fatal(err)
			}
			check(t, g, agentapi.FilesTarget{VolumeID: attached.ID, SizeGiB: 1})
			var ses *cloud.Session
			if err := st.Tx(ctx, func(tx cloud.Tx) (err error) { ses, err = tx.GetSession(ctx, g.SessionID); return err }); err != nil {
				t.Fatal(err)
			}
			if ses.InstanceID != in.ID || ses.EndedAt == nil || !strings.Contains(ses.Command, "--direct") {
				t.Errorf("the grant's session: %+v", ses)
			}
		})
		t.Run("an instance", func(t *testing.T) {
			g, err := f.svc.Files.Grant(ctx, f.acme, "instances", in.ID, testGrantKey)
			if err != nil {
				t.Fatal(err)
			}
			if c := check(t, g, agentapi.FilesTarget{InstanceID: in.ID}); c.Kind != agentapi.SessionFiles || c.Port != 0 {
				t.Errorf("a files grant's claims: %+v", c)
			}
		})
		t.Run("a port forward", func(t *testing.T) {
			g, err := f.svc.Sessions.ForwardGrant(ctx, f.acme, in.ID, 8888, testGrantKey)
			if err != nil {
				t.Fatal(err)
			}
			if c := check(t, g, agentapi.FilesTarget{InstanceID: in.ID}); c.Kind != agentapi.SessionForward || c.Port != 8888 {
				t.Errorf("a forward grant's claims: %+v", c)
			}
			var ses *cloud.Session
			if err := st.Tx(ctx, func(tx cloud.Tx) (err error) { ses, err = tx.GetSession(ctx, g.SessionID); return err }); err != nil {
				t.Fatal(err)
			}
			if ses.Kind != agentapi.SessionForward || ses.Command != "port 8888 --direct" || ses.EndedAt == nil {
				t.Errorf("the forward grant's session: %+v", ses)
			}
			if _, err := f.svc.Sessions.ForwardGrant(ctx, f.globex, in.ID, 8888, testGrantKey); cloud.ErrorCode(err) != cloud.NotFound {
				t.Errorf("globex's forward grant: %v", err)
			}
			for _, port := range []int{0, 65536} {
				if _, err := f.svc.Sessions.ForwardGrant(ctx, f.acme, in.ID, port, testGrantKey); cloud.ErrorCode(err) != cloud.Invalid {
					t.Errorf("port %d: %v", port, err)
				}
			}
			off := service.New(st, nil, service.Options{Now: f.clock.Now})
			if _, err := off.Sessions.ForwardGrant(ctx, f.acme, in.ID, 8888, testGrantKey); cloud.ErrorCode(err) != cloud.PermissionDenied {
				t.Errorf("direct sessions off: %v", err)
			}
		})
		t.Run("a detached volume", func(t *testing.T) {
			g, err := f.svc.Files.Grant(ctx, f.acme, "volumes", detached.ID, testGrantKey)
			if err != nil {
				t.Fatal(err)
			}
			check(t, g, agentapi.FilesTarget{VolumeID: detached.ID, SizeGiB: 1})
			var evs []*cloud.Event
			if err := st.Tx(ctx, func(tx cloud.Tx) (err error) {
				evs, err = tx.ListEvents(ctx, cloud.EventFilter{TenantID: f.acme.TenantID,
					Kinds: []cloud.EventKind{service.EventVolumeFilesStarted, service.EventVolumeFilesEnded}})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			var kinds []cloud.EventKind
			for _, e := range evs {
				if details(t, e)["session_id"] == g.SessionID {
					kinds = append(kinds, e.Kind)
				}
			}
			if len(kinds) != 2 {
				t.Errorf("the detached volume's grant's events: %v", kinds)
			}
		})
	})
}
