package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/fleet"
)

// Device nodes of a simulated host.
//
// A container runtime gives a workload exactly the device nodes of its GPUs
// (/dev/nvidiaN), the control nodes a CUDA program opens and, for a MIG
// slice, the slice's nvidia-caps nodes, behind a device cgroup that denies
// every other device. So that those rules are really exercised on a
// simulated host, MakeDeviceNodes creates the nodes the NVIDIA driver would,
// with the driver's numbers where they are fixed (character major 195:
// nvidiaN is minor N, nvidiactl minor 255) and majors no driver of this
// host registered for the others. Nothing backs them: opening one that the
// device cgroup allows fails with ENXIO, one that it denies with EPERM.
//
// The layout under dir is the driver's under /dev, plus the driver's table
// of MIG capability minors (/proc/driver/nvidia-caps/mig-minors on a real
// host) as dir/MIGMinorsFile.
const (
	// NVIDIAMajor is the character major of the GPUs and of nvidiactl.
	NVIDIAMajor = 195
	// ControlMinor is the minor of nvidiactl.
	ControlMinor = 255
	// MIGMinorsFile is the name, under the device directory, of the MIG
	// capability minors table.
	MIGMinorsFile = "mig-minors"
	// maxGI and maxCI bound the GPU and compute instance IDs the driver's
	// table lists per GPU: GIs 0-14, CIs 0-7.
	maxGI = 15
	maxCI = 8
)

// Device nodes of a simulated host's RDMA adapters (Spec.HCAs), under
// dir/infiniband as the kernel makes them under /dev/infiniband:
// uverbs<i> for adapter i with the verbs driver's fixed numbers, and
// rdma_cm, the connection manager, which every adapter shares. The kernel
// makes rdma_cm a misc device (major 10) with a minor it picks when the
// module loads; the fake one has minor 255, MISC_DYNAMIC_MINOR, the value
// a driver passes to ask for a dynamic minor and which the kernel
// therefore never gives a device: opening it reaches no driver. A host
// whose kernel runs ib_uverbs with a real adapter answers the uverbs
// numbers, so a simulated host there gives its workloads the real one.
const (
	// UverbsMajor is the verbs nodes' character major; uverbs<i> is minor
	// UverbsMinorBase+i.
	UverbsMajor     = 231
	UverbsMinorBase = 192
	// RDMACMMajor and RDMACMMinor are the fake rdma_cm node's numbers.
	RDMACMMajor = 10
	RDMACMMinor = 255
	// hcaDevDir is the workloads' path of the adapters' nodes.
	hcaDevDir = "/dev/infiniband"
)

// hcas is what Inventory reports of the adapters: their names, link
// layers and interfaces, and their nodes as a workload sees them
// (/dev/infiniband/uverbs<i> and the shared /dev/infiniband/rdma_cm).
func (h *Host) hcas() []fleet.HCA {
	if len(h.spec.HCAs) == 0 {
		return nil
	}
	out := make([]fleet.HCA, len(h.spec.HCAs))
	for i, a := range h.spec.HCAs {
		out[i] = fleet.HCA{Name: a.Name, LinkLayer: a.LinkLayer, NetDev: a.NetDev,
			Devices: []string{hcaDevDir + "/uverbs" + strconv.Itoa(i), hcaDevDir + "/rdma_cm"}}
	}
	return out
}

// makeHCANodes makes the adapters' nodes under dir/infiniband.
func (h *Host) makeHCANodes(dir string) error {
	if len(h.spec.HCAs) == 0 {
		return nil
	}
	ib := filepath.Join(dir, "infiniband")
	if err := os.MkdirAll(ib, 0o755); err != nil {
		return err
	}
	for i := range h.spec.HCAs {
		if err := mknod(filepath.Join(ib, "uverbs"+strconv.Itoa(i)), UverbsMajor, uint32(UverbsMinorBase+i)); err != nil {
			return err
		}
	}
	return mknod(filepath.Join(ib, "rdma_cm"), RDMACMMajor, RDMACMMinor)
}

// MIGCapMinor is the minor of a MIG capability node in the NVIDIA driver's
// numbering: 1 and 2 are "config" and "monitor", then each GPU has a block
// of 15 GPU instances, each its own access minor followed by those of its 8
// compute instances. ci < 0 asks for the GPU instance's node.
func MIGCapMinor(gpuIndex, gi, ci int) int {
	m := 3 + gpuIndex*maxGI*(1+maxCI) + gi*(1+maxCI)
	if ci >= 0 {
		m += 1 + ci
	}
	return m
}

// MIGMinorsTable is the text of the driver's mig-minors table for n GPUs.
func MIGMinorsTable(n int) string {
	var b strings.Builder
	b.WriteString("config 1\nmonitor 2\n")
	for g := range n {
		for gi := range maxGI {
			fmt.Fprintf(&b, "gpu%d/gi%d/access %d\n", g, gi, MIGCapMinor(g, gi, -1))
			for ci := range maxCI {
				fmt.Fprintf(&b, "gpu%d/gi%d/ci%d/access %d\n", g, gi, ci, MIGCapMinor(g, gi, ci))
			}
		}
	}
	return b.String()
}

// MIGIDs returns the GPU instance and compute instance IDs of the MIG
// instance at a start slot of a GPU, as nvidia-smi shows them: a simulated
// GPU numbers its instances by start slot (GI = start + 1) with one compute
// instance (CI 0) each. Errors: gpu.ErrNotFound for an unknown GPU or no
// instance at that slot.
func (h *Host) MIGIDs(ctx context.Context, index, start int) (gi, ci int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	g, err := h.gpuLocked(index)
	if err != nil {
		return 0, 0, err
	}
	for _, in := range g.instances {
		if in.Start == start {
			return start + 1, 0, nil
		}
	}
	return 0, 0, fmt.Errorf("sim host %s gpu %d: no MIG instance starts at slot %d: %w", h.spec.ID, index, start, gpu.ErrNotFound)
}

// MakeDeviceNodes creates the host's fake NVIDIA device nodes under dir
// (an AMD host's are kfd and dri/renderD<N>: see amd.go)
// (made 0755 if missing): nvidia0..N-1 and nvidiactl (major 195),
// nvidia-uvm and nvidia-uvm-tools, and, on a model with MIG, the
// nvidia-caps nodes of every GPU and compute instance ID with the
// mig-minors table; and its RDMA adapters' nodes, infiniband/uverbs<i>
// and infiniband/rdma_cm (see UverbsMajor). It is idempotent: nodes already there with the right
// numbers are kept, others are replaced. It needs CAP_MKNOD (root).
func (h *Host) MakeDeviceNodes(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := h.makeHCANodes(dir); err != nil {
		return fmt.Errorf("sim host %s: RDMA device nodes: %w", h.spec.ID, err)
	}
	uvm, caps, err := freeMajors()
	if err != nil {
		return fmt.Errorf("sim host %s: device nodes: %w", h.spec.ID, err)
	}
	// Majors chosen by an earlier run are kept, so that running
	// containers' rules stay true.
	if m, _, ok := nodeNumbers(filepath.Join(dir, "nvidia-uvm")); ok {
		uvm = m
	}
	if m, _, ok := nodeNumbers(filepath.Join(dir, "nvidia-caps", "nvidia-cap1")); ok {
		caps = m
	}
	if h.amd() {
		return h.makeAMDNodes(dir, uvm)
	}
	n := len(h.gpus)
	for i := range n {
		if err := mknod(filepath.Join(dir, "nvidia"+strconv.Itoa(i)), NVIDIAMajor, uint32(i)); err != nil {
			return err
		}
	}
	if n == 0 {
		return nil
	}
	for _, nd := range []struct {
		name         string
		major, minor uint32
	}{{"nvidiactl", NVIDIAMajor, ControlMinor}, {"nvidia-uvm", uvm, 0}, {"nvidia-uvm-tools", uvm, 1}} {
		if err := mknod(filepath.Join(dir, nd.name), nd.major, nd.minor); err != nil {
			return err
		}
	}
	if !h.model.SupportsMIG() {
		return nil
	}
	cdir := filepath.Join(dir, "nvidia-caps")
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		return err
	}
	last := MIGCapMinor(n-1, maxGI-1, maxCI-1)
	for m := 1; m <= last; m++ {
		if err := mknod(filepath.Join(cdir, "nvidia-cap"+strconv.Itoa(m)), caps, uint32(m)); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, MIGMinorsFile), []byte(MIGMinorsTable(n)), 0o644)
}

// freeMajors picks two character majors no driver registered
// (/proc/devices), from the top of the dynamic range down, for the fake
// nvidia-uvm and nvidia-caps nodes.
func freeMajors() (uint32, uint32, error) {
	b, err := os.ReadFile("/proc/devices")
	if err != nil {
		return 0, 0, err
	}
	used := map[int]bool{}
	inChar := false
	for _, line := range strings.Split(string(b), "\n") {
		switch strings.TrimSpace(line) {
		case "Character devices:":
			inChar = true
			continue
		case "Block devices:":
			inChar = false
			continue
		}
		if f := strings.Fields(line); inChar && len(f) == 2 {
			if m, err := strconv.Atoi(f[0]); err == nil {
				used[m] = true
			}
		}
	}
	var free []uint32
	for m := 511; m >= 384 && len(free) < 2; m-- {
		if !used[m] {
			free = append(free, uint32(m))
		}
	}
	if len(free) < 2 {
		return 0, 0, fmt.Errorf("no free character major in 384-511")
	}
	return free[0], free[1], nil
}
