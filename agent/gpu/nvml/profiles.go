//go:build cgo

package nvml

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/catalog"
)

// ProfileCheck compares one GPU instance profile as NVML describes it with
// the catalog's row for the same ID. The catalog is the ground truth for
// placement, so a difference means the catalog needs a look on that GPU;
// nvmlprobe prints these to check the table on new hardware.
type ProfileCheck struct {
	// Index is the NVML_GPU_INSTANCE_PROFILE_* index NVML answered for; -1
	// for a catalog profile NVML did not report.
	Index int `json:"nvml_index"`
	// ID is the profile ID nvidia-smi prints.
	ID int `json:"id"`
	// Name is the catalog's name for the ID; empty when the catalog lacks it.
	Name string `json:"name,omitempty"`
	// SliceCount, InstanceCount and MemoryMiB are NVML's (its MemorySizeMB
	// is in MiB).
	SliceCount    int   `json:"slice_count"`
	InstanceCount int   `json:"instance_count"`
	MemoryMiB     int64 `json:"memory_mib"`
	// Placements are NVML's possible placements, in memory slots.
	Placements []Placement `json:"placements,omitempty"`
	// Differences says where NVML disagrees with the catalog.
	Differences []string `json:"differences,omitempty"`
}

// Placement is a start slot and a size, in memory slots.
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// CheckProfiles reads GPU i's GPU instance profiles and their possible
// placements from NVML and compares them with the catalog. It changes
// nothing. NVML may describe profiles only while the GPU is in MIG mode; a
// GPU it describes none for is ErrNotSupported.
func (d *Driver) CheckProfiles(ctx context.Context, i int) ([]ProfileCheck, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	dev, err := d.device(i)
	if err != nil {
		return nil, err
	}
	model, err := d.modelOf(i, dev)
	if err != nil {
		return nil, err
	}
	var out []ProfileCheck
	seen := map[int]bool{}
	for p := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := dev.GetGpuInstanceProfileInfo(p)
		if ret == nvml.ERROR_INVALID_ARGUMENT || noAnswer(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("gpu %d: read MIG profile index %d", i, p), ret)
		}
		c := ProfileCheck{
			Index: p, ID: int(info.Id), SliceCount: int(info.SliceCount),
			InstanceCount: int(info.InstanceCount), MemoryMiB: int64(info.MemorySizeMB),
		}
		placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
		switch {
		case ret == nvml.SUCCESS:
			for _, pl := range placements {
				c.Placements = append(c.Placements, Placement{Start: int(pl.Start), Size: int(pl.Size)})
			}
			sort.Slice(c.Placements, func(a, b int) bool { return c.Placements[a].Start < c.Placements[b].Start })
		case !noAnswer(ret):
			return nil, nvmlError(fmt.Sprintf("gpu %d: read placements of MIG profile id %d", i, info.Id), ret)
		}
		cp := model.ProfileByID(c.ID)
		if cp != nil {
			c.Name = cp.Name
		}
		c.Differences = differences(c, cp, ret == nvml.SUCCESS)
		seen[c.ID] = true
		out = append(out, c)
	}
	if len(out) == 0 {
		on, _ := migEnabled(i, dev)
		return nil, fmt.Errorf("gpu %d: NVML describes no MIG profiles (MIG mode %s): %w", i, onOff(on), gpu.ErrNotSupported)
	}
	for _, cp := range model.MIGProfiles {
		if !seen[cp.ID] {
			out = append(out, ProfileCheck{Index: -1, ID: cp.ID, Name: cp.Name, Differences: []string{"NVML does not report this profile"}})
		}
	}
	return out, nil
}

// differences compares NVML's description of a profile with the catalog's
// row: compute slices, instance limit, and the start slots and sizes of the
// possible placements (when NVML gave them).
func differences(c ProfileCheck, cp *catalog.MIGProfile, havePlacements bool) []string {
	if cp == nil {
		return []string{"the catalog has no profile with this ID"}
	}
	var diff []string
	if c.SliceCount != cp.ComputeSlices {
		diff = append(diff, fmt.Sprintf("NVML: %d compute slices, catalog: %d", c.SliceCount, cp.ComputeSlices))
	}
	if c.InstanceCount != cp.MaxPerGPU {
		diff = append(diff, fmt.Sprintf("NVML: at most %d per GPU, catalog: %d", c.InstanceCount, cp.MaxPerGPU))
	}
	if !havePlacements {
		return diff
	}
	var starts []int
	for _, pl := range c.Placements {
		starts = append(starts, pl.Start)
		if pl.Size != cp.MemorySlots {
			diff = append(diff, fmt.Sprintf("NVML: placement at slot %d is %d slots, catalog: %d", pl.Start, pl.Size, cp.MemorySlots))
		}
	}
	if !slices.Equal(starts, cp.Starts) {
		diff = append(diff, fmt.Sprintf("NVML: start slots %v, catalog: %v", starts, cp.Starts))
	}
	return diff
}
