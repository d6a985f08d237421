//go:build cgo

package nvml

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/gpu"
)

func TestCheckProfiles(t *testing.T) {
	g := migH100(t)
	lib := newFakeLib(g)
	checks, err := New(lib, nil).CheckProfiles(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	m := model(t, "H100-80GB-SXM")
	if len(checks) != len(m.MIGProfiles) {
		t.Errorf("%d profiles checked, want the catalog's %d", len(checks), len(m.MIGProfiles))
	}
	for _, c := range checks {
		if c.Name != m.ProfileByID(c.ID).Name || len(c.Differences) > 0 {
			t.Errorf("profile %d (%s): differences %v, want none", c.ID, c.Name, c.Differences)
		}
	}
	if calls := lib.callsMatching("SetMigMode", "CreateGpuInstanceWithPlacement", "CreateComputeInstance", "GpuInstance.Destroy"); len(calls) > 0 {
		t.Errorf("CheckProfiles changed something: %v", calls)
	}

	// go-nvml's mock H100 says 3g is 3 slots and 7g 7; the check says so.
	g.nvmlSize = map[int]int{9: 3, 0: 7}
	checks, err = New(newFakeLib(g), nil).CheckProfiles(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var diffs []string
	for _, c := range checks {
		diffs = append(diffs, c.Differences...)
	}
	text := strings.Join(diffs, "\n")
	if len(diffs) != 3 || !strings.Contains(text, "placement at slot 4 is 3 slots, catalog: 4") || !strings.Contains(text, "placement at slot 0 is 7 slots, catalog: 8") {
		t.Errorf("differences:\n%s\nwant the 3g's two placements and the 7g's one", text)
	}

	if _, err := New(newFakeLib(l40s(t)), nil).CheckProfiles(context.Background(), 0); !errors.Is(err, gpu.ErrNotSupported) {
		t.Errorf("CheckProfiles on an L40S = %v, want ErrNotSupported", err)
	}
}
