package api

import (
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/stack"
)

// StackRequest is the body of POST /v1/stacks/plan: a template
// (docs/STACKS.md) and its parameters, planned against the stack of that
// name (a new stack when Name is empty or the tenant has none of it).
type StackRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant string `json:"tenant,omitempty"`
	Name   string `json:"name,omitempty"`
	// Template is the source, YAML or JSON, at most 1 MiB.
	Template string `json:"template"`
	// Parameters are the template's parameters as K=V strings, parsed by
	// each parameter's type as on the command line (a list as "a,b" or a
	// JSON array).
	Parameters map[string]string `json:"parameters,omitempty"`
}

// ApplyStackRequest is the body of PUT /v1/stacks/{name}: the stack's
// wanted state. The answer is 202 with the stack, applying; the stack
// controller carries the apply out.
type ApplyStackRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant     string            `json:"tenant,omitempty"`
	Template   string            `json:"template"`
	Parameters map[string]string `json:"parameters,omitempty"`
	// KeepOnFailure keeps what a failed apply created instead of rolling
	// it back.
	KeepOnFailure bool `json:"keep_on_failure,omitempty"`
}

// StackPlan answers POST /v1/stacks/plan: the changes an apply would make
// against the stack's current state (Exists: the stack exists), their
// count by action, what the whole stack would cost per hour, whether its
// compute fits in the fleet now, and the outputs and parameters as bound.
type StackPlan struct {
	Name    string               `json:"name"`
	Exists  bool                 `json:"exists"`
	Changes []*stack.Change      `json:"changes"`
	Summary map[stack.Action]int `json:"summary"`
	Cost    StackCost            `json:"cost"`
	// Fit is absent when the server did not dry-run the placement.
	Fit     *StackFit      `json:"fit,omitempty"`
	Outputs map[string]any `json:"outputs,omitempty"`
	Params  map[string]any `json:"parameters,omitempty"`
}

// StackCost is a stack's price per hour once applied, at the prices in
// force: OnDemand prices every instance (spot requests too) on demand,
// WithSpot prices spot requests at their pools' spot price. Lines say what
// each resource copy adds; Assumptions what the figures leave out.
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

// StackFit is the placement dry run of a plan: every instance the stack
// would run, placed in order on a copy of the fleet, reserving nothing.
// Known is false when the server cannot tell (it does not lead).
type StackFit struct {
	Known bool           `json:"known"`
	Fits  bool           `json:"fits"`
	Lines []StackFitLine `json:"lines,omitempty"`
	// Reason says why the fit is not known, when the server can say:
	// "the fleet is still starting: 1 of 8 hosts seen by the scheduler".
	Reason string `json:"reason,omitempty"`
}

// StackFitLine is one instance of the dry run; Reason says why it does
// not fit, with the placement engine's per-reason host counts.
type StackFitLine struct {
	Address string `json:"address"`
	Fits    bool   `json:"fits"`
	Host    string `json:"host,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// StackView answers GET /v1/stacks/{name}: the stack, each resource copy
// with its ID and live status, the outputs and the parameters (decoded,
// where the record carries them as JSON).
type StackView struct {
	cloud.Stack
	Resources []StackResource `json:"resources"`
	Outputs   map[string]any  `json:"outputs,omitempty"`
	Params    map[string]any  `json:"parameters,omitempty"`
}

// StackResource is one resource copy of a stack. Status is the live
// resource's (an instance's state, "active", "deleted", ...), "retained"
// for one the stack let go.
type StackResource struct {
	Address string `json:"address"`
	Type    string `json:"type"`
	ID      string `json:"id,omitempty"`
	Status  string `json:"status"`
}

// StackList answers GET /v1/stacks.
type StackList struct {
	Stacks []*cloud.Stack `json:"stacks"`
}

// StackEventList answers GET /v1/stacks/{name}/events: one page, oldest
// first; Next, set when the page is full, is the ?after of the next.
type StackEventList struct {
	Events []*cloud.StackEvent `json:"events"`
	Next   string              `json:"next,omitempty"`
}

// StackDrift is one difference between a stack's last applied state and
// its live resources: Drift is "deleted" (terminated, deleted or released
// outside the stack), "stopped" or "changed" (Diffs says what).
type StackDrift struct {
	Address string            `json:"address"`
	Type    string            `json:"type"`
	ID      string            `json:"id"`
	Drift   string            `json:"drift"`
	Diffs   []stack.FieldDiff `json:"diffs,omitempty"`
}

// StackDriftReport answers GET /v1/stacks/{name}/drift; the next apply
// repairs what it lists.
type StackDriftReport struct {
	Drift  []StackDrift `json:"drift"`
	InSync bool         `json:"in_sync"`
}
