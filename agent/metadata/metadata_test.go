package metadata

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// token gets a session token from a listener.
func token(t *testing.T, addr string) string {
	t.Helper()
	tok, err := Token(t.Context(), nil, "http://"+addr, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// get fetches path from a listener, with a session token, and decodes the
// JSON body.
func get(t *testing.T, addr, method, path string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(TokenHeader, token(t, addr))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if method != http.MethodHead {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("body %q: %v", b, err)
		}
	}
	return resp.StatusCode, m
}

func TestRoutes(t *testing.T) {
	s := New()
	defer s.Close()
	addr, err := s.Listen("i-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("listener on %s, not loopback", addr)
	}
	when := time.Date(2025, 3, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	tests := []struct {
		desc       string
		before     func(t *testing.T)
		method     string
		path       string
		wantStatus int
		want       string // the body re-encoded as compact JSON
	}{
		{desc: "document before Set", path: "/v1/instance", wantStatus: 404, want: `{"code":"not_found","message":"nothing at /v1/instance for this instance"}`},
		{desc: "no action yet", path: "/v1/spot/instance-action", wantStatus: 404, want: `{"code":"not_found","message":"nothing at /v1/spot/instance-action for this instance"}`},
		{
			desc: "document after Set",
			before: func(t *testing.T) {
				s.Set("i-1", Document{Offering: "h100.mig.3g.40gb", GPUs: []string{"MIG-a"}, Tags: map[string]string{"team": "ml"}, Zone: "zone-a", Host: "h1"})
			},
			path: "/v1/instance", wantStatus: 200,
			want: `{"gpus":["MIG-a"],"host":"h1","id":"i-1","offering":"h100.mig.3g.40gb","tags":{"team":"ml"},"zone":"zone-a"}`,
		},
		{
			desc: "action after SetAction, in UTC",
			before: func(t *testing.T) {
				if err := s.SetAction("i-1", &Action{Action: ActionTerminate, Time: when}); err != nil {
					t.Fatal(err)
				}
			},
			path: "/v1/spot/instance-action", wantStatus: 200, want: `{"action":"terminate","time":"2025-03-01T11:00:00Z"}`,
		},
		{desc: "HEAD works", method: http.MethodHead, path: "/v1/instance", wantStatus: 200},
		{desc: "read-only", method: http.MethodPost, path: "/v1/instance", wantStatus: 405, want: `{"code":"invalid_argument","message":"metadata is read-only; use GET"}`},
		{desc: "unknown path", path: "/v1/secrets", wantStatus: 404, want: `{"code":"not_found","message":"no such metadata path /v1/secrets"}`},
		{
			desc:   "withdrawn action",
			before: func(t *testing.T) { _ = s.SetAction("i-1", nil) },
			path:   "/v1/spot/instance-action", wantStatus: 404, want: `{"code":"not_found","message":"nothing at /v1/spot/instance-action for this instance"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if tt.before != nil {
				tt.before(t)
			}
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			status, body := get(t, addr, method, tt.path)
			if status != tt.wantStatus {
				t.Fatalf("status %d, want %d", status, tt.wantStatus)
			}
			if tt.want == "" {
				return
			}
			got, _ := json.Marshal(body)
			if string(got) != tt.want {
				t.Fatalf("body %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestEachInstanceSeesOnlyItself(t *testing.T) {
	s := New()
	defer s.Close()
	addrs := map[string]string{}
	for _, id := range []string{"a", "b"} {
		addr, err := s.Listen(id)
		if err != nil {
			t.Fatal(err)
		}
		addrs[id] = addr
		s.Set(id, Document{Offering: "off-" + id})
	}
	if addrs["a"] == addrs["b"] {
		t.Fatal("two instances share a listener")
	}
	if again, _ := s.Listen("a"); again != addrs["a"] {
		t.Fatalf("Listen is not idempotent: %s then %s", addrs["a"], again)
	}
	if err := s.SetAction("b", &Action{Action: ActionStop, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for id, addr := range addrs {
		_, doc := get(t, addr, http.MethodGet, "/v1/instance")
		if doc["id"] != id || doc["offering"] != "off-"+id {
			t.Fatalf("listener of %s served %v", id, doc)
		}
		status, _ := get(t, addr, http.MethodGet, "/v1/spot/instance-action")
		if want := map[string]int{"a": 404, "b": 200}[id]; status != want {
			t.Fatalf("instance %s action status %d, want %d", id, status, want)
		}
	}
	_, doc := get(t, addrs["a"], http.MethodGet, "/v1/instance")
	if gpus, ok := doc["gpus"].([]any); !ok || len(gpus) != 0 {
		t.Fatalf("gpus %v, want []", doc["gpus"])
	}
	if tags, ok := doc["tags"].(map[string]any); !ok || len(tags) != 0 {
		t.Fatalf("tags %v, want {}", doc["tags"])
	}
}

func TestSetCopies(t *testing.T) {
	s := New()
	defer s.Close()
	addr, _ := s.Listen("i")
	gpus, tags := []string{"GPU-1"}, map[string]string{"k": "v"}
	s.Set("i", Document{GPUs: gpus, Tags: tags})
	gpus[0], tags["k"] = "GPU-changed", "changed"
	_, doc := get(t, addr, http.MethodGet, "/v1/instance")
	if fmt.Sprint(doc["gpus"]) != "[GPU-1]" || fmt.Sprint(doc["tags"]) != "map[k:v]" {
		t.Fatalf("document changed through the caller's slices: %v", doc)
	}
}

func TestSetActionRejects(t *testing.T) {
	s := New()
	tests := []struct {
		desc string
		a    *Action
	}{
		{desc: "unknown action", a: &Action{Action: "reboot", Time: time.Now()}},
		{desc: "no time", a: &Action{Action: ActionTerminate}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if err := s.SetAction("i", tt.a); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestDeleteAndClose(t *testing.T) {
	s := New()
	a, _ := s.Listen("a")
	b, _ := s.Listen("b")
	s.Set("a", Document{})
	s.Delete("a")
	if _, err := http.Get("http://" + a + "/v1/instance"); err == nil {
		t.Fatal("deleted instance's listener still answers")
	}
	if status, _ := get(t, b, http.MethodGet, "/v1/instance"); status != 404 {
		t.Fatalf("other instance: status %d", status)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + b + "/v1/instance"); err == nil {
		t.Fatal("closed server still answers")
	}
	if _, err := s.Listen("c"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Listen after Close: %v", err)
	}
	// A deleted instance can be set up again with a fresh listener.
	s2 := New()
	defer s2.Close()
	if _, err := s2.Listen("x"); err != nil {
		t.Fatal(err)
	}
	s2.Delete("x")
	s2.Set("x", Document{Offering: "again"})
	again, err := s2.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	if _, doc := get(t, again, http.MethodGet, "/v1/instance"); doc["offering"] != "again" {
		t.Fatalf("relistened instance served %v", doc)
	}
}

func TestConcurrentUse(t *testing.T) {
	s := New()
	defer s.Close()
	addr, _ := s.Listen("i")
	tok := token(t, addr)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				s.Set("i", Document{Offering: fmt.Sprint(i)})
				_ = s.SetAction("i", &Action{Action: ActionStop, Time: time.Now()})
				_ = s.SetAction("i", nil)
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/instance", nil)
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set(TokenHeader, tok)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
}
