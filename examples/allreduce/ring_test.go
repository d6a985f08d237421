package main

import (
	"bytes"
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAllReducePipes runs the ring's reduce logic among world ranks joined
// by in-process pipes, vectors whose length does and does not divide by
// the world, and checks every rank's result.
func TestAllReducePipes(t *testing.T) {
	for _, tc := range []struct{ world, n int }{{2, 1024}, {3, 1024}, {3, 1000}, {4, 7}, {2, 2}} {
		t.Run(strconv.Itoa(tc.world)+"x"+strconv.Itoa(tc.n), func(t *testing.T) {
			// link[r] carries rank r's sends to rank r+1.
			type pipe struct{ w, r net.Conn }
			links := make([]pipe, tc.world)
			for r := range links {
				a, b := net.Pipe()
				links[r] = pipe{a, b}
				t.Cleanup(func() { a.Close(); b.Close() })
			}
			bufs := make([][]float32, tc.world)
			errs := make([]error, tc.world)
			var wg sync.WaitGroup
			for r := range tc.world {
				bufs[r] = make([]float32, tc.n)
				fill(bufs[r], r)
				prev := links[(r+tc.world-1)%tc.world].r
				wg.Go(func() { errs[r] = allReduce(r, tc.world, bufs[r], links[r].w, prev) })
			}
			wg.Wait()
			for r := range tc.world {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				if err := verify(bufs[r], tc.world); err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// TestVerifyCatches: a vector summed wrongly (a rank missed, a chunk
// added twice) fails the check.
func TestVerifyCatches(t *testing.T) {
	buf := make([]float32, 64)
	fill(buf, 0)
	for _, tc := range []struct {
		name  string
		world int
		mess  func([]float32)
	}{
		{"one rank of two", 2, func([]float32) {}},
		{"an element twice", 1, func(b []float32) { b[17] *= 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]float32(nil), buf...)
			tc.mess(b)
			if err := verify(b, tc.world); err == nil {
				t.Fatal("verify passed")
			}
		})
	}
	if err := verify(buf, 1); err != nil {
		t.Fatalf("a world of one: %v", err)
	}
}

// TestRunLoopback runs whole ranks over loopback TCP, rendezvous
// included, with the workers started before the master listens.
func TestRunLoopback(t *testing.T) {
	for _, world := range []int{1, 2, 3} {
		t.Run(strconv.Itoa(world), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			res := make([]Result, world)
			errs := make([]error, world)
			var wg sync.WaitGroup
			for r := range world {
				cfg := Config{Rank: r, World: world, Master: ln.Addr().String(), Listen: "127.0.0.1:0",
					Bytes: 1 << 20, Iters: 2, DialTimeout: 10 * time.Second, Timeout: 30 * time.Second}
				wg.Go(func() {
					if r == 0 {
						time.Sleep(300 * time.Millisecond) // the workers dial first and retry
					}
					res[r], errs[r] = Run(t.Context(), cfg, ln)
				})
			}
			wg.Wait()
			for r := range world {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				if res[r].AlgBW <= 0 || res[r].PerIter <= 0 {
					t.Errorf("rank %d: %+v", r, res[r])
				}
				if want := res[r].AlgBW * 2 * float64(world-1) / float64(world); res[r].BusBW != want {
					t.Errorf("rank %d: busbw %v, want %v", r, res[r].BusBW, want)
				}
			}
		})
	}
}

// TestRunFails: runs that must fail do, in bounded time, saying why.
func TestRunFails(t *testing.T) {
	// A port nothing listens on.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	for _, tc := range []struct {
		name string
		// cfgs are the ranks to run (rank 0 gets the listener).
		cfgs []Config
		want string
	}{
		{"no master", []Config{{Rank: 1, World: 2, Master: deadAddr}}, "no answer in"},
		{"master waits alone", []Config{{Rank: 0, World: 2}}, "1 of 2 ranks joined"},
		{"worlds differ", []Config{{Rank: 0, World: 2}, {Rank: 1, World: 3}}, "rank 1 has world 3"},
		{"rank out of range", []Config{{Rank: 2, World: 2}}, "rank 2: want 0 to 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			errs := make([]error, len(tc.cfgs))
			var wg sync.WaitGroup
			began := time.Now()
			for i, cfg := range tc.cfgs {
				if cfg.Master == "" {
					cfg.Master = ln.Addr().String()
				}
				cfg.Listen, cfg.Bytes, cfg.Iters = "127.0.0.1:0", 1024, 1
				cfg.DialTimeout, cfg.Timeout = time.Second, 2*time.Second
				wg.Go(func() { _, errs[i] = Run(t.Context(), cfg, ln) })
			}
			wg.Wait()
			if d := time.Since(began); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
			var msgs []string
			for _, err := range errs {
				if err != nil {
					msgs = append(msgs, err.Error())
				}
			}
			if all := strings.Join(msgs, "; "); !strings.Contains(all, tc.want) {
				t.Errorf("errors %q, want one containing %q", all, tc.want)
			}
		})
	}
}

// TestParse reads torchrun's command lines, the blueprint's among them,
// and the environment's fallbacks.
func TestParse(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, tc := range []struct {
		name string
		args []string
		env  func(string) string
		want Config
		err  string
	}{
		{name: "the blueprint's head", args: []string{"--nnodes=2", "--node_rank=0", "--nproc_per_node=gpu",
			"--master_addr=127.0.0.1", "--master_port=29500", "train.py", "--checkpoint-dir=/volumes/v"},
			env: env(), want: Config{Rank: 0, World: 2, Master: "127.0.0.1:29500"}},
		{name: "the environment", args: []string{"train.py"},
			env:  env("NNODES", "3", "NODE_RANK", "2", "MASTER_ADDR", "10.42.0.4", "MASTER_PORT", "29501"),
			want: Config{Rank: 2, World: 3, Master: "10.42.0.4:29501"}},
		{name: "empty flags fall back", args: []string{"--nnodes=", "--node_rank=", "--master_addr=", "--master_port=", "x.py"},
			env:  env("WORLD_SIZE", "2", "NODE_RANK", "1", "MASTER_ADDR", "fd00::1"),
			want: Config{Rank: 1, World: 2, Master: "[fd00::1]:29500"}},
		{name: "flags win", args: []string{"--nnodes", "2", "--node_rank", "1", "--master_addr", "h", "--master_port", "7",
			"--bytes", "4096", "--iters", "3"},
			env: env("NNODES", "9", "NODE_RANK", "5"), want: Config{Rank: 1, World: 2, Master: "h:7", Bytes: 4096, Iters: 3}},
		{name: "no world", args: []string{"--node_rank=0"}, env: env(), err: "no --nnodes"},
		{name: "a worker without a master", args: []string{"--nnodes=2", "--node_rank=1"}, env: env(), err: "no master address"},
		{name: "a range of nodes", args: []string{"--nnodes=1:4", "--node_rank=0"}, env: env(), err: "want an integer"},
		{name: "bad port", args: []string{"--nnodes=1", "--node_rank=0", "--master_port=70000"}, env: env(), err: "want 1 to 65535"},
		{name: "rank past the world", args: []string{"--nnodes=2", "--node_rank=2", "--master_addr=h"}, env: env(), err: "want 0 to 1"},
		{name: "an unknown flag", args: []string{"--rdzv_backend=c10d"}, env: env(), err: "not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(tc.args, tc.env, &bytes.Buffer{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want.Bytes == 0 {
				tc.want.Bytes, tc.want.Iters = 64<<20, 5
			}
			if got.Rank != tc.want.Rank || got.World != tc.want.World || got.Master != tc.want.Master ||
				got.Bytes != tc.want.Bytes || got.Iters != tc.want.Iters {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestRunLines runs the command's two ranks and checks the lines they
// print, and a failing one's.
func TestRunLines(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close() // rank 0 listens on it itself, on every interface
	var outs [2]bytes.Buffer
	var codes [2]int
	var wg sync.WaitGroup
	for r := range 2 {
		args := []string{"--nnodes=2", "--node_rank=" + strconv.Itoa(r), "--master_addr=127.0.0.1", "--master_port=" + port,
			"--bytes=65536", "--iters=2", "--dial-timeout=10s", "--timeout=30s", "train.py", "--checkpoint-dir=/x"}
		wg.Go(func() {
			codes[r] = run(t.Context(), args, func(string) string { return "" }, &outs[r], &bytes.Buffer{})
		})
	}
	wg.Wait()
	// The stages, then the result, last.
	line := regexp.MustCompile(`^allreduce: rank=(\d) world=2 rendezvous at 127\.0\.0\.1:` + port + ` done: ranks at \S+ \S+\n` +
		`allreduce: rank=\d world=2 ring connected: to 127\.0\.0\.1:\d+, from 127\.0\.0\.1:\d+\n` +
		`allreduce: rank=\d world=2 master=127\.0\.0\.1:` + port + ` bytes=65536 iters=2 time=\S+ algbw=\d+\.\d\d GB/s busbw=\d+\.\d\d GB/s ok\n$`)
	for r := range 2 {
		m := line.FindStringSubmatch(outs[r].String())
		if codes[r] != 0 || m == nil || m[1] != strconv.Itoa(r) {
			t.Errorf("rank %d: exit %d, output %q", r, codes[r], outs[r].String())
		}
	}
	var out bytes.Buffer
	code := run(context.Background(), []string{"--nnodes=2", "--node_rank=1", "--master_addr=127.0.0.1", "--master_port=" + port,
		"--dial-timeout=300ms"}, func(string) string { return "" }, &out, &bytes.Buffer{})
	if code != 1 || !strings.HasPrefix(out.String(), "allreduce: rank=1 world=2 FAIL: rendezvous with 127.0.0.1:"+port) {
		t.Errorf("no master: exit %d, output %q", code, out.String())
	}
}
