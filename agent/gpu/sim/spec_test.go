package sim

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		desc    string
		yaml    string
		wantErr string
		check   func(t *testing.T, s Spec)
	}{
		{
			desc: "full host with one NVLink island given as a count",
			yaml: `
id: h1
zone: zone-a
rack: rack-7
labels: {interconnect: infiniband}
cpu_milli: 128000
memory_mib: 1048576
gpus: {model: H100, count: 8, nvlink_islands: 1, mig: true}
driver: "555.42"
cuda: "12.5"
`,
			check: func(t *testing.T, s Spec) {
				want := Spec{ID: "h1", Zone: "zone-a", Rack: "rack-7", Labels: map[string]string{"interconnect": "infiniband"},
					CPUMilli: 128000, MemoryMiB: 1048576, Driver: "555.42", CUDA: "12.5",
					GPUs: GPUSpec{Model: "H100-80GB-SXM", Count: 8, NVLinkIslands: Islands{8}, MIG: true}}
				if !reflect.DeepEqual(s, want) {
					t.Fatalf("got %+v, want %+v", s, want)
				}
			},
		},
		{
			desc: "islands as a list of sizes",
			yaml: "id: h2\ngpus: {model: A100-80GB-SXM, count: 8, nvlink_islands: [4, 4]}\n",
			check: func(t *testing.T, s Spec) {
				if !slices.Equal(s.GPUs.NVLinkIslands, Islands{4, 4}) {
					t.Fatalf("islands %v", s.GPUs.NVLinkIslands)
				}
			},
		},
		{
			desc: "two equal islands given as a count",
			yaml: "id: h3\ngpus: {model: H100, count: 8, nvlink_islands: 2}\n",
			check: func(t *testing.T, s Spec) {
				if !slices.Equal(s.GPUs.NVLinkIslands, Islands{4, 4}) {
					t.Fatalf("islands %v", s.GPUs.NVLinkIslands)
				}
			},
		},
		{
			desc: "defaults for cpu, memory and versions",
			yaml: "id: h4\ngpus: {model: L40S, count: 2}\n",
			check: func(t *testing.T, s Spec) {
				if s.CPUMilli != 2*CPUPerGPU || s.MemoryMiB != 2*MemoryPerGPU || s.Driver != DefaultDriver || s.CUDA != DefaultCUDA {
					t.Fatalf("defaults not applied: %+v", s)
				}
			},
		},
		{
			desc: "CPU-only host",
			yaml: "id: cpu1\n",
			check: func(t *testing.T, s Spec) {
				if s.GPUs.Count != 0 || s.CPUMilli != CPUPerGPU {
					t.Fatalf("got %+v", s)
				}
			},
		},
		{
			desc: "RDMA adapters as a count",
			yaml: "id: h5\nhcas: 2\n",
			check: func(t *testing.T, s Spec) {
				want := HCAs{{Name: "mlx5_0", LinkLayer: "InfiniBand", NetDev: "ib0"}, {Name: "mlx5_1", LinkLayer: "InfiniBand", NetDev: "ib1"}}
				if !reflect.DeepEqual(s.HCAs, want) {
					t.Fatalf("hcas %+v", s.HCAs)
				}
			},
		},
		{
			desc: "RDMA adapters as a list, defaults filled",
			yaml: "id: h6\nhcas: [{name: roce0, link_layer: Ethernet, netdev: eth2}, {link_layer: Ethernet}, {}]\n",
			check: func(t *testing.T, s Spec) {
				want := HCAs{{Name: "roce0", LinkLayer: "Ethernet", NetDev: "eth2"}, {Name: "mlx5_1", LinkLayer: "Ethernet"},
					{Name: "mlx5_2", LinkLayer: "InfiniBand", NetDev: "ib2"}}
				if !reflect.DeepEqual(s.HCAs, want) {
					t.Fatalf("hcas %+v", s.HCAs)
				}
			},
		},
		{
			desc: "no RDMA adapters",
			yaml: "id: h7\nhcas: 0\n",
			check: func(t *testing.T, s Spec) {
				if s.HCAs != nil {
					t.Fatalf("hcas %+v", s.HCAs)
				}
			},
		},
		{desc: "too many adapters", yaml: "id: h\nhcas: 33\n", wantErr: "hcas 33 is outside 0..32"},
		{desc: "adapters of the wrong type", yaml: "id: h\nhcas: many\n", wantErr: "number of adapters or a list"},
		{desc: "unknown link layer", yaml: "id: h\nhcas: [{link_layer: TokenRing}]\n", wantErr: `hcas[0].link_layer "TokenRing"`},
		{desc: "adapter named twice", yaml: "id: h\nhcas: [{name: a}, {name: a}]\n", wantErr: `hcas[1].name "a" is given twice`},
		{desc: "adapter name NCCL cannot list", yaml: "id: h\nhcas: [{name: \"a,b\"}]\n", wantErr: `hcas[0].name "a,b"`},
		{desc: "bad interface name", yaml: "id: h\nhcas: [{netdev: \"../x\"}]\n", wantErr: `hcas[0].netdev "../x"`},
		{desc: "misspelt field", yaml: "id: h\nnvlink_island: 1\n", wantErr: "field nvlink_island not found"},
		{desc: "empty file", yaml: "", wantErr: "empty host description"},
		{desc: "no id", yaml: "gpus: {model: H100, count: 1}\n", wantErr: "id is required"},
		{desc: "unknown model", yaml: "id: h\ngpus: {model: H900, count: 1}\n", wantErr: "H900"},
		{desc: "count without model", yaml: "id: h\ngpus: {count: 4}\n", wantErr: "gpus.model is required"},
		{desc: "MIG on a model without MIG", yaml: "id: h\ngpus: {model: L40S, count: 2, mig: true}\n", wantErr: "L40S has no MIG"},
		{desc: "islands that do not add up", yaml: "id: h\ngpus: {model: H100, count: 8, nvlink_islands: [4, 2]}\n", wantErr: "add up to 6"},
		{desc: "uneven island count", yaml: "id: h\ngpus: {model: H100, count: 8, nvlink_islands: 3}\n", wantErr: "into 3 equal islands"},
		{desc: "islands of the wrong type", yaml: "id: h\ngpus: {model: H100, count: 8, nvlink_islands: all}\n", wantErr: "number of islands or a list"},
		{desc: "too many GPUs", yaml: "id: h\ngpus: {model: H100, count: 65}\n", wantErr: "outside 0..64"},
		{desc: "negative cpu", yaml: "id: h\ncpu_milli: -1\n", wantErr: "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s, err := ParseSpec(strings.NewReader(tt.yaml), "host.yaml")
			if err == nil {
				s, err = s.Resolve(catalog.Default())
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, s)
		})
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "h.yaml")
	if err := os.WriteFile(path, []byte("id: file-host\ngpus: {model: H100, count: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if h.ID() != "file-host" || h.Spec().GPUs.Count != 2 {
		t.Fatalf("loaded %+v", h.Spec())
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("id: x\ngpus: {model: nope, count: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(bad); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Fatalf("error %v does not name the file", err)
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Fatal("missing file loaded")
	}
}

func TestFleetCopiesTemplate(t *testing.T) {
	tmpl := Spec{ID: "gpu", Labels: map[string]string{"a": "1"}, GPUs: GPUSpec{Model: "H100", Count: 8, NVLinkIslands: Islands{8}},
		HCAs: HCAs{{Name: "mlx5_0"}}}
	specs := Fleet(3, tmpl)
	if len(specs) != 3 || specs[0].ID != "gpu-1" || specs[2].ID != "gpu-3" {
		t.Fatalf("ids %v", specs)
	}
	specs[0].Labels["a"] = "changed"
	specs[0].GPUs.NVLinkIslands[0] = 1
	specs[0].HCAs[0].Name = "changed"
	if specs[1].Labels["a"] != "1" || tmpl.Labels["a"] != "1" || specs[1].GPUs.NVLinkIslands[0] != 8 || specs[1].HCAs[0].Name != "mlx5_0" {
		t.Fatal("fleet specs share labels, islands or adapters")
	}
}

// TestDefaultFleet checks that the fleet `gpucloud up` starts is the
// documented mix and that the scheduler's fleet accepts every host of it.
func TestDefaultFleet(t *testing.T) {
	specs := DefaultFleet()
	count := map[string]int{}
	f := fleet.New()
	ids := map[string]bool{}
	for _, s := range specs {
		h, err := New(s)
		if err != nil {
			t.Fatal(err)
		}
		if ids[s.ID] {
			t.Fatalf("duplicate host id %s", s.ID)
		}
		ids[s.ID] = true
		inv, err := h.Inventory(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := f.AddHost(&inv.Host, catalog.Default()); err != nil {
			t.Fatal(err)
		}
		count[h.Spec().GPUs.Model+"x"+string(rune('0'+h.Spec().GPUs.Count))]++
		if h.Spec().GPUs.Model == "H100-80GB-SXM" {
			for _, g := range inv.Host.GPUs {
				if g.Island != 0 {
					t.Fatalf("H100 gpu %d not on island 0", g.Index)
				}
			}
			// The InfiniBand hosts: the label and the adapters agree.
			if len(inv.Host.HCAs) != 8 || inv.Host.HCAs[7].LinkLayer != InfiniBand || inv.Host.Labels["interconnect"] != "infiniband" {
				t.Fatalf("H100 host %s: adapters %+v, labels %v", s.ID, inv.Host.HCAs, inv.Host.Labels)
			}
		} else if len(inv.Host.HCAs) != 0 {
			t.Fatalf("host %s has adapters %+v", s.ID, inv.Host.HCAs)
		}
	}
	want := map[string]int{"H100-80GB-SXMx8": 2, "A100-80GB-SXMx8": 2, "L40Sx2": 4}
	if len(count) != len(want) {
		t.Fatalf("fleet mix %v, want %v", count, want)
	}
	for k, n := range want {
		if count[k] != n {
			t.Fatalf("fleet mix %v, want %v", count, want)
		}
	}
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestWithCatalog(t *testing.T) {
	cat, err := catalog.New([]catalog.Model{{Name: "X1", MemoryMiB: 24 * catalog.GiB}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{ID: "custom", GPUs: GPUSpec{Model: "x1", Count: 1}}
	if _, err := New(spec); err == nil {
		t.Fatal("the built-in catalog knows model X1")
	}
	h, err := New(spec, WithCatalog(cat))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := h.Inventory(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if g := inv.Host.GPUs[0]; g.Model != "X1" || g.MemoryMiB != 24*catalog.GiB {
		t.Fatalf("gpu %+v", g)
	}
}
