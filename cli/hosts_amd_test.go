package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// gpucloud hosts shows an AMD GPU's partition mode, in the list (by model
// and mode) and in describe (per GPU, with its devices).
func TestHostsShowPartitionMode(t *testing.T) {
	e := newCloudEnv(t)
	ctx := context.Background()
	// The spec as the server records it: modes resolved by the fleet.
	h := fleet.MockAMDHost("mi300x-a", "MI300X", 8, "CPX", "NPS4", 0)
	for i := 4; i < 8; i++ {
		h.GPUs[i].Partition, h.GPUs[i].MemoryPartition = "", ""
	}
	f := fleet.New()
	if err := f.AddHost(h, catalog.Default()); err != nil {
		t.Fatal(err)
	}
	spec := *f.Host("mi300x-a")
	spec.GPUs = append([]fleet.GPU(nil), spec.GPUs...)
	err := e.st.Tx(ctx, func(tx cloud.Tx) error {
		return tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: spec, LastHeartbeat: time.Now()})
	})
	if err != nil {
		t.Fatal(err)
	}
	out := e.ok(e.admin, "hosts", "list")
	if !strings.Contains(out, "4x MI300X CPX/NPS4, 4x MI300X SPX/NPS1") {
		t.Errorf("hosts list:\n%s", out)
	}
	out = e.ok(e.admin, "hosts", "describe", "mi300x-a")
	for _, want := range []string{"0 MI300X GPU-mi300x-a-0 0 CPX/NPS4, 8 devices", "7 MI300X GPU-mi300x-a-7 0 SPX/NPS1"} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			if strings.Join(strings.Fields(line), " ") == want {
				found = true
			}
		}
		if !found {
			t.Errorf("hosts describe lacks %q:\n%s", want, out)
		}
	}
}

func TestDeviceDetailAMD(t *testing.T) {
	for _, c := range []struct {
		d    fleet.Device
		want string
	}{
		{fleet.Device{GPU: 1, Kind: fleet.Partition, Part: 3, Parts: 8, Partition: "CPX"}, "CPX partition 3 of 8 on GPU 1"},
		{fleet.Device{GPU: 0, Kind: fleet.VF, Part: 7, Parts: 8}, "VF 7 of 8 on GPU 0"},
		{fleet.Device{GPU: 0, Kind: fleet.Whole}, "whole GPU"},
	} {
		if got := deviceDetail(c.d); got != c.want {
			t.Errorf("deviceDetail(%+v) = %q, want %q", c.d, got, c.want)
		}
	}
}
