package provider

import (
	"context"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// keyResource is gpucloud_key: an SSH public key of the tenant, which
// `gpucloud instances ssh` authenticates with. The API cannot change a
// key: every argument forces a replacement.
type keyResource struct{ base }

var (
	_ resource.ResourceWithConfigure   = (*keyResource)(nil)
	_ resource.ResourceWithImportState = (*keyResource)(nil)
)

func newKeyResource() resource.Resource { return &keyResource{} }

type keyModel struct {
	ID          types.String `tfsdk:"id"`
	Name        types.String `tfsdk:"name"`
	PublicKey   types.String `tfsdk:"public_key"`
	Type        types.String `tfsdk:"type"`
	Bits        types.Int64  `tfsdk:"bits"`
	Fingerprint types.String `tfsdk:"fingerprint"`
	CreatedAt   types.String `tfsdk:"created_at"`
}

func (r *keyResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_key"
}

func (r *keyResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "An SSH public key of the tenant (gpucloud keys).",
		Attributes: map[string]schema.Attribute{
			"id": idAttribute(),
			"name": schema.StringAttribute{
				Optional: true, Computed: true,
				Description:   "Unique among the tenant's keys. Default: derived from the key's comment (me@laptop becomes me-laptop), else from its fingerprint.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()},
			},
			"public_key": schema.StringAttribute{
				Required:      true,
				Description:   "One OpenSSH public key, as in a .pub file: \"ssh-ed25519 AAAA... comment\".",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"type":        computedString("The key's algorithm (ssh-ed25519, ssh-rsa, ...)."),
			"bits":        computedInt64("The key's size in bits, for RSA keys."),
			"fingerprint": computedString("The key's SHA-256 fingerprint, as ssh-keygen -l prints it."),
			"created_at":  computedString("When the key was imported (RFC 3339)."),
		},
	}
}

func (r *keyResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m keyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	body := api.ImportKeyRequest{Name: m.Name.ValueString(), PublicKey: m.PublicKey.ValueString()}
	k, err := createRetrying(ctx, "gpucloud_key", resp.Private, &resp.Diagnostics, func(key string) (*cloud.Key, error) {
		return r.c.ImportKey(ctx, body, key)
	})
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot import the SSH key", err, keyFields)
		return
	}
	m.fill(k)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// keyFields maps the API's field names to the resource's attributes.
var keyFields = map[string]string{"name": "name", "public_key": "public_key"}

func (r *keyResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m keyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	k, err := r.c.GetKey(ctx, m.ID.ValueString())
	if gone(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot read the SSH key", err, nil)
		return
	}
	m.fill(k)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// fill sets the model from the key as the server has it. The public key
// as written is kept while it is the same key (type and data), so that a
// trailing newline or comment the server drops is no diff.
func (m *keyModel) fill(k *cloud.Key) {
	m.ID = types.StringValue(k.ID)
	m.Name = types.StringValue(k.Name)
	if m.PublicKey.IsNull() || m.PublicKey.IsUnknown() || !sameSSHKey(m.PublicKey.ValueString(), k.PublicKey) {
		m.PublicKey = types.StringValue(k.PublicKey)
	}
	m.Type = types.StringValue(k.Type)
	m.Bits = types.Int64Null()
	if k.Bits > 0 {
		m.Bits = types.Int64Value(int64(k.Bits))
	}
	m.Fingerprint = types.StringValue(k.Fingerprint)
	m.CreatedAt = rfc3339(k.CreatedAt)
}

// sameSSHKey reports whether two authorized_keys lines hold the same key:
// the same type and base64 data, whatever their comments.
func sameSSHKey(a, b string) bool {
	fa, fb := strings.Fields(a), strings.Fields(b)
	return len(fa) >= 2 && len(fb) >= 2 && fa[0] == fb[0] && fa[1] == fb[1]
}

func (r *keyResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	// Every argument forces a replacement; an update only carries the
	// state over.
	var m keyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *keyResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m keyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.c.DeleteKey(ctx, m.ID.ValueString()); err != nil && !gone(err) {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot delete the SSH key", err, nil)
	}
}

func (r *keyResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, req, resp, "SSH key", func(ctx context.Context, id string) error {
		_, err := r.c.GetKey(ctx, id)
		return err
	})
}
