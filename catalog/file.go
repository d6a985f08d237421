package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// fileCatalog is the schema of an operator's catalog file. A file looks like:
//
//	models:
//	  - name: MI300X-like-custom
//	    memory_mib: 196608
//	    nvlink_gbps: 0
//	    aliases: [mycard]
//	    mig_profiles: []          # optional; same fields as MIGProfile
//	offerings:
//	  - name: custom.1x
//	    mode: gpu
//	    model: MI300X-like-custom
//	    gpus: 1
//	    vcpus: 16
//	    memory_mib: 131072
//	replace_builtin: false
//
// With replace_builtin false (the default) the file extends the built-in
// catalog. A model whose name equals a built-in model's canonical name
// (ignoring case) replaces that built-in model entirely, aliases and MIG table
// included, and an offering whose name equals a built-in offering's replaces
// it; any other clash with a built-in name or alias is an error. Built-in
// offerings are validated again against the resulting models, so overriding a
// model in a way that breaks a built-in offering (for example dropping its MIG
// table) is reported rather than silently dropping the offering. With
// replace_builtin true the catalog holds only the file's contents.
type fileCatalog struct {
	Models         []Model    `yaml:"models"`
	Offerings      []Offering `yaml:"offerings"`
	ReplaceBuiltin bool       `yaml:"replace_builtin"`
}

// LoadFile reads a catalog file; see Load.
func LoadFile(path string) (*Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Load(f, path)
}

// Load reads a YAML catalog from r and returns the resulting catalog: the
// built-in catalog extended by the file, or only the file's contents when it
// sets replace_builtin (see fileCatalog for the format and override rules).
// source names the input in errors, which are prefixed "source:line:" where
// the line is known. Unknown fields are errors, so that a typo such as
// "nvlink_gpbs" is not silently ignored. Validation problems are reported all
// together (errors.Join), each wrapping a *ValidationError.
func Load(r io.Reader, source string) (*Catalog, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	var fc fileCatalog
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(source, err)
	}
	// A second document would be silently ignored by Decode, which would
	// hide half of an operator's catalog.
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, fmt.Errorf("%s:%d: only one YAML document is allowed in a catalog file", source, extra.Line)
	case !errors.Is(err, io.EOF):
		return nil, yamlError(source, err)
	}

	// The node tree gives the line of each entry and field for error
	// messages; the typed decode above has already rejected malformed input.
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root)
	lines := fileLines{root: &root}

	models, modelOrigin := mergeModels(fc)
	offerings, offeringOrigin := mergeOfferings(fc)

	c, errs := assemble(models, offerings)
	if len(errs) == 0 {
		return c, nil
	}
	list := make([]error, len(errs))
	for i, e := range errs {
		// e.index counts the list its error is about: a model's must not
		// be looked up among the offerings, which may be fewer.
		var origin int
		var section string
		if e.model {
			origin, section = modelOrigin[e.index], "models"
		} else {
			origin, section = offeringOrigin[e.index], "offerings"
		}
		if origin < 0 {
			// Only a built-in offering can fail here without a file entry
			// of its own: the file overrode the model it uses.
			list[i] = fmt.Errorf("%s: built-in %w (after the file's model overrides)", source, e.err)
			continue
		}
		if line := lines.of(section, origin, e.err.Field); line > 0 {
			list[i] = fmt.Errorf("%s:%d: %w", source, line, e.err)
		} else {
			list[i] = fmt.Errorf("%s: %w", source, e.err)
		}
	}
	return nil, errors.Join(list...)
}

// mergeModels returns the models to build the catalog from and, for each,
// its index in the file or -1 for a built-in. Built-ins come first so that a
// clash is reported on the file's entry, not the built-in one.
func mergeModels(fc fileCatalog) ([]Model, []int) {
	var out []Model
	var origin []int
	if !fc.ReplaceBuiltin {
		overridden := map[string]bool{}
		for _, m := range fc.Models {
			overridden[strings.ToLower(m.Name)] = true
		}
		for _, m := range builtinModels() {
			if !overridden[strings.ToLower(m.Name)] {
				out = append(out, m)
				origin = append(origin, -1)
			}
		}
	}
	for i, m := range fc.Models {
		out = append(out, m)
		origin = append(origin, i)
	}
	return out, origin
}

// mergeOfferings is mergeModels for offerings.
func mergeOfferings(fc fileCatalog) ([]Offering, []int) {
	var out []Offering
	var origin []int
	if !fc.ReplaceBuiltin {
		overridden := map[string]bool{}
		for _, o := range fc.Offerings {
			overridden[strings.ToLower(o.Name)] = true
		}
		for _, o := range builtinOfferings() {
			if !overridden[strings.ToLower(o.Name)] {
				out = append(out, o)
				origin = append(origin, -1)
			}
		}
	}
	for i, o := range fc.Offerings {
		out = append(out, o)
		origin = append(origin, i)
	}
	return out, origin
}

// yamlLineRE matches the "line N: message" that yaml.v3 puts in its errors,
// after an optional "yaml: " prefix on syntax errors.
var yamlLineRE = regexp.MustCompile(`^(yaml: )?line (\d+): (.*)$`)

// yamlUnknownFieldRE matches yaml.v3's KnownFields error, which names a Go
// type the operator has never seen.
var yamlUnknownFieldRE = regexp.MustCompile(`^field (\S+) not found in type catalog\.(\w+)$`)

// yamlEntryKind says where an unknown field was, in the file's own terms.
var yamlEntryKind = map[string]string{
	"fileCatalog": "at the top level (want models, offerings, replace_builtin)",
	"Model":       "in a model",
	"MIGProfile":  "in a MIG profile",
	"Offering":    "in an offering",
}

// yamlError rewrites yaml.v3's errors into "source:N: message", one per
// problem, the form editors and CI logs link to the line.
func yamlError(source string, err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	list := make([]error, len(msgs))
	for i, msg := range msgs {
		m := yamlLineRE.FindStringSubmatch(msg)
		if m == nil {
			list[i] = fmt.Errorf("%s: %s", source, msg)
			continue
		}
		text := m[3]
		if f := yamlUnknownFieldRE.FindStringSubmatch(text); f != nil {
			where, ok := yamlEntryKind[f[2]]
			if !ok {
				where = "in " + f[2]
			}
			text = fmt.Sprintf("unknown field %q %s", f[1], where)
		} else if m[1] != "" {
			text = "yaml: " + text
		}
		list[i] = fmt.Errorf("%s:%s: %s", source, m[2], text)
	}
	return errors.Join(list...)
}

// fileLines finds the line of an entry's field in the parsed file.
type fileLines struct{ root *yaml.Node }

// fieldPathRE splits "mig_profiles[2].starts" into its steps.
var fieldPathRE = regexp.MustCompile(`([a-z_]+)(?:\[(\d+)\])?`)

// of returns the line of field (a ValidationError field path) in entry index
// of section, the entry's own line when the field is absent from the file
// (a missing required field), or 0 when the entry cannot be found.
func (fl fileLines) of(section string, index int, field string) int {
	n := fl.root
	if n == nil || n.Kind != yaml.DocumentNode || len(n.Content) == 0 {
		return 0
	}
	list := mappingValue(n.Content[0], section)
	if list == nil || list.Kind != yaml.SequenceNode || index >= len(list.Content) {
		return 0
	}
	n = list.Content[index]
	line := n.Line
	for _, step := range fieldPathRE.FindAllStringSubmatch(field, -1) {
		key := mappingKey(n, step[1])
		if key == nil {
			return line
		}
		line, n = key.Line, mappingValue(n, step[1])
		if step[2] != "" {
			i, _ := strconv.Atoi(step[2])
			if n.Kind != yaml.SequenceNode || i >= len(n.Content) {
				return line
			}
			n = n.Content[i]
			line = n.Line
		}
	}
	return line
}

func mappingKey(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return nil
}

func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
