package stack

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// mustParse parses a template or fails the test.
func mustParse(t testing.TB, src string) *Template {
	t.Helper()
	tm, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return tm
}

// errorsOf returns the errors of err as "L:C path: msg" lines.
func errorsOf(t *testing.T, err error) []*Error {
	t.Helper()
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error %v (%T) is not Errors", err, err)
	}
	return es
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // "line:col path: message fragment"
	}{
		{"empty", "", []string{"1:1 : the template is empty"}},
		{"not a mapping", "- a\n", []string{"1:1 : the template must be a mapping"}},
		{"syntax", "resources:\n  a: [\n", []string{"2:0 : did not find expected node content"}},
		{"unknown top key", "resources: {}\nfoo: 1\n", []string{"2:1 foo: unknown key"}},
		{"missing resources", "description: x\n", []string{"1:1 : missing resources"}},
		{"bad type", "resources:\n  a:\n    type: vm\n", []string{"3:11 resources.a.type: must be one of address, commitment"}},
		{"missing type", "resources:\n  a:\n    properties: {}\n", []string{"2:3 resources.a: missing type"}},
		{"bad name", "resources:\n  A:\n    type: volume\n", []string{"2:3 resources.A: invalid name"}},
		{"reserved name", "resources:\n  param:\n    type: volume\n", []string{"2:3 resources.param: \"param\" is reserved"}},
		{"count string", "resources:\n  workers:\n    type: instance\n    count: two\n",
			[]string{"4:12 resources.workers.count: must be an integer or a ${param...} reference"}},
		{"count range", "resources:\n  w:\n    type: instance\n    count: 300\n", []string{"4:12 resources.w.count: must be between 0 and 256"}},
		{"count non-integer param", "parameters:\n  n: {type: string, default: x}\nresources:\n  w:\n    type: instance\n    count: ${param.n}\n",
			[]string{"6:12 resources.w.count: parameter n is a string, not an integer"}},
		{"count unknown param", "resources:\n  w:\n    type: instance\n    count: ${param.n}\n",
			[]string{"4:12 resources.w.count: unknown parameter \"n\"; there are no parameters"}},
		{"deletion policy", "resources:\n  v:\n    type: volume\n    deletion_policy: keep\n", []string{"4:22 resources.v.deletion_policy: must be delete or retain"}},
		{"unknown resource key", "resources:\n  v:\n    type: volume\n    tags: {}\n", []string{"4:5 resources.v.tags: unknown key"}},
		{"duplicate key", "resources:\n  v:\n    type: volume\n  v:\n    type: volume\n", []string{"4:3 resources.v: duplicate key (first at line 3)"}},
		{"depends on self", "resources:\n  v:\n    type: volume\n    depends_on: [v]\n", []string{"4:18 resources.v.depends_on[0]: a resource cannot depend on itself"}},
		{"depends on unknown", "resources:\n  v:\n    type: volume\n    depends_on: [x]\n", []string{"4:18 resources.v.depends_on[0]: unknown resource \"x\"; the resources are v"}},
		{"properties not a mapping", "resources:\n  v:\n    type: volume\n    properties: [1]\n", []string{"4:17 resources.v.properties: must be a mapping"}},
		{"unterminated ref", "resources:\n  v:\n    type: volume\n    properties:\n      name: ${param.x\n",
			[]string{"5:13 resources.v.properties.name: unterminated reference"}},
		{"bad ref", "resources:\n  v:\n    type: volume\n    properties:\n      name: ${x}\n",
			[]string{"5:13 resources.v.properties.name: invalid reference ${x}"}},
		{"unknown param ref", "parameters:\n  a: {type: string, default: x}\nresources:\n  v:\n    type: volume\n    properties:\n      name: ${param.b}\n",
			[]string{"7:13 resources.v.properties: ${param.b}: unknown parameter \"b\"; the parameters are a"}},
		{"unknown attr", "resources:\n  v:\n    type: volume\n  i:\n    type: instance\n    properties:\n      volumes: [\"${v.address}\"]\n",
			[]string{"7:17 resources.i.properties: ${v.address}: v (volume) has no attribute \"address\"; its attributes are id, name, zone, size_gib"}},
		{"index on uncounted", "resources:\n  v:\n    type: volume\n  i:\n    type: instance\n    properties:\n      x: ${v[0].id}\n",
			[]string{"7:10 resources.i.properties: ${v[0].id}: v has no count: write ${v.id}"}},
		{"index out of range", "resources:\n  v:\n    type: volume\n    count: 2\n  i:\n    type: instance\n    properties:\n      x: ${v[2].id}\n",
			[]string{"8:10 resources.i.properties: ${v[2].id}: index 2 is out of range: v has 2 copies (count 2)"}},
		{"counted embedded", "resources:\n  v:\n    type: volume\n    count: 2\n  i:\n    type: instance\n    properties:\n      x: a-${v.id}\n",
			[]string{"8:10 resources.i.properties: ${v.id}: v has a count: write ${v[i].id} for one copy"}},
		{"count.index uncounted", "resources:\n  v:\n    type: volume\n    properties:\n      name: v-${count.index}\n",
			[]string{"5:13 resources.v.properties: ${count.index}: ${count.index} is only allowed in the properties of a resource with a count"}},
		{"count.index in output", "resources:\n  v:\n    type: volume\n    count: 1\noutputs:\n  o:\n    value: ${count.index}\n",
			[]string{"7:12 outputs.o.value: ${count.index}: ${count.index} is only allowed"}},
		{"output without value", "resources: {}\noutputs:\n  o: {description: x}\n", []string{"3:6 outputs.o: must be a mapping with a value"}},
		// The shorthand (a bare expression) keeps the errors' positions,
		// its path without ".value"; what is not an expression is not one.
		{"shorthand output, unknown resource", "resources: {}\noutputs:\n  a: \"${nope.id}\"\n",
			[]string{"3:6 outputs.a: ${nope.id}: unknown resource \"nope\""}},
		{"shorthand output, unterminated", "resources: {}\noutputs:\n  a: \"${nope.id\"\n",
			[]string{"3:6 outputs.a: unterminated reference"}},
		{"shorthand output, count.index", "resources:\n  v:\n    type: volume\n    count: 1\noutputs:\n  o: ${count.index}\n",
			[]string{"6:6 outputs.o: ${count.index}: ${count.index} is only allowed"}},
		{"output as a constant", "resources: {}\noutputs:\n  o: hello\n", []string{"3:6 outputs.o: must be a mapping with a value, or an expression"}},
		{"output as a list", "resources: {}\noutputs:\n  o: [\"${a.id}\"]\n", []string{"3:6 outputs.o: must be a mapping with a value, or an expression"}},
		{"cycle", "resources:\n  a:\n    type: volume\n    depends_on: [c]\n  b:\n    type: volume\n    properties: {name: \"${a.name}\"}\n  c:\n    type: volume\n    properties: {name: \"${b.name}\"}\n",
			[]string{"2:3 resources.a: dependency cycle: a -> c -> b -> a"}},
		{"self reference cycle", "resources:\n  a:\n    type: volume\n    properties: {name: \"${a.id}\"}\n",
			[]string{"2:3 resources.a: dependency cycle: a -> a"}},
		{"several errors sorted", "resources:\n  v:\n    type: volume\n    count: -1\n  w:\n    type: nope\nfoo: 1\n", []string{
			"4:12 resources.v.count: must be between 0 and 256",
			"6:11 resources.w.type: must be one of",
			"7:1 foo: unknown key",
		}},
		{"param errors", "parameters:\n  a: {type: integer, default: x}\n  b: {type: float}\n  c: {type: string, pattern: '('}\n  d: {type: boolean, min: 1}\n  e: {type: integer, min: 5, max: 1}\nresources: {}\n", []string{
			"2:31 parameters.a.default: must be an integer",
			"3:13 parameters.b.type: must be one of string, integer, number, boolean, list",
			"4:30 parameters.c.pattern: invalid regular expression",
			"5:27 parameters.d.min: does not apply to a boolean",
			"6:35 parameters.e.max: max 1 is less than min 5",
		}},
		{"default breaks constraint", "parameters:\n  n: {type: integer, default: 0, min: 1}\nresources: {}\n",
			[]string{"2:31 parameters.n.default: 0 is less than min 1"}},
		{"tag", "resources:\n  v:\n    type: volume\n    properties: {name: !Ref x}\n", []string{"4:24 resources.v.properties.name: unsupported tag !Ref"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.src))
			if err == nil {
				t.Fatal("no error")
			}
			es := errorsOf(t, err)
			if len(es) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(es), len(tt.want), err)
			}
			for i, e := range es {
				got := formatPos(e)
				if !strings.HasPrefix(got, tt.want[i]) {
					t.Errorf("error %d:\n got %s\nwant %s...", i, got, tt.want[i])
				}
			}
		})
	}
}

// formatPos writes an error as "line:col path: msg".
func formatPos(e *Error) string {
	return strings.Join([]string{itoa(e.Line), ":", itoa(e.Column), " ", e.Path, ": ", e.Msg}, "")
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestErrorFormat(t *testing.T) {
	e := &Error{Line: 12, Column: 5, Path: "resources.workers.count", Msg: "must be an integer or a ${param...} reference"}
	if got, want := e.Error(), "line 12, column 5: resources.workers.count: must be an integer or a ${param...} reference"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := (&Error{Line: 3, Msg: "x"}).Error(); got != "line 3: x" {
		t.Errorf("got %q", got)
	}
	if got := (&Error{Msg: "x"}).Error(); got != "x" {
		t.Errorf("got %q", got)
	}
	es := Errors{{Line: 1, Column: 1, Msg: "a"}, {Line: 2, Column: 1, Msg: "b"}}
	if got := es.Error(); got != "line 1, column 1: a\nline 2, column 1: b" {
		t.Errorf("got %q", got)
	}
}

func TestParseLimits(t *testing.T) {
	big := make([]byte, MaxTemplateBytes+1)
	if _, err := Parse(big); err == nil || !strings.Contains(err.Error(), "limit is 1048576") {
		t.Errorf("big template: %v", err)
	}
	var b strings.Builder
	b.WriteString("resources:\n")
	for i := range MaxResources + 1 {
		b.WriteString("  r" + itoa(i) + ": {type: volume}\n")
	}
	if _, err := Parse([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "501 resources; the limit is 500") {
		t.Errorf("too many resources: %v", err)
	}
	// A billion laughs stays bounded.
	laughs := "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
		"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
	if _, err := Parse([]byte("resources:\n  v:\n    type: volume\n    properties:\n      " + strings.ReplaceAll(laughs, "\n", "\n      "))); err == nil ||
		!strings.Contains(err.Error(), "more than 200000 values") {
		t.Errorf("aliases: %v", err)
	}
}

func TestParseJSON(t *testing.T) {
	src := "{\n\t\"parameters\": {\"n\": {\"type\": \"integer\", \"default\": 2}},\n\t\"resources\": {\n\t\t\"w\": {\"type\": \"instance\", \"count\": \"${param.n}\",\n\t\t\t\"properties\": {\"offering\": \"h100.1x\", \"name\": \"w-${count.index}\"}}\n\t},\n\t\"outputs\": {\"ids\": {\"value\": \"${w.id}\"}}\n}\n"
	tm := mustParse(t, src)
	if len(tm.Resources) != 1 || tm.Resources[0].Count.Param != "n" {
		t.Fatalf("resources: %+v", tm.Resources)
	}
	_, err := Parse([]byte("{\"resources\": {\"w\": {\"type\": \"instance\", \"count\": \"x\"}}}"))
	es := errorsOf(t, err)
	if formatPos(es[0]) != "1:51 resources.w.count: must be an integer or a ${param...} reference" {
		t.Errorf("got %s", formatPos(es[0]))
	}
}

func TestParseKeepsFileOrder(t *testing.T) {
	tm := mustParse(t, "resources:\n  z: {type: volume}\n  a: {type: volume}\n  m: {type: address}\n")
	var names []string
	for _, r := range tm.Resources {
		names = append(names, r.Name)
	}
	if strings.Join(names, ",") != "z,a,m" {
		t.Errorf("order %v", names)
	}
	if r, ok := tm.Resource("m"); !ok || r.Type != TypeAddress || r.DeletionPolicy != DeletionDelete {
		t.Errorf("Resource(m) = %+v", r)
	}
}

// TestParseOutputShorthand: a bare expression as an output is its value,
// as {value: ...} would be, and evaluates alike.
func TestParseOutputShorthand(t *testing.T) {
	const res = "resources:\n  head: {type: instance, properties: {offering: l4.1x}}\n"
	for _, tt := range []struct {
		name, outputs string
		want          any
	}{
		{"bare expression", "  id: \"${head.id}\"\n", "i-1"},
		{"unquoted", "  id: ${head.id}\n", "i-1"},
		{"interpolated", "  id: \"head ${head.id} in ${head.zone}\"\n", "head i-1 in z1"},
		{"full form", "  id: {value: \"${head.id}\", description: the head}\n", "i-1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tm := mustParse(t, res+"outputs:\n"+tt.outputs)
			if len(tm.Outputs) != 1 || tm.Outputs[0].Name != "id" || tm.Outputs[0].Line != 4 || tm.Outputs[0].Column != 3 {
				t.Fatalf("outputs %+v", tm.Outputs)
			}
			b, err := tm.Bind(nil)
			if err != nil {
				t.Fatal(err)
			}
			live := map[string]map[string]any{"head": {"id": "i-1", "zone": "z1"}}
			outs, err := b.Outputs(func(addr, attr string) (any, bool) { v, ok := live[addr][attr]; return v, ok })
			if err != nil || outs["id"] != tt.want {
				t.Errorf("outputs = %v, %v; want id %v", outs, err, tt.want)
			}
		})
	}
}
