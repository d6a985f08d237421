// Package gpu is the agent's seam to the GPUs of its host. The Driver
// interface is what the agent calls to read the inventory it reports (an
// agentapi.Inventory, the agent protocol's type), lay out MIG instances and
// find the device UUIDs a workload may see; agent/gpu/sim implements it for
// simulated hosts and tests, agent/gpu/nvml for real GPUs.
//
// The MIG geometry (which profile may start at which slot, how slots and
// compute slices are budgeted) is checked here, against the catalog's profile
// table, by CheckMIG. Drivers call it before they touch hardware so that a bad
// request fails the same way, with the same message, on every driver: NVML's
// own answers are terse, and its mocks are known to disagree with real GPUs.
package gpu

import (
	"context"
	"errors"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/fleet"
)

// MIGInstance is a GPU instance as the driver creates it; UUID is the MIG
// device UUID ("MIG-...") to expose to workloads.
type MIGInstance struct {
	// GPU is the index of the parent GPU.
	GPU int `json:"gpu"`
	// ProfileID is the GPU instance profile ID (19, 20, 15, 14, 9, 5, 0).
	ProfileID int `json:"profile_id"`
	// Start is the first memory slot the instance holds.
	Start int    `json:"start"`
	UUID  string `json:"uuid"`
}

// Driver reads and changes the GPUs of one host. Implementations are safe for
// concurrent use. Every method honours ctx: a call whose context is done
// returns ctx.Err() (possibly wrapped) and leaves the GPUs as they were or as
// a completed call would have left them, never half-changed.
//
// Errors that drive the agent's decisions wrap one of ErrNotFound, ErrBusy,
// ErrNotSupported, ErrInvalid or ErrUnavailable; test them with errors.Is.
// Any other error is a driver failure the agent reports and retries.
type Driver interface {
	// Inventory reads the host's GPUs. ERROR_NOT_SUPPORTED-like gaps are
	// answers (zero values), not failures: a GPU without a utilization
	// counter reports 0%. It fails only when the host cannot be read at all
	// (ErrUnavailable when the driver or host is gone). The result is the
	// caller's to keep: later calls do not change it.
	Inventory(ctx context.Context) (*agentapi.Inventory, error)

	// SetMIGMode switches a GPU's MIG mode; the GPU must be idle. Setting
	// the mode a GPU is already in succeeds and changes nothing, even when
	// the GPU is busy. Errors: ErrNotFound for an unknown GPU index,
	// ErrNotSupported for turning MIG on for a model without MIG, ErrBusy
	// when the GPU runs processes or (to turn MIG off) still has instances.
	SetMIGMode(ctx context.Context, gpu int, on bool) error

	// CreateMIG creates a GPU instance (and its compute instance) of a
	// profile at a start slot; returns its device UUID. Idempotent for an
	// identical existing instance: the same profile at the same start is
	// returned as it is. Errors: ErrNotFound for an unknown GPU index,
	// ErrNotSupported for a model without MIG or a profile ID the model does
	// not have, ErrInvalid for a GPU not in MIG mode or a start slot the
	// profile cannot use, ErrBusy when the slots, compute slices, media
	// engines or the profile's per-GPU limit are taken by other instances.
	CreateMIG(ctx context.Context, gpu, profileID, start int) (MIGInstance, error)

	// DestroyMIG destroys the GPU instance starting at a slot (with its
	// compute instances). Errors: ErrNotFound when the GPU or the instance
	// does not exist (callers that tear down idempotently ignore it), ErrBusy
	// while processes run on the instance.
	DestroyMIG(ctx context.Context, gpu, start int) error

	// Devices returns the UUIDs to make visible for a placement: whole GPU
	// UUIDs, or the MIG device UUIDs of its slices (creating nothing). A
	// shared device is the UUID of its GPU. The order follows p.Devices.
	// Errors: ErrNotFound when a GPU, a GPU with the placement's UUID or a
	// MIG instance of the placement's profile at its start is not there (the
	// agent then creates the instance, or reports the placement stale),
	// ErrInvalid when the placement is for another host or asks for a whole
	// or shared GPU that is in MIG mode.
	Devices(ctx context.Context, p *fleet.Placement) ([]string, error)

	// Utilization returns the mean busy fraction (0..1) of the devices
	// with the given UUIDs (whole GPUs or MIG devices, as Devices returns
	// them) over the driver's own sampling period: what the agent reports
	// as an instance's GPU utilization. A shared GPU reports the whole
	// GPU's utilization, whoever uses it. A device the driver cannot read
	// a value for is left out of the mean; when none can be read it fails
	// with ErrNotSupported (NVML cannot read a MIG device, see
	// agent/gpu/nvml). Errors: ErrInvalid for no UUIDs, ErrNotFound for a
	// UUID the host does not have.
	Utilization(ctx context.Context, uuids []string) (float64, error)

	// Telemetry reads what the agent's metrics exporter serves of each GPU
	// (agent/exporter), in index order. A field the device does not answer
	// (a counter the product lacks, a GPU in MIG mode that has no
	// utilization of its own) is nil, never a made-up zero. It fails only
	// when the GPUs cannot be listed at all (ErrUnavailable when the driver
	// or host is gone); a GPU whose UUID cannot be read is left out. The
	// result is the caller's to keep.
	Telemetry(ctx context.Context) ([]Telemetry, error)
}

// Telemetry is one GPU's monitoring readings, as Driver.Telemetry returns
// them. Nil pointers are readings the device did not give.
type Telemetry struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// Model is the fleet's model name (the catalog's, or the driver's own
	// name for a GPU the catalog does not know).
	Model string `json:"model"`
	// MIG is set when the GPU is in MIG mode; its slices are in Instances.
	MIG bool `json:"mig,omitempty"`
	// Utilization is the fraction (0..1) of the last sample period a kernel
	// ran on the GPU.
	Utilization *float64 `json:"utilization,omitempty"`
	// MemoryUsedBytes and MemoryFreeBytes are the framebuffer memory in use
	// and free.
	MemoryUsedBytes *uint64 `json:"memory_used_bytes,omitempty"`
	MemoryFreeBytes *uint64 `json:"memory_free_bytes,omitempty"`
	// SMClockMHz is the current SM clock.
	SMClockMHz *float64 `json:"sm_clock_mhz,omitempty"`
	// PowerWatts is the current power draw.
	PowerWatts *float64 `json:"power_watts,omitempty"`
	// TemperatureC is the GPU core temperature in degrees Celsius.
	TemperatureC *float64 `json:"temperature_c,omitempty"`
	// XIDErrors counts the XID errors the driver saw on the GPU since it
	// started (the agent's start, for NVML), by XID code (NVIDIA's table:
	// 13 graphics engine exception, 48 double-bit ECC error, 79 fallen off
	// the bus...); empty when it saw none, nil when the driver does not
	// count them.
	XIDErrors map[int]uint64 `json:"xid_errors,omitempty"`
	// Instances are the MIG instances of a GPU in MIG mode, by start slot.
	Instances []MIGTelemetry `json:"instances,omitempty"`
}

// MIGTelemetry is one MIG instance's readings.
type MIGTelemetry struct {
	// ID is the GPU instance ID (nvidia-smi's GI ID; DCGM's GPU_I_ID).
	ID int `json:"id"`
	// ProfileID and Profile are the GPU instance profile's ID and name
	// ("3g.40gb"; empty when the catalog does not know the profile).
	ProfileID int    `json:"profile_id"`
	Profile   string `json:"profile,omitempty"`
	// Start is the first memory slot the instance holds.
	Start int `json:"start"`
	// UUID is the MIG device UUID; empty for an instance without a compute
	// instance.
	UUID string `json:"uuid,omitempty"`
	// EngineActive is the fraction (0..1) of time the instance's graphics
	// engine was busy (DCGM's GR_ENGINE_ACTIVE).
	EngineActive *float64 `json:"engine_active,omitempty"`
}

// LoadSimulator is implemented by the drivers of simulated hosts, whose
// GPUs run nothing: the agent passes them the load each device's workloads
// declare (metadata's PUT /v1/load), and Utilization reports it. The
// agent's metadata endpoint accepts a load only when its driver is one.
type LoadSimulator interface {
	// SetLoad sets the utilization (0..1) Utilization reports for the
	// device with the given UUID. Errors: ErrNotFound for an unknown
	// UUID, ErrInvalid for a value outside [0, 1].
	SetLoad(uuid string, utilization float64) error
}

var (
	// ErrNotFound means a GPU, MIG instance or device the call names does
	// not exist on the host.
	ErrNotFound = errors.New("not found")
	// ErrBusy means the GPU or instance is in use: processes run on it, or
	// other MIG instances hold what the request needs.
	ErrBusy = fleet.ErrBusy
	// ErrNotSupported means the GPU model or driver cannot do what was
	// asked, such as MIG on an L40S; retrying does not help.
	ErrNotSupported = fleet.ErrNotSupported
	// ErrInvalid means the request is malformed or does not fit the GPU's
	// state or geometry, such as a 3g profile at slot 2. The MIG geometry
	// check (fleet.CheckMIG) shares these three values.
	ErrInvalid = fleet.ErrInvalid
	// ErrUnavailable means the driver or host cannot be reached (the driver
	// unloaded, the host vanished); the agent retries and stops heartbeating
	// healthy.
	ErrUnavailable = errors.New("unavailable")
)
