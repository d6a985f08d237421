package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/agenttest"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/testkit"
)

var _ agent.ControlPlane = (*agenttest.ControlPlane)(nil)

// testInterval is the agent's period in tests.
const testInterval = 20 * time.Millisecond

// env is one simulated host with a real process runtime and metadata
// service, driven by an agent against the fake server.
type env struct {
	t    *testing.T
	host *sim.Host
	srv  *agenttest.ControlPlane
	rt   *process.Runtime
	md   *metadata.Endpoints
	ag   *agent.Agent
	cfg  agent.Config // what ag was made with
	dir  string       // the agent's DataDir
	out  string       // where workloads write what tests read
	// running is set while Run drives the agent; until then polls Step.
	running bool

	mu  sync.Mutex
	ids []string
}

// newEnv builds an env for a simulated host; tweak adjusts the agent's
// config (ManageMIG is on by default, as for every sim host).
func newEnv(t *testing.T, spec sim.Spec, tweak ...func(*agent.Config)) *env {
	t.Helper()
	host, err := sim.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, host: host, srv: agenttest.New(), md: metadata.New(), dir: t.TempDir(), out: t.TempDir()}
	e.rt = process.New(filepath.Join(e.dir, "runtime"))
	t.Cleanup(func() { _ = e.md.Close() })
	t.Cleanup(e.killAll)
	cfg := agent.Config{
		Driver: host, Runtime: e.rt, Metadata: e.md, DataDir: e.dir,
		Interval: testInterval, ManageMIG: true,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	for _, f := range tweak {
		f(&cfg)
	}
	e.ag, e.cfg = agent.New(e.srv, cfg), cfg
	return e
}

// run drives the agent with Run until the test ends.
func (e *env) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.ag.Run(ctx) }()
	e.running = true
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("Run: %v", err)
		}
	})
}

// killAll stops every workload a test assigned, so none outlives it.
func (e *env) killAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range e.ids {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = e.rt.Stop(ctx, id)
		cancel()
	}
}

// assign puts an assignment on the fake server.
func (e *env) assign(as ...agentapi.Assignment) {
	e.mu.Lock()
	for _, a := range as {
		e.ids = append(e.ids, a.InstanceID)
	}
	e.mu.Unlock()
	for _, a := range as {
		e.srv.Put(a)
	}
}

// until waits until cond holds (testkit.Eventually), stepping the agent
// before each look when Run does not drive it.
func (e *env) until(what string, cond func() bool) {
	e.t.Helper()
	testkit.Eventually(e.t, 0, what, func() bool {
		if !e.running {
			if err := e.ag.Step(e.t.Context()); err != nil {
				e.t.Logf("step: %v", err)
			}
		}
		return cond()
	})
}

// steps runs n more passes (for checks that nothing else happens).
func (e *env) steps(n int) {
	e.t.Helper()
	for range n {
		if err := e.ag.Step(e.t.Context()); err != nil {
			e.t.Logf("step: %v", err)
		}
	}
}

// untilPhase waits until the instance's last reported phase is phase.
func (e *env) untilPhase(id, phase string) {
	e.t.Helper()
	e.until(id+" reported "+phase, func() bool {
		ps := e.srv.Phases(id)
		return len(ps) > 0 && ps[len(ps)-1] == phase
	})
}

// wantPhases checks the exact sequence of reported phases.
func (e *env) wantPhases(id string, want ...string) {
	e.t.Helper()
	if got := e.srv.Phases(id); !slices.Equal(got, want) {
		e.t.Fatalf("%s reported %v, want %v", id, got, want)
	}
}

// lastReport returns the instance's last report.
func (e *env) lastReport(id string) agentapi.StatusReport {
	e.t.Helper()
	rs := e.srv.Reports(id)
	if len(rs) == 0 {
		e.t.Fatalf("%s reported nothing", id)
	}
	return rs[len(rs)-1]
}

// outFile is the file a workload of instance id writes its environment to.
func (e *env) outFile(id string) string { return filepath.Join(e.out, id+".env") }

// workloadEnv waits for the environment the workload wrote and parses it.
func (e *env) workloadEnv(id string) map[string]string {
	e.t.Helper()
	var b []byte
	e.until(id+" wrote its environment", func() bool {
		var err error
		b, err = os.ReadFile(e.outFile(id))
		return err == nil
	})
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			m[k] = v
		}
	}
	return m
}

// ready waits until the workload printed "ready", its trap being set, and
// the agent shipped it.
func (e *env) ready(id string) {
	e.t.Helper()
	e.until(id+" ready", func() bool { return strings.HasSuffix(string(e.srv.Logs(id)), "ready\n") })
}

// gone reports whether the runtime has forgotten the instance.
func (e *env) gone(id string) bool {
	_, err := e.rt.Status(id)
	return err != nil
}

// instances returns the MIG instances of a GPU as the driver sees them.
func (e *env) instances(gi int) (mig bool, ins []fleet.MIGInstance) {
	e.t.Helper()
	inv, err := e.host.Inventory(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	g := inv.Host.GPUs[gi]
	return g.MIG, g.Instances
}

// serveScript traps SIGTERM (first, so that an early stop finds the trap
// set), writes its environment to $OUT, then runs until SIGTERM, which it
// acknowledges in its output before exiting 0. The loop's stderr is
// silenced because dash reports its killed sleep ("Terminated") there.
const serveScript = `trap 'echo got TERM; exit 0' TERM
env > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
echo ready
while :; do sleep 0.05; done 2>/dev/null`

// assignment is an assignment to run a shell script.
func (e *env) assignment(id string, pl *fleet.Placement, script string) agentapi.Assignment {
	pl.ID = id
	if pl.HostID == "" {
		pl.HostID = e.host.ID()
	}
	return agentapi.Assignment{
		InstanceID: id, TenantID: "tenant-1", Offering: "h100.test", Desired: agentapi.DesiredRun,
		Placement: pl, Command: []string{"/bin/sh", "-c", script},
		Env:          map[string]string{"OUT": e.outFile(id), "GREETING": "hello"},
		Tags:         map[string]string{"team": "ml"},
		GraceSeconds: 5,
	}
}

func whole(hostID string, gpus ...int) *fleet.Placement {
	p := &fleet.Placement{}
	for _, g := range gpus {
		p.Devices = append(p.Devices, fleet.Device{GPU: g, UUID: sim.GPUUUID(hostID, g), Kind: fleet.Whole})
	}
	return p
}

// mig3g is an H100 3g.40gb slice (profile 9) at a start slot.
func mig3g(hostID string, gpu, start int, enable bool) *fleet.Placement {
	return &fleet.Placement{Devices: []fleet.Device{{
		GPU: gpu, UUID: sim.GPUUUID(hostID, gpu), Kind: fleet.MIGSlice,
		MIGProfileID: 9, MIGProfile: "3g.40gb", MIGStart: start, MIGSlots: 4, MIGSlices: 3, EnableMIG: enable,
	}}}
}

func shared(hostID string, gpu, milli int, memMiB int64) *fleet.Placement {
	return &fleet.Placement{Devices: []fleet.Device{{
		GPU: gpu, UUID: sim.GPUUUID(hostID, gpu), Kind: fleet.Share, Milli: milli, MemoryMiB: memMiB,
	}}}
}

// h100 is a host of four H100s, not in MIG mode.
var h100 = sim.Spec{ID: "h1", Zone: "zone-a", GPUs: sim.GPUSpec{Model: "H100", Count: 4}}

// exitCode returns a report's exit code, or -1 without one.
func exitCode(r agentapi.StatusReport) int {
	if r.ExitCode == nil {
		return -1
	}
	return *r.ExitCode
}
