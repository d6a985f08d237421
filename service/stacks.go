package service

import (
	"context"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// Stacks plans, records, shows and checks stacks: sets of resources made
// from one template (package stack). Apply and Destroy record what is
// wanted and return at once; the stack engine (package stackengine, run
// by the leader's stack controller) carries it out, resource by resource
// through the other services' create, update and delete paths, with
// idempotency keys derived from the stack, the resource copy and its
// generation, so that a step cut short by a crash is completed, never
// repeated. Stacks keeps the rules: names, limits, the record's format,
// what a plan checks, and the reads of a stack's live resources.
type Stacks struct {
	base
	// svc are the services a stack's resources are read through: the
	// bundle this one belongs to.
	svc *Services
}

// Plan answers what applying req would change, cost and place; it writes
// nothing.
func (s *Stacks) Plan(ctx context.Context, a Actor, req api.StackRequest) (*api.StackPlan, error) {
	return s.plan(ctx, a, req)
}

// Apply records req as the wanted state of the stack named name (creating
// it when the tenant has none of that name) and answers the stack,
// applying; the stack engine carries it out. The template and parameters are checked
// first, as Plan checks them: a template that cannot bind, or a plan that
// would change a commitment, is refused and nothing is written.
func (s *Stacks) Apply(ctx context.Context, a Actor, name string, req api.ApplyStackRequest) (*cloud.Stack, error) {
	return s.apply(ctx, a, name, req)
}

// Destroy marks the stack for destruction and answers it, destroying: the
// stack engine deletes its resources in reverse dependency order,
// keeping those with deletion_policy retain (and commitments).
func (s *Stacks) Destroy(ctx context.Context, a Actor, tenant, name string) (*cloud.Stack, error) {
	return s.destroy(ctx, a, tenant, name)
}

// Get answers a stack actor a may see, with its resources' live status.
func (s *Stacks) Get(ctx context.Context, a Actor, tenant, name string) (*api.StackView, error) {
	return s.get(ctx, a, tenant, name)
}

// List answers the stacks actor a may see that are not destroyed: a
// member's tenant's; an admin's every tenant's, or tenant's.
func (s *Stacks) List(ctx context.Context, a Actor, tenant string) ([]*cloud.Stack, error) {
	return s.list(ctx, a, tenant)
}

// Events answers the stack's events after the event ID after, oldest
// first, at most limit (0: 1000). The name finds the tenant's live stack
// of that name or, when none is live, the latest destroyed one, so that a
// destroy's events stay readable after it.
func (s *Stacks) Events(ctx context.Context, a Actor, tenant, name string, after int64, limit int) ([]*cloud.StackEvent, error) {
	return s.events(ctx, a, tenant, name, after, limit)
}

// Drift compares the stack's live resources with its last applied state
// and answers each difference (none: in sync). The next apply repairs
// them.
func (s *Stacks) Drift(ctx context.Context, a Actor, tenant, name string) ([]api.StackDrift, error) {
	return s.drift(ctx, a, tenant, name)
}
