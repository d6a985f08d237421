package provider

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// requestTimeout bounds one API call, as the CLI's does.
const requestTimeout = 60 * time.Second

// settings are the provider's connection settings once resolved.
type settings struct {
	endpoint, token, caFingerprint string
	// caPEM is the CA to trust when no fingerprint is given: the file of
	// $GPUCLOUD_CA_FILE or the CLI configuration file's (nil: the
	// system's roots).
	caPEM []byte
}

// resolveSettings takes each setting from the first of: the provider
// block, the GPUCLOUD_* environment variable, the CLI's configuration file
// (cliconfig), as the CLI does.
func resolveSettings(m providerModel) (settings, diag.Diagnostics) {
	var diags diag.Diagnostics
	for _, a := range []struct {
		name string
		v    types.String
	}{{"endpoint", m.Endpoint}, {"token", m.Token}, {"ca_fingerprint", m.CAFingerprint}} {
		if a.v.IsUnknown() {
			diags.AddAttributeError(path.Root(a.name), "Unknown provider setting",
				"The provider's "+a.name+" is not known until apply; give it a value known at plan time.")
		}
	}
	if diags.HasError() {
		return settings{}, diags
	}
	s := settings{
		endpoint:      first(m.Endpoint.ValueString(), os.Getenv(cliconfig.EnvServer)),
		token:         first(m.Token.ValueString(), os.Getenv(cliconfig.EnvToken)),
		caFingerprint: first(m.CAFingerprint.ValueString(), os.Getenv(cliconfig.EnvCAFingerprint)),
	}
	if s.endpoint == "" || s.token == "" {
		fc, err := cliconfig.Read(cliconfig.Path(), io.Discard)
		if err != nil {
			diags.AddError("Cannot read the gpucloud CLI configuration", err.Error())
			return s, diags
		}
		s.endpoint = first(s.endpoint, fc.Server)
		s.token = first(s.token, fc.Token)
	}
	s.endpoint = strings.TrimRight(strings.TrimSpace(s.endpoint), "/")
	s.token = strings.TrimSpace(s.token)
	if s.endpoint == "" {
		diags.AddAttributeError(path.Root("endpoint"), "No gpucloud server configured",
			"Set the provider's endpoint, or $"+cliconfig.EnvServer+", or run `gpucloud login`.")
	} else if u, err := url.Parse(s.endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		diags.AddAttributeError(path.Root("endpoint"), "Bad gpucloud endpoint",
			fmt.Sprintf("%q is not a URL such as https://127.0.0.1:7878.", s.endpoint))
	}
	if s.token == "" {
		diags.AddAttributeError(path.Root("token"), "No gpucloud token configured",
			"Set the provider's token, or $"+cliconfig.EnvToken+", or run `gpucloud login`.")
	}
	if s.caFingerprint != "" {
		fp, err := pki.ParseFingerprint(s.caFingerprint)
		if err != nil {
			diags.AddAttributeError(path.Root("ca_fingerprint"), "Bad CA fingerprint", err.Error())
		}
		s.caFingerprint = fp
	}
	if diags.HasError() {
		return s, diags
	}
	if s.caFingerprint == "" {
		ca, err := cliconfig.TrustedCA(s.endpoint, io.Discard)
		if err != nil {
			diags.AddError("Cannot read the CA to trust", err.Error())
		}
		s.caPEM = ca
	}
	return s, diags
}

// first is the first non-empty of vs.
func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// connect makes the API client: TLS 1.3 trusting the CA the fingerprint
// pins (fetched from the server and checked), or the resolved CA file.
func connect(ctx context.Context, s settings) (*client.Client, error) {
	ca := s.caPEM
	if s.caFingerprint != "" {
		var err error
		ca, err = agentapi.FetchCA(ctx, s.endpoint, s.caFingerprint)
		if err != nil {
			return nil, fmt.Errorf("fetch the cloud's CA from %s: %w", s.endpoint, err)
		}
	}
	hc, err := agentapi.TLSClient(ca)
	if err != nil {
		return nil, err
	}
	hc.Timeout = requestTimeout
	return client.New(s.endpoint, s.token, hc), nil
}
