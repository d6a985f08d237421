//go:build !linux

package network

import (
	"context"
	"errors"
	"net/netip"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// Overlay is the kernel overlay driver, which needs Linux.
type Overlay struct{}

var errNoOverlay = errors.New("overlay: private networks need Linux")

// NewOverlay fails: the overlay needs Linux.
func NewOverlay(ctx context.Context, cfg OverlayConfig) (*Overlay, error) { return nil, errNoOverlay }

func (o *Overlay) Setup(ctx context.Context, id string, n *runtime.Network) (string, error) {
	return "", errNoOverlay
}
func (o *Overlay) Teardown(ctx context.Context, id string) error               { return nil }
func (o *Overlay) Sync(ctx context.Context, nets []agentapi.HostNetwork) error { return errNoOverlay }
func (o *Overlay) Reconcile(ctx context.Context, keep []string) error          { return nil }
func (o *Overlay) Destroy(ctx context.Context) error                           { return nil }
func (o *Overlay) Address(id string) (netip.Addr, bool)                        { return netip.Addr{}, false }

// MTU is the instances' MTU: none without Linux.
func (o *Overlay) MTU() int { return 0 }

// Instances returns the instances the driver knows: none without Linux.
func (o *Overlay) Instances() []string { return nil }

// NetnsPath is the path of an instance's network namespace.
func (o *Overlay) NetnsPath(id string) string { return "" }
