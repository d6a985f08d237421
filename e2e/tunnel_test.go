package e2e

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/filexfer"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestTunnels: tunnelled sessions (docs/ACCESS.md, "Tunnels") on a cloud
// with its defaults (TLS, direct sessions off, no agent listening), on
// both stores: a grant via tunnel names no address; a port forward's
// bytes cross the server both ways with the half-close; a copy in and out
// of an instance goes the same way; another tenant cannot use the grant
// (the server answers not_found before any agent is asked), a grant
// presented with another key is refused by the agent, and a direct grant
// is still refused.
func TestTunnels(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testTunnels(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testTunnels(t, pgtest.URL(t)) })
}

func testTunnels(t *testing.T, db string) {
	spec := sim.Spec{ID: "sim-tunnel", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 1}}
	c := startClusterTuned(t, db, nil, withFiles, spec)
	ctx := t.Context()
	_, alice, aliceToken := c.member("acme", "alice")
	_, mallory, _ := c.member("globex", "mallory")
	in, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "600"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, in.ID, cloud.Running)
	// The process runtime's instance shares the host's loopback: a server
	// the test runs there stands for the one inside.
	port := loopbackEcho(t)
	// The agent reports its certificate with its inventory: wait for it.
	var g *client.DirectGrant
	c.until("a tunnel grant", func() (bool, string) {
		g, err = alice.ForwardTunnelGrant(ctx, in.ID, port)
		return err == nil, errString(err)
	})
	if g.HostID != spec.ID || g.Address != "" || !strings.HasPrefix(g.Fingerprint, "sha256:") || g.SessionID == "" {
		t.Fatalf("grant: %+v", g)
	}

	t.Run("a port forward", func(t *testing.T) {
		for range 2 { // two connections of one grant
			conn, err := alice.OpenDirect(ctx, g)
			if err != nil {
				t.Fatal(err)
			}
			msg := bytes.Repeat([]byte("through the tunnel "), 100000)
			go func() {
				conn.Write(msg)
				conn.(interface{ CloseWrite() error }).CloseWrite()
			}()
			back, err := io.ReadAll(conn)
			conn.Close()
			if err != nil || !bytes.Equal(back, msg) {
				t.Fatalf("echoed %d of %d bytes: %v", len(back), len(msg), err)
			}
		}
	})

	t.Run("a copy in and out", func(t *testing.T) {
		fg, err := alice.FilesTunnelGrant(ctx, "instances", in.ID)
		if err != nil {
			t.Fatal(err)
		}
		if fg.Address != "" {
			t.Fatalf("files grant: %+v", fg)
		}
		local := t.TempDir()
		data := writeRandom(t, filepath.Join(local, "in.bin"), 5<<20+3)
		open := func() *filexfer.Client {
			conn, err := alice.OpenDirect(ctx, fg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return filexfer.NewClient(conn)
		}
		if _, err := filexfer.Upload(open(), filepath.Join(local, "in.bin"), "/tmp/tunnelled.bin", filexfer.Options{}); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "out.bin")
		if _, err := filexfer.Download(open(), "/tmp/tunnelled.bin", out, filexfer.Options{}); err != nil {
			t.Fatal(err)
		}
		sameFile(t, out, data)
	})

	t.Run("another tenant", func(t *testing.T) {
		// Mallory holding Alice's grant (and even her key, which a
		// leaked grant would not bring): the server routes none of
		// another tenant's grants.
		if _, err := mallory.OpenDirect(ctx, g); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("mallory's tunnel with alice's grant: %v", err)
		}
		if _, err := mallory.ForwardTunnelGrant(ctx, in.ID, port); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("mallory's tunnel grant on alice's instance: %v", err)
		}
	})

	t.Run("a grant with another key", func(t *testing.T) {
		g2, err := alice.ForwardTunnelGrant(ctx, in.ID, port)
		if err != nil {
			t.Fatal(err)
		}
		// g2's key presenting g's grant.
		franken := *g2
		franken.Grant = g.Grant
		if _, err := alice.OpenDirect(ctx, &franken); err == nil || !strings.Contains(err.Error(), "key") {
			t.Fatalf("a grant presented with another key: %v; want it refused", err)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		// A plain GET of a tunnel (no upgrade); a grant's way that is
		// not one; no token.
		if a := c.raw("GET", "/v1/tunnels", aliceToken, "", nil, map[string]string{"Gpucloud-Grant": g.Grant}); a.status != 400 || a.err.Code != cloud.Invalid {
			t.Errorf("a tunnel without its upgrade: %d %+v", a.status, a.err)
		}
		path := "/v1/instances/" + in.ID + "/port-forward/grant?port=8888&key=" + g.Fingerprint + "&via=sideways"
		if a := c.raw("POST", path, aliceToken, "", nil, nil); a.status != 400 || a.err.Code != cloud.Invalid || a.err.Details["field"] != "via" {
			t.Errorf("via=sideways: %d %+v", a.status, a.err)
		}
		if a := c.raw("GET", "/v1/tunnels", "", "", nil, map[string]string{"Gpucloud-Grant": g.Grant}); a.status != 401 {
			t.Errorf("a tunnel without a token: %d %+v", a.status, a.err)
		}
	})

	t.Run("direct sessions are still off", func(t *testing.T) {
		if _, err := alice.ForwardGrant(ctx, in.ID, port); cloud.ErrorCode(err) != cloud.PermissionDenied {
			t.Errorf("a direct grant: %v", err)
		}
	})
}
