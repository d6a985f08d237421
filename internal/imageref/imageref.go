// Package imageref reads OCI image references ("python:3.12",
// "ghcr.io/acme/train:1", "registry.local:5000/ml/job@sha256:...") and
// writes them in their canonical form, the one containerd stores an image
// under and a host pulls: registry, repository, and a tag or a digest,
// nothing left implicit ("docker.io/library/python:3.12").
//
// The grammar is the one registries and container engines accept:
//
//	reference  = name [ ":" tag ] [ "@" digest ]
//	name       = [ registry "/" ] component *( "/" component )
//	registry   = host [ ":" port ]   (a DNS name, an IPv4 address or a bracketed IPv6 one)
//	component  = [a-z0-9]+ *( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )
//	tag        = [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
//	digest     = "sha256:" 64 hex | "sha512:" 128 hex   (lower case)
//
// The first part of a name is the registry when the name has more than one
// part and the first holds a '.' or a ':', is "localhost", or has an upper
// case letter; otherwise the registry is docker.io, where a one-part name
// is an official image under "library/". A reference with neither tag nor
// digest means the tag "latest"; with a digest, the digest alone names the
// image and a tag beside it is dropped. The package is pure: no I/O.
package imageref

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Limits of a reference.
const (
	// MaxLen bounds a whole reference in bytes.
	MaxLen = 512
	// MaxNameLen bounds the name (registry and repository).
	MaxNameLen = 255
	// MaxTagLen bounds a tag.
	MaxTagLen = 128
)

// Defaults of a short reference.
const (
	DefaultRegistry = "docker.io"
	// OfficialPrefix is the repository prefix of docker.io's one-part
	// names.
	OfficialPrefix = "library/"
	DefaultTag     = "latest"
)

// Reference is a parsed image reference.
type Reference struct {
	// Registry is the host (and port) of the registry: "docker.io" when
	// the reference names none.
	Registry string
	// Repository is the path in the registry, "library/python" for
	// docker.io's "python".
	Repository string
	// Tag is empty when the reference has a digest or named no tag; Digest
	// is "algorithm:hex", or empty.
	Tag    string
	Digest string
}

// Name is registry/repository.
func (r Reference) Name() string { return r.Registry + "/" + r.Repository }

// String is the canonical form: name:tag, name@digest, or name:latest.
func (r Reference) String() string {
	switch {
	case r.Digest != "":
		return r.Name() + "@" + r.Digest
	case r.Tag != "":
		return r.Name() + ":" + r.Tag
	}
	return r.Name() + ":" + DefaultTag
}

// Normalize parses s and returns its canonical form (Reference.String).
func Normalize(s string) (string, error) {
	r, err := Parse(s)
	if err != nil {
		return "", err
	}
	return r.String(), nil
}

// Parse reads an image reference. Its errors say what is wrong, in words
// that fit after "image %q: ".
func Parse(s string) (Reference, error) {
	var r Reference
	if s == "" {
		return r, errors.New("is empty")
	}
	if len(s) > MaxLen {
		return r, fmt.Errorf("is %d bytes long; the limit is %d", len(s), MaxLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return r, fmt.Errorf("has %s at byte %d: a reference is printable ASCII without spaces", charName(c), i)
		}
	}
	rest := s
	if name, digest, ok := strings.Cut(s, "@"); ok {
		if err := checkDigest(digest); err != nil {
			return r, err
		}
		r.Digest, rest = digest, name
	}
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		tag := rest[i+1:]
		if err := checkTag(tag); err != nil {
			return r, err
		}
		if r.Digest == "" {
			r.Tag = tag
		}
		rest = rest[:i]
	}
	if rest == "" {
		return r, errors.New("has no repository name")
	}
	parts := strings.Split(rest, "/")
	if len(parts) > 1 && isRegistry(parts[0]) {
		if err := checkRegistry(parts[0]); err != nil {
			return r, err
		}
		r.Registry, parts = parts[0], parts[1:]
		if r.Registry == "index.docker.io" {
			r.Registry = DefaultRegistry
		}
	} else {
		r.Registry = DefaultRegistry
	}
	for _, p := range parts {
		if err := checkComponent(p); err != nil {
			return r, err
		}
	}
	r.Repository = strings.Join(parts, "/")
	if r.Registry == DefaultRegistry && len(parts) == 1 {
		r.Repository = OfficialPrefix + r.Repository
	}
	if n := len(r.Name()); n > MaxNameLen {
		return r, fmt.Errorf("has a name of %d characters (%s); the limit is %d", n, r.Name(), MaxNameLen)
	}
	return r, nil
}

// charName names a byte that may not appear in a reference.
func charName(c byte) string {
	switch c {
	case ' ':
		return "a space"
	case '\t':
		return "a tab"
	case '\n':
		return "a newline"
	}
	return fmt.Sprintf("byte %#02x", c)
}

// isRegistry tells whether the first part of a name of several parts names
// a registry rather than a repository.
func isRegistry(p string) bool {
	return strings.ContainsAny(p, ".:") || p == "localhost" || strings.ToLower(p) != p
}

// checkRegistry validates host[:port].
func checkRegistry(reg string) error {
	host, port := reg, ""
	if strings.HasPrefix(reg, "[") {
		end := strings.IndexByte(reg, ']')
		if end < 0 {
			return fmt.Errorf("has registry %q with an unclosed '['", reg)
		}
		host, port = reg[:end+1], reg[end+1:]
		if port != "" && port[0] != ':' {
			return fmt.Errorf("has registry %q: want [IPv6]:port", reg)
		}
		port = strings.TrimPrefix(port, ":")
		if a, err := netip.ParseAddr(host[1 : len(host)-1]); err != nil || !a.Is6() {
			return fmt.Errorf("has registry %q: %s is not an IPv6 address", reg, host)
		}
	} else if h, p, ok := strings.Cut(reg, ":"); ok {
		host, port = h, p
		if port == "" {
			return fmt.Errorf("has registry %q with an empty port", reg)
		}
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '0' || port[0] == '+' {
			return fmt.Errorf("has registry %q: port %q is not a number from 1 to 65535", reg, port)
		}
	}
	if strings.HasPrefix(host, "[") {
		return nil
	}
	for _, label := range strings.Split(host, ".") {
		if !validLabel(label) {
			return fmt.Errorf("has registry %q: %q is not a host name part (letters, digits and '-', not at either end)", reg, label)
		}
	}
	return nil
}

// validLabel checks one dot-separated part of a host name.
func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		if c := l[i]; !(isAlnum(c) || c >= 'A' && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}

// checkComponent validates one part of a repository path: lower case
// letters and digits, separated by '.', '_', "__" or dashes.
func checkComponent(p string) error {
	if p == "" {
		return errors.New("has an empty path part (\"//\", or '/' at an end)")
	}
	if strings.ToLower(p) != p {
		return fmt.Errorf("has %q in its repository path: repository names are lower case", p)
	}
	bad := fmt.Errorf("has %q in its repository path: use lower case letters and digits, separated by '.', '_', '__' or '-'", p)
	if !isAlnum(p[0]) || !isAlnum(p[len(p)-1]) {
		return bad
	}
	for i := 0; i < len(p); {
		if isAlnum(p[i]) {
			i++
			continue
		}
		j := i
		for j < len(p) && !isAlnum(p[j]) {
			j++
		}
		switch sep := p[i:j]; {
		case sep == "." || sep == "_" || sep == "__":
		case strings.Trim(sep, "-") == "":
		default:
			return bad
		}
		i = j
	}
	return nil
}

// checkTag validates a tag.
func checkTag(tag string) error {
	if tag == "" {
		return errors.New("has an empty tag (nothing after ':')")
	}
	if len(tag) > MaxTagLen {
		return fmt.Errorf("has a tag of %d characters; the limit is %d", len(tag), MaxTagLen)
	}
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		ok := isAlnum(c) || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && (c == '.' || c == '-')
		if !ok {
			return fmt.Errorf("has tag %q: use letters, digits, '_', '.' and '-', not starting with '.' or '-'", tag)
		}
	}
	return nil
}

// checkDigest validates a content digest: sha256 or sha512 in lower case
// hex, what registries serve.
func checkDigest(d string) error {
	alg, hex, ok := strings.Cut(d, ":")
	want := map[string]int{"sha256": 64, "sha512": 128}[alg]
	if !ok || want == 0 {
		return fmt.Errorf("has digest %q: want sha256:<64 hex digits> or sha512:<128 hex digits>", d)
	}
	if len(hex) != want {
		return fmt.Errorf("has a %s digest of %d hex digits; want %d", alg, len(hex), want)
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("has a %s digest that is not lower case hex", alg)
		}
	}
	return nil
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
