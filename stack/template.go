package stack

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Limits on templates.
const (
	MaxTemplateBytes = 1 << 20 // the largest source Parse accepts
	MaxResources     = 500     // resources in one template
	MaxCount         = 256     // copies of one counted resource
)

// Deletion policies.
const (
	DeletionDelete = "delete" // the default: destroy and removal delete it
	DeletionRetain = "retain" // destroy and removal forget it, leaving it alive
)

// Template is a parsed, checked template.
type Template struct {
	Description string
	// Parameters, Resources and Outputs are in file order.
	Parameters []*Parameter
	Resources  []*Resource
	Outputs    []*Output

	params    map[string]*Parameter
	resources map[string]*Resource
}

// Resource is one declared resource.
type Resource struct {
	Name string
	Type string
	// Properties are the properties as written: strings with references
	// keep their source text.
	Properties map[string]any
	// DependsOn are the explicit dependencies (resource names).
	DependsOn []string
	// Count is nil for a single resource.
	Count *Count
	// DeletionPolicy is DeletionDelete or DeletionRetain.
	DeletionPolicy string
	// Line and Column locate the resource's name.
	Line, Column int

	props *node
	refs  []*ref // every reference in the properties
	order int    // the position in file order
}

// Counted reports whether the resource has a count (even a count of 1):
// its copies are addressed NAME[i].
func (r *Resource) Counted() bool { return r.Count != nil }

// Count is how many copies of a resource there are: N, or when Param is
// set, the integer parameter's value plus Delta ("${param.nodes - 1}").
type Count struct {
	N     int
	Param string
	Delta int
}

// String writes the count as in a template.
func (c *Count) String() string {
	if c.Param == "" {
		return strconv.Itoa(c.N)
	}
	return countExpr{param: c.Param, delta: c.Delta}.String()
}

// Output is one declared output.
type Output struct {
	Name        string
	Description string
	// Value is the expression as written.
	Value any
	// Line and Column locate the output's name.
	Line, Column int

	value *node
	refs  []*ref
	// path names the value in errors: outputs.NAME.value, or
	// outputs.NAME for the shorthand (a bare expression).
	path string
}

// Parameter returns a declared parameter.
func (t *Template) Parameter(name string) (*Parameter, bool) {
	p, ok := t.params[name]
	return p, ok
}

// Resource returns a declared resource.
func (t *Template) Resource(name string) (*Resource, bool) {
	r, ok := t.resources[name]
	return r, ok
}

// topKeys are the keys a template may have.
var topKeys = []string{"description", "parameters", "resources", "outputs"}

// resourceKeys are the keys a resource may have.
var resourceKeys = []string{"type", "properties", "depends_on", "count", "deletion_policy"}

// outputKeys are the keys an output may have.
var outputKeys = []string{"value", "description"}

// Parse parses and checks a template, YAML or JSON. Its errors are Errors,
// every problem found with its position.
func Parse(src []byte) (*Template, error) {
	errs := &errList{}
	if len(src) > MaxTemplateBytes {
		errs.at(1, 1, "", "the template is %d bytes; the limit is %d", len(src), MaxTemplateBytes)
		return nil, errs.err()
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		syntaxError(err, errs)
		return nil, errs.err()
	}
	c := &converter{errs: errs}
	root := c.convert(&doc, "")
	if doc.Kind == 0 || root.kind == nLiteral && root.lit == nil {
		errs.at(1, 1, "", "the template is empty")
		return nil, errs.err()
	}
	if root.kind != nMap {
		errs.atNode(root, "", "the template must be a mapping with the keys %s", strings.Join(topKeys, ", "))
		return nil, errs.err()
	}
	t := &Template{params: map[string]*Parameter{}, resources: map[string]*Resource{}}
	checkKeys(root, "", topKeys, errs)
	t.Description = stringField(root, "description", "", errs)
	t.parseParameters(root.get("parameters"), errs)
	if root.get("resources") == nil {
		errs.atNode(root, "", "missing resources")
	}
	t.parseResources(root.get("resources"), errs)
	t.parseOutputs(root.get("outputs"), errs)
	t.checkRefs(errs)
	t.checkCycles(errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return t, nil
}

// yamlLine finds the line number in a yaml.v3 error message.
var yamlLine = regexp.MustCompile(`line (\d+): (.*)`)

// syntaxError converts the YAML parser's errors, which carry a line only.
func syntaxError(err error, errs *errList) {
	msgs := []string{err.Error()}
	if te, ok := err.(*yaml.TypeError); ok {
		msgs = te.Errors
	}
	for _, m := range msgs {
		m = strings.TrimPrefix(m, "yaml: ")
		if sm := yamlLine.FindStringSubmatch(m); sm != nil {
			line, _ := strconv.Atoi(sm[1])
			errs.at(line, 0, "", "%s", sm[2])
			continue
		}
		errs.at(1, 0, "", "%s", m)
	}
}

// checkKeys reports keys of the mapping n that are not in allowed.
func checkKeys(n *node, path string, allowed []string, errs *errList) {
	for _, k := range n.keys {
		if !slices.Contains(allowed, k.key()) {
			errs.atNode(k, joinPath(path, k.key()), "unknown key; the keys are %s", strings.Join(allowed, ", "))
		}
	}
}

// stringField reads an optional string field.
func stringField(n *node, key, path string, errs *errList) string {
	v := n.get(key)
	if v == nil || v.kind == nLiteral && v.lit == nil {
		return ""
	}
	s, ok := v.lit.(string)
	if !ok || v.kind != nLiteral {
		errs.atNode(v, joinPath(path, key), "must be a string")
	}
	return s
}

// section returns a top-level section as a mapping; absent or null is
// empty.
func section(n *node, path string, errs *errList) *node {
	if n == nil || n.kind == nLiteral && n.lit == nil {
		return nil
	}
	if n.kind != nMap {
		errs.atNode(n, path, "must be a mapping of names")
		return nil
	}
	return n
}

// checkName reports a name that does not fit the name pattern.
func checkName(k *node, path string, errs *errList) bool {
	if !namePattern.MatchString(k.key()) {
		errs.atNode(k, path, "invalid name: use 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter")
		return false
	}
	return true
}

// parseParameters reads the parameters section.
func (t *Template) parseParameters(n *node, errs *errList) {
	n = section(n, "parameters", errs)
	if n == nil {
		return
	}
	for _, k := range n.keys {
		path := "parameters." + k.key()
		if !checkName(k, path, errs) {
			continue
		}
		if p := parseParameter(k.key(), k, n.fields[k.key()], path, errs); p != nil {
			t.Parameters = append(t.Parameters, p)
			t.params[p.Name] = p
		}
	}
}

// parseResources reads the resources section.
func (t *Template) parseResources(n *node, errs *errList) {
	n = section(n, "resources", errs)
	if n == nil {
		return
	}
	if len(n.keys) > MaxResources {
		errs.atNode(n, "resources", "%d resources; the limit is %d", len(n.keys), MaxResources)
		return
	}
	for _, k := range n.keys {
		path := "resources." + k.key()
		if !checkName(k, path, errs) {
			continue
		}
		if k.key() == "param" || k.key() == "count" {
			errs.atNode(k, path, "%q is reserved for references", k.key())
			continue
		}
		if r := t.parseResource(k, n.fields[k.key()], path, errs); r != nil {
			r.order = len(t.Resources)
			t.Resources = append(t.Resources, r)
			t.resources[r.Name] = r
		}
	}
	for _, r := range t.Resources {
		t.checkDependsOn(r, n.fields[r.Name].get("depends_on"), "resources."+r.Name+".depends_on", errs)
	}
}

// parseResource reads one resource, except its depends_on, which needs
// every name.
func (t *Template) parseResource(k, n *node, path string, errs *errList) *Resource {
	if n.kind != nMap {
		errs.atNode(n, path, "must be a mapping with a type")
		return nil
	}
	checkKeys(n, path, resourceKeys, errs)
	r := &Resource{Name: k.key(), Line: k.line, Column: k.col, DeletionPolicy: DeletionDelete}
	tn := n.get("type")
	if tn == nil {
		errs.atNode(k, path, "missing type (one of %s)", strings.Join(typeNames(), ", "))
		return nil
	}
	r.Type, _ = tn.lit.(string)
	if _, ok := Types[r.Type]; !ok || tn.kind != nLiteral {
		errs.atNode(tn, path+".type", "must be one of %s", strings.Join(typeNames(), ", "))
		return nil
	}
	r.props = &node{kind: nMap, line: k.line, col: k.col, fields: map[string]*node{}}
	if pn := n.get("properties"); pn != nil && !(pn.kind == nLiteral && pn.lit == nil) {
		if pn.kind != nMap {
			errs.atNode(pn, path+".properties", "must be a mapping")
		} else {
			r.props = interpolate(pn, path+".properties", errs)
		}
	}
	r.Properties, _ = r.props.rawValue().(map[string]any)
	r.refs = collectRefs(r.props)
	r.Count = t.parseCount(n.get("count"), path+".count", errs)
	if dp := n.get("deletion_policy"); dp != nil {
		s, _ := dp.lit.(string)
		if s != DeletionDelete && s != DeletionRetain {
			errs.atNode(dp, path+".deletion_policy", "must be delete or retain")
		} else {
			r.DeletionPolicy = s
		}
	}
	return r
}

// parseCount reads a count: an integer or a reference to an integer
// parameter.
func (t *Template) parseCount(n *node, path string, errs *errList) *Count {
	if n == nil {
		return nil
	}
	switch v := n.lit.(type) {
	case int64:
		if v < 0 || v > MaxCount {
			errs.atNode(n, path, "must be between 0 and %d", MaxCount)
			return nil
		}
		return &Count{N: int(v)}
	case string:
		ce, ok := parseCount(v)
		if !ok {
			break
		}
		p, ok := t.params[ce.param]
		switch {
		case !ok:
			errs.atNode(n, path, "unknown parameter %q%s", ce.param, t.paramList())
		case p.Type != ParamInteger:
			errs.atNode(n, path, "parameter %s is %s, not an integer", p.Name, p.typeWord())
		default:
			return &Count{Param: ce.param, Delta: ce.delta}
		}
		return nil
	}
	errs.atNode(n, path, "must be an integer or a ${param...} reference")
	return nil
}

// checkDependsOn reads depends_on.
func (t *Template) checkDependsOn(r *Resource, n *node, path string, errs *errList) {
	if n == nil {
		return
	}
	if n.kind != nList {
		errs.atNode(n, path, "must be a list of resource names")
		return
	}
	for i, e := range n.list {
		epath := fmt.Sprintf("%s[%d]", path, i)
		name, ok := e.lit.(string)
		switch {
		case !ok || e.kind != nLiteral:
			errs.atNode(e, epath, "must be a resource name")
		case name == r.Name:
			errs.atNode(e, epath, "a resource cannot depend on itself")
		case t.resources[name] == nil:
			errs.atNode(e, epath, "unknown resource %q%s", name, t.resourceList())
		case slices.Contains(r.DependsOn, name):
			errs.atNode(e, epath, "%s is listed twice", name)
		default:
			r.DependsOn = append(r.DependsOn, name)
		}
	}
}

// parseOutputs reads the outputs section.
func (t *Template) parseOutputs(n *node, errs *errList) {
	n = section(n, "outputs", errs)
	if n == nil {
		return
	}
	for _, k := range n.keys {
		path := "outputs." + k.key()
		if !checkName(k, path, errs) {
			continue
		}
		on := n.fields[k.key()]
		o := &Output{Name: k.key(), Line: k.line, Column: k.col}
		if s, ok := on.lit.(string); ok && on.kind == nLiteral && strings.Contains(s, "${") {
			// The shorthand: `head: "${head.id}"` is {value: "${head.id}"}.
			o.path = path
			o.value = interpolate(on, o.path, errs)
		} else {
			if on.kind != nMap || on.get("value") == nil {
				errs.atNode(on, path, `must be a mapping with a value, or an expression ("${resource.attribute}")`)
				continue
			}
			checkKeys(on, path, outputKeys, errs)
			o.Description = stringField(on, "description", path, errs)
			o.path = path + ".value"
			o.value = interpolate(on.get("value"), o.path, errs)
		}
		o.Value = o.value.rawValue()
		o.refs = collectRefs(o.value)
		t.Outputs = append(t.Outputs, o)
	}
}

// collectRefs lists the references under n.
func collectRefs(n *node) []*ref {
	var refs []*ref
	n.walk(func(m *node) {
		for _, p := range m.parts {
			if p.ref != nil {
				refs = append(refs, p.ref)
			}
		}
	})
	return refs
}

// paramList and resourceList name what exists, for messages.
func (t *Template) paramList() string {
	names := make([]string, len(t.Parameters))
	for i, p := range t.Parameters {
		names[i] = p.Name
	}
	return nameList("parameters", names)
}

func (t *Template) resourceList() string {
	names := make([]string, len(t.Resources))
	for i, r := range t.Resources {
		names[i] = r.Name
	}
	return nameList("resources", names)
}

// nameList joins at most 20 names after "; the KIND are ".
func nameList(kind string, names []string) string {
	switch {
	case len(names) == 0:
		return "; there are no " + kind
	case len(names) > 20:
		return "; the " + kind + " are " + strings.Join(names[:20], ", ") + fmt.Sprintf(" and %d more", len(names)-20)
	}
	return "; the " + kind + " are " + strings.Join(names, ", ")
}
