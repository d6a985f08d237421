package amdsmi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// fake runs "amd-smi" from the testdata files of a host: static_<host>.json
// and list_<host>.json, recording the calls.
func fake(t *testing.T, host string, calls *[]string) Runner {
	return func(ctx context.Context, args ...string) ([]byte, error) {
		*calls = append(*calls, strings.Join(args, " "))
		switch {
		case slices.Equal(args, staticArgs):
			return os.ReadFile(filepath.Join("testdata", "static_"+host+".json"))
		case slices.Equal(args, listArgs):
			return os.ReadFile(filepath.Join("testdata", "list_"+host+".json"))
		}
		t.Errorf("unexpected amd-smi %v", args)
		return nil, errors.New("unexpected")
	}
}

func newDriver(t *testing.T, host string) (*Driver, *[]string) {
	var calls []string
	d := New(fake(t, host, &calls), nil, filepath.Join("testdata", "sys"))
	d.HostID = "amd-1"
	return d, &calls
}

// Two MI300X in CPX/NPS4 (16 logical GPUs in amd-smi) are two GPUs of the
// inventory, each in CPX/NPS4, on one xGMI island, and a fleet takes them
// as 8 devices each.
func TestInventoryCPX(t *testing.T) {
	d, calls := newDriver(t, "cpx")
	inv, err := d.Inventory(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*calls, []string{strings.Join(staticArgs, " "), strings.Join(listArgs, " ")}) {
		t.Errorf("amd-smi calls %q", *calls)
	}
	if inv.Driver != "6.10.5" || inv.CUDA != "" || inv.Host.ID != "amd-1" || len(inv.Host.GPUs) != 2 || len(inv.Health) != 2 {
		t.Fatalf("inventory %+v", inv)
	}
	for i, g := range inv.Host.GPUs {
		if g.Index != i || g.Model != "MI300X" || g.MemoryMiB != 192*catalog.GiB || g.Island != 0 ||
			g.Partition != "CPX" || g.MemoryPartition != "NPS4" || !inv.Health[i].Healthy {
			t.Errorf("gpu %d: %+v %+v", i, g, inv.Health[i])
		}
	}
	if inv.Host.GPUs[1].UUID != "08ff74a1-0000-1000-8008-000000abc008" {
		t.Errorf("gpu 1 UUID %s, want its partition 0's", inv.Host.GPUs[1].UUID)
	}
	inv.Host.CPUMilli, inv.Host.MemoryMiB = 192000, 2<<20
	f := fleet.New()
	if err := f.AddHost(&inv.Host, catalog.Default()); err != nil {
		t.Fatal(err)
	}
	if g := f.Host("amd-1").GPUs[1]; g.Parts != 8 || !g.Split() {
		t.Errorf("fleet gpu %+v", g)
	}
}

// An MI325X in SPX is one whole GPU; a GPU the catalog does not know is
// reported under its market name, unhealthy, with the reason.
func TestInventorySPXAndUnknown(t *testing.T) {
	d, _ := newDriver(t, "spx")
	inv, err := d.Inventory(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	g := inv.Host.GPUs[0]
	if len(inv.Host.GPUs) != 2 || g.Model != "MI325X" || g.Partition != "SPX" || g.MemoryPartition != "NPS1" || g.Island != 0 {
		t.Fatalf("gpu 0 %+v", g)
	}
	u := inv.Host.GPUs[1]
	if u.Model != "AMD Instinct MI210" || u.Partition != "" || inv.Health[1].Healthy || !strings.Contains(inv.Health[1].Reason, "0x740f") {
		t.Errorf("unknown gpu %+v %+v", u, inv.Health[1])
	}
}

func TestDevicesAndRenderMinors(t *testing.T) {
	d, _ := newDriver(t, "cpx")
	ctx := t.Context()
	part := func(g, p int) fleet.Device {
		return fleet.Device{GPU: g, Kind: fleet.Partition, Part: p, Parts: 8, Partition: "CPX"}
	}
	cases := []struct {
		desc  string
		dev   fleet.Device
		uuid  string
		minor int
		err   error
	}{
		{"gpu 0 partition 0", part(0, 0), "00ff74a1-0000-1000-8000-000000abc000", 128, nil},
		{"gpu 1 partition 3", part(1, 3), "0bff74a1-0000-1000-800b-000000abc00b", 139, nil},
		{"no partition 8", part(1, 8), "", 0, gpu.ErrNotFound},
		{"no gpu 2", part(2, 0), "", 0, gpu.ErrNotFound},
		{"wrong mode", fleet.Device{GPU: 0, Kind: fleet.Partition, Part: 0, Parts: 4, Partition: "QPX"}, "", 0, gpu.ErrInvalid},
		{"whole GPU in CPX", fleet.Device{GPU: 0, Kind: fleet.Whole}, "", 0, gpu.ErrInvalid},
		{"a VF", fleet.Device{GPU: 0, Kind: fleet.VF, Part: 0, Parts: 8}, "", 0, gpu.ErrNotSupported},
	}
	for _, c := range cases {
		p := &fleet.Placement{ID: "p", HostID: "amd-1", Devices: []fleet.Device{c.dev}}
		uuids, err := d.Devices(ctx, p)
		minors, merr := d.RenderMinors(ctx, p)
		if c.err != nil {
			if !errors.Is(err, c.err) || !errors.Is(merr, c.err) {
				t.Errorf("%s: %v / %v, want %v", c.desc, err, merr, c.err)
			}
			continue
		}
		if err != nil || merr != nil || !slices.Equal(uuids, []string{c.uuid}) || !slices.Equal(minors, []int{c.minor}) {
			t.Errorf("%s: %v %v, %v %v", c.desc, uuids, minors, err, merr)
		}
	}
	if _, err := d.Devices(ctx, &fleet.Placement{ID: "p", HostID: "other", Devices: []fleet.Device{part(0, 0)}}); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("another host's placement: %v", err)
	}
	// In SPX the whole GPU is its one logical GPU.
	s, _ := newDriver(t, "spx")
	p := &fleet.Placement{ID: "p", Devices: []fleet.Device{{GPU: 0, Kind: fleet.Whole}}}
	if m, err := s.RenderMinors(ctx, p); err != nil || !slices.Equal(m, []int{128}) {
		t.Errorf("SPX render minors %v, %v", m, err)
	}
}

// No MIG on AMD; amd-smi's failures are the driver's.
func TestMIGAndFailures(t *testing.T) {
	d, _ := newDriver(t, "cpx")
	ctx := t.Context()
	if err := d.SetMIGMode(ctx, 0, true); !errors.Is(err, gpu.ErrNotSupported) {
		t.Errorf("SetMIGMode on: %v", err)
	}
	if err := d.SetMIGMode(ctx, 0, false); err != nil {
		t.Errorf("SetMIGMode off: %v", err)
	}
	if _, err := d.CreateMIG(ctx, 0, 9, 0); !errors.Is(err, gpu.ErrNotSupported) {
		t.Errorf("CreateMIG: %v", err)
	}
	broken := New(func(context.Context, ...string) ([]byte, error) { return []byte(`{"gpu": 0}`), nil }, nil, "")
	if _, err := broken.Inventory(ctx); err == nil || !strings.Contains(err.Error(), "amd-smi static") {
		t.Errorf("bad JSON: %v", err)
	}
	gone := New(func(context.Context, ...string) ([]byte, error) { return nil, gpu.ErrUnavailable }, nil, "")
	if _, err := gone.Inventory(ctx); !errors.Is(err, gpu.ErrUnavailable) {
		t.Errorf("no amd-smi: %v", err)
	}
}
