package agent

import (
	"context"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// NCCL's environment that an instance given the host's RDMA adapters
// (agentapi.Assignment.RDMA) gets.
const (
	// EnvNCCLIBHCA lists the adapters NCCL may use, by name, comma-separated.
	EnvNCCLIBHCA = "NCCL_IB_HCA"
	// EnvNCCLSocketIfname is the interface NCCL bootstraps over.
	EnvNCCLSocketIfname = "NCCL_SOCKET_IFNAME"
	// InstanceInterface is the workload's own interface in its network
	// namespace (agent/network's InstanceIf).
	InstanceInterface = "eth0"
)

// addRDMA gives an instance that the server gave the host's RDMA adapters
// their device nodes (spec.ExtraDevices: every adapter's nodes, rdma_cm
// once, sorted) and NCCL's environment: NCCL_IB_HCA, the adapters' names, and,
// with a runtime that runs the workload in a network namespace of its own
// (runtime.MetadataServer), NCCL_SOCKET_IFNAME, its interface there (the
// process runtime's workloads share the host's interfaces, which NCCL
// picks among itself). A variable the tenant's environment sets is left
// as the tenant set it. A host without adapters gives nothing.
func (a *Agent) addRDMA(ctx context.Context, as *agentapi.Assignment, spec *runtime.Spec) {
	if !as.RDMA {
		return
	}
	hcas := a.hostHCAs(ctx)
	if len(hcas) == 0 {
		a.log.Warn("agent: the instance was given the host's RDMA adapters, but the host reports none", "instance", as.InstanceID)
		return
	}
	names := make([]string, 0, len(hcas))
	for _, h := range hcas {
		names = append(names, h.Name)
		for _, d := range h.Devices {
			if !slices.Contains(spec.ExtraDevices, d) {
				spec.ExtraDevices = append(spec.ExtraDevices, d)
			}
		}
	}
	slices.Sort(spec.ExtraDevices)
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	setDefault := func(k, v string) {
		if _, set := spec.Env[k]; !set {
			spec.Env[k] = v
		}
	}
	setDefault(EnvNCCLIBHCA, strings.Join(names, ","))
	if _, ok := a.cfg.Runtime.(runtime.MetadataServer); ok {
		setDefault(EnvNCCLSocketIfname, InstanceInterface)
	}
}
