package stack

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Bound is a template with its parameters bound: the resources expanded
// into copies and the dependency graph between them.
type Bound struct {
	Template *Template
	// Parameters holds every parameter's value, by the parameter's Go type.
	Parameters map[string]any
	// Copies are the resource copies in file order, a counted resource's in
	// index order.
	Copies []*Copy

	byAddr map[string]*Copy
	counts map[string]int // copies per resource name
	levels [][]string
}

// Copy is one copy of a resource: the resource itself, or one of a
// counted resource's copies.
type Copy struct {
	// Address is "head", or "workers[2]" for a counted resource's copy.
	Address  string
	Resource string
	// Index is the copy's index, -1 for a resource without a count.
	Index          int
	Type           string
	DeletionPolicy string
	// Properties are the resource's properties as written (references
	// unresolved; see Bound.Resolve).
	Properties map[string]any
	// DependsOn are the addresses of the copies this one depends on, in
	// apply order.
	DependsOn []string

	res *Resource
}

// Address is the address of a resource's copy: the name for index -1,
// else "name[index]".
func Address(resource string, index int) string {
	if index < 0 {
		return resource
	}
	return resource + "[" + strconv.Itoa(index) + "]"
}

// SplitAddress splits an address into resource name and index (-1 for
// none); ok is false when it is malformed.
func SplitAddress(addr string) (resource string, index int, ok bool) {
	open := strings.IndexByte(addr, '[')
	if open < 0 {
		return addr, -1, addr != ""
	}
	if !strings.HasSuffix(addr, "]") {
		return "", 0, false
	}
	i, err := strconv.Atoi(addr[open+1 : len(addr)-1])
	if err != nil || i < 0 {
		return "", 0, false
	}
	return addr[:open], i, open > 0
}

// Bind binds command-line arguments (K=V already split) to the
// parameters: each is parsed by its parameter's type (integer: base 10;
// number: decimal; boolean: true or false; list: comma-separated strings,
// or a JSON array when it starts with '['). Parameters without an argument
// take their default. The errors are Errors.
func (t *Template) Bind(args map[string]string) (*Bound, error) {
	return t.bind(func(p *Parameter) (any, bool, string) {
		s, ok := args[p.Name]
		if !ok {
			return nil, false, ""
		}
		v, msg := p.parseArg(s)
		return v, true, msg
	}, keysOf(args))
}

// BindValues binds typed values, as an API caller sends them in JSON:
// strings, numbers (float64, json.Number or Go integers; an integer
// parameter takes whole numbers only), booleans and lists ([]any of
// scalars, or []string). Values of the wrong type are errors.
func (t *Template) BindValues(values map[string]any) (*Bound, error) {
	return t.bind(func(p *Parameter) (any, bool, string) {
		raw, ok := values[p.Name]
		if !ok {
			return nil, false, ""
		}
		v, msg := p.fromValue(raw)
		return v, true, msg
	}, keysOf(values))
}

// keysOf returns a map's keys, sorted.
func keysOf[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// bind binds the parameters from get, then expands the copies.
func (t *Template) bind(get func(*Parameter) (any, bool, string), given []string) (*Bound, error) {
	errs := &errList{}
	for _, name := range given {
		if t.params[name] == nil {
			errs.at(0, 0, "", "unknown parameter %q%s", name, t.paramList())
		}
	}
	values := make(map[string]any, len(t.Parameters))
	for _, p := range t.Parameters {
		v, ok, msg := get(p)
		switch {
		case msg != "":
			errs.at(0, 0, "", "parameter %s: %s", p.Name, msg)
		case ok:
			if msg := p.check(v); msg != "" {
				errs.at(0, 0, "", "parameter %s: %s", p.Name, msg)
			} else {
				values[p.Name] = v
			}
		case p.HasDefault:
			values[p.Name] = p.Default
		default:
			errs.at(0, 0, "", "parameter %s: missing a value (it has no default)", p.Name)
		}
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return t.expand(values)
}

// expand makes the copies and their graph.
func (t *Template) expand(values map[string]any) (*Bound, error) {
	errs := &errList{}
	b := &Bound{Template: t, Parameters: values, byAddr: map[string]*Copy{}, counts: map[string]int{}}
	for _, r := range t.Resources {
		b.counts[r.Name] = b.countOf(r, errs)
	}
	b.checkIndexes(errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	for _, r := range t.Resources {
		for _, i := range b.indexes(r.Name) {
			c := &Copy{Address: Address(r.Name, i), Resource: r.Name, Index: i, Type: r.Type,
				DeletionPolicy: r.DeletionPolicy, Properties: r.Properties, res: r}
			b.Copies = append(b.Copies, c)
			b.byAddr[c.Address] = c
		}
	}
	for _, c := range b.Copies {
		c.DependsOn = b.copyDeps(c)
	}
	b.levels = b.computeLevels()
	return b, nil
}

// countOf evaluates a resource's count: -1 for a resource without one.
func (b *Bound) countOf(r *Resource, errs *errList) int {
	if r.Count == nil {
		return -1
	}
	if r.Count.Param == "" {
		return r.Count.N
	}
	n := b.Parameters[r.Count.Param].(int64) + int64(r.Count.Delta)
	if n < 0 || n > MaxCount {
		errs.at(r.Line, r.Column, "resources."+r.Name+".count",
			"count %s is %d; it must be between 0 and %d", r.Count, n, MaxCount)
		return 0
	}
	return int(n)
}

// checkIndexes checks indexed references against the counts now known.
func (b *Bound) checkIndexes(errs *errList) {
	t := b.Template
	check := func(refs []*ref, path string) {
		for _, rf := range refs {
			if rf.kind != refResource {
				continue
			}
			if msg := checkIndex(rf, t.resources[rf.name], b.counts[rf.name]); msg != "" {
				errs.at(rf.line, rf.col, path, "%s: %s", rf.text, msg)
			}
		}
	}
	for _, r := range t.Resources {
		check(r.refs, "resources."+r.Name+".properties")
	}
	for _, o := range t.Outputs {
		check(o.refs, o.path)
	}
}

// indexes returns the copy indexes of a resource: [-1] without a count.
func (b *Bound) indexes(name string) []int {
	n := b.counts[name]
	if n < 0 {
		return []int{-1}
	}
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// addresses returns the addresses of every copy of a resource.
func (b *Bound) addresses(name string) []string {
	idx := b.indexes(name)
	out := make([]string, len(idx))
	for i, x := range idx {
		out[i] = Address(name, x)
	}
	return out
}

// copyDeps returns the copies c depends on: every copy of an explicit
// dependency, the copy an indexed reference names, and every copy of a
// counted resource referenced without an index.
func (b *Bound) copyDeps(c *Copy) []string {
	seen := map[string]bool{}
	for _, d := range c.res.DependsOn {
		for _, a := range b.addresses(d) {
			seen[a] = true
		}
	}
	for _, rf := range c.res.refs {
		switch {
		case rf.kind != refResource:
		case rf.index >= 0:
			seen[Address(rf.name, rf.index)] = true
		default:
			for _, a := range b.addresses(rf.name) {
				seen[a] = true
			}
		}
	}
	deps := make([]string, 0, len(seen))
	for a := range seen {
		deps = append(deps, a)
	}
	b.sortAddresses(deps)
	return deps
}

// sortAddresses sorts addresses of this template's copies in file order.
func (b *Bound) sortAddresses(addrs []string) {
	slices.SortFunc(addrs, func(x, y string) int {
		cx, cy := b.byAddr[x], b.byAddr[y]
		if d := cx.res.order - cy.res.order; d != 0 {
			return d
		}
		return cx.Index - cy.Index
	})
}

// computeLevels groups the copies by the length of their longest
// dependency chain.
func (b *Bound) computeLevels() [][]string {
	level := make(map[string]int, len(b.Copies))
	var depth func(c *Copy) int
	depth = func(c *Copy) int {
		if l, ok := level[c.Address]; ok {
			return l
		}
		l := 0
		for _, d := range c.DependsOn {
			l = max(l, depth(b.byAddr[d])+1)
		}
		level[c.Address] = l
		return l
	}
	var levels [][]string
	for _, c := range b.Copies {
		l := depth(c)
		for len(levels) <= l {
			levels = append(levels, nil)
		}
		levels[l] = append(levels[l], c.Address)
	}
	return levels
}

// Copy returns a copy by address.
func (b *Bound) Copy(address string) (*Copy, bool) {
	c, ok := b.byAddr[address]
	return c, ok
}

// Order returns the addresses in levels for apply: each copy depends only
// on copies of earlier levels, so a level's copies may be created in
// parallel. Inside a level, copies are in file order.
func (b *Bound) Order() [][]string {
	out := make([][]string, len(b.levels))
	for i, l := range b.levels {
		out[i] = slices.Clone(l)
	}
	return out
}

// Reverse returns the levels for deletion: Order's levels last first, so
// that a copy goes before what it depends on.
func (b *Bound) Reverse() [][]string {
	out := b.Order()
	slices.Reverse(out)
	return out
}

// Count returns the number of copies of a resource: -1 for a resource
// without a count, 0 for an unknown name.
func (b *Bound) Count(resource string) int {
	n, ok := b.counts[resource]
	if !ok {
		return 0
	}
	return n
}

// String describes a copy for messages: "workers[2] (instance)".
func (c *Copy) String() string { return fmt.Sprintf("%s (%s)", c.Address, c.Type) }
