package metadata

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// The completion lock is the one thing a workload can make its agent ask
// of the control plane, and the agent asks on its host's credential, whose
// request budget the host's other calls share. So that a workload cannot
// turn its endpoint into a flood of server calls, its lock changes are
// bounded twice over:
//
//   - Each instance has a budget of lock changes, a token bucket of
//     LockChangeBurst changes refilled at LockChangeRate per second. A
//     PUT or DELETE of /v1/scale-in-lock over it is answered 429
//     rate_limited with Retry-After (whole seconds) and reaches nobody.
//   - The changes an instance's workload makes are coalesced: one call at
//     a time per instance, at most one every lock interval
//     (SetLockInterval; the agent's poll interval), each carrying the
//     latest state the workload asked for. A change made while a call is
//     in flight, or within the interval after one, waits for the next
//     call, together with every other change made meanwhile: however
//     many PUTs and DELETEs a workload sends, its agent makes at most one
//     lock call per interval for it.
//
// A change is answered once the call that carried it returned (so a
// workload that got 200 is still protected), from that call's answer.
// When a later change of the same instance superseded it before it was
// sent (a PUT then a DELETE), the call carried the later one, and the
// earlier request is answered 409 conflict, naming what the lock now is.

// Limits of the lock changes of one instance.
const (
	// LockChangeRate is how many lock changes per second an instance's
	// workload may make, sustained, and LockChangeBurst how many at once.
	// A workload takes its lock around a checkpoint and releases it
	// after, every few minutes; twenty at once leaves room for the ranks
	// of a job each taking it.
	LockChangeRate  = 1.0
	LockChangeBurst = 20
	// DefaultLockInterval is the least time between two lock calls of one
	// instance to the control plane, unless SetLockInterval says
	// otherwise.
	DefaultLockInterval = time.Second
)

// errLockGone fails the changes still waiting when their instance is
// forgotten.
var errLockGone = errors.New("the instance is gone from this host")

// lockState is one instance's lock changes. Endpoints.mu guards it.
type lockState struct {
	// want is the lock the workload asked for last (nil: released), gen
	// how many changes it asked for so far.
	want *cloud.ScaleLock
	gen  uint64
	// next is the call that will carry the changes not sent yet; nil when
	// every change has been sent.
	next *lockCall
	// sending is true while a goroutine sends this instance's calls
	// (sendLocks); it ends when nothing is left to send.
	sending bool
	// last is when the last call started, on the wall clock's monotonic
	// reading (the interval is real time).
	last time.Time
	// budget is the instance's bucket of lock changes, on Endpoints.now.
	budget bucket
	// gone is closed when the instance is forgotten, to end the wait
	// between two calls.
	gone chan struct{}
}

// lockCall is one call of the lock hook, which every change made before
// it started waits for.
type lockCall struct {
	// gen is the change the call carries (the latest when it started).
	gen uint64
	// done is closed once held and err are set.
	done chan struct{}
	held *cloud.ScaleLock
	err  error
}

// bucket is a token bucket: tokens as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

// take takes a token at now from a bucket of rate per second and burst
// tokens: 0 when there was one, else how long until there will be (and
// nothing is taken). A clock that steps back refills nothing.
func (b *bucket) take(now time.Time, rate float64, burst int) time.Duration {
	if el := now.Sub(b.at); el > 0 {
		b.tokens = min(b.tokens+el.Seconds()*rate, float64(burst))
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) / rate * float64(time.Second))
}

// SetLockInterval sets the least time between two lock calls of one
// instance to the control plane (DefaultLockInterval until set); changes
// made within it are coalesced into the next call. Zero or less sends a
// change as soon as the call before it returned: changes are then
// coalesced only while a call is in flight.
func (s *Endpoints) SetLockInterval(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lockInterval = max(d, 0)
}

// lockStateOf returns the lock state of instance id, making one with a
// full budget. The caller holds s.mu.
func (s *Endpoints) lockStateOf(id string) *lockState {
	st := s.lockStates[id]
	if st == nil {
		st = &lockState{budget: bucket{tokens: LockChangeBurst, at: s.now()}, gone: make(chan struct{})}
		s.lockStates[id] = st
	}
	return st
}

// forgetLock drops the lock state of instance id; the changes still
// waiting for a call fail. The caller holds s.mu.
func (s *Endpoints) forgetLock(id string) {
	st := s.lockStates[id]
	if st == nil {
		return
	}
	delete(s.lockStates, id)
	close(st.gone)
	if c := st.next; c != nil {
		st.next = nil
		c.err = errLockGone
		close(c.done)
	}
}

// SyncLock sets the completion lock an instance holds as the control plane
// recorded it (nil: none), as read at asOf (the wall clock when the agent
// asked for its assignments): after an agent restart the endpoint so shows
// the lock the workload took before. It changes nothing while a change of
// the workload is waiting or in flight, or when the control plane answered
// one after asOf (its answer to the assignments predates that change).
func (s *Endpoints) SyncLock(id string, lock *cloud.ScaleLock, asOf time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.lockStates[id]; st != nil && st.sending {
		return
	}
	if asOf.Before(s.lockChanged[id]) {
		return
	}
	if lock == nil {
		delete(s.locks, id)
		return
	}
	s.locks[id] = cloud.ScaleLock{Reason: lock.Reason, At: lock.At.UTC()}
}

// changeLock handles PUT (take) and DELETE (release) of the scale-in lock:
// it takes the change from the instance's budget, hands it to the next
// call to the control plane and answers once that call returned, 503 when
// the control plane could not be told, so that the workload retries.
func (s *Endpoints) changeLock(w http.ResponseWriter, r *http.Request, id string) {
	var lock *cloud.ScaleLock
	if r.Method == http.MethodPut {
		var req struct {
			Reason string `json:"reason"`
		}
		if !decode(w, r, &req, true) {
			return
		}
		if msg := checkReason(req.Reason); msg != "" {
			writeError(w, http.StatusBadRequest, cloud.Invalid, msg)
			return
		}
		lock = &cloud.ScaleLock{Reason: req.Reason}
	}
	s.mu.Lock()
	hook := s.lockHook
	if hook == nil {
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "the scale-in lock cannot be recorded: this agent has no control plane")
		return
	}
	st := s.lockStateOf(id)
	if d := st.budget.take(s.now(), LockChangeRate, LockChangeBurst); d > 0 {
		s.mu.Unlock()
		secs := max(1, int(math.Ceil(d.Seconds())))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeJSON(w, http.StatusTooManyRequests, cloud.Error{Code: cloud.RateLimited,
			Message: fmt.Sprintf("too many scale-in lock changes: an instance may make %g per second, %d at once; retry in %d s",
				LockChangeRate, LockChangeBurst, secs),
			Details: map[string]any{"limit": "scale_in_lock_changes", "retry_after_seconds": secs}})
		return
	}
	st.gen++
	mine := st.gen
	st.want = lock
	if st.next == nil {
		st.next = &lockCall{done: make(chan struct{})}
	}
	c := st.next
	if !st.sending {
		st.sending = true
		go s.sendLocks(id, st, hook)
	}
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(r.Context(), LockTimeout)
	defer cancel()
	select {
	case <-c.done:
	case <-ctx.Done():
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "the control plane did not record the scale-in lock in time; retry")
		return
	}
	if c.err != nil {
		code := cloud.ErrorCode(c.err)
		if code == cloud.Internal {
			code = codeUnavailable
		}
		writeError(w, http.StatusServiceUnavailable, code, "the control plane did not record the scale-in lock; retry: "+c.err.Error())
		return
	}
	switch {
	case lock == nil && c.held == nil:
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
	case lock != nil && c.held != nil:
		writeJSON(w, http.StatusOK, *c.held)
	case c.gen > mine && c.held == nil:
		writeError(w, http.StatusConflict, cloud.Conflict, "a later DELETE of this instance's scale-in lock superseded this PUT: the lock is released")
	case c.gen > mine:
		writeError(w, http.StatusConflict, cloud.Conflict, "a later PUT of this instance's scale-in lock superseded this DELETE: the lock is held")
	default:
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "the control plane answered without the change; retry")
	}
}

// sendLocks sends the lock changes of instance id to the control plane
// until none is left: one call at a time, at most one per lock interval,
// each with the latest lock the workload asked for. It records each
// answer on the endpoint and hands it to the changes the call carried.
func (s *Endpoints) sendLocks(id string, st *lockState, hook LockHook) {
	for {
		s.mu.Lock()
		if s.lockStates[id] != st || st.next == nil {
			st.sending = false
			s.mu.Unlock()
			return
		}
		now := time.Now()
		if wait := st.last.Add(s.lockInterval).Sub(now); !st.last.IsZero() && wait > 0 {
			s.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-st.gone:
				t.Stop()
			}
			continue
		}
		c := st.next
		st.next = nil
		c.gen, st.last = st.gen, now
		var want *cloud.ScaleLock
		if st.want != nil {
			want = &cloud.ScaleLock{Reason: st.want.Reason}
		}
		s.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), LockTimeout)
		si, err := hook(ctx, id, want)
		cancel()

		s.mu.Lock()
		c.err = err
		if err == nil && si != nil && si.Lock != nil {
			c.held = &cloud.ScaleLock{Reason: si.Lock.Reason, At: si.Lock.At.UTC()}
		}
		if err == nil && s.lockStates[id] == st {
			// The instance is still here: show what the control plane
			// recorded.
			if c.held != nil {
				s.locks[id] = *c.held
			} else {
				delete(s.locks, id)
			}
			s.lockChanged[id] = time.Now()
		}
		close(c.done)
		s.mu.Unlock()
	}
}
