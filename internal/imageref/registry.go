package imageref

import (
	"fmt"
	"net/netip"
	"strings"
)

// A registry is a host the agent connects to, on the host, on a tenant's
// say: an image name is a URL. A registry at an address of the host itself
// or of its network (a loopback port, the cloud's metadata service at
// 169.254.169.254, a private service) would let a tenant reach what only
// the host may, and tell its open ports from its closed ones. The rules
// below refuse those addresses unless the operator allowed the registry
// (AllowList); the server applies them to the name at create time, and
// the agent again to every address the name resolves to when it pulls.

// Ranges of addresses a registry may not have, with the rule each one
// breaks. The first that contains an address names it.
var refusedRanges = []struct {
	prefix netip.Prefix
	rule   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified (\"this network\") address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (carrier-grade NAT) address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fc00::/7"), "a private (unique local) address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// AddrRule returns the rule an address breaks as a registry's ("a loopback
// address"), or "" when a host may connect to it. An IPv4 address mapped
// into IPv6 (::ffff:127.0.0.1) is judged as the IPv4 one.
func AddrRule(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return "not an address"
	}
	for _, r := range refusedRanges {
		if r.prefix.Contains(a) {
			return r.rule
		}
	}
	return ""
}

// SplitRegistry splits a registry ("host", "host:port", "[v6]:port") into
// its host, without brackets, and its port ("" when it names none).
func SplitRegistry(reg string) (host, port string) {
	if strings.HasPrefix(reg, "[") {
		end := strings.IndexByte(reg, ']')
		if end < 0 {
			return reg, ""
		}
		return reg[1:end], strings.TrimPrefix(reg[end+1:], ":")
	}
	host, port, _ = strings.Cut(reg, ":")
	return host, port
}

// HostRule returns the rule a registry's host breaks by its name alone,
// or "": an IP literal in a refused range (AddrRule), or localhost or a
// name under .localhost, which resolve to loopback everywhere. Other names
// are judged by the addresses they resolve to, when a host pulls.
func HostRule(host string) string {
	if a, err := netip.ParseAddr(host); err == nil {
		return AddrRule(a)
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return "a loopback address (localhost)"
	}
	return ""
}

// AllowList is the registries the operator allows at addresses the rules
// refuse: a private registry in the data centre, or one on the host for a
// test. An entry "host" allows every port of host, "host:port" that port
// only. Hosts are compared without case; IPv6 hosts in their canonical
// form.
type AllowList struct {
	hosts map[string]bool // host: every port
	ports map[string]bool // host:port
}

// NewAllowList reads entries HOST or HOST:PORT ("registry.internal",
// "10.0.0.5:5000", "[fd00::5]:5000").
func NewAllowList(entries []string) (AllowList, error) {
	l := AllowList{hosts: map[string]bool{}, ports: map[string]bool{}}
	for _, e := range entries {
		if err := checkRegistry(e); err != nil || e == "" || strings.ContainsAny(e, "/@") {
			return AllowList{}, fmt.Errorf("allowed registry %q: want HOST or HOST:PORT (\"registry.internal\", \"10.0.0.5:5000\", \"[fd00::5]:5000\")", e)
		}
		host, port := SplitRegistry(e)
		host = canonHost(host)
		if port == "" {
			l.hosts[host] = true
		} else {
			l.ports[host+"\x00"+port] = true
		}
	}
	return l, nil
}

// MustAllowList is NewAllowList for entries known to be valid; it panics
// on a bad one.
func MustAllowList(entries ...string) AllowList {
	l, err := NewAllowList(entries)
	if err != nil {
		panic(err)
	}
	return l
}

// Allows reports whether the operator allowed host (a name or an address,
// without brackets) at port.
func (l AllowList) Allows(host, port string) bool {
	host = canonHost(host)
	return l.hosts[host] || l.ports[host+"\x00"+port]
}

// Len is the number of entries.
func (l AllowList) Len() int { return len(l.hosts) + len(l.ports) }

// canonHost is the form hosts are compared in: lower case without a final
// dot, an address in its canonical text.
func canonHost(h string) string {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// DefaultPort is the port of a registry that names none: hosts pull over
// HTTPS.
const DefaultPort = "443"

// CheckRegistryAllowed returns an error when the registry of ref may not
// be pulled from by its name alone (HostRule) and the operator did not
// allow it. It names the registry's host and the rule, never the port.
func CheckRegistryAllowed(ref Reference, allow AllowList) error {
	host, port := SplitRegistry(ref.Registry)
	rule := HostRule(host)
	if rule == "" || allow.Allows(host, port) || port == "" && allow.Allows(host, DefaultPort) {
		return nil
	}
	return fmt.Errorf("registry %s is %s: hosts do not pull from loopback, link-local, private or other internal addresses unless the operator allows the registry (--allow-registry)", host, rule)
}
