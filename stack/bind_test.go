package stack

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

const paramsTemplate = `
parameters:
  name: {type: string, default: job, min: 2, max: 8, pattern: '[a-z]+'}
  zone: {type: string, default: z1, allowed: [z1, z2]}
  nodes: {type: integer, default: 2, min: 1, max: 16}
  ratio: {type: number, default: 0.5, min: 0, max: 1}
  spot: {type: boolean, default: false}
  tags: {type: list, default: [a], max: 3, allowed: [a, b, c, "1"]}
  labels: {type: list, default: [], pattern: '[a-z]+(>=|=)[0-9a-z]+'}
  must: {type: integer}
resources: {}
`

func TestBindArgs(t *testing.T) {
	tm := mustParse(t, paramsTemplate)
	tests := []struct {
		args map[string]string
		want map[string]any // checked keys
		err  string
	}{
		{args: map[string]string{"must": "3"}, want: map[string]any{"name": "job", "nodes": int64(2), "ratio": 0.5, "spot": false, "tags": []any{"a"}, "labels": []any{}, "must": int64(3)}},
		{args: map[string]string{"must": "1", "name": "abc", "nodes": "16", "ratio": "0.25", "spot": "true", "tags": "a,b", "labels": `["driver>=550"]`},
			want: map[string]any{"name": "abc", "nodes": int64(16), "ratio": 0.25, "spot": true, "tags": []any{"a", "b"}, "labels": []any{"driver>=550"}}},
		{args: map[string]string{"must": "1", "tags": "[1]"}, err: "parameter tags: element 0: 1 is not allowed"},
		{args: map[string]string{"must": "1", "tags": `["1"]`}, want: map[string]any{"tags": []any{"1"}}},
		{args: map[string]string{}, err: "parameter must: missing a value (it has no default)"},
		{args: map[string]string{"must": "1", "bogus": "x"}, err: `unknown parameter "bogus"; the parameters are name, zone, nodes, ratio, spot, tags, labels, must`},
		{args: map[string]string{"must": "x"}, err: `parameter must: "x" is not an integer`},
		{args: map[string]string{"must": "1.5"}, err: `parameter must: "1.5" is not an integer`},
		{args: map[string]string{"must": "1", "nodes": "0"}, err: "parameter nodes: 0 is less than min 1"},
		{args: map[string]string{"must": "1", "nodes": "17"}, err: "parameter nodes: 17 is more than max 16"},
		{args: map[string]string{"must": "1", "ratio": "1.5"}, err: "parameter ratio: 1.5 is more than max 1"},
		{args: map[string]string{"must": "1", "ratio": "x"}, err: `parameter ratio: "x" is not a number`},
		{args: map[string]string{"must": "1", "spot": "yes"}, err: `parameter spot: "yes" is not a boolean (true or false)`},
		{args: map[string]string{"must": "1", "name": "a"}, err: "parameter name: length 1 is less than min 2"},
		{args: map[string]string{"must": "1", "name": "abcdefghi"}, err: "parameter name: length 9 is more than max 8"},
		{args: map[string]string{"must": "1", "name": "ab1"}, err: `parameter name: "ab1" does not match pattern [a-z]+`},
		{args: map[string]string{"must": "1", "zone": "z3"}, err: `parameter zone: "z3" is not allowed (allowed: "z1", "z2")`},
		{args: map[string]string{"must": "1", "tags": "a,b,c,a"}, err: "parameter tags: length 4 is more than max 3"},
		{args: map[string]string{"must": "1", "labels": "driver>=550,bad label"}, err: `parameter labels: element 1: "bad label" does not match pattern`},
		{args: map[string]string{"must": "1", "labels": "[1"}, err: `parameter labels: "[1" is not a JSON array`},
	}
	for _, tt := range tests {
		b, err := tm.Bind(tt.args)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Bind(%v) = %v, want error %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Bind(%v): %v", tt.args, err)
			continue
		}
		for k, v := range tt.want {
			if !reflect.DeepEqual(b.Parameters[k], v) {
				t.Errorf("Bind(%v): %s = %#v, want %#v", tt.args, k, b.Parameters[k], v)
			}
		}
	}
}

func TestBindErrorsAll(t *testing.T) {
	tm := mustParse(t, paramsTemplate)
	_, err := tm.Bind(map[string]string{"nodes": "0", "spot": "maybe"})
	var es Errors
	if e, ok := err.(Errors); ok {
		es = e
	}
	if len(es) != 3 {
		t.Fatalf("want 3 errors (nodes, spot, must), got %v", err)
	}
}

func TestBindValues(t *testing.T) {
	tm := mustParse(t, paramsTemplate)
	var values map[string]any
	if err := json.Unmarshal([]byte(`{"must": 4, "nodes": 3.0, "ratio": 1, "spot": true, "tags": ["b"], "name": "xy"}`), &values); err != nil {
		t.Fatal(err)
	}
	b, err := tm.BindValues(values)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"must": int64(4), "nodes": int64(3), "ratio": 1.0, "spot": true, "tags": []any{"b"}, "name": "xy"}
	for k, v := range want {
		if !reflect.DeepEqual(b.Parameters[k], v) {
			t.Errorf("%s = %#v, want %#v", k, b.Parameters[k], v)
		}
	}
	bad := []struct {
		values map[string]any
		err    string
	}{
		{map[string]any{"must": "4"}, "parameter must: must be an integer"},
		{map[string]any{"must": 4.5}, "parameter must: must be an integer"},
		{map[string]any{"must": 1, "spot": "true"}, "parameter spot: must be a boolean"},
		{map[string]any{"must": 1, "name": 5}, "parameter name: must be a string"},
		{map[string]any{"must": 1, "tags": "a"}, "parameter tags: must be a list"},
		{map[string]any{"must": 1, "tags": []any{map[string]any{}}}, "parameter tags: element 0 must be a string, number or boolean"},
		{map[string]any{"must": 1, "ratio": json.Number("2")}, "parameter ratio: 2 is more than max 1"},
	}
	for _, tt := range bad {
		if _, err := tm.BindValues(tt.values); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("BindValues(%v) = %v, want %q", tt.values, err, tt.err)
		}
	}
	if b, err := tm.BindValues(map[string]any{"must": 1, "tags": []string{"c"}}); err != nil || !reflect.DeepEqual(b.Parameters["tags"], []any{"c"}) {
		t.Errorf("[]string list: %v %v", b, err)
	}
}

func TestBindCountRange(t *testing.T) {
	tm := mustParse(t, `
parameters:
  nodes: {type: integer, default: 2}
resources:
  workers:
    type: instance
    count: ${param.nodes - 1}
  head:
    type: instance
    properties:
      peer: ${workers[1].id}
`)
	_, err := tm.Bind(map[string]string{"nodes": "2"})
	if err == nil || !strings.Contains(err.Error(), "line 11, column 13: resources.head.properties: ${workers[1].id}: index 1 is out of range: workers has 1 copies (count ${param.nodes - 1})") {
		t.Errorf("out of range: %v", err)
	}
	_, err = tm.Bind(map[string]string{"nodes": "0"})
	if err == nil || !strings.Contains(err.Error(), "line 5, column 3: resources.workers.count: count ${param.nodes - 1} is -1; it must be between 0 and 256") {
		t.Errorf("negative: %v", err)
	}
	_, err = tm.Bind(map[string]string{"nodes": "500"})
	if err == nil || !strings.Contains(err.Error(), "is 499; it must be between 0 and 256") {
		t.Errorf("too many: %v", err)
	}
}

func TestOrderLevels(t *testing.T) {
	tm := mustParse(t, `
parameters:
  n: {type: integer, default: 3}
resources:
  workers:
    type: instance
    count: ${param.n}
    properties:
      placement_group: ${pg.id}
      env: {HEAD: "${head.private_address}"}
  head:
    type: instance
    properties:
      placement_group: ${pg.id}
      volumes: ["${vol.id}"]
  addr:
    type: address
    properties: {instance_id: "${workers[2].id}"}
  vol: {type: volume}
  pg: {type: placement_group}
  lonely: {type: volume, depends_on: [workers]}
  nothing: {type: volume, count: 0}
outputs:
  ids: {value: "${workers.id}"}
`)
	b, err := tm.Bind(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"vol", "pg"},
		{"head"},
		{"workers[0]", "workers[1]", "workers[2]"},
		{"addr", "lonely"},
	}
	if got := b.Order(); !reflect.DeepEqual(got, want) {
		t.Errorf("Order = %v, want %v", got, want)
	}
	rev := b.Reverse()
	if !reflect.DeepEqual(rev[0], want[3]) || !reflect.DeepEqual(rev[3], want[0]) {
		t.Errorf("Reverse = %v", rev)
	}
	c, _ := b.Copy("lonely")
	if !reflect.DeepEqual(c.DependsOn, []string{"workers[0]", "workers[1]", "workers[2]"}) {
		t.Errorf("lonely depends on %v", c.DependsOn)
	}
	c, _ = b.Copy("addr")
	if !reflect.DeepEqual(c.DependsOn, []string{"workers[2]"}) || c.Index != -1 || c.Resource != "addr" {
		t.Errorf("addr = %+v", c)
	}
	if c, _ := b.Copy("workers[1]"); c.Index != 1 || c.Resource != "workers" || c.Type != TypeInstance {
		t.Errorf("workers[1] = %+v", c)
	}
	if b.Count("nothing") != 0 || b.Count("workers") != 3 || b.Count("head") != -1 {
		t.Errorf("counts %d %d %d", b.Count("nothing"), b.Count("workers"), b.Count("head"))
	}
}

func TestAddresses(t *testing.T) {
	for _, tt := range []struct {
		addr string
		res  string
		idx  int
		ok   bool
	}{{"head", "head", -1, true}, {"w[12]", "w", 12, true}, {"w[x]", "", 0, false}, {"[1]", "", 1, false}, {"w[1", "", 0, false}} {
		r, i, ok := SplitAddress(tt.addr)
		if ok != tt.ok || ok && (r != tt.res || i != tt.idx) {
			t.Errorf("SplitAddress(%q) = %q %d %v", tt.addr, r, i, ok)
		}
		if ok && Address(r, i) != tt.addr {
			t.Errorf("Address(%q, %d) = %q", r, i, Address(r, i))
		}
	}
}
