package sim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpucloud/gpucloud/placement"
)

// openbDir finds the openb trace: $GPUCLOUD_OPENB_DIR, or the shared folder
// next to the project. Benchmarks skip when it is absent; the trace is
// benchmark input and is never part of the repository.
func openbDir(tb testing.TB) string {
	dir := os.Getenv("GPUCLOUD_OPENB_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "traces", "alibaba-gpu-v2023")
	}
	if _, err := os.Stat(filepath.Join(dir, "openb_node_list_gpu_node.csv")); err != nil {
		tb.Skip("openb trace not found; set GPUCLOUD_OPENB_DIR")
	}
	return dir
}

func loadOpenb(tb testing.TB, pods string) *Trace {
	dir := openbDir(tb)
	nodes, err := ReadNodes(filepath.Join(dir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		tb.Fatal(err)
	}
	ps, err := ReadPods(filepath.Join(dir, "openb_pod_list_"+pods+".csv"))
	if err != nil {
		tb.Fatal(err)
	}
	t, err := NewTrace(pods, nodes, ps, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// BenchmarkReplayOpenb replays one seed of the openb default trace (about
// 10,600 arrivals on 1,213 hosts) per iteration, per policy. The reference
// simulator takes about 28 minutes for the same replay with FGD.
func BenchmarkReplayOpenb(b *testing.B) {
	t := loadOpenb(b, "default")
	for _, policy := range []string{placement.DefaultPolicy, "fgd", "bestfit"} {
		b.Run("policy="+policy, func(b *testing.B) {
			var run *Run
			for i := 0; i < b.N; i++ {
				var err error
				if run, err = t.Replay(policy, 42, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(run.Arrivals), "arrivals")
			b.ReportMetric(run.Unalloc100, "unalloc%")
		})
	}
}
