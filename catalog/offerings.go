package catalog

import (
	"fmt"
	"strings"
)

// offeringFamily describes the built-in offerings of one GPU model. Host CPU
// and RAM are sized per whole GPU and scaled down for slices, so that a
// tenant's share of the host matches its share of the GPUs and a host is not
// left with GPUs nobody can rent because its CPUs are gone.
type offeringFamily struct {
	prefix    string // offering name prefix, e.g. "h100"
	model     string // canonical model name
	vcpus     int    // vCPUs per whole GPU
	memoryGiB int64  // host RAM per whole GPU
	storeGiB  int    // instance store (local scratch disk) per whole GPU
	metal     bool   // offer the whole 8-GPU host as "<prefix>.metal"
	whole     []int  // whole-GPU counts offered as "<prefix>.<n>x"
	mig       []string
	shared    []shareSize
	// partitions are the compute partition modes offered as
	// "<prefix>.<mode>" (one logical GPU each), vfs the VF counts offered
	// as "<prefix>.vf<n>" (one VF each).
	partitions []string
	vfs        []int
}

// shareSize is one time-sliced offering: a compute share in milli and its
// name suffix; the GPU memory is the same fraction of the model's memory.
type shareSize struct {
	suffix string // "0.25" -> "<prefix>.shared.0.25"
	milli  int
}

var (
	quarterAndHalf = []shareSize{{"0.25", 250}, {"0.5", 500}}
	allWhole       = []int{1, 2, 4, 8}
)

// builtinFamilies lists what the built-in catalog offers. The instance
// store comes per whole GPU, like host CPU and RAM, and is scaled the same
// way for slices: an 8-GPU H100 offering has 7.5 TiB, as a cloud's 8-GPU
// instances come with several TiB of local NVMe, and a host's instances
// never together ask for more than its GPUs' worth (round-off aside).
//
// The MIG offerings are the profiles tenants ask for (one of each compute
// size); the 1g profile with double memory and the "+me" media profile
// stay available to operator catalog files but are not offered by default.
var builtinFamilies = []offeringFamily{
	{prefix: "h100", model: "H100-80GB-SXM", vcpus: 24, memoryGiB: 240, storeGiB: 960, metal: true, whole: allWhole,
		mig: []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
	{prefix: "a100", model: "A100-80GB-SXM", vcpus: 16, memoryGiB: 160, storeGiB: 500, metal: true, whole: allWhole,
		mig: []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
	{prefix: "h200", model: "H200-141GB", vcpus: 24, memoryGiB: 320, storeGiB: 960, metal: true, whole: allWhole,
		mig: []string{"1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}},
	{prefix: "l40s", model: "L40S", vcpus: 16, memoryGiB: 96, storeGiB: 400, whole: allWhole, shared: quarterAndHalf},
	{prefix: "l4", model: "L4", vcpus: 8, memoryGiB: 32, storeGiB: 200, whole: allWhole, shared: quarterAndHalf},
	{prefix: "a10", model: "A10", vcpus: 8, memoryGiB: 32, storeGiB: 200, whole: []int{1, 2, 4}, shared: quarterAndHalf},
	{prefix: "t4", model: "T4", vcpus: 4, memoryGiB: 16, storeGiB: 100, whole: []int{1, 2, 4}, shared: quarterAndHalf},
	{prefix: "mi300x", model: "MI300X", vcpus: 24, memoryGiB: 240, storeGiB: 960, metal: true, whole: allWhole,
		partitions: []string{"DPX", "QPX", "CPX"}, vfs: []int{8}},
	{prefix: "mi325x", model: "MI325X", vcpus: 24, memoryGiB: 320, storeGiB: 960, metal: true, whole: allWhole,
		partitions: []string{"DPX", "QPX", "CPX"}},
}

// builtinOfferings returns a fresh copy of the built-in offerings. It needs
// the built-in models for MIG profile compute slices and GPU memory sizes.
func builtinOfferings() []Offering {
	models := map[string]*Model{}
	for _, m := range builtinModels() {
		models[m.Name] = &m
	}
	var out []Offering
	for _, f := range builtinFamilies {
		m := models[f.model]
		if m == nil {
			panic("catalog: built-in offering family " + f.prefix + " names unknown model " + f.model)
		}
		out = append(out, f.offerings(m)...)
	}
	return out
}

func (f offeringFamily) offerings(m *Model) []Offering {
	var out []Offering
	if f.metal {
		out = append(out, Offering{
			Name:             f.prefix + ".metal",
			Description:      fmt.Sprintf("Bare-metal host with %d %s GPUs", maxGPUsPerHost, m.Name),
			Mode:             ModeMetal,
			Model:            m.Name,
			GPUs:             maxGPUsPerHost,
			VCPUs:            f.vcpus * maxGPUsPerHost,
			MemoryMiB:        f.memoryGiB * maxGPUsPerHost * GiB,
			InstanceStoreGiB: f.storeGiB * maxGPUsPerHost,
		})
	}
	for _, n := range f.whole {
		out = append(out, Offering{
			Name:             fmt.Sprintf("%s.%dx", f.prefix, n),
			Description:      fmt.Sprintf("%d x %s (passthrough)", n, m.Name),
			Mode:             ModeGPU,
			Model:            m.Name,
			GPUs:             n,
			VCPUs:            f.vcpus * n,
			MemoryMiB:        f.memoryGiB * int64(n) * GiB,
			InstanceStoreGiB: f.storeGiB * n,
		})
	}
	for _, name := range f.mig {
		p := m.Profile(name)
		if p == nil {
			panic("catalog: built-in offering family " + f.prefix + " names unknown MIG profile " + name)
		}
		out = append(out, Offering{
			Name:             f.prefix + ".mig." + name,
			Description:      fmt.Sprintf("MIG %s instance of one %s", name, m.Name),
			Mode:             ModeMIG,
			Model:            m.Name,
			MIGProfile:       name,
			VCPUs:            scaleVCPUs(f.vcpus, p.ComputeSlices, MIGComputeSlices),
			MemoryMiB:        scaleGiB(f.memoryGiB, p.ComputeSlices, MIGComputeSlices) * GiB,
			InstanceStoreGiB: scaleStore(f.storeGiB, p.ComputeSlices, MIGComputeSlices),
		})
	}
	for _, name := range f.partitions {
		p := m.ComputePartitionNamed(name)
		if p == nil {
			panic("catalog: built-in offering family " + f.prefix + " names unknown partition " + name)
		}
		out = append(out, Offering{
			Name:             f.prefix + "." + strings.ToLower(name),
			Description:      fmt.Sprintf("One of %d %s partitions of one %s (%d XCDs, %d CUs)", p.Devices, name, m.Name, p.XCDs, p.ComputeUnits),
			Mode:             ModePartition,
			Model:            m.Name,
			Partition:        name,
			VCPUs:            scaleVCPUs(f.vcpus, 1, p.Devices),
			MemoryMiB:        scaleGiB(f.memoryGiB, 1, p.Devices) * GiB,
			InstanceStoreGiB: scaleStore(f.storeGiB, 1, p.Devices),
		})
	}
	for _, n := range f.vfs {
		out = append(out, Offering{
			Name:             fmt.Sprintf("%s.vf%d", f.prefix, n),
			Description:      fmt.Sprintf("One of %d SR-IOV virtual functions of one %s (MxGPU)", n, m.Name),
			Mode:             ModeVF,
			Model:            m.Name,
			VFs:              n,
			VCPUs:            scaleVCPUs(f.vcpus, 1, n),
			MemoryMiB:        scaleGiB(f.memoryGiB, 1, n) * GiB,
			InstanceStoreGiB: scaleStore(f.storeGiB, 1, n),
		})
	}
	for _, s := range f.shared {
		out = append(out, Offering{
			Name:             f.prefix + ".shared." + s.suffix,
			Description:      fmt.Sprintf("%s of one %s (time-sliced)", s.suffix, m.Name),
			Mode:             ModeShared,
			Model:            m.Name,
			ShareMilli:       s.milli,
			ShareMemoryMiB:   m.MemoryMiB * int64(s.milli) / 1000,
			VCPUs:            scaleVCPUs(f.vcpus, s.milli, 1000),
			MemoryMiB:        scaleGiB(f.memoryGiB, s.milli, 1000) * GiB,
			InstanceStoreGiB: scaleStore(f.storeGiB, s.milli, 1000),
		})
	}
	return out
}

// scaleVCPUs returns round(vcpus*num/den), at least 1, because a slice with
// no CPU at all cannot run anything.
func scaleVCPUs(vcpus, num, den int) int {
	v := (2*vcpus*num + den) / (2 * den)
	return max(v, 1)
}

// scaleGiB returns round(gib*num/den) in whole GiB, at least 1.
func scaleGiB(gib int64, num, den int) int64 {
	v := (2*gib*int64(num) + int64(den)) / (2 * int64(den))
	return max(v, 1)
}

// scaleStore returns round(gib*num/den): a slice's share of its GPU's
// instance store (0 when the family has none).
func scaleStore(gib, num, den int) int {
	if gib == 0 {
		return 0
	}
	return int(scaleGiB(int64(gib), num, den))
}
