package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// spotRequestResource is gpucloud_spot_request: spot capacity in one of
// its pools, launched by the market as its price allows (docs/SPOT.md).
// The API cannot change a request: every argument forces a replacement.
// Destroy cancels it and terminates its instance, and waits until the
// instance is terminated, so that its volumes are free again.
type spotRequestResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*spotRequestResource)(nil)
	_ resource.ResourceWithImportState = (*spotRequestResource)(nil)
)

func newSpotRequestResource() resource.Resource { return &spotRequestResource{} }

type spotPoolModel struct {
	Offering types.String `tfsdk:"offering"`
	Zone     types.String `tfsdk:"zone"`
}

type spotRequestModel struct {
	ID                 types.String    `tfsdk:"id"`
	Name               types.String    `tfsdk:"name"`
	Type               types.String    `tfsdk:"type"`
	MaxPrice           types.String    `tfsdk:"max_price"`
	Interruption       types.String    `tfsdk:"interruption"`
	Pools              []spotPoolModel `tfsdk:"pool"`
	Image              types.String    `tfsdk:"image"`
	Command            types.List      `tfsdk:"command"`
	Env                types.Map       `tfsdk:"env"`
	VolumeIDs          types.List      `tfsdk:"volume_ids"`
	SubnetID           types.String    `tfsdk:"subnet_id"`
	SecurityGroupIDs   types.List      `tfsdk:"security_group_ids"`
	Tags               types.Map       `tfsdk:"tags"`
	WaitForFulfillment types.Bool      `tfsdk:"wait_for_fulfillment"`
	State              types.String    `tfsdk:"state"`
	Reason             types.String    `tfsdk:"reason"`
	InstanceID         types.String    `tfsdk:"instance_id"`
	Launches           types.Int64     `tfsdk:"launches"`
	CreatedAt          types.String    `tfsdk:"created_at"`
	Timeouts           timeouts.Value  `tfsdk:"timeouts"`
}

var spotRequestFields = map[string]string{
	"name": "name", "type": "type", "max_price": "max_price", "interruption": "interruption", "pools": "pool",
	"image": "image", "command": "command", "env": "env", "volumes": "volume_ids", "subnet": "subnet_id",
	"security_groups": "security_group_ids", "tags": "tags",
}

func (r *spotRequestResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_spot_request"
}

func (r *spotRequestResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	list := func(desc string) schema.ListAttribute {
		return schema.ListAttribute{Optional: true, ElementType: types.StringType, Description: desc,
			PlanModifiers: []planmodifier.List{listplanmodifier.RequiresReplace()}}
	}
	defaulted := func(desc string, values ...string) schema.StringAttribute {
		a := defaultedString(desc)
		a.Validators = []validator.String{stringvalidator.OneOf(values...)}
		return a
	}
	computed := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, Description: desc}
	}
	resp.Schema = schema.Schema{
		Description: "A spot request (gpucloud spot request): an instance launched in one of its pools while the pool's spot price is at most max_price, relaunched after each interruption when persistent. Every argument forces a replacement. Destroy cancels it and terminates its instance.",
		Attributes: map[string]schema.Attribute{
			"id":           idAttribute(),
			"name":         replaceString(false, "The request's name; its instances are named after it."),
			"type":         defaulted("one_time (default: one launch) or persistent (relaunched after every interruption until cancelled).", string(cloud.SpotOneTime), string(cloud.SpotPersistent)),
			"max_price":    moneyAttribute("The most to pay per instance-hour, a decimal string (1.20); default: the on-demand price.", stringplanmodifier.RequiresReplace()),
			"interruption": defaulted("terminate (default) or stop: a stopped instance keeps its volumes and resumes with the request.", cloud.ActionTerminate, cloud.ActionStop),
			"image": schema.StringAttribute{Optional: true, Description: "The OCI image of every launch; default: the operator's.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
			"command": list("The workload's command and arguments."),
			"env": schema.MapAttribute{Optional: true, ElementType: types.StringType, Description: "The workload's environment.",
				PlanModifiers: []planmodifier.Map{mapplanmodifier.RequiresReplace()}},
			"volume_ids":         list("Volumes every launch attaches (a checkpoint volume); each detached now."),
			"subnet_id":          replaceString(false, "A subnet of the tenant; default: the tenant's default subnet."),
			"security_group_ids": list("One to five security groups of the subnet's network; default: the network's default group."),
			"tags":               tagsAttribute(),
			"wait_for_fulfillment": schema.BoolAttribute{Optional: true, Computed: true,
				Description:   "Wait at create until an instance of the request runs (within the timeouts block's create); default false: the request is created open and the market launches it when it can.",
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()}},
			"state":       computed("open, active, disabled, closed or cancelled."),
			"reason":      computed("Why it is in its state (a price above max_price, a reclaim)."),
			"instance_id": computed("Its current instance."),
			"launches":    schema.Int64Attribute{Computed: true, Description: "Instances launched for it."},
			"created_at":  computedString("When it was created (RFC 3339)."),
		},
		Blocks: map[string]schema.Block{
			"pool": schema.ListNestedBlock{
				Description:   "An acceptable pool, the first preferred (1 to 8).",
				PlanModifiers: []planmodifier.List{listplanmodifier.RequiresReplace()},
				NestedObject: schema.NestedBlockObject{Attributes: map[string]schema.Attribute{
					"offering": schema.StringAttribute{Required: true, Description: "An offering of the catalog."},
					"zone":     schema.StringAttribute{Optional: true, Description: "A zone; left out: any zone."},
				}},
			},
			"timeouts": timeoutsBlock(ctx, timeouts.Opts{Create: true, Delete: true}, "How long create waits for fulfillment (with wait_for_fulfillment), and destroy until the request's instance is terminated."),
		},
	}
}

func (r *spotRequestResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m spotRequestModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	wait, diags := m.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(diags...)
	body := api.CreateSpotRequestRequest{
		Name: m.Name.ValueString(), Type: cloud.SpotRequestType(m.Type.ValueString()), Interruption: m.Interruption.ValueString(),
		Image: m.Image.ValueString(), Command: goList(ctx, m.Command, &resp.Diagnostics), Env: goMap(ctx, m.Env, &resp.Diagnostics),
		Volumes: goList(ctx, m.VolumeIDs, &resp.Diagnostics), Subnet: m.SubnetID.ValueString(),
		SecurityGroups: goList(ctx, m.SecurityGroupIDs, &resp.Diagnostics), Tags: goMap(ctx, m.Tags, &resp.Diagnostics),
	}
	for _, p := range m.Pools {
		body.Pools = append(body.Pools, cloud.Pool{Offering: p.Offering.ValueString(), Zone: p.Zone.ValueString()})
	}
	if !m.MaxPrice.IsNull() && !m.MaxPrice.IsUnknown() {
		p, err := money.Parse(m.MaxPrice.ValueString())
		if err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("max_price"), "Invalid max_price", err.Error()+" (want a decimal string such as 1.20)")
		}
		body.MaxPrice = &p
	}
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	sr, err := createRetrying(ctx, "gpucloud_spot_request", resp.Private, &resp.Diagnostics, func(key string) (*cloud.SpotRequest, error) {
		return r.c.CreateSpotRequest(ctx, body, key)
	})
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot create the spot request", err, spotRequestFields)
		return
	}
	m.fill(sr)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	if !m.WaitForFulfillment.ValueBool() {
		return
	}
	sr, err = r.waitActive(ctx, sr)
	m.fill(sr)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Root("pool"), "The spot request was not fulfilled", err, nil)
	}
}

// waitActive polls the request until its instance runs, and fails when
// it ends (closed, cancelled) or ctx ends first, with its reason.
func (r *spotRequestResource) waitActive(ctx context.Context, sr *cloud.SpotRequest) (*cloud.SpotRequest, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		if sr.State == cloud.SpotActive && sr.InstanceID != "" {
			in, err := r.c.GetInstance(ctx, sr.InstanceID)
			if err == nil && in.State == cloud.Running {
				return sr, nil
			}
		}
		if sr.State == cloud.SpotClosed || sr.State == cloud.SpotCancelled {
			return sr, cloud.Errorf(cloud.Internal, "spot request %s is %s: %s", sr.ID, sr.State, sr.Reason)
		}
		select {
		case <-ctx.Done():
			why := fmt.Sprintf("spot request %s is still %s after the timeout (set it in the timeouts block)", sr.ID, sr.State)
			if sr.Reason != "" {
				why += ": " + sr.Reason
			}
			return sr, cloud.Errorf(cloud.Unavailable, "%s", why)
		case <-t.C:
		}
		next, err := r.c.GetSpotRequest(ctx, sr.ID)
		switch {
		case err == nil:
			sr = next
		case ctx.Err() == nil && !retryable(err):
			return sr, err
		}
	}
}

func (m *spotRequestModel) fill(sr *cloud.SpotRequest) {
	m.ID = types.StringValue(sr.ID)
	m.Name = optString(sr.Name)
	m.Type = types.StringValue(string(sr.Type))
	if written, err := money.Parse(m.MaxPrice.ValueString()); m.MaxPrice.IsNull() || m.MaxPrice.IsUnknown() || err != nil || written != sr.MaxPrice {
		m.MaxPrice = types.StringNull()
		if sr.MaxPrice != 0 {
			m.MaxPrice = moneyString(sr.MaxPrice)
		}
	}
	m.Interruption = types.StringValue(sr.Interruption)
	m.Pools = make([]spotPoolModel, len(sr.Pools))
	for i, p := range sr.Pools {
		m.Pools[i] = spotPoolModel{Offering: types.StringValue(p.Offering), Zone: optString(p.Zone)}
	}
	if m.Image.IsNull() || !sameImage(m.Image.ValueString(), sr.Image) {
		m.Image = optString(sr.Image)
	}
	m.Command = stringList(sr.Command)
	m.Env = stringMap(sr.Env)
	m.VolumeIDs = stringList(sr.Volumes)
	m.SubnetID = optString(sr.Subnet)
	m.SecurityGroupIDs = stringList(sr.SecurityGroups)
	m.Tags = stringMap(userTags(sr.Tags))
	if m.WaitForFulfillment.IsNull() || m.WaitForFulfillment.IsUnknown() {
		m.WaitForFulfillment = types.BoolValue(false)
	}
	m.State = types.StringValue(string(sr.State))
	m.Reason = types.StringValue(sr.Reason)
	m.InstanceID = types.StringValue(sr.InstanceID)
	m.Launches = types.Int64Value(int64(sr.Launches))
	m.CreatedAt = rfc3339(sr.CreatedAt)
}

func (r *spotRequestResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m spotRequestModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	sr, err := r.c.GetSpotRequest(ctx, m.ID.ValueString())
	// Cancelled outside Terraform: gone, and the next plan makes another.
	// A one-time request whose instance ended (closed) stays: its job is
	// done, and running it again is not Terraform's call.
	if gone(err) || (err == nil && sr.State == cloud.SpotCancelled) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the spot request", err, nil)
		return
	}
	m.fill(sr)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *spotRequestResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	// Only wait_for_fulfillment and the timeouts change in place.
	var m spotRequestModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *spotRequestResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m spotRequestModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	wait, diags := m.Timeouts.Delete(ctx, defaultDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	sr, err := r.c.CancelSpotRequest(ctx, m.ID.ValueString(), true, 0)
	if gone(err) {
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot cancel the spot request", err, nil)
		return
	}
	if sr.InstanceID == "" {
		return
	}
	in, err := r.c.GetInstance(ctx, sr.InstanceID)
	if gone(err) {
		return
	}
	if err == nil {
		_, err = (&instanceResource{base: r.base}).waitFor(ctx, in, cloud.Terminated)
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "The spot request's instance did not terminate", err, nil)
	}
}

func (r *spotRequestResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, req, resp, "spot request", func(ctx context.Context, id string) error {
		sr, err := r.c.GetSpotRequest(ctx, id)
		if err == nil && sr.State == cloud.SpotCancelled {
			return cloud.Errorf(cloud.NotFound, "spot request %s is cancelled", id)
		}
		return err
	})
}
