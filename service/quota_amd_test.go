package service

import (
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
)

// An AMD partition or VF holds one over its GPU's logical GPUs against the
// GPU quota, as a MIG slice holds its share of 7.
func TestGPUDemandAMD(t *testing.T) {
	cat := catalog.Default()
	for _, c := range []struct {
		offering string
		model    string
		gpus     float64
	}{
		{"mi300x.1x", "MI300X", 1},
		{"mi300x.metal", "MI300X", 8},
		{"mi300x.dpx", "MI300X", 0.5},
		{"mi300x.qpx", "MI300X", 0.25},
		{"mi300x.cpx", "MI300X", 0.125},
		{"mi300x.vf8", "MI300X", 0.125},
		{"mi325x.cpx", "MI325X", 0.125},
		{"h100.1x", "H100-80GB-SXM", 1},
	} {
		o, err := cat.Offering(c.offering)
		if err != nil {
			t.Fatal(err)
		}
		if m, g := GPUDemand(cat, o); m != c.model || g != c.gpus {
			t.Errorf("GPUDemand(%s) = %s, %v; want %s, %v", c.offering, m, g, c.model, c.gpus)
		}
	}
}
