package containerd

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
)

// BenchmarkRuntimes measures, for the process runtime and the container
// runtime in one run (the image already on the host):
//
//   - start: Start called → Start returned (the agent reports running);
//   - ready: Start called → the workload's first output is in its log;
//   - stop: Stop called → Stop returned with no process of the instance
//     left on the host (a workload with the default SIGTERM disposition);
//   - stop-ignoring-TERM: the same for a workload that ignores SIGTERM,
//     with a grace period of 1 s (so at least 1 s).
//
// Each is reported as p50 and p99 in milliseconds over b.N instances:
//
//	go test -run '^$' -bench Runtimes -benchtime 40x ./agent/runtime/containerd/
func BenchmarkRuntimes(b *testing.B) {
	need(b)
	runtimes := []struct {
		name string
		new  func(b *testing.B) runtime.Runtime
	}{
		{"process", func(b *testing.B) runtime.Runtime {
			rt := process.New(b.TempDir())
			b.Cleanup(func() { _ = rt.StopAll(context.Background()) })
			return rt
		}},
		{"containerd", func(b *testing.B) runtime.Runtime { return newRuntime(b) }},
	}
	for _, r := range runtimes {
		b.Run(r.name, func(b *testing.B) {
			rt := r.new(b)
			var start, ready, stop, stopKill []time.Duration
			for i := 0; b.Loop(); i++ {
				id := newID(b)
				mark := strconv.Itoa(800000+os.Getpid()%10000*10) + "." + strconv.Itoa(i+1)
				t0 := time.Now()
				if err := rt.Start(b.Context(), runtime.Spec{InstanceID: id, Grace: time.Second,
					Command: []string{"/bin/sh", "-c", "echo ready; exec sleep " + mark}}); err != nil {
					b.Fatal(err)
				}
				start = append(start, time.Since(t0))
				for range 10000 {
					if b, _, _ := rt.Logs(id, 0); strings.Contains(string(b), "ready") {
						break
					}
					time.Sleep(time.Millisecond)
				}
				ready = append(ready, time.Since(t0))
				stop = append(stop, stopGone(b, rt, id, mark))
				if i < 5 { // each costs the grace period
					id := newID(b)
					mark := mark + "1"
					if err := rt.Start(b.Context(), runtime.Spec{InstanceID: id, Grace: time.Second,
						Command: []string{"/bin/sh", "-c", "trap '' TERM; echo ready; sleep " + mark + "; sleep 1"}}); err != nil {
						b.Fatal(err)
					}
					for range 10000 {
						if b, _, _ := rt.Logs(id, 0); strings.Contains(string(b), "ready") && len(hostProcesses("sleep", mark)) > 0 {
							break
						}
						time.Sleep(time.Millisecond)
					}
					stopKill = append(stopKill, stopGone(b, rt, id, mark))
				}
			}
			for _, m := range []struct {
				name string
				d    []time.Duration
			}{{"start", start}, {"ready", ready}, {"stop", stop}, {"stop-ignoring-TERM", stopKill}} {
				b.ReportMetric(percentile(m.d, 50), m.name+"-p50-ms")
				b.ReportMetric(percentile(m.d, 99), m.name+"-p99-ms")
			}
		})
	}
}

// stopGone stops an instance and returns how long it took until Stop
// returned and no process sleeping for mark was left on the host.
func stopGone(b *testing.B, rt runtime.Runtime, id, mark string) time.Duration {
	t0 := time.Now()
	if err := rt.Stop(b.Context(), id); err != nil {
		b.Fatal(err)
	}
	for range 10000 {
		if len(hostProcesses("sleep", mark)) == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	d := time.Since(t0)
	if err := rt.Remove(id); err != nil {
		b.Fatal(err)
	}
	return d
}

// percentile is the p-th percentile of ds in milliseconds (nearest rank).
func percentile(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return float64(s[max(0, min(len(s)-1, i-1))].Microseconds()) / 1000
}
