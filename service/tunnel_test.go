package service_test

import (
	"context"
	"encoding/json"
	"errors"
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

// TestTunnelGrants: grants via tunnel (docs/ACCESS.md, "Tunnels") on a
// cloud whose direct sessions are off: issued for a host whose agent
// reports a certificate and no listener, with no address; refused for a
// host whose agent reports none (conflict) and on a server that signs no
// grants; a direct grant still refused. TunnelRoute routes a grant of
// the caller's tenant to its host, and refuses another tenant's
// (not_found), a forged or missing one (invalid_argument) and an expired
// one (conflict).
func TestTunnelGrants(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		var signed [][]byte
		tokens := map[string][]byte{}
		opts := service.Options{
			SignDirectGrant: func(p []byte) (string, error) {
				signed = append(signed, p)
				tok := "signed-" + strconv.Itoa(len(signed))
				tokens[tok] = p
				return tok, nil
			},
			VerifyDirectGrant: func(tok string) ([]byte, error) {
				if p, ok := tokens[tok]; ok {
					return p, nil
				}
				return nil, errors.New("bad signature")
			},
		}
		f := newVAFixture(t, st, opts)
		ctx := context.Background()
		now := f.clock.Now()
		fp := "sha256:" + strings.Repeat("0f", 32)
		for _, h := range []struct{ id, fp string }{{"h-tunnel", fp}, {"h-old", ""}} {
			spec := fleet.MockHost(h.id, "L4", 1)
			spec.Zone = "z1"
			spec.DirectFingerprint = h.fp
			if err := st.Tx(ctx, func(tx cloud.Tx) error {
				return tx.PutHost(ctx, &cloud.Host{ID: h.id, State: fleet.Schedulable, Spec: *spec, LastHeartbeat: now})
			}); err != nil {
				t.Fatal(err)
			}
		}
		running := func(host string) *cloud.Instance {
			in, _, err := f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "l4.1x"}, "")
			if err != nil {
				t.Fatal(err)
			}
			return testkit.Walk(t, st, in.ID, cloud.Running, testkit.Via{Host: host, Zone: "z1"}, now)
		}
		in, old := running("h-tunnel"), running("h-old")

		g, err := f.svc.Sessions.ForwardGrant(ctx, f.acme, in.ID, 8888, testGrantKey, service.ViaTunnel)
		if err != nil {
			t.Fatal(err)
		}
		if g.HostID != "h-tunnel" || g.Address != "" || g.Fingerprint != fp || g.Grant != "signed-1" {
			t.Fatalf("tunnel grant %+v", g)
		}
		var ses *cloud.Session
		if err := st.Tx(ctx, func(tx cloud.Tx) (err error) { ses, err = tx.GetSession(ctx, g.SessionID); return err }); err != nil {
			t.Fatal(err)
		}
		if ses.InstanceID != in.ID || ses.Command != "port 8888 --tunnel" || ses.EndedAt == nil || !strings.Contains(ses.EndReason, "tunnelled session granted on host h-tunnel") {
			t.Errorf("the grant's session: %+v", ses)
		}
		fg, err := f.svc.Files.Grant(ctx, f.acme, "instances", in.ID, testGrantKey, service.ViaTunnel)
		if err != nil || fg.Address != "" || fg.HostID != "h-tunnel" {
			t.Fatalf("files tunnel grant %+v, %v", fg, err)
		}
		if _, err := f.svc.Sessions.ForwardGrant(ctx, f.acme, in.ID, 8888, testGrantKey); cloud.ErrorCode(err) != cloud.PermissionDenied {
			t.Errorf("a direct grant with direct sessions off: %v", err)
		}
		n := len(signed)
		if _, err := f.svc.Sessions.ForwardGrant(ctx, f.acme, old.ID, 8888, testGrantKey, service.ViaTunnel); cloud.ErrorCode(err) != cloud.Conflict {
			t.Errorf("a tunnel grant on a host that takes none: %v", err)
		}
		if _, err := f.svc.Sessions.ForwardGrant(ctx, f.globex, in.ID, 8888, testGrantKey, service.ViaTunnel); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("globex's tunnel grant on acme's instance: %v", err)
		}
		if len(signed) != n {
			t.Error("a refused grant was signed")
		}
		plain := service.New(st, nil, service.Options{Now: f.clock.Now})
		if _, err := plain.Sessions.ForwardGrant(ctx, f.acme, in.ID, 8888, testGrantKey, service.ViaTunnel); cloud.ErrorCode(err) != cloud.PermissionDenied {
			t.Errorf("a tunnel grant from a server that signs none: %v", err)
		}

		t.Run("route", func(t *testing.T) {
			r, err := f.svc.Sessions.TunnelRoute(ctx, f.acme, g.Grant)
			if err != nil || r.HostID != "h-tunnel" || r.Port != 8888 || r.Target.InstanceID != in.ID || r.SessionID != g.SessionID {
				t.Fatalf("route %+v, %v", r, err)
			}
			if _, err := f.svc.Sessions.TunnelRoute(ctx, f.admin, g.Grant); err != nil {
				t.Errorf("an admin's route: %v", err)
			}
			if _, err := f.svc.Sessions.TunnelRoute(ctx, f.globex, g.Grant); cloud.ErrorCode(err) != cloud.NotFound {
				t.Errorf("globex routing acme's grant: %v", err)
			}
			for _, tok := range []string{"", "forged", g.Grant + "x"} {
				if _, err := f.svc.Sessions.TunnelRoute(ctx, f.acme, tok); cloud.ErrorCode(err) != cloud.Invalid {
					t.Errorf("route of %q: %v", tok, err)
				}
			}
			var claims agentapi.DirectGrant
			if err := json.Unmarshal(tokens[g.Grant], &claims); err != nil {
				t.Fatal(err)
			}
			claims.Expires = time.Now().Add(-time.Second).Unix()
			b, _ := json.Marshal(claims)
			tokens["expired"] = b
			if _, err := f.svc.Sessions.TunnelRoute(ctx, f.acme, "expired"); cloud.ErrorCode(err) != cloud.Conflict || !strings.Contains(err.Error(), "expired") {
				t.Errorf("an expired grant's route: %v", err)
			}
			if _, err := plain.Sessions.TunnelRoute(ctx, f.acme, g.Grant); cloud.ErrorCode(err) != cloud.PermissionDenied {
				t.Errorf("a route on a server that signs no grants: %v", err)
			}
		})
	})
}
