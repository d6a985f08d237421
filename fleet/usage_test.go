package fleet

import (
	"reflect"
	"testing"
)

func TestGPUUsage(t *testing.T) {
	f := MockFleet(MockHost("a", "H100", 4), MockHost("b", "A100-80GB", 2), MockCPUHost("c"))
	before := f.Changes()
	for _, p := range []*Placement{
		whole("w", "a", 0, 1),
		share("s1", "a", 2, 250, 1024),
		share("s2", "a", 2, 250, 1024),
		mig("m", "a", 3, 9, 4, true), // 3g.40gb: 3 compute slices
	} {
		if err := f.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	if f.Changes() == before {
		t.Error("Changes did not move with Apply")
	}
	got := f.GPUUsage()
	want := []GPUCount{
		{Model: "A100-80GB-SXM", Mode: ModeWhole, GPUs: 2},
		{Model: "H100-80GB-SXM", Mode: ModeMIG, Allocated: true, GPUs: 1, SlicesUsed: 3, SlicesFree: 4},
		{Model: "H100-80GB-SXM", Mode: ModeShared, Allocated: true, GPUs: 1},
		{Model: "H100-80GB-SXM", Mode: ModeWhole, Allocated: true, GPUs: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GPUUsage:\n got %+v\nwant %+v", got, want)
	}
	n := f.Changes()
	if err := f.Release("m"); err != nil {
		t.Fatal(err)
	}
	if f.Changes() == n {
		t.Error("Changes did not move with Release")
	}
	// The auto-enabled MIG mode went with its last instance.
	if got := f.GPUUsage()[1]; got != (GPUCount{Model: "H100-80GB-SXM", Mode: ModeShared, Allocated: true, GPUs: 1}) {
		t.Errorf("after the release: %+v", got)
	}
}
