package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// TestRetryDelay: after a failure the agent waits its backoff, or what a
// rate-limited answer's Retry-After asks when that is longer, capped.
func TestRetryDelay(t *testing.T) {
	limited := func(secs float64) error {
		return &cloud.Error{Code: cloud.RateLimited, Message: "slow down", Details: map[string]any{"retry_after_seconds": secs}}
	}
	for _, tc := range []struct {
		name  string
		fails int
		err   error
		want  time.Duration
	}{
		{"first failure", 1, errors.New("boom"), time.Second},
		{"third failure", 3, errors.New("boom"), 4 * time.Second},
		{"retry-after longer than the backoff", 1, limited(7), 7 * time.Second},
		{"retry-after shorter than the backoff", 4, limited(2), 8 * time.Second},
		{"wrapped, as a pass's joined errors are", 1, errors.Join(errors.New("x"), fmt.Errorf("heartbeat: %w", limited(5))), 5 * time.Second},
		{"capped", 1, limited(86400), maxRetryAfter},
		{"rate-limited without a header", 1, &cloud.Error{Code: cloud.RateLimited}, time.Second},
	} {
		if got := retryDelay(time.Second, tc.fails, tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
