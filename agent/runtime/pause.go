package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Pauser is implemented by runtimes that can freeze a running workload in
// place and thaw it again: an endpoint's warm pool keeps workers created,
// ready and paused (docs/ENDPOINTS.md), so that a request resumes one
// rather than starting one. The containerd runtime pauses the container's
// task (the cgroup freezer); the process runtime does not pause, and
// PauserOf says so.
type Pauser interface {
	// Pause freezes the running workload id; pausing a paused one does
	// nothing. ErrNotFound for an unknown workload.
	Pause(ctx context.Context, id string) error
	// Resume thaws it; resuming a running one does nothing.
	Resume(ctx context.Context, id string) error
	// Paused reports whether workload id is paused now.
	Paused(ctx context.Context, id string) (bool, error)
}

// ErrCannotPause means the runtime cannot pause a workload.
var ErrCannotPause = errors.New("this runtime cannot pause a workload")

// PauserOf is rt's Pauser, or an error wrapping ErrCannotPause that names
// rt's kind (Kinder) when rt has none.
func PauserOf(rt Runtime) (Pauser, error) {
	if p, ok := rt.(Pauser); ok {
		return p, nil
	}
	kind := "this"
	if k, ok := rt.(Kinder); ok {
		kind = "the " + k.Kind()
	}
	return nil, fmt.Errorf("%s runtime cannot pause a workload (an endpoint's warm pool needs the containerd runtime, which freezes a container): %w",
		kind, ErrCannotPause)
}

// ImageTimer is implemented by runtimes that time a workload's image on
// its start: how long the image took to be ready (found in the host's
// cache, or pulled). An endpoint's cold start shows it apart from the
// container's own start (docs/ENDPOINTS.md, "Cold starts").
type ImageTimer interface {
	// ImageTime is how long the image of workload id took on its
	// start; false for a workload this runtime did not start (adopted
	// after a restart) or does not know.
	ImageTime(id string) (time.Duration, bool)
}
