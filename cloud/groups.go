package cloud

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/money"
)

// A Group (autoscaling group) is a launch template plus the rules that size
// it: min, max and desired, scaling policies, the on-demand/spot mix, a
// budget ceiling and idle release. The group controller keeps Desired
// instances of the template running, each tagged with the group (GroupID on
// the instance). docs/AUTOSCALING.md has the semantics.
type Group struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`

	Template GroupTemplate `json:"template"`
	// Min <= Desired <= Max. Min == Max with no policies is a fixed-size
	// group (a test environment).
	Min     int `json:"min"`
	Max     int `json:"max"`
	Desired int `json:"desired"`

	Policies []ScalingPolicy `json:"policies,omitempty"`
	Mixed    MixedInstances  `json:"mixed"`
	Timing   GroupTiming     `json:"timing"`
	// BudgetPerHour caps what the group's instances may cost per hour at
	// their current prices (0: no budget).
	BudgetPerHour money.Micros `json:"budget_per_hour,omitempty"`
	// IdleRelease, when set, releases instances whose GPU utilization
	// stays under a threshold for a while.
	IdleRelease *IdleRelease `json:"idle_release,omitempty"`
	// Tags are the group's own (its members carry Template.Tags), the
	// tenant's and gpucloud's (gpucloud:stack).
	Tags map[string]string `json:"tags,omitempty"`

	State GroupState `json:"state"`
	// Status is the controller's view: what it decided last and why.
	Status GroupStatus `json:"status"`

	Version        int64     `json:"version"`
	IdempotencyKey string    `json:"-"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// Owner is the tenant a group belongs to.
func (g *Group) Owner() string { return g.TenantID }

// GroupState is where a group is in its life.
type GroupState string

const (
	// GroupActive: the controller sizes the group.
	GroupActive GroupState = "active"
	// GroupDeleting: the controller terminates every member, then marks
	// the group deleted.
	GroupDeleting GroupState = "deleting"
	// GroupDeleted: no member is left; the row stays for the audit.
	GroupDeleted GroupState = "deleted"
)

// GroupTemplate is what every instance of a group is launched from.
type GroupTemplate struct {
	// Offerings are acceptable instance types in order of preference.
	Offerings []string          `json:"offerings"`
	Image     string            `json:"image,omitempty"`
	Command   []string          `json:"command,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Zones     []string          `json:"zones,omitempty"`
	Labels    []string          `json:"labels,omitempty"`
	Tags      map[string]string `json:"tags,omitempty"`
	// Subnet and SecurityGroups are the private network of every
	// instance, as in an instance create (the ID of one of the tenant's
	// subnets, and one to five groups of its network); empty: the
	// tenant's default subnet and the network's default group.
	Subnet         string   `json:"subnet,omitempty"`
	SecurityGroups []string `json:"security_groups,omitempty"`
	// VolumeGiB, when positive, gives each instance its own new volume of
	// that size, deleted when the instance is terminated (scale-in,
	// replacement, the group's deletion); 0 means no volume.
	VolumeGiB int64 `json:"volume_gib,omitempty"`
}

// Policy types.
const (
	PolicyTarget     = "target"
	PolicyStep       = "step"
	PolicyScheduled  = "scheduled"
	PolicyPredictive = "predictive"
	// PolicyGPUCloud is predictive scaling with its own error margin and
	// a reactive floor (docs/AUTOSCALING.md, "The gpucloud policy").
	PolicyGPUCloud = "gpucloud"
)

// Metrics a policy can track. A custom metric is "custom:NAME", a value a
// tenant publishes (POST /v1/metrics) for the group.
const (
	MetricGPUUtilization = "gpu_utilization" // mean over ready members, 0..1
	MetricCPUUtilization = "cpu_utilization" // mean over ready members, 0..1
	// MetricGPUOrCPU is the larger of the two, so that a job held back by
	// I/O or preprocessing (low GPU, high CPU) still scales out.
	MetricGPUOrCPU     = "gpu_cpu_utilization"
	CustomMetricPrefix = "custom:"
	// MetricGPUMemoryUsed is an instance's framebuffer memory in use, in
	// bytes, on its whole GPUs (the console charts it; no policy tracks
	// it).
	MetricGPUMemoryUsed = "gpu_memory_used_bytes"
)

// ScalingPolicy is one rule of a group. When several disagree, the largest
// capacity wins.
type ScalingPolicy struct {
	Name string `json:"name"`
	Type string `json:"type"`

	// Target tracking, and the metric of step scaling.
	Metric string `json:"metric,omitempty"`
	// Target is the value to hold: a utilization (0..1) or, for a custom
	// metric, the value per instance (queue length per instance).
	Target float64 `json:"target,omitempty"`

	// Step scaling: adjustments by how far the metric is from Target.
	Steps []StepAdjustment `json:"steps,omitempty"`
	// Cooldown blocks the next step action until it has passed (step
	// policies only; 0: the group's Timing.Cooldown).
	CooldownSeconds int `json:"cooldown_seconds,omitempty"`

	// Scheduled: a five-field cron expression in TimeZone (an IANA name;
	// empty is UTC) that sets Min, Max and/or Desired when it fires.
	Cron       string `json:"cron,omitempty"`
	TimeZone   string `json:"time_zone,omitempty"`
	SetMin     *int   `json:"set_min,omitempty"`
	SetMax     *int   `json:"set_max,omitempty"`
	SetDesired *int   `json:"set_desired,omitempty"`

	// Predictive: forecast the metric's load from the group's history and
	// act BufferSeconds ahead; ForecastOnly computes without acting.
	// A gpucloud policy reads BufferSeconds too: it acts the members'
	// measured boot time plus BufferSeconds ahead.
	ForecastOnly  bool `json:"forecast_only,omitempty"`
	BufferSeconds int  `json:"buffer_seconds,omitempty"`
}

// StepAdjustment applies when the metric minus the target is in
// [Lower, Upper) (nil: unbounded). Change is in percent of the current
// capacity (at least one instance), positive to scale out.
type StepAdjustment struct {
	Lower  *float64 `json:"lower,omitempty"`
	Upper  *float64 `json:"upper,omitempty"`
	Change int      `json:"change_percent"`
}

// MixedInstances says how a group splits between on-demand and spot.
type MixedInstances struct {
	// OnDemandBase instances are always on demand; above it,
	// OnDemandPercent of the capacity is on demand and the rest spot.
	// The zero value is all on demand (percent 100 when Spot is false).
	OnDemandBase    int  `json:"on_demand_base"`
	OnDemandPercent int  `json:"on_demand_percent"`
	Spot            bool `json:"spot"`
	// MaxSpotPriceRatio (percent of on demand, default 80): a pool whose
	// spot price passes it is left for a cheaper pool or on demand.
	MaxSpotPriceRatio int `json:"max_spot_price_ratio,omitempty"`
	// CapacityRebalance launches a replacement as soon as a member gets a
	// rebalance recommendation, before its pool reclaims it.
	CapacityRebalance bool `json:"capacity_rebalance,omitempty"`
}

// GroupTiming holds the timing words, as EC2 and the HPA use them.
type GroupTiming struct {
	// CooldownSeconds: after a simple or step action (default 300).
	CooldownSeconds int `json:"cooldown_seconds,omitempty"`
	// WarmupSeconds: a new instance stays out of the metric this long
	// after it runs (default 300).
	WarmupSeconds int `json:"warmup_seconds,omitempty"`
	// StabilizationSeconds: scale-in takes the highest recommendation of
	// this window (default 300).
	StabilizationSeconds int `json:"stabilization_seconds,omitempty"`
	// NoticeSeconds: the notice an instance chosen for scale-in gets
	// before it is terminated, as a spot reclaim gives (default 120).
	NoticeSeconds int `json:"notice_seconds,omitempty"`
}

// IdleRelease releases members whose GPU utilization stays under
// Threshold for IdleSeconds, unless locked or protected, down to the
// group's min.
type IdleRelease struct {
	Threshold   float64 `json:"threshold"`
	IdleSeconds int     `json:"idle_seconds"`
}

// GroupStatus is what the controller last decided, for describe.
type GroupStatus struct {
	// Decisions are the latest scaling decisions, newest last (bounded).
	Decisions []GroupDecision `json:"decisions,omitempty"`
	// Backoff, when set, delays the next replacement launch: members keep
	// failing.
	Backoff *GroupBackoff `json:"backoff,omitempty"`
	// LastActionAt is when the group last scaled (for cooldown).
	LastActionAt time.Time `json:"last_action_at,omitzero"`
	// LaunchSeq numbers launches; launch n has idempotency key
	// "group:<id>:<n>", so a retried step never launches twice.
	LaunchSeq int64 `json:"launch_seq"`
	// Message is the last thing worth telling the tenant (a limit hit, a
	// launch refused).
	Message string `json:"message,omitempty"`
}

// GroupDecision explains one scaling decision: its inputs and outcome.
type GroupDecision struct {
	Time     time.Time          `json:"time"`
	From     int                `json:"from"`
	To       int                `json:"to"`
	Policy   string             `json:"policy,omitempty"`
	Limit    string             `json:"limit,omitempty"`
	Metrics  map[string]float64 `json:"metrics,omitempty"`
	Forecast float64            `json:"forecast,omitempty"`
	Reason   string             `json:"reason"`
}

// GroupBackoff records a member that keeps failing.
type GroupBackoff struct {
	Failures int       `json:"failures"`
	Until    time.Time `json:"until"`
	Reason   string    `json:"reason"`
}

// ScaleIn is an instance's scale-in protection: Protected is set by the
// tenant (API), Lock by the workload through its metadata endpoint ("busy
// until my step is saved"). Scale-in and idle release never pick a
// protected or locked instance.
type ScaleIn struct {
	Protected bool       `json:"protected,omitempty"`
	Lock      *ScaleLock `json:"lock,omitempty"`
}

// ScaleLock is a completion lock the workload holds.
type ScaleLock struct {
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Held reports whether s keeps its instance from scale-in.
func (s *ScaleIn) Held() bool { return s != nil && (s.Protected || s.Lock != nil) }

// Reasons for a scale-in notice (Interruption.Reason).
const (
	ReclaimScaleIn   = "scale-in"
	ReclaimIdle      = "idle"
	ReclaimPriceMove = "price-ratio"
)

// IsGroupNotice reports whether an interruption reason is a group's own
// scale-in notice (scale-in, idle release, price-ratio move, rebalance
// replacement): the group controller enforces those, and withdraws them
// from a member that takes its completion lock; spot reclaims are the
// scheduler's.
func IsGroupNotice(reason string) bool {
	switch reason {
	case ReclaimScaleIn, ReclaimIdle, ReclaimPriceMove, ReclaimRebalance:
		return true
	}
	return false
}

// Event kinds of groups.
const (
	EventGroup        EventKind = "group"
	EventGroupScaling EventKind = "group.scaling"
)

const EventInstanceScaleIn EventKind = "instance.scale_in" // an instance's scale-in lock or protection changed

// MetricPoint is one sample: an instance's utilization as its agent
// reported it, or a custom value a tenant published for a group.
type MetricPoint struct {
	TenantID string `json:"tenant_id"`
	// Name is gpu_utilization, cpu_utilization (per instance, 0..1) or a
	// custom metric's name.
	Name string `json:"name"`
	// InstanceID for per-instance samples; GroupID for custom metrics.
	InstanceID string    `json:"instance_id,omitempty"`
	GroupID    string    `json:"group_id,omitempty"`
	At         time.Time `json:"at"`
	Value      float64   `json:"value"`
}

// GroupFilter selects groups in ID order; zero fields match everything.
type GroupFilter struct {
	TenantID string
	States   []GroupState
	// IDs selects these groups (none: any).
	IDs []string
}

// MetricFilter selects metric points in (At, insertion) order.
type MetricFilter struct {
	TenantID string
	GroupID  string
	// After selects points whose At is strictly after it.
	After time.Time
	Limit int
}

// GroupTx is the part of Tx that holds groups and metrics.
type GroupTx interface {
	// CreateGroup inserts g with Version 1 (idempotent by key, as
	// CreateSpotRequest: a repeated key sets *g to the first group and
	// returns Conflict with "existing_id"). A live group's name is unique
	// per tenant: Conflict otherwise.
	CreateGroup(ctx context.Context, g *Group) error
	GetGroup(ctx context.Context, id string) (*Group, error)
	GroupByKey(ctx context.Context, tenantID, key string) (*Group, error)
	ListGroups(ctx context.Context, f GroupFilter) ([]*Group, error)
	// GroupVersions returns the ID and version of the groups
	// ListGroups(f) would return, in ID order.
	GroupVersions(ctx context.Context, f GroupFilter) ([]RowVersion, error)
	// UpdateGroup writes every field but ID, TenantID, IdempotencyKey and
	// CreatedAt when the stored version equals g.Version, and increments
	// it; Conflict otherwise.
	UpdateGroup(ctx context.Context, g *Group) error

	// AppendMetrics appends all the points or none (Invalid when one has
	// no tenant, no name, neither instance nor group, or a value that is
	// not a finite number).
	AppendMetrics(ctx context.Context, ps []MetricPoint) error
	ListMetrics(ctx context.Context, f MetricFilter) ([]MetricPoint, error)
	// PruneMetrics deletes the points before t and returns how many.
	PruneMetrics(ctx context.Context, before time.Time) (int64, error)

	// GroupHistory returns the group controller's saved history of a
	// group (an opaque document), NotFound when none was saved.
	GroupHistory(ctx context.Context, groupID string) ([]byte, error)
	// PutGroupHistory saves doc as the group's history, replacing the one
	// saved before (NotFound when the group does not exist).
	PutGroupHistory(ctx context.Context, groupID string, doc []byte) error
}
