package advise

import (
	"fmt"

	"github.com/gpucloud/gpucloud/catalog"
)

// hostGPUs is the GPU count of the whole NVLink hosts (HGX boards) that
// gpucloud's metal offerings rent, and that its largest gpu offerings
// fill.
const hostGPUs = 8

// unit is what one instance of an offering gives the model.
type unit struct {
	model *catalog.Model
	arch  Arch
	// gpus is how many GPUs (or one MIG slice, one share) the instance
	// has, each with perMiB of memory.
	gpus   int
	perMiB int64
	// what names the unit for the reasons: "H100-80GB-SXM", "MIG
	// 3g.40gb of H100-80GB-SXM", "share of T4".
	what string
	// rdma is true for an InfiniBand/RoCE-class offering: see
	// rdmaClass.
	rdma bool
}

// fit is one offering that can hold the workload: its unit, how many of
// its GPUs the model spreads over per node, and the reasons.
type fit struct {
	o       *catalog.Offering
	u       unit
	split   int // GPUs the model spreads over per node (1: fits one)
	support Support
	compute []string
	network []string
	// scratch is the instance store's reason, when the workload asks for
	// local scratch.
	scratch string
}

// unitOf describes one instance of o, or says why the advisor cannot use
// it.
func unitOf(cat *catalog.Catalog, o *catalog.Offering) (unit, string) {
	if o.Mode == catalog.ModeCPU {
		return unit{}, "a CPU offering has no GPU"
	}
	if o.Model == "" {
		return unit{}, "a metal offering of any host: its GPUs are not known in advance"
	}
	m, err := cat.Model(o.Model)
	if err != nil {
		return unit{}, err.Error()
	}
	u := unit{model: m, arch: ArchOf(m.Name), gpus: 1, perMiB: m.MemoryMiB, what: m.Name}
	switch o.Mode {
	case catalog.ModeGPU:
		u.gpus = o.GPUs
	case catalog.ModeMetal:
		u.gpus = o.GPUs
		if u.gpus == 0 {
			u.gpus = hostGPUs
		}
	case catalog.ModeMIG:
		p := m.Profile(o.MIGProfile)
		if p == nil {
			return unit{}, fmt.Sprintf("%s has no MIG profile %s", m.Name, o.MIGProfile)
		}
		u.perMiB, u.what = p.MemoryMiB, "MIG "+p.Name+" slice of "+m.Name
	case catalog.ModeShared:
		u.perMiB, u.what = o.ShareMemoryMiB, "time-sliced share of "+m.Name
	case catalog.ModePartition:
		p := m.ComputePartitionNamed(o.Partition)
		if p == nil {
			return unit{}, fmt.Sprintf("%s has no compute partition %s", m.Name, o.Partition)
		}
		u.perMiB, u.what = p.MemoryMiB, p.Name+" partition of "+m.Name
	case catalog.ModeVF:
		if o.VFs < 1 {
			return unit{}, fmt.Sprintf("%s: %d VFs", o.Name, o.VFs)
		}
		u.perMiB, u.what = m.MemoryMiB/int64(o.VFs), fmt.Sprintf("VF (1 of %d) of %s", o.VFs, m.Name)
	}
	u.rdma = rdmaClass(o, m)
	return u, ""
}

// rdmaClass reports whether the offering is InfiniBand/RoCE class: a
// whole NVLink (or AMD xGMI) host (metal, or all of its 8 GPUs). The catalog does not
// record host networking, so the advisor takes the HGX-class hosts, which
// ship with one InfiniBand or RoCE NIC per GPU, as the ones that have it.
func rdmaClass(o *catalog.Offering, m *catalog.Model) bool {
	if m.LinkGBps() == 0 {
		return false
	}
	return o.Mode == catalog.ModeMetal || o.Mode == catalog.ModeGPU && o.GPUs >= hostGPUs
}

// fitOffering checks the compute density and network topology of o for
// the workload. It returns the fit, or the dimension and reason that
// exclude the offering.
func fitOffering(w *Workload, need *Need, cat *catalog.Catalog, o *catalog.Offering) (*fit, Dimension, string) {
	u, why := unitOf(cat, o)
	if why != "" {
		return nil, DimCompute, why
	}
	f := &fit{o: o, u: u, split: 1}

	// Compute density: precision first, it is the shortest reason.
	f.support = SupportOf(u.arch, w.Precision)
	if f.support == Unsupported {
		return nil, DimCompute, supportWhy(u.arch, w.Precision, f.support)
	}

	// Network topology across nodes.
	if w.Nodes > 1 && !u.rdma {
		return nil, DimNetwork, fmt.Sprintf("a job across %d nodes needs an InfiniBand/RoCE-class offering "+
			"(a whole %d-GPU NVLink host); %s is %s", w.Nodes, hostGPUs, o.Name, describe(o, u))
	}

	// Memory.
	per := need.PerNodeMiB
	if need.Large && u.perMiB < LargeModelMiB {
		return nil, DimCompute, fmt.Sprintf("a model that needs %s (32 GiB or more, as large Transformers do) needs GPUs "+
			"of at least 32 GiB (A100 40GB class); %s has %s", GiBString(need.MemoryMiB), u.what, GiBString(u.perMiB))
	}
	if per > u.perMiB {
		f.split = int(ceilDiv(per, u.perMiB))
		switch {
		case f.split > u.gpus:
			return nil, DimCompute, fmt.Sprintf("needs %s%s; %s has %s", GiBString(per), perNode(w),
				o.Name, capacity(u))
		case u.perMiB < LargeModelMiB:
			return nil, DimCompute, fmt.Sprintf("needs %s%s, more than one %s (%s); a model is split across GPUs "+
				"only of 32 GiB or more", GiBString(per), perNode(w), u.what, GiBString(u.perMiB))
		case w.Task == Training && u.model.LinkGBps() == 0:
			return nil, DimNetwork, fmt.Sprintf("training split across %d GPUs needs NVLink; %s is PCIe only", f.split, u.model.Name)
		}
	}

	// Local scratch: the instance store, per node.
	if w.ScratchGiB > 0 {
		if int64(o.InstanceStoreGiB) < w.ScratchGiB {
			store := "no instance store"
			if o.InstanceStoreGiB > 0 {
				store = fmt.Sprintf("an instance store of %d GiB", o.InstanceStoreGiB)
			}
			return nil, DimStorage, fmt.Sprintf("needs %d GiB of local scratch%s; %s has %s (a volume is network storage, not local)",
				w.ScratchGiB, perNode(w), o.Name, store)
		}
		f.scratch = fmt.Sprintf("local scratch fits: needs %d GiB%s, the instance store at /scratch has %d GiB (wiped at stop)",
			w.ScratchGiB, perNode(w), o.InstanceStoreGiB)
	}

	// The reasons of a fit.
	if f.split == 1 {
		f.compute = append(f.compute, fmt.Sprintf("memory fits: needs %s%s, one %s has %s", GiBString(per), perNode(w),
			u.what, GiBString(u.perMiB)))
	} else {
		f.compute = append(f.compute, fmt.Sprintf("memory fits: needs %s%s, split over %d of %s",
			GiBString(per), perNode(w), f.split, capacity(u)))
	}
	f.compute = append(f.compute, supportWhy(u.arch, w.Precision, f.support))
	if idle := u.gpus - f.split; idle > 0 {
		f.compute = append(f.compute, fmt.Sprintf("%d of its %d GPUs are beyond what the model needs (data-parallel replicas could use them)",
			idle, u.gpus))
	}
	switch {
	case f.split == 1 && o.Mode == catalog.ModeMIG:
		f.network = append(f.network, "one MIG slice: hardware-isolated, no interconnect needed")
	case f.split == 1 && o.Mode == catalog.ModeShared:
		f.network = append(f.network, "a time-sliced share of one GPU: no interconnect needed")
	case f.split == 1 && (o.Mode == catalog.ModePartition || o.Mode == catalog.ModeVF):
		f.network = append(f.network, "one logical GPU, hardware-isolated: no interconnect needed")
	case f.split == 1:
		f.network = append(f.network, "the model fits one GPU: no interconnect needed")
	case u.model.LinkGBps() > 0:
		f.network = append(f.network, fmt.Sprintf("split over %d GPUs on %s (%d GB/s per GPU)", f.split, u.model.LinkName(), u.model.LinkGBps()))
	default:
		f.network = append(f.network, fmt.Sprintf("split over %d GPUs over PCIe: tensor-parallel inference works, slower than on NVLink", f.split))
	}
	if w.Nodes > 1 {
		f.network = append(f.network, fmt.Sprintf("%d nodes of whole %d-GPU %s hosts (HGX class: InfiniBand/RoCE, one NIC per GPU, assumed; "+
			"the catalog does not record the interconnect)", w.Nodes, hostGPUs, u.model.LinkName()))
	}
	return f, "", ""
}

// perNode is " per node" for a multi-node job, "" otherwise.
func perNode(w *Workload) string {
	if w.Nodes > 1 {
		return " per node"
	}
	return ""
}

// capacity prints a unit's memory: "2 × 80 GiB H100-80GB-SXM (160 GiB)".
func capacity(u unit) string {
	if u.gpus == 1 {
		return "one " + u.what + " (" + GiBString(u.perMiB) + ")"
	}
	return fmt.Sprintf("%d × %s %s (%s)", u.gpus, GiBString(u.perMiB), u.what, GiBString(u.perMiB*int64(u.gpus)))
}

// describe says what an offering rents, for a network reason.
func describe(o *catalog.Offering, u unit) string {
	switch {
	case o.Mode == catalog.ModeMIG:
		return "a MIG slice"
	case o.Mode == catalog.ModeShared:
		return "a GPU share"
	case o.Mode == catalog.ModePartition || o.Mode == catalog.ModeVF:
		return "one logical GPU"
	case u.model.LinkGBps() == 0:
		return fmt.Sprintf("%d PCIe %s", u.gpus, gpuWord(u.gpus))
	}
	return fmt.Sprintf("%d of a host's %d GPUs", u.gpus, hostGPUs)
}

func gpuWord(n int) string {
	if n == 1 {
		return "GPU"
	}
	return "GPUs"
}
