//go:build cgo

package nvml

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent/gpu"
)

// XID errors reach NVML's users only as events: a process registers the
// GPUs it cares about in an event set (nvmlDeviceRegisterEvents with
// nvmlEventTypeXidCriticalError) and waits on the set (nvmlEventSetWait),
// which returns one event at a time, its EventData being the XID's code.
// No counter can be read later, so the driver counts from the moment it
// starts watching: the counts are those since the agent started.
//
// This code is written against go-nvml and NVML's documentation and tested
// on fakes; it has not run against real GPUs (docs/METRICS.md says so).

// xidWait is how long one wait on the event set blocks, which bounds how
// long Close waits for the watcher to stop.
const xidWait = 500 * time.Millisecond

// xidBackoff is the pause after a wait that failed (a GPU fell off the
// bus, the driver is going away), so that a broken event set does not spin.
const xidBackoff = time.Second

// xidWatch counts the XID events of the GPUs registered in one event set.
type xidWatch struct {
	// devices are the registered GPUs, each with its UUID, to find the
	// GPU of an event without calling NVML.
	devices []xidDevice
	mu      sync.Mutex
	// counts maps a registered GPU's UUID to its counts by XID code.
	counts map[string]map[int]uint64
	stop   context.CancelFunc
	done   chan struct{}
}

type xidDevice struct {
	dev  nvml.Device
	uuid string
}

// WatchXIDs starts counting the XID errors NVML reports on the host's GPUs,
// in a goroutine that waits on an NVML event set until Close. From then on
// Telemetry reports each registered GPU's counts by XID code (empty until
// one happens); a GPU that does not report XID events keeps XIDErrors nil.
// Open calls it. Calling it again does nothing. It fails with
// ErrNotSupported when no GPU can report XID events, or with NVML's error
// when no event set can be created; Telemetry then counts nothing.
func (d *Driver) WatchXIDs() error {
	d.xmu.Lock()
	defer d.xmu.Unlock()
	if d.xid != nil {
		return nil
	}
	set, ret := d.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nvmlError("create an NVML event set for XID errors", ret)
	}
	w := &xidWatch{counts: map[string]map[int]uint64{}, done: make(chan struct{})}
	n, ret := d.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		set.Free()
		return nvmlError("count GPUs", ret)
	}
	for i := range n {
		dev, ret := d.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		types, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || types&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			continue
		}
		w.devices = append(w.devices, xidDevice{dev: dev, uuid: uuid})
		w.counts[uuid] = map[int]uint64{}
	}
	if len(w.devices) == 0 {
		set.Free()
		return fmt.Errorf("no GPU reports XID events: %w", gpu.ErrNotSupported)
	}
	ctx, stop := context.WithCancel(context.Background())
	w.stop = stop
	d.xid = w
	go w.run(ctx, set)
	return nil
}

// run waits for events until ctx ends, then frees the set.
func (w *xidWatch) run(ctx context.Context, set nvml.EventSet) {
	defer close(w.done)
	defer set.Free()
	for ctx.Err() == nil {
		ev, ret := set.Wait(uint32(xidWait / time.Millisecond))
		switch ret {
		case nvml.SUCCESS:
			w.record(ev)
		case nvml.ERROR_TIMEOUT:
		default:
			select {
			case <-ctx.Done():
			case <-time.After(xidBackoff):
			}
		}
	}
}

// record counts one event, if it is an XID of a registered GPU.
func (w *xidWatch) record(ev nvml.EventData) {
	if ev.EventType&nvml.EventTypeXidCriticalError == 0 || ev.Device == nil {
		return
	}
	uuid := ""
	for _, d := range w.devices {
		if d.dev == ev.Device {
			uuid = d.uuid
			break
		}
	}
	if uuid == "" {
		// A handle NVML gave in another form: ask it which GPU it is.
		u, ret := ev.Device.GetUUID()
		if ret != nvml.SUCCESS {
			return
		}
		uuid = u
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := w.counts[uuid]; c != nil {
		c[int(ev.EventData)]++
	}
}

// of returns a copy of a GPU's counts; nil when the GPU is not watched.
func (w *xidWatch) of(uuid string) map[int]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.counts[uuid]
	if c == nil {
		return nil
	}
	return maps.Clone(c)
}

// xidsOf is what Telemetry reports of a GPU's XIDs: nil when they are not
// counted.
func (d *Driver) xidsOf(uuid string) map[int]uint64 {
	d.xmu.Lock()
	w := d.xid
	d.xmu.Unlock()
	if w == nil {
		return nil
	}
	return w.of(uuid)
}

// stopXIDs stops the watcher, if any, and waits for it to free its set.
func (d *Driver) stopXIDs() {
	d.xmu.Lock()
	w := d.xid
	d.xid = nil
	d.xmu.Unlock()
	if w != nil {
		w.stop()
		<-w.done
	}
}
