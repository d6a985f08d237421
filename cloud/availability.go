package cloud

import "time"

// OfferingAvailability is what the fleet can do for one offering, as of
// the scheduler's last step.
type OfferingAvailability struct {
	// Hosts counts the hosts that could run one instance of the offering
	// if they were empty and schedulable (cordoned and unhealthy hosts
	// count: they may come back): the right GPU model, zone-free, with
	// enough GPUs, CPU and memory. Zero means no host in the fleet ever
	// could.
	Hosts int `json:"hosts"`
	// Containers counts those of Hosts that run workloads in containers
	// (their "runtime" label is not "process"): the hosts that could run
	// an instance of the offering that names an image.
	Containers int `json:"containers"`
	// FitsNow counts the hosts with room for one instance right now.
	FitsNow int `json:"fits_now"`
	// Reasons, when FitsNow is 0, counts the hosts by the placement
	// engine's reason for refusing ("wrong GPU model", "not enough free
	// GPUs", ...).
	Reasons map[string]int `json:"reasons,omitempty"`
	// AsOf is when the scheduler computed it; FleetHosts is how many
	// hosts its fleet had then. A host that joined since makes the answer
	// stale (the store's host count differs), and a create does not trust
	// a stale "no host".
	AsOf       time.Time `json:"as_of"`
	FleetHosts int       `json:"fleet_hosts"`
}

// DryRunRequest is one instance of a placement dry run: an offering,
// zones and label selectors as an instance has them, and the placement
// group it would join, named within the dry run (Group, empty for none)
// with its strategy.
type DryRunRequest struct {
	ID string
	// Tenant is whose instance it would be: one GPU's shares belong to
	// one tenant.
	Tenant   string
	Offering string
	Zones    []string
	Labels   []string
	Group    string
	Strategy PlacementStrategy
	ByRack   bool
}

// DryRunResult is where a DryRunRequest would go now (Host), or why it
// would wait (Reason: the placement engine's per-reason host counts).
type DryRunResult struct {
	ID     string
	Fits   bool
	Host   string
	Reason string
}
