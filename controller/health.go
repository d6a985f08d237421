package controller

import "time"

// DefaultHeartbeatTimeout is how long a host may go without a sign of life
// (an accepted heartbeat, or one the API's rate limit refused) before it
// is marked unhealthy and its instances lost (service.MarkSilentHosts,
// whose doc states the rule).
const DefaultHeartbeatTimeout = 30 * time.Second

// HeartbeatsPerTimeout is how many heartbeats the server asks an agent to
// send per heartbeat timeout (HeartbeatInterval): a host is taken for lost
// only after it missed this many, less one.
const HeartbeatsPerTimeout = 6

// HeartbeatInterval is how often a server whose heartbeat timeout is
// timeout asks agents to heartbeat while nothing changes: 5 s at the
// default 30 s. Zero for a timeout that is not positive.
func HeartbeatInterval(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return 0
	}
	return timeout / HeartbeatsPerTimeout
}
