package cli

import (
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestResolveNames: every verb that takes an ID takes a unique name too,
// resolved among what the caller sees; a live instance wins over a
// terminated one of the same name; two live ones are an error listing
// their IDs; a name of nothing, or another tenant's, is not_found naming
// what was looked for.
func TestResolveNames(t *testing.T) {
	e := newCloudEnv(t)
	_, acme := e.member("acme", "alice")
	_, globex := e.member("globex", "gina")
	create := func(tok, name string) *cloud.Instance {
		t.Helper()
		var in cloud.Instance
		decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "--name", name, "-o", "json"), &in)
		return &in
	}
	web := create(acme, "web")
	pair1, pair2 := create(acme, "pair"), create(acme, "pair")
	oldGone := create(acme, "old")
	e.move(oldGone.ID, cloud.Terminated, testkit.Via{})
	oldLive := create(acme, "old")
	gone := create(acme, "gone")
	e.move(gone.ID, cloud.Terminated, testkit.Via{})
	secret := create(globex, "secret")

	for _, c := range []struct {
		name string
		tok  string
		args []string
		// want is in the output; err in the error, for a failure.
		want, err string
	}{
		{"by ID", acme, []string{"instances", "describe", web.ID}, web.ID, ""},
		{"by name", acme, []string{"instances", "describe", "web"}, web.ID, ""},
		{"events by name", acme, []string{"instances", "events", "web"}, "created", ""},
		{"stop by name", acme, []string{"instances", "stop", "web"}, web.ID, ""},
		{"a live one before a terminated one", acme, []string{"instances", "describe", "old"}, oldLive.ID, ""},
		{"only a terminated one", acme, []string{"instances", "describe", "gone"}, gone.ID, ""},
		{"ambiguous", acme, []string{"instances", "describe", "pair"}, "",
			`2 instances are named "pair": give one of their IDs (` + min(pair1.ID, pair2.ID) + ", " + max(pair1.ID, pair2.ID) + ") (invalid_argument)"},
		{"ambiguous, among several", acme, []string{"instances", "terminate", "web", "pair"}, "", "pair: 2 instances are named"},
		{"missing", acme, []string{"instances", "logs", "nope"}, "",
			`no instance named "nope" ('gpucloud instances list' lists them) (not_found)`},
		{"another tenant's name", acme, []string{"instances", "describe", "secret"}, "", `no instance named "secret"`},
		{"another tenant's ID", acme, []string{"instances", "describe", secret.ID}, "", "not found (not_found)"},
		{"the other tenant's own name", globex, []string{"instances", "describe", "secret"}, secret.ID, ""},
		{"an ID-like string no name matches goes as an ID", acme, []string{"instances", "describe", "i-nope"}, "", `instance "i-nope" not found`},
		{"a volume's missing name", acme, []string{"volumes", "delete", "data"}, "", `no volume named "data" ('gpucloud volumes list' lists them)`},
		{"a group's missing name", acme, []string{"groups", "describe", "nope"}, "", `no group named "nope"`},
	} {
		code, out, errOut := e.as(c.tok, c.args...)
		switch {
		case c.err == "" && (code != 0 || !strings.Contains(out, c.want)):
			t.Errorf("%s: %v: exit %d, %q %q; want %q", c.name, c.args, code, out, errOut, c.want)
		case c.err != "" && (code == 0 || !strings.Contains(errOut, c.err)):
			t.Errorf("%s: %v: exit %d, %q; want an error with %q", c.name, c.args, code, errOut, c.err)
		}
	}

	// Volumes, keys and the --instance of attach take names too.
	var vol cloud.Volume
	decodeJSON(t, e.ok(acme, "volumes", "create", "--name", "data", "--size-gib", "1", "-o", "json"), &vol)
	if out := e.ok(acme, "volumes", "attach", "data", "--instance", "old"); !strings.Contains(out, oldLive.ID) {
		t.Errorf("attach by names:\n%s", out)
	}
	if out := e.ok(acme, "volumes", "detach", "data"); !strings.Contains(out, vol.ID) {
		t.Errorf("detach by name:\n%s", out)
	}
	// instances create --volume takes a name.
	var withVol cloud.Instance
	decodeJSON(t, e.ok(acme, "instances", "create", "--offering", "l4.1x", "--volume", "data", "-o", "json", "--", "true"), &withVol)
	if len(withVol.Volumes) != 1 || withVol.Volumes[0] != vol.ID {
		t.Errorf("create --volume data: volumes %v, want [%s]", withVol.Volumes, vol.ID)
	}
	e.ok(acme, "instances", "terminate", withVol.ID, "--wait")
	if _, _, errOut := e.as(globex, "instances", "create", "--offering", "l4.1x", "--volume", "data", "--", "true"); !strings.Contains(errOut, `no volume named "data"`) {
		t.Errorf("another tenant's volume by name: %q", errOut)
	}
	if out := e.ok(acme, "volumes", "delete", "data"); !strings.Contains(out, vol.ID) {
		t.Errorf("delete by name: %q", out)
	}
}
