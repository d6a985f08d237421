package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpucloud/gpucloud/catalog"
)

// tableRow returns the fields of the table row whose first cell is name.
// Cells may contain single spaces ("8 GPUs"), so it splits on runs of two.
func tableRow(t *testing.T, out, name string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		var cells []string
		for _, c := range strings.Split(line, "  ") {
			if c = strings.TrimSpace(c); c != "" {
				cells = append(cells, c)
			}
		}
		if len(cells) > 0 && cells[0] == name {
			return cells
		}
	}
	t.Fatalf("no row %q in:\n%s", name, out)
	return nil
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
	}
	if errOut != "" {
		t.Errorf("%v: stderr not empty: %q", args, errOut)
	}
	return out
}

func TestCatalogModelsTable(t *testing.T) {
	out := mustRun(t, "catalog", "models")
	if got := tableRow(t, out, "NAME"); !reflect.DeepEqual(got, []string{"NAME", "MEMORY", "NVLINK", "MIG", "PCI ID", "ALIASES"}) {
		t.Errorf("header %q", got)
	}
	for name, want := range map[string][]string{
		"H100-80GB-SXM": {"H100-80GB-SXM", "80 GiB", "900 GB/s", "yes", "0x2330", "H100, H100-80GB, H100-SXM5-80GB"},
		"H200-141GB":    {"H200-141GB", "141 GiB", "900 GB/s", "yes", "0x2335", "H200"},
		"A100-40GB-SXM": {"A100-40GB-SXM", "40 GiB", "600 GB/s", "yes", "0x20B0", "A100-40GB, A100-SXM4-40GB"},
		"T4":            {"T4", "16 GiB", "-", "no", "0x1EB8", "-"},
		"G3":            {"G3", "80 GiB", "-", "no", "-", "-"},
	} {
		if got := tableRow(t, out, name); !reflect.DeepEqual(got, want) {
			t.Errorf("row %s = %q, want %q", name, got, want)
		}
	}
	if n := strings.Count(out, "\n"); n != len(catalog.Default().Models())+1 {
		t.Errorf("%d lines, want a header and one per model:\n%s", n, out)
	}
}

func TestCatalogModelsJSONAndYAML(t *testing.T) {
	want := catalog.Default().Models()

	var fromJSON []catalog.Model
	if err := json.Unmarshal([]byte(mustRun(t, "catalog", "models", "-o", "json")), &fromJSON); err != nil {
		t.Fatal(err)
	}
	yamlOut := mustRun(t, "catalog", "models", "-o", "yaml")
	var fromYAML []catalog.Model
	if err := yaml.Unmarshal([]byte(yamlOut), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if len(fromJSON) != len(want) {
		t.Fatalf("%d models in JSON, want %d", len(fromJSON), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(fromJSON[i], *want[i]) {
			t.Errorf("JSON model %d:\n got %+v\nwant %+v", i, fromJSON[i], *want[i])
		}
		if !reflect.DeepEqual(fromYAML[i], *want[i]) {
			t.Errorf("YAML model %d:\n got %+v\nwant %+v", i, fromYAML[i], *want[i])
		}
	}
	if !strings.Contains(yamlOut, "pci_device_id: 0x2330") || !strings.Contains(yamlOut, "starts: [0, 4]") {
		t.Errorf("YAML is not in catalog-file style:\n%.600s", yamlOut)
	}

	// The YAML list pastes into a catalog file under "models:".
	file := "replace_builtin: true\nmodels:\n" + indent(yamlOut, "  ")
	c, err := catalog.Load(strings.NewReader(file), "roundtrip.yaml")
	if err != nil {
		t.Fatalf("YAML output does not load as a catalog file: %v", err)
	}
	got := c.Models()
	if len(got) != len(want) {
		t.Fatalf("round trip: %d models, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(*got[i], *want[i]) {
			t.Errorf("round trip model %d:\n got %+v\nwant %+v", i, *got[i], *want[i])
		}
	}
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

func TestCatalogProfiles(t *testing.T) {
	out := mustRun(t, "catalog", "profiles", "H200-141GB")
	if !strings.HasPrefix(out, "MIG profiles of H200-141GB (141 GiB; 7 compute slices, 8 memory slots)\n") {
		t.Errorf("title:\n%s", out)
	}
	if got := tableRow(t, out, "ID"); !reflect.DeepEqual(got, []string{"ID", "NAME", "SLICES", "MEMORY SLOTS", "MAX/GPU", "STARTS", "MEMORY"}) {
		t.Errorf("header %q", got)
	}
	for id, want := range map[string][]string{
		"9":  {"9", "3g.71gb", "3", "4", "2", "0,4", "71 GiB"},
		"19": {"19", "1g.18gb", "1", "1", "7", "0,1,2,3,4,5,6", "18 GiB"},
		"20": {"20", "1g.18gb+me", "1", "1", "1", "0,1,2,3,4,5,6", "18 GiB"},
		"0":  {"0", "7g.141gb", "7", "8", "1", "0", "141 GiB"},
	} {
		if got := tableRow(t, out, id); !reflect.DeepEqual(got, want) {
			t.Errorf("row %s = %q, want %q", id, got, want)
		}
	}

	// Aliases and any case resolve; JSON is the profile table itself.
	var profiles []catalog.MIGProfile
	if err := json.Unmarshal([]byte(mustRun(t, "catalog", "profiles", "h100", "-o", "json")), &profiles); err != nil {
		t.Fatal(err)
	}
	m, _ := catalog.Default().Model("H100-80GB-SXM")
	if !reflect.DeepEqual(profiles, m.MIGProfiles) {
		t.Errorf("JSON profiles:\n got %+v\nwant %+v", profiles, m.MIGProfiles)
	}
}

func TestCatalogProfilesErrors(t *testing.T) {
	code, out, errOut := run(t, "catalog", "profiles", "T4")
	oneLine(t, code, errOut, `gpu model "T4" does not support MIG`, "MIG-capable models: A100-40GB-PCIE, ", "H100-80GB-SXM", "H200-NVL")
	if out != "" {
		t.Errorf("stdout %q", out)
	}
	// An alias is reported by its canonical name.
	code, _, errOut = run(t, "catalog", "profiles", "v100m16")
	oneLine(t, code, errOut, `gpu model "V100-16GB" does not support MIG`)

	code, _, errOut = run(t, "catalog", "profiles", "X100")
	oneLine(t, code, errOut, `unknown gpu model "X100" (known: `)
}

func TestCatalogOfferings(t *testing.T) {
	out := mustRun(t, "catalog", "offerings")
	if got := tableRow(t, out, "NAME"); !reflect.DeepEqual(got, []string{"NAME", "MODE", "MODEL", "RESOURCE", "VCPUS", "MEMORY", "STORE"}) {
		t.Errorf("header %q", got)
	}
	for name, want := range map[string][]string{
		"h100.8x":          {"h100.8x", "gpu", "H100-80GB-SXM", "8 GPUs", "192", "1920 GiB", "7680 GiB"},
		"h100.metal":       {"h100.metal", "metal", "H100-80GB-SXM", "8 GPUs", "192", "1920 GiB", "7680 GiB"},
		"t4.1x":            {"t4.1x", "gpu", "T4", "1 GPU", "4", "16 GiB", "100 GiB"},
		"h100.mig.3g.40gb": {"h100.mig.3g.40gb", "mig", "H100-80GB-SXM", "mig 3g.40gb", "10", "103 GiB", "411 GiB"},
		"l40s.shared.0.25": {"l40s.shared.0.25", "shared", "L40S", "0.25 GPU, 12 GiB", "4", "24 GiB", "100 GiB"},
	} {
		if got := tableRow(t, out, name); !reflect.DeepEqual(got, want) {
			t.Errorf("row %s = %q, want %q", name, got, want)
		}
	}
	if n := strings.Count(out, "\n"); n != len(catalog.Default().Offerings())+1 {
		t.Errorf("%d lines, want a header and one per offering", n)
	}

	// Filters: mode and model (by alias, any case) combine.
	out = mustRun(t, "catalog", "offerings", "--mode", "mig", "--model", "h100")
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		names = append(names, strings.Fields(line)[0])
	}
	want := []string{"h100.mig.1g.10gb", "h100.mig.2g.20gb", "h100.mig.3g.40gb", "h100.mig.4g.40gb", "h100.mig.7g.80gb"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("--mode mig --model h100: %v, want %v", names, want)
	}

	// JSON is the offerings themselves.
	var offerings []catalog.Offering
	if err := json.Unmarshal([]byte(mustRun(t, "catalog", "offerings", "--mode", "shared", "-o", "json")), &offerings); err != nil {
		t.Fatal(err)
	}
	if len(offerings) == 0 {
		t.Fatal("no shared offerings")
	}
	for _, o := range offerings {
		built, err := catalog.Default().Offering(o.Name)
		if err != nil || o.Mode != catalog.ModeShared || !reflect.DeepEqual(o, *built) {
			t.Errorf("JSON offering %+v, built-in %+v, %v", o, built, err)
		}
	}

	// No match: a note in the table, an empty list in JSON and YAML.
	if out := mustRun(t, "catalog", "offerings", "--mode", "mig", "--model", "T4"); out != "no offerings with mode mig on model T4\n" {
		t.Errorf("empty table: %q", out)
	}
	if out := mustRun(t, "catalog", "offerings", "--mode", "cpu", "-o", "json"); out != "[]\n" {
		t.Errorf("empty JSON: %q", out)
	}
	if out := mustRun(t, "catalog", "offerings", "--mode", "cpu", "-o", "yaml"); out != "[]\n" {
		t.Errorf("empty YAML: %q", out)
	}
}

// customCatalog adds a model with a MIG table and an offering on it,
// overrides the built-in T4 and the built-in t4.1x offering, and names a
// model by alias.
const customCatalog = `models:
  - name: X9-96GB
    aliases: [x9]
    memory_mib: 98304
    nvlink_gbps: 450
    pci_device_id: 0xABCD
    mig_profiles:
      - {id: 9, name: 3g.48gb, compute_slices: 3, memory_slots: 4, max_per_gpu: 2, starts: [0, 4], memory_mib: 49152}
      - {id: 0, name: 7g.96gb, compute_slices: 7, memory_slots: 8, max_per_gpu: 1, starts: [0], memory_mib: 98304}
  - name: t4
    aliases: [tesla-t4]
    memory_mib: 16384
    pci_device_id: 0x1EB8
offerings:
  - name: x9.mig.3g.48gb
    mode: mig
    model: x9
    mig_profile: 3g.48gb
    vcpus: 12
    memory_mib: 65536
  - name: x9.shared.0.125
    mode: shared
    model: X9-96GB
    share_milli: 125
    share_memory_mib: 12000
    vcpus: 2
    memory_mib: 8192
  - name: t4.1x
    mode: gpu
    model: tesla-t4
    gpus: 1
    vcpus: 6
    memory_mib: 24576
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCatalogFlagUsesFile(t *testing.T) {
	path := writeFile(t, "catalog.yaml", customCatalog)

	out := mustRun(t, "catalog", "models", "--catalog", path)
	if got, want := tableRow(t, out, "X9-96GB"), []string{"X9-96GB", "96 GiB", "450 GB/s", "yes", "0xABCD", "x9"}; !reflect.DeepEqual(got, want) {
		t.Errorf("custom model row %q, want %q", got, want)
	}
	if got, want := tableRow(t, out, "t4"), []string{"t4", "16 GiB", "-", "no", "0x1EB8", "tesla-t4"}; !reflect.DeepEqual(got, want) {
		t.Errorf("overridden T4 row %q, want %q", got, want)
	}
	tableRow(t, out, "H100-80GB-SXM") // built-ins stay

	out = mustRun(t, "catalog", "profiles", "X9", "--catalog", path)
	if got, want := tableRow(t, out, "9"), []string{"9", "3g.48gb", "3", "4", "2", "0,4", "48 GiB"}; !reflect.DeepEqual(got, want) {
		t.Errorf("custom profile row %q, want %q", got, want)
	}

	out = mustRun(t, "catalog", "offerings", "--catalog", path, "--model", "X9-96GB")
	if got, want := tableRow(t, out, "x9.mig.3g.48gb"), []string{"x9.mig.3g.48gb", "mig", "X9-96GB", "mig 3g.48gb", "12", "64 GiB", "-"}; !reflect.DeepEqual(got, want) {
		t.Errorf("custom offering row %q, want %q", got, want)
	}
	// Memory that is not whole GiB is shown in MiB rather than rounded.
	if got, want := tableRow(t, out, "x9.shared.0.125"), []string{"x9.shared.0.125", "shared", "X9-96GB", "0.125 GPU, 12000 MiB", "2", "8 GiB", "-"}; !reflect.DeepEqual(got, want) {
		t.Errorf("custom shared row %q, want %q", got, want)
	}
	out = mustRun(t, "catalog", "offerings", "--catalog", path, "--model", "tesla-t4", "--mode", "gpu")
	if got, want := tableRow(t, out, "t4.1x"), []string{"t4.1x", "gpu", "t4", "1 GPU", "6", "24 GiB", "-"}; !reflect.DeepEqual(got, want) {
		t.Errorf("overridden offering row %q, want %q", got, want)
	}
	var offerings []catalog.Offering
	if err := json.Unmarshal([]byte(mustRun(t, "catalog", "offerings", "--catalog", path, "-o", "json")), &offerings); err != nil {
		t.Fatal(err)
	}
	if len(offerings) != len(catalog.Default().Offerings())+2 {
		t.Errorf("%d offerings, want the built-ins plus 2", len(offerings))
	}

	// Without --catalog the file's entries are not there.
	code, _, errOut := run(t, "catalog", "profiles", "X9")
	oneLine(t, code, errOut, `unknown gpu model "X9"`)

	// A broken --catalog file fails every listing with its line.
	bad := writeFile(t, "bad.yaml", "models:\n  - name: X\n    memory_mib: 1024\n    nvlink_gpbs: 0\n")
	for _, sub := range [][]string{{"models"}, {"profiles", "H100"}, {"offerings"}} {
		code, out, errOut := run(t, append(append([]string{"catalog"}, sub...), "--catalog", bad)...)
		oneLine(t, code, errOut, bad+`:4: unknown field "nvlink_gpbs" in a model`)
		if out != "" {
			t.Errorf("%v: stdout %q", sub, out)
		}
	}
}

func TestCatalogValidate(t *testing.T) {
	path := writeFile(t, "catalog.yaml", customCatalog)
	out := mustRun(t, "catalog", "validate", path)
	if want := path + ": 2 models (1 new, 1 overriding a built-in), 3 offerings (2 new, 1 overriding a built-in); OK\n"; out != want {
		t.Errorf("validate:\n got %q\nwant %q", out, want)
	}

	path = writeFile(t, "new.yaml", "models:\n  - {name: Z1, memory_mib: 1024}\n  - {name: Z2, memory_mib: 2048}\n"+
		"offerings:\n  - {name: z1.1x, mode: gpu, model: Z1, gpus: 1, vcpus: 1, memory_mib: 1024}\n")
	if out, want := mustRun(t, "catalog", "validate", path), path+": 2 models, 1 offering; OK\n"; out != want {
		t.Errorf("validate:\n got %q\nwant %q", out, want)
	}

	path = writeFile(t, "only.yaml", "replace_builtin: true\nmodels:\n  - {name: T4, memory_mib: 16384}\n")
	if out, want := mustRun(t, "catalog", "validate", path), path+": 1 model, 0 offerings, replacing the built-in catalog; OK\n"; out != want {
		t.Errorf("validate:\n got %q\nwant %q", out, want)
	}
}

func TestCatalogValidateErrors(t *testing.T) {
	// A typo'd field is an error at its line.
	bad := writeFile(t, "bad.yaml", "models:\n  - name: X\n    memory_mib: 1024\n    nvlink_gpbs: 0\n")
	code, out, errOut := run(t, "catalog", "validate", bad)
	oneLine(t, code, errOut, bad+`:4: unknown field "nvlink_gpbs" in a model`)
	if out != "" {
		t.Errorf("stdout %q", out)
	}

	// Several problems are all reported, each with its line, on one line.
	bad = writeFile(t, "bad2.yaml", "offerings:\n  - name: h100.mig.3g\n    mode: mig\n    model: H100\n    mig_profile: 3g\n"+
		"  - name: t4.x\n    mode: shared\n    model: T4\n    share_milli: 1000\n    share_memory_mib: 1024\n")
	code, _, errOut = run(t, "catalog", "validate", bad)
	oneLine(t, code, errOut, bad+`:5: offering "h100.mig.3g": mig_profile: "3g" is not a MIG profile of H100-80GB-SXM; did you mean "3g.40gb"?`,
		"; "+bad+`:9: offering "t4.x": share_milli: fraction out of range: 1000`)

	// An override that breaks a built-in offering.
	bad = writeFile(t, "nomig.yaml", "models:\n  - name: H200-141GB\n    memory_mib: 144384\n")
	code, _, errOut = run(t, "catalog", "validate", bad)
	oneLine(t, code, errOut, bad+`: built-in offering "h200.mig.1g.18gb": model: gpu model "H200-141GB" does not support MIG`)

	missing := filepath.Join(t.TempDir(), "missing.yaml")
	code, _, errOut = run(t, "catalog", "validate", missing)
	oneLine(t, code, errOut, missing)
}

func TestCatalogUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"catalog", "offerings", "--mode", "vgpu"}, []string{`--mode "vgpu"`, "metal, gpu, mig, shared, cpu"}},
		{[]string{"catalog", "offerings", "--model", "X100"}, []string{`--model: unknown gpu model "X100"`}},
		{[]string{"catalog", "models", "-o", "xml"}, []string{`--output "xml"`, "yaml"}},
		{[]string{"catalog", "profiles", "H100", "-o", "csv"}, []string{`--output "csv"`}},
		{[]string{"catalog", "profiles"}, []string{"takes one MODEL argument, got 0"}},
		{[]string{"catalog", "profiles", "H100", "H200"}, []string{"takes one MODEL argument, got 2"}},
		{[]string{"catalog", "validate"}, []string{"takes one FILE argument, got 0"}},
		{[]string{"catalog", "validate", "--catalog", "x.yaml", "y.yaml"}, []string{"unknown flag: --catalog"}},
		{[]string{"catalog", "models", "stray"}, []string{"no arguments"}},
		{[]string{"catalog", "nope"}, []string{`unknown command "nope"`}},
	} {
		code, out, errOut := run(t, tc.args...)
		if code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, code, ExitUsage, errOut)
		}
		if !strings.HasPrefix(errOut, "error: ") || !strings.Contains(errOut, "--help' for usage.") {
			t.Errorf("%v: stderr %q lacks the error and hint", tc.args, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, errOut, w)
			}
		}
		if out != "" {
			t.Errorf("%v: stdout %q", tc.args, out)
		}
	}
}

func TestCatalogHelp(t *testing.T) {
	for _, sub := range []string{"models", "profiles", "offerings", "validate"} {
		out := mustRun(t, "catalog", sub, "--help")
		if !strings.Contains(out, "Examples:") || !strings.Contains(out, "gpucloud catalog "+sub) {
			t.Errorf("%s --help lacks examples:\n%s", sub, out)
		}
	}
	out := mustRun(t, "catalog")
	for _, sub := range []string{"models", "profiles", "offerings", "validate", "docs/CATALOG.md"} {
		if !strings.Contains(out, sub) {
			t.Errorf("catalog help lacks %q:\n%s", sub, out)
		}
	}
	if out := mustRun(t, "--help"); !strings.Contains(out, "catalog") {
		t.Errorf("root help lacks the catalog command:\n%s", out)
	}
}

// TestCatalogDoc keeps docs/CATALOG.md true: every console block marked
// <!-- doc-test --> is run, after writing every YAML block marked
// <!-- doc-file: NAME --> to NAME in a scratch directory, and must print
// exactly what the doc shows.
func TestCatalogDoc(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "CATALOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	files, tests := 0, 0
	lines := strings.Split(string(doc), "\n")
	for i := 0; i < len(lines); i++ {
		marker := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(marker, "<!-- doc-") {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "```") {
			t.Fatalf("CATALOG.md:%d: marker not followed by a code block", i+1)
		}
		// A block in a list item is indented; strip the fence's indent.
		indent := len(lines[i+1]) - len(strings.TrimLeft(lines[i+1], " "))
		start := i + 2
		end := start
		for end < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[end]), "```") {
			end++
		}
		var block []string
		for _, l := range lines[start:end] {
			block = append(block, strings.TrimPrefix(l, strings.Repeat(" ", indent)))
		}
		body := strings.Join(block, "\n") + "\n"
		switch {
		case strings.HasPrefix(marker, "<!-- doc-file: "):
			name := strings.TrimSuffix(strings.TrimPrefix(marker, "<!-- doc-file: "), " -->")
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			files++
		case marker == "<!-- doc-test -->":
			if len(block) == 0 || !strings.HasPrefix(block[0], "$ gpucloud ") {
				t.Fatalf("CATALOG.md:%d: console block does not start with \"$ gpucloud \"", start+1)
			}
			args := strings.Fields(strings.TrimPrefix(block[0], "$ gpucloud "))
			want := strings.Join(block[1:], "\n") + "\n"
			_, out, errOut := run(t, args...)
			if got := out + errOut; got != want {
				t.Errorf("CATALOG.md:%d: gpucloud %s prints\n%s\nbut the doc shows\n%s\n(regenerate the block by running the command)",
					start+1, strings.Join(args, " "), got, want)
			}
			tests++
		default:
			t.Fatalf("CATALOG.md:%d: unknown marker %s", i+1, marker)
		}
		i = end
	}
	if files < 2 || tests < 3 {
		t.Errorf("CATALOG.md has %d example files and %d tested commands; want at least 2 and 3", files, tests)
	}
}

// TestExampleCatalog keeps examples/catalog.yaml, the file the README's
// `catalog validate` runs on, valid and identical to the worked example
// of docs/CATALOG.md.
func TestExampleCatalog(t *testing.T) {
	path := filepath.Join("..", "examples", "catalog.yaml")
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "CATALOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- doc-file: catalog.yaml -->\n```yaml\n"
	_, block, ok := strings.Cut(string(doc), marker)
	if !ok {
		t.Fatalf("docs/CATALOG.md has no %q block", marker)
	}
	block, _, _ = strings.Cut(block, "```")
	if block != string(file) {
		t.Errorf("examples/catalog.yaml differs from the worked example of docs/CATALOG.md; copy one onto the other")
	}
	out := mustRun(t, "catalog", "validate", path)
	if want := path + ": 3 models (1 new, 2 overriding built-ins), 5 offerings (4 new, 1 overriding a built-in); OK\n"; out != want {
		t.Errorf("validate:\n got %q\nwant %q", out, want)
	}
	if got := tableRow(t, mustRun(t, "catalog", "offerings", "--catalog", path, "--model", "A40"), "a40.1x"); got[2] != "A40" {
		t.Errorf("a40.1x row %q", got)
	}
	for _, doc := range []string{"README.md", filepath.Join("docs", "CATALOG.md")} {
		b, err := os.ReadFile(filepath.Join("..", doc))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "examples/catalog.yaml") {
			t.Errorf("%s does not point to examples/catalog.yaml", doc)
		}
	}
}
