package billing

import (
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

func TestIntervals(t *testing.T) {
	var l ledger
	l.inst("acme", "i-1", "h100.1x", "z1", od, ts(time.Hour), ts(3*time.Hour))
	l.inst("beta", "i-1", "h100.8x", "z2", cloud.MarketSpot, ts(2*time.Hour)) // another tenant's resource of the same ID
	l.vol("acme", "i-1", 50, ts(0), ts(4*time.Hour))                          // another kind
	l.add(false, ts(5*time.Hour), cloud.Usage{TenantID: "acme", Kind: cloud.UsageCompute, ResourceID: "i-2"})
	ivs := Intervals(l.us, ts(3*time.Hour))
	want := []Interval{
		{TenantID: "acme", Kind: cloud.UsageCompute, ResourceID: "i-1", Offering: "h100.1x", Zone: "z1", Market: od, Quantity: 1,
			Start: ts(time.Hour), End: ts(3 * time.Hour), Open: true}, // its Off is not before the cut
		{TenantID: "beta", Kind: cloud.UsageCompute, ResourceID: "i-1", Offering: "h100.8x", Zone: "z2", Market: cloud.MarketSpot, Quantity: 1,
			Start: ts(2 * time.Hour), End: ts(3 * time.Hour), Open: true},
		{TenantID: "acme", Kind: cloud.UsageVolume, ResourceID: "i-1", Quantity: 50, Start: ts(0), End: ts(3 * time.Hour), Open: true},
	}
	if len(ivs) != len(want) {
		t.Fatalf("intervals %+v", ivs)
	}
	for i := range want {
		if ivs[i] != want[i] {
			t.Errorf("interval %d: %+v\n want %+v", i, ivs[i], want[i])
		}
	}
	ivs = Intervals(l.us, ts(day(1)))
	if len(ivs) != 3 || ivs[0].Open || !ivs[0].End.Equal(ts(3*time.Hour)) || !ivs[1].Open || ivs[2].Open {
		t.Errorf("intervals %+v", ivs)
	}
	if ivs := Intervals(nil, ts(0)); len(ivs) != 0 {
		t.Errorf("no usage: %+v", ivs)
	}
}
