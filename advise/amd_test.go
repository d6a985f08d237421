package advise

import (
	"strings"
	"testing"
)

// 70B parameters in bf16 are 140 GB of weights: one MI300X (192 GB) holds
// them, one H100 (80 GB) does not (two do, on NVLink); AMD's offerings
// rank beside NVIDIA's.
func TestAMDFitsWhereH100DoesNot(t *testing.T) {
	m, cat := listMarket(t)
	a := mustAdvise(t, inference(70_000_000_000, BF16), m, cat)
	if a.Need.MemoryMiB < 140_000_000_000>>20 {
		t.Fatalf("70B bf16 needs %d MiB, less than its weights", a.Need.MemoryMiB)
	}
	// The cheapest way is one MI300X ($1.99/h) rather than two H100s.
	if len(a.Options) == 0 || a.Options[0].Offering != "mi300x.1x" {
		t.Errorf("first option %+v, want mi300x.1x", a.Options[:min(1, len(a.Options))])
	}
	for _, c := range []struct {
		offering string
		fits     bool
		split    int    // GPUs the model spreads over, when it fits
		why      string // what the exclusion or the reasons say
	}{
		{"mi300x.1x", true, 1, "one MI300X has 192 GiB"},
		{"mi325x.1x", true, 1, "one MI325X has 256 GiB"},
		{"h200.1x", false, 0, "H200-141GB"},
		{"h100.1x", false, 0, "H100-80GB-SXM"},
		{"h100.2x", true, 2, "split over 2 GPUs on NVLink"},
		{"h100.4x", true, 2, "2 of its 4 GPUs are beyond"},
		{"mi300x.2x", true, 1, "1 of its 2 GPUs are beyond"},
		{"mi300x.cpx", false, 0, "CPX partition of MI300X"},
		{"mi300x.vf8", false, 0, "VF (1 of 8) of MI300X"},
	} {
		var opt *Option
		for i := range a.Options {
			if a.Options[i].Offering == c.offering && opt == nil {
				opt = &a.Options[i]
			}
		}
		ex := excluded(a, c.offering)
		if !c.fits {
			if opt != nil || ex == nil || ex.Dimension != DimCompute || !strings.Contains(ex.Reason, c.why) {
				t.Errorf("%s: option %v, exclusion %+v; want excluded for memory naming %q", c.offering, opt, ex, c.why)
			}
			continue
		}
		if opt == nil {
			t.Errorf("%s: not an option (%+v)", c.offering, ex)
			continue
		}
		text := ""
		for _, r := range opt.Reasons {
			text += r.Text + "\n"
		}
		if opt.Split != c.split || !strings.Contains(text, c.why) {
			t.Errorf("%s: split %d, reasons\n%s; want split %d naming %q", c.offering, opt.Split, text, c.split, c.why)
		}
	}
}
