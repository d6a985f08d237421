package upcmd

import "testing"

func TestProbeAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7878": "127.0.0.1:7878", ":7878": "127.0.0.1:7878", "0.0.0.0:7878": "127.0.0.1:7878",
		"[::]:7878": "127.0.0.1:7878", "10.0.0.5:80": "10.0.0.5:80", "localhost:7878": "localhost:7878",
	} {
		if got := probeAddr(in); got != want {
			t.Errorf("probeAddr(%q) = %q, want %q", in, got, want)
		}
	}
}
