package agent

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	const iv = 20 * time.Millisecond
	for fails, want := range map[int]time.Duration{
		1: iv, 2: 2 * iv, 3: 4 * iv, 4: 8 * iv, 5: 10 * iv, 60: 10 * iv,
	} {
		if got := backoff(iv, fails); got != want {
			t.Errorf("backoff after %d failures = %v, want %v", fails, got, want)
		}
	}
}
