// Package rdma finds a host's RDMA adapters (host channel adapters, HCAs:
// InfiniBand or RoCE) as the kernel shows them under /sys/class/infiniband,
// with the device nodes a workload needs to use them (/dev/infiniband),
// for the agent's inventory. It reads files only; it needs no library and
// no privilege.
package rdma

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/fleet"
)

// Link layers an adapter's ports report (ports/N/link_layer).
const (
	InfiniBand = "InfiniBand"
	// Ethernet is RDMA over Converged Ethernet (RoCE).
	Ethernet = "Ethernet"
)

// DevDir is where the device nodes are, as a workload sees them: Devices
// are always named under it, whatever the devRoot Discover looked in.
const DevDir = "/dev/infiniband"

// RDMACM is the name of the RDMA connection manager's node under DevDir,
// which every adapter shares.
const RDMACM = "rdma_cm"

// Skipped is an adapter Discover left out, and why.
type Skipped struct {
	Name, Reason string
}

// SkipError lists the adapters Discover skipped. It comes along with the
// adapters Discover could use, which the caller should keep.
type SkipError struct {
	Skipped []Skipped
}

func (e *SkipError) Error() string {
	parts := make([]string, len(e.Skipped))
	for i, s := range e.Skipped {
		parts[i] = s.Name + ": " + s.Reason
	}
	return "rdma: adapters skipped: " + strings.Join(parts, "; ")
}

// Discover lists the host's RDMA adapters in name order. sysRoot is the
// sysfs mount ("/sys") and devRoot the device directory ("/dev"); tests
// pass a fake tree of both. For each adapter in sysRoot/class/infiniband
// it reads:
//
//   - the link layer of its first port that reports one
//     (ports/N/link_layer: "InfiniBand", or "Ethernet" for RoCE);
//   - its network interface: the first of device/net/*, else the first
//     port's gid_attrs/ndevs/0 that names one; none is not an error;
//   - its verbs node: the sysRoot/class/infiniband_verbs/uverbsN whose
//     ibdev names the adapter, which must exist as
//     devRoot/infiniband/uverbsN.
//
// Devices lists the verbs node and, when devRoot/infiniband/rdma_cm
// exists, the connection manager's node, shared by every adapter; both
// named as a workload sees them, under DevDir.
//
// A host without the infiniband class (no RDMA driver loaded) has no
// adapters: nil, nil. An adapter that cannot be used (no port with a known
// link layer, no verbs node, a name NCCL cannot list) is left out, and
// the error is then a *SkipError naming each with its reason, returned
// with the adapters that can be used. Any other error (an unreadable
// class directory) comes with no adapters.
func Discover(sysRoot, devRoot string) ([]fleet.HCA, error) {
	class := filepath.Join(sysRoot, "class", "infiniband")
	entries, err := os.ReadDir(class)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rdma: %w", err)
	}
	verbs, err := verbsNodes(sysRoot)
	if err != nil {
		return nil, err
	}
	cm := ""
	if fileExists(filepath.Join(devRoot, "infiniband", RDMACM)) {
		cm = path.Join(DevDir, RDMACM)
	}
	var out []fleet.HCA
	var skipped []Skipped
	for _, e := range entries { // ReadDir sorts by name
		name := e.Name()
		h, reason := adapter(filepath.Join(class, name), name, verbs[name], devRoot)
		if reason != "" {
			skipped = append(skipped, Skipped{Name: name, Reason: reason})
			continue
		}
		if cm != "" {
			h.Devices = append(h.Devices, cm)
		}
		out = append(out, h)
	}
	if len(skipped) > 0 {
		return out, &SkipError{Skipped: skipped}
	}
	return out, nil
}

// adapter reads one adapter's directory; a non-empty reason says why it
// cannot be used. uverbs is the name of its verbs node ("" for none).
func adapter(dir, name, uverbs, devRoot string) (fleet.HCA, string) {
	h := fleet.HCA{Name: name}
	if !validName(name) {
		return h, "the name is not letters, digits, '_', '-' or '.', which NCCL_IB_HCA cannot list"
	}
	ports, err := portDirs(dir)
	if err != nil {
		return h, "its ports cannot be read: " + err.Error()
	}
	if len(ports) == 0 {
		return h, "it has no ports"
	}
	for _, p := range ports {
		b, err := os.ReadFile(filepath.Join(dir, "ports", p, "link_layer"))
		if err != nil {
			continue
		}
		switch ll := strings.TrimSpace(string(b)); ll {
		case InfiniBand, Ethernet:
			h.LinkLayer = ll
		default:
			return h, fmt.Sprintf("port %s has the unknown link layer %q", p, ll)
		}
		break
	}
	if h.LinkLayer == "" {
		return h, "no port reports its link layer"
	}
	h.NetDev = netDev(dir, ports)
	if uverbs == "" {
		return h, "no verbs device names it in class/infiniband_verbs (is ib_uverbs loaded?)"
	}
	node := filepath.Join(devRoot, "infiniband", uverbs)
	if !fileExists(node) {
		return h, fmt.Sprintf("its verbs device node %s is missing", node)
	}
	h.Devices = []string{path.Join(DevDir, uverbs)}
	return h, ""
}

// portDirs lists an adapter's port numbers in numeric order.
func portDirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "ports"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ports []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n >= 0 {
			ports = append(ports, n)
		}
	}
	slices.Sort(ports)
	out := make([]string, len(ports))
	for i, n := range ports {
		out[i] = strconv.Itoa(n)
	}
	return out, nil
}

// netDev is an adapter's network interface: the first of its PCI
// device's interfaces (device/net), else the first port's GID 0 interface
// (gid_attrs/ndevs/0, which RoCE ports fill); "" when neither names one.
func netDev(dir string, ports []string) string {
	if entries, err := os.ReadDir(filepath.Join(dir, "device", "net")); err == nil {
		for _, e := range entries {
			if validName(e.Name()) {
				return e.Name()
			}
		}
	}
	for _, p := range ports {
		b, err := os.ReadFile(filepath.Join(dir, "ports", p, "gid_attrs", "ndevs", "0"))
		if n := strings.TrimSpace(string(b)); err == nil && validName(n) {
			return n
		}
	}
	return ""
}

// verbsNodes maps adapter names to their verbs node ("uverbs0"), from
// sysRoot/class/infiniband_verbs/uverbsN/ibdev.
func verbsNodes(sysRoot string) (map[string]string, error) {
	dir := filepath.Join(sysRoot, "class", "infiniband_verbs")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rdma: %w", err)
	}
	out := map[string]string{}
	for _, e := range entries {
		n, ok := strings.CutPrefix(e.Name(), "uverbs")
		if _, err := strconv.Atoi(n); !ok || err != nil {
			continue // abi_version and the like
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "ibdev"))
		if err != nil {
			continue
		}
		if ib := strings.TrimSpace(string(b)); ib != "" {
			if _, dup := out[ib]; !dup {
				out[ib] = e.Name()
			}
		}
	}
	return out, nil
}

// validName accepts the adapter and interface names the kernel makes:
// letters, digits, '_', '-' and '.', at most 64 bytes.
func validName(s string) bool {
	if s == "" || len(s) > 64 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// fileExists reports whether p exists and is not a directory.
func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}
