// Package nvml implements gpu.Driver for real NVIDIA GPUs on NVML, through
// NVIDIA's go-nvml bindings.
//
// The package is the module's only cgo user. go-nvml does not compile without
// cgo, so every file that imports it builds only with cgo; without cgo the
// package keeps its Driver type and Open, and Open fails with "NVML driver
// requires cgo". New, which takes any nvml.Interface so that tests run on
// fakes, exists only in cgo builds for the same reason. Open loads
// libnvidia-ml.so.1 at run time (dlopen), so a cgo binary builds and starts on
// machines without GPUs; there Open fails with gpu.ErrUnavailable.
//
// The code depends on nvml.Interface and the handle interfaces, never on
// go-nvml's package-level functions, in the style of NVIDIA's mig-parted.
// ERROR_NOT_SUPPORTED is an answer ("this GPU has no such counter or
// feature"), never a failure: Inventory reports a zero value for it.
//
// The catalog is the ground truth for MIG geometry. NVML names profiles by
// the IDs nvidia-smi prints (19, 20, 15, 14, 9, 5, 0) only in the Id field of
// a profile's info; the argument of GetGpuInstanceProfileInfo is an index
// (NVML_GPU_INSTANCE_PROFILE_*), so the driver finds a profile by scanning the
// indexes for the ID. The slots and compute slices an instance holds come from
// the catalog's table, not from NVML's placement size: go-nvml's mock servers
// are known to disagree with real GPUs there, and placement must agree with
// the scheduler's own table. Requests are checked against the table with
// fleet.CheckMIG before any MIG call reaches NVML.
//
// NVLink islands are read from the links themselves: each active link's
// remote PCI address and device type (GPU or NVSwitch). GPUs that share a
// link or a switch are adjacent; when a link does not say where it goes, the
// driver asks NVML whether NVLink peer-to-peer works between the two GPUs.
// An island is a set of pairwise adjacent GPUs, as fleet.GPU.Island promises.
package nvml
