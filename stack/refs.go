package stack

import (
	"fmt"
	"slices"
	"strings"
)

// checkRefs checks every reference of the properties and outputs against
// the declarations.
func (t *Template) checkRefs(errs *errList) {
	for _, r := range t.Resources {
		for _, rf := range r.refs {
			if msg := t.checkRef(rf, r); msg != "" {
				errs.at(rf.line, rf.col, "resources."+r.Name+".properties", "%s: %s", rf.text, msg)
			}
		}
	}
	for _, o := range t.Outputs {
		for _, rf := range o.refs {
			if msg := t.checkRef(rf, nil); msg != "" {
				errs.at(rf.line, rf.col, o.path, "%s: %s", rf.text, msg)
			}
		}
	}
}

// checkRef checks one reference made from the properties of owner (nil
// in an output); it returns what is wrong, or "".
func (t *Template) checkRef(rf *ref, owner *Resource) string {
	switch rf.kind {
	case refParam:
		if t.params[rf.name] == nil {
			return fmt.Sprintf("unknown parameter %q%s", rf.name, t.paramList())
		}
	case refCountIndex:
		if owner == nil || !owner.Counted() {
			return "${count.index} is only allowed in the properties of a resource with a count"
		}
	case refResource:
		target := t.resources[rf.name]
		if target == nil {
			return fmt.Sprintf("unknown resource %q%s", rf.name, t.resourceList())
		}
		info := Types[target.Type]
		if !info.HasAttribute(rf.attr) {
			return fmt.Sprintf("%s (%s) has no attribute %q; its attributes are %s",
				target.Name, target.Type, rf.attr, strings.Join(info.Attributes, ", "))
		}
		return checkIndex(rf, target, -1)
	}
	return ""
}

// checkIndex checks a reference's index against the target's count; n is
// the number of copies when known, else -1 (a literal count is used).
func checkIndex(rf *ref, target *Resource, n int) string {
	if !target.Counted() {
		if rf.index >= 0 {
			return fmt.Sprintf("%s has no count: write ${%s.%s}", target.Name, target.Name, rf.attr)
		}
		return ""
	}
	if rf.index < 0 {
		if !rf.alone {
			return fmt.Sprintf("%s has a count: write ${%s[i].%s} for one copy, or the whole string ${%s.%s} for the list of every copy's",
				target.Name, target.Name, rf.attr, target.Name, rf.attr)
		}
		return ""
	}
	if n < 0 && target.Count.Param == "" {
		n = target.Count.N
	}
	if n >= 0 && rf.index >= n {
		return fmt.Sprintf("index %d is out of range: %s has %d copies (count %s)", rf.index, target.Name, n, target.Count)
	}
	return ""
}

// dependencies returns the names a resource depends on, explicitly or by
// reference, in file order.
func (t *Template) dependencies(r *Resource) []string {
	seen := map[string]bool{}
	for _, d := range r.DependsOn {
		seen[d] = true
	}
	for _, rf := range r.refs {
		if rf.kind == refResource && t.resources[rf.name] != nil {
			seen[rf.name] = true
		}
	}
	deps := make([]string, 0, len(seen))
	for d := range seen {
		deps = append(deps, d)
	}
	slices.SortFunc(deps, func(a, b string) int { return t.resources[a].order - t.resources[b].order })
	return deps
}

// checkCycles reports each dependency cycle between resources once, as the
// shortest cycle through the first resource of each strongly connected
// set, in file order.
func (t *Template) checkCycles(errs *errList) {
	deps := make(map[string][]string, len(t.Resources))
	for _, r := range t.Resources {
		deps[r.Name] = t.dependencies(r)
	}
	for _, scc := range t.components(deps) {
		first := t.resources[scc[0]]
		if len(scc) == 1 && !slices.Contains(deps[first.Name], first.Name) {
			continue
		}
		cycle := shortestCycle(first.Name, deps, scc)
		errs.at(first.Line, first.Column, "resources."+first.Name, "dependency cycle: %s", strings.Join(cycle, " -> "))
	}
}

// components returns the strongly connected components (Tarjan), each
// sorted in file order.
func (t *Template) components(deps map[string][]string) [][]string {
	index := map[string]int{}
	low := map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var out [][]string
	var visit func(string)
	visit = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range deps[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var scc []string
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			scc = append(scc, w)
			if w == v {
				break
			}
		}
		slices.SortFunc(scc, func(a, b string) int { return t.resources[a].order - t.resources[b].order })
		out = append(out, scc)
	}
	for _, r := range t.Resources {
		if _, seen := index[r.Name]; !seen {
			visit(r.Name)
		}
	}
	slices.SortFunc(out, func(a, b []string) int { return t.resources[a[0]].order - t.resources[b[0]].order })
	return out
}

// shortestCycle finds the shortest path from start back to itself within
// the component, breadth first.
func shortestCycle(start string, deps map[string][]string, scc []string) []string {
	in := map[string]bool{}
	for _, s := range scc {
		in[s] = true
	}
	prev := map[string]string{}
	queue := []string{start}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range deps[v] {
			if !in[w] {
				continue
			}
			if w == start {
				path := []string{start}
				for u := v; u != start; u = prev[u] {
					path = append(path, u)
				}
				path = append(path, start)
				slices.Reverse(path[1 : len(path)-1])
				return path
			}
			if _, seen := prev[w]; !seen {
				prev[w] = v
				queue = append(queue, w)
			}
		}
	}
	return []string{start, start}
}
