package gateway

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

func TestMergeLoads(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	a := map[string]Load{"e-1": {Waiting: 1, InFlight: 2, Workers: map[string]WorkerLoad{
		"w-1": {Ready: true, Busy: 2, IdleSince: at(5), RunningAt: at(2), ReadyAt: at(3)},
		"w-2": {Ready: false, IdleSince: at(1)},
	}}}
	b := map[string]Load{
		"e-1": {InFlight: 1, Workers: map[string]WorkerLoad{
			"w-1": {Ready: false, Busy: 1, IdleSince: at(9), RunningAt: at(1)},
			"w-2": {Ready: true, IdleSince: at(4), ReadyAt: at(4)},
		}},
		"e-2": {Waiting: 3},
	}
	want := map[string]Load{
		"e-1": {Waiting: 1, InFlight: 3, Workers: map[string]WorkerLoad{
			"w-1": {Ready: true, Busy: 3, IdleSince: at(9), RunningAt: at(1), ReadyAt: at(3)},
			"w-2": {Ready: true, IdleSince: at(4), ReadyAt: at(4)},
		}},
		"e-2": {Waiting: 3},
	}
	for _, c := range []struct {
		name string
		in   []map[string]Load
		want map[string]Load
	}{
		{"none", nil, map[string]Load{}},
		{"one", []map[string]Load{b}, b},
		{"two", []map[string]Load{a, b}, want},
		{"two, other order", []map[string]Load{b, a}, want},
	} {
		if got := MergeLoads(c.in...); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
	if a["e-1"].Workers["w-1"].Busy != 2 {
		t.Error("MergeLoads changed its input")
	}
}

// TestMergeLoadsProperties: over random loads, the merge is independent
// of order, sums every count, and a worker is idle only where it is
// busy on no replica.
func TestMergeLoadsProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 300 {
		var loads []map[string]Load
		sumWaiting, sumBusy := 0, map[string]int{}
		for range r.IntN(4) + 1 {
			m := map[string]Load{}
			for e := range r.IntN(3) {
				l := Load{Waiting: r.IntN(5), InFlight: r.IntN(5), Workers: map[string]WorkerLoad{}}
				for w := range r.IntN(3) {
					wl := WorkerLoad{Ready: r.IntN(2) == 0, Busy: r.IntN(3), IdleSince: t0.Add(time.Duration(r.IntN(100)) * time.Second)}
					l.Workers[string(rune('a'+w))] = wl
					sumBusy[string(rune('0'+e))+string(rune('a'+w))] += wl.Busy
				}
				sumWaiting += l.Waiting
				m[string(rune('0'+e))] = l
			}
			loads = append(loads, m)
		}
		got := MergeLoads(loads...)
		rev := make([]map[string]Load, len(loads))
		for i := range loads {
			rev[len(loads)-1-i] = loads[i]
		}
		if !reflect.DeepEqual(got, MergeLoads(rev...)) {
			t.Fatalf("order matters: %+v", loads)
		}
		w := 0
		for e, l := range got {
			w += l.Waiting
			for wid, wl := range l.Workers {
				if wl.Busy != sumBusy[e+wid] {
					t.Fatalf("worker %s/%s busy %d, want %d", e, wid, wl.Busy, sumBusy[e+wid])
				}
			}
		}
		if w != sumWaiting {
			t.Fatalf("waiting %d, want %d", w, sumWaiting)
		}
	}
}

// TestPickCountsPeers: a worker's slots taken on other replicas count
// against its concurrency here, and the least loaded across replicas is
// picked first.
func TestPickCountsPeers(t *testing.T) {
	ep := &cloud.Endpoint{ID: "e-1", Spec: cloud.EndpointSpec{Concurrency: 2}}
	g := New(Config{})
	es := &endpoint{ep: ep, changed: make(chan struct{}), workers: map[string]*worker{
		"w-1": {id: "w-1", ready: true},
		"w-2": {id: "w-2", ready: true},
	}}
	g.endpoints["e-1"] = es
	// w-1 holds one request elsewhere, w-2 two (it is full).
	g.SetPeerLoads(map[string]Load{"e-1": {Workers: map[string]WorkerLoad{"w-1": {Busy: 1}}}},
		map[string]Load{"e-1": {Workers: map[string]WorkerLoad{"w-2": {Busy: 2}}}})
	g.mu.Lock()
	defer g.mu.Unlock()
	if n := es.free(); n != 1 {
		t.Fatalf("free %d, want 1", n)
	}
	if w := es.pick(); w == nil || w.id != "w-1" {
		t.Fatalf("picked %v, want w-1", w)
	}
	if w := es.pick(); w != nil {
		t.Fatalf("picked %s past the concurrency across replicas", w.id)
	}
	// Without the peers' load, both would have had free slots.
	g.peers = nil
	for _, w := range es.workers {
		w.remote = 0
	}
	if n := es.free(); n != 3 {
		t.Fatalf("free without peers %d, want 3", n)
	}
}
