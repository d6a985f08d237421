package agent_test

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/agenttest"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestHeartbeatInventoryOnlyOnChange: the first heartbeat carries the
// inventory, later ones only when it changed since the last heartbeat the
// server took.
func TestHeartbeatInventoryOnlyOnChange(t *testing.T) {
	e := newEnv(t, h100)
	beat := func() {
		t.Helper()
		if err := e.ag.Heartbeat(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	carried := func() []bool {
		var out []bool
		for _, hb := range e.srv.Heartbeats() {
			out = append(out, hb.Inventory != nil)
		}
		return out
	}
	beat()
	beat()
	if err := e.host.SetUsage(1, 40, 1024); err != nil {
		t.Fatal(err)
	}
	beat()
	beat()
	// A change whose heartbeat fails is sent with the next one.
	if err := e.host.SetHealth(2, false, "XID 79"); err != nil {
		t.Fatal(err)
	}
	e.srv.FailNext(agenttest.OpHeartbeat, 1, errors.New("connection reset"))
	if err := e.ag.Heartbeat(t.Context()); err == nil {
		t.Fatal("a failed heartbeat reported no error")
	}
	beat()
	beat()
	want := []bool{true, false, true, false, true, false}
	if got := carried(); !slices.Equal(got, want) {
		t.Fatalf("heartbeats carried the inventory %v, want %v", got, want)
	}
	hbs := e.srv.Heartbeats()
	if inv := hbs[0].Inventory; inv.Host.ID != "h1" || len(inv.Host.GPUs) != 4 || len(inv.Health) != 4 {
		t.Fatalf("first inventory %+v", inv)
	}
	if h := hbs[4].Inventory.Health[2]; h.Healthy || h.Reason != "XID 79" {
		t.Fatalf("inventory after the failed heartbeat: health %+v", h)
	}
}

// TestVanishedDriverStopsHeartbeats: while the driver is gone the agent
// keeps trying but sends no heartbeat, so the server sees the host go
// silent; once the driver is back the heartbeats resume.
func TestVanishedDriverStopsHeartbeats(t *testing.T) {
	e := newEnv(t, h100)
	e.run()
	e.until("heartbeats", func() bool { return len(e.srv.Heartbeats()) >= 3 })
	e.host.Vanish()
	before, calls := len(e.srv.Heartbeats()), e.host.Calls(sim.OpInventory)
	// Several heartbeat attempts read the (vanished) inventory; at most one
	// that read it before the vanishing may still land.
	e.until("heartbeat attempts", func() bool { return e.host.Calls(sim.OpInventory) >= calls+4 })
	if n := len(e.srv.Heartbeats()); n > before+1 {
		t.Fatalf("%d heartbeats sent while the driver was gone", n-before)
	}
	silent := len(e.srv.Heartbeats())
	e.host.Recover()
	e.until("heartbeats resumed", func() bool { return len(e.srv.Heartbeats()) >= silent+2 })
}

// TestJoin: Join sends the token with the inventory and returns the
// credential; a refused token is an error.
func TestJoin(t *testing.T) {
	srv := agenttest.New()
	host, err := sim.New(h100)
	if err != nil {
		t.Fatal(err)
	}
	srv.AddJoinToken("join-secret", "h1")
	resp, err := agent.Join(t.Context(), srv, "join-secret", host)
	if err != nil {
		t.Fatal(err)
	}
	if resp.HostID != "h1" || resp.Credential != "agent-credential-h1" {
		t.Fatalf("join answer %+v", resp)
	}
	joins := srv.Joins()
	if len(joins) != 1 || joins[0].JoinToken != "join-secret" || joins[0].Inventory == nil || len(joins[0].Inventory.Host.GPUs) != 4 {
		t.Fatalf("join requests %+v", joins)
	}
	// The join carries the certificate request of a key of the agent's
	// own; a server that issues no certificate (this fake, a plain-HTTP
	// server) leaves the agent without one.
	if !strings.HasPrefix(joins[0].CSR, "-----BEGIN CERTIFICATE REQUEST-----") || !strings.Contains(string(resp.KeyPEM), "PRIVATE KEY") {
		t.Fatalf("join's CSR %q, key kept: %v", joins[0].CSR, len(resp.KeyPEM) > 0)
	}
	if _, ok, err := resp.TLSCertificate(); ok || err != nil {
		t.Fatalf("client certificate from a server that issued none: %v, %v", ok, err)
	}
	// The token is spent.
	if _, err := agent.Join(t.Context(), srv, "join-secret", host); cloud.ErrorCode(err) != cloud.Unauthenticated {
		t.Fatalf("second join: %v", err)
	}
	if _, err := agent.Join(t.Context(), srv, "", host); err == nil {
		t.Fatal("join without a token succeeded")
	}
	host.Vanish()
	srv.AddJoinToken("other", "h1")
	if _, err := agent.Join(t.Context(), srv, "other", host); err == nil {
		t.Fatal("join without an inventory succeeded")
	}
}

// TestLogsShippedAndRetried: output larger than one chunk reaches the
// server exactly once, in order, though uploads and fetches fail on the
// way; Run keeps going through the errors.
func TestLogsShippedAndRetried(t *testing.T) {
	e := newEnv(t, h100)
	e.srv.FailNext(agenttest.OpAssignments, 3, errors.New("server unavailable"))
	e.srv.FailNext(agenttest.OpAppendLogs, 3, errors.New("connection reset"))
	const lines = 250000 // 2.75 MB: three chunks of the process runtime
	e.assign(e.assignment("i-logs", whole(e.host.ID(), 0), `yes 0123456789 | head -n 250000; echo end`))
	e.run()
	e.untilPhase("i-logs", agentapi.PhaseExited)
	want := strings.Repeat("0123456789\n", lines) + "end\n"
	e.until("all output shipped", func() bool { return len(e.srv.Logs("i-logs")) >= len(want) })
	if got := string(e.srv.Logs("i-logs")); got != want {
		t.Fatalf("shipped %d bytes, want %d; they differ", len(got), len(want))
	}
	if n := e.srv.Calls(agenttest.OpAppendLogs); n < 3+3 {
		t.Fatalf("AppendLogs called %d times; want the 3 failures retried", n)
	}
	e.wantPhases("i-logs", agentapi.PhaseStarting, agentapi.PhaseRunning, agentapi.PhaseExited)
}

// TestLogsStreamWhileRunning: output is shipped as the workload writes it,
// not only when it exits, and a failed upload is sent again, once.
func TestLogsStreamWhileRunning(t *testing.T) {
	e := newEnv(t, h100)
	script := `echo one; while [ ! -e "$OUT.two" ]; do sleep 0.02; done; echo two; ` + serveScript
	e.assign(e.assignment("i-stream", whole(e.host.ID(), 0), script))
	e.until("first line shipped", func() bool { return string(e.srv.Logs("i-stream")) == "one\n" })
	e.srv.FailNext(agenttest.OpAppendLogs, 2, errors.New("connection reset"))
	calls := e.srv.Calls(agenttest.OpAppendLogs)
	if err := os.WriteFile(e.outFile("i-stream")+".two", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.until("later lines shipped", func() bool { return string(e.srv.Logs("i-stream")) == "one\ntwo\nready\n" })
	if n := e.srv.Calls(agenttest.OpAppendLogs); n < calls+3 {
		t.Fatalf("AppendLogs called %d more times; want the 2 failures retried", n-calls)
	}
	e.wantPhases("i-stream", agentapi.PhaseStarting, agentapi.PhaseRunning)
}

// TestHeartbeatAtTheServersInterval: an agent whose server asks for a
// heartbeat every 50 intervals sends about that many while nothing
// changes, reads its inventory every interval all the same, and sends a
// changed inventory within an interval of the change.
func TestHeartbeatAtTheServersInterval(t *testing.T) {
	e := newEnv(t, h100)
	every := 50 * testInterval
	e.srv.SetHeartbeatInterval(every)
	e.run()
	e.until("the first heartbeat", func() bool { return len(e.srv.Heartbeats()) >= 1 })
	start, reads := time.Now(), e.host.Calls(sim.OpInventory)
	e.until("20 inventory reads", func() bool { return e.host.Calls(sim.OpInventory) >= reads+20 })
	// Over about 20 intervals: the first heartbeat, and at most one more.
	if n, d := len(e.srv.Heartbeats()), time.Since(start); n > 2+int(d/every) {
		t.Fatalf("%d heartbeats in %v at one asked for every %v", n, d, every)
	}
	before, changed := len(e.srv.Heartbeats()), time.Now()
	if err := e.host.SetHealth(1, false, "XID 79"); err != nil {
		t.Fatal(err)
	}
	e.until("the changed inventory", func() bool {
		hbs := e.srv.Heartbeats()
		return len(hbs) > before && hbs[len(hbs)-1].Inventory != nil
	})
	// At the agent's interval (20 ms), not the server's (1 s).
	if d := time.Since(changed); d >= every {
		t.Errorf("the changed inventory went %v after the change; want it within an interval, not the server's %v", d, every)
	}
	// Then the next heartbeat comes at the server's interval again.
	e.until("a heartbeat without a change", func() bool {
		hbs := e.srv.Heartbeats()
		return len(hbs) > before+1 && hbs[len(hbs)-1].Inventory == nil
	})
}
