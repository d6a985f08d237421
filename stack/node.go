package stack

import (
	"math"
	"strconv"

	"gopkg.in/yaml.v3"
)

// nodeKind is what a template value is.
type nodeKind int

const (
	nLiteral nodeKind = iota // a scalar: nil, bool, int64, float64 or string
	nInterp                  // a string with references in it
	nList
	nMap
)

// node is a template value with its position: the YAML tree converted to
// Go scalars, with every string of properties and outputs parsed into
// literal text and references.
type node struct {
	kind      nodeKind
	line, col int
	lit       any     // nLiteral
	raw       string  // nInterp: the source text
	parts     []part  // nInterp
	list      []*node // nList
	keys      []*node // nMap: key nodes in file order (literal strings)
	fields    map[string]*node
}

// key returns a mapping key's text.
func (n *node) key() string { s, _ := n.lit.(string); return s }

// get returns the value of a mapping key, or nil.
func (n *node) get(k string) *node {
	if n == nil || n.kind != nMap {
		return nil
	}
	return n.fields[k]
}

// rawValue is the value as written: scalars as decoded, strings with
// references as their source text.
func (n *node) rawValue() any {
	switch n.kind {
	case nInterp:
		return n.raw
	case nList:
		out := make([]any, len(n.list))
		for i, e := range n.list {
			out[i] = e.rawValue()
		}
		return out
	case nMap:
		out := make(map[string]any, len(n.keys))
		for _, k := range n.keys {
			out[k.key()] = n.fields[k.key()].rawValue()
		}
		return out
	}
	return n.lit
}

// walk calls f on n and every node under it, values before their children.
func (n *node) walk(f func(*node)) {
	f(n)
	switch n.kind {
	case nList:
		for _, e := range n.list {
			e.walk(f)
		}
	case nMap:
		for _, k := range n.keys {
			n.fields[k.key()].walk(f)
		}
	}
}

// maxNodes bounds the values a template may expand to, aliases included,
// so that a small document of nested aliases cannot exhaust memory.
const maxNodes = 200000

// converter turns a yaml.Node tree into nodes, collecting errors.
type converter struct {
	errs  *errList
	count int
}

// convert converts y; strings stay literal (interpolate parses them).
func (c *converter) convert(y *yaml.Node, path string) *node {
	c.count++
	if c.count > maxNodes {
		if c.count == maxNodes+1 {
			c.errs.at(y.Line, y.Column, path, "template expands to more than %d values", maxNodes)
		}
		return &node{kind: nLiteral, line: y.Line, col: y.Column}
	}
	switch y.Kind {
	case yaml.AliasNode:
		n := c.convert(y.Alias, path)
		cp := *n
		cp.line, cp.col = y.Line, y.Column
		return &cp
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return &node{kind: nLiteral, line: y.Line, col: y.Column}
		}
		return c.convert(y.Content[0], path)
	case yaml.SequenceNode:
		n := &node{kind: nList, line: y.Line, col: y.Column, list: make([]*node, 0, len(y.Content))}
		for i, e := range y.Content {
			n.list = append(n.list, c.convert(e, path+"["+strconv.Itoa(i)+"]"))
		}
		return n
	case yaml.MappingNode:
		return c.mapping(y, path)
	}
	return c.scalar(y, path)
}

// mapping converts a mapping, rejecting merge keys, non-scalar keys and
// duplicates.
func (c *converter) mapping(y *yaml.Node, path string) *node {
	n := &node{kind: nMap, line: y.Line, col: y.Column, fields: make(map[string]*node, len(y.Content)/2)}
	for i := 0; i+1 < len(y.Content); i += 2 {
		ky, vy := y.Content[i], y.Content[i+1]
		for ky.Kind == yaml.AliasNode && ky.Alias != nil {
			ky = ky.Alias
		}
		if ky.Kind != yaml.ScalarNode {
			c.errs.at(ky.Line, ky.Column, path, "a mapping key must be a scalar")
			continue
		}
		if ky.Tag == "!!merge" {
			c.errs.at(ky.Line, ky.Column, path, "merge keys (<<) are not supported")
			continue
		}
		k := ky.Value
		sub := joinPath(path, k)
		if prev, dup := n.fields[k]; dup {
			c.errs.at(ky.Line, ky.Column, sub, "duplicate key (first at line %d)", prev.line)
			continue
		}
		n.keys = append(n.keys, &node{kind: nLiteral, lit: k, line: ky.Line, col: ky.Column})
		n.fields[k] = c.convert(vy, sub)
	}
	return n
}

// scalar converts a scalar by its resolved tag.
func (c *converter) scalar(y *yaml.Node, path string) *node {
	n := &node{kind: nLiteral, line: y.Line, col: y.Column}
	switch y.ShortTag() {
	case "!!null":
	case "!!bool":
		var b bool
		if err := y.Decode(&b); err != nil {
			c.errs.at(y.Line, y.Column, path, "invalid boolean %q", y.Value)
		}
		n.lit = b
	case "!!int":
		var i int64
		if err := y.Decode(&i); err != nil {
			c.errs.at(y.Line, y.Column, path, "integer %s is out of range", y.Value)
		}
		n.lit = i
	case "!!float":
		var f float64
		if err := y.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			c.errs.at(y.Line, y.Column, path, "%s is not a finite number", y.Value)
		}
		n.lit = f
	case "!!str", "!!timestamp", "!!binary":
		n.lit = y.Value
	default:
		c.errs.at(y.Line, y.Column, path, "unsupported tag %s", y.Tag)
	}
	return n
}

// interpolate returns n with every string under it parsed for
// references: a string with references becomes an nInterp node, one with
// only escapes the literal text.
func interpolate(n *node, path string, errs *errList) *node {
	switch n.kind {
	case nList:
		cp := *n
		cp.list = make([]*node, len(n.list))
		for i, e := range n.list {
			cp.list[i] = interpolate(e, path+"["+strconv.Itoa(i)+"]", errs)
		}
		return &cp
	case nMap:
		cp := *n
		cp.fields = make(map[string]*node, len(n.fields))
		for _, k := range n.keys {
			cp.fields[k.key()] = interpolate(n.fields[k.key()], joinPath(path, k.key()), errs)
		}
		return &cp
	}
	s, ok := n.lit.(string)
	if !ok || n.kind != nLiteral {
		return n
	}
	parts, msg := parseInterp(s)
	if msg != "" {
		errs.atNode(n, path, "%s", msg)
		return n
	}
	if !hasRef(parts) {
		return &node{kind: nLiteral, lit: parts[0].text + joinText(parts[1:]), line: n.line, col: n.col}
	}
	for _, p := range parts {
		if p.ref != nil {
			p.ref.line, p.ref.col = n.line, n.col
			p.ref.alone = len(parts) == 1
		}
	}
	return &node{kind: nInterp, raw: s, parts: parts, line: n.line, col: n.col}
}

// joinText concatenates literal parts.
func joinText(parts []part) string {
	s := ""
	for _, p := range parts {
		s += p.text
	}
	return s
}

// joinPath appends a key to a dotted path.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
