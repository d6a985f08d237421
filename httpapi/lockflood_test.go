package httpapi

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	control "github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/internal/rest"
	"github.com/gpucloud/gpucloud/service"
)

// TestLivenessRoutes: the routes of an agent's liveness budget are agent
// routes of the route table.
func TestLivenessRoutes(t *testing.T) {
	for r := range livenessRoutes {
		found := false
		for _, rt := range routeTable {
			found = found || (rt.Method+" "+rt.Path == r && rt.access == agentOnly)
		}
		if !found {
			t.Errorf("%s is not an agent route of the route table", r)
		}
	}
	if !livenessRoutes[heartbeatRoute] {
		t.Errorf("the heartbeat route %s is not a liveness route", heartbeatRoute)
	}
}

// TestAgentRouteBudgets: an agent's heartbeats and assignment polls take
// from a budget of their own, which its other requests (those its
// workloads can cause) never spend; a heartbeat refused anyway still
// records its host's sign of life, at most once a second.
func TestAgentRouteBudgets(t *testing.T) {
	e, clock := limitedEnv(t, RateLimits{Agent: Limit{Rate: 1, Burst: 3}, AgentLiveness: Limit{Rate: 1, Burst: 2}})
	ctx := context.Background()
	a1, h1 := e.join(inventory("h-1", "L4", 1))
	a2, _ := e.join(inventory("h-2", "L4", 1))
	calls := map[string]func(*agentConn) error{
		// The lock and the logs of an instance the host does not have:
		// not_found once past the limiter.
		"lock": func(a *agentConn) error {
			_, err := a.SetScaleInLock(ctx, "i-none", agentapi.LockRequest{Locked: true})
			return err
		},
		"logs": func(a *agentConn) error { return a.AppendLogs(ctx, "i-none", []byte("x")) },
		"beat": func(a *agentConn) error { return errOf(a.Heartbeat(ctx, agentapi.HeartbeatRequest{})) },
		"poll": func(a *agentConn) error { _, err := a.Assignments(ctx); return err },
	}
	joined := e.host(h1).LastHeartbeat
	for _, s := range []struct {
		desc string
		a    *agentConn
		call string
		n    int           // calls (1 when zero), the last one checked
		wait time.Duration // on the limiter's clock, before the calls
		// limited: the last call is answered 429; beat: h-1's last
		// heartbeat after it, as seconds on the domain clock, which
		// every step moves by 10 s.
		limited bool
		beat    int
	}{
		{"the agent bucket's burst", a1, "lock", 3, 0, false, 0},
		{"the agent bucket is empty", a1, "lock", 1, 0, true, 0},
		{"logs share it", a1, "logs", 1, 0, true, 0},
		{"a heartbeat has its own budget", a1, "beat", 1, 0, false, 40},
		{"so does an assignment poll", a1, "poll", 1, 0, false, 40},
		{"the liveness budget spent: refused, but a sign of life", a1, "beat", 1, 0, true, 60},
		{"refused again within the second: not recorded again", a1, "beat", 1, 0, true, 60},
		{"another host's agent has its own budgets", a2, "beat", 1, 0, false, 60},
		{"a second later, a heartbeat passes", a1, "beat", 1, time.Second, false, 90},
		{"and the next refused one is recorded", a1, "beat", 1, 0, true, 100},
		{"a refused poll is no heartbeat", a1, "poll", 1, 0, true, 100},
		{"the agent bucket refilled a token meanwhile", a1, "lock", 1, 0, false, 100},
	} {
		clock.Advance(s.wait)
		e.clock.Advance(10 * time.Second)
		var err error
		for range max(s.n, 1) {
			err = calls[s.call](s.a)
		}
		if limited := cloud.ErrorCode(err) == cloud.RateLimited; limited != s.limited {
			t.Fatalf("%s: %v, want limited %v", s.desc, err, s.limited)
		}
		if d, ok := rest.RetryAfter(err); s.limited && (!ok || d != time.Second) {
			t.Errorf("%s: Retry-After %v, %v", s.desc, d, ok)
		}
		if got := e.host(h1).LastHeartbeat.Sub(joined); got != time.Duration(s.beat)*time.Second {
			t.Fatalf("%s: h-1's last heartbeat +%v, want +%ds", s.desc, got, s.beat)
		}
	}
}

// countingTransport counts an agent's requests by route.
type countingTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	key := r.Method + " " + r.URL.Path
	if strings.HasSuffix(r.URL.Path, "/scale-in-lock") {
		key = "lock"
	}
	c.mu.Lock()
	c.n[key]++
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

func (c *countingTransport) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// TestLockFloodSparesTheHost is the attack of issue 21, item 1: a
// workload floods its metadata endpoint's scale-in lock (16 connections,
// 2,000 PUTs and DELETEs) while its host's agent heartbeats and polls
// through the real API with the default limits. The limiter's clock stands
// still, so nothing refills: under the old code, every change was a server
// call on the agent's credential, the 2,000 calls emptied its bucket, and
// the heartbeats that followed were refused until the host was declared
// dead. Now the workload's changes past its budget are answered 429, those
// within it are coalesced, the server sees at most the budget's worth of
// lock calls, every heartbeat is accepted, and after 50 s of domain time
// the host is not silent.
func TestLockFloodSparesTheHost(t *testing.T) {
	e, _ := limitedEnv(t, RateLimits{})
	ctx := context.Background()
	conn, hostID := e.join(inventory("node-b", "H100", 1))
	in := e.mustCreate(e.acme, "h100.1x")
	e.schedule()
	if got := e.instance(in.ID); got.HostID != hostID {
		t.Fatalf("placed on %q, want %s", got.HostID, hostID)
	}
	ct := &countingTransport{base: e.srv.Client().Transport, n: map[string]int{}}
	cli := agentapi.NewClient(e.srv.URL, conn.token, &http.Client{Transport: ct})
	md := metadata.New()
	defer md.Close()
	agent.New(cli, agent.Config{Metadata: md, Interval: 100 * time.Millisecond}) // installs the lock hook

	// The workload: a session token, then the flood.
	h := md.Handler(in.ID)
	treq := httptest.NewRequest(http.MethodPut, metadata.TokenPath, nil)
	treq.Header.Set(metadata.TokenTTLHeader, "3600")
	trec := httptest.NewRecorder()
	h.ServeHTTP(trec, treq)
	tok := trec.Body.String()
	const workers, each = 16, 125
	var mu sync.Mutex
	statuses := map[int]int{}
	var done atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				method := http.MethodPut
				if (w+i)%2 == 1 {
					method = http.MethodDelete
				}
				req := httptest.NewRequest(method, "/v1/scale-in-lock", nil)
				req.Header.Set(metadata.TokenHeader, tok)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				mu.Lock()
				statuses[rec.Code]++
				mu.Unlock()
			}
		})
	}
	// The host meanwhile: a heartbeat and an assignment poll at a time,
	// at most 200 of each, until the flood ends.
	var beats, polls, refused int
	hostDone := make(chan struct{})
	go func() {
		defer close(hostDone)
		for i := 0; i < 200 && !done.Load(); i++ {
			if err := errOf(cli.Heartbeat(ctx, agentapi.HeartbeatRequest{})); err != nil {
				refused++
				t.Errorf("heartbeat %d during the flood: %v", i+1, err)
			} else {
				beats++
			}
			if _, err := cli.Assignments(ctx); err != nil {
				refused++
				t.Errorf("assignment poll %d during the flood: %v", i+1, err)
			} else {
				polls++
			}
			time.Sleep(time.Millisecond)
		}
	}()
	wg.Wait()
	elapsed := time.Since(start)
	done.Store(true)
	<-hostDone

	// 50 s of the attack on the domain clock: a heartbeat every 10 s.
	for i := range 5 {
		e.clock.Advance(10 * time.Second)
		if err := errOf(cli.Heartbeat(ctx, agentapi.HeartbeatRequest{})); err != nil {
			refused++
			t.Errorf("heartbeat at +%ds: %v", 10*(i+1), err)
		} else {
			beats++
		}
	}
	marked, err := service.MarkSilentHosts(ctx, e.store, e.clock.Now(), control.DefaultHeartbeatTimeout)
	if err != nil || len(marked) != 0 {
		t.Fatalf("MarkSilentHosts = %v, %v: the flood got the host declared dead", marked, err)
	}
	if hs, is := e.host(hostID).State, e.instance(in.ID).State; hs != fleet.Schedulable || is == cloud.Lost {
		t.Fatalf("after the flood: host %s, instance %s", hs, is)
	}

	lockCalls := ct.count("lock")
	budget := metadata.LockChangeBurst + int(math.Ceil(elapsed.Seconds()*metadata.LockChangeRate))
	accepted := workers*each - statuses[http.StatusTooManyRequests]
	t.Logf("%d lock requests in %v: %v; %d reached the agent's budget, %d server lock calls (budget %d); "+
		"%d heartbeats and %d assignment polls accepted, %d refused",
		workers*each, elapsed.Round(time.Millisecond), statuses, accepted, lockCalls, budget, beats, polls, refused)
	if accepted > budget || lockCalls > accepted || lockCalls < 1 {
		t.Fatalf("%d changes accepted and %d server calls, want at most %d accepted and no more calls than that", accepted, lockCalls, budget)
	}
	if statuses[http.StatusServiceUnavailable] != 0 {
		t.Errorf("%d lock changes the control plane did not record", statuses[http.StatusServiceUnavailable])
	}
	if beats == 0 || polls == 0 {
		t.Fatalf("%d heartbeats and %d polls sent", beats, polls)
	}
}
