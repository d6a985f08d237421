package service_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// ibHCAs are n InfiniBand adapters as an agent reports them.
func ibHCAs(n int) []fleet.HCA {
	out := make([]fleet.HCA, n)
	for i := range out {
		d := string(rune('0' + i))
		out[i] = fleet.HCA{Name: "mlx5_" + d, LinkLayer: "InfiniBand", NetDev: "ib" + d,
			Devices: []string{"/dev/infiniband/uverbs" + d, "/dev/infiniband/rdma_cm"}}
	}
	return out
}

// TestAgentsJoinHCAs: a host's adapters are kept in its spec and give
// its interconnect label, unless the inventory sets the label; a bad
// adapter refuses the join and changes nothing.
func TestAgentsJoinHCAs(t *testing.T) {
	roce := []fleet.HCA{{Name: "mlx5_bond_0", LinkLayer: "Ethernet", NetDev: "bond0", Devices: []string{"/dev/infiniband/uverbs0"}}}
	mixed := append(append([]fleet.HCA(nil), roce...), ibHCAs(1)...)
	tests := []struct {
		desc   string
		hcas   []fleet.HCA
		labels map[string]string
		want   string // the interconnect label; "-" for none
	}{
		{desc: "InfiniBand", hcas: ibHCAs(2), want: "infiniband"},
		{desc: "RoCE only", hcas: roce, want: "roce"},
		{desc: "RoCE and InfiniBand", hcas: mixed, want: "infiniband"},
		{desc: "no adapters", want: "-"},
		{desc: "the inventory's label wins", hcas: ibHCAs(1), labels: map[string]string{"interconnect": "nvlink-switch"}, want: "nvlink-switch"},
		{desc: "the sim's label stays", labels: map[string]string{"interconnect": "infiniband"}, want: "infiniband"},
	}
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		join, jtID := f.joinActor("rack-1")
		for i, tt := range tests {
			id := "node-" + string(rune('a'+i))
			inv := ahInventory(id, "H100", 1)
			inv.Host.GPUs[0].UUID += id
			inv.Host.HCAs, inv.Host.Labels = tt.hcas, tt.labels
			if _, _, _, _, err := f.svc.Agents.Join(ctx, join, jtID, inv, nil, ""); err != nil {
				t.Fatalf("%s: %v", tt.desc, err)
			}
			h := f.host(id)
			got, ok := h.Spec.Labels["interconnect"]
			if !ok {
				got = "-"
			}
			if got != tt.want || !reflect.DeepEqual(h.Spec.HCAs, tt.hcas) {
				t.Errorf("%s: label %q, adapters %+v; want %q, %+v", tt.desc, got, h.Spec.HCAs, tt.want, tt.hcas)
			}
		}

		// A heartbeat whose adapters changed changes the spec and label.
		agent := service.AgentActor("node-d")
		inv := ahInventory("node-d", "H100", 1)
		inv.Host.GPUs[0].UUID += "node-d"
		inv.Host.HCAs = roce
		v := f.host("node-d").Version
		if err := f.svc.Agents.Heartbeat(ctx, agent, inv); err != nil {
			t.Fatal(err)
		}
		if h := f.host("node-d"); h.Version != v+1 || h.Spec.Labels["interconnect"] != "roce" || len(h.Spec.HCAs) != 1 {
			t.Errorf("after a heartbeat with adapters: %+v", h)
		}
	})
}

func TestAgentsJoinBadHCAs(t *testing.T) {
	tests := []struct {
		desc  string
		hca   fleet.HCA
		field string
	}{
		{"no name", fleet.HCA{LinkLayer: "InfiniBand"}, "inventory.host.hcas[1].name"},
		{"a name NCCL cannot list", fleet.HCA{Name: "a,b", LinkLayer: "InfiniBand"}, "inventory.host.hcas[1].name"},
		{"a name given twice", fleet.HCA{Name: "mlx5_0", LinkLayer: "InfiniBand"}, "inventory.host.hcas[1].name"},
		{"an unknown link layer", fleet.HCA{Name: "x", LinkLayer: "infiniband"}, "inventory.host.hcas[1].link_layer"},
		{"a bad interface", fleet.HCA{Name: "x", LinkLayer: "Ethernet", NetDev: "../eth0"}, "inventory.host.hcas[1].netdev"},
		{"a device outside /dev", fleet.HCA{Name: "x", LinkLayer: "Ethernet", Devices: []string{"/etc/shadow"}}, "inventory.host.hcas[1].devices[0]"},
		{"a device that climbs out of /dev", fleet.HCA{Name: "x", LinkLayer: "Ethernet", Devices: []string{"/dev/../etc/shadow"}}, "inventory.host.hcas[1].devices[0]"},
		{"/dev itself", fleet.HCA{Name: "x", LinkLayer: "Ethernet", Devices: []string{"/dev/"}}, "inventory.host.hcas[1].devices[0]"},
		{"a relative device", fleet.HCA{Name: "x", LinkLayer: "Ethernet", Devices: []string{"dev/infiniband/uverbs1"}}, "inventory.host.hcas[1].devices[0]"},
	}
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		join, jtID := f.joinActor("rack-1")
		before := f.state()
		for _, tt := range tests {
			inv := ahInventory("node-1", "H100", 1)
			inv.Host.HCAs = append(ibHCAs(1), tt.hca)
			_, _, _, _, err := f.svc.Agents.Join(ctx, join, jtID, inv, nil, "")
			if ce := ahCode(t, err, cloud.Invalid); ce.Details["field"] != tt.field {
				t.Errorf("%s: %v, want field %s", tt.desc, ce, tt.field)
			}
		}
		inv := ahInventory("node-1", "H100", 1)
		inv.Host.HCAs = ibHCAs(65)
		_, _, _, _, err := f.svc.Agents.Join(ctx, join, jtID, inv, nil, "")
		ahCode(t, err, cloud.Invalid)
		f.unchanged(before, "refused joins")
	})
}

// TestAgentsAssignmentsRDMA: on a host with adapters, an instance that
// takes the whole host and one in its tenant's cluster placement group
// get them; a spread group's member, a plain instance, another tenant's
// instance (even one naming the first tenant's group) and any instance on
// a host without adapters do not.
func TestAgentsAssignmentsRDMA(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("plain", 8)
		f.putHost("ib", 8)
		h := f.host("ib")
		h.Spec.HCAs = ibHCAs(2)
		if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.PutHost(ctx, h) }); err != nil {
			t.Fatal(err)
		}
		group := func(a service.Actor, name string, s cloud.PlacementStrategy) string {
			g, _, err := f.svc.Placement.Create(ctx, a, api.CreatePlacementGroupRequest{Name: name, Strategy: s}, "")
			if err != nil {
				t.Fatal(err)
			}
			return g.ID
		}
		cluster, spread := group(f.acme, "train", cloud.PlacementCluster), group(f.acme, "apart", cloud.PlacementSpread)
		globexCluster := group(f.globex, "train", cloud.PlacementCluster)
		place := func(a service.Actor, host, pg string, metal bool) string {
			in, _, err := f.svc.Instances.Create(ctx, a, api.CreateInstanceRequest{Offering: "l4.1x", PlacementGroup: pg}, "")
			if err != nil {
				t.Fatal(err)
			}
			p := &fleet.Placement{ID: in.ID, HostID: host, CPUMilli: 1000, MemoryMiB: 1024, Metal: metal}
			testkit.Move(t, st, in.ID, cloud.Scheduled, p, f.clock.Now())
			return in.ID
		}
		want := map[string]bool{
			place(f.acme, "ib", "", true):               true,
			place(f.acme, "ib", cluster, false):         true,
			place(f.acme, "ib", spread, false):          false,
			place(f.acme, "ib", "", false):              false,
			place(f.globex, "ib", "", false):            false,
			place(f.globex, "ib", globexCluster, false): true,
			place(f.acme, "plain", "", true):            false,
			place(f.acme, "plain", cluster, false):      false,
		}
		// Another tenant's instance that names acme's cluster group (the
		// API refuses that; a store written by hand could hold it).
		intruder, plain := "i-intruder00000000", place(f.globex, "ib", "", false)
		want[plain] = false
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			in, err := tx.GetInstance(ctx, plain)
			if err != nil {
				return err
			}
			c := *in
			c.ID, c.PlacementGroupID, c.Version, c.IdempotencyKey, c.PrivateAddress = intruder, cluster, 0, "", ""
			p := *in.Placement
			p.ID = intruder
			c.Placement = &p
			return tx.CreateInstance(ctx, &c)
		})
		if err != nil {
			t.Fatal(err)
		}
		want[intruder] = false
		seen := 0
		for _, host := range []string{"ib", "plain"} {
			as, err := f.svc.Agents.Assignments(ctx, service.AgentActor(host))
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range as {
				seen++
				if a.RDMA != want[a.InstanceID] {
					t.Errorf("host %s, instance %s of %s: RDMA %v, want %v", host, a.InstanceID, a.TenantID, a.RDMA, want[a.InstanceID])
				}
			}
		}
		if seen != len(want) {
			t.Errorf("%d assignments, want %d", seen, len(want))
		}
	})
}

// TestAgentsJoinUnderlay: a host's fabric address and MTU are kept in its
// spec, canonical; a malformed one is refused, naming the field, and
// nothing is written.
func TestAgentsJoinUnderlay(t *testing.T) {
	tests := []struct {
		desc, addr string
		mtu        int
		want       string // the kept address; "!" for a refusal
		field      string
	}{
		{desc: "an address and an MTU", addr: "100.96.0.2", mtu: 1450, want: "100.96.0.2"},
		{desc: "none", want: ""},
		{desc: "IPv4-mapped is IPv4", addr: "::ffff:10.1.2.3", want: "10.1.2.3"},
		{desc: "IPv6", addr: "fd00::1", want: "!", field: "inventory.host.underlay"},
		{desc: "loopback", addr: "127.0.0.1", want: "!", field: "inventory.host.underlay"},
		{desc: "not an address", addr: "fabric", want: "!", field: "inventory.host.underlay"},
		{desc: "an MTU too small", addr: "10.0.0.1", mtu: 500, want: "!", field: "inventory.host.mtu"},
	}
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		join, jtID := f.joinActor("rack-u")
		for i, tt := range tests {
			id := "under-" + string(rune('a'+i))
			inv := ahInventory(id, "H100", 1)
			inv.Host.GPUs[0].UUID += id
			inv.Host.Underlay, inv.Host.MTU = tt.addr, tt.mtu
			_, _, _, _, err := f.svc.Agents.Join(ctx, join, jtID, inv, nil, "")
			if tt.want == "!" {
				if ce, ok := err.(*cloud.Error); !ok || ce.Code != cloud.Invalid || ce.Details["field"] != tt.field {
					t.Errorf("%s: %v, want invalid_argument on %s", tt.desc, err, tt.field)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", tt.desc, err)
			}
			if h := f.host(id); h.Spec.Underlay != tt.want || h.Spec.MTU != tt.mtu {
				t.Errorf("%s: kept %q MTU %d", tt.desc, h.Spec.Underlay, h.Spec.MTU)
			}
		}
	})
}

// TestAgentsJoinFilesListener: where a host's agent takes direct copies
// is kept in its spec, the fingerprint canonical; a malformed address or
// fingerprint, or one without the other, is refused naming the field.
func TestAgentsJoinFilesListener(t *testing.T) {
	fp := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		desc, addr, fp string
		want           string // the kept address; "!" for a refusal
		field          string
	}{
		{desc: "an address and a fingerprint", addr: "10.0.0.7:7443", fp: fp, want: "10.0.0.7:7443"},
		{desc: "a host name, the fingerprint in capitals", addr: "gpu-7.example:7443", fp: strings.ToUpper(fp[:7]) + fp[7:], want: "gpu-7.example:7443"},
		{desc: "none", want: ""},
		{desc: "no port", addr: "10.0.0.7", fp: fp, want: "!", field: "inventory.host.direct_addr"},
		{desc: "port 0", addr: "10.0.0.7:0", fp: fp, want: "!", field: "inventory.host.direct_addr"},
		{desc: "every address", addr: "0.0.0.0:7443", fp: fp, want: "!", field: "inventory.host.direct_addr"},
		{desc: "no host", addr: ":7443", fp: fp, want: "!", field: "inventory.host.direct_addr"},
		{desc: "no fingerprint", addr: "10.0.0.7:7443", want: "!", field: "inventory.host.direct_fingerprint"},
		{desc: "a fingerprint without an address (tunnelled sessions only)", fp: fp, want: ""},
		{desc: "a malformed fingerprint without an address", fp: "md5:00", want: "!", field: "inventory.host.direct_fingerprint"},
		{desc: "a malformed fingerprint", addr: "10.0.0.7:7443", fp: "md5:00", want: "!", field: "inventory.host.direct_fingerprint"},
	}
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		join, jtID := f.joinActor("rack-f")
		for i, tt := range tests {
			id := "files-" + string(rune('a'+i))
			inv := ahInventory(id, "H100", 1)
			inv.Host.GPUs[0].UUID += id
			inv.Host.DirectAddr, inv.Host.DirectFingerprint = tt.addr, tt.fp
			_, _, _, _, err := f.svc.Agents.Join(ctx, join, jtID, inv, nil, "")
			if tt.want == "!" {
				if ce, ok := err.(*cloud.Error); !ok || ce.Code != cloud.Invalid || ce.Details["field"] != tt.field {
					t.Errorf("%s: %v, want invalid_argument on %s", tt.desc, err, tt.field)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", tt.desc, err)
			}
			h := f.host(id)
			wantFP := ""
			if tt.fp != "" {
				wantFP = fp
			}
			if h.Spec.DirectAddr != tt.want || h.Spec.DirectFingerprint != wantFP {
				t.Errorf("%s: kept %q %q", tt.desc, h.Spec.DirectAddr, h.Spec.DirectFingerprint)
			}
		}
	})
}
