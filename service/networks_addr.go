package service

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/gpucloud/gpucloud/cloud"
)

// The address arithmetic of networks and subnets: IPv4 only, as a uint32.

// The prefix lengths a network or subnet may have.
const (
	MinNetworkBits = 16
	MaxNetworkBits = 28
)

// SubnetReserved is how many addresses of every subnet no instance gets,
// as on AWS: the subnet's base address, the gateway (+1), the DNS
// resolver (+2), one kept for the future (+3), and the broadcast address
// (the last).
const SubnetReserved = 5

// firstUsable is the offset of a subnet's first address an instance may
// get: the three after the base address are the gateway's, the
// resolver's and the future's.
const firstUsable = 4

func ip4(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func addr4(n uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], n)
	return netip.AddrFrom4(b)
}

// blockSize is the number of addresses of p.
func blockSize(p netip.Prefix) uint32 { return uint32(1) << (32 - p.Bits()) }

// ParseNetworkCIDR parses the CIDR of a network or subnet given in field:
// an IPv4 block from /16 to /28 in canonical form (no host bits set).
func ParseNetworkCIDR(field, s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, Field(field, "is required: an IPv4 block from /%d to /%d, such as 10.0.0.0/16", MinNetworkBits, MaxNetworkBits)
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, Field(field, "%s is not an IPv4 CIDR block such as 10.0.0.0/16", Quote(s))
	}
	if p.Bits() < MinNetworkBits || p.Bits() > MaxNetworkBits {
		return netip.Prefix{}, Field(field, "%s is a /%d block; networks and subnets are /%d to /%d", Quote(s), p.Bits(), MinNetworkBits, MaxNetworkBits)
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, Field(field, "%s has host bits set; the block is %s", Quote(s), m)
	}
	return p, nil
}

// parseRuleCIDR parses a rule's peer CIDR in field: any IPv4 block, in
// canonical form ("0.0.0.0/0" for everyone).
func parseRuleCIDR(field, s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, Field(field, "%s is not an IPv4 CIDR block such as 10.0.0.0/16 or 0.0.0.0/0", Quote(s))
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, Field(field, "%s has host bits set; the block is %s", Quote(s), m)
	}
	return p, nil
}

// mustPrefix parses a CIDR the store holds, which the service checked
// when it wrote it.
func mustPrefix(kind, id, s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, &cloud.Error{Code: cloud.Internal, Message: fmt.Sprintf("%s %s has CIDR %q, which is not IPv4", kind, id, s)}
	}
	return p, nil
}

// SubnetCapacity is how many instances a subnet can hold at once.
func SubnetCapacity(p netip.Prefix) int { return int(blockSize(p)) - SubnetReserved }

// A subnet's cursor (cloud.Subnet.Cursor) is where its address allocation
// stands: the offset in the subnet of the next address to try. Until the
// allocation first wraps around the end of the subnet, the addresses from
// the cursor on were never given, and the next one is taken without
// reading the held ones; once it has wrapped, the cursor is the subnet's
// size plus that offset, and each allocation reads the held addresses
// (ListSubnetAddresses) and takes the first free one from the offset on,
// going round, so that a freed address is given again only after the
// rest of the subnet.

// cursorNeedsHeld reports whether the next allocation in p from cursor
// must know the held addresses.
func cursorNeedsHeld(p netip.Prefix, cursor uint32) bool {
	size := blockSize(p)
	return cursor >= size || max(cursor, firstUsable) > size-2
}

// nextAddress chooses the next address of subnet p from cursor on,
// skipping the reserved ones and those held (read when cursorNeedsHeld
// says so; it may be nil otherwise), and answers it with the new cursor;
// false when every usable address is held.
func nextAddress(p netip.Prefix, cursor uint32, held map[netip.Addr]bool) (netip.Addr, uint32, bool) {
	size := blockSize(p)
	base := ip4(p.Addr())
	last := size - 2
	if !cursorNeedsHeld(p, cursor) {
		off := max(cursor, firstUsable)
		return addr4(base + off), off + 1, true
	}
	off := cursor % size
	for range last - firstUsable + 1 {
		if off < firstUsable || off > last {
			off = firstUsable
		}
		if a := addr4(base + off); !held[a] {
			return a, size + off + 1, true
		}
		off++
	}
	return netip.Addr{}, cursor, false
}
