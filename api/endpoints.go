package api

import (
	"encoding/json"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// CreateEndpointRequest is the body of POST /v1/endpoints: a serverless
// endpoint (docs/ENDPOINTS.md). Absent sizes and times take the defaults
// the docs list; the spec as stored is what the answer shows.
type CreateEndpointRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant string `json:"tenant,omitempty"`
	// Name is unique among the tenant's endpoints that are not deleted;
	// workers are named "<name>-<n>".
	Name string `json:"name"`
	cloud.EndpointSpec
}

// UpdateEndpointRequest is the body of PATCH /v1/endpoints/{id}: absent
// fields stay as they are. A new image, command, environment, volume or
// offering list rolls the workers over: new workers start, and each old one goes
// once it has no request left.
type UpdateEndpointRequest struct {
	Image              *string            `json:"image,omitempty"`
	Command            *[]string          `json:"command,omitempty"`
	Env                *map[string]string `json:"env,omitempty"`
	Volumes            *[]string          `json:"volumes,omitempty"`
	Offerings          *[]string          `json:"offerings,omitempty"`
	Min                *int               `json:"min,omitempty"`
	Max                *int               `json:"max,omitempty"`
	Concurrency        *int               `json:"concurrency,omitempty"`
	IdleTimeoutSeconds *int               `json:"idle_timeout_seconds,omitempty"`
	TimeoutSeconds     *int               `json:"timeout_seconds,omitempty"`
	Retries            *int               `json:"retries,omitempty"`
	RetentionSeconds   *int               `json:"retention_seconds,omitempty"`
	QueueWaitSeconds   *int               `json:"queue_wait_seconds,omitempty"`
	Warm               *int               `json:"warm,omitempty"`
}

// ListEndpointsResponse is the answer of GET /v1/endpoints.
type ListEndpointsResponse struct {
	Endpoints []*cloud.Endpoint `json:"endpoints"`
}

// EndpointDetail is GET /v1/endpoints/{id}: the endpoint, its workers as
// they are now, its queue, its latency and (in its status) its cold
// starts.
type EndpointDetail struct {
	*cloud.Endpoint
	Workers []EndpointWorker `json:"workers"`
	Queue   cloud.JobCounts  `json:"queue"`
	// InFlight counts the HTTP requests this server replica holds for the
	// endpoint, running or waiting for a worker.
	InFlight int `json:"in_flight"`
	// Latency is over the requests and jobs this replica finished in the
	// last 10 minutes (zero when none): from arrival to answer.
	Latency EndpointLatency `json:"latency"`
	// Cost is what the endpoint's workers cost in CostMonth (the current
	// billing month, UTC) so far: the sum of the endpoint's lines on the
	// tenant's invoice, rated as GET /v1/invoices rates it (the queue and
	// the gateway are free). Absent, with CostError saying why, when the
	// month cannot be rated (a gap in the price book).
	Cost      *money.Micros `json:"cost,omitempty"`
	CostMonth string        `json:"cost_month"`
	CostError string        `json:"cost_error,omitempty"`
}

// EndpointWorker is one worker as the endpoint sees it.
type EndpointWorker struct {
	ID    string      `json:"id"`
	Name  string      `json:"name"`
	State cloud.State `json:"state"`
	// Ready: its readiness probe answered 2xx; Busy is how many requests
	// it runs now; Outdated: it runs an earlier spec and goes once idle.
	Ready    bool       `json:"ready"`
	Busy     int        `json:"busy"`
	Outdated bool       `json:"outdated,omitempty"`
	Market   string     `json:"market"`
	Offering string     `json:"offering"`
	IdleFor  *float64   `json:"idle_seconds,omitempty"`
	Created  time.Time  `json:"created_at"`
	ReadyAt  *time.Time `json:"ready_at,omitempty"`
}

// EndpointLatency is a latency summary in milliseconds.
type EndpointLatency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
}

// RunJobRequest is the body of POST /v1/endpoints/{id}/run and runsync:
// the job's input, any JSON (at most 1 MiB), handed to the worker as is.
type RunJobRequest struct {
	Input json.RawMessage `json:"input"`
}

// CreateEndpointKeyRequest is the body of POST /v1/endpoints/{id}/keys:
// an endpoint key (docs/ENDPOINTS.md, "Endpoint keys"). Rate and Burst
// are the key's request limit (0: the defaults, 100 requests a second and
// bursts of 200).
type CreateEndpointKeyRequest struct {
	Name  string `json:"name"`
	Rate  int    `json:"rate,omitempty"`
	Burst int    `json:"burst,omitempty"`
}

// CreatedEndpointKey answers POST /v1/endpoints/{id}/keys: the key and its
// secret, shown this once. A retry with the same Idempotency-Key answers
// the key without its secret, which the server does not keep.
type CreatedEndpointKey struct {
	Key    *cloud.EndpointKey `json:"key"`
	Secret string             `json:"secret,omitempty"`
}

// ListEndpointKeysResponse is the answer of GET /v1/endpoints/{id}/keys.
type ListEndpointKeysResponse struct {
	Keys []*cloud.EndpointKey `json:"keys"`
}

// PausedWorkers counts the workers in ws paused in the warm pool now.
func PausedWorkers(ws []EndpointWorker) int {
	n := 0
	for _, w := range ws {
		if w.State == cloud.Paused {
			n++
		}
	}
	return n
}
