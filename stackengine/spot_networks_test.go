package stackengine_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/testkit"
)

// spotNetTemplate is a spot request on a subnet and group of the stack's
// own network.
const spotNetTemplate = `
resources:
  net: {type: network, properties: {name: spot, cidr: 10.50.0.0/16}}
  sub: {type: subnet, properties: {network: "${net.id}", name: a, cidr: 10.50.1.0/24, zone: local-a}}
  sg: {type: security_group, properties: {network: "${net.id}", name: train}}
  train:
    type: spot_request
    properties:
      type: persistent
      pools: [{offering: l4.1x}]
      subnet: ${sub.id}
      security_groups: ["${sg.id}"]
`

// TestStackSpotRequestNetwork: a stack's spot request on the stack's
// subnet and group launches there; a destroy cancels it, terminates its
// instance and then deletes the network, leaving nothing.
func TestStackSpotRequestNetwork(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		svc, ctx := f.svc, context.Background()
		if _, err := svc.Stacks.Apply(ctx, f.acme, "spot", api.ApplyStackRequest{Template: spotNetTemplate}); err != nil {
			t.Fatal(err)
		}
		if v := runStack(t, svc, f.acme, "spot", 10); v.State != cloud.StackActive {
			t.Fatalf("apply: %s %q", v.State, v.Reason)
		}
		s := readNets(t, svc, f.acme, "spot")
		if len(s.subs) != 1 || len(s.groups) != 1 || len(s.nodes) != 1 {
			t.Fatalf("made %d subnets, %d groups, %d instances", len(s.subs), len(s.groups), len(s.nodes))
		}
		in := s.nodes[0]
		if in.SpotRequestID == "" || in.SubnetID != s.subs[0].ID || !slices.Equal(in.SecurityGroupIDs, []string{s.groups[0].ID}) ||
			!strings.HasPrefix(in.PrivateAddress, "10.50.1.") || !slices.Equal(in.Zones, []string{"local-a"}) {
			t.Fatalf("the spot launch: %+v", in)
		}
		r, err := svc.Spot.Get(ctx, f.acme, in.SpotRequestID)
		if err != nil || r.Subnet != s.subs[0].ID || !slices.Equal(r.SecurityGroups, []string{s.groups[0].ID}) {
			t.Fatalf("the request: %+v %v", r, err)
		}
		if _, err := svc.Stacks.Destroy(ctx, f.acme, "", "spot"); err != nil {
			t.Fatal(err)
		}
		if v := runStack(t, svc, f.acme, "spot", 10); v != nil {
			t.Fatalf("after destroy: %s %q", v.State, v.Reason)
		}
		if s := readNets(t, svc, f.acme, "spot"); len(s.nets)+len(s.subs)+len(s.groups)+len(s.nodes)+s.nonDflt != 0 {
			t.Errorf("left: %+v", s)
		}
	})
}
