package cli

import (
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
)

// TestInstancesPublish: --publish on create, the URLs in describe, and
// instances open's URL and curl line (which names the token's variable,
// never the token); refusals as usage errors or the server's.
func TestInstancesPublish(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "--publish", "8888", "--publish", "6006", "-o", "json"), &in)
	if len(in.Publish) != 2 || in.Publish[0] != 8888 || in.Publish[1] != 6006 {
		t.Fatalf("created with publish %v", in.Publish)
	}
	url := e.url + "/v1/instances/" + in.ID + "/ports/8888/"
	if out := e.ok(tok, "instances", "describe", in.ID); !strings.Contains(out, url) || !strings.Contains(out, "/ports/6006/") {
		t.Errorf("describe lacks the published URLs:\n%s", out)
	}
	out := e.ok(tok, "instances", "open", in.ID, "8888")
	if want := url + "\ncurl -H \"Authorization: Bearer $GPUCLOUD_TOKEN\" " + url + "\n"; out != want {
		t.Errorf("open:\n%s\nwant:\n%s", out, want)
	}
	if strings.Contains(out, tok) {
		t.Error("open printed the token")
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an unpublished port", []string{"instances", "open", in.ID, "9999"}, "does not publish port 9999"},
		{"not a port", []string{"instances", "open", in.ID, "http"}, "want a TCP port"},
		{"a port twice", []string{"instances", "create", "--offering", "l4.1x", "--publish", "80", "--publish", "80"}, "published twice"},
		{"port 0", []string{"instances", "create", "--offering", "l4.1x", "--publish", "0"}, "not a TCP port"},
	} {
		code, _, errOut := e.as(tok, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want a failure saying %q", tc.name, code, errOut, tc.want)
		}
	}
}
