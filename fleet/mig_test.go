package fleet

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
)

func model(t *testing.T, name string) *catalog.Model {
	t.Helper()
	m, err := catalog.Default().Model(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// layout builds existing instances from "id@start" pairs using the model's
// profile table, so that test cases read like nvidia-smi output.
func layout(t *testing.T, m *catalog.Model, specs ...[2]int) []MIGInstance {
	t.Helper()
	var out []MIGInstance
	for _, s := range specs {
		p := m.ProfileByID(s[0])
		if p == nil {
			t.Fatalf("no profile %d", s[0])
		}
		out = append(out, MIGInstance{ProfileID: p.ID, Start: s[1], Slots: p.MemorySlots, Slices: p.ComputeSlices, Media: p.MediaExtensions})
	}
	return out
}

func TestCheckMIG(t *testing.T) {
	h100 := model(t, "H100")
	tests := []struct {
		desc     string
		model    string
		existing [][2]int
		profile  int
		start    int
		wantErr  error
		wantMsg  string
	}{
		{desc: "7g on an empty GPU", profile: 0, start: 0},
		{desc: "3g at slot 4 next to a 4g", existing: [][2]int{{5, 0}}, profile: 9, start: 4},
		{desc: "seventh 1g.10gb fills slots 0-6", existing: [][2]int{{19, 0}, {19, 1}, {19, 2}, {19, 3}, {19, 4}, {19, 5}}, profile: 19, start: 6},
		{desc: "1g.10gb cannot use slot 7", profile: 19, start: 7, wantErr: ErrInvalid, wantMsg: "can start at slot 0, 1, 2, 3, 4, 5 or 6, not 7"},
		{desc: "3g cannot start at slot 2", profile: 9, start: 2, wantErr: ErrInvalid, wantMsg: "3g.40gb (id 9) can start at slot 0 or 4, not 2"},
		{desc: "4g only at slot 0", profile: 5, start: 4, wantErr: ErrInvalid},
		{desc: "unknown profile", profile: 3, start: 0, wantErr: ErrNotSupported, wantMsg: "is not a profile of H100-80GB-SXM"},
		{desc: "model without MIG", model: "L40S", profile: 19, start: 0, wantErr: ErrNotSupported, wantMsg: "L40S has no MIG"},
		{desc: "3g overlaps a 1g in its slots", existing: [][2]int{{19, 5}}, profile: 9, start: 4, wantErr: ErrBusy, wantMsg: "needs slots 4-7, but 1g.10gb (id 19) holds slots 5"},
		{desc: "3g takes 4 slots so the fourth 1g.10gb does not fit", existing: [][2]int{{9, 0}, {19, 4}, {19, 5}, {19, 6}}, profile: 19, start: 3, wantErr: ErrBusy},
		{desc: "second +me instance", existing: [][2]int{{20, 0}}, profile: 20, start: 3, wantErr: ErrBusy, wantMsg: "one +me instance per GPU"},
		{desc: "+me beside plain 1g instances", existing: [][2]int{{19, 0}, {19, 1}}, profile: 20, start: 2},
		{desc: "2g cannot start at slot 6 even with room for it", existing: [][2]int{{14, 0}, {14, 2}}, profile: 14, start: 6, wantErr: ErrInvalid},
		{desc: "second 3g fits beside the first", existing: [][2]int{{9, 0}}, profile: 9, start: 4},
		{desc: "mixed layout from mig-parted all-balanced", existing: [][2]int{{19, 0}, {19, 1}, {14, 2}}, profile: 9, start: 4},
		{desc: "1g.20gb four times fills the GPU", existing: [][2]int{{15, 0}, {15, 2}, {15, 4}}, profile: 15, start: 6},
		{desc: "7g on a GPU with anything", existing: [][2]int{{19, 6}}, profile: 0, start: 0, wantErr: ErrBusy},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			m := h100
			if tt.model != "" {
				m = model(t, tt.model)
			}
			var existing []MIGInstance
			if m.SupportsMIG() {
				existing = layout(t, m, tt.existing...)
			}
			p, err := CheckMIG(m, existing, tt.profile, tt.start)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("CheckMIG: %v", err)
				}
				if p.ID != tt.profile {
					t.Fatalf("profile %d, want %d", p.ID, tt.profile)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("error %q does not say %q", err, tt.wantMsg)
			}
		})
	}
}

// TestCheckMIGAgreesWithFleet fills a GPU with random valid requests and
// checks every accepted layout against the fleet's own invariant checker, so
// that the agent can never build a layout the scheduler would reject.
func TestCheckMIGAgreesWithFleet(t *testing.T) {
	for _, name := range []string{"A100-40GB-SXM", "A100-80GB-SXM", "H100", "H200"} {
		m := model(t, name)
		for seed := 0; seed < 200; seed++ {
			var existing []MIGInstance
			r := uint32(seed*2654435761 + 1)
			for step := 0; step < 12; step++ {
				r = r*1664525 + 1013904223
				p := m.MIGProfiles[int(r>>8)%len(m.MIGProfiles)]
				start := p.Starts[int(r>>16)%len(p.Starts)]
				if _, err := CheckMIG(m, existing, p.ID, start); err != nil {
					if !errors.Is(err, ErrBusy) {
						t.Fatalf("%s seed %d: a table start was rejected as %v", name, seed, err)
					}
					continue
				}
				existing = append(existing, MIGInstance{ProfileID: p.ID, Start: start, Slots: p.MemorySlots, Slices: p.ComputeSlices, Media: p.MediaExtensions})
			}
			h := MockHost(fmt.Sprintf("h-%d", seed), name, 1)
			h.GPUs[0].MIG = true
			h.GPUs[0].Instances = existing
			f := MockFleet(h)
			if err := f.Check(); err != nil {
				t.Fatalf("%s seed %d: layout %+v: %v", name, seed, existing, err)
			}
		}
	}
}
