// Package provider is gpucloud's Terraform provider (built on
// terraform-plugin-framework) over the Go client of the /v1 API. It links
// no server-side package: deps_test.go checks its imports against an
// allow-list, as agent/deps_test.go does for the agent.
//
// Every resource follows the same rules (docs/TERRAFORM.md):
//   - what the server decides is Computed and known after apply;
//   - an argument the API cannot change in place forces a replacement;
//     the changes the API can make in place go through its versioned
//     updates (If-Match), so a concurrent change is an error, not an
//     overwrite;
//   - a resource deleted outside Terraform leaves the state on refresh
//     (the API's not_found), and the next plan creates it again;
//   - a create sends an Idempotency-Key, the same on each of the
//     provider's retries of that call, kept in the resource's private
//     state;
//   - the API's typed errors become diagnostics on the attribute they
//     are about, with the error's code and details.
package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Address is the provider's source address in the registry layout.
const Address = "registry.terraform.io/gpucloud/gpucloud"

// Provider is the gpucloud provider.
type Provider struct {
	version string
}

var _ provider.Provider = (*Provider)(nil)

// New returns the constructor providerserver.Serve and the tests take.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &Provider{version: version} }
}

// providerModel is the provider block.
type providerModel struct {
	Endpoint      types.String `tfsdk:"endpoint"`
	Token         types.String `tfsdk:"token"`
	CAFingerprint types.String `tfsdk:"ca_fingerprint"`
}

func (p *Provider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "gpucloud"
	resp.Version = p.version
}

func (p *Provider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "gpucloud: GPU instances, volumes, networks and addresses of a gpucloud server.",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{
				Optional:    true,
				Description: "The server's URL (https://HOST:7878). Default: $GPUCLOUD_SERVER, else the CLI's configuration file.",
			},
			"token": schema.StringAttribute{
				Optional: true, Sensitive: true,
				Description: "An API token (gpc_...). Default: $GPUCLOUD_TOKEN, else the CLI's configuration file.",
			},
			"ca_fingerprint": schema.StringAttribute{
				Optional: true,
				Description: "The fingerprint (sha256:...) of the cloud's own CA, which `gpucloud up` and `gpucloud server` print: " +
					"the provider fetches the CA from the server and trusts it by that fingerprint alone (TLS 1.3). " +
					"Default: $GPUCLOUD_CA_FINGERPRINT; without one, the CA file $GPUCLOUD_CA_FILE names, else the CLI configuration file's CA for the same server, else the system's roots.",
			},
		},
	}
}

func (p *Provider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	s, diags := resolveSettings(m)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	c, err := connect(ctx, s)
	if err != nil {
		resp.Diagnostics.AddError("Cannot connect to the gpucloud server", err.Error())
		return
	}
	resp.ResourceData = c
	resp.DataSourceData = c
}

func (p *Provider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		newKeyResource,
		newVolumeResource,
		newInstanceResource,
		newNetworkResource,
		newSubnetResource,
		newSecurityGroupResource,
		newSecurityGroupRuleResource,
		newPlacementGroupResource,
		newAddressResource,
		newAddressAssociationResource,
		newSpotRequestResource,
		newGroupResource,
		newCommitmentResource,
		newEndpointResource,
	}
}

func (p *Provider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		newOfferingsDataSource,
		newOfferingDataSource,
		newPricesDataSource,
		newSpotPriceDataSource,
		newAdviseDataSource,
	}
}
