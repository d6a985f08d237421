// Package client is the Go client of gpucloud's /v1 API, for tenants'
// members and admins: the CLI, the end-to-end tests and any program that
// drives a cloud use it. Its methods send and read the wire types of
// package api; every error the API answers comes back as a *cloud.Error.
//
// The host agent's side of the API (joining, heartbeats, assignments,
// status reports, log shipping) is package agentapi's Client; the admin
// calls that manage join tokens are here.
package client

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// Client calls the /v1 API as a tenant's member or an admin. Every method
// returns the API's error as a *cloud.Error, so callers branch with
// cloud.ErrorCode; transport failures are returned as they are
// (cloud.ErrorCode reports them as internal). A Client is safe for
// concurrent use.
type Client struct {
	r *rest.Client
}

// New returns a client of the server at baseURL (e.g.
// "http://127.0.0.1:8080") that authenticates with token. A nil hc uses
// http.DefaultClient.
func New(baseURL, token string, hc *http.Client) *Client {
	return &Client{r: rest.New(baseURL, token, hc)}
}

// ifMatchHeader is the If-Match header of a change; none for version 0.
func ifMatchHeader(version int64) http.Header {
	if version == 0 {
		return nil
	}
	return http.Header{"If-Match": {api.ETag(version)}}
}

// OpenAPIDocument fetches the server's OpenAPI document.
func (c *Client) OpenAPIDocument(ctx context.Context) (json.RawMessage, error) {
	var doc json.RawMessage
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/openapi.json", Out: &doc})
	return doc, err
}

// Offerings lists the catalog's offerings.
func (c *Client) Offerings(ctx context.Context) ([]*catalog.Offering, error) {
	var out api.OfferingList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/offerings", Out: &out})
	return out.Offerings, err
}

// OfferingList lists the catalog's offerings with the fleet's availability
// of each, when the server knows it (api.OfferingList).
func (c *Client) OfferingList(ctx context.Context) (*api.OfferingList, error) {
	var out api.OfferingList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/offerings", Out: &out})
	return rest.NilOnErr(&out, err)
}

// CreateTenant creates a tenant (admin).
func (c *Client) CreateTenant(ctx context.Context, name string) (*cloud.Tenant, error) {
	var out cloud.Tenant
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/tenants", Body: api.CreateTenantRequest{Name: name}, Out: &out})
	return rest.NilOnErr(&out, err)
}

// Tenants lists the tenants (admin).
func (c *Client) Tenants(ctx context.Context) ([]*cloud.Tenant, error) {
	var out api.TenantList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/tenants", Out: &out})
	return out.Tenants, err
}

// CreateUser creates a user in a tenant with its first token (admin). The
// secret in the answer is shown only once.
func (c *Client) CreateUser(ctx context.Context, tenantID string, req api.CreateUserRequest) (*api.CreatedUser, error) {
	var out api.CreatedUser
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("tenants", tenantID, "users"), Body: req, Out: &out})
	return rest.NilOnErr(&out, err)
}

// SetQuota replaces a tenant's quota (admin).
func (c *Client) SetQuota(ctx context.Context, tenantID string, q api.QuotaSpec) (*api.QuotaStatus, error) {
	var out api.QuotaStatus
	_, _, err := c.r.Do(ctx, rest.Call{Method: "PUT", Path: rest.PathOf("tenants", tenantID, "quota"), Body: q, Out: &out})
	return rest.NilOnErr(&out, err)
}

// Quota reads a tenant's quota and usage.
func (c *Client) Quota(ctx context.Context, tenantID string) (*api.QuotaStatus, error) {
	var out api.QuotaStatus
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("tenants", tenantID, "quota"), Out: &out})
	return rest.NilOnErr(&out, err)
}

// Tokens lists tokens: the caller's tenant's, or for an admin one tenant's
// (tenant not empty) or every tenant's.
func (c *Client) Tokens(ctx context.Context, tenant string) ([]*cloud.Token, error) {
	var out api.TokenList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/tokens" + rest.Query("tenant", tenant), Out: &out})
	return out.Tokens, err
}

// CreateToken creates a token for the calling user. The secret in the
// answer is shown only once.
func (c *Client) CreateToken(ctx context.Context, req api.CreateTokenRequest) (*api.CreatedToken, error) {
	var out api.CreatedToken
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/tokens", Body: req, Out: &out})
	return rest.NilOnErr(&out, err)
}

// RevokeToken revokes a token; revoking a revoked token succeeds.
func (c *Client) RevokeToken(ctx context.Context, id string) (*cloud.Token, error) {
	var out cloud.Token
	_, _, err := c.r.Do(ctx, rest.Call{Method: "DELETE", Path: rest.PathOf("tokens", id), Out: &out})
	return rest.NilOnErr(&out, err)
}

// CreateInstance creates one instance. A non-empty idemKey makes retries
// safe: the same key returns the instance the first call created.
func (c *Client) CreateInstance(ctx context.Context, req api.CreateInstanceRequest, idemKey string) (*cloud.Instance, error) {
	var out cloud.Instance
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/instances", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
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
	// Name selects the instances of that exact name.
	Name string
	// Limit caps the page (server default 100, at most 1000); After is the
	// Next of the previous page.
	Limit int
	After string
}

// ListInstances returns one page of instances; page.Next is empty on the
// last page.
func (c *Client) ListInstances(ctx context.Context, o ListInstancesOptions) (*api.InstanceList, error) {
	states := make([]string, len(o.States))
	for i, s := range o.States {
		states[i] = string(s)
	}
	limit := ""
	if o.Limit > 0 {
		limit = strconv.Itoa(o.Limit)
	}
	var out api.InstanceList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Out: &out, Path: "/v1/instances" + rest.Query(
		"tenant", o.Tenant, "state", strings.Join(states, ","), "offering", o.Offering,
		"host", o.Host, "market", string(o.Market), "name", o.Name, "limit", limit, "after", o.After)})
	return rest.NilOnErr(&out, err)
}

// GetInstance reads an instance; its Version is what If-Match takes.
func (c *Client) GetInstance(ctx context.Context, id string) (*cloud.Instance, error) {
	var out cloud.Instance
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("instances", id), Out: &out})
	return rest.NilOnErr(&out, err)
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
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("instances", id, verb), Header: ifMatchHeader(ifMatch), Out: &out})
	return rest.NilOnErr(&out, err)
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
	return rest.Query("tenant", o.Tenant, "instance", o.Instance, "host", o.Host, "limit", limit, "after", o.After)
}

// InstanceEvents returns one page of an instance's events, oldest first.
func (c *Client) InstanceEvents(ctx context.Context, id string, o EventsOptions) (*api.EventList, error) {
	return c.resourceEvents(ctx, "instances", id, o)
}

// VolumeEvents returns one page of a volume's events, oldest first.
func (c *Client) VolumeEvents(ctx context.Context, id string, o EventsOptions) (*api.EventList, error) {
	return c.resourceEvents(ctx, "volumes", id, o)
}

// resourceEvents returns one page of the events of resource id of a
// collection (GET /v1/{collection}/{id}/events), by o's Limit and After.
func (c *Client) resourceEvents(ctx context.Context, collection, id string, o EventsOptions) (*api.EventList, error) {
	var out api.EventList
	q := EventsOptions{Limit: o.Limit, After: o.After}.query()
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf(collection, id, "events") + q, Out: &out})
	return rest.NilOnErr(&out, err)
}

// Events returns one page of the audit trail (admin), oldest first.
func (c *Client) Events(ctx context.Context, o EventsOptions) (*api.EventList, error) {
	var out api.EventList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/events" + o.query(), Out: &out})
	return rest.NilOnErr(&out, err)
}

// InstanceLogs reads an instance's output from offset on; the answer's
// Offset is the offset of the next call, equal to it when there is nothing
// new yet.
func (c *Client) InstanceLogs(ctx context.Context, instanceID string, offset int64) (*api.LogPage, error) {
	var out api.LogPage
	q := ""
	if offset > 0 {
		q = "?offset=" + strconv.FormatInt(offset, 10)
	}
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("instances", instanceID, "logs") + q, Out: &out})
	return rest.NilOnErr(&out, err)
}

// CreateVolume creates a volume. A non-empty idemKey makes retries safe:
// the same key returns the volume the first call created.
func (c *Client) CreateVolume(ctx context.Context, req api.CreateVolumeRequest, idemKey string) (*cloud.Volume, error) {
	var out cloud.Volume
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/volumes", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// Volumes lists volumes: the caller's tenant's, or for an admin one
// tenant's (tenant not empty) or every tenant's.
func (c *Client) Volumes(ctx context.Context, tenant string) ([]*cloud.Volume, error) {
	var out api.VolumeList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/volumes" + rest.Query("tenant", tenant), Out: &out})
	return out.Volumes, err
}

// GetVolume reads a volume.
func (c *Client) GetVolume(ctx context.Context, id string) (*cloud.Volume, error) {
	var out cloud.Volume
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("volumes", id), Out: &out})
	return rest.NilOnErr(&out, err)
}

// AttachVolume attaches a volume to an instance of its tenant.
func (c *Client) AttachVolume(ctx context.Context, volumeID, instanceID string) (*cloud.Volume, error) {
	var out cloud.Volume
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("volumes", volumeID, "attach"),
		Body: api.AttachVolumeRequest{InstanceID: instanceID}, Out: &out})
	return rest.NilOnErr(&out, err)
}

// DetachVolume detaches a volume; detaching a detached volume succeeds.
func (c *Client) DetachVolume(ctx context.Context, volumeID string) (*cloud.Volume, error) {
	var out cloud.Volume
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("volumes", volumeID, "detach"), Out: &out})
	return rest.NilOnErr(&out, err)
}

// DeleteVolume deletes a volume; its storage stops being billed.
func (c *Client) DeleteVolume(ctx context.Context, volumeID string) (*cloud.Volume, error) {
	var out cloud.Volume
	_, _, err := c.r.Do(ctx, rest.Call{Method: "DELETE", Path: rest.PathOf("volumes", volumeID), Out: &out})
	return rest.NilOnErr(&out, err)
}

// Hosts lists the hosts (admin).
func (c *Client) Hosts(ctx context.Context) ([]*cloud.Host, error) {
	var out api.HostList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/hosts", Out: &out})
	return out.Hosts, err
}

// CordonHost stops new placements on a host (admin); ifMatch as for
// instances.
func (c *Client) CordonHost(ctx context.Context, id string, ifMatch int64) (*cloud.Host, error) {
	var out cloud.Host
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("hosts", id, "cordon"), Header: ifMatchHeader(ifMatch), Out: &out})
	return rest.NilOnErr(&out, err)
}

// UncordonHost makes a cordoned host schedulable again (admin).
func (c *Client) UncordonHost(ctx context.Context, id string, ifMatch int64) (*cloud.Host, error) {
	var out cloud.Host
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("hosts", id, "uncordon"), Header: ifMatchHeader(ifMatch), Out: &out})
	return rest.NilOnErr(&out, err)
}

// DrainHost cordons a host and stops the instances running on it.
func (c *Client) DrainHost(ctx context.Context, id string) (*api.DrainResult, error) {
	var out api.DrainResult
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("hosts", id, "drain"), Out: &out})
	return rest.NilOnErr(&out, err)
}

// RemoveHost removes a host's agent (admin): its credentials are revoked,
// so that the host's ID may join again with a join token.
func (c *Client) RemoveHost(ctx context.Context, id string) (*api.RemoveHostResult, error) {
	var out api.RemoveHostResult
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("hosts", id, "remove"), Out: &out})
	return rest.NilOnErr(&out, err)
}

// CreateJoinToken creates a join token (admin). The secret in the answer
// is shown only once; agents present it to Join.
func (c *Client) CreateJoinToken(ctx context.Context, req api.CreateJoinTokenRequest) (*api.CreatedToken, error) {
	var out api.CreatedToken
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/join-tokens", Body: req, Out: &out})
	return rest.NilOnErr(&out, err)
}

// JoinTokens lists the join tokens (admin), revoked and expired ones
// included. RevokeToken revokes one.
func (c *Client) JoinTokens(ctx context.Context) ([]*cloud.Token, error) {
	var out api.TokenList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/join-tokens", Out: &out})
	return out.Tokens, err
}
