package cli

import (
	"slices"
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
		{"port 0", []string{"instances", "create", "--offering", "l4.1x", "--publish", "0"}, "want a TCP port from 1 to 65535"},
		{"keep prefix of a port twice", []string{"instances", "create", "--offering", "l4.1x", "--publish", "80/keep-prefix", "--publish", "80/keep-prefix"}, "published twice"},
	} {
		code, _, errOut := e.as(tok, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want a failure saying %q", tc.name, code, errOut, tc.want)
		}
	}
}

func TestParsePublish(t *testing.T) {
	for _, c := range []struct {
		in         []string
		ports      []int
		keep       []int
		wantErrSub string
	}{
		{nil, nil, nil, ""},
		{[]string{"8000"}, []int{8000}, nil, ""},
		{[]string{"8888/keep-prefix", "6006/keep-prefix", "8000"}, []int{8888, 6006, 8000}, []int{8888, 6006}, ""},
		{[]string{" 8888 "}, []int{8888}, nil, ""},
		{[]string{"0"}, nil, nil, "1 to 65535"},
		{[]string{"65536"}, nil, nil, "1 to 65535"},
		{[]string{"http"}, nil, nil, "1 to 65535"},
		{[]string{"8888/strip"}, nil, nil, "only option after the port is /keep-prefix"},
		{[]string{"8888/"}, nil, nil, "only option after the port is /keep-prefix"},
	} {
		ports, keep, err := parsePublish(c.in)
		switch {
		case c.wantErrSub != "" && (err == nil || !strings.Contains(err.Error(), c.wantErrSub)):
			t.Errorf("%q: %v, want an error with %q", c.in, err, c.wantErrSub)
		case c.wantErrSub == "" && (err != nil || !slices.Equal(ports, c.ports) || !slices.Equal(keep, c.keep)):
			t.Errorf("%q: %v %v %v, want %v %v", c.in, ports, keep, err, c.ports, c.keep)
		}
	}
}
