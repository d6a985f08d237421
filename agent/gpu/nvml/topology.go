//go:build cgo

package nvml

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// pciAddr is a PCI address without the function, which is how NVLink peers
// are named; the zero value means unknown (no GPU or switch sits at
// 0000:00:00).
type pciAddr struct{ domain, bus, device uint32 }

func addrOf(p nvml.PciInfo) pciAddr { return pciAddr{p.Domain, p.Bus, p.Device} }

func (a pciAddr) known() bool { return a != pciAddr{} }

func (a pciAddr) String() string { return fmt.Sprintf("%08x:%02x:%02x", a.domain, a.bus, a.device) }

// nvlinkPeer is the far end of one active NVLink.
type nvlinkPeer struct {
	// addr is zero when NVML does not say where the link goes.
	addr pciAddr
	kind nvml.IntNvLinkDeviceType
}

// readLinks records the GPU's active NVLinks. A GPU without NVLink answers
// ERROR_NOT_SUPPORTED; links beyond the GPU's count answer
// ERROR_INVALID_ARGUMENT. Neither is a failure: such a GPU is PCIe-only.
func (r *gpuReport) readLinks(dev nvml.Device) {
	for l := range nvml.NVLINK_MAX_LINKS {
		state, ret := dev.GetNvLinkState(l)
		if ret == nvml.ERROR_INVALID_ARGUMENT || ret == nvml.ERROR_NOT_FOUND || noAnswer(ret) {
			continue
		}
		if !r.may(fmt.Sprintf("read NVLink %d state", l), ret) {
			return
		}
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		peer := nvlinkPeer{kind: nvml.NVLINK_DEVICE_TYPE_UNKNOWN}
		if pci, ret := dev.GetNvLinkRemotePciInfo(l); r.may(fmt.Sprintf("read NVLink %d peer", l), ret) {
			peer.addr = addrOf(pci)
		}
		if kind, ret := dev.GetNvLinkRemoteDeviceType(l); r.may(fmt.Sprintf("read NVLink %d peer type", l), ret) {
			peer.kind = kind
		}
		r.links = append(r.links, peer)
	}
}

// assignIslands sets each GPU's NVLink island. Two GPUs are adjacent when a
// link joins them, when both link to the same NVSwitch (or other shared
// endpoint), or, for a GPU whose links do not say where they go, when NVML
// reports NVLink peer-to-peer between them. An island is a set of pairwise
// adjacent GPUs, as fleet.GPU.Island promises: GPUs are taken in index order
// and each joins the first island it is adjacent to entirely, so a hybrid
// cube mesh (DGX-1) splits into its two fully connected quads. GPUs left
// alone are PCIe-only (-1). Islands are numbered from 0 in the order of
// their lowest GPU index.
func assignIslands(gpus []*gpuReport) {
	adj := nvlinkAdjacency(gpus)
	numberIslands(gpus, adj)
}

// adjacency is a symmetric matrix: adj[i][j] is true when GPUs i and j are
// adjacent.
type adjacency [][]bool

func (adj adjacency) link(a, b int) {
	if a != b {
		adj[a][b], adj[b][a] = true, true
	}
}

// nvlinkAdjacency works out which GPUs are adjacent (see assignIslands).
func nvlinkAdjacency(gpus []*gpuReport) adjacency {
	n := len(gpus)
	adj := make(adjacency, n)
	for i := range adj {
		adj[i] = make([]bool, n)
	}
	local := make(map[pciAddr]int, n)
	for i, g := range gpus {
		if g.addr.known() {
			local[g.addr] = i
		}
	}
	shared := map[pciAddr][]int{}
	unresolved := make([]bool, n)
	for i, g := range gpus {
		for _, p := range g.links {
			switch {
			case p.kind == nvml.NVLINK_DEVICE_TYPE_IBMNPU:
				// A link to the CPU joins no GPUs.
			case !p.addr.known():
				unresolved[i] = true
			default:
				if j, ok := local[p.addr]; ok && p.kind != nvml.NVLINK_DEVICE_TYPE_SWITCH {
					adj.link(i, j)
				} else {
					shared[p.addr] = append(shared[p.addr], i)
				}
			}
		}
	}
	for _, members := range shared {
		for _, a := range members {
			for _, b := range members {
				adj.link(a, b)
			}
		}
	}
	linkByP2P(gpus, unresolved, adj)
	return adj
}

// linkByP2P asks NVML, for each GPU with a link that does not say where it
// goes, which other GPUs with NVLinks it reaches peer-to-peer over NVLink,
// and links those not yet adjacent.
func linkByP2P(gpus []*gpuReport, unresolved []bool, adj adjacency) {
	for i, g := range gpus {
		if !unresolved[i] || g.dev == nil {
			continue
		}
		for j, h := range gpus {
			if j == i || len(h.links) == 0 || h.dev == nil || adj[i][j] {
				continue
			}
			status, ret := g.dev.GetP2PStatus(h.dev, nvml.P2P_CAPS_INDEX_NVLINK)
			if ret == nvml.SUCCESS && status == nvml.P2P_STATUS_OK {
				adj.link(i, j)
			}
		}
	}
}

// numberIslands groups adjacent GPUs into islands, in index order (see
// assignIslands), and numbers those of two or more GPUs; the others get -1.
func numberIslands(gpus []*gpuReport, adj adjacency) {
	var islands [][]int
	for i, g := range gpus {
		g.gpu.Island = -1
		if !anyTrue(adj[i]) {
			continue
		}
		placed := false
		for k, members := range islands {
			if adjacentToAll(adj[i], members) {
				islands[k] = append(members, i)
				placed = true
				break
			}
		}
		if !placed {
			islands = append(islands, []int{i})
		}
	}
	next := 0
	for _, members := range islands {
		if len(members) < 2 {
			continue
		}
		for _, m := range members {
			gpus[m].gpu.Island = next
		}
		next++
	}
}

func anyTrue(v []bool) bool {
	for _, b := range v {
		if b {
			return true
		}
	}
	return false
}

func adjacentToAll(row []bool, members []int) bool {
	for _, m := range members {
		if !row[m] {
			return false
		}
	}
	return true
}
