package controller

import (
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/placement"
)

// RequestFor turns an instance and its offering into a placement request.
// A bare-metal offering asks for no CPU or memory of its own: the host's
// are all taken. The request carries the instance's tenant, which the
// placement records: a GPU share goes only on a GPU whose shares are the
// same tenant's (one CUDA MPS server per GPU); other modes ignore it. An
// instance without a tenant (an availability probe) shares only with
// others without one. The instance's PreferHosts break ties among the
// hosts that fit it equally well.
func RequestFor(in *cloud.Instance, o *catalog.Offering) (*placement.Request, error) {
	r := &placement.Request{
		ID:        in.ID,
		Tenant:    in.TenantID,
		Mode:      o.Mode,
		GPUs:      o.GPUs,
		CPUMilli:  int64(o.VCPUs) * 1000,
		MemoryMiB: o.MemoryMiB,
		Zones:     in.Zones,
		Prefer:    in.PreferHosts,
	}
	if o.Model != "" {
		r.Models = []string{o.Model}
	}
	switch o.Mode {
	case catalog.ModeMetal:
		r.CPUMilli, r.MemoryMiB = 0, 0
	case catalog.ModeMIG:
		r.GPUs, r.MIGProfile = 0, o.MIGProfile
	case catalog.ModeShared:
		r.GPUs, r.ShareMilli, r.ShareMemoryMiB = 0, o.ShareMilli, o.ShareMemoryMiB
	case catalog.ModePartition:
		r.GPUs, r.Partition, r.MemoryPartition = 0, o.Partition, o.MemoryPartition
	case catalog.ModeVF:
		r.GPUs, r.VFs = 0, o.VFs
	case catalog.ModeCPU:
		r.GPUs = 0
	}
	for _, l := range in.Labels {
		sel, err := placement.ParseLabelSelector(l)
		if err != nil {
			return nil, cloud.Errorf(cloud.Invalid, "instance %s: %v", in.ID, err)
		}
		r.Labels = append(r.Labels, sel)
	}
	if in.Image != "" {
		r.Labels = append(r.Labels, NeedsContainers)
	}
	return r, nil
}

// NeedsContainers is the selector every instance that names an image
// places with: never on a host whose agent runs workloads as plain
// processes (its "runtime" label, runtime.LabelRuntime), which would
// ignore the image. A host that does not say (an older agent) may run it.
var NeedsContainers = placement.LabelSelector{Key: "runtime", Op: "!=", Value: "process"}

// NeedsSharedVolumes is the selector an instance with a shared volume
// places with: only on a host whose agent mounts the operator's shared
// filesystem (--shared-volume-dir), which reports the label
// service.LabelSharedVolumes.
var NeedsSharedVolumes = placement.LabelSelector{Key: "shared-volumes", Op: "exists"}
