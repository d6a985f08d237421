package advise

import (
	"slices"
	"strings"
)

// Arch is a GPU architecture (NVIDIA's, and AMD's CDNA 3): what a model's
// Tensor Cores (AMD: Matrix Cores) can do is a property of its
// architecture, which the catalog does not record.
type Arch string

const (
	Pascal    Arch = "Pascal"
	Volta     Arch = "Volta"
	Turing    Arch = "Turing"
	Ampere    Arch = "Ampere"
	Ada       Arch = "Ada Lovelace"
	Hopper    Arch = "Hopper"
	Blackwell Arch = "Blackwell"
	// CDNA3 is AMD Instinct MI300X and MI325X.
	CDNA3 Arch = "CDNA 3"
	// UnknownArch is a model the table does not know (the Alibaba
	// trace's G1–G3, an operator's own): its precision support is not
	// checked, and the reasons say so.
	UnknownArch Arch = ""
)

// archPrefixes maps a model name's lower-cased prefix to its
// architecture, longest prefix first, so that an operator's catalog
// model ("A40", "H100-NVL", "L40") is recognised as well as the built-in
// ones. Sources: NVIDIA's data sheets of each part.
var archPrefixes = []struct {
	prefix string
	arch   Arch
}{
	{"rtx-6000-ada", Ada}, {"rtx-4000-ada", Ada}, {"rtx-5000-ada", Ada},
	{"gb200", Blackwell}, {"b200", Blackwell}, {"b100", Blackwell},
	{"gh200", Hopper}, {"h200", Hopper}, {"h100", Hopper}, {"h800", Hopper}, {"h20", Hopper},
	{"l40s", Ada}, {"l40", Ada}, {"l4", Ada},
	{"a100", Ampere}, {"a800", Ampere}, {"a40", Ampere}, {"a30", Ampere}, {"a16", Ampere}, {"a10", Ampere}, {"a2", Ampere},
	{"t4", Turing},
	{"v100", Volta},
	{"p100", Pascal}, {"p40", Pascal}, {"p4", Pascal},
	// AMD's data sheets: MI300X and MI325X are CDNA 3.
	{"mi300x", CDNA3}, {"mi325x", CDNA3}, {"instinct-mi300x", CDNA3}, {"instinct-mi325x", CDNA3},
}

// ArchOf returns the architecture of a GPU model by its canonical name
// (or an alias), UnknownArch when the table does not know it.
func ArchOf(model string) Arch {
	m := strings.ToLower(model)
	for _, p := range archPrefixes {
		if strings.HasPrefix(m, p.prefix) {
			return p.arch
		}
	}
	return UnknownArch
}

// Support is how a GPU handles a precision.
type Support int

const (
	// Unsupported: the hardware has no such number format (bf16 before
	// Ampere, fp8 before Ada and Hopper); the offering is excluded.
	Unsupported Support = iota
	// Runs: the work runs, but not on Tensor Cores of that format
	// (fp16 on Pascal, tf32 requested on Turing runs as fp32, int4
	// weights on Hopper are dequantized to fp16/bf16). It is allowed;
	// the reasons say what it costs in speed.
	Runs
	// Native: Tensor Cores of that format (or, for fp32, CUDA cores,
	// which is what fp32 always uses).
	Native
	// UnknownSupport: the architecture is unknown.
	UnknownSupport
)

// support is the table. Each architecture lists the precisions its Tensor
// Cores run natively and those that run without them; the rest are
// unsupported. fp32 runs natively everywhere (CUDA cores).
var support = map[Arch]struct{ native, runs []Precision }{
	// Pascal: no Tensor Cores; P100 has fast fp16 on CUDA cores; int8
	// and int4 weights run dequantized.
	Pascal: {native: []Precision{FP32}, runs: []Precision{FP16, INT8, INT4}},
	// Volta: first Tensor Cores, fp16 only; no bf16, no tf32.
	Volta: {native: []Precision{FP32, FP16}, runs: []Precision{TF32, INT8, INT4}},
	// Turing: fp16, int8 and int4 Tensor Cores; no bf16, no tf32.
	Turing: {native: []Precision{FP32, FP16, INT8, INT4}, runs: []Precision{TF32}},
	// Ampere: adds tf32 and bf16.
	Ampere: {native: []Precision{FP32, TF32, BF16, FP16, INT8, INT4}},
	// Ada Lovelace: adds fp8 (4th-generation Tensor Cores).
	Ada: {native: []Precision{FP32, TF32, BF16, FP16, FP8, INT8, INT4}},
	// Hopper: fp8 with the Transformer Engine; its Tensor Cores dropped
	// int4, so int4 weights run through fp16/bf16 kernels.
	Hopper:    {native: []Precision{FP32, TF32, BF16, FP16, FP8, INT8}, runs: []Precision{INT4}},
	Blackwell: {native: []Precision{FP32, TF32, BF16, FP16, FP8, INT8}, runs: []Precision{INT4}},
	// CDNA 3: Matrix Cores run tf32, bf16, fp16, fp8 and int8 (AMD's
	// MI300X data sheet); no int4, so int4 weights are dequantized.
	CDNA3: {native: []Precision{FP32, TF32, BF16, FP16, FP8, INT8}, runs: []Precision{INT4}},
}

// cores names an architecture's matrix units and its plain ones, for the
// reasons: NVIDIA's Tensor Cores and CUDA cores, AMD's Matrix Cores and
// stream processors.
func cores(a Arch) (matrix, plain string) {
	if a == CDNA3 {
		return "Matrix Cores", "stream processors"
	}
	return "Tensor Cores", "CUDA cores"
}

// SupportOf says how an architecture handles a precision.
func SupportOf(a Arch, p Precision) Support {
	s, ok := support[a]
	switch {
	case !ok:
		return UnknownSupport
	case slices.Contains(s.native, p):
		return Native
	case slices.Contains(s.runs, p):
		return Runs
	}
	return Unsupported
}

// supportWhy words a precision's support on an architecture for the
// reasons.
func supportWhy(a Arch, p Precision, s Support) string {
	switch s {
	case Native:
		matrix, plain := cores(a)
		if p == FP32 {
			return "fp32 runs on " + plain + " (tf32 or bf16 would use " + matrix + " where the GPU has them)"
		}
		return string(p) + " on " + string(a) + " " + matrix
	case Runs:
		switch {
		case p == INT4 && a == CDNA3:
			return string(a) + " Matrix Cores have no int4: int4 weights are dequantized to fp16/bf16"
		case p == TF32:
			return string(a) + " has no TF32: it runs as fp32 on CUDA cores"
		case p == FP16:
			return string(a) + " has no Tensor Cores: fp16 runs on CUDA cores"
		case p == INT4 && (a == Hopper || a == Blackwell):
			return string(a) + " Tensor Cores have no int4: int4 weights are dequantized to fp16/bf16"
		}
		return string(a) + " has no " + string(p) + " Tensor Cores: " + string(p) + " weights are dequantized to fp16"
	case UnknownSupport:
		return "the GPU's architecture is unknown to the advisor: check " + string(p) + " support yourself"
	}
	switch p {
	case BF16:
		return "bf16 needs Ampere or later; " + string(a) + " has none"
	case FP8:
		return "fp8 needs Ada Lovelace or Hopper; " + string(a) + " has none"
	}
	return string(a) + " does not support " + string(p)
}
