package agentapi

import (
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// The agent protocol's request and response bodies.

// JoinRequest is what a new agent sends with its join token.
type JoinRequest struct {
	JoinToken string     `json:"join_token"`
	Inventory *Inventory `json:"inventory"`
	// CSR is the PEM certificate request of the agent's new TLS client
	// key (NewClientKey). A server that serves TLS signs a client
	// certificate for it, named after the host whatever the request
	// asks, and refuses a join without one (an agent too old for mutual
	// TLS); a plain-HTTP server ignores it.
	CSR string `json:"csr,omitempty"`
	// Credential is the host's current agent credential, for a re-join
	// under the ID of a host that has joined: without it, or over TLS
	// without the host's client certificate, such a join is refused
	// (Conflict, details reason host_exists) unless an admin removed the
	// host. A join token alone never joins under a live host's name.
	Credential string `json:"credential,omitempty"`
}

// JoinResponse gives the agent its host ID and its own credential (an API
// token with role agent, bound to the host), shown only this once.
type JoinResponse struct {
	HostID     string `json:"host_id"`
	Credential string `json:"credential"`
	// Certificate is the agent's TLS client certificate (PEM), signed by
	// the cloud's CA for the join's CSR with the host ID as its common
	// name; empty from a plain-HTTP server. The credential works only
	// over a connection that presents it (mutual TLS).
	Certificate string `json:"certificate,omitempty"`
}

// HeartbeatRequest keeps a host healthy; the inventory is sent when it
// changed (GPUs, MIG layout, versions) and may be omitted otherwise.
type HeartbeatRequest struct {
	Inventory *Inventory `json:"inventory,omitempty"`
}

// HeartbeatResponse tells the agent how often to send heartbeats.
type HeartbeatResponse struct {
	// IntervalMS is how often the server wants a heartbeat from a host
	// whose inventory did not change, in milliseconds: a sixth of the time
	// after which it takes a silent host for lost, so that a host misses
	// five before it is. A changed inventory is sent at once whatever
	// this says. 0 (and a server from before it, which answers 204
	// without a body): at the agent's own interval.
	IntervalMS int64 `json:"interval_ms,omitempty"`
}

// Interval is IntervalMS as a duration.
func (r *HeartbeatResponse) Interval() time.Duration {
	if r == nil || r.IntervalMS <= 0 {
		return 0
	}
	return time.Duration(r.IntervalMS) * time.Millisecond
}

// Desired states of an assignment.
const (
	DesiredRun  = "run"
	DesiredStop = "stop"
)

// Assignment is an instance the agent's host must run or stop: every
// instance holding an allocation on the host. "run" for scheduled,
// starting and running instances, "stop" for stopping and terminating ones.
type Assignment struct {
	InstanceID string            `json:"instance_id"`
	TenantID   string            `json:"tenant_id"`
	Offering   string            `json:"offering"`
	Desired    string            `json:"desired"`
	Placement  *fleet.Placement  `json:"placement"`
	Command    []string          `json:"command,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Volumes    []string          `json:"volumes,omitempty"`
	// VolumeSizes is the size in GiB of each of Volumes, by ID: a host
	// that keeps each volume in a filesystem of its size needs it. A
	// volume without one (an older server) is a plain directory there.
	VolumeSizes map[string]int64 `json:"volume_sizes_gib,omitempty"`
	// SharedVolumes are those of Volumes that are shared (cloud.VolumeShared):
	// directories on the host's shared filesystem (the agent's
	// --shared-volume-dir), which other hosts' instances mount at once.
	SharedVolumes []string `json:"shared_volumes,omitempty"`
	// InstanceStoreGiB is the instance store of the instance's offering
	// (catalog.Offering.InstanceStoreGiB), in GiB: local scratch disk the
	// agent makes for each run of the instance, mounts at /scratch and
	// wipes when the run ends. 0: none.
	InstanceStoreGiB int               `json:"instance_store_gib,omitempty"`
	Tags             map[string]string `json:"tags,omitempty"`
	// GraceSeconds is how long a stop waits between SIGTERM and SIGKILL.
	GraceSeconds int `json:"grace_seconds"`
	// Interruption is a spot reclaim announced to the instance (Action
	// set), or a rebalance recommendation (Action empty, Reason
	// "rebalance"). The agent shows it on the instance's metadata
	// endpoint; the stop itself comes as Desired "stop" at the deadline.
	Interruption *cloud.Interruption `json:"interruption,omitempty"`
	// Market and SpotRequestID tell a spot instance which request it
	// belongs to (its metadata document shows them).
	Market        cloud.Market `json:"market,omitempty"`
	SpotRequestID string       `json:"spot_request_id,omitempty"`
	// ScaleIn is the instance's scale-in protection as recorded: the
	// agent shows its completion lock on the metadata endpoint (after an
	// agent restart, too).
	ScaleIn *cloud.ScaleIn `json:"scale_in,omitempty"`
	// Image is the OCI image the workload runs in, canonical
	// ("docker.io/library/python:3.12"); empty: the host's default image.
	// The process runtime runs no image.
	Image string `json:"image,omitempty"`
	// Stack is the instance's place in its stack's job: set when the
	// instance was created by a stack as a member of a job (the instances
	// that train together), nil otherwise. The agent shows it on the
	// instance's metadata endpoint (GET /v1/stack) and, when the job's
	// master address is known as the workload starts, adds its Env to the
	// workload's environment.
	Stack *StackInfo `json:"stack,omitempty"`
	// Network is the instance's place on its private network (nil:
	// an instance made before networks existed, which gets the host's
	// per-tenant network).
	Network *InstanceNetwork `json:"network,omitempty"`
	// RDMA gives the workload the host's RDMA adapters (fleet.Host.HCAs):
	// their device nodes, and NCCL's environment (NCCL_IB_HCA, and
	// NCCL_SOCKET_IFNAME where the workload has an interface of its own).
	// The server sets it, on a host with adapters, for an instance that
	// takes the whole host or whose placement group is a cluster.
	RDMA bool `json:"rdma,omitempty"`
	// Pause, with Desired run: the workload is to be paused (a paused
	// instance: an endpoint's warm pool), its processes frozen in place
	// (runtime.Pauser); once false again it is resumed. A runtime that
	// cannot pause leaves it running and says so in the agent's log.
	Pause bool `json:"pause,omitempty"`
}

// StackInfo is an instance's place in its stack's job, computed by the
// server from the tags the stack engine sets (service.TagStack and the
// others): only the same tenant's instances of the same stack and job,
// terminated and failed ones left out, are peers.
type StackInfo struct {
	// Name is the stack's name and Resource the template resource the
	// instance comes from.
	Name     string `json:"name"`
	Resource string `json:"resource"`
	// Rank is the instance's rank in its job (0 first) and WorldSize the
	// job's size, as torchrun's NODE_RANK and --nnodes.
	Rank      int `json:"rank"`
	WorldSize int `json:"world_size"`
	// Peers are the job's instances, this one included, by rank (at most
	// MaxStackPeers).
	Peers []Peer `json:"peers"`
	// Env is the launchers' environment (EnvMasterAddr and the others):
	// MASTER_ADDR is rank 0's address and is left out while that is not
	// known.
	Env map[string]string `json:"env,omitempty"`
}

// Peer is one instance of a stack's job.
type Peer struct {
	Rank       int    `json:"rank"`
	InstanceID string `json:"instance_id"`
	// Address is the peer's private address while it runs and its agent
	// has reported it; empty otherwise (not started yet, or stopped: an
	// address kept from an earlier run is not shown).
	Address string `json:"address,omitempty"`
}

// The environment StackInfo.Env carries, as torchrun and NCCL's
// launchers read it. WORLD_SIZE and NNODES are both the job's size in
// instances (nodes), RANK and NODE_RANK the instance's rank.
const (
	EnvMasterAddr = "MASTER_ADDR"
	EnvMasterPort = "MASTER_PORT"
	EnvWorldSize  = "WORLD_SIZE"
	EnvRank       = "RANK"
	EnvNodeRank   = "NODE_RANK"
	EnvNNodes     = "NNODES"
	// StackMasterPort is MASTER_PORT: torchrun's default port.
	StackMasterPort = 29500
)

// MaxStackPeers bounds StackInfo.Peers: a job larger than that lists its
// first MaxStackPeers instances by rank.
const MaxStackPeers = 4096

// AssignmentList is the answer to GET /v1/agent/assignments. Version
// changes whenever anything in the list does, so that an agent waits for
// the next change by sending the version it has (Client.WatchAssignments);
// a server from before the watch sends none.
type AssignmentList struct {
	Version     string       `json:"version,omitempty"`
	Assignments []Assignment `json:"assignments"`
}

// MaxAssignmentWait bounds how long GET /v1/agent/assignments waits for a
// change.
const MaxAssignmentWait = 30 * time.Second

// MaxVersion bounds the length of a version an agent sends back.
const MaxVersion = 64

// Phases an agent reports for an instance's workload.
const (
	// PhaseStarting: the partition is applied and the process is starting.
	PhaseStarting = "starting"
	// PhaseRunning: the process runs.
	PhaseRunning = "running"
	// PhaseExited: the process ended on its own (ExitCode says how).
	PhaseExited = "exited"
	// PhaseStopped: the process was stopped because the assignment said
	// stop (SIGTERM, then SIGKILL after the grace period).
	PhaseStopped = "stopped"
	// PhaseFailed: the agent could not start the workload (Message says
	// why: a MIG error, a missing command, ...).
	PhaseFailed = "failed"
)

// StatusReport is what POST /v1/agent/instances/{id}/status carries. The
// server turns phases into lifecycle moves: starting -> starting, running
// -> running, exited with code 0 -> stopped, exited otherwise or failed ->
// failed, stopped -> stopped (or terminated when the instance was
// terminating); the last three release the allocation.
type StatusReport struct {
	Phase    string `json:"phase"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Message  string `json:"message,omitempty"`
	// Devices, with the running report, are the device UUIDs the workload
	// sees (CUDA_VISIBLE_DEVICES), in the placement's device order: a GPU's
	// UUID, or a MIG slice's own MIG-... UUID, which only the host knows.
	Devices []string `json:"devices,omitempty"`
	// PrivateAddress, with the running report, is the instance's address
	// on its host's instance network, where the other instances of its
	// tenant reach it (the container runtime: the instance's own address;
	// the process runtime, whose workloads share the host's network:
	// 127.0.0.1). The server records it on the instance
	// (cloud.Instance.PrivateAddress) for the peers of a stack's job. It
	// must be an IP address without a zone (invalid_argument otherwise,
	// and nothing is recorded); empty: not known, and the recorded one is
	// left as it is.
	PrivateAddress string `json:"private_address,omitempty"`
	// ImageMillis, with the running report of a workload the agent
	// started, is how long its image took to be ready (the host's cache,
	// or a pull) in milliseconds, at least 1; 0: not known. The server
	// keeps it on the running event (its details' image_ms) for the
	// endpoints' cold starts.
	ImageMillis int64 `json:"image_ms,omitempty"`
	// StartMillis, with the running report of a workload the agent
	// started, is how long the runtime's start took (the image and the
	// container), in milliseconds, at least 1. Reports are sent after the
	// start, so the server's clock cannot time it; 0: not known.
	StartMillis int64 `json:"start_ms,omitempty"`
}

// MaxDeviceUUID bounds one reported device UUID.
const MaxDeviceUUID = 128

// MetricsReport is what POST /v1/agent/metrics carries: utilization
// samples of the instances the agent runs, one per instance per sampling
// interval. The server answers 204 and writes every sample, or refuses the
// whole report and writes none: a sample of an instance that is not on the
// agent's host (another host's, or an unknown ID) is not_found, with the
// instance's ID in the error's details ("id"); a value outside [0, 1] is
// invalid_argument, and so is a sample time more than an hour before the
// server's clock (after the SentAt correction). A report holds at most
// MaxMetricSamples samples.
type MetricsReport struct {
	Samples []InstanceSample `json:"samples"`
	// SentAt is the agent's clock when it sent the report. The server
	// shifts the samples' times by the difference between its clock and
	// SentAt, so that an agent whose clock is off still reports samples
	// at the right time on the server's. Zero: no correction.
	SentAt time.Time `json:"sent_at,omitempty"`
}

// MaxMetricSamples bounds the samples of one MetricsReport.
const MaxMetricSamples = 1024

// InstanceSample is one instance's utilization at one time. A value the
// agent could not read is left out (nil), never sent as 0; a sample needs
// at least one.
type InstanceSample struct {
	InstanceID string    `json:"instance_id"`
	At         time.Time `json:"at"`
	// GPUUtilization is the mean busy fraction (0..1) of the instance's
	// GPUs or MIG devices, as the GPU driver reads it.
	GPUUtilization *float64 `json:"gpu_utilization,omitempty"`
	// CPUUtilization is the CPU time the workload used over the last
	// interval divided by the interval and the instance's vCPUs (0..1).
	CPUUtilization *float64 `json:"cpu_utilization,omitempty"`
	// GPUMemoryUsedBytes is the framebuffer memory in use on the
	// instance's whole GPUs, summed; absent for MIG slices and GPU shares,
	// whose memory the drivers do not report per instance.
	GPUMemoryUsedBytes *uint64 `json:"gpu_memory_used_bytes,omitempty"`
}

// LockRequest is what POST /v1/agent/instances/{id}/scale-in-lock carries:
// the instance's workload takes (Locked) or releases its completion lock
// through its metadata endpoint, and the agent records it here before it
// answers the workload. The server answers the instance's cloud.ScaleIn as
// it now stands ({} when nothing holds the instance).
type LockRequest struct {
	Locked bool `json:"locked"`
	// Reason says why the workload holds the lock ("saving step 1200"):
	// printable text, at most MaxLockReason bytes. Ignored when releasing.
	Reason string `json:"reason,omitempty"`
}

// MaxLockReason bounds LockRequest.Reason, in bytes.
const MaxLockReason = 200
