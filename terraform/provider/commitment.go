package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
)

// commitmentResource is gpucloud_commitment: a reservation or a retainer,
// billed for every hour of its term. The API can neither change nor end
// one (there is no DELETE /v1/commitments/{id}), so, as AWS's
// reservations: every argument forces a replacement, and a plan that
// would destroy one before its term ends (a destroy, a replacement, a
// resource removed from the configuration) fails, saying when the term
// ends. After its end a destroy only forgets it. To stop managing one
// early, a `removed` block with `lifecycle { destroy = false }` (or
// `terraform state rm`) forgets it without destroying it.
type commitmentResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*commitmentResource)(nil)
	_ resource.ResourceWithImportState = (*commitmentResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*commitmentResource)(nil)
)

func newCommitmentResource() resource.Resource { return &commitmentResource{} }

type commitmentModel struct {
	ID         types.String `tfsdk:"id"`
	Plan       types.String `tfsdk:"plan"`
	Offering   types.String `tfsdk:"offering"`
	Zone       types.String `tfsdk:"zone"`
	Quantity   types.Int64  `tfsdk:"quantity"`
	Term       types.String `tfsdk:"term"`
	Payment    types.String `tfsdk:"payment"`
	Tags       types.Map    `tfsdk:"tags"`
	DiscountBP types.Int64  `tfsdk:"discount_bp"`
	UpfrontFee types.String `tfsdk:"upfront_fee"`
	HourlyFee  types.String `tfsdk:"hourly_fee"`
	UsageRate  types.String `tfsdk:"usage_rate"`
	Start      types.String `tfsdk:"start"`
	End        types.String `tfsdk:"end"`
}

var commitmentFields = map[string]string{"plan": "plan", "offering": "offering", "zone": "zone", "quantity": "quantity",
	"term": "term", "payment": "payment", "tags": "tags"}

func (r *commitmentResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_commitment"
}

func (r *commitmentResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replaceInt := schema.Int64Attribute{Required: true, Description: "Units reserved (instances at once).",
		PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()}}
	resp.Schema = schema.Schema{
		Description: "A commitment (gpucloud commitments): a reservation or a retainer, billed for every hour of its term. " +
			"It CANNOT BE DESTROYED BEFORE ITS TERM ENDS: the API has no way to end one early, and a plan that would destroy or replace it " +
			"fails until then, naming the end. After the end, destroy only removes it from the state. " +
			"To stop managing one early, use a removed block with lifecycle { destroy = false }.",
		Attributes: map[string]schema.Attribute{
			"id": idAttribute(),
			"plan": schema.StringAttribute{Required: true, Description: "reservation (a discount, every hour of the term charged) or retainer (a small fee holds the terms, hours used billed at a discount).",
				Validators:    []validator.String{stringvalidator.OneOf(string(cloud.PlanReservation), string(cloud.PlanRetainer))},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
			"offering": replaceString(true, "An offering (h100.8x) or a family (h100: every h100.* offering)."),
			"zone":     replaceString(false, "A zone: the commitment also reserves capacity there."),
			"quantity": replaceInt,
			"term": schema.StringAttribute{Required: true, Description: "1y, 2y, 3y or a duration (720h), 1h to 3y.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
			"payment": schema.StringAttribute{Optional: true, Computed: true, Description: "A reservation's: all_upfront, partial_upfront or no_upfront (default); a retainer has none.",
				Validators:    []validator.String{stringvalidator.OneOf(string(cloud.PaymentAllUpfront), string(cloud.PaymentPartialUpfront), string(cloud.PaymentNoUpfront))},
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()}},
			"tags":        tagsAttribute(),
			"discount_bp": computedInt64("The discount off the on-demand price, in basis points."),
			"upfront_fee": computedString("Paid at purchase, a decimal string."),
			"hourly_fee":  computedString("Per unit per hour of the term, a decimal string."),
			"usage_rate":  computedString("Per covered instance-hour (retainers), a decimal string."),
			"start":       computedString("When the term starts (RFC 3339)."),
			"end":         computedString("When the term ends (RFC 3339): it cannot be destroyed before."),
		},
	}
}

func (r *commitmentResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m commitmentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	body := api.CreateCommitmentRequest{Plan: cloud.Plan(m.Plan.ValueString()), Offering: m.Offering.ValueString(),
		Zone: m.Zone.ValueString(), Quantity: int(m.Quantity.ValueInt64()), Term: m.Term.ValueString(),
		Payment: cloud.Payment(m.Payment.ValueString()), Tags: goMap(ctx, m.Tags, &resp.Diagnostics)}
	if resp.Diagnostics.HasError() {
		return
	}
	c, err := createRetrying(ctx, "gpucloud_commitment", resp.Private, &resp.Diagnostics, func(key string) (*cloud.Commitment, error) {
		return r.c.CreateCommitment(ctx, body, key)
	})
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot buy the commitment", err, commitmentFields)
		return
	}
	m.fill(c)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (m *commitmentModel) fill(c *cloud.Commitment) {
	m.ID = types.StringValue(c.ID)
	m.Plan = types.StringValue(string(c.Plan))
	m.Offering = types.StringValue(c.Offering)
	m.Zone = optString(c.Zone)
	m.Quantity = types.Int64Value(int64(c.Quantity))
	if d, err := parseTerm(m.Term.ValueString()); m.Term.IsNull() || m.Term.IsUnknown() || err != nil || d != c.End.Sub(c.Start) {
		m.Term = types.StringValue(termString(c.End.Sub(c.Start)))
	}
	m.Payment = types.StringValue(string(c.Payment))
	m.Tags = stringMap(userTags(c.Tags))
	m.DiscountBP = types.Int64Value(c.DiscountBP)
	m.UpfrontFee = moneyString(c.UpfrontFee)
	m.HourlyFee = moneyString(c.HourlyFee)
	m.UsageRate = moneyString(c.UsageRate)
	m.Start = rfc3339(c.Start)
	m.End = rfc3339(c.End)
}

// parseTerm reads a term as the API does: Ny (years of billing.OneYear)
// or a Go duration.
func parseTerm(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "y"); ok {
		var y int
		if _, err := fmt.Sscanf(n, "%d", &y); err != nil {
			return 0, err
		}
		return time.Duration(y) * billing.OneYear, nil
	}
	return time.ParseDuration(s)
}

// termString writes a term as the API takes it: whole years as Ny, whole
// hours as Nh.
func termString(d time.Duration) string {
	switch {
	case d > 0 && d%billing.OneYear == 0:
		return fmt.Sprintf("%dy", d/billing.OneYear)
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return d.String()
}

func (r *commitmentResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m commitmentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c, err := r.c.GetCommitment(ctx, m.ID.ValueString())
	if gone(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the commitment", err, nil)
		return
	}
	m.fill(c)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// ModifyPlan warns at purchase that the commitment binds for its term,
// and refuses a plan that would destroy one before its term ends: a
// destroy, or a replacement.
func (r *commitmentResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.State.Raw.IsNull() {
		if !req.Plan.Raw.IsNull() {
			resp.Diagnostics.AddWarning("A commitment cannot be destroyed before its term ends",
				"gpucloud bills a commitment for every hour of its term and has no way to end it early: once bought, terraform destroy of it fails until its term ends.")
		}
		return
	}
	var st commitmentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &st)...)
	if resp.Diagnostics.HasError() {
		return
	}
	end, err := time.Parse(time.RFC3339, st.End.ValueString())
	if err != nil || !time.Now().Before(end) {
		return // its term is over: destroying it only forgets it
	}
	what := ""
	if req.Plan.Raw.IsNull() {
		what = "destroy"
	} else {
		// Every argument forces a replacement: one that changes is one.
		var pl commitmentModel
		resp.Diagnostics.Append(req.Plan.Get(ctx, &pl)...)
		if resp.Diagnostics.HasError() {
			return
		}
		var changed []string
		for _, a := range []struct {
			name        string
			plan, state attr.Value
		}{
			{"plan", pl.Plan, st.Plan}, {"offering", pl.Offering, st.Offering}, {"zone", pl.Zone, st.Zone},
			{"quantity", pl.Quantity, st.Quantity}, {"term", pl.Term, st.Term}, {"payment", pl.Payment, st.Payment}, {"tags", pl.Tags, st.Tags},
		} {
			if !a.plan.IsUnknown() && !a.plan.Equal(a.state) {
				changed = append(changed, a.name)
			}
		}
		if len(changed) == 0 {
			return
		}
		what = "replace (a change of " + strings.Join(changed, ", ") + ")"
	}
	resp.Diagnostics.AddError("A commitment cannot be destroyed before its term ends",
		fmt.Sprintf("commitment %s (%s of %d × %s) runs until %s, and gpucloud bills every hour of it: the plan would %s it, which the API cannot do. "+
			"Keep it in the configuration until then, or stop managing it without destroying it: a removed block with lifecycle { destroy = false } (or terraform state rm).",
			st.ID.ValueString(), st.Plan.ValueString(), st.Quantity.ValueInt64(), st.Offering.ValueString(), end.UTC().Format(time.RFC3339), what))
}

func (r *commitmentResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m commitmentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// Delete forgets a commitment whose term is over; before that it fails
// (ModifyPlan refuses such a plan first).
func (r *commitmentResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m commitmentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c, err := r.c.GetCommitment(ctx, m.ID.ValueString())
	if gone(err) {
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the commitment", err, nil)
		return
	}
	if time.Now().Before(c.End) {
		resp.Diagnostics.AddError("A commitment cannot be destroyed before its term ends",
			fmt.Sprintf("commitment %s runs until %s; gpucloud cannot end it early.", c.ID, c.End.UTC().Format(time.RFC3339)))
	}
}

func (r *commitmentResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, req, resp, "commitment", func(ctx context.Context, id string) error {
		_, err := r.c.GetCommitment(ctx, id)
		return err
	})
}
