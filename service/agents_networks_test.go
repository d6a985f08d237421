package service_test

import (
	"context"
	"slices"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// netFixture writes networks and instances on them straight into the
// store the services write (so that their changes are noted).
type netFixture struct {
	*ahFixture
	ctx context.Context
}

func (f *netFixture) tx(fn func(tx cloud.Tx) error) {
	f.t.Helper()
	if err := f.svc.Store().Tx(f.ctx, fn); err != nil {
		f.t.Fatal(err)
	}
}

func (f *netFixture) underlay(host, addr string) {
	f.tx(func(tx cloud.Tx) error {
		h, err := tx.GetHost(f.ctx, host)
		if err != nil {
			return err
		}
		h.Spec.Underlay = addr
		return tx.PutHost(f.ctx, h)
	})
}

func (f *netFixture) network(tenant, name, cidr string) *cloud.Network {
	n := &cloud.Network{ID: service.NewID("net"), TenantID: tenant, Name: name, CIDR: cidr, CreatedAt: f.clock.Now()}
	f.tx(func(tx cloud.Tx) error { return tx.CreateNetwork(f.ctx, n) })
	return n
}

func (f *netFixture) subnet(n *cloud.Network, cidr string) *cloud.Subnet {
	s := &cloud.Subnet{ID: service.NewID("subnet"), TenantID: n.TenantID, NetworkID: n.ID, Name: "s-" + cidr, CIDR: cidr, Zone: "z1", CreatedAt: f.clock.Now()}
	f.tx(func(tx cloud.Tx) error { return tx.CreateSubnet(f.ctx, s) })
	return s
}

func (f *netFixture) group(n *cloud.Network, name string, ingress ...cloud.SecurityRule) *cloud.SecurityGroup {
	g := &cloud.SecurityGroup{ID: service.NewID("sg"), TenantID: n.TenantID, NetworkID: n.ID, Name: name,
		Ingress: ingress, Egress: []cloud.SecurityRule{{ID: "sgr-out", Protocol: cloud.ProtocolAll, CIDR: "0.0.0.0/0"}}, CreatedAt: f.clock.Now()}
	f.tx(func(tx cloud.Tx) error { return tx.CreateSecurityGroup(f.ctx, g) })
	return g
}

// on makes an instance of a's on the subnet with addr and groups, placed
// on host (none: pending).
func (f *netFixture) on(a service.Actor, s *cloud.Subnet, addr, host string, groups ...*cloud.SecurityGroup) *cloud.Instance {
	var in *cloud.Instance
	if host != "" {
		in = f.placed(a, host, cloud.Running)
	} else {
		var err error
		if in, _, err = f.svc.Instances.Create(f.ctx, a, api.CreateInstanceRequest{Offering: "l4.1x"}, ""); err != nil {
			f.t.Fatal(err)
		}
	}
	f.tx(func(tx cloud.Tx) error {
		got, err := tx.GetInstance(f.ctx, in.ID)
		if err != nil {
			return err
		}
		got.NetworkID, got.SubnetID, got.PrivateAddress = s.NetworkID, s.ID, addr
		got.SecurityGroupIDs = nil
		for _, g := range groups {
			got.SecurityGroupIDs = append(got.SecurityGroupIDs, g.ID)
		}
		in = got
		return tx.UpdateInstance(f.ctx, got)
	})
	return in
}

func (f *netFixture) view(host string) *agentapi.NetworkView {
	f.t.Helper()
	v, _, err := f.svc.Agents.NetworkView(f.ctx, service.AgentActor(host))
	if err != nil {
		f.t.Fatalf("NetworkView(%s): %v", host, err)
	}
	return v
}

func endpointIDs(hn agentapi.HostNetwork) []string {
	var ids []string
	for _, e := range hn.Endpoints {
		ids = append(ids, e.InstanceID)
	}
	return ids
}

// TestAgentsNetworkView: a host's view holds exactly the networks of the
// instances it runs, whatever their tenants, each with its endpoints on
// every host (placed ones only) and the rules of its own endpoints'
// groups, group peers resolved to their members' addresses; a change of
// a group changes the version and is noted for the network.
func TestAgentsNetworkView(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := &netFixture{ahFixture: newAHFixture(t, st), ctx: context.Background()}
		for i, h := range []string{"h-a", "h-b", "h-c"} {
			f.putHost(h, 1)
			f.underlay(h, "10.99.0."+string(rune('1'+i)))
		}
		n1 := f.network(f.acme.TenantID, "train", "10.0.0.0/16")
		s1 := f.subnet(n1, "10.0.1.0/24")
		app := f.group(n1, "app")
		web := f.group(n1, "web", cloud.SecurityRule{ID: "sgr-1", Protocol: cloud.ProtocolTCP, FromPort: 80, ToPort: 80, GroupID: app.ID},
			cloud.SecurityRule{ID: "sgr-2", Protocol: cloud.ProtocolTCP, FromPort: 22, ToPort: 22, CIDR: "192.0.2.0/24"})
		i1 := f.on(f.acme, s1, "10.0.1.4", "h-a", web)
		i2 := f.on(f.acme, s1, "10.0.1.5", "h-b", app)
		f.on(f.acme, s1, "10.0.1.6", "", app) // pending: no endpoint yet
		// Another tenant's network with the same CIDR and address, on h-a.
		n2 := f.network(f.globex.TenantID, "train", "10.0.0.0/16")
		s2 := f.subnet(n2, "10.0.1.0/24")
		g2 := f.group(n2, "default")
		j1 := f.on(f.globex, s2, "10.0.1.4", "h-a", g2)

		va := f.view("h-a")
		if len(va.Networks) != 2 {
			t.Fatalf("h-a carries %d networks, want 2: %+v", len(va.Networks), va.Networks)
		}
		byID := map[string]agentapi.HostNetwork{}
		for _, hn := range va.Networks {
			byID[hn.ID] = hn
		}
		a1, a2 := byID[n1.ID], byID[n2.ID]
		if a1.VNI == a2.VNI || a1.VNI == 0 {
			t.Fatalf("VNIs %d and %d", a1.VNI, a2.VNI)
		}
		want := []string{i1.ID, i2.ID}
		slices.Sort(want)
		if got := endpointIDs(a1); !slices.Equal(got, want) {
			t.Fatalf("acme's endpoints on h-a's view: %v, want %v", got, want)
		}
		if got := endpointIDs(a2); !slices.Equal(got, []string{j1.ID}) {
			t.Fatalf("globex's endpoints: %v", got)
		}
		for _, e := range a1.Endpoints {
			wantU := map[string]string{i1.ID: "10.99.0.1", i2.ID: "10.99.0.2"}[e.InstanceID]
			if e.Underlay != wantU || e.MAC != service.InstanceMAC(e.Address) || e.MAC == "" {
				t.Errorf("endpoint %+v: want underlay %s", e, wantU)
			}
		}
		if len(a1.Subnets) != 1 || a1.Subnets[0].Gateway != "10.0.1.1" {
			t.Errorf("subnets %+v", a1.Subnets)
		}
		// h-a runs only web's member: only web's rules, app resolved.
		if len(a1.SecurityGroups) != 1 || a1.SecurityGroups[0].ID != web.ID {
			t.Fatalf("groups on h-a: %+v", a1.SecurityGroups)
		}
		in := a1.SecurityGroups[0].Ingress
		if len(in) != 2 || !slices.Equal(in[0].Peers, []string{"10.0.1.5/32"}) || !slices.Equal(in[1].Peers, []string{"192.0.2.0/24"}) {
			t.Fatalf("web's ingress: %+v", in)
		}

		vb := f.view("h-b")
		if len(vb.Networks) != 1 || vb.Networks[0].ID != n1.ID || len(vb.Networks[0].SecurityGroups) != 1 || vb.Networks[0].SecurityGroups[0].ID != app.ID {
			t.Fatalf("h-b's view: %+v", vb.Networks)
		}
		if vc := f.view("h-c"); len(vc.Networks) != 0 || vc.Version == "" {
			t.Fatalf("h-c's view: %+v", vc)
		}
		if again := f.view("h-a"); again.Version != va.Version {
			t.Fatalf("the version moved without a change: %s -> %s", va.Version, again.Version)
		}

		// A rule change: a new version, noted for the network only.
		since := f.svc.NetworkChanges.Seq()
		f.tx(func(tx cloud.Tx) error {
			g, err := tx.GetSecurityGroup(f.ctx, web.ID)
			if err != nil {
				return err
			}
			g.Ingress = g.Ingress[:1]
			return tx.UpdateSecurityGroup(f.ctx, g)
		})
		if !f.svc.NetworkChanges.Changed(since, []string{n1.ID}, "h-x") || f.svc.NetworkChanges.Changed(since, []string{n2.ID}, "h-x") {
			t.Fatal("the group's change is not noted for its network alone")
		}
		if f.view("h-a").Version == va.Version {
			t.Fatal("the version did not change with the rules")
		}

		// Only agents read views.
		if _, _, err := f.svc.Agents.NetworkView(f.ctx, f.acme); cloud.ErrorCode(err) != cloud.PermissionDenied {
			t.Fatalf("a tenant reads a view: %v", err)
		}
	})
}
