package cloud

import (
	"context"
	"encoding/json"
	"time"
)

// StackState is where a stack is in its life.
type StackState string

const (
	// StackApplying: an apply is under way (or was cut short by a crash:
	// the next apply resumes it).
	StackApplying StackState = "applying"
	// StackActive: the last apply finished; the resources are the
	// template's.
	StackActive StackState = "active"
	// StackFailed: the last apply failed (rolled back, or kept with
	// --keep-on-failure); Reason says why.
	StackFailed StackState = "failed"
	// StackDestroying: a destroy is under way or was cut short.
	StackDestroying StackState = "destroying"
	// StackDestroyed: everything but retained resources is gone; the row
	// stays for the audit and frees the name.
	StackDestroyed StackState = "destroyed"
)

// Stack is a tenant's set of resources created from one template
// (package stack). Template is the source as given; Parameters the bound
// values; Applied the state of the last apply (stack.State as JSON: each
// resource copy with its ID, type and the properties applied); Outputs the
// template's outputs evaluated after it.
type Stack struct {
	ID         string          `json:"id"`
	TenantID   string          `json:"tenant_id"`
	Name       string          `json:"name"`
	State      StackState      `json:"state"`
	Reason     string          `json:"reason,omitempty"`
	Template   string          `json:"template,omitempty"`
	Parameters json.RawMessage `json:"parameters"`
	// Applied is the stack engine's own record; the API does not show
	// it (GET /v1/stacks/{name} answers the resources it lists).
	Applied   json.RawMessage `json:"-"`
	Outputs   json.RawMessage `json:"outputs"`
	Version   int64           `json:"version"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// Owner implements Owned.
func (s *Stack) Owner() string { return s.TenantID }

// StackEvent is one step of a stack's apply, destroy or drift check.
type StackEvent struct {
	ID      int64     `json:"id"`
	StackID string    `json:"stack_id"`
	Time    time.Time `json:"time"`
	// Address is the resource copy ("workers[2]"); empty for the stack.
	Address string `json:"address,omitempty"`
	// Action is what was done (create, update, replace, delete, retain,
	// start, apply, destroy, rollback, drift).
	Action string `json:"action"`
	// Outcome is started, succeeded or failed.
	Outcome string `json:"outcome"`
	// Resource is the ID of the resource the step touched.
	Resource string `json:"resource,omitempty"`
	Message  string `json:"message,omitempty"`
}

// StackTx is the store's part for stacks.
type StackTx interface {
	// CreateStack inserts a stack with Version 1; Conflict if the tenant
	// has a stack of that name that is not destroyed.
	CreateStack(ctx context.Context, s *Stack) error
	GetStack(ctx context.Context, id string) (*Stack, error)
	// StackByName finds the tenant's stack of that name that is not
	// destroyed; NotFound if none.
	StackByName(ctx context.Context, tenantID, name string) (*Stack, error)
	// StackIDs lists the IDs of the stacks (every tenant's) in any of
	// states, in ID order: the stack controller's cheap poll.
	StackIDs(ctx context.Context, states ...StackState) ([]string, error)
	// ListStacks lists a tenant's stacks in ID order (destroyed ones
	// with all), every tenant's when tenantID is empty.
	ListStacks(ctx context.Context, tenantID string, all bool) ([]*Stack, error)
	// UpdateStack writes s if the stored version is s.Version, and bumps
	// it; Conflict otherwise.
	UpdateStack(ctx context.Context, s *Stack) error
	// AppendStackEvents appends events, setting their IDs.
	AppendStackEvents(ctx context.Context, evs []*StackEvent) error
	// StackEvents lists a stack's events after the ID afterID, oldest
	// first, at most limit (0: all).
	StackEvents(ctx context.Context, stackID string, afterID int64, limit int) ([]*StackEvent, error)
}
