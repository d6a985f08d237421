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
	line := []byte("4242 (my (odd) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 250 50 30 20 20 0 1 0 100 0 0\n")
	pgrp, ticks, ok := parseStat(line)
	if !ok || pgrp != 4240 || ticks != 350 {
		t.Fatalf("parseStat = %d, %d, %v; want 4240, 350, true", pgrp, ticks, ok)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 x 3 4 5 6 7 8 9 10 11 12 13 14 15"} {
		if _, _, ok := parseStat([]byte(bad)); ok {
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
