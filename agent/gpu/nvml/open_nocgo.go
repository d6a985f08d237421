//go:build !cgo

package nvml

import (
	"context"
	"fmt"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// errNoCgo is every answer of a build without cgo: go-nvml, and so this
// driver, needs cgo.
var errNoCgo = fmt.Errorf("NVML driver requires cgo: %w", gpu.ErrNotSupported)

// Driver stands in for the NVML driver in builds without cgo, so that code
// that opens it compiles everywhere; Open never returns one.
type Driver struct {
	// HostID is here so that code setting it compiles without cgo.
	HostID string
}

var _ gpu.Driver = (*Driver)(nil)

// Open fails: the NVML driver requires cgo.
func Open() (*Driver, error) { return nil, errNoCgo }

// OpenCatalog fails: the NVML driver requires cgo.
func OpenCatalog(*catalog.Catalog) (*Driver, error) { return nil, errNoCgo }

// WatchXIDs fails: the NVML driver requires cgo.
func (d *Driver) WatchXIDs() error { return errNoCgo }

// Close does nothing.
func (d *Driver) Close() error { return nil }

func (d *Driver) Inventory(context.Context) (*agentapi.Inventory, error) { return nil, errNoCgo }

func (d *Driver) SetMIGMode(context.Context, int, bool) error { return errNoCgo }

func (d *Driver) CreateMIG(context.Context, int, int, int) (gpu.MIGInstance, error) {
	return gpu.MIGInstance{}, errNoCgo
}

func (d *Driver) DestroyMIG(context.Context, int, int) error { return errNoCgo }

// MIGIDs fails: the NVML driver requires cgo.
func (d *Driver) MIGIDs(context.Context, int, int) (int, int, error) { return 0, 0, errNoCgo }

func (d *Driver) Devices(context.Context, *fleet.Placement) ([]string, error) { return nil, errNoCgo }

func (d *Driver) Utilization(context.Context, []string) (float64, error) { return 0, errNoCgo }

func (d *Driver) Telemetry(context.Context) ([]gpu.Telemetry, error) { return nil, errNoCgo }
