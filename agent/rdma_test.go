package agent_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/fleet"
)

// nsRecorder is a recorder that says it runs workloads in network
// namespaces of their own (runtime.MetadataServer), as the containerd
// runtime does.
type nsRecorder struct{ *recorder }

func (nsRecorder) MetadataURL() string { return "http://169.254.169.254" }

// TestRDMA checks that an instance the server gives the host's RDMA
// adapters gets their device nodes (Spec.ExtraDevices) and NCCL's
// environment, in the spec and in the workload's environment, and that
// other instances get neither.
func TestRDMA(t *testing.T) {
	ib := sim.Spec{ID: "ib1", GPUs: sim.GPUSpec{Model: "H100", Count: 4}, HCAs: sim.HCAs{{}, {}}}
	nodes := []string{"/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"}
	discovered := []fleet.HCA{{Name: "mlx5_7", LinkLayer: "Ethernet", NetDev: "eth7", Devices: []string{"/dev/infiniband/uverbs7"}}}
	tests := []struct {
		desc       string
		spec       sim.Spec
		namespaced bool
		hcas       func() ([]fleet.HCA, error) // agent.Config.HCAs
		rdma       bool
		env        map[string]string // the tenant's
		wantDevs   []string
		wantEnv    map[string]string // "" means unset
	}{
		{desc: "process runtime", spec: ib, rdma: true, wantDevs: nodes,
			wantEnv: map[string]string{"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": ""}},
		{desc: "a runtime with network namespaces", spec: ib, namespaced: true, rdma: true, wantDevs: nodes,
			wantEnv: map[string]string{"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "eth0"}},
		{desc: "not given the adapters", spec: ib, namespaced: true,
			wantEnv: map[string]string{"NCCL_IB_HCA": "", "NCCL_SOCKET_IFNAME": ""}},
		{desc: "the tenant's choice stays", spec: ib, namespaced: true, rdma: true, wantDevs: nodes,
			env:     map[string]string{"NCCL_IB_HCA": "mlx5_1", "NCCL_SOCKET_IFNAME": "lo"},
			wantEnv: map[string]string{"NCCL_IB_HCA": "mlx5_1", "NCCL_SOCKET_IFNAME": "lo"}},
		{desc: "a host without adapters", spec: h100, rdma: true,
			wantEnv: map[string]string{"NCCL_IB_HCA": "", "NCCL_SOCKET_IFNAME": ""}},
		{desc: "adapters discovered, some skipped", spec: h100, rdma: true,
			hcas:     func() ([]fleet.HCA, error) { return discovered, errors.New("rdma: adapters skipped: x: no ports") },
			wantDevs: []string{"/dev/infiniband/uverbs7"},
			wantEnv:  map[string]string{"NCCL_IB_HCA": "mlx5_7"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			rec := &recorder{specs: map[string]runtime.Spec{}}
			e := newEnv(t, tt.spec, func(c *agent.Config) {
				rec.Runtime = c.Runtime
				c.Runtime = rec
				if tt.namespaced {
					c.Runtime = nsRecorder{rec}
				}
				c.HCAs = tt.hcas
			})
			as := e.assignment("i-1", whole(tt.spec.ID, 0), serveScript)
			as.RDMA = tt.rdma
			for k, v := range tt.env {
				as.Env[k] = v
			}
			e.assign(as)
			env := e.workloadEnv("i-1")
			s := rec.spec("i-1")
			if !slices.Equal(s.ExtraDevices, tt.wantDevs) {
				t.Errorf("extra devices %v, want %v", s.ExtraDevices, tt.wantDevs)
			}
			for k, want := range tt.wantEnv {
				if s.Env[k] != want {
					t.Errorf("spec env %s=%q, want %q", k, s.Env[k], want)
				}
				if got, ok := env[k]; got != want || ok != (want != "") {
					t.Errorf("workload env %s=%q (set %v), want %q", k, got, ok, want)
				}
			}
			// The inventory the agent reports carries the adapters.
			if err := e.ag.Heartbeat(t.Context()); err != nil {
				t.Fatal(err)
			}
			var inv *agentapi.Inventory
			for _, hb := range e.srv.Heartbeats() {
				if hb.Inventory != nil {
					inv = hb.Inventory
				}
			}
			want := len(tt.spec.HCAs)
			if tt.hcas != nil {
				want = len(discovered)
			}
			if inv == nil || len(inv.Host.HCAs) != want {
				t.Errorf("the heartbeat's inventory %+v, want %d adapters", inv, want)
			}
		})
	}
}
