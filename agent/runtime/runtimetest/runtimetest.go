// Package runtimetest is the conformance suite of runtime.Runtime: the
// behaviour every runtime owes the agent, whatever it runs workloads in.
// Each implementation's tests call Run with a Harness that starts one of
// its runtimes; what only one runtime does (a container's isolation, a
// process group's reach) is tested in that runtime's own package, with the
// helpers here.
//
// The suite runs real workloads with /bin/sh and the usual tools (env,
// sleep, head, tr, kill), so it needs a Unix host and, for a runtime that
// runs images, an image that has them.
package runtimetest

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// Timeout bounds every wait of the suite: generous, because CI machines
// are shared and a container starts in hundreds of milliseconds; a test
// that passes waits far less.
const Timeout = 20 * time.Second

// Harness is what the suite needs of one runtime implementation.
type Harness struct {
	// New returns a runtime for one test, released (its workloads stopped)
	// when the test ends.
	New func(t *testing.T) runtime.Runtime
	// ID returns an instance ID unique among the runtimes New returns in
	// this run: runtimes that share a daemon share its instances.
	ID func(t *testing.T) string
	// Grace is the grace period the suite's workloads stop with: short, so
	// that the SIGKILL path costs little time.
	Grace time.Duration
	// StartSlack is how long before the Start call a workload's StartedAt
	// may lie: zero for a runtime that reads the agent's clock, more for
	// one whose times come from another daemon at a coarser resolution.
	StartSlack time.Duration
	// OneStream says that the workload's stdout and stderr are one file
	// description, so that the log keeps the order they were written in;
	// a runtime that copies two streams into the log does not.
	OneStream bool
	// Environ is the exact environment the workload of s sees.
	Environ func(rt runtime.Runtime, s runtime.Spec) []string
	// Seen is the path where the workload of s sees the host directory
	// dir, its working directory or one of its volumes: dir itself for a
	// runtime without a filesystem of its own.
	Seen func(rt runtime.Runtime, s runtime.Spec, dir string) string
	// LeftBehind says what a failed Start of id left on the host beyond
	// the runtime's record (a container, say), and "" when nothing; nil
	// when the runtime keeps nothing else.
	LeftBehind func(t *testing.T, rt runtime.Runtime, id string) string
	// Address is where an Addresser runtime's running workload is
	// reached with no instance network configured; the zero Addr when it
	// has no address then.
	Address netip.Addr
}

// Run runs the suite against the runtimes h makes, one subtest per
// behaviour. The subtests run one after another (runtimes on one daemon
// may adopt each other's instances); their cases run in parallel where a
// workload waits.
func Run(t *testing.T, h Harness) {
	for _, c := range []struct {
		name string
		test func(*testing.T, Harness)
	}{
		{"Environment", testEnvironment},
		{"ExitStatus", testExitStatus},
		{"Stop", testStop},
		{"StopContextEndsBeforeKill", testStopContextEndsBeforeKill},
		{"StopAll", testStopAll},
		{"ChildrenDie", testChildrenDie},
		{"StartIsIdempotent", testStartIsIdempotent},
		{"Logs", testLogs},
		{"WorkDirAndVolumes", testWorkDirAndVolumes},
		{"Scratch", testScratch},
		{"Errors", testErrors},
		{"WaitHonoursContext", testWaitHonoursContext},
		{"Address", testAddress},
		{"Resources", testResources},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, h) })
	}
}

// Sh is a command that runs script with /bin/sh.
func Sh(script string) []string { return []string{"/bin/sh", "-c", script} }

// Logs reads an instance's whole output.
func Logs(t testing.TB, rt runtime.Runtime, id string) string {
	t.Helper()
	var out []byte
	var off int64
	// Bounded: a runtime whose offsets never settle fails instead of
	// looping.
	for range 1000 {
		b, next, err := rt.Logs(id, off)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
		if next == off {
			break
		}
		off = next
	}
	return string(out)
}

// WaitLog polls until the output of id contains s and returns the
// output: the workload says when it is ready (a trap installed, a child
// started) instead of the test sleeping.
func WaitLog(t testing.TB, rt runtime.Runtime, id, s string) string {
	t.Helper()
	var out string
	Eventually(t, fmt.Sprintf("the output of %s to contain %q", id, s), func() (bool, string) {
		out = Logs(t, rt, id)
		return strings.Contains(out, s), fmt.Sprintf("%q", out)
	})
	return out
}

// Wait waits for the workload to exit and returns its status.
func Wait(t testing.TB, rt runtime.Runtime, id string) runtime.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	st, err := rt.Wait(ctx, id)
	if err != nil {
		t.Fatalf("%v; output %q", err, Logs(t, rt, id))
	}
	return st
}

// Exec starts a workload, waits for it and returns its status and output.
func Exec(t testing.TB, rt runtime.Runtime, s runtime.Spec) (runtime.Status, string) {
	t.Helper()
	if err := rt.Start(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	st := Wait(t, rt, s.InstanceID)
	return st, Logs(t, rt, s.InstanceID)
}

// Eventually polls cond until it holds, and fails the test after Timeout
// quoting what cond said last.
func Eventually(t testing.TB, what string, cond func() (ok bool, last string)) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s; last: %s", Timeout, what, last)
		}
		time.Sleep(delay)
	}
}

// markSeq numbers the marks of this process.
var markSeq atomic.Int64

// Mark returns a duration for sleep(1) that no other process on the host
// sleeps for, so that HostProcesses finds a workload's sleep by its
// command line: unique to this test process and call.
func Mark() string {
	return fmt.Sprintf("7%07d.%d5", os.Getpid()%10_000_000, markSeq.Add(1))
}

// HostProcesses returns the PIDs of the host's processes (but this one)
// whose command line holds every one of args as an argument of its own.
// A zombie, whose command line is empty, holds none.
func HostProcesses(args ...string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		parts := strings.Split(string(b), "\x00")
		all := true
		for _, a := range args {
			all = all && slices.Contains(parts, a)
		}
		if all {
			pids = append(pids, pid)
		}
	}
	return pids
}
