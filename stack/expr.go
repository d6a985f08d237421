package stack

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// namePattern is what resource, parameter and output names look like.
var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// attrPattern is what an attribute name looks like.
var attrPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// refKind is what a reference reads.
type refKind int

const (
	refParam      refKind = iota // ${param.NAME}
	refCountIndex                // ${count.index}
	refResource                  // ${RES.ATTR} or ${RES[i].ATTR}
)

// ref is one ${...} reference.
type ref struct {
	kind      refKind
	name      string // the parameter or resource
	index     int    // the copy index, -1 when absent
	attr      string // the resource attribute
	text      string // as written, "${head.id}"
	line, col int    // the position of the string holding it
	alone     bool   // the reference is the whole string
}

// part is a piece of an interpolated string: literal text or a reference.
type part struct {
	text string
	ref  *ref
}

// hasRef reports whether any part is a reference.
func hasRef(parts []part) bool {
	for _, p := range parts {
		if p.ref != nil {
			return true
		}
	}
	return false
}

// parseInterp splits s into literal text and references. "$${" is a
// literal "${". It returns a message when s is malformed.
func parseInterp(s string) ([]part, string) {
	var parts []part
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			parts = append(parts, part{text: text.String()})
			text.Reset()
		}
	}
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			text.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, fmt.Sprintf("unterminated reference %q (write $${ for a literal ${)", s[i:])
			}
			r, msg := parseRef(s[i+2 : i+end])
			if msg != "" {
				return nil, msg
			}
			r.text = s[i : i+end+1]
			flush()
			parts = append(parts, part{ref: r})
			i += end + 1
		default:
			text.WriteByte(s[i])
			i++
		}
	}
	flush()
	if len(parts) == 0 {
		parts = []part{{text: ""}}
	}
	return parts, ""
}

// refSyntax is the grammar of references, for messages.
const refSyntax = "${param.NAME}, ${RESOURCE.ATTRIBUTE}, ${RESOURCE[i].ATTRIBUTE} or ${count.index}"

// parseRef parses the inside of ${...}.
func parseRef(in string) (*ref, string) {
	bad := fmt.Sprintf("invalid reference ${%s}: write %s (or $${ for a literal ${)", in, refSyntax)
	if in == "count.index" {
		return &ref{kind: refCountIndex, index: -1, text: "${count.index}"}, ""
	}
	head, attr, ok := strings.Cut(in, ".")
	if !ok || !attrPattern.MatchString(attr) && head != "param" {
		return nil, bad
	}
	if head == "param" {
		if !namePattern.MatchString(attr) {
			return nil, bad
		}
		return &ref{kind: refParam, name: attr, index: -1}, ""
	}
	name, index := head, -1
	if open := strings.IndexByte(head, '['); open >= 0 {
		if !strings.HasSuffix(head, "]") {
			return nil, bad
		}
		digits := head[open+1 : len(head)-1]
		i, err := strconv.Atoi(digits)
		if err != nil || i < 0 || digits != strconv.Itoa(i) {
			return nil, bad
		}
		name, index = head[:open], i
	}
	if !namePattern.MatchString(name) || name == "count" {
		return nil, bad
	}
	return &ref{kind: refResource, name: name, index: index, attr: attr}, ""
}

// countExpr is a count written as a parameter reference: ${param.NAME},
// ${param.NAME - K} or ${param.NAME + K}.
type countExpr struct {
	param string
	delta int
}

// countPattern matches a count reference.
var countPattern = regexp.MustCompile(`^\$\{param\.([a-z][a-z0-9_-]{0,62})(?:\s*([+-])\s*([0-9]{1,3}))?\}$`)

// parseCount parses a count reference.
func parseCount(s string) (countExpr, bool) {
	m := countPattern.FindStringSubmatch(s)
	if m == nil {
		return countExpr{}, false
	}
	c := countExpr{param: m[1]}
	if m[2] != "" {
		c.delta, _ = strconv.Atoi(m[3])
		if m[2] == "-" {
			c.delta = -c.delta
		}
	}
	return c, true
}

// String writes the count back as a reference.
func (c countExpr) String() string {
	switch {
	case c.delta > 0:
		return fmt.Sprintf("${param.%s + %d}", c.param, c.delta)
	case c.delta < 0:
		return fmt.Sprintf("${param.%s - %d}", c.param, -c.delta)
	}
	return "${param." + c.param + "}"
}
