// Package metadata is the instance metadata service the agent runs for its
// workloads: who am I (instance ID, offering, GPU UUIDs, tags, zone, host),
// and is a spot reclaim coming (the instance-action slot).
//
// A caller is identified by where it connects, not by what it says: each
// instance gets its own listener on 127.0.0.1, and the runtime passes that
// listener's URL to the workload as GPUCLOUD_METADATA_URL. Loopback is
// reachable by every local process, so this keeps honest workloads apart
// rather than hostile ones; network namespaces are the stronger boundary.
//
// Routes, all GET (or HEAD), all JSON:
//
//	/v1/instance              the instance's Document; 404 until Set
//	/v1/spot/instance-action  {"action", "time"}; 404 {code: "not_found"} until SetAction
//	/v1/spot/rebalance-recommendation  {"notice_time"}; 404 until SetRebalance
package metadata

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Document is what an instance learns about itself.
type Document struct {
	ID       string   `json:"id"`
	Offering string   `json:"offering"`
	GPUs     []string `json:"gpus"`
	// Tags are the tenant's tags on the instance.
	Tags map[string]string `json:"tags"`
	Zone string            `json:"zone"`
	Host string            `json:"host"`
	// Market is "on_demand" or "spot"; a spot instance also names its
	// spot request, which keeps one identity across relaunches.
	Market        string `json:"market,omitempty"`
	SpotRequestID string `json:"spot_request_id,omitempty"`
}

// The instance actions the control plane may announce.
const (
	// ActionTerminate: the spot instance is reclaimed and will be deleted.
	ActionTerminate = "terminate"
	// ActionStop: the spot instance will be stopped and queued again.
	ActionStop = "stop"
)

// Action is a pending reclaim: what will happen to the instance, and when.
type Action struct {
	Action string    `json:"action"`
	Time   time.Time `json:"time"`
}

// Endpoints serves the metadata of the instances on one host (one endpoint each). It is safe for
// concurrent use.
type Endpoints struct {
	mu        sync.Mutex
	docs      map[string]Document
	actions   map[string]Action
	rebalance map[string]Rebalance
	listeners map[string]*listener
	closed    bool
}

type listener struct {
	addr string
	srv  *http.Server
}

// ErrClosed is returned by Listen after Close.
var ErrClosed = errors.New("metadata server closed")

// New returns a server with no instances and no listeners.
func New() *Endpoints {
	return &Endpoints{docs: map[string]Document{}, actions: map[string]Action{}, rebalance: map[string]Rebalance{},
		listeners: map[string]*listener{}}
}

// Set stores (or replaces) the document of an instance; an empty doc.ID
// becomes id. The document is copied, so the caller may reuse its slices
// and maps.
func (s *Endpoints) Set(id string, doc Document) {
	if doc.ID == "" {
		doc.ID = id
	}
	doc.GPUs = slices.Clone(doc.GPUs)
	if doc.GPUs == nil {
		// An instance without GPUs reads "gpus": [], not null.
		doc.GPUs = []string{}
	}
	doc.Tags = maps.Clone(doc.Tags)
	if doc.Tags == nil {
		doc.Tags = map[string]string{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[id] = doc
}

// SetAction announces a reclaim to the instance, or withdraws it when a is
// nil. The action must be ActionTerminate or ActionStop and carry a time.
func (s *Endpoints) SetAction(id string, a *Action) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a == nil {
		delete(s.actions, id)
		return nil
	}
	if a.Action != ActionTerminate && a.Action != ActionStop {
		return fmt.Errorf("instance %s: unknown instance action %q (want %q or %q)", id, a.Action, ActionTerminate, ActionStop)
	}
	if a.Time.IsZero() {
		return fmt.Errorf("instance %s: instance action %q has no time", id, a.Action)
	}
	s.actions[id] = Action{Action: a.Action, Time: a.Time.UTC()}
	return nil
}

// Rebalance is the early warning that a spot instance's pool is at
// elevated risk of reclaim: a workload may checkpoint or move now, before
// any instance-action arrives.
type Rebalance struct {
	NoticeTime time.Time `json:"notice_time"`
}

// SetRebalance shows a rebalance recommendation to the instance, or
// withdraws it when at is zero.
func (s *Endpoints) SetRebalance(id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at.IsZero() {
		delete(s.rebalance, id)
		return
	}
	s.rebalance[id] = Rebalance{NoticeTime: at.UTC()}
}

// Delete forgets an instance and closes its listener.
func (s *Endpoints) Delete(id string) {
	s.mu.Lock()
	delete(s.docs, id)
	delete(s.actions, id)
	delete(s.rebalance, id)
	l := s.listeners[id]
	delete(s.listeners, id)
	s.mu.Unlock()
	if l != nil {
		_ = l.srv.Close() // the connections are gone either way
	}
}

// Listen opens the instance's own listener on an ephemeral 127.0.0.1 port
// and returns its address ("127.0.0.1:N"). It is idempotent: while the
// listener is open, Listen returns the same address.
func (s *Endpoints) Listen(id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", ErrClosed
	}
	if l := s.listeners[id]; l != nil {
		return l.addr, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("metadata listener for %s: %w", id, err)
	}
	srv := &http.Server{Handler: s.Handler(id), ReadHeaderTimeout: 5 * time.Second}
	l := &listener{addr: ln.Addr().String(), srv: srv}
	s.listeners[id] = l
	go func() { _ = srv.Serve(ln) }() // Serve returns ErrServerClosed on Close
	return l.addr, nil
}

// Close closes every listener; Listen fails afterwards. The documents stay,
// for Handler.
func (s *Endpoints) Close() error {
	s.mu.Lock()
	s.closed = true
	ls := s.listeners
	s.listeners = map[string]*listener{}
	s.mu.Unlock()
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.srv.Close())
	}
	return errors.Join(errs...)
}

// Handler serves the metadata of instance id, whoever asks: the listener
// is what identifies the caller. Listen uses it; tests and other transports
// (a Unix socket) may too.
func (s *Endpoints) Handler(id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body any
		found := false
		switch r.URL.Path {
		case "/v1/instance":
			s.mu.Lock()
			body, found = s.docs[id]
			s.mu.Unlock()
		case "/v1/spot/instance-action":
			s.mu.Lock()
			body, found = s.actions[id]
			s.mu.Unlock()
		case "/v1/spot/rebalance-recommendation":
			s.mu.Lock()
			body, found = s.rebalance[id]
			s.mu.Unlock()
		default:
			writeError(w, http.StatusNotFound, cloud.NotFound, "no such metadata path "+r.URL.Path)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, cloud.Invalid, "metadata is read-only; use GET")
			return
		}
		if !found {
			writeError(w, http.StatusNotFound, cloud.NotFound, "nothing at "+r.URL.Path+" for this instance")
			return
		}
		writeJSON(w, http.StatusOK, body)
	})
}

func writeError(w http.ResponseWriter, status int, code cloud.Code, msg string) {
	writeJSON(w, status, cloud.Error{Code: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// The bodies are our own plain structs; failing to encode one is a
		// programming error, reported without leaking details.
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"encoding failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	// Metadata changes (a reclaim notice appears), so no cache may keep it.
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
