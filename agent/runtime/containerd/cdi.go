package containerd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// GPUs as CDI devices. The NVIDIA Container Toolkit (nvidia-ctk cdi
// generate) writes a specification of kind nvidia.com/gpu whose devices
// are named, by its default strategy, by index: "<index>" for a GPU and
// "<gpu index>:<MIG device index>" for a MIG device, the MIG device's
// index being NVML's under its parent (not its GPU instance ID). Each
// device brings its nodes (a MIG device: its parent's /dev/nvidiaN and
// its GPU and compute instances' nvidia-caps access nodes); the
// specification's common edits bring the driver's libraries and hooks.

// CDIKind is the kind of the NVIDIA Container Toolkit's GPU devices.
const CDIKind = "nvidia.com/gpu"

// AMDCDIKind is the kind of AMD's container toolkit's GPU devices
// (amd-ctk cdi generate): "amd.com/gpu=<index>", one per GPU the host
// shows, a compute partition's logical GPUs each their own. We take its
// index to be the render node's position (renderD128 is 0), the order in
// which the host lists its GPUs and their partitions.
const AMDCDIKind = "amd.com/gpu"

// amdCDINames names an AMD workload's devices by their render nodes.
func amdCDINames(s runtime.Spec) []string {
	minors := slices.Clone(s.RenderMinors)
	slices.Sort(minors)
	var out []string
	for _, m := range slices.Compact(minors) {
		out = append(out, AMDCDIKind+"="+strconv.Itoa(m-128))
	}
	return out
}

// ErrCDIDevice means a GPU of the workload has no device in the CDI
// specifications: they are missing or out of date (a MIG layout changed
// since nvidia-ctk cdi generate ran).
var ErrCDIDevice = errors.New("no such CDI device")

// cdiRegistry reads the CDI specifications from their directories.
type cdiRegistry struct {
	cache *cdi.Cache
	dirs  []string
}

func newCDIRegistry(dirs []string) (*cdiRegistry, error) {
	if len(dirs) == 0 {
		dirs = cdi.DefaultSpecDirs
	}
	// Refreshed before each use rather than watched: a start reads the
	// directories as they are then.
	c, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("containerd runtime: CDI: %w", err)
	}
	return &cdiRegistry{cache: c, dirs: slices.Clone(dirs)}, nil
}

// refresh rereads the specifications. A broken one is logged by the
// caller, not fatal: the devices of the others still resolve, and a
// device that does not is an error of its own.
func (c *cdiRegistry) refresh() error { return c.cache.Refresh() }

// regenerate is the hint every missing device comes with.
func (c *cdiRegistry) regenerate() string {
	return fmt.Sprintf("the CDI specifications in %s lack it: generate them with nvidia-ctk cdi generate --output=%s/nvidia.yaml, after every MIG change",
		strings.Join(c.dirs, ", "), c.dirs[0])
}

// names returns the CDI names of a spec's GPUs: nvidia.com/gpu=<index> for
// each whole or shared GPU (GPUIndexes that are no MIG slice's parent),
// nvidia.com/gpu=<gpu>:<MIG device index> for each MIG slice. A MIG
// slice's device is the one of its parent whose nodes include the slice's
// compute instance access node (its minor from the driver's mig-minors
// table), since the spec names a slice by GPU and compute instance IDs
// and the toolkit by MIG device index.
func (c *cdiRegistry) names(s runtime.Spec, migMinors string) ([]string, error) {
	if len(s.RenderMinors) > 0 {
		return amdCDINames(s), nil
	}
	parents := map[int]bool{}
	for _, m := range s.MIG {
		parents[m.GPU] = true
	}
	gpus := slices.Clone(s.GPUIndexes)
	slices.Sort(gpus)
	var out []string
	for _, g := range slices.Compact(gpus) {
		if !parents[g] {
			out = append(out, CDIKind+"="+strconv.Itoa(g))
		}
	}
	if len(s.MIG) == 0 {
		return out, nil
	}
	minors, err := readMIGMinors(migMinors)
	if err != nil {
		return nil, err
	}
	for _, m := range s.MIG {
		key := fmt.Sprintf("gpu%d/gi%d/ci%d/access", m.GPU, m.GI, m.CI)
		minor, ok := minors[key]
		if !ok {
			return nil, fmt.Errorf("MIG device %+v: %s has no %s", m, migMinors, key)
		}
		node := "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(minor)
		name, err := c.migDevice(m.GPU, node)
		if err != nil {
			return nil, fmt.Errorf("MIG slice GI %d CI %d of GPU %d: %w", m.GI, m.CI, m.GPU, err)
		}
		out = append(out, name)
	}
	return out, nil
}

// migDevice finds the MIG device "<gpu>:<n>" whose nodes include node.
func (c *cdiRegistry) migDevice(gpu int, node string) (string, error) {
	prefix := CDIKind + "=" + strconv.Itoa(gpu) + ":"
	for _, name := range c.cache.ListDevices() {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		d := c.cache.GetDevice(name)
		if d == nil {
			continue
		}
		for _, n := range d.ContainerEdits.DeviceNodes {
			if n != nil && n.Path == node {
				return name, nil
			}
		}
	}
	return "", fmt.Errorf("%w: no %s<n> device has the node %s; %s", ErrCDIDevice, prefix, node, c.regenerate())
}

// withDevices injects the named devices into the OCI spec: their nodes
// (created in the container and allowed in its device cgroup, after the
// default spec's deny-all), mounts, hooks and environment.
func (c *cdiRegistry) withDevices(names []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, sp *oci.Spec) error {
		unresolved, err := c.cache.InjectDevices(sp, names...)
		if len(unresolved) > 0 {
			return fmt.Errorf("%w: %s; %s", ErrCDIDevice, strings.Join(unresolved, ", "), c.regenerate())
		}
		if err != nil {
			return fmt.Errorf("CDI devices %s: %w", strings.Join(names, ", "), err)
		}
		return nil
	}
}
