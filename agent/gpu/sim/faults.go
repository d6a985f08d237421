package sim

import (
	"context"
	"fmt"

	"github.com/gpucloud/gpucloud/agent/gpu"
)

// The operations fault injection can target; they are the gpu.Driver method
// names.
const (
	OpInventory   = "Inventory"
	OpSetMIGMode  = "SetMIGMode"
	OpCreateMIG   = "CreateMIG"
	OpDestroyMIG  = "DestroyMIG"
	OpDevices     = "Devices"
	OpUtilization = "Utilization"
	OpTelemetry   = "Telemetry"
)

var knownOps = map[string]bool{
	OpInventory: true, OpSetMIGMode: true, OpCreateMIG: true, OpDestroyMIG: true, OpDevices: true, OpUtilization: true, OpTelemetry: true,
}

// failure is an injected error and how many more calls it fails; a
// negative count fails every call until it is cleared.
type failure struct {
	err error
	n   int
}

// faults is the injected misbehaviour of a host. It is guarded by the host's
// mutex.
type faults struct {
	fail     map[string]*failure
	hang     map[string]bool
	vanished bool
	// release is closed by Recover to let hung calls go on; a fresh one is
	// made for the next Hang.
	release chan struct{}
	calls   map[string]int
}

func checkOp(op string) {
	if !knownOps[op] {
		// A misspelt operation would make a fault test pass vacuously, so
		// it is a bug in the test, not a condition to report.
		panic(fmt.Sprintf("sim: unknown operation %q", op))
	}
}

// Fail makes every later call of op return err, until Recover or Fail(op,
// nil). The error is returned as given, so tests can inject the driver's
// typed errors (gpu.ErrBusy) as well as opaque ones. It panics on an unknown
// op.
func (h *Host) Fail(op string, err error) { h.FailNext(op, -1, err) }

// FailNext makes the next n calls of op return err; after them op works
// again. n < 0 means every call, like Fail.
func (h *Host) FailNext(op string, n int, err error) {
	checkOp(op)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil || n == 0 {
		delete(h.faults.fail, op)
		return
	}
	h.faults.fail[op] = &failure{err: err, n: n}
}

// Hang makes calls of op block until their context is done (they then
// return its error) or until Recover, after which they go on normally. It
// simulates a driver call stuck in the kernel, which the agent must bound
// with a timeout.
func (h *Host) Hang(op string) {
	checkOp(op)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults.hang[op] = true
}

// Vanish makes every call fail with gpu.ErrUnavailable, as if the host had
// disappeared (powered off, driver unloaded). The GPUs keep their state, and
// come back as they were on Recover.
func (h *Host) Vanish() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults.vanished = true
}

// Recover clears every injected fault and releases hung calls.
func (h *Host) Recover() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.faults.fail)
	clear(h.faults.hang)
	h.faults.vanished = false
	close(h.faults.release)
	h.faults.release = make(chan struct{})
}

// Calls returns how many times op was called, failed calls included, so
// that tests can check that the agent retries or does not repeat work.
func (h *Host) Calls(op string) int {
	checkOp(op)
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.faults.calls[op]
}

// enter runs the injected faults for one call of op. It must be called
// without the mutex held, because a hung call waits outside it.
func (h *Host) enter(ctx context.Context, op string) error {
	h.mu.Lock()
	h.faults.calls[op]++
	if h.faults.vanished {
		h.mu.Unlock()
		return fmt.Errorf("sim host %s: %s: host vanished: %w", h.spec.ID, op, gpu.ErrUnavailable)
	}
	if f := h.faults.fail[op]; f != nil {
		err := f.err
		if f.n > 0 {
			f.n--
			if f.n == 0 {
				delete(h.faults.fail, op)
			}
		}
		h.mu.Unlock()
		return err
	}
	hang, release := h.faults.hang[op], h.faults.release
	h.mu.Unlock()
	if hang {
		select {
		case <-ctx.Done():
			return fmt.Errorf("sim host %s: %s: %w", h.spec.ID, op, ctx.Err())
		case <-release:
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim host %s: %s: %w", h.spec.ID, op, err)
	}
	return nil
}
