// Package dns is the resolver the agent serves inside every instance's
// network namespace (issue 19), as it serves the metadata endpoint there:
// the names of the instances of the instance's own network resolve to
// their private addresses, and every other name is forwarded to the
// host's resolvers.
//
// One Resolver serves the whole host. Update gives it the networks the
// host carries (agentapi.HostNetwork, from the control plane's network
// view), from which it builds one zone per network, atomically:
//
//   - NAME.NETWORK.internal, for an instance whose name is a valid DNS
//     label on a network whose name is one (case-insensitive);
//   - INSTANCE_ID.internal;
//   - the reverse names (in-addr.arpa) of the network's addresses.
//
// For returns the server of one instance's network: it answers from that
// network's zone only, so another network's names, and another tenant's,
// do not exist for it (NXDOMAIN). Names under .internal, and the reverse
// names of the network's own CIDR, are answered authoritatively and never
// forwarded; the rest is forwarded to the upstreams (the nameservers of
// the host's resolv.conf) over UDP, and over TCP when the answer was
// truncated, with the answer relayed under the workload's query ID.
//
// A workload cannot use the server to flood the host's resolvers: each
// instance's server forwards at most Config.MaxForwards queries at once
// and Config.Rate per second (with bursts of Config.Burst), refusing the
// rest, and holds at most MaxTCPConns connections. Answers over UDP fit
// the workload's buffer: 512 bytes without EDNS, its EDNS buffer size up
// to MaxUDPSize with it; a larger answer is truncated (TC set), so the
// workload asks again over TCP.
package dns

import (
	"bufio"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
)

// Defaults of Config.
const (
	// DefaultResolvConf is where the host's resolvers are listed.
	DefaultResolvConf = "/etc/resolv.conf"
	// DefaultTimeout bounds one try of one upstream.
	DefaultTimeout = 2 * time.Second
	// DefaultMaxForwards is how many queries one instance may have
	// forwarded at once.
	DefaultMaxForwards = 64
	// DefaultRate and DefaultBurst are how many queries per second one
	// instance may have forwarded, on average and at once.
	DefaultRate  = 200
	DefaultBurst = 400
)

// Limits of the servers.
const (
	// MaxUDPSize is the largest answer sent over UDP, whatever buffer
	// size a query advertises: the size that avoids IP fragmentation
	// (the DNS flag day 2020 recommendation).
	MaxUDPSize = 1232
	// MaxTCPConns is how many TCP connections one instance may hold open
	// to its server at once; one more is closed at once.
	MaxTCPConns = 16
	// TCPIdle is how long a TCP connection may wait for its next query.
	TCPIdle = 10 * time.Second
	// TTL is the time to live of the records of the zones and of their
	// negative answers, in seconds: short, since instances come and go.
	TTL = 10
)

// Config configures a Resolver. The zero value of every field takes its
// default.
type Config struct {
	// Upstreams are the resolvers names outside the zones are forwarded
	// to, tried in order; by default the nameservers of ResolvConf, on
	// port 53 (127.0.0.1 and ::1 when it lists none, as the C library
	// does).
	Upstreams []netip.AddrPort
	// ResolvConf is the file the default upstreams are read from
	// (DefaultResolvConf).
	ResolvConf string
	// Timeout bounds each try of an upstream (DefaultTimeout).
	Timeout time.Duration
	// MaxForwards, Rate and Burst bound one instance's forwarded queries:
	// at once (DefaultMaxForwards), per second (DefaultRate) and in a
	// burst (DefaultBurst).
	MaxForwards int
	Rate        float64
	Burst       int
	// Now is the clock of the rate limits (time.Now).
	Now func() time.Time
	Log *slog.Logger
}

// Resolver holds the zones of the host's networks and the upstreams; it
// is safe for concurrent use.
type Resolver struct {
	cfg   Config
	zones atomic.Pointer[map[string]*zone]
}

// New returns a resolver with no zones; Update gives it its networks.
func New(cfg Config) *Resolver {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.ResolvConf == "" {
		cfg.ResolvConf = DefaultResolvConf
	}
	if len(cfg.Upstreams) == 0 {
		ups, err := readResolvConf(cfg.ResolvConf)
		if err != nil {
			cfg.Log.Warn("dns: the host's resolvers", "file", cfg.ResolvConf, "err", err)
		}
		cfg.Upstreams = ups
	}
	cfg.Upstreams = slices.Clone(cfg.Upstreams)
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxForwards <= 0 {
		cfg.MaxForwards = DefaultMaxForwards
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Resolver{cfg: cfg}
	r.zones.Store(&map[string]*zone{})
	return r
}

// Upstreams returns the resolvers the resolver forwards to.
func (r *Resolver) Upstreams() []netip.AddrPort { return slices.Clone(r.cfg.Upstreams) }

// readResolvConf returns the nameservers a resolv.conf lists, on port 53:
// 127.0.0.1 and ::1 when it lists none or cannot be read.
func readResolvConf(path string) ([]netip.AddrPort, error) {
	local := []netip.AddrPort{
		netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 53),
		netip.AddrPortFrom(netip.IPv6Loopback(), 53),
	}
	f, err := os.Open(path)
	if err != nil {
		return local, err
	}
	defer f.Close()
	var ups []netip.AddrPort
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(fields[1])
		if err != nil {
			continue
		}
		ups = append(ups, netip.AddrPortFrom(a.Unmap(), 53))
	}
	if err := sc.Err(); err != nil {
		return local, err
	}
	if len(ups) == 0 {
		return local, nil
	}
	return ups, nil
}

// zone is one network's names. Names are lower-case and fully qualified
// (with the final dot).
type zone struct {
	// domain is NETWORK.internal., empty when the network's name is not
	// a DNS label.
	domain string
	cidr   netip.Prefix
	// names are the A records, ptrs the PTR records by address.
	names map[string][]netip.Addr
	ptrs  map[netip.Addr][]string
}

// Update replaces the zones with those of networks, atomically: a query
// sees either the old zones or the new ones. Endpoints without a valid
// IPv4 address are left out, and so are names that are not DNS labels.
// Two instances of one name on a network share it (two A records).
func (r *Resolver) Update(networks []agentapi.HostNetwork) {
	zones := make(map[string]*zone, len(networks))
	for _, n := range networks {
		z := &zone{names: map[string][]netip.Addr{}, ptrs: map[netip.Addr][]string{}}
		if label, ok := dnsLabel(n.Name); ok {
			z.domain = label + ".internal."
		}
		if p, err := netip.ParsePrefix(n.CIDR); err == nil {
			z.cidr = p.Masked()
		}
		for _, e := range n.Endpoints {
			a, err := netip.ParseAddr(e.Address)
			if err != nil || !a.Unmap().Is4() {
				continue
			}
			a = a.Unmap()
			var names []string
			if label, ok := dnsLabel(e.Name); ok && z.domain != "" {
				names = append(names, label+"."+z.domain)
			}
			if label, ok := dnsLabel(e.InstanceID); ok {
				names = append(names, label+".internal.")
			}
			for _, name := range names {
				if !slices.Contains(z.names[name], a) {
					z.names[name] = append(z.names[name], a)
				}
				if !slices.Contains(z.ptrs[a], name) {
					z.ptrs[a] = append(z.ptrs[a], name)
				}
			}
		}
		for _, addrs := range z.names {
			slices.SortFunc(addrs, netip.Addr.Compare)
		}
		zones[n.ID] = z
	}
	r.zones.Store(&zones)
}

// zone returns the zone of a network, nil when the resolver has none.
func (r *Resolver) zone(networkID string) *zone {
	return (*r.zones.Load())[networkID]
}

// For returns the server of an instance on the network networkID: it
// answers from that network's zone as Update last set it, and forwards
// the rest. A network the resolver has no zone for has no names.
func (r *Resolver) For(networkID string) *Server {
	return &Server{r: r, network: networkID}
}

// dnsLabel returns s in lower case when it is a DNS label (RFC 1123): 1
// to 63 letters, digits and hyphens, neither first nor last a hyphen.
func dnsLabel(s string) (string, bool) {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return "", false
		}
	}
	return strings.ToLower(s), true
}

// lower returns s with ASCII letters in lower case (DNS names compare
// case-insensitively in ASCII only).
func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// reverseAddr returns the IPv4 address of a reverse name
// ("4.3.2.1.in-addr.arpa."), and false for any other name.
func reverseAddr(name string) (netip.Addr, bool) {
	rest, ok := strings.CutSuffix(name, ".in-addr.arpa.")
	if !ok {
		return netip.Addr{}, false
	}
	labels := strings.Split(rest, ".")
	if len(labels) != 4 {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i, l := range labels {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 || n > 255 || strconv.Itoa(n) != l {
			return netip.Addr{}, false
		}
		b[3-i] = byte(n)
	}
	return netip.AddrFrom4(b), true
}
