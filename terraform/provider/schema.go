package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/money"
)

// The attributes every resource's schema shares.

// idAttribute is a resource's ID: the server's, known after create, the
// same for the resource's life.
func idAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		Computed: true, Description: "The ID the server gave the resource.",
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
	}
}

// computedString is an attribute the server decides once, at create.
func computedString(desc string) schema.StringAttribute {
	return schema.StringAttribute{
		Computed: true, Description: desc,
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
	}
}

// computedInt64 is computedString for a number.
func computedInt64(desc string) schema.Int64Attribute {
	return schema.Int64Attribute{
		Computed: true, Description: desc,
		PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
	}
}

// replaceString is a string argument the API cannot change in place.
func replaceString(required bool, desc string) schema.StringAttribute {
	return schema.StringAttribute{
		Required: required, Optional: !required, Description: desc,
		PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
	}
}

// defaultedString is an optional argument the API cannot change in
// place and fills in when left out (a zone, a kind).
func defaultedString(desc string) schema.StringAttribute {
	return schema.StringAttribute{
		Optional: true, Computed: true, Description: desc,
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()},
	}
}

// tagsAttribute is a resource's tags, which the API sets at create only.
func tagsAttribute() schema.MapAttribute {
	return schema.MapAttribute{
		Optional: true, ElementType: types.StringType,
		Description:   "The tenant's tags (keys without the gpucloud: prefix). The API sets tags at create only: a change replaces the resource.",
		PlanModifiers: []planmodifier.Map{mapplanmodifier.RequiresReplace()},
	}
}

// moneyAttribute is an optional money argument, a decimal string: one the
// state holds in another form of the same amount ("50" and "50.00", the
// second as an import writes it) plans no change. (Computed only so that
// the plan may keep the state's form.)
func moneyAttribute(desc string, more ...planmodifier.String) schema.StringAttribute {
	return schema.StringAttribute{
		Optional: true, Computed: true, Description: desc,
		PlanModifiers: append([]planmodifier.String{sameAmount{}}, more...),
	}
}

// sameAmount keeps the state's form of an amount the configuration
// writes otherwise, and plans null when the configuration leaves the
// attribute out.
type sameAmount struct{}

func (sameAmount) Description(context.Context) string {
	return "an amount written otherwise is the same amount"
}

func (m sameAmount) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (sameAmount) PlanModifyString(_ context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	switch {
	case req.ConfigValue.IsNull():
		// Left out: none (the server's default), as the state will say.
		resp.PlanValue = types.StringNull()
		return
	case req.State.Raw.IsNull() || req.ConfigValue.IsUnknown():
		return
	}
	a, err1 := money.Parse(req.ConfigValue.ValueString())
	b, err2 := money.Parse(req.StateValue.ValueString())
	if err1 == nil && err2 == nil && a == b {
		resp.PlanValue = req.StateValue
	}
}

// timeoutsBlock is a resource's timeouts block with its descriptions:
// what each operation waits for (desc names the resource's waits), and
// the default of 10 minutes.
func timeoutsBlock(ctx context.Context, opts timeouts.Opts, desc string) schema.Block {
	const d = " A duration such as \"30s\" or \"20m\"; default 10m."
	if opts.Create {
		opts.CreateDescription = "How long create may wait." + d
	}
	if opts.Update {
		opts.UpdateDescription = "How long an update may wait." + d
	}
	if opts.Delete {
		opts.DeleteDescription = "How long destroy may wait." + d
	}
	b := timeouts.Block(ctx, opts)
	if sb, ok := b.(schema.SingleNestedBlock); ok {
		sb.Description = desc
		return sb
	}
	return b
}
