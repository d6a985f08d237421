package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/internal/filexfer"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestFilesDirect: direct copies (docs/DATA.md, "Direct copies") on a
// cloud that allows them, on both stores: a grant from the server, the
// files protocol straight to the agent over TLS 1.3 (a tree in through
// the volume, out through the instance, a cut copy resumed on a second
// connection of one grant), the grant recorded as a session, another
// tenant's not_found, and the agent refusing a grant whose payload was
// changed and a client refusing an agent whose certificate is not the
// one the server named; and a direct port forward (the bytes both ways
// and the half-close).
func TestFilesDirect(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testFilesDirect(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testFilesDirect(t, pgtest.URL(t)) })
}

func testFilesDirect(t *testing.T, db string) {
	spec := sim.Spec{ID: "sim-direct", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 1}}
	c := startClusterTuned(t, db, func(cfg *controlplane.Config) { cfg.DirectAccess = true }, withFiles, spec)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	_, mallory, _ := c.member("globex", "mallory")
	vol, err := alice.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: 1}, "")
	if err != nil {
		t.Fatal(err)
	}
	in, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "600"},
		Volumes: []string{vol.ID}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, in.ID, cloud.Running)
	// The agent reports its listener with its inventory: wait for it.
	var g *client.DirectGrant
	c.until("a grant", func() (bool, string) {
		g, err = alice.FilesGrant(ctx, "volumes", vol.ID)
		return err == nil, errString(err)
	})
	if g.HostID != spec.ID || !strings.HasPrefix(g.Address, "127.0.0.1:") || !strings.HasPrefix(g.Fingerprint, "sha256:") || g.SessionID == "" {
		t.Fatalf("grant: %+v", g)
	}
	if left := time.Until(g.ExpiresAt); left <= 0 || left > 2*time.Minute+time.Second {
		t.Errorf("the grant expires in %s; want within two minutes", left)
	}
	volDir := filepath.Join(c.hosts[spec.ID].dir, "volumes", vol.ID)
	local := t.TempDir()
	tree := map[string][]byte{
		"dataset/a.bin":     writeRandom(t, filepath.Join(local, "dataset/a.bin"), 3<<20+17),
		"dataset/sub/b.txt": writeRandom(t, filepath.Join(local, "dataset/sub/b.txt"), 100),
	}
	direct := func(t *testing.T, g *client.DirectGrant, cut int64) *filexfer.Client {
		t.Helper()
		conn, err := alice.OpenDirect(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return filexfer.NewClient(&cutAfter{Conn: conn, left: cut})
	}

	t.Run("a directory in through the volume", func(t *testing.T) {
		// Over two connections of the one grant.
		more := func() (*filexfer.Client, func(), error) { return direct(t, g, 0), func() {}, nil }
		st, err := filexfer.Upload(direct(t, g, 0), filepath.Join(local, "dataset"), "/", filexfer.Options{Parallel: 2, Open: more})
		if err != nil || st.Files != len(tree) {
			t.Fatalf("upload: %+v, %v", st, err)
		}
		for name, data := range tree {
			sameFile(t, filepath.Join(volDir, name), data)
		}
	})

	t.Run("and out through the instance", func(t *testing.T) {
		ig, err := alice.FilesGrant(ctx, "instances", in.ID)
		if err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		if _, err := filexfer.Download(direct(t, ig, 0), "/dataset", out, filexfer.Options{}); err != nil {
			t.Fatal(err)
		}
		for name, data := range tree {
			sameFile(t, filepath.Join(out, name), data)
		}
	})

	t.Run("a cut copy resumes on the grant's next connection", func(t *testing.T) {
		big := writeRandom(t, filepath.Join(local, "big.bin"), 8<<20)
		if _, err := filexfer.Upload(direct(t, g, 3<<20), filepath.Join(local, "big.bin"), "/big.bin", filexfer.Options{}); err == nil {
			t.Fatal("a copy over a cut connection succeeded")
		}
		// The agent takes in what reached it before the cut in its own
		// time: wait until the partial file holds it and stops growing,
		// as a person running the copy again a moment later would.
		fc := direct(t, g, 0)
		var last int64 = -1
		c.until("the cut copy's partial file to settle", func() (bool, string) {
			fi, err := fc.Stat("/big.bin")
			if !filexfer.IsNotFound(err) || fi == nil {
				return false, fmt.Sprint(fi, err)
			}
			settled := fi.Partial > 0 && fi.Partial == last
			last = fi.Partial
			time.Sleep(50 * time.Millisecond)
			return settled, fmt.Sprintf("partial %d bytes", fi.Partial)
		})
		st, err := filexfer.Upload(fc, filepath.Join(local, "big.bin"), "/big.bin", filexfer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Resumed == 0 || st.Bytes+st.Resumed != int64(len(big)) {
			t.Errorf("resumed copy: %+v", st)
		}
		sameFile(t, filepath.Join(volDir, "big.bin"), big)
	})

	t.Run("recorded as a session", func(t *testing.T) {
		page, err := alice.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var started, ended int
		for _, e := range page.Events {
			var d map[string]any
			json.Unmarshal(e.Details, &d)
			cmd, _ := d["command"].(string)
			switch {
			case e.Kind == cloud.EventSessionStarted && strings.Contains(cmd, "--direct"):
				started++
			case e.Kind == cloud.EventSessionEnded && strings.Contains(e.Reason, "direct session granted"):
				ended++
			}
		}
		// One per grant: the volume's (attached: its instance's session)
		// and the instance's.
		if started < 2 || ended < 2 {
			t.Errorf("%d session.started and %d session.ended events of direct copies; want 2 each", started, ended)
		}
	})

	t.Run("another tenant", func(t *testing.T) {
		for _, kind := range []struct{ kind, id string }{{"volumes", vol.ID}, {"instances", in.ID}} {
			_, err := mallory.FilesGrant(ctx, kind.kind, kind.id)
			wantCode(t, "mallory's grant on "+kind.kind, err, cloud.NotFound)
		}
	})

	t.Run("a grant changed on the way", func(t *testing.T) {
		payload, sig, _ := strings.Cut(g.Grant, ".")
		b, err := base64.RawURLEncoding.DecodeString(payload)
		if err != nil {
			t.Fatal(err)
		}
		var claims agentapi.DirectGrant
		if err := json.Unmarshal(b, &claims); err != nil {
			t.Fatal(err)
		}
		claims.Target = agentapi.FilesTarget{VolumeID: "v-0000000000000000"}
		claims.Expires = time.Now().Add(time.Hour).Unix()
		b, _ = json.Marshal(claims)
		forged := *g
		forged.Grant = base64.RawURLEncoding.EncodeToString(b) + "." + sig
		_, err = alice.OpenDirect(ctx, &forged)
		if err == nil || !strings.Contains(err.Error(), "grant refused") {
			t.Fatalf("a changed grant: %v; want it refused", err)
		}
	})

	t.Run("a grant taken by another client", func(t *testing.T) {
		// Whoever holds a copy of the grant, but not the key the client
		// made for it, is refused: here a second grant's client (its own
		// key) presenting the first grant.
		other, err := alice.FilesGrant(ctx, "volumes", vol.ID)
		if err != nil {
			t.Fatal(err)
		}
		other.Grant = g.Grant
		if _, err := alice.OpenDirect(ctx, other); err == nil || !strings.Contains(err.Error(), "does not hold the key") {
			t.Fatalf("a grant presented with another key: %v; want it refused", err)
		}
	})

	t.Run("an agent that is not the one named", func(t *testing.T) {
		other := *g
		other.Fingerprint = "sha256:" + strings.Repeat("ab", 32)
		_, err := alice.OpenDirect(ctx, &other)
		if err == nil || !strings.Contains(err.Error(), "refusing") {
			t.Fatalf("a certificate other than the named one: %v; want a refusal", err)
		}
	})

	t.Run("a direct port forward", func(t *testing.T) {
		// The process runtime's instance shares the host's loopback: a
		// server the test runs there stands for the one inside.
		port := loopbackEcho(t)
		fg, err := alice.ForwardGrant(ctx, in.ID, port)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := alice.OpenDirect(ctx, fg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		msg := bytes.Repeat([]byte("through the agent "), 100000)
		go func() {
			conn.Write(msg)
			conn.(interface{ CloseWrite() error }).CloseWrite()
		}()
		back, err := io.ReadAll(conn)
		if err != nil || !bytes.Equal(back, msg) {
			t.Fatalf("echoed %d of %d bytes: %v", len(back), len(msg), err)
		}
		if _, err := mallory.ForwardGrant(ctx, in.ID, port); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("mallory's forward grant: %v", err)
		}
		if _, err := alice.ForwardGrant(ctx, in.ID, 0); cloud.ErrorCode(err) != cloud.Invalid {
			t.Errorf("port 0: %v", err)
		}
	})

	t.Run("the agent reports what each grant served", func(t *testing.T) {
		// Past the grants' expiry on the agent's clock, every grant whose
		// connections have closed is reported, and recorded once on the
		// instance: the volume's grant (two connections of a parallel
		// copy, the cut one and its resume), the instance's, and the
		// forward's.
		c.hosts[spec.ID].directAhead.Store(int64(3 * time.Minute))
		type report struct {
			SessionID   string `json:"session_id"`
			Kind        string `json:"kind"`
			Connections int    `json:"connections"`
			BytesIn     int64  `json:"bytes_in"`
			BytesOut    int64  `json:"bytes_out"`
			Port        int    `json:"port"`
		}
		var got map[string]report
		c.until("three session.direct events", func() (bool, string) {
			page, err := alice.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 1000})
			if err != nil {
				return false, err.Error()
			}
			got = map[string]report{}
			n := 0
			for _, e := range page.Events {
				if e.Kind != cloud.EventSessionDirect {
					continue
				}
				var r report
				json.Unmarshal(e.Details, &r)
				got[r.SessionID] = r
				n++
				if e.Actor == "" || e.HostID != spec.ID || !strings.Contains(e.Reason, "direct on host "+spec.ID) {
					t.Errorf("event: %+v", e)
				}
			}
			return n >= 3, fmt.Sprintf("%d events: %+v", n, got)
		})
		if r := got[g.SessionID]; r.Kind != agentapi.SessionFiles || r.Connections < 4 || r.BytesIn < 11<<20 {
			t.Errorf("the volume grant's report: %+v; want 4 connections or more, 11 MiB in or more", r)
		}
		var files, forwards int
		for id, r := range got {
			switch {
			case id != g.SessionID && r.Kind == agentapi.SessionFiles && r.Connections == 1 && r.BytesOut > 3<<20:
				files++
			case r.Kind == agentapi.SessionForward && r.Port > 0 && r.BytesIn == 1_800_000 && r.BytesOut == 1_800_000:
				forwards++
			}
		}
		if files != 1 || forwards != 1 {
			t.Errorf("reports: %+v; want the instance's copy out and the forward's 1,800,000 bytes each way", got)
		}
		// Each once, whatever the agent sends again; none of it another
		// tenant's to see.
		time.Sleep(300 * time.Millisecond)
		page, err := alice.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if n := countKind(page.Events, cloud.EventSessionDirect); n != len(got) {
			t.Errorf("%d session.direct events, want %d", n, len(got))
		}
		_, err = mallory.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 1000})
		wantCode(t, "mallory reading the instance's events", err, cloud.NotFound)
	})

	t.Run("a stopped instance", func(t *testing.T) {
		if _, err := alice.StopInstance(ctx, in.ID, 0); err != nil {
			t.Fatal(err)
		}
		c.waitState(alice, in.ID, cloud.Stopped)
		_, err := alice.FilesGrant(ctx, "instances", in.ID)
		wantCode(t, "a grant on a stopped instance", err, cloud.Conflict)
	})
}

// countKind counts the events of kind.
func countKind(events []*cloud.Event, kind cloud.EventKind) int {
	n := 0
	for _, e := range events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// errString is err's text, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
