//go:build cgo

package nvml

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/catalog"
)

// Open loads the NVIDIA driver's libnvidia-ml.so.1, initializes NVML and
// returns a Driver on it that matches GPUs against the built-in catalog,
// counting XID errors from then on (WatchXIDs; a host whose GPUs report no
// XID events counts none). Close shuts NVML down again. On a machine without the NVIDIA driver it
// fails with an error wrapping gpu.ErrUnavailable.
func Open() (*Driver, error) { return OpenCatalog(catalog.Default()) }

// OpenCatalog is Open with the catalog the agent loaded.
func OpenCatalog(cat *catalog.Catalog) (*Driver, error) {
	lib := nvml.New()
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, fmt.Errorf("open NVML: libnvidia-ml.so.1 not found; is the NVIDIA driver installed? (%w)", gpu.ErrUnavailable)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("open NVML: the NVIDIA kernel driver is not loaded (%w)", gpu.ErrUnavailable)
	default:
		return nil, nvmlError("initialize NVML", ret)
	}
	d := New(lib, cat)
	d.owned = true
	// Without XID events the driver works as before, with no XID counts.
	_ = d.WatchXIDs()
	return d, nil
}
