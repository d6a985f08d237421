// Package runtime is the agent's seam to the workloads it runs: the Runtime
// interface, the Spec of one instance's workload, and the environment every
// runtime gives a workload. agent/runtime/process implements it with plain
// processes and agent/runtime/containerd with containers;
// agent/runtime/runtimetest is the conformance suite both pass.
//
// The environment is built here, once, because it is the isolation the
// product sells: a workload sees exactly the GPU or MIG UUIDs it was
// allocated in CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES, and nothing
// of the agent's own environment (tokens, proxies, its devices).
package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Instance states a Status reports.
const (
	StateRunning = "running"
	StateExited  = "exited"
)

// DefaultGrace is the time between SIGTERM and SIGKILL when a Spec leaves
// Grace zero; it matches the control plane's default grace period.
const DefaultGrace = 10 * time.Second

// DefaultPath is the PATH a workload gets unless its env sets one. It is a
// fixed, system-only list: the agent's PATH may name directories a tenant
// must not be steered into.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Spec is one instance's workload.
type Spec struct {
	// InstanceID names the workload; the runtime keeps one workload per ID.
	// It is also a directory name, so it may hold only letters, digits,
	// '.', '_' and '-'.
	InstanceID string
	// Command is the program and its arguments, run without a shell.
	// A program without a '/' is looked up in the workload's PATH.
	Command []string
	// Env is the tenant's environment. Keys the runtime sets itself (see
	// Environ) override it.
	Env map[string]string
	// Devices are the GPU or MIG UUIDs allocated to the instance.
	Devices []string
	// ShareMilli and ShareMemoryMiB are set for a fractional (time-sliced)
	// GPU: its compute share in milli-GPUs and its GPU memory.
	ShareMilli     int
	ShareMemoryMiB int64
	// WorkDir is the working directory and HOME; the runtime picks one
	// under its base directory when empty, and creates it when missing.
	WorkDir string
	// LogPath receives stdout and stderr, appended; the runtime picks one
	// under its base directory when empty.
	LogPath string
	// Grace is how long Stop waits after SIGTERM before SIGKILL;
	// DefaultGrace when zero or negative.
	Grace time.Duration
	// MetadataURL is the instance's metadata endpoint ("http://127.0.0.1:N"),
	// passed as GPUCLOUD_METADATA_URL when set. A MetadataServer runtime
	// takes Metadata instead.
	MetadataURL string
	// Metadata is the instance's metadata endpoint for a MetadataServer
	// runtime, which serves it where only the workload reaches it and
	// passes its own URL as GPUCLOUD_METADATA_URL.
	Metadata http.Handler
	// TenantID is the tenant the instance belongs to; a runtime with an
	// instance network puts the tenant's instances on one network.
	TenantID string
	// Volumes are the directories of the instance's volumes, passed to the
	// workload as GPUCLOUD_VOLUMES (colon-separated). A runtime that runs
	// the workload in a filesystem of its own (a container) mounts them
	// there and passes the paths the workload sees instead.
	Volumes []string
	// Scratch is the directory of the instance's instance store (local
	// scratch disk, wiped when the instance stops), or empty for none.
	// The workload finds it in GPUCLOUD_SCRATCH; a runtime that runs the
	// workload in a filesystem of its own mounts it at /scratch and passes
	// that path instead.
	Scratch string

	// The fields below are for runtimes that isolate the workload (a
	// container); the process runtime ignores them.

	// Network is the instance's place on its private network (issue 19),
	// which the runtime's network hook builds; nil for an instance made
	// before networks existed (the host's per-tenant network).
	Network *Network
	// DNS answers the workload's name lookups: a runtime that serves it
	// inside the workload's network namespace (as it serves Metadata)
	// points the workload's resolv.conf at it. Nil: the image's own.
	DNS DNSServer
	// Devices are host device nodes the workload may open besides its
	// GPUs' (RDMA: /dev/infiniband/uverbsN, rdma_cm), bind-mounted at the
	// same path and allowed in its device cgroup.
	ExtraDevices []string

	// Image is the container image the workload runs in ("docker.io/
	// library/python:3.12", or a name imported from a tarball); empty means
	// the operator's default image, which the runtime is configured with.
	Image string
	// CPUMilli, MemoryMiB and PidsLimit are the workload's limits: CPU in
	// thousandths of a core (a CFS quota), memory in MiB (the workload is
	// OOM-killed beyond it) and the most processes and threads it may have
	// at once. Zero means the runtime's default: no CPU or memory limit,
	// and the runtime's configured pids limit.
	CPUMilli  int64
	MemoryMiB int64
	PidsLimit int64
	// GPUIndexes are the host indexes of the GPUs the workload may open
	// (/dev/nvidiaN): the GPUs it has whole or a share of, and the parents
	// of its MIG slices. MIG names its MIG slices, whose nvidia-caps nodes
	// it may open too.
	GPUIndexes []int
	MIG        []MIGDevice
	// RenderMinors are, for AMD GPUs, the DRM render nodes the workload
	// may open (/dev/dri/renderD<minor>): one per GPU it has whole, and
	// one per compute partition or VF, each a logical GPU with its own
	// node. With any, it may open /dev/kfd too, and its environment names
	// its GPUs the ROCm way (Environ).
	RenderMinors []int
}

// MIGDevice names a MIG slice as the NVIDIA driver's device nodes do: the
// parent GPU's index, the GPU instance ID and the compute instance ID
// (nvidia-smi's GI and CI IDs), which select its nvidia-caps nodes.
type MIGDevice struct {
	GPU int
	GI  int
	CI  int
}

// Status is what a runtime knows of a workload.
type Status struct {
	// State is StateRunning or StateExited.
	State string
	// ExitCode is the exit status of an exited workload; a workload killed
	// by a signal reports 128 plus the signal number, as shells do.
	ExitCode int
	// Signal names the signal that killed the workload ("SIGKILL"), empty
	// when it exited by itself.
	Signal    string
	StartedAt time.Time
	// ExitedAt is zero while the workload runs.
	ExitedAt time.Time
}

// Runtime runs the workloads of one host. Implementations are safe for
// concurrent use. Unknown instance IDs are ErrNotFound.
type Runtime interface {
	// Start starts the workload. It is idempotent per InstanceID: while the
	// runtime knows the instance, running or exited, Start returns nil and
	// changes nothing (the spec is not compared), so that a retried Start
	// never runs a job twice; Remove forgets an exited instance so it can
	// run again. A spec that cannot start (bad ID, missing program) is an
	// error wrapping ErrInvalid, and leaves nothing behind.
	Start(ctx context.Context, s Spec) error
	// Stop sends SIGTERM to the workload's processes, then SIGKILL after its
	// grace period, and returns once the workload has exited. It is
	// idempotent: stopping an exited workload returns nil, and concurrent
	// Stops share one escalation. If ctx ends first Stop returns its error,
	// but the escalation to SIGKILL still happens.
	Stop(ctx context.Context, id string) error
	// Status returns the workload's current status.
	Status(id string) (Status, error)
	// Wait blocks until the workload has exited, or ctx ends.
	Wait(ctx context.Context, id string) (Status, error)
	// Logs returns the workload's output from byte offset on (at most a
	// bounded chunk per call) and the offset to ask for next. Output is
	// kept after the workload exits. An offset past the end returns no data
	// and the end offset, so a reader whose file was truncated resumes.
	Logs(id string, offset int64) ([]byte, int64, error)
	// Remove forgets an exited workload, keeping its files. Removing a
	// running workload is ErrRunning; an unknown one is ErrNotFound.
	Remove(id string) error
}

// Network is an instance's place on its private network: its network
// (ID, name, overlay segment VNI and CIDR), subnet, gateway, address,
// interface MAC and security groups, its DNS names, and the public address
// associated with it (Public; zero: none), which its host forwards to Addr
// through its groups. The agent fills it from agentapi.InstanceNetwork.
type Network struct {
	ID, Name       string
	VNI            uint32
	CIDR, Subnet   netip.Prefix
	Gateway, Addr  netip.Addr
	MAC            string
	SecurityGroups []string
	DNSNames       []string
	Public         netip.Addr
}

// DNSServer serves one workload's DNS: the runtime opens a UDP socket and
// a TCP listener where the workload reaches them (inside its network
// namespace) and Serve answers on both until ctx ends or they close.
type DNSServer interface {
	Serve(ctx context.Context, udp net.PacketConn, tcp net.Listener) error
}

// MetadataServer is implemented by runtimes that serve each workload's
// metadata endpoint (Spec.Metadata) themselves, inside the workload's own
// network namespace, where nothing else on the host reaches it: the agent
// then opens no listener on the host for it.
type MetadataServer interface {
	// MetadataURL is where each workload finds its endpoint
	// (GPUCLOUD_METADATA_URL).
	MetadataURL() string
}

// DNSServing is implemented by runtimes that serve each workload's DNS
// (Spec.DNS) themselves, inside the workload's own network namespace, and
// point the workload's resolv.conf at it: the agent then gives each
// instance on a private network its network's server (agent/dns).
type DNSServing interface {
	// ServesDNS reports whether the runtime serves Spec.DNS here.
	ServesDNS() bool
}

// Addresser is implemented by runtimes that know the address where the
// other instances of a tenant reach an instance's workload: the agent
// reports it with the running report (agentapi.StatusReport's
// PrivateAddress), and the control plane gives it to the instance's peers
// in a stack's job (MASTER_ADDR). The container runtime answers the
// instance's address on its instance network; the process runtime, whose
// workloads share the host's network namespace, 127.0.0.1.
type Addresser interface {
	// Address returns the running workload's address, and false when the
	// runtime cannot say (an unknown or exited workload, a workload
	// without a network of its own beyond loopback).
	Address(id string) (netip.Addr, bool)
}

// Kinder is implemented by runtimes that say what kind they are
// (KindProcess, KindContainerd): the agent reports it as the host's
// "runtime" label, so that the scheduler never places an instance that
// names an image on a host that cannot run one.
type Kinder interface {
	Kind() string
}

// The runtime kinds, as the "runtime" host label carries them.
const (
	KindProcess    = "process"
	KindContainerd = "containerd"
	// LabelRuntime is the host label naming its runtime's kind.
	LabelRuntime = "runtime"
)

// UsageReader is implemented by runtimes that can tell how much CPU a
// workload used; the agent turns it into the instance's CPU utilization.
type UsageReader interface {
	// Usage returns the CPU time (user and system, in seconds) the
	// workload's processes have used since it started, and false when the
	// runtime cannot say (an unknown or exited workload, a host without
	// the counters). The value may drop when a process ends without its
	// time being counted for its parent; callers measure over intervals
	// and skip one that goes backwards.
	Usage(id string) (cpuSeconds float64, ok bool)
}

// Resources is what a workload's processes use, as a ResourceReader reads
// it.
type Resources struct {
	// CPUSeconds is the CPU time (user and system) the workload has used
	// since it started. It counts up, but may drop when a process ends
	// without its time being counted for its parent (see UsageReader).
	CPUSeconds float64
	// MemoryBytes is the memory the workload holds now: its cgroup's
	// memory.current (page cache included) when it has a cgroup of its
	// own, else the sum of its processes' resident sets (pages that
	// processes share count once per process).
	MemoryBytes uint64
}

// ResourceReader is implemented by runtimes that can tell what each
// workload uses; the agent's metrics exporter serves it per instance
// (gpucloud_instance_cpu_seconds_total, gpucloud_instance_memory_bytes). A
// runtime that gives each workload a cgroup of its own (containers) reads
// the cgroup, with ReadCgroup; the process runtime, whose workloads share
// the agent's cgroup, sums the workload's processes from /proc.
type ResourceReader interface {
	// Resources returns what the running workload uses now, and false
	// when the runtime cannot say (an unknown or exited workload, a host
	// without the counters).
	Resources(id string) (Resources, bool)
}

var (
	// ErrNotFound means the runtime does not know the instance.
	ErrNotFound = errors.New("instance not found")
	// ErrRunning means the call needs an exited workload.
	ErrRunning = errors.New("instance is running")
	// ErrInvalid means the spec or argument is malformed.
	ErrInvalid = errors.New("invalid workload spec")
)

// Environment variables the runtime owns. A tenant's Env cannot set them,
// nor any other GPUCLOUD_ variable: they are what the workload trusts about
// its own allocation.
const (
	EnvCUDAVisible   = "CUDA_VISIBLE_DEVICES"
	EnvNVIDIAVisible = "NVIDIA_VISIBLE_DEVICES"
	// ROCm's: ROCR_VISIBLE_DEVICES selects devices by UUID (or index)
	// in the ROCr runtime, HIP_VISIBLE_DEVICES by index among those.
	EnvROCRVisible = "ROCR_VISIBLE_DEVICES"
	EnvHIPVisible  = "HIP_VISIBLE_DEVICES"
	EnvMPSThreads  = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	// EnvMPSPipe names the MPS control daemon's pipe directory; a runtime
	// that runs the daemon of a share's GPU sets it.
	EnvMPSPipe         = "CUDA_MPS_PIPE_DIRECTORY"
	EnvInstanceID      = "GPUCLOUD_INSTANCE_ID"
	EnvShareMilli      = "GPUCLOUD_GPU_SHARE_MILLI"
	EnvShareMemoryMiB  = "GPUCLOUD_GPU_MEMORY_MIB"
	EnvMetadataURL     = "GPUCLOUD_METADATA_URL"
	EnvVolumes         = "GPUCLOUD_VOLUMES"
	EnvScratch         = "GPUCLOUD_SCRATCH"
	reservedEnvPrefix  = "GPUCLOUD_"
	maxInstanceIDBytes = 128
)

func reserved(key string) bool {
	switch key {
	case EnvCUDAVisible, EnvNVIDIAVisible, EnvMPSThreads, EnvMPSMemLimit, EnvMPSPipe, EnvROCRVisible, EnvHIPVisible:
		return true
	}
	return strings.HasPrefix(key, reservedEnvPrefix)
}

// Validate checks what a runtime needs before it starts anything. Errors
// wrap ErrInvalid.
func (s *Spec) Validate() error {
	if err := ValidateID(s.InstanceID); err != nil {
		return err
	}
	// An image may carry the command (its entrypoint and cmd), which the
	// containerd runtime takes when the spec gives none.
	if len(s.Command) == 0 && s.Image == "" || len(s.Command) > 0 && s.Command[0] == "" {
		return fmt.Errorf("instance %s: no command: %w", s.InstanceID, ErrInvalid)
	}
	for _, a := range s.Command {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("instance %s: command argument with a NUL byte: %w", s.InstanceID, ErrInvalid)
		}
	}
	for k, v := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("instance %s: bad environment variable %q: %w", s.InstanceID, k, ErrInvalid)
		}
	}
	for _, d := range s.Devices {
		if d == "" || strings.ContainsAny(d, ",\x00") || strings.TrimSpace(d) != d {
			return fmt.Errorf("instance %s: bad device %q: %w", s.InstanceID, d, ErrInvalid)
		}
	}
	if s.ShareMilli < 0 || s.ShareMilli > 1000 || s.ShareMemoryMiB < 0 {
		return fmt.Errorf("instance %s: share of %d milli and %d MiB is out of range: %w",
			s.InstanceID, s.ShareMilli, s.ShareMemoryMiB, ErrInvalid)
	}
	if s.CPUMilli < 0 || s.MemoryMiB < 0 || s.PidsLimit < 0 {
		return fmt.Errorf("instance %s: negative limits (%d milli-CPUs, %d MiB, %d pids): %w",
			s.InstanceID, s.CPUMilli, s.MemoryMiB, s.PidsLimit, ErrInvalid)
	}
	if strings.ContainsAny(s.Image, " \t\n\x00") {
		return fmt.Errorf("instance %s: bad image name %q: %w", s.InstanceID, s.Image, ErrInvalid)
	}
	for _, g := range s.GPUIndexes {
		if g < 0 {
			return fmt.Errorf("instance %s: bad GPU index %d: %w", s.InstanceID, g, ErrInvalid)
		}
	}
	for _, m := range s.MIG {
		if m.GPU < 0 || m.GI < 0 || m.CI < 0 {
			return fmt.Errorf("instance %s: bad MIG device %+v: %w", s.InstanceID, m, ErrInvalid)
		}
	}
	for _, m := range s.RenderMinors {
		if m < 128 || m > 1<<20 {
			return fmt.Errorf("instance %s: bad render node minor %d (renderD128 is the first): %w", s.InstanceID, m, ErrInvalid)
		}
	}
	return nil
}

// ValidateID checks that an instance ID is safe as a directory name.
func ValidateID(id string) error {
	ok := id != "" && id != "." && id != ".." && len(id) <= maxInstanceIDBytes
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("instance id %q: want 1 to %d letters, digits, '.', '_' or '-': %w", id, maxInstanceIDBytes, ErrInvalid)
	}
	return nil
}

// Environ returns a workload's complete environment, sorted: the tenant's
// Env; PATH (DefaultPath) and HOME (home) unless Env sets them; and the
// variables the runtime owns, which override Env:
//
//   - CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES: Devices joined by
//     commas, exactly, and empty when there are none, so that a CPU-only
//     workload sees no GPU instead of every GPU; for AMD GPUs (RenderMinors)
//     ROCR_VISIBLE_DEVICES is Devices (their UUIDs), HIP_VISIBLE_DEVICES and
//     CUDA_VISIBLE_DEVICES their indexes 0..n-1, NVIDIA_VISIBLE_DEVICES empty;
//   - GPUCLOUD_INSTANCE_ID;
//   - for a share, GPUCLOUD_GPU_SHARE_MILLI, GPUCLOUD_GPU_MEMORY_MIB,
//     CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (milli/10, at least 1) and
//     CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=<MiB>M", the share's GPU memory
//     on the one GPU it sees), the limits an MPS server honours;
//   - GPUCLOUD_METADATA_URL when MetadataURL is set.
//   - GPUCLOUD_VOLUMES when the instance has volumes.
//   - GPUCLOUD_SCRATCH when it has an instance store (Scratch).
//
// Any other GPUCLOUD_ variable in Env is dropped, and so is
// CUDA_MPS_PIPE_DIRECTORY: a runtime that runs the MPS daemon of a share's
// GPU adds its own. Nothing is inherited from the calling process.
func Environ(s Spec, home string) []string {
	env := map[string]string{"PATH": DefaultPath, "HOME": home}
	for k, v := range s.Env {
		if !reserved(k) {
			env[k] = v
		}
	}
	devices := strings.Join(s.Devices, ",")
	env[EnvCUDAVisible] = devices
	env[EnvNVIDIAVisible] = devices
	if len(s.RenderMinors) > 0 {
		// AMD GPUs: ROCr selects them by UUID, and HIP (which also reads
		// CUDA_VISIBLE_DEVICES) numbers them 0..n-1 among those. No
		// NVIDIA GPU is visible.
		idx := make([]string, len(s.Devices))
		for i := range idx {
			idx[i] = strconv.Itoa(i)
		}
		env[EnvROCRVisible] = devices
		env[EnvHIPVisible] = strings.Join(idx, ",")
		env[EnvCUDAVisible] = env[EnvHIPVisible]
		env[EnvNVIDIAVisible] = ""
	}
	env[EnvInstanceID] = s.InstanceID
	if s.ShareMilli > 0 {
		env[EnvShareMilli] = strconv.Itoa(s.ShareMilli)
		env[EnvMPSThreads] = strconv.Itoa(max(1, s.ShareMilli/10))
	}
	if s.ShareMemoryMiB > 0 {
		env[EnvShareMemoryMiB] = strconv.FormatInt(s.ShareMemoryMiB, 10)
		if s.ShareMilli > 0 {
			// The shared GPU is the only one the workload sees: device 0.
			env[EnvMPSMemLimit] = "0=" + strconv.FormatInt(s.ShareMemoryMiB, 10) + "M"
		}
	}
	if len(s.Volumes) > 0 {
		env[EnvVolumes] = strings.Join(s.Volumes, ":")
	}
	if s.Scratch != "" {
		env[EnvScratch] = s.Scratch
	}
	if s.MetadataURL != "" {
		env[EnvMetadataURL] = s.MetadataURL
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}
