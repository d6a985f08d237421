package api

import (
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// CreateGroupRequest is the body of POST /v1/groups: an autoscaling group
// (docs/AUTOSCALING.md) of instances launched from Template, kept between
// Min and Max by its policies.
type CreateGroupRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant string `json:"tenant,omitempty"`
	// Name is unique among the tenant's groups that are not deleted;
	// members are named "<name>-<n>".
	Name string `json:"name"`
	// Template is what every member is launched from: offerings (1 to 8,
	// the first preferred), image, command, env, zones, labels, tags (no
	// "gpucloud:" prefix) and volume_gib (a new volume per member).
	Template cloud.GroupTemplate `json:"template"`
	// Min <= Desired <= Max <= 1000; Desired defaults to Min.
	Min     int  `json:"min"`
	Max     int  `json:"max"`
	Desired *int `json:"desired,omitempty"`
	// Policies are the scaling rules; when several apply, the largest
	// capacity wins.
	Policies []cloud.ScalingPolicy `json:"policies,omitempty"`
	Mixed    cloud.MixedInstances  `json:"mixed,omitzero"`
	Timing   cloud.GroupTiming     `json:"timing,omitzero"`
	// BudgetPerHour caps the members' cost per hour (a decimal string;
	// absent or "0": no budget).
	BudgetPerHour money.Micros       `json:"budget_per_hour,omitempty"`
	IdleRelease   *cloud.IdleRelease `json:"idle_release,omitempty"`
	// Tags are the group's own (its members carry template.tags); no
	// "gpucloud:" prefix.
	Tags map[string]string `json:"tags,omitempty"`
}

// UpdateGroupRequest is the body of PATCH /v1/groups/{id}: absent fields
// are left as they are. Template replaces the whole template and applies
// to new launches only; policies replaces every policy ([] removes them);
// budget_per_hour "0" removes the budget; idle_release {} removes idle
// release. When min or max change and desired is absent, desired is
// brought within the new bounds.
type UpdateGroupRequest struct {
	Min           *int                   `json:"min,omitempty"`
	Max           *int                   `json:"max,omitempty"`
	Desired       *int                   `json:"desired,omitempty"`
	Template      *cloud.GroupTemplate   `json:"template,omitempty"`
	Policies      *[]cloud.ScalingPolicy `json:"policies,omitempty"`
	Mixed         *cloud.MixedInstances  `json:"mixed,omitempty"`
	Timing        *cloud.GroupTiming     `json:"timing,omitempty"`
	BudgetPerHour *money.Micros          `json:"budget_per_hour,omitempty"`
	IdleRelease   *cloud.IdleRelease     `json:"idle_release,omitempty"`
}

// GroupList answers GET /v1/groups.
type GroupList struct {
	Groups []*cloud.Group `json:"groups"`
}

// SetDesiredRequest is the body of POST /v1/groups/{id}/desired.
type SetDesiredRequest struct {
	// Desired is the new desired capacity, within the group's min and max.
	Desired int `json:"desired"`
	// HonorCooldown refuses the change (409) while the group is in its
	// cooldown after its last scaling action.
	HonorCooldown bool `json:"honor_cooldown,omitempty"`
}

// MetricPoint is one custom metric point of PutMetricsRequest.
type MetricPoint struct {
	// Name is the metric's name, without "custom:" (policies track it as
	// "custom:NAME"): 1 to 64 of a-z, 0-9, '_', '.' and '-'.
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// At is when it was measured: absent means now; at most 1 hour before
	// now and 5 minutes after it.
	At *time.Time `json:"at,omitempty"`
}

// PutMetricsRequest is the body of POST /v1/metrics: custom metric points
// of one group, 1 to 100 per call.
type PutMetricsRequest struct {
	GroupID string        `json:"group_id"`
	Metrics []MetricPoint `json:"metrics"`
}

// ProtectRequest is the body of POST /v1/instances/{id}/protection.
type ProtectRequest struct {
	// Protected keeps the instance from scale-in and idle release
	// (required: true or false).
	Protected *bool `json:"protected"`
}

// GroupMember is a member of a group as GroupDescribe shows it.
type GroupMember struct {
	ID       string       `json:"id"`
	Name     string       `json:"name,omitempty"`
	State    cloud.State  `json:"state"`
	Reason   string       `json:"reason,omitempty"`
	Market   cloud.Market `json:"market"`
	Offering string       `json:"offering"`
	// Zone is where it was placed (empty until it is).
	Zone   string `json:"zone,omitempty"`
	HostID string `json:"host_id,omitempty"`
	// ScaleIn is its protection and the workload's completion lock.
	ScaleIn *cloud.ScaleIn `json:"scale_in,omitempty"`
	// Interruption is a spot reclaim or a scale-in notice.
	Interruption *cloud.Interruption `json:"interruption,omitempty"`
	CreatedAt    time.Time           `json:"created_at"`
}

// GroupDescribe answers GET /v1/groups/{id}: the group (its status holds
// the latest decisions and the backoff), its members (its instances that
// are not terminated, in ID order) and its newest events (at most 20,
// oldest first).
type GroupDescribe struct {
	cloud.Group
	Members      []GroupMember  `json:"members"`
	RecentEvents []*cloud.Event `json:"recent_events"`
}

// MemberOf is the member view of an instance of a group.
func MemberOf(in *cloud.Instance) GroupMember {
	return GroupMember{ID: in.ID, Name: in.Name, State: in.State, Reason: in.Reason, Market: in.Market,
		Offering: in.Offering, Zone: in.Zone, HostID: in.HostID, ScaleIn: in.ScaleIn, Interruption: in.Interruption,
		CreatedAt: in.CreatedAt}
}

// GroupForecast is GET /v1/groups/{id}/forecast: the forecast of a group's
// load beside what happened, hour by hour, in instances (load / target),
// with the backtest's error, and the forecast of the next 48 hours.
type GroupForecast struct {
	GroupID string  `json:"group_id"`
	Policy  string  `json:"policy"`
	Metric  string  `json:"metric"`
	Target  float64 `json:"target"`
	// HistoryHours is how much history the backtest had.
	HistoryHours float64 `json:"history_hours"`
	// MAPE is the mean absolute percentage error over the hours with load;
	// WAPE is Σ|actual−forecast| / Σactual. Both in percent.
	MAPE     float64        `json:"mape_percent"`
	WAPE     float64        `json:"wape_percent"`
	Backtest []ForecastHour `json:"backtest"`
	Ahead    []ForecastHour `json:"ahead"`
}

// ForecastHour is one hour's mean: Actual is absent for the hours to come.
type ForecastHour struct {
	Time     time.Time `json:"time"`
	Forecast float64   `json:"forecast"`
	Actual   *float64  `json:"actual,omitempty"`
}
