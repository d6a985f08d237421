package httpapi

import (
	"context"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestBillingCreateRaces sends the same idempotent creates, and address
// allocations, at once: each key makes one commitment and one spot request,
// and no address is handed out twice.
func TestBillingCreateRaces(t *testing.T) { onBothStores(t, testBillingCreateRaces) }

func testBillingCreateRaces(t *testing.T, e *env) {
	e.withPrices()
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	commitments := make([]*cloud.Commitment, n)
	requests := make([]*cloud.SpotRequest, n)
	addresses := make([]*cloud.Address, n)
	errs := make([]error, 3*n)
	for i := range n {
		wg.Add(3)
		go func() {
			defer wg.Done()
			commitments[i], errs[i] = e.acme.CreateCommitment(ctx, api.CreateCommitmentRequest{Plan: cloud.PlanRetainer,
				Offering: "l4.1x", Quantity: 1, Term: "1y"}, "race")
		}()
		go func() {
			defer wg.Done()
			requests[i], errs[n+i] = e.acme.CreateSpotRequest(ctx, api.CreateSpotRequestRequest{
				Pools: []cloud.Pool{{Offering: "l4.1x", Zone: "zone-a"}}}, "race")
		}()
		go func() {
			defer wg.Done()
			addresses[i], errs[2*n+i] = e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{}, "")
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	ips := map[string]bool{}
	for i := range n {
		if commitments[i].ID != commitments[0].ID || requests[i].ID != requests[0].ID {
			t.Errorf("call %d answered commitment %s, request %s; the first %s, %s", i,
				commitments[i].ID, requests[i].ID, commitments[0].ID, requests[0].ID)
		}
		if ips[addresses[i].IP] {
			t.Errorf("address %s handed out twice", addresses[i].IP)
		}
		ips[addresses[i].IP] = true
	}
	c := e.billingCounts()
	if c.Commitments != 1 || c.SpotRequests != 1 || c.Instances != 1 || c.Addresses != n {
		t.Errorf("after the races: %+v", c)
	}
}
