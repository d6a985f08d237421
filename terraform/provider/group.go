package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/float64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// groupResource is gpucloud_group: an autoscaling group (docs/AUTOSCALING.md)
// with its policies as nested blocks. Its size (min, max, desired), its
// policies, its launch template, its spot mix and its budget change in
// place through the API's versioned update (PATCH with If-Match: the
// version Terraform last read), so that a change made meanwhile by
// someone else, or by the group's own scaling, is a conflict to apply
// again over, never a silent overwrite. The name and the group's own tags
// force a replacement. Destroy deletes the group and waits until its
// members are terminated.
type groupResource struct{ base }

var (
	_ resource.ResourceWithConfigure      = (*groupResource)(nil)
	_ resource.ResourceWithImportState    = (*groupResource)(nil)
	_ resource.ResourceWithValidateConfig = (*groupResource)(nil)
)

func newGroupResource() resource.Resource { return &groupResource{} }

type stepModel struct {
	Lower         types.Float64 `tfsdk:"lower"`
	Upper         types.Float64 `tfsdk:"upper"`
	ChangePercent types.Int64   `tfsdk:"change_percent"`
}

type policyModel struct {
	Name            types.String  `tfsdk:"name"`
	Type            types.String  `tfsdk:"type"`
	Metric          types.String  `tfsdk:"metric"`
	Target          types.Float64 `tfsdk:"target"`
	CooldownSeconds types.Int64   `tfsdk:"cooldown_seconds"`
	Cron            types.String  `tfsdk:"cron"`
	TimeZone        types.String  `tfsdk:"time_zone"`
	SetMin          types.Int64   `tfsdk:"set_min"`
	SetMax          types.Int64   `tfsdk:"set_max"`
	SetDesired      types.Int64   `tfsdk:"set_desired"`
	ForecastOnly    types.Bool    `tfsdk:"forecast_only"`
	BufferSeconds   types.Int64   `tfsdk:"buffer_seconds"`
	Steps           []stepModel   `tfsdk:"step"`
}

// timingModel is the group's timing block; a null attribute is the
// server's default (the API's 0).
type timingModel struct {
	CooldownSeconds      types.Int64 `tfsdk:"cooldown_seconds"`
	WarmupSeconds        types.Int64 `tfsdk:"warmup_seconds"`
	StabilizationSeconds types.Int64 `tfsdk:"stabilization_seconds"`
	NoticeSeconds        types.Int64 `tfsdk:"notice_seconds"`
}

// idleReleaseModel is the group's idle_release block (absent: none).
type idleReleaseModel struct {
	Threshold   types.Float64 `tfsdk:"threshold"`
	IdleSeconds types.Int64   `tfsdk:"idle_seconds"`
}

type groupModel struct {
	ID               types.String      `tfsdk:"id"`
	Name             types.String      `tfsdk:"name"`
	Offerings        types.List        `tfsdk:"offerings"`
	Image            types.String      `tfsdk:"image"`
	Command          types.List        `tfsdk:"command"`
	Env              types.Map         `tfsdk:"env"`
	Zones            types.List        `tfsdk:"zones"`
	Labels           types.List        `tfsdk:"labels"`
	InstanceTags     types.Map         `tfsdk:"instance_tags"`
	SubnetID         types.String      `tfsdk:"subnet_id"`
	SecurityGroupIDs types.List        `tfsdk:"security_group_ids"`
	VolumeGiB        types.Int64       `tfsdk:"volume_gib"`
	Min              types.Int64       `tfsdk:"min"`
	Max              types.Int64       `tfsdk:"max"`
	Desired          types.Int64       `tfsdk:"desired"`
	Spot             types.Bool        `tfsdk:"spot"`
	OnDemandBase     types.Int64       `tfsdk:"on_demand_base"`
	OnDemandPercent  types.Int64       `tfsdk:"on_demand_percent"`
	MaxSpotRatio     types.Int64       `tfsdk:"max_spot_price_ratio"`
	Rebalance        types.Bool        `tfsdk:"capacity_rebalance"`
	Timing           *timingModel      `tfsdk:"timing"`
	IdleRelease      *idleReleaseModel `tfsdk:"idle_release"`
	BudgetPerHour    types.String      `tfsdk:"budget_per_hour"`
	Tags             types.Map         `tfsdk:"tags"`
	Policies         []policyModel     `tfsdk:"policy"`
	WaitForCapacity  types.Bool        `tfsdk:"wait_for_capacity"`
	State            types.String      `tfsdk:"state"`
	Version          types.Int64       `tfsdk:"version"`
	CreatedAt        types.String      `tfsdk:"created_at"`
	Timeouts         timeouts.Value    `tfsdk:"timeouts"`
}

var groupFields = map[string]string{"name": "name", "min": "min", "max": "max", "desired": "desired", "policies": "policy",
	"template": "offerings", "budget_per_hour": "budget_per_hour", "tags": "tags", "mixed": "spot", "mixed.spot": "spot",
	"mixed.on_demand_base": "on_demand_base", "mixed.on_demand_percent": "on_demand_percent",
	"mixed.max_spot_price_ratio": "max_spot_price_ratio", "mixed.capacity_rebalance": "capacity_rebalance",
	"timing": "timing", "timing.cooldown_seconds": "timing.cooldown_seconds", "timing.warmup_seconds": "timing.warmup_seconds",
	"timing.stabilization_seconds": "timing.stabilization_seconds", "timing.notice_seconds": "timing.notice_seconds",
	"idle_release": "idle_release", "idle_release.threshold": "idle_release.threshold", "idle_release.idle_seconds": "idle_release.idle_seconds"}

func (r *groupResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_group"
}

func (r *groupResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	list := func(desc string) schema.ListAttribute {
		return schema.ListAttribute{Optional: true, ElementType: types.StringType, Description: desc}
	}
	optInt := func(desc string) schema.Int64Attribute {
		return schema.Int64Attribute{Optional: true, Description: desc}
	}
	optStr := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, Description: desc}
	}
	computedInt := func(desc string) schema.Int64Attribute {
		return schema.Int64Attribute{Optional: true, Computed: true, Description: desc,
			PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()}}
	}
	resp.Schema = schema.Schema{
		Description: "An autoscaling group (gpucloud groups) of instances launched from a template, kept between min and max by its policies. " +
			"Size, policies, template, spot mix, timing, idle release and budget change in place with the group's version as If-Match: a change made since Terraform read the group is a conflict (apply again), not an overwrite. " +
			"A template change applies to new launches only.",
		Attributes: map[string]schema.Attribute{
			"id":   idAttribute(),
			"name": replaceString(true, "Unique among the tenant's groups; members are named NAME-N."),
			"offerings": schema.ListAttribute{Required: true, ElementType: types.StringType,
				Description: "Acceptable offerings, the first preferred (1 to 8)."},
			"image": schema.StringAttribute{Optional: true, Computed: true, Description: "The OCI image of every member; default: the operator's.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"command":            list("The members' command."),
			"env":                schema.MapAttribute{Optional: true, ElementType: types.StringType, Description: "The members' environment."},
			"zones":              list("Zones members may be placed in."),
			"labels":             list("Host label selectors."),
			"instance_tags":      schema.MapAttribute{Optional: true, ElementType: types.StringType, Description: "Tags every member carries."},
			"subnet_id":          optStr("A subnet of the tenant for every member; default: the tenant's default subnet."),
			"security_group_ids": list("One to five security groups of the subnet's network."),
			"volume_gib":         optInt("When set, each member gets a new volume of this size, deleted with it."),
			"min":                schema.Int64Attribute{Required: true, Description: "The fewest members."},
			"max":                schema.Int64Attribute{Required: true, Description: "The most members (at most 1000)."},
			"desired": computedInt("The desired capacity; default min. Leave it out for a group its policies size: " +
				"set, a plan puts it back where the policies moved it."),
			"spot": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				Description: "Launch the members above on_demand_base and on_demand_percent on spot (default false: every member on demand)."},
			"on_demand_base": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				Validators:  []validator.Int64{int64validator.Between(0, 1000)},
				Description: "With spot: the members always launched on demand (default 0). Setting it without spot = true is an error."},
			"on_demand_percent": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				Validators:  []validator.Int64{int64validator.Between(0, 100)},
				Description: "With spot: the percent of the members above on_demand_base launched on demand, the rest on spot (default 0: all spot). Setting it without spot = true is an error."},
			"max_spot_price_ratio": schema.Int64Attribute{Optional: true, Validators: []validator.Int64{int64validator.Between(1, 100)},
				Description: "With spot: the highest spot price, in percent of the on-demand price, at which a pool is used; a pool above it is left for a cheaper one or on demand. Left out: the server's default, 80. Setting it without spot = true is an error."},
			"capacity_rebalance": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				Description: "With spot: launch a replacement as soon as a spot member is told its pool may reclaim it, before the reclaim (default false). Setting it without spot = true is an error."},
			"budget_per_hour":   moneyAttribute("The most the members may cost per hour at their prices, a decimal string (0 or left out: none)."),
			"tags":              tagsAttribute(),
			"wait_for_capacity": schema.BoolAttribute{Optional: true, Description: "Wait at create and update until desired members run (within the timeouts block)."},
			"state":             schema.StringAttribute{Computed: true, Description: "active, deleting or deleted."},
			"version": schema.Int64Attribute{Computed: true,
				Description: "The group's version as Terraform last read it; an update sends it as If-Match. The group's own scaling changes it too."},
			"created_at": computedString("When the group was created (RFC 3339)."),
		},
		Blocks: map[string]schema.Block{
			"policy": schema.ListNestedBlock{
				Description: "A scaling policy; when several apply, the largest capacity wins.",
				NestedObject: schema.NestedBlockObject{
					Attributes: map[string]schema.Attribute{
						"name": schema.StringAttribute{Required: true, Description: "The policy's name."},
						"type": schema.StringAttribute{Required: true, Description: "target, step, scheduled or predictive.",
							Validators: []validator.String{stringvalidator.OneOf(cloud.PolicyTarget, cloud.PolicyStep, cloud.PolicyScheduled, cloud.PolicyPredictive)}},
						"metric":           optStr("gpu_utilization, cpu_utilization, gpu_cpu_utilization or custom:NAME (target, step, predictive)."),
						"target":           schema.Float64Attribute{Optional: true, Description: "The value to hold: a utilization 0..1, or a custom metric per instance."},
						"cooldown_seconds": optInt("Step: the wait after an action."),
						"cron":             optStr("Scheduled: a five-field cron expression."),
						"time_zone":        optStr("Scheduled: an IANA zone (default UTC)."),
						"set_min":          optInt("Scheduled: the min it sets."),
						"set_max":          optInt("Scheduled: the max it sets."),
						"set_desired":      optInt("Scheduled: the desired capacity it sets."),
						"forecast_only":    schema.BoolAttribute{Optional: true, Description: "Predictive: forecast without acting."},
						"buffer_seconds":   optInt("Predictive: how far ahead it acts."),
					},
					Blocks: map[string]schema.Block{
						"step": schema.ListNestedBlock{
							Description: "Step: an adjustment when the metric minus the target is in [lower, upper).",
							NestedObject: schema.NestedBlockObject{Attributes: map[string]schema.Attribute{
								"lower":          schema.Float64Attribute{Optional: true, Description: "Unbounded when left out."},
								"upper":          schema.Float64Attribute{Optional: true, Description: "Unbounded when left out."},
								"change_percent": schema.Int64Attribute{Required: true, Description: "Percent of the current capacity (at least one instance); positive scales out."},
							}},
						},
					},
				},
			},
			"timing": schema.SingleNestedBlock{
				Description: "The group's timing; an attribute left out (or the block) is the server's default.",
				Attributes: map[string]schema.Attribute{
					"cooldown_seconds": schema.Int64Attribute{Optional: true, Validators: []validator.Int64{int64validator.Between(1, 86400)},
						Description: "The wait after a scaling action before a step policy acts again (default 300); a step policy's own cooldown_seconds overrides it."},
					"warmup_seconds": schema.Int64Attribute{Optional: true, Validators: []validator.Int64{int64validator.Between(1, 86400)},
						Description: "How long a new member stays out of the metrics after it runs (default 300)."},
					"stabilization_seconds": schema.Int64Attribute{Optional: true, Validators: []validator.Int64{int64validator.Between(1, 86400)},
						Description: "Scale-in takes the highest recommendation of this window (default 300)."},
					"notice_seconds": schema.Int64Attribute{Optional: true, Validators: []validator.Int64{int64validator.Between(1, 3600)},
						Description: "The notice a member chosen for scale-in gets before it is terminated, as a spot reclaim gives (default 120)."},
				},
			},
			"idle_release": schema.SingleNestedBlock{
				Description: "Release members whose GPU utilization stays under threshold for idle_seconds (unless locked or protected), down to min. Absent: no idle release.",
				Attributes: map[string]schema.Attribute{
					// Optional in the schema: the framework would require
					// them with the block absent too. ValidateConfig
					// requires them in the block.
					"threshold": schema.Float64Attribute{Optional: true, Validators: []validator.Float64{float64validator.Between(0, 1)},
						Description: "The GPU utilization, strictly between 0 and 1, under which a member is idle. Required in the block."},
					"idle_seconds": schema.Int64Attribute{Optional: true, Validators: []validator.Int64{int64validator.Between(1, 86400)},
						Description: "How long, in seconds, a member must stay idle before it is released. Required in the block."},
				},
			},
			"timeouts": timeoutsBlock(ctx, timeouts.Opts{Create: true, Update: true, Delete: true}, "How long create and update wait for the desired members to run (with wait_for_capacity), and destroy until every member is terminated."),
		},
	}
}

// ValidateConfig refuses at plan time what the API would refuse at
// apply: the spot settings without spot = true (the API takes no split
// for an all on-demand group), and an idle_release block without both of
// its settings or with a threshold of 0 or 1.
func (r *groupResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m groupModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !m.Spot.IsUnknown() && !m.Spot.ValueBool() {
		set := func(name string, isSet bool) {
			if isSet {
				resp.Diagnostics.AddAttributeError(path.Root(name), name+" needs spot = true",
					name+" applies to the group's spot members only, and without spot = true every member is on demand: set spot = true, or leave "+name+" out.")
			}
		}
		set("on_demand_base", !m.OnDemandBase.IsNull() && !m.OnDemandBase.IsUnknown() && m.OnDemandBase.ValueInt64() != 0)
		set("on_demand_percent", !m.OnDemandPercent.IsNull() && !m.OnDemandPercent.IsUnknown() && m.OnDemandPercent.ValueInt64() != 0)
		set("max_spot_price_ratio", !m.MaxSpotRatio.IsNull())
		set("capacity_rebalance", !m.Rebalance.IsNull() && !m.Rebalance.IsUnknown() && m.Rebalance.ValueBool())
	}
	if ir := m.IdleRelease; ir != nil {
		at := path.Root("idle_release")
		if ir.Threshold.IsNull() {
			resp.Diagnostics.AddAttributeError(at.AtName("threshold"), "idle_release.threshold is missing", "idle_release needs a threshold (a GPU utilization strictly between 0 and 1).")
		} else if t := ir.Threshold.ValueFloat64(); !ir.Threshold.IsUnknown() && (t <= 0 || t >= 1) {
			// The float validator's bounds are inclusive; the API's are not.
			resp.Diagnostics.AddAttributeError(at.AtName("threshold"), "Invalid idle_release.threshold", fmt.Sprintf("%v is not strictly between 0 and 1.", t))
		}
		if ir.IdleSeconds.IsNull() {
			resp.Diagnostics.AddAttributeError(at.AtName("idle_seconds"), "idle_release.idle_seconds is missing", "idle_release needs idle_seconds (how long a member stays idle before it is released).")
		}
	}
}

// optInt64 is an optional number as a pointer (nil when null).
func optInt64(v types.Int64) *int {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	n := int(v.ValueInt64())
	return &n
}

// optFloat is an optional float as a pointer (nil when null).
func optFloat(v types.Float64) *float64 {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	f := v.ValueFloat64()
	return &f
}

func (m *groupModel) template(ctx context.Context, diags *diagnostics) cloud.GroupTemplate {
	return cloud.GroupTemplate{
		Offerings: goList(ctx, m.Offerings, diags), Image: m.Image.ValueString(), Command: goList(ctx, m.Command, diags),
		Env: goMap(ctx, m.Env, diags), Zones: goList(ctx, m.Zones, diags), Labels: goList(ctx, m.Labels, diags),
		Tags: goMap(ctx, m.InstanceTags, diags), Subnet: m.SubnetID.ValueString(),
		SecurityGroups: goList(ctx, m.SecurityGroupIDs, diags), VolumeGiB: m.VolumeGiB.ValueInt64(),
	}
}

func (m *groupModel) policies() []cloud.ScalingPolicy {
	ps := make([]cloud.ScalingPolicy, 0, len(m.Policies))
	for _, p := range m.Policies {
		sp := cloud.ScalingPolicy{Name: p.Name.ValueString(), Type: p.Type.ValueString(), Metric: p.Metric.ValueString(),
			Target: p.Target.ValueFloat64(), CooldownSeconds: int(p.CooldownSeconds.ValueInt64()), Cron: p.Cron.ValueString(),
			TimeZone: p.TimeZone.ValueString(), SetMin: optInt64(p.SetMin), SetMax: optInt64(p.SetMax), SetDesired: optInt64(p.SetDesired),
			ForecastOnly: p.ForecastOnly.ValueBool(), BufferSeconds: int(p.BufferSeconds.ValueInt64())}
		for _, s := range p.Steps {
			sp.Steps = append(sp.Steps, cloud.StepAdjustment{Lower: optFloat(s.Lower), Upper: optFloat(s.Upper), Change: int(s.ChangePercent.ValueInt64())})
		}
		ps = append(ps, sp)
	}
	return ps
}

// mixed is the group's on-demand and spot split. Without spot the group
// is all on demand and the API takes no split (ValidateConfig refuses
// one at plan time).
func (m *groupModel) mixed() cloud.MixedInstances {
	if !m.Spot.ValueBool() {
		return cloud.MixedInstances{}
	}
	return cloud.MixedInstances{Spot: true, OnDemandBase: int(m.OnDemandBase.ValueInt64()), OnDemandPercent: int(m.OnDemandPercent.ValueInt64()),
		MaxSpotPriceRatio: int(m.MaxSpotRatio.ValueInt64()), CapacityRebalance: m.Rebalance.ValueBool()}
}

// timing is the group's timing (0: the server's default).
func (m *groupModel) timing() cloud.GroupTiming {
	t := m.Timing
	if t == nil {
		return cloud.GroupTiming{}
	}
	return cloud.GroupTiming{CooldownSeconds: int(t.CooldownSeconds.ValueInt64()), WarmupSeconds: int(t.WarmupSeconds.ValueInt64()),
		StabilizationSeconds: int(t.StabilizationSeconds.ValueInt64()), NoticeSeconds: int(t.NoticeSeconds.ValueInt64())}
}

// idleRelease is the group's idle release; the zero value (the block
// left out) is none, which an update sends to remove it.
func (m *groupModel) idleRelease() cloud.IdleRelease {
	if m.IdleRelease == nil {
		return cloud.IdleRelease{}
	}
	return cloud.IdleRelease{Threshold: m.IdleRelease.Threshold.ValueFloat64(), IdleSeconds: int(m.IdleRelease.IdleSeconds.ValueInt64())}
}

func (m *groupModel) budget(diags *diagnostics) money.Micros {
	if m.BudgetPerHour.IsNull() || m.BudgetPerHour.IsUnknown() {
		return 0
	}
	b, err := money.Parse(m.BudgetPerHour.ValueString())
	if err != nil {
		diags.AddAttributeError(path.Root("budget_per_hour"), "Invalid budget_per_hour", err.Error()+" (want a decimal string such as 40.00)")
	}
	return b
}

func (r *groupResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m groupModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	wait, diags := m.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(diags...)
	body := api.CreateGroupRequest{Name: m.Name.ValueString(), Template: m.template(ctx, &resp.Diagnostics),
		Min: int(m.Min.ValueInt64()), Max: int(m.Max.ValueInt64()), Desired: optInt64(m.Desired), Policies: m.policies(),
		Mixed: m.mixed(), Timing: m.timing(), BudgetPerHour: m.budget(&resp.Diagnostics), Tags: goMap(ctx, m.Tags, &resp.Diagnostics)}
	if ir := m.idleRelease(); ir != (cloud.IdleRelease{}) {
		body.IdleRelease = &ir
	}
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	g, err := createRetrying(ctx, "gpucloud_group", resp.Private, &resp.Diagnostics, func(key string) (*cloud.Group, error) {
		return r.c.CreateGroup(ctx, body, key)
	})
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot create the group", err, groupFields)
		return
	}
	m.fill(g)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	r.waitCapacity(ctx, &m, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// waitCapacity waits, when the model asks for it, until the group's
// desired members run, then keeps the group's version as read last.
func (r *groupResource) waitCapacity(ctx context.Context, m *groupModel, diags *diagnostics) {
	if !m.WaitForCapacity.ValueBool() {
		return
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		d, err := r.c.GetGroup(ctx, m.ID.ValueString())
		if err == nil {
			running := 0
			for _, mb := range d.Members {
				if mb.State == cloud.Running {
					running++
				}
			}
			if running >= d.Desired {
				m.fill(&d.Group)
				return
			}
		}
		select {
		case <-ctx.Done():
			msg := "the group's members do not all run after the timeout (set it in the timeouts block)"
			if d != nil && d.Status.Message != "" {
				msg += ": " + d.Status.Message
			}
			diags.AddAttributeError(path.Root("desired"), "The group did not reach its capacity", msg)
			return
		case <-t.C:
		}
	}
}

func (m *groupModel) fill(g *cloud.Group) {
	m.ID = types.StringValue(g.ID)
	m.Name = types.StringValue(g.Name)
	m.Offerings = stringList(g.Template.Offerings)
	if m.Image.IsNull() || m.Image.IsUnknown() || !sameImage(m.Image.ValueString(), g.Template.Image) {
		m.Image = optString(g.Template.Image)
	}
	m.Command = stringList(g.Template.Command)
	m.Env = stringMap(g.Template.Env)
	m.Zones = stringList(g.Template.Zones)
	m.Labels = stringList(g.Template.Labels)
	m.InstanceTags = stringMap(userTags(g.Template.Tags))
	m.SubnetID = optString(g.Template.Subnet)
	m.SecurityGroupIDs = stringList(g.Template.SecurityGroups)
	m.VolumeGiB = types.Int64Null()
	if g.Template.VolumeGiB > 0 {
		m.VolumeGiB = types.Int64Value(g.Template.VolumeGiB)
	}
	m.Min = types.Int64Value(int64(g.Min))
	m.Max = types.Int64Value(int64(g.Max))
	m.Desired = types.Int64Value(int64(g.Desired))
	m.Spot = types.BoolValue(g.Mixed.Spot)
	m.OnDemandBase = types.Int64Value(int64(g.Mixed.OnDemandBase))
	m.OnDemandPercent = types.Int64Value(int64(g.Mixed.OnDemandPercent))
	m.MaxSpotRatio = optInt(g.Mixed.MaxSpotPriceRatio)
	m.Rebalance = types.BoolValue(g.Mixed.CapacityRebalance)
	// A timing block the configuration writes stays (its attributes null
	// where the server's default applies); the server's defaults alone
	// are no block.
	if t := g.Timing; t != (cloud.GroupTiming{}) || m.Timing != nil {
		m.Timing = &timingModel{CooldownSeconds: optInt(t.CooldownSeconds), WarmupSeconds: optInt(t.WarmupSeconds),
			StabilizationSeconds: optInt(t.StabilizationSeconds), NoticeSeconds: optInt(t.NoticeSeconds)}
	}
	m.IdleRelease = nil
	if ir := g.IdleRelease; ir != nil {
		m.IdleRelease = &idleReleaseModel{Threshold: types.Float64Value(ir.Threshold), IdleSeconds: types.Int64Value(int64(ir.IdleSeconds))}
	}
	if written, err := money.Parse(m.BudgetPerHour.ValueString()); m.BudgetPerHour.IsNull() || m.BudgetPerHour.IsUnknown() || err != nil || written != g.BudgetPerHour {
		m.BudgetPerHour = types.StringNull()
		if g.BudgetPerHour != 0 {
			m.BudgetPerHour = moneyString(g.BudgetPerHour)
		}
	}
	m.Tags = stringMap(userTags(g.Tags))
	m.Policies = nil
	for _, p := range g.Policies {
		pm := policyModel{Name: types.StringValue(p.Name), Type: types.StringValue(p.Type), Metric: optString(p.Metric),
			Target: types.Float64Null(), CooldownSeconds: optInt(p.CooldownSeconds), Cron: optString(p.Cron), TimeZone: optString(p.TimeZone),
			SetMin: optIntPtr(p.SetMin), SetMax: optIntPtr(p.SetMax), SetDesired: optIntPtr(p.SetDesired),
			ForecastOnly: types.BoolNull(), BufferSeconds: optInt(p.BufferSeconds)}
		if p.Target != 0 {
			pm.Target = types.Float64Value(p.Target)
		}
		if p.ForecastOnly {
			pm.ForecastOnly = types.BoolValue(true)
		}
		for _, s := range p.Steps {
			sm := stepModel{Lower: types.Float64Null(), Upper: types.Float64Null(), ChangePercent: types.Int64Value(int64(s.Change))}
			if s.Lower != nil {
				sm.Lower = types.Float64Value(*s.Lower)
			}
			if s.Upper != nil {
				sm.Upper = types.Float64Value(*s.Upper)
			}
			pm.Steps = append(pm.Steps, sm)
		}
		m.Policies = append(m.Policies, pm)
	}
	m.State = types.StringValue(string(g.State))
	m.Version = types.Int64Value(g.Version)
	m.CreatedAt = rfc3339(g.CreatedAt)
}

// optInt is a number that is null when zero.
func optInt(n int) types.Int64 {
	if n == 0 {
		return types.Int64Null()
	}
	return types.Int64Value(int64(n))
}

// optIntPtr is a number that is null when nil.
func optIntPtr(n *int) types.Int64 {
	if n == nil {
		return types.Int64Null()
	}
	return types.Int64Value(int64(*n))
}

func (r *groupResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m groupModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	d, err := r.c.GetGroup(ctx, m.ID.ValueString())
	// Deleted (or being deleted) outside Terraform: the next plan makes
	// another.
	if gone(err) || (err == nil && d.State != cloud.GroupActive) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the group", err, nil)
		return
	}
	m.fill(&d.Group)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// Update changes the group in place with the version Terraform read as
// If-Match: a group changed since (by another client, or by its own
// scaling) fails with a conflict that says to apply again.
func (r *groupResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m, st groupModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &st)...)
	if resp.Diagnostics.HasError() {
		return
	}
	wait, diags := m.Timeouts.Update(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(diags...)
	tmpl := m.template(ctx, &resp.Diagnostics)
	pols := m.policies()
	mixed := m.mixed()
	budget := m.budget(&resp.Diagnostics)
	timing := m.timing()
	// The zero value removes idle release when the block is left out.
	idle := m.idleRelease()
	body := api.UpdateGroupRequest{Template: &tmpl, Policies: &pols, Mixed: &mixed, Timing: &timing, BudgetPerHour: &budget, IdleRelease: &idle}
	mn, mx := int(m.Min.ValueInt64()), int(m.Max.ValueInt64())
	body.Min, body.Max = &mn, &mx
	// desired is sent when the configuration sets it; left out, the
	// group keeps its own (brought within the new bounds).
	if !m.Desired.IsUnknown() && !m.Desired.IsNull() && m.Desired != st.Desired {
		body.Desired = optInt64(m.Desired)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	g, err := r.c.UpdateGroup(ctx, st.ID.ValueString(), body, st.Version.ValueInt64())
	if err != nil {
		var ce *cloud.Error
		if errors.As(err, &ce) && ce.Code == cloud.Conflict {
			resp.Diagnostics.AddError("The group changed since Terraform read it",
				fmt.Sprintf("group %s is no longer at version %d: another client or its own scaling changed it meanwhile, and the update was not made (%s). "+
					"Run terraform apply again: it reads the group afresh and plans over what it is now.", st.ID.ValueString(), st.Version.ValueInt64(), ce.Message))
			return
		}
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot update the group", err, groupFields)
		return
	}
	m.fill(g)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	r.waitCapacity(ctx, &m, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *groupResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m groupModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	wait, diags := m.Timeouts.Delete(ctx, defaultDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// No If-Match: destroying the group is meant whatever it became.
	if _, err := r.c.DeleteGroup(ctx, m.ID.ValueString(), 0); err != nil {
		if !gone(err) {
			addAPIError(&resp.Diagnostics, path.Empty(), "Cannot delete the group", err, nil)
		}
		return
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		d, err := r.c.GetGroup(ctx, m.ID.ValueString())
		if gone(err) || (err == nil && d.State == cloud.GroupDeleted) {
			return
		}
		select {
		case <-ctx.Done():
			resp.Diagnostics.AddError("The group was not deleted", fmt.Sprintf("group %s still has members after the timeout (set it in the timeouts block)", m.ID.ValueString()))
			return
		case <-t.C:
		}
	}
}

func (r *groupResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, req, resp, "group", func(ctx context.Context, id string) error {
		d, err := r.c.GetGroup(ctx, id)
		if err == nil && d.State != cloud.GroupActive {
			return cloud.Errorf(cloud.NotFound, "group %s is %s", id, d.State)
		}
		return err
	})
}
