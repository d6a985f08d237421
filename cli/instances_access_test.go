package cli

import "testing"

func TestParsePorts(t *testing.T) {
	for _, c := range []struct {
		in            string
		local, remote int
		ok            bool
	}{
		{"8888", 8888, 8888, true},
		{"8080:80", 8080, 80, true},
		{"0:6006", 0, 6006, true},
		{":6006", 0, 6006, true},
		{"0", 0, 0, false},
		{"80:0", 0, 0, false},
		{"70000", 0, 0, false},
		{"a:80", 0, 0, false},
		{"", 0, 0, false},
	} {
		l, r, err := parsePorts(c.in)
		if (err == nil) != c.ok || c.ok && (l != c.local || r != c.remote) {
			t.Errorf("parsePorts(%q) = %d, %d, %v; want %d, %d, ok %v", c.in, l, r, err, c.local, c.remote, c.ok)
		}
	}
}
