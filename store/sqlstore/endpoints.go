package sqlstore

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Serverless endpoints and their jobs: cloud.EndpointTx. An endpoint's
// spec and status are JSON documents; a write normalizes the caller's
// endpoint to what was stored, so that one read back is equal to the one
// written.

// ---- endpoints ----

const endpointCols = "id, tenant_id, name, state, spec, status, version, idempotency_key, created_at, updated_at"

func scanEndpoint(sc scanner) (*cloud.Endpoint, error) {
	var e cloud.Endpoint
	err := sc.Scan(&e.ID, &e.TenantID, &e.Name, &e.State, jsonCol{&e.Spec}, jsonCol{&e.Status}, &e.Version,
		&e.IdempotencyKey, timeCol{&e.CreatedAt}, timeCol{&e.UpdatedAt})
	return &e, err
}

func validEndpoint(e *cloud.Endpoint) error {
	switch {
	case e.ID == "":
		return invalidf("endpoint has no id")
	case e.TenantID == "":
		return invalidf("endpoint %s has no tenant", e.ID)
	case e.Name == "":
		return invalidf("endpoint %s has no name", e.ID)
	case e.Spec.Min < 0 || e.Spec.Min > e.Spec.Max:
		return invalidf("endpoint %s: min %d and max %d are not 0 <= min <= max", e.ID, e.Spec.Min, e.Spec.Max)
	}
	switch e.State {
	case cloud.EndpointActive, cloud.EndpointDeleting, cloud.EndpointDeleted:
		return nil
	}
	return invalidf("endpoint %s: state %q is unknown", e.ID, e.State)
}

// endpointDocs encodes e's documents and sets them on e as they will read
// back (times of the status in UTC microseconds, JSON's empty values).
func endpointDocs(e *cloud.Endpoint) (spec, status string, err error) {
	st := e.Status
	st.LastScaleAt, st.LaunchBlockedUntil = normTime(st.LastScaleAt), normTime(st.LaunchBlockedUntil)
	if st.Workers != nil {
		ws := make([]cloud.WorkerRef, len(st.Workers))
		for i, w := range st.Workers {
			w.LaunchedAt = normTime(w.LaunchedAt)
			ws[i] = w
		}
		st.Workers = ws
	}
	if st.ColdStarts != nil {
		cs := make([]cloud.ColdStart, len(st.ColdStarts))
		for i, c := range st.ColdStarts {
			c.LaunchedAt = normTime(c.LaunchedAt)
			cs[i] = c
		}
		st.ColdStarts = cs
	}
	if spec, err = jsonArg("endpoint "+e.ID+" spec", e.Spec); err != nil {
		return "", "", err
	}
	if status, err = jsonArg("endpoint "+e.ID+" status", st); err != nil {
		return "", "", err
	}
	var back cloud.Endpoint
	if err := json.Unmarshal([]byte(spec), &back.Spec); err != nil {
		return "", "", invalidf("endpoint %s spec: %v", e.ID, err)
	}
	if err := json.Unmarshal([]byte(status), &back.Status); err != nil {
		return "", "", invalidf("endpoint %s status: %v", e.ID, err)
	}
	e.Spec, e.Status = back.Spec, back.Status
	return spec, status, nil
}

// endpointName answers Conflict when e is live and another live endpoint
// of its tenant has its name.
func (t *tx) endpointName(ctx context.Context, e *cloud.Endpoint) error {
	if e.State == cloud.EndpointDeleted {
		return nil
	}
	var other string
	found := true
	err := t.get(ctx, "find endpoint by name", func() error { found = false; return nil },
		"SELECT id FROM endpoints WHERE tenant_id = ? AND name = ? AND state <> ? AND id <> ?",
		[]any{e.TenantID, e.Name, string(cloud.EndpointDeleted), e.ID}, &other)
	if err != nil || !found {
		return err
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: "tenant " + e.TenantID + " already has an endpoint named " + strconv.Quote(e.Name) +
			" (" + other + "); a name is free again once its endpoint is deleted",
		Details: map[string]any{"name": e.Name, "endpoint_id": other}}
}

func (t *tx) endpointByKey(ctx context.Context, e *cloud.Endpoint) error {
	found := true
	old, err := one(ctx, t, "find endpoint by idempotency key", func() error { found = false; return nil },
		"SELECT "+endpointCols+" FROM endpoints WHERE tenant_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
		[]any{e.TenantID, e.IdempotencyKey}, scanEndpoint)
	if err != nil || !found {
		return err
	}
	key := e.IdempotencyKey
	*e = *old
	return idempotencyConflict("endpoint", old.ID, key)
}

func (t *tx) CreateEndpoint(ctx context.Context, e *cloud.Endpoint) error {
	if err := validEndpoint(e); err != nil {
		return err
	}
	if e.IdempotencyKey != "" {
		if err := t.endpointByKey(ctx, e); err != nil {
			return err
		}
	}
	if err := t.mustExist(ctx, "tenants", "tenant", e.TenantID); err != nil {
		return err
	}
	if err := t.endpointName(ctx, e); err != nil {
		return err
	}
	spec, status, err := endpointDocs(e)
	if err != nil {
		return err
	}
	created, updated := normTime(e.CreatedAt), normTime(e.UpdatedAt)
	d := &t.s.d
	n, err := t.execN(ctx, "create endpoint "+e.ID,
		"INSERT INTO endpoints ("+endpointCols+") VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?) ON CONFLICT DO NOTHING",
		e.ID, e.TenantID, e.Name, string(e.State), spec, status, e.IdempotencyKey, d.timeArg(created), d.timeArg(updated))
	if err != nil {
		return err
	}
	if n == 0 {
		if e.IdempotencyKey != "" {
			if err := t.endpointByKey(ctx, e); err != nil {
				return err
			}
		}
		if err := t.endpointName(ctx, e); err != nil {
			return err
		}
		return conflictf("endpoint %s already exists", e.ID)
	}
	e.Version, e.CreatedAt, e.UpdatedAt = 1, created, updated
	return nil
}

func (t *tx) GetEndpoint(ctx context.Context, id string) (*cloud.Endpoint, error) {
	return one(ctx, t, "get endpoint "+id, func() error { return notFoundf("endpoint %s not found", id) },
		"SELECT "+endpointCols+" FROM endpoints WHERE id = ?", []any{id}, scanEndpoint)
}

func (t *tx) EndpointByName(ctx context.Context, tenantID, name string) (*cloud.Endpoint, error) {
	return one(ctx, t, "find endpoint "+strconv.Quote(name), func() error { return notFoundf("endpoint %s not found", strconv.Quote(name)) },
		"SELECT "+endpointCols+" FROM endpoints WHERE tenant_id = ? AND name = ? AND state <> ?",
		[]any{tenantID, name, string(cloud.EndpointDeleted)}, scanEndpoint)
}

func (t *tx) ListEndpoints(ctx context.Context, tenantID string, states ...cloud.EndpointState) ([]*cloud.Endpoint, error) {
	var conds []string
	var args []any
	if tenantID != "" {
		conds, args = append(conds, "tenant_id = ?"), append(args, tenantID)
	}
	if len(states) > 0 {
		var cond string
		cond, args = inList("state", states, args)
		conds = append(conds, cond)
	}
	return list(ctx, t, "list endpoints", "SELECT "+endpointCols+" FROM endpoints"+where(conds)+" ORDER BY id", args, scanEndpoint)
}

// UpdateEndpoint writes every field but those fixed at creation (ID,
// TenantID, IdempotencyKey, CreatedAt).
func (t *tx) UpdateEndpoint(ctx context.Context, e *cloud.Endpoint) error {
	if err := validEndpoint(e); err != nil {
		return err
	}
	var tenant string
	if err := t.get(ctx, "find endpoint "+e.ID, func() error { return notFoundf("endpoint %s not found", e.ID) },
		"SELECT tenant_id FROM endpoints WHERE id = ?", []any{e.ID}, &tenant); err != nil {
		return err
	}
	named := *e
	named.TenantID = tenant
	if err := t.endpointName(ctx, &named); err != nil {
		return err
	}
	spec, status, err := endpointDocs(e)
	if err != nil {
		return err
	}
	updated := normTime(e.UpdatedAt)
	n, err := t.execN(ctx, "update endpoint "+e.ID,
		"UPDATE endpoints SET name = ?, state = ?, spec = ?, status = ?, updated_at = ?, version = version + 1"+
			" WHERE id = ? AND version = ?",
		e.Name, string(e.State), spec, status, t.s.d.timeArg(updated), e.ID, e.Version)
	if err != nil {
		return err
	}
	if n == 0 {
		return t.staleVersion(ctx, "endpoints", "endpoint", e.ID, e.Version)
	}
	e.Version++
	e.UpdatedAt = updated
	return nil
}

// ---- jobs ----

const jobCols = "id, tenant_id, endpoint_id, state, input, output, error, attempts, max_attempts, worker," +
	" lease_owner, lease_until, created_at, started_at, finished_at, expires_at, version, idempotency_key, key_id"

func scanJob(sc scanner) (*cloud.Job, error) {
	var j cloud.Job
	err := sc.Scan(&j.ID, &j.TenantID, &j.EndpointID, &j.State, rawCol{&j.Input}, rawCol{&j.Output}, &j.Error,
		&j.Attempts, &j.MaxAttempts, &j.Worker, &j.LeaseOwner, timeCol{&j.LeaseUntil}, timeCol{&j.CreatedAt},
		nullTimeCol{&j.StartedAt}, nullTimeCol{&j.FinishedAt}, nullTimeCol{&j.ExpiresAt}, &j.Version, &j.IdempotencyKey, &j.KeyID)
	return &j, err
}

func validJob(j *cloud.Job) error {
	switch {
	case j.ID == "":
		return invalidf("job has no id")
	case j.TenantID == "" || j.EndpointID == "":
		return invalidf("job %s has no tenant or endpoint", j.ID)
	case j.MaxAttempts < 1:
		return invalidf("job %s: max attempts %d is below 1", j.ID, j.MaxAttempts)
	}
	switch j.State {
	case cloud.JobQueued, cloud.JobRunning, cloud.JobCompleted, cloud.JobFailed, cloud.JobCancelled:
		return nil
	}
	return invalidf("job %s: state %q is unknown", j.ID, j.State)
}

// jobDocs compacts a job's input and output (nil stays SQL NULL) and sets
// them on j as they read back.
func jobDocs(j *cloud.Job) (in, out any, err error) {
	doc := func(f *json.RawMessage) (any, error) {
		if len(*f) == 0 {
			*f = nil
			return nil, nil
		}
		b, err := compactJSON(*f)
		if err != nil {
			return nil, invalidf("job %s: %v", j.ID, err)
		}
		*f = b
		return string(b), nil
	}
	if in, err = doc(&j.Input); err != nil {
		return nil, nil, err
	}
	out, err = doc(&j.Output)
	return in, out, err
}

func normJobTimes(j *cloud.Job) {
	j.CreatedAt, j.LeaseUntil = normTime(j.CreatedAt), normTime(j.LeaseUntil)
	j.StartedAt, j.FinishedAt, j.ExpiresAt = normTimePtr(j.StartedAt), normTimePtr(j.FinishedAt), normTimePtr(j.ExpiresAt)
}

func (t *tx) jobByKey(ctx context.Context, j *cloud.Job) error {
	found := true
	old, err := one(ctx, t, "find job by idempotency key", func() error { found = false; return nil },
		"SELECT "+jobCols+" FROM endpoint_jobs WHERE endpoint_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
		[]any{j.EndpointID, j.IdempotencyKey}, scanJob)
	if err != nil || !found {
		return err
	}
	key := j.IdempotencyKey
	*j = *old
	return idempotencyConflict("job", old.ID, key)
}

func (t *tx) CreateJob(ctx context.Context, j *cloud.Job) error {
	if err := validJob(j); err != nil {
		return err
	}
	if j.IdempotencyKey != "" {
		if err := t.jobByKey(ctx, j); err != nil {
			return err
		}
	}
	in, out, err := jobDocs(j)
	if err != nil {
		return err
	}
	normJobTimes(j)
	d := &t.s.d
	n, err := t.execN(ctx, "create job "+j.ID,
		"INSERT INTO endpoint_jobs ("+jobCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?) ON CONFLICT DO NOTHING",
		j.ID, j.TenantID, j.EndpointID, string(j.State), in, out, j.Error, j.Attempts, j.MaxAttempts, j.Worker,
		j.LeaseOwner, d.timeArg(j.LeaseUntil), d.timeArg(j.CreatedAt), d.nullTimeArg(j.StartedAt),
		d.nullTimeArg(j.FinishedAt), d.nullTimeArg(j.ExpiresAt), j.IdempotencyKey, j.KeyID)
	if err != nil {
		return err
	}
	if n == 0 {
		if j.IdempotencyKey != "" {
			if err := t.jobByKey(ctx, j); err != nil {
				return err
			}
		}
		return conflictf("job %s already exists", j.ID)
	}
	j.Version = 1
	return nil
}

func (t *tx) GetJob(ctx context.Context, id string) (*cloud.Job, error) {
	return one(ctx, t, "get job "+id, func() error { return notFoundf("job %s not found", id) },
		"SELECT "+jobCols+" FROM endpoint_jobs WHERE id = ?", []any{id}, scanJob)
}

// UpdateJob writes everything but the fields fixed at creation (ID,
// TenantID, EndpointID, Input, MaxAttempts, CreatedAt, IdempotencyKey,
// KeyID).
func (t *tx) UpdateJob(ctx context.Context, j *cloud.Job) error {
	if err := validJob(j); err != nil {
		return err
	}
	_, out, err := jobDocs(j)
	if err != nil {
		return err
	}
	normJobTimes(j)
	d := &t.s.d
	n, err := t.execN(ctx, "update job "+j.ID,
		"UPDATE endpoint_jobs SET state = ?, output = ?, error = ?, attempts = ?, worker = ?, lease_owner = ?,"+
			" lease_until = ?, started_at = ?, finished_at = ?, expires_at = ?, version = version + 1"+
			" WHERE id = ? AND version = ?",
		string(j.State), out, j.Error, j.Attempts, j.Worker, j.LeaseOwner, d.timeArg(j.LeaseUntil),
		d.nullTimeArg(j.StartedAt), d.nullTimeArg(j.FinishedAt), d.nullTimeArg(j.ExpiresAt), j.ID, j.Version)
	if err != nil {
		return err
	}
	if n == 0 {
		return t.staleVersion(ctx, "endpoint_jobs", "job", j.ID, j.Version)
	}
	j.Version++
	return nil
}

func (t *tx) ClaimJobs(ctx context.Context, endpointID, owner string, n int, now, until time.Time) ([]*cloud.Job, error) {
	if n <= 0 {
		return nil, nil
	}
	d := &t.s.d
	now, until = normTime(now), normTime(until)
	jobs, err := list(ctx, t, "find jobs to claim",
		"SELECT "+jobCols+" FROM endpoint_jobs WHERE endpoint_id = ? AND (state = ? OR state = ? AND lease_until < ?)"+
			" ORDER BY created_at, id LIMIT ?",
		[]any{endpointID, string(cloud.JobQueued), string(cloud.JobRunning), d.timeArg(now), n}, scanJob)
	if err != nil {
		return nil, err
	}
	out := jobs[:0]
	for _, j := range jobs {
		j.State, j.LeaseOwner, j.LeaseUntil, j.Attempts = cloud.JobRunning, owner, until, j.Attempts+1
		started := now
		j.StartedAt = &started
		if err := t.UpdateJob(ctx, j); err != nil {
			if cloud.IsConflict(err) {
				continue // another claimer took it
			}
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

func (t *tx) ListLeasedJobs(ctx context.Context, owner string) ([]*cloud.Job, error) {
	return list(ctx, t, "list leased jobs",
		"SELECT "+jobCols+" FROM endpoint_jobs WHERE lease_owner = ? AND state = ? ORDER BY id",
		[]any{owner, string(cloud.JobRunning)}, scanJob)
}

func (t *tx) CountJobs(ctx context.Context, endpointIDs ...string) (map[string]cloud.JobCounts, error) {
	q := "SELECT endpoint_id, state, COUNT(*) FROM endpoint_jobs WHERE "
	args := []any{}
	cond, args := inList("state", []cloud.JobState{cloud.JobQueued, cloud.JobRunning}, args)
	q += cond
	if len(endpointIDs) > 0 {
		var c string
		c, args = inList("endpoint_id", endpointIDs, args)
		q += " AND " + c
	}
	type row struct {
		id, state string
		n         int
	}
	rows, err := list(ctx, t, "count jobs", q+" GROUP BY endpoint_id, state", args, func(sc scanner) (*row, error) {
		var r row
		err := sc.Scan(&r.id, &r.state, &r.n)
		return &r, err
	})
	if err != nil {
		return nil, err
	}
	out := map[string]cloud.JobCounts{}
	for _, r := range rows {
		c := out[r.id]
		if cloud.JobState(r.state) == cloud.JobQueued {
			c.Queued = r.n
		} else {
			c.Running = r.n
		}
		out[r.id] = c
	}
	return out, nil
}

func (t *tx) ListJobs(ctx context.Context, endpointID string, limit int) ([]*cloud.Job, error) {
	if limit <= 0 {
		return nil, nil
	}
	return list(ctx, t, "list jobs",
		"SELECT "+jobCols+" FROM endpoint_jobs WHERE endpoint_id = ? ORDER BY created_at DESC, id DESC LIMIT ?",
		[]any{endpointID, limit}, scanJob)
}

func (t *tx) DeleteExpiredJobs(ctx context.Context, now time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, nil
	}
	return t.execN(ctx, "delete expired jobs",
		"DELETE FROM endpoint_jobs WHERE id IN (SELECT id FROM endpoint_jobs WHERE expires_at IS NOT NULL AND expires_at < ?"+
			" ORDER BY expires_at LIMIT ?)", t.s.d.timeArg(normTime(now)), limit)
}
