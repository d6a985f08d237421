package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// Driver carries the private networks of issue 19 on a host: it gives
// each instance a network namespace on its network (Setup, Teardown),
// keeps the host's forwarding entries and rules what the control plane's
// view says (Sync), and drops what is left of instances that are gone
// (Reconcile, Destroy). Overlay is the kernel's driver (VXLAN, routes,
// nftables); an OVN-backed one would implement the same interface
// (docs/NETWORK.md). Implementations are safe for concurrent use.
type Driver interface {
	// Setup makes the instance's network namespace, with one interface
	// on its network, and returns the namespace's path. An earlier
	// network of the same instance is torn down first.
	Setup(ctx context.Context, instanceID string, n *runtime.Network) (netnsPath string, err error)
	// Teardown removes the instance's namespace and what the host holds
	// for it; the network's own objects go with its last local instance.
	// It is idempotent.
	Teardown(ctx context.Context, instanceID string) error
	// Sync applies the control plane's view of the host's networks:
	// the other hosts' endpoints and the rules, without touching the
	// running instances' interfaces.
	Sync(ctx context.Context, networks []agentapi.HostNetwork) error
	// Reconcile tears down every instance not in keep and whatever the
	// driver made that belongs to no instance.
	Reconcile(ctx context.Context, keep []string) error
	// Destroy removes everything the driver made on the host, and
	// nothing else.
	Destroy(ctx context.Context) error
}

// Hook is the containerd runtime's network hook (containerd.NetworkHook)
// on a host with private networks: an instance whose Spec has a Network
// gets it from Driver, one without (made before networks existed) gets
// the host's per-tenant network, Legacy. Either may be nil: an instance
// that needs the missing one cannot start.
type Hook struct {
	Driver Driver
	Legacy *Network
}

// Setup implements containerd.NetworkHook.
func (h *Hook) Setup(ctx context.Context, instanceID, tenantID string, n *runtime.Network) (string, error) {
	if n == nil {
		if h.Legacy == nil {
			return "", fmt.Errorf("instance %s has no private network, and the host has no per-tenant network", instanceID)
		}
		return h.Legacy.Setup(ctx, instanceID, tenantID, nil)
	}
	if h.Driver == nil {
		return "", fmt.Errorf("instance %s is on network %s, and the host carries no private networks (no underlay address)", instanceID, n.ID)
	}
	return h.Driver.Setup(ctx, instanceID, n)
}

// Teardown implements containerd.NetworkHook: both networks forget the
// instance (each knows only its own).
func (h *Hook) Teardown(ctx context.Context, instanceID string) error {
	var errs []error
	if h.Driver != nil {
		errs = append(errs, h.Driver.Teardown(ctx, instanceID))
	}
	if h.Legacy != nil {
		errs = append(errs, h.Legacy.Teardown(ctx, instanceID))
	}
	return errors.Join(errs...)
}

// Reconcile implements containerd.NetworkReconciler.
func (h *Hook) Reconcile(ctx context.Context, running []string) error {
	var errs []error
	if h.Driver != nil {
		errs = append(errs, h.Driver.Reconcile(ctx, running))
	}
	if h.Legacy != nil {
		errs = append(errs, h.Legacy.Reconcile(ctx, running))
	}
	return errors.Join(errs...)
}

// SyncNetworks hands the control plane's view to the driver
// (containerd.NetworkSyncer).
func (h *Hook) SyncNetworks(ctx context.Context, view *agentapi.NetworkView) error {
	if h.Driver == nil || view == nil {
		return nil
	}
	return h.Driver.Sync(ctx, view.Networks)
}

// Address implements runtime.Addresser: the instance's address on
// whichever network it is.
func (h *Hook) Address(id string) (netip.Addr, bool) {
	if a, ok := h.Driver.(runtime.Addresser); ok {
		if addr, ok := a.Address(id); ok {
			return addr, true
		}
	}
	if h.Legacy != nil {
		if in, ok := h.Legacy.Instance(id); ok {
			return in.Addr, true
		}
	}
	return netip.Addr{}, false
}

// Destroy removes both networks from the host.
func (h *Hook) Destroy(ctx context.Context) error {
	var errs []error
	if h.Driver != nil {
		errs = append(errs, h.Driver.Destroy(ctx))
	}
	if h.Legacy != nil {
		errs = append(errs, h.Legacy.Destroy(ctx))
	}
	return errors.Join(errs...)
}
