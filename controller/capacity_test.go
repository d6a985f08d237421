package controller

import (
	"context"
	"testing"
	"time"
)

func TestSchedulerAvailability(t *testing.T) {
	st := newStore(t)
	seed(t, st) // one 8-GPU H100 host, one 2-GPU L40S host
	s := newScheduler(st)
	if s.Availability() != nil {
		t.Fatal("availability before the fleet is built")
	}
	ctx := context.Background()
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	a := s.Availability()
	cases := []struct {
		offering     string
		hosts, fits  int
		reasonsEmpty bool
	}{
		{"h100.8x", 1, 1, true},
		{"h100.1x", 1, 1, true},
		{"l40s.1x", 1, 1, true},
		{"h200.1x", 0, 0, false},
	}
	for _, c := range cases {
		got, ok := a[c.offering]
		if !ok {
			t.Fatalf("%s: no availability (%d offerings)", c.offering, len(a))
		}
		if got.Hosts != c.hosts || got.FitsNow != c.fits || (len(got.Reasons) == 0) != c.reasonsEmpty {
			t.Errorf("%s: %+v, want hosts %d fits %d", c.offering, got, c.hosts, c.fits)
		}
		if !got.AsOf.Equal(t0) {
			t.Errorf("%s: as of %v", c.offering, got.AsOf)
		}
	}
	// Fill the H100 host: it could still run an h100.8x, but not now.
	create(t, st, "big", "h100.8x", t0)
	s.avail.last = time.Time{} // skip the once-a-second throttle
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(t, st, "big"); got.Placement == nil {
		t.Fatalf("big not placed: %+v", got)
	}
	got := s.Availability()["h100.8x"]
	if got.Hosts != 1 || got.FitsNow != 0 {
		t.Errorf("after filling: %+v", got)
	}
	if sum(got.Reasons) != 2 {
		t.Errorf("reasons %v should count both hosts", got.Reasons)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
