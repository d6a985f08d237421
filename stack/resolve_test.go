package stack

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

const refsTemplate = `
parameters:
  n: {type: integer, default: 2}
  ratio: {type: number, default: 0.5}
  spot: {type: boolean, default: true}
  labels: {type: list, default: ["driver>=550", "interconnect=infiniband"]}
  name: {type: string, default: job}
resources:
  vol:
    type: volume
    properties: {name: "${param.name}-data", size_gib: 100}
  workers:
    type: instance
    count: ${param.n}
    properties:
      name: ${param.name}-${count.index}
      rank: ${count.index}
      labels: ${param.labels}
      nodes: ${param.n}
      ratio: ${param.ratio}
      spot: ${param.spot}
      note: "n=${param.n} ratio=${param.ratio} spot=${param.spot}"
      escaped: "$${HOME} and $${param.n} stay, ${param.n} goes"
      shell: "echo $MASTER_ADDR $$"
  head:
    type: instance
    properties:
      volumes: ["${vol.id}"]
      peers: ${workers.private_address}
      first: ${workers[0].id}
      size: ${vol.size_gib}
      greeting: "vol ${vol.id} of ${vol.size_gib} GiB"
outputs:
  head: {value: "${head.id}"}
  workers: {value: "${workers.id}"}
  summary: {value: {count: "${param.n}", first: "w=${workers[0].id}"}}
`

// fakeAttrs answers every attribute as "ADDRESS.ATTR", size_gib as 100.
func fakeAttrs(address, attr string) (any, bool) {
	if attr == "size_gib" {
		return 100, true
	}
	return address + "." + attr, true
}

func TestResolve(t *testing.T) {
	b, err := mustParse(t, refsTemplate).Bind(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Resolve("workers[1]", fakeAttrs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"name":    "job-1",
		"rank":    int64(1),
		"labels":  []any{"driver>=550", "interconnect=infiniband"},
		"nodes":   int64(2),
		"ratio":   0.5,
		"spot":    true,
		"note":    "n=2 ratio=0.5 spot=true",
		"escaped": "${HOME} and ${param.n} stay, 2 goes",
		"shell":   "echo $MASTER_ADDR $$",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("workers[1]:\n got %#v\nwant %#v", got, want)
	}
	got, err = b.Resolve("head", fakeAttrs)
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]any{
		"volumes":  []any{"vol.id"},
		"peers":    []any{"workers[0].private_address", "workers[1].private_address"},
		"first":    "workers[0].id",
		"size":     100,
		"greeting": "vol vol.id of 100 GiB",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("head:\n got %#v\nwant %#v", got, want)
	}
	// Resolving must not let callers alias the parameters.
	got, _ = b.Resolve("workers[0]", fakeAttrs)
	got["labels"].([]any)[0] = "changed"
	if b.Parameters["labels"].([]any)[0] != "driver>=550" {
		t.Error("Resolve aliases a list parameter")
	}
	outs, err := b.Outputs(fakeAttrs)
	if err != nil {
		t.Fatal(err)
	}
	wantOut := map[string]any{"head": "head.id", "workers": []any{"workers[0].id", "workers[1].id"},
		"summary": map[string]any{"count": int64(2), "first": "w=workers[0].id"}}
	if !reflect.DeepEqual(outs, wantOut) {
		t.Errorf("outputs:\n got %#v\nwant %#v", outs, wantOut)
	}
}

func TestResolveMissing(t *testing.T) {
	b, _ := mustParse(t, refsTemplate).Bind(nil)
	only := func(address, attr string) (any, bool) {
		if address == "vol" {
			return fakeAttrs(address, attr)
		}
		return nil, false
	}
	_, err := b.Resolve("head", only)
	var me *MissingError
	if !errors.As(err, &me) || me.Address != "workers[0]" || me.Attr != "private_address" {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "${workers.private_address}: workers[0].private_address is not known yet") {
		t.Errorf("message %q", err)
	}
	if _, err := b.Resolve("nope", only); err == nil {
		t.Error("unknown address resolved")
	}
	got, err := b.ResolvePartial("head", only)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"volumes":  []any{"vol.id"},
		"peers":    []any{Unknown, Unknown},
		"first":    Unknown,
		"size":     100,
		"greeting": "vol vol.id of 100 GiB",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("partial:\n got %#v\nwant %#v", got, want)
	}
	got, _ = b.ResolvePartial("head", nil)
	if got["greeting"] != Unknown {
		t.Errorf("an embedded unknown makes the string unknown: %#v", got["greeting"])
	}
	js, _ := json.Marshal(got["first"])
	if string(js) != `"(known after apply)"` || Unknown.String() != "(known after apply)" {
		t.Errorf("Unknown renders as %s", js)
	}
	outs, err := b.OutputsPartial(only)
	if err != nil || outs["head"] != Unknown {
		t.Errorf("OutputsPartial = %v, %v", outs, err)
	}
	if _, err := b.Outputs(only); err == nil {
		t.Error("Outputs with missing attributes succeeded")
	}
}

func TestResolveEmbedErrors(t *testing.T) {
	b, err := mustParse(t, `
resources:
  v: {type: volume}
  i:
    type: instance
    properties:
      name: "x-${v.size_gib}"
`).Bind(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		v   any
		err string
	}{
		{[]any{1}, "a list cannot be part of a string"},
		{map[string]any{}, "a mapping cannot be part of a string"},
		{nil, "the value is null"},
	} {
		_, err := b.Resolve("i", func(string, string) (any, bool) { return tt.v, true })
		if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "line 7, column 13") {
			t.Errorf("embedding %#v: %v", tt.v, err)
		}
	}
	got, err := b.Resolve("i", func(string, string) (any, bool) { return 2.5, true })
	if err != nil || got["name"] != "x-2.5" {
		t.Errorf("float embedded: %v %v", got, err)
	}
}

func TestParseInterp(t *testing.T) {
	for _, tt := range []struct {
		in    string
		parts int
		err   string
	}{
		{"plain", 1, ""},
		{"${param.a}", 1, ""},
		{"a${param.a}b${x.id}", 4, ""},
		{"$${param.a}", 1, ""},
		{"${x[3].id}", 1, ""},
		{"${x[03].id}", 0, "invalid reference"},
		{"${x[-1].id}", 0, "invalid reference"},
		{"${x.}", 0, "invalid reference"},
		{"${param.}", 0, "invalid reference"},
		{"${count.id}", 0, "invalid reference"},
		{"${ param.a }", 0, "invalid reference"},
		{"${param.a", 0, "unterminated reference"},
	} {
		parts, msg := parseInterp(tt.in)
		if tt.err != "" {
			if !strings.Contains(msg, tt.err) {
				t.Errorf("%q: message %q, want %q", tt.in, msg, tt.err)
			}
			continue
		}
		if msg != "" || len(parts) != tt.parts {
			t.Errorf("%q: %d parts, %q", tt.in, len(parts), msg)
		}
	}
}

func TestEqual(t *testing.T) {
	for _, tt := range []struct {
		a, b any
		eq   bool
	}{
		{1, 1.0, true},
		{int64(2), json.Number("2"), true},
		{1, 1.5, false},
		{"1", 1, false},
		{map[string]any{"a": 1, "b": nil}, map[string]any{"a": 1.0}, true},
		{map[string]any{"a": 1}, map[string]string{"a": "1"}, false},
		{map[string]string{"a": "x"}, map[string]any{"a": "x"}, true},
		{[]string{"a", "b"}, []any{"a", "b"}, true},
		{[]any{"a", "b"}, []any{"b", "a"}, false},
		{nil, nil, true},
		{Unknown, Unknown, false},
		{[]any{Unknown}, []any{Unknown}, false},
	} {
		if got := Equal(tt.a, tt.b); got != tt.eq {
			t.Errorf("Equal(%#v, %#v) = %v", tt.a, tt.b, got)
		}
	}
}
