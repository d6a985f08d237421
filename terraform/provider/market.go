package provider

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// The market's data sources: gpucloud_offerings, gpucloud_offering,
// gpucloud_prices and gpucloud_spot_price. What they read any tenant may
// read. Money is a decimal string (money.Micros.String, as the API
// writes it: "2.49", "0.000125"), never a float.

// offeringModel is one offering with the fleet's availability of it.
type offeringModel struct {
	Name             types.String `tfsdk:"name"`
	Description      types.String `tfsdk:"description"`
	Mode             types.String `tfsdk:"mode"`
	Model            types.String `tfsdk:"model"`
	GPUs             types.Int64  `tfsdk:"gpus"`
	MIGProfile       types.String `tfsdk:"mig_profile"`
	ShareMilli       types.Int64  `tfsdk:"share_milli"`
	ShareMemoryMiB   types.Int64  `tfsdk:"share_memory_mib"`
	VCPUs            types.Int64  `tfsdk:"vcpus"`
	MemoryMiB        types.Int64  `tfsdk:"memory_mib"`
	InstanceStoreGiB types.Int64  `tfsdk:"instance_store_gib"`
	Hosts            types.Int64  `tfsdk:"hosts"`
	FitsNow          types.Int64  `tfsdk:"fits_now"`
}

// offeringAttributes are offeringModel's attributes, all computed but
// name when named is set (gpucloud_offering's argument).
func offeringAttributes(named bool) map[string]schema.Attribute {
	str := func(d string) schema.StringAttribute { return schema.StringAttribute{Computed: true, Description: d} }
	num := func(d string) schema.Int64Attribute { return schema.Int64Attribute{Computed: true, Description: d} }
	a := map[string]schema.Attribute{
		"name":               str("The offering's name (h100.1x)."),
		"description":        str("A one-line description."),
		"mode":               str("metal, gpu, mig, shared or cpu."),
		"model":              str("The GPU model (H100-80GB); empty for cpu."),
		"gpus":               num("Whole GPUs (gpu), or the host's GPU count (metal, 0: any)."),
		"mig_profile":        str("The MIG profile (mig)."),
		"share_milli":        num("The compute share of one GPU in thousandths (shared)."),
		"share_memory_mib":   num("The GPU memory of a share (shared)."),
		"vcpus":              num("Host CPUs that come with it."),
		"memory_mib":         num("Host memory that comes with it."),
		"instance_store_gib": num("Local scratch at /scratch, wiped at stop (0: none)."),
		"hosts":              num("Hosts of the fleet that could run one if they were empty; null when the server does not know its fleet (a follower)."),
		"fits_now":           num("Hosts with room for one now; null when unknown."),
	}
	if named {
		a["name"] = schema.StringAttribute{Required: true, Description: "The offering's name (h100.1x)."}
	}
	return a
}

func offeringOf(o *catalog.Offering, av map[string]cloud.OfferingAvailability) offeringModel {
	m := offeringModel{
		Name: types.StringValue(o.Name), Description: types.StringValue(o.Description), Mode: types.StringValue(string(o.Mode)),
		Model: types.StringValue(o.Model), GPUs: types.Int64Value(int64(o.GPUs)), MIGProfile: types.StringValue(o.MIGProfile),
		ShareMilli: types.Int64Value(int64(o.ShareMilli)), ShareMemoryMiB: types.Int64Value(o.ShareMemoryMiB),
		VCPUs: types.Int64Value(int64(o.VCPUs)), MemoryMiB: types.Int64Value(o.MemoryMiB),
		InstanceStoreGiB: types.Int64Value(int64(o.InstanceStoreGiB)),
		Hosts:            types.Int64Null(), FitsNow: types.Int64Null(),
	}
	if a, ok := av[o.Name]; ok {
		m.Hosts, m.FitsNow = types.Int64Value(int64(a.Hosts)), types.Int64Value(int64(a.FitsNow))
	}
	return m
}

// sameModel reports whether two GPU model names name the same model: equal
// ignoring case, or the same canonical model of the built-in catalog
// ("h100" and "H100-80GB").
func sameModel(a, b string) bool {
	if strings.EqualFold(a, b) {
		return true
	}
	cat := catalog.Default()
	ca, err1 := cat.CanonicalModel(a)
	cb, err2 := cat.CanonicalModel(b)
	return err1 == nil && err2 == nil && ca == cb
}

// offeringsDataSource is gpucloud_offerings.
type offeringsDataSource struct{ dsBase }

func newOfferingsDataSource() datasource.DataSource { return &offeringsDataSource{} }

type offeringsModel struct {
	Mode      types.String    `tfsdk:"mode"`
	Model     types.String    `tfsdk:"model"`
	Available types.Bool      `tfsdk:"available"`
	FitsNow   types.Bool      `tfsdk:"fits_now"`
	Names     types.List      `tfsdk:"names"`
	Offerings []offeringModel `tfsdk:"offerings"`
}

func (d *offeringsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_offerings"
}

func (d *offeringsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The catalog's offerings (instance types), filtered, with what the fleet can run of each.",
		Attributes: map[string]schema.Attribute{
			"mode": schema.StringAttribute{Optional: true, Description: "Only offerings of this mode.",
				Validators: []validator.String{stringvalidator.OneOf("metal", "gpu", "mig", "shared", "cpu")}},
			"model":     schema.StringAttribute{Optional: true, Description: "Only offerings of this GPU model (a name or an alias: h100, H100-80GB)."},
			"available": schema.BoolAttribute{Optional: true, Description: "When true, only offerings some host of the fleet could run (hosts > 0); an offering whose availability is unknown is left out."},
			"fits_now":  schema.BoolAttribute{Optional: true, Description: "When true, only offerings some host has room for now (fits_now > 0)."},
			"names":     schema.ListAttribute{Computed: true, ElementType: types.StringType, Description: "The names of the offerings found, in the catalog's order."},
			"offerings": schema.ListNestedAttribute{Computed: true, Description: "The offerings found, in the catalog's order.",
				NestedObject: schema.NestedAttributeObject{Attributes: offeringAttributes(false)}},
		},
	}
}

func (d *offeringsDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m offeringsModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	list, err := d.c.OfferingList(ctx)
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot list the offerings", err, nil)
		return
	}
	m.Offerings = []offeringModel{}
	var names []string
	for _, o := range list.Offerings {
		av, known := list.Availability[o.Name]
		switch {
		case !m.Mode.IsNull() && string(o.Mode) != m.Mode.ValueString():
		case !m.Model.IsNull() && !sameModel(o.Model, m.Model.ValueString()):
		case m.Available.ValueBool() && (!known || av.Hosts == 0):
		case m.FitsNow.ValueBool() && (!known || av.FitsNow == 0):
		default:
			m.Offerings = append(m.Offerings, offeringOf(o, list.Availability))
			names = append(names, o.Name)
		}
	}
	m.Names = stringList(names)
	if len(names) == 0 {
		m.Names = types.ListValueMust(types.StringType, nil)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// offeringDataSource is gpucloud_offering.
type offeringDataSource struct{ dsBase }

func newOfferingDataSource() datasource.DataSource { return &offeringDataSource{} }

func (d *offeringDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_offering"
}

func (d *offeringDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "One offering of the catalog by name, with what the fleet can run of it.",
		Attributes:  offeringAttributes(true),
	}
}

func (d *offeringDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m offeringModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	list, err := d.c.OfferingList(ctx)
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot list the offerings", err, nil)
		return
	}
	i := slices.IndexFunc(list.Offerings, func(o *catalog.Offering) bool { return o.Name == m.Name.ValueString() })
	if i < 0 {
		names := make([]string, len(list.Offerings))
		for j, o := range list.Offerings {
			names[j] = o.Name
		}
		resp.Diagnostics.AddAttributeError(path.Root("name"), "No such offering",
			"the catalog has no offering "+m.Name.ValueString()+" (not_found); it has: "+strings.Join(names, ", "))
		return
	}
	m = offeringOf(list.Offerings[i], list.Availability)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// pricesDataSource is gpucloud_prices.
type pricesDataSource struct{ dsBase }

func newPricesDataSource() datasource.DataSource { return &pricesDataSource{} }

type priceModel struct {
	ID          types.Int64  `tfsdk:"id"`
	Kind        types.String `tfsdk:"kind"`
	Offering    types.String `tfsdk:"offering"`
	Zone        types.String `tfsdk:"zone"`
	Amount      types.String `tfsdk:"amount"`
	EffectiveAt types.String `tfsdk:"effective_at"`
}

type pricesModel struct {
	Kind     types.String `tfsdk:"kind"`
	Offering types.String `tfsdk:"offering"`
	Zone     types.String `tfsdk:"zone"`
	Prices   []priceModel `tfsdk:"prices"`
}

func (d *pricesDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_prices"
}

func (d *pricesDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	str := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, Description: desc}
	}
	resp.Schema = schema.Schema{
		Description: "The price versions in force now (the operator's price book), filtered.",
		Attributes: map[string]schema.Attribute{
			"kind": schema.StringAttribute{Optional: true, Description: "compute (per instance-hour), volume (per GiB-month) or address (per hour).",
				Validators: []validator.String{stringvalidator.OneOf(string(cloud.PriceCompute), string(cloud.PriceVolume), string(cloud.PriceAddress))}},
			"offering": schema.StringAttribute{Optional: true, Description: "Only this offering's prices."},
			"zone":     schema.StringAttribute{Optional: true, Description: "Only this zone's prices (an every-zone price has no zone)."},
			"prices": schema.ListNestedAttribute{Computed: true, Description: "The prices in force now.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"id":           schema.Int64Attribute{Computed: true, Description: "The price version's ID."},
					"kind":         str("compute, volume or address."),
					"offering":     str("The offering (compute); empty for every offering."),
					"zone":         str("The zone; empty for every zone."),
					"amount":       str("The price as a decimal string (2.49): never a float."),
					"effective_at": str("Since when it is in force (RFC 3339)."),
				}}},
		},
	}
}

func (d *pricesDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m pricesModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ps, err := d.c.Prices(ctx, client.PricesOptions{Kind: cloud.PriceKind(m.Kind.ValueString()), Offering: m.Offering.ValueString(),
		Zone: m.Zone.ValueString(), At: time.Now()})
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot list the prices", err, map[string]string{"kind": "kind", "offering": "offering", "zone": "zone"})
		return
	}
	m.Prices = []priceModel{}
	for _, p := range ps {
		m.Prices = append(m.Prices, priceModel{ID: types.Int64Value(p.ID), Kind: types.StringValue(string(p.Kind)),
			Offering: types.StringValue(p.Offering), Zone: types.StringValue(p.Zone),
			Amount: types.StringValue(p.Amount.String()), EffectiveAt: rfc3339(p.EffectiveAt)})
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// spotPriceDataSource is gpucloud_spot_price.
type spotPriceDataSource struct{ dsBase }

func newSpotPriceDataSource() datasource.DataSource { return &spotPriceDataSource{} }

type spotPriceModel struct {
	Offering      types.String `tfsdk:"offering"`
	Zone          types.String `tfsdk:"zone"`
	Price         types.String `tfsdk:"price"`
	OnDemand      types.String `tfsdk:"on_demand"`
	Time          types.String `tfsdk:"time"`
	Reclaims      types.Int64  `tfsdk:"reclaims"`
	ReclaimRateBP types.Int64  `tfsdk:"reclaim_rate_bp"`
}

func (d *spotPriceDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_spot_price"
}

func (d *spotPriceDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A spot pool's current price (the offering in a zone), with its on-demand price and its reclaims over the last week.",
		Attributes: map[string]schema.Attribute{
			"offering": schema.StringAttribute{Required: true, Description: "The pool's offering."},
			"zone": schema.StringAttribute{Optional: true, Computed: true,
				Description: "The pool's zone; left out: the offering's cheapest pool (the first zone of equal ones)."},
			"price":           schema.StringAttribute{Computed: true, Description: "The newest spot price per instance-hour, a decimal string."},
			"on_demand":       schema.StringAttribute{Computed: true, Description: "The pool's on-demand price per instance-hour, a decimal string; null when it has none."},
			"time":            schema.StringAttribute{Computed: true, Description: "When the price cleared (RFC 3339)."},
			"reclaims":        schema.Int64Attribute{Computed: true, Description: "Spot instances reclaimed in the pool over the window."},
			"reclaim_rate_bp": schema.Int64Attribute{Computed: true, Description: "Reclaims per spot instance-hour, in basis points (500: 0.05 an hour)."},
		},
	}
}

func (d *spotPriceDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m spotPriceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	pools, err := d.c.SpotPools(ctx)
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the spot pools", err, nil)
		return
	}
	var best *api.SpotPool
	var zones []string
	for i := range pools {
		p := &pools[i]
		if p.Offering != m.Offering.ValueString() {
			continue
		}
		zones = append(zones, p.Zone)
		if !m.Zone.IsNull() && !m.Zone.IsUnknown() {
			if p.Zone == m.Zone.ValueString() {
				best = p
			}
			continue
		}
		if best == nil || p.Price < best.Price || p.Price == best.Price && p.Zone < best.Zone {
			best = p
		}
	}
	if best == nil {
		at, what := path.Root("offering"), "offering "+m.Offering.ValueString()+" has no spot pool"
		if !m.Zone.IsNull() && len(zones) > 0 {
			at, what = path.Root("zone"), "offering "+m.Offering.ValueString()+" has no spot pool in zone "+m.Zone.ValueString()+"; it has: "+strings.Join(zones, ", ")
		}
		resp.Diagnostics.AddAttributeError(at, "No such spot pool", what+" (not_found)")
		return
	}
	m.Zone = types.StringValue(best.Zone)
	m.Price = types.StringValue(best.Price.String())
	m.OnDemand = types.StringNull()
	if best.OnDemand != nil {
		m.OnDemand = types.StringValue(best.OnDemand.String())
	}
	m.Time = rfc3339(best.Time)
	m.Reclaims = types.Int64Value(best.Reclaims)
	m.ReclaimRateBP = types.Int64Value(best.ReclaimRateBP)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// moneyString is a money attribute's value.
func moneyString(m money.Micros) types.String { return types.StringValue(m.String()) }
