package fleet

import (
	"fmt"
	"strings"

	"github.com/gpucloud/gpucloud/catalog"
)

// MaxParts is the most devices one GPU is split into (an MI300X in CPX:
// 8); PartsUsed has a bit for each.
const MaxParts = 16

// resolveMode checks the GPU's operator-set AMD mode against its model m
// and writes it in canonical spelling with the device count it gives
// (Parts). A GPU of a partitioned model that does not say is in SPX with
// its first memory mode. Without a catalog (m nil) the names are taken as
// given and counted by the MI300X table (DPX 2, QPX 4, CPX 8). The error
// is a *catalog.ModeError naming the field.
func (g *GPU) resolveMode(m *catalog.Model) error {
	if m == nil {
		if g.Partition == "" && g.VFs == 0 || g.Parts > 0 {
			// Nothing to resolve, or resolved before (a copy of a
			// fleet's host).
			return g.checkParts()
		}
		g.Partition = strings.ToUpper(g.Partition)
		g.MemoryPartition = strings.ToUpper(g.MemoryPartition)
		g.Parts = defaultParts[g.Partition]
		if g.Parts == 0 {
			return &catalog.ModeError{Model: g.Model, Field: "partition", Message: fmt.Sprintf("unknown compute partition %q", g.Partition)}
		}
		if g.VFs > 0 {
			g.Parts = g.VFs
		}
		return g.checkParts()
	}
	mode, cp, err := m.ResolveMode(catalog.GPUMode{Partition: g.Partition, MemoryPartition: g.MemoryPartition, VFs: g.VFs})
	if err != nil {
		return err
	}
	g.Partition, g.MemoryPartition, g.VFs = mode.Partition, mode.MemoryPartition, mode.VFs
	g.Parts = 0
	if cp != nil {
		g.Parts = mode.Slots(cp)
	}
	return g.checkParts()
}

func (g *GPU) checkParts() error {
	if g.Parts > MaxParts {
		return &catalog.ModeError{Model: g.Model, Field: "vfs", Message: fmt.Sprintf("%d devices, at most %d", g.Parts, MaxParts)}
	}
	if g.Split() && g.MIG {
		return &catalog.ModeError{Model: g.Model, Field: "partition", Message: "a partitioned GPU cannot be in MIG mode"}
	}
	return nil
}

// defaultParts counts logical GPUs by compute partition name when no
// catalog is at hand.
var defaultParts = map[string]int{"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}

// checkPart reports why device d (a partition or a VF) does not fit g.
func checkPart(g *GPU, d Device) error {
	switch {
	case d.Kind == Partition && (g.VFs > 0 || g.Parts < 2 || g.Partition != d.Partition):
		return fmt.Errorf("gpu is not in compute partition mode %s (it is in %s)", d.Partition, g.modeString())
	case d.Kind == VF && (g.VFs == 0 || d.Parts != g.VFs):
		return fmt.Errorf("gpu is not exposed as %d VFs (it is in %s)", d.Parts, g.modeString())
	case d.Parts != g.Parts:
		return fmt.Errorf("device of a GPU of %d parts, the GPU has %d", d.Parts, g.Parts)
	case d.Part < 0 || d.Part >= g.Parts:
		return fmt.Errorf("no device %d of %d", d.Part, g.Parts)
	case g.PartsUsed&(1<<uint(d.Part)) != 0:
		return fmt.Errorf("device %d is taken", d.Part)
	}
	return nil
}

// modeString prints the GPU's AMD mode: "CPX/NPS4", "CPX/NPS1, 8 VFs",
// or "no partition mode".
func (g *GPU) modeString() string {
	if g.Partition == "" {
		return "no partition mode"
	}
	s := g.Partition
	if g.MemoryPartition != "" {
		s += "/" + g.MemoryPartition
	}
	if g.VFs > 0 {
		s += fmt.Sprintf(", %d VFs", g.VFs)
	}
	return s
}

// ModeString is the GPU's AMD mode as the CLI shows it ("CPX/NPS1"), or
// "" for a GPU without one.
func (g *GPU) ModeString() string {
	if g.Partition == "" {
		return ""
	}
	return g.modeString()
}
