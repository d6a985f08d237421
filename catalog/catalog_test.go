package catalog

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestModelNotFound(t *testing.T) {
	_, err := Default().Model("X100")
	var nf *NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("Model(X100) error = %v, want *NotFoundError", err)
	}
	if nf.Kind != "gpu model" || nf.Name != "X100" {
		t.Errorf("NotFoundError = %+v", nf)
	}
	const prefix = `unknown gpu model "X100" (known: A10, A100-40GB-PCIE, A100-40GB-SXM, `
	if !strings.HasPrefix(err.Error(), prefix) || !strings.HasSuffix(err.Error(), ", ...)") {
		t.Errorf("error = %q, want prefix %q and a truncated list", err, prefix)
	}
	if !IsNotFound(err) || IsNotFound(errors.New("x")) || IsNotFound(nil) {
		t.Error("IsNotFound misclassifies")
	}
	if !IsNotFound(errors.Join(errors.New("ctx"), err)) {
		t.Error("IsNotFound does not see a wrapped *NotFoundError")
	}
}

func TestOfferingLookup(t *testing.T) {
	c := Default()
	o, err := c.Offering("H100.MIG.3g.40GB")
	if err != nil || o.Name != "h100.mig.3g.40gb" {
		t.Fatalf("Offering case-insensitive = %v, %v", o, err)
	}
	_, err = c.Offering("h100.16x")
	if !IsNotFound(err) {
		t.Fatalf("Offering(h100.16x) error = %v, want not found", err)
	}
	// The most similar names come first, so the user sees h100 offerings.
	if !strings.HasPrefix(err.Error(), `unknown offering "h100.16x" (known: h100.1x, h100.2x, `) {
		t.Errorf("error = %q", err)
	}
}

func TestSorted(t *testing.T) {
	c := Default()
	var names []string
	for _, m := range c.Models() {
		names = append(names, m.Name)
	}
	if !slices.IsSorted(names) || names[0] != "A10" {
		t.Errorf("Models() not sorted: %v", names)
	}
	names = nil
	for _, o := range c.Offerings() {
		names = append(names, o.Name)
	}
	if !slices.IsSorted(names) || len(names) == 0 {
		t.Errorf("Offerings() not sorted: %v", names)
	}
	// The returned slice is the caller's: reordering it must not reorder
	// the catalog.
	ms := c.Models()
	ms[0], ms[1] = ms[1], ms[0]
	if c.Models()[0].Name != "A10" {
		t.Error("Models() returns the catalog's own slice")
	}
}

func TestBuiltinOfferings(t *testing.T) {
	c := Default()
	for _, o := range c.Offerings() {
		if err := c.ValidateOffering(o); err != nil {
			t.Errorf("built-in offering invalid: %v", err)
		}
		if o.Description == "" {
			t.Errorf("built-in offering %s has no description", o.Name)
		}
	}
	want := []Offering{
		{Name: "h100.metal", Mode: ModeMetal, Model: "H100-80GB-SXM", GPUs: 8, VCPUs: 192, MemoryMiB: 1966080, InstanceStoreGiB: 7680},
		{Name: "h100.1x", Mode: ModeGPU, Model: "H100-80GB-SXM", GPUs: 1, VCPUs: 24, MemoryMiB: 245760, InstanceStoreGiB: 960},
		{Name: "h100.2x", Mode: ModeGPU, Model: "H100-80GB-SXM", GPUs: 2, VCPUs: 48, MemoryMiB: 491520, InstanceStoreGiB: 1920},
		{Name: "h100.4x", Mode: ModeGPU, Model: "H100-80GB-SXM", GPUs: 4, VCPUs: 96, MemoryMiB: 983040, InstanceStoreGiB: 3840},
		{Name: "h100.8x", Mode: ModeGPU, Model: "H100-80GB-SXM", GPUs: 8, VCPUs: 192, MemoryMiB: 1966080, InstanceStoreGiB: 7680},
		// MIG slices get round(24*c/7) vCPU and round(240*c/7) GiB.
		{Name: "h100.mig.1g.10gb", Mode: ModeMIG, Model: "H100-80GB-SXM", MIGProfile: "1g.10gb", VCPUs: 3, MemoryMiB: 34 * 1024, InstanceStoreGiB: 137},
		{Name: "h100.mig.2g.20gb", Mode: ModeMIG, Model: "H100-80GB-SXM", MIGProfile: "2g.20gb", VCPUs: 7, MemoryMiB: 69 * 1024, InstanceStoreGiB: 274},
		{Name: "h100.mig.3g.40gb", Mode: ModeMIG, Model: "H100-80GB-SXM", MIGProfile: "3g.40gb", VCPUs: 10, MemoryMiB: 103 * 1024, InstanceStoreGiB: 411},
		{Name: "h100.mig.4g.40gb", Mode: ModeMIG, Model: "H100-80GB-SXM", MIGProfile: "4g.40gb", VCPUs: 14, MemoryMiB: 137 * 1024, InstanceStoreGiB: 549},
		{Name: "h100.mig.7g.80gb", Mode: ModeMIG, Model: "H100-80GB-SXM", MIGProfile: "7g.80gb", VCPUs: 24, MemoryMiB: 240 * 1024, InstanceStoreGiB: 960},
		{Name: "a100.metal", Mode: ModeMetal, Model: "A100-80GB-SXM", GPUs: 8, VCPUs: 128, MemoryMiB: 1280 * 1024, InstanceStoreGiB: 4000},
		{Name: "a100.mig.3g.40gb", Mode: ModeMIG, Model: "A100-80GB-SXM", MIGProfile: "3g.40gb", VCPUs: 7, MemoryMiB: 69 * 1024, InstanceStoreGiB: 214},
		{Name: "h200.1x", Mode: ModeGPU, Model: "H200-141GB", GPUs: 1, VCPUs: 24, MemoryMiB: 320 * 1024, InstanceStoreGiB: 960},
		{Name: "h200.mig.7g.141gb", Mode: ModeMIG, Model: "H200-141GB", MIGProfile: "7g.141gb", VCPUs: 24, MemoryMiB: 320 * 1024, InstanceStoreGiB: 960},
		{Name: "h200.mig.1g.18gb", Mode: ModeMIG, Model: "H200-141GB", MIGProfile: "1g.18gb", VCPUs: 3, MemoryMiB: 46 * 1024, InstanceStoreGiB: 137},
		{Name: "l40s.1x", Mode: ModeGPU, Model: "L40S", GPUs: 1, VCPUs: 16, MemoryMiB: 96 * 1024, InstanceStoreGiB: 400},
		{Name: "l40s.2x", Mode: ModeGPU, Model: "L40S", GPUs: 2, VCPUs: 32, MemoryMiB: 192 * 1024, InstanceStoreGiB: 800},
		{Name: "l40s.shared.0.25", Mode: ModeShared, Model: "L40S", ShareMilli: 250, ShareMemoryMiB: 12288, VCPUs: 4, MemoryMiB: 24 * 1024, InstanceStoreGiB: 100},
		{Name: "l40s.shared.0.5", Mode: ModeShared, Model: "L40S", ShareMilli: 500, ShareMemoryMiB: 24576, VCPUs: 8, MemoryMiB: 48 * 1024, InstanceStoreGiB: 200},
		{Name: "l4.1x", Mode: ModeGPU, Model: "L4", GPUs: 1, VCPUs: 8, MemoryMiB: 32 * 1024, InstanceStoreGiB: 200},
		{Name: "l4.shared.0.25", Mode: ModeShared, Model: "L4", ShareMilli: 250, ShareMemoryMiB: 6144, VCPUs: 2, MemoryMiB: 8 * 1024, InstanceStoreGiB: 50},
		{Name: "t4.1x", Mode: ModeGPU, Model: "T4", GPUs: 1, VCPUs: 4, MemoryMiB: 16 * 1024, InstanceStoreGiB: 100},
		{Name: "t4.shared.0.25", Mode: ModeShared, Model: "T4", ShareMilli: 250, ShareMemoryMiB: 4096, VCPUs: 1, MemoryMiB: 4 * 1024, InstanceStoreGiB: 25},
		{Name: "a10.1x", Mode: ModeGPU, Model: "A10", GPUs: 1, VCPUs: 8, MemoryMiB: 32 * 1024, InstanceStoreGiB: 200},
		{Name: "a10.shared.0.5", Mode: ModeShared, Model: "A10", ShareMilli: 500, ShareMemoryMiB: 12288, VCPUs: 4, MemoryMiB: 16 * 1024, InstanceStoreGiB: 100},
	}
	for _, w := range want {
		got, err := c.Offering(w.Name)
		if err != nil {
			t.Errorf("missing built-in offering: %v", err)
			continue
		}
		g := *got
		g.Description = ""
		if g != w {
			t.Errorf("offering %s:\n got %+v\nwant %+v", w.Name, g, w)
		}
	}
}

func TestValidateOffering(t *testing.T) {
	c := Default()
	valid := map[Mode]Offering{
		ModeMetal:  {Name: "x", Mode: ModeMetal, Model: "H100", GPUs: 8, VCPUs: 1, MemoryMiB: 1},
		ModeGPU:    {Name: "x", Mode: ModeGPU, Model: "h100", GPUs: 2, VCPUs: 1, MemoryMiB: 1},
		ModeMIG:    {Name: "x", Mode: ModeMIG, Model: "H100-80GB-SXM", MIGProfile: "3g.40gb", VCPUs: 1, MemoryMiB: 1},
		ModeShared: {Name: "x", Mode: ModeShared, Model: "L40S", ShareMilli: 250, ShareMemoryMiB: 12288, VCPUs: 1, MemoryMiB: 1},
		ModeCPU:    {Name: "x", Mode: ModeCPU, VCPUs: 4, MemoryMiB: 1024},
	}
	for mode, o := range valid {
		if err := c.ValidateOffering(&o); err != nil {
			t.Errorf("valid %s offering rejected: %v", mode, err)
		}
	}
	// Any mode may come with an instance store, up to the maximum.
	for mode, o := range valid {
		for _, gib := range []int{1, MaxInstanceStoreGiB} {
			o.InstanceStoreGiB = gib
			if err := c.ValidateOffering(&o); err != nil {
				t.Errorf("%s offering with a %d GiB instance store rejected: %v", mode, gib, err)
			}
		}
	}
	// A metal offering may leave the model and GPU count open.
	if err := c.ValidateOffering(&Offering{Name: "any.metal", Mode: ModeMetal}); err != nil {
		t.Errorf("metal without model rejected: %v", err)
	}

	cases := []struct {
		name  string
		base  Mode
		edit  func(o *Offering)
		field string
		has   string
	}{
		{"empty name", ModeGPU, func(o *Offering) { o.Name = "" }, "name", "must not be empty"},
		{"upper-case name", ModeGPU, func(o *Offering) { o.Name = "H100.1x" }, "name", "must match"},
		{"name starting with dot", ModeGPU, func(o *Offering) { o.Name = ".x" }, "name", "must match"},
		{"name with slash", ModeGPU, func(o *Offering) { o.Name = "a/b" }, "name", "must match"},
		{"empty mode", ModeGPU, func(o *Offering) { o.Mode = "" }, "mode", "must be set"},
		{"unknown mode", ModeGPU, func(o *Offering) { o.Mode = "vgpu" }, "mode", `unknown mode "vgpu"`},
		{"unknown model", ModeGPU, func(o *Offering) { o.Model = "X100" }, "model", `unknown gpu model "X100"`},
		{"gpu without model", ModeGPU, func(o *Offering) { o.Model = "" }, "model", "required for gpu mode"},
		{"gpu zero gpus", ModeGPU, func(o *Offering) { o.GPUs = 0 }, "gpus", "must be 1..8 for gpu mode, got 0"},
		{"gpu nine gpus", ModeGPU, func(o *Offering) { o.GPUs = 9 }, "gpus", "must be 1..8 for gpu mode, got 9"},
		{"gpu negative gpus", ModeGPU, func(o *Offering) { o.GPUs = -1 }, "gpus", "got -1"},
		{"gpu with mig profile", ModeGPU, func(o *Offering) { o.MIGProfile = "3g.40gb" }, "mig_profile", "only allowed in mig mode"},
		{"gpu with share", ModeGPU, func(o *Offering) { o.ShareMilli = 500 }, "share_milli", "only allowed in shared mode"},
		{"negative vcpus", ModeGPU, func(o *Offering) { o.VCPUs = -1 }, "vcpus", "must not be negative"},
		{"negative memory", ModeGPU, func(o *Offering) { o.MemoryMiB = -1 }, "memory_mib", "must not be negative"},
		{"negative instance store", ModeGPU, func(o *Offering) { o.InstanceStoreGiB = -1 }, "instance_store_gib", "must be 0 (none) to 15360 GiB (15 TiB), got -1"},
		{"instance store past 15 TiB", ModeMetal, func(o *Offering) { o.InstanceStoreGiB = MaxInstanceStoreGiB + 1 }, "instance_store_gib", "got 15361"},
		{"cpu instance store past 15 TiB", ModeCPU, func(o *Offering) { o.InstanceStoreGiB = 1 << 30 }, "instance_store_gib", "must be 0 (none) to 15360"},
		{"mig on model without MIG", ModeMIG, func(o *Offering) { o.Model = "L40S" }, "model", `gpu model "L40S" does not support MIG`},
		{"mig without profile", ModeMIG, func(o *Offering) { o.MIGProfile = "" }, "mig_profile", "required for mig mode (valid for H100-80GB-SXM: 1g.10gb, 1g.10gb+me"},
		{"mig profile of another model", ModeMIG, func(o *Offering) { o.MIGProfile = "3g.20gb" }, "mig_profile",
			`"3g.20gb" is not a MIG profile of H100-80GB-SXM (valid: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)`},
		{"mig short profile", ModeMIG, func(o *Offering) { o.MIGProfile = "3g" }, "mig_profile", `did you mean "3g.40gb"?`},
		{"mig profile id", ModeMIG, func(o *Offering) { o.MIGProfile = "9" }, "mig_profile", `did you mean "3g.40gb"?`},
		{"mig with gpus", ModeMIG, func(o *Offering) { o.GPUs = 1 }, "gpus", "must be 0 for mig mode"},
		{"mig with share", ModeMIG, func(o *Offering) { o.ShareMemoryMiB = 1 }, "share_memory_mib", "only allowed in shared mode"},
		{"shared zero milli", ModeShared, func(o *Offering) { o.ShareMilli = 0 }, "share_milli", "fraction out of range: 0"},
		{"shared whole gpu", ModeShared, func(o *Offering) { o.ShareMilli = 1000 }, "share_milli", "fraction out of range: 1000"},
		{"shared negative milli", ModeShared, func(o *Offering) { o.ShareMilli = -5 }, "share_milli", "fraction out of range"},
		{"shared no memory", ModeShared, func(o *Offering) { o.ShareMemoryMiB = 0 }, "share_memory_mib", "must be positive"},
		{"shared negative memory", ModeShared, func(o *Offering) { o.ShareMemoryMiB = -1 }, "share_memory_mib", "must be positive"},
		{"shared memory above model", ModeShared, func(o *Offering) { o.ShareMemoryMiB = 49153 }, "share_memory_mib", "49153 MiB exceeds the 49152 MiB of one L40S"},
		{"shared with gpus", ModeShared, func(o *Offering) { o.GPUs = 1 }, "gpus", "must be 0 for shared mode"},
		{"shared with mig profile", ModeShared, func(o *Offering) { o.MIGProfile = "1g.10gb" }, "mig_profile", "only allowed in mig mode, not shared"},
		{"shared without model", ModeShared, func(o *Offering) { o.Model = "" }, "model", "required for shared mode"},
		{"metal with mig profile", ModeMetal, func(o *Offering) { o.MIGProfile = "3g.40gb" }, "mig_profile", "only allowed in mig mode, not metal"},
		{"metal with share milli", ModeMetal, func(o *Offering) { o.ShareMilli = 500 }, "share_milli", "only allowed in shared mode, not metal"},
		{"metal with share memory", ModeMetal, func(o *Offering) { o.ShareMemoryMiB = 1024 }, "share_memory_mib", "only allowed in shared mode, not metal"},
		{"metal nine gpus", ModeMetal, func(o *Offering) { o.GPUs = 9 }, "gpus", "must be 0 (any host) or 1..8 for metal mode"},
		{"metal unknown model", ModeMetal, func(o *Offering) { o.Model = "B200" }, "model", `unknown gpu model "B200"`},
		{"cpu with model", ModeCPU, func(o *Offering) { o.Model = "T4" }, "model", "must be empty for cpu mode"},
		{"cpu with gpus", ModeCPU, func(o *Offering) { o.GPUs = 1 }, "gpus", "must be 0 for cpu mode"},
		{"cpu without vcpus", ModeCPU, func(o *Offering) { o.VCPUs = 0 }, "vcpus", "at least 1"},
	}
	for _, tc := range cases {
		o := valid[tc.base]
		o.Name = "bad.offering"
		tc.edit(&o)
		err := c.ValidateOffering(&o)
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: error = %v, want *ValidationError", tc.name, err)
			continue
		}
		if ve.Field != tc.field || !strings.Contains(ve.Message, tc.has) {
			t.Errorf("%s: got field %q message %q; want field %q containing %q", tc.name, ve.Field, ve.Message, tc.field, tc.has)
		}
		want := `offering "` + o.Name + `": ` + tc.field + ": "
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: Error() = %q, want prefix %q", tc.name, err, want)
		}
	}
	if err := c.ValidateOffering(nil); err == nil {
		t.Error("ValidateOffering(nil) = nil")
	}
}

func TestValidationErrorFormat(t *testing.T) {
	cases := []struct {
		err  ValidationError
		want string
	}{
		{ValidationError{Name: "a.1x", Field: "gpus", Message: "bad"}, `offering "a.1x": gpus: bad`},
		{ValidationError{Kind: "model", Name: "X", Field: "memory_mib", Message: "bad"}, `model "X": memory_mib: bad`},
		{ValidationError{Kind: "model", Name: "X", Message: "bad"}, `model "X": bad`},
	}
	for _, tc := range cases {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestNew(t *testing.T) {
	models := []Model{
		{Name: "Card-A", Aliases: []string{"a"}, MemoryMiB: 1024},
		{Name: "Card-B", MemoryMiB: 2048},
	}
	offerings := []Offering{{Name: "b.1x", Mode: ModeGPU, Model: "card-b", GPUs: 1}}
	c, err := New(models, offerings)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := c.CanonicalModel("A"); got != "Card-A" {
		t.Errorf("alias a -> %q", got)
	}
	// New copies its inputs.
	models[0].Aliases[0] = "zzz"
	offerings[0].GPUs = 99
	if _, err := c.Model("a"); err != nil {
		t.Error("New kept a reference to the caller's alias slice")
	}
	if o, _ := c.Offering("b.1x"); o.GPUs != 1 {
		t.Error("New kept a reference to the caller's offering")
	}

	bad := []struct {
		name      string
		models    []Model
		offerings []Offering
		has       []string
	}{
		{"duplicate model name", []Model{{Name: "A", MemoryMiB: 1}, {Name: "a", MemoryMiB: 1}}, nil,
			[]string{`model "a": name: "a" is already the name of gpu model "A"`}},
		{"alias clashes with name", []Model{{Name: "A", MemoryMiB: 1}, {Name: "B", Aliases: []string{"A"}, MemoryMiB: 1}}, nil,
			[]string{`model "B": aliases[0]: "A" is already the name of gpu model "A"`}},
		{"name clashes with alias", []Model{{Name: "A", Aliases: []string{"x"}, MemoryMiB: 1}, {Name: "X", MemoryMiB: 1}}, nil,
			[]string{`model "X": name: "X" is already an alias of gpu model "A"`}},
		{"alias repeats own name", []Model{{Name: "A", Aliases: []string{"a"}, MemoryMiB: 1}}, nil,
			[]string{`model "A": aliases[0]: "a" repeats`}},
		{"no memory", []Model{{Name: "A"}}, nil, []string{`model "A": memory_mib: must be positive`}},
		{"negative nvlink", []Model{{Name: "A", MemoryMiB: 1, NVLinkGBps: -1}}, nil, []string{"nvlink_gbps"}},
		{"model name with space", []Model{{Name: "my card", MemoryMiB: 1}}, nil, []string{`model "my card": name: must match`}},
		{"duplicate offering", []Model{{Name: "A", MemoryMiB: 1}},
			[]Offering{{Name: "a.1x", Mode: ModeGPU, Model: "A", GPUs: 1}, {Name: "a.1x", Mode: ModeGPU, Model: "A", GPUs: 2}},
			[]string{`offering "a.1x": name: duplicate offering name`}},
		{"all errors reported", []Model{{Name: "A"}, {Name: "B"}}, nil,
			[]string{`model "A": memory_mib`, `model "B": memory_mib`}},
	}
	for _, tc := range bad {
		_, err := New(tc.models, tc.offerings)
		if err == nil {
			t.Errorf("%s: New succeeded", tc.name)
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: error %v wraps no *ValidationError", tc.name, err)
		}
		for _, s := range tc.has {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, s)
			}
		}
	}
}
