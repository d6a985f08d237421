//go:build linux

package process

import (
	"context"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/internal/testkit"
)

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := []byte("4242 (my (odd) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 250 50 30 20 20 0 1 0 100 8192000 512 18446744073709551615 1 1 0 0 0\n")
	pgrp, ticks, rss, ok := parseStat(line)
	if !ok || pgrp != 4240 || ticks != 350 || rss != 512 {
		t.Fatalf("parseStat = %d, %d, %d, %v; want 4240, 350, 512, true", pgrp, ticks, rss, ok)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 x 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21",
		"1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 x"} {
		if _, _, _, ok := parseStat([]byte(bad)); ok {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}

// TestUsage: a workload that burns CPU in a child process shows its CPU
// time growing; an unknown or exited one has none.
func TestUsage(t *testing.T) {
	rt := New(t.TempDir())
	if _, ok := rt.Usage("nope"); ok {
		t.Fatal("usage of an unknown workload")
	}
	// The busy loop runs in a child of the shell, in the workload's group.
	if err := rt.Start(context.Background(), runtime.Spec{InstanceID: "busy", Command: sh(`sh -c 'while :; do :; done' & echo ready; wait`), Grace: grace}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop(context.Background(), "busy") })
	waitLog(t, rt, "busy", "ready")
	first, ok := rt.Usage("busy")
	if !ok {
		t.Fatal("no usage of a running workload")
	}
	testkit.Eventually(t, 0, "the workload's CPU time to grow by 0.1 s", func() bool {
		time.Sleep(usageMaxAge)
		v, ok := rt.Usage("busy")
		return ok && v >= first+0.1
	})
	if err := rt.Stop(context.Background(), "busy"); err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.Usage("busy"); ok {
		t.Fatal("usage of an exited workload")
	}
}

// TestResources: a workload's memory is the resident sets of its group's
// processes (a shell holding 20 MB in a variable), and its CPU time is
// Usage's; an unknown or exited workload has none.
func TestResources(t *testing.T) {
	rt := New(t.TempDir())
	if _, ok := rt.Resources("nope"); ok {
		t.Fatal("resources of an unknown workload")
	}
	script := `x=$(head -c 20000000 /dev/zero | tr '\0' a); echo ready; sleep 30 & wait`
	if err := rt.Start(context.Background(), runtime.Spec{InstanceID: "big", Command: sh(script), Grace: grace}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop(context.Background(), "big") })
	waitLog(t, rt, "big", "ready")
	var r runtime.Resources
	testkit.Eventually(t, 0, "the workload's resident set to reach 20 MB", func() bool {
		time.Sleep(usageMaxAge)
		var ok bool
		r, ok = rt.Resources("big")
		return ok && r.MemoryBytes >= 20_000_000
	})
	if r.MemoryBytes > 1<<30 {
		t.Errorf("memory %d bytes for a 20 MB shell", r.MemoryBytes)
	}
	if cpu, ok := rt.Usage("big"); !ok || cpu < r.CPUSeconds {
		t.Errorf("Usage %v (%v) behind Resources' CPU time %v", cpu, ok, r.CPUSeconds)
	}
	if err := rt.Stop(context.Background(), "big"); err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.Resources("big"); ok {
		t.Fatal("resources of an exited workload")
	}
}
