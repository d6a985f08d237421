// Package stackengine carries out stacks: it applies, rolls back and
// destroys the stacks that service.Stacks records (Apply, Destroy), round
// by round on the leader (controller.Stacks runs Engine.Step).
//
// Every round reads a stack's record (service.StackRecord), finishes the
// creates a crash cut short, reads the live resources
// (service.Stacks.Refresh), plans with stack.Plan, and runs every change
// whose dependencies are done, wave after wave, in parallel within a wave
// (a bounded worker pool), writing the record after each wave
// (service.Stacks.SaveRound). A create's idempotency key is the stack's
// ID, the copy's address and its generation: a round cut short by a crash
// left an intent, and the next round completes that create with the same
// key, so it answers the resource the first call made instead of a second
// one. A failed apply rolls back to the last template that applied (none:
// everything goes) unless it keeps what it made.
//
// The engine is above package service and holds no rule of its own: it
// creates, changes, reads and deletes every resource through the services
// it is handed, as the API does, so that a stack's instance gets exactly
// the checks (validation, quotas, the fleet's availability, tenancy) an
// API create gets. It writes the store only through service.Stacks.
package stackengine

import "github.com/gpucloud/gpucloud/service"

// waveWorkers bounds the changes one wave runs at once.
const waveWorkers = 8

// Engine runs the rounds of the stacks being applied or destroyed, over
// one server's services.
type Engine struct {
	svc *service.Services
}

// New returns the engine over svc: the services every stack's resources
// are created, read, changed and deleted through.
func New(svc *service.Services) *Engine { return &Engine{svc: svc} }
