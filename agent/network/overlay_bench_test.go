//go:build linux

package network

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
)

// benchChunk is what one op of BenchmarkOverlayThroughput sends, each
// way it measures.
const benchChunk = 256 << 20

// benchIO is how much the benchmark's sender writes and its sink reads at
// a time, on both paths: iperf3's default for TCP. Until 2026-12-07 the
// sink read 8 KiB at a time (io.Copy into io.Discard), which bound the
// underlay by its own receiver and flattered the ratio (docs/BENCHMARKS.md,
// "The endpoints' reads").
const benchIO = 128 << 10

// sink accepts connections in a namespace and reads each to its end,
// sending the count on done.
func sink(b *testing.B, netnsPath, addr string) (string, <-chan int64) {
	b.Helper()
	var ln net.Listener
	if err := inNetns(netnsPath, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	done := make(chan int64, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, benchIO)
			var n int64
			for {
				k, err := c.Read(buf)
				n += int64(k)
				if err != nil {
					break
				}
			}
			c.Close()
			done <- n
		}
	}()
	return ln.Addr().String(), done
}

// send writes n bytes from a namespace to addr and waits until the sink
// has read them all: the time it took.
func send(b *testing.B, netnsPath, addr string, n int64, done <-chan int64) time.Duration {
	b.Helper()
	var c net.Conn
	if err := inNetns(netnsPath, func() (err error) {
		c, err = net.Dial("tcp4", addr)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, benchIO)
	start := time.Now()
	for sent := int64(0); sent < n; sent += int64(len(buf)) {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
	if got := <-done; got < n {
		b.Fatalf("the sink read %d bytes of %d", got, n)
	}
	return time.Since(start)
}

// BenchmarkOverlayThroughput measures TCP throughput between instances on
// two hosts, across the overlay, and between the two hosts' namespaces
// on the underlay, in the same run: each op sends benchChunk bytes each
// way, one after the other. It reports both rates (MB/s) and their ratio,
// with the instances in the default group ("groups": the routers' tables
// as the driver writes them, stateful), and, as the overlay's own cost,
// with every table of both routers flushed after the sync ("bare": no
// security groups, no NAT, no conntrack; not a configuration the driver
// makes). Give it enough ops for a run to mean something: with 5 (1.25
// GiB each way, half a second per path) a run's ratio is mostly noise;
// docs/BENCHMARKS.md's figures are runs of 40 (-benchtime 40x, 10 GiB).
func BenchmarkOverlayThroughput(b *testing.B) {
	for _, c := range []struct {
		name string
		bare bool
	}{{"groups", false}, {"bare", true}} {
		b.Run(c.name, func(b *testing.B) { benchOverlayThroughput(b, defaultGroup, c.bare) })
	}
}

func benchOverlayThroughput(b *testing.B, group agentapi.GroupRules, bare bool) {
	need(b)
	f := newFabric(b, 2)
	A, B := f.hosts[0], f.hosts[1]
	cloud := testCloud()
	drivers := map[*simHost]*Overlay{A: newOverlayOn(b, A, cloud), B: newOverlayOn(b, B, cloud)}
	x := vnet{"net-x", 100}
	i1, i2 := inst{"i1", x, A, 10}, inst{"i2", x, B, 11}
	paths := start(b, drivers, "", i1, i2)
	v := view(i1, i2)
	v[0].SecurityGroups = []agentapi.GroupRules{group}
	for _, d := range drivers {
		if err := d.Sync(b.Context(), v); err != nil {
			b.Fatal(err)
		}
		if bare {
			if out, err := exec.Command("ip", "netns", "exec", d.routerNS(x.vni), "nft", "flush", "ruleset").CombinedOutput(); err != nil {
				b.Fatalf("flush the router's tables: %v: %s", err, out)
			}
		}
	}
	overlayAddr, overlayDone := sink(b, paths["i2"], i2.addr().String()+":0")
	underlayAddr, underlayDone := sink(b, B.path(), B.underlay.String()+":0")
	var overlay, underlay time.Duration
	b.ResetTimer()
	for range b.N {
		overlay += send(b, paths["i1"], overlayAddr, benchChunk, overlayDone)
		underlay += send(b, A.path(), underlayAddr, benchChunk, underlayDone)
	}
	b.StopTimer()
	mb := float64(benchChunk) * float64(b.N) / 1e6
	ov, un := mb/overlay.Seconds(), mb/underlay.Seconds()
	b.ReportMetric(ov, "overlay_MB/s")
	b.ReportMetric(un, "underlay_MB/s")
	b.ReportMetric(ov/un, "overlay/underlay")
}

// BenchmarkRemoteEndpoints measures programming 1,000 remote endpoints
// into a router (a /32 route, a neighbour entry and an FDB entry each, on
// 50 remote hosts): one op adds them all to a router that has none. It
// also reports the time of the whole Sync that carries them (rules
// included), once.
func BenchmarkRemoteEndpoints(b *testing.B) {
	need(b)
	f := newFabric(b, 1)
	A := f.hosts[0]
	o := newOverlayOn(b, A, testCloud())
	x := vnet{"net-x", 100}
	i1 := inst{"i1", x, A, 10}
	start(b, map[*simHost]*Overlay{A: o}, "", i1)
	full := view(i1)
	for i := range 1000 {
		a := netip.AddrFrom4([4]byte{10, 0, byte(2 + i/250), byte(1 + i%250)})
		u := netip.AddrFrom4([4]byte{10, 251, 0, byte(10 + i%50)})
		full[0].Endpoints = append(full[0].Endpoints, agentapi.Endpoint{InstanceID: fmt.Sprintf("r%d", i), Address: a.String(),
			MAC: macOf(a), HostID: u.String(), Underlay: u.String()})
	}
	empty := view(i1)
	began := time.Now()
	if err := o.Sync(b.Context(), full); err != nil {
		b.Fatal(err)
	}
	syncTime := time.Since(began)
	r := o.routers[x.vni]
	rh, err := o.handle(o.routerNS(x.vni))
	if err != nil {
		b.Fatal(err)
	}
	defer rh.Close()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		o.views = map[uint32]agentapi.HostNetwork{x.vni: empty[0]}
		if err := o.program(rh, r); err != nil {
			b.Fatal(err)
		}
		o.views = map[uint32]agentapi.HostNetwork{x.vni: full[0]}
		b.StartTimer()
		if err := o.program(rh, r); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	vx, _ := rh.LinkByName(r.vxlan)
	routes, _ := rh.RouteList(vx, 2)
	if len(routes) != 1000 {
		b.Fatalf("%d routes through the VXLAN device, want 1000", len(routes))
	}
	b.ReportMetric(float64(syncTime.Microseconds())/1000, "first_sync_ms")
}
