package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controlplane"
)

// TestAccessFigures measures what docs/BENCHMARKS.md reports of the access
// relay, on a running server (TLS 1.3) with one agent (mutual TLS) and
// the process runtime: the exec round trip of a command that prints one
// line (p50, p99), and port-forward throughput against a direct loopback
// connection. It runs only with GPUCLOUD_BENCH=1:
//
//	GPUCLOUD_BENCH=1 go test ./e2e -run TestAccessFigures -v -count=1
//
// The sender writes and the receiver reads GPUCLOUD_BENCH_IO_KIB at a
// time (default 128: iperf3's for TCP), the same on every path. Until
// 2026-12-07 the receiver read 8 KiB at a time (io.Discard), which made
// the loopback connection receiver-bound and every ratio look better
// (docs/BENCHMARKS.md, "The endpoints' reads").
func TestAccessFigures(t *testing.T) {
	if os.Getenv("GPUCLOUD_BENCH") != "1" {
		t.Skip("a measurement: GPUCLOUD_BENCH=1 runs it")
	}
	spec := sim.Spec{ID: "sim-bench", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 1}}
	// Direct sessions on, to measure the direct port forward beside the
	// relayed one.
	c := startClusterTuned(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"), func(cfg *controlplane.Config) { cfg.DirectAccess = true }, nil, spec)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	in, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "600"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, in.ID, cloud.Running)

	const runs = 200
	var lat []time.Duration
	for i := range runs + 10 {
		var out bytes.Buffer
		start := time.Now()
		st, err := alice.Exec(ctx, in.ID, client.ExecOptions{Command: []string{"echo", "one line"}, Stdout: &out})
		d := time.Since(start)
		if err != nil || st.ExitCode != 0 || out.String() != "one line\n" {
			t.Fatalf("exec: %+v %v %q", st, err, out.String())
		}
		if i >= 10 { // the first ones warm the connections
			lat = append(lat, d)
		}
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("exec round trip (echo, %d runs): p50 %s, p99 %s", runs, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond))

	benchIO := envInt("GPUCLOUD_BENCH_IO_KIB", 128) << 10
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				// Reads the length, then that many bytes, then answers
				// one byte: the sender's clock stops at the answer.
				var n int64
				binary.Read(conn, binary.BigEndian, &n)
				buf := make([]byte, benchIO)
				for n > 0 {
					k, err := conn.Read(buf[:min(int64(len(buf)), n)])
					n -= int64(k)
					if err != nil {
						break
					}
				}
				conn.Write([]byte{1})
				conn.Close()
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	const size = 1 << 30
	// send also returns the CPU time (user and system, every thread of
	// this process: the server, the agent, the client and both ends of
	// the connection are all in it) the transfer took per GiB.
	send := func(conn net.Conn) (float64, float64) {
		defer conn.Close()
		buf := make([]byte, benchIO)
		start, c0 := time.Now(), cpuTime(syscall.RUSAGE_SELF)
		binary.Write(conn, binary.BigEndian, int64(size))
		for sent := 0; sent < size; sent += len(buf) {
			if _, err := conn.Write(buf); err != nil {
				t.Fatal(err)
			}
		}
		var ack [1]byte
		if _, err := io.ReadFull(conn, ack[:]); err != nil {
			t.Fatal(err)
		}
		return float64(size) / time.Since(start).Seconds() / (1 << 20), (cpuTime(syscall.RUSAGE_SELF) - c0).Seconds() / (size >> 30)
	}
	var g, tg *client.DirectGrant
	c.until("a grant for direct port forwards", func() (bool, string) {
		g, err = alice.ForwardGrant(ctx, in.ID, port)
		return err == nil, errString(err)
	})
	if tg, err = alice.ForwardTunnelGrant(ctx, in.ID, port); err != nil {
		t.Fatal(err)
	}
	// Three passes, each the three ways one after the other.
	for pass := range envInt("GPUCLOUD_BENCH_PASSES", 3) {
		loop, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		d, lcpu := send(loop)
		fw, err := alice.PortForward(ctx, in.ID, port)
		if err != nil {
			t.Fatal(err)
		}
		f, fc := send(fw)
		if time.Until(g.ExpiresAt) < 30*time.Second {
			if g, err = alice.ForwardGrant(ctx, in.ID, port); err != nil {
				t.Fatal(err)
			}
		}
		dc, err := alice.OpenDirect(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		df, dfc := send(dc)
		if time.Until(tg.ExpiresAt) < 30*time.Second {
			if tg, err = alice.ForwardTunnelGrant(ctx, in.ID, port); err != nil {
				t.Fatal(err)
			}
		}
		tc, err := alice.OpenDirect(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		tf, tfc := send(tc)
		t.Logf("pass %d, 1 GiB: loopback %.0f MiB/s; port-forward relayed by the server %.0f MiB/s (%.0f%%), tunnelled through it %.0f MiB/s (%.0f%%), direct to the agent %.0f MiB/s (%.0f%%)",
			pass+1, d, f, 100*f/d, tf, 100*tf/d, df, 100*df/d)
		t.Logf("pass %d, CPU per GiB (all cores): loopback %.2f s; relayed %.2f s, tunnelled %.2f s, direct %.2f s (loopback's share: %.0f%%, %.0f%%, %.0f%%)",
			pass+1, lcpu, fc, tfc, dfc, 100*lcpu/fc, 100*lcpu/tfc, 100*lcpu/dfc)
		fmt.Fprintf(os.Stderr, "exec p50 %s p99 %s; forward relayed %.0f, tunnelled %.0f, direct %.0f MiB/s vs %.0f MiB/s loopback (%.0f%%, %.0f%%, %.0f%%); CPU s/GiB loopback %.2f, relayed %.2f, tunnelled %.2f, direct %.2f\n",
			p50, p99, f, tf, df, d, 100*f/d, 100*tf/d, 100*df/d, lcpu, fc, tfc, dfc)
	}
}
