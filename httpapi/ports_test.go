package httpapi

import (
	"net/http"
	"testing"
)

// TestStripCookies: the gpucloud cookies never reach a workload; its own
// cookies do, whatever the Cookie headers' layout.
func TestStripCookies(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want string
	}{
		{"only the console's session", []string{"gpucloud_session=gpc_secret"}, ""},
		{"mixed in one header", []string{"_xsrf=abc; gpucloud_session=gpc_secret; username-127-0-0-1-8888=x"}, "_xsrf=abc; username-127-0-0-1-8888=x"},
		{"several headers", []string{"gpucloud_session=gpc_secret", "a=1", "gpucloud_other=2;b=2"}, "a=1; b=2"},
		{"a name that only contains gpucloud_", []string{"my_gpucloud_x=1"}, "my_gpucloud_x=1"},
		{"none", nil, ""},
	} {
		h := http.Header{}
		for _, v := range tc.in {
			h.Add("Cookie", v)
		}
		stripCookies(h)
		if got := h.Get("Cookie"); got != tc.want || len(h.Values("Cookie")) > 1 {
			t.Errorf("%s: Cookie %q (%d headers), want %q", tc.name, got, len(h.Values("Cookie")), tc.want)
		}
	}
}
