//go:build cgo

package nvml

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/catalog"
)

// nvidiaVendorID is the PCI vendor id in the low 16 bits of
// nvml.PciInfo.PciDeviceId; the device id is in the high 16 bits.
const nvidiaVendorID = 0x10DE

// Driver implements gpu.Driver on an NVML library. It is safe for concurrent
// use: NVML itself is thread-safe, and the calls that change MIG state are
// serialized so that looking for an existing instance and creating one are
// not interleaved with another change.
type Driver struct {
	// HostID, when set, is reported as the inventory's host ID, and Devices
	// rejects placements made for another host. NVML does not know the
	// host's name in the fleet, so the agent sets it.
	HostID string

	lib nvml.Interface
	cat *catalog.Catalog
	// owned is set when Open initialized lib, so that Close shuts it down;
	// a caller of New keeps the library's lifetime to itself.
	owned bool
	mu    sync.Mutex
	// xid counts XID events once WatchXIDs started it (xid.go); xmu
	// guards the pointer.
	xmu sync.Mutex
	xid *xidWatch
}

var _ gpu.Driver = (*Driver)(nil)

// New returns a Driver on lib, which the caller has initialized (Init) and
// shuts down; cat is the catalog that models and MIG profiles are matched
// against (nil means catalog.Default()). Tests pass fakes of nvml.Interface.
func New(lib nvml.Interface, cat *catalog.Catalog) *Driver {
	if cat == nil {
		cat = catalog.Default()
	}
	return &Driver{lib: lib, cat: cat}
}

// Close stops counting XID errors (WatchXIDs) and shuts NVML down when
// Open started it; for a Driver from New it only stops the counting.
func (d *Driver) Close() error {
	d.stopXIDs()
	if !d.owned {
		return nil
	}
	d.owned = false
	if ret := d.lib.Shutdown(); ret != nvml.SUCCESS {
		return nvmlError("shut down NVML", ret)
	}
	return nil
}

// nvmlError wraps a failed NVML call. The agent decides on gpu's typed
// errors, so the codes that mean one of them are mapped onto it; the Return
// stays in the chain too, for logs and for errors.Is against nvml codes.
func nvmlError(op string, ret nvml.Return) error {
	var kind error
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		kind = gpu.ErrNotSupported
	case nvml.ERROR_NOT_FOUND:
		kind = gpu.ErrNotFound
	case nvml.ERROR_IN_USE, nvml.ERROR_INSUFFICIENT_RESOURCES, nvml.ERROR_RESET_REQUIRED:
		kind = gpu.ErrBusy
	case nvml.ERROR_INVALID_ARGUMENT:
		kind = gpu.ErrInvalid
	case nvml.ERROR_UNINITIALIZED, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_LIBRARY_NOT_FOUND,
		nvml.ERROR_GPU_IS_LOST, nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		kind = gpu.ErrUnavailable
	}
	if kind == nil {
		return fmt.Errorf("%s: %w", op, ret)
	}
	return fmt.Errorf("%s: %w (%w)", op, ret, kind)
}

// noAnswer reports whether ret means that NVML has nothing to say, because
// the GPU or the driver lacks the feature: an answer, not a failure.
func noAnswer(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

// device returns the handle of GPU i; an index the host does not have is
// ErrNotFound.
func (d *Driver) device(i int) (nvml.Device, error) {
	n, ret := d.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("count GPUs", ret)
	}
	if i < 0 || i >= n {
		return nil, fmt.Errorf("gpu %d: the host has %d GPUs: %w", i, n, gpu.ErrNotFound)
	}
	dev, ret := d.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, nvmlError(fmt.Sprintf("gpu %d: get handle", i), ret)
	}
	return dev, nil
}

// identity is what NVML says a GPU is, matched against the catalog.
type identity struct {
	// model is the catalog model; nil when neither the PCI device id nor
	// the name matches one.
	model *catalog.Model
	// name is NVML's product name, "NVIDIA H100 80GB HBM3".
	name string
	// pciID is the PCI device id (0x2330); 0 when NVML does not say.
	pciID uint16
	// pci is the GPU's PCI info, for NVLink peer matching.
	pci nvml.PciInfo
}

// modelName is the fleet's name for the GPU: the canonical catalog name, or
// NVML's name when the catalog does not know the GPU.
func (id identity) modelName() string {
	if id.model != nil {
		return id.model.Name
	}
	return id.name
}

// unknownNote explains an unmatched GPU to the operator.
func (id identity) unknownNote() string {
	return fmt.Sprintf("unknown GPU model: neither PCI device id %#04x nor name %q is in the catalog", id.pciID, id.name)
}

// identify reads a GPU's PCI info and name and matches them to the catalog.
// Only when NVML can say neither is it an error.
func (d *Driver) identify(i int, dev nvml.Device) (identity, error) {
	var id identity
	pci, ret := dev.GetPciInfo()
	switch {
	case ret == nvml.SUCCESS:
		id.pci = pci
		if pci.PciDeviceId&0xFFFF == nvidiaVendorID {
			id.pciID = uint16(pci.PciDeviceId >> 16)
		}
	case !noAnswer(ret):
		return id, nvmlError(fmt.Sprintf("gpu %d: read PCI info", i), ret)
	}
	name, ret := dev.GetName()
	switch {
	case ret == nvml.SUCCESS:
		id.name = name
	case !noAnswer(ret):
		return id, nvmlError(fmt.Sprintf("gpu %d: read name", i), ret)
	}
	if id.pciID == 0 && id.name == "" {
		return id, fmt.Errorf("gpu %d: NVML reports neither a PCI device id nor a name: %w", i, gpu.ErrNotSupported)
	}
	id.model = matchModel(d.cat, id.pciID, id.name)
	return id, nil
}

// modelOf identifies GPU i for the MIG calls, which need its catalog model.
func (d *Driver) modelOf(i int, dev nvml.Device) (*catalog.Model, error) {
	id, err := d.identify(i, dev)
	if err != nil {
		return nil, err
	}
	if id.model == nil {
		return nil, fmt.Errorf("gpu %d: %s: %w", i, id.unknownNote(), gpu.ErrNotSupported)
	}
	return id.model, nil
}

// matchModel finds the catalog model of a GPU: by PCI device id first, since
// NVIDIA assigns one per product, then by name, for GPUs the catalog has no
// id for. It returns nil when neither matches.
func matchModel(cat *catalog.Catalog, pciID uint16, name string) *catalog.Model {
	models := cat.Models()
	if pciID != 0 {
		for _, m := range models {
			if m.PCIDeviceID == pciID {
				return m
			}
		}
	}
	if name == "" {
		return nil
	}
	// NVML's names are the marketing names, "NVIDIA A100-SXM4-80GB" or
	// "Tesla T4"; without the brand many are catalog names or aliases.
	bare := strings.TrimSpace(name)
	for _, brand := range []string{"NVIDIA ", "Tesla ", "Quadro "} {
		bare = strings.TrimPrefix(bare, brand)
	}
	for _, try := range []string{bare, strings.ReplaceAll(bare, " ", "-")} {
		if m, err := cat.Model(try); err == nil {
			return m
		}
	}
	return matchByTokens(models, bare)
}

// nameShape is a GPU name cut into what tells models apart: the words, the
// memory size ("80GB") and the form factor. SXM parts do not always say so
// (NVML calls the H100 SXM "H100 80GB HBM3"), so SXM is "neither PCIe nor
// NVL", and the words "SXM…", "HBM…" and "GENERATION" are noise.
type nameShape struct {
	words     []string
	memory    string
	pcie, nvl bool
}

func shapeOf(name string) nameShape {
	var s nameShape
	fields := strings.FieldsFunc(strings.ToUpper(name), func(r rune) bool {
		return r == ' ' || r == '-' || r == '_'
	})
	for _, f := range fields {
		switch {
		case f == "PCIE":
			s.pcie = true
		case f == "NVL":
			s.nvl = true
		case strings.HasPrefix(f, "SXM"), strings.HasPrefix(f, "HBM"), f == "GENERATION":
		case strings.HasSuffix(f, "GB") && len(f) > 2 && strings.Trim(f[:len(f)-2], "0123456789") == "":
			s.memory = f
		default:
			s.words = append(s.words, f)
		}
	}
	return s
}

// matchByTokens matches NVML spellings such as "H100 80GB HBM3" or
// "A100 80GB PCIe" to canonical names such as "H100-80GB-SXM": every word of
// the model's name must be in the GPU's name, the form factors must agree,
// and so must the memory sizes when both give one. Only a single match
// counts; an ambiguous name stays unknown rather than guessed.
func matchByTokens(models []*catalog.Model, name string) *catalog.Model {
	gpuShape := shapeOf(name)
	if len(gpuShape.words) == 0 {
		return nil
	}
	var found *catalog.Model
	for _, m := range models {
		ms := shapeOf(m.Name)
		if len(ms.words) == 0 || ms.pcie != gpuShape.pcie || ms.nvl != gpuShape.nvl {
			continue
		}
		if ms.memory != "" && gpuShape.memory != "" && ms.memory != gpuShape.memory {
			continue
		}
		if !containsAll(gpuShape.words, ms.words) {
			continue
		}
		if found != nil {
			return nil
		}
		found = m
	}
	return found
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		ok := false
		for _, h := range have {
			if h == w {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// migEnabled reads a GPU's current MIG mode; a GPU without MIG answers
// ERROR_NOT_SUPPORTED, which is "off".
func migEnabled(i int, dev nvml.Device) (bool, error) {
	current, _, ret := dev.GetMigMode()
	switch {
	case ret == nvml.SUCCESS:
		return current == nvml.DEVICE_MIG_ENABLE, nil
	case noAnswer(ret):
		return false, nil
	}
	return false, nvmlError(fmt.Sprintf("gpu %d: read MIG mode", i), ret)
}

// ctxErr returns ctx's error, so that a call whose context is done stops
// before it changes anything.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("nvml: %w", err)
	}
	return nil
}
