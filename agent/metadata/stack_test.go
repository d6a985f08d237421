package metadata

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestStack: GET /v1/stack needs a session token, is 404 not_found while
// the instance is in no stack's job, then answers what SetStack said (a
// copy: the caller's later changes do not show), in the document too;
// SetStack(nil) and Delete withdraw it; another instance's endpoint never
// shows it.
func TestStack(t *testing.T) {
	s := New()
	defer s.Close()
	addr, err := s.Listen("i-1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Listen("i-2")
	if err != nil {
		t.Fatal(err)
	}
	s.Set("i-1", Document{Offering: "h100.8x"})
	s.Set("i-2", Document{Offering: "h100.8x"})

	resp, err := http.Get("http://" + addr + "/v1/stack")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: %d, want 401", resp.StatusCode)
	}
	if code, body := get(t, addr, http.MethodGet, "/v1/stack"); code != 404 || body["code"] != "not_found" {
		t.Fatalf("in no stack: %d %v", code, body)
	}
	if _, doc := get(t, addr, http.MethodGet, "/v1/instance"); doc["stack"] != nil {
		t.Fatalf("document of an instance in no stack has %v", doc["stack"])
	}

	st := &Stack{Stack: "llm", Resource: "worker", Rank: 1, WorldSize: 2,
		Peers: []Peer{{Rank: 0, InstanceID: "i-0"}, {Rank: 1, InstanceID: "i-1", Address: "10.0.0.3"}},
		Env:   map[string]string{"MASTER_PORT": "29500", "RANK": "1"}}
	s.SetStack("i-1", st)
	st.Peers[0].Address, st.Env["RANK"] = "changed", "9"
	want := `{"env":{"MASTER_PORT":"29500","RANK":"1"},"peers":[{"address":"","instance_id":"i-0","rank":0},` +
		`{"address":"10.0.0.3","instance_id":"i-1","rank":1}],"rank":1,"resource":"worker","stack":"llm","world_size":2}`
	code, body := get(t, addr, http.MethodGet, "/v1/stack")
	if code != 200 || compact(t, body) != want {
		t.Fatalf("stack: %d %s, want %s", code, compact(t, body), want)
	}
	_, doc := get(t, addr, http.MethodGet, "/v1/instance")
	if got := compact(t, doc["stack"]); got != want {
		t.Fatalf("document's stack %s, want %s", got, want)
	}
	if code, _ := get(t, other, http.MethodGet, "/v1/stack"); code != 404 {
		t.Fatalf("another instance's endpoint: %d, want 404", code)
	}
	// A later SetStack replaces it (a peer's address became known); nil
	// peers and env read as [] and {}.
	s.SetStack("i-1", &Stack{Stack: "llm", Resource: "worker", Rank: 1, WorldSize: 2})
	if _, body := get(t, addr, http.MethodGet, "/v1/stack"); compact(t, body) !=
		`{"env":{},"peers":[],"rank":1,"resource":"worker","stack":"llm","world_size":2}` {
		t.Fatalf("replaced stack %s", compact(t, body))
	}
	// Set keeps the stack and ignores a Stack of its own.
	s.Set("i-1", Document{Offering: "h100.8x", Stack: &Stack{Stack: "other"}})
	if _, doc := get(t, addr, http.MethodGet, "/v1/instance"); doc["stack"].(map[string]any)["stack"] != "llm" {
		t.Fatalf("document's stack after Set: %v", doc["stack"])
	}
	if code, _ := get(t, addr, http.MethodPut, "/v1/stack"); code != http.StatusMethodNotAllowed {
		t.Fatalf("PUT: %d, want 405", code)
	}
	s.SetStack("i-1", nil)
	if code, _ := get(t, addr, http.MethodGet, "/v1/stack"); code != 404 {
		t.Fatalf("withdrawn: %d, want 404", code)
	}
	s.SetStack("i-1", st)
	s.Delete("i-1")
	code, _ = serve(t, s, "i-1", "/v1/stack")
	if code != 404 {
		t.Fatalf("after Delete: %d, want 404", code)
	}
}

// serve sends GET path to instance id's Handler, with a token.
func serve(t *testing.T, s *Endpoints, id, path string) (int, string) {
	t.Helper()
	h := s.Handler(id)
	req := httptest.NewRequest(http.MethodPut, TokenPath, nil)
	req.Header.Set(TokenTTLHeader, "60")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("token: %d %s", rec.Code, rec.Body)
	}
	req = httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set(TokenHeader, rec.Body.String())
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func compact(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
