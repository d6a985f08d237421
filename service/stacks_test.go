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
			{"network cidr", "resources:\n  n: {type: network, properties: {name: n, cidr: 10.0.0.1/16}}", nil, "resources.n.properties.cidr"},
			{"network name", "resources:\n  n: {type: network, properties: {name: N_1, cidr: 10.0.0.0/16}}", nil, "resources.n.properties.name"},
			{"default network name", "resources:\n  n: {type: network, properties: {name: default, cidr: 10.0.0.0/16}}", nil, "default"},
			{"subnet without zone", "resources:\n  s: {type: subnet, properties: {network: vpc-1, name: s, cidr: 10.0.0.0/24}}", nil, "resources.s.properties.zone"},
			{"subnet property", "resources:\n  s: {type: subnet, properties: {network: vpc-1, name: s, cidr: 10.0.0.0/24, zone: z, az: z}}", nil, "az"},
			{"group without network", "resources:\n  g: {type: security_group, properties: {name: g}}", nil, "resources.g.properties.network"},
			{"rule protocol", "resources:\n  g: {type: security_group, properties: {network: vpc-1, name: g, ingress: [{protocol: sctp, cidr: 0.0.0.0/0}]}}", nil,
				"resources.g.properties.ingress[0].protocol"},
			{"rule ports", "resources:\n  g: {type: security_group, properties: {network: vpc-1, name: g, egress: [{protocol: tcp, from_port: 0, to_port: 0, group: self}]}}", nil,
				"resources.g.properties.egress[0].from_port"},
			{"rule peer", "resources:\n  g: {type: security_group, properties: {network: vpc-1, name: g, ingress: [{protocol: all}]}}", nil,
				"resources.g.properties.ingress[0].cidr"},
			{"rule twice", "resources:\n  g: {type: security_group, properties: {network: vpc-1, name: g, ingress: [{protocol: all, group: self}, {protocol: ALL, group: self}]}}", nil,
				"resources.g.properties.ingress[1]"},
			{"rule of a group in the stack's network", "resources:\n  n: {type: network, properties: {name: n, cidr: 10.0.0.0/16}}\n" +
				"  g: {type: security_group, properties: {network: \"${n.id}\", name: g, ingress: [{protocol: tcp, from_port: 9, to_port: 8, group: self}]}}", nil,
				"resources.g.properties.ingress[0].to_port"},
			{"subnet in the stack's network", "resources:\n  n: {type: network, properties: {name: n, cidr: 10.0.0.0/16}}\n" +
				"  s: {type: subnet, properties: {network: \"${n.id}\", name: s, cidr: 10.0.0.0/33, zone: z}}", nil,
				"resources.s.properties.cidr"},
			{"rule field", "resources:\n  g: {type: security_group, properties: {network: vpc-1, name: g, ingress: [{protocol: all, group: self, ports: 1}]}}", nil,
				"ports"},
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

// TestStackPlanFleetStarting: before the scheduler has seen every host
// that joined, a plan that places instances is unavailable, saying how
// many it has seen, never "does not fit"; once it has (or where this
// server has no fleet, or nothing is placed) the plan answers as always.
func TestStackPlanFleetStarting(t *testing.T) {
	const instance = "resources:\n  a: {type: instance, properties: {offering: l4.1x}}"
	const volume = "resources:\n  v: {type: volume, properties: {name: v, size_gib: 1}}"
	for _, c := range []struct {
		name     string
		seen     int
		leader   bool
		tmpl     string
		starting string // the unknown fit's reason, or "" for a known fit
	}{
		{"before the first pass", 0, true, instance, "the fleet is still starting: 0 of 2 hosts seen by the scheduler; plan again in a few seconds"},
		{"one of two seen", 1, true, instance, "the fleet is still starting: 1 of 2 hosts seen by the scheduler; plan again in a few seconds"},
		{"all seen", 2, true, instance, ""},
		{"no fleet on this replica", 0, false, instance, ""},
		{"nothing to place", 0, true, volume, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
				dry := func(reqs []cloud.DryRunRequest) ([]cloud.DryRunResult, bool) {
					out := make([]cloud.DryRunResult, len(reqs))
					for i, r := range reqs {
						out[i] = cloud.DryRunResult{ID: r.ID, Reason: "does not fit"}
					}
					return out, c.leader
				}
				seen := func() (int, bool) { return c.seen, c.leader }
				f := newVAFixture(t, st, service.Options{DryRun: dry, FleetSeen: seen})
				f.sharedHost("h-1")
				f.sharedHost("h-2")
				p, err := f.svc.Stacks.Plan(context.Background(), f.acme, api.StackRequest{Name: "s", Template: c.tmpl})
				if err != nil {
					t.Fatal(err)
				}
				if c.starting != "" {
					if p.Fit == nil || p.Fit.Known || p.Fit.Reason != c.starting || len(p.Fit.Lines) != 0 {
						t.Errorf("fit %+v, want unknown because %q", p.Fit, c.starting)
					}
					return
				}
				if c.tmpl == instance && c.leader && (p.Fit == nil || p.Fit.Fits || len(p.Fit.Lines) != 1) {
					t.Errorf("fit %+v, want the dry run's answer", p.Fit)
				}
			})
		})
	}
}
