package stack

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// State is what the last apply recorded: every copy it created, with the
// values it applied. It is JSON-serialisable; the service stores it.
type State struct {
	// Parameters are the values the template was bound with.
	Parameters map[string]any `json:"parameters,omitempty"`
	// Resources are the applied copies by address.
	Resources map[string]*ResourceState `json:"resources"`
}

// ResourceState is one applied copy.
type ResourceState struct {
	Type string `json:"type"`
	// ID is the resource's ID in the cloud.
	ID string `json:"id"`
	// Properties are the resolved properties as applied.
	Properties map[string]any `json:"properties,omitempty"`
	// Attributes are the copy's attributes after apply (Types lists them
	// per type); "id" is read from ID when absent.
	Attributes map[string]any `json:"attributes,omitempty"`
	// DependsOn are the addresses the copy depended on when applied;
	// deletions go in the reverse of this order.
	DependsOn      []string `json:"depends_on,omitempty"`
	DeletionPolicy string   `json:"deletion_policy,omitempty"`
}

// attr returns an attribute of the copy.
func (r *ResourceState) attr(name string) (any, bool) {
	if v, ok := r.Attributes[name]; ok {
		return v, true
	}
	if name == "id" && r.ID != "" {
		return r.ID, true
	}
	return nil, false
}

// Attrs reads attributes from the state, for Resolve and Outputs.
func (s *State) Attrs() Attrs {
	return func(address, attr string) (any, bool) {
		if s == nil {
			return nil, false
		}
		r := s.Resources[address]
		if r == nil {
			return nil, false
		}
		return r.attr(attr)
	}
}

// Live is what a drift check found about one applied copy.
type Live struct {
	// Gone: the resource was terminated, deleted or is not found.
	Gone bool `json:"gone,omitempty"`
	// Stopped: an instance was stopped behind the stack's back.
	Stopped bool `json:"stopped,omitempty"`
	// Changed are the live values (New) that differ from the applied ones
	// (Old, State's Properties), for the fields the service reads back;
	// paths are "properties.FIELD".
	Changed []FieldDiff `json:"changed,omitempty"`
}

// Action is what a plan does to one copy.
type Action string

// Actions.
const (
	ActionNone    Action = "none"    // nothing changes
	ActionCreate  Action = "create"  // not applied yet
	ActionUpdate  Action = "update"  // mutable properties change in place
	ActionReplace Action = "replace" // created anew; the old one deleted
	ActionDelete  Action = "delete"  // deleted
	ActionRetain  Action = "retain"  // forgotten by the stack, left alive
	ActionStart   Action = "start"   // started again: it was stopped outside the stack
)

// Change is what a plan does to one copy, and why.
type Change struct {
	Address string `json:"address"`
	Type    string `json:"type"`
	Action  Action `json:"action"`
	// Reason is one sentence saying why.
	Reason string      `json:"reason,omitempty"`
	Diffs  []FieldDiff `json:"diffs,omitempty"`
	// Properties are the resolved properties to apply (create, update,
	// replace), Unknown where they are known only after apply.
	Properties map[string]any `json:"properties,omitempty"`
	// DependsOn are the copy's dependencies, as the state records them.
	DependsOn []string `json:"depends_on,omitempty"`
	// DeletionPolicy is the copy's policy after the change.
	DeletionPolicy string `json:"deletion_policy,omitempty"`
}

// PlanResult is a plan: the changes in order (creates, updates,
// replacements, starts and unchanged copies in apply order, then deletions
// and retentions in reverse dependency order) and their count by action.
type PlanResult struct {
	Changes []*Change      `json:"changes"`
	Summary map[Action]int `json:"summary"`
}

// Empty reports whether the plan changes nothing: every change is none,
// without even a new deletion policy to record.
func (p *PlanResult) Empty() bool {
	for _, c := range p.Changes {
		if c.Action != ActionNone || len(c.Diffs) > 0 {
			return false
		}
	}
	return true
}

// add appends a change and counts it.
func (p *PlanResult) add(c *Change) {
	p.Changes = append(p.Changes, c)
	p.Summary[c.Action]++
}

// planner holds a plan under construction.
type planner struct {
	b       *Bound
	prior   *State
	live    map[string]Live
	actions map[string]Action
	result  *PlanResult
	errs    errList
}

// Plan compares a bound template with the state of the last apply and
// what a drift check found (live may be nil), and says what an apply
// would do to each copy. It fails when the plan would change, replace or
// delete an applied commitment (a contract), unless a removed
// commitment's deletion policy is retain; the error is Errors.
func Plan(b *Bound, prior *State, live map[string]Live) (*PlanResult, error) {
	if prior == nil {
		prior = &State{}
	}
	p := &planner{b: b, prior: prior, live: live, actions: map[string]Action{},
		result: &PlanResult{Changes: []*Change{}, Summary: map[Action]int{}}}
	for _, level := range b.levels {
		for _, addr := range level {
			ch, err := p.copyChange(b.byAddr[addr])
			if err != nil {
				return nil, err
			}
			p.actions[addr] = ch.Action
			p.result.add(ch)
		}
	}
	var gone []string
	for addr := range prior.Resources {
		if _, ok := b.byAddr[addr]; !ok {
			gone = append(gone, addr)
		}
	}
	for _, addr := range deletionOrder(prior, gone) {
		p.result.add(p.removal(addr))
	}
	if err := p.errs.err(); err != nil {
		return nil, err
	}
	return p.result, nil
}

// attrs gives the attributes known at plan time: those of applied copies
// that are neither created nor replaced.
func (p *planner) attrs(address, attr string) (any, bool) {
	switch p.actions[address] {
	case ActionCreate, ActionReplace:
		return nil, false
	}
	if r := p.prior.Resources[address]; r != nil {
		return r.attr(attr)
	}
	return nil, false
}

// copyChange decides what happens to one copy of the template.
func (p *planner) copyChange(c *Copy) (*Change, error) {
	props, unknownBy, err := p.b.resolvePartial(c.Address, p.attrs)
	if err != nil {
		return nil, err
	}
	ch := &Change{Address: c.Address, Type: c.Type, Properties: props, DependsOn: c.DependsOn, DeletionPolicy: c.DeletionPolicy}
	rs := p.prior.Resources[c.Address]
	lv := p.live[c.Address]
	switch {
	case rs == nil:
		ch.Action, ch.Reason = ActionCreate, "not in the stack yet"
	case rs.Type != c.Type:
		ch.Action, ch.Reason = ActionReplace, fmt.Sprintf("type changed: %s -> %s", rs.Type, c.Type)
	case lv.Gone:
		ch.Action, ch.Reason = ActionReplace, goneReason(rs.Type)
	default:
		p.compare(ch, rs, lv, unknownBy)
	}
	if rs != nil && ch.Action == ActionReplace && c.DeletionPolicy == DeletionRetain {
		ch.Reason += "; the old one is left alive (deletion_policy retain)"
	}
	p.checkCommitment(ch, rs)
	p.checkUnique(ch, rs, lv)
	return ch, nil
}

// checkUnique records an error when a copy's replacement keeps every
// unique property (TypeInfo.Unique) of the live copy it replaces: the new
// one is made while the old one lives, and the two would collide.
func (p *planner) checkUnique(ch *Change, rs *ResourceState, lv Live) {
	info := Types[ch.Type]
	if rs == nil || ch.Action != ActionReplace || lv.Gone || rs.Type != ch.Type || len(info.Unique) == 0 {
		return
	}
	for _, k := range info.Unique {
		v := ch.Properties[k]
		if s, ok := v.(string); !ok || s == "" || !Equal(rs.Properties[k], v) {
			return
		}
	}
	p.errs.at(0, 0, ch.Address, "the %s is replaced (%s), and the new one is made before the old one goes, which holds the same %s: change its %s too, or destroy the stack first",
		ch.Type, ch.Reason, strings.Join(info.Unique, " and "), info.Unique[len(info.Unique)-1])
}

// goneReason says what happened to a copy that is gone.
func goneReason(typ string) string {
	switch typ {
	case TypeInstance, TypeSpotRequest:
		return "terminated outside the stack"
	case TypeCommitment:
		return "ended or cancelled outside the stack"
	}
	return "deleted outside the stack"
}

// compare sets the action of an applied copy from the differences between
// its applied properties, the template's and the live ones.
func (p *planner) compare(ch *Change, rs *ResourceState, lv Live, unknownBy map[string][]string) {
	diffs := diffValues("properties", rs.Properties, ch.Properties)
	drifted := map[string]bool{}
	for _, d := range lv.Changed {
		if covered(diffs, d.Path) {
			continue
		}
		want := lookup(ch.Properties, d.Path)
		if !Equal(d.New, want) {
			diffs = append(diffs, FieldDiff{Path: d.Path, Old: d.New, New: want})
			drifted[d.Path] = true
		}
	}
	slices.SortFunc(diffs, func(a, b FieldDiff) int { return strings.Compare(a.Path, b.Path) })
	info := Types[ch.Type]
	var fixed *FieldDiff
	for i := range diffs {
		if !info.IsMutable(topKey(diffs[i].Path)) {
			fixed = &diffs[i]
			break
		}
	}
	ch.Diffs = diffs
	switch {
	case len(diffs) == 0 && lv.Stopped:
		ch.Action, ch.Reason = ActionStart, "stopped outside the stack"
	case len(diffs) == 0:
		ch.Action, ch.Reason = ActionNone, ""
		if rs.DeletionPolicy != "" && rs.DeletionPolicy != ch.DeletionPolicy {
			ch.Reason = fmt.Sprintf("deletion_policy changed: %s -> %s (recorded; nothing else changes)", rs.DeletionPolicy, ch.DeletionPolicy)
			ch.Diffs = []FieldDiff{{Path: "deletion_policy", Old: rs.DeletionPolicy, New: ch.DeletionPolicy}}
		}
	case fixed != nil:
		ch.Action = ActionReplace
		ch.Reason = p.describe(*fixed, drifted, unknownBy) + " (cannot change in place)" + more(len(diffs))
	default:
		ch.Action = ActionUpdate
		ch.Reason = p.describe(diffs[0], drifted, unknownBy) + " (updates in place)" + more(len(diffs))
	}
}

// covered reports whether a diff already covers path or a field around
// or inside it.
func covered(diffs []FieldDiff, path string) bool {
	for _, d := range diffs {
		if d.Path == path || strings.HasPrefix(path, d.Path+".") || strings.HasPrefix(d.Path, path+".") {
			return true
		}
	}
	return false
}

// lookup finds a dotted "properties.a.b" path in resolved properties.
func lookup(props map[string]any, path string) any {
	var v any = props
	for _, k := range strings.Split(strings.TrimPrefix(path, "properties."), ".") {
		m, ok := canon(v).(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// topKey returns the top-level property of a "properties.a.b" path.
func topKey(path string) string {
	k, _, _ := strings.Cut(strings.TrimPrefix(path, "properties."), ".")
	return k
}

// more says how many other differences there are.
func more(n int) string {
	switch n {
	case 0, 1:
		return ""
	case 2:
		return "; 1 more difference"
	}
	return fmt.Sprintf("; %d more differences", n-1)
}

// describe says what changed in one field.
func (p *planner) describe(d FieldDiff, drifted map[string]bool, unknownBy map[string][]string) string {
	if IsUnknown(d.New) {
		if addrs := unknownBy[topKey(d.Path)]; len(addrs) > 0 {
			a := addrs[0]
			what := "being created"
			if p.actions[a] == ActionReplace {
				what = "being replaced"
			}
			return fmt.Sprintf("%s refers to %s, which is %s", d.Path, a, what)
		}
	}
	if drifted[d.Path] {
		return fmt.Sprintf("%s changed outside the stack: %s (the template says %s)", d.Path, formatValue(d.Old), formatValue(d.New))
	}
	return fmt.Sprintf("%s changed: %s -> %s", d.Path, formatValue(d.Old), formatValue(d.New))
}

// formatValue writes a value briefly for a reason.
func formatValue(v any) string {
	var s string
	switch x := canon(v).(type) {
	case nil:
		return "(none)"
	case UnknownValue:
		return x.String()
	case string:
		s = x
	case float64:
		s = fmtNum(x)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			s = fmt.Sprint(v)
		} else {
			s = string(b)
		}
	}
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// checkCommitment records an error when a change would touch an applied
// commitment.
func (p *planner) checkCommitment(ch *Change, rs *ResourceState) {
	if rs == nil || rs.Type != TypeCommitment {
		return
	}
	switch ch.Action {
	case ActionUpdate, ActionReplace:
		p.errs.at(0, 0, ch.Address, "a commitment is a contract and cannot be changed or replaced (%s): revert the template's change", ch.Reason)
	}
}

// removal decides what happens to an applied copy the template no longer
// has.
func (p *planner) removal(addr string) *Change {
	rs := p.prior.Resources[addr]
	ch := &Change{Address: addr, Type: rs.Type, Action: ActionDelete, Reason: "removed from the template",
		DependsOn: rs.DependsOn, DeletionPolicy: rs.DeletionPolicy}
	switch {
	case rs.DeletionPolicy == DeletionRetain:
		ch.Action, ch.Reason = ActionRetain, "removed from the template; left alive (deletion_policy retain)"
	case rs.Type == TypeCommitment && p.live[addr].Gone:
		ch.Action, ch.Reason = ActionRetain, "removed from the template; the commitment has ended"
	case rs.Type == TypeCommitment:
		p.errs.at(0, 0, addr, "a commitment is a contract and cannot be cancelled: to let the stack forget it, set its deletion_policy to retain and apply, then remove it")
	}
	return ch
}

// PlanDestroy plans the deletion of everything applied, in reverse
// dependency order, except copies whose deletion policy is retain and
// commitments, which are retained: left alive and forgotten.
func PlanDestroy(prior *State) *PlanResult {
	res := &PlanResult{Changes: []*Change{}, Summary: map[Action]int{}}
	if prior == nil {
		return res
	}
	addrs := make([]string, 0, len(prior.Resources))
	for a := range prior.Resources {
		addrs = append(addrs, a)
	}
	for _, addr := range deletionOrder(prior, addrs) {
		rs := prior.Resources[addr]
		ch := &Change{Address: addr, Type: rs.Type, Action: ActionDelete, Reason: "destroying the stack",
			DependsOn: rs.DependsOn, DeletionPolicy: rs.DeletionPolicy}
		switch {
		case rs.Type == TypeCommitment:
			ch.Action, ch.Reason = ActionRetain, "a commitment is a contract and cannot be cancelled: it stays until its term ends"
		case rs.DeletionPolicy == DeletionRetain:
			ch.Action, ch.Reason = ActionRetain, "left alive (deletion_policy retain)"
		}
		res.add(ch)
	}
	return res
}

// deletionOrder orders applied addresses for deletion: a copy before
// those it depends on (by the state's DependsOn), ties by address.
func deletionOrder(prior *State, addrs []string) []string {
	in := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		in[a] = true
	}
	level := make(map[string]int, len(addrs))
	const visiting = -1
	var depth func(a string) int
	depth = func(a string) int {
		if l, ok := level[a]; ok {
			return max(l, 0)
		}
		level[a] = visiting
		l := 0
		for _, d := range prior.Resources[a].DependsOn {
			if in[d] && d != a {
				l = max(l, depth(d)+1)
			}
		}
		level[a] = l
		return l
	}
	for _, a := range addrs {
		depth(a)
	}
	out := slices.Clone(addrs)
	slices.SortFunc(out, func(x, y string) int {
		if d := level[y] - level[x]; d != 0 {
			return d
		}
		return compareAddresses(x, y)
	})
	return out
}

// compareAddresses orders addresses by resource name, then index.
func compareAddresses(x, y string) int {
	rx, ix, _ := SplitAddress(x)
	ry, iy, _ := SplitAddress(y)
	if c := strings.Compare(rx, ry); c != 0 {
		return c
	}
	return ix - iy
}
