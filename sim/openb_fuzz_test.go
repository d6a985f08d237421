package sim

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
)

// addTraceHeads seeds f with the header and first rows of each openb file
// whose name matches glob, when the trace is present (GPUCLOUD_OPENB_DIR,
// or the shared folder next to the project; it is never part of the
// repository).
func addTraceHeads(f *testing.F, glob string, rows int) {
	dir := os.Getenv("GPUCLOUD_OPENB_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "traces", "alibaba-gpu-v2023")
	}
	files, _ := filepath.Glob(filepath.Join(dir, glob))
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			continue
		}
		var b strings.Builder
		sc := bufio.NewScanner(fh)
		for i := 0; i <= rows && sc.Scan(); i++ {
			b.WriteString(sc.Text() + "\n")
		}
		fh.Close()
		f.Add(b.String())
	}
}

// FuzzParseNodes reads openb node lists (ParseNodes). A list it refuses
// gets an error that names the source; a list it accepts has rows the
// format allows (unique, trimmed, non-empty names; counts in range; a
// model for every GPU node), reads back the same when written again, and
// gives hosts the fleet takes (NewTrace and Trace.Fleet) whenever the
// catalog knows its models.
func FuzzParseNodes(f *testing.F) {
	f.Add(nodeHeader + "openb-node-0000,64000,262144,2,P100\nopenb-node-0001,32000,262144,0,\nopenb-node-0002,96000,786432,8,G2\n")
	f.Add("sn,cpu_milli,memory_mib,gpu,model\r\n\r\nn1,1000,2048,0,nan\r\nn2,1000,2048,1,T4")
	f.Add("\uFEFFModel,GPU,extra,SN,memory_mib,cpu_milli\nA10,1,x,n1,4096,8000\n")
	f.Add(nodeHeader + "n1,1,1,1,\n")
	f.Add(nodeHeader + "n1,1,1,1025,A10\n")
	f.Add(nodeHeader + "n1,1,1,0,\nn1,1,1,0,\n")
	f.Add(nodeHeader + "\" n1 \",-1,1,0,\n")
	f.Add(nodeHeader + "n1,1,1,1,\"V100M16\"\"\"\n")
	f.Add("sn,sn,cpu_milli\n")
	f.Add("")
	addTraceHeads(f, "openb_node_list_*.csv", 20)
	cat := catalog.Default()
	f.Fuzz(func(t *testing.T, in string) {
		nodes, err := ParseNodes(strings.NewReader(in), "fuzz.csv")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.csv:") {
				t.Fatalf("error %q does not name the source and line", err)
			}
			return
		}
		if len(nodes) == 0 {
			t.Fatal("accepted a list without nodes")
		}
		seen := map[string]bool{}
		for i, n := range nodes {
			switch {
			case n.Name == "" || n.Name != strings.TrimSpace(n.Name) || seen[n.Name]:
				t.Fatalf("node %d: name %q", i, n.Name)
			case n.CPUMilli < 0 || n.MemoryMiB < 0 || n.GPUs < 0 || n.GPUs > maxNodeGPUs:
				t.Fatalf("node %d: %+v", i, n)
			case n.GPUs > 0 && n.Model == "", n.Model != strings.TrimSpace(n.Model), isNaN(n.Model):
				t.Fatalf("node %d: model %q with %d GPUs", i, n.Model, n.GPUs)
			case i > 0 && n.Line <= nodes[i-1].Line, n.Line < 2:
				t.Fatalf("node %d: line %d", i, n.Line)
			}
			seen[n.Name] = true
		}

		var b bytes.Buffer
		w := csv.NewWriter(&b)
		w.Write(nodeColumns)
		for _, n := range nodes {
			w.Write([]string{n.Name, itoa(n.CPUMilli), itoa(n.MemoryMiB), strconv.Itoa(n.GPUs), n.Model})
		}
		w.Flush()
		back, err := ParseNodes(&b, "back.csv")
		if err != nil {
			t.Fatalf("the nodes of %q, written back, do not load: %v", in, err)
		}
		if !reflect.DeepEqual(withoutLines(back), withoutLines(nodes)) {
			t.Fatalf("the nodes of %q read back differently:\n%+v\n%+v", in, nodes, back)
		}

		tr, err := NewTrace("fuzz", nodes, nil, cat)
		if err != nil {
			return // a model the catalog does not know
		}
		if _, err := tr.Fleet(); err != nil {
			t.Fatalf("the nodes of %q make no fleet: %v", in, err)
		}
	})
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func withoutLines[T TraceNode | TracePod](rows []T) []T {
	out := make([]T, len(rows))
	for i, r := range rows {
		switch r := any(&r).(type) {
		case *TraceNode:
			r.Line = 0
		case *TracePod:
			r.Line = 0
		}
		out[i] = r
	}
	return out
}

// FuzzParsePods reads openb pod lists (ParsePods), with and without the
// time columns. A list it refuses gets an error that names the source; a
// list it accepts has rows the format allows (unique names; GPU counts and
// shares that go together: none, a share of one GPU, or whole GPUs;
// gpu_spec without empty or repeated models; times present or -1 as the
// columns say), reads back the same when written again, and maps to
// placement requests that the engine's validation accepts whenever the
// catalog knows their models.
func FuzzParsePods(f *testing.F) {
	f.Add(podHeader11 +
		"openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\n" +
		"openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061\n" +
		"openb-pod-0009,12000,16384,1,1000,V100M16|V100M32,LS,Running,4975773,12902960,4975773\n" +
		"openb-pod-0021,8000,30517,1,440,G2|P100|T4|V100M16|V100M32,LS,Running,9671707,12902960,9671708\n" +
		"openb-pod-0061,11908,47104,1,1000,,BE,Pending,10001278,10001403,\n")
	f.Add(podHeader5 + "openb-pod-0000,12000,16384,1,1000\nopenb-pod-0001,6000,12288,8,1000\nopenb-pod-0002,4000,8192,0,0\n")
	f.Add(podHeader11 + "p,1,1,2,500,,LS,Running,0,,\n")
	f.Add(podHeader11 + "p,1,1,1,1,V100M16|V100M16| |nan,LS,Running,0,nan,\n")
	f.Add(podHeader5 + "p,1,1,0,1\n")
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\np,1,1,0,0,0\n")
	f.Add(podHeader11 + "p,1,1,65,1000,,,,0,,\n")
	addTraceHeads(f, "openb_pod_list_*.csv", 20)
	cat := catalog.Default()
	f.Fuzz(func(t *testing.T, in string) {
		pods, err := ParsePods(strings.NewReader(in), "fuzz.csv")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.csv:") {
				t.Fatalf("error %q does not name the source and line", err)
			}
			return
		}
		if len(pods) == 0 {
			t.Fatal("accepted a list without pods")
		}
		seen := map[string]bool{}
		for i, p := range pods {
			switch {
			case p.Name == "" || p.Name != strings.TrimSpace(p.Name) || seen[p.Name]:
				t.Fatalf("pod %d: name %q", i, p.Name)
			case p.CPUMilli < 0 || p.MemoryMiB < 0 || p.NumGPU < 0 || p.NumGPU > maxPodGPUs:
				t.Fatalf("pod %d: %+v", i, p)
			case (p.NumGPU == 0) != (p.GPUMilli == 0), p.GPUMilli < 0 || p.GPUMilli > fullGPUMilli,
				p.NumGPU > 1 && p.GPUMilli != fullGPUMilli:
				t.Fatalf("pod %d: %d GPUs of %d milli", i, p.NumGPU, p.GPUMilli)
			case p.HasTimes != pods[0].HasTimes,
				p.HasTimes && (p.Creation < 0 || p.Deletion < -1 || p.Scheduled < -1),
				!p.HasTimes && (p.Creation != 0 || p.Deletion != -1 || p.Scheduled != -1):
				t.Fatalf("pod %d: times %+v", i, p)
			case i > 0 && p.Line <= pods[i-1].Line, p.Line < 2:
				t.Fatalf("pod %d: line %d", i, p.Line)
			}
			for j, m := range p.GPUSpec {
				if m == "" || m != strings.TrimSpace(m) || isNaN(m) || strings.Contains(m, "|") || slices.Contains(p.GPUSpec[:j], m) {
					t.Fatalf("pod %d: gpu_spec %q", i, p.GPUSpec)
				}
			}
			seen[p.Name] = true
		}

		var b bytes.Buffer
		w := csv.NewWriter(&b)
		header := podColumns
		if pods[0].HasTimes {
			header = strings.Split(strings.TrimSpace(podHeader11), ",")
		} else {
			header = append(header[:len(header):len(header)], "gpu_spec", "qos", "pod_phase")
		}
		w.Write(header)
		for _, p := range pods {
			spec := strings.Join(p.GPUSpec, "|")
			if p.RepeatedSpec != "" {
				spec = p.RepeatedSpec
			}
			row := []string{p.Name, itoa(p.CPUMilli), itoa(p.MemoryMiB), strconv.Itoa(p.NumGPU), strconv.Itoa(p.GPUMilli),
				spec, p.QoS, p.Phase}
			if p.HasTimes {
				row = append(row, itoa(p.Creation), optionalTime(p.Deletion), optionalTime(p.Scheduled))
			}
			w.Write(row)
		}
		w.Flush()
		back, err := ParsePods(&b, "back.csv")
		if err != nil {
			t.Fatalf("the pods of %q, written back, do not load: %v\n%s", in, err, b.String())
		}
		if !reflect.DeepEqual(withoutLines(back), withoutLines(pods)) {
			t.Fatalf("the pods of %q read back differently:\n%+v\n%+v", in, pods, back)
		}

		for _, p := range pods {
			r, err := PodRequest(p, cat)
			if err != nil {
				continue // a model the catalog does not know
			}
			if err := r.Validate(cat); err != nil {
				t.Fatalf("pod %+v maps to request %+v, which the engine refuses: %v", p, r, err)
			}
		}
	})
}

func optionalTime(v int64) string {
	if v < 0 {
		return ""
	}
	return itoa(v)
}
