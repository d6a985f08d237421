package agent_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"testing"

	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// stackJob is the StackInfo of rank in a job of two whose rank 0 is i-head,
// at master ("" while unknown).
func stackJob(rank int, self, master string) *agentapi.StackInfo {
	st := &agentapi.StackInfo{Name: "llm", Resource: "worker", Rank: rank, WorldSize: 2,
		Peers: []agentapi.Peer{{Rank: 0, InstanceID: "i-head", Address: master}, {Rank: 1, InstanceID: self}},
		Env: map[string]string{agentapi.EnvMasterPort: "29500", agentapi.EnvWorldSize: "2", agentapi.EnvNNodes: "2",
			agentapi.EnvRank: "1", agentapi.EnvNodeRank: "1"}}
	if master != "" {
		st.Env[agentapi.EnvMasterAddr] = master
	}
	return st
}

// readStack reads GET /v1/stack from an instance's metadata endpoint.
func readStack(t *testing.T, base string) (int, metadata.Stack) {
	t.Helper()
	resp, err := metadataGet(t, base, "/v1/stack")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st metadata.Stack
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, st
}

// TestStackJob: the running report carries the workload's private address
// (the process runtime's 127.0.0.1); the metadata endpoint shows the
// assignment's stack job and follows it as the server updates it (the
// master's address appears, the job goes); a workload started before its
// master's address is known gets none of the launchers' environment, one
// started after gets all of it, but the tenant's own variables win.
func TestStackJob(t *testing.T) {
	e := newEnv(t, h100)
	id := e.host.ID()
	early := e.assignment("i-early", whole(id, 0), serveScript)
	early.Stack = stackJob(1, "i-early", "")
	e.assign(early)
	env := e.workloadEnv("i-early")
	e.untilPhase("i-early", agentapi.PhaseRunning)
	if r := e.lastReport("i-early"); r.PrivateAddress != "127.0.0.1" {
		t.Fatalf("running report %+v, want private address 127.0.0.1", r)
	}
	// Started before the master's address was known: the rank, sizes and
	// port, and no MASTER_ADDR.
	if v, ok := env[agentapi.EnvMasterAddr]; ok {
		t.Errorf("started before the master's address was known, the workload has MASTER_ADDR=%q", v)
	}
	for k, want := range map[string]string{agentapi.EnvMasterPort: "29500", agentapi.EnvRank: "1", agentapi.EnvWorldSize: "2"} {
		if env[k] != want {
			t.Errorf("the early workload has %s=%q, want %q", k, env[k], want)
		}
	}
	base := env[runtime.EnvMetadataURL]
	code, st := readStack(t, base)
	if code != 200 || st.Stack != "llm" || st.Resource != "worker" || st.Rank != 1 || st.WorldSize != 2 || len(st.Peers) != 2 ||
		st.Peers[0] != (metadata.Peer{Rank: 0, InstanceID: "i-head"}) || st.Peers[1] != (metadata.Peer{Rank: 1, InstanceID: "i-early"}) ||
		st.Env[agentapi.EnvMasterAddr] != "" || st.Env[agentapi.EnvRank] != "1" {
		t.Fatalf("stack %d %+v", code, st)
	}
	if doc := fetchMetadata(t, base); doc.Stack == nil || doc.Stack.Stack != "llm" || doc.Stack.Rank != 1 {
		t.Fatalf("the document's stack %+v", doc.Stack)
	}

	// The master's address appears.
	early.Stack = stackJob(1, "i-early", "10.0.0.7")
	e.assign(early)
	e.until("the master's address on the metadata endpoint", func() bool {
		_, st := readStack(t, base)
		return st.Env[agentapi.EnvMasterAddr] == "10.0.0.7" && st.Peers[0].Address == "10.0.0.7"
	})

	// Started with the master's address known: the launchers'
	// environment, the tenant's RANK kept.
	late := e.assignment("i-late", whole(id, 1), serveScript)
	late.Stack = stackJob(1, "i-late", "10.0.0.7")
	late.Env["RANK"] = "tenant's"
	e.assign(late)
	env = e.workloadEnv("i-late")
	want := maps.Clone(late.Stack.Env)
	want[agentapi.EnvRank] = "tenant's"
	for k, v := range want {
		if env[k] != v {
			t.Errorf("i-late: %s=%q, want %q", k, env[k], v)
		}
	}

	// The job goes: the endpoint says the instance is in none.
	early.Stack = nil
	e.assign(early)
	e.until("the stack withdrawn", func() bool { code, _ := readStack(t, base); return code == http.StatusNotFound })
	if doc := fetchMetadata(t, base); doc.Stack != nil {
		t.Fatalf("the document still has a stack: %+v", doc.Stack)
	}
}
