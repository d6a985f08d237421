package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/fleet"
)

// The GPU side of an instance: its MIG layout and its GPU share.

// applyPartition makes the placement's MIG instances exist: MIG mode on
// where the placement asks for it, then each instance at its start slot.
// Instances that exist already are used as they are.
func (a *Agent) applyPartition(ctx context.Context, pl *fleet.Placement) error {
	var migs []fleet.Device
	for _, d := range pl.Devices {
		if d.Kind == fleet.MIGSlice {
			migs = append(migs, d)
		}
	}
	if len(migs) == 0 {
		return nil
	}
	inv, err := a.inventory(ctx)
	if err != nil {
		return fmt.Errorf("read inventory: %w", err)
	}
	for _, d := range migs {
		g := gpuOf(inv, d.GPU)
		if g == nil {
			return &startError{fmt.Sprintf("the host has no gpu %d", d.GPU)}
		}
		if a.cfg.ManageMIG && d.EnableMIG {
			a.setMIGAuto(d.GPU, true)
		}
		if hasInstance(g, d.MIGProfileID, d.MIGStart) {
			continue
		}
		label := profileLabel(d)
		if !a.cfg.ManageMIG {
			return &startError{fmt.Sprintf("gpu %d has no MIG instance %s at slot %d, and this agent does not manage MIG layouts: create the instance or let the agent manage MIG", d.GPU, label, d.MIGStart)}
		}
		if !g.MIG {
			if !d.EnableMIG {
				// The scheduler placed this slice on a GPU it believed to
				// be in MIG mode; the agent may since have switched the
				// mode off because the GPU emptied (migAuto), and the
				// inventory saying so may not have reached the server
				// yet. The placement needs MIG mode: switch it back on.
				a.log.Info("enabling MIG mode the placement assumes", "gpu", d.GPU, "instance", d.UUID)
				a.setMIGAuto(d.GPU, true)
			}
			dctx, cancel := a.driverCtx(ctx)
			err := a.cfg.Driver.SetMIGMode(dctx, d.GPU, true)
			cancel()
			if err != nil {
				return fmt.Errorf("enable MIG mode on gpu %d: %w", d.GPU, err)
			}
			g.MIG = true
		}
		dctx, cancel := a.driverCtx(ctx)
		_, err := a.cfg.Driver.CreateMIG(dctx, d.GPU, d.MIGProfileID, d.MIGStart)
		cancel()
		if err != nil {
			return fmt.Errorf("create MIG instance %s at slot %d on gpu %d: %w", label, d.MIGStart, d.GPU, err)
		}
	}
	return nil
}

// releasePartition destroys the placement's MIG instances (only those of
// its profile at its slots, and not one another listed placement holds),
// and turns MIG mode off on a GPU the agent turned it on for once no
// instance is left there. Without ManageMIG it changes nothing.
func (a *Agent) releasePartition(ctx context.Context, p *pass, s *inst) error {
	pl := s.a.Placement
	if !a.cfg.ManageMIG || pl == nil {
		return nil
	}
	var migs []fleet.Device
	for _, d := range pl.Devices {
		if d.Kind == fleet.MIGSlice {
			migs = append(migs, d)
		}
	}
	if len(migs) == 0 {
		return nil
	}
	inv, err := a.inventory(ctx)
	if err != nil {
		return fmt.Errorf("read inventory: %w", err)
	}
	var errs []error
	left := map[int]int{} // instances left per GPU
	for _, d := range migs {
		g := gpuOf(inv, d.GPU)
		if g == nil {
			continue
		}
		if _, ok := left[d.GPU]; !ok {
			left[d.GPU] = len(g.Instances)
		}
		if owner := p.migOwner[[2]int{d.GPU, d.MIGStart}]; owner != "" && owner != s.id {
			continue // the slot is another instance's now
		}
		if !hasInstance(g, d.MIGProfileID, d.MIGStart) {
			continue
		}
		dctx, cancel := a.driverCtx(ctx)
		err := a.cfg.Driver.DestroyMIG(dctx, d.GPU, d.MIGStart)
		cancel()
		if err != nil && !errors.Is(err, gpu.ErrNotFound) {
			errs = append(errs, fmt.Errorf("destroy MIG instance %s at slot %d on gpu %d: %w", profileLabel(d), d.MIGStart, d.GPU, err))
			continue
		}
		left[d.GPU]--
	}
	for _, gi := range slices.Sorted(maps.Keys(left)) {
		if !a.migAuto[gi] || left[gi] > 0 || a.othersHold(p, gi, s.id) {
			continue
		}
		dctx, cancel := a.driverCtx(ctx)
		err := a.cfg.Driver.SetMIGMode(dctx, gi, false)
		cancel()
		switch {
		case errors.Is(err, gpu.ErrBusy):
			// Something outside the agent uses the GPU; leave MIG on.
			a.log.Warn("agent: MIG mode left on", "gpu", gi, "err", err)
		case err != nil:
			errs = append(errs, fmt.Errorf("disable MIG mode on gpu %d: %w", gi, err))
			continue
		}
		a.setMIGAuto(gi, false)
	}
	return errors.Join(errs...)
}

// migAutoFile keeps Agent.migAuto in the data directory, so that an agent
// restarted while a GPU it switched into MIG mode holds slices still
// switches it back when they go: a JSON list of GPU indices.
const migAutoFile = "mig-auto.json"

// setMIGAuto marks GPU g as one the agent switched into MIG mode (or
// not), and keeps the set in the data directory.
func (a *Agent) setMIGAuto(g int, on bool) {
	if a.migAuto[g] == on {
		return
	}
	if on {
		a.migAuto[g] = true
	} else {
		delete(a.migAuto, g)
	}
	if a.cfg.DataDir == "" {
		return
	}
	b, _ := json.Marshal(slices.Sorted(maps.Keys(a.migAuto)))
	if err := WriteSecret(filepath.Join(a.cfg.DataDir, migAutoFile), b); err != nil {
		a.log.Warn("agent: keeping the GPUs it switched into MIG mode failed; after a restart it leaves them in MIG mode", "err", err)
	}
}

// loadMIGAuto reads the set setMIGAuto kept in dir (none: empty).
func loadMIGAuto(dir string, log *slog.Logger) map[int]bool {
	out := map[int]bool{}
	if dir == "" {
		return out
	}
	b, err := os.ReadFile(filepath.Join(dir, migAutoFile))
	if errors.Is(err, os.ErrNotExist) {
		return out
	}
	var gpus []int
	if err == nil {
		err = json.Unmarshal(b, &gpus)
	}
	if err != nil {
		log.Warn("agent: the GPUs it switched into MIG mode are unknown; it leaves them in MIG mode", "file", migAutoFile, "err", err)
		return out
	}
	for _, g := range gpus {
		out[g] = true
	}
	return out
}

// othersHold reports whether a listed instance other than id may still
// hold or need GPU g: one the agent has not cleaned up. A listed one that
// it has (stopped, its slices destroyed, its record not yet gone from the
// assignments) holds nothing: without this, two slices of one GPU that
// stop together each left MIG mode to the other, and it stayed on.
func (a *Agent) othersHold(p *pass, g int, id string) bool {
	return slices.ContainsFunc(p.gpuUsers[g], func(o string) bool {
		if o == id {
			return false
		}
		s := a.insts[o]
		return s == nil || !s.cleaned
	})
}

// share sets the spec's GPU share from the placement's shared device.
func share(pl *fleet.Placement, spec *runtime.Spec) error {
	n := 0
	for _, d := range pl.Devices {
		if d.Kind == fleet.Share {
			n++
			spec.ShareMilli, spec.ShareMemoryMiB = d.Milli, d.MemoryMiB
		}
	}
	if n > 1 {
		return &startError{fmt.Sprintf("the placement has %d shared devices; a workload holds at most one share", n)}
	}
	return nil
}

func gpuOf(inv *agentapi.Inventory, index int) *fleet.GPU {
	for i := range inv.Host.GPUs {
		if inv.Host.GPUs[i].Index == index {
			return &inv.Host.GPUs[i]
		}
	}
	return nil
}

func hasInstance(g *fleet.GPU, profileID, start int) bool {
	return slices.ContainsFunc(g.Instances, func(in fleet.MIGInstance) bool {
		return in.ProfileID == profileID && in.Start == start
	})
}

func profileLabel(d fleet.Device) string {
	if d.MIGProfile != "" {
		return d.MIGProfile
	}
	return fmt.Sprintf("profile %d", d.MIGProfileID)
}
