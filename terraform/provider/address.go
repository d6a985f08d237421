package provider

import (
	"context"
	"errors"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// addressResource is gpucloud_address: a public IP address of the tenant,
// billed from allocation to release. The API cannot change an address
// but by associating it, which gpucloud_address_association does: every
// argument forces a replacement (a new address).
type addressResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*addressResource)(nil)
	_ resource.ResourceWithImportState = (*addressResource)(nil)
)

func newAddressResource() resource.Resource { return &addressResource{} }

type addressModel struct {
	ID        types.String `tfsdk:"id"`
	Zone      types.String `tfsdk:"zone"`
	Tags      types.Map    `tfsdk:"tags"`
	IP        types.String `tfsdk:"ip"`
	CreatedAt types.String `tfsdk:"created_at"`
}

var addressFields = map[string]string{"zone": "zone", "tags": "tags"}

func (r *addressResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_address"
}

func (r *addressResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A public address (gpucloud addresses), billed per hour from allocation to release. gpucloud_address_association associates it with an instance.",
		Attributes: map[string]schema.Attribute{
			"id":         idAttribute(),
			"zone":       defaultedString("The zone it is for; an instance associated with it must be in it. Default: any zone."),
			"tags":       tagsAttribute(),
			"ip":         computedString("The address."),
			"created_at": computedString("When it was allocated (RFC 3339)."),
		},
	}
}

func (r *addressResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m addressModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	body := api.AllocateAddressRequest{Zone: m.Zone.ValueString(), Tags: goMap(ctx, m.Tags, &resp.Diagnostics)}
	if resp.Diagnostics.HasError() {
		return
	}
	a, err := createRetrying(ctx, "gpucloud_address", resp.Private, &resp.Diagnostics, func(key string) (*cloud.Address, error) {
		return r.c.AllocateAddress(ctx, body, key)
	})
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot allocate the address", err, addressFields)
		return
	}
	m.fill(a)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (m *addressModel) fill(a *cloud.Address) {
	m.ID = types.StringValue(a.ID)
	m.Zone = optString(a.Zone)
	m.Tags = stringMap(userTags(a.Tags))
	m.IP = types.StringValue(a.IP)
	m.CreatedAt = rfc3339(a.CreatedAt)
}

// getAddress reads an address; a released one is not found: it is gone
// for Terraform.
func getAddress(ctx context.Context, r *base, id string) (*cloud.Address, error) {
	a, err := r.c.GetAddress(ctx, id)
	if err == nil && a.ReleasedAt != nil {
		return nil, cloud.Errorf(cloud.NotFound, "address %s is released", id)
	}
	return a, err
}

func (r *addressResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m addressModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	a, err := getAddress(ctx, &r.base, m.ID.ValueString())
	if gone(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the address", err, nil)
		return
	}
	m.fill(a)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *addressResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m addressModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *addressResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m addressModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Release disassociates it too; releasing a released one succeeds.
	if _, err := r.c.ReleaseAddress(ctx, m.ID.ValueString()); err != nil && !gone(err) {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot release the address", err, nil)
	}
}

func (r *addressResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, req, resp, "address", func(ctx context.Context, id string) error {
		_, err := getAddress(ctx, &r.base, id)
		return err
	})
}

// addressAssociationResource is gpucloud_address_association: an address
// associated with an instance. Its ID is the address's; changing either
// side replaces it (disassociate, then associate).
type addressAssociationResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*addressAssociationResource)(nil)
	_ resource.ResourceWithImportState = (*addressAssociationResource)(nil)
)

func newAddressAssociationResource() resource.Resource { return &addressAssociationResource{} }

type addressAssociationModel struct {
	ID         types.String `tfsdk:"id"`
	AddressID  types.String `tfsdk:"address_id"`
	InstanceID types.String `tfsdk:"instance_id"`
	IP         types.String `tfsdk:"ip"`
}

func (r *addressAssociationResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_address_association"
}

func (r *addressAssociationResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "An address associated with an instance of the tenant (in the address's zone, when it has one). Destroy disassociates it; the address stays allocated.",
		Attributes: map[string]schema.Attribute{
			"id":          idAttribute(),
			"address_id":  replaceString(true, "The address's ID."),
			"instance_id": replaceString(true, "The instance's ID; it must not be terminated."),
			"ip":          computedString("The address."),
		},
	}
}

func (r *addressAssociationResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m addressAssociationModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Associating with the instance it is on changes nothing: a retry
	// is safe without a key.
	a, err := r.c.AssociateAddress(ctx, m.AddressID.ValueString(), m.InstanceID.ValueString())
	if err != nil {
		at := path.Root("address_id")
		if ce := (*cloud.Error)(nil); errors.As(err, &ce) && ce.Details["field"] == "instance_id" {
			at = path.Root("instance_id")
		}
		addAPIError(&resp.Diagnostics, at, "Cannot associate the address", err, nil)
		return
	}
	m.ID = types.StringValue(a.ID)
	m.IP = types.StringValue(a.IP)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *addressAssociationResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m addressAssociationModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	a, err := getAddress(ctx, &r.base, m.ID.ValueString())
	// Released, or disassociated outside Terraform: the association is
	// gone, and the next plan makes it again. Associated elsewhere shows
	// as a change of instance_id, which replaces it.
	if gone(err) || (err == nil && a.InstanceID == "") {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the address", err, nil)
		return
	}
	m.AddressID = types.StringValue(a.ID)
	m.InstanceID = types.StringValue(a.InstanceID)
	m.IP = types.StringValue(a.IP)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *addressAssociationResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m addressAssociationModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *addressAssociationResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m addressAssociationModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Only disassociate it from the instance this association names: one
	// made since by someone else is theirs.
	a, err := getAddress(ctx, &r.base, m.ID.ValueString())
	if gone(err) || (err == nil && a.InstanceID != m.InstanceID.ValueString()) {
		return
	}
	if err == nil {
		_, err = r.c.DisassociateAddress(ctx, m.ID.ValueString())
	}
	if err != nil && !gone(err) {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot disassociate the address", err, nil)
	}
}

func (r *addressAssociationResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, req, resp, "address association", func(ctx context.Context, id string) error {
		a, err := getAddress(ctx, &r.base, id)
		if err == nil && a.InstanceID == "" {
			return cloud.Errorf(cloud.NotFound, "address %s is not associated", id)
		}
		return err
	})
}
