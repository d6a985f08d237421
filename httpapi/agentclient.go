package httpapi

import (
	"context"
	"strconv"

	"github.com/gpucloud/gpucloud/cloud"
)

// The client side of the agent protocol. An agent joins with a client
// made without a token (NewClient(url, "", nil)), then makes a new client
// with the credential the join answered and uses it for everything else.
// The methods' signatures are those of the agent's Server interface
// (agent/agent.go), which *Client implements.

// CreateJoinToken creates a join token (admin). The secret in the answer
// is shown only once; agents present it to Join.
func (c *Client) CreateJoinToken(ctx context.Context, req CreateJoinTokenRequest) (*CreatedToken, error) {
	var out CreatedToken
	_, _, err := c.do(ctx, call{method: "POST", path: "/v1/join-tokens", body: req, out: &out})
	return nilOnErr(&out, err)
}

// JoinTokens lists the join tokens (admin), revoked and expired ones
// included. RevokeToken revokes one.
func (c *Client) JoinTokens(ctx context.Context) ([]*cloud.Token, error) {
	var out TokenList
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/join-tokens", out: &out})
	return out.Tokens, err
}

// Join joins the host that req.Inventory describes with req.JoinToken,
// and returns the host's ID and the agent's credential (shown only once).
// Joining again with the ID of an existing host (Inventory.Host.ID)
// re-issues the credential and revokes the earlier ones. The client needs
// no token for it.
func (c *Client) Join(ctx context.Context, req JoinRequest) (*JoinResponse, error) {
	var out JoinResponse
	_, _, err := c.do(ctx, call{method: "POST", path: "/v1/agent/join", body: req, out: &out})
	return nilOnErr(&out, err)
}

// Heartbeat tells the server that the agent's host is alive;
// req.Inventory, when not nil, is its current inventory (send it when it
// changed).
func (c *Client) Heartbeat(ctx context.Context, req HeartbeatRequest) error {
	_, _, err := c.do(ctx, call{method: "POST", path: "/v1/agent/heartbeat", body: req})
	return err
}

// Assignments lists what the agent's host must run or stop.
func (c *Client) Assignments(ctx context.Context) (*AssignmentList, error) {
	var out AssignmentList
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/agent/assignments", out: &out})
	return nilOnErr(&out, err)
}

// ReportStatus reports what became of an instance's workload. A report
// that no longer applies succeeds without a change; a not_found error
// means the instance is no longer the host's: stop it and forget it.
func (c *Client) ReportStatus(ctx context.Context, instanceID string, rep StatusReport) error {
	_, _, err := c.do(ctx, call{method: "POST", path: pathOf("agent", "instances", instanceID, "status"), body: rep})
	return err
}

// AppendLogs sends a chunk of an instance's output, at most 1 MiB.
func (c *Client) AppendLogs(ctx context.Context, instanceID string, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	_, _, err := c.do(ctx, call{method: "POST", path: pathOf("agent", "instances", instanceID, "logs"),
		raw: data, rawType: "text/plain; charset=utf-8"})
	return err
}

// InstanceLogs reads an instance's output from offset on; the answer's
// Offset is the offset of the next call, equal to it when there is nothing
// new yet.
func (c *Client) InstanceLogs(ctx context.Context, instanceID string, offset int64) (*LogPage, error) {
	var out LogPage
	q := ""
	if offset > 0 {
		q = "?offset=" + strconv.FormatInt(offset, 10)
	}
	_, _, err := c.do(ctx, call{method: "GET", path: pathOf("instances", instanceID, "logs") + q, out: &out})
	return nilOnErr(&out, err)
}
