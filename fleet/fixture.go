package fleet

import (
	"fmt"
	"sync"

	"github.com/gpucloud/gpucloud/catalog"
)

// Fixtures for tests in this and other packages, in the spirit of Nomad's
// mock.Node: each returns a complete, valid host that tests then adjust.
// They panic on unknown models, because a fixture with a typo is a bug in
// the test, not a condition to handle.

// Mock host sizes: every host gets MockCPUPerGPU milli-cores and
// MockMemoryPerGPU MiB of RAM per GPU (CPU-only hosts count as one GPU), so
// that the built-in offerings fit with room to spare.
const (
	MockCPUPerGPU    int64 = 32000
	MockMemoryPerGPU int64 = 256 * catalog.GiB
	MockZone               = "zone-a"
	MockRack               = "rack-1"
	MockDriver             = "550.54"
)

var mockCatalog = sync.OnceValue(catalog.Default)

// MockHost returns a schedulable host with gpus PCIe-only GPUs (no NVLink
// islands) of model (a canonical name or alias; "" with gpus == 0 for a
// CPU-only host). It is in zone MockZone and rack MockRack, has the label
// driver=MockDriver, and GPU UUIDs "GPU-<id>-<i>".
func MockHost(id, model string, gpus int) *Host {
	h := &Host{
		ID:     id,
		Zone:   MockZone,
		Rack:   MockRack,
		Labels: map[string]string{"driver": MockDriver},
		State:  Schedulable,
	}
	n := int64(max(gpus, 1))
	h.CPUMilli, h.MemoryMiB = n*MockCPUPerGPU, n*MockMemoryPerGPU
	if gpus == 0 {
		return h
	}
	m, err := mockCatalog().Model(model)
	if err != nil {
		panic("fleet.MockHost: " + err.Error())
	}
	for i := 0; i < gpus; i++ {
		h.GPUs = append(h.GPUs, GPU{
			Index: i, UUID: fmt.Sprintf("GPU-%s-%d", id, i),
			Model: m.Name, MemoryMiB: m.MemoryMiB, Island: -1,
		})
	}
	return h
}

// MockNVLinkHost is MockHost with NVLink islands of the given sizes: GPUs
// are numbered in island order, so MockNVLinkHost("h", "H100", 4, 4) has
// GPUs 0-3 in island 0 and GPUs 4-7 in island 1.
func MockNVLinkHost(id, model string, islands ...int) *Host {
	total := 0
	for _, n := range islands {
		total += n
	}
	h := MockHost(id, model, total)
	i := 0
	for isl, n := range islands {
		for j := 0; j < n; j++ {
			h.GPUs[i].Island = isl
			i++
		}
	}
	return h
}

// MockCPUHost returns a schedulable host without GPUs.
func MockCPUHost(id string) *Host { return MockHost(id, "", 0) }

// MockFleet returns a fleet of the hosts, checked against the built-in
// catalog. It panics if a host is invalid.
func MockFleet(hosts ...*Host) *Fleet {
	f := New()
	for _, h := range hosts {
		if err := f.AddHost(h, mockCatalog()); err != nil {
			panic("fleet.MockFleet: " + err.Error())
		}
	}
	return f
}

// MockAMDHost is an AMD host of gpus GPUs of model (MI300X, MI325X) on
// one Infinity Fabric (xGMI) island, every GPU in the operator's mode:
// compute partition, memory partition ("" for the default) and VFs.
func MockAMDHost(id, model string, gpus int, partition, memoryPartition string, vfs int) *Host {
	h := MockHost(id, model, gpus)
	for i := range h.GPUs {
		g := &h.GPUs[i]
		g.Island = 0
		g.Partition, g.MemoryPartition, g.VFs = partition, memoryPartition, vfs
	}
	return h
}
