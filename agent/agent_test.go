package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/agenttest"
	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestEachKindStartsAndStops runs a whole, a MIG and a shared instance side
// by side: each sees exactly its devices, its share and its metadata, the
// MIG instance is created at the placement's slot (switching MIG mode on),
// and a stop ends each with SIGTERM, reports it once and undoes the MIG
// layout.
func TestEachKindStartsAndStops(t *testing.T) {
	e := newEnv(t, h100)
	id := e.host.ID()
	e.assign(
		e.assignment("i-whole", whole(id, 0, 1), serveScript),
		e.assignment("i-mig", mig3g(id, 2, 4, true), serveScript),
		e.assignment("i-shared", shared(id, 3, 250, 20480), serveScript),
	)
	migUUID := sim.MIGUUID(id, 2, 9, 4)
	want := map[string]struct {
		devices   string
		milli, mb string
	}{
		"i-whole":  {devices: sim.GPUUUID(id, 0) + "," + sim.GPUUUID(id, 1)},
		"i-mig":    {devices: migUUID},
		"i-shared": {devices: sim.GPUUUID(id, 3), milli: "250", mb: "20480"},
	}
	for name, w := range want {
		env := e.workloadEnv(name)
		e.untilPhase(name, agentapi.PhaseRunning)
		e.wantPhases(name, agentapi.PhaseStarting, agentapi.PhaseRunning)
		for k, v := range map[string]string{
			runtime.EnvCUDAVisible: w.devices, runtime.EnvNVIDIAVisible: w.devices,
			runtime.EnvShareMilli: w.milli, runtime.EnvShareMemoryMiB: w.mb,
			runtime.EnvInstanceID: name, "GREETING": "hello",
		} {
			if env[k] != v {
				t.Errorf("%s: %s=%q, want %q", name, k, env[k], v)
			}
		}
		doc := fetchMetadata(t, env[runtime.EnvMetadataURL])
		wantDoc := metadata.Document{ID: name, Offering: "h100.test", GPUs: strings.Split(w.devices, ","),
			Tags: map[string]string{"team": "ml"}, Zone: "zone-a", Host: id}
		if fmt.Sprint(doc) != fmt.Sprint(wantDoc) {
			t.Errorf("%s: metadata %+v, want %+v", name, doc, wantDoc)
		}
	}
	if mig, ins := e.instances(2); !mig || len(ins) != 1 || ins[0].ProfileID != 9 || ins[0].Start != 4 {
		t.Fatalf("gpu 2: mig %v, instances %+v; want MIG on with 3g at slot 4", mig, ins)
	}
	for _, g := range []int{0, 1, 3} {
		if mig, _ := e.instances(g); mig {
			t.Fatalf("gpu %d was switched to MIG mode", g)
		}
	}
	// Running instances are not started or partitioned again.
	e.steps(5)
	if n := e.host.Calls(sim.OpCreateMIG); n != 1 {
		t.Fatalf("CreateMIG called %d times, want 1", n)
	}
	for name := range want {
		e.wantPhases(name, agentapi.PhaseStarting, agentapi.PhaseRunning)
	}

	env := e.workloadEnv("i-mig")
	for name := range want {
		e.ready(name)
	}
	for name := range want {
		if err := e.srv.SetDesired(name, agentapi.DesiredStop); err != nil {
			t.Fatal(err)
		}
	}
	for name := range want {
		e.untilPhase(name, agentapi.PhaseStopped)
		e.until(name+" forgotten by the runtime", func() bool { return e.gone(name) })
	}
	e.steps(5)
	for name := range want {
		e.wantPhases(name, agentapi.PhaseStarting, agentapi.PhaseRunning, agentapi.PhaseStopped)
		if r := e.lastReport(name); exitCode(r) != 0 || r.Message != "" {
			t.Errorf("%s: stopped report %+v, want exit code 0", name, r)
		}
		if logs := string(e.srv.Logs(name)); logs != "ready\ngot TERM\n" {
			t.Errorf("%s: shipped output %q", name, logs)
		}
	}
	if mig, ins := e.instances(2); mig || len(ins) != 0 {
		t.Fatalf("after the stop gpu 2 has MIG %v and instances %+v; want both undone", mig, ins)
	}
	if _, err := http.Get(env[runtime.EnvMetadataURL] + "/v1/instance"); err == nil {
		t.Fatal("the metadata listener of a stopped instance still answers")
	}
}

func fetchMetadata(t *testing.T, url string) metadata.Document {
	t.Helper()
	if url == "" {
		t.Fatal("no metadata URL")
	}
	resp, err := metadataGet(t, url, "/v1/instance")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc metadata.Document
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metadata: status %d, %v", resp.StatusCode, err)
	}
	return doc
}

// TestExitReportedOnce: a workload that exits 3 is reported exited with
// code 3 exactly once, though a report fails on the way, its MIG instance
// is destroyed, and it is not started again.
func TestExitReportedOnce(t *testing.T) {
	e := newEnv(t, h100)
	e.srv.FailNext(agenttest.OpReportStatus, 1, errors.New("connection refused"))
	e.assign(e.assignment("i-exit", mig3g(e.host.ID(), 0, 0, true), "echo bye; exit 3"))
	e.untilPhase("i-exit", agentapi.PhaseExited)
	e.steps(10)
	e.wantPhases("i-exit", agentapi.PhaseStarting, agentapi.PhaseRunning, agentapi.PhaseExited)
	if r := e.lastReport("i-exit"); exitCode(r) != 3 {
		t.Fatalf("exited report %+v, want exit code 3", r)
	}
	if got := string(e.srv.Logs("i-exit")); got != "bye\n" {
		t.Fatalf("shipped output %q", got)
	}
	if mig, ins := e.instances(0); mig || len(ins) != 0 {
		t.Fatalf("gpu 0 after the exit: MIG %v, instances %+v", mig, ins)
	}
	if !e.gone("i-exit") {
		t.Fatal("the runtime still knows the exited workload")
	}
}

// TestRefusedExitNotRestarted: when the server refuses the exited report
// for good, it keeps the assignment; the agent does not take that as a new
// run, and the job does not run twice.
func TestRefusedExitNotRestarted(t *testing.T) {
	e := newEnv(t, h100)
	script := `echo run >> "$OUT.runs"; while [ ! -e "$OUT.go" ]; do sleep 0.02; done; exit 3`
	e.assign(e.assignment("i-refused", whole(e.host.ID(), 0), script))
	e.untilPhase("i-refused", agentapi.PhaseRunning)
	e.srv.FailNext(agenttest.OpReportStatus, 1, cloud.Errorf(cloud.Conflict, "instance is not running"))
	if err := os.WriteFile(e.outFile("i-refused")+".go", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.until("the exit noticed and its report refused", func() bool {
		return e.srv.Calls(agenttest.OpReportStatus) == 3
	})
	e.steps(10)
	e.wantPhases("i-refused", agentapi.PhaseStarting, agentapi.PhaseRunning)
	if runs, err := os.ReadFile(e.outFile("i-refused") + ".runs"); err != nil || string(runs) != "run\n" {
		t.Fatalf("runs %q, %v; want exactly one", runs, err)
	}
	if !e.srv.Assigned("i-refused") {
		t.Fatal("the fake released an instance whose report it refused")
	}
}

// TestWithdrawnAssignmentStoppedSilently: an instance whose assignment
// disappears (terminated behind the agent's back) is stopped and cleaned
// up without a report.
func TestWithdrawnAssignmentStoppedSilently(t *testing.T) {
	e := newEnv(t, h100)
	e.assign(e.assignment("i-orphan", mig3g(e.host.ID(), 1, 0, true), serveScript))
	e.ready("i-orphan")
	e.untilPhase("i-orphan", agentapi.PhaseRunning)
	e.srv.Drop("i-orphan")
	e.until("the orphan stopped", func() bool { return e.gone("i-orphan") })
	e.steps(3)
	e.wantPhases("i-orphan", agentapi.PhaseStarting, agentapi.PhaseRunning)
	if got := string(e.srv.Logs("i-orphan")); got != "ready\ngot TERM\n" {
		t.Fatalf("the orphan's output %q; want it stopped with SIGTERM", got)
	}
	if mig, ins := e.instances(1); mig || len(ins) != 0 {
		t.Fatalf("gpu 1 after the orphan: MIG %v, instances %+v", mig, ins)
	}
}

// TestStopEscalatesAfterGrace: a workload that ignores SIGTERM is killed
// after its grace period, over several passes, and reported stopped with
// the signal.
func TestStopEscalatesAfterGrace(t *testing.T) {
	e := newEnv(t, h100)
	a := e.assignment("i-stubborn", whole(e.host.ID(), 0), `trap '' TERM; echo ready; while :; do sleep 0.05; done 2>/dev/null`)
	a.GraceSeconds = 1
	e.assign(a)
	e.untilPhase("i-stubborn", agentapi.PhaseRunning)
	e.until("the trap set", func() bool { return string(e.srv.Logs("i-stubborn")) == "ready\n" })
	if err := e.srv.SetDesired("i-stubborn", agentapi.DesiredStop); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.untilPhase("i-stubborn", agentapi.PhaseStopped)
	if d := time.Since(start); d < time.Second {
		t.Fatalf("stopped after %v, before its grace period", d)
	}
	if r := e.lastReport("i-stubborn"); exitCode(r) != 137 || r.Message != "killed by SIGKILL" {
		t.Fatalf("stopped report %+v", r)
	}
	e.wantPhases("i-stubborn", agentapi.PhaseStarting, agentapi.PhaseRunning, agentapi.PhaseStopped)
}

// TestStopBeforeStart: an instance told to stop before the agent started it
// is reported stopped, and nothing runs.
func TestStopBeforeStart(t *testing.T) {
	e := newEnv(t, h100)
	a := e.assignment("i-never", whole(e.host.ID(), 0), serveScript)
	a.Desired = agentapi.DesiredStop
	e.assign(a)
	e.untilPhase("i-never", agentapi.PhaseStopped)
	e.steps(3)
	e.wantPhases("i-never", agentapi.PhaseStopped)
	if r := e.lastReport("i-never"); r.ExitCode != nil {
		t.Fatalf("stopped report of a workload that never ran has an exit code: %+v", r)
	}
	if !e.gone("i-never") {
		t.Fatal("the workload was started")
	}
}

// TestRestartAfterStop: a stopped instance that is assigned again (started
// by its tenant) runs again with the same work directory, and its output
// goes on from where the first run's ended. The new assignment comes
// before the agent saw the old one go, as when the tenant restarts within
// one poll.
func TestRestartAfterStop(t *testing.T) {
	e := newEnv(t, h100)
	a := e.assignment("i-again", whole(e.host.ID(), 0), `echo run >> runs; cat runs; `+serveScript)
	e.assign(a)
	e.untilPhase("i-again", agentapi.PhaseRunning)
	e.ready("i-again")
	if err := e.srv.SetDesired("i-again", agentapi.DesiredStop); err != nil {
		t.Fatal(err)
	}
	e.untilPhase("i-again", agentapi.PhaseStopped)
	if e.srv.Assigned("i-again") {
		t.Fatal("the fake kept the stopped instance's assignment")
	}
	if err := os.Remove(e.outFile("i-again")); err != nil {
		t.Fatal(err)
	}
	e.assign(a)
	e.workloadEnv("i-again")
	e.untilPhase("i-again", agentapi.PhaseRunning)
	e.wantPhases("i-again", agentapi.PhaseStarting, agentapi.PhaseRunning, agentapi.PhaseStopped,
		agentapi.PhaseStarting, agentapi.PhaseRunning)
	e.ready("i-again")
	if got, want := string(e.srv.Logs("i-again")), "run\nready\ngot TERM\nrun\nrun\nready\n"; got != want {
		t.Fatalf("output of both runs %q, want %q", got, want)
	}
}

// TestAdoptsKnownWorkload: an agent that finds its workload already in the
// runtime (it restarted, the runtime did not) adopts it instead of running
// the job twice, ships only new output, and reports its exit.
func TestAdoptsKnownWorkload(t *testing.T) {
	e := newEnv(t, h100)
	script := `echo run >> "$OUT.runs"; echo first; while [ ! -e "$OUT.go" ]; do sleep 0.02; done; echo second; exit 4`
	e.assign(e.assignment("i-adopt", whole(e.host.ID(), 0), script))
	e.until("first output shipped", func() bool { return string(e.srv.Logs("i-adopt")) == "first\n" })
	e.ag = agent.New(e.srv, agent.Config{
		Driver: e.host, Runtime: e.rt, Metadata: e.md, DataDir: e.dir, Interval: testInterval, ManageMIG: true,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	e.steps(2)
	if err := os.WriteFile(e.outFile("i-adopt")+".go", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.untilPhase("i-adopt", agentapi.PhaseExited)
	e.wantPhases("i-adopt", agentapi.PhaseStarting, agentapi.PhaseRunning, agentapi.PhaseRunning, agentapi.PhaseExited)
	if r := e.lastReport("i-adopt"); exitCode(r) != 4 {
		t.Fatalf("exited report %+v", r)
	}
	if got := string(e.srv.Logs("i-adopt")); got != "first\nsecond\n" {
		t.Fatalf("shipped output %q", got)
	}
	if runs, err := os.ReadFile(e.outFile("i-adopt") + ".runs"); err != nil || string(runs) != "run\n" {
		t.Fatalf("runs %q, %v; want exactly one", runs, err)
	}
}

// TestAdoptedWorkloadStopped: an agent that restarted and is told to stop
// a workload it did not start stops it (it does not just report it
// stopped), once.
func TestAdoptedWorkloadStopped(t *testing.T) {
	e := newEnv(t, h100)
	e.assign(e.assignment("i-adopt-stop", whole(e.host.ID(), 0), serveScript))
	e.ready("i-adopt-stop")
	e.ag = agent.New(e.srv, agent.Config{
		Driver: e.host, Runtime: e.rt, DataDir: e.dir, Interval: testInterval, ManageMIG: true,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err := e.srv.SetDesired("i-adopt-stop", agentapi.DesiredStop); err != nil {
		t.Fatal(err)
	}
	e.untilPhase("i-adopt-stop", agentapi.PhaseStopped)
	e.steps(3)
	e.wantPhases("i-adopt-stop", agentapi.PhaseStarting, agentapi.PhaseRunning, agentapi.PhaseStopped)
	if r := e.lastReport("i-adopt-stop"); exitCode(r) != 0 {
		t.Fatalf("stopped report %+v; want the workload's own exit 0", r)
	}
	if got := string(e.srv.Logs("i-adopt-stop")); got != "ready\ngot TERM\n" {
		t.Fatalf("shipped output %q", got)
	}
}

// TestHungDriverCallTimesOut: a driver call stuck in the kernel is cut off
// by the driver timeout, retried, and the start finally reported failed.
func TestHungDriverCallTimesOut(t *testing.T) {
	e := newEnv(t, h100, func(c *agent.Config) { c.DriverTimeout = 50 * time.Millisecond })
	e.host.Hang(sim.OpDevices)
	t.Cleanup(e.host.Recover)
	e.assign(e.assignment("i-hang", whole(e.host.ID(), 0), serveScript))
	e.untilPhase("i-hang", agentapi.PhaseFailed)
	if r := e.lastReport("i-hang"); !strings.Contains(r.Message, "find the devices of the placement") ||
		!strings.Contains(r.Message, "deadline exceeded") {
		t.Fatalf("failed report %+v", r)
	}
	if n := e.host.Calls(sim.OpDevices); n != 5 {
		t.Fatalf("Devices called %d times, want 5 attempts", n)
	}
}

// TestMIGCreateFailureReportsFailed: a MIG instance the driver refuses is
// reported failed with the driver's reason, at once for a definitive error
// and after a few attempts for a transient one, and what the start did
// (MIG mode, metadata) is undone.
func TestMIGCreateFailureReportsFailed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		wantCalls int
	}{
		{"definitive", fmt.Errorf("injected: profile withdrawn: %w", gpu.ErrNotSupported), 1},
		{"transient", errors.New("injected: nvml unknown error"), 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, h100)
			e.host.Fail(sim.OpCreateMIG, tc.err)
			e.assign(e.assignment("i-fail", mig3g(e.host.ID(), 2, 4, true), serveScript))
			e.untilPhase("i-fail", agentapi.PhaseFailed)
			e.steps(3)
			e.wantPhases("i-fail", agentapi.PhaseFailed)
			r := e.lastReport("i-fail")
			if !strings.Contains(r.Message, "create MIG instance 3g.40gb at slot 4 on gpu 2") || !strings.Contains(r.Message, "injected") {
				t.Fatalf("failed report %+v", r)
			}
			if n := e.host.Calls(sim.OpCreateMIG); n != tc.wantCalls {
				t.Fatalf("CreateMIG called %d times, want %d", n, tc.wantCalls)
			}
			if mig, ins := e.instances(2); mig || len(ins) != 0 {
				t.Fatalf("gpu 2 after the failure: MIG %v, instances %+v", mig, ins)
			}
			if !e.gone("i-fail") {
				t.Fatal("the workload was started")
			}
			if _, err := os.Stat(e.outFile("i-fail")); err == nil {
				t.Fatal("the workload ran")
			}
		})
	}
}

// TestUnmanagedMIG: without ManageMIG the agent uses MIG instances that
// exist, leaves them when done, and reports a clear failure when the
// instance it needs is missing.
func TestUnmanagedMIG(t *testing.T) {
	spec := h100
	spec.GPUs.MIG = true
	e := newEnv(t, spec, func(c *agent.Config) { c.ManageMIG = false })
	id := e.host.ID()
	if _, err := e.host.CreateMIG(t.Context(), 0, 9, 0); err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, op := range []string{sim.OpSetMIGMode, sim.OpCreateMIG, sim.OpDestroyMIG} {
		calls[op] = e.host.Calls(op)
	}
	e.assign(
		e.assignment("i-have", mig3g(id, 0, 0, false), serveScript),
		e.assignment("i-missing", mig3g(id, 1, 4, true), serveScript),
	)
	env := e.workloadEnv("i-have")
	e.ready("i-have")
	if got, want := env[runtime.EnvCUDAVisible], sim.MIGUUID(id, 0, 9, 0); got != want {
		t.Fatalf("CUDA_VISIBLE_DEVICES=%q, want %q", got, want)
	}
	e.untilPhase("i-missing", agentapi.PhaseFailed)
	if r := e.lastReport("i-missing"); !strings.Contains(r.Message, "gpu 1 has no MIG instance 3g.40gb at slot 4, and this agent does not manage MIG layouts") {
		t.Fatalf("failed report %+v", r)
	}
	if err := e.srv.SetDesired("i-have", agentapi.DesiredStop); err != nil {
		t.Fatal(err)
	}
	e.untilPhase("i-have", agentapi.PhaseStopped)
	if _, ins := e.instances(0); len(ins) != 1 {
		t.Fatalf("the operator's MIG instance was touched: %+v", ins)
	}
	for op, n := range calls {
		if d := e.host.Calls(op) - n; d != 0 {
			t.Fatalf("%s called %d times by an agent that does not manage MIG", op, d)
		}
	}
}

// TestVolumesAndWorkDir: volumes are directories under the data directory,
// the first is the working directory, and all are listed for the workload.
func TestVolumesAndWorkDir(t *testing.T) {
	e := newEnv(t, h100)
	a := e.assignment("i-vol", whole(e.host.ID(), 0), `pwd > "$OUT.pwd"; `+serveScript)
	a.Volumes = []string{"vol-a", "vol-b"}
	e.assign(a)
	env := e.workloadEnv("i-vol")
	volA, volB := filepath.Join(e.dir, "volumes", "vol-a"), filepath.Join(e.dir, "volumes", "vol-b")
	pwd, err := os.ReadFile(e.outFile("i-vol") + ".pwd")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(pwd)); got != volA {
		t.Fatalf("working directory %q, want %q", got, volA)
	}
	for _, d := range []string{volB, filepath.Join(e.dir, "instances", "i-vol")} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Fatalf("%s: %v", d, err)
		}
	}
	got, ok := env[agent.EnvVolumes]
	if !ok {
		t.Fatalf("the workload got no %s", agent.EnvVolumes)
	}
	if want := volA + ":" + volB; got != want {
		t.Fatalf("%s=%q, want %q", agent.EnvVolumes, got, want)
	}
}

// TestBadAssignmentsFail: assignments the agent cannot act on are reported
// failed with the reason instead of being retried forever.
func TestBadAssignmentsFail(t *testing.T) {
	e := newEnv(t, h100)
	noProgram := e.assignment("i-noprog", whole(e.host.ID(), 0), "")
	noProgram.Command = []string{"/nonexistent/program"}
	badVolume := e.assignment("i-badvol", whole(e.host.ID(), 1), serveScript)
	badVolume.Volumes = []string{"../etc"}
	noPlacement := e.assignment("i-noplace", whole(e.host.ID()), serveScript)
	noPlacement.Placement = nil
	// An image on the process runtime: the command would write its OUT
	// file if it ran on the host.
	image := e.assignment("i-image", whole(e.host.ID(), 2), "echo ran > \"$OUT\"")
	image.Image = "docker.io/library/python:3.12"
	e.assign(noProgram, badVolume, noPlacement, image)
	for id, msg := range map[string]string{
		"i-noprog":  "not an executable file",
		"i-badvol":  `bad volume id "../etc"`,
		"i-noplace": "no placement",
		"i-image": "instance i-image names image docker.io/library/python:3.12, but host " + e.host.ID() +
			" runs workloads as processes, which cannot run images",
	} {
		e.untilPhase(id, agentapi.PhaseFailed)
		if r := e.lastReport(id); !strings.Contains(r.Message, msg) {
			t.Errorf("%s: failed report %+v, want %q", id, r, msg)
		}
	}
	// The failed start with a program left its starting report; the
	// others failed before anything started.
	for _, id := range []string{"i-noprog", "i-image"} {
		if ps := e.srv.Phases(id); !slices.Equal(ps, []string{agentapi.PhaseStarting, agentapi.PhaseFailed}) {
			t.Fatalf("%s reported %v", id, ps)
		}
	}
	if _, err := os.Stat(e.outFile("i-image")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the command of the instance with an image ran on the host: %v", err)
	}
}

// TestSpotNoticesReachTheMetadataEndpoint: a rebalance recommendation and
// then a reclaim notice in the assignment show on the instance's metadata
// endpoint, and the workload keeps running until the stop comes.
func TestSpotNoticesReachTheMetadataEndpoint(t *testing.T) {
	e := newEnv(t, h100)
	a := e.assignment("i-spot", whole(e.host.ID(), 0), serveScript)
	a.Market, a.SpotRequestID = cloud.MarketSpot, "sr-1"
	e.assign(a)
	env := e.workloadEnv("i-spot")
	base := env[runtime.EnvMetadataURL]
	if base == "" {
		t.Fatal("no metadata URL")
	}
	fetch := func(path string) (int, map[string]any) {
		resp, err := metadataGet(t, base, path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	if code, doc := fetch("/v1/instance"); code != 200 || doc["spot_request_id"] != "sr-1" || doc["market"] != "spot" {
		t.Fatalf("document %d %v", code, doc)
	}
	if code, _ := fetch("/v1/spot/instance-action"); code != 404 {
		t.Fatalf("instance-action before any notice: %d", code)
	}
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	a.Interruption = &cloud.Interruption{Reason: cloud.ReclaimRebalance, NoticedAt: at}
	e.assign(a)
	e.until("the rebalance recommendation", func() bool { code, _ := fetch("/v1/spot/rebalance-recommendation"); return code == 200 })
	if code, _ := fetch("/v1/spot/instance-action"); code != 404 {
		t.Fatalf("a rebalance recommendation is not an instance-action: %d", code)
	}
	a.Interruption = &cloud.Interruption{Action: cloud.ActionTerminate, Reason: cloud.ReclaimCapacity, NoticedAt: at, Deadline: at.Add(2 * time.Minute)}
	e.assign(a)
	var body map[string]any
	e.until("the instance-action", func() bool {
		var code int
		code, body = fetch("/v1/spot/instance-action")
		return code == 200
	})
	if body["action"] != "terminate" || body["time"] != "2026-12-02T12:02:00Z" {
		t.Fatalf("instance-action %v", body)
	}
	if e.gone("i-spot") {
		t.Fatal("the workload stopped on the notice; it must run until the deadline's stop")
	}
}

// TestVolumeDir: with VolumeDir set, volumes live there rather than in the
// agent's data directory.
func TestVolumeDir(t *testing.T) {
	shared := t.TempDir()
	e := newEnv(t, h100, func(c *agent.Config) { c.VolumeDir = shared })
	a := e.assignment("i-shared", whole(e.host.ID(), 0), `pwd > "$OUT.pwd"; `+serveScript)
	a.Volumes = []string{"vol-a"}
	e.assign(a)
	e.workloadEnv("i-shared")
	pwd, err := os.ReadFile(e.outFile("i-shared") + ".pwd")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(pwd)), filepath.Join(shared, "vol-a"); got != want {
		t.Fatalf("working directory %q, want %q", got, want)
	}
}

// TestHeartbeatLabelsTheRuntime: the inventory a heartbeat carries names
// the host's runtime kind in its "runtime" label (the process runtime
// here), beside the driver's own labels, which stay as they were.
func TestHeartbeatLabelsTheRuntime(t *testing.T) {
	e := newEnv(t, sim.Spec{ID: "h1", Labels: map[string]string{"rack": "r1"}, GPUs: sim.GPUSpec{Model: "L40S", Count: 1}})
	if err := e.ag.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	hbs := e.srv.Heartbeats()
	if len(hbs) == 0 || hbs[0].Inventory == nil {
		t.Fatalf("no heartbeat with an inventory: %+v", hbs)
	}
	labels := hbs[0].Inventory.Host.Labels
	if labels[runtime.LabelRuntime] != runtime.KindProcess || labels["rack"] != "r1" {
		t.Errorf("labels %v, want runtime=process beside rack=r1", labels)
	}
	inv, err := e.host.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inv.Host.Labels[runtime.LabelRuntime]; ok {
		t.Errorf("the driver's own labels were changed: %v", inv.Host.Labels)
	}
}

// TestMIGModeOffWhenTwoSlicesStopTogether: two MIG instances on one GPU
// (the first switched MIG mode on) stopped at once, as `instances
// terminate a b` does: whichever is cleaned up last finds the other
// already cleaned up, though still listed, and MIG mode goes off, so that
// the GPU can be rented whole again. (It stayed on: each cleanup saw the
// other listed and left the mode to it.)
func TestMIGModeOffWhenTwoSlicesStopTogether(t *testing.T) {
	e := newEnv(t, h100)
	id := e.host.ID()
	e.assign(
		e.assignment("i-a", mig3g(id, 2, 0, true), serveScript),
		e.assignment("i-b", mig3g(id, 2, 4, false), serveScript),
	)
	for _, name := range []string{"i-a", "i-b"} {
		e.untilPhase(name, agentapi.PhaseRunning)
		e.ready(name)
	}
	if mig, ins := e.instances(2); !mig || len(ins) != 2 {
		t.Fatalf("gpu 2: mig %v, instances %+v; want MIG on with two 3g", mig, ins)
	}
	for _, name := range []string{"i-a", "i-b"} {
		if err := e.srv.SetDesired(name, agentapi.DesiredStop); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"i-a", "i-b"} {
		e.untilPhase(name, agentapi.PhaseStopped)
	}
	e.steps(3)
	if mig, ins := e.instances(2); mig || len(ins) != 0 {
		t.Fatalf("after both stopped gpu 2 has MIG %v and instances %+v; want both undone", mig, ins)
	}
}

// TestMIGModeOffAfterRestart: an agent restarted while a GPU it switched
// into MIG mode holds a slice still switches MIG mode off when the slice
// goes: which GPUs it switched is kept in its data directory
// (mig-auto.json), not only in memory.
func TestMIGModeOffAfterRestart(t *testing.T) {
	e := newEnv(t, h100)
	id := e.host.ID()
	e.assign(e.assignment("i-a", mig3g(id, 2, 0, true), serveScript))
	e.untilPhase("i-a", agentapi.PhaseRunning)
	e.ready("i-a")
	e.ag = agent.New(e.srv, agent.Config{
		Driver: e.host, Runtime: e.rt, Metadata: e.md, DataDir: e.dir, Interval: testInterval, ManageMIG: true,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	e.steps(2)
	if err := e.srv.SetDesired("i-a", agentapi.DesiredStop); err != nil {
		t.Fatal(err)
	}
	e.untilPhase("i-a", agentapi.PhaseStopped)
	e.steps(3)
	if mig, ins := e.instances(2); mig || len(ins) != 0 {
		t.Fatalf("after the restarted agent stopped the slice gpu 2 has MIG %v and instances %+v; want both undone", mig, ins)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "mig-auto.json")); err != nil {
		t.Fatalf("the agent kept no record of the GPUs it switched: %v", err)
	}
}
