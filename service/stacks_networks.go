package service

import (
	"context"
	"fmt"
	"slices"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/stack"
)

// A stack's networks, subnets and security groups (issue 19). A network
// and a subnet are their create bodies and never change in place; a
// security group is its create body and its rules
// (api.SecurityGroupTemplate), which SetRules keeps as written.

// selfPlaceholder stands for a group's own ID while its rules are checked
// before it exists.
const selfPlaceholder = SecurityGroupPrefix + "self"

// GroupRules answers the rules t gives the security group id, as
// authorize requests: "self" is id, and absent egress rules are a new
// group's default (all traffic to 0.0.0.0/0).
func GroupRules(t *api.SecurityGroupTemplate, id string) (ingress, egress []api.AuthorizeRequest) {
	conv := func(dir string, rules []api.RuleTemplate) []api.AuthorizeRequest {
		out := make([]api.AuthorizeRequest, len(rules))
		for i, r := range rules {
			g := r.Group
			if g == api.RuleSelf {
				g = id
			}
			out[i] = api.AuthorizeRequest{Direction: dir, Protocol: r.Protocol, FromPort: r.FromPort, ToPort: r.ToPort,
				CIDR: r.CIDR, Group: g, Description: r.Description}
		}
		return out
	}
	ingress = conv(api.Ingress, t.Ingress)
	if t.Egress == nil {
		egress = []api.AuthorizeRequest{{Direction: api.Egress, Protocol: cloud.ProtocolAll, CIDR: "0.0.0.0/0"}}
	} else {
		egress = conv(api.Egress, *t.Egress)
	}
	return ingress, egress
}

// CheckSecurityGroupTemplate validates a stack's security group without
// the store: its create body, and its rules as Authorize checks them
// (fields such as "ingress[0].to_port"), none given twice, at most
// MaxRulesPerDirection of each direction.
func CheckSecurityGroupTemplate(t *api.SecurityGroupTemplate) error {
	if err := CheckSecurityGroupSpec(&t.CreateSecurityGroupRequest); err != nil {
		return err
	}
	ingress, egress := GroupRules(t, selfPlaceholder)
	_, _, err := canonicalRules(ingress, egress)
	return err
}

// canonicalRules checks rules as Authorize does and answers them in
// canonical form, by direction.
func canonicalRules(ingress, egress []api.AuthorizeRequest) (in, out []cloud.SecurityRule, err error) {
	check := func(dir string, reqs []api.AuthorizeRequest) ([]cloud.SecurityRule, error) {
		if len(reqs) > MaxRulesPerDirection {
			return nil, Field(dir, "%d rules; a group has at most %d %s rules", len(reqs), MaxRulesPerDirection, dir)
		}
		rules := make([]cloud.SecurityRule, 0, len(reqs))
		for i, req := range reqs {
			r, err := checkRuleFields(&req)
			if err != nil {
				return nil, prefixField(err, fmt.Sprintf("%s[%d].", dir, i))
			}
			if j := slices.IndexFunc(rules, func(o cloud.SecurityRule) bool { return sameRule(o, r) }); j >= 0 {
				return nil, Field(fmt.Sprintf("%s[%d]", dir, i), "allows what %s[%d] does; give each rule once", dir, j)
			}
			rules = append(rules, r)
		}
		return rules, nil
	}
	if in, err = check(api.Ingress, ingress); err != nil {
		return nil, nil, err
	}
	out, err = check(api.Egress, egress)
	return in, out, err
}

// SetRules makes security group id's rules exactly ingress and egress
// (their Direction fields are ignored), in one transaction: it revokes
// the rules that are not among them and authorizes the ones it lacks,
// keeping those it has (a rule whose description changed is revoked and
// authorized again), with an event for each, and answers the group. A
// rule's peer group is checked as Authorize checks it. A group whose
// rules are already those is not written. Rules with an owner (a stack's
// security_group_rule) are not the group's list: they stay as they are,
// a wanted rule that one of them allows already is a conflict naming it,
// and they count towards MaxRulesPerDirection.
func (s *Networks) SetRules(ctx context.Context, a Actor, id string, ingress, egress []api.AuthorizeRequest) (*cloud.SecurityGroup, error) {
	ingress, egress = slices.Clone(ingress), slices.Clone(egress)
	for i := range ingress {
		ingress[i].Direction = api.Ingress
	}
	for i := range egress {
		egress[i].Direction = api.Egress
	}
	wantIn, wantOut, err := canonicalRules(ingress, egress)
	if err != nil {
		return nil, err
	}
	var out *cloud.SecurityGroup
	err = s.tx(ctx, func(tx cloud.Tx) error {
		g, err := Visible(ctx, a, "security group", id, tx.GetSecurityGroup)
		if err != nil {
			return err
		}
		now := s.now()
		changed := false
		for _, d := range []struct {
			dir  string
			want []cloud.SecurityRule
		}{{api.Ingress, wantIn}, {api.Egress, wantOut}} {
			rules := rulesOf(g, d.dir)
			var kept []cloud.SecurityRule
			owned := 0
			for _, r := range *rules {
				if r.Owner != "" {
					if j := slices.IndexFunc(d.want, func(w cloud.SecurityRule) bool { return sameRule(r, w) }); j >= 0 {
						return &cloud.Error{Code: cloud.Conflict,
							Message: fmt.Sprintf("%s[%d]: security group %s has this %s rule already as rule %s of %s; give it once", d.dir, j, g.ID, d.dir, r.ID, r.Owner),
							Details: map[string]any{"field": fmt.Sprintf("%s[%d]", d.dir, j), "rule_id": r.ID, "owner": r.Owner}}
					}
					kept = append(kept, r)
					owned++
					continue
				}
				if slices.ContainsFunc(d.want, func(w cloud.SecurityRule) bool { return sameRule(r, w) && r.Description == w.Description }) {
					kept = append(kept, r)
					continue
				}
				changed = true
				if err := ruleEvent(ctx, tx, a, g, "revoked", d.dir, r, now); err != nil {
					return err
				}
			}
			for i, w := range d.want {
				if slices.ContainsFunc(kept, func(r cloud.SecurityRule) bool { return sameRule(r, w) && r.Description == w.Description }) {
					continue
				}
				if err := checkRulePeer(ctx, tx, g, w); err != nil {
					return prefixField(err, fmt.Sprintf("%s[%d].", d.dir, i))
				}
				w.ID = NewID(RulePrefix)
				kept = append(kept, w)
				changed = true
				if err := ruleEvent(ctx, tx, a, g, "authorized", d.dir, w, now); err != nil {
					return err
				}
			}
			if n := owned + len(d.want); n > MaxRulesPerDirection {
				return limitErr(fmt.Sprintf("security group %s would have %d %s rules (%d of them owned by other stack resources), more than %d",
					g.ID, n, d.dir, owned, MaxRulesPerDirection), MaxRulesPerDirection)
			}
			if kept == nil {
				kept = []cloud.SecurityRule{}
			}
			*rules = kept
		}
		out = g
		if !changed {
			return nil
		}
		return tx.UpdateSecurityGroup(ctx, g)
	})
	return out, err
}

// securityGroupLive is a security group's drift inputs: its ingress and
// egress rules, in the template's form, where they differ from those the
// stack applied (rs.Properties).
func securityGroupLive(g *cloud.SecurityGroup, rs *stack.ResourceState) stack.Live {
	var live stack.Live
	var t api.SecurityGroupTemplate
	if err := DecodeStackProps("", rs.Properties, &t); err != nil {
		return live
	}
	ingress, egress := GroupRules(&t, g.ID)
	wantIn, wantOut, err := canonicalRules(ingress, egress)
	if err != nil {
		return live
	}
	// Rules other stack resources own are theirs to watch.
	unowned := func(rs []cloud.SecurityRule) []cloud.SecurityRule {
		return slices.DeleteFunc(slices.Clone(rs), func(r cloud.SecurityRule) bool { return r.Owner != "" })
	}
	for _, d := range []struct {
		dir        string
		want, have []cloud.SecurityRule
	}{{api.Ingress, wantIn, unowned(g.Ingress)}, {api.Egress, wantOut, unowned(g.Egress)}} {
		if sameRules(d.want, d.have) {
			continue
		}
		live.Changed = append(live.Changed, stack.FieldDiff{Path: "properties." + d.dir, Old: rs.Properties[d.dir], New: ruleTemplates(g.ID, d.have)})
	}
	return live
}

// sameRules reports whether two lists hold the same rules (descriptions
// included, IDs and order aside).
func sameRules(a, b []cloud.SecurityRule) bool {
	if len(a) != len(b) {
		return false
	}
	for _, r := range a {
		if !slices.ContainsFunc(b, func(o cloud.SecurityRule) bool { return sameRule(r, o) && r.Description == o.Description }) {
			return false
		}
	}
	return true
}

// ruleTemplates writes a group's rules as a template's rule list: the
// group's own ID is "self".
func ruleTemplates(self string, rules []cloud.SecurityRule) []any {
	out := make([]any, len(rules))
	for i, r := range rules {
		m := map[string]any{"protocol": r.Protocol}
		if r.FromPort != 0 || r.ToPort != 0 {
			m["from_port"], m["to_port"] = r.FromPort, r.ToPort
		}
		switch {
		case r.GroupID == self:
			m["group"] = api.RuleSelf
		case r.GroupID != "":
			m["group"] = r.GroupID
		default:
			m["cidr"] = r.CIDR
		}
		if r.Description != "" {
			m["description"] = r.Description
		}
		out[i] = m
	}
	return out
}

func networkAttrs(n *cloud.Network) map[string]any {
	return map[string]any{"id": n.ID, "name": n.Name, "cidr": n.CIDR, "vni": int64(n.VNI)}
}

func subnetAttrs(s *cloud.Subnet) map[string]any {
	return map[string]any{"id": s.ID, "name": s.Name, "cidr": s.CIDR, "zone": s.Zone}
}

func securityGroupAttrs(g *cloud.SecurityGroup) map[string]any {
	return map[string]any{"id": g.ID, "name": g.Name}
}

// readNetworkResource is readResource for a network, subnet or security
// group.
func readNetworkResource(ctx context.Context, svc *Services, a Actor, rs *stack.ResourceState) (live stack.Live, attrs map[string]any, status string, err error) {
	switch rs.Type {
	case stack.TypeNetwork:
		n, err := svc.Networks.GetNetwork(ctx, a, rs.ID)
		if err != nil {
			return stack.Live{}, nil, "", err
		}
		return live, networkAttrs(n), fmt.Sprintf("%s, vni %d", n.CIDR, n.VNI), nil
	case stack.TypeSubnet:
		sub, err := svc.Networks.GetSubnet(ctx, a, rs.ID)
		if err != nil {
			return stack.Live{}, nil, "", err
		}
		return live, subnetAttrs(sub), sub.CIDR + " in " + sub.Zone, nil
	case stack.TypeSecurityGroup:
		g, err := svc.Networks.GetSecurityGroup(ctx, a, rs.ID)
		if err != nil {
			return stack.Live{}, nil, "", err
		}
		return securityGroupLive(g, rs), securityGroupAttrs(g), fmt.Sprintf("%d ingress, %d egress rules", len(g.Ingress), len(g.Egress)), nil
	case stack.TypeSecurityGroupRule:
		return readRuleResource(ctx, svc, a, rs)
	}
	return stack.Live{}, nil, "", fmt.Errorf("unknown resource type %q", rs.Type)
}

// unknownGroup stands for a security group ID known only after apply,
// while a security_group_rule is checked.
const unknownGroup = SecurityGroupPrefix + "unknown"

// checkRuleProps is checkStackProps for a security_group_rule: all are
// its properties, props those known now. Its group and its peer group are
// most often references known only after apply: the rest is checked all
// the same.
func checkRuleProps(address string, all, props map[string]any, known bool) error {
	var t api.SecurityGroupRuleTemplate
	if err := DecodeStackProps(address, props, &t); err != nil || !unknownOnly(all, "security_group", "group") {
		return err
	}
	if !known {
		if hasUnknown(all["security_group"]) {
			t.SecurityGroup = unknownGroup
		}
		if hasUnknown(all["group"]) {
			t.Group = unknownGroup
		}
	}
	return StackFieldError(address, CheckRuleTemplate(&t))
}

// RuleAttrs are the attributes of a stack's security_group_rule copy:
// the rule's ID, its group and direction, and its owner (the copy's
// idempotency key), which its reads and its delete need.
func RuleAttrs(group, dir string, r cloud.SecurityRule) map[string]any {
	return map[string]any{"id": r.ID, "security_group": group, "direction": dir, "owner": r.Owner}
}

// RuleRef answers the group and the owner a security_group_rule copy
// recorded at its create, which its reads, its update and its delete
// need.
func RuleRef(rs *stack.ResourceState) (group, owner string) {
	group, _ = rs.Attributes["security_group"].(string)
	if group == "" {
		group, _ = rs.Properties["security_group"].(string)
	}
	owner, _ = rs.Attributes["owner"].(string)
	return group, owner
}

// readRuleResource reads a security_group_rule copy: its rule, owned by
// the copy, in its group. A rule revoked behind the stack's back (or its
// group deleted) is gone; a description changed is drift.
func readRuleResource(ctx context.Context, svc *Services, a Actor, rs *stack.ResourceState) (live stack.Live, attrs map[string]any, status string, err error) {
	group, owner := RuleRef(rs)
	dir, r, err := svc.Networks.OwnedRule(ctx, a, group, rs.ID, owner)
	if err != nil {
		return stack.Live{}, nil, "", err
	}
	want, _ := rs.Properties["description"].(string)
	if r.Description != want {
		live.Changed = append(live.Changed, stack.FieldDiff{Path: "properties.description", Old: rs.Properties["description"], New: r.Description})
	}
	return live, RuleAttrs(group, dir, r), dir + " " + describeRule(r) + " on " + group, nil
}
