package controller

import (
	"errors"
	"maps"

	"github.com/gpucloud/gpucloud/placement"
)

// Why a pending instance waits, as PendingByReason counts it: a bounded set
// of short names, one per reason of the placement engine, plus the spot
// market's price gate, an empty fleet, and "other" for anything else (a
// reason the engine gained after this list, which a test catches).
const (
	PendingHostState   = "host_state"
	PendingMetalHeld   = "bare_metal_held"
	PendingZone        = "zone"
	PendingLabels      = "labels"
	PendingModel       = "gpu_model"
	PendingNotEmpty    = "host_not_empty"
	PendingCPU         = "cpu"
	PendingMemory      = "memory"
	PendingGPUs        = "gpus"
	PendingNVLink      = "nvlink"
	PendingMIGProfile  = "mig_profile"
	PendingMIGSlot     = "mig_slot"
	PendingShare       = "gpu_share"
	PendingShareTenant = "gpu_share_tenant"
	// An AMD partition or VF request: no GPU in its mode (the operator
	// sets modes), or none with a free device.
	PendingPartitionMode  = "gpu_partition_mode"
	PendingPartition      = "gpu_partition"
	PendingPlacementGroup = "placement_group"
	PendingSpotPrice      = "spot_price"
	PendingNoHosts        = "no_hosts"
	PendingOther          = "other"
)

// pendingOf names the placement engine's reasons.
var pendingOf = map[placement.Reason]string{
	placement.ReasonState:         PendingHostState,
	placement.ReasonMetalHeld:     PendingMetalHeld,
	placement.ReasonZone:          PendingZone,
	placement.ReasonLabels:        PendingLabels,
	placement.ReasonModel:         PendingModel,
	placement.ReasonNotEmpty:      PendingNotEmpty,
	placement.ReasonCPU:           PendingCPU,
	placement.ReasonMemory:        PendingMemory,
	placement.ReasonGPUs:          PendingGPUs,
	placement.ReasonNVLink:        PendingNVLink,
	placement.ReasonNoMIG:         PendingMIGProfile,
	placement.ReasonMIGSlot:       PendingMIGSlot,
	placement.ReasonShare:         PendingShare,
	placement.ReasonShareTenant:   PendingShareTenant,
	placement.ReasonNoPartition:   PendingPartitionMode,
	placement.ReasonPartitionFull: PendingPartition,
	placement.ReasonGroup:         PendingPlacementGroup,
}

// PendingReasons lists every reason PendingByReason may count under, in
// the engine's order of checks, then the others.
func PendingReasons() []string {
	return []string{PendingHostState, PendingMetalHeld, PendingZone, PendingLabels, PendingModel, PendingNotEmpty,
		PendingCPU, PendingMemory, PendingGPUs, PendingNVLink, PendingMIGProfile, PendingMIGSlot, PendingShare,
		PendingShareTenant, PendingPartitionMode, PendingPartition, PendingPlacementGroup, PendingSpotPrice, PendingNoHosts, PendingOther}
}

// pendingReason sums up why the engine could not place req (err is what
// Place returned): the reason of the hosts that came closest to taking it,
// that is the last of the engine's checks that some host failed (a request
// for H100s that 900 hosts refuse for their model and 100 for lack of free
// GPUs waits for GPUs). The engine reports its reasons as text made for
// req, so they are matched against each reason's text for req.
func pendingReason(req *placement.Request, err error) string {
	var ice *placement.InsufficientCapacityError
	if !errors.As(err, &ice) {
		return PendingOther
	}
	if ice.Hosts == 0 || len(ice.Reasons) == 0 {
		return PendingNoHosts
	}
	byText := make(map[string]placement.Reason, len(pendingOf))
	for r := range pendingOf {
		if r == placement.ReasonGroup && req.Group == nil {
			continue // its text names the group
		}
		byText[r.Describe(req)] = r
	}
	var (
		last  placement.Reason
		found bool
	)
	for text, n := range ice.Reasons {
		r, ok := byText[text]
		if !ok {
			return PendingOther
		}
		if n > 0 && (!found || r > last) {
			last, found = r, true
		}
	}
	if !found {
		return PendingNoHosts
	}
	return pendingOf[last]
}

// PendingByReason counts the pending instances that the scheduler's last
// step could not place, by why (PendingReasons; see pendingReason); nil
// before the first step. An instance the step placed, or has not looked at
// yet (a spot launch the market has not priced), is not counted. Safe to
// call from any goroutine: the scrape of the metrics reads it.
func (s *Scheduler) PendingByReason() map[string]int {
	p := s.pending.Load()
	if p == nil {
		return nil
	}
	return maps.Clone(*p)
}

// publishPending makes the summary PendingByReason returns from the
// instances a step left waiting.
func (s *Scheduler) publishPending(waiting map[string]wait) {
	by := map[string]int{}
	for _, w := range waiting {
		r := w.reason
		if r == "" {
			r = PendingOther
		}
		by[r]++
	}
	s.pending.Store(&by)
}
