//go:build cgo

package nvml

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent/gpu"
)

// fakeEventSet is an NVML event set: Wait returns what send queued, or
// ERROR_TIMEOUT after the timeout; fail makes the next waits fail.
type fakeEventSet struct {
	nvml.EventSet
	events chan nvml.EventData
	mu     sync.Mutex
	fail   int
	freed  bool
	waits  int
}

func newFakeEventSet() *fakeEventSet { return &fakeEventSet{events: make(chan nvml.EventData, 16)} }

func (s *fakeEventSet) Wait(timeoutms uint32) (nvml.EventData, nvml.Return) {
	s.mu.Lock()
	s.waits++
	if s.fail > 0 {
		s.fail--
		s.mu.Unlock()
		return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
	}
	s.mu.Unlock()
	select {
	case ev := <-s.events:
		return ev, nvml.SUCCESS
	case <-time.After(time.Duration(timeoutms) * time.Millisecond):
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
}

func (s *fakeEventSet) Free() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.freed = true
	return nvml.SUCCESS
}

func (s *fakeEventSet) isFreed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freed
}

// xidLib is a fake library whose event sets are set (nil: creating one
// fails) and whose GPUs report XID events unless noEvents names them.
type xidLib struct {
	*fakeLib
	set      *fakeEventSet
	noEvents map[int]bool
	handles  []nvml.Device
}

func (l *xidLib) EventSetCreate() (nvml.EventSet, nvml.Return) {
	if l.set == nil {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	return l.set, nvml.SUCCESS
}

// xidGPU is a fake GPU that answers the event calls.
type xidGPU struct {
	*fakeGPU
	lib        *xidLib
	registered uint64
}

func (g *xidGPU) GetSupportedEventTypes() (uint64, nvml.Return) {
	if g.lib.noEvents[g.index] {
		return nvml.EventTypePState, nvml.SUCCESS
	}
	return nvml.EventTypeXidCriticalError | nvml.EventTypePState, nvml.SUCCESS
}

func (g *xidGPU) RegisterEvents(types uint64, set nvml.EventSet) nvml.Return {
	if set != nvml.EventSet(g.lib.set) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	g.registered |= types
	return nvml.SUCCESS
}

func (l *xidLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= len(l.gpus) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return l.handles[i], nvml.SUCCESS
}

// newXIDHost is a host of three H100s whose GPU 2 reports no XID events.
func newXIDHost(t *testing.T) (*Driver, *xidLib, []*xidGPU) {
	t.Helper()
	base := newFakeLib(h100(t), h100(t), h100(t))
	l := &xidLib{fakeLib: base, set: newFakeEventSet(), noEvents: map[int]bool{2: true}}
	var gpus []*xidGPU
	for _, g := range base.gpus {
		gpus = append(gpus, &xidGPU{fakeGPU: g, lib: l})
	}
	for _, g := range gpus {
		l.handles = append(l.handles, g)
	}
	d := New(l, nil)
	t.Cleanup(func() { d.Close() })
	return d, l, gpus
}

// xidsEventually reads the telemetry until every GPU's XID counts are
// want's (nil: not counted), for a few seconds at most.
func xidsEventually(t *testing.T, d *Driver, want []map[int]uint64) {
	t.Helper()
	var got []map[int]uint64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		tel, err := d.Telemetry(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		same := len(tel) == len(want)
		for i, g := range tel {
			got = append(got, g.XIDErrors)
			if same && ((g.XIDErrors == nil) != (want[i] == nil) || !maps.Equal(g.XIDErrors, want[i])) {
				same = false
			}
		}
		if same {
			return
		}
	}
	t.Fatalf("XID counts %v, want %v", got, want)
}

// TestWatchXIDs: the driver counts XID events by GPU and code from the
// moment it watches; a GPU that does not report them is not counted; a
// wait that fails is retried; Close stops the watcher and frees the set.
func TestWatchXIDs(t *testing.T) {
	d, l, gpus := newXIDHost(t)
	xidsEventually(t, d, []map[int]uint64{nil, nil, nil})
	if err := d.WatchXIDs(); err != nil {
		t.Fatal(err)
	}
	if err := d.WatchXIDs(); err != nil {
		t.Fatalf("a second WatchXIDs: %v", err)
	}
	if gpus[0].registered != nvml.EventTypeXidCriticalError || gpus[2].registered != 0 {
		t.Fatalf("registered events: gpu 0 %#x, gpu 2 %#x", gpus[0].registered, gpus[2].registered)
	}
	xidsEventually(t, d, []map[int]uint64{{}, {}, nil})
	for _, ev := range []nvml.EventData{
		{Device: gpus[1], EventType: nvml.EventTypeXidCriticalError, EventData: 79},
		{Device: gpus[1], EventType: nvml.EventTypeXidCriticalError, EventData: 13},
		{Device: gpus[0], EventType: nvml.EventTypeXidCriticalError, EventData: 13},
		{Device: gpus[1], EventType: nvml.EventTypeXidCriticalError, EventData: 79},
		{Device: gpus[0], EventType: nvml.EventTypePState, EventData: 2}, // not an XID
		{EventType: nvml.EventTypeXidCriticalError, EventData: 31},       // no device
	} {
		l.set.events <- ev
	}
	xidsEventually(t, d, []map[int]uint64{{13: 1}, {79: 2, 13: 1}, nil})
	// A failing wait (a GPU fell off the bus) pauses, then waits again.
	l.set.mu.Lock()
	l.set.fail, l.set.waits = 1, 0
	l.set.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		l.set.mu.Lock()
		failed := l.set.fail == 0
		l.set.mu.Unlock()
		if failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watcher never waited again")
		}
	}
	l.set.events <- nvml.EventData{Device: gpus[0], EventType: nvml.EventTypeXidCriticalError, EventData: 48}
	xidsEventually(t, d, []map[int]uint64{{13: 1, 48: 1}, {79: 2, 13: 1}, nil})

	start := time.Now()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*xidWait+time.Second || !l.set.isFreed() {
		t.Fatalf("Close took %s; set freed: %v", took, l.set.isFreed())
	}
	xidsEventually(t, d, []map[int]uint64{nil, nil, nil})
}

// TestWatchXIDsUnsupported: without an event set, or without a GPU that
// reports XID events, WatchXIDs fails and nothing is counted.
func TestWatchXIDsUnsupported(t *testing.T) {
	d, l, _ := newXIDHost(t)
	l.set = nil
	if err := d.WatchXIDs(); !errors.Is(err, gpu.ErrNotSupported) {
		t.Errorf("no event sets: %v", err)
	}
	d, l, _ = newXIDHost(t)
	set := l.set
	l.noEvents = map[int]bool{0: true, 1: true, 2: true}
	if err := d.WatchXIDs(); !errors.Is(err, gpu.ErrNotSupported) {
		t.Errorf("no GPU with XID events: %v", err)
	}
	if !set.isFreed() {
		t.Error("the unused event set was not freed")
	}
	xidsEventually(t, d, []map[int]uint64{nil, nil, nil})
}
