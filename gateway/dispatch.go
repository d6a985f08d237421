package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/gpucloud/gpucloud/cloud"
)

// maxOutput bounds a job's output as the worker answers it.
const maxOutput = 4 << 20

// jobBody is what a worker receives for a job: POST /run on its port.
type jobBody struct {
	ID    string          `json:"id"`
	Input json.RawMessage `json:"input"`
}

// dispatch runs es's queued jobs on its ready workers until the endpoint
// leaves this gateway or ctx ends: it claims as many jobs as there are
// free slots, runs each on a worker, and waits for a slot, a wake (a job
// submitted here) or pollEvery (one submitted elsewhere).
func (g *Gateway) dispatch(ctx context.Context, es *endpoint) {
	defer func() {
		g.mu.Lock()
		es.dispatching = false
		g.mu.Unlock()
	}()
	for ctx.Err() == nil {
		g.mu.Lock()
		if es.ep == nil || es.ep.State != cloud.EndpointActive {
			g.mu.Unlock()
			return
		}
		e, free, changed := es.ep, es.free(), es.changed
		g.mu.Unlock()
		claimed := 0
		if free > 0 {
			lease := time.Duration(e.Spec.TimeoutSeconds)*time.Second + leaseMargin
			jobs, err := g.cfg.Services.Endpoints.Claim(ctx, e.ID, g.cfg.Replica, free, lease)
			if err != nil && ctx.Err() == nil {
				g.cfg.Log.Warn("gateway: claim jobs", "endpoint", e.ID, "err", err)
			}
			for _, j := range jobs {
				g.mu.Lock()
				w := es.pick()
				g.mu.Unlock()
				if w == nil {
					// The slot went meanwhile (a worker failed): the job
					// goes back, this attempt not counted.
					g.giveBack(ctx, es, j, "no ready worker was left for it")
					continue
				}
				claimed++
				go g.run(ctx, es, e, w, j)
			}
		}
		if claimed > 0 {
			continue // more may wait
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-time.After(pollEvery):
		}
	}
}

// run sends job j to worker w and records the answer.
func (g *Gateway) run(ctx context.Context, es *endpoint, e *cloud.Endpoint, w *worker, j *cloud.Job) {
	body, _ := json.Marshal(jobBody{ID: j.ID, Input: j.Input})
	rctx, cancel := context.WithTimeout(ctx, time.Duration(e.Spec.TimeoutSeconds)*time.Second)
	defer cancel()
	url := "http://" + w.id + ".worker.invalid:" + strconv.Itoa(w.port) + "/run"
	req, _ := http.NewRequestWithContext(rctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Gpucloud-Job-Id", j.ID)
	req.Header.Set("X-Gpucloud-Attempt", strconv.Itoa(j.Attempts))
	resp, err := w.tr.RoundTrip(req)
	if err != nil && rctx.Err() == nil && Undelivered(err) {
		// The job never reached the worker (it had just gone): the
		// worker is probed again before it takes more, and the job
		// goes back with this attempt not counted.
		g.release(es, w, true, 0)
		g.giveBack(ctx, es, j, "its worker "+w.id+" could not be reached: "+err.Error())
		return
	}
	if err != nil {
		msg := "the worker did not answer: " + err.Error()
		if rctx.Err() == context.DeadlineExceeded {
			msg = fmt.Sprintf("the job ran past its timeout of %ds", e.Spec.TimeoutSeconds)
		}
		g.release(es, w, rctx.Err() == nil, 0)
		g.finish(ctx, es, j, w.id, nil, msg, true)
		return
	}
	out, rerr := io.ReadAll(io.LimitReader(resp.Body, maxOutput+1))
	resp.Body.Close()
	switch {
	case rerr != nil:
		g.release(es, w, true, 0)
		g.finish(ctx, es, j, w.id, nil, "reading the worker's answer failed: "+rerr.Error(), true)
	case len(out) > maxOutput:
		g.release(es, w, false, 0)
		g.finish(ctx, es, j, w.id, nil, fmt.Sprintf("the worker's answer is over %d bytes", maxOutput), false)
	case resp.StatusCode/100 != 2:
		g.release(es, w, false, 0)
		g.finish(ctx, es, j, w.id, nil, fmt.Sprintf("the worker answered %d: %s", resp.StatusCode, excerpt(out)), resp.StatusCode >= 500)
	default:
		g.release(es, w, false, g.cfg.Now().Sub(j.CreatedAt))
		g.finish(ctx, es, j, w.id, out, "", false)
	}
}

func excerpt(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// giveBack returns job j, which reached no worker, to the queue without
// counting its attempt (service.Endpoints.Return) and wakes the dispatch.
func (g *Gateway) giveBack(ctx context.Context, es *endpoint, j *cloud.Job, why string) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	got, err := g.cfg.Services.Endpoints.Return(fctx, j, why)
	if err != nil {
		g.cfg.Log.Warn("gateway: return a job to the queue", "job", j.ID, "err", err)
		return
	}
	g.mu.Lock()
	if got.State == cloud.JobQueued {
		es.wake()
		g.mu.Unlock()
		return
	}
	ws := g.done[j.ID]
	delete(g.done, j.ID)
	g.mu.Unlock()
	for _, c := range ws {
		c <- got
	}
}

// Undelivered reports whether err, from a request sent to a worker,
// means that the request never reached it: the gateway could not open a
// session to the worker's host (a DialError), or the host's agent
// refused the session before forwarding anything (it closes those with
// the WebSocket status 1008, policy violation: the instance is not
// running there, or its port does not accept connections).
func Undelivered(err error) bool {
	var de *DialError
	return errors.As(err, &de) || websocket.CloseStatus(err) == websocket.StatusPolicyViolation
}

// DialError is the failure to open a session to a worker's host.
type DialError struct{ Err error }

func (e *DialError) Error() string { return e.Err.Error() }
func (e *DialError) Unwrap() error { return e.Err }

// finish records an attempt's answer and wakes the runsync waiters of a
// finished job. A store error leaves the job to its lease.
func (g *Gateway) finish(ctx context.Context, es *endpoint, j *cloud.Job, worker string, out []byte, errMsg string, retry bool) {
	// The record must not be lost to the caller going away.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	got, err := g.cfg.Services.Endpoints.Finish(fctx, j, worker, out, errMsg, retry)
	if err != nil {
		g.cfg.Log.Warn("gateway: record a job's answer", "job", j.ID, "err", err)
		return
	}
	if got.State == cloud.JobQueued {
		g.mu.Lock()
		es.wake()
		g.mu.Unlock()
		return
	}
	g.mu.Lock()
	ws := g.done[j.ID]
	delete(g.done, j.ID)
	g.mu.Unlock()
	for _, c := range ws {
		c <- got
	}
}

// WaitJob waits up to wait for job id (of the tenant's endpoint ref, read
// through get) to finish, and answers it as it is then: finished, or
// still queued or running when wait ran out. A job run by this replica
// is answered the moment it finishes; one run elsewhere within 250 ms.
func (g *Gateway) WaitJob(ctx context.Context, id string, wait time.Duration, get func(context.Context) (*cloud.Job, error)) (*cloud.Job, error) {
	c := make(chan *cloud.Job, 1)
	g.mu.Lock()
	g.done[id] = append(g.done[id], c)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.done[id] = deleteChan(g.done[id], c)
		if len(g.done[id]) == 0 {
			delete(g.done, id)
		}
		g.mu.Unlock()
	}()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		j, err := get(ctx)
		if err != nil || j.State.Finished() {
			return j, err
		}
		select {
		case j := <-c:
			return j, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return get(ctx)
		case <-tick.C:
		}
	}
}

func deleteChan(cs []chan *cloud.Job, c chan *cloud.Job) []chan *cloud.Job {
	out := cs[:0]
	for _, x := range cs {
		if x != c {
			out = append(out, x)
		}
	}
	return out
}
