package agent

import "github.com/gpucloud/gpucloud/agentapi"

// UpdateDNS lets the tests give the instances' DNS a network view.
func (a *Agent) UpdateDNS(networks []agentapi.HostNetwork) { a.updateDNS(networks) }
