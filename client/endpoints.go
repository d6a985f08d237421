package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// Serverless endpoints (docs/ENDPOINTS.md). ref is an endpoint's ID or
// name.

// CreateEndpoint creates an endpoint; a non-empty idemKey makes retries
// safe.
func (c *Client) CreateEndpoint(ctx context.Context, req api.CreateEndpointRequest, idemKey string) (*cloud.Endpoint, error) {
	var out cloud.Endpoint
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/endpoints", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// Endpoints lists the endpoints the caller sees (deleted ones too when
// all is set); tenant is for admins.
func (c *Client) Endpoints(ctx context.Context, tenant string, all bool) ([]*cloud.Endpoint, error) {
	var out api.ListEndpointsResponse
	a := ""
	if all {
		a = "true"
	}
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/endpoints" + rest.Query("tenant", tenant, "all", a), Out: &out})
	return out.Endpoints, err
}

// GetEndpoint describes an endpoint: its workers, queue, latency and
// cold starts.
func (c *Client) GetEndpoint(ctx context.Context, ref string) (*api.EndpointDetail, error) {
	var out api.EndpointDetail
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("endpoints", ref), Out: &out})
	return rest.NilOnErr(&out, err)
}

// UpdateEndpoint changes an endpoint; a non-zero ifMatch is the version
// the caller saw.
func (c *Client) UpdateEndpoint(ctx context.Context, ref string, req api.UpdateEndpointRequest, ifMatch int64) (*cloud.Endpoint, error) {
	var out cloud.Endpoint
	_, _, err := c.r.Do(ctx, rest.Call{Method: "PATCH", Path: rest.PathOf("endpoints", ref), Body: req, Header: ifMatchHeader(ifMatch), Out: &out})
	return rest.NilOnErr(&out, err)
}

// DeleteEndpoint starts deleting an endpoint (its workers are
// terminated, its waiting jobs cancelled).
func (c *Client) DeleteEndpoint(ctx context.Context, ref string) (*cloud.Endpoint, error) {
	var out cloud.Endpoint
	_, _, err := c.r.Do(ctx, rest.Call{Method: "DELETE", Path: rest.PathOf("endpoints", ref), Out: &out})
	return rest.NilOnErr(&out, err)
}

// RunJob queues a job with input (any JSON) and answers it queued.
func (c *Client) RunJob(ctx context.Context, ref string, input json.RawMessage, idemKey string) (*cloud.Job, error) {
	var out cloud.Job
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("endpoints", ref, "run"), Body: api.RunJobRequest{Input: input},
		Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// RunJobSync queues a job and waits for it up to wait (whole seconds):
// the job finished, or still queued or running when the wait ran out.
func (c *Client) RunJobSync(ctx context.Context, ref string, input json.RawMessage, wait time.Duration, idemKey string) (*cloud.Job, error) {
	var out cloud.Job
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("endpoints", ref, "runsync") + rest.Query("wait", strconv.Itoa(int(wait.Seconds()))),
		Body: api.RunJobRequest{Input: input}, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// JobStatus reads a job of an endpoint.
func (c *Client) JobStatus(ctx context.Context, ref, job string) (*cloud.Job, error) {
	var out cloud.Job
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("endpoints", ref, "status", job), Out: &out})
	return rest.NilOnErr(&out, err)
}

// CancelJob cancels a job that has not finished.
func (c *Client) CancelJob(ctx context.Context, ref, job string) (*cloud.Job, error) {
	var out cloud.Job
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("endpoints", ref, "cancel", job), Out: &out})
	return rest.NilOnErr(&out, err)
}

// EndpointPath is the path of an HTTP-mode endpoint's request to path.
func EndpointPath(ref, path string) string {
	return rest.PathOf("endpoints", ref, "http") + "/" + strings.TrimLeft(path, "/")
}

// EndpointURL is the URL of an HTTP-mode endpoint's request to path.
func (c *Client) EndpointURL(ref, path string) string { return c.r.URL(EndpointPath(ref, path)) }

// EndpointRequest sends an HTTP request to an HTTP-mode endpoint's
// worker (path is the worker's path) with the caller's token. A 2xx
// answer comes back with its body open; any other answer as an error
// (unavailable, 503, when no worker came free within the endpoint's
// queue wait: its Retry-After header says when to try again).
func (c *Client) EndpointRequest(ctx context.Context, ref, method, path string, body io.Reader, header http.Header) (*http.Response, error) {
	req, err := c.r.NewRequest(ctx, method, EndpointPath(ref, path), body)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	return c.r.Send(req)
}

// CreateEndpointKey makes a key that calls endpoint ref only; the answer
// carries its secret, shown this once (a retry with the same non-empty
// idemKey answers the key without it).
func (c *Client) CreateEndpointKey(ctx context.Context, ref string, req api.CreateEndpointKeyRequest, idemKey string) (*api.CreatedEndpointKey, error) {
	var out api.CreatedEndpointKey
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("endpoints", ref, "keys"), Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// EndpointKeys lists endpoint ref's keys, revoked ones too when all is
// set; never their secrets.
func (c *Client) EndpointKeys(ctx context.Context, ref string, all bool) ([]*cloud.EndpointKey, error) {
	var out api.ListEndpointKeysResponse
	a := ""
	if all {
		a = "true"
	}
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("endpoints", ref, "keys") + rest.Query("all", a), Out: &out})
	return out.Keys, err
}

// RevokeEndpointKey revokes key id of endpoint ref.
func (c *Client) RevokeEndpointKey(ctx context.Context, ref, id string) (*cloud.EndpointKey, error) {
	var out cloud.EndpointKey
	_, _, err := c.r.Do(ctx, rest.Call{Method: "DELETE", Path: rest.PathOf("endpoints", ref, "keys", id), Out: &out})
	return rest.NilOnErr(&out, err)
}
