package stack

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// randomTemplate writes a random acyclic template over a small set of
// names: a resource refers only to resources before it.
func randomTemplate(r *rand.Rand) string {
	names := []string{"a", "b", "c", "d", "e", "f"}
	types := []string{TypeInstance, TypeVolume, TypeAddress, TypeGroup, TypePlacementGroup, TypeSpotRequest, TypeNetwork, TypeSubnet, TypeSecurityGroup}
	var b strings.Builder
	b.WriteString("resources:\n")
	var declared []string
	counted := map[string]int{}
	for _, n := range names {
		if r.Intn(3) == 0 {
			continue
		}
		typ := types[r.Intn(len(types))]
		fmt.Fprintf(&b, "  %s:\n    type: %s\n", n, typ)
		if r.Intn(3) == 0 {
			counted[n] = r.Intn(4)
			fmt.Fprintf(&b, "    count: %d\n", counted[n])
		}
		if r.Intn(4) == 0 {
			b.WriteString("    deletion_policy: retain\n")
		}
		b.WriteString("    properties:\n")
		fmt.Fprintf(&b, "      size: %d\n", r.Intn(3))
		if typ == TypeGroup {
			fmt.Fprintf(&b, "      desired: %d\n", r.Intn(3))
		}
		if _, ok := counted[n]; ok && r.Intn(2) == 0 {
			b.WriteString("      rank: ${count.index}\n")
		}
		if len(declared) > 0 && r.Intn(2) == 0 {
			dep := declared[r.Intn(len(declared))]
			c, isCounted := counted[dep]
			switch {
			case !isCounted:
				fmt.Fprintf(&b, "      ref: x-${%s.id}\n", dep)
			case c > 0 && r.Intn(2) == 0:
				fmt.Fprintf(&b, "      ref: ${%s[%d].id}\n", dep, r.Intn(c))
			default:
				fmt.Fprintf(&b, "      ref: ${%s.id}\n", dep)
			}
		}
		if len(declared) > 0 && r.Intn(3) == 0 {
			fmt.Fprintf(&b, "    depends_on: [%s]\n", declared[r.Intn(len(declared))])
		}
		declared = append(declared, n)
	}
	return b.String()
}

// addressesOf lists a state's addresses, sorted.
func addressesOf(s *State) []string {
	out := make([]string, 0, len(s.Resources))
	for a := range s.Resources {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// copiesOf lists a bound template's addresses, sorted.
func copiesOf(b *Bound) []string {
	var out []string
	for _, c := range b.Copies {
		out = append(out, c.Address)
	}
	slices.Sort(out)
	return out
}

// TestPlanProperty: applying T1 then T2 ends with exactly T2's copies;
// planning T2 again changes nothing; destroy leaves nothing.
func TestPlanProperty(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for i := range 200 {
		src1, src2 := randomTemplate(r), randomTemplate(r)
		cloud := &fakeCloud{}
		b1 := bindSrc(t, src1, nil)
		s1 := cloud.apply(t, b1, nil, planOf(t, b1, nil, nil))
		if got, want := addressesOf(s1), copiesOf(b1); !slices.Equal(got, want) {
			t.Fatalf("%d: after T1 state has %v, want %v\n%s", i, got, want, src1)
		}
		b2 := bindSrc(t, src2, nil)
		p2 := planOf(t, b2, s1, nil)
		s2 := cloud.apply(t, b2, s1, p2)
		if got, want := addressesOf(s2), copiesOf(b2); !slices.Equal(got, want) {
			t.Fatalf("%d: after T2 state has %v, want %v\nT1:\n%s\nT2:\n%s\nplan: %s", i, got, want, src1, src2, actions(p2))
		}
		if again := planOf(t, b2, s2, nil); !again.Empty() {
			t.Fatalf("%d: planning T2 again: %s\nT1:\n%s\nT2:\n%s", i, actions(again), src1, src2)
		}
		if _, err := b2.Outputs(s2.Attrs()); err != nil {
			t.Fatalf("%d: outputs: %v", i, err)
		}
		d := PlanDestroy(s2)
		checkDeleteOrder(t, s2, d)
		if left := cloud.apply(t, b2, s2, d); len(left.Resources) != 0 {
			t.Fatalf("%d: destroy left %v", i, addressesOf(left))
		}
	}
}

// checkDeleteOrder checks that a copy is deleted before what it depends on.
func checkDeleteOrder(t *testing.T, s *State, p *PlanResult) {
	t.Helper()
	pos := map[string]int{}
	for i, c := range p.Changes {
		pos[c.Address] = i
	}
	for a, r := range s.Resources {
		for _, d := range r.DependsOn {
			if pos[d] < pos[a] {
				t.Fatalf("%s is deleted before %s, which depends on it", d, a)
			}
		}
	}
}
