package agent_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agentapi"
)

// TestSharedVolumesLabel: an agent with a VolumeDir (a filesystem every
// such host mounts) labels its host shared-volumes=true, which lets the
// server send a detached volume's copy to any of them; one without does
// not.
func TestSharedVolumesLabel(t *testing.T) {
	for _, tt := range []struct {
		desc      string
		volumeDir bool
		want      string
	}{{"with a volume dir", true, "true"}, {"without", false, ""}} {
		t.Run(tt.desc, func(t *testing.T) {
			dir := t.TempDir()
			e := newEnv(t, sim.Spec{ID: "h1", GPUs: sim.GPUSpec{Model: "L40S", Count: 1}}, func(c *agent.Config) {
				if tt.volumeDir {
					c.VolumeDir = dir
				}
			})
			if err := e.ag.Heartbeat(context.Background()); err != nil {
				t.Fatal(err)
			}
			hbs := e.srv.Heartbeats()
			if len(hbs) == 0 || hbs[0].Inventory == nil {
				t.Fatalf("no heartbeat with an inventory: %+v", hbs)
			}
			if got := hbs[0].Inventory.Host.Labels[agentapi.LabelVolumeDirShared]; got != tt.want {
				t.Errorf("shared-volumes label %q, want %q", got, tt.want)
			}
		})
	}
}

func TestVolumePath(t *testing.T) {
	for _, tt := range []struct {
		cfg  agent.Config
		want string
	}{
		{agent.Config{DataDir: "/d"}, "/d/volumes/v-1"},
		{agent.Config{DataDir: "/d", VolumeDir: "/shared"}, "/shared/v-1"},
	} {
		if got := agent.VolumePath(tt.cfg, "v-1"); got != filepath.FromSlash(tt.want) {
			t.Errorf("%+v: %s, want %s", tt.cfg, got, tt.want)
		}
	}
}
