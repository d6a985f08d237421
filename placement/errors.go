package placement

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/gpucloud/gpucloud/catalog"
)

// Reason says why a host cannot take a request.
type Reason uint8

// Reasons, in the order the engine checks them. A host counts under the
// first reason that rules it out.
const (
	reasonNone Reason = iota
	ReasonState
	ReasonMetalHeld
	ReasonZone
	ReasonLabels
	ReasonModel
	ReasonNotEmpty
	ReasonCPU
	ReasonMemory
	ReasonGPUs
	ReasonNVLink
	ReasonNoMIG
	ReasonMIGSlot
	ReasonShare
	ReasonShareTenant
	ReasonNoPartition
	ReasonPartitionFull
	ReasonGroup
	numReasons
)

// Describe renders the reason for a request, e.g. "no free MIG 3g slot".
func (r Reason) Describe(req *Request) string {
	switch r {
	case ReasonState:
		return "host cordoned or unhealthy"
	case ReasonMetalHeld:
		return "host rented as bare metal"
	case ReasonZone:
		return "wrong zone"
	case ReasonLabels:
		sels := make([]string, len(req.Labels))
		for i, l := range req.Labels {
			sels[i] = l.String()
		}
		return "labels do not match " + strings.Join(sels, ",")
	case ReasonModel:
		return "wrong GPU model"
	case ReasonNotEmpty:
		if req.Mode == catalog.ModeMetal && req.GPUs > 0 {
			return fmt.Sprintf("not an empty %d-GPU host", req.GPUs)
		}
		return "host not empty"
	case ReasonCPU:
		return "insufficient cpu"
	case ReasonMemory:
		return "insufficient memory"
	case ReasonGPUs:
		if req.GPUs == 1 {
			return "no free GPU"
		}
		return fmt.Sprintf("fewer than %d free GPUs", req.GPUs)
	case ReasonNVLink:
		return fmt.Sprintf("no NVLink-connected set of %d free GPUs", req.GPUs)
	case ReasonNoMIG:
		return "no MIG " + shortProfile(req.MIGProfile) + " profile on this GPU model"
	case ReasonMIGSlot:
		return "no free MIG " + shortProfile(req.MIGProfile) + " slot"
	case ReasonShare:
		return fmt.Sprintf("no GPU with %d milli and %d MiB free", req.ShareMilli, req.ShareMemoryMiB)
	case ReasonShareTenant:
		return "GPU shared by another tenant"
	case ReasonNoPartition:
		if req.Mode == catalog.ModeVF {
			return fmt.Sprintf("no GPU exposed as %d VFs", req.VFs)
		}
		return "no GPU in " + partitionName(req) + " mode"
	case ReasonPartitionFull:
		if req.Mode == catalog.ModeVF {
			return "no free VF"
		}
		return "no free " + partitionName(req) + " partition"
	case ReasonGroup:
		return "placement group " + req.Group.Name + " (" + string(req.Group.Strategy) + ")"
	}
	return "unknown"
}

// shortProfile turns "3g.40gb" into "3g" for messages that cover many models.
func shortProfile(p string) string {
	if i := strings.IndexByte(p, '.'); i > 0 {
		return p[:i]
	}
	return p
}

// InsufficientCapacityError says that no host can take a request now, and
// why, host by host: "0/1213 hosts available: 900 no free MIG 3g slot, 313
// wrong GPU model". The request may fit later, when capacity frees up.
type InsufficientCapacityError struct {
	// Hosts is the number of hosts considered.
	Hosts int
	// Reasons counts hosts by the first reason that ruled them out.
	Reasons map[string]int
}

func (e *InsufficientCapacityError) Error() string {
	s := fmt.Sprintf("0/%d hosts available", e.Hosts)
	if len(e.Reasons) > 0 {
		s += ": " + FormatReasons(e.Reasons)
	}
	return s
}

// FormatReasons renders per-reason host counts as "3 wrong GPU model,
// 1 host cordoned": the most common first, ties by name.
func FormatReasons(reasons map[string]int) string {
	keys := ReasonsByCount(reasons)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", reasons[k], k)
	}
	return strings.Join(parts, ", ")
}

// ReasonsByCount lists the reasons of per-reason host counts, the most
// common first, ties by name: the order every rendering of them uses.
func ReasonsByCount(reasons map[string]int) []string {
	keys := make([]string, 0, len(reasons))
	for k := range reasons {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if reasons[keys[i]] != reasons[keys[j]] {
			return reasons[keys[i]] > reasons[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// IsInsufficientCapacity reports whether err is (or wraps) an
// *InsufficientCapacityError.
func IsInsufficientCapacity(err error) bool {
	var e *InsufficientCapacityError
	return errors.As(err, &e)
}

// IsInvalidRequest reports whether err is (or wraps) a *RequestError.
func IsInvalidRequest(err error) bool {
	var e *RequestError
	return errors.As(err, &e)
}

// partitionName is a partition request's mode as the reasons print it:
// "CPX", or "CPX/NPS4" when it pins the memory mode.
func partitionName(req *Request) string {
	if req.MemoryPartition != "" {
		return req.Partition + "/" + req.MemoryPartition
	}
	return req.Partition
}
