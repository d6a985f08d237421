package cli

import (
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestEndpointKeysCLI: keys create prints the secret once (a retry with
// the same idempotency key does not), list shows no secret, the key runs
// jobs on its endpoint through the CLI and nothing else, bad flags are
// refused naming the field, another tenant neither lists nor revokes the
// key, and a revoked key opens nothing.
func TestEndpointKeysCLI(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	_, other := e.member("bobco", "bob")
	e.ok(tok, "endpoints", "create", "echo", "--image", "ghcr.io/acme/echo:1", "--offering", "l4.1x")
	e.ok(tok, "endpoints", "create", "other", "--image", "ghcr.io/acme/echo:1", "--offering", "l4.1x")

	out := e.ok(tok, "endpoints", "keys", "create", "echo", "--name", "web-app", "--idempotency-key", "k1")
	secret := rowFields(out, "Secret:")
	if len(secret) != 2 || !strings.HasPrefix(secret[1], "gpc_ek-") || !strings.Contains(out, "shown only this once") {
		t.Fatalf("keys create printed %q", out)
	}
	var again api.CreatedEndpointKey
	decodeJSON(t, e.ok(tok, "endpoints", "keys", "create", "echo", "--name", "web-app", "--idempotency-key", "k1", "-o", "json"), &again)
	if again.Secret != "" || !strings.HasPrefix(secret[1], "gpc_"+again.Key.ID+"_") {
		t.Errorf("a retried create: %+v", again)
	}
	var slow api.CreatedEndpointKey
	decodeJSON(t, e.ok(tok, "endpoints", "keys", "create", "echo", "--name", "slow", "--rate", "5", "--burst", "7", "-o", "json"), &slow)
	if slow.Key.Rate != 5 || slow.Key.Burst != 7 || slow.Secret == "" {
		t.Errorf("a key with its own rate: %+v", slow)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--name", "x", "--rate", "5000"}, "rate"},
		{[]string{"--name", "x", "--burst", "-1"}, "burst"},
		{[]string{"--name", "bad name"}, "name"},
		{nil, "--name is required"},
	} {
		code, _, errOut := e.as(tok, append([]string{"endpoints", "keys", "create", "echo"}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("keys create %v: exit %d, %q; want an error naming %s", c.args, code, errOut, c.want)
		}
	}

	list := e.ok(tok, "endpoints", "keys", "list", "echo")
	if f := rowFields(list, again.Key.ID); len(f) == 0 || f[1] != "web-app" || f[2] != "100/s" || f[3] != "200" || f[len(f)-1] != "active" {
		t.Errorf("keys list: %q", list)
	}
	if strings.Contains(list, secret[1][len(secret[1])-20:]) || strings.Contains(list, slow.Secret[len(slow.Secret)-20:]) {
		t.Errorf("keys list shows a secret: %q", list)
	}

	// The key, as the CLI's token, runs on its endpoint by name and reads
	// its job; the other endpoint is not found, and listing is refused.
	key := secret[1]
	var j cloud.Job
	decodeJSON(t, e.ok(key, "endpoints", "run", "echo", "--input", `{"n":1}`, "-o", "json"), &j)
	if j.KeyID != again.Key.ID || j.State != cloud.JobQueued {
		t.Errorf("run through the key: %+v", j)
	}
	if st := e.ok(key, "endpoints", "status", "echo", j.ID); !strings.Contains(st, j.ID) {
		t.Errorf("status through the key: %q", st)
	}
	if code, _, errOut := e.as(key, "endpoints", "run", "other", "--input", "1"); code == 0 || !strings.Contains(errOut, "not") {
		t.Errorf("the key on another endpoint: exit %d %q", code, errOut)
	}
	if code, _, errOut := e.as(key, "endpoints", "list"); code == 0 || !strings.Contains(errOut, "endpoint key") {
		t.Errorf("the key lists endpoints: exit %d %q", code, errOut)
	}

	// Another tenant: its echo is not acme's, and acme's key is no key of
	// its endpoints.
	e.ok(other, "endpoints", "create", "echo", "--image", "ghcr.io/acme/echo:1", "--offering", "l4.1x")
	if l := e.ok(other, "endpoints", "keys", "list", "echo"); strings.Contains(l, again.Key.ID) {
		t.Errorf("bobco lists acme's key: %q", l)
	}
	if code, _, _ := e.as(other, "endpoints", "keys", "revoke", "echo", again.Key.ID); code == 0 {
		t.Error("bobco revoked acme's key")
	}

	out = e.ok(tok, "endpoints", "keys", "revoke", "echo", again.Key.ID)
	if f := rowFields(out, again.Key.ID); len(f) == 0 || f[len(f)-1] != "revoked" {
		t.Errorf("keys revoke: %q", out)
	}
	if code, _, _ := e.as(key, "endpoints", "status", "echo", j.ID); code == 0 {
		t.Error("a revoked key still reads its job")
	}
	if l := e.ok(tok, "endpoints", "keys", "list", "echo", "--all"); !strings.Contains(l, "revoked") {
		t.Errorf("keys list --all: %q", l)
	}
}
