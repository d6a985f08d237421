package client

import (
	"context"
	"strconv"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// The stack calls take tenant for admins acting on another tenant's stack
// (an ID; empty: the caller's own), since a stack is named, not
// identified, in its tenant.

// PlanStack answers what applying req's template would change, cost and
// place; it changes nothing.
func (c *Client) PlanStack(ctx context.Context, req api.StackRequest) (*api.StackPlan, error) {
	var out api.StackPlan
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/stacks/plan", Body: req, Out: &out})
	return rest.NilOnErr(&out, err)
}

// ApplyStack makes req the wanted state of the stack name (creating it
// when the tenant has none of that name) and returns the stack, applying;
// poll GetStack to see the apply through.
func (c *Client) ApplyStack(ctx context.Context, name string, req api.ApplyStackRequest) (*cloud.Stack, error) {
	var out cloud.Stack
	_, _, err := c.r.Do(ctx, rest.Call{Method: "PUT", Path: rest.PathOf("stacks", name), Body: req, Out: &out})
	return rest.NilOnErr(&out, err)
}

// DestroyStack starts destroying the stack name and returns it,
// destroying.
func (c *Client) DestroyStack(ctx context.Context, tenant, name string) (*cloud.Stack, error) {
	var out cloud.Stack
	_, _, err := c.r.Do(ctx, rest.Call{Method: "DELETE", Path: rest.PathOf("stacks", name) + rest.Query("tenant", tenant), Out: &out})
	return rest.NilOnErr(&out, err)
}

// GetStack reads the stack name with its resources' live status, its
// outputs and parameters.
func (c *Client) GetStack(ctx context.Context, tenant, name string) (*api.StackView, error) {
	var out api.StackView
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("stacks", name) + rest.Query("tenant", tenant), Out: &out})
	return rest.NilOnErr(&out, err)
}

// Stacks lists the stacks that are not destroyed: the caller's tenant's,
// or for an admin one tenant's (tenant not empty) or every tenant's.
func (c *Client) Stacks(ctx context.Context, tenant string) ([]*cloud.Stack, error) {
	var out api.StackList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/stacks" + rest.Query("tenant", tenant), Out: &out})
	return out.Stacks, err
}

// StackEvents returns one page of a stack's events, oldest first, after
// the event ID after (0: from the first).
func (c *Client) StackEvents(ctx context.Context, tenant, name string, after int64, limit int) (*api.StackEventList, error) {
	var out api.StackEventList
	q := rest.Query("tenant", tenant, "after", positive(after), "limit", positive(int64(limit)))
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("stacks", name, "events") + q, Out: &out})
	return rest.NilOnErr(&out, err)
}

// StackDrift compares the stack's live resources with its last applied
// state.
func (c *Client) StackDrift(ctx context.Context, tenant, name string) (*api.StackDriftReport, error) {
	var out api.StackDriftReport
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("stacks", name, "drift") + rest.Query("tenant", tenant), Out: &out})
	return rest.NilOnErr(&out, err)
}

// positive formats n for a query, "" (left out) when it is not positive.
func positive(n int64) string {
	if n <= 0 {
		return ""
	}
	return strconv.FormatInt(n, 10)
}
