package upcmd

import (
	"testing"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cli/agentcmd"
)

// TestRuntimesServeSessions: the runtimes up hands its agents (the
// scaled container runtime, plain processes) expose exec and dial, which
// the agent looks for on them, so that exec, port forwards and ssh work
// under up; and the agents serve ssh.
func TestRuntimesServeSessions(t *testing.T) {
	for name, rt := range map[string]any{
		"containers": scaledRuntime{},
		"processes":  process.New(t.TempDir()),
	} {
		if _, ok := rt.(runtime.Execer); !ok {
			t.Errorf("%s: no Exec", name)
		}
		if _, ok := rt.(runtime.Dialer); !ok {
			t.Errorf("%s: no Dial", name)
		}
		if _, ok := agentcmd.SessionHandlers(t.TempDir(), rt, nil)[agentapi.SessionSSH]; !ok {
			t.Errorf("%s: no ssh sessions", name)
		}
	}
	if got := agentcmd.SessionHandlers(t.TempDir(), struct{}{}, nil); len(got) != 0 {
		t.Errorf("a runtime that cannot exec serves %v", got)
	}
}
