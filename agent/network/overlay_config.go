package network

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
)

// Defaults of OverlayConfig.
const (
	DefaultVXLANPort = 4789
	// OverlayOverhead is what VXLAN over IPv4 adds to each packet: the
	// outer IPv4 (20), UDP (8) and VXLAN (8) headers and the inner
	// Ethernet header (14).
	OverlayOverhead = 50
	// MaxCloudLen bounds OverlayConfig.Cloud.
	MaxCloudLen = 6
)

// DefaultTransitPool is where the transit links' /30s come from.
var DefaultTransitPool = netip.MustParsePrefix("100.65.0.0/16")

// OverlayConfig configures the overlay driver.
type OverlayConfig struct {
	// Cloud is the cloud's short identity (1 to 6 of [a-z0-9]), which
	// every name the driver makes derives from: namespaces
	// "gc<cloud>-...", interfaces "gc<cloud><kind><hash>", nftables tables
	// "gpucloud_<cloud>". Two drivers of different identities on one
	// host never touch each other's objects.
	Cloud string
	// HostNetns names the network namespace (under /var/run/netns) the
	// driver treats as the host's; empty: the agent's own.
	HostNetns string
	// Underlay is the host's address on the fabric between hosts, where
	// its VXLAN devices send and receive; the server hands it to the
	// other hosts (fleet.Host.Underlay).
	Underlay netip.Addr
	// UnderlayMTU is the MTU of the fabric (default: the MTU of the
	// interface that holds Underlay); instances get UnderlayMTU minus
	// OverlayOverhead.
	UnderlayMTU int
	// TransitPool holds the /30s of the links between the routers and the
	// host (DefaultTransitPool); a /30 some address or route of the host
	// overlaps is skipped.
	TransitPool netip.Prefix
	// Port is the VXLAN UDP port (DefaultVXLANPort); every host of the
	// cloud must use the same.
	Port int
	// Blocked and Allowed are as in Config: destinations outside the
	// network that instances may not reach through the host (besides
	// DefaultBlocked, TransitPool and the underlay's subnet), and
	// exceptions.
	Blocked, Allowed []netip.Prefix
	// IP and NFT are the ip(8) and nft(8) programs, found as Config's.
	IP, NFT string
	// Log receives warnings (slog.Default()).
	Log *slog.Logger
	// OnPublic, if set, hears which public addresses the host serves
	// (docs/NETWORK.md, "Public addresses"): serving true when the driver
	// starts forwarding an address to a local instance, false when it
	// stops, so that whatever routes public addresses to hosts (the
	// fabric of gpucloud up) can follow. It is called with the driver's
	// lock held, and must not call the driver.
	OnPublic func(addr netip.Addr, serving bool)
	// SteerReceive spreads what both ends of each instance's veth receive
	// over every CPU the agent may use (receive packet steering). Off by
	// default: on this project's 2-vCPU VM it cost a single stream 10–20%
	// of its throughput, each steered packet an inter-processor interrupt
	// (docs/BENCHMARKS.md, "Receive steering, measured again"); it may pay
	// where interrupts between CPUs are cheap and one CPU is the limit.
	SteerReceive bool
}

func validCloud(s string) bool {
	if s == "" || len(s) > MaxCloudLen {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// CloudID derives a cloud's short identity from its CA certificate's
// SHA-256 fingerprint (hex, with or without colons): its first 6 hex
// digits.
func CloudID(fingerprint string) (string, error) {
	h := strings.ToLower(strings.NewReplacer(":", "", "sha256/", "", "sha256:", "").Replace(fingerprint))
	if len(h) < MaxCloudLen {
		return "", fmt.Errorf("fingerprint %q: too short for a cloud identity", fingerprint)
	}
	if _, err := hex.DecodeString(h[:MaxCloudLen]); err != nil {
		return "", fmt.Errorf("fingerprint %q: want hex digits", fingerprint)
	}
	return h[:MaxCloudLen], nil
}

// vtepMAC is the MAC of a host's VXLAN devices: locally administered,
// 0a:00 then the host's underlay address.
func vtepMAC(a netip.Addr) net.HardwareAddr {
	b := a.As4()
	return net.HardwareAddr{0x0a, 0x00, b[0], b[1], b[2], b[3]}
}
