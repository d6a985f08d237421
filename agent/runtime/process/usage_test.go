//go:build linux

package process

import "testing"

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := []byte("4242 (my (odd) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 250 50 30 20 20 0 1 0 100 8192000 512 18446744073709551615 1 1 0 0 0\n")
	pgrp, ticks, rss, ok := parseStat(line)
	if !ok || pgrp != 4240 || ticks != 350 || rss != 512 {
		t.Fatalf("parseStat = %d, %d, %d, %v; want 4240, 350, 512, true", pgrp, ticks, rss, ok)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 x 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21",
		"1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 x"} {
		if _, _, _, ok := parseStat([]byte(bad)); ok {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}
