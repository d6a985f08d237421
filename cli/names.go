package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
)

// resourceKind says how the verbs of one kind of resource read what a user
// typed for one: its ID, or for the kinds that have names, a name unique
// among the live resources the caller sees.
type resourceKind struct {
	// noun names one ("instance"), plural the command that lists them
	// ("instances": `gpucloud instances list`).
	noun, plural string
	// prefix starts every ID of the kind ("i-").
	prefix string
	// named lists the resources the caller sees whose name is name; nil
	// for a kind without names (addresses, commitments).
	named func(ctx context.Context, c *conn, name string) ([]namedRef, error)
}

// namedRef is one resource a name matched.
type namedRef struct {
	ID string
	// Live is false for a resource that is over (a terminated instance, a
	// cancelled spot request): it answers to its name only while no live
	// one does.
	Live bool
}

// arg is the usage text of one argument of the kind, e.g. "one instance ID
// or name".
func (k resourceKind) arg() string {
	if k.named == nil {
		return "one " + k.noun + " ID"
	}
	return "one " + k.noun + " ID or name"
}

// The kinds whose verbs take an ID.
var (
	instanceKind = resourceKind{noun: "instance", plural: "instances", prefix: "i-",
		named: func(ctx context.Context, c *conn, name string) ([]namedRef, error) {
			var out []namedRef
			o := client.ListInstancesOptions{Name: name, Limit: 1000}
			for range 100 { // 100,000 instances of one name is enough to say it is ambiguous
				page, err := c.ListInstances(ctx, o)
				if err != nil {
					return nil, err
				}
				for _, in := range page.Instances {
					out = append(out, namedRef{ID: in.ID, Live: in.State != cloud.Terminated})
				}
				if page.Next == "" {
					break
				}
				o.After = page.Next
			}
			return out, nil
		}}
	volumeKind = resourceKind{noun: "volume", plural: "volumes", prefix: "v-",
		named: namedIn(func(ctx context.Context, c *conn) ([]*cloud.Volume, error) { return c.Volumes(ctx, "") },
			func(v *cloud.Volume) (string, string, bool) { return v.ID, v.Name, v.DeletedAt == nil })}
	groupKind = resourceKind{noun: "group", plural: "groups", prefix: "asg-",
		named: namedIn(func(ctx context.Context, c *conn) ([]*cloud.Group, error) { return c.Groups(ctx, "") },
			func(g *cloud.Group) (string, string, bool) { return g.ID, g.Name, g.State != cloud.GroupDeleted })}
	spotRequestKind = resourceKind{noun: "spot request", plural: "spot requests", prefix: "sr-",
		named: namedIn(func(ctx context.Context, c *conn) ([]*cloud.SpotRequest, error) { return c.SpotRequests(ctx, "") },
			func(r *cloud.SpotRequest) (string, string, bool) {
				return r.ID, r.Name, r.State != cloud.SpotCancelled && r.State != cloud.SpotClosed
			})}
	keyKind = resourceKind{noun: "key", plural: "keys", prefix: "k-",
		named: namedIn(func(ctx context.Context, c *conn) ([]*cloud.Key, error) { return c.Keys(ctx, "") },
			func(k *cloud.Key) (string, string, bool) { return k.ID, k.Name, true })}
	placementGroupKind = resourceKind{noun: "placement group", plural: "placement-groups", prefix: "pg-",
		named: namedIn(func(ctx context.Context, c *conn) ([]*cloud.PlacementGroup, error) { return c.PlacementGroups(ctx, "") },
			func(g *cloud.PlacementGroup) (string, string, bool) { return g.ID, g.Name, g.DeletedAt == nil })}
	networkKind = resourceKind{noun: "network", plural: "networks", prefix: "vpc-",
		named: namedIn(func(ctx context.Context, c *conn) ([]*cloud.Network, error) { return c.Networks(ctx, "") },
			func(n *cloud.Network) (string, string, bool) { return n.ID, n.Name, true })}
	subnetKind = resourceKind{noun: "subnet", plural: "subnets", prefix: "subnet-",
		named: namedIn(func(ctx context.Context, c *conn) ([]*cloud.Subnet, error) { return c.Subnets(ctx, "", "") },
			func(s *cloud.Subnet) (string, string, bool) { return s.ID, s.Name, true })}
	securityGroupKind = resourceKind{noun: "security group", plural: "security-groups", prefix: "sg-",
		named: namedIn(func(ctx context.Context, c *conn) ([]*cloud.SecurityGroup, error) {
			return c.SecurityGroups(ctx, "", "")
		},
			func(g *cloud.SecurityGroup) (string, string, bool) { return g.ID, g.Name, true })}
	// endpointKind lists deleted endpoints too: one answers to its name
	// while no live endpoint has it.
	endpointKind = resourceKind{noun: "endpoint", plural: "endpoints", prefix: "ep-",
		named: namedIn(func(ctx context.Context, c *conn) ([]*cloud.Endpoint, error) { return c.Endpoints(ctx, "", true) },
			func(e *cloud.Endpoint) (string, string, bool) { return e.ID, e.Name, e.State != cloud.EndpointDeleted })}
	addressKind    = resourceKind{noun: "address", plural: "addresses", prefix: "eip-"}
	commitmentKind = resourceKind{noun: "commitment", plural: "commitments", prefix: "cm-"}
)

// namedIn makes the named function of a kind whose list call answers every
// resource the caller sees: list reads them, fields says each one's ID,
// name and whether it is live.
func namedIn[T any](list func(context.Context, *conn) ([]*T, error), fields func(*T) (id, name string, live bool)) func(context.Context, *conn, string) ([]namedRef, error) {
	return func(ctx context.Context, c *conn, name string) ([]namedRef, error) {
		all, err := list(ctx, c)
		if err != nil {
			return nil, err
		}
		var out []namedRef
		for _, v := range all {
			if id, n, live := fields(v); n == name {
				out = append(out, namedRef{ID: id, Live: live})
			}
		}
		return out, nil
	}
}

// looksLikeID reports whether arg has the form of an ID of the kind: its
// prefix and 16 lowercase hex digits (service.NewID).
func (k resourceKind) looksLikeID(arg string) bool {
	rest, ok := strings.CutPrefix(arg, k.prefix)
	return ok && len(rest) == 16 && strings.IndexFunc(rest, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f')
	}) < 0
}

// resolve returns the ID of the resource of kind k that arg names: an ID
// as it is (the server says whether it exists), else the one resource the
// caller sees of that name, a live one before one that is over (a
// terminated instance does not make its name ambiguous). A name that
// matches nothing is not_found naming what was looked for; one that
// matches several is invalid_argument listing their IDs. A string of the
// ID's prefix that no name matches goes to the server as an ID.
func (c *conn) resolve(ctx context.Context, k resourceKind, arg string) (string, error) {
	if k.named == nil || arg == "" || k.looksLikeID(arg) {
		return arg, nil
	}
	refs, err := k.named(ctx, c, arg)
	if err != nil {
		return "", c.explain(err)
	}
	var live []namedRef
	for _, r := range refs {
		if r.Live {
			live = append(live, r)
		}
	}
	if len(live) > 0 {
		refs = live
	}
	switch len(refs) {
	case 0:
		if strings.HasPrefix(arg, k.prefix) {
			return arg, nil
		}
		return "", c.explain(&cloud.Error{Code: cloud.NotFound,
			Message: fmt.Sprintf("no %s named %q ('gpucloud %s list' lists them)", k.noun, arg, k.plural),
			Details: map[string]any{"kind": k.noun, "name": arg}})
	case 1:
		return refs[0].ID, nil
	}
	ids := make([]string, len(refs))
	for i, r := range refs {
		ids[i] = r.ID
	}
	return "", c.explain(&cloud.Error{Code: cloud.Invalid,
		Message: fmt.Sprintf("%d %ss are named %q: give one of their IDs (%s)", len(refs), k.noun, arg, strings.Join(ids, ", ")),
		Details: map[string]any{"kind": k.noun, "name": arg, "ids": ids}})
}

// resolveAll is resolve of each of args, in order.
func (c *conn) resolveAll(ctx context.Context, k resourceKind, args []string) ([]string, error) {
	ids := make([]string, len(args))
	for i, a := range args {
		id, err := c.resolve(ctx, k, a)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
}
