package agentapi

import "github.com/gpucloud/gpucloud/fleet"

// Inventory is what a host reports: its fleet description plus versions.
type Inventory struct {
	// Host describes the host as the scheduler places on it. GPUs carry their
	// index, UUID, canonical model, memory, NVLink island and MIG mode;
	// Instances lists the MIG instances that exist on the hardware, all with
	// an empty Alloc, because the driver does not know which allocation holds
	// them (the server matches them by GPU and start slot). State is left
	// empty: whether a host is schedulable is the operator's decision.
	Host fleet.Host `json:"host"`
	// Driver and CUDA are the driver version ("550.54.15") and the highest
	// CUDA version it supports ("12.4"); empty when the driver cannot say.
	Driver string `json:"driver"`
	CUDA   string `json:"cuda"`
	// Health has one entry per GPU, in index order.
	Health []GPUHealth `json:"health"`
}

// GPUHealth is the health and load of one GPU. Fields the driver cannot read
// stay zero: a GPU that does not report utilization is not unhealthy.
type GPUHealth struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// Healthy is false after an XID error, a fallen-off-the-bus GPU or a
	// failed health check; Reason then says which.
	Healthy        bool   `json:"healthy"`
	Reason         string `json:"reason,omitempty"`
	UtilizationPct int    `json:"utilization_pct"`
	MemoryUsedMiB  int64  `json:"memory_used_mib"`
}
