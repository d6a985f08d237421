package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// checkGPUMode checks one reported GPU's AMD mode (compute partition,
// memory partition, VFs) against its model's tables, so that a bad one is
// invalid_argument naming the GPU's field rather than the whole host. The
// operator sets the mode on the host (amd-smi, a fleet file); the server
// only checks it.
func (s *Agents) checkGPUMode(name string, g fleet.GPU) error {
	if g.Partition == "" && g.MemoryPartition == "" && g.VFs == 0 {
		return nil
	}
	m, err := s.cat.Model(g.Model)
	if err != nil {
		return Field(name+".model", "%v", err)
	}
	if _, _, err := m.ResolveMode(catalog.GPUMode{Partition: g.Partition, MemoryPartition: g.MemoryPartition, VFs: g.VFs}); err != nil {
		var me *catalog.ModeError
		if errors.As(err, &me) {
			return Field(name+"."+me.Field, "%s", me.Message)
		}
		return Field(name, "%v", err)
	}
	return nil
}

// checkModeChange refuses an inventory that changes the AMD mode of a GPU
// that instances hold: changing a GPU's partition or VF mode is an operator
// action on a drained GPU (cordon the host, let its instances end, then
// change the mode). The error is a conflict naming the GPU and an
// instance on it; nothing is written.
func checkModeChange(ctx context.Context, tx cloud.Tx, h *cloud.Host, spec *fleet.Host) error {
	changed := map[int]bool{}
	for i := range spec.GPUs {
		if i >= len(h.Spec.GPUs) {
			break
		}
		o, n := &h.Spec.GPUs[i], &spec.GPUs[i]
		if o.Partition != n.Partition || o.MemoryPartition != n.MemoryPartition || o.VFs != n.VFs {
			changed[i] = true
		}
	}
	if len(changed) == 0 {
		return nil
	}
	ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{HostID: h.ID, States: cloud.HoldingStates()})
	if err != nil {
		return err
	}
	for _, in := range ins {
		if in.Placement == nil {
			continue
		}
		for _, d := range in.Placement.Devices {
			if changed[d.GPU] {
				o, n := &h.Spec.GPUs[d.GPU], &spec.GPUs[d.GPU]
				return &cloud.Error{Code: cloud.Conflict,
					Message: fmt.Sprintf("inventory: gpu %d of host %s changes mode from %s to %s while instance %s holds it; drain the GPU first",
						d.GPU, h.ID, modeOf(o), modeOf(n), in.ID),
					Details: map[string]any{"field": fmt.Sprintf("inventory.host.gpus[%d].partition", d.GPU)}}
			}
		}
	}
	return nil
}

func modeOf(g *fleet.GPU) string {
	if s := g.ModeString(); s != "" {
		return s
	}
	return "none"
}
