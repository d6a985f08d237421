package httpapi

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/stream"
	"github.com/gpucloud/gpucloud/testkit"
)

// upgrade are the headers of a WebSocket upgrade offering proto.
func upgrade(proto string) map[string]string {
	h := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	if proto != "" {
		h["Sec-WebSocket-Protocol"] = proto
	}
	return h
}

// TestExecRefusals: every refusal of an exec or port-forward is a JSON
// error before any upgrade: not a WebSocket, no subprotocol, bad
// arguments, another tenant's instance (not_found, as a missing one), an
// agent's credential; and a running instance whose host's agent is not
// connected answers unavailable, with its session recorded as started and
// ended.
func TestExecRefusals(t *testing.T) { onBothStores(t, testExecRefusals) }

func testExecRefusals(t *testing.T, e *env) {
	ctx := context.Background()
	other := e.Member("initech", "initech-dev")
	in, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "60"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Walk(t, e.store, in.ID, cloud.Running, testkit.Via{}, e.clock.Now())
	exec := "/v1/instances/" + in.ID + "/exec?"
	fwd := "/v1/instances/" + in.ID + "/port-forward?"
	cmd := url.Values{"command": {"id"}}.Encode()
	for _, c := range []struct {
		name, path, token string
		header            map[string]string
		status            int
		code              cloud.Code
		says              string
	}{
		{"not an upgrade", exec + cmd, e.acmeToken, nil, 400, cloud.Invalid, "WebSocket"},
		{"no subprotocol", exec + cmd, e.acmeToken, upgrade(""), 400, cloud.Invalid, stream.Subprotocol},
		{"no command", exec, e.acmeToken, upgrade(stream.Subprotocol), 400, cloud.Invalid, "command"},
		{"bad tty", exec + cmd + "&tty=yes", e.acmeToken, upgrade(stream.Subprotocol), 400, cloud.Invalid, "tty"},
		{"bad cols", exec + cmd + "&cols=-1", e.acmeToken, upgrade(stream.Subprotocol), 400, cloud.Invalid, "cols"},
		{"port 0", fwd + "port=0", e.acmeToken, upgrade(""), 400, cloud.Invalid, "port"},
		{"port 70000", fwd + "port=70000", e.acmeToken, upgrade(""), 400, cloud.Invalid, "port"},
		{"no token", exec + cmd, "", upgrade(stream.Subprotocol), 401, cloud.Unauthenticated, ""},
		{"another tenant's exec", "/v1/instances/" + in.ID + "/exec?" + cmd, "", upgrade(stream.Subprotocol), 404, cloud.NotFound, in.ID},
	} {
		tok := c.token
		if c.name == "another tenant's exec" {
			tok = other.Token
		}
		before := e.counts()
		status, _, body := e.raw("GET", c.path, tok, nil, c.header)
		got := decodeErr(t, body)
		if status != c.status || got.Code != c.code || !strings.Contains(got.Message, c.says) {
			t.Errorf("%s: %d %s %q; want %d %s naming %q", c.name, status, got.Code, got.Message, c.status, c.code, c.says)
		}
		e.unchanged(before, c.name)
	}

	// Another tenant's port-forward, through the client.
	if _, err := other.Client.PortForward(ctx, in.ID, 8888); cloud.ErrorCode(err) != cloud.NotFound {
		t.Errorf("another tenant's port-forward: %v", err)
	}
	// No agent holds a control channel here: unavailable, recorded.
	start := time.Now()
	_, err = e.acme.Exec(ctx, in.ID, client.ExecOptions{Command: []string{"id"}})
	if cloud.ErrorCode(err) != cloud.Unavailable || !strings.Contains(err.Error(), "not connected to this server replica") {
		t.Fatalf("exec without an agent: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the refusal took %s", time.Since(start))
	}
	page, err := e.acme.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range page.Events {
		if strings.HasPrefix(string(ev.Kind), "session.") {
			kinds = append(kinds, string(ev.Kind)+":"+ev.Reason)
		}
	}
	if len(kinds) != 2 || kinds[0] != "session.started:exec: id" || !strings.HasPrefix(kinds[1], "session.ended:exec: id: the host's agent did not open it") {
		t.Errorf("session events %q", kinds)
	}
}
