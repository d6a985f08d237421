package agent

import "github.com/gpucloud/gpucloud/agentapi"

// SetScratchUnit makes a GiB of instance store unit bytes, so that a
// test fills a store of a few MiB rather than GiB.
func (a *Agent) SetScratchUnit(unit int64) { a.scratchUnit = unit }

// UpdateDNS lets the tests give the instances' DNS a network view.
func (a *Agent) UpdateDNS(networks []agentapi.HostNetwork) { a.updateDNS(networks) }
