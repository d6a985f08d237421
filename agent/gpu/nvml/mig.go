//go:build cgo

package nvml

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// SetMIGMode switches GPU i's MIG mode. A GPU already in the mode is left
// alone, busy or not. Turning MIG on needs a catalog model with MIG
// (ErrNotSupported otherwise); turning it off needs the GPU free of
// instances (ErrBusy). When NVML accepts the change but can only apply it
// after the GPU is idle or reset, the mode stays pending and the error wraps
// ErrBusy.
func (d *Driver) SetMIGMode(ctx context.Context, i int, on bool) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := d.device(i)
	if err != nil {
		return err
	}
	want := nvml.DEVICE_MIG_DISABLE
	if on {
		want = nvml.DEVICE_MIG_ENABLE
	}
	current, pending, ret := dev.GetMigMode()
	switch {
	case noAnswer(ret) && !on:
		return nil // A GPU without MIG is as off as it gets.
	case ret != nvml.SUCCESS:
		return nvmlError(fmt.Sprintf("gpu %d: read MIG mode", i), ret)
	case current == want && pending == want:
		return nil
	}
	if on {
		model, err := d.modelOf(i, dev)
		if err != nil {
			return err
		}
		if !model.SupportsMIG() {
			return fmt.Errorf("gpu %d: gpu model %s has no MIG: %w", i, model.Name, gpu.ErrNotSupported)
		}
	} else if current == nvml.DEVICE_MIG_ENABLE {
		list, err := listInstances(i, dev)
		if err != nil {
			return err
		}
		if len(list) > 0 {
			return fmt.Errorf("gpu %d: cannot turn MIG off while %d MIG instance(s) exist: %w", i, len(list), gpu.ErrBusy)
		}
	}
	if err := ctxErr(ctx); err != nil {
		return err
	}
	activation, ret := dev.SetMigMode(want)
	if ret != nvml.SUCCESS {
		return nvmlError(fmt.Sprintf("gpu %d: turn MIG %s", i, onOff(on)), ret)
	}
	if activation != nvml.SUCCESS {
		return fmt.Errorf("gpu %d: MIG %s is pending until the GPU is idle and reset: %w (%w)", i, onOff(on), activation, gpu.ErrBusy)
	}
	return nil
}

// CreateMIG creates a GPU instance of profile profileID at slot start on GPU
// i, with one compute instance spanning it, and returns its MIG device UUID.
// The request is checked against the catalog's table (fleet.CheckMIG) before
// any MIG call reaches NVML, first alone (profile and start) and then against
// the instances on the GPU. An identical existing instance is returned as it
// is; one that lacks its compute instance gets it. When the compute instance
// cannot be created, the new GPU instance is destroyed again.
func (d *Driver) CreateMIG(ctx context.Context, i, profileID, start int) (gpu.MIGInstance, error) {
	out := gpu.MIGInstance{GPU: i, ProfileID: profileID, Start: start}
	if err := ctxErr(ctx); err != nil {
		return out, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := d.device(i)
	if err != nil {
		return out, err
	}
	model, err := d.modelOf(i, dev)
	if err != nil {
		return out, err
	}
	profile, err := fleet.CheckMIG(model, nil, profileID, start)
	if err != nil {
		return out, fmt.Errorf("gpu %d: %w", i, err)
	}
	on, err := migEnabled(i, dev)
	if err != nil {
		return out, err
	}
	if !on {
		return out, fmt.Errorf("gpu %d: not in MIG mode, so it cannot hold MIG profile %s: %w",
			i, fleet.MIGProfileLabel(model, profileID), gpu.ErrInvalid)
	}
	list, err := listInstances(i, dev)
	if err != nil {
		return out, err
	}
	existing := make([]fleet.MIGInstance, 0, len(list))
	for _, mi := range list {
		in, _ := fleetInstance(model, mi)
		if in.Start == start && in.ProfileID == profileID {
			out.UUID, err = finishInstance(i, dev, mi)
			return out, err
		}
		existing = append(existing, in)
	}
	if _, err := fleet.CheckMIG(model, existing, profileID, start); err != nil {
		return out, fmt.Errorf("gpu %d: %w", i, err)
	}
	info, err := findProfile(i, dev, profileID)
	if err != nil {
		return out, err
	}
	if err := ctxErr(ctx); err != nil {
		return out, err
	}

	// From here on the call completes or undoes what it did, whatever ctx
	// says, so that it never leaves a half-made instance.
	what := fmt.Sprintf("gpu %d: create MIG instance %s at slot %d", i, fleet.MIGProfileLabel(model, profileID), start)
	placement := nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(profile.MemorySlots)}
	gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &placement)
	if ret != nvml.SUCCESS {
		return out, nvmlError(what, ret)
	}
	gii, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		err := nvmlError(what+": read the new instance", ret)
		return out, undo(err, gi.Destroy())
	}
	out.UUID, err = finishInstance(i, dev, migInstance{gi: gi, info: gii, profile: info})
	if err != nil {
		return out, undo(err, destroyInstance(i, migInstance{gi: gi, info: gii, profile: info}))
	}
	return out, nil
}

// undo reports a failure after which a new GPU instance was destroyed again,
// or, when destroying it failed too, both.
func undo(err error, ret error) error {
	if ret == nil {
		return err
	}
	return fmt.Errorf("%w; destroying the new instance failed too: %v", err, ret)
}

// finishInstance gives a GPU instance a compute instance spanning it, unless
// it has one, and returns its MIG device UUID.
func finishInstance(i int, dev nvml.Device, mi migInstance) (string, error) {
	cis, err := computeInstances(i, mi.gi)
	if err != nil {
		return "", err
	}
	if len(cis) == 0 {
		ciInfo, err := fullComputeProfile(i, mi)
		if err != nil {
			return "", err
		}
		if _, ret := mi.gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
			return "", nvmlError(fmt.Sprintf("gpu %d: create compute instance in MIG instance at slot %d", i, mi.start()), ret)
		}
	}
	return migDeviceUUID(i, dev, mi)
}

// DestroyMIG destroys the GPU instance at slot start on GPU i, with its
// compute instances. No instance there is ErrNotFound; processes on it are
// ErrBusy.
func (d *Driver) DestroyMIG(ctx context.Context, i, start int) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := d.device(i)
	if err != nil {
		return err
	}
	mi, err := instanceAt(i, dev, start)
	if err != nil {
		return err
	}
	if err := ctxErr(ctx); err != nil {
		return err
	}
	return destroyInstance(i, mi)
}

// destroyInstance destroys a GPU instance's compute instances, then the
// instance.
func destroyInstance(i int, mi migInstance) error {
	cis, err := computeInstances(i, mi.gi)
	if err != nil {
		return err
	}
	for _, ci := range cis {
		if ret := ci.Destroy(); ret != nvml.SUCCESS {
			return nvmlError(fmt.Sprintf("gpu %d: destroy compute instance of MIG instance at slot %d", i, mi.start()), ret)
		}
	}
	if ret := mi.gi.Destroy(); ret != nvml.SUCCESS {
		return nvmlError(fmt.Sprintf("gpu %d: destroy MIG instance at slot %d", i, mi.start()), ret)
	}
	return nil
}

// instanceAt finds the GPU instance that starts at a slot; a GPU not in MIG
// mode, or no instance there, is ErrNotFound.
func instanceAt(i int, dev nvml.Device, start int) (migInstance, error) {
	on, err := migEnabled(i, dev)
	if err != nil {
		return migInstance{}, err
	}
	if !on {
		return migInstance{}, fmt.Errorf("gpu %d: not in MIG mode, so no MIG instance starts at slot %d: %w", i, start, gpu.ErrNotFound)
	}
	list, err := listInstances(i, dev)
	if err != nil {
		return migInstance{}, err
	}
	for _, mi := range list {
		if mi.start() == start {
			return mi, nil
		}
	}
	return migInstance{}, fmt.Errorf("gpu %d: no MIG instance starts at slot %d: %w", i, start, gpu.ErrNotFound)
}

// findProfile returns NVML's info for the GPU instance profile with the ID
// nvidia-smi prints. NVML is asked by profile index, so every index is tried.
func findProfile(i int, dev nvml.Device, id int) (nvml.GpuInstanceProfileInfo, error) {
	for p := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := dev.GetGpuInstanceProfileInfo(p)
		if ret == nvml.ERROR_INVALID_ARGUMENT || noAnswer(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return info, nvmlError(fmt.Sprintf("gpu %d: read MIG profile index %d", i, p), ret)
		}
		if int(info.Id) == id {
			return info, nil
		}
	}
	return nvml.GpuInstanceProfileInfo{}, fmt.Errorf("gpu %d: NVML has no MIG profile id %d: %w", i, id, gpu.ErrNotSupported)
}

// computeInstances lists a GPU instance's compute instances, of any profile.
func computeInstances(i int, gi nvml.GpuInstance) ([]nvml.ComputeInstance, error) {
	var out []nvml.ComputeInstance
	seen := map[uint32]bool{}
	for p := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(p, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.ERROR_INVALID_ARGUMENT || noAnswer(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("gpu %d: read compute profile index %d", i, p), ret)
		}
		if info.InstanceCount == 0 {
			continue
		}
		cis, ret := gi.GetComputeInstances(&info)
		if ret == nvml.ERROR_NOT_FOUND || noAnswer(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("gpu %d: list compute instances", i), ret)
		}
		for _, ci := range cis {
			cii, ret := ci.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, nvmlError(fmt.Sprintf("gpu %d: read compute instance", i), ret)
			}
			if !seen[cii.Id] {
				seen[cii.Id] = true
				out = append(out, ci)
			}
		}
	}
	return out, nil
}

// fullComputeProfile is the compute instance profile that spans a whole GPU
// instance: the one with as many compute slices.
func fullComputeProfile(i int, mi migInstance) (nvml.ComputeInstanceProfileInfo, error) {
	for p := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := mi.gi.GetComputeInstanceProfileInfo(p, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.ERROR_INVALID_ARGUMENT || noAnswer(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return info, nvmlError(fmt.Sprintf("gpu %d: read compute profile index %d", i, p), ret)
		}
		if info.SliceCount == mi.profile.SliceCount {
			return info, nil
		}
	}
	return nvml.ComputeInstanceProfileInfo{}, fmt.Errorf("gpu %d: NVML has no compute profile of %d slices for the MIG instance at slot %d: %w",
		i, mi.profile.SliceCount, mi.start(), gpu.ErrNotSupported)
}

// migDeviceUUID returns the UUID ("MIG-...") of the MIG device of a GPU
// instance, found among the parent's MIG device handles by GPU instance ID.
// An instance without a compute instance has no MIG device: ErrNotFound.
func migDeviceUUID(i int, dev nvml.Device, mi migInstance) (string, error) {
	mig, k, err := migDevice(i, dev, mi)
	if err != nil {
		return "", err
	}
	uuid, ret := mig.GetUUID()
	if ret != nvml.SUCCESS {
		return "", nvmlError(fmt.Sprintf("gpu %d: read MIG device %d's UUID", i, k), ret)
	}
	return uuid, nil
}

// migDevice returns the handle of the MIG device of a GPU instance and its
// index under the parent: the first of the parent's MIG device handles
// whose GPU instance ID is the instance's (gpucloud makes one compute
// instance per GPU instance). An instance without a compute instance has
// no MIG device: ErrNotFound.
func migDevice(i int, dev nvml.Device, mi migInstance) (nvml.Device, int, error) {
	n, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, 0, nvmlError(fmt.Sprintf("gpu %d: count MIG devices", i), ret)
	}
	for k := range n {
		mig, ret := dev.GetMigDeviceHandleByIndex(k)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // An unused index.
		}
		if ret != nvml.SUCCESS {
			return nil, 0, nvmlError(fmt.Sprintf("gpu %d: get MIG device %d", i, k), ret)
		}
		id, ret := mig.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			return nil, 0, nvmlError(fmt.Sprintf("gpu %d: read MIG device %d's instance", i, k), ret)
		}
		if uint32(id) == mi.info.Id {
			return mig, k, nil
		}
	}
	return nil, 0, fmt.Errorf("gpu %d: the MIG instance at slot %d has no MIG device (no compute instance): %w", i, mi.start(), gpu.ErrNotFound)
}

// Devices returns the UUIDs to expose for a placement, in the order of
// p.Devices: a whole or shared device is its GPU's UUID, a MIG slice the MIG
// device UUID of the instance of its profile at its start. It creates
// nothing: a missing instance is ErrNotFound, for the agent to create. A bare-metal placement without devices gets every GPU.
func (d *Driver) Devices(ctx context.Context, p *fleet.Placement) ([]string, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("no placement: %w", gpu.ErrInvalid)
	}
	if d.HostID != "" && p.HostID != "" && p.HostID != d.HostID {
		return nil, fmt.Errorf("placement %s is for host %s, not %s: %w", p.ID, p.HostID, d.HostID, gpu.ErrInvalid)
	}
	devices := p.Devices
	if p.Metal && len(devices) == 0 {
		n, ret := d.lib.DeviceGetCount()
		if ret != nvml.SUCCESS {
			return nil, nvmlError("count GPUs", ret)
		}
		for i := range n {
			devices = append(devices, fleet.Device{GPU: i, Kind: fleet.Whole})
		}
	}
	out := make([]string, 0, len(devices))
	for _, dv := range devices {
		if err := ctxErr(ctx); err != nil {
			return nil, err
		}
		uuid, err := d.deviceUUID(p, dv)
		if err != nil {
			return nil, err
		}
		out = append(out, uuid)
	}
	return out, nil
}

func (d *Driver) deviceUUID(p *fleet.Placement, dv fleet.Device) (string, error) {
	i := dv.GPU
	dev, err := d.device(i)
	if err != nil {
		return "", err
	}
	switch dv.Kind {
	case fleet.Whole, fleet.Share:
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			return "", nvmlError(fmt.Sprintf("gpu %d: read UUID", i), ret)
		}
		if dv.UUID != "" && dv.UUID != uuid {
			return "", fmt.Errorf("gpu %d: placement %s wants GPU %s, but the GPU at index %d is %s: %w", i, p.ID, dv.UUID, i, uuid, gpu.ErrNotFound)
		}
		// On bare metal the tenant owns the host, MIG mode or not.
		if !p.Metal {
			on, err := migEnabled(i, dev)
			if err != nil {
				return "", err
			}
			if on {
				return "", fmt.Errorf("gpu %d: in MIG mode, so placement %s cannot use it as a %s GPU: %w", i, p.ID, dv.Kind, gpu.ErrInvalid)
			}
		}
		return uuid, nil
	case fleet.MIGSlice:
		mi, err := instanceAt(i, dev, dv.MIGStart)
		if err != nil {
			return "", err
		}
		if int(mi.profile.Id) != dv.MIGProfileID {
			model := d.modelOrNil(i, dev)
			return "", fmt.Errorf("gpu %d: the MIG instance at slot %d is %s, not %s as placement %s wants: %w",
				i, dv.MIGStart, profileLabel(model, int(mi.profile.Id)), profileLabel(model, dv.MIGProfileID), p.ID, gpu.ErrNotFound)
		}
		return migDeviceUUID(i, dev, mi)
	}
	return "", fmt.Errorf("gpu %d: placement %s has a device of unknown kind %q: %w", i, p.ID, dv.Kind, gpu.ErrInvalid)
}

// modelOrNil is the GPU's catalog model for messages; nil when unknown.
func (d *Driver) modelOrNil(i int, dev nvml.Device) *catalog.Model {
	id, err := d.identify(i, dev)
	if err != nil {
		return nil
	}
	return id.model
}

// profileLabel is fleet.MIGProfileLabel for a model that may be unknown.
func profileLabel(m *catalog.Model, id int) string {
	if m == nil {
		return fmt.Sprintf("id %d", id)
	}
	return fleet.MIGProfileLabel(m, id)
}
