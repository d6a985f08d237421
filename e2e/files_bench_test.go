package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/internal/filexfer"
)

// TestBenchVolumeCopy is the volumes cp benchmark (docs/BENCHMARKS.md),
// run only with GPUCLOUD_BENCH_COPY=1: one file of GPUCLOUD_BENCH_COPY_MIB
// MiB (2048 by default) copied into a volume over TLS 1.3 and over plain
// HTTP, through a real server and agent, and with a plain local cp on the
// same disk, interleaved for GPUCLOUD_BENCH_COPY_ROUNDS rounds (3).
// GPUCLOUD_BENCH_COPY_CHECKSUM names the checksum (crc32c, the default,
// or sha256). GPUCLOUD_BENCH_COPY_LINK_MBIT=N puts a link of N Mbit/s
// each way between the client and the server (a pacing proxy, shapedLink):
// the relayed copies over TLS and plain HTTP then cross it, as a copy
// from a laptop or another site would, and the direct one is left out.
func TestBenchVolumeCopy(t *testing.T) {
	if os.Getenv("GPUCLOUD_BENCH_COPY") != "1" {
		t.Skip("a benchmark: set GPUCLOUD_BENCH_COPY=1")
	}
	mib := envInt("GPUCLOUD_BENCH_COPY_MIB", 2048)
	rounds := envInt("GPUCLOUD_BENCH_COPY_ROUNDS", 3)
	dir := t.TempDir()
	src := filepath.Join(dir, "src.bin")
	writePseudoRandom(t, src, int64(mib)<<20)
	type target struct {
		name   string
		cl     *client.Client
		volID  string
		volDir string
		// via: "" through the server's relay; "direct" straight to the
		// agent with a grant (the TLS cloud's); "tunnel" with a grant
		// through the server's tunnel (docs/ACCESS.md, "Tunnels").
		via string
	}
	mbit := envInt("GPUCLOUD_BENCH_COPY_LINK_MBIT", 0)
	setup := func(plain bool) target {
		c, cl, vol, token := benchVolume(t, "sim-copy", 100, func(c *controlplane.Config) { c.TLS.Plain, c.DirectAccess = plain, !plain })
		name := "tls"
		if plain {
			name = "plain"
		}
		if mbit > 0 {
			cl = shapedClient(t, c, token, mbit)
		}
		return target{name: name, cl: cl, volID: vol.ID, volDir: filepath.Join(c.hosts["sim-copy"].dir, "volumes", vol.ID)}
	}
	tlsTarget := setup(false)
	directTarget, tunnelTarget := tlsTarget, tlsTarget
	directTarget.name, directTarget.via = "direct", "direct"
	tunnelTarget.name, tunnelTarget.via = "tunnel", client.ViaTunnel
	targets := []target{tlsTarget, setup(true), directTarget, tunnelTarget}
	if mbit > 0 {
		targets = targets[:2]
		t.Logf("the client reaches the server over a link of %d Mbit/s each way", mbit)
	}
	took := map[string][]time.Duration{}
	// CPU time too: the client, the server and the agent all run in this
	// process, so its CPU time is the copy's whole cost, which a busy
	// machine does not inflate as it does the wall clock.
	cpu := map[string][]time.Duration{}
	for r := range rounds {
		start, c0 := time.Now(), cpuTime(syscall.RUSAGE_CHILDREN)
		dst := filepath.Join(dir, "cp.bin")
		if out, err := exec.Command("cp", src, dst).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
		took["cp"] = append(took["cp"], time.Since(start))
		cpu["cp"] = append(cpu["cp"], cpuTime(syscall.RUSAGE_CHILDREN)-c0)
		os.Remove(dst)
		for _, tg := range targets {
			if only := os.Getenv("GPUCLOUD_BENCH_COPY_ONLY"); only != "" && only != tg.name {
				continue // a profile of one path
			}
			start, c0 := time.Now(), cpuTime(syscall.RUSAGE_SELF)
			conn, err := openVolumeFiles(t.Context(), tg.cl, tg.volID, tg.via)
			if err != nil {
				t.Fatal(err)
			}
			remote := fmt.Sprintf("/copy-%d.bin", r)
			if _, err := filexfer.Upload(filexfer.NewClient(conn), src, remote, filexfer.Options{NoResume: true, Checksum: os.Getenv("GPUCLOUD_BENCH_COPY_CHECKSUM")}); err != nil {
				t.Fatalf("%s: %v", tg.name, err)
			}
			conn.Close()
			took[tg.name] = append(took[tg.name], time.Since(start))
			cpu[tg.name] = append(cpu[tg.name], cpuTime(syscall.RUSAGE_SELF)-c0)
			os.Remove(filepath.Join(tg.volDir, remote))
		}
	}
	rate := func(d time.Duration) float64 { return float64(mib) / d.Seconds() }
	for _, name := range []string{"cp", "tls", "plain", "direct", "tunnel"} {
		line := fmt.Sprintf("%-6s", name)
		for i, d := range took[name] {
			line += fmt.Sprintf("  %6.2fs %7.1f MiB/s (CPU %5.2fs)", d.Seconds(), rate(d), cpu[name][i].Seconds())
		}
		t.Log(line)
	}
	if os.Getenv("GPUCLOUD_BENCH_COPY_ONLY") != "" {
		return
	}
	for r := range rounds {
		t.Logf("round %d: TLS/plain time %.3f (CPU %.3f), TLS/cp throughput %.3f", r+1,
			took["tls"][r].Seconds()/took["plain"][r].Seconds(), cpu["tls"][r].Seconds()/cpu["plain"][r].Seconds(),
			took["cp"][r].Seconds()/took["tls"][r].Seconds())
		if mbit > 0 {
			continue
		}
		for _, way := range []string{"direct", "tunnel"} {
			t.Logf("round %d: %s (TLS)/plain relay time %.3f (CPU %.3f), %s/cp throughput %.3f", r+1, way,
				took[way][r].Seconds()/took["plain"][r].Seconds(), cpu[way][r].Seconds()/cpu["plain"][r].Seconds(),
				way, took["cp"][r].Seconds()/took[way][r].Seconds())
		}
	}
}

// shapedClient is a client of token whose connections to c's server
// cross shapedLink at mbit Mbit/s each way.
func shapedClient(t *testing.T, c *cluster, token string, mbit int) *client.Client {
	t.Helper()
	u, err := url.Parse(c.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	link := shapedLink(t, u.Host, int64(mbit)*1_000_000/8)
	hc := c.srv.HTTPClient()
	hc.Timeout = 0 // a copy takes as long as it takes
	tr := hc.Transport.(*http.Transport)
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, link)
	}
	return client.New(c.srv.URL, token, hc)
}

// shapedLink listens on loopback and forwards each connection to
// upstream, pacing each direction at rate bytes a second (bursts of at
// most 1 MiB): a link slower than loopback, for the copy benchmark. It
// answers the address to dial.
func shapedLink(t *testing.T, upstream string, rate int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	pace := func(dst, src net.Conn) {
		defer dst.(*net.TCPConn).CloseWrite()
		// A sleep here overshoots by up to a millisecond: the burst a
		// late chunk may catch up with is a switch buffer's, 1 MiB, so
		// that the overshoots do not add up to a slower link.
		buf := make([]byte, 128<<10)
		const burst = 1 << 20
		next := time.Now()
		for {
			n, err := src.Read(buf)
			if n > 0 {
				now := time.Now()
				if next.Before(now.Add(-time.Duration(burst) * time.Second / time.Duration(rate))) {
					next = now.Add(-time.Duration(burst) * time.Second / time.Duration(rate))
				}
				next = next.Add(time.Duration(int64(n) * int64(time.Second) / rate))
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{})
				go func() { pace(up, c); close(done) }()
				pace(c, up)
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// benchVolume starts a one-host cloud (an L4 host named host, the
// process runtime, SQLite) tuned by tune, and returns it with alice's
// client (no timeout: a copy takes as long as it takes), her volume of
// sizeGiB, attached to her running instance, and her token.
func benchVolume(t *testing.T, host string, sizeGiB int64, tune func(*controlplane.Config)) (*cluster, *client.Client, *cloud.Volume, string) {
	t.Helper()
	spec := sim.Spec{ID: host, Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 1}}
	c := startClusterTuned(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"), tune, withFiles, spec)
	_, _, token := c.member("acme", "alice")
	cl := client.New(c.srv.URL, token, c.srv.HTTPClient())
	ctx := t.Context()
	vol, err := cl.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: sizeGiB}, "")
	if err != nil {
		t.Fatal(err)
	}
	in, err := cl.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "3600"}, Volumes: []string{vol.ID}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(cl, in.ID, cloud.Running)
	return c, cl, vol, token
}

// openVolumeFiles opens a files session on volume id: through the
// server's relay (via ""), or with a grant straight to the agent
// ("direct") or through the server's tunnel ("tunnel").
func openVolumeFiles(ctx context.Context, cl *client.Client, id string, via string) (net.Conn, error) {
	if via == "" {
		return cl.OpenFiles(ctx, "volumes", id)
	}
	grant := cl.FilesGrant
	if via == client.ViaTunnel {
		grant = cl.FilesTunnelGrant
	}
	g, err := grant(ctx, "volumes", id)
	if err != nil {
		return nil, err
	}
	return cl.OpenDirect(ctx, g)
}

// cpuTime is the user and system time of who (RUSAGE_SELF or
// RUSAGE_CHILDREN) so far.
func cpuTime(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// writePseudoRandom writes size bytes that no filesystem or link
// compresses.
func writePseudoRandom(t *testing.T, p string, size int64) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.NewChaCha8([32]byte{1}), size); err != nil {
		t.Fatal(err)
	}
}

// TestBenchManyFiles: a tree of many small files (a dataset's shape)
// copied into a volume through the server and straight to the agent, on
// one connection and on several (GPUCLOUD_BENCH_COPY_CONNS, default 4):
// per file the copy waits for the agent's answers, so its time is round
// trips, not bytes. GPUCLOUD_BENCH_COPY_FILES files (default 1000) of
// 4 KiB.
func TestBenchManyFiles(t *testing.T) {
	if os.Getenv("GPUCLOUD_BENCH_COPY") != "1" {
		t.Skip("a benchmark: set GPUCLOUD_BENCH_COPY=1")
	}
	n := envInt("GPUCLOUD_BENCH_COPY_FILES", 1000)
	conns := envInt("GPUCLOUD_BENCH_COPY_CONNS", 4)
	src := filepath.Join(t.TempDir(), "tree")
	for i := range n {
		p := filepath.Join(src, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("f%05d.bin", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writePseudoRandom(t, p, 4<<10)
	}
	_, cl, vol, _ := benchVolume(t, "sim-many", 10, func(cfg *controlplane.Config) { cfg.DirectAccess = true })
	ctx := t.Context()
	open := func(via string) func() (*filexfer.Client, func(), error) {
		return func() (*filexfer.Client, func(), error) {
			conn, err := openVolumeFiles(ctx, cl, vol.ID, via)
			if err != nil {
				return nil, nil, err
			}
			return filexfer.NewClient(conn), func() { conn.Close() }, nil
		}
	}
	for round := range 2 {
		for _, way := range []struct {
			name  string
			via   string
			conns int
		}{{"relayed", "", 1}, {"relayed", "", conns}, {"direct", "direct", 1}, {"direct", "direct", conns},
			{"tunnel", client.ViaTunnel, 1}, {"tunnel", client.ViaTunnel, conns}} {
			o := open(way.via)
			fc, closeFn, err := o()
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			st, err := filexfer.Upload(fc, src, fmt.Sprintf("/r%d-%s-%d/", round, way.name, way.conns), filexfer.Options{Parallel: way.conns, Open: o})
			if err != nil || st.Files != n {
				t.Fatalf("%s ×%d: %+v, %v", way.name, way.conns, st, err)
			}
			d := time.Since(start)
			closeFn()
			t.Logf("round %d, %s, %d connection(s): %d files in %s, %.0f files/s", round+1, way.name, way.conns, n, d.Round(time.Millisecond), float64(n)/d.Seconds())
		}
	}
}
