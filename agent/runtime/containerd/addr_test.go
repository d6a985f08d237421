package containerd

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/network"
	"github.com/gpucloud/gpucloud/agent/runtime"
)

// fibTrie is a container namespace's /proc/net/fib_trie: lo with
// 127.0.0.1 and the metadata address, eth0 with 10.200.0.5/24.
const fibTrie = `Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.200.0.0/24 2 0 2
        +-- 10.200.0.0/29 2 0 2
           |-- 10.200.0.0
              /24 link UNICAST
           |-- 10.200.0.5
              /32 host LOCAL
        |-- 10.200.0.255
           /32 link BROADCAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     |-- 169.254.169.254
        /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.200.0.0/24 2 0 2
        +-- 10.200.0.0/29 2 0 2
           |-- 10.200.0.0
              /24 link UNICAST
           |-- 10.200.0.5
              /32 host LOCAL
        |-- 10.200.0.255
           /32 link BROADCAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     |-- 169.254.169.254
        /32 host LOCAL
`

// TestLocalAddrs: the namespace's own addresses are the /32 LOCAL leaves,
// once each; the private address is the one other instances reach, not
// loopback nor the link-local metadata address.
func TestLocalAddrs(t *testing.T) {
	got, err := localAddrs(strings.NewReader(fibTrie))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("10.200.0.5"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("169.254.169.254")}
	if !slices.Equal(got, want) {
		t.Fatalf("local addresses %v, want %v", got, want)
	}
	if a, ok := privateAddr(got); !ok || a != want[0] {
		t.Fatalf("private address %s, %v; want %s", a, ok, want[0])
	}
	// Loopback only (no instance network): no private address.
	lo, err := localAddrs(strings.NewReader("Local:\n  +-- 127.0.0.0/8 2 0 2\n     |-- 127.0.0.1\n        /32 host LOCAL\n" +
		"     |-- 169.254.169.254\n        /32 host LOCAL\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := privateAddr(lo); ok {
		t.Fatalf("loopback only: private address %s", a)
	}
	if a, ok := privateAddr(nil); ok {
		t.Fatalf("nothing: private address %s", a)
	}
}

// addresser is an instance network that knows its instances' addresses.
type addresser struct {
	NetworkHook
	addr netip.Addr
}

func (a addresser) Address(string) (netip.Addr, bool) { return a.addr, true }

// TestAddress: a running container on the instance network is at the
// address the network gave it (read in its namespace, or answered by a
// network that knows it); before the start and after the exit it has
// none. Without an instance network it has none either (runtimetest's
// Address).
func TestAddress(t *testing.T) {
	needNetwork(t)
	nw, _ := testNetwork(t)
	for _, c := range []struct {
		name string
		hook func(*network.Network) NetworkHook
		want func(nw *network.Network, id string) netip.Addr
	}{
		{"read in the namespace", func(nw *network.Network) NetworkHook { return nw },
			func(nw *network.Network, id string) netip.Addr { info, _ := nw.Instance(id); return info.Addr }},
		{"told by the network", func(nw *network.Network) NetworkHook {
			return addresser{NetworkHook: nw, addr: netip.MustParseAddr("10.1.2.3")}
		}, func(*network.Network, string) netip.Addr { return netip.MustParseAddr("10.1.2.3") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			rt := newRuntime(t, func(cfg *Config) { cfg.Network = c.hook(nw) })
			id := newID(t)
			if a, ok := rt.Address(id); ok {
				t.Fatalf("before the start: address %s", a)
			}
			if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, TenantID: "ten-a", Grace: grace,
				Command: sh("echo ready; exec sleep 60")}); err != nil {
				t.Fatal(err)
			}
			waitLog(t, rt, id, "ready")
			want := c.want(nw, id)
			if a, ok := rt.Address(id); !ok || a != want || !want.IsValid() {
				t.Fatalf("running: address %s, %v; want %s", a, ok, want)
			}
			if err := rt.Stop(t.Context(), id); err != nil {
				t.Fatal(err)
			}
			if a, ok := rt.Address(id); ok {
				t.Fatalf("stopped: address %s", a)
			}
		})
	}
}
