package catalog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const customFile = `# An operator's catalog that adds one card.
models:
  - name: MI300X-like-custom
    memory_mib: 196608
    nvlink_gbps: 0
    pci_device_id: 0x74a1
    aliases: [mycard]
offerings:
  - name: custom.1x
    mode: gpu
    model: MI300X-like-custom
    gpus: 1
    vcpus: 16
    memory_mib: 131072
    instance_store_gib: 1800
`

func TestLoadExtends(t *testing.T) {
	c, err := Load(strings.NewReader(customFile), "custom.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Model("MyCard")
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "MI300X-like-custom" || m.MemoryMiB != 196608 || m.PCIDeviceID != 0x74A1 {
		t.Errorf("custom model = %+v", m)
	}
	o, err := c.Offering("custom.1x")
	if err != nil || o.GPUs != 1 || o.VCPUs != 16 || o.MemoryMiB != 131072 || o.Mode != ModeGPU || o.InstanceStoreGiB != 1800 {
		t.Errorf("custom offering = %+v, %v", o, err)
	}
	// The built-ins are still there.
	if _, err := c.Model("V100M16"); err != nil {
		t.Error(err)
	}
	if _, err := c.Offering("h100.mig.3g.40gb"); err != nil {
		t.Error(err)
	}
	if got, want := len(c.Models()), len(Default().Models())+1; got != want {
		t.Errorf("%d models, want %d", got, want)
	}
}

func TestLoadReplaceBuiltin(t *testing.T) {
	c, err := Load(strings.NewReader(customFile+"replace_builtin: true\n"), "custom.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Models()); n != 1 {
		t.Errorf("%d models, want only the file's 1", n)
	}
	if n := len(c.Offerings()); n != 1 {
		t.Errorf("%d offerings, want only the file's 1", n)
	}
	if _, err := c.Model("H100"); !IsNotFound(err) {
		t.Errorf("H100 still known after replace_builtin: %v", err)
	}
}

func TestLoadEmpty(t *testing.T) {
	for _, in := range []string{"", "# nothing yet\n", "models: []\n"} {
		c, err := Load(strings.NewReader(in), "empty.yaml")
		if err != nil {
			t.Errorf("Load(%q): %v", in, err)
			continue
		}
		if len(c.Models()) != len(Default().Models()) || len(c.Offerings()) != len(Default().Offerings()) {
			t.Errorf("Load(%q) changed the built-in catalog", in)
		}
	}
}

func TestLoadOverrideBuiltin(t *testing.T) {
	// The H100 override keeps the MIG table but lists a smaller one, which
	// still contains every profile the built-in h100.mig.* offerings use, and
	// changes the PCI id and aliases.
	const in = `models:
  - name: h100-80gb-sxm
    memory_mib: 81920
    nvlink_gbps: 450
    pci_device_id: 0x2324
    aliases: [H100, hopper]
    mig_profiles:
      - {id: 19, name: 1g.10gb, compute_slices: 1, memory_slots: 1, max_per_gpu: 7, starts: [0, 1, 2, 3, 4, 5, 6], memory_mib: 10240}
      - {id: 14, name: 2g.20gb, compute_slices: 2, memory_slots: 2, max_per_gpu: 3, starts: [0, 2, 4], memory_mib: 20480}
      - {id: 9, name: 3g.40gb, compute_slices: 3, memory_slots: 4, max_per_gpu: 2, starts: [0, 4], memory_mib: 40960}
      - {id: 5, name: 4g.40gb, compute_slices: 4, memory_slots: 4, max_per_gpu: 1, starts: [0], memory_mib: 40960}
      - {id: 0, name: 7g.80gb, compute_slices: 7, memory_slots: 8, max_per_gpu: 1, starts: [0], memory_mib: 81920}
offerings:
  - name: h100.1x
    mode: gpu
    model: hopper
    gpus: 1
    vcpus: 32
    memory_mib: 262144
`
	c, err := Load(strings.NewReader(in), "override.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Model("hopper")
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "h100-80gb-sxm" || m.NVLinkGBps != 450 || m.PCIDeviceID != 0x2324 || len(m.MIGProfiles) != 5 {
		t.Errorf("override not applied: %+v", m)
	}
	// The override replaces the whole model, aliases included.
	if _, err := c.Model("H100-80GB"); !IsNotFound(err) {
		t.Errorf("built-in alias H100-80GB survived the override: %v", err)
	}
	if n := len(c.Models()); n != len(Default().Models()) {
		t.Errorf("%d models after override, want %d", n, len(Default().Models()))
	}
	if o, _ := c.Offering("h100.1x"); o.VCPUs != 32 || o.Model != "hopper" {
		t.Errorf("offering override not applied: %+v", o)
	}
	if o, _ := c.Offering("h100.2x"); o == nil || o.VCPUs != 48 {
		t.Errorf("built-in h100.2x lost: %+v", o)
	}
}

func TestLoadOverrideBreaksBuiltinOffering(t *testing.T) {
	const in = `models:
  - name: H100-80GB-SXM
    memory_mib: 81920
`
	_, err := Load(strings.NewReader(in), "nomig.yaml")
	if err == nil {
		t.Fatal("dropping the MIG table of a model with built-in MIG offerings was accepted")
	}
	for _, s := range []string{
		`nomig.yaml: built-in offering "h100.mig.3g.40gb": model: gpu model "H100-80GB-SXM" does not support MIG`,
		`built-in offering "h100.mig.7g.80gb"`,
	} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	const goodProfile = `{id: 1, name: a, compute_slices: 1, memory_slots: 1, max_per_gpu: 1, starts: [0], memory_mib: 1024}`
	cases := []struct {
		name string
		in   string
		has  []string
		// field is the ValidationError field expected, empty for yaml errors.
		field string
	}{
		{"unknown model field", "models:\n  - name: X\n    memory_mib: 1\n    nvlink_gbs: 3\n",
			[]string{`bad.yaml:4: unknown field "nvlink_gbs" in a model`}, ""},
		{"unknown offering field", "offerings:\n  - name: x\n    mode: gpu\n    gpu: 1\n",
			[]string{`bad.yaml:4: unknown field "gpu" in an offering`}, ""},
		{"unknown top-level field", "model: []\n",
			[]string{`bad.yaml:1: unknown field "model" at the top level`}, ""},
		{"unknown profile field", "models:\n  - name: X\n    memory_mib: 1024\n    mig_profiles:\n      - {id: 1, slices: 2}\n",
			[]string{`bad.yaml:5: unknown field "slices" in a MIG profile`}, ""},
		{"wrong type", "models:\n  - name: X\n    memory_mib: lots\n",
			[]string{"bad.yaml:3: cannot unmarshal"}, ""},
		{"syntax error", "models: [\n", []string{"bad.yaml:1: yaml:"}, ""},
		{"two documents", "models: []\n---\nofferings: []\n", []string{"bad.yaml:2: only one YAML document"}, ""},
		{"start past the end", "models:\n  - name: X\n    memory_mib: 1024\n    mig_profiles:\n      - id: 1\n        name: a\n        compute_slices: 1\n        memory_slots: 2\n        max_per_gpu: 1\n        starts: [0, 7]\n        memory_mib: 1024\n",
			[]string{`bad.yaml:10: model "X": mig_profiles[0].starts: start 7 + 2 memory slots exceeds the 8 memory slots`}, "mig_profiles[0].starts"},
		{"too many compute slices", "models:\n  - name: X\n    memory_mib: 1024\n    mig_profiles:\n      - {id: 1, name: a, compute_slices: 8, memory_slots: 1, max_per_gpu: 1, starts: [0], memory_mib: 1024}\n",
			[]string{`bad.yaml:5: model "X": mig_profiles[0].compute_slices: must be 1..7, got 8`}, "mig_profiles[0].compute_slices"},
		{"zero max per gpu", "models:\n  - name: X\n    memory_mib: 1024\n    mig_profiles:\n      - {id: 1, name: a, compute_slices: 1, memory_slots: 1, max_per_gpu: 0, starts: [0], memory_mib: 1024}\n",
			[]string{"mig_profiles[0].max_per_gpu: must be at least 1"}, "mig_profiles[0].max_per_gpu"},
		{"no starts", "models:\n  - name: X\n    memory_mib: 1024\n    mig_profiles:\n      - {id: 1, name: a, compute_slices: 1, memory_slots: 1, max_per_gpu: 1, starts: [], memory_mib: 1024}\n",
			[]string{"mig_profiles[0].starts: must list at least one start slot"}, "mig_profiles[0].starts"},
		{"instances overflow memory", "models:\n  - name: X\n    memory_mib: 1024\n    mig_profiles:\n      - {id: 1, name: a, compute_slices: 1, memory_slots: 4, max_per_gpu: 3, starts: [0, 2, 4], memory_mib: 1024}\n",
			[]string{"max_per_gpu: 3 instances of 4 memory slots exceed the 8 memory slots"}, "mig_profiles[0].max_per_gpu"},
		{"instances overflow compute", "models:\n  - name: X\n    memory_mib: 1024\n    mig_profiles:\n      - {id: 1, name: a, compute_slices: 4, memory_slots: 2, max_per_gpu: 2, starts: [0, 4], memory_mib: 1024}\n",
			[]string{"max_per_gpu: 2 instances of 4 compute slices exceed the 7 compute slices"}, "mig_profiles[0].max_per_gpu"},
		{"duplicate profile id", "models:\n  - name: X\n    memory_mib: 1024\n    mig_profiles:\n      - " + goodProfile + "\n      - {id: 1, name: b, compute_slices: 1, memory_slots: 1, max_per_gpu: 1, starts: [0], memory_mib: 1024}\n",
			[]string{`bad.yaml:6: model "X": mig_profiles[1].id: duplicate MIG profile id 1`}, "mig_profiles[1].id"},
		{"profile bigger than the card", "models:\n  - name: X\n    memory_mib: 512\n    mig_profiles:\n      - " + goodProfile + "\n",
			[]string{"mig_profiles[0].memory_mib: must be 1..512"}, "mig_profiles[0].memory_mib"},
		{"duplicate model in file", "models:\n  - name: X\n    memory_mib: 1\n  - name: x\n    memory_mib: 2\n",
			[]string{`bad.yaml:4: model "x": name: "x" is already the name of gpu model "X"`}, "name"},
		{"name clashes with built-in alias", "models:\n  - name: h100\n    memory_mib: 1\n",
			[]string{`bad.yaml:2: model "h100": name: "h100" is already an alias of gpu model "H100-80GB-SXM"`}, "name"},
		{"alias clashes with built-in name", "models:\n  - name: X\n    memory_mib: 1\n    aliases: [ok, T4]\n",
			[]string{`bad.yaml:4: model "X": aliases[1]: "T4" is already the name of gpu model "T4"`}, "aliases[1]"},
		{"alias clashes with built-in alias", "models:\n  - name: X\n    memory_mib: 1\n    aliases:\n      - v100m16\n",
			[]string{`bad.yaml:5: model "X": aliases[0]: "v100m16" is already an alias of gpu model "V100-16GB"`}, "aliases[0]"},
		{"duplicate offering in file", "offerings:\n  - {name: o.1x, mode: gpu, model: T4, gpus: 1}\n  - {name: o.1x, mode: gpu, model: T4, gpus: 2}\n",
			[]string{`bad.yaml:3: offering "o.1x": name: duplicate offering name`}, "name"},
		{"invalid offering", "offerings:\n  - name: t4.half\n    mode: shared\n    model: T4\n    share_milli: 1500\n    share_memory_mib: 1024\n",
			[]string{`bad.yaml:5: offering "t4.half": share_milli: fraction out of range: 1500`}, "share_milli"},
		{"negative instance store", "offerings:\n  - name: t4.scratch\n    mode: gpu\n    model: T4\n    gpus: 1\n    instance_store_gib: -5\n",
			[]string{`bad.yaml:6: offering "t4.scratch": instance_store_gib: must be 0 (none) to 15360 GiB (15 TiB), got -5`}, "instance_store_gib"},
		{"instance store too big", "offerings:\n  - {name: t4.scratch, mode: gpu, model: T4, gpus: 1, instance_store_gib: 20000}\n",
			[]string{`instance_store_gib: must be 0 (none) to 15360 GiB (15 TiB), got 20000`}, "instance_store_gib"},
		{"offering missing model", "offerings:\n  - name: t4.half\n    mode: gpu\n    gpus: 1\n",
			[]string{`bad.yaml:2: offering "t4.half": model: required for gpu mode`}, "model"},
		{"offering on unknown model", "offerings:\n  - name: z.1x\n    mode: gpu\n    model: Z9\n    gpus: 1\n",
			[]string{`bad.yaml:4: offering "z.1x": model: unknown gpu model "Z9"`}, "model"},
		{"offering on replaced model", "replace_builtin: true\nofferings:\n  - {name: h.1x, mode: gpu, model: H100, gpus: 1}\n",
			[]string{`bad.yaml:3: offering "h.1x": model: unknown gpu model "H100"`}, "model"},
	}
	for _, tc := range cases {
		_, err := Load(strings.NewReader(tc.in), "bad.yaml")
		if err == nil {
			t.Errorf("%s: Load succeeded", tc.name)
			continue
		}
		for _, s := range tc.has {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, s)
			}
		}
		var ve *ValidationError
		switch {
		case tc.field == "" && errors.As(err, &ve):
			t.Errorf("%s: yaml error unexpectedly wraps a ValidationError: %v", tc.name, err)
		case tc.field != "" && !errors.As(err, &ve):
			t.Errorf("%s: error %v wraps no *ValidationError", tc.name, err)
		case tc.field != "" && ve.Field != tc.field:
			t.Errorf("%s: field %q, want %q", tc.name, ve.Field, tc.field)
		}
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "catalog.yaml")
	if err := os.WriteFile(path, []byte(customFile), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Offering("custom.1x"); err != nil {
		t.Error(err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("offerings:\n  - name: X\n    mode: gpu\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadFile(bad)
	if err == nil || !strings.HasPrefix(err.Error(), bad+":2: ") {
		t.Errorf("LoadFile(bad) error = %v, want it to start with %q", err, bad+":2: ")
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("LoadFile(missing) error = %v", err)
	}
}
