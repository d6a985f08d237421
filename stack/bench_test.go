package stack

import (
	"fmt"
	"strings"
	"testing"
)

// template200 writes a 200-resource template: 50 volumes, 50 instances
// attached to them, 50 addresses of those instances and 50 groups; desired
// and the offering are parameters so that a second binding changes some.
func template200() string {
	var b strings.Builder
	b.WriteString("parameters:\n  offering: {type: string, default: h100.1x}\n  desired: {type: integer, default: 1}\nresources:\n")
	for i := range 50 {
		fmt.Fprintf(&b, "  vol%d:\n    type: volume\n    properties: {name: vol%d, size_gib: 100}\n", i, i)
		off := "h100.1x"
		if i < 3 {
			off = "${param.offering}"
		}
		fmt.Fprintf(&b, "  inst%d:\n    type: instance\n    properties:\n      offering: %s\n      volumes: [\"${vol%d.id}\"]\n      env: {PEER: \"${vol%d.name}\"}\n      labels: [\"driver>=550\"]\n", i, off, i, i)
		fmt.Fprintf(&b, "  addr%d:\n    type: address\n    properties: {instance_id: \"${inst%d.id}\"}\n", i, i)
		desired := "1"
		if i < 5 {
			desired = "${param.desired}"
		}
		fmt.Fprintf(&b, "  grp%d:\n    type: group\n    properties:\n      name: g%d\n      min: 0\n      max: 4\n      desired: %s\n      template: {offerings: [l4.1x], image: \"img:1\"}\n", i, i, desired)
	}
	return b.String()
}

func BenchmarkPlan200(b *testing.B) {
	src := []byte(template200())
	tm, err := Parse(src)
	if err != nil {
		b.Fatal(err)
	}
	b0, err := tm.Bind(nil)
	if err != nil {
		b.Fatal(err)
	}
	prior := new(fakeCloud).apply(b, b0, nil, planOf(b, b0, nil, nil))
	args := map[string]string{"offering": "h100.8x", "desired": "3"}
	b.ResetTimer()
	for b.Loop() {
		tm, err := Parse(src)
		if err != nil {
			b.Fatal(err)
		}
		bound, err := tm.Bind(args)
		if err != nil {
			b.Fatal(err)
		}
		p, err := Plan(bound, prior, nil)
		if err != nil {
			b.Fatal(err)
		}
		if p.Summary[ActionReplace] != 6 || p.Summary[ActionUpdate] != 5 {
			b.Fatalf("summary %v", p.Summary)
		}
	}
}
