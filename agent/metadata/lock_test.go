package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// call sends a request with an optional body and returns the status and
// the raw body.
func call(t *testing.T, addr, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(TokenHeader, token(t, addr))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// fakePlane records lock changes as a control plane would.
type fakePlane struct {
	mu    sync.Mutex
	calls []*cloud.ScaleLock
	err   error
	at    time.Time
}

func (f *fakePlane) hook(ctx context.Context, id string, lock *cloud.ScaleLock) (*cloud.ScaleIn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, lock)
	if f.err != nil {
		return nil, f.err
	}
	if lock == nil {
		return &cloud.ScaleIn{Protected: true}, nil
	}
	return &cloud.ScaleIn{Lock: &cloud.ScaleLock{Reason: lock.Reason, At: f.at}}, nil
}

func (f *fakePlane) n() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func TestScaleInLock(t *testing.T) {
	s := New()
	defer s.Close()
	s.SetLockInterval(0) // one change after another, each sent at once
	addr, err := s.Listen("i-1")
	if err != nil {
		t.Fatal(err)
	}
	// Without a control plane the lock cannot be taken.
	if status, body := call(t, addr, http.MethodPut, "/v1/scale-in-lock", ""); status != 503 || !strings.Contains(body, "no control plane") {
		t.Fatalf("PUT without a hook: %d %s", status, body)
	}
	cp := &fakePlane{at: time.Date(2025, 3, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))}
	s.SetLockHook(cp.hook)

	if status, body := call(t, addr, http.MethodGet, "/v1/scale-in-lock", ""); status != 404 {
		t.Fatalf("GET before any lock: %d %s", status, body)
	}
	status, body := call(t, addr, http.MethodPut, "/v1/scale-in-lock", `{"reason": "saving step 1200"}`)
	if want := `{"reason":"saving step 1200","at":"2025-03-01T11:00:00Z"}`; status != 200 || body != want {
		t.Fatalf("PUT: %d %s, want 200 %s", status, body, want)
	}
	if cp.n() != 1 || cp.calls[0] == nil || cp.calls[0].Reason != "saving step 1200" {
		t.Fatalf("the control plane saw %+v", cp.calls)
	}
	if status, got := call(t, addr, http.MethodGet, "/v1/scale-in-lock", ""); status != 200 || got != body {
		t.Fatalf("GET after PUT: %d %s", status, got)
	}
	if l, ok := s.Lock("i-1"); !ok || l.Reason != "saving step 1200" {
		t.Fatalf("Lock = %+v, %v", l, ok)
	}
	// An empty body takes the lock without a reason.
	if status, body := call(t, addr, http.MethodPut, "/v1/scale-in-lock", ""); status != 200 || body != `{"at":"2025-03-01T11:00:00Z"}` {
		t.Fatalf("PUT without body: %d %s", status, body)
	}

	for _, tt := range []struct {
		desc, body string
		status     int
		want       string
	}{
		{"control character", `{"reason": "a\u0007b"}`, 400, "unprintable character U+0007"},
		{"newline", `{"reason": "a\nb"}`, 400, "unprintable character U+000A"},
		{"too long", `{"reason": "` + strings.Repeat("x", 201) + `"}`, 400, "201 bytes long; the limit is 200"},
		{"unknown field", `{"why": "x"}`, 400, "unknown field"},
		{"not JSON", `reason=x`, 400, "not the JSON object"},
		{"two objects", `{} {}`, 400, "data after its JSON object"},
		{"too large", `{"reason": "` + strings.Repeat("x", MaxBodyBytes) + `"}`, 413, "larger than"},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			before := cp.n()
			status, body := call(t, addr, http.MethodPut, "/v1/scale-in-lock", tt.body)
			if status != tt.status || !strings.Contains(body, tt.want) {
				t.Fatalf("%d %s, want %d mentioning %q", status, body, tt.status, tt.want)
			}
			if cp.n() != before {
				t.Fatal("a refused lock reached the control plane")
			}
		})
	}
	// Exactly 200 bytes of printable text, not all ASCII, is a reason.
	reason := strings.Repeat("é", 100)
	if status, body := call(t, addr, http.MethodPut, "/v1/scale-in-lock", `{"reason": "`+reason+`"}`); status != 200 {
		t.Fatalf("200-byte reason: %d %s", status, body)
	}

	// A control plane that fails answers 503 with its message; the lock
	// shown stays the one recorded.
	cp.mu.Lock()
	cp.err = cloud.Errorf(cloud.NotFound, "instance i-1 not found on this host")
	cp.mu.Unlock()
	status, body = call(t, addr, http.MethodDelete, "/v1/scale-in-lock", "")
	if status != 503 || !strings.Contains(body, "instance i-1 not found on this host") || !strings.Contains(body, `"code":"not_found"`) {
		t.Fatalf("DELETE with a failing control plane: %d %s", status, body)
	}
	cp.mu.Lock()
	cp.err = errors.New("connection refused")
	cp.mu.Unlock()
	if status, body := call(t, addr, http.MethodDelete, "/v1/scale-in-lock", ""); status != 503 || !strings.Contains(body, `"code":"unavailable"`) {
		t.Fatalf("DELETE with an unreachable control plane: %d %s", status, body)
	}
	if _, ok := s.Lock("i-1"); !ok {
		t.Fatal("a failed release dropped the lock")
	}
	cp.mu.Lock()
	cp.err = nil
	cp.mu.Unlock()
	if status, body := call(t, addr, http.MethodDelete, "/v1/scale-in-lock", ""); status != 204 || body != "" {
		t.Fatalf("DELETE: %d %q", status, body)
	}
	if last := cp.calls[len(cp.calls)-1]; last != nil {
		t.Fatalf("a release reached the control plane as %+v", last)
	}
	if status, _ := call(t, addr, http.MethodGet, "/v1/scale-in-lock", ""); status != 404 {
		t.Fatalf("GET after DELETE: %d", status)
	}
	if status, _ := call(t, addr, http.MethodPost, "/v1/scale-in-lock", ""); status != 405 {
		t.Fatalf("POST: %d", status)
	}
	// Delete forgets the lock.
	if status, _ := call(t, addr, http.MethodPut, "/v1/scale-in-lock", ""); status != 200 {
		t.Fatal("PUT again")
	}
	s.Delete("i-1")
	if _, ok := s.Lock("i-1"); ok {
		t.Fatal("Delete kept the lock")
	}
}

func TestLoad(t *testing.T) {
	s := New()
	defer s.Close()
	addr, _ := s.Listen("i-1")
	status, body := call(t, addr, http.MethodPut, "/v1/load", `{"gpu_utilization": 0.5}`)
	if status != 409 || !strings.Contains(body, "simulated hosts only") {
		t.Fatalf("PUT on a real host: %d %s", status, body)
	}
	if _, ok := s.Load("i-1"); ok {
		t.Fatal("a real host took a load")
	}
	s.SetSimulated(true)
	if status, _ := call(t, addr, http.MethodGet, "/v1/load", ""); status != 404 {
		t.Fatalf("GET before any load: %d", status)
	}
	if status, body := call(t, addr, http.MethodPut, "/v1/load", `{"gpu_utilization": 0.75}`); status != 200 || body != `{"gpu_utilization":0.75}` {
		t.Fatalf("PUT: %d %s", status, body)
	}
	if v, ok := s.Load("i-1"); !ok || v != 0.75 {
		t.Fatalf("Load = %v, %v", v, ok)
	}
	if status, body := call(t, addr, http.MethodGet, "/v1/load", ""); status != 200 || body != `{"gpu_utilization":0.75}` {
		t.Fatalf("GET: %d %s", status, body)
	}
	for _, bad := range []string{`{"gpu_utilization": 1.5}`, `{"gpu_utilization": -0.1}`, `{}`, ``, `{"cpu": 1}`} {
		if status, body := call(t, addr, http.MethodPut, "/v1/load", bad); status != 400 {
			t.Errorf("PUT %s: %d %s", bad, status, body)
		}
	}
	if v, _ := s.Load("i-1"); v != 0.75 {
		t.Fatalf("a refused load changed it to %v", v)
	}
	if _, ok := s.Load("i-2"); ok {
		t.Fatal("another instance has a load")
	}
	if status, _ := call(t, addr, http.MethodDelete, "/v1/load", ""); status != 405 {
		t.Fatalf("DELETE: %d", status)
	}
	s.Delete("i-1")
	if _, ok := s.Load("i-1"); ok {
		t.Fatal("Delete kept the load")
	}
}

// TestInstanceAction: the notice shows at the market-neutral path as at the
// spot one, with its reason.
func TestInstanceAction(t *testing.T) {
	s := New()
	defer s.Close()
	addr, _ := s.Listen("i-1")
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	if err := s.SetAction("i-1", &Action{Action: ActionTerminate, Time: at, Reason: cloud.ReclaimScaleIn}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/instance-action", "/v1/spot/instance-action"} {
		status, body := call(t, addr, http.MethodGet, path, "")
		var a Action
		if err := json.Unmarshal([]byte(body), &a); status != 200 || err != nil || a.Reason != "scale-in" || a.Action != "terminate" || !a.Time.Equal(at) {
			t.Fatalf("%s: %d %s", path, status, body)
		}
		if status, _ := call(t, addr, http.MethodPut, path, "{}"); status != 405 {
			t.Fatalf("PUT %s: %d", path, status)
		}
	}
}

// TestSyncLock: the lock the control plane holds shows on the endpoint (an
// agent that restarted learns it from its assignments), unless the
// workload changed its lock after the control plane's answer was read.
func TestSyncLock(t *testing.T) {
	s := New()
	defer s.Close()
	s.SetLockInterval(0)
	addr, err := s.Listen("i-1")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	s.SyncLock("i-1", &cloud.ScaleLock{Reason: "saving", At: at}, time.Now())
	if status, body := call(t, addr, http.MethodGet, "/v1/scale-in-lock", ""); status != 200 || body != `{"reason":"saving","at":"2025-03-01T12:00:00Z"}` {
		t.Fatalf("GET after a sync: %d %s", status, body)
	}
	if l, ok := s.Lock("i-1"); !ok || l.Reason != "saving" {
		t.Fatalf("Lock() = %+v, %v", l, ok)
	}
	// The workload releases it; an answer read before that does not bring
	// it back, one read after does clear or set it.
	s.SetLockHook((&fakePlane{at: at}).hook)
	before := time.Now()
	if status, body := call(t, addr, http.MethodDelete, "/v1/scale-in-lock", ""); status != 204 {
		t.Fatalf("DELETE: %d %s", status, body)
	}
	s.SyncLock("i-1", &cloud.ScaleLock{Reason: "saving", At: at}, before)
	if _, ok := s.Lock("i-1"); ok {
		t.Fatal("a stale assignment brought back a released lock")
	}
	s.SyncLock("i-1", &cloud.ScaleLock{Reason: "again", At: at}, time.Now())
	if l, ok := s.Lock("i-1"); !ok || l.Reason != "again" {
		t.Fatalf("a fresh sync: %+v, %v", l, ok)
	}
	s.SyncLock("i-1", nil, time.Now())
	if status, _ := call(t, addr, http.MethodGet, "/v1/scale-in-lock", ""); status != 404 {
		t.Fatalf("GET after the server dropped the lock: %d", status)
	}
}
