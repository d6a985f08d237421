package placement

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/catalog"
)

// Request asks for one allocation.
type Request struct {
	// ID names the allocation; it also seeds tie-breaking, so that the same
	// request against the same fleet lands on the same host. (Ties are
	// broken over the fleet's classes in their internal order, which
	// depends on the fleet's history: a Clone, or a fleet rebuilt in
	// another order, may break a tie differently.)
	ID   string
	Mode catalog.Mode
	// GPUs is the whole-GPU count for ModeGPU; for ModeMetal the host's GPU
	// count (0 = any).
	GPUs int
	// MIGProfile names the profile for ModeMIG: a name valid on the allowed
	// models ("3g.40gb"), a short compute form ("3g") or a profile ID ("9").
	MIGProfile string
	// ShareMilli and ShareMemoryMiB size a ModeShared request.
	ShareMilli     int
	ShareMemoryMiB int64
	// Partition names the compute partition mode of a ModePartition
	// request ("CPX"): one logical GPU of a GPU its operator put in that
	// mode. MemoryPartition, when set, also pins the memory mode ("NPS4").
	Partition       string
	MemoryPartition string
	// VFs is the VF count of a ModeVF request: one virtual function of a
	// GPU exposed as that many.
	VFs int
	// CPUMilli and MemoryMiB are the host CPU and RAM the allocation needs.
	CPUMilli  int64
	MemoryMiB int64

	// Models restricts the GPU model (canonical names or aliases); empty
	// means any. The trace's "V100M16|V100M32" is two entries.
	Models []string
	// Zones restricts the zone; empty means any.
	Zones []string
	// Labels must all hold on the host.
	Labels []LabelSelector
	// Group places the request relative to other members of a placement
	// group.
	Group *Group

	// Tenant owns the allocation. A ModeShared request goes only on a GPU
	// without shares or with shares of the same tenant (fleet.GPU's
	// ShareTenant): the shares of one GPU share a CUDA MPS server and its
	// /dev/shm. Empty is a tenant of its own, which shares only with other
	// empty ones (trace replays, the simulator). Other modes record it in
	// the placement and ignore it.
	Tenant string

	// Preemptible marks spot allocations, which may be evicted for others;
	// PriceMicros is their price per hour, used to pick cheap victims.
	Preemptible bool
	PriceMicros int64

	// Prefer lists host IDs, the most preferred first, that break ties
	// only: among the hosts whose score equals the best one, the first of
	// Prefer is chosen; a preferred host that does not fit, or scores
	// worse than the best, changes nothing. (A serverless endpoint's
	// workers prefer the hosts where its image was last run.) Ignored for
	// placement-group members.
	Prefer []string
}

// GPUMilli is the GPU compute the request asks for, in milli-GPUs (MIG
// slices count 1000/7 each; metal counts nothing until placed).
func (r *Request) GPUMilli() int {
	switch r.Mode {
	case catalog.ModeGPU:
		return r.GPUs * 1000
	case catalog.ModeShared:
		return r.ShareMilli
	}
	return 0
}

// Strategy is how a placement group spreads its members.
type Strategy string

const (
	// Cluster keeps members close: on the same host's NVLink island when
	// possible, else on the same rack fabric.
	Cluster Strategy = "cluster"
	// Spread keeps members apart: on different hosts, or different racks.
	Spread Strategy = "spread"
)

// Group is a placement group and where its members already are.
type Group struct {
	Name     string
	Strategy Strategy
	// ByRack spreads across racks instead of hosts (Spread only).
	ByRack bool
	// Hosts are the IDs of hosts where members already run.
	Hosts []string
	// Racks are the racks of those hosts.
	Racks []string
}

// LabelSelector is one condition on a host label: "driver>=550",
// "interconnect=infiniband", "gpu-direct" (exists) or "!maintenance".
type LabelSelector struct {
	Key   string
	Op    string // one of =, !=, >=, <=, >, <, exists, !exists
	Value string
}

// ParseLabelSelector parses one selector.
func ParseLabelSelector(s string) (LabelSelector, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return LabelSelector{}, fmt.Errorf("empty label selector")
	}
	if strings.HasPrefix(s, "!") {
		k := strings.TrimSpace(s[1:])
		if !validLabelKey(k) {
			return LabelSelector{}, fmt.Errorf("label selector %q: bad key", s)
		}
		return LabelSelector{Key: k, Op: "!exists"}, nil
	}
	for _, op := range []string{">=", "<=", "!=", "==", "=", ">", "<"} {
		if i := strings.Index(s, op); i > 0 {
			k, v := strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+len(op):])
			if op == "==" {
				op = "="
			}
			if !validLabelKey(k) {
				return LabelSelector{}, fmt.Errorf("label selector %q: bad key %q", s, k)
			}
			if v == "" {
				return LabelSelector{}, fmt.Errorf("label selector %q: missing value", s)
			}
			if strings.ContainsAny(v[:1], "<>=!") {
				return LabelSelector{}, fmt.Errorf("label selector %q: unknown operator (want =, !=, >=, <=, > or <)", s)
			}
			return LabelSelector{Key: k, Op: op, Value: v}, nil
		}
	}
	if !validLabelKey(s) {
		return LabelSelector{}, fmt.Errorf("label selector %q: bad key", s)
	}
	return LabelSelector{Key: s, Op: "exists"}, nil
}

func validLabelKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./", c)) {
			return false
		}
	}
	return true
}

// String renders the selector as it is parsed.
func (l LabelSelector) String() string {
	switch l.Op {
	case "exists":
		return l.Key
	case "!exists":
		return "!" + l.Key
	}
	return l.Key + l.Op + l.Value
}

// Match reports whether the labels satisfy the selector. Ordered operators
// compare versions: dot-separated numeric parts numerically ("550.54" >
// "535.161"), other parts as strings.
func (l LabelSelector) Match(labels map[string]string) bool {
	v, ok := labels[l.Key]
	switch l.Op {
	case "exists":
		return ok
	case "!exists":
		return !ok
	case "=":
		return ok && v == l.Value
	case "!=":
		return !ok || v != l.Value
	}
	if !ok {
		return false
	}
	c := compareVersions(v, l.Value)
	switch l.Op {
	case ">=":
		return c >= 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case "<":
		return c < 0
	}
	return false
}

func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		var x, y string
		if i < len(pa) {
			x = pa[i]
		}
		if i < len(pb) {
			y = pb[i]
		}
		nx, ex := strconv.ParseInt(x, 10, 64)
		ny, ey := strconv.ParseInt(y, 10, 64)
		switch {
		case ex == nil && ey == nil:
			if nx != ny {
				if nx < ny {
					return -1
				}
				return 1
			}
		case x != y:
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// RequestError is a request that can never be valid, whatever the fleet.
type RequestError struct {
	Field   string
	Message string
}

func (e *RequestError) Error() string { return "invalid request: " + e.Field + ": " + e.Message }

// Validate checks the request against the catalog, resolving model aliases
// in place. It returns a *RequestError.
func (r *Request) Validate(cat *catalog.Catalog) error {
	bad := func(field, format string, args ...any) error {
		return &RequestError{Field: field, Message: fmt.Sprintf(format, args...)}
	}
	if !r.Mode.Valid() {
		return bad("mode", "unknown mode %q (want metal, gpu, mig, shared, cpu, partition or vf)", r.Mode)
	}
	if r.CPUMilli < 0 || r.MemoryMiB < 0 {
		return bad("resources", "cpu and memory must not be negative")
	}
	for i, m := range r.Models {
		if cat == nil {
			break
		}
		c, err := cat.CanonicalModel(m)
		if err != nil {
			return bad("models", "%v", err)
		}
		r.Models[i] = c
	}
	sort.Strings(r.Models)
	switch r.Mode {
	case catalog.ModeGPU:
		if r.GPUs < 1 || r.GPUs > 64 {
			return bad("gpus", "%d GPUs: want 1..64", r.GPUs)
		}
	case catalog.ModeMetal:
		if r.GPUs < 0 {
			return bad("gpus", "must not be negative")
		}
	case catalog.ModeShared:
		if r.ShareMilli < 1 || r.ShareMilli > 999 {
			return bad("share_milli", "%d is out of range 1..999 (use mode gpu for a whole GPU)", r.ShareMilli)
		}
		if r.ShareMemoryMiB < 0 {
			return bad("share_memory_mib", "must not be negative")
		}
	case catalog.ModeMIG:
		if r.MIGProfile == "" {
			return bad("mig_profile", "mode mig needs a profile")
		}
		if cat != nil {
			ok := false
			var lastErr error
			for _, m := range cat.Models() {
				if !m.SupportsMIG() || len(r.Models) > 0 && !contains(r.Models, m.Name) {
					continue
				}
				if _, err := m.ResolveProfile(r.MIGProfile); err == nil {
					ok = true
					break
				} else {
					lastErr = err
				}
			}
			if !ok {
				if lastErr != nil {
					return bad("mig_profile", "%v", lastErr)
				}
				return bad("mig_profile", "no allowed GPU model supports MIG")
			}
		}
	}
	if err := r.validateAMD(cat); err != nil {
		return err
	}
	if r.Mode != catalog.ModeShared && (r.ShareMilli != 0 || r.ShareMemoryMiB != 0) {
		return bad("share_milli", "only mode shared takes a share")
	}
	if r.Mode != catalog.ModeMIG && r.MIGProfile != "" {
		return bad("mig_profile", "only mode mig takes a profile")
	}
	if g := r.Group; g != nil {
		if g.Strategy != Cluster && g.Strategy != Spread {
			return bad("group.strategy", "unknown strategy %q (want cluster or spread)", g.Strategy)
		}
		if g.ByRack && g.Strategy != Spread {
			return bad("group.by_rack", "only spread groups spread by rack")
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// validateAMD checks the fields of the partition and vf modes: a partition
// mode (canonical upper case, not SPX) and a VF count that some allowed
// model has, and neither field in another mode.
func (r *Request) validateAMD(cat *catalog.Catalog) error {
	bad := func(field, format string, args ...any) error {
		return &RequestError{Field: field, Message: fmt.Sprintf(format, args...)}
	}
	if r.Mode != catalog.ModePartition && (r.Partition != "" || r.MemoryPartition != "") {
		return bad("partition", "only mode partition takes a partition")
	}
	if r.Mode != catalog.ModeVF && r.VFs != 0 {
		return bad("vfs", "only mode vf takes vfs")
	}
	switch r.Mode {
	case catalog.ModePartition:
		r.Partition, r.MemoryPartition = strings.ToUpper(r.Partition), strings.ToUpper(r.MemoryPartition)
		if r.Partition == "" {
			return bad("partition", "mode partition needs a compute partition mode (DPX, QPX, CPX)")
		}
		if r.Partition == catalog.SPX {
			return bad("partition", "SPX is a whole GPU: use mode gpu")
		}
	case catalog.ModeVF:
		if r.VFs < 1 {
			return bad("vfs", "mode vf needs a VF count of at least 1, got %d", r.VFs)
		}
	default:
		return nil
	}
	if cat == nil {
		return nil
	}
	for _, m := range cat.Models() {
		if len(r.Models) > 0 && !contains(r.Models, m.Name) {
			continue
		}
		if r.Mode == catalog.ModeVF {
			for _, v := range m.VFCounts() {
				if v == r.VFs {
					return nil
				}
			}
			continue
		}
		cp := m.ComputePartitionNamed(r.Partition)
		if cp != nil && (r.MemoryPartition == "" || containsFold(cp.MemoryPartitions, r.MemoryPartition)) {
			return nil
		}
	}
	if r.Mode == catalog.ModeVF {
		return bad("vfs", "no allowed GPU model can be exposed as %d VFs", r.VFs)
	}
	if r.MemoryPartition != "" {
		return bad("memory_partition", "no allowed GPU model has compute partition %s with memory partition %s", r.Partition, r.MemoryPartition)
	}
	return bad("partition", "no allowed GPU model has compute partition %s", r.Partition)
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}
