package containerd

import (
	"bufio"
	"bytes"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// An instance's private address: where the other instances of its tenant
// reach it on the instance network, which the agent reports with the
// running report for the peers of a stack's job.

var _ runtime.Addresser = (*Runtime)(nil)

// Address implements runtime.Addresser: the running workload's address
// on its instance network (Config.Network). A NetworkHook that is itself
// a runtime.Addresser says it; otherwise the runtime reads the local
// addresses of the container's network namespace from the kernel
// (/proc/<init>/net/fib_trie) and answers its one global unicast IPv4
// address (the lowest, should there be several), leaving out loopback and
// link-local ones such as the metadata endpoint's. It is false for an
// unknown or exited workload, and for every workload without
// Config.Network: its namespace has a loopback interface only, where no
// other instance reaches it.
func (r *Runtime) Address(id string) (netip.Addr, bool) {
	r.mu.Lock()
	in := r.insts[id]
	ok := in != nil && in.netns && in.task != nil && in.status.State == runtime.StateRunning
	var pid uint32
	if ok {
		pid = in.task.Pid()
	}
	r.mu.Unlock()
	if !ok || r.cfg.Network == nil {
		return netip.Addr{}, false
	}
	if a, ok := r.cfg.Network.(runtime.Addresser); ok {
		return a.Address(id)
	}
	f, err := os.Open("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/net/fib_trie")
	if err != nil {
		return netip.Addr{}, false
	}
	defer f.Close()
	addrs, err := localAddrs(io.LimitReader(f, maxFibTrie))
	if err != nil {
		r.cfg.Log.Warn("containerd runtime: read the instance's addresses", "instance", id, "err", err)
		return netip.Addr{}, false
	}
	return privateAddr(addrs)
}

// maxFibTrie bounds what localAddrs reads of a namespace's fib_trie: an
// instance's namespace has a handful of routes, far below it.
const maxFibTrie = 1 << 20

// localAddrs parses the kernel's /proc/net/fib_trie: the leaves ("|--
// ADDR") whose entries include a host route of type LOCAL for the whole
// address ("/32 host LOCAL") are the namespace's own IPv4 addresses. The
// main and local tables both list them; each is answered once, sorted.
func localAddrs(r io.Reader) ([]netip.Addr, error) {
	var out []netip.Addr
	var leaf netip.Addr
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		switch {
		case bytes.HasPrefix(line, []byte("|-- ")):
			leaf = netip.Addr{}
			if a, err := netip.ParseAddr(string(bytes.TrimPrefix(line, []byte("|-- ")))); err == nil && a.Is4() {
				leaf = a
			}
		case bytes.HasPrefix(line, []byte("/")):
			f := strings.Fields(string(line))
			if leaf.IsValid() && len(f) >= 3 && f[0] == "/32" && f[2] == "LOCAL" && !slices.Contains(out, leaf) {
				out = append(out, leaf)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// privateAddr picks the address other instances reach: the lowest global
// unicast one, neither loopback nor link-local.
func privateAddr(addrs []netip.Addr) (netip.Addr, bool) {
	for _, a := range addrs {
		if a.IsGlobalUnicast() && !a.IsLinkLocalUnicast() && !a.IsLoopback() {
			return a, true
		}
	}
	return netip.Addr{}, false
}
