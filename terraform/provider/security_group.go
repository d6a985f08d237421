package provider

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// securityGroupResource is gpucloud_security_group: a group of a network
// that instances name. The API gives a new group one rule, egress of all
// traffic to 0.0.0.0/0, and no ingress; the rules Terraform manages are
// gpucloud_security_group_rule resources (the default egress rule is not
// one: revoke it with `gpucloud security-groups revoke` if unwanted). The
// API cannot change a group's name or description: every argument forces
// a replacement.
type securityGroupResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*securityGroupResource)(nil)
	_ resource.ResourceWithImportState = (*securityGroupResource)(nil)
)

func newSecurityGroupResource() resource.Resource { return &securityGroupResource{} }

type securityGroupModel struct {
	ID          types.String `tfsdk:"id"`
	NetworkID   types.String `tfsdk:"network_id"`
	Name        types.String `tfsdk:"name"`
	Description types.String `tfsdk:"description"`
	Tags        types.Map    `tfsdk:"tags"`
	CreatedAt   types.String `tfsdk:"created_at"`
}

var securityGroupFields = map[string]string{"network": "network_id", "name": "name", "description": "description", "tags": "tags"}

func (r *securityGroupResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_security_group"
}

func (r *securityGroupResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A security group of a network (gpucloud security-groups). The API gives it one rule, egress of all traffic to 0.0.0.0/0, and no ingress: add gpucloud_security_group_rule resources.",
		Attributes: map[string]schema.Attribute{
			"id":          idAttribute(),
			"network_id":  replaceString(true, "The network's ID."),
			"name":        replaceString(true, "Unique among the network's groups."),
			"description": replaceString(false, "What the group is for."),
			"tags":        tagsAttribute(),
			"created_at":  computedString("When the group was created (RFC 3339)."),
		},
	}
}

func (r *securityGroupResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m securityGroupModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	body := api.CreateSecurityGroupRequest{Network: m.NetworkID.ValueString(), Name: m.Name.ValueString(),
		Description: m.Description.ValueString(), Tags: goMap(ctx, m.Tags, &resp.Diagnostics)}
	if resp.Diagnostics.HasError() {
		return
	}
	g, err := createRetrying(ctx, "gpucloud_security_group", resp.Private, &resp.Diagnostics, func(key string) (*cloud.SecurityGroup, error) {
		return r.c.CreateSecurityGroup(ctx, body, key)
	})
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot create the security group", err, securityGroupFields)
		return
	}
	m.fill(g)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (m *securityGroupModel) fill(g *cloud.SecurityGroup) {
	m.ID = types.StringValue(g.ID)
	m.NetworkID = types.StringValue(g.NetworkID)
	m.Name = types.StringValue(g.Name)
	m.Description = optString(g.Description)
	m.Tags = stringMap(userTags(g.Tags))
	m.CreatedAt = rfc3339(g.CreatedAt)
}

func (r *securityGroupResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m securityGroupModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	g, err := r.c.GetSecurityGroup(ctx, m.ID.ValueString())
	if gone(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the security group", err, nil)
		return
	}
	m.fill(g)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *securityGroupResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m securityGroupModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *securityGroupResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m securityGroupModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.c.DeleteSecurityGroup(ctx, m.ID.ValueString()); err != nil && !gone(err) {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot delete the security group", err, nil)
	}
}

func (r *securityGroupResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, req, resp, "security group", func(ctx context.Context, id string) error {
		_, err := r.c.GetSecurityGroup(ctx, id)
		return err
	})
}

// securityGroupRuleResource is gpucloud_security_group_rule: one rule of a
// group, authorized and revoked through the API's versioned changes: the
// provider reads the group's version and sends it as If-Match, so a rule
// another client added or removed meanwhile makes the change fail as a
// conflict rather than race it. The provider's own changes to one group
// take turns (groupLocks), so that Terraform's parallel creates of a
// group's rules do not conflict with each other. The API cannot change a
// rule: every argument forces a replacement.
type securityGroupRuleResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*securityGroupRuleResource)(nil)
	_ resource.ResourceWithImportState = (*securityGroupRuleResource)(nil)
)

func newSecurityGroupRuleResource() resource.Resource { return &securityGroupRuleResource{} }

// groupLocks serialises this provider's rule changes per group.
var groupLocks sync.Map // group ID → *sync.Mutex

func lockGroup(id string) func() {
	mu, _ := groupLocks.LoadOrStore(id, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock
}

type ruleModel struct {
	ID              types.String `tfsdk:"id"`
	SecurityGroupID types.String `tfsdk:"security_group_id"`
	Direction       types.String `tfsdk:"direction"`
	Protocol        types.String `tfsdk:"protocol"`
	FromPort        types.Int64  `tfsdk:"from_port"`
	ToPort          types.Int64  `tfsdk:"to_port"`
	CIDR            types.String `tfsdk:"cidr"`
	PeerGroupID     types.String `tfsdk:"peer_security_group_id"`
	Description     types.String `tfsdk:"description"`
}

var ruleFields = map[string]string{"direction": "direction", "protocol": "protocol", "from_port": "from_port", "to_port": "to_port",
	"cidr": "cidr", "group": "peer_security_group_id", "description": "description"}

func (r *securityGroupRuleResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_security_group_rule"
}

func (r *securityGroupRuleResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	port := func(desc string) schema.Int64Attribute {
		return schema.Int64Attribute{Optional: true, Description: desc,
			PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()}}
	}
	resp.Schema = schema.Schema{
		Description: "One rule of a security group (gpucloud security-groups authorize). Import as GROUP_ID/RULE_ID.",
		Attributes: map[string]schema.Attribute{
			"id":                idAttribute(),
			"security_group_id": replaceString(true, "The group's ID."),
			"direction": schema.StringAttribute{
				Required: true, Description: "ingress (the peer is the source) or egress (the destination).",
				Validators:    []validator.String{stringvalidator.OneOf(api.Ingress, api.Egress)},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"protocol": schema.StringAttribute{
				Required: true, Description: "all, tcp, udp or icmp.",
				Validators:    []validator.String{stringvalidator.OneOf(cloud.ProtocolAll, cloud.ProtocolTCP, cloud.ProtocolUDP, cloud.ProtocolICMP)},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"from_port": port("First port of a tcp or udp range (1 to 65535); none for all and icmp."),
			"to_port":   port("Last port of a tcp or udp range."),
			"cidr": schema.StringAttribute{
				Optional: true, Description: "The peer as an IPv4 CIDR (canonical). Exactly one of cidr and peer_security_group_id.",
				Validators:    []validator.String{stringvalidator.ExactlyOneOf(path.MatchRoot("cidr"), path.MatchRoot("peer_security_group_id"))},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"peer_security_group_id": replaceString(false, "The peer as a group of the same network (its members' addresses)."),
			"description":            replaceString(false, "What the rule is for."),
		},
	}
}

// request is the rule as the API's authorize body.
func (m *ruleModel) request() api.AuthorizeRequest {
	return api.AuthorizeRequest{
		Direction: m.Direction.ValueString(), Protocol: m.Protocol.ValueString(),
		FromPort: int(m.FromPort.ValueInt64()), ToPort: int(m.ToPort.ValueInt64()),
		CIDR: m.CIDR.ValueString(), Group: m.PeerGroupID.ValueString(), Description: m.Description.ValueString(),
	}
}

func (r *securityGroupRuleResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m ruleModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	gid := m.SecurityGroupID.ValueString()
	defer lockGroup(gid)()
	before, err := r.c.GetSecurityGroup(ctx, gid)
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Root("security_group_id"), "Cannot read the security group", err, nil)
		return
	}
	after, err := r.c.Authorize(ctx, gid, m.request(), before.Version)
	if err != nil {
		summary := "Cannot authorize the rule"
		if cloud.IsConflict(err) {
			summary += ": the group changed while the rule was added (another client changed it); run apply again"
		}
		addAPIError(&resp.Diagnostics, path.Empty(), summary, err, ruleFields)
		return
	}
	had := map[string]bool{}
	for _, ru := range rulesOf(before, m.Direction.ValueString()) {
		had[ru.ID] = true
	}
	for _, ru := range rulesOf(after, m.Direction.ValueString()) {
		if !had[ru.ID] {
			m.fill(gid, m.Direction.ValueString(), ru)
			resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
			return
		}
	}
	resp.Diagnostics.AddError("Cannot find the rule authorized", fmt.Sprintf("security group %s answered no new %s rule", gid, m.Direction.ValueString()))
}

// rulesOf is a group's rules of one direction.
func rulesOf(g *cloud.SecurityGroup, direction string) []cloud.SecurityRule {
	if direction == api.Egress {
		return g.Egress
	}
	return g.Ingress
}

func (m *ruleModel) fill(groupID, direction string, ru cloud.SecurityRule) {
	m.ID = types.StringValue(ru.ID)
	m.SecurityGroupID = types.StringValue(groupID)
	m.Direction = types.StringValue(direction)
	m.Protocol = types.StringValue(ru.Protocol)
	m.FromPort, m.ToPort = types.Int64Null(), types.Int64Null()
	if ru.FromPort != 0 || ru.ToPort != 0 {
		m.FromPort, m.ToPort = types.Int64Value(int64(ru.FromPort)), types.Int64Value(int64(ru.ToPort))
	}
	m.CIDR = optString(ru.CIDR)
	m.PeerGroupID = optString(ru.GroupID)
	m.Description = optString(ru.Description)
}

// find looks the rule up in its group; nil when the group or the rule is
// gone.
func (r *securityGroupRuleResource) find(ctx context.Context, groupID, ruleID string) (*cloud.SecurityRule, string, error) {
	g, err := r.c.GetSecurityGroup(ctx, groupID)
	if err != nil {
		return nil, "", err
	}
	for _, dir := range []string{api.Ingress, api.Egress} {
		for _, ru := range rulesOf(g, dir) {
			if ru.ID == ruleID {
				return &ru, dir, nil
			}
		}
	}
	return nil, "", cloud.Errorf(cloud.NotFound, "security group %s has no rule %s", groupID, ruleID)
}

func (r *securityGroupRuleResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m ruleModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ru, dir, err := r.find(ctx, m.SecurityGroupID.ValueString(), m.ID.ValueString())
	if gone(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the security group rule", err, nil)
		return
	}
	m.fill(m.SecurityGroupID.ValueString(), dir, *ru)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *securityGroupRuleResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m ruleModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *securityGroupRuleResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m ruleModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	gid := m.SecurityGroupID.ValueString()
	defer lockGroup(gid)()
	g, err := r.c.GetSecurityGroup(ctx, gid)
	if gone(err) {
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the security group", err, nil)
		return
	}
	_, err = r.c.Revoke(ctx, gid, api.RevokeRequest{RuleID: m.ID.ValueString()}, g.Version)
	if err != nil && !gone(err) {
		summary := "Cannot revoke the rule"
		if cloud.IsConflict(err) {
			summary += ": the group changed meanwhile (another client changed it); run destroy again"
		}
		addAPIError(&resp.Diagnostics, path.Empty(), summary, err, nil)
	}
}

// ImportState takes GROUP_ID/RULE_ID: the API reads rules through their
// group.
func (r *securityGroupRuleResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	gid, rid, ok := strings.Cut(req.ID, "/")
	if !ok || gid == "" || rid == "" {
		resp.Diagnostics.AddError("Bad import ID", fmt.Sprintf("%q: want SECURITY_GROUP_ID/RULE_ID", req.ID))
		return
	}
	if _, _, err := r.find(ctx, gid, rid); err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot import security group rule "+req.ID, err, nil)
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), rid)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("security_group_id"), gid)...)
}
