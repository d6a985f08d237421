package exporter_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/exporter"
	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/dashboards"
	"github.com/gpucloud/gpucloud/fleet"
)

// series is one sample of the text exposition.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	lineRE  = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrape fetches /metrics from h and parses its samples.
func scrape(t *testing.T, h http.Handler) ([]series, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	body := rec.Body.String()
	var out []series
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := lineRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unparsed line %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		s := series{name: m[1], labels: map[string]string{}, value: v}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			s.labels[l[1]] = l[2]
		}
		out = append(out, s)
	}
	return out, body
}

// find returns the series of name whose labels include want; it fails
// unless there is exactly one.
func find(t *testing.T, all []series, name string, want map[string]string) series {
	t.Helper()
	var got []series
	for _, s := range all {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range want {
			if s.labels[k] != v {
				ok = false
			}
		}
		if ok {
			got = append(got, s)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%s%v: %d series, want 1: %+v", name, want, len(got), got)
	}
	return got[0]
}

func count(all []series, name string) int {
	n := 0
	for _, s := range all {
		if s.name == name {
			n++
		}
	}
	return n
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newHost(t *testing.T, mig bool) *sim.Host {
	t.Helper()
	h, err := sim.New(sim.Spec{ID: "sim-h1", GPUs: sim.GPUSpec{Model: "H100", Count: 3, MIG: mig}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestCollectorWholeAndSharedGPUs(t *testing.T) {
	h := newHost(t, false)
	u0, u1, u2 := sim.GPUUUID("sim-h1", 0), sim.GPUUUID("sim-h1", 1), sim.GPUUUID("sim-h1", 2)
	assignments := []agentapi.Assignment{
		{InstanceID: "i-a", TenantID: "t1", Placement: &fleet.Placement{ID: "i-a", Devices: []fleet.Device{{GPU: 0, UUID: u0, Kind: fleet.Whole}}}},
		{InstanceID: "i-c", TenantID: "t2", Placement: &fleet.Placement{ID: "i-c", Devices: []fleet.Device{{GPU: 1, UUID: u1, Kind: fleet.Share, Milli: 500}}}},
		{InstanceID: "i-b", TenantID: "t1", Placement: &fleet.Placement{ID: "i-b", Devices: []fleet.Device{{GPU: 1, UUID: u1, Kind: fleet.Share, Milli: 500}}}},
		{InstanceID: "i-cpu", TenantID: "t3", Placement: &fleet.Placement{ID: "i-cpu", CPUMilli: 1000}},
	}
	c := exporter.New(exporter.Config{
		Driver: h, Hostname: "node-1", Log: quiet(),
		Assignments: func() []agentapi.Assignment { return assignments },
	})
	hd := exporter.Handler(c, quiet())
	if err := h.SetLoad(u0, 0.25); err != nil {
		t.Fatal(err)
	}
	for _, xid := range []int{79, 13, 79} {
		if err := h.InjectXID(2, xid); err != nil {
			t.Fatal(err)
		}
	}
	all, _ := scrape(t, hd)

	if s := find(t, all, "gpucloud_gpu_telemetry_up", nil); s.value != 1 {
		t.Errorf("up = %v", s.value)
	}
	g0 := find(t, all, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": "0"})
	want := map[string]string{"gpu": "0", "UUID": u0, "modelName": "H100-80GB-SXM", "Hostname": "node-1", "instance_id": "i-a", "tenant": "t1"}
	if len(g0.labels) != len(want) {
		t.Errorf("gpu 0 labels %v, want %v", g0.labels, want)
	}
	for k, v := range want {
		if g0.labels[k] != v {
			t.Errorf("gpu 0 label %s = %q, want %q", k, g0.labels[k], v)
		}
	}
	if g0.value != 25 {
		t.Errorf("DCGM_FI_DEV_GPU_UTIL gpu 0 = %v, want 25", g0.value)
	}
	r0 := find(t, all, "gpucloud_gpu_utilization_ratio", map[string]string{"gpu": "0"})
	wantSnake := map[string]string{"gpu": "0", "uuid": u0, "model_name": "H100-80GB-SXM", "hostname": "node-1", "instance_id": "i-a", "tenant": "t1"}
	if r0.value != 0.25 || len(r0.labels) != len(wantSnake) {
		t.Errorf("utilization ratio gpu 0: %+v, want 0.25 with %v", r0, wantSnake)
	}
	for k, v := range wantSnake {
		if r0.labels[k] != v {
			t.Errorf("gpucloud gpu 0 label %s = %q, want %q", k, r0.labels[k], v)
		}
	}
	const totalMiB = 80 * 1024
	if v := find(t, all, "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "0"}).value; v != totalMiB/4 {
		t.Errorf("FB used %v MiB, want %v", v, totalMiB/4)
	}
	if v := find(t, all, "DCGM_FI_DEV_FB_FREE", map[string]string{"gpu": "0"}).value; v != totalMiB*3/4 {
		t.Errorf("FB free %v MiB", v)
	}
	if v := find(t, all, "gpucloud_gpu_memory_used_bytes", map[string]string{"gpu": "0"}).value; v != totalMiB/4<<20 {
		t.Errorf("memory used %v bytes", v)
	}
	idleW, maxW, idleMHz, maxMHz, idleC, maxC := sim.Envelope("H100-80GB-SXM")
	if v := find(t, all, "DCGM_FI_DEV_POWER_USAGE", map[string]string{"gpu": "0"}).value; v != idleW+(maxW-idleW)/4 {
		t.Errorf("power %v W", v)
	}
	if v := find(t, all, "gpucloud_gpu_power_watts", map[string]string{"gpu": "2"}).value; v != idleW {
		t.Errorf("idle power %v W", v)
	}
	if v := find(t, all, "DCGM_FI_DEV_SM_CLOCK", map[string]string{"gpu": "0"}).value; v != idleMHz+(maxMHz-idleMHz)/4 {
		t.Errorf("SM clock %v MHz", v)
	}
	if v := find(t, all, "gpucloud_gpu_sm_clock_hertz", map[string]string{"gpu": "2"}).value; v != idleMHz*1e6 {
		t.Errorf("idle SM clock %v Hz", v)
	}
	if v := find(t, all, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "0"}).value; v != idleC+(maxC-idleC)/4 {
		t.Errorf("temperature %v C", v)
	}
	if v := find(t, all, "gpucloud_gpu_temperature_celsius", map[string]string{"gpu": "0"}).value; v != idleC+(maxC-idleC)/4 {
		t.Errorf("temperature %v C", v)
	}
	// XIDs: one series per GPU and code seen, none for a GPU without.
	if v := find(t, all, "gpucloud_gpu_xid_errors_total", map[string]string{"gpu": "2", "xid": "79", "uuid": u2}).value; v != 2 {
		t.Errorf("XID 79 of gpu 2: %v, want 2", v)
	}
	if v := find(t, all, "gpucloud_gpu_xid_errors_total", map[string]string{"gpu": "2", "xid": "13"}).value; v != 1 {
		t.Errorf("XID 13 of gpu 2: %v, want 1", v)
	}
	if n := count(all, "gpucloud_gpu_xid_errors_total"); n != 2 {
		t.Errorf("%d XID series, want 2 (gpu 2's codes)", n)
	}

	// A shared GPU is one series naming all its instances and tenants.
	g1 := find(t, all, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": "1"})
	if g1.labels["instance_id"] != "i-b,i-c" || g1.labels["tenant"] != "t1,t2" {
		t.Errorf("shared gpu 1 labels %v", g1.labels)
	}
	// A free GPU carries neither label, on any metric.
	for _, s := range all {
		if s.labels["gpu"] != "2" {
			continue
		}
		if _, ok := s.labels["instance_id"]; ok {
			t.Errorf("free gpu 2: %s %v", s.name, s.labels)
		}
		if _, ok := s.labels["tenant"]; ok {
			t.Errorf("free gpu 2: %s %v", s.name, s.labels)
		}
		if s.labels["UUID"]+s.labels["uuid"] != u2 {
			t.Errorf("gpu 2 UUID %v", s.labels)
		}
	}
	for _, name := range []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_SM_CLOCK",
		"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "gpucloud_gpu_utilization_ratio", "gpucloud_gpu_memory_used_bytes",
		"gpucloud_gpu_memory_free_bytes", "gpucloud_gpu_sm_clock_hertz", "gpucloud_gpu_power_watts",
		"gpucloud_gpu_temperature_celsius"} {
		if n := count(all, name); n != 3 {
			t.Errorf("%s: %d series, want one per GPU", name, n)
		}
	}
	if n := count(all, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"); n != 0 {
		t.Errorf("no MIG instances, yet %d GR_ENGINE_ACTIVE series", n)
	}

	// Values follow the load at each scrape, and labels the assignments.
	if err := h.SetLoad(u0, 0.9); err != nil {
		t.Fatal(err)
	}
	assignments = assignments[1:]
	all, _ = scrape(t, hd)
	g0 = find(t, all, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": "0"})
	if g0.value != 90 {
		t.Errorf("after the load changed: %v, want 90", g0.value)
	}
	if _, ok := g0.labels["instance_id"]; ok {
		t.Errorf("gpu 0 released, still labelled: %v", g0.labels)
	}
}

func TestCollectorMIG(t *testing.T) {
	h := newHost(t, true)
	ctx := context.Background()
	big, err := h.CreateMIG(ctx, 0, 9, 0) // 3g.40gb
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.CreateMIG(ctx, 0, 19, 6); err != nil { // 1g.10gb
		t.Fatal(err)
	}
	if err := h.SetLoad(big.UUID, 0.6); err != nil {
		t.Fatal(err)
	}
	assignments := []agentapi.Assignment{{InstanceID: "i-m", TenantID: "t9", Placement: &fleet.Placement{ID: "i-m", Devices: []fleet.Device{
		{GPU: 0, Kind: fleet.MIGSlice, MIGProfileID: 9, MIGProfile: "3g.40gb", MIGStart: 0, MIGSlots: 4, MIGSlices: 3},
	}}}}
	c := exporter.New(exporter.Config{Driver: h, Hostname: "node-2", Log: quiet(),
		Assignments: func() []agentapi.Assignment { return assignments }})
	all, _ := scrape(t, exporter.Handler(c, quiet()))

	s := find(t, all, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", map[string]string{"gpu": "0", "GPU_I_ID": "0"})
	if s.value != 0.6 || s.labels["GPU_I_PROFILE"] != "3g.40gb" || s.labels["instance_id"] != "i-m" || s.labels["tenant"] != "t9" ||
		s.labels["UUID"] != sim.GPUUUID("sim-h1", 0) || s.labels["Hostname"] != "node-2" {
		t.Errorf("3g slice: %+v", s)
	}
	m := find(t, all, "gpucloud_gpu_mig_utilization_ratio", map[string]string{"gpu": "0", "mig_instance": "0"})
	if m.value != 0.6 || m.labels["mig_profile"] != "3g.40gb" || m.labels["uuid"] != sim.GPUUUID("sim-h1", 0) ||
		m.labels["model_name"] != "H100-80GB-SXM" || m.labels["hostname"] != "node-2" || m.labels["instance_id"] != "i-m" || m.labels["tenant"] != "t9" {
		t.Errorf("mig utilization: %+v", m)
	}
	free := find(t, all, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", map[string]string{"gpu": "0", "GPU_I_ID": "6"})
	if free.value != 0 || free.labels["GPU_I_PROFILE"] != "1g.10gb" {
		t.Errorf("1g slice: %+v", free)
	}
	if _, ok := free.labels["instance_id"]; ok {
		t.Errorf("unallocated slice labelled: %v", free.labels)
	}
	// A GPU in MIG mode has no utilization of its own; its power is the
	// GPU's and names the instances on it.
	if n := count(all, "DCGM_FI_DEV_GPU_UTIL"); n != 0 {
		t.Errorf("%d DCGM_FI_DEV_GPU_UTIL series on MIG GPUs", n)
	}
	p := find(t, all, "DCGM_FI_DEV_POWER_USAGE", map[string]string{"gpu": "0"})
	if p.labels["instance_id"] != "i-m" {
		t.Errorf("MIG GPU power labels %v", p.labels)
	}
	if _, ok := find(t, all, "DCGM_FI_DEV_POWER_USAGE", map[string]string{"gpu": "1"}).labels["instance_id"]; ok {
		t.Error("idle MIG GPU 1 labelled")
	}
}

// workloads is a runtime's reading of its workloads: what each running
// one uses.
type workloads map[string]runtime.Resources

func (w workloads) Resources(id string) (runtime.Resources, bool) {
	r, ok := w[id]
	return r, ok
}

// TestCollectorInstances: each assigned instance whose workload runs has
// its CPU time (a counter) and memory, labelled with the instance and its
// tenant; one whose workload does not run, or a workload of no assignment,
// has none.
func TestCollectorInstances(t *testing.T) {
	h := newHost(t, false)
	assignments := []agentapi.Assignment{
		{InstanceID: "i-a", TenantID: "t1", Placement: &fleet.Placement{ID: "i-a", Devices: []fleet.Device{{GPU: 0, Kind: fleet.Whole}}}},
		{InstanceID: "i-cpu", TenantID: "t3", Placement: &fleet.Placement{ID: "i-cpu", CPUMilli: 1000}},
		{InstanceID: "i-starting", TenantID: "t3", Placement: &fleet.Placement{ID: "i-starting", CPUMilli: 1000}},
	}
	w := workloads{"i-a": {CPUSeconds: 12.5, MemoryBytes: 3 << 30}, "i-cpu": {CPUSeconds: 0.25, MemoryBytes: 1 << 20},
		"i-gone": {CPUSeconds: 1, MemoryBytes: 1}}
	c := exporter.New(exporter.Config{Driver: h, Hostname: "node-1", Log: quiet(), Workloads: w,
		Assignments: func() []agentapi.Assignment { return assignments }})
	all, body := scrape(t, exporter.Handler(c, quiet()))
	for _, want := range []struct {
		name, id, tenant string
		value            float64
	}{
		{"gpucloud_instance_cpu_seconds_total", "i-a", "t1", 12.5},
		{"gpucloud_instance_memory_bytes", "i-a", "t1", 3 << 30},
		{"gpucloud_instance_cpu_seconds_total", "i-cpu", "t3", 0.25},
		{"gpucloud_instance_memory_bytes", "i-cpu", "t3", 1 << 20},
	} {
		s := find(t, all, want.name, map[string]string{"instance_id": want.id})
		if s.value != want.value || s.labels["tenant"] != want.tenant || len(s.labels) != 2 {
			t.Errorf("%s of %s: %+v, want %v with tenant %s only", want.name, want.id, s, want.value, want.tenant)
		}
	}
	if n := count(all, "gpucloud_instance_cpu_seconds_total"); n != 2 {
		t.Errorf("%d CPU series, want 2", n)
	}
	if !strings.Contains(body, "# TYPE gpucloud_instance_cpu_seconds_total counter") ||
		!strings.Contains(body, "# TYPE gpucloud_instance_memory_bytes gauge") {
		t.Errorf("types:\n%s", body)
	}
	// Still served when the GPUs cannot be read.
	h.Fail(sim.OpTelemetry, gpu.ErrUnavailable)
	all, _ = scrape(t, exporter.Handler(c, quiet()))
	if n := count(all, "gpucloud_instance_memory_bytes"); n != 2 {
		t.Errorf("%d memory series with the driver down, want 2", n)
	}
}

// partial is a driver that answers some readings only.
type partial struct{ gpu.Driver }

func (partial) Telemetry(context.Context) ([]gpu.Telemetry, error) {
	w := 55.5
	return []gpu.Telemetry{{Index: 0, UUID: "GPU-x", Model: "L4", PowerWatts: &w}}, nil
}

func TestCollectorLeavesUnknownOut(t *testing.T) {
	all, _ := scrape(t, exporter.Handler(exporter.New(exporter.Config{Driver: partial{}, Hostname: "n", Log: quiet()}), quiet()))
	var names []string
	for _, s := range all {
		if strings.HasPrefix(s.name, "DCGM_") || strings.HasPrefix(s.name, "gpucloud_gpu_") && s.name != "gpucloud_gpu_telemetry_up" {
			names = append(names, s.name)
		}
	}
	if strings.Join(names, " ") != "DCGM_FI_DEV_POWER_USAGE gpucloud_gpu_power_watts" {
		t.Errorf("series served: %v, want the power only", names)
	}
}

func TestCollectorDriverFailure(t *testing.T) {
	h := newHost(t, false)
	h.Fail(sim.OpTelemetry, gpu.ErrUnavailable)
	all, _ := scrape(t, exporter.Handler(exporter.New(exporter.Config{Driver: h, Log: quiet()}), quiet()))
	if s := find(t, all, "gpucloud_gpu_telemetry_up", nil); s.value != 0 {
		t.Errorf("up = %v, want 0", s.value)
	}
	if n := count(all, "DCGM_FI_DEV_POWER_USAGE"); n != 0 {
		t.Errorf("%d power series from a failed driver", n)
	}
}

// TestPromtoolCheckMetrics runs `promtool check metrics` over an
// exposition with every kind of series: whole, shared and free GPUs, MIG
// instances.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not on PATH; CI must have it")
		}
		t.Skip("promtool is not on PATH; install it (Prometheus) to lint the exposition. CI fails without it.")
	}
	for _, mig := range []bool{false, true} {
		h := newHost(t, mig)
		ctx := context.Background()
		var as []agentapi.Assignment
		if mig {
			in, err := h.CreateMIG(ctx, 1, 19, 0)
			if err != nil {
				t.Fatal(err)
			}
			_ = h.SetLoad(in.UUID, 0.5)
			as = append(as, agentapi.Assignment{InstanceID: "i-1", TenantID: "t1", Placement: &fleet.Placement{Devices: []fleet.Device{{GPU: 1, Kind: fleet.MIGSlice, MIGProfileID: 19, MIGStart: 0}}}})
		} else {
			_ = h.SetLoad(sim.GPUUUID("sim-h1", 0), 0.5)
			as = append(as,
				agentapi.Assignment{InstanceID: "i-1", TenantID: "t1", Placement: &fleet.Placement{Devices: []fleet.Device{{GPU: 0, Kind: fleet.Whole}}}},
				agentapi.Assignment{InstanceID: "i-2", TenantID: "t2", Placement: &fleet.Placement{Devices: []fleet.Device{{GPU: 1, Kind: fleet.Share, Milli: 250}}}},
				agentapi.Assignment{InstanceID: "i-3", TenantID: "t1", Placement: &fleet.Placement{Devices: []fleet.Device{{GPU: 1, Kind: fleet.Share, Milli: 250}}}})
		}
		if err := h.InjectXID(0, 79); err != nil {
			t.Fatal(err)
		}
		w := workloads{"i-1": {CPUSeconds: 3.5, MemoryBytes: 1 << 30}}
		c := exporter.New(exporter.Config{Driver: h, Hostname: "node-1", Log: quiet(), Workloads: w,
			Assignments: func() []agentapi.Assignment { return as }})
		_, body := scrape(t, exporter.Handler(c, quiet()))
		for _, n := range []string{"gpucloud_gpu_xid_errors_total", "gpucloud_instance_cpu_seconds_total", "gpucloud_instance_memory_bytes"} {
			if !strings.Contains(body, "# TYPE "+n+" ") {
				t.Errorf("the exposition checked lacks %s", n)
			}
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		// The DCGM exporter's label names (modelName) are not snake case,
		// and DCGM_* series keep them for its dashboards: that lint
		// finding, on those series, is the only one allowed.
		var problems []string
		for line := range strings.Lines(out.String()) {
			line = strings.TrimSpace(line)
			if line != "" && !dcgmCamelCase.MatchString(line) {
				problems = append(problems, line)
			}
		}
		var exit *exec.ExitError
		lintOnly := err == nil || errors.As(err, &exit) && exit.ExitCode() == 3
		if !lintOnly || len(problems) > 0 {
			t.Errorf("promtool check metrics (mig %v): %v\n%s\nexposition:\n%s", mig, err, strings.Join(problems, "\n"), body)
		}
	}
}

var dcgmCamelCase = regexp.MustCompile(`^DCGM_[A-Z_]+ label names should be written in 'snake_case' not 'camelCase'$`)

func TestServer(t *testing.T) {
	h := newHost(t, false)
	srv, err := exporter.Listen("127.0.0.1:0", exporter.Handler(exporter.New(exporter.Config{Driver: h, Hostname: "n", Log: quiet()}), quiet()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte("DCGM_FI_DEV_GPU_TEMP{")) {
		t.Errorf("GET /metrics: %d\n%s", resp.StatusCode, b)
	}
	if resp, err := http.Get("http://" + srv.Addr() + "/other"); err == nil {
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /other: %d", resp.StatusCode)
		}
		resp.Body.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
}

// TestDashboardMetricsExist: every agent metric the shipped Grafana
// dashboard queries is in the exposition of a host with whole GPUs or of
// one with MIG instances.
func TestDashboardMetricsExist(t *testing.T) {
	names, err := dashboards.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, mig := range []bool{false, true} {
		h := newHost(t, mig)
		if mig {
			in, err := h.CreateMIG(context.Background(), 1, 19, 0)
			if err != nil {
				t.Fatal(err)
			}
			_ = h.SetLoad(in.UUID, 0.5)
		} else {
			_ = h.SetLoad(sim.GPUUUID("sim-h1", 0), 0.5)
		}
		if err := h.InjectXID(0, 79); err != nil {
			t.Fatal(err)
		}
		as := []agentapi.Assignment{{InstanceID: "i-1", TenantID: "t1", Placement: &fleet.Placement{CPUMilli: 1000}}}
		c := exporter.New(exporter.Config{Driver: h, Hostname: "node-1", Log: quiet(),
			Assignments: func() []agentapi.Assignment { return as }, Workloads: workloads{"i-1": {CPUSeconds: 1, MemoryBytes: 1}}})
		_, body := scrape(t, exporter.Handler(c, quiet()))
		all.WriteString(body)
	}
	for _, n := range names {
		if dashboards.Agent(n) && !strings.Contains(all.String(), "# TYPE "+n+" ") {
			t.Errorf("the dashboard queries %s, which no agent serves", n)
		}
	}
}

// TestRequireToken: with a token, the metrics (which name tenants and
// instances) are served only to requests that carry it as a bearer token;
// none, a wrong one or another scheme is 401 with no metrics.
func TestRequireToken(t *testing.T) {
	h := newHost(t, false)
	const token = "0123456789abcdef0123"
	handler := exporter.RequireToken(exporter.Handler(exporter.New(exporter.Config{Driver: h, Hostname: "n", Log: quiet()}), quiet()), token)
	for _, c := range []struct {
		name, auth string
		want       int
	}{
		{"the token", "Bearer " + token, http.StatusOK},
		{"no token", "", http.StatusUnauthorized},
		{"a wrong token", "Bearer " + token[:len(token)-1] + "x", http.StatusUnauthorized},
		{"a prefix of it", "Bearer " + token[:8], http.StatusUnauthorized},
		{"basic auth", "Basic " + token, http.StatusUnauthorized},
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		has := strings.Contains(w.Body.String(), "DCGM_FI_DEV_GPU_TEMP{")
		if w.Code != c.want || has != (c.want == http.StatusOK) {
			t.Errorf("%s: %d, metrics served %v", c.name, w.Code, has)
		}
		if c.want == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", c.name)
		}
	}
}
