package stack

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Attrs gives an attribute of an applied copy by address ("workers[2]")
// and attribute name ("id"); ok is false when it is not known.
type Attrs func(address, attr string) (value any, ok bool)

// MissingError says that a reference needs an attribute not yet known.
type MissingError struct {
	Address string // the copy referenced
	Attr    string // its attribute
	Ref     string // the reference as written
	Line    int
	Column  int
}

// Error names the missing attribute.
func (e *MissingError) Error() string {
	return fmt.Sprintf("line %d, column %d: %s: %s.%s is not known yet (is %s applied?)",
		e.Line, e.Column, e.Ref, e.Address, e.Attr, e.Address)
}

// resolver substitutes references.
type resolver struct {
	b       *Bound
	index   int   // the copy index for ${count.index}
	attrs   Attrs // nil: nothing applied
	partial bool  // put Unknown where an attribute is missing
	// unknown collects, by top-level property, the addresses whose
	// attributes were missing.
	unknown map[string][]string
	top     string
}

// Resolve returns the properties of a copy with every reference
// substituted. A reference that is the whole string keeps the value's
// type; references inside a longer string are formatted (an integer in
// decimal, a boolean as true or false). A counted resource referenced
// without an index gives the list of its copies' values. attrs gives the
// attributes of copies already applied; a missing one is a *MissingError.
func (b *Bound) Resolve(address string, attrs Attrs) (map[string]any, error) {
	r, c, err := b.resolverFor(address, attrs, false)
	if err != nil {
		return nil, err
	}
	return r.properties(c)
}

// ResolvePartial is Resolve for a plan: an attribute attrs does not know
// becomes Unknown, and a string embedding one becomes Unknown as a whole.
func (b *Bound) ResolvePartial(address string, attrs Attrs) (map[string]any, error) {
	props, _, err := b.resolvePartial(address, attrs)
	return props, err
}

// resolvePartial also returns, by top-level property, the addresses whose
// unknown attributes it holds.
func (b *Bound) resolvePartial(address string, attrs Attrs) (map[string]any, map[string][]string, error) {
	r, c, err := b.resolverFor(address, attrs, true)
	if err != nil {
		return nil, nil, err
	}
	props, err := r.properties(c)
	return props, r.unknown, err
}

// resolverFor finds the copy and sets up a resolver for it.
func (b *Bound) resolverFor(address string, attrs Attrs, partial bool) (*resolver, *Copy, error) {
	c, ok := b.byAddr[address]
	if !ok {
		return nil, nil, fmt.Errorf("stack: no copy %q in the template", address)
	}
	return &resolver{b: b, index: c.Index, attrs: attrs, partial: partial, unknown: map[string][]string{}}, c, nil
}

// properties resolves a copy's properties, one top-level key at a time.
func (r *resolver) properties(c *Copy) (map[string]any, error) {
	props := c.res.props
	out := make(map[string]any, len(props.keys))
	for _, k := range props.keys {
		r.top = k.key()
		v, err := r.value(props.fields[r.top])
		if err != nil {
			return nil, err
		}
		out[r.top] = v
	}
	return out, nil
}

// Outputs evaluates the template's outputs with the attributes of the
// applied copies; a missing one is a *MissingError.
func (b *Bound) Outputs(attrs Attrs) (map[string]any, error) {
	return b.outputs(attrs, false)
}

// OutputsPartial evaluates the outputs for a plan: what is not known yet
// is Unknown.
func (b *Bound) OutputsPartial(attrs Attrs) (map[string]any, error) {
	return b.outputs(attrs, true)
}

// outputs evaluates every output.
func (b *Bound) outputs(attrs Attrs, partial bool) (map[string]any, error) {
	r := &resolver{b: b, index: -1, attrs: attrs, partial: partial, unknown: map[string][]string{}}
	out := make(map[string]any, len(b.Template.Outputs))
	for _, o := range b.Template.Outputs {
		v, err := r.value(o.value)
		if err != nil {
			return nil, err
		}
		out[o.Name] = v
	}
	return out, nil
}

// value resolves one node.
func (r *resolver) value(n *node) (any, error) {
	switch n.kind {
	case nInterp:
		return r.interp(n)
	case nList:
		out := make([]any, len(n.list))
		for i, e := range n.list {
			v, err := r.value(e)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case nMap:
		out := make(map[string]any, len(n.keys))
		for _, k := range n.keys {
			v, err := r.value(n.fields[k.key()])
			if err != nil {
				return nil, err
			}
			out[k.key()] = v
		}
		return out, nil
	}
	return n.lit, nil
}

// interp resolves a string with references.
func (r *resolver) interp(n *node) (any, error) {
	if len(n.parts) == 1 {
		return r.ref(n.parts[0].ref)
	}
	var s strings.Builder
	unknown := false
	for _, p := range n.parts {
		if p.ref == nil {
			s.WriteString(p.text)
			continue
		}
		v, err := r.ref(p.ref)
		if err != nil {
			return nil, err
		}
		if _, ok := v.(UnknownValue); ok {
			unknown = true
			continue
		}
		text, err := embedText(v)
		if err != nil {
			return nil, fmt.Errorf("line %d, column %d: %s: %w", p.ref.line, p.ref.col, p.ref.text, err)
		}
		s.WriteString(text)
	}
	if unknown {
		return Unknown, nil
	}
	return s.String(), nil
}

// ref resolves one reference.
func (r *resolver) ref(rf *ref) (any, error) {
	switch rf.kind {
	case refParam:
		return copyValue(r.b.Parameters[rf.name]), nil
	case refCountIndex:
		return int64(r.index), nil
	}
	if rf.index >= 0 || r.b.counts[rf.name] < 0 {
		return r.attr(rf, Address(rf.name, rf.index))
	}
	addrs := r.b.addresses(rf.name)
	out := make([]any, len(addrs))
	for i, a := range addrs {
		v, err := r.attr(rf, a)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// attr reads one attribute of one copy.
func (r *resolver) attr(rf *ref, address string) (any, error) {
	if r.attrs != nil {
		if v, ok := r.attrs(address, rf.attr); ok {
			return copyValue(v), nil
		}
	}
	if r.partial {
		r.unknown[r.top] = append(r.unknown[r.top], address)
		return Unknown, nil
	}
	return nil, &MissingError{Address: address, Attr: rf.attr, Ref: rf.text, Line: rf.line, Column: rf.col}
}

// embedText formats a scalar inside a longer string.
func embedText(v any) (string, error) {
	switch x := canon(v).(type) {
	case string:
		return x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return fmtNum(x), nil
	case bool:
		return strconv.FormatBool(x), nil
	case nil:
		return "", fmt.Errorf("the value is null and cannot be part of a string")
	case []any:
		return "", fmt.Errorf("a list cannot be part of a string: make the reference the whole string")
	case map[string]any:
		return "", fmt.Errorf("a mapping cannot be part of a string: make the reference the whole string")
	}
	return "", fmt.Errorf("a %T cannot be part of a string", v)
}

// copyValue copies lists and maps so that callers cannot alias the
// bound values.
func copyValue(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = copyValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = copyValue(e)
		}
		return out
	case json.Number:
		return canon(x)
	}
	return v
}
