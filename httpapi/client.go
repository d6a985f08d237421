package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// Client calls the /v1 API. Every method returns the API's error as a
// *cloud.Error, so callers branch with cloud.ErrorCode; transport failures
// are returned as they are (cloud.ErrorCode reports them as internal).
// A Client is safe for concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// NewClient returns a client of the server at baseURL (e.g.
// "http://127.0.0.1:8080") that authenticates with token. A nil hc uses
// http.DefaultClient.
func NewClient(baseURL, token string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, hc: hc}
}

// maxErrorBody bounds how much of an error response the client reads.
const maxErrorBody = 64 << 10

// call is one request: method and path (with query), optional JSON body
// and headers, and where to decode a 2xx answer. It returns the response
// headers and status for the few callers that need them.
type call struct {
	method, path string
	body         any
	header       http.Header
	out          any
	// raw, when not nil, is sent as the body as it is, with Content-Type
	// rawType, instead of body as JSON.
	raw     []byte
	rawType string
}

func (c *Client) do(ctx context.Context, k call) (http.Header, int, error) {
	var body io.Reader
	if k.body != nil {
		b, err := json.Marshal(k.body)
		if err != nil {
			return nil, 0, fmt.Errorf("encode %s %s: %w", k.method, k.path, err)
		}
		body = bytes.NewReader(b)
	}
	if k.raw != nil {
		body = bytes.NewReader(k.raw)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, c.base+k.path, body)
	if err != nil {
		return nil, 0, err
	}
	for name, vs := range k.header {
		req.Header[name] = vs
	}
	switch {
	case k.raw != nil:
		req.Header.Set("Content-Type", k.rawType)
	case k.body != nil:
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.Header, resp.StatusCode, decodeError(resp)
	}
	if k.out != nil {
		if err := json.NewDecoder(resp.Body).Decode(k.out); err != nil {
			return resp.Header, resp.StatusCode, fmt.Errorf("decode answer of %s %s: %w", k.method, k.path, err)
		}
	}
	return resp.Header, resp.StatusCode, nil
}

// decodeError reads an error response into a *cloud.Error. A body that is
// not the API's error shape (a proxy's page, say) keeps the status's code
// and shows the start of the body.
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var e cloud.Error
	if json.Unmarshal(b, &e) == nil && e.Code != "" {
		return &e
	}
	msg := strings.TrimSpace(string(b))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return &cloud.Error{Code: codeOfStatus(resp.StatusCode),
		Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, msg),
		Details: map[string]any{"status": resp.StatusCode}}
}

// query builds "?k=v&..." from pairs, leaving out empty values.
func query(pairs ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			v.Set(pairs[i], pairs[i+1])
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// pathOf joins escaped path segments.
func pathOf(parts ...string) string {
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "/v1/" + strings.Join(parts, "/")
}

func ifMatchHeader(version int64) http.Header {
	if version == 0 {
		return nil
	}
	return http.Header{"If-Match": {etag(version)}}
}

// OpenAPIDocument fetches the server's OpenAPI document.
func (c *Client) OpenAPIDocument(ctx context.Context) (json.RawMessage, error) {
	var doc json.RawMessage
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/openapi.json", out: &doc})
	return doc, err
}

// Offerings lists the catalog's offerings.
func (c *Client) Offerings(ctx context.Context) ([]*catalog.Offering, error) {
	var out OfferingList
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/offerings", out: &out})
	return out.Offerings, err
}

// CreateTenant creates a tenant (admin).
func (c *Client) CreateTenant(ctx context.Context, name string) (*cloud.Tenant, error) {
	var out cloud.Tenant
	_, _, err := c.do(ctx, call{method: "POST", path: "/v1/tenants", body: CreateTenantRequest{Name: name}, out: &out})
	return nilOnErr(&out, err)
}

// Tenants lists the tenants (admin).
func (c *Client) Tenants(ctx context.Context) ([]*cloud.Tenant, error) {
	var out TenantList
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/tenants", out: &out})
	return out.Tenants, err
}

// CreateUser creates a user in a tenant with its first token (admin). The
// secret in the answer is shown only once.
func (c *Client) CreateUser(ctx context.Context, tenantID string, req CreateUserRequest) (*CreatedUser, error) {
	var out CreatedUser
	_, _, err := c.do(ctx, call{method: "POST", path: pathOf("tenants", tenantID, "users"), body: req, out: &out})
	return nilOnErr(&out, err)
}

// SetQuota replaces a tenant's quota (admin).
func (c *Client) SetQuota(ctx context.Context, tenantID string, q QuotaSpec) (*QuotaStatus, error) {
	var out QuotaStatus
	_, _, err := c.do(ctx, call{method: "PUT", path: pathOf("tenants", tenantID, "quota"), body: q, out: &out})
	return nilOnErr(&out, err)
}

// Quota reads a tenant's quota and usage.
func (c *Client) Quota(ctx context.Context, tenantID string) (*QuotaStatus, error) {
	var out QuotaStatus
	_, _, err := c.do(ctx, call{method: "GET", path: pathOf("tenants", tenantID, "quota"), out: &out})
	return nilOnErr(&out, err)
}

// Tokens lists tokens: the caller's tenant's, or for an admin one tenant's
// (tenant not empty) or every tenant's.
func (c *Client) Tokens(ctx context.Context, tenant string) ([]*cloud.Token, error) {
	var out TokenList
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/tokens" + query("tenant", tenant), out: &out})
	return out.Tokens, err
}

// CreateToken creates a token for the calling user. The secret in the
// answer is shown only once.
func (c *Client) CreateToken(ctx context.Context, req CreateTokenRequest) (*CreatedToken, error) {
	var out CreatedToken
	_, _, err := c.do(ctx, call{method: "POST", path: "/v1/tokens", body: req, out: &out})
	return nilOnErr(&out, err)
}

// RevokeToken revokes a token; revoking a revoked token succeeds.
func (c *Client) RevokeToken(ctx context.Context, id string) (*cloud.Token, error) {
	var out cloud.Token
	_, _, err := c.do(ctx, call{method: "DELETE", path: pathOf("tokens", id), out: &out})
	return nilOnErr(&out, err)
}

// CreateInstance creates one instance. A non-empty idemKey makes retries
// safe: the same key returns the instance the first call created.
func (c *Client) CreateInstance(ctx context.Context, req CreateInstanceRequest, idemKey string) (*cloud.Instance, error) {
	var out cloud.Instance
	_, _, err := c.do(ctx, call{method: "POST", path: "/v1/instances", body: req, header: idemHeader(idemKey), out: &out})
	return nilOnErr(&out, err)
}

// ListInstancesOptions filters GET /v1/instances; zero fields match all.
type ListInstancesOptions struct {
	// Tenant is for admins; members always see their own tenant.
	Tenant   string
	States   []cloud.State
	Offering string
	Host     string
	// Market is "on_demand" or "spot" (both when empty).
	Market cloud.Market
	// Limit caps the page (server default 100, at most 1000); After is the
	// Next of the previous page.
	Limit int
	After string
}

// ListInstances returns one page of instances; page.Next is empty on the
// last page.
func (c *Client) ListInstances(ctx context.Context, o ListInstancesOptions) (*InstanceList, error) {
	states := make([]string, len(o.States))
	for i, s := range o.States {
		states[i] = string(s)
	}
	limit := ""
	if o.Limit > 0 {
		limit = strconv.Itoa(o.Limit)
	}
	var out InstanceList
	_, _, err := c.do(ctx, call{method: "GET", out: &out, path: "/v1/instances" + query(
		"tenant", o.Tenant, "state", strings.Join(states, ","), "offering", o.Offering,
		"host", o.Host, "market", string(o.Market), "limit", limit, "after", o.After)})
	return nilOnErr(&out, err)
}

// GetInstance reads an instance; its Version is what If-Match takes.
func (c *Client) GetInstance(ctx context.Context, id string) (*cloud.Instance, error) {
	var out cloud.Instance
	_, _, err := c.do(ctx, call{method: "GET", path: pathOf("instances", id), out: &out})
	return nilOnErr(&out, err)
}

// StopInstance, StartInstance and TerminateInstance change an instance's
// state. A non-zero ifMatch is the version the caller saw; if the instance
// changed since, the call fails with a conflict.
func (c *Client) StopInstance(ctx context.Context, id string, ifMatch int64) (*cloud.Instance, error) {
	return c.change(ctx, id, "stop", ifMatch)
}

// StartInstance puts a stopped instance back to pending.
func (c *Client) StartInstance(ctx context.Context, id string, ifMatch int64) (*cloud.Instance, error) {
	return c.change(ctx, id, "start", ifMatch)
}

// TerminateInstance ends an instance; terminating it again succeeds.
func (c *Client) TerminateInstance(ctx context.Context, id string, ifMatch int64) (*cloud.Instance, error) {
	return c.change(ctx, id, "terminate", ifMatch)
}

func (c *Client) change(ctx context.Context, id, verb string, ifMatch int64) (*cloud.Instance, error) {
	var out cloud.Instance
	_, _, err := c.do(ctx, call{method: "POST", path: pathOf("instances", id, verb), header: ifMatchHeader(ifMatch), out: &out})
	return nilOnErr(&out, err)
}

// EventsOptions pages and filters events. Tenant, Instance and Host apply
// to Events (admin) only.
type EventsOptions struct {
	Tenant, Instance, Host string
	Limit                  int
	// After is the Next of the previous page.
	After string
}

func (o EventsOptions) query() string {
	limit := ""
	if o.Limit > 0 {
		limit = strconv.Itoa(o.Limit)
	}
	return query("tenant", o.Tenant, "instance", o.Instance, "host", o.Host, "limit", limit, "after", o.After)
}

// InstanceEvents returns one page of an instance's events, oldest first.
func (c *Client) InstanceEvents(ctx context.Context, id string, o EventsOptions) (*EventList, error) {
	var out EventList
	q := EventsOptions{Limit: o.Limit, After: o.After}.query()
	_, _, err := c.do(ctx, call{method: "GET", path: pathOf("instances", id, "events") + q, out: &out})
	return nilOnErr(&out, err)
}

// Events returns one page of the audit trail (admin), oldest first.
func (c *Client) Events(ctx context.Context, o EventsOptions) (*EventList, error) {
	var out EventList
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/events" + o.query(), out: &out})
	return nilOnErr(&out, err)
}

// CreateVolume creates a volume. A non-empty idemKey makes retries safe:
// the same key returns the volume the first call created.
func (c *Client) CreateVolume(ctx context.Context, req CreateVolumeRequest, idemKey string) (*cloud.Volume, error) {
	var out cloud.Volume
	_, _, err := c.do(ctx, call{method: "POST", path: "/v1/volumes", body: req, header: idemHeader(idemKey), out: &out})
	return nilOnErr(&out, err)
}

// Volumes lists volumes: the caller's tenant's, or for an admin one
// tenant's (tenant not empty) or every tenant's.
func (c *Client) Volumes(ctx context.Context, tenant string) ([]*cloud.Volume, error) {
	var out VolumeList
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/volumes" + query("tenant", tenant), out: &out})
	return out.Volumes, err
}

// GetVolume reads a volume.
func (c *Client) GetVolume(ctx context.Context, id string) (*cloud.Volume, error) {
	var out cloud.Volume
	_, _, err := c.do(ctx, call{method: "GET", path: pathOf("volumes", id), out: &out})
	return nilOnErr(&out, err)
}

// AttachVolume attaches a volume to an instance of its tenant.
func (c *Client) AttachVolume(ctx context.Context, volumeID, instanceID string) (*cloud.Volume, error) {
	var out cloud.Volume
	_, _, err := c.do(ctx, call{method: "POST", path: pathOf("volumes", volumeID, "attach"),
		body: AttachVolumeRequest{InstanceID: instanceID}, out: &out})
	return nilOnErr(&out, err)
}

// DetachVolume detaches a volume; detaching a detached volume succeeds.
func (c *Client) DetachVolume(ctx context.Context, volumeID string) (*cloud.Volume, error) {
	var out cloud.Volume
	_, _, err := c.do(ctx, call{method: "POST", path: pathOf("volumes", volumeID, "detach"), out: &out})
	return nilOnErr(&out, err)
}

// Hosts lists the hosts (admin).
func (c *Client) Hosts(ctx context.Context) ([]*cloud.Host, error) {
	var out HostList
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/hosts", out: &out})
	return out.Hosts, err
}

// CordonHost stops new placements on a host (admin); ifMatch as for
// instances.
func (c *Client) CordonHost(ctx context.Context, id string, ifMatch int64) (*cloud.Host, error) {
	var out cloud.Host
	_, _, err := c.do(ctx, call{method: "POST", path: pathOf("hosts", id, "cordon"), header: ifMatchHeader(ifMatch), out: &out})
	return nilOnErr(&out, err)
}

// UncordonHost makes a cordoned host schedulable again (admin).
func (c *Client) UncordonHost(ctx context.Context, id string, ifMatch int64) (*cloud.Host, error) {
	var out cloud.Host
	_, _, err := c.do(ctx, call{method: "POST", path: pathOf("hosts", id, "uncordon"), header: ifMatchHeader(ifMatch), out: &out})
	return nilOnErr(&out, err)
}

// nilOnErr returns v, or nil when err is set, so that callers never see a
// half-filled value next to an error.
func nilOnErr[T any](v *T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}
