package httpapi

import (
	"context"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestAgentNetworksLongPoll: GET /v1/agent/networks answers the host's
// view at once, waits while the version it was given is current, answers
// as soon as a rule of the host's group changes, refuses a wait beyond
// the maximum, and is for agents only.
func TestAgentNetworksLongPoll(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	agent, hostID := e.join(inventory("h1", "L4", 1))
	in, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if e.schedule() != 1 {
		t.Fatal("the instance was not placed")
	}
	st := e.Services.Store()
	n := &cloud.Network{ID: "net-lp", TenantID: e.acmeID, Name: "lp", CIDR: "10.1.0.0/16", CreatedAt: e.clock.Now()}
	sn := &cloud.Subnet{ID: "subnet-lp", TenantID: e.acmeID, NetworkID: n.ID, Name: "a", CIDR: "10.1.0.0/24", Zone: "z", CreatedAt: e.clock.Now()}
	g := &cloud.SecurityGroup{ID: "sg-lp", TenantID: e.acmeID, NetworkID: n.ID, Name: "g", CreatedAt: e.clock.Now(),
		Ingress: []cloud.SecurityRule{{ID: "sgr-a", Protocol: cloud.ProtocolTCP, FromPort: 22, ToPort: 22, CIDR: "0.0.0.0/0"}}}
	err = st.Tx(ctx, func(tx cloud.Tx) error {
		for _, f := range []func() error{
			func() error { return tx.CreateNetwork(ctx, n) },
			func() error { return tx.CreateSubnet(ctx, sn) },
			func() error { return tx.CreateSecurityGroup(ctx, g) },
		} {
			if err := f(); err != nil {
				return err
			}
		}
		got, err := tx.GetInstance(ctx, in.ID)
		if err != nil {
			return err
		}
		got.NetworkID, got.SubnetID, got.SecurityGroupIDs, got.PrivateAddress = n.ID, sn.ID, []string{g.ID}, "10.1.0.4"
		return tx.UpdateInstance(ctx, got)
	})
	if err != nil {
		t.Fatal(err)
	}

	v1, err := agent.Networks(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(v1.Networks) != 1 || v1.Networks[0].ID != n.ID || len(v1.Networks[0].Endpoints) != 1 || v1.Networks[0].Endpoints[0].HostID != hostID {
		t.Fatalf("view: %+v", v1)
	}
	same, err := agent.Networks(ctx, v1.Version, 100*time.Millisecond)
	if err != nil || same.Version != v1.Version {
		t.Fatalf("an unchanged view after a wait: %v, %v", same, err)
	}

	got := make(chan *agentapi.NetworkView, 1)
	go func() {
		v, err := agent.Networks(ctx, v1.Version, agentapi.MaxNetworkWait)
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	time.Sleep(50 * time.Millisecond) // let the poll start waiting
	err = st.Tx(ctx, func(tx cloud.Tx) error {
		cur, err := tx.GetSecurityGroup(ctx, g.ID)
		if err != nil {
			return err
		}
		cur.Ingress = nil
		return tx.UpdateSecurityGroup(ctx, cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if v == nil || v.Version == v1.Version || len(v.Networks[0].SecurityGroups[0].Ingress) != 0 {
			t.Fatalf("after the change: %+v", v)
		}
	case <-time.After(agentapi.MaxNetworkWait / 2):
		t.Fatal("the long poll did not answer the change")
	}

	if _, err := agent.Networks(ctx, v1.Version, time.Hour); cloud.ErrorCode(err) != cloud.Invalid {
		t.Fatalf("wait of an hour: %v", err)
	}
	// A tenant's token is not an agent's.
	if _, err := e.agentClient(e.acmeToken).Networks(ctx, "", 0); cloud.ErrorCode(err) != cloud.PermissionDenied {
		t.Fatalf("a tenant reads a host's networks: %v", err)
	}
}
