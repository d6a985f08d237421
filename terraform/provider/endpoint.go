package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
)

// endpointResource is gpucloud_endpoint: a serverless endpoint
// (docs/ENDPOINTS.md) whose workers come and go with its traffic. What
// its workers run (image, command, env, offerings) and its sizes and
// times change in place through PATCH /v1/endpoints/{id}, sending only
// what changed; a change of what workers run (volumes included) starts a
// new generation, which the endpoint rolls its workers over to. warm, the
// pool of paused workers, changes in place too. The name, the mode, the
// port, the health path, spot, zones and labels force a replacement (the
// API does not change them). Destroy deletes the endpoint and waits until
// it is deleted (every worker terminated).
//
// No If-Match: the endpoint's controller writes its status (and so its
// version) on its own at every scaling decision, so a version Terraform
// read would conflict with the endpoint's own life, not with another
// client's change. Only the fields that differ from the state are sent.
type endpointResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*endpointResource)(nil)
	_ resource.ResourceWithImportState = (*endpointResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*endpointResource)(nil)
)

func newEndpointResource() resource.Resource { return &endpointResource{} }

// The defaults of docs/ENDPOINTS.md, which the server fills in when a
// create leaves a field out. max's default depends on min: max(3, min).
const (
	endpointDefaultPort    = 8080
	endpointDefaultHealth  = "/health"
	endpointDefaultMax     = 3
	endpointDefaultIdle    = 30
	endpointDefaultTimeout = 600
	endpointDefaultRetries = 2
	endpointDefaultRetain  = 86400
	endpointDefaultWait    = 30
)

type endpointModel struct {
	ID                 types.String   `tfsdk:"id"`
	Name               types.String   `tfsdk:"name"`
	Image              types.String   `tfsdk:"image"`
	Command            types.List     `tfsdk:"command"`
	Env                types.Map      `tfsdk:"env"`
	Volumes            types.List     `tfsdk:"volumes"`
	Offerings          types.List     `tfsdk:"offerings"`
	Port               types.Int64    `tfsdk:"port"`
	HealthPath         types.String   `tfsdk:"health_path"`
	Mode               types.String   `tfsdk:"mode"`
	Min                types.Int64    `tfsdk:"min"`
	Max                types.Int64    `tfsdk:"max"`
	Concurrency        types.Int64    `tfsdk:"concurrency"`
	IdleTimeoutSeconds types.Int64    `tfsdk:"idle_timeout_seconds"`
	TimeoutSeconds     types.Int64    `tfsdk:"timeout_seconds"`
	Retries            types.Int64    `tfsdk:"retries"`
	RetentionSeconds   types.Int64    `tfsdk:"retention_seconds"`
	QueueWaitSeconds   types.Int64    `tfsdk:"queue_wait_seconds"`
	Warm               types.Int64    `tfsdk:"warm"`
	Spot               types.Bool     `tfsdk:"spot"`
	Zones              types.List     `tfsdk:"zones"`
	Labels             types.List     `tfsdk:"labels"`
	State              types.String   `tfsdk:"state"`
	Generation         types.Int64    `tfsdk:"generation"`
	URL                types.String   `tfsdk:"url"`
	CreatedAt          types.String   `tfsdk:"created_at"`
	Timeouts           timeouts.Value `tfsdk:"timeouts"`
}

func (r *endpointResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_endpoint"
}

func (r *endpointResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	// inPlace is a number that changes in place, with the server's
	// default when left out.
	inPlace := func(dflt int64, desc string) schema.Int64Attribute {
		return schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(dflt),
			Description: fmt.Sprintf("%s Default %d; changes in place.", desc, dflt)}
	}
	replaceList := func(desc string) schema.ListAttribute {
		return schema.ListAttribute{Optional: true, ElementType: types.StringType, Description: desc + " A change replaces the endpoint.",
			PlanModifiers: []planmodifier.List{listplanmodifier.RequiresReplace()}}
	}
	resp.Schema = schema.Schema{
		Description: "A serverless endpoint (gpucloud endpoints): an image served by GPU workers that scale with the endpoint's queue " +
			"or HTTP requests, between min and max (min 0 scales to zero), with a pool of paused workers (warm) to resume instead of a cold start. " +
			"Image, command, env, volumes, offerings, sizes, warm and times change in place (a change of what workers run rolls them over to a new generation); name, mode, port, health_path, spot, zones and labels replace it.",
		Attributes: map[string]schema.Attribute{
			"id":    idAttribute(),
			"name":  replaceString(true, "Unique among the tenant's live endpoints; workers are named NAME-N. A change replaces the endpoint."),
			"image": schema.StringAttribute{Required: true, Description: "The OCI image the workers run (containers). Changes in place: the workers roll over."},
			"command": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				Description: "Replaces the image's entrypoint. Changes in place: the workers roll over."},
			"env": schema.MapAttribute{Optional: true, ElementType: types.StringType,
				Description: "Added to the workers' environment (beside GPUCLOUD_ENDPOINT and PORT). Changes in place: the workers roll over."},
			"volumes": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				Validators: []validator.List{listvalidator.SizeAtLeast(1), listvalidator.UniqueValues()},
				Description: "IDs of the tenant's shared volumes (gpucloud_volume with kind = \"shared\") that every worker mounts, read-write; " +
					"a block volume attaches to one instance at a time and is refused. Changes in place: the workers roll over."},
			"offerings": schema.ListAttribute{Required: true, ElementType: types.StringType,
				Description: "Acceptable offerings, the first preferred (1 to 8). Changes in place: the workers roll over."},
			"port": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(endpointDefaultPort),
				Description:   "The port the workers' HTTP server listens on. Default 8080. A change replaces the endpoint.",
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()}},
			"health_path": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(endpointDefaultHealth),
				Description:   "The readiness probe: a worker is ready once a GET of it answers 2xx. Default /health. A change replaces the endpoint.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
			"mode": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(string(cloud.EndpointQueue)),
				Description:   "queue (jobs: run, runsync, status, cancel) or http (requests proxied to a worker). Default queue. A change replaces the endpoint.",
				Validators:    []validator.String{stringvalidator.OneOf(string(cloud.EndpointQueue), string(cloud.EndpointHTTP))},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
			"min": inPlace(0, "The fewest workers; 0 lets the endpoint scale to zero."),
			"max": schema.Int64Attribute{Optional: true, Computed: true,
				Description: "The most workers (1 to 100). Default max(3, min); changes in place."},
			"concurrency":          inPlace(1, "Requests one worker takes at once."),
			"idle_timeout_seconds": inPlace(endpointDefaultIdle, "A worker with nothing to do this long goes (down to min)."),
			"timeout_seconds":      inPlace(endpointDefaultTimeout, "One job's or request's run on a worker."),
			"retries":              inPlace(endpointDefaultRetries, "How many times a failed job runs again."),
			"retention_seconds":    inPlace(endpointDefaultRetain, "How long a finished job's result is kept."),
			"queue_wait_seconds":   inPlace(endpointDefaultWait, "How long an HTTP request waits for a free worker before 503."),
			"warm": inPlace(0, "Paused workers kept ready beside those the load asks for (0 to max): a request resumes one instead of waiting for a cold start. "+
				"They bill as running workers; running and paused ones together are at most max. Only hosts of the containerd runtime pause workers: "+
				"a warm pool on a cloud with none is refused."),
			"spot": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				Description:   "Workers on the spot market first, on demand when none is placed. A change replaces the endpoint.",
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.RequiresReplace()}},
			"zones":  replaceList("Zones workers may be placed in."),
			"labels": replaceList("Host label selectors for the workers."),
			"state":  computedString("active (deleting and deleted endpoints leave the state)."),
			"generation": schema.Int64Attribute{Computed: true,
				Description: "The generation of what workers run: 1 at create, one more at each change of image, command, env or offerings."},
			"url":        computedString("Where requests go: the HTTP mode's base URL (SERVER/v1/endpoints/NAME/http/), or the queue mode's run URL (SERVER/v1/endpoints/NAME/run)."),
			"created_at": computedString("When the endpoint was created (RFC 3339)."),
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeoutsBlock(ctx, timeouts.Opts{Create: true, Update: true, Delete: true}, "How long create and update may take (they do not wait for workers), and how long destroy waits until the endpoint is deleted, every worker terminated."),
		},
	}
}

// ModifyPlan fills in max's default, max(3, min), which depends on min,
// and plans the generation: the state's, unless what workers run changes
// (then known after apply).
func (r *endpointResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	var plan endpointModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	var cfgMax types.Int64
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("max"), &cfgMax)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if cfgMax.IsNull() {
		if plan.Min.IsUnknown() {
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("max"), types.Int64Unknown())...)
		} else {
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("max"), types.Int64Value(max(endpointDefaultMax, plan.Min.ValueInt64())))...)
		}
	}
	if req.State.Raw.IsNull() {
		return // create: all known after apply
	}
	var st endpointModel
	resp.Diagnostics.Append(req.State.Get(ctx, &st)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if plan.rollsOver(ctx, &st, &resp.Diagnostics) {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("generation"), types.Int64Unknown())...)
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("generation"), st.Generation)...)
}

// rollsOver reports whether m changes what st's workers run (image,
// command, env, volumes, offerings): the server starts a new generation.
// Unknown values count as a change.
func (m *endpointModel) rollsOver(ctx context.Context, st *endpointModel, diags *diagnostics) bool {
	if m.Image.IsUnknown() || m.Command.IsUnknown() || m.Env.IsUnknown() || m.Volumes.IsUnknown() || m.Offerings.IsUnknown() {
		return true
	}
	if !sameImage(m.Image.ValueString(), st.Image.ValueString()) && !sameImage(st.Image.ValueString(), m.Image.ValueString()) {
		return true
	}
	return !slices.Equal(goList(ctx, m.Command, diags), goList(ctx, st.Command, diags)) ||
		!maps.Equal(goMap(ctx, m.Env, diags), goMap(ctx, st.Env, diags)) ||
		!slices.Equal(goList(ctx, m.Volumes, diags), goList(ctx, st.Volumes, diags)) ||
		!slices.Equal(goList(ctx, m.Offerings, diags), goList(ctx, st.Offerings, diags))
}

func (m *endpointModel) spec(ctx context.Context, diags *diagnostics) cloud.EndpointSpec {
	return cloud.EndpointSpec{
		Image: m.Image.ValueString(), Command: goList(ctx, m.Command, diags), Env: goMap(ctx, m.Env, diags), Volumes: goList(ctx, m.Volumes, diags),
		Offerings: goList(ctx, m.Offerings, diags), Port: int(m.Port.ValueInt64()), HealthPath: m.HealthPath.ValueString(),
		Mode: cloud.EndpointMode(m.Mode.ValueString()), Min: int(m.Min.ValueInt64()), Max: int(m.Max.ValueInt64()),
		Concurrency: int(m.Concurrency.ValueInt64()), IdleTimeoutSeconds: int(m.IdleTimeoutSeconds.ValueInt64()),
		TimeoutSeconds: int(m.TimeoutSeconds.ValueInt64()), Retries: int(m.Retries.ValueInt64()),
		RetentionSeconds: int(m.RetentionSeconds.ValueInt64()), QueueWaitSeconds: int(m.QueueWaitSeconds.ValueInt64()), Warm: int(m.Warm.ValueInt64()),
		Spot: m.Spot.ValueBool(), Zones: goList(ctx, m.Zones, diags), Labels: goList(ctx, m.Labels, diags),
	}
}

// endpointURL is where an endpoint's requests go: the HTTP mode's base
// URL, or the queue mode's run URL.
func endpointURL(c *client.Client, name string, mode cloud.EndpointMode) string {
	base := c.EndpointURL(name, "") // SERVER/v1/endpoints/NAME/http/
	if mode == cloud.EndpointHTTP {
		return base
	}
	return strings.TrimSuffix(base, "http/") + "run"
}

func (m *endpointModel) fill(c *client.Client, e *cloud.Endpoint) {
	s := e.Spec
	m.ID = types.StringValue(e.ID)
	m.Name = types.StringValue(e.Name)
	// The image as written while it names the server's canonical one.
	if m.Image.IsNull() || m.Image.IsUnknown() || !sameImage(m.Image.ValueString(), s.Image) {
		m.Image = types.StringValue(s.Image)
	}
	m.Command = stringList(s.Command)
	m.Env = stringMap(s.Env)
	m.Volumes = stringList(s.Volumes)
	m.Offerings = stringList(s.Offerings)
	m.Port = types.Int64Value(int64(s.Port))
	m.HealthPath = types.StringValue(s.HealthPath)
	m.Mode = types.StringValue(string(s.Mode))
	m.Min = types.Int64Value(int64(s.Min))
	m.Max = types.Int64Value(int64(s.Max))
	m.Concurrency = types.Int64Value(int64(s.Concurrency))
	m.IdleTimeoutSeconds = types.Int64Value(int64(s.IdleTimeoutSeconds))
	m.TimeoutSeconds = types.Int64Value(int64(s.TimeoutSeconds))
	m.Retries = types.Int64Value(int64(s.Retries))
	m.RetentionSeconds = types.Int64Value(int64(s.RetentionSeconds))
	m.QueueWaitSeconds = types.Int64Value(int64(s.QueueWaitSeconds))
	m.Warm = types.Int64Value(int64(s.Warm))
	m.Spot = types.BoolValue(s.Spot)
	m.Zones = stringList(s.Zones)
	m.Labels = stringList(s.Labels)
	m.State = types.StringValue(string(e.State))
	m.Generation = types.Int64Value(e.Status.Generation)
	m.URL = types.StringValue(endpointURL(c, e.Name, s.Mode))
	m.CreatedAt = rfc3339(e.CreatedAt)
}

// endpointError adds an API error as a diagnostic on the attribute its
// field names (offerings[1] and offering are offerings, env.K is env,
// volumes[0] is volumes).
func endpointError(diags *diagnostics, summary string, err error) {
	at := path.Empty()
	var ce *cloud.Error
	if errors.As(err, &ce) {
		if f, ok := ce.Details["field"].(string); ok {
			f, _, _ = strings.Cut(f, "[")
			f, _, _ = strings.Cut(f, ".")
			if f == "offering" {
				f = "offerings"
			}
			if _, known := endpointAttributes[f]; known {
				at = path.Root(f)
			}
		}
	}
	addAPIError(diags, at, summary, err, nil)
}

// endpointAttributes are the arguments an API error's field may name.
var endpointAttributes = map[string]bool{"name": true, "image": true, "command": true, "env": true, "offerings": true, "port": true,
	"health_path": true, "mode": true, "min": true, "max": true, "concurrency": true, "idle_timeout_seconds": true, "timeout_seconds": true,
	"retries": true, "retention_seconds": true, "queue_wait_seconds": true, "spot": true, "zones": true, "labels": true,
	"volumes": true, "warm": true}

func (r *endpointResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m endpointModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	wait, diags := m.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(diags...)
	body := api.CreateEndpointRequest{Name: m.Name.ValueString(), EndpointSpec: m.spec(ctx, &resp.Diagnostics)}
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	e, err := createRetrying(ctx, "gpucloud_endpoint", resp.Private, &resp.Diagnostics, func(key string) (*cloud.Endpoint, error) {
		return r.c.CreateEndpoint(ctx, body, key)
	})
	if err != nil {
		endpointError(&resp.Diagnostics, "Cannot create the endpoint", err)
		return
	}
	m.fill(r.c, e)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *endpointResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m endpointModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	d, err := r.c.GetEndpoint(ctx, m.ID.ValueString())
	// Deleted (or being deleted) outside Terraform: the next plan makes
	// another.
	if gone(err) || (err == nil && d.State != cloud.EndpointActive) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the endpoint", err, nil)
		return
	}
	m.fill(r.c, d.Endpoint)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// patch is the update that makes st what m plans: only the fields that
// differ, so that a change made meanwhile to another field stays.
func (m *endpointModel) patch(ctx context.Context, st *endpointModel, diags *diagnostics) (api.UpdateEndpointRequest, bool) {
	var p api.UpdateEndpointRequest
	changed := false
	if m.Image.ValueString() != st.Image.ValueString() {
		p.Image, changed = new(m.Image.ValueString()), true
	}
	if cmd := goList(ctx, m.Command, diags); !slices.Equal(cmd, goList(ctx, st.Command, diags)) {
		p.Command, changed = new(orEmpty(cmd)), true
	}
	if env := goMap(ctx, m.Env, diags); !maps.Equal(env, goMap(ctx, st.Env, diags)) {
		if env == nil {
			env = map[string]string{}
		}
		p.Env, changed = &env, true
	}
	if vols := goList(ctx, m.Volumes, diags); !slices.Equal(vols, goList(ctx, st.Volumes, diags)) {
		// Cleared: sent as [], not left out.
		p.Volumes, changed = new(orEmpty(vols)), true
	}
	if offs := goList(ctx, m.Offerings, diags); !slices.Equal(offs, goList(ctx, st.Offerings, diags)) {
		p.Offerings, changed = &offs, true
	}
	for _, f := range []struct {
		want, was types.Int64
		dst       **int
	}{
		{m.Min, st.Min, &p.Min}, {m.Max, st.Max, &p.Max}, {m.Concurrency, st.Concurrency, &p.Concurrency},
		{m.IdleTimeoutSeconds, st.IdleTimeoutSeconds, &p.IdleTimeoutSeconds}, {m.TimeoutSeconds, st.TimeoutSeconds, &p.TimeoutSeconds},
		{m.Retries, st.Retries, &p.Retries}, {m.RetentionSeconds, st.RetentionSeconds, &p.RetentionSeconds},
		{m.QueueWaitSeconds, st.QueueWaitSeconds, &p.QueueWaitSeconds}, {m.Warm, st.Warm, &p.Warm},
	} {
		if !f.want.Equal(f.was) {
			*f.dst, changed = optInt64(f.want), true
		}
	}
	return p, changed
}

// orEmpty is s, or an empty slice for nil (a command cleared is sent as
// [], not left out).
func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Update sends the fields that changed (PATCH /v1/endpoints/{id}).
func (r *endpointResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m, st endpointModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &st)...)
	if resp.Diagnostics.HasError() {
		return
	}
	wait, diags := m.Timeouts.Update(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(diags...)
	body, changed := m.patch(ctx, &st, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var e *cloud.Endpoint
	if changed {
		var err error
		if e, err = r.c.UpdateEndpoint(ctx, st.ID.ValueString(), body, 0); err != nil {
			endpointError(&resp.Diagnostics, "Cannot update the endpoint", err)
			return
		}
	} else {
		// Only the timeouts changed: nothing to send.
		d, err := r.c.GetEndpoint(ctx, st.ID.ValueString())
		if err != nil {
			addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the endpoint", err, nil)
			return
		}
		e = d.Endpoint
	}
	m.fill(r.c, e)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *endpointResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m endpointModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	wait, diags := m.Timeouts.Delete(ctx, defaultDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	id := m.ID.ValueString()
	if _, err := r.c.DeleteEndpoint(ctx, id); err != nil {
		if !gone(err) {
			addAPIError(&resp.Diagnostics, path.Empty(), "Cannot delete the endpoint", err, nil)
		}
		return
	}
	// Deleting until the controller has terminated every worker; then
	// deleted (and its name free again).
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		d, err := r.c.GetEndpoint(ctx, id)
		if gone(err) || (err == nil && d.State == cloud.EndpointDeleted) {
			return
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("endpoint %s is not deleted after the timeout (set it in the timeouts block)", id)
			if d != nil {
				msg += fmt.Sprintf(": it is %s with %d workers", d.State, len(d.Workers))
			}
			resp.Diagnostics.AddError("The endpoint was not deleted", msg)
			return
		case <-t.C:
		}
	}
}

// ImportState imports an endpoint by its ID or by its name; the state
// holds its ID either way.
func (r *endpointResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	d, err := r.c.GetEndpoint(ctx, req.ID)
	if err == nil && d.State != cloud.EndpointActive {
		err = cloud.Errorf(cloud.NotFound, "endpoint %s is %s", req.ID, d.State)
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot import endpoint "+req.ID, err, nil)
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), d.ID)...)
}
