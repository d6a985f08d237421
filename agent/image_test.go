package agent_test

import (
	"testing"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// TestSpecCarriesImage: the image an assignment names reaches the
// runtime's Spec as it is; an assignment without one leaves the Spec's
// image empty (the runtime's default image). The process runtime under
// the test refuses the one with an image, and the instance fails.
func TestSpecCarriesImage(t *testing.T) {
	rec := &recorder{specs: map[string]runtime.Spec{}}
	e := newEnv(t, h100, func(c *agent.Config) {
		rec.Runtime = c.Runtime
		c.Runtime = rec
	})
	with := e.assignment("i-image", whole(h100.ID, 0), serveScript)
	with.Image = "ghcr.io/acme/train@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	without := e.assignment("i-default", whole(h100.ID, 1), serveScript)
	e.assign(with, without)
	e.untilPhase(with.InstanceID, agentapi.PhaseFailed)
	e.ready(without.InstanceID)
	if got := rec.spec(with.InstanceID).Image; got != with.Image {
		t.Errorf("spec image %q, want the assignment's %q", got, with.Image)
	}
	if got := rec.spec(without.InstanceID).Image; got != "" {
		t.Errorf("spec image %q for an assignment without one, want empty", got)
	}
}
