package metadata

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// answer is one answer of the handler.
type answer struct {
	status int
	header http.Header
	body   string
}

// serveReq runs one request through h with the session token tok.
func serveReq(h http.Handler, method, path, body, tok string) answer {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if tok != "" {
		req.Header.Set(TokenHeader, tok)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{status: rec.Code, header: rec.Header(), body: strings.TrimSpace(rec.Body.String())}
}

// sessionToken asks h for a session token.
func sessionToken(t *testing.T, h http.Handler) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodPut, TokenPath, nil)
	req.Header.Set(TokenTTLHeader, "3600")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("token: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// frozen gives s a clock that moves only when the test advances it.
func frozen(s *Endpoints) func(time.Duration) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	return func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
}

func TestLockBucket(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := bucket{tokens: 3, at: start}
	for i, step := range []struct {
		at   time.Duration // since the start
		want time.Duration // what take answers
	}{
		{0, 0}, {0, 0}, {0, 0}, // the burst
		{0, 2 * time.Second},           // empty: one token at rate 0.5/s is 2 s away
		{time.Second, time.Second},     // half a token back
		{2 * time.Second, 0},           // a whole one
		{time.Second, 2 * time.Second}, // a clock that steps back refills nothing
		{time.Hour, 0},                 // refilled, but to the burst only
		{time.Hour, 0}, {time.Hour, 0}, // two more of the three
		{time.Hour, 2 * time.Second},                         // and no more
		{time.Hour + 1500*time.Millisecond, time.Second / 2}, // three quarters of a token
	} {
		if got := b.take(start.Add(step.at), 0.5, 3); got != step.want {
			t.Fatalf("step %d at %v: take = %v, want %v", i, step.at, got, step.want)
		}
	}
}

// TestLockChangeBudget: each instance has its own budget of lock changes;
// a change over it is answered 429 with Retry-After and reaches nobody,
// and a refused request (a bad body, no control plane) spends none.
func TestLockChangeBudget(t *testing.T) {
	s := New()
	defer s.Close()
	advance := frozen(s)
	s.SetLockInterval(0)
	h1, h2 := s.Handler("i-1"), s.Handler("i-2")
	tok1, tok2 := sessionToken(t, h1), sessionToken(t, h2)
	// Without a control plane nothing is spent.
	for range LockChangeBurst + 1 {
		if a := serveReq(h1, http.MethodPut, "/v1/scale-in-lock", "", tok1); a.status != 503 {
			t.Fatalf("PUT without a hook: %d %s", a.status, a.body)
		}
	}
	cp := &fakePlane{at: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.SetLockHook(cp.hook)
	for range LockChangeBurst + 1 {
		if a := serveReq(h1, http.MethodPut, "/v1/scale-in-lock", `{"reason": 7}`, tok1); a.status != 400 {
			t.Fatalf("a bad body: %d %s", a.status, a.body)
		}
	}
	for _, step := range []struct {
		desc    string
		h       http.Handler
		tok     string
		method  string
		advance time.Duration
		status  int
		retry   string // Retry-After of a 429
		calls   int    // the hook's calls after the step
	}{
		{"the burst's first", h1, tok1, http.MethodPut, 0, 200, "", 1},
		{"the burst's last", h1, tok1, http.MethodDelete, 0, 204, "", LockChangeBurst},
		{"over the budget", h1, tok1, http.MethodPut, 0, 429, "1", LockChangeBurst},
		{"over the budget, a DELETE", h1, tok1, http.MethodDelete, 0, 429, "1", LockChangeBurst},
		{"another instance has its own budget", h2, tok2, http.MethodPut, 0, 200, "", LockChangeBurst + 1},
		{"half a token later, still over", h1, tok1, http.MethodPut, 500 * time.Millisecond, 429, "1", LockChangeBurst + 1},
		{"a token later", h1, tok1, http.MethodPut, 500 * time.Millisecond, 200, "", LockChangeBurst + 2},
		{"and that one is spent", h1, tok1, http.MethodPut, 0, 429, "1", LockChangeBurst + 2},
	} {
		advance(step.advance)
		n := 1
		if step.desc == "the burst's last" {
			n = LockChangeBurst - 1 // the rest of the burst, the last one a DELETE
		}
		var a answer
		for i := range n {
			method := step.method
			if i < n-1 {
				method = http.MethodPut
			}
			a = serveReq(step.h, method, "/v1/scale-in-lock", "", step.tok)
		}
		if a.status != step.status || a.header.Get("Retry-After") != step.retry || cp.n() != step.calls {
			t.Fatalf("%s: %d (Retry-After %q) %s, %d calls; want %d (%q), %d calls",
				step.desc, a.status, a.header.Get("Retry-After"), a.body, cp.n(), step.status, step.retry, step.calls)
		}
		if a.status == 429 {
			var e cloud.Error
			if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.Code != cloud.RateLimited || !strings.Contains(e.Message, "retry in 1 s") {
				t.Fatalf("%s: body %s", step.desc, a.body)
			}
		}
	}
	// Reading the lock is never limited.
	if a := serveReq(h1, http.MethodGet, "/v1/scale-in-lock", "", tok1); a.status != 200 {
		t.Fatalf("GET over the budget: %d %s", a.status, a.body)
	}
	// Forgetting the instance forgets its budget with it.
	s.Delete("i-1")
	h1 = s.Handler("i-1")
	if a := serveReq(h1, http.MethodPut, "/v1/scale-in-lock", "", sessionToken(t, h1)); a.status != 200 {
		t.Fatalf("PUT after Delete: %d %s", a.status, a.body)
	}
}

// blockingPlane is a control plane whose calls wait until the test lets
// them return, so that the test knows which changes a call carries.
type blockingPlane struct {
	fakePlane
	entered chan struct{} // a call started
	release chan struct{} // let one call return
}

func newBlockingPlane() *blockingPlane {
	return &blockingPlane{fakePlane: fakePlane{at: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		entered: make(chan struct{}, 16), release: make(chan struct{}, 16)}
}

func (b *blockingPlane) hook(ctx context.Context, id string, lock *cloud.ScaleLock) (*cloud.ScaleIn, error) {
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.fakePlane.hook(ctx, id, lock)
}

// waitFor waits until ok holds, polling at most 5,000 times, 1 ms apart.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for range 5000 {
		if ok() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("still waiting for %s", what)
}

// gen is how many changes instance id's workload has asked for.
func (s *Endpoints) gen(id string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.lockStates[id]; st != nil {
		return st.gen
	}
	return 0
}

// TestLockCoalescing: the changes a workload makes while a call is in
// flight are sent in one call, with the latest of them; each is answered
// from that call, and one a later change superseded is a conflict.
func TestLockCoalescing(t *testing.T) {
	type change struct {
		method, reason string
		status         int    // its answer
		want           string // in its body
	}
	put := func(reason string, status int, want string) change {
		return change{http.MethodPut, reason, status, want}
	}
	del := func(status int, want string) change { return change{http.MethodDelete, "", status, want} }
	for _, c := range []struct {
		name    string
		changes []change
		// sent is the lock the second call carries ("-" for a release).
		sent string
	}{
		{"PUTs: the last reason is sent, every PUT holds the lock", []change{
			put("a", 200, `"reason":"c"`), put("b", 200, `"reason":"c"`), put("c", 200, `"reason":"c"`)}, "c"},
		{"a PUT then a DELETE: released, the PUT superseded", []change{
			put("a", 409, "a later DELETE"), del(204, "")}, "-"},
		{"a DELETE then a PUT: held, the DELETE superseded", []change{
			del(409, "a later PUT"), put("x", 200, `"reason":"x"`)}, "x"},
		{"alternating, ending released", []change{
			put("1", 409, "later DELETE"), del(204, ""), put("2", 409, "later DELETE"), del(204, ""),
			put("3", 409, "later DELETE"), del(204, "")}, "-"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := New()
			defer s.Close()
			s.SetLockInterval(0)
			cp := newBlockingPlane()
			s.SetLockHook(cp.hook)
			h := s.Handler("i-1")
			tok := sessionToken(t, h)
			// The first change goes out at once and holds the call.
			first := make(chan answer, 1)
			go func() { first <- serveReq(h, http.MethodPut, "/v1/scale-in-lock", `{"reason": "first"}`, tok) }()
			<-cp.entered
			// The changes made meanwhile, in order, each waiting.
			answers := make([]chan answer, len(c.changes))
			for i, ch := range c.changes {
				answers[i] = make(chan answer, 1)
				body := ""
				if ch.method == http.MethodPut {
					body = `{"reason": "` + ch.reason + `"}`
				}
				go func() { answers[i] <- serveReq(h, ch.method, "/v1/scale-in-lock", body, tok) }()
				waitFor(t, "change "+ch.method+" "+ch.reason, func() bool { return s.gen("i-1") == uint64(i+2) })
			}
			cp.release <- struct{}{}
			if a := <-first; a.status != 200 || !strings.Contains(a.body, `"reason":"first"`) {
				t.Fatalf("the first change: %d %s", a.status, a.body)
			}
			<-cp.entered
			cp.release <- struct{}{}
			for i, ch := range c.changes {
				if a := <-answers[i]; a.status != ch.status || !strings.Contains(a.body, ch.want) {
					t.Errorf("change %d (%s %s): %d %s, want %d with %q", i, ch.method, ch.reason, a.status, a.body, ch.status, ch.want)
				}
			}
			cp.mu.Lock()
			calls := cp.calls
			cp.mu.Unlock()
			sent := "-"
			if last := calls[len(calls)-1]; last != nil {
				sent = last.Reason
			}
			if len(calls) != 2 || sent != c.sent {
				t.Fatalf("%d calls, the last sending %q; want 2, the second sending %q", len(calls), sent, c.sent)
			}
			if _, held := s.Lock("i-1"); held != (c.sent != "-") {
				t.Fatalf("the endpoint shows held=%v after sending %q", held, c.sent)
			}
		})
	}
}

// TestLockInterval: after a call, the instance's next one waits for the
// lock interval; the changes made meanwhile wait with it, and fail at once
// when the instance is forgotten.
func TestLockInterval(t *testing.T) {
	s := New()
	defer s.Close()
	s.SetLockInterval(time.Hour)
	cp := &fakePlane{}
	s.SetLockHook(cp.hook)
	h := s.Handler("i-1")
	tok := sessionToken(t, h)
	if a := serveReq(h, http.MethodPut, "/v1/scale-in-lock", "", tok); a.status != 200 {
		t.Fatalf("the first PUT: %d %s", a.status, a.body)
	}
	waiting := make(chan answer, 2)
	go func() { waiting <- serveReq(h, http.MethodDelete, "/v1/scale-in-lock", "", tok) }()
	waitFor(t, "the DELETE", func() bool { return s.gen("i-1") == 2 })
	go func() { waiting <- serveReq(h, http.MethodPut, "/v1/scale-in-lock", "", tok) }()
	waitFor(t, "the second PUT", func() bool { return s.gen("i-1") == 3 })
	if n := cp.n(); n != 1 {
		t.Fatalf("%d calls within the interval, want 1", n)
	}
	s.Delete("i-1")
	for range 2 {
		if a := <-waiting; a.status != 503 || !strings.Contains(a.body, "gone from this host") {
			t.Fatalf("a change waiting when its instance went: %d %s", a.status, a.body)
		}
	}
	if n := cp.n(); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
}

// TestLockFlood is the attack of issue 21 on one endpoint: 16 connections
// PUT and DELETE the lock 2,000 times. The budget takes LockChangeBurst
// of them (the clock stands still), the rest are answered 429, and the
// control plane sees no more calls than the budget let through (fewer:
// the changes within one lock interval, the default, share a call).
func TestLockFlood(t *testing.T) {
	s := New()
	defer s.Close()
	frozen(s)
	cp := &fakePlane{}
	s.SetLockHook(cp.hook)
	h := s.Handler("i-1")
	tok := sessionToken(t, h)
	const workers, each = 16, 125
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				method := http.MethodPut
				if (w+i)%2 == 1 {
					method = http.MethodDelete
				}
				a := serveReq(h, method, "/v1/scale-in-lock", "", tok)
				mu.Lock()
				statuses[a.status]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	accepted := statuses[200] + statuses[204] + statuses[409]
	t.Logf("%d requests: %v; %d control plane calls", workers*each, statuses, cp.n())
	if accepted != LockChangeBurst || statuses[429] != workers*each-LockChangeBurst || cp.n() < 1 || cp.n() > LockChangeBurst {
		t.Fatalf("answers %v and %d calls; want %d accepted, the rest 429, at most %d calls",
			statuses, cp.n(), LockChangeBurst, LockChangeBurst)
	}
}
