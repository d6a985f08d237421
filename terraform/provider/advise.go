package provider

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/advise"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// adviseDataSource is gpucloud_advise: the selection matrix of `gpucloud
// advise`. A workload in, the ways to run it out, ranked by total cost,
// from the server's live market (its offerings with their availability,
// the prices in force, the spot pools with their reclaims over a week),
// through the same pure package advise and advise.LiveMarket as the CLI.
type adviseDataSource struct{ dsBase }

func newAdviseDataSource() datasource.DataSource { return &adviseDataSource{} }

// adviseReclaimWindow is the window of the reclaim rates, as the CLI's.
const adviseReclaimWindow = 7 * 24 * time.Hour

type adviseOptionModel struct {
	Rank              types.Int64  `tfsdk:"rank"`
	Offering          types.String `tfsdk:"offering"`
	Mode              types.String `tfsdk:"mode"`
	Model             types.String `tfsdk:"model"`
	GPUs              types.Int64  `tfsdk:"gpus"`
	Mix               types.String `tfsdk:"mix"`
	Zone              types.String `tfsdk:"zone"`
	Nodes             types.Int64  `tfsdk:"nodes"`
	OnDemandNodes     types.Int64  `tfsdk:"on_demand_nodes"`
	SpotNodes         types.Int64  `tfsdk:"spot_nodes"`
	Total             types.String `tfsdk:"total"`
	Compute           types.String `tfsdk:"compute"`
	Storage           types.String `tfsdk:"storage"`
	PerInstanceHour   types.String `tfsdk:"per_instance_hour"`
	FitsNow           types.String `tfsdk:"fits_now"`
	CompletionSeconds types.Int64  `tfsdk:"completion_seconds"`
	Reasons           types.List   `tfsdk:"reasons"`
}

type adviseExclusionModel struct {
	Offering  types.String `tfsdk:"offering"`
	Mix       types.String `tfsdk:"mix"`
	Dimension types.String `tfsdk:"dimension"`
	Reason    types.String `tfsdk:"reason"`
}

type adviseModel struct {
	Params          types.String           `tfsdk:"params"`
	MemoryGiB       types.Int64            `tfsdk:"memory_gib"`
	Precision       types.String           `tfsdk:"precision"`
	Task            types.String           `tfsdk:"task"`
	Nodes           types.Int64            `tfsdk:"nodes"`
	HoursPerDay     types.Float64          `tfsdk:"hours_per_day"`
	Days            types.Int64            `tfsdk:"days"`
	CheckpointEvery types.String           `tfsdk:"checkpoint_every"`
	Deadline        types.String           `tfsdk:"deadline"`
	Budget          types.String           `tfsdk:"budget"`
	ScratchGiB      types.Int64            `tfsdk:"scratch_gib"`
	Top             types.Int64            `tfsdk:"top"`
	Source          types.String           `tfsdk:"source"`
	MemoryRule      types.String           `tfsdk:"memory_rule"`
	CheckpointGiB   types.Int64            `tfsdk:"checkpoint_gib"`
	Best            types.String           `tfsdk:"best_offering"`
	Options         []adviseOptionModel    `tfsdk:"options"`
	Excluded        []adviseExclusionModel `tfsdk:"excluded"`
	Notes           types.List             `tfsdk:"notes"`
}

// adviseFields maps advise.Workload's field names to the attributes.
var adviseFields = map[string]string{
	advise.FieldParams: "params", advise.FieldMemoryMiB: "memory_gib", advise.FieldPrecision: "precision",
	advise.FieldTask: "task", advise.FieldNodes: "nodes", advise.FieldPerDay: "hours_per_day", advise.FieldDays: "days",
	advise.FieldCheckpointInterval: "checkpoint_every", advise.FieldDeadline: "deadline", advise.FieldBudget: "budget",
	advise.FieldScratchGiB: "scratch_gib",
}

func (d *adviseDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_advise"
}

func (d *adviseDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	str := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, Description: desc}
	}
	num := func(desc string) schema.Int64Attribute {
		return schema.Int64Attribute{Computed: true, Description: desc}
	}
	resp.Schema = schema.Schema{
		Description: "The selection matrix (gpucloud advise, docs/ADVISE.md): the offerings and pricing mixes that can run a workload, ranked by what the whole workload costs at the server's live prices, with whether each fits in the fleet now and why; every offering left out, with its reason.",
		Attributes: map[string]schema.Attribute{
			"params":     schema.StringAttribute{Optional: true, Description: "The model's parameters: 7B, 70B, 350M, 1.5T. This or memory_gib is required."},
			"memory_gib": schema.Int64Attribute{Optional: true, Description: "The GPU memory the whole job needs, in GiB (wins over the estimate from params).", Validators: []validator.Int64{int64validator.AtLeast(1)}},
			"precision": schema.StringAttribute{Optional: true, Description: "fp32, tf32, bf16, fp16, fp8, int8 or int4 (default bf16 to train, fp16 for inference).",
				Validators: []validator.String{stringvalidator.OneOf("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4")}},
			"task": schema.StringAttribute{Optional: true, Description: "train or inference (default).",
				Validators: []validator.String{stringvalidator.OneOf("train", "inference")}},
			"nodes":            schema.Int64Attribute{Optional: true, Description: "Instances running the job together (default 1; more needs InfiniBand/RoCE-class offerings)."},
			"hours_per_day":    schema.Float64Attribute{Optional: true, Description: "Hours the job runs a day, up to 24 (default 24); whole seconds."},
			"days":             schema.Int64Attribute{Optional: true, Description: "Days the job runs (default 30)."},
			"checkpoint_every": schema.StringAttribute{Optional: true, Description: "How often the job checkpoints (30m); left out or 0: it cannot be interrupted, which rules spot out."},
			"deadline":         schema.StringAttribute{Optional: true, Description: "Finish within this long of the start: 72h, 16d."},
			"budget":           schema.StringAttribute{Optional: true, Description: "The most the whole workload may cost, a decimal string (5000)."},
			"scratch_gib":      schema.Int64Attribute{Optional: true, Description: "Local disk each node needs at /scratch (the offering's instance store), in GiB."},
			"top":              schema.Int64Attribute{Optional: true, Description: "Keep only the first top options (0 or left out: all).", Validators: []validator.Int64{int64validator.AtLeast(0)}},
			"source":           str("Where the numbers come from: live from the server."),
			"memory_rule":      str("How the GPU memory was found."),
			"checkpoint_gib":   num("The checkpoint volume's size the costs include."),
			"best_offering":    str("The first option's offering; null when none can run the workload."),
			"options": schema.ListNestedAttribute{Computed: true, Description: "The options, best first: those that fit now (or may) before those that do not, each group by total cost.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"rank":               num("1 first."),
					"offering":           str("The offering."),
					"mode":               str("Its mode."),
					"model":              str("Its GPU model."),
					"gpus":               num("GPUs per instance."),
					"mix":                str("on_demand, reserved, retainer, spot or on_demand+spot."),
					"zone":               str("The spot pool's zone, or a zonal price's; empty for any zone."),
					"nodes":              num("Instances."),
					"on_demand_nodes":    num("Of which on demand."),
					"spot_nodes":         num("Of which spot."),
					"total":              str("The whole workload's cost (compute + storage), a decimal string."),
					"compute":            str("Its compute, a decimal string."),
					"storage":            str("Its checkpoint volume, a decimal string."),
					"per_instance_hour":  str("Compute per instance-hour of the schedule, a decimal string."),
					"fits_now":           str("yes, no or unknown: whether the fleet has room now."),
					"completion_seconds": num("When the work is expected to be done, from the start."),
					"reasons":            schema.ListAttribute{Computed: true, ElementType: types.StringType, Description: "Why, one line each: DIMENSION: TEXT."},
				}}},
			"excluded": schema.ListNestedAttribute{Computed: true, Description: "Every offering (or one of its mixes) left out, and why.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"offering":  str("The offering."),
					"mix":       str("The mix; empty when the whole offering is left out."),
					"dimension": str("compute, network, storage, pricing, availability, deadline or budget."),
					"reason":    str("Why."),
				}}},
			"notes": schema.ListAttribute{Computed: true, ElementType: types.StringType, Description: "Remarks about the whole advice."},
		},
	}
}

// workload is the model's workload, with the CLI's defaults; a bad value
// is an error on its attribute.
func (m *adviseModel) workload(diags *diag.Diagnostics) advise.Workload {
	w := advise.Workload{Task: advise.Inference, Nodes: 1, PerDay: 24 * time.Hour, Days: 30}
	bad := func(attr, format string, err error) {
		diags.AddAttributeError(path.Root(attr), "Invalid workload", format+": "+err.Error())
	}
	if !m.Task.IsNull() {
		t, err := advise.ParseTask(m.Task.ValueString())
		if err != nil {
			bad("task", "task", err)
		}
		w.Task = t
	}
	w.Precision = advise.FP16
	if w.Task == advise.Training {
		w.Precision = advise.BF16
	}
	if !m.Precision.IsNull() {
		p, err := advise.ParsePrecision(m.Precision.ValueString())
		if err != nil {
			bad("precision", "precision", err)
		}
		w.Precision = p
	}
	if m.Params.IsNull() && m.MemoryGiB.IsNull() {
		diags.AddAttributeError(path.Root("params"), "Invalid workload", "give the model's size: params (e.g. 7B) or memory_gib")
	}
	if !m.Params.IsNull() {
		p, err := advise.ParseParams(m.Params.ValueString())
		if err != nil {
			bad("params", "params", err)
		}
		w.Params = p
	}
	if !m.MemoryGiB.IsNull() {
		if g := m.MemoryGiB.ValueInt64(); g > advise.MaxMemoryMiB/1024 {
			diags.AddAttributeError(path.Root("memory_gib"), "Invalid workload", "memory_gib: at most "+strconv.FormatInt(advise.MaxMemoryMiB/1024, 10))
		} else {
			w.MemoryMiB = g * 1024
		}
	}
	if !m.Nodes.IsNull() {
		w.Nodes = int(min(max(m.Nodes.ValueInt64(), math.MinInt32), math.MaxInt32))
	}
	if !m.HoursPerDay.IsNull() {
		h := m.HoursPerDay.ValueFloat64()
		if h <= 0 || h > 24 {
			diags.AddAttributeError(path.Root("hours_per_day"), "Invalid workload", "hours_per_day must be more than 0 and at most 24")
		} else {
			w.PerDay = time.Duration(math.Round(h*3600)) * time.Second
		}
	}
	if !m.Days.IsNull() {
		w.Days = int(min(max(m.Days.ValueInt64(), math.MinInt32), math.MaxInt32))
	}
	dur := func(attr string, v types.String) time.Duration {
		if v.IsNull() {
			return 0
		}
		d, err := parseDays(v.ValueString())
		if err != nil {
			bad(attr, attr, err)
		}
		return d
	}
	w.CheckpointInterval = dur("checkpoint_every", m.CheckpointEvery)
	w.Deadline = dur("deadline", m.Deadline)
	if !m.Budget.IsNull() {
		b, err := money.Parse(m.Budget.ValueString())
		if err != nil {
			bad("budget", "budget", err)
		}
		w.Budget = b
	}
	w.ScratchGiB = m.ScratchGiB.ValueInt64()
	return w
}

// parseDays is time.ParseDuration with whole days too ("16d").
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		d, err := strconv.ParseInt(n, 10, 32)
		if err != nil || d < 0 {
			return 0, errors.New("want a duration such as 30m, 72h or 16d, got " + strconv.Quote(s))
		}
		return time.Duration(d) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("want a duration such as 30m, 72h or 16d, got " + strconv.Quote(s))
	}
	return d, nil
}

func (d *adviseDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m adviseModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	w := m.workload(&resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	market, cat, err := readMarket(ctx, d.c)
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the market", err, nil)
		return
	}
	a, err := advise.Advise(w, market, cat)
	if err != nil {
		// Validate's errors are joined, one per field.
		var errs []error
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		} else {
			errs = []error{err}
		}
		for _, e := range errs {
			addAPIError(&resp.Diagnostics, path.Empty(), "Invalid workload", e, adviseFields)
		}
		return
	}
	m.Source = types.StringValue(a.Source)
	m.MemoryRule = types.StringValue(a.Need.MemoryRule)
	m.CheckpointGiB = types.Int64Value(a.Need.CheckpointGiB)
	opts := a.Options
	if top := m.Top.ValueInt64(); top > 0 && int64(len(opts)) > top {
		opts = opts[:top]
	}
	m.Best = types.StringNull()
	if len(opts) > 0 {
		m.Best = types.StringValue(opts[0].Offering)
	}
	m.Options = make([]adviseOptionModel, 0, len(opts))
	for _, o := range opts {
		reasons := make([]string, len(o.Reasons))
		for i, r := range o.Reasons {
			reasons[i] = string(r.Dimension) + ": " + r.Text
		}
		m.Options = append(m.Options, adviseOptionModel{
			Rank: types.Int64Value(int64(o.Rank)), Offering: types.StringValue(o.Offering), Mode: types.StringValue(string(o.Mode)),
			Model: types.StringValue(o.Model), GPUs: types.Int64Value(int64(o.GPUs)), Mix: types.StringValue(string(o.Mix)),
			Zone: types.StringValue(o.Zone), Nodes: types.Int64Value(int64(o.Nodes)),
			OnDemandNodes: types.Int64Value(int64(o.OnDemandNodes)), SpotNodes: types.Int64Value(int64(o.SpotNodes)),
			Total: moneyString(o.Total), Compute: moneyString(o.Compute), Storage: moneyString(o.Storage),
			PerInstanceHour: moneyString(o.PerInstanceHour), FitsNow: types.StringValue(string(o.FitsNow)),
			CompletionSeconds: types.Int64Value(o.CompletionSeconds), Reasons: listOf(reasons),
		})
	}
	m.Excluded = make([]adviseExclusionModel, 0, len(a.Excluded))
	for _, e := range a.Excluded {
		m.Excluded = append(m.Excluded, adviseExclusionModel{Offering: types.StringValue(e.Offering), Mix: types.StringValue(string(e.Mix)),
			Dimension: types.StringValue(string(e.Dimension)), Reason: types.StringValue(e.Reason)})
	}
	m.Notes = listOf(a.Notes)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// listOf is a list of strings, empty (not null) when vs is.
func listOf(vs []string) types.List {
	if len(vs) == 0 {
		return types.ListValueMust(types.StringType, nil)
	}
	return stringList(vs)
}

// readMarket reads what any tenant may read, as the CLI's advise does:
// the offerings with their availability, the prices in force now, the
// spot pools with their reclaim rates over a week. The catalog is the
// server's offerings over the built-in GPU models, so that the advice
// weighs what this server sells; an offering of a model the built-in
// catalog does not know falls back to the built-in catalog.
func readMarket(ctx context.Context, c *client.Client) (*advise.MarketView, *catalog.Catalog, error) {
	now := time.Now()
	list, err := c.OfferingList(ctx)
	if err != nil {
		return nil, nil, err
	}
	compute, err := c.Prices(ctx, client.PricesOptions{Kind: cloud.PriceCompute, At: now})
	if err != nil {
		return nil, nil, err
	}
	volume, err := c.Prices(ctx, client.PricesOptions{Kind: cloud.PriceVolume, At: now})
	if err != nil {
		return nil, nil, err
	}
	pools, err := c.SpotPoolsOver(ctx, adviseReclaimWindow)
	if err != nil {
		return nil, nil, err
	}
	l := advise.Live{Source: "live from the provider's server", Prices: append(compute, volume...), Availability: list.Availability}
	offs := make([]catalog.Offering, 0, len(list.Offerings))
	for _, o := range list.Offerings {
		l.Offerings = append(l.Offerings, o.Name)
		offs = append(offs, *o)
	}
	for _, p := range pools {
		l.Pools = append(l.Pools, advise.LivePool{Pool: p.Pool, Price: p.Price, ReclaimRateBP: p.ReclaimRateBP, SpotSeconds: p.SpotSeconds})
	}
	def := catalog.Default()
	models := make([]catalog.Model, 0)
	for _, md := range def.Models() {
		models = append(models, *md)
	}
	cat, err := catalog.New(models, offs)
	if err != nil {
		cat = def
	}
	return advise.LiveMarket(l), cat, nil
}
