package controlplane

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/store/pgtest"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestAssignmentChangesCrossReplicas: the leader's placement of an
// instance created through the follower wakes, on the follower, a watch
// of the host's assignments (which the follower's own writes could not:
// the create names no host), through PostgreSQL's LISTEN/NOTIFY; so does
// a network the leader creates wake the follower's network views.
func TestAssignmentChangesCrossReplicas(t *testing.T) {
	db := pgtest.URL(t)
	ctx := context.Background()
	a, b := start(t, db), start(t, db)
	defer a.Close(ctx)
	defer b.Close(ctx)
	testkit.Eventually(t, 0, "a leader, and both replicas hearing the other", func() bool {
		return a.IsLeader() != b.IsLeader() && a.asgChanges.Peered() && b.asgChanges.Peered()
	})
	leader, follower := a, b
	if b.IsLeader() {
		leader, follower = b, a
	}
	addHost(t, leader.Store, fleet.MockNVLinkHost("h100-1", "H100-80GB-SXM", 8))
	c := client.New(follower.URL, a.AdminToken+b.AdminToken, follower.HTTPClient())
	seq := follower.asgChanges.Seq()
	start := time.Now()
	if _, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x"}, ""); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if !follower.asgChanges.Wait(wctx, seq, []string{service.HostAssignmentKey("h100-1")}) {
		t.Fatal("the follower never heard of the leader's placement")
	}
	t.Logf("the follower heard of the placement %v after the create was sent", time.Since(start).Round(time.Millisecond))

	// A subnet made through the leader: the follower's network views
	// hear of it.
	admin := client.New(leader.URL, a.AdminToken+b.AdminToken, leader.HTTPClient())
	ten, err := admin.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	n, err := admin.CreateNetwork(ctx, api.CreateNetworkRequest{Tenant: ten.ID, Name: "lab", CIDR: "10.20.0.0/16"}, "")
	if err != nil {
		t.Fatal(err)
	}
	nseq := follower.netChanges.Seq()
	if _, err := admin.CreateSubnet(ctx, api.CreateSubnetRequest{Tenant: ten.ID, Network: n.ID, Name: "a", CIDR: "10.20.1.0/24", Zone: fleet.MockZone}, ""); err != nil {
		t.Fatal(err)
	}
	if !follower.netChanges.Wait(wctx, nseq, []string{n.ID}, "") {
		t.Fatal("the follower never heard of the subnet the leader made")
	}
}

// The notifications' payloads: every key once, each payload within the
// bound, a key too long for any payload left out.
func TestNotePayloads(t *testing.T) {
	long := strings.Repeat("k", 200)
	var many []string
	for i := range 500 {
		many = append(many, "host/h-"+strings.Repeat("0", 20)+string(rune('a'+i%26))+strings.Repeat("x", i%7))
	}
	for _, tc := range []struct {
		name  string
		keys  []string
		max   int
		parts int // -1: any
		want  []string
	}{
		{"none", nil, 7900, 0, nil},
		{"one", []string{"host/h1"}, 7900, 1, []string{"host/h1"}},
		{"split", []string{"host/h1", "host/h2", "host/h3"}, 60, 2, []string{"host/h1", "host/h2", "host/h3"}},
		{"too long", []string{"host/h1", long}, 100, 1, []string{"host/h1"}},
		{"many", many, 7900, -1, many},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := notePayloads("r1/start-1", tc.keys, tc.max)
			if tc.parts >= 0 && len(ps) != tc.parts {
				t.Fatalf("%d payloads, want %d: %q", len(ps), tc.parts, ps)
			}
			var got []string
			for _, p := range ps {
				if len(p) > tc.max {
					t.Errorf("a payload of %d bytes, over %d", len(p), tc.max)
				}
				var n peerNote
				if err := json.Unmarshal([]byte(p), &n); err != nil || n.From != "r1/start-1" {
					t.Fatalf("payload %q: %+v, %v", p, n, err)
				}
				got = append(got, n.Keys...)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("keys %v, want %v", got, tc.want)
			}
		})
	}
}

// The prober counts a channel up only while its probes come back: up
// when one echoes after the connection listens, down when one does not
// come back in time or the connection breaks, and told only of changes.
func TestProber(t *testing.T) {
	oldEvery, oldWait := probeEvery, probeWait
	probeEvery, probeWait = 20*time.Millisecond, 50*time.Millisecond
	defer func() { probeEvery, probeWait = oldEvery, oldWait }()

	ups := make(chan bool, 100)
	p := &prober{up: func(on bool) { ups <- on }, listening: make(chan bool, 1), echo: make(chan uint64, 1)}
	var echoing atomic.Bool
	echoing.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.run(ctx, func(_ context.Context, probe uint64) error {
			if echoing.Load() {
				p.echo <- probe
			}
			return nil
		})
	}()
	expect := func(want bool) {
		t.Helper()
		select {
		case got := <-ups:
			if got != want {
				t.Fatalf("told %v, want %v", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("not told %v", want)
		}
	}
	p.setListening(true)
	expect(true)
	echoing.Store(false) // a pooler swallows them
	expect(false)
	echoing.Store(true)
	expect(true)
	p.setListening(false)
	expect(false)
	// No change, nothing told: no probe goes while not listening.
	select {
	case got := <-ups:
		t.Fatalf("told %v while nothing changed", got)
	case <-time.After(100 * time.Millisecond):
	}
	p.setListening(true)
	expect(true)
	cancel()
	<-done
	expect(false)
}
