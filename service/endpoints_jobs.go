package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// The jobs of queue-mode endpoints (docs/ENDPOINTS.md, "Queue mode"). A
// job is a row of the store from its submission to its retention's end:
// the queue survives a server's restart, and each replica's gateway claims
// jobs with a lease (Claim), runs them on a worker and records the answer
// (Finish). A job whose lease lapses (its replica died) is claimed again;
// a failed attempt runs again up to the endpoint's retries. Execution is
// at least once: a worker lost after it finished a job but before the
// answer was recorded runs it again.

// Submit queues a job with input (any JSON, at most MaxJobInput bytes;
// empty is null) on the queue-mode endpoint ref. key makes a retry answer
// the first job; the same key with another input is a conflict.
func (s *Endpoints) Submit(ctx context.Context, a Actor, ref string, input json.RawMessage, key string) (out *cloud.Job, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	if len(input) > MaxJobInput {
		return nil, false, &cloud.Error{Code: cloud.Invalid, Message: fmt.Sprintf("input: %d bytes; the limit is %d (1 MiB): pass larger data through a volume or an object store", len(input), MaxJobInput),
			Details: map[string]any{"field": "input", "limit": MaxJobInput}}
	}
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage("null")
	}
	if !json.Valid(input) {
		return nil, false, Field("input", "is not valid JSON")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, input); err != nil {
		return nil, false, Field("input", "is not valid JSON: %v", err)
	}
	input = compact.Bytes()
	err = s.tx(ctx, func(tx cloud.Tx) error {
		out, created = nil, false
		e, err := lookupEndpoint(ctx, tx, a, ref)
		if err != nil {
			return err
		}
		if err := takesJobs(e); err != nil {
			return err
		}
		now := s.now()
		j := &cloud.Job{ID: NewID(JobPrefix), TenantID: e.TenantID, EndpointID: e.ID, State: cloud.JobQueued, Input: input,
			MaxAttempts: e.Spec.Retries + 1, CreatedAt: now, IdempotencyKey: key}
		if a.Role == cloud.RoleInvoke {
			j.KeyID = a.ID
		}
		id := j.ID
		if err := tx.CreateJob(ctx, j); err != nil {
			if key != "" && cloud.IsConflict(err) && j.ID != id {
				out = j
				if !bytes.Equal(j.Input, input) {
					return &cloud.Error{Code: cloud.Conflict,
						Message: "idempotency key " + Quote(key) + " was used for job " + j.ID + " with another input",
						Details: map[string]any{"existing_id": j.ID, "fields": []string{"input"}}}
				}
				return nil
			}
			return err
		}
		out, created = j, true
		return nil
	})
	return out, created && err == nil, err
}

// takesJobs refuses jobs on an endpoint that is not active or not in
// queue mode.
func takesJobs(e *cloud.Endpoint) error {
	if e.State != cloud.EndpointActive {
		return &cloud.Error{Code: cloud.Conflict, Message: "endpoint " + e.Name + " is " + string(e.State) + "; it takes no jobs",
			Details: map[string]any{"state": e.State}}
	}
	if e.Spec.Mode != cloud.EndpointQueue {
		return &cloud.Error{Code: cloud.Conflict, Message: "endpoint " + e.Name + " is in " + string(e.Spec.Mode) +
			" mode: send it HTTP requests at /v1/endpoints/" + e.Name + "/http/, not jobs", Details: map[string]any{"mode": e.Spec.Mode}}
	}
	return nil
}

// Job reads a job of endpoint ref that a may see; a job of another
// endpoint or tenant answers like a missing one.
func (s *Endpoints) Job(ctx context.Context, a Actor, ref, id string) (*cloud.Job, error) {
	var out *cloud.Job
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		_, out, err = endpointJob(ctx, tx, a, ref, id)
		return err
	})
	return out, err
}

func endpointJob(ctx context.Context, tx cloud.Tx, a Actor, ref, id string) (*cloud.Endpoint, *cloud.Job, error) {
	e, err := lookupEndpoint(ctx, tx, a, ref)
	if err != nil {
		return nil, nil, err
	}
	j, err := Visible(ctx, a, "job", id, tx.GetJob)
	if err != nil {
		return nil, nil, err
	}
	if j.EndpointID != e.ID {
		return nil, nil, NotFound("job", id)
	}
	return e, j, nil
}

// Cancel cancels a job that has not finished: a queued one never runs; a
// running one's answer is discarded when it comes. A finished job is a
// conflict naming its state.
func (s *Endpoints) Cancel(ctx context.Context, a Actor, ref, id string) (*cloud.Job, error) {
	var out *cloud.Job
	err := s.tx(ctx, func(tx cloud.Tx) error {
		e, j, err := endpointJob(ctx, tx, a, ref, id)
		if err != nil {
			return err
		}
		if j.State.Finished() {
			out = j
			if j.State == cloud.JobCancelled {
				return nil
			}
			return &cloud.Error{Code: cloud.Conflict, Message: "job " + j.ID + " is " + string(j.State) + "; only a queued or running job is cancelled",
				Details: map[string]any{"state": j.State}}
		}
		finish(j, e, cloud.JobCancelled, "cancelled by "+a.ID, s.now())
		if err := tx.UpdateJob(ctx, j); err != nil {
			return err
		}
		out = j
		return nil
	})
	return out, err
}

// finish ends j in state with msg, its result kept for e's retention.
func finish(j *cloud.Job, e *cloud.Endpoint, state cloud.JobState, msg string, now time.Time) {
	exp := now.Add(time.Duration(e.Spec.RetentionSeconds) * time.Second)
	j.State, j.FinishedAt, j.ExpiresAt, j.LeaseOwner, j.LeaseUntil = state, &now, &exp, "", time.Time{}
	if msg != "" {
		j.Error = msg
	}
}

// cancelQueued cancels e's queued jobs (its deletion).
func cancelQueued(ctx context.Context, tx cloud.Tx, e *cloud.Endpoint, now time.Time) (int, error) {
	n := 0
	for {
		// ClaimJobs takes them in order; the claim is undone at once.
		js, err := tx.ClaimJobs(ctx, e.ID, "", 100, now, now)
		if err != nil || len(js) == 0 {
			return n, err
		}
		for _, j := range js {
			j.Attempts--
			finish(j, e, cloud.JobCancelled, "the endpoint was deleted", now)
			if err := tx.UpdateJob(ctx, j); err != nil {
				return n, err
			}
			n++
		}
	}
}

// Claim takes up to n jobs of endpoint id for the gateway of replica
// owner, each leased for lease: running, one more attempt. A job whose
// attempts ran out while its lease lapsed (its replica died each time)
// fails instead.
func (s *Endpoints) Claim(ctx context.Context, id, owner string, n int, lease time.Duration) ([]*cloud.Job, error) {
	var out []*cloud.Job
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = nil
		now := s.now()
		js, err := tx.ClaimJobs(ctx, id, owner, n, now, now.Add(lease))
		if err != nil || len(js) == 0 {
			return err
		}
		var e *cloud.Endpoint
		for _, j := range js {
			if j.Attempts <= j.MaxAttempts {
				out = append(out, j)
				continue
			}
			if e == nil {
				if e, err = tx.GetEndpoint(ctx, id); err != nil {
					return err
				}
			}
			j.Attempts--
			finish(j, e, cloud.JobFailed, fmt.Sprintf("%d attempts ran out (the last: %s)", j.MaxAttempts, orNone(j.Error)), now)
			if err := tx.UpdateJob(ctx, j); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

func orNone(s string) string {
	if s == "" {
		return "its server stopped while it ran"
	}
	return s
}

// Finish records the answer of the attempt of job j (as Claim returned
// it) that worker ran: output on success; otherwise errMsg, and the job
// runs again while attempts remain and retry is set. An attempt that is
// no longer the job's (cancelled, or claimed again after its lease
// lapsed) changes nothing, and Finish answers the job as stored.
func (s *Endpoints) Finish(ctx context.Context, j *cloud.Job, worker string, output json.RawMessage, errMsg string, retry bool) (*cloud.Job, error) {
	return s.onAttempt(ctx, j, func(tx cloud.Tx, cur *cloud.Job, e *cloud.Endpoint) error {
		now := s.now()
		cur.Worker = worker
		switch {
		case errMsg == "":
			if len(bytes.TrimSpace(output)) == 0 || !json.Valid(output) {
				b, _ := json.Marshal(string(output))
				output = b
			}
			cur.Output, cur.Error = output, ""
			finish(cur, e, cloud.JobCompleted, "", now)
		case retry && cur.Attempts < cur.MaxAttempts && e.State == cloud.EndpointActive:
			cur.State, cur.LeaseOwner, cur.LeaseUntil, cur.Error = cloud.JobQueued, "", time.Time{}, errMsg
		default:
			finish(cur, e, cloud.JobFailed, errMsg, now)
		}
		return tx.UpdateJob(ctx, cur)
	})
}

// onAttempt runs apply, in one transaction, on job j as stored and its
// endpoint, when the attempt Claim returned as j is still the job's (it
// was not cancelled, nor claimed again after its lease lapsed), and
// answers the job as stored then; a superseded attempt changes nothing.
func (s *Endpoints) onAttempt(ctx context.Context, j *cloud.Job, apply func(tx cloud.Tx, cur *cloud.Job, e *cloud.Endpoint) error) (*cloud.Job, error) {
	var out *cloud.Job
	err := s.tx(ctx, func(tx cloud.Tx) error {
		cur, err := tx.GetJob(ctx, j.ID)
		if err != nil {
			return err
		}
		out = cur
		if cur.State != cloud.JobRunning || cur.LeaseOwner != j.LeaseOwner || cur.Attempts != j.Attempts {
			return nil // not this attempt's any more
		}
		e, err := tx.GetEndpoint(ctx, cur.EndpointID)
		if err != nil {
			return err
		}
		return apply(tx, cur, e)
	})
	return out, err
}

// Return puts back the attempt of job j (as Claim returned it) that never
// reached a worker: the gateway had no ready worker left for it, or the
// worker's host refused the connection before forwarding a byte (the
// worker had just gone). The job is queued again with its attempt not
// counted, so that a job with no retries is not failed by a worker it
// never ran on. An attempt that is no longer the job's changes nothing;
// a job of an endpoint no longer active fails with why.
func (s *Endpoints) Return(ctx context.Context, j *cloud.Job, why string) (*cloud.Job, error) {
	return s.onAttempt(ctx, j, func(tx cloud.Tx, cur *cloud.Job, e *cloud.Endpoint) error {
		if e.State != cloud.EndpointActive {
			finish(cur, e, cloud.JobFailed, why, s.now())
		} else {
			cur.State, cur.LeaseOwner, cur.LeaseUntil = cloud.JobQueued, "", time.Time{}
			cur.Attempts = max(cur.Attempts-1, 0)
		}
		return tx.UpdateJob(ctx, cur)
	})
}

// Requeue puts back the jobs replica owner holds (a gateway at its start:
// the jobs its previous run was running when it stopped), each attempt
// counted, and answers how many.
func (s *Endpoints) Requeue(ctx context.Context, owner, why string) (int, error) {
	n := 0
	err := s.tx(ctx, func(tx cloud.Tx) error {
		n = 0
		js, err := tx.ListLeasedJobs(ctx, owner)
		if err != nil {
			return err
		}
		for _, j := range js {
			j.State, j.LeaseOwner, j.LeaseUntil, j.Error = cloud.JobQueued, "", time.Time{}, why
			if err := tx.UpdateJob(ctx, j); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// ExpireJobs removes up to limit finished jobs past their retention.
func (s *Endpoints) ExpireJobs(ctx context.Context, limit int) (int64, error) {
	return ExpireJobs(ctx, s.store, s.now(), limit)
}

// ExpireJobs removes up to limit finished jobs whose retention ended
// before now (the endpoint controller's round).
func ExpireJobs(ctx context.Context, st cloud.Store, now time.Time, limit int) (int64, error) {
	var n int64
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		var err error
		n, err = tx.DeleteExpiredJobs(ctx, now, limit)
		return err
	})
	return n, err
}
