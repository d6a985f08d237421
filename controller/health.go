package controller

import "time"

// DefaultHeartbeatTimeout is how long a host may stay silent before it is
// marked unhealthy and its instances lost (service.MarkSilentHosts).
const DefaultHeartbeatTimeout = 30 * time.Second
