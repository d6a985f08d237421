package catalog

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Catalog is a validated set of GPU models and offerings. Lookups are by
// name; model lookups also accept aliases, and all lookups ignore case.
//
// A Catalog is not modified after it is built, so it is safe for concurrent
// use. The *Model and *Offering values it returns point into the catalog and
// must be treated as read-only; clone them before changing anything.
type Catalog struct {
	models    []*Model          // sorted by Name
	modelKey  map[string]*Model // lower-cased name or alias -> model
	offerings []*Offering       // sorted by Name
	offerKey  map[string]*Offering
}

// defaultCatalog is built and validated once; Default hands out copies.
var defaultCatalog = sync.OnceValue(func() *Catalog {
	c, err := New(builtinModels(), builtinOfferings())
	if err != nil {
		// The built-in data is fixed at compile time and covered by tests,
		// so an error here is a programming error, not a runtime condition.
		panic("catalog: invalid built-in catalog: " + err.Error())
	}
	return c
})

// Default returns the built-in catalog. Each call returns a fresh deep copy,
// so a caller that modifies what it got (despite the read-only contract)
// cannot corrupt the catalog other callers see.
func Default() *Catalog { return defaultCatalog().clone() }

// New builds a catalog from models and offerings, validating both: models
// must have unique names and aliases (case-insensitively) and a MIG table that
// fits the 8-slot / 7-slice geometry, and every offering must pass
// ValidateOffering against these models. The inputs are copied. All problems
// are reported, joined, each as a *ValidationError.
func New(models []Model, offerings []Offering) (*Catalog, error) {
	c, errs := assemble(models, offerings)
	if len(errs) > 0 {
		list := make([]error, len(errs))
		for i, e := range errs {
			list[i] = e.err
		}
		return nil, errors.Join(list...)
	}
	return c, nil
}

// entryError ties a validation error to the input entry that caused it, so
// that Load can point at the line of the catalog file.
type entryError struct {
	model bool // true: index is into models; false: into offerings
	index int
	err   *ValidationError
}

// assemble validates and indexes models and offerings. Offerings are only
// validated when the models are valid, because a broken model would make
// every offering that uses it fail with a misleading second error.
func assemble(models []Model, offerings []Offering) (*Catalog, []entryError) {
	c := &Catalog{
		modelKey: make(map[string]*Model),
		offerKey: make(map[string]*Offering),
	}
	var errs []entryError
	for i := range models {
		m := models[i].clone()
		if err := validateModel(m); err != nil {
			errs = append(errs, entryError{model: true, index: i, err: err})
			continue
		}
		if err := c.checkModelNames(m); err != nil {
			errs = append(errs, entryError{model: true, index: i, err: err})
			continue
		}
		c.addModel(m)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	slices.SortFunc(c.models, func(a, b *Model) int { return strings.Compare(a.Name, b.Name) })

	for i := range offerings {
		o := offerings[i]
		if err := c.validateOffering(&o); err != nil {
			errs = append(errs, entryError{index: i, err: err})
			continue
		}
		key := strings.ToLower(o.Name)
		if _, dup := c.offerKey[key]; dup {
			errs = append(errs, entryError{index: i, err: &ValidationError{
				Name: o.Name, Field: "name", Message: "duplicate offering name"}})
			continue
		}
		c.offerKey[key] = &o
		c.offerings = append(c.offerings, &o)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	slices.SortFunc(c.offerings, func(a, b *Offering) int { return strings.Compare(a.Name, b.Name) })
	return c, nil
}

// checkModelNames reports a name or alias of m that an already added model
// holds as its name or alias.
func (c *Catalog) checkModelNames(m *Model) *ValidationError {
	check := func(field, n string) *ValidationError {
		other, taken := c.modelKey[strings.ToLower(n)]
		if !taken {
			return nil
		}
		what := "the name"
		if !strings.EqualFold(other.Name, n) {
			what = "an alias"
		}
		return &ValidationError{Kind: "model", Name: m.Name, Field: field,
			Message: fmt.Sprintf("%q is already %s of gpu model %q", n, what, other.Name)}
	}
	if err := check("name", m.Name); err != nil {
		return err
	}
	for i, a := range m.Aliases {
		if err := check(fmt.Sprintf("aliases[%d]", i), a); err != nil {
			return err
		}
	}
	return nil
}

func (c *Catalog) addModel(m *Model) {
	c.models = append(c.models, m)
	c.modelKey[strings.ToLower(m.Name)] = m
	for _, a := range m.Aliases {
		c.modelKey[strings.ToLower(a)] = m
	}
}

// clone returns a deep copy of c.
func (c *Catalog) clone() *Catalog {
	out := &Catalog{
		modelKey: make(map[string]*Model, len(c.modelKey)),
		offerKey: make(map[string]*Offering, len(c.offerKey)),
	}
	for _, m := range c.models {
		out.addModel(m.clone())
	}
	for _, o := range c.offerings {
		cp := *o
		out.offerings = append(out.offerings, &cp)
		out.offerKey[strings.ToLower(cp.Name)] = &cp
	}
	return out
}

// Model looks a GPU model up by canonical name or alias, ignoring case. An
// unknown name is a *NotFoundError listing known model names.
func (c *Catalog) Model(name string) (*Model, error) {
	if m, ok := c.modelKey[strings.ToLower(name)]; ok {
		return m, nil
	}
	return nil, &NotFoundError{Kind: "gpu model", Name: name, Known: bySimilarity(name, c.modelNames())}
}

// CanonicalModel maps a model name or alias to the canonical model name, so
// that callers can store and compare one spelling.
func (c *Catalog) CanonicalModel(name string) (string, error) {
	m, err := c.Model(name)
	if err != nil {
		return "", err
	}
	return m.Name, nil
}

// Models returns the models sorted by canonical name. The slice is new; the
// models are the catalog's own and must not be modified.
func (c *Catalog) Models() []*Model { return slices.Clone(c.models) }

// Offering looks an offering up by name, ignoring case. An unknown name is a
// *NotFoundError listing known offerings, the most similar first.
func (c *Catalog) Offering(name string) (*Offering, error) {
	if o, ok := c.offerKey[strings.ToLower(name)]; ok {
		return o, nil
	}
	names := make([]string, len(c.offerings))
	for i, o := range c.offerings {
		names[i] = o.Name
	}
	return nil, &NotFoundError{Kind: "offering", Name: name, Known: bySimilarity(name, names)}
}

// Offerings returns the offerings sorted by name. The slice is new; the
// offerings are the catalog's own and must not be modified.
func (c *Catalog) Offerings() []*Offering { return slices.Clone(c.offerings) }

func (c *Catalog) modelNames() []string {
	names := make([]string, len(c.models))
	for i, m := range c.models {
		names[i] = m.Name
	}
	return names
}
