package controlplane

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/fleet"
)

// TestHeartbeatAsksForItsInterval: a heartbeat's answer asks the agent
// for a sixth of the server's heartbeat timeout (5 s at the default 30 s),
// so that a host misses five before it is taken for lost.
func TestHeartbeatAsksForItsInterval(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		want    time.Duration
	}{
		{"the default timeout", 0, 5 * time.Second},
		{"a 12 s timeout", 12 * time.Second, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Start(ctx, Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "hb.db"), Listen: "127.0.0.1:0", Log: quiet,
				TLS: TLS{Plain: true}, HeartbeatTimeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			jt, err := client.New(s.URL, s.AdminToken, s.HTTPClient()).CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "j"})
			if err != nil {
				t.Fatal(err)
			}
			h := fleet.MockHost("node-1", "L4", 1)
			h.State = ""
			jr, err := agentapi.NewClient(s.URL, "", s.HTTPClient()).Join(ctx, agentapi.JoinRequest{JoinToken: jt.Secret, Inventory: &agentapi.Inventory{Host: *h}})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := agentapi.NewClient(s.URL, jr.Credential, s.HTTPClient()).Heartbeat(ctx, agentapi.HeartbeatRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Interval(); got != tc.want {
				t.Errorf("asked for a heartbeat every %v; want %v", got, tc.want)
			}
		})
	}
}
