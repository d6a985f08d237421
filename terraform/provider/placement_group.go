package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// placementGroupResource is gpucloud_placement_group: a cluster (members
// on one NVLink island or rack fabric) or spread (members on different
// hosts) group that instances name. The API cannot change one: every
// argument forces a replacement.
type placementGroupResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*placementGroupResource)(nil)
	_ resource.ResourceWithImportState = (*placementGroupResource)(nil)
)

func newPlacementGroupResource() resource.Resource { return &placementGroupResource{} }

type placementGroupModel struct {
	ID        types.String `tfsdk:"id"`
	Name      types.String `tfsdk:"name"`
	Strategy  types.String `tfsdk:"strategy"`
	ByRack    types.Bool   `tfsdk:"by_rack"`
	Tags      types.Map    `tfsdk:"tags"`
	CreatedAt types.String `tfsdk:"created_at"`
}

var placementGroupFields = map[string]string{"name": "name", "strategy": "strategy", "by_rack": "by_rack", "tags": "tags"}

func (r *placementGroupResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_placement_group"
}

func (r *placementGroupResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A placement group (gpucloud placement-groups) that instances name in placement_group_id.",
		Attributes: map[string]schema.Attribute{
			"id":   idAttribute(),
			"name": replaceString(true, "Unique among the tenant's live placement groups."),
			"strategy": schema.StringAttribute{
				Required:      true,
				Description:   "cluster (members on one NVLink island or rack fabric) or spread (members on different hosts).",
				Validators:    []validator.String{stringvalidator.OneOf(string(cloud.PlacementCluster), string(cloud.PlacementSpread))},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"by_rack": schema.BoolAttribute{
				Optional: true, Computed: true,
				Description:   "For spread: members on different racks, not only hosts. Default false.",
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown(), boolplanmodifier.RequiresReplace()},
			},
			"tags":       tagsAttribute(),
			"created_at": computedString("When the group was created (RFC 3339)."),
		},
	}
}

func (r *placementGroupResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m placementGroupModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	body := api.CreatePlacementGroupRequest{
		Name: m.Name.ValueString(), Strategy: cloud.PlacementStrategy(m.Strategy.ValueString()),
		ByRack: m.ByRack.ValueBool(), Tags: goMap(ctx, m.Tags, &resp.Diagnostics),
	}
	if resp.Diagnostics.HasError() {
		return
	}
	g, err := createRetrying(ctx, "gpucloud_placement_group", resp.Private, &resp.Diagnostics, func(key string) (*cloud.PlacementGroup, error) {
		return r.c.CreatePlacementGroup(ctx, body, key)
	})
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot create the placement group", err, placementGroupFields)
		return
	}
	m.fill(g)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (m *placementGroupModel) fill(g *cloud.PlacementGroup) {
	m.ID = types.StringValue(g.ID)
	m.Name = types.StringValue(g.Name)
	m.Strategy = types.StringValue(string(g.Strategy))
	m.ByRack = types.BoolValue(g.ByRack)
	m.Tags = stringMap(userTags(g.Tags))
	m.CreatedAt = rfc3339(g.CreatedAt)
}

func (r *placementGroupResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m placementGroupModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	g, err := r.c.GetPlacementGroup(ctx, m.ID.ValueString())
	if gone(err) || (err == nil && g.DeletedAt != nil) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the placement group", err, nil)
		return
	}
	m.fill(g)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *placementGroupResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m placementGroupModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *placementGroupResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m placementGroupModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.c.DeletePlacementGroup(ctx, m.ID.ValueString()); err != nil && !gone(err) {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot delete the placement group", err, nil)
	}
}

func (r *placementGroupResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, req, resp, "placement group", func(ctx context.Context, id string) error {
		g, err := r.c.GetPlacementGroup(ctx, id)
		if err == nil && g.DeletedAt != nil {
			return cloud.Errorf(cloud.NotFound, "placement group %s is deleted", id)
		}
		return err
	})
}
