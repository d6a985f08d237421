package provider

import (
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
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
