//go:build !linux

package fabric

import (
	"context"
	"errors"
	"net/netip"
)

// Fabric is a fabric New built; there is none but on Linux.
type Fabric struct{}

// New fails: a fabric needs Linux's network namespaces.
func New(ctx context.Context, cfg Config) (*Fabric, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return nil, errors.New("fabric: needs Linux")
}

// Hosts returns the fabric's hosts.
func (f *Fabric) Hosts() []Host { return nil }

// Gateway is the fabric's address in the agent's namespace.
func (f *Fabric) Gateway() netip.Addr { return netip.Addr{} }

// Prefix is the fabric's prefix.
func (f *Fabric) Prefix() netip.Prefix { return netip.Prefix{} }

// MTU is the MTU of the fabric's links.
func (f *Fabric) MTU() int { return 0 }

// Cloud is the fabric's identity.
func (f *Fabric) Cloud() string { return "" }

// Route fails.
func (f *Fabric) Route(dst netip.Prefix, i int) error { return errors.New("fabric: needs Linux") }

// Unroute fails.
func (f *Fabric) Unroute(dst netip.Prefix) error { return errors.New("fabric: needs Linux") }

// Close does nothing.
func (f *Fabric) Close(ctx context.Context) error { return nil }
