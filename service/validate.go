package service

import (
	"time"
	"unicode/utf8"

	"github.com/gpucloud/gpucloud/internal/imageref"
)

// Limits on request fields. They keep one request from filling the store
// or the agent's process table, and are generous for real workloads.
const (
	maxNameLen     = 63
	maxZones       = 16
	maxLabels      = 32
	maxVolumes     = 16
	maxTags        = 64
	maxTagLen      = 256
	maxCommandArgs = 256
	maxCommandSize = 64 << 10 // bytes over all arguments
	maxEnvVars     = 256
	maxEnvSize     = 64 << 10 // bytes over all names and values
	maxVolumeGiB   = 64 << 10 // 64 TiB
	maxIdemKeyLen  = 255
)

// CheckName validates a resource name: 1..63 characters, letters, digits,
// '-', '_' and '.', starting with a letter or digit. The same rule for
// every resource means a name that works in one place works in all.
func CheckName(fieldName, s string, required bool) error {
	if s == "" {
		if required {
			return Field(fieldName, "is required")
		}
		return nil
	}
	if len(s) > maxNameLen {
		return Field(fieldName, "is %d characters long; the limit is %d", len(s), maxNameLen)
	}
	for i, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			i > 0 && (c == '-' || c == '_' || c == '.')
		if !ok {
			return Field(fieldName, "%s: use letters, digits, '-', '_' and '.', starting with a letter or digit", Quote(s))
		}
	}
	return nil
}

// CheckText validates a free-form string: valid UTF-8 without control
// characters (NUL would break C strings in the agent and terminals).
func CheckText(fieldName, s string, maxLen int) error {
	if len(s) > maxLen {
		return Field(fieldName, "is %d bytes long; the limit is %d", len(s), maxLen)
	}
	if !utf8.ValidString(s) {
		return Field(fieldName, "is not valid UTF-8")
	}
	for _, c := range s {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return Field(fieldName, "contains control character %U", c)
		}
	}
	return nil
}

// CheckImage validates the image a workload runs in, an OCI reference
// ("python:3.12", "ghcr.io/acme/train:1", "registry.local:5000/job@sha256:..."),
// and returns it in its canonical form, the name a host pulls and
// containerd keeps it under ("docker.io/library/python:3.12"): two
// spellings of one image are one image, for idempotency too. Empty stays
// empty: the image the operator configured on the hosts.
func CheckImage(fieldName, s string) (string, error) {
	if s == "" {
		return "", nil
	}
	canon, err := imageref.Normalize(s)
	if err != nil {
		return "", Field(fieldName, "%s %v (an OCI image reference, e.g. \"python:3.12\", \"ghcr.io/acme/train:1\" or \"registry.local:5000/ml/job@sha256:<64 hex>\"; leave it out for the operator's default image)", Quote(s), err)
	}
	return canon, nil
}

// checkRegistry refuses an image (canonical, as CheckImage returns it;
// empty for the hosts' default) whose registry is an internal address by
// its name alone (imageref.HostRule) unless the operator allowed it
// (Options.AllowRegistries). The error names the field, the registry's
// host and the rule, never a port.
func (b *base) checkRegistry(fieldName, image string) error {
	if image == "" {
		return nil
	}
	ref, err := imageref.Parse(image)
	if err != nil {
		return Field(fieldName, "%s %v", Quote(image), err)
	}
	if err := imageref.CheckRegistryAllowed(ref, b.opts.AllowRegistries); err != nil {
		return Field(fieldName, "%v", err)
	}
	return nil
}

// checkEnvName accepts POSIX environment variable names.
func checkEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// CheckIdempotencyKey validates the Idempotency-Key header: printable
// ASCII, at most maxIdemKeyLen characters.
func CheckIdempotencyKey(k string) error {
	if len(k) > maxIdemKeyLen {
		return Field("Idempotency-Key", "is %d characters long; the limit is %d", len(k), maxIdemKeyLen)
	}
	for _, c := range k {
		if c < 0x21 || c > 0x7e {
			return Field("Idempotency-Key", "use printable ASCII without spaces")
		}
	}
	return nil
}

// startAt is when a create asks something to begin: at, or now when at
// is nil. A time more than slack before now comes with past, the error
// that refuses it (hint says why); the caller returns it only once the
// create is known not to be a retry, which may name a time that has passed
// since.
func startAt(field string, at *time.Time, now time.Time, slack time.Duration, hint string) (time.Time, error) {
	if at == nil {
		return now, nil
	}
	if err := CheckTime(field, *at); err != nil {
		return *at, err // refused like a past time: no retry names it
	}
	if at.Before(now.Add(-slack)) {
		return *at, Field(field, "%s is in the past; %s", at.UTC().Format(time.RFC3339), hint)
	}
	return *at, nil
}

// Times a request may carry: from year 1 to year 9999 in UTC, the times
// every store keeps and reads back (SQLite's text form has four-digit
// years) and JSON can encode. A time in range in its own zone may fall
// outside in UTC ("9999-12-31T23:00:00-05:00").
var (
	minTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// CheckTime refuses a time outside minTime..maxTime in UTC.
func CheckTime(fieldName string, t time.Time) error {
	if t.Before(minTime) || t.After(maxTime) {
		return Field(fieldName, "%s is out of range: times run from year 1 to year 9999 (UTC)", t.Format(time.RFC3339Nano))
	}
	return nil
}
