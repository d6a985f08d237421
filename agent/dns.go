package agent

import (
	"github.com/gpucloud/gpucloud/agent/dns"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// The instances' DNS (issue 19). When the runtime serves each workload's
// DNS inside its network namespace (runtime.DNSServing), the agent holds
// one resolver (agent/dns) for the host: an instance on a private network
// gets its network's server in its Spec, and the host's network view
// gives the resolver its zones (updateDNS).

// newResolver is the host's resolver, nil when the runtime serves no DNS.
func newResolver(cfg Config) *dns.Resolver {
	rt, ok := cfg.Runtime.(runtime.DNSServing)
	if !ok || !rt.ServesDNS() {
		return nil
	}
	return dns.New(dns.Config{Upstreams: cfg.DNSUpstreams, Log: cfg.Log})
}

// updateDNS gives the instances' DNS the networks of the host's latest
// network view (agentapi.NetworkView.Networks): each instance's server
// answers the names of its network's endpoints from then on. The network
// view's long poll calls it with every view it gets; an agent whose
// runtime serves no DNS ignores it.
func (a *Agent) updateDNS(networks []agentapi.HostNetwork) {
	if a.dns != nil {
		a.dns.Update(networks)
	}
}

// serveDNS gives the workload of an instance on a private network its
// network's DNS server, when the runtime serves DNS; other instances keep
// their image's resolv.conf.
func (a *Agent) serveDNS(s *inst, spec *runtime.Spec) {
	if a.dns == nil || s.a.Network == nil || s.a.Network.NetworkID == "" {
		return
	}
	spec.DNS = a.dns.For(s.a.Network.NetworkID)
}
