package cloud

import (
	"context"
	"encoding/json"
	"time"
)

// Endpoint is a serverless GPU endpoint (docs/ENDPOINTS.md): an image
// served by workers (instances the endpoint launches and terminates
// itself) that scale with the endpoint's own load, down to zero. Requests
// reach the workers through the server's gateway, either as queued jobs
// (EndpointQueue) or as plain HTTP (EndpointHTTP).
type Endpoint struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	// Name is unique among the tenant's endpoints that are not deleted.
	Name string       `json:"name"`
	Spec EndpointSpec `json:"spec"`

	State EndpointState `json:"state"`
	// Status is the endpoint controller's record: its workers and what it
	// decided last.
	Status EndpointStatus `json:"status"`

	Version        int64     `json:"version"`
	IdempotencyKey string    `json:"-"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// Owner implements Owned.
func (e *Endpoint) Owner() string { return e.TenantID }

// EndpointSpec is what the tenant asked for; Update changes it.
type EndpointSpec struct {
	// Image is the OCI image the workers run (canonical form); Command,
	// when set, replaces its entrypoint; Env is added to its environment.
	Image   string            `json:"image"`
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Volumes are shared volumes (VolumeShared) of the tenant that every
	// worker mounts, read-write, as an instance created with them does. A
	// block volume attaches to one instance at a time and is refused.
	Volumes []string `json:"volumes,omitempty"`
	// Offerings are the acceptable instance types, the first preferred.
	Offerings []string `json:"offerings"`
	// Port is the TCP port the worker's HTTP server listens on.
	Port int `json:"port"`
	// HealthPath is the readiness probe: a worker is ready once a GET of
	// it answers 2xx.
	HealthPath string `json:"health_path"`
	// Mode is how requests reach the workers.
	Mode EndpointMode `json:"mode"`
	// Min and Max bound the workers; Min 0 lets the endpoint scale to zero.
	Min int `json:"min"`
	Max int `json:"max"`
	// Concurrency is how many requests one worker takes at once.
	Concurrency int `json:"concurrency"`
	// IdleTimeoutSeconds: a worker with nothing to do for this long is
	// released (down to Min).
	IdleTimeoutSeconds int `json:"idle_timeout_seconds"`
	// TimeoutSeconds bounds one job's (or request's) run on a worker.
	TimeoutSeconds int `json:"timeout_seconds"`
	// Retries is how many times a job whose attempt failed (its worker was
	// lost, it answered an error, it timed out) runs again.
	Retries int `json:"retries"`
	// RetentionSeconds is how long a finished job's result is kept.
	RetentionSeconds int `json:"retention_seconds"`
	// QueueWaitSeconds is how long an HTTP request waits for a worker
	// with free concurrency before it gets 503 with Retry-After.
	QueueWaitSeconds int `json:"queue_wait_seconds"`
	// Spot launches workers on the spot market first, on demand when no
	// spot capacity fits.
	Spot bool `json:"spot,omitempty"`
	// Warm is the pool of paused workers the endpoint keeps beside those
	// its load asks for (0 to Max): created, made ready, then paused, so
	// that a request resumes one instead of waiting for a cold start. They
	// bill as running workers (the owner pays for the pool). Running and
	// paused workers together are at most Max; Min counts running ones.
	Warm int `json:"warm,omitempty"`
	// Zones and Labels constrain where workers are placed, as an
	// instance's.
	Zones  []string `json:"zones,omitempty"`
	Labels []string `json:"labels,omitempty"`
}

// EndpointMode is how an endpoint takes requests.
type EndpointMode string

const (
	// EndpointQueue: asynchronous jobs (run, runsync, status, cancel),
	// kept in the store until a worker has run them.
	EndpointQueue EndpointMode = "queue"
	// EndpointHTTP: plain HTTP requests proxied to a ready worker with
	// free concurrency.
	EndpointHTTP EndpointMode = "http"
)

// EndpointState is where an endpoint is in its life.
type EndpointState string

const (
	EndpointActive EndpointState = "active"
	// EndpointDeleting: the controller terminates every worker, then
	// marks the endpoint deleted.
	EndpointDeleting EndpointState = "deleting"
	// EndpointDeleted: no worker is left; the row stays for the audit and
	// the name is free again.
	EndpointDeleted EndpointState = "deleted"
)

// EndpointStatus is the controller's record of an endpoint.
type EndpointStatus struct {
	// Workers are the instances launched for the endpoint and not yet
	// released, oldest first.
	Workers []WorkerRef `json:"workers,omitempty"`
	// Generation counts the changes of the workers' spec (image, command,
	// environment, offerings): a worker launched at an earlier one is
	// outdated, replaced, and released once it has nothing to do.
	Generation int64 `json:"generation"`
	// LaunchSeq is the number of the last worker launched (names
	// "<endpoint>-<n>", idempotency keys per launch).
	LaunchSeq int64 `json:"launch_seq"`
	// Desired is the worker count the controller last decided, and
	// Reason why.
	Desired int    `json:"desired"`
	Reason  string `json:"reason,omitempty"`
	// LaunchBlockedUntil: a launch was refused, or workers keep failing
	// (Reason says why), and none is tried before then.
	LaunchBlockedUntil time.Time `json:"launch_blocked_until,omitzero"`
	// Failures counts the controller's rounds in a row that released a
	// failed worker; the n-th holds launches for 10 s·2^(n-1), at most 10
	// minutes. A worker's first readiness resets it.
	Failures int `json:"failures,omitempty"`
	// LastScaleAt is when Desired last changed.
	LastScaleAt time.Time `json:"last_scale_at,omitzero"`
	// ColdStarts are the latest cold starts (at most 20, newest last):
	// from the launch decision to the worker's first ready probe.
	ColdStarts []ColdStart `json:"cold_starts,omitempty"`
	// Hosts are where the endpoint's current workers last ran, the most
	// recent first (at most 4): their image is cached there, and a new
	// worker prefers them (Instance.PreferHosts).
	Hosts []string `json:"hosts,omitempty"`
}

// WorkerRef is one of an endpoint's workers as its status records it.
type WorkerRef struct {
	ID         string    `json:"id"`
	Generation int64     `json:"generation"`
	Market     Market    `json:"market"`
	LaunchedAt time.Time `json:"launched_at"`
}

// ColdStart is one worker's time from its launch to ready.
type ColdStart struct {
	Worker     string    `json:"worker"`
	LaunchedAt time.Time `json:"launched_at"`
	// Each is the time from launch to a step, from the worker's state
	// events: Scheduled, placed on a host (placement); Starting, its
	// agent began its start (the assignment reached the host: the
	// running event less the start's length the agent measured); Running, the
	// container runs (the image, from the host's cache or pulled, and the
	// container's start); Ready, the first readiness probe answered (the
	// handler's start). Scheduled and Starting are 0 where the events
	// were not found, and at least 1 where they were.
	ScheduledMillis int64 `json:"scheduled_ms,omitempty"`
	StartingMillis  int64 `json:"starting_ms,omitempty"`
	RunningMillis   int64 `json:"running_ms"`
	ReadyMillis     int64 `json:"ready_ms"`
	// ImageMillis is how long, within Starting to Running, the image took
	// to be ready on the host (its cache, or a pull), as the agent
	// reported it; the rest of that step is the container's start. 0:
	// not reported.
	ImageMillis int64 `json:"image_ms,omitempty"`
}

// Job is one request to a queue-mode endpoint.
type Job struct {
	ID         string   `json:"id"`
	TenantID   string   `json:"tenant_id"`
	EndpointID string   `json:"endpoint_id"`
	State      JobState `json:"state"`
	// Input is the JSON the caller sent; Output what the worker answered
	// (JSON), Error why the last attempt failed.
	Input  json.RawMessage `json:"input,omitempty"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Attempts counts the runs started; MaxAttempts is 1 + the endpoint's
	// retries when the job was submitted.
	Attempts    int `json:"attempts"`
	MaxAttempts int `json:"max_attempts"`
	// Worker is the instance that ran (or runs) the last attempt.
	Worker string `json:"worker,omitempty"`
	// LeaseOwner is the server replica running the job and LeaseUntil when
	// its claim lapses: a job still running then is run again.
	LeaseOwner string    `json:"-"`
	LeaseUntil time.Time `json:"-"`

	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// ExpiresAt is when a finished job is removed (its retention).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`

	// KeyID is the endpoint key that submitted the job; empty when a
	// user's token did.
	KeyID string `json:"key_id,omitempty"`

	Version        int64  `json:"version"`
	IdempotencyKey string `json:"-"`
}

// Owner implements Owned.
func (j *Job) Owner() string { return j.TenantID }

// JobState is where a job is.
type JobState string

const (
	JobQueued    JobState = "queued"
	JobRunning   JobState = "running"
	JobCompleted JobState = "completed"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
)

// Finished reports whether a job in state s will not run again.
func (s JobState) Finished() bool {
	return s == JobCompleted || s == JobFailed || s == JobCancelled
}

// JobCounts is how many of an endpoint's jobs wait and run.
type JobCounts struct {
	Queued  int `json:"queued"`
	Running int `json:"running"`
}

// Endpoint events.
const (
	EventEndpoint        EventKind = "endpoint"
	EventEndpointScaling EventKind = "endpoint.scaling"
)

// EndpointTx is the store's part for endpoints, their jobs and their
// keys.
type EndpointTx interface {
	EndpointKeyTx

	// CreateEndpoint inserts an endpoint; Conflict if the tenant has a
	// live endpoint of that name, or the idempotency key was used (the
	// first endpoint is then copied into e).
	CreateEndpoint(ctx context.Context, e *Endpoint) error
	GetEndpoint(ctx context.Context, id string) (*Endpoint, error)
	// EndpointByName finds the tenant's live (not deleted) endpoint of
	// that name.
	EndpointByName(ctx context.Context, tenantID, name string) (*Endpoint, error)
	// ListEndpoints lists a tenant's endpoints (every tenant's when empty)
	// in ID order, in the given states (any when none).
	ListEndpoints(ctx context.Context, tenantID string, states ...EndpointState) ([]*Endpoint, error)
	// UpdateEndpoint writes e if its Version is the stored one (Conflict
	// otherwise) and increments it.
	UpdateEndpoint(ctx context.Context, e *Endpoint) error

	// CreateJob inserts a job; Conflict if the idempotency key was used
	// for the endpoint (the first job is then copied into j).
	CreateJob(ctx context.Context, j *Job) error
	GetJob(ctx context.Context, id string) (*Job, error)
	// UpdateJob writes j if its Version is the stored one (Conflict
	// otherwise) and increments it.
	UpdateJob(ctx context.Context, j *Job) error
	// ClaimJobs takes up to n of an endpoint's jobs, oldest first, that
	// are queued or whose lease lapsed before now: each becomes running
	// with LeaseOwner owner, LeaseUntil until, Attempts one more and
	// StartedAt now, and is returned as written.
	ClaimJobs(ctx context.Context, endpointID, owner string, n int, now, until time.Time) ([]*Job, error)
	// ListLeasedJobs lists the running jobs whose lease owner is owner.
	ListLeasedJobs(ctx context.Context, owner string) ([]*Job, error)
	// CountJobs counts the queued and running jobs of each endpoint given
	// (every endpoint with any when none).
	CountJobs(ctx context.Context, endpointIDs ...string) (map[string]JobCounts, error)
	// ListJobs lists an endpoint's latest jobs, newest first, at most
	// limit.
	ListJobs(ctx context.Context, endpointID string, limit int) ([]*Job, error)
	// DeleteExpiredJobs removes finished jobs whose ExpiresAt is before
	// now, at most limit, and answers how many.
	DeleteExpiredJobs(ctx context.Context, now time.Time, limit int) (int64, error)
}
