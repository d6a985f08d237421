package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const nodeHeader = "sn,cpu_milli,memory_mib,gpu,model\n"

const podHeader11 = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"

const podHeader5 = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"

func TestParseNodesGood(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []TraceNode
	}{
		{
			name: "gpu and cpu nodes",
			in: nodeHeader +
				"openb-node-0000,64000,262144,2,P100\n" +
				"openb-node-0001,32000,262144,0,\n" +
				"openb-node-0002,96000,786432,8,G2\n",
			want: []TraceNode{
				{Name: "openb-node-0000", CPUMilli: 64000, MemoryMiB: 262144, GPUs: 2, Model: "P100", Line: 2},
				{Name: "openb-node-0001", CPUMilli: 32000, MemoryMiB: 262144, GPUs: 0, Model: "", Line: 3},
				{Name: "openb-node-0002", CPUMilli: 96000, MemoryMiB: 786432, GPUs: 8, Model: "G2", Line: 4},
			},
		},
		{
			name: "nan model, no trailing newline, CRLF, blank line",
			in:   "sn,cpu_milli,memory_mib,gpu,model\r\n\r\nn1,1000,2048,0,nan\r\nn2,1000,2048,1,T4",
			want: []TraceNode{
				{Name: "n1", CPUMilli: 1000, MemoryMiB: 2048, Model: "", Line: 3},
				{Name: "n2", CPUMilli: 1000, MemoryMiB: 2048, GPUs: 1, Model: "T4", Line: 4},
			},
		},
		{
			name: "reordered columns, extra column, BOM, upper-case header",
			in:   "\uFEFFModel,GPU,extra,SN,memory_mib,cpu_milli\nA10,1,x,n1,4096,8000\n",
			want: []TraceNode{
				{Name: "n1", CPUMilli: 8000, MemoryMiB: 4096, GPUs: 1, Model: "A10", Line: 2},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNodes(strings.NewReader(tc.in), "nodes.csv")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParsePodsGood(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []TracePod
	}{
		{
			name: "eleven columns",
			in: podHeader11 +
				"openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\n" +
				"openb-pod-0001,6000,12288,1,460,V100M16|V100M32|V100M32,BE,Pending,427061,12902960,\n" +
				"openb-pod-0002,88000,0,0,0,,Burstable,Succeeded,5,nan,7\n" +
				"openb-pod-0003,4000,1024,8,1000,G3,Guaranteed,Failed,9,10,9\n",
			want: []TracePod{
				{Name: "openb-pod-0000", CPUMilli: 12000, MemoryMiB: 16384, NumGPU: 1, GPUMilli: 1000,
					QoS: "LS", Phase: "Running", HasTimes: true, Creation: 0, Deletion: 12537496, Scheduled: 0, Line: 2},
				{Name: "openb-pod-0001", CPUMilli: 6000, MemoryMiB: 12288, NumGPU: 1, GPUMilli: 460, GPUSpec: []string{"V100M16", "V100M32"}, RepeatedSpec: "V100M16|V100M32|V100M32",
					QoS: "BE", Phase: "Pending", HasTimes: true, Creation: 427061, Deletion: 12902960, Scheduled: -1, Line: 3},
				{Name: "openb-pod-0002", CPUMilli: 88000, MemoryMiB: 0,
					QoS: "Burstable", Phase: "Succeeded", HasTimes: true, Creation: 5, Deletion: -1, Scheduled: 7, Line: 4},
				{Name: "openb-pod-0003", CPUMilli: 4000, MemoryMiB: 1024, NumGPU: 8, GPUMilli: 1000, GPUSpec: []string{"G3"},
					QoS: "Guaranteed", Phase: "Failed", HasTimes: true, Creation: 9, Deletion: 10, Scheduled: 9, Line: 5},
			},
		},
		{
			name: "five columns",
			in: podHeader5 +
				"openb-pod-0000,12000,16384,1,1000\n" +
				"openb-pod-0001,6000,12288,2,1000\n",
			want: []TracePod{
				{Name: "openb-pod-0000", CPUMilli: 12000, MemoryMiB: 16384, NumGPU: 1, GPUMilli: 1000, Deletion: -1, Scheduled: -1, Line: 2},
				{Name: "openb-pod-0001", CPUMilli: 6000, MemoryMiB: 12288, NumGPU: 2, GPUMilli: 1000, Deletion: -1, Scheduled: -1, Line: 3},
			},
		},
		{
			name: "reordered columns",
			in: "scheduled_time,gpu_milli,name,deletion_time,num_gpu,qos,memory_mib,creation_time,cpu_milli,pod_phase,gpu_spec\n" +
				"3,250,p1,4,1,LS,512,2,1500,Running,T4| A10 |\n",
			want: []TracePod{
				{Name: "p1", CPUMilli: 1500, MemoryMiB: 512, NumGPU: 1, GPUMilli: 250, GPUSpec: []string{"T4", "A10"},
					QoS: "LS", Phase: "Running", HasTimes: true, Creation: 2, Deletion: 4, Scheduled: 3, Line: 2},
			},
		},
		{
			name: "quoted fields and empty spec parts",
			in:   podHeader11 + `"p,1",100,200,1,1000,"|",LS,Running,1,2,3` + "\n",
			want: []TracePod{
				{Name: "p,1", CPUMilli: 100, MemoryMiB: 200, NumGPU: 1, GPUMilli: 1000,
					QoS: "LS", Phase: "Running", HasTimes: true, Creation: 1, Deletion: 2, Scheduled: 3, Line: 2},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePods(strings.NewReader(tc.in), "pods.csv")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestParseNodesErrors checks the whole message of every error, so the
// "source:line:" prefix and the wording cannot drift unnoticed.
func TestParseNodesErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "n.csv:1: no rows: the file is empty"},
		{"header only", nodeHeader, "n.csv:1: no rows after the header"},
		{"missing columns", "sn,cpu_milli,model\nn1,1,x\n",
			"n.csv:1: missing required column(s) memory_mib, gpu (header has sn,cpu_milli,model)"},
		{"duplicate column", "sn,cpu_milli,memory_mib,gpu,model,GPU\n", `n.csv:1: column "gpu" appears twice (columns 4 and 6)`},
		{"field count", nodeHeader + "n1,1,2,0,\nn2,1,2,0\n", "n.csv:3: row has 4 fields, header has 5"},
		{"bad quote", nodeHeader + "n1,1,2,0,\"x\n", `n.csv:2: extraneous or missing " in quoted-field`},
		{"not an integer", nodeHeader + "n1,abc,2,0,\n", `n.csv:2: cpu_milli: "abc" is not an integer`},
		{"float", nodeHeader + "n1,1,2.5,0,\n", `n.csv:2: memory_mib: "2.5" is not an integer`},
		{"overflow", nodeHeader + "n1,1,99999999999999999999,0,\n", `n.csv:2: memory_mib: "99999999999999999999" is out of range`},
		{"empty number", nodeHeader + "n1,,2,0,\n", "n.csv:2: cpu_milli: value is empty"},
		{"negative cpu", nodeHeader + "n1,-1,2,0,\n", "n.csv:2: cpu_milli: -1 is negative"},
		{"negative gpu", nodeHeader + "n1,1,2,-2,\n", "n.csv:2: gpu: -2 is negative"},
		{"too many gpus", nodeHeader + "n1,1,2,5000,X\n", "n.csv:2: gpu: 5000 is out of range 0..1024"},
		{"gpu without model", nodeHeader + "n1,1,2,0,\nn2,1,2,4,nan\n", `n.csv:3: node "n2" has 4 GPUs but no model`},
		{"empty name", nodeHeader + " ,1,2,0,\n", "n.csv:2: sn: value is empty"},
		{"duplicate name", nodeHeader + "n1,1,2,0,\nn2,1,2,0,\nn1,1,2,0,\n", `n.csv:4: duplicate node name "n1" (first on line 2)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseNodes(strings.NewReader(tc.in), "n.csv")
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got %q\nwant %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestParsePodsErrors(t *testing.T) {
	const src = "openb_pod_list_x.csv"
	rows := 0
	row := func(num, milli string) string {
		rows++
		return fmt.Sprintf("p%d,100,200,%s,%s,,LS,Running,1,2,3\n", rows, num, milli)
	}
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", src + ":1: no rows: the file is empty"},
		{"header only", podHeader5, src + ":1: no rows after the header"},
		{"missing columns", "name,cpu_milli\n", src + ":1: missing required column(s) memory_mib, num_gpu, gpu_milli (header has name,cpu_milli)"},
		{"partial time columns", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\n",
			src + ":1: missing required column(s) deletion_time, scheduled_time (header has name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time)"},
		{"num_gpu not an integer", podHeader11 + row("1", "1000") + row("abc", "1000"), src + `:3: num_gpu: "abc" is not an integer`},
		{"negative num_gpu", podHeader11 + row("-1", "1000"), src + ":2: num_gpu: -1 is negative"},
		{"num_gpu too large", podHeader11 + row("65", "1000"), src + ":2: num_gpu: 65 is out of range 0..64"},
		{"gpu_milli too large", podHeader11 + row("1", "1001"), src + ":2: gpu_milli: 1001 is out of range 0..1000"},
		{"negative gpu_milli", podHeader11 + row("1", "-5"), src + ":2: gpu_milli: -5 is negative"},
		{"milli without gpus", podHeader11 + row("0", "500"), src + ":2: gpu_milli is 500 but num_gpu is 0"},
		{"gpus without milli", podHeader11 + row("2", "0"), src + ":2: gpu_milli is 0 but num_gpu is 2"},
		{"shared multi-gpu", podHeader11 + row("2", "500"), src + ":2: gpu_milli is 500 but a 2-GPU pod must use whole GPUs (1000)"},
		{"negative memory", podHeader5 + "p1,1,-2,0,0\n", src + ":2: memory_mib: -2 is negative"},
		{"empty creation", podHeader11 + "p1,100,200,0,0,,LS,Running,,2,3\n", src + ":2: creation_time: value is empty"},
		{"bad deletion", podHeader11 + "p1,100,200,0,0,,LS,Running,1,x,3\n", src + `:2: deletion_time: "x" is not an integer`},
		{"negative scheduled", podHeader11 + "p1,100,200,0,0,,LS,Running,1,2,-3\n", src + ":2: scheduled_time: -3 is negative"},
		{"duplicate pod", podHeader5 + "p1,1,2,0,0\np1,1,2,0,0\n", src + `:3: duplicate pod name "p1" (first on line 2)`},
		{"line after multi-line field", podHeader5 + "\"p\n1\",1,2,0,0\np2,1,x,0,0\n", src + `:4: memory_mib: "x" is not an integer`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePods(strings.NewReader(tc.in), src)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got %q\nwant %q", err, tc.want)
			}
		})
	}
}

func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	nodes := filepath.Join(dir, "nodes.csv")
	pods := filepath.Join(dir, "pods.csv")
	if err := os.WriteFile(nodes, []byte(nodeHeader+"n1,1,2,1,T4\nn2,1,2,x,T4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pods, []byte(podHeader5+"p1,1,2,1,500\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	_, err := ReadNodes(nodes)
	if want := nodes + `:3: gpu: "x" is not an integer`; err == nil || err.Error() != want {
		t.Errorf("ReadNodes error %v, want %q", err, want)
	}
	got, err := ReadPods(pods)
	if err != nil || len(got) != 1 || got[0].GPUMilli != 500 || got[0].HasTimes {
		t.Errorf("ReadPods = %+v, %v", got, err)
	}

	missing := filepath.Join(dir, "nope.csv")
	for _, read := range []func(string) error{
		func(p string) error { _, err := ReadNodes(p); return err },
		func(p string) error { _, err := ReadPods(p); return err },
	} {
		err := read(missing)
		if err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("missing file: got %v, want a wrapped fs.ErrNotExist naming %s", err, missing)
		}
	}
}

// TestSpecInterned documents that identical gpu_spec values share one slice,
// which is why callers must not modify TracePod.GPUSpec.
func TestSpecInterned(t *testing.T) {
	in := podHeader11 +
		"p1,1,2,1,1000,T4|P100,LS,Running,1,2,3\n" +
		"p2,1,2,1,1000,T4|P100,LS,Running,1,2,3\n"
	pods, err := ParsePods(strings.NewReader(in), "x")
	if err != nil {
		t.Fatal(err)
	}
	if &pods[0].GPUSpec[0] != &pods[1].GPUSpec[0] {
		t.Error("equal gpu_spec values were split twice")
	}
}

// syntheticPods builds a pod list shaped like the real trace.
func syntheticPods(n int) string {
	var b strings.Builder
	b.WriteString(podHeader11)
	for i := 0; i < n; i++ {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "openb-pod-%04d,12000,16384,1,1000,,LS,Running,%d,12537496,%d\n", i, i*100, i*100)
		case 1:
			fmt.Fprintf(&b, "openb-pod-%04d,6000,12288,1,460,V100M16|V100M32,BE,Pending,%d,12902960,\n", i, i*100)
		case 2:
			fmt.Fprintf(&b, "openb-pod-%04d,88000,0,0,0,,Burstable,Succeeded,%d,12902960,%d\n", i, i*100, i*100)
		default:
			fmt.Fprintf(&b, "openb-pod-%04d,32000,65536,8,1000,G2,LS,Running,%d,12902960,%d\n", i, i*100, i*100)
		}
	}
	return b.String()
}

func BenchmarkParsePods10k(b *testing.B) {
	in := syntheticPods(10000)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParsePods(strings.NewReader(in), "bench"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRealTrace parses the shared trace files when they are present, which
// they are on developer machines but not necessarily in CI.
func TestRealTrace(t *testing.T) {
	dir := os.Getenv("GPUCLOUD_OPENB_DIR")
	if dir == "" {
		dir = "../../shared/traces/alibaba-gpu-v2023"
	}
	files, _ := filepath.Glob(filepath.Join(dir, "openb_*_list_*.csv"))
	if len(files) == 0 {
		t.Skip("trace not found; set GPUCLOUD_OPENB_DIR")
	}
	for _, f := range files {
		var n int
		var err error
		if strings.Contains(filepath.Base(f), "node_list") {
			var nodes []TraceNode
			nodes, err = ReadNodes(f)
			n = len(nodes)
		} else {
			var pods []TracePod
			pods, err = ReadPods(f)
			n = len(pods)
		}
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		t.Logf("%s: %d rows", filepath.Base(f), n)
	}
}
