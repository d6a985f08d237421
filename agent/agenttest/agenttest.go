// Package agenttest is an in-memory control plane for agent tests: it
// implements the agent's Server interface the way the real server behaves
// on the agent protocol, records every call, and lets tests set the
// assignments and make calls fail.
//
// Every request and answer goes through JSON, as on the wire, so that a
// test sees exactly what the server would, and the agent cannot share
// memory with the test's assignments.
package agenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// The operations failures can be injected into: the Server method names.
const (
	OpJoin           = "Join"
	OpHeartbeat      = "Heartbeat"
	OpAssignments    = "Assignments"
	OpReportStatus   = "ReportStatus"
	OpAppendLogs     = "AppendLogs"
	OpReportMetrics  = "ReportMetrics"
	OpSetScaleInLock = "SetScaleInLock"
	OpNetworks       = "Networks"
)

// MaxLogChunk is the most output one AppendLogs call may carry, as on the
// real server.
const MaxLogChunk = 1 << 20

var knownOps = []string{OpJoin, OpHeartbeat, OpAssignments, OpReportStatus, OpAppendLogs, OpReportMetrics, OpSetScaleInLock, OpNetworks, OpGone}

// ControlPlane is the fake control plane. It is safe for concurrent use.
//
// Like the real server it answers a report for an instance that has no
// assignment with a not_found error, refuses unknown phases, an exited
// report without exit code and log chunks over MaxLogChunk, and releases an instance when it reports a
// terminal phase (exited, stopped, failed): its assignment disappears. A
// report refused through FailNext changes nothing, as on the real server.
//
// Metrics reports and scale-in locks are taken for assigned instances
// only, as the real server takes them for the instances on the agent's
// host: a report with a sample of an unassigned instance is refused whole
// with not_found (details "id"), and so is a lock of one. Samples must hold
// a value, each in [0, 1].
type ControlPlane struct {
	mu          sync.Mutex
	tokens      map[string]string // join token -> host ID
	joins       []agentapi.JoinRequest
	assignments []agentapi.Assignment
	heartbeats  []agentapi.HeartbeatRequest
	reports     map[string][]agentapi.StatusReport
	logs        map[string][]byte
	samples     []agentapi.InstanceSample
	locks       map[string][]agentapi.LockRequest
	scaleIn     map[string]*cloud.ScaleIn
	calls       map[string]int
	fail        map[string]*failure
	// networks is the host's network view; netChanged is closed when it
	// changes (and replaced).
	networks   agentapi.NetworkView
	netVersion int
	netChanged chan struct{}
	// gone are the volumes (deleted) and instances (terminated) Gone
	// names, by ID (gone.go).
	gone      map[string]bool
	goneAsked []agentapi.GoneRequest
	// beatEvery is the heartbeat interval the server asks for
	// (SetHeartbeatInterval).
	beatEvery time.Duration
}

type failure struct {
	err error
	n   int
}

// New returns a server with no assignments and no join tokens.
func New() *ControlPlane {
	return &ControlPlane{
		tokens: map[string]string{}, reports: map[string][]agentapi.StatusReport{},
		logs: map[string][]byte{}, calls: map[string]int{}, fail: map[string]*failure{},
		locks: map[string][]agentapi.LockRequest{}, scaleIn: map[string]*cloud.ScaleIn{},
		networks: agentapi.NetworkView{Version: "0", Networks: []agentapi.HostNetwork{}}, netChanged: make(chan struct{}),
	}
}

// SetNetworks makes nets the host's network view, under a new version,
// and wakes the Networks calls that wait for a change.
func (s *ControlPlane) SetNetworks(nets ...agentapi.HostNetwork) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.netVersion++
	if nets == nil {
		nets = []agentapi.HostNetwork{}
	}
	s.networks = roundTrip(agentapi.NetworkView{Version: fmt.Sprint(s.netVersion), Networks: nets})
	close(s.netChanged)
	s.netChanged = make(chan struct{})
}

// Networks implements agent.ControlPlane as the real server does: with
// the version the view has and a wait, it answers when the view changes,
// or after wait (at most agentapi.MaxNetworkWait) with the same view.
func (s *ControlPlane) Networks(ctx context.Context, version string, wait time.Duration) (*agentapi.NetworkView, error) {
	s.mu.Lock()
	if err := s.enter(ctx, OpNetworks); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if version != "" && version == s.networks.Version && wait > 0 {
		changed := s.netChanged
		s.mu.Unlock()
		t := time.NewTimer(min(wait, agentapi.MaxNetworkWait))
		defer t.Stop()
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	v := roundTrip(s.networks)
	return &v, nil
}

// AddJoinToken accepts token for a join as host hostID.
func (s *ControlPlane) AddJoinToken(token, hostID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = hostID
}

// SetAssignments replaces the assignments.
func (s *ControlPlane) SetAssignments(as ...agentapi.Assignment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.assignments = nil
	for _, a := range as {
		s.assignments = append(s.assignments, roundTrip(a))
	}
}

// Put adds an assignment, or replaces the one with its instance ID.
func (s *ControlPlane) Put(a agentapi.Assignment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a = roundTrip(a)
	if i := s.index(a.InstanceID); i >= 0 {
		s.assignments[i] = a
		return
	}
	s.assignments = append(s.assignments, a)
}

// SetDesired changes the desired state of an assignment; it fails for an
// instance without one.
func (s *ControlPlane) SetDesired(id, desired string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.index(id)
	if i < 0 {
		return fmt.Errorf("agenttest: no assignment for instance %s", id)
	}
	s.assignments[i].Desired = desired
	return nil
}

// Drop removes an assignment without telling the agent, as when an
// instance is terminated behind its back.
func (s *ControlPlane) Drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.index(id); i >= 0 {
		s.assignments = slices.Delete(s.assignments, i, i+1)
	}
}

// Assigned reports whether the instance has an assignment.
func (s *ControlPlane) Assigned(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index(id) >= 0
}

func (s *ControlPlane) index(id string) int {
	return slices.IndexFunc(s.assignments, func(a agentapi.Assignment) bool { return a.InstanceID == id })
}

// FailNext makes the next n calls of op fail with err (n < 0: every call,
// until FailNext(op, 0, nil)). A failed call is counted but changes
// nothing. It panics on an unknown op.
func (s *ControlPlane) FailNext(op string, n int, err error) {
	if !slices.Contains(knownOps, op) {
		panic(fmt.Sprintf("agenttest: unknown operation %q", op))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n == 0 || err == nil {
		delete(s.fail, op)
		return
	}
	s.fail[op] = &failure{err: err, n: n}
}

// Calls returns how many times op was called, failed calls included.
func (s *ControlPlane) Calls(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// Joins returns the join requests that succeeded.
func (s *ControlPlane) Joins() []agentapi.JoinRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.joins)
}

// SetHeartbeatInterval makes heartbeats answer that the server wants one
// every d (agentapi.HeartbeatResponse; 0: no wish, the default).
func (s *ControlPlane) SetHeartbeatInterval(d time.Duration) {
	s.mu.Lock()
	s.beatEvery = d
	s.mu.Unlock()
}

// Heartbeats returns the heartbeats that succeeded, in order.
func (s *ControlPlane) Heartbeats() []agentapi.HeartbeatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.heartbeats)
}

// Reports returns the reports taken for an instance, in order.
func (s *ControlPlane) Reports(id string) []agentapi.StatusReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reports[id])
}

// Phases returns the phases of the reports taken for an instance.
func (s *ControlPlane) Phases(id string) []string {
	var out []string
	for _, r := range s.Reports(id) {
		out = append(out, r.Phase)
	}
	return out
}

// Logs returns the output uploaded for an instance.
func (s *ControlPlane) Logs(id string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.logs[id])
}

// Samples returns the metric samples taken (of every instance when id is
// empty), in the order they arrived.
func (s *ControlPlane) Samples(id string) []agentapi.InstanceSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []agentapi.InstanceSample
	for _, smp := range s.samples {
		if id == "" || smp.InstanceID == id {
			out = append(out, smp)
		}
	}
	return out
}

// LockRequests returns the scale-in lock requests taken for an instance,
// in order.
func (s *ControlPlane) LockRequests(id string) []agentapi.LockRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.locks[id])
}

// ScaleIn returns an instance's scale-in protection as recorded (nil when
// nothing holds it).
func (s *ControlPlane) ScaleIn(id string) *cloud.ScaleIn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if si := s.scaleIn[id]; si != nil {
		out := roundTrip(*si)
		return &out
	}
	return nil
}

// enter counts a call of op and returns its injected failure, if any. The
// caller holds s.mu.
func (s *ControlPlane) enter(ctx context.Context, op string) error {
	s.calls[op]++
	if err := ctx.Err(); err != nil {
		return err
	}
	f := s.fail[op]
	if f == nil {
		return nil
	}
	if f.n > 0 {
		if f.n--; f.n == 0 {
			delete(s.fail, op)
		}
	}
	return f.err
}

// Join implements agent.Server.
func (s *ControlPlane) Join(ctx context.Context, req agentapi.JoinRequest) (*agentapi.JoinResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter(ctx, OpJoin); err != nil {
		return nil, err
	}
	req = roundTrip(req)
	host, ok := s.tokens[req.JoinToken]
	if !ok {
		return nil, cloud.Errorf(cloud.Unauthenticated, "unknown or used join token")
	}
	if req.Inventory == nil {
		return nil, cloud.Errorf(cloud.Invalid, "join without inventory")
	}
	delete(s.tokens, req.JoinToken) // a join token is good for one join
	s.joins = append(s.joins, req)
	return &agentapi.JoinResponse{HostID: host, Credential: "agent-credential-" + host}, nil
}

// Heartbeat implements agent.Server.
func (s *ControlPlane) Heartbeat(ctx context.Context, req agentapi.HeartbeatRequest) (*agentapi.HeartbeatResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter(ctx, OpHeartbeat); err != nil {
		return nil, err
	}
	s.heartbeats = append(s.heartbeats, roundTrip(req))
	return &agentapi.HeartbeatResponse{IntervalMS: s.beatEvery.Milliseconds()}, nil
}

// Assignments implements agent.Server.
func (s *ControlPlane) Assignments(ctx context.Context) (*agentapi.AssignmentList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter(ctx, OpAssignments); err != nil {
		return nil, err
	}
	list := roundTrip(agentapi.AssignmentList{Assignments: s.assignments})
	if list.Assignments == nil {
		list.Assignments = []agentapi.Assignment{}
	}
	return &list, nil
}

// ReportStatus implements agent.Server.
func (s *ControlPlane) ReportStatus(ctx context.Context, id string, r agentapi.StatusReport) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter(ctx, OpReportStatus); err != nil {
		return err
	}
	r = roundTrip(r)
	i := s.index(id)
	if i < 0 {
		return cloud.Errorf(cloud.NotFound, "instance %s is not assigned to this host", id)
	}
	terminal := false
	switch r.Phase {
	case agentapi.PhaseStarting, agentapi.PhaseRunning:
	case agentapi.PhaseExited:
		if r.ExitCode == nil {
			return cloud.Errorf(cloud.Invalid, "an exited report needs an exit code")
		}
		terminal = true
	case agentapi.PhaseStopped, agentapi.PhaseFailed:
		terminal = true
	default:
		return cloud.Errorf(cloud.Invalid, "unknown phase %q", r.Phase)
	}
	s.reports[id] = append(s.reports[id], r)
	if terminal {
		s.assignments = slices.Delete(s.assignments, i, i+1)
	}
	return nil
}

// AppendLogs implements agent.Server.
func (s *ControlPlane) AppendLogs(ctx context.Context, id string, chunk []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter(ctx, OpAppendLogs); err != nil {
		return err
	}
	if len(chunk) > MaxLogChunk {
		return cloud.Errorf(cloud.Invalid, "a log chunk holds at most %d bytes, not %d", MaxLogChunk, len(chunk))
	}
	s.logs[id] = append(s.logs[id], chunk...)
	return nil
}

// ReportMetrics implements agent.Server.
func (s *ControlPlane) ReportMetrics(ctx context.Context, rep agentapi.MetricsReport) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter(ctx, OpReportMetrics); err != nil {
		return err
	}
	rep = roundTrip(rep)
	if len(rep.Samples) > agentapi.MaxMetricSamples {
		return cloud.Errorf(cloud.Invalid, "%d samples; the limit is %d", len(rep.Samples), agentapi.MaxMetricSamples)
	}
	for i, smp := range rep.Samples {
		if s.index(smp.InstanceID) < 0 {
			return &cloud.Error{Code: cloud.NotFound, Message: fmt.Sprintf("instance %q not found on this host", smp.InstanceID),
				Details: map[string]any{"kind": "instance", "id": smp.InstanceID, "field": fmt.Sprintf("samples[%d].instance_id", i)}}
		}
		if smp.At.IsZero() || smp.GPUUtilization == nil && smp.CPUUtilization == nil {
			return cloud.Errorf(cloud.Invalid, "samples[%d] needs a time and a value", i)
		}
		for _, v := range []*float64{smp.GPUUtilization, smp.CPUUtilization} {
			if v != nil && !(*v >= 0 && *v <= 1) {
				return cloud.Errorf(cloud.Invalid, "samples[%d]: %v is not a utilization", i, *v)
			}
		}
	}
	s.samples = append(s.samples, rep.Samples...)
	return nil
}

// SetScaleInLock implements agent.Server.
func (s *ControlPlane) SetScaleInLock(ctx context.Context, id string, req agentapi.LockRequest) (*cloud.ScaleIn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter(ctx, OpSetScaleInLock); err != nil {
		return nil, err
	}
	req = roundTrip(req)
	if s.index(id) < 0 {
		return nil, &cloud.Error{Code: cloud.NotFound, Message: fmt.Sprintf("instance %q not found on this host", id),
			Details: map[string]any{"kind": "instance", "id": id}}
	}
	if len(req.Reason) > agentapi.MaxLockReason {
		return nil, cloud.Errorf(cloud.Invalid, "reason: %d bytes; the limit is %d", len(req.Reason), agentapi.MaxLockReason)
	}
	s.locks[id] = append(s.locks[id], req)
	si := s.scaleIn[id]
	if si == nil {
		si = &cloud.ScaleIn{}
	}
	switch {
	case req.Locked && (si.Lock == nil || si.Lock.Reason != req.Reason):
		si.Lock = &cloud.ScaleLock{Reason: req.Reason, At: time.Now().UTC()}
	case !req.Locked:
		si.Lock = nil
	}
	if si.Held() {
		s.scaleIn[id] = si
	} else {
		delete(s.scaleIn, id)
	}
	out := roundTrip(*si)
	return &out, nil
}

// roundTrip copies v through JSON, as the wire does.
func roundTrip[T any](v T) T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("agenttest: encode %T: %v", v, err))
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("agenttest: decode %T: %v", v, err))
	}
	return out
}
