package advise

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// listMarket is ListMarket of the built-in catalog.
func listMarket(t *testing.T) (*MarketView, *catalog.Catalog) {
	t.Helper()
	cat := catalog.Default()
	m, err := ListMarket(cat)
	if err != nil {
		t.Fatal(err)
	}
	return m, cat
}

func mustAdvise(t *testing.T, w Workload, m *MarketView, cat *catalog.Catalog) *Advice {
	t.Helper()
	a, err := Advise(w, m, cat)
	if err != nil {
		t.Fatalf("Advise(%+v): %v", w, err)
	}
	return a
}

// inference is a valid inference workload to start tables from.
func inference(params int64, p Precision) Workload {
	return Workload{Params: params, Precision: p, Task: Inference, Nodes: 1, PerDay: 4 * time.Hour, Days: 30}
}

func training(params int64, nodes int) Workload {
	return Workload{Params: params, Precision: BF16, Task: Training, Nodes: nodes, PerDay: 24 * time.Hour, Days: 30,
		CheckpointInterval: 30 * time.Minute}
}

// excluded returns the exclusion of an offering as a whole, or nil.
func excluded(a *Advice, offering string) *Exclusion {
	for i := range a.Excluded {
		if e := &a.Excluded[i]; e.Offering == offering && e.Mix == "" {
			return e
		}
	}
	return nil
}

func modelOf(t *testing.T, cat *catalog.Catalog, offering string) *catalog.Model {
	t.Helper()
	o, err := cat.Offering(offering)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cat.Model(o.Model)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The seed article: "Transformer类大模型训练需至少32GB显存（如A100 40GB），
// 而CV类轻量模型16GB显存即可满足" — a Transformer that needs 32 GB or more
// gets no 16 GB GPU, whether it would fit one or be split over several.
func TestLargeModelGetsNo16GBGPU(t *testing.T) {
	m, cat := listMarket(t)
	for _, tc := range []struct {
		desc string
		w    Workload
	}{
		{"32 GiB given", Workload{MemoryMiB: 32 * 1024, Precision: FP16, Task: Inference, Nodes: 1, PerDay: 8 * time.Hour, Days: 10}},
		{"70B int4 inference (39.2 GiB)", inference(70_000_000_000, INT4)},
		{"13B fp16 training", func() Workload { w := training(13_000_000_000, 1); w.Precision = FP16; return w }()},
		{"30B fp16 inference", inference(30_000_000_000, FP16)},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			a := mustAdvise(t, tc.w, m, cat)
			if !a.Need.Large {
				t.Fatalf("need %+v is not large", a.Need)
			}
			if len(a.Options) == 0 {
				t.Fatal("no options")
			}
			for _, o := range a.Options {
				if o.GPUMemoryMiB < 32*1024 {
					t.Errorf("option %s %s has %d MiB GPUs", o.Offering, o.Mix, o.GPUMemoryMiB)
				}
			}
			for _, name := range []string{"t4.1x", "t4.4x", "l4.8x", "a10.4x"} {
				e := excluded(a, name)
				if e == nil || e.Dimension != DimCompute || !strings.Contains(e.Reason, "32 GiB") {
					t.Errorf("%s: exclusion %+v, want compute density naming 32 GiB", name, e)
				}
			}
		})
	}

	// Below the line, a 16 GB GPU is fine: 7B fp16 inference needs 15.7 GiB.
	// (An MI300X CPX partition, 24 GiB, is cheaper still; the first
	// NVIDIA option is the T4.)
	a := mustAdvise(t, inference(7_000_000_000, FP16), m, cat)
	first := ""
	for _, o := range a.Options {
		if modelOf(t, cat, o.Offering).VendorOf() == catalog.VendorNVIDIA {
			first = o.Offering
			break
		}
	}
	if a.Need.Large || first != "t4.1x" {
		t.Errorf("7B fp16 inference: large %v, first NVIDIA %s; want t4.1x", a.Need.Large, first)
	}
}

// A multi-node job gets only InfiniBand/RoCE-class offerings: whole 8-GPU
// NVLink hosts.
func TestMultiNodeGetsNVLinkIBOfferings(t *testing.T) {
	m, cat := listMarket(t)
	for _, w := range []Workload{
		training(70_000_000_000, 2),
		training(7_000_000_000, 4),
		{MemoryMiB: 100 * 1024, Precision: FP8, Task: Inference, Nodes: 2, PerDay: 12 * time.Hour, Days: 5},
	} {
		a := mustAdvise(t, w, m, cat)
		if len(a.Options) == 0 {
			t.Fatalf("%+v: no options", w)
		}
		for _, o := range a.Options {
			md := modelOf(t, cat, o.Offering)
			if md.LinkGBps() == 0 || o.GPUs != 8 || o.Mode != catalog.ModeMetal && o.Mode != catalog.ModeGPU {
				t.Errorf("%d nodes: option %s (%s, %d GPUs, link %d)", w.Nodes, o.Offering, o.Mode, o.GPUs, md.LinkGBps())
			}
			if !hasReason(o, DimNetwork, "InfiniBand/RoCE") {
				t.Errorf("option %s says nothing of InfiniBand: %+v", o.Offering, o.Reasons)
			}
		}
		for _, name := range []string{"h100.1x", "h100.4x", "a100.mig.7g.80gb", "l40s.8x"} {
			if e := excluded(a, name); e == nil || e.Dimension != DimNetwork && e.Dimension != DimCompute {
				t.Errorf("%s: exclusion %+v", name, e)
			}
		}
		if e := excluded(a, "h100.4x"); e == nil || e.Dimension != DimNetwork || !strings.Contains(e.Reason, "InfiniBand/RoCE") {
			t.Errorf("h100.4x: exclusion %+v, want network topology", e)
		}
	}
}

func hasReason(o Option, d Dimension, text string) bool {
	for _, r := range o.Reasons {
		if r.Dimension == d && strings.Contains(r.Text, text) {
			return true
		}
	}
	return false
}

// Light inference (1B–7B in int8/int4/fp16, a few hours a day) gets a MIG
// slice or a GPU share first, interruptible or not.
func TestLightInferenceGetsSliceOrShare(t *testing.T) {
	m, cat := listMarket(t)
	for _, tc := range []struct {
		params int64
		p      Precision
	}{
		{1_000_000_000, FP16}, {3_000_000_000, FP16}, {1_000_000_000, BF16},
		{7_000_000_000, INT8}, {7_000_000_000, INT4}, {3_000_000_000, FP8}, {1_000_000_000, FP32},
	} {
		for _, ckpt := range []time.Duration{0, 10 * time.Minute} {
			w := inference(tc.params, tc.p)
			w.CheckpointInterval = ckpt
			a := mustAdvise(t, w, m, cat)
			if first := a.Options[0]; first.Mode != catalog.ModeMIG && first.Mode != catalog.ModeShared {
				t.Errorf("%s %s (checkpoint %s): first option %s (%s)", FormatParams(tc.params), tc.p, ckpt, first.Offering, first.Mode)
			}
		}
	}
}

func TestPrecisionSupport(t *testing.T) {
	m, cat := listMarket(t)
	for _, tc := range []struct {
		p            Precision
		never        []string // model names no option may use
		excludedWhy  string
		excludedName string
	}{
		{BF16, []string{"T4"}, "bf16 needs Ampere or later", "t4.1x"},
		{TF32, nil, "", ""},
		{FP8, []string{"T4", "A10", "A100-80GB-SXM"}, "fp8 needs Ada Lovelace or Hopper", "a100.1x"},
	} {
		a := mustAdvise(t, inference(1_000_000_000, tc.p), m, cat)
		for _, o := range a.Options {
			if slices.Contains(tc.never, o.Model) {
				t.Errorf("%s: option %s on %s", tc.p, o.Offering, o.Model)
			}
			if SupportOf(ArchOf(o.Model), tc.p) == Unsupported {
				t.Errorf("%s: option %s on unsupported %s", tc.p, o.Offering, o.Model)
			}
		}
		if tc.excludedName != "" {
			if e := excluded(a, tc.excludedName); e == nil || e.Dimension != DimCompute || !strings.Contains(e.Reason, tc.excludedWhy) {
				t.Errorf("%s: %s exclusion %+v, want %q", tc.p, tc.excludedName, e, tc.excludedWhy)
			}
		}
	}
	// tf32 on a T4 runs as fp32: allowed, not native, and said so.
	a := mustAdvise(t, inference(1_000_000_000, TF32), m, cat)
	for _, o := range a.Options {
		if o.Model == "T4" && (o.Native || !hasReason(o, DimCompute, "runs as fp32")) {
			t.Errorf("tf32 on T4: %+v", o)
		}
	}
	if !slices.ContainsFunc(a.Options, func(o Option) bool { return o.Model == "T4" }) {
		t.Error("tf32: no T4 option")
	}
}

func TestArchTable(t *testing.T) {
	for name, want := range map[string]Arch{
		"H100-80GB-SXM": Hopper, "H200-NVL": Hopper, "A100-40GB-PCIE": Ampere, "A10": Ampere, "A40": Ampere,
		"L4": Ada, "L40S": Ada, "RTX-6000-ADA": Ada, "T4": Turing, "V100-32GB": Volta, "P100-16GB": Pascal, "G1": UnknownArch,
	} {
		if got := ArchOf(name); got != want {
			t.Errorf("ArchOf(%s) = %q, want %q", name, got, want)
		}
	}
	for _, tc := range []struct {
		a    Arch
		p    Precision
		want Support
	}{
		{Turing, BF16, Unsupported}, {Volta, BF16, Unsupported}, {Ampere, BF16, Native}, {Ampere, FP8, Unsupported},
		{Hopper, FP8, Native}, {Ada, FP8, Native}, {Hopper, INT4, Runs}, {Turing, INT8, Native}, {Volta, FP16, Native},
		{Pascal, FP16, Runs}, {UnknownArch, BF16, UnknownSupport}, {Pascal, FP32, Native},
	} {
		if got := SupportOf(tc.a, tc.p); got != tc.want {
			t.Errorf("SupportOf(%s, %s) = %d, want %d", tc.a, tc.p, got, tc.want)
		}
	}
	// Every built-in model that an offering sells has a known architecture.
	cat := catalog.Default()
	for _, o := range cat.Offerings() {
		if o.Model != "" && ArchOf(modelOf(t, cat, o.Name).Name) == UnknownArch {
			t.Errorf("offering %s: model %s has no architecture", o.Name, o.Model)
		}
	}
}

func TestTrainingAcrossGPUsNeedsNVLink(t *testing.T) {
	m, cat := listMarket(t)
	a := mustAdvise(t, training(7_000_000_000, 1), m, cat) // 125.2 GiB
	if e := excluded(a, "l40s.4x"); e == nil || e.Dimension != DimNetwork || !strings.Contains(e.Reason, "NVLink") {
		t.Errorf("l40s.4x: %+v, want excluded for want of NVLink", e)
	}
	var split bool
	for _, o := range a.Options {
		if o.Split > 1 {
			split = true
			if md := modelOf(t, cat, o.Offering); md.NVLinkGBps == 0 {
				t.Errorf("training split on PCIe: %s", o.Offering)
			}
		}
	}
	if !split {
		t.Error("no option splits the model (h100.2x, a100.2x)")
	}
	// Inference may split over PCIe, and says it is slower.
	w := inference(70_000_000_000, BF16) // 156.5 GiB
	a = mustAdvise(t, w, m, cat)
	i := slices.IndexFunc(a.Options, func(o Option) bool { return o.Offering == "l40s.4x" })
	if i < 0 || a.Options[i].Split != 4 || !hasReason(a.Options[i], DimNetwork, "PCIe") {
		t.Errorf("70B bf16 inference on l40s.4x: %+v", a.Options)
	}
}

// costMarket is one offering at 12.00/h (the articles' example), spot at
// 4.80 in two zones.
func costMarket() *MarketView {
	return &MarketView{Source: "test", VolumePerGiBMonth: money.MustParse("0.10"), Offerings: map[string]Quote{
		"h100.1x": {OnDemand: money.MustParse("12"), Spot: []SpotQuote{
			{Zone: "a", Price: money.MustParse("4.80"), ReclaimRateBP: 500, RateKnown: true},
			{Zone: "b", Price: money.MustParse("4.00"), ReclaimRateBP: 5000, RateKnown: true},
		}, Availability: &Availability{Hosts: 4, FitsNow: 2}},
	}}
}

func option(t *testing.T, a *Advice, offering string, mix Mix) Option {
	t.Helper()
	for _, o := range a.Options {
		if o.Offering == offering && o.Mix == mix {
			return o
		}
	}
	t.Fatalf("no option %s %s in %+v; excluded %+v", offering, mix, a.Options, a.Excluded)
	return Option{}
}

// The articles' cost example: a 7B model 12 h/day for 30 days at $12/h is
// $4,320 on demand.
func TestCosts(t *testing.T) {
	cat := catalog.Default()
	w := Workload{Params: 7_000_000_000, Precision: FP16, Task: Inference, Nodes: 1, PerDay: 12 * time.Hour, Days: 30,
		CheckpointInterval: 30 * time.Minute}
	a := mustAdvise(t, w, costMarket(), cat)
	// The volume: 7B × 2 bytes = 14e9 bytes = 14 GiB, 30 days of a
	// 730-hour month at 0.10: 14 × 0.10 × 720/730 = 1.380822 → 1.380822.
	wantStorage := money.MustParse("1.380822")
	for _, tc := range []struct {
		mix     Mix
		compute string
		zone    string
	}{
		{OnDemand, "4320", ""},
		// Fee 1.20 × 720 h + 360 h × 8.40 (30% off).
		{Retainer, "3888", ""},
		// Zone a: 360 h × 0.05 = 18 reclaims × 15 min = 4.5 h lost:
		// 364.5 h × 4.80 = 1749.60. Zone b: 360 × 0.5 × 15 min = 45 h:
		// 405 h × 4.00 = 1620, the cheaper.
		{Spot, "1620", "b"},
	} {
		o := option(t, a, "h100.1x", tc.mix)
		if o.Compute != money.MustParse(tc.compute) || o.Storage != wantStorage || o.Total != o.Compute+o.Storage || o.Zone != tc.zone {
			t.Errorf("%s: compute %s storage %s total %s zone %q; want %s, %s, zone %q",
				tc.mix, o.Compute, o.Storage, o.Total, o.Zone, tc.compute, wantStorage, tc.zone)
		}
		if o.FitsNow != FitsYes {
			t.Errorf("%s: fits now %s", tc.mix, o.FitsNow)
		}
	}
	sp := option(t, a, "h100.1x", Spot)
	if sp.LostSeconds != 45*3600 || sp.ExpectedReclaimsMilli != 180_000 || sp.SpotNodes != 1 || sp.OnDemandNodes != 0 {
		t.Errorf("spot: %+v", sp)
	}
	// 360 h + 45 h at 12 h/day: 33 days and 9 h → after 33 whole days the
	// 34th day's 9 h: 33 × 24 + 9 = 801 h.
	if sp.CompletionSeconds != 801*3600 {
		t.Errorf("spot completion %s", Duration(sp.CompletionSeconds))
	}
	if od := option(t, a, "h100.1x", OnDemand); od.CompletionSeconds != (29*24+12)*3600 || od.PerInstanceHour != money.MustParse("12") {
		t.Errorf("on demand: completion %s, per hour %s", Duration(od.CompletionSeconds), od.PerInstanceHour)
	}
	// Ranked by total: spot, retainer, on demand. The reservation, held
	// 24 h/day for 30 days at 35% off (720 × 7.80), costs more than on
	// demand at 12 h/day, and is left out saying so.
	var got []Mix
	for _, o := range a.Options {
		got = append(got, o.Mix)
	}
	if want := []Mix{Spot, Retainer, OnDemand}; !reflect.DeepEqual(got, want) {
		t.Errorf("ranking %v, want %v", got, want)
	}
	i := slices.IndexFunc(a.Excluded, func(e Exclusion) bool { return e.Mix == Reserved })
	if want := "costs $5,616.00, no less than on demand ($4,320.00)"; i < 0 || a.Excluded[i].Reason != want || a.Excluded[i].Dimension != DimPricing {
		t.Errorf("excluded %+v, want the reservation: %q", a.Excluded, want)
	}

	// Around the clock, the reservation pays: 720 h × 7.80 = 5616 against
	// 8640 on demand (no upfront, 25% off: 6480).
	w.PerDay = 24 * time.Hour
	a = mustAdvise(t, w, costMarket(), cat)
	r := option(t, a, "h100.1x", Reserved)
	if r.Compute != money.MustParse("5616") || !hasReason(r, DimPricing, "35% off $12.0000/h: $5,616.00, held 24 h/day used or not (no upfront: $6,480.00)") {
		t.Errorf("reserved %+v", r)
	}
}

func TestSpotNeedsInterruptionTolerance(t *testing.T) {
	cat := catalog.Default()
	w := Workload{Params: 7_000_000_000, Precision: FP16, Task: Inference, Nodes: 1, PerDay: 12 * time.Hour, Days: 30}
	a := mustAdvise(t, w, costMarket(), cat)
	for _, o := range a.Options {
		if o.SpotNodes > 0 {
			t.Errorf("spot option %s for a workload that cannot be interrupted", o.Offering)
		}
	}
	if len(a.Notes) == 0 || !strings.Contains(a.Notes[0], "cannot be interrupted") {
		t.Errorf("notes %q", a.Notes)
	}

	// A pool where a reclaim is expected before the first checkpoint is
	// not used: zone b reclaims every 2 h; a 2 h interval is too long
	// there, and zone a (every 20 h) is then the pool.
	w.CheckpointInterval = 2 * time.Hour
	a = mustAdvise(t, w, costMarket(), cat)
	if o := option(t, a, "h100.1x", Spot); o.Zone != "a" {
		t.Errorf("spot in zone %q, want a", o.Zone)
	}
	// Every pool too risky: excluded, saying why.
	w.CheckpointInterval = 24 * time.Hour
	a = mustAdvise(t, w, costMarket(), cat)
	i := slices.IndexFunc(a.Excluded, func(e Exclusion) bool { return e.Offering == "h100.1x" && e.Mix == Spot })
	if i < 0 || a.Excluded[i].Dimension != DimPricing || !strings.Contains(a.Excluded[i].Reason, "sooner than its 1 day checkpoint interval") {
		t.Errorf("excluded %+v", a.Excluded)
	}
}

func TestMixForMultiNode(t *testing.T) {
	cat := catalog.Default()
	m := &MarketView{Source: "test", VolumePerGiBMonth: 0, Offerings: map[string]Quote{
		"h100.8x": {OnDemand: money.MustParse("20"), Spot: []SpotQuote{{Zone: "a", Price: money.MustParse("8"), ReclaimRateBP: 1000, RateKnown: true}}},
	}}
	w := training(70_000_000_000, 3)
	w.PerDay, w.Days = 10*time.Hour, 1
	a := mustAdvise(t, w, m, cat)
	mix := option(t, a, "h100.8x", OnDemandSpot)
	// Two spot nodes at 0.1/h each: 0.2 reclaims per job-hour × 10 h = 2
	// reclaims × 15 min = 0.5 h lost; 10.5 h × (20 + 2 × 8) = 378.
	if mix.OnDemandNodes != 1 || mix.SpotNodes != 2 || mix.LostSeconds != 1800 || mix.Compute != money.MustParse("378") {
		t.Errorf("mix %+v", mix)
	}
	sp := option(t, a, "h100.8x", Spot)
	// Three spot nodes: 3 reclaims, 0.75 h: 10.75 h × 24 = 258.
	if sp.SpotNodes != 3 || sp.LostSeconds != 2700 || sp.Compute != money.MustParse("258") {
		t.Errorf("spot %+v", sp)
	}
	// A single node has no mix.
	w.Nodes = 1
	w.Params = 7_000_000_000
	a = mustAdvise(t, w, m, cat)
	for _, o := range a.Options {
		if o.Mix == OnDemandSpot {
			t.Errorf("a mix for one node: %+v", o)
		}
	}
}

func TestDeadlineAndBudget(t *testing.T) {
	cat := catalog.Default()
	w := Workload{Params: 7_000_000_000, Precision: FP16, Task: Inference, Nodes: 1, PerDay: 24 * time.Hour, Days: 30,
		CheckpointInterval: 30 * time.Minute, Deadline: 30 * 24 * time.Hour}
	a := mustAdvise(t, w, costMarket(), cat)
	// On demand and the commitments finish in 30 days; spot, with its
	// reclaims, does not.
	for _, o := range a.Options {
		if o.SpotNodes > 0 || o.CompletionSeconds > 30*86400 {
			t.Errorf("option past the deadline: %+v", o)
		}
	}
	i := slices.IndexFunc(a.Excluded, func(e Exclusion) bool { return e.Mix == Spot })
	if i < 0 || a.Excluded[i].Dimension != DimDeadline || !strings.Contains(a.Excluded[i].Reason, "past the 30 days deadline") {
		t.Errorf("excluded %+v", a.Excluded)
	}

	w.Deadline = 0
	w.Budget = money.MustParse("8000")
	a = mustAdvise(t, w, costMarket(), cat)
	// On demand is 720 × 12 = 8640 and reserved 5616 (+ storage).
	for _, o := range a.Options {
		if o.Total > w.Budget {
			t.Errorf("over budget: %+v", o)
		}
	}
	i = slices.IndexFunc(a.Excluded, func(e Exclusion) bool { return e.Mix == OnDemand })
	if i < 0 || a.Excluded[i].Dimension != DimBudget || !strings.Contains(a.Excluded[i].Reason, "over the budget of $8,000.00") {
		t.Errorf("excluded %+v", a.Excluded)
	}
}

// TestScratch: a workload that needs local scratch excludes, on the
// storage dimension, every offering whose instance store is smaller (or
// absent), and says why it fits where it does.
func TestScratch(t *testing.T) {
	m, cat := listMarket(t)
	w := inference(7_000_000_000, FP16)
	w.ScratchGiB = 1000
	a := mustAdvise(t, w, m, cat)
	for _, c := range []struct {
		offering string
		fits     bool
	}{{"h100.1x", false}, {"h100.2x", true}} {
		o, err := cat.Offering(c.offering)
		if err != nil {
			t.Fatal(err)
		}
		e := excluded(a, c.offering)
		switch {
		case !c.fits && (e == nil || e.Dimension != DimStorage || !strings.Contains(e.Reason, "needs 1000 GiB of local scratch") ||
			!strings.Contains(e.Reason, fmt.Sprintf("instance store of %d GiB", o.InstanceStoreGiB))):
			t.Errorf("%s (store %d GiB): excluded %+v, want on storage", c.offering, o.InstanceStoreGiB, e)
		case c.fits && e != nil:
			t.Errorf("%s (store %d GiB): excluded %+v", c.offering, o.InstanceStoreGiB, e)
		}
	}
	found := false
	for _, o := range a.Options {
		off, _ := cat.Offering(o.Offering)
		if int64(off.InstanceStoreGiB) < w.ScratchGiB {
			t.Errorf("option %s has %d GiB of instance store, under the 1000 GiB asked", o.Offering, off.InstanceStoreGiB)
		}
		for _, r := range o.Reasons {
			found = found || r.Dimension == DimStorage && strings.HasPrefix(r.Text, "local scratch fits: needs 1000 GiB")
		}
	}
	if len(a.Options) == 0 || !found {
		t.Errorf("%d options, none saying the scratch fits", len(a.Options))
	}
	// Without the ask, h100.1x is an option again.
	w.ScratchGiB = 0
	if e := excluded(mustAdvise(t, w, m, cat), "h100.1x"); e != nil {
		t.Errorf("h100.1x without scratch: excluded %+v", e)
	}
}

func TestAvailability(t *testing.T) {
	cat := catalog.Default()
	m := &MarketView{Source: "test", Offerings: map[string]Quote{
		"t4.shared.0.5":    {OnDemand: money.MustParse("0.10"), Availability: &Availability{Hosts: 0}},
		"l4.shared.0.5":    {OnDemand: money.MustParse("0.20"), Availability: &Availability{Hosts: 3, FitsNow: 0}},
		"a10.shared.0.5":   {OnDemand: money.MustParse("0.30"), Availability: &Availability{Hosts: 3, FitsNow: 1}},
		"l40s.shared.0.25": {OnDemand: money.MustParse("0.40")},
	}}
	a := mustAdvise(t, inference(7_000_000_000, INT8), m, cat)
	if e := excluded(a, "t4.shared.0.5"); e == nil || e.Dimension != DimAvailability || !strings.Contains(e.Reason, "no host") {
		t.Errorf("t4.shared.0.5: %+v", e)
	}
	if e := excluded(a, "h100.1x"); e == nil || e.Dimension != DimPricing {
		t.Errorf("h100.1x, not in the market: %+v", e)
	}
	// Fitting (or unknown) first, by cost; then the one that would wait.
	var got []string
	for _, o := range a.Options {
		if o.Mix == OnDemand {
			got = append(got, o.Offering+" "+string(o.FitsNow))
		}
	}
	want := []string{"a10.shared.0.5 yes", "l40s.shared.0.25 unknown", "l4.shared.0.5 no"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order %q, want %q", got, want)
	}

	// A job of more whole hosts than the fleet could ever hold.
	m = &MarketView{Source: "test", Offerings: map[string]Quote{
		"h100.8x": {OnDemand: money.MustParse("20"), Availability: &Availability{Hosts: 2, FitsNow: 2}},
	}}
	a = mustAdvise(t, training(70_000_000_000, 3), m, cat)
	if e := excluded(a, "h100.8x"); e == nil || e.Dimension != DimAvailability || !strings.Contains(e.Reason, "needs 3 whole hosts") {
		t.Errorf("h100.8x for 3 nodes on 2 hosts: %+v", e)
	}
}

func TestEstimate(t *testing.T) {
	for _, tc := range []struct {
		w            Workload
		mib, ckptGiB int64
		rule         string
		large        bool
		perNodeMiB   int64
	}{
		// 7e9 × 2 × 1.2 = 16.8e9 bytes = 16021.7 MiB.
		{inference(7_000_000_000, FP16), 16022, 14, "7B × 2 bytes (fp16) × 1.2", false, 16022},
		{inference(7_000_000_000, INT4), 4006, 4, "7B × 0.5 bytes (int4)", false, 4006},
		{inference(70_000_000_000, FP32), 320435, 261, "70B × 4 bytes (fp32)", true, 320435},
		// 7e9 × 16 × 1.2 = 134.4e9 bytes; checkpoints 2 × 84e9 bytes.
		{training(7_000_000_000, 1), 128174, 157, "7B × 16 bytes", true, 128174},
		{training(70_000_000_000, 2), 1281739, 1565, "70B × 16 bytes", true, 640870},
		{Workload{MemoryMiB: 12 * 1024, Precision: FP16, Task: Inference, Nodes: 1, PerDay: time.Hour, Days: 1}, 12 * 1024, 10, "given: 12 GiB", false, 12 * 1024},
		{Workload{MemoryMiB: 48 * 1024, Precision: BF16, Task: Training, Nodes: 1, PerDay: time.Hour, Days: 1}, 48 * 1024, 60, "given: 48 GiB", true, 48 * 1024},
	} {
		n := Estimate(&tc.w)
		if n.MemoryMiB != tc.mib || n.CheckpointGiB != tc.ckptGiB || !strings.HasPrefix(n.MemoryRule, tc.rule) ||
			n.Large != tc.large || n.PerNodeMiB != tc.perNodeMiB {
			t.Errorf("Estimate(%+v) = %+v; want %d MiB, %d GiB checkpoint, rule %q, large %v", tc.w, n, tc.mib, tc.ckptGiB, tc.rule, tc.large)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := inference(7_000_000_000, FP16)
	for _, tc := range []struct {
		field string
		mod   func(*Workload)
	}{
		{FieldParams, func(w *Workload) { w.Params = 0 }},
		{FieldParams, func(w *Workload) { w.Params = -1 }},
		{FieldParams, func(w *Workload) { w.Params = MaxParams + 1 }},
		{FieldMemoryMiB, func(w *Workload) { w.MemoryMiB = -5 }},
		{FieldPrecision, func(w *Workload) { w.Precision = "" }},
		{FieldPrecision, func(w *Workload) { w.Precision = "fp64" }},
		{FieldPrecision, func(w *Workload) { w.Task, w.Precision = Training, INT8 }},
		{FieldTask, func(w *Workload) { w.Task = "" }},
		{FieldNodes, func(w *Workload) { w.Nodes = 0 }},
		{FieldNodes, func(w *Workload) { w.Nodes = MaxNodes + 1 }},
		{FieldPerDay, func(w *Workload) { w.PerDay = 0 }},
		{FieldPerDay, func(w *Workload) { w.PerDay = 25 * time.Hour }},
		{FieldPerDay, func(w *Workload) { w.PerDay = time.Hour + time.Millisecond }},
		{FieldDays, func(w *Workload) { w.Days = 0 }},
		{FieldDays, func(w *Workload) { w.Days = MaxDays + 1 }},
		{FieldCheckpointInterval, func(w *Workload) { w.CheckpointInterval = -time.Minute }},
		{FieldCheckpointInterval, func(w *Workload) { w.CheckpointInterval = 8 * 24 * time.Hour }},
		{FieldDeadline, func(w *Workload) { w.Deadline = -time.Hour }},
		{FieldBudget, func(w *Workload) { w.Budget = -1 }},
		{FieldScratchGiB, func(w *Workload) { w.ScratchGiB = -1 }},
		{FieldScratchGiB, func(w *Workload) { w.ScratchGiB = MaxScratchGiB + 1 }},
	} {
		w := ok
		tc.mod(&w)
		_, err := Advise(w, &MarketView{}, catalog.Default())
		var ce *cloud.Error
		if !errors.As(err, &ce) || ce.Code != cloud.Invalid || ce.Details["field"] != tc.field || !strings.HasPrefix(ce.Message, tc.field+": ") {
			t.Errorf("%+v: error %v, want invalid_argument on %s", w, err, tc.field)
		}
	}
	// Every problem is reported.
	err := (&Workload{}).Validate()
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		fields = append(fields, e.(*cloud.Error).Details["field"].(string))
	}
	if want := []string{FieldParams, FieldPrecision, FieldTask, FieldNodes, FieldPerDay, FieldDays}; !reflect.DeepEqual(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	if _, err := Advise(ok, nil, catalog.Default()); err == nil {
		t.Error("no error without a market")
	}
	for _, m := range []*MarketView{
		{VolumePerGiBMonth: -1},
		{Offerings: map[string]Quote{"t4.1x": {OnDemand: -1}}},
		{Offerings: map[string]Quote{"t4.1x": {OnDemand: 1, Spot: []SpotQuote{{Zone: "a", Price: -1}}}}},
		{Offerings: map[string]Quote{"t4.1x": {OnDemand: 1, Spot: []SpotQuote{{Zone: "a", Price: 1, ReclaimRateBP: -1}}}}},
	} {
		if _, err := Advise(ok, m, catalog.Default()); err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("market %+v: error %v", m, err)
		}
	}
}

func TestParseParams(t *testing.T) {
	for in, want := range map[string]int64{
		"7B": 7_000_000_000, "7b": 7_000_000_000, "70B": 70_000_000_000, "1.5B": 1_500_000_000, "350M": 350_000_000,
		"1T": 1_000_000_000_000, "13k": 13_000, "42": 42, " 7 B ": 7_000_000_000, ".5B": 500_000_000, "7G": 7_000_000_000,
		"100T": MaxParams, "1.000000001B": 1_000_000_001,
	} {
		if got, err := ParseParams(in); err != nil || got != want {
			t.Errorf("ParseParams(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "B", "7X", "-7B", "7.B.", "1.5", "0", "0B", "101T", "1e9", "7BB", "1.0000000001B"} {
		if got, err := ParseParams(in); err == nil {
			t.Errorf("ParseParams(%q) = %d, want an error", in, got)
		}
	}
	for n, want := range map[int64]string{7_000_000_000: "7B", 1_500_000_000: "1.5B", 350_000_000: "350M", 42: "42", 1_230_000_000_000: "1.23T"} {
		if got := FormatParams(n); got != want {
			t.Errorf("FormatParams(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParsePrecisionAndTask(t *testing.T) {
	for in, want := range map[string]Precision{"BF16": BF16, "bfloat16": BF16, "half": FP16, "int4": INT4, "fp8": FP8, "float32": FP32} {
		if got, err := ParsePrecision(in); err != nil || got != want {
			t.Errorf("ParsePrecision(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParsePrecision("fp64"); err == nil || !strings.Contains(err.Error(), "fp32, tf32, bf16, fp16, fp8, int8, int4") {
		t.Errorf("ParsePrecision(fp64): %v", err)
	}
	for in, want := range map[string]Task{"train": Training, "Training": Training, "inference": Inference, "serve": Inference} {
		if got, err := ParseTask(in); err != nil || got != want {
			t.Errorf("ParseTask(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseTask("eval"); err == nil {
		t.Error("ParseTask(eval): no error")
	}
}

func TestFormatting(t *testing.T) {
	for s, want := range map[int64]string{0: "0 min", 2700: "45 min", 16200: "4.5 h", 86400: "1 day", 30 * 86400: "30 days", 2*86400 + 4*3600: "2 days 4 h"} {
		if got := Duration(s); got != want {
			t.Errorf("Duration(%d) = %q, want %q", s, got, want)
		}
	}
	for mib, want := range map[int64]string{16384: "16 GiB", 16022: "15.7 GiB", 1: "0.1 GiB"} {
		if got := GiBString(mib); got != want {
			t.Errorf("GiBString(%d) = %q, want %q", mib, got, want)
		}
	}
}

func TestWorkloadJSON(t *testing.T) {
	w := training(7_000_000_000, 2)
	w.Deadline, w.Budget = 40*24*time.Hour, money.MustParse("1234.5")
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"params":7000000000,"precision":"bf16","task":"training","nodes":2,"days":30,"budget":"1234.50",` +
		`"per_day_seconds":86400,"checkpoint_interval_seconds":1800,"deadline_seconds":3456000}`
	if string(b) != want {
		t.Errorf("JSON %s\nwant %s", b, want)
	}
	var back Workload
	if err := json.Unmarshal(b, &back); err != nil || back != w {
		t.Errorf("round trip %+v, %v; want %+v", back, err, w)
	}
}

func TestListMarket(t *testing.T) {
	m, cat := listMarket(t)
	if m.Live || m.Source != "list prices" || m.VolumePerGiBMonth != money.MustParse("0.08") || len(m.Offerings) != len(cat.Offerings()) {
		t.Errorf("market %+v", m)
	}
	q := m.Offerings["h100.1x"]
	want := Quote{OnDemand: money.MustParse("2.49"), Spot: []SpotQuote{{Price: money.MustParse("0.996"), ReclaimRateBP: 500, Assumed: true}}}
	if !reflect.DeepEqual(q, want) {
		t.Errorf("h100.1x %+v, want %+v", q, want)
	}
}

// LiveMarket takes the every-zone price or the cheapest zone's, the
// availability when known, and the pools that have a price.
func TestLiveMarket(t *testing.T) {
	price := func(kind cloud.PriceKind, offering, zone, amount string) *cloud.Price {
		return &cloud.Price{Kind: kind, Offering: offering, Zone: zone, Amount: money.MustParse(amount)}
	}
	l := Live{
		Source:    "live from http://x",
		Offerings: []string{"h100.1x", "t4.1x", "l4.1x", "a10.1x"},
		Prices: []*cloud.Price{
			price(cloud.PriceCompute, "h100.1x", "z2", "2.60"), price(cloud.PriceCompute, "h100.1x", "", "2.50"),
			price(cloud.PriceCompute, "t4.1x", "z2", "0.40"), price(cloud.PriceCompute, "t4.1x", "z1", "0.30"),
			price(cloud.PriceCompute, "l4.1x", "", "0.50"), price(cloud.PriceVolume, "", "", "0.12"),
			price(cloud.PriceVolume, "", "z1", "0.01"), price(cloud.PriceAddress, "", "", "0.005"), nil,
		},
		Availability: map[string]cloud.OfferingAvailability{"h100.1x": {Hosts: 2, FitsNow: 1}, "t4.1x": {Hosts: 0}},
		Pools: []LivePool{
			{Pool: cloud.Pool{Offering: "h100.1x", Zone: "z2"}, Price: money.MustParse("1.10"), ReclaimRateBP: 300, SpotSeconds: 3600},
			{Pool: cloud.Pool{Offering: "h100.1x", Zone: "z1"}, Price: money.MustParse("1.00")},
			{Pool: cloud.Pool{Offering: "l4.1x", Zone: "z1"}},
		},
	}
	m := LiveMarket(l)
	if m.Source != l.Source || !m.Live || m.VolumePerGiBMonth != money.MustParse("0.12") {
		t.Errorf("market %+v", m)
	}
	h := m.Offerings["h100.1x"]
	want := Quote{OnDemand: money.MustParse("2.50"), Availability: &Availability{Hosts: 2, FitsNow: 1}, Spot: []SpotQuote{
		{Zone: "z1", Price: money.MustParse("1.00")},
		{Zone: "z2", Price: money.MustParse("1.10"), ReclaimRateBP: 300, RateKnown: true}}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("h100.1x %+v, want %+v", h, want)
	}
	if q := m.Offerings["t4.1x"]; q.OnDemand != money.MustParse("0.30") || q.Zone != "z1" || q.Availability == nil || q.Availability.Hosts != 0 {
		t.Errorf("t4.1x %+v", q)
	}
	if q := m.Offerings["l4.1x"]; q.Availability != nil || len(q.Spot) != 0 {
		t.Errorf("l4.1x %+v", q)
	}
	if _, ok := m.Offerings["a10.1x"]; ok {
		t.Error("a10.1x has no price, yet is in the market")
	}
	if m := LiveMarket(Live{}); m.VolumePerGiBMonth != money.MustParse("0.08") {
		t.Errorf("without a volume price: %s", m.VolumePerGiBMonth)
	}

	// The advice over it: t4.1x can never run, a10.1x is not sold,
	// h100.1x fits now, l4.1x may; the on-demand price of a zone only
	// says its zone.
	a := mustAdvise(t, Workload{Params: 1_000_000_000, Precision: FP16, Task: Inference, Nodes: 1, PerDay: time.Hour, Days: 1}, m, catalog.Default())
	fits := map[string]Fit{}
	for _, o := range a.Options {
		fits[o.Offering] = o.FitsNow
	}
	if fits["h100.1x"] != FitsYes || fits["l4.1x"] != FitsUnknown || fits["t4.1x"] != "" || fits["a10.1x"] != "" {
		t.Errorf("fits %v", fits)
	}
	if e := excluded(a, "a10.1x"); e == nil || e.Dimension != DimPricing {
		t.Errorf("a10.1x: %+v", e)
	}
}
