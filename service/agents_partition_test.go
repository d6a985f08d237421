package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// amdInventory is an agent's inventory of an 8-GPU MI300X host, every GPU
// in the operator's mode.
func amdInventory(id, partition, memory string, vfs int) *agentapi.Inventory {
	h := fleet.MockAMDHost(id, "MI300X", 8, partition, memory, vfs)
	h.State = ""
	delete(h.Labels, "driver")
	return &agentapi.Inventory{Host: *h, Driver: "6.10.5"}
}

// A host's AMD GPU modes come from its inventory, checked against the
// catalog (a bad one is invalid_argument naming the GPU's field, and
// nothing is written), and a mode change of a GPU an instance holds is a
// conflict until the GPU is drained.
func TestAgentsAMDPartitionModes(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		join, jtID := f.joinActor("rack-amd")

		before := f.state()
		for _, c := range []struct {
			partition, memory string
			vfs               int
			field             string
		}{
			{"QPX", "NPS4", 0, "inventory.host.gpus[0].memory_partition"},
			{"TPX", "", 0, "inventory.host.gpus[0].partition"},
			{"SPX", "", 8, "inventory.host.gpus[0].vfs"},
		} {
			_, _, _, _, err := f.svc.Agents.Join(ctx, join, jtID, amdInventory("amd-1", c.partition, c.memory, c.vfs), nil, "")
			if ce := ahCode(t, err, cloud.Invalid); ce.Details["field"] != c.field {
				t.Errorf("%s/%s %d VFs: %+v, want field %s", c.partition, c.memory, c.vfs, ce, c.field)
			}
		}
		f.unchanged(before, "refused AMD joins")

		inv := amdInventory("amd-1", "cpx", "nps4", 0)
		if _, _, _, _, err := f.svc.Agents.Join(ctx, join, jtID, inv, nil, ""); err != nil {
			t.Fatal(err)
		}
		g := f.host("amd-1").Spec.GPUs[3]
		if g.Partition != "CPX" || g.MemoryPartition != "NPS4" || g.Parts != 8 || g.Island != 0 {
			t.Errorf("joined GPU %+v", g)
		}

		// An instance holds a CPX partition of GPU 0.
		in, _, err := f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "mi300x.cpx"}, "")
		if err != nil {
			t.Fatal(err)
		}
		testkit.Move(t, st, in.ID, cloud.Scheduled, &fleet.Placement{ID: in.ID, HostID: "amd-1", CPUMilli: 1000, MemoryMiB: 1024,
			Devices: []fleet.Device{{GPU: 0, Kind: fleet.Partition, Part: 0, Parts: 8, Partition: "CPX"}}}, f.clock.Now())

		agent := service.AgentActor("amd-1")
		v := f.host("amd-1").Version
		spx := amdInventory("amd-1", "SPX", "", 0)
		err = f.svc.Agents.Heartbeat(ctx, agent, spx)
		if ce := ahCode(t, err, cloud.Conflict); !strings.Contains(ce.Message, "drain") || !strings.Contains(ce.Message, in.ID) {
			t.Errorf("mode change under an instance: %+v", ce)
		}
		if h := f.host("amd-1"); h.Version != v || h.Spec.GPUs[0].Partition != "CPX" {
			t.Errorf("refused mode change wrote the host: %+v", h.Spec.GPUs[0])
		}
		// GPUs nobody holds change mode freely.
		mixed := amdInventory("amd-1", "CPX", "NPS4", 0)
		for i := 4; i < 8; i++ {
			mixed.Host.GPUs[i].Partition, mixed.Host.GPUs[i].MemoryPartition = "", ""
		}
		if err := f.svc.Agents.Heartbeat(ctx, agent, mixed); err != nil {
			t.Fatal(err)
		}
		if h := f.host("amd-1"); h.Spec.GPUs[0].Partition != "CPX" || h.Spec.GPUs[7].Partition != "SPX" || h.Spec.GPUs[7].Parts != 1 {
			t.Errorf("after the change: %+v / %+v", h.Spec.GPUs[0], h.Spec.GPUs[7])
		}
		// Once the instance is gone, GPU 0 may change too.
		testkit.Walk(t, st, in.ID, cloud.Terminated, testkit.Via{}, f.clock.Now())
		if err := f.svc.Agents.Heartbeat(ctx, agent, spx); err != nil {
			t.Fatalf("mode change of a drained GPU: %v", err)
		}
		if g := f.host("amd-1").Spec.GPUs[0]; g.Partition != "SPX" {
			t.Errorf("drained GPU %+v", g)
		}
	})
}
