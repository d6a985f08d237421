package sim

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestSyntheticTraceDeterministic(t *testing.T) {
	n1, p1 := SyntheticTrace(30, 7)
	n2, p2 := SyntheticTrace(30, 7)
	if !reflect.DeepEqual(n1, n2) || !reflect.DeepEqual(p1, p2) {
		t.Fatal("same hosts and seed gave different traces")
	}
	_, p3 := SyntheticTrace(30, 8)
	if reflect.DeepEqual(p1, p3) {
		t.Fatal("different seeds gave the same pods")
	}
	if n, p := SyntheticTrace(0, 1); n != nil || p != nil {
		t.Fatalf("0 hosts: got %d nodes, %d pods", len(n), len(p))
	}
}

func TestSyntheticTraceShape(t *testing.T) {
	nodes, pods := SyntheticTrace(200, 1)
	if len(nodes) != 200 {
		t.Fatalf("got %d nodes, want 200", len(nodes))
	}
	models := map[string]int{}
	gpusOf := map[string]int{}
	for _, n := range nodes {
		models[n.Model]++
		gpusOf[n.Model] = n.GPUs
	}
	want := map[string]int{"G2": 90, "T4": 64, "P100": 30, "V100M32": 16}
	if !reflect.DeepEqual(models, want) {
		t.Errorf("model counts %v, want %v", models, want)
	}
	if gpusOf["G2"] != 8 || gpusOf["V100M32"] != 8 || gpusOf["T4"] != 2 || gpusOf["P100"] != 2 {
		t.Errorf("GPUs per model %v", gpusOf)
	}

	var cpuOnly, shares, whole1, multi, spec, forever int
	names := map[string]bool{}
	for _, p := range pods {
		if names[p.Name] {
			t.Fatalf("duplicate pod %s", p.Name)
		}
		names[p.Name] = true
		switch {
		case p.NumGPU == 0:
			cpuOnly++
			if p.GPUMilli != 0 {
				t.Errorf("%s: cpu-only pod with gpu_milli %d", p.Name, p.GPUMilli)
			}
		case p.NumGPU == 1 && p.GPUMilli < 1000:
			shares++
			if p.GPUMilli < 100 || p.GPUMilli > 900 {
				t.Errorf("%s: share %d outside 100..900", p.Name, p.GPUMilli)
			}
		case p.NumGPU == 1:
			whole1++
		default:
			multi++
			if p.GPUMilli != 1000 || (p.NumGPU != 2 && p.NumGPU != 4 && p.NumGPU != 8) {
				t.Errorf("%s: %d GPUs at %d milli", p.Name, p.NumGPU, p.GPUMilli)
			}
		}
		for _, m := range p.GPUSpec {
			if gpusOf[m] < p.NumGPU {
				t.Errorf("%s: gpu_spec %v cannot hold %d GPUs", p.Name, p.GPUSpec, p.NumGPU)
			}
		}
		if len(p.GPUSpec) > 0 {
			spec++
		}
		if !p.HasTimes || p.Creation < 0 {
			t.Errorf("%s: bad times %+v", p.Name, p)
		}
		if p.Deletion < 0 {
			forever++
		} else if p.Deletion <= p.Creation {
			t.Errorf("%s: deletion %d not after creation %d", p.Name, p.Deletion, p.Creation)
		}
	}
	n := len(pods)
	t.Logf("%d pods: cpu %d, shares %d, whole1 %d, multi %d, spec %d, never leave %d", n, cpuOnly, shares, whole1, multi, spec, forever)
	for _, c := range []struct {
		name   string
		got    int
		lo, hi float64
	}{
		{"cpu-only", cpuOnly, 0.08, 0.18},
		{"shares", shares, 0.30, 0.44},
		{"whole 1-GPU", whole1, 0.40, 0.56},
		{"multi-GPU", multi, 0.002, 0.04},
		{"gpu_spec", spec, 0.04, 0.16},
		{"never leave", forever, 0.04, 0.12},
	} {
		if f := float64(c.got) / float64(n); f < c.lo || f > c.hi {
			t.Errorf("%s: %.3f of pods, want %.3f..%.3f", c.name, f, c.lo, c.hi)
		}
	}
	if _, err := NewTrace("syn", nodes, pods, nil); err != nil {
		t.Fatal(err)
	}
}

// TestSyntheticTraceRoundTrip writes the trace as openb CSV and reads it
// back: the rows must be valid for the readers, line numbers included.
func TestSyntheticTraceRoundTrip(t *testing.T) {
	nodes, pods := SyntheticTrace(12, 3)
	var nb, pb strings.Builder
	nb.WriteString("sn,cpu_milli,memory_mib,gpu,model\n")
	for _, n := range nodes {
		fmt.Fprintf(&nb, "%s,%d,%d,%d,%s\n", n.Name, n.CPUMilli, n.MemoryMiB, n.GPUs, n.Model)
	}
	pb.WriteString("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n")
	opt := func(v int64) string {
		if v < 0 {
			return ""
		}
		return fmt.Sprint(v)
	}
	for _, p := range pods {
		fmt.Fprintf(&pb, "%s,%d,%d,%d,%d,%s,%s,%s,%d,%s,%s\n", p.Name, p.CPUMilli, p.MemoryMiB, p.NumGPU, p.GPUMilli,
			strings.Join(p.GPUSpec, "|"), p.QoS, p.Phase, p.Creation, opt(p.Deletion), opt(p.Scheduled))
	}
	gotNodes, err := ParseNodes(strings.NewReader(nb.String()), "nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	gotPods, err := ParsePods(strings.NewReader(pb.String()), "pods.csv")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotNodes, nodes) {
		t.Errorf("nodes differ after a CSV round trip")
	}
	if !reflect.DeepEqual(gotPods, pods) {
		for i := range pods {
			if !reflect.DeepEqual(gotPods[i], pods[i]) {
				t.Fatalf("pod %d differs after a CSV round trip:\n got %+v\nwant %+v", i, gotPods[i], pods[i])
			}
		}
	}
}
