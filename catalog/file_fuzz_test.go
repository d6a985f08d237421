package catalog

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzLoad reads operator catalog files (Load). A file it refuses gets an
// error that names the file; a file it accepts gives a catalog whose every
// offering passes ValidateOffering against it and names a model it holds,
// and that survives a round trip: written back as a catalog file with
// replace_builtin (as `gpucloud catalog ... -o yaml` writes entries), it
// loads again to the same models and offerings.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(customFile))
	f.Add([]byte(customFile + "replace_builtin: true\n"))
	f.Add([]byte(""))
	f.Add([]byte("models: []\n"))
	f.Add([]byte("models:\n  - name: X\n    memory_mib: 1\n    nvlink_gpbs: 0\n"))
	f.Add([]byte("models:\n  - name: H100\n    memory_mib: 81920\n"))
	f.Add([]byte("offerings:\n  - name: h100.1x\n    mode: gpu\n    model: H100\n    gpus: 2\n    vcpus: 26\n    memory_mib: 229376\n"))
	f.Add([]byte("offerings:\n  - name: x.shared\n    mode: shared\n    model: L4\n    share_milli: 1000\n    share_memory_mib: 1\n"))
	f.Add([]byte("models: [{name: M, memory_mib: 80, mig_profiles: [{id: 1, name: 1g.10gb, compute_slices: 1, memory_slots: 1, max_per_gpu: 7, starts: [0,1,2,3,4,5,6], memory_mib: 10}]}]\n" +
		"offerings: [{name: m.mig, mode: mig, model: M, mig_profile: 1g.10gb, vcpus: 1, memory_mib: 1}]\nreplace_builtin: true\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("models: []\n---\nmodels: []\n"))
	f.Add([]byte("offerings:\n  - &o {name: a.1x, mode: cpu, vcpus: 1, memory_mib: 1}\n  - *o\n"))
	if b, err := os.ReadFile(filepath.Join("..", "examples", "catalog.yaml")); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Load(strings.NewReader(string(data)), "fuzz.yaml")
		if err != nil {
			if c != nil {
				t.Fatalf("Load returned a catalog and the error %v", err)
			}
			for _, e := range unjoin(err) {
				if !strings.HasPrefix(e.Error(), "fuzz.yaml") {
					t.Fatalf("error %q does not name the file", e)
				}
			}
			return
		}
		if c == nil {
			t.Fatal("Load returned neither a catalog nor an error")
		}
		for _, o := range c.Offerings() {
			if err := c.ValidateOffering(o); err != nil {
				t.Fatalf("loaded offering %+v is invalid: %v", o, err)
			}
			if got, err := c.Offering(strings.ToUpper(o.Name)); err != nil || got != o {
				t.Fatalf("offering %s does not look itself up: %v", o.Name, err)
			}
			if o.Model != "" {
				if _, err := c.Model(o.Model); err != nil {
					t.Fatalf("offering %s names model %q: %v", o.Name, o.Model, err)
				}
			}
		}
		for _, m := range c.Models() {
			for _, n := range append([]string{m.Name}, m.Aliases...) {
				if got, err := c.Model(n); err != nil || got != m {
					t.Fatalf("model %s: %q looks up %v, %v", m.Name, n, got, err)
				}
			}
		}

		// The round trip.
		fc := fileCatalog{ReplaceBuiltin: true}
		for _, m := range c.Models() {
			fc.Models = append(fc.Models, *m)
		}
		for _, o := range c.Offerings() {
			fc.Offerings = append(fc.Offerings, *o)
		}
		out, err := yaml.Marshal(fc)
		if err != nil {
			t.Fatalf("write the catalog: %v", err)
		}
		back, err := Load(strings.NewReader(string(out)), "back.yaml")
		if err != nil {
			t.Fatalf("the catalog written back does not load: %v\n%s", err, out)
		}
		if a, b := catalogJSON(t, c), catalogJSON(t, back); a != b {
			t.Fatalf("the catalog written back loads differently:\nbefore %s\nafter  %s\nfile:\n%s", a, b, out)
		}
	})
}

// unjoin flattens errors.Join's tree.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

// catalogJSON is a catalog's models and offerings as JSON, where an empty
// list and a missing one read the same.
func catalogJSON(t *testing.T, c *Catalog) string {
	t.Helper()
	b, err := json.Marshal(struct {
		Models    []*Model
		Offerings []*Offering
	}{c.Models(), c.Offerings()})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
