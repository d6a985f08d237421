package placement

import (
	"fmt"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// TestLearner: a mix replaces the engine's workload once Min allocations
// run, not again while it holds, and again once it moved by Shift (by GPU
// demand: one 8-GPU job among many small shares moves it). RequestOf, when
// it knows an allocation, gives the request as it was asked (here: any
// model), not as the host it landed on reads.
func TestLearner(t *testing.T) {
	var hosts []*fleet.Host
	for i := 0; i < 8; i++ {
		hosts = append(hosts, fleet.MockHost(fmt.Sprintf("h%d", i), "A100-80GB-SXM", 8))
	}
	f := fleet.MockFleet(hosts...)
	e := NewEngine(nil, NewGPUCloud(nil), 1)
	l := &Learner{Min: 4}
	n := 0
	place := func(r *Request) {
		t.Helper()
		n++
		r.ID = fmt.Sprintf("r%d", n)
		mustPlace(t, e, f, r)
	}
	share := func() *Request {
		return &Request{Mode: catalog.ModeShared, ShareMilli: 250, CPUMilli: 1000}
	}
	for i := 0; i < 3; i++ {
		place(share())
	}
	if l.Learn(e, f) || l.Times != 0 {
		t.Fatalf("learned from 3 allocations with Min 4 (%d times)", l.Times)
	}
	place(share())
	if !l.Learn(e, f) || l.Times != 1 || l.Count != 4 {
		t.Fatalf("did not learn from 4 allocations: times %d, count %d", l.Times, l.Count)
	}
	types := e.Scorer().(*GPUCloud).Workload().Types
	if len(types) != 1 || types[0].Milli != 250 || !types[0].Models["A100-80GB-SXM"] {
		t.Fatalf("learned %+v, want one A100 share of 250", types)
	}
	for i := 0; i < 4; i++ {
		place(share())
	}
	if l.Learn(e, f) {
		t.Fatal("an unchanged mix was learned again")
	}
	// One 8-GPU job is 1 of 9 allocations but 8 of 10 GPUs asked for.
	place(&Request{Mode: catalog.ModeGPU, GPUs: 8, CPUMilli: 8000})
	l.RequestOf = func(id string) *Request {
		if id == "r1" {
			return &Request{Mode: catalog.ModeShared, ShareMilli: 250, CPUMilli: 1000}
		}
		return nil
	}
	if !l.Learn(e, f) || l.Times != 2 || l.Count != 9 {
		t.Fatalf("an 8-GPU job did not move the mix: times %d, count %d", l.Times, l.Count)
	}
	anyModel := false
	for _, ty := range e.Scorer().(*GPUCloud).Workload().Types {
		anyModel = anyModel || ty.Milli == 250 && ty.Models == nil
	}
	if !anyModel {
		t.Error("RequestOf's request (any model) is not in the learned workload")
	}
	if NewEngine(nil, NewFGD(nil), 1).SetWorkload(nil, f) || (&Learner{Min: 4}).Learn(NewEngine(nil, NewFGD(nil), 1), f) {
		t.Error("fgd took a learned workload")
	}
}
