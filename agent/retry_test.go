package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// TestRetryDelay: after a failure the agent waits its backoff, less a
// random part of up to half of it, or what a rate-limited answer's
// Retry-After asks when that is longer, capped.
func TestRetryDelay(t *testing.T) {
	limited := func(secs float64) error {
		return &cloud.Error{Code: cloud.RateLimited, Message: "slow down", Details: map[string]any{"retry_after_seconds": secs}}
	}
	for _, tc := range []struct {
		name     string
		fails    int
		err      error
		min, max time.Duration
	}{
		{"first failure", 1, errors.New("boom"), time.Second / 2, time.Second},
		{"third failure", 3, errors.New("boom"), 2 * time.Second, 4 * time.Second},
		{"retry-after longer than the backoff", 1, limited(7), 7 * time.Second, 7 * time.Second},
		{"retry-after shorter than the backoff", 4, limited(2), 4 * time.Second, 8 * time.Second},
		{"wrapped, as a pass's joined errors are", 1, errors.Join(errors.New("x"), fmt.Errorf("heartbeat: %w", limited(5))), 5 * time.Second, 5 * time.Second},
		{"capped", 1, limited(86400), maxRetryAfter, maxRetryAfter},
		{"rate-limited without a header", 1, &cloud.Error{Code: cloud.RateLimited}, time.Second / 2, time.Second},
	} {
		seen := map[time.Duration]bool{}
		for range 50 {
			got := retryDelay(time.Second, tc.fails, tc.err)
			if got < tc.min || got > tc.max {
				t.Errorf("%s: %v, want %v to %v", tc.name, got, tc.min, tc.max)
			}
			seen[got] = true
		}
		// A jittered delay varies; one the server asked for does not.
		if spread := len(seen) > 1; spread != (tc.min != tc.max) {
			t.Errorf("%s: %d distinct delays in 50", tc.name, len(seen))
		}
	}
}
