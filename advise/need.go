package advise

import (
	"fmt"
	"strconv"

	"github.com/gpucloud/gpucloud/catalog"
)

// The memory and storage rules of thumb (docs/ADVISE.md gives their
// sources). Sizes are bytes; a GiB is 2³⁰ bytes and catalog sizes are MiB.
const (
	// OverheadPct is what inference adds to the weights for the KV cache
	// and activations, and training to its state for activations and
	// buffers: 20%.
	OverheadPct = 120
	// TrainingBytesPerParam is full training with Adam: in mixed
	// precision 2 (weights) + 2 (gradients) + 4 (fp32 master weights) +
	// 8 (Adam's two moments) = 16 bytes; in fp32 4 + 4 + 8 = 16 too.
	TrainingBytesPerParam = 16
	// CheckpointBytesPerParam is what a training checkpoint keeps: the
	// fp32 weights and Adam's two moments (gradients and the half
	// precision copy are not saved).
	CheckpointBytesPerParam = 12
	// TrainingCheckpointCopies is how many training checkpoints the
	// volume holds: the last good one while the next is written.
	TrainingCheckpointCopies = 2
	// LargeModelMiB is the seed article's line: a Transformer that needs
	// 32 GB or more needs GPUs of at least 32 GB (A100 40GB class);
	// lighter models run on 16 GB. Taken as GiB, as the catalog takes
	// marketing sizes.
	LargeModelMiB = 32 * catalog.GiB
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// Need is what the workload needs, as the advisor estimated it.
type Need struct {
	// MemoryMiB is the GPU memory of the whole job; PerNodeMiB its share
	// on each node (MemoryMiB / Nodes, rounded up).
	MemoryMiB  int64 `json:"memory_mib"`
	PerNodeMiB int64 `json:"per_node_mib"`
	// MemoryRule says how MemoryMiB was found: "7B × 2 bytes (fp16) ×
	// 1.2 for the KV cache and activations".
	MemoryRule string `json:"memory_rule"`
	// Large is MemoryMiB ≥ LargeModelMiB: no GPU under 32 GiB.
	Large bool `json:"large"`
	// CheckpointGiB is the checkpoint volume's size, and CheckpointRule
	// how it was found.
	CheckpointGiB  int64  `json:"checkpoint_gib"`
	CheckpointRule string `json:"checkpoint_rule"`
	// RunSeconds is the running time each node rents (PerDay × Days);
	// HeldSeconds the calendar time (Days × 24 h) that commitments and
	// the volume are held for.
	RunSeconds  int64 `json:"run_seconds"`
	HeldSeconds int64 `json:"held_seconds"`
}

// Estimate applies the rules to a valid workload:
//
//   - inference: params × bytes per weight (fp32/tf32 4, bf16/fp16 2,
//     fp8/int8 1, int4 0.5) × 1.2 for the KV cache and activations;
//   - training: params × 16 bytes (weights, gradients, Adam state) × 1.2
//     for activations and buffers;
//   - a given MemoryMiB wins over both.
//
// The checkpoint volume holds, for inference, the weights once; for
// training two checkpoints of 12 bytes per parameter. Without Params it is
// sized from the memory: the weights are memory / 1.2 (inference), the
// training state memory / 1.2 of which 12/16 is saved.
func Estimate(w *Workload) Need {
	n := Need{RunSeconds: w.RunSeconds(), HeldSeconds: int64(w.Days) * 86400}
	var bytes int64
	switch {
	case w.MemoryMiB > 0:
		n.MemoryMiB = w.MemoryMiB
		n.MemoryRule = "given: " + GiBString(w.MemoryMiB)
	case w.Task == Training:
		bytes = w.Params * TrainingBytesPerParam * OverheadPct / 100
		n.MemoryRule = fmt.Sprintf("%s × %d bytes (weights, gradients, Adam state) × 1.2 for activations",
			FormatParams(w.Params), TrainingBytesPerParam)
	default:
		bytes = w.Params * w.Precision.bytesPerParamTenths() * OverheadPct / 1000
		n.MemoryRule = fmt.Sprintf("%s × %s (%s) × 1.2 for the KV cache and activations",
			FormatParams(w.Params), weightBytes(w.Precision), w.Precision)
	}
	if n.MemoryMiB == 0 {
		n.MemoryMiB = ceilDiv(bytes, mib)
	}
	n.PerNodeMiB = ceilDiv(n.MemoryMiB, int64(max(w.Nodes, 1)))
	n.Large = n.MemoryMiB >= LargeModelMiB

	var ckpt int64 // bytes
	switch {
	case w.Params > 0 && w.Task == Training:
		ckpt = TrainingCheckpointCopies * w.Params * CheckpointBytesPerParam
		n.CheckpointRule = fmt.Sprintf("%d checkpoints of %s × %d bytes (fp32 weights, Adam state)",
			TrainingCheckpointCopies, FormatParams(w.Params), CheckpointBytesPerParam)
	case w.Params > 0:
		ckpt = w.Params * w.Precision.bytesPerParamTenths() / 10
		n.CheckpointRule = fmt.Sprintf("the weights: %s × %s", FormatParams(w.Params), weightBytes(w.Precision))
	case w.Task == Training:
		// state = memory / 1.2; saved = state × 12/16; two copies.
		ckpt = n.MemoryMiB * mib * 100 / OverheadPct * CheckpointBytesPerParam / TrainingBytesPerParam * TrainingCheckpointCopies
		n.CheckpointRule = fmt.Sprintf("%d checkpoints of 3/4 of the training state, the memory / 1.2", TrainingCheckpointCopies)
	default:
		ckpt = n.MemoryMiB * mib * 100 / OverheadPct
		n.CheckpointRule = "the weights: the memory / 1.2"
	}
	n.CheckpointGiB = max(ceilDiv(ckpt, gib), 1)
	return n
}

// weightBytes prints one weight's size: "2 bytes", "0.5 bytes".
func weightBytes(p Precision) string {
	t := p.bytesPerParamTenths()
	if t == 10 {
		return "1 byte"
	}
	return decimal(t, 10, 1) + " bytes"
}

// GiBString prints a size in MiB as GiB with one decimal, rounded up so
// that a need is never understated: 16022 MiB is "15.7 GiB", 16384 MiB
// "16 GiB".
func GiBString(mib int64) string {
	tenths := ceilDiv(mib*10, catalog.GiB)
	if tenths%10 == 0 {
		return strconv.FormatInt(tenths/10, 10) + " GiB"
	}
	return decimal(tenths, 10, 1) + " GiB"
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
