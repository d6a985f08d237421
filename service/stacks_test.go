package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestStackBadInput: a template that does not parse, a missing parameter,
// an unknown property and a tenant property are refused, naming where, and
// write nothing.
func TestStackBadInput(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		for _, tc := range []struct {
			name, tmpl string
			params     map[string]string
			want       string
		}{
			{"syntax", "resources:\n  a: [", nil, "line"},
			{"unknown type", "resources:\n  a: {type: vm, properties: {}}", nil, "resources.a.type"},
			{"missing parameter", "parameters:\n  n: {type: integer}\nresources: {}", nil, "n"},
			{"bad parameter", "parameters:\n  n: {type: integer, max: 3}\nresources: {}", map[string]string{"n": "9"}, "n"},
			{"unknown property", "resources:\n  a: {type: instance, properties: {offerng: l4.1x}}", nil, "offerng"},
			{"tenant property", "resources:\n  a: {type: volume, properties: {name: x, size_gib: 1, tenant: other}}", nil, "tenant"},
			{"bad offering", "resources:\n  a: {type: instance, properties: {offering: nope.9x}}", nil, "offering"},
			{"reserved tag", "resources:\n  a: {type: volume, properties: {name: x, size_gib: 1, tags: {\"gpucloud:stack\": y}}}", nil, "gpucloud:"},
		} {
			before := f.counts()
			_, err := f.svc.Stacks.Apply(ctx, f.acme, "s", api.ApplyStackRequest{Template: tc.tmpl, Parameters: tc.params})
			if ce := vaCode(t, err, cloud.Invalid); !strings.Contains(ce.Message, tc.want) {
				t.Errorf("%s: %v, want it to name %q", tc.name, ce, tc.want)
			}
			f.unchanged(before, tc.name)
		}
		if l, _ := f.svc.Stacks.List(ctx, f.acme, ""); len(l) != 0 {
			t.Errorf("bad applies left stacks: %v", l)
		}
	})
}
