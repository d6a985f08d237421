package service

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/stack"
)

// A stack's endpoint (stack.TypeEndpoint): its properties are
// api.CreateEndpointRequest's, checked, read and described here as the
// other types' are in stacks_resources.go; package stackengine creates,
// changes and deletes it through Endpoints.

// checkEndpointProps is checkStackProps for an endpoint: its name and
// spec as Create checks them. props are the properties known now; known
// is false when some are not.
func (s *Stacks) checkEndpointProps(address string, props map[string]any, known bool) error {
	var body api.CreateEndpointRequest
	if err := DecodeStackProps(address, props, &body); err != nil || !known {
		return err
	}
	err := CheckName("name", body.Name, true)
	if err == nil && strings.HasPrefix(body.Name, EndpointPrefix) {
		err = Field("name", "may not start with %s: that is how endpoint IDs start", Quote(EndpointPrefix))
	}
	if err == nil {
		err = CheckEndpointSpec(s.cat, &body.EndpointSpec)
	}
	if err == nil {
		err = s.checkRegistry("image", body.Image)
	}
	return StackFieldError(address, err)
}

// readEndpoint is readResource for an endpoint: gone once deleting or
// deleted; its min and max set outside the stack are drift.
func readEndpoint(ctx context.Context, svc *Services, a Actor, rs *stack.ResourceState) (live stack.Live, attrs map[string]any, status string, err error) {
	e, err := svc.Endpoints.Get(ctx, a, rs.ID)
	if err != nil {
		return stack.Live{}, nil, "", err
	}
	if e.State != cloud.EndpointActive {
		return stack.Live{Gone: true}, endpointAttrs(e), string(e.State), nil
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"min", e.Spec.Min}, {"max", e.Spec.Max}} {
		if old, ok := rs.Properties[f.name]; ok && !stack.Equal(old, f.v) {
			live.Changed = append(live.Changed, stack.FieldDiff{Path: "properties." + f.name, Old: old, New: f.v})
		}
	}
	return live, endpointAttrs(e), fmt.Sprintf("%s, %s mode, %d of %d..%d workers, generation %d",
		e.State, e.Spec.Mode, len(e.Status.Workers), e.Spec.Min, e.Spec.Max, e.Status.Generation), nil
}

func endpointAttrs(e *cloud.Endpoint) map[string]any {
	return map[string]any{"id": e.ID, "name": e.Name, "state": string(e.State)}
}
