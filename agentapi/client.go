package agentapi

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// Client is the agent's side of the protocol. An agent joins with a client
// made without a token (NewClient(url, "", nil)), then makes a new client
// with the credential the join answered and uses it for everything else.
// The methods' signatures are those of the agent's Server interface
// (agent/agent.go), which *Client implements. Every method returns the
// API's error as a *cloud.Error, so callers branch with cloud.ErrorCode;
// transport failures are returned as they are. A Client is safe for
// concurrent use.
type Client struct {
	r *rest.Client
}

// NewClient returns a client of the server at baseURL (e.g.
// "http://127.0.0.1:8080") that authenticates with token, the agent's
// credential (empty to join). A nil hc uses http.DefaultClient.
func NewClient(baseURL, token string, hc *http.Client) *Client {
	return &Client{r: rest.New(baseURL, token, hc)}
}

// Join joins the host that req.Inventory describes with req.JoinToken,
// and returns the host's ID and the agent's credential (shown only once).
// Joining again with the ID of an existing host (Inventory.Host.ID)
// re-issues the credential and revokes the earlier ones. The client needs
// no token for it.
func (c *Client) Join(ctx context.Context, req JoinRequest) (*JoinResponse, error) {
	var out JoinResponse
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/agent/join", Body: req, Out: &out})
	return rest.NilOnErr(&out, err)
}

// Heartbeat tells the server that the agent's host is alive;
// req.Inventory, when not nil, is its current inventory (send it when it
// changed). The answer says how often the server wants heartbeats; a
// server from before it answers 204, and then an empty one.
func (c *Client) Heartbeat(ctx context.Context, req HeartbeatRequest) (*HeartbeatResponse, error) {
	var out HeartbeatResponse
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/agent/heartbeat", Body: req, Out: &out})
	return rest.NilOnErr(&out, err)
}

// Assignments lists what the agent's host must run or stop.
func (c *Client) Assignments(ctx context.Context) (*AssignmentList, error) {
	var out AssignmentList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/agent/assignments", Out: &out})
	return rest.NilOnErr(&out, err)
}

// WatchAssignments lists the host's assignments as Assignments does,
// with their version. With a version (one an earlier call returned) and a
// wait, the server answers when the list no longer has that version, or
// after wait (at most MaxAssignmentWait) with the same list: an agent that
// calls again at once hears of a placement within its round trip. A
// server from before the watch ignores both and answers at once, without
// a version.
func (c *Client) WatchAssignments(ctx context.Context, version string, wait time.Duration) (*AssignmentList, error) {
	q := url.Values{}
	if version != "" {
		q.Set("version", version)
	}
	if wait > 0 {
		q.Set("wait", strconv.FormatInt(wait.Milliseconds(), 10)+"ms")
	}
	path := "/v1/agent/assignments"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out AssignmentList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: path, Out: &out})
	return rest.NilOnErr(&out, err)
}

// ReportStatus reports what became of an instance's workload. A report
// that no longer applies succeeds without a change; a not_found error
// means the instance is no longer the host's: stop it and forget it.
func (c *Client) ReportStatus(ctx context.Context, instanceID string, rep StatusReport) error {
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("agent", "instances", instanceID, "status"), Body: rep})
	return err
}

// AppendLogs sends a chunk of an instance's output, at most 1 MiB.
func (c *Client) AppendLogs(ctx context.Context, instanceID string, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("agent", "instances", instanceID, "logs"),
		Raw: data, RawType: "text/plain; charset=utf-8"})
	return err
}

// ReportMetrics sends utilization samples of the host's instances. The
// server takes all of them or none: a not_found error names (details "id")
// an instance that is not on the agent's host any more.
func (c *Client) ReportMetrics(ctx context.Context, rep MetricsReport) error {
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/agent/metrics", Body: rep})
	return err
}

// SetScaleInLock takes or releases an instance's completion lock and
// returns the instance's scale-in protection as the server recorded it.
func (c *Client) SetScaleInLock(ctx context.Context, instanceID string, req LockRequest) (*cloud.ScaleIn, error) {
	var out cloud.ScaleIn
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("agent", "instances", instanceID, "scale-in-lock"), Body: req, Out: &out})
	return rest.NilOnErr(&out, err)
}

// RetryAfter is how long a rate-limited answer (429) asks the agent to
// wait before it calls again, and false for any other error or one that
// does not say.
func RetryAfter(err error) (time.Duration, bool) { return rest.RetryAfter(err) }
