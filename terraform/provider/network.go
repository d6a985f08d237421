package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// networkResource is gpucloud_network: a private network (docs/NETWORK.md).
// The API cannot change one: every argument forces a replacement.
type networkResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*networkResource)(nil)
	_ resource.ResourceWithImportState = (*networkResource)(nil)
)

func newNetworkResource() resource.Resource { return &networkResource{} }

type networkModel struct {
	ID        types.String `tfsdk:"id"`
	Name      types.String `tfsdk:"name"`
	CIDR      types.String `tfsdk:"cidr"`
	Tags      types.Map    `tfsdk:"tags"`
	VNI       types.Int64  `tfsdk:"vni"`
	Default   types.Bool   `tfsdk:"default"`
	CreatedAt types.String `tfsdk:"created_at"`
}

var networkFields = map[string]string{"name": "name", "cidr": "cidr", "tags": "tags"}

func (r *networkResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_network"
}

func (r *networkResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A private network (gpucloud networks): an IPv4 space its subnets divide.",
		Attributes: map[string]schema.Attribute{
			"id":   idAttribute(),
			"name": replaceString(true, "Unique among the tenant's networks; a DNS label (instances are NAME.NETWORK.internal)."),
			"cidr": replaceString(true, "The network's IPv4 space, /16 to /28, canonical (10.0.0.0/16)."),
			"tags": tagsAttribute(),
			"vni":  computedInt64("The network's VXLAN network identifier."),
			"default": schema.BoolAttribute{
				Computed: true, Description: "Whether this is the tenant's default network (never, for one Terraform created).",
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
			},
			"created_at": computedString("When the network was created (RFC 3339)."),
		},
	}
}

func (r *networkResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m networkModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	body := api.CreateNetworkRequest{Name: m.Name.ValueString(), CIDR: m.CIDR.ValueString(), Tags: goMap(ctx, m.Tags, &resp.Diagnostics)}
	if resp.Diagnostics.HasError() {
		return
	}
	n, err := createRetrying(ctx, "gpucloud_network", resp.Private, &resp.Diagnostics, func(key string) (*cloud.Network, error) {
		return r.c.CreateNetwork(ctx, body, key)
	})
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot create the network", err, networkFields)
		return
	}
	m.fill(n)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (m *networkModel) fill(n *cloud.Network) {
	m.ID = types.StringValue(n.ID)
	m.Name = types.StringValue(n.Name)
	m.CIDR = types.StringValue(n.CIDR)
	m.Tags = stringMap(userTags(n.Tags))
	m.VNI = types.Int64Value(int64(n.VNI))
	m.Default = types.BoolValue(n.Default)
	m.CreatedAt = rfc3339(n.CreatedAt)
}

func (r *networkResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m networkModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	n, err := r.c.GetNetwork(ctx, m.ID.ValueString())
	if gone(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the network", err, nil)
		return
	}
	m.fill(n)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *networkResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m networkModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *networkResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m networkModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.c.DeleteNetwork(ctx, m.ID.ValueString()); err != nil && !gone(err) {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot delete the network", err, nil)
	}
}

func (r *networkResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, req, resp, "network", func(ctx context.Context, id string) error {
		_, err := r.c.GetNetwork(ctx, id)
		return err
	})
}

// subnetResource is gpucloud_subnet: a part of a network's space in one
// zone, where instances get their private addresses. The API cannot
// change one: every argument forces a replacement.
type subnetResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*subnetResource)(nil)
	_ resource.ResourceWithImportState = (*subnetResource)(nil)
)

func newSubnetResource() resource.Resource { return &subnetResource{} }

type subnetModel struct {
	ID        types.String `tfsdk:"id"`
	NetworkID types.String `tfsdk:"network_id"`
	Name      types.String `tfsdk:"name"`
	CIDR      types.String `tfsdk:"cidr"`
	Zone      types.String `tfsdk:"zone"`
	Tags      types.Map    `tfsdk:"tags"`
	CreatedAt types.String `tfsdk:"created_at"`
}

var subnetFields = map[string]string{"network": "network_id", "name": "name", "cidr": "cidr", "zone": "zone", "tags": "tags"}

func (r *subnetResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_subnet"
}

func (r *subnetResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A subnet of a private network (gpucloud subnets), in one zone.",
		Attributes: map[string]schema.Attribute{
			"id":         idAttribute(),
			"network_id": replaceString(true, "The network's ID."),
			"name":       replaceString(true, "Unique among the network's subnets."),
			"cidr":       replaceString(true, "Inside the network's, /16 to /28, overlapping no other subnet of the network."),
			"zone":       replaceString(true, "The zone the subnet's instances are placed in."),
			"tags":       tagsAttribute(),
			"created_at": computedString("When the subnet was created (RFC 3339)."),
		},
	}
}

func (r *subnetResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m subnetModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	body := api.CreateSubnetRequest{Network: m.NetworkID.ValueString(), Name: m.Name.ValueString(), CIDR: m.CIDR.ValueString(),
		Zone: m.Zone.ValueString(), Tags: goMap(ctx, m.Tags, &resp.Diagnostics)}
	if resp.Diagnostics.HasError() {
		return
	}
	s, err := createRetrying(ctx, "gpucloud_subnet", resp.Private, &resp.Diagnostics, func(key string) (*cloud.Subnet, error) {
		return r.c.CreateSubnet(ctx, body, key)
	})
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot create the subnet", err, subnetFields)
		return
	}
	m.fill(s)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (m *subnetModel) fill(s *cloud.Subnet) {
	m.ID = types.StringValue(s.ID)
	m.NetworkID = types.StringValue(s.NetworkID)
	m.Name = types.StringValue(s.Name)
	m.CIDR = types.StringValue(s.CIDR)
	m.Zone = types.StringValue(s.Zone)
	m.Tags = stringMap(userTags(s.Tags))
	m.CreatedAt = rfc3339(s.CreatedAt)
}

func (r *subnetResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m subnetModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	s, err := r.c.GetSubnet(ctx, m.ID.ValueString())
	if gone(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the subnet", err, nil)
		return
	}
	m.fill(s)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *subnetResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m subnetModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *subnetResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m subnetModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.c.DeleteSubnet(ctx, m.ID.ValueString()); err != nil && !gone(err) {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot delete the subnet", err, nil)
	}
}

func (r *subnetResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, req, resp, "subnet", func(ctx context.Context, id string) error {
		_, err := r.c.GetSubnet(ctx, id)
		return err
	})
}
