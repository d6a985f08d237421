package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// base is what every resource and data source holds: the client the
// provider configured.
type base struct {
	c *client.Client
}

// configure takes the provider's client; it is nil while Terraform
// validates a configuration before the provider is configured.
func (b *base) configure(data any, diags *diag.Diagnostics) {
	if data == nil {
		return
	}
	c, ok := data.(*client.Client)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("got %T, want *client.Client", data))
		return
	}
	b.c = c
}

func (b *base) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	b.configure(req.ProviderData, &resp.Diagnostics)
}

// dsBase is base for data sources.
type dsBase struct{ base }

func (b *dsBase) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	b.configure(req.ProviderData, &resp.Diagnostics)
}

// privateKeyIdempotency is the private-state key under which a resource
// keeps the Idempotency-Key its create sent.
const privateKeyIdempotency = "idempotency_key"

// privateSetter is the part of a response's private state that create
// writes (privatestate.ProviderData).
type privateSetter interface {
	SetKey(ctx context.Context, key string, value []byte) diag.Diagnostics
}

// idempotencyKey is the key a create of resource type typ sends: the
// type and a random nonce, fresh for each create (Terraform gives a
// provider neither the resource's address nor a place to keep anything
// between plan and create).
func idempotencyKey(typ string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "tf-" + strings.TrimPrefix(typ, "gpucloud_") + "-" + hex.EncodeToString(b)
}

// Create retries: how many times, and the longest wait between two.
const (
	createTries    = 5
	createMaxDelay = 10 * time.Second
)

// createRetrying runs call with one idempotency key, kept in private,
// until it succeeds, fails with an answer that retrying cannot change, or
// runs out of tries or ctx. It retries what may not have reached the
// server or may pass later: transport errors, rate_limited (after its
// Retry-After) and unavailable; the key makes a retry of a create that
// did reach the server answer the first one's resource.
func createRetrying[T any](ctx context.Context, typ string, private privateSetter, diags *diag.Diagnostics, call func(key string) (T, error)) (T, error) {
	key := idempotencyKey(typ)
	if private != nil {
		b, _ := json.Marshal(key)
		diags.Append(private.SetKey(ctx, privateKeyIdempotency, b)...)
	}
	delay := 250 * time.Millisecond
	for try := 1; ; try++ {
		v, err := call(key)
		if err == nil || try == createTries || !retryable(err) {
			return v, err
		}
		wait := delay
		if d, ok := rest.RetryAfter(err); ok && d > wait {
			wait = d
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(min(wait, createMaxDelay)):
		}
		delay *= 2
	}
}

// retryable reports whether err may pass if the same request is sent
// again: a transport failure (no answer), or an answer that says so.
func retryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ce *cloud.Error
	if !errors.As(err, &ce) {
		return true
	}
	return ce.Code == cloud.RateLimited || ce.Code == cloud.Unavailable
}

// addAPIError adds err as a diagnostic. An API error on a field the
// resource has (its details' "field", named as the attribute is, or
// mapped through fields) is an attribute diagnostic on that field; else
// on at, when at is not empty; else on the resource. The detail carries
// the message, the code and the other details, e.g. a placement
// refusal's host counts by reason.
func addAPIError(diags *diag.Diagnostics, at path.Path, summary string, err error, fields map[string]string) {
	detail := err.Error()
	var ce *cloud.Error
	if errors.As(err, &ce) {
		detail = ce.Message + " (" + string(ce.Code) + ")"
		if f, ok := ce.Details["field"].(string); ok {
			if a, ok := fields[f]; ok {
				// "block.attr" is an attribute of a single nested block.
				parts := strings.Split(a, ".")
				at = path.Root(parts[0])
				for _, p := range parts[1:] {
					at = at.AtName(p)
				}
			}
		}
		if d := formatDetails(ce.Details); d != "" {
			detail += "\n" + d
		}
	}
	if len(at.Steps()) > 0 {
		diags.AddAttributeError(at, summary, detail)
		return
	}
	diags.AddError(summary, detail)
}

// formatDetails lists an error's details, one "key: value" a line, in
// the order of their keys.
func formatDetails(d map[string]any) string {
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		v := d[k]
		if m, ok := v.(map[string]any); ok {
			for _, kk := range slices.Sorted(maps.Keys(m)) {
				lines = append(lines, fmt.Sprintf("%s.%s: %v", k, kk, m[kk]))
			}
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: %v", k, v))
	}
	return strings.Join(lines, "\n")
}

// gone reports whether a read's error means the resource no longer
// exists (for this tenant): Read then removes it from the state, and the
// next plan creates it again.
func gone(err error) bool { return cloud.IsNotFound(err) }

// stringMap converts a tags map (null when empty, so that a resource
// without tags has none in state).
func stringMap(m map[string]string) types.Map {
	if len(m) == 0 {
		return types.MapNull(types.StringType)
	}
	vs := make(map[string]attr.Value, len(m))
	for k, v := range m {
		vs[k] = types.StringValue(v)
	}
	return types.MapValueMust(types.StringType, vs)
}

// goMap is the Go map of a types.Map of strings.
func goMap(ctx context.Context, m types.Map, diags *diag.Diagnostics) map[string]string {
	if m.IsNull() || m.IsUnknown() {
		return nil
	}
	out := map[string]string{}
	diags.Append(m.ElementsAs(ctx, &out, false)...)
	return out
}

// stringList converts a list of strings (null when empty).
func stringList(vs []string) types.List {
	if len(vs) == 0 {
		return types.ListNull(types.StringType)
	}
	els := make([]attr.Value, len(vs))
	for i, v := range vs {
		els[i] = types.StringValue(v)
	}
	return types.ListValueMust(types.StringType, els)
}

// goList is the Go slice of a types.List of strings.
func goList(ctx context.Context, l types.List, diags *diag.Diagnostics) []string {
	if l.IsNull() || l.IsUnknown() {
		return nil
	}
	var out []string
	diags.Append(l.ElementsAs(ctx, &out, false)...)
	return out
}

// optString is a string attribute that is null when empty.
func optString(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// rfc3339 formats a time for a created_at attribute.
func rfc3339(t time.Time) types.String {
	if t.IsZero() {
		return types.StringNull()
	}
	return types.StringValue(t.UTC().Format(time.RFC3339))
}

// importByID imports the resource with the ID given, once get found it:
// an ID the caller's tenant cannot see (another tenant's, or none) is an
// error that says not_found, not an empty import.
func importByID(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse, what string, get func(ctx context.Context, id string) error) {
	if err := get(ctx, req.ID); err != nil {
		addAPIError(&resp.Diagnostics, path.Empty(), "Cannot import "+what+" "+req.ID, err, nil)
		return
	}
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

// systemTagPrefix marks the tags gpucloud itself writes (a stack's), which
// are not the tenant's and not in the configuration.
const systemTagPrefix = "gpucloud:"

// userTags is tags without gpucloud's own.
func userTags(tags map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range tags {
		if !strings.HasPrefix(k, systemTagPrefix) {
			out[k] = v
		}
	}
	return out
}

// diagnostics is the diagnostics a helper adds to.
type diagnostics = diag.Diagnostics
