package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// volumeResource is gpucloud_volume: a persistent volume. The API has no
// resize or rename: every argument forces a replacement. Which instance
// holds it is the instance's volume_ids (attached at the instance's
// create); instance_id here only reports it.
type volumeResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*volumeResource)(nil)
	_ resource.ResourceWithImportState = (*volumeResource)(nil)
)

func newVolumeResource() resource.Resource { return &volumeResource{} }

type volumeModel struct {
	ID         types.String `tfsdk:"id"`
	Name       types.String `tfsdk:"name"`
	SizeGiB    types.Int64  `tfsdk:"size_gib"`
	Zone       types.String `tfsdk:"zone"`
	Kind       types.String `tfsdk:"kind"`
	Tags       types.Map    `tfsdk:"tags"`
	InstanceID types.String `tfsdk:"instance_id"`
	CreatedAt  types.String `tfsdk:"created_at"`
}

var volumeFields = map[string]string{"name": "name", "size_gib": "size_gib", "zone": "zone", "kind": "kind", "tags": "tags"}

func (r *volumeResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_volume"
}

func (r *volumeResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A persistent volume (gpucloud volumes). Attach it with an instance's volume_ids.",
		Attributes: map[string]schema.Attribute{
			"id":   idAttribute(),
			"name": replaceString(true, "The volume's name."),
			"size_gib": schema.Int64Attribute{
				Required: true, Description: "Size in GiB. The API cannot resize a volume: a change replaces it.",
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()},
			},
			"zone":        defaultedString("The zone; default: none (any zone: the volume lives where its first instance runs)."),
			"kind":        defaultedString("block (the default: one instance at a time) or shared."),
			"tags":        tagsAttribute(),
			"instance_id": schema.StringAttribute{Computed: true, Description: "The instance the volume is attached to, if any."},
			"created_at":  computedString("When the volume was created (RFC 3339)."),
		},
	}
}

func (r *volumeResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m volumeModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	body := api.CreateVolumeRequest{
		Name: m.Name.ValueString(), SizeGiB: m.SizeGiB.ValueInt64(), Zone: m.Zone.ValueString(),
		Kind: cloud.VolumeKind(m.Kind.ValueString()), Tags: goMap(ctx, m.Tags, &resp.Diagnostics),
	}
	if resp.Diagnostics.HasError() {
		return
	}
	v, err := createRetrying(ctx, "gpucloud_volume", resp.Private, &resp.Diagnostics, func(key string) (*cloud.Volume, error) {
		return r.c.CreateVolume(ctx, body, key)
	})
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot create the volume", err, volumeFields)
		return
	}
	m.fill(v)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (m *volumeModel) fill(v *cloud.Volume) {
	m.ID = types.StringValue(v.ID)
	m.Name = types.StringValue(v.Name)
	m.SizeGiB = types.Int64Value(v.SizeGiB)
	m.Zone = optString(v.Zone)
	m.Kind = types.StringValue(string(v.Kind))
	if v.Kind == "" {
		m.Kind = types.StringValue(string(cloud.VolumeBlock))
	}
	m.Tags = stringMap(userTags(v.Tags))
	m.InstanceID = optString(v.InstanceID)
	m.CreatedAt = rfc3339(v.CreatedAt)
}

func (r *volumeResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m volumeModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	v, err := r.c.GetVolume(ctx, m.ID.ValueString())
	if gone(err) || (err == nil && v.DeletedAt != nil) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the volume", err, nil)
		return
	}
	m.fill(v)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *volumeResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m volumeModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *volumeResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m volumeModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if _, err := r.c.DeleteVolume(ctx, m.ID.ValueString()); err != nil && !gone(err) {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot delete the volume", err, nil)
	}
}

func (r *volumeResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, req, resp, "volume", func(ctx context.Context, id string) error {
		_, err := r.c.GetVolume(ctx, id)
		return err
	})
}
