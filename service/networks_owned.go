package service

import (
	"context"
	"fmt"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// Rules a stack owns on groups it need not own (a security_group_rule
// resource). Each carries its owner (cloud.SecurityRule.Owner: the stack
// copy's idempotency key), so that a create cut short and run again
// answers the rule it made instead of refusing it as a duplicate, a delete
// removes only its owner's rule, and a group's own rule list (SetRules)
// and its drift leave the rule alone.

// maxOwnerLen bounds a rule's owner.
const maxOwnerLen = 200

// CheckRuleTemplate validates a stack's security_group_rule without the
// store: the group is named, and the rule's fields are as Authorize
// checks them. An unknown group (a reference known after apply) is
// given as a placeholder by the caller.
func CheckRuleTemplate(t *api.SecurityGroupRuleTemplate) error {
	if t.SecurityGroup == "" {
		return Field("security_group", "is required: the ID of the group the rule is on")
	}
	if err := CheckText("security_group", t.SecurityGroup, maxNameLen); err != nil {
		return err
	}
	_, err := checkRuleFields(&t.AuthorizeRequest)
	return err
}

// AuthorizeOwned adds rule req to security group id for owner, as
// Authorize does, and answers the group and the rule. A rule of the group
// that owner owns already is the answer (a retry of the same create).
func (s *Networks) AuthorizeOwned(ctx context.Context, a Actor, id string, req api.AuthorizeRequest, owner string) (*cloud.SecurityGroup, cloud.SecurityRule, error) {
	var rule cloud.SecurityRule
	if owner == "" {
		return nil, rule, Field("owner", "is required")
	}
	if err := CheckText("owner", owner, maxOwnerLen); err != nil {
		return nil, rule, err
	}
	r, err := checkRuleFields(&req)
	if err != nil {
		return nil, rule, err
	}
	r.Owner = owner
	var out *cloud.SecurityGroup
	err = s.tx(ctx, func(tx cloud.Tx) error {
		g, err := Visible(ctx, a, "security group", id, tx.GetSecurityGroup)
		if err != nil {
			return err
		}
		out = g
		if dir, i := ownedRule(g, "", owner); i >= 0 {
			rule = (*rulesOf(g, dir))[i]
			return nil
		}
		rule, err = addRule(ctx, tx, a, g, req.Direction, r, s.now())
		return err
	})
	if err != nil {
		return nil, cloud.SecurityRule{}, err
	}
	return out, rule, nil
}

// ownedRule answers the direction and index of g's rule of owner (and ID
// ruleID, when not empty), or -1.
func ownedRule(g *cloud.SecurityGroup, ruleID, owner string) (string, int) {
	for _, dir := range []string{api.Ingress, api.Egress} {
		for i, r := range *rulesOf(g, dir) {
			if r.Owner == owner && (ruleID == "" || r.ID == ruleID) {
				return dir, i
			}
		}
	}
	return "", -1
}

// ownedIn reads, in tx, security group id (visible to a) and finds its
// rule ruleID of owner: the group, the rule's direction and index. A
// missing group or rule, and another owner's rule, are not_found.
func ownedIn(ctx context.Context, tx cloud.Tx, a Actor, id, ruleID, owner string) (*cloud.SecurityGroup, string, int, error) {
	g, err := Visible(ctx, a, "security group", id, tx.GetSecurityGroup)
	if err != nil {
		return nil, "", -1, err
	}
	dir, i := ownedRule(g, ruleID, owner)
	if i < 0 || owner == "" {
		return nil, "", -1, errNotOwned(id, ruleID)
	}
	return g, dir, i, nil
}

// errNotOwned is the not_found of a rule that is missing or is not
// owner's: the two answer alike, since a stack deletes only its own.
func errNotOwned(g, ruleID string) error {
	return &cloud.Error{Code: cloud.NotFound, Message: fmt.Sprintf("security group %s has no rule %s of this owner", g, Quote(ruleID)),
		Details: map[string]any{"kind": "security group rule", "id": ruleID}}
}

// OwnedRule reads rule ruleID of security group id, owner's: its
// direction and the rule. A missing group or rule, and another owner's
// rule, are not_found.
func (s *Networks) OwnedRule(ctx context.Context, a Actor, id, ruleID, owner string) (dir string, rule cloud.SecurityRule, err error) {
	err = s.tx(ctx, func(tx cloud.Tx) error {
		g, d, i, err := ownedIn(ctx, tx, a, id, ruleID, owner)
		if err != nil {
			return err
		}
		dir, rule = d, (*rulesOf(g, d))[i]
		return nil
	})
	return dir, rule, err
}

// RevokeOwned removes rule ruleID of security group id if owner owns it,
// with its event. A missing group or rule, and another owner's rule, are
// not_found and nothing changes.
func (s *Networks) RevokeOwned(ctx context.Context, a Actor, id, ruleID, owner string) error {
	return s.tx(ctx, func(tx cloud.Tx) error {
		g, dir, i, err := ownedIn(ctx, tx, a, id, ruleID, owner)
		if err != nil {
			return err
		}
		rules := rulesOf(g, dir)
		gone := (*rules)[i]
		*rules = append((*rules)[:i:i], (*rules)[i+1:]...)
		if err := tx.UpdateSecurityGroup(ctx, g); err != nil {
			return err
		}
		return ruleEvent(ctx, tx, a, g, "revoked", dir, gone, s.now())
	})
}

// DescribeOwned sets the description of owner's rule ruleID of security
// group id in place (the rule keeps its ID), with an event; a rule that
// has it already is not written. Missing or not owner's: not_found.
func (s *Networks) DescribeOwned(ctx context.Context, a Actor, id, ruleID, owner, description string) error {
	if err := CheckText("description", description, maxDescriptionLen); err != nil {
		return err
	}
	return s.tx(ctx, func(tx cloud.Tx) error {
		g, dir, i, err := ownedIn(ctx, tx, a, id, ruleID, owner)
		if err != nil {
			return err
		}
		r := &(*rulesOf(g, dir))[i]
		if r.Description == description {
			return nil
		}
		r.Description = description
		if err := tx.UpdateSecurityGroup(ctx, g); err != nil {
			return err
		}
		return ruleEvent(ctx, tx, a, g, "described", dir, *r, s.now())
	})
}
