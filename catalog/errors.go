package catalog

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// NotFoundError reports a lookup of a name the catalog does not know. It
// carries the known names so that callers (the API, the CLI) can show the
// user what they could have asked for instead of a bare "not found".
type NotFoundError struct {
	// Kind is what was looked up: "gpu model", "offering" or "MIG profile".
	Kind string
	// Name is the name as the caller gave it.
	Name string
	// In names the scope of the lookup when there is one, e.g.
	// `gpu model "H100-80GB-SXM"` for a MIG profile; empty otherwise.
	In string
	// Known lists the names that would have been found, most similar first.
	Known []string
}

// maxKnownInMessage bounds how many known names an error message lists, so
// that a catalog with hundreds of offerings still gives a one-line error.
const maxKnownInMessage = 8

func (e *NotFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "unknown %s %q", e.Kind, e.Name)
	if e.In != "" {
		fmt.Fprintf(&b, " for %s", e.In)
	}
	if len(e.Known) > 0 {
		b.WriteString(" (known: ")
		b.WriteString(joinFew(e.Known, maxKnownInMessage))
		b.WriteString(")")
	}
	return b.String()
}

// IsNotFound reports whether err is, or wraps, a *NotFoundError.
func IsNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf)
}

// ValidationError reports one invalid field of a model or offering. Field
// uses the YAML field names (with indexes for lists, e.g.
// "mig_profiles[2].starts") so that an operator can find it in the catalog
// file.
type ValidationError struct {
	// Kind is "offering" or "model"; empty means "offering", which keeps
	// ValidationError{Field, Message} literals meaningful.
	Kind string
	// Name is the offering's or model's name as written.
	Name string
	// Field is the offending field, empty when the error is about the whole
	// entry.
	Field string
	// Message says what is wrong and, where it helps, what would be valid.
	Message string
}

func (e *ValidationError) Error() string {
	kind := e.Kind
	if kind == "" {
		kind = "offering"
	}
	if e.Field == "" {
		return fmt.Sprintf("%s %q: %s", kind, e.Name, e.Message)
	}
	return fmt.Sprintf("%s %q: %s: %s", kind, e.Name, e.Field, e.Message)
}

// joinFew joins at most n names with ", " and marks the rest with "...".
func joinFew(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + ", ..."
}

// bySimilarity returns a copy of names ordered so that those sharing the
// longest case-insensitive prefix with query come first; ties keep the input
// order. With no common prefix at all the input order (alphabetical in the
// catalog) is kept, so an unrelated typo still lists names predictably.
func bySimilarity(query string, names []string) []string {
	q := strings.ToLower(query)
	out := make([]string, len(names))
	copy(out, names)
	score := make(map[string]int, len(out))
	for _, n := range out {
		score[n] = commonPrefixLen(q, strings.ToLower(n))
	}
	slices.SortStableFunc(out, func(a, b string) int { return score[b] - score[a] })
	return out
}

func commonPrefixLen(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
