package service

import (
	"context"
	"maps"
	"strings"
)

// CheckTags validates a tenant's tags: bounded in number and size, and
// none with gpucloud's reserved prefix, which only gpucloud writes.
func CheckTags(field string, tags map[string]string) error {
	if len(tags) > maxTags {
		return Field(field, "%d tags; the limit is %d", len(tags), maxTags)
	}
	for k, v := range tags {
		if k == "" {
			return Field(field, "a tag key is empty")
		}
		if strings.HasPrefix(k, ReservedTagPrefix) {
			return Field(field, "tag %s uses the reserved prefix %s", Quote(k), Quote(ReservedTagPrefix))
		}
		if err := CheckText(field+" key", k, maxNameLen); err != nil {
			return err
		}
		if err := CheckText(field+"."+k, v, maxTagLen); err != nil {
			return err
		}
	}
	return nil
}

// The tags the stack engine sets on what a stack creates: TagStack (the
// stack's name) on every resource, and on instances the resource and copy
// they come from and the job they belong to: the copies of one resource, or
// every instance of one placement group of the stack. TagStackRank is the
// instance's rank in its job (0 first) and TagStackWorld the job's size, as
// torchrun's NODE_RANK and the node count; the metadata endpoint gives
// them with the job's peers (Agents.Assignments).
const (
	TagStack         = ReservedTagPrefix + "stack"
	TagStackResource = ReservedTagPrefix + "stack-resource"
	TagStackJob      = ReservedTagPrefix + "stack-job"
	TagStackRank     = ReservedTagPrefix + "stack-rank"
	TagStackWorld    = ReservedTagPrefix + "stack-world"
)

// systemTagsKey carries the tags gpucloud itself sets on what a create
// makes (WithSystemTags). A handler's context never carries it: only the
// server's own orchestrators (the stack engine) set it.
type systemTagsKey struct{}

// WithSystemTags returns ctx carrying tags (gpucloud:stack=NAME) that the
// creates it reaches add to the tenant's tags, after their check, so that
// a tenant cannot set them and gpucloud can. The stack engine tags what a
// stack creates with it; the API never calls it.
func WithSystemTags(ctx context.Context, tags map[string]string) context.Context {
	return context.WithValue(ctx, systemTagsKey{}, tags)
}

// addSystemTags returns tags with the context's system tags added (a copy
// when there are any); tags unchanged when there are none.
func addSystemTags(ctx context.Context, tags map[string]string) map[string]string {
	sys, _ := ctx.Value(systemTagsKey{}).(map[string]string)
	if len(sys) == 0 {
		return tags
	}
	out := make(map[string]string, len(tags)+len(sys))
	maps.Copy(out, tags)
	maps.Copy(out, sys)
	return out
}
