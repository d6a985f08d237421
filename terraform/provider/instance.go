package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/imageref"
)

// instanceResource is gpucloud_instance: a GPU (or CPU) instance. The API
// changes an instance only through its lifecycle (stop, start,
// terminate), so every argument forces a replacement. Create waits until
// the instance runs and destroy until it is terminated, within the
// timeouts block's create and delete (10 minutes each by default).
type instanceResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*instanceResource)(nil)
	_ resource.ResourceWithImportState = (*instanceResource)(nil)
)

func newInstanceResource() resource.Resource { return &instanceResource{} }

// Default waits of an instance's create and delete.
const (
	defaultCreateTimeout = 10 * time.Minute
	defaultDeleteTimeout = 10 * time.Minute
)

type instanceModel struct {
	ID               types.String   `tfsdk:"id"`
	Name             types.String   `tfsdk:"name"`
	Offering         types.String   `tfsdk:"offering"`
	Image            types.String   `tfsdk:"image"`
	Command          types.List     `tfsdk:"command"`
	Env              types.Map      `tfsdk:"env"`
	Zones            types.List     `tfsdk:"zones"`
	Labels           types.List     `tfsdk:"labels"`
	PlacementGroupID types.String   `tfsdk:"placement_group_id"`
	SubnetID         types.String   `tfsdk:"subnet_id"`
	SecurityGroupIDs types.List     `tfsdk:"security_group_ids"`
	VolumeIDs        types.List     `tfsdk:"volume_ids"`
	Publish          types.List     `tfsdk:"publish"`
	Tags             types.Map      `tfsdk:"tags"`
	State            types.String   `tfsdk:"state"`
	HostID           types.String   `tfsdk:"host_id"`
	Zone             types.String   `tfsdk:"zone"`
	NetworkID        types.String   `tfsdk:"network_id"`
	PrivateAddress   types.String   `tfsdk:"private_address"`
	Market           types.String   `tfsdk:"market"`
	CreatedAt        types.String   `tfsdk:"created_at"`
	Timeouts         timeouts.Value `tfsdk:"timeouts"`
}

var instanceFields = map[string]string{
	"name": "name", "offering": "offering", "image": "image", "command": "command", "env": "env",
	"zones": "zones", "labels": "labels", "placement_group": "placement_group_id", "subnet": "subnet_id",
	"security_groups": "security_group_ids", "volumes": "volume_ids", "publish": "publish", "tags": "tags",
}

func (r *instanceResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_instance"
}

func (r *instanceResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	list := func(desc string) schema.ListAttribute {
		return schema.ListAttribute{Optional: true, ElementType: types.StringType, Description: desc,
			PlanModifiers: []planmodifier.List{listplanmodifier.RequiresReplace()}}
	}
	computed := func(desc string) schema.StringAttribute {
		// These change over the instance's life (a stop clears its
		// host): no UseStateForUnknown.
		return schema.StringAttribute{Computed: true, Description: desc}
	}
	resp.Schema = schema.Schema{
		Description: "A GPU instance (gpucloud instances). Every argument forces a replacement: the API changes an instance only through its lifecycle.",
		Attributes: map[string]schema.Attribute{
			"id":       idAttribute(),
			"name":     replaceString(false, "The instance's name (a DNS label: NAME.NETWORK.internal)."),
			"offering": replaceString(true, "A catalog offering (data source gpucloud_offerings), e.g. h100.1x."),
			"image": schema.StringAttribute{
				Optional: true, Computed: true,
				Description:   "The OCI image the workload runs in (python:3.12); default: the operator's. The state keeps it as written while it names the same image as the server's canonical form.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()},
			},
			"command": list("The workload's command and arguments."),
			"env": schema.MapAttribute{Optional: true, ElementType: types.StringType, Description: "The workload's environment.",
				PlanModifiers: []planmodifier.Map{mapplanmodifier.RequiresReplace()}},
			"zones": schema.ListAttribute{
				Optional: true, Computed: true, ElementType: types.StringType,
				Description:   "Zones the instance may be placed in; default: the subnet's zone, when it has one, else any.",
				PlanModifiers: []planmodifier.List{listplanmodifier.UseStateForUnknown(), listplanmodifier.RequiresReplace()},
			},
			"labels":             list("Host label selectors (driver>=550, !maintenance)."),
			"placement_group_id": replaceString(false, "A placement group's ID."),
			"subnet_id": schema.StringAttribute{
				Optional: true, Computed: true,
				Description:   "A subnet's ID; default: the tenant's default subnet.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()},
			},
			"security_group_ids": schema.ListAttribute{
				Optional: true, Computed: true, ElementType: types.StringType,
				Description:   "One to five security groups of the subnet's network; default: the network's default group.",
				PlanModifiers: []planmodifier.List{listplanmodifier.UseStateForUnknown(), listplanmodifier.RequiresReplace()},
			},
			"volume_ids": list("Volumes of the tenant to attach (each detached now)."),
			"publish": schema.ListAttribute{Optional: true, ElementType: types.Int64Type,
				Description:   "TCP ports inside the instance published as HTTP through the server (docs/ACCESS.md).",
				PlanModifiers: []planmodifier.List{listplanmodifier.RequiresReplace()}},
			"tags":            tagsAttribute(),
			"state":           computed("The lifecycle state: running after create; a stop outside Terraform shows here."),
			"host_id":         computed("The host the instance runs on."),
			"zone":            computed("The zone it was placed in."),
			"network_id":      computedString("The subnet's network."),
			"private_address": computedString("Its address in the subnet."),
			"market":          computedString("on_demand (spot instances come from spot requests)."),
			"created_at":      computedString("When the instance was created (RFC 3339)."),
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeoutsBlock(ctx, timeouts.Opts{Create: true, Delete: true}, "How long create waits for the instance to run, and destroy until it is terminated."),
		},
	}
}

func (r *instanceResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m instanceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	wait, diags := m.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(diags...)
	body := api.CreateInstanceRequest{
		Name: m.Name.ValueString(), Offering: m.Offering.ValueString(), Image: m.Image.ValueString(),
		Command: goList(ctx, m.Command, &resp.Diagnostics), Env: goMap(ctx, m.Env, &resp.Diagnostics),
		Zones: goList(ctx, m.Zones, &resp.Diagnostics), Labels: goList(ctx, m.Labels, &resp.Diagnostics),
		PlacementGroup: m.PlacementGroupID.ValueString(), Subnet: m.SubnetID.ValueString(),
		SecurityGroups: goList(ctx, m.SecurityGroupIDs, &resp.Diagnostics), Volumes: goList(ctx, m.VolumeIDs, &resp.Diagnostics),
		Tags: goMap(ctx, m.Tags, &resp.Diagnostics),
	}
	if !m.Publish.IsNull() && !m.Publish.IsUnknown() {
		resp.Diagnostics.Append(m.Publish.ElementsAs(ctx, &body.Publish, false)...)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	in, err := createRetrying(ctx, "gpucloud_instance", resp.Private, &resp.Diagnostics, func(key string) (*cloud.Instance, error) {
		return r.c.CreateInstance(ctx, body, key)
	})
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot create the instance", err, instanceFields)
		return
	}
	// The instance exists from here on: keep it in the state whatever
	// the wait says, so that a failed wait leaves it tainted (replaced by
	// the next apply) rather than unknown to Terraform and running.
	m.fill(in)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	in, err = r.waitFor(ctx, in, cloud.Running)
	if in != nil {
		m.fill(in)
		resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Root("offering"), "The instance did not start", err, nil)
	}
}

// pollInterval is how often a wait reads the instance.
const pollInterval = 250 * time.Millisecond

// waitFor polls the instance until it is in state want, and fails with
// its reason when it ends elsewhere (failed, lost, terminated) or ctx
// ends first: for a pending instance the reason is the scheduler's, with
// its host counts by reason ("0/4 hosts available: 4 wrong GPU model").
func (r *instanceResource) waitFor(ctx context.Context, in *cloud.Instance, want cloud.State) (*cloud.Instance, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		if in.State == want {
			return in, nil
		}
		if in.State == cloud.Failed || in.State == cloud.Lost || (in.State == cloud.Terminated && want != cloud.Terminated) {
			return in, cloud.Errorf(cloud.Internal, "instance %s is %s: %s", in.ID, in.State, in.Reason)
		}
		select {
		case <-ctx.Done():
			why := fmt.Sprintf("instance %s is still %s after the timeout (set it in the timeouts block)", in.ID, in.State)
			if in.Reason != "" {
				why += ": " + in.Reason
			}
			return in, cloud.Errorf(cloud.Unavailable, "%s", why)
		case <-t.C:
		}
		next, err := r.c.GetInstance(ctx, in.ID)
		switch {
		case err == nil:
			in = next
		case gone(err) && want == cloud.Terminated:
			return in, nil
		case ctx.Err() == nil && !retryable(err):
			return in, err
		}
	}
}

func (m *instanceModel) fill(in *cloud.Instance) {
	m.ID = types.StringValue(in.ID)
	m.Name = optString(in.Name)
	m.Offering = types.StringValue(in.Offering)
	if m.Image.IsNull() || m.Image.IsUnknown() || !sameImage(m.Image.ValueString(), in.Image) {
		m.Image = optString(in.Image)
	}
	m.Command = stringList(in.Command)
	m.Env = stringMap(in.Env)
	m.Zones = stringList(in.Zones)
	m.Labels = stringList(in.Labels)
	m.PlacementGroupID = optString(in.PlacementGroupID)
	m.SubnetID = optString(in.SubnetID)
	m.SecurityGroupIDs = stringList(in.SecurityGroupIDs)
	m.VolumeIDs = stringList(in.Volumes)
	m.Publish = types.ListNull(types.Int64Type)
	if len(in.Publish) > 0 {
		ps := make([]int64, len(in.Publish))
		for i, p := range in.Publish {
			ps[i] = int64(p)
		}
		m.Publish, _ = types.ListValueFrom(context.Background(), types.Int64Type, ps)
	}
	m.Tags = stringMap(userTags(in.Tags))
	m.State = types.StringValue(string(in.State))
	m.HostID = optString(in.HostID)
	m.Zone = optString(in.Zone)
	m.NetworkID = optString(in.NetworkID)
	m.PrivateAddress = optString(in.PrivateAddress)
	m.Market = types.StringValue(string(in.Market))
	m.CreatedAt = rfc3339(in.CreatedAt)
}

// sameImage reports whether image as written names canonical, the
// server's form of it ("python:3.12" and "docker.io/library/python:3.12").
func sameImage(written, canonical string) bool {
	if written == canonical {
		return true
	}
	n, err := imageref.Normalize(written)
	return err == nil && n == canonical
}

func (r *instanceResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m instanceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	in, err := r.c.GetInstance(ctx, m.ID.ValueString())
	// A terminated, failed or lost instance is gone for Terraform: the
	// next plan creates another.
	if gone(err) || (err == nil && (in.State == cloud.Terminated || in.State == cloud.Terminating || in.State == cloud.Failed || in.State == cloud.Lost)) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the instance", err, nil)
		return
	}
	m.fill(in)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *instanceResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	// Only the timeouts block can change without a replacement.
	var m instanceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *instanceResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m instanceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	wait, diags := m.Timeouts.Delete(ctx, defaultDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	in, err := r.c.TerminateInstance(ctx, m.ID.ValueString(), 0)
	if gone(err) {
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot terminate the instance", err, nil)
		return
	}
	if _, err := r.waitFor(ctx, in, cloud.Terminated); err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "The instance did not terminate", err, nil)
	}
}

func (r *instanceResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, req, resp, "instance", func(ctx context.Context, id string) error {
		in, err := r.c.GetInstance(ctx, id)
		if err == nil && in.State == cloud.Terminated {
			return cloud.Errorf(cloud.NotFound, "instance %s is terminated", id)
		}
		return err
	})
}
