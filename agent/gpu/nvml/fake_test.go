//go:build cgo

package nvml

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/catalog"
)

// The fakes below simulate a host's GPUs behind nvml.Interface, in the style
// of mig-parted: each embeds the go-nvml interface it stands in for and
// overrides only the methods the driver calls, so that any other call panics
// on the nil embedded interface and the test learns of it. Their MIG geometry
// (valid starts, sizes in memory slots, compute slices) comes from our
// catalog, never from go-nvml's mock servers, whose sizes are wrong.

// fakeLib is an NVML library over a set of fake GPUs.
type fakeLib struct {
	nvml.Interface
	gpus   []*fakeGPU
	driver string
	// cuda is the CUDA version as NVML encodes it, 12040 for 12.4.
	cuda int
	// countRet, when set, is what DeviceGetCount fails with.
	countRet nvml.Return
	// calls logs every call the driver makes, "gpu0.GetUUID".
	calls []string
}

var (
	_ nvml.Interface       = (*fakeLib)(nil)
	_ nvml.Device          = (*fakeGPU)(nil)
	_ nvml.Device          = (*fakeMIGDevice)(nil)
	_ nvml.GpuInstance     = (*fakeGI)(nil)
	_ nvml.ComputeInstance = (*fakeCI)(nil)
)

func newFakeLib(gpus ...*fakeGPU) *fakeLib {
	l := &fakeLib{gpus: gpus, driver: "550.54.15", cuda: 12040}
	for i, g := range gpus {
		g.lib, g.index = l, i
		if g.uuid == "" {
			g.uuid = fmt.Sprintf("GPU-%08d-0000-0000-0000-%012d", i, i)
		}
		if g.bus == 0 {
			g.bus = uint32(0x18 + 0x10*i)
		}
	}
	return l
}

func (l *fakeLib) record(call string) { l.calls = append(l.calls, call) }

// callsMatching returns the logged calls that contain any of the names.
func (l *fakeLib) callsMatching(names ...string) []string {
	var out []string
	for _, c := range l.calls {
		for _, n := range names {
			if strings.HasSuffix(c, "."+n) || c == n {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

func (l *fakeLib) SystemGetDriverVersion() (string, nvml.Return) {
	l.record("SystemGetDriverVersion")
	return l.driver, nvml.SUCCESS
}

func (l *fakeLib) SystemGetCudaDriverVersion_v2() (int, nvml.Return) {
	l.record("SystemGetCudaDriverVersion_v2")
	return l.cuda, nvml.SUCCESS
}

func (l *fakeLib) DeviceGetCount() (int, nvml.Return) {
	l.record("DeviceGetCount")
	if l.countRet != nvml.SUCCESS {
		return 0, l.countRet
	}
	return len(l.gpus), nvml.SUCCESS
}

func (l *fakeLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	l.record("DeviceGetHandleByIndex")
	if i < 0 || i >= len(l.gpus) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return l.gpus[i], nvml.SUCCESS
}

// fakeGPU is one physical GPU.
type fakeGPU struct {
	nvml.Device
	lib   *fakeLib
	index int

	uuid, name string
	// pciID is the PCI device id; the vendor is NVIDIA's.
	pciID uint16
	bus   uint32

	totalMiB, usedMiB uint64
	util              uint32
	// smMHz, powerMW and tempC are what GetClockInfo(CLOCK_SM),
	// GetPowerUsage and GetTemperature answer.
	smMHz, powerMW, tempC uint32

	// model, when it has MIG, gives the GPU its MIG profile table; nil or
	// a model without MIG makes MIG calls answer ERROR_NOT_SUPPORTED.
	model *catalog.Model
	// mig and pendingMIG are the current and pending MIG modes.
	mig, pendingMIG int
	// activation is the activation status SetMigMode reports; anything but
	// SUCCESS leaves the new mode pending.
	activation nvml.Return
	// nvmlSize overrides the placement size NVML reports per profile ID,
	// as go-nvml's mocks get it wrong, to show the driver ignores it.
	nvmlSize  map[int]int
	instances []*fakeGI
	nextGI    uint32

	// links are the GPU's NVLinks; nil means the GPU has no NVLink and
	// answers ERROR_NOT_SUPPORTED.
	links []fakeLink
	// p2p lists the GPU indexes NVLink peer-to-peer works with.
	p2p []int
	// fail makes the named method fail with the given code.
	fail map[string]nvml.Return
}

// fakeLink is one NVLink. remoteRet and kindRet make the remote queries
// fail.
type fakeLink struct {
	active bool
	// remote is the far end's address; peer, when set, names a fake GPU
	// whose address is used instead.
	remote    pciAddr
	peer      *fakeGPU
	kind      nvml.IntNvLinkDeviceType
	remoteRet nvml.Return
	kindRet   nvml.Return
}

// call logs a call and returns the failure set for it, if any.
func (g *fakeGPU) call(name string) (nvml.Return, bool) {
	g.lib.record(fmt.Sprintf("gpu%d.%s", g.index, name))
	ret, ok := g.fail[name]
	return ret, ok
}

func (g *fakeGPU) hasMIG() bool { return g.model != nil && g.model.SupportsMIG() }

func (g *fakeGPU) GetUUID() (string, nvml.Return) {
	if ret, ok := g.call("GetUUID"); ok {
		return "", ret
	}
	return g.uuid, nvml.SUCCESS
}

func (g *fakeGPU) GetName() (string, nvml.Return) {
	if ret, ok := g.call("GetName"); ok {
		return "", ret
	}
	return g.name, nvml.SUCCESS
}

func (g *fakeGPU) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	if ret, ok := g.call("GetPciInfo"); ok {
		return nvml.PciInfo{}, ret
	}
	return nvml.PciInfo{Bus: g.bus, PciDeviceId: uint32(g.pciID)<<16 | nvidiaVendorID}, nvml.SUCCESS
}

func (g *fakeGPU) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	if ret, ok := g.call("GetMemoryInfo"); ok {
		return nvml.Memory{}, ret
	}
	return nvml.Memory{Total: g.totalMiB << 20, Used: g.usedMiB << 20, Free: (g.totalMiB - g.usedMiB) << 20}, nvml.SUCCESS
}

func (g *fakeGPU) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	if ret, ok := g.call("GetUtilizationRates"); ok {
		return nvml.Utilization{}, ret
	}
	if g.mig == nvml.DEVICE_MIG_ENABLE {
		return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.Utilization{Gpu: g.util}, nvml.SUCCESS
}

func (g *fakeGPU) GetClockInfo(typ nvml.ClockType) (uint32, nvml.Return) {
	if ret, ok := g.call("GetClockInfo"); ok {
		return 0, ret
	}
	if typ != nvml.CLOCK_SM {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return g.smMHz, nvml.SUCCESS
}

func (g *fakeGPU) GetPowerUsage() (uint32, nvml.Return) {
	if ret, ok := g.call("GetPowerUsage"); ok {
		return 0, ret
	}
	return g.powerMW, nvml.SUCCESS
}

func (g *fakeGPU) GetTemperature(sensor nvml.TemperatureSensors) (uint32, nvml.Return) {
	if ret, ok := g.call("GetTemperature"); ok {
		return 0, ret
	}
	if sensor != nvml.TEMPERATURE_GPU {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	return g.tempC, nvml.SUCCESS
}

func (g *fakeGPU) GetNvLinkState(link int) (nvml.EnableState, nvml.Return) {
	if ret, ok := g.call("GetNvLinkState"); ok {
		return 0, ret
	}
	if g.links == nil {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	if link >= len(g.links) {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	if g.links[link].active {
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	return nvml.FEATURE_DISABLED, nvml.SUCCESS
}

func (g *fakeGPU) GetNvLinkRemotePciInfo(link int) (nvml.PciInfo, nvml.Return) {
	g.call("GetNvLinkRemotePciInfo")
	l := g.links[link]
	if l.remoteRet != nvml.SUCCESS {
		return nvml.PciInfo{}, l.remoteRet
	}
	if l.peer != nil {
		return nvml.PciInfo{Bus: l.peer.bus}, nvml.SUCCESS
	}
	return nvml.PciInfo{Domain: l.remote.domain, Bus: l.remote.bus, Device: l.remote.device}, nvml.SUCCESS
}

func (g *fakeGPU) GetNvLinkRemoteDeviceType(link int) (nvml.IntNvLinkDeviceType, nvml.Return) {
	g.call("GetNvLinkRemoteDeviceType")
	l := g.links[link]
	if l.kindRet != nvml.SUCCESS {
		return 0, l.kindRet
	}
	return l.kind, nvml.SUCCESS
}

func (g *fakeGPU) GetP2PStatus(other nvml.Device, caps nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
	g.call("GetP2PStatus")
	if caps != nvml.P2P_CAPS_INDEX_NVLINK {
		return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
	}
	if slices.Contains(g.p2p, other.(*fakeGPU).index) {
		return nvml.P2P_STATUS_OK, nvml.SUCCESS
	}
	return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
}

func (g *fakeGPU) GetMigMode() (int, int, nvml.Return) {
	if ret, ok := g.call("GetMigMode"); ok {
		return 0, 0, ret
	}
	if !g.hasMIG() {
		return 0, 0, nvml.ERROR_NOT_SUPPORTED
	}
	return g.mig, g.pendingMIG, nvml.SUCCESS
}

func (g *fakeGPU) SetMigMode(mode int) (nvml.Return, nvml.Return) {
	if ret, ok := g.call("SetMigMode"); ok {
		return nvml.SUCCESS, ret
	}
	if !g.hasMIG() {
		return nvml.SUCCESS, nvml.ERROR_NOT_SUPPORTED
	}
	if mode == nvml.DEVICE_MIG_DISABLE && len(g.instances) > 0 {
		return nvml.SUCCESS, nvml.ERROR_IN_USE
	}
	g.pendingMIG = mode
	if g.activation != nvml.SUCCESS {
		return g.activation, nvml.SUCCESS
	}
	g.mig = mode
	return nvml.SUCCESS, nvml.SUCCESS
}

// fakeProfileIndex maps NVML's GPU instance profile indexes
// (NVML_GPU_INSTANCE_PROFILE_*) to the profile IDs nvidia-smi prints, as on
// A100, H100 and H200.
var fakeProfileIndex = map[int]int{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE:      19,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 20,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: 15,
	nvml.GPU_INSTANCE_PROFILE_2_SLICE:      14,
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:      9,
	nvml.GPU_INSTANCE_PROFILE_4_SLICE:      5,
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:      0,
}

func (g *fakeGPU) GetGpuInstanceProfileInfo(index int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	if ret, ok := g.call("GetGpuInstanceProfileInfo"); ok {
		return nvml.GpuInstanceProfileInfo{}, ret
	}
	id, ok := fakeProfileIndex[index]
	if !g.hasMIG() || !ok {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	p := g.model.ProfileByID(id)
	return nvml.GpuInstanceProfileInfo{
		Id:            uint32(p.ID),
		SliceCount:    uint32(p.ComputeSlices),
		InstanceCount: uint32(p.MaxPerGPU),
		MemorySizeMB:  uint64(p.MemoryMiB),
	}, nvml.SUCCESS
}

func (g *fakeGPU) GetGpuInstances(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
	if ret, ok := g.call("GetGpuInstances"); ok {
		return nil, ret
	}
	var out []nvml.GpuInstance
	for _, gi := range g.instances {
		if uint32(gi.profile.ID) == info.Id {
			out = append(out, gi)
		}
	}
	return out, nvml.SUCCESS
}

// CreateGpuInstanceWithPlacement checks the request as real hardware does:
// the size must be the profile's size in memory slots, the start one the
// profile allows, and the slots free.
func (g *fakeGPU) CreateGpuInstanceWithPlacement(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	if ret, ok := g.call("CreateGpuInstanceWithPlacement"); ok {
		return nil, ret
	}
	if g.mig != nvml.DEVICE_MIG_ENABLE {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p := g.model.ProfileByID(int(info.Id))
	if p == nil || int(pl.Size) != p.MemorySlots || !slices.Contains(p.Starts, int(pl.Start)) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	want := slotBits(int(pl.Start), p.MemorySlots)
	for _, gi := range g.instances {
		if slotBits(gi.start, gi.profile.MemorySlots)&want != 0 {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
	}
	return g.addInstance(p.ID, int(pl.Start)), nvml.SUCCESS
}

func slotBits(start, size int) uint16 { return uint16((1<<size)-1) << start }

// addInstance puts a GPU instance on the GPU without a compute instance.
func (g *fakeGPU) addInstance(profileID, start int) *fakeGI {
	g.nextGI++
	gi := &fakeGI{gpu: g, id: g.nextGI, profile: g.model.ProfileByID(profileID), start: start}
	g.instances = append(g.instances, gi)
	return gi
}

// withInstance is addInstance plus a compute instance spanning it, as
// `nvidia-smi mig -cgi ... -C` leaves it.
func (g *fakeGPU) withInstance(profileID, start int) *fakeGPU {
	gi := g.addInstance(profileID, start)
	gi.cis = append(gi.cis, &fakeCI{gi: gi, id: 0, slices: gi.profile.ComputeSlices})
	return g
}

// instanceAt returns the fake GPU instance at a start slot, nil when none.
func (g *fakeGPU) instanceAt(start int) *fakeGI {
	for _, gi := range g.instances {
		if gi.start == start {
			return gi
		}
	}
	return nil
}

func (g *fakeGPU) GetMaxMigDeviceCount() (int, nvml.Return) {
	if ret, ok := g.call("GetMaxMigDeviceCount"); ok {
		return 0, ret
	}
	if !g.hasMIG() {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return catalog.MIGComputeSlices, nvml.SUCCESS
}

// GetMigDeviceHandleByIndex returns the k-th compute instance's MIG device.
func (g *fakeGPU) GetMigDeviceHandleByIndex(k int) (nvml.Device, nvml.Return) {
	g.call("GetMigDeviceHandleByIndex")
	n := 0
	for _, gi := range g.instances {
		for _, ci := range gi.cis {
			if n == k {
				return &fakeMIGDevice{gi: gi, ci: ci}, nvml.SUCCESS
			}
			n++
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// fakeMIGDevice is the device handle of a MIG device: a compute instance
// of a GPU instance.
type fakeMIGDevice struct {
	nvml.Device
	gi *fakeGI
	ci *fakeCI
}

func (m *fakeMIGDevice) GetGpuInstanceId() (int, nvml.Return) {
	if ret, ok := m.gi.gpu.call("MIG.GetGpuInstanceId"); ok {
		return 0, ret
	}
	return int(m.gi.id), nvml.SUCCESS
}

func (m *fakeMIGDevice) GetComputeInstanceId() (int, nvml.Return) {
	if ret, ok := m.gi.gpu.call("MIG.GetComputeInstanceId"); ok {
		return 0, ret
	}
	return int(m.ci.id), nvml.SUCCESS
}

func (m *fakeMIGDevice) GetUUID() (string, nvml.Return) { return m.gi.uuid(), nvml.SUCCESS }

// fakeGI is a GPU instance.
type fakeGI struct {
	nvml.GpuInstance
	gpu     *fakeGPU
	id      uint32
	profile *catalog.MIGProfile
	start   int
	cis     []*fakeCI
}

func (gi *fakeGI) uuid() string {
	return fmt.Sprintf("MIG-%s-gi%d", strings.TrimPrefix(gi.gpu.uuid, "GPU-"), gi.id)
}

func (gi *fakeGI) GetInfo() (nvml.GpuInstanceInfo, nvml.Return) {
	size := gi.profile.MemorySlots
	if s, ok := gi.gpu.nvmlSize[gi.profile.ID]; ok {
		size = s
	}
	return nvml.GpuInstanceInfo{
		Device:    gi.gpu,
		Id:        gi.id,
		ProfileId: uint32(gi.profile.ID),
		Placement: nvml.GpuInstancePlacement{Start: uint32(gi.start), Size: uint32(size)},
	}, nvml.SUCCESS
}

func (gi *fakeGI) Destroy() nvml.Return {
	if ret, ok := gi.gpu.call("GpuInstance.Destroy"); ok {
		return ret
	}
	if len(gi.cis) > 0 {
		return nvml.ERROR_IN_USE
	}
	gi.gpu.instances = slices.DeleteFunc(gi.gpu.instances, func(x *fakeGI) bool { return x == gi })
	return nvml.SUCCESS
}

// fakeCIProfiles maps compute instance profile indexes to compute slices.
var fakeCIProfiles = map[int]int{
	nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
	nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
	nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
	nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
	nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
}

func (gi *fakeGI) GetComputeInstanceProfileInfo(index, engine int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
	gi.gpu.call("GetComputeInstanceProfileInfo")
	n, ok := fakeCIProfiles[index]
	if !ok || engine != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED || n > gi.profile.ComputeSlices {
		return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.ComputeInstanceProfileInfo{
		Id:            uint32(index),
		SliceCount:    uint32(n),
		InstanceCount: uint32(gi.profile.ComputeSlices / n),
	}, nvml.SUCCESS
}

func (gi *fakeGI) GetComputeInstances(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
	gi.gpu.call("GetComputeInstances")
	var out []nvml.ComputeInstance
	for _, ci := range gi.cis {
		if uint32(ci.slices) == info.SliceCount {
			out = append(out, ci)
		}
	}
	return out, nvml.SUCCESS
}

func (gi *fakeGI) CreateComputeInstance(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
	if ret, ok := gi.gpu.call("CreateComputeInstance"); ok {
		return nil, ret
	}
	used := 0
	for _, ci := range gi.cis {
		used += ci.slices
	}
	if used+int(info.SliceCount) > gi.profile.ComputeSlices {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	ci := &fakeCI{gi: gi, id: uint32(len(gi.cis)), slices: int(info.SliceCount)}
	gi.cis = append(gi.cis, ci)
	return ci, nvml.SUCCESS
}

// fakeCI is a compute instance.
type fakeCI struct {
	nvml.ComputeInstance
	gi     *fakeGI
	id     uint32
	slices int
}

func (ci *fakeCI) GetInfo() (nvml.ComputeInstanceInfo, nvml.Return) {
	return nvml.ComputeInstanceInfo{Id: ci.id}, nvml.SUCCESS
}

func (ci *fakeCI) Destroy() nvml.Return {
	if ret, ok := ci.gi.gpu.call("ComputeInstance.Destroy"); ok {
		return ret
	}
	ci.gi.cis = slices.DeleteFunc(ci.gi.cis, func(x *fakeCI) bool { return x == ci })
	return nvml.SUCCESS
}

// Fixtures: complete hosts as NVML describes them.

func model(t *testing.T, name string) *catalog.Model {
	t.Helper()
	m, err := catalog.Default().Model(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// h100 is an H100 SXM as NVML names it, with no NVLinks yet.
func h100(t *testing.T) *fakeGPU {
	return &fakeGPU{
		name: "NVIDIA H100 80GB HBM3", pciID: 0x2330, model: model(t, "H100-80GB-SXM"),
		totalMiB: 81559, usedMiB: 1024, util: 37,
	}
}

// h100Host is an HGX H100: eight GPUs, each with 18 NVLinks spread over
// four NVSwitches.
func h100Host(t *testing.T) *fakeLib {
	gpus := make([]*fakeGPU, 8)
	for i := range gpus {
		gpus[i] = h100(t)
		for l := range 18 {
			gpus[i].links = append(gpus[i].links, fakeLink{
				active: true, kind: nvml.NVLINK_DEVICE_TYPE_SWITCH,
				remote: pciAddr{bus: uint32(0xA0 + l%4)},
			})
		}
	}
	return newFakeLib(gpus...)
}

// l40s is an L40S: PCIe only, no MIG.
func l40s(t *testing.T) *fakeGPU {
	return &fakeGPU{
		name: "NVIDIA L40S", pciID: 0x26B9, model: model(t, "L40S"),
		totalMiB: 46068, usedMiB: 512, util: 5,
	}
}

// linkGPUs joins two fake GPUs by n direct NVLinks, as NVLink bridges do.
func linkGPUs(a, b *fakeGPU, n int) {
	for range n {
		a.links = append(a.links, fakeLink{active: true, kind: nvml.NVLINK_DEVICE_TYPE_GPU, peer: b})
		b.links = append(b.links, fakeLink{active: true, kind: nvml.NVLINK_DEVICE_TYPE_GPU, peer: a})
	}
}

// GetGpuInstancePossiblePlacements lists the catalog's placements, with the
// sizes nvmlSize overrides.
func (g *fakeGPU) GetGpuInstancePossiblePlacements(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
	g.call("GetGpuInstancePossiblePlacements")
	p := g.model.ProfileByID(int(info.Id))
	size := p.MemorySlots
	if s, ok := g.nvmlSize[p.ID]; ok {
		size = s
	}
	var out []nvml.GpuInstancePlacement
	for _, s := range p.Starts {
		out = append(out, nvml.GpuInstancePlacement{Start: uint32(s), Size: uint32(size)})
	}
	return out, nvml.SUCCESS
}
