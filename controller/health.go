package controller

import "time"

// DefaultHeartbeatTimeout is how long a host may go without a sign of life
// (an accepted heartbeat, or one the API's rate limit refused) before it
// is marked unhealthy and its instances lost (service.MarkSilentHosts,
// whose doc states the rule).
const DefaultHeartbeatTimeout = 30 * time.Second
