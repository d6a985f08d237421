package service

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// MaxRulesPerDirection bounds a security group's ingress rules, and its
// egress rules, as on AWS.
const MaxRulesPerDirection = 60

// checkRuleFields validates a rule's fields without the store and answers
// the rule (without an ID) in canonical form.
func checkRuleFields(req *api.AuthorizeRequest) (cloud.SecurityRule, error) {
	var r cloud.SecurityRule
	if req.Direction != api.Ingress && req.Direction != api.Egress {
		return r, Field("direction", "%s is not %s or %s", Quote(req.Direction), api.Ingress, api.Egress)
	}
	r.Protocol = strings.ToLower(req.Protocol)
	switch r.Protocol {
	case cloud.ProtocolTCP, cloud.ProtocolUDP:
		if req.FromPort < 1 || req.FromPort > 65535 {
			return r, Field("from_port", "%d is not a port (1 to 65535); %s rules need a port range", req.FromPort, r.Protocol)
		}
		if req.ToPort < req.FromPort || req.ToPort > 65535 {
			return r, Field("to_port", "%d is not a port from from_port (%d) to 65535", req.ToPort, req.FromPort)
		}
		r.FromPort, r.ToPort = req.FromPort, req.ToPort
	case cloud.ProtocolAll, cloud.ProtocolICMP:
		if req.FromPort != 0 || req.ToPort != 0 {
			return r, Field("from_port", "%s rules take no ports", r.Protocol)
		}
	case "":
		return r, Field("protocol", "is required: all, tcp, udp or icmp")
	default:
		return r, Field("protocol", "%s is not all, tcp, udp or icmp", Quote(req.Protocol))
	}
	switch {
	case req.CIDR != "" && req.Group != "":
		return r, Field("cidr", "give a CIDR or a group, not both")
	case req.CIDR != "":
		p, err := parseRuleCIDR("cidr", req.CIDR)
		if err != nil {
			return r, err
		}
		r.CIDR = p.String()
	case req.Group != "":
		r.GroupID = req.Group
	default:
		return r, Field("cidr", "a rule needs a peer: a CIDR (0.0.0.0/0 for everyone) or a group")
	}
	if err := CheckText("description", req.Description, maxDescriptionLen); err != nil {
		return r, err
	}
	r.Description = req.Description
	return r, nil
}

// checkRulePeer checks that a rule's peer group is a group of g's network
// (and tenant): another tenant's or a missing one is not_found, one of
// another network invalid_argument.
func checkRulePeer(ctx context.Context, tx cloud.Tx, g *cloud.SecurityGroup, r cloud.SecurityRule) error {
	if r.GroupID == "" || r.GroupID == g.ID {
		return nil
	}
	peer, err := tx.GetSecurityGroup(ctx, r.GroupID)
	if cloud.IsNotFound(err) || err == nil && peer.TenantID != g.TenantID {
		return refNotFound("group", "security group", r.GroupID)
	}
	if err != nil {
		return err
	}
	if peer.NetworkID != g.NetworkID {
		return Field("group", "security group %s is in network %s, and group %s in network %s; a rule names groups of its own network",
			peer.ID, peer.NetworkID, g.ID, g.NetworkID)
	}
	return nil
}

// sameRule reports whether two rules allow the same traffic (the
// description and ID aside).
func sameRule(a, b cloud.SecurityRule) bool {
	return a.Protocol == b.Protocol && a.FromPort == b.FromPort && a.ToPort == b.ToPort && a.CIDR == b.CIDR && a.GroupID == b.GroupID
}

// rulesOf answers the rules of g in direction dir.
func rulesOf(g *cloud.SecurityGroup, dir string) *[]cloud.SecurityRule {
	if dir == api.Egress {
		return &g.Egress
	}
	return &g.Ingress
}

// Authorize adds a rule to security group id (see api.AuthorizeRequest)
// and answers the group. ifMatch, when not zero, is the group's version
// the caller read (a stale one is a conflict). A rule that allows what
// one of the group's rules already does is a conflict naming it; past
// MaxRulesPerDirection rules, quota_exceeded.
func (s *Networks) Authorize(ctx context.Context, a Actor, id string, req api.AuthorizeRequest, ifMatch int64) (*cloud.SecurityGroup, error) {
	r, err := checkRuleFields(&req)
	if err != nil {
		return nil, err
	}
	var out *cloud.SecurityGroup
	err = s.tx(ctx, func(tx cloud.Tx) error {
		g, err := Visible(ctx, a, "security group", id, tx.GetSecurityGroup)
		if err != nil {
			return err
		}
		if err := CheckVersion("security group", id, ifMatch, g.Version); err != nil {
			return err
		}
		if _, err := addRule(ctx, tx, a, g, req.Direction, r, s.now()); err != nil {
			return err
		}
		out = g
		return nil
	})
	return out, err
}

// addRule adds rule r (its owner set, its ID not) to g's rules of
// direction dir and writes g, with its event: the peer checked
// (checkRulePeer), a rule that allows what one of g's rules already does
// a conflict naming it, past MaxRulesPerDirection quota_exceeded. It
// answers the rule with its ID.
func addRule(ctx context.Context, tx cloud.Tx, a Actor, g *cloud.SecurityGroup, dir string, r cloud.SecurityRule, now time.Time) (cloud.SecurityRule, error) {
	if err := checkRulePeer(ctx, tx, g, r); err != nil {
		return r, err
	}
	rules := rulesOf(g, dir)
	for _, o := range *rules {
		if sameRule(o, r) {
			return r, &cloud.Error{Code: cloud.Conflict, Message: "security group " + g.ID + " has this " + dir + " rule already: " + o.ID,
				Details: map[string]any{"rule_id": o.ID}}
		}
	}
	if len(*rules) >= MaxRulesPerDirection {
		return r, limitErr(fmt.Sprintf("security group %s has %d %s rules, the most it may have; revoke one first", g.ID, len(*rules), dir),
			MaxRulesPerDirection)
	}
	r.ID = NewID(RulePrefix)
	*rules = append(*rules, r)
	if err := tx.UpdateSecurityGroup(ctx, g); err != nil {
		return r, err
	}
	return r, ruleEvent(ctx, tx, a, g, "authorized", dir, r, now)
}

// Revoke removes a rule from security group id: the rule named by
// req.RuleID, or else the rule of req.Direction that allows exactly what
// the other fields say (not_found when none does), and answers the group.
// ifMatch as in Authorize.
func (s *Networks) Revoke(ctx context.Context, a Actor, id string, req api.RevokeRequest, ifMatch int64) (*cloud.SecurityGroup, error) {
	var want cloud.SecurityRule
	if req.RuleID == "" {
		var err error
		if want, err = checkRuleFields(&req.AuthorizeRequest); err != nil {
			return nil, err
		}
	}
	var out *cloud.SecurityGroup
	err := s.tx(ctx, func(tx cloud.Tx) error {
		g, err := Visible(ctx, a, "security group", id, tx.GetSecurityGroup)
		if err != nil {
			return err
		}
		if err := CheckVersion("security group", id, ifMatch, g.Version); err != nil {
			return err
		}
		dir, i := findRule(g, req, want)
		if i < 0 {
			if req.RuleID != "" {
				return NotFound("security group rule", req.RuleID)
			}
			return &cloud.Error{Code: cloud.NotFound, Message: "security group " + g.ID + " has no " + req.Direction + " rule like this one",
				Details: map[string]any{"kind": "security group rule"}}
		}
		rules := rulesOf(g, dir)
		gone := (*rules)[i]
		*rules = append((*rules)[:i:i], (*rules)[i+1:]...)
		if err := tx.UpdateSecurityGroup(ctx, g); err != nil {
			return err
		}
		out = g
		return ruleEvent(ctx, tx, a, g, "revoked", dir, gone, s.now())
	})
	return out, err
}

// findRule answers the direction and index of the rule a revoke names, or
// -1.
func findRule(g *cloud.SecurityGroup, req api.RevokeRequest, want cloud.SecurityRule) (string, int) {
	for _, dir := range []string{api.Ingress, api.Egress} {
		for i, r := range *rulesOf(g, dir) {
			if req.RuleID != "" && r.ID == req.RuleID || req.RuleID == "" && dir == req.Direction && sameRule(r, want) {
				return dir, i
			}
		}
	}
	return "", -1
}

// ruleEvent appends the event of a rule authorized or revoked.
func ruleEvent(ctx context.Context, tx cloud.Tx, a Actor, g *cloud.SecurityGroup, what, dir string, r cloud.SecurityRule, now time.Time) error {
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventSecurityGroupChanged, TenantID: g.TenantID, Actor: a.ID,
		Reason: fmt.Sprintf("security group %s: %s rule %s %s (%s)", g.ID, dir, r.ID, what, describeRule(r))})
}

// describeRule renders a rule for a message: "tcp 22 from 10.0.0.0/8".
func describeRule(r cloud.SecurityRule) string {
	s := r.Protocol
	switch {
	case r.FromPort != 0 && r.FromPort == r.ToPort:
		s += fmt.Sprintf(" %d", r.FromPort)
	case r.FromPort != 0:
		s += fmt.Sprintf(" %d-%d", r.FromPort, r.ToPort)
	}
	if r.GroupID != "" {
		return s + " group " + r.GroupID
	}
	return s + " " + r.CIDR
}
