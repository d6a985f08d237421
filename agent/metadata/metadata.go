// Package metadata is the instance metadata service the agent runs for its
// workloads: who am I (instance ID, offering, GPU UUIDs, tags, zone, host),
// is a reclaim or scale-in coming (the instance-action slot), who are my
// peers when the instance is one of a stack's job (the stack slot), and
// the two things a workload tells its host: that it must not be scaled in right now
// (its completion lock) and, on a simulated host, how busy its GPUs are.
//
// A caller is identified by where it connects, not by what it says:
// Handler(id) serves instance id only, and the runtime puts it where only
// that instance's workload can reach it. The container runtime serves it
// inside the instance's own network namespace, at 169.254.169.254:80, which
// nothing else on the host reaches; the process runtime (a single-tenant
// development mode) gets a listener on 127.0.0.1 per instance (Listen),
// which any local process can reach.
//
// Every request needs a session token, as in AWS's IMDSv2: PUT /v1/token
// with the header X-Metadata-Token-TTL-Seconds (1 to 21600) answers a token
// (text/plain), which later requests send in X-Metadata-Token. A request
// without a valid token is 401. A token is good for its TTL, for the
// instance it was issued to and only while the agent that issued it runs:
// a workload asks for a new one when it gets a 401. A PUT is what a
// server-side request forgery through the workload (an open proxy, a URL
// fetcher) rarely can send, and one with X-Forwarded-For (a proxy) is
// refused, so that such a forgery cannot read the instance's metadata.
//
//	TOKEN=$(curl -s -X PUT -H "X-Metadata-Token-TTL-Seconds: 3600" "$GPUCLOUD_METADATA_URL/v1/token")
//	curl -s -H "X-Metadata-Token: $TOKEN" "$GPUCLOUD_METADATA_URL/v1/instance"
//
// Routes, all JSON but the token; GET also answers HEAD:
//
//	PUT /v1/token                 a session token (text/plain) valid for the
//	                              seconds X-Metadata-Token-TTL-Seconds says
//	                              (1 to 21600; 400 otherwise), which the
//	                              answer's header repeats; 403 with
//	                              X-Forwarded-For
//	GET /v1/instance              the instance's Document; 404 until Set
//	GET /v1/stack                 the instance's place in its stack's job
//	                              (Stack): {"stack", "resource", "rank",
//	                              "world_size", "peers": [{"rank",
//	                              "instance_id", "address"}], "env"}, the
//	                              document's "stack" too; a peer's address
//	                              is "" until known, and env has
//	                              MASTER_ADDR once rank 0's is. 404
//	                              {code: "not_found"} when the instance is
//	                              in no stack's job
//	GET /v1/instance-action       {"action", "time", "reason"}: the instance
//	                              will be stopped or terminated at time, for
//	                              a spot reclaim ("capacity", "price") or a
//	                              group's scale-in ("scale-in", "idle",
//	                              "price-ratio"), whatever its market; 404
//	                              {code: "not_found"} until SetAction
//	GET /v1/spot/instance-action  the same, at the path spot workloads know
//	GET /v1/spot/rebalance-recommendation  {"notice_time"}; 404 until SetRebalance
//	GET /v1/scale-in-lock         the completion lock {"reason", "at"}; 404 when
//	                              the workload holds none
//	PUT /v1/scale-in-lock         take the lock; optional body {"reason": "..."}
//	                              (printable, at most 200 bytes). 200 with the
//	                              lock once the control plane has recorded it;
//	                              503 when it could not (retry); 409 when a
//	                              later DELETE superseded it before it was
//	                              sent; 429 with Retry-After over the
//	                              instance's budget of lock changes (lock.go)
//	DELETE /v1/scale-in-lock      release it; 204 once recorded, 503, 409 and
//	                              429 as above
//	GET /v1/load                  {"gpu_utilization"} the workload set; 404 until set
//	PUT /v1/load                  {"gpu_utilization": 0..1}: the GPU load of a
//	                              SIMULATED host, which runs no real kernels,
//	                              reported as the instance's GPU utilization;
//	                              409 on a host with real GPUs, whose
//	                              utilization the driver measures
//
// Request bodies are JSON objects of at most MaxBodyBytes without unknown
// fields; any Content-Type is accepted, so that `curl -d` works.
package metadata

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

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
	// Stack is the instance's place in its stack's job, as GET /v1/stack
	// answers it; absent when the instance is in none. It is what
	// SetStack says: Set ignores this field.
	Stack *Stack `json:"stack,omitempty"`
}

// Stack is an instance's place in its stack's job (the instances of one
// stack that train together): what a launcher needs to find its peers.
type Stack struct {
	// Stack is the stack's name, Resource the template resource the
	// instance comes from.
	Stack    string `json:"stack"`
	Resource string `json:"resource"`
	// Rank is the instance's rank in the job (0 first), WorldSize the
	// job's size in instances.
	Rank      int `json:"rank"`
	WorldSize int `json:"world_size"`
	// Peers are the job's instances, this one included, by rank.
	Peers []Peer `json:"peers"`
	// Env is the environment torchrun and NCCL's launchers expect:
	// MASTER_ADDR (rank 0's address, absent until known), MASTER_PORT,
	// WORLD_SIZE, RANK, NODE_RANK and NNODES.
	Env map[string]string `json:"env"`
}

// Peer is one instance of a stack's job.
type Peer struct {
	Rank       int    `json:"rank"`
	InstanceID string `json:"instance_id"`
	// Address is where the peer is reached: empty until it runs and its
	// host reported its address.
	Address string `json:"address"`
}

// clone copies a Stack, with [] and {} for nil peers and env.
func (st Stack) clone() Stack {
	st.Peers = slices.Clone(st.Peers)
	if st.Peers == nil {
		st.Peers = []Peer{}
	}
	st.Env = maps.Clone(st.Env)
	if st.Env == nil {
		st.Env = map[string]string{}
	}
	return st
}

// The instance actions the control plane may announce.
const (
	// ActionTerminate: the spot instance is reclaimed and will be deleted.
	ActionTerminate = "terminate"
	// ActionStop: the spot instance will be stopped and queued again.
	ActionStop = "stop"
)

// Action is a pending reclaim or scale-in: what will happen to the
// instance, when, and why (cloud.Interruption's reason: "capacity" or
// "price" for a spot reclaim, "scale-in", "idle" or "price-ratio" for a
// group's scale-in; empty when the control plane did not say).
type Action struct {
	Action string    `json:"action"`
	Time   time.Time `json:"time"`
	Reason string    `json:"reason,omitempty"`
}

// LockHook records a completion lock with the control plane: lock is the
// lock the workload takes, nil to release it. It returns the instance's
// scale-in protection as the control plane recorded it. The agent installs
// it (SetLockHook); it must honour ctx.
type LockHook func(ctx context.Context, instanceID string, lock *cloud.ScaleLock) (*cloud.ScaleIn, error)

// Limits of the writable routes.
const (
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes = 4 << 10
	// MaxLockReason bounds a lock's reason, in bytes.
	MaxLockReason = 200
	// LockTimeout bounds how long a lock change waits for the control
	// plane before it answers 503.
	LockTimeout = 15 * time.Second
)

// Endpoints serves the metadata of the instances on one host (one endpoint each). It is safe for
// concurrent use.
type Endpoints struct {
	mu        sync.Mutex
	docs      map[string]Document
	stacks    map[string]Stack
	actions   map[string]Action
	rebalance map[string]Rebalance
	locks     map[string]cloud.ScaleLock
	loads     map[string]float64
	listeners map[string]*listener
	closed    bool
	simulated bool
	lockHook  LockHook
	// lockStates holds each instance's lock changes: what its workload
	// asked for last, the call to the control plane that carries it, and
	// the budget of changes left to it (lock.go).
	lockStates map[string]*lockState
	// lockInterval is the least time between two lock calls of one
	// instance (SetLockInterval).
	lockInterval time.Duration
	// lockChanged is when the control plane last answered a change of
	// each instance's lock made here (SyncLock ignores what it said
	// before that).
	lockChanged map[string]time.Time
	// key signs session tokens; salts holds a random value per instance
	// that its tokens are bound to, dropped by Delete.
	key   []byte
	salts map[string][]byte
	now   func() time.Time
}

type listener struct {
	addr string
	srv  *http.Server
}

// ErrClosed is returned by Listen after Close.
var ErrClosed = errors.New("metadata server closed")

// New returns a server with no instances and no listeners.
func New() *Endpoints {
	return &Endpoints{docs: map[string]Document{}, stacks: map[string]Stack{}, actions: map[string]Action{}, rebalance: map[string]Rebalance{},
		locks: map[string]cloud.ScaleLock{}, loads: map[string]float64{}, lockStates: map[string]*lockState{}, lockInterval: DefaultLockInterval, lockChanged: map[string]time.Time{},
		listeners: map[string]*listener{}, key: randomBytes(32), salts: map[string][]byte{}, now: time.Now}
}

// SetLockHook installs the hook that records completion locks with the
// control plane. Without one, PUT and DELETE /v1/scale-in-lock answer 503.
func (s *Endpoints) SetLockHook(h LockHook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lockHook = h
}

// SetSimulated says whether the host's GPUs are simulated: only then may a
// workload set its GPU load (PUT /v1/load).
func (s *Endpoints) SetSimulated(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.simulated = on
}

// Load returns the GPU load (0..1) the instance's workload set with PUT
// /v1/load, and whether it set one.
func (s *Endpoints) Load(id string) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.loads[id]
	return v, ok
}

// Lock returns the completion lock the instance's workload holds, as the
// control plane recorded it, and whether it holds one.
func (s *Endpoints) Lock(id string) (cloud.ScaleLock, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.locks[id]
	return l, ok
}

// Set stores (or replaces) the document of an instance; an empty doc.ID
// becomes id. The document is copied, so the caller may reuse its slices
// and maps. Its Stack is ignored: SetStack sets it.
func (s *Endpoints) Set(id string, doc Document) {
	if doc.ID == "" {
		doc.ID = id
	}
	doc.Stack = nil
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

// SetStack shows the instance its place in its stack's job (GET
// /v1/stack, and the document's "stack"), or withdraws it when st is nil.
// The stack is copied.
func (s *Endpoints) SetStack(id string, st *Stack) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == nil {
		delete(s.stacks, id)
		return
	}
	s.stacks[id] = st.clone()
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
	s.actions[id] = Action{Action: a.Action, Time: a.Time.UTC(), Reason: a.Reason}
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
	delete(s.stacks, id)
	delete(s.actions, id)
	delete(s.rebalance, id)
	delete(s.locks, id)
	delete(s.loads, id)
	s.forgetLock(id)
	delete(s.lockChanged, id)
	delete(s.salts, id)
	l := s.listeners[id]
	delete(s.listeners, id)
	s.mu.Unlock()
	if l != nil {
		_ = l.srv.Close() // the connections are gone either way
	}
}

// Listen opens the instance's own listener on an ephemeral 127.0.0.1 port
// and returns its address ("127.0.0.1:N"). It is idempotent: while the
// listener is open, Listen returns the same address. It is for workloads
// in the host's network namespace (the process runtime); every local
// process can connect to it, and needs a session token as every caller
// does. A runtime that gives each workload a network namespace serves
// Handler there instead, and nothing listens on the host.
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

// Handler serves the metadata of instance id to whoever holds one of its
// session tokens: where the handler is served is what identifies the
// caller (Listen; the container runtime serves it inside the instance's
// network namespace).
func (s *Endpoints) Handler(id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := r.Method
		if method == http.MethodHead {
			method = http.MethodGet
		}
		if r.URL.Path == TokenPath {
			s.issueToken(w, r, id)
			return
		}
		if !s.validToken(id, r.Header.Get(TokenHeader)) {
			msg := "this endpoint needs a session token: PUT " + TokenPath + " with " + TokenTTLHeader + ", then send it in " + TokenHeader
			if r.Header.Get(TokenHeader) != "" {
				msg = "the session token is not valid (expired, or not this instance's): PUT " + TokenPath + " for a new one"
			}
			writeError(w, http.StatusUnauthorized, cloud.Unauthenticated, msg)
			return
		}
		switch r.URL.Path {
		case "/v1/instance", "/v1/stack", "/v1/instance-action", "/v1/spot/instance-action", "/v1/spot/rebalance-recommendation":
			if method != http.MethodGet {
				w.Header().Set("Allow", "GET, HEAD")
				writeError(w, http.StatusMethodNotAllowed, cloud.Invalid, "metadata is read-only; use GET")
				return
			}
			s.read(w, r, id)
		case "/v1/scale-in-lock":
			switch method {
			case http.MethodGet:
				s.read(w, r, id)
			case http.MethodPut, http.MethodDelete:
				s.changeLock(w, r, id)
			default:
				w.Header().Set("Allow", "GET, HEAD, PUT, DELETE")
				writeError(w, http.StatusMethodNotAllowed, cloud.Invalid, "use GET to read the scale-in lock, PUT to take it, DELETE to release it")
			}
		case "/v1/load":
			switch method {
			case http.MethodGet:
				s.read(w, r, id)
			case http.MethodPut:
				s.setLoad(w, r, id)
			default:
				w.Header().Set("Allow", "GET, HEAD, PUT")
				writeError(w, http.StatusMethodNotAllowed, cloud.Invalid, "use GET to read the simulated GPU load, PUT to set it")
			}
		default:
			writeError(w, http.StatusNotFound, cloud.NotFound, "no such metadata path "+r.URL.Path)
		}
	})
}

// load is the body of GET and PUT /v1/load.
type load struct {
	GPUUtilization *float64 `json:"gpu_utilization"`
}

// read answers a GET of one of the instance's slots.
func (s *Endpoints) read(w http.ResponseWriter, r *http.Request, id string) {
	var body any
	found := false
	s.mu.Lock()
	switch r.URL.Path {
	case "/v1/instance":
		var doc Document
		if doc, found = s.docs[id]; found {
			if st, ok := s.stacks[id]; ok {
				st = st.clone()
				doc.Stack = &st
			}
		}
		body = doc
	case "/v1/stack":
		var st Stack
		if st, found = s.stacks[id]; found {
			body = st.clone()
		}
	case "/v1/instance-action", "/v1/spot/instance-action":
		body, found = s.actions[id]
	case "/v1/spot/rebalance-recommendation":
		body, found = s.rebalance[id]
	case "/v1/scale-in-lock":
		body, found = s.locks[id]
	case "/v1/load":
		var v float64
		v, found = s.loads[id]
		body = load{GPUUtilization: &v}
	}
	s.mu.Unlock()
	if !found && r.URL.Path == "/v1/stack" {
		writeError(w, http.StatusNotFound, cloud.NotFound, "this instance is in no stack's job")
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, cloud.NotFound, "nothing at "+r.URL.Path+" for this instance")
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// setLoad handles PUT /v1/load on a simulated host.
func (s *Endpoints) setLoad(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	simulated := s.simulated
	s.mu.Unlock()
	if !simulated {
		writeError(w, http.StatusConflict, cloud.Conflict, "this host has real GPUs: the driver measures their utilization, "+
			"so a workload cannot set it; PUT /v1/load is for simulated hosts only")
		return
	}
	var req load
	if !decode(w, r, &req, false) {
		return
	}
	v := req.GPUUtilization
	if v == nil || math.IsNaN(*v) || *v < 0 || *v > 1 {
		writeError(w, http.StatusBadRequest, cloud.Invalid, `want {"gpu_utilization": N} with N from 0 to 1`)
		return
	}
	s.mu.Lock()
	s.loads[id] = *v
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, load{GPUUtilization: v})
}

// codeUnavailable is the code of a 503: the control plane could not be
// reached or refused the change; the workload should retry.
const codeUnavailable cloud.Code = "unavailable"

// decode reads a JSON object body of at most MaxBodyBytes without unknown
// fields into v, or answers the error and returns false. An empty body is
// accepted when optional.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeError(w, http.StatusRequestEntityTooLarge, cloud.Invalid, fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes))
		} else {
			writeError(w, http.StatusBadRequest, cloud.Invalid, "read the body: "+err.Error())
		}
		return false
	}
	if len(b) == 0 && optional {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, cloud.Invalid, "the body is not the JSON object this path takes: "+err.Error())
		return false
	}
	if err := dec.Decode(&json.RawMessage{}); !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, cloud.Invalid, "the body has data after its JSON object")
		return false
	}
	return true
}

// checkReason returns what is wrong with a lock's reason, or "".
func checkReason(s string) string {
	if len(s) > MaxLockReason {
		return fmt.Sprintf("reason is %d bytes long; the limit is %d", len(s), MaxLockReason)
	}
	if !utf8.ValidString(s) {
		return "reason is not valid UTF-8"
	}
	for _, c := range s {
		if !unicode.IsPrint(c) {
			return fmt.Sprintf("reason contains the unprintable character %U", c)
		}
	}
	return ""
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
