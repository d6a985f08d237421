package httpapi

import (
	"context"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestFilesRefusals: every refusal of a files session is a JSON error
// before any upgrade: not a WebSocket, no token, another tenant's volume
// or instance (not_found, as a missing one), a stopped instance and a
// volume no host holds (conflicts saying why); and a volume attached to a
// running instance whose agent is not connected answers unavailable.
func TestFilesRefusals(t *testing.T) { onBothStores(t, testFilesRefusals) }

func testFilesRefusals(t *testing.T, e *env) {
	ctx := context.Background()
	other := e.Member("initech", "initech-dev")
	vol, err := e.acme.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: 1}, "")
	if err != nil {
		t.Fatal(err)
	}
	never, err := e.acme.CreateVolume(ctx, api.CreateVolumeRequest{Name: "never", SizeGiB: 1}, "")
	if err != nil {
		t.Fatal(err)
	}
	run, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "60"}, Volumes: []string{vol.ID}}, "")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Walk(t, e.store, run.ID, cloud.Running, testkit.Via{}, e.clock.Now())
	stopped, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "60"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Walk(t, e.store, stopped.ID, cloud.Running, testkit.Via{}, e.clock.Now())
	testkit.Walk(t, e.store, stopped.ID, cloud.Stopped, testkit.Via{}, e.clock.Now())
	raw := upgrade(agentapi.RawSubprotocol)
	for _, c := range []struct {
		name, path string
		other      bool
		header     map[string]string
		status     int
		code       cloud.Code
		says       string
	}{
		{"not an upgrade", "/v1/volumes/" + vol.ID + "/files", false, nil, 400, cloud.Invalid, "WebSocket"},
		{"not an upgrade, instance", "/v1/instances/" + run.ID + "/files", false, nil, 400, cloud.Invalid, "WebSocket"},
		{"another tenant's volume", "/v1/volumes/" + vol.ID + "/files", true, raw, 404, cloud.NotFound, vol.ID},
		{"another tenant's instance", "/v1/instances/" + run.ID + "/files", true, raw, 404, cloud.NotFound, run.ID},
		{"a missing volume", "/v1/volumes/v-missing/files", false, raw, 404, cloud.NotFound, "v-missing"},
		{"a stopped instance", "/v1/instances/" + stopped.ID + "/files", false, raw, 409, cloud.Conflict, "stopped"},
		{"a volume never attached", "/v1/volumes/" + never.ID + "/files", false, raw, 409, cloud.Conflict, "never been attached"},
	} {
		tok := e.acmeToken
		if c.other {
			tok = other.Token
		}
		status, _, body := e.raw("GET", c.path, tok, nil, c.header)
		got := decodeErr(t, body)
		if status != c.status || got.Code != c.code || !strings.Contains(got.Message, c.says) {
			t.Errorf("%s: %d %s %q; want %d %s naming %q", c.name, status, got.Code, got.Message, c.status, c.code, c.says)
		}
	}
	// The attached volume routes to its running instance's host, whose
	// agent holds no control channel here.
	if _, err := e.acme.OpenFiles(ctx, "volumes", vol.ID); cloud.ErrorCode(err) != cloud.Unavailable {
		t.Errorf("volumes cp without an agent: %v, want unavailable", err)
	}
	if _, err := other.Client.OpenFiles(ctx, "volumes", vol.ID); cloud.ErrorCode(err) != cloud.NotFound {
		t.Errorf("another tenant's volumes cp through the client: %v", err)
	}
}
