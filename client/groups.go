package client

import (
	"context"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// CreateGroup creates an autoscaling group. A non-empty idemKey makes
// retries safe: the same key returns the group the first call created.
func (c *Client) CreateGroup(ctx context.Context, req api.CreateGroupRequest, idemKey string) (*cloud.Group, error) {
	var out cloud.Group
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/groups", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// Groups lists groups: the caller's tenant's, or for an admin one
// tenant's (tenant not empty) or every tenant's; those in states, or when
// none are given those not deleted.
func (c *Client) Groups(ctx context.Context, tenant string, states ...cloud.GroupState) ([]*cloud.Group, error) {
	st := make([]string, len(states))
	for i, s := range states {
		st[i] = string(s)
	}
	var out api.GroupList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/groups" + rest.Query("tenant", tenant, "state", strings.Join(st, ",")), Out: &out})
	return out.Groups, err
}

// GetGroup reads a group with its members and recent events; its Version
// is what If-Match takes.
func (c *Client) GetGroup(ctx context.Context, id string) (*api.GroupDescribe, error) {
	var out api.GroupDescribe
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("groups", id), Out: &out})
	return rest.NilOnErr(&out, err)
}

// UpdateGroup changes a group (absent fields are kept). A non-zero
// ifMatch is the version the caller saw; if the group changed since, the
// call fails with a conflict.
func (c *Client) UpdateGroup(ctx context.Context, id string, req api.UpdateGroupRequest, ifMatch int64) (*cloud.Group, error) {
	var out cloud.Group
	_, _, err := c.r.Do(ctx, rest.Call{Method: "PATCH", Path: rest.PathOf("groups", id), Body: req, Header: ifMatchHeader(ifMatch), Out: &out})
	return rest.NilOnErr(&out, err)
}

// DeleteGroup starts deleting a group: it answers the group, deleting;
// the server terminates its members and then marks it deleted.
func (c *Client) DeleteGroup(ctx context.Context, id string, ifMatch int64) (*cloud.Group, error) {
	var out cloud.Group
	_, _, err := c.r.Do(ctx, rest.Call{Method: "DELETE", Path: rest.PathOf("groups", id), Header: ifMatchHeader(ifMatch), Out: &out})
	return rest.NilOnErr(&out, err)
}

// SetGroupDesired sets a group's desired capacity.
func (c *Client) SetGroupDesired(ctx context.Context, id string, req api.SetDesiredRequest) (*cloud.Group, error) {
	var out cloud.Group
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("groups", id, "desired"), Body: req, Out: &out})
	return rest.NilOnErr(&out, err)
}

// GroupEvents returns one page of a group's events, oldest first.
func (c *Client) GroupEvents(ctx context.Context, id string, o EventsOptions) (*api.EventList, error) {
	return c.resourceEvents(ctx, "groups", id, o)
}

// PutMetrics publishes custom metric points of a group.
func (c *Client) PutMetrics(ctx context.Context, req api.PutMetricsRequest) error {
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/metrics", Body: req})
	return err
}

// SetProtection sets or clears an instance's scale-in protection.
func (c *Client) SetProtection(ctx context.Context, instanceID string, protected bool) (*cloud.Instance, error) {
	var out cloud.Instance
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("instances", instanceID, "protection"),
		Body: api.ProtectRequest{Protected: &protected}, Out: &out})
	return rest.NilOnErr(&out, err)
}

// GroupForecast returns a group's forecast beside its actual load, with the
// backtest's error.
func (c *Client) GroupForecast(ctx context.Context, id string) (*api.GroupForecast, error) {
	var out api.GroupForecast
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("groups", id, "forecast"), Out: &out})
	return rest.NilOnErr(&out, err)
}
