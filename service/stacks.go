package service

import (
	"context"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/stack"
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

// StackRequest is a plan or an apply: the template's source (YAML or
// JSON), its parameters as K=V strings, as the CLI takes them.
type StackRequest struct {
	// Tenant is for admins acting for another tenant.
	Tenant string `json:"tenant,omitempty"`
	// Name is the stack's: unique among the tenant's stacks that are not
	// destroyed. A plan without a name plans a new stack.
	Name       string            `json:"name"`
	Template   string            `json:"template"`
	Parameters map[string]string `json:"parameters,omitempty"`
	// KeepOnFailure keeps what a failed apply created instead of rolling
	// it back.
	KeepOnFailure bool `json:"keep_on_failure,omitempty"`
}

// StackPlan is what Plan answers: the changes an apply would make against
// the stack's current state, what the whole stack would cost per hour, and
// whether its compute fits in the fleet now.
type StackPlan struct {
	Name    string               `json:"name"`
	Exists  bool                 `json:"exists"`
	Changes []*stack.Change      `json:"changes"`
	Summary map[stack.Action]int `json:"summary"`
	Cost    StackCost            `json:"cost"`
	Fit     *StackFit            `json:"fit,omitempty"`
	Outputs map[string]any       `json:"outputs,omitempty"`
	Params  map[string]any       `json:"parameters,omitempty"`
	_       struct{}             `json:"-"`
}

// StackCost is a stack's price per hour once applied, at the prices in
// force: OnDemand prices every instance (spot requests too) on demand;
// WithSpot prices spot requests at their pools' current spot price. Lines
// say what each resource adds; Assumptions what the figures leave out.
type StackCost struct {
	OnDemand    money.Micros    `json:"on_demand_per_hour"`
	WithSpot    money.Micros    `json:"with_spot_per_hour"`
	Lines       []StackCostLine `json:"lines"`
	Assumptions []string        `json:"assumptions,omitempty"`
}

// StackCostLine is one resource copy's part of StackCost.
type StackCostLine struct {
	Address  string       `json:"address"`
	What     string       `json:"what"`
	OnDemand money.Micros `json:"on_demand_per_hour"`
	WithSpot money.Micros `json:"with_spot_per_hour"`
}

// StackFit is the placement dry run: every instance the stack would run,
// placed in order on a copy of the scheduler's fleet (placement groups,
// labels and zones honoured), reserving nothing. Fits is false when one
// does not fit; its line says why, with the engine's per-reason host
// counts. Known is false when this server does not lead (no fleet).
type StackFit struct {
	Known bool           `json:"known"`
	Fits  bool           `json:"fits"`
	Lines []StackFitLine `json:"lines,omitempty"`
}

// StackFitLine is one instance of the dry run.
type StackFitLine struct {
	Address string `json:"address"`
	Fits    bool   `json:"fits"`
	Host    string `json:"host,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// StackView is a stack as Get answers it: the record, each resource copy
// with its ID and live status, the outputs and the parameters.
type StackView struct {
	*cloud.Stack
	Resources []StackResource `json:"resources"`
	Outputs   map[string]any  `json:"outputs,omitempty"`
	Params    map[string]any  `json:"parameters,omitempty"`
}

// StackResource is one resource copy of a stack.
type StackResource struct {
	Address string `json:"address"`
	Type    string `json:"type"`
	ID      string `json:"id,omitempty"`
	// Status is the live resource's state (an instance's state, "active",
	// "deleted", ...), "retained" for one the stack let go.
	Status string `json:"status"`
}

// StackDrift is one difference between a stack's last applied state and
// its live resources.
type StackDrift struct {
	Address string `json:"address"`
	Type    string `json:"type"`
	ID      string `json:"id"`
	// Drift is "deleted" (terminated, deleted or released outside the
	// stack), "stopped" or "changed" (Diffs says what).
	Drift string            `json:"drift"`
	Diffs []stack.FieldDiff `json:"diffs,omitempty"`
}

// Plan answers what applying req would change, cost and place; it writes
// nothing.
func (s *Stacks) Plan(ctx context.Context, a Actor, req StackRequest) (*StackPlan, error) {
	return s.plan(ctx, a, req)
}

// Apply records req as the stack's wanted state (creating the stack when
// the tenant has none of that name) and answers the stack, applying; the
// stack engine carries it out. The template and parameters are checked
// first, as Plan checks them: a template that cannot bind, or a plan that
// would change a commitment, is refused and nothing is written.
func (s *Stacks) Apply(ctx context.Context, a Actor, req StackRequest) (*cloud.Stack, error) {
	return s.apply(ctx, a, req)
}

// Destroy marks the stack for destruction and answers it, destroying: the
// stack engine deletes its resources in reverse dependency order,
// keeping those with deletion_policy retain (and commitments).
func (s *Stacks) Destroy(ctx context.Context, a Actor, tenant, name string) (*cloud.Stack, error) {
	return s.destroy(ctx, a, tenant, name)
}

// Get answers a stack actor a may see, with its resources' live status.
func (s *Stacks) Get(ctx context.Context, a Actor, tenant, name string) (*StackView, error) {
	return s.get(ctx, a, tenant, name)
}

// List answers the stacks actor a may see that are not destroyed: a
// member's tenant's; an admin's every tenant's, or tenant's.
func (s *Stacks) List(ctx context.Context, a Actor, tenant string) ([]*cloud.Stack, error) {
	return s.list(ctx, a, tenant)
}

// Events answers the stack's events after the event ID after, oldest
// first, at most limit (0: 1000).
func (s *Stacks) Events(ctx context.Context, a Actor, tenant, name string, after int64, limit int) ([]*cloud.StackEvent, error) {
	return s.events(ctx, a, tenant, name, after, limit)
}

// Drift compares the stack's live resources with its last applied state
// and answers each difference (none: in sync). The next apply repairs
// them.
func (s *Stacks) Drift(ctx context.Context, a Actor, tenant, name string) ([]StackDrift, error) {
	return s.drift(ctx, a, tenant, name)
}
