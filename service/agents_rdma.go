package service

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// RDMA: a host's agent reports its RDMA adapters (fleet.HCA, InfiniBand
// or RoCE). The host's interconnect label, which placement's label
// selectors match, follows from them, and the instances that own the
// host's fabric get them (agentapi.Assignment.RDMA).

// The interconnect label and the values the adapters give it.
const (
	LabelInterconnect      = "interconnect"
	InterconnectInfiniBand = "infiniband"
	InterconnectRoCE       = "roce"
	linkLayerInfiniBand    = "InfiniBand"
	linkLayerEthernet      = "Ethernet"
	maxHostHCAs            = 64
	maxHCADevices          = 8
	maxHCADevicePath       = 128
	hcaDevicePrefix        = "/dev/"
)

// hostHCAs checks the adapters an inventory reports and returns a copy:
// names as CheckName wants them (so that NCCL_IB_HCA can list them) and
// distinct, a link layer of "InfiniBand" or "Ethernet", an interface
// name or none, and device nodes as absolute, clean paths under /dev.
// Anything else is invalid_argument naming the field.
func hostHCAs(src []fleet.HCA) ([]fleet.HCA, error) {
	if len(src) == 0 {
		return nil, nil
	}
	if len(src) > maxHostHCAs {
		return nil, Field("inventory.host.hcas", "%d adapters; the limit is %d", len(src), maxHostHCAs)
	}
	out := make([]fleet.HCA, len(src))
	names := map[string]bool{}
	for i, h := range src {
		name := fmt.Sprintf("inventory.host.hcas[%d]", i)
		if err := CheckName(name+".name", h.Name, true); err != nil {
			return nil, err
		}
		if names[h.Name] {
			return nil, Field(name+".name", "%s is given twice", Quote(h.Name))
		}
		names[h.Name] = true
		if h.LinkLayer != linkLayerInfiniBand && h.LinkLayer != linkLayerEthernet {
			return nil, Field(name+".link_layer", "%s: want %s or %s (RoCE)", Quote(h.LinkLayer), linkLayerInfiniBand, linkLayerEthernet)
		}
		if err := CheckName(name+".netdev", h.NetDev, false); err != nil {
			return nil, err
		}
		if len(h.Devices) > maxHCADevices {
			return nil, Field(name+".devices", "%d device nodes; the limit is %d", len(h.Devices), maxHCADevices)
		}
		for j, d := range h.Devices {
			if err := checkDevicePath(fmt.Sprintf("%s.devices[%d]", name, j), d); err != nil {
				return nil, err
			}
		}
		out[i] = fleet.HCA{Name: h.Name, LinkLayer: h.LinkLayer, NetDev: h.NetDev, Devices: slices.Clone(h.Devices)}
	}
	return out, nil
}

// checkDevicePath accepts an absolute, clean path under /dev of letters,
// digits, '/', '-', '_' and '.': a node a container runtime may give a
// workload, never a way out of /dev.
func checkDevicePath(field, p string) error {
	if len(p) > maxHCADevicePath {
		return Field(field, "is %d bytes long; the limit is %d", len(p), maxHCADevicePath)
	}
	ok := strings.HasPrefix(p, hcaDevicePrefix) && path.Clean(p) == p && len(p) > len(hcaDevicePrefix)
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/-_.", c)) {
			ok = false
		}
	}
	if !ok {
		return Field(field, "%s: want a clean absolute path under /dev", Quote(p))
	}
	return nil
}

// interconnect is the interconnect label that adapters give a host:
// "infiniband" when one of them is InfiniBand, "roce" when they are all
// Ethernet, "" without adapters.
func interconnect(hcas []fleet.HCA) string {
	out := ""
	for _, h := range hcas {
		switch h.LinkLayer {
		case linkLayerInfiniBand:
			return InterconnectInfiniBand
		case linkLayerEthernet:
			out = InterconnectRoCE
		}
	}
	return out
}

// labelInterconnect sets the interconnect label of a host spec from its
// adapters, unless the inventory's labels set it (the operator's word
// wins) or the host has no adapters.
func labelInterconnect(h *fleet.Host) {
	v := interconnect(h.HCAs)
	if _, set := h.Labels[LabelInterconnect]; set || v == "" {
		return
	}
	if h.Labels == nil {
		h.Labels = map[string]string{}
	}
	h.Labels[LabelInterconnect] = v
}

// rdmaRule decides which of one host's instances get its RDMA adapters:
// on a host that has some, an instance that takes the whole host (a
// metal placement), or one whose placement group is a cluster (its
// members talk over the fabric). It reads the host only when an instance
// could get them, and each placement group once.
type rdmaRule struct {
	hostID  string
	read    bool
	hasHCAs bool
	groups  map[string]*cloud.PlacementGroup
}

// newRDMARule returns the rule of host hostID.
func newRDMARule(hostID string) *rdmaRule {
	return &rdmaRule{hostID: hostID, groups: map[string]*cloud.PlacementGroup{}}
}

// wants reports whether in gets the host's adapters. A placement group
// counts only when it is the instance's own tenant's.
func (r *rdmaRule) wants(ctx context.Context, tx cloud.Tx, in *cloud.Instance) (bool, error) {
	if in.Placement == nil || !in.Placement.Metal && in.PlacementGroupID == "" {
		return false, nil
	}
	if !r.read {
		h, err := tx.GetHost(ctx, r.hostID)
		if err != nil && !cloud.IsNotFound(err) {
			return false, err
		}
		r.read, r.hasHCAs = true, err == nil && len(h.Spec.HCAs) > 0
	}
	if !r.hasHCAs {
		return false, nil
	}
	if in.Placement.Metal {
		return true, nil
	}
	g, ok := r.groups[in.PlacementGroupID]
	if !ok {
		var err error
		g, err = tx.GetPlacementGroup(ctx, in.PlacementGroupID)
		if cloud.IsNotFound(err) {
			g, err = nil, nil
		}
		if err != nil {
			return false, err
		}
		r.groups[in.PlacementGroupID] = g
	}
	return g != nil && g.TenantID == in.TenantID && g.Strategy == cloud.PlacementCluster, nil
}
