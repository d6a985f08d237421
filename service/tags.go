package service

import (
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
