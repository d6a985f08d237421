package sim

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// Defaults a Spec falls back to, so that a file with only an id and GPUs
// still describes a host the built-in offerings fit on.
const (
	DefaultDriver = "550.54.15"
	DefaultCUDA   = "12.4"
	// DefaultAMDDriver is the amdgpu driver version an AMD host reports
	// (it has no CUDA version).
	DefaultAMDDriver = "6.10.5"
	// CPUPerGPU and MemoryPerGPU size a host whose spec leaves CPU or memory
	// out; they are the fleet fixtures' sizes.
	CPUPerGPU    = fleet.MockCPUPerGPU
	MemoryPerGPU = fleet.MockMemoryPerGPU
	// MaxGPUs caps the GPUs of one host: the placement engine keeps a host's
	// GPUs in a 64-bit mask.
	MaxGPUs = 64
)

// Spec describes a simulated host. It is also the YAML file format:
//
//	id: sim-h100-1
//	zone: zone-a
//	rack: rack-1
//	labels: {interconnect: infiniband}
//	cpu_milli: 256000
//	memory_mib: 2097152
//	gpus: {model: H100, count: 8, nvlink_islands: 1, mig: false}
//	hcas: 8
type Spec struct {
	ID     string            `yaml:"id"`
	Zone   string            `yaml:"zone,omitempty"`
	Rack   string            `yaml:"rack,omitempty"`
	Labels map[string]string `yaml:"labels,omitempty"`
	// CPUMilli and MemoryMiB default to CPUPerGPU and MemoryPerGPU per GPU
	// (a CPU-only host counts as one GPU) when zero.
	CPUMilli  int64   `yaml:"cpu_milli,omitempty"`
	MemoryMiB int64   `yaml:"memory_mib,omitempty"`
	GPUs      GPUSpec `yaml:"gpus,omitempty"`
	// Driver and CUDA are the versions Inventory reports; DefaultDriver and
	// DefaultCUDA when empty.
	Driver string `yaml:"driver,omitempty"`
	CUDA   string `yaml:"cuda,omitempty"`
	// HCAs are the host's fake RDMA adapters, which Inventory reports
	// and MakeDeviceNodes makes device nodes for.
	HCAs HCAs `yaml:"hcas,omitempty"`
}

// MaxHCAs caps the RDMA adapters of one simulated host.
const MaxHCAs = 32

// Link layers of a simulated adapter (fleet.HCA.LinkLayer).
const (
	InfiniBand = "InfiniBand"
	// Ethernet is RoCE.
	Ethernet = "Ethernet"
)

// HCAs lists a simulated host's RDMA adapters; adapter i has the verbs
// node infiniband/uverbs<i>. In YAML it is either a number of InfiniBand
// adapters ("hcas: 8": mlx5_0 to mlx5_7 with the interfaces ib0 to ib7,
// as on an HGX H100 board) or a list of adapters whose fields default the
// same way:
//
//	hcas:
//	  - {name: mlx5_0, link_layer: Ethernet, netdev: eth2}
//	  - {link_layer: InfiniBand}
type HCAs []HCASpec

// HCASpec is one simulated RDMA adapter. Spec.Resolve fills what is
// empty: Name "mlx5_<i>", LinkLayer InfiniBand, and, for an InfiniBand
// adapter, NetDev "ib<i>" (a RoCE adapter's interface is the operator's
// to name; none when empty).
type HCASpec struct {
	Name      string `yaml:"name,omitempty"`
	LinkLayer string `yaml:"link_layer,omitempty"`
	NetDev    string `yaml:"netdev,omitempty"`
}

// UnmarshalYAML accepts a number of adapters or a list of them.
func (hs *HCAs) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var k int
		if err := n.Decode(&k); err != nil {
			return fmt.Errorf("line %d: hcas must be a number of adapters or a list of them", n.Line)
		}
		if k < 0 || k > MaxHCAs {
			return fmt.Errorf("line %d: hcas %d is outside 0..%d", n.Line, k, MaxHCAs)
		}
		*hs = make(HCAs, k)
		if k == 0 {
			*hs = nil
		}
		return nil
	}
	var list []HCASpec
	if err := n.Decode(&list); err != nil {
		return fmt.Errorf("line %d: hcas must be a number of adapters or a list of them: %w", n.Line, err)
	}
	*hs = list
	return nil
}

// resolveHCAs fills the adapters' defaults and reports what is wrong.
func resolveHCAs(hs HCAs, bad func(string, ...any)) HCAs {
	if len(hs) > MaxHCAs {
		bad("hcas: %d adapters; the limit is %d", len(hs), MaxHCAs)
		return nil
	}
	if len(hs) == 0 {
		return nil
	}
	out := slices.Clone(hs)
	names := map[string]bool{}
	for i := range out {
		h := &out[i]
		if h.Name == "" {
			h.Name = "mlx5_" + strconv.Itoa(i)
		}
		if h.LinkLayer == "" {
			h.LinkLayer = InfiniBand
		}
		if h.NetDev == "" && h.LinkLayer == InfiniBand {
			h.NetDev = "ib" + strconv.Itoa(i)
		}
		switch {
		case !simpleName(h.Name):
			bad("hcas[%d].name %q: want 1 to 64 letters, digits, '_', '-' or '.'", i, h.Name)
		case names[h.Name]:
			bad("hcas[%d].name %q is given twice", i, h.Name)
		}
		names[h.Name] = true
		if h.LinkLayer != InfiniBand && h.LinkLayer != Ethernet {
			bad("hcas[%d].link_layer %q: want %s or %s (RoCE)", i, h.LinkLayer, InfiniBand, Ethernet)
		}
		if h.NetDev != "" && !simpleName(h.NetDev) {
			bad("hcas[%d].netdev %q: want 1 to 64 letters, digits, '_', '-' or '.'", i, h.NetDev)
		}
	}
	return out
}

// simpleName accepts the names the kernel gives adapters and interfaces:
// letters, digits, '_', '-' and '.', at most 64 bytes, and not "." or "..".
func simpleName(s string) bool {
	if s == "" || len(s) > 64 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// GPUSpec describes the GPUs of a simulated host; hosts carry one model.
type GPUSpec struct {
	// Model is a catalog model name or alias; required when Count > 0.
	Model string `yaml:"model,omitempty"`
	Count int    `yaml:"count,omitempty"`
	// NVLinkIslands groups the GPUs into NVLink islands, in index order;
	// empty means PCIe only.
	NVLinkIslands Islands `yaml:"nvlink_islands,omitempty"`
	// MIG starts every GPU in MIG mode (with no instances).
	MIG bool `yaml:"mig,omitempty"`
	// Partition, MemoryPartition and VFs put every GPU of an AMD model in
	// the operator's mode: compute partition (SPX, DPX, QPX, CPX), memory
	// partition (NPS1, NPS4) and SR-IOV VFs, checked against the catalog's
	// table. Empty on an AMD model: SPX with its first memory mode.
	Partition       string `yaml:"partition,omitempty"`
	MemoryPartition string `yaml:"memory_partition,omitempty"`
	VFs             int    `yaml:"vfs,omitempty"`
}

// Islands lists NVLink island sizes: [4, 4] puts GPUs 0-3 in island 0 and
// GPUs 4-7 in island 1. In YAML it is either that list or a number of equal
// islands ("nvlink_islands: 1" for one island of all GPUs), which
// Spec.Resolve expands once the GPU count is known.
type Islands []int

// UnmarshalYAML accepts a list of sizes or a count of equal islands. A count
// is kept as a negative single entry until Resolve knows the GPU count; that
// keeps the decoded type a plain slice for Go callers.
func (is *Islands) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var k int
		if err := n.Decode(&k); err != nil {
			return fmt.Errorf("line %d: nvlink_islands must be a number of islands or a list of sizes", n.Line)
		}
		if k < 0 {
			return fmt.Errorf("line %d: nvlink_islands must not be negative", n.Line)
		}
		if k == 0 {
			*is = nil
		} else {
			*is = Islands{-k}
		}
		return nil
	}
	var sizes []int
	if err := n.Decode(&sizes); err != nil {
		return fmt.Errorf("line %d: nvlink_islands must be a number of islands or a list of sizes", n.Line)
	}
	*is = sizes
	return nil
}

// Resolve checks the spec against the catalog and returns a copy with its
// defaults filled in and Islands expanded to sizes. All problems are joined
// into one error naming the host.
func (s Spec) Resolve(cat *catalog.Catalog) (Spec, error) {
	r := s
	r.Labels = maps.Clone(s.Labels)
	r.GPUs.NVLinkIslands = append(Islands(nil), s.GPUs.NVLinkIslands...)
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.ID == "" {
		bad("id is required")
	}
	if r.CPUMilli < 0 || r.MemoryMiB < 0 {
		bad("cpu_milli and memory_mib must not be negative")
	}
	g := &r.GPUs
	amd := false
	switch {
	case g.Count < 0 || g.Count > MaxGPUs:
		bad("gpus.count %d is outside 0..%d", g.Count, MaxGPUs)
	case g.Count > 0 && g.Model == "":
		bad("gpus.model is required with gpus.count %d", g.Count)
	case g.Count > 0:
		m, err := cat.Model(g.Model)
		if err != nil {
			bad("gpus.model: %w", err)
			break
		}
		g.Model = m.Name
		if g.MIG && !m.SupportsMIG() {
			bad("gpus.mig: model %s has no MIG", m.Name)
		}
		mode, _, err := m.ResolveMode(catalog.GPUMode{Partition: g.Partition, MemoryPartition: g.MemoryPartition, VFs: g.VFs})
		if err != nil {
			var me *catalog.ModeError
			if errors.As(err, &me) {
				bad("gpus.%s: %s", me.Field, me.Message)
			} else {
				bad("gpus: %v", err)
			}
			break
		}
		g.Partition, g.MemoryPartition, g.VFs = mode.Partition, mode.MemoryPartition, mode.VFs
		amd = m.VendorOf() == catalog.VendorAMD
	}
	if len(g.NVLinkIslands) == 1 && g.NVLinkIslands[0] < 0 {
		k := -g.NVLinkIslands[0]
		if g.Count%k != 0 {
			bad("nvlink_islands: %d GPUs do not split into %d equal islands", g.Count, k)
		} else {
			g.NVLinkIslands = make(Islands, k)
			for i := range g.NVLinkIslands {
				g.NVLinkIslands[i] = g.Count / k
			}
		}
	} else if len(g.NVLinkIslands) > 0 {
		sum := 0
		for _, n := range g.NVLinkIslands {
			if n <= 0 {
				bad("nvlink_islands: island sizes must be positive, got %d", n)
			}
			sum += n
		}
		if sum != g.Count {
			bad("nvlink_islands: island sizes add up to %d, but the host has %d GPUs", sum, g.Count)
		}
	}
	if len(g.NVLinkIslands) == 0 {
		g.NVLinkIslands = nil
	}
	if g.Count == 0 {
		g.Model, g.MIG = "", false
		g.Partition, g.MemoryPartition, g.VFs = "", "", 0
	}
	n := int64(max(g.Count, 1))
	if r.CPUMilli == 0 {
		r.CPUMilli = n * CPUPerGPU
	}
	if r.MemoryMiB == 0 {
		r.MemoryMiB = n * MemoryPerGPU
	}
	switch {
	case amd:
		// An AMD host has the amdgpu driver and no CUDA.
		r.Driver, r.CUDA = cmp.Or(r.Driver, DefaultAMDDriver), ""
	default:
		r.Driver, r.CUDA = cmp.Or(r.Driver, DefaultDriver), cmp.Or(r.CUDA, DefaultCUDA)
	}
	r.HCAs = resolveHCAs(s.HCAs, bad)
	if len(errs) > 0 {
		name := r.ID
		if name == "" {
			name = "(no id)"
		}
		return Spec{}, fmt.Errorf("sim host %s: %w", name, errors.Join(errs...))
	}
	return r, nil
}

// ParseSpec decodes a YAML host description. Unknown fields are errors, so
// that a misspelt "nvlink_island" does not silently give a PCIe host.
// source names the input in errors.
func ParseSpec(r io.Reader, source string) (Spec, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Spec{}, fmt.Errorf("%s: %w", source, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Spec
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return Spec{}, fmt.Errorf("%s: empty host description", source)
		}
		return Spec{}, fmt.Errorf("%s: %w", source, err)
	}
	return s, nil
}

// LoadSpec reads a YAML host description from a file.
func LoadSpec(path string) (Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return Spec{}, err
	}
	defer f.Close()
	return ParseSpec(f, path)
}

// LoadFile builds a simulated host from a YAML host description.
func LoadFile(path string, opts ...Option) (*Host, error) {
	s, err := LoadSpec(path)
	if err != nil {
		return nil, err
	}
	h, err := New(s, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

// Fleet returns n copies of template named "<template.ID>-1" to
// "<template.ID>-<n>", for starting many simulated hosts at once. Labels are
// copied, so changing one host's spec does not change another's.
func Fleet(n int, template Spec) []Spec {
	out := make([]Spec, n)
	for i := range out {
		s := template
		s.ID = fmt.Sprintf("%s-%d", template.ID, i+1)
		s.Labels = maps.Clone(template.Labels)
		s.GPUs.NVLinkIslands = append(Islands(nil), template.GPUs.NVLinkIslands...)
		s.HCAs = slices.Clone(template.HCAs)
		out[i] = s
	}
	return out
}

// DefaultFleet is the mixed fleet `gpucloud up` starts when given none: two
// 8x H100-80GB-SXM and two 8x A100-80GB-SXM hosts with all GPUs on one
// NVLink island (as on HGX boards), and four 2x L40S hosts on PCIe, each
// kind on its own rack of zone "local-a". The H100 hosts have eight fake
// InfiniBand adapters each, one per GPU, as on a DGX H100.
func DefaultFleet() []Spec {
	var out []Spec
	out = append(out, Fleet(2, Spec{ID: "sim-h100", Zone: "local-a", Rack: "rack-1",
		Labels: map[string]string{"interconnect": "infiniband"},
		GPUs:   GPUSpec{Model: "H100-80GB-SXM", Count: 8, NVLinkIslands: Islands{8}},
		HCAs:   make(HCAs, 8)})...)
	out = append(out, Fleet(2, Spec{ID: "sim-a100", Zone: "local-a", Rack: "rack-2",
		GPUs: GPUSpec{Model: "A100-80GB-SXM", Count: 8, NVLinkIslands: Islands{8}}})...)
	out = append(out, Fleet(4, Spec{ID: "sim-l40s", Zone: "local-a", Rack: "rack-3",
		GPUs: GPUSpec{Model: "L40S", Count: 2}})...)
	return out
}
