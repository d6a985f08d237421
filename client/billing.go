package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// PricesOptions filters GET /v1/prices; zero fields match all.
type PricesOptions struct {
	Kind     cloud.PriceKind
	Offering string
	Zone     string
	// At, when set, keeps only the versions in force at that time.
	At time.Time
}

// Prices lists price versions.
func (c *Client) Prices(ctx context.Context, o PricesOptions) ([]*cloud.Price, error) {
	at := ""
	if !o.At.IsZero() {
		at = o.At.UTC().Format(time.RFC3339)
	}
	var out api.PriceList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Out: &out, Path: "/v1/prices" + rest.Query(
		"kind", string(o.Kind), "offering", o.Offering, "zone", o.Zone, "at", at)})
	return out.Prices, err
}

// SetPrice adds a price version (admin). A non-empty idemKey makes retries
// safe: the same key returns the version the first call added (keys are
// one space for every price).
func (c *Client) SetPrice(ctx context.Context, req api.SetPriceRequest, idemKey string) (*cloud.Price, error) {
	var out cloud.Price
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/prices", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// idemHeader is the Idempotency-Key header of a create; none for "".
func idemHeader(key string) http.Header {
	if key == "" {
		return nil
	}
	return http.Header{"Idempotency-Key": {key}}
}

// CreateCommitment buys a commitment. A non-empty idemKey makes retries
// safe: the same key returns the commitment the first call made.
func (c *Client) CreateCommitment(ctx context.Context, req api.CreateCommitmentRequest, idemKey string) (*cloud.Commitment, error) {
	var out cloud.Commitment
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/commitments", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// Commitments lists commitments: the caller's tenant's, or for an admin
// one tenant's (tenant not empty) or every tenant's.
func (c *Client) Commitments(ctx context.Context, tenant string) ([]*cloud.Commitment, error) {
	var out api.CommitmentList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/commitments" + rest.Query("tenant", tenant), Out: &out})
	return out.Commitments, err
}

// GetCommitment reads a commitment.
func (c *Client) GetCommitment(ctx context.Context, id string) (*cloud.Commitment, error) {
	var out cloud.Commitment
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("commitments", id), Out: &out})
	return rest.NilOnErr(&out, err)
}

// SpotPricesOptions selects spot price history; zero fields take the
// server's defaults (every pool, the last 24 hours, 1000 points).
type SpotPricesOptions struct {
	Pools        []cloud.Pool
	Since, Until time.Time
	Limit        int
}

// SpotPrices reads spot price history, oldest first.
func (c *Client) SpotPrices(ctx context.Context, o SpotPricesOptions) ([]cloud.SpotPrice, error) {
	v := url.Values{}
	for _, p := range o.Pools {
		v.Add("pool", p.String())
	}
	if !o.Since.IsZero() {
		v.Set("since", o.Since.UTC().Format(time.RFC3339))
	}
	if !o.Until.IsZero() {
		v.Set("until", o.Until.UTC().Format(time.RFC3339))
	}
	if o.Limit > 0 {
		v.Set("limit", strconv.Itoa(o.Limit))
	}
	path := "/v1/spot/prices"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out api.SpotPriceList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: path, Out: &out})
	return out.Prices, err
}

// SpotPools lists every pool's newest spot price with its on-demand price
// and its reclaims over the server's default window (a week).
func (c *Client) SpotPools(ctx context.Context) ([]api.SpotPool, error) {
	return c.SpotPoolsOver(ctx, 0)
}

// SpotPoolsOver is SpotPools with the reclaims counted over window before
// now (whole seconds, up to 720h); 0 is the server's default.
func (c *Client) SpotPoolsOver(ctx context.Context, window time.Duration) ([]api.SpotPool, error) {
	w := ""
	if window != 0 {
		w = window.String()
	}
	var out api.SpotPoolList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/spot/pools" + rest.Query("window", w), Out: &out})
	return out.Pools, err
}

// CreateSpotRequest creates a spot request and launches its first
// instance. A non-empty idemKey makes retries safe.
func (c *Client) CreateSpotRequest(ctx context.Context, req api.CreateSpotRequestRequest, idemKey string) (*cloud.SpotRequest, error) {
	var out cloud.SpotRequest
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/spot/requests", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// SpotRequests lists spot requests: the caller's tenant's, or for an admin
// one tenant's (tenant not empty) or every tenant's; states filter when
// given.
func (c *Client) SpotRequests(ctx context.Context, tenant string, states ...cloud.SpotRequestState) ([]*cloud.SpotRequest, error) {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	var out api.SpotRequestList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Out: &out,
		Path: "/v1/spot/requests" + rest.Query("tenant", tenant, "state", strings.Join(names, ","))})
	return out.Requests, err
}

// GetSpotRequest reads a spot request; its Version is what If-Match takes.
func (c *Client) GetSpotRequest(ctx context.Context, id string) (*cloud.SpotRequest, error) {
	var out cloud.SpotRequest
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("spot", "requests", id), Out: &out})
	return rest.NilOnErr(&out, err)
}

// CancelSpotRequest cancels a spot request, and with terminateInstance
// also terminates its current instance. A non-zero ifMatch is the version
// the caller saw.
func (c *Client) CancelSpotRequest(ctx context.Context, id string, terminateInstance bool, ifMatch int64) (*cloud.SpotRequest, error) {
	q := ""
	if terminateInstance {
		q = rest.Query("terminate_instance", "true")
	}
	var out cloud.SpotRequest
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("spot", "requests", id, "cancel") + q,
		Header: ifMatchHeader(ifMatch), Out: &out})
	return rest.NilOnErr(&out, err)
}

// InvoicesOptions selects invoices: Month "2026-12" (default the current
// month) and, for admins, one Tenant (default every tenant).
type InvoicesOptions struct {
	Month  string
	Tenant string
}

// Invoices rates a month live and returns its invoices.
func (c *Client) Invoices(ctx context.Context, o InvoicesOptions) ([]*billing.Invoice, error) {
	var out api.InvoiceList[*billing.Invoice]
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/invoices" + rest.Query("month", o.Month, "tenant", o.Tenant), Out: &out})
	return out.Invoices, err
}

// maxCSVBody bounds an invoice CSV the client reads.
const maxCSVBody = 64 << 20

// InvoicesCSV is Invoices as CSV (billing.WriteCSV's format).
func (c *Client) InvoicesCSV(ctx context.Context, o InvoicesOptions) ([]byte, error) {
	path := "/v1/invoices" + rest.Query("month", o.Month, "tenant", o.Tenant, "format", "csv")
	req, err := c.r.NewRequest(ctx, "GET", path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/csv")
	resp, err := c.r.Send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxCSVBody+1))
	if err != nil {
		return nil, fmt.Errorf("read answer of GET %s: %w", path, err)
	}
	if len(b) > maxCSVBody {
		return nil, fmt.Errorf("GET %s: the CSV is larger than %d bytes; ask for one tenant", path, maxCSVBody)
	}
	return b, nil
}

// SetBudget sets the monthly budget of the caller's tenant, or for an
// admin of tenant (not empty).
func (c *Client) SetBudget(ctx context.Context, tenant string, spec api.BudgetSpec) (*api.BudgetStatus, error) {
	var out api.BudgetStatus
	_, _, err := c.r.Do(ctx, rest.Call{Method: "PUT", Path: "/v1/budget" + rest.Query("tenant", tenant), Body: spec, Out: &out})
	return rest.NilOnErr(&out, err)
}

// Budget reads the budget of the caller's tenant (or for an admin of
// tenant), with this month's spending and alerts.
func (c *Client) Budget(ctx context.Context, tenant string) (*api.BudgetStatus, error) {
	var out api.BudgetStatus
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/budget" + rest.Query("tenant", tenant), Out: &out})
	return rest.NilOnErr(&out, err)
}

// AllocateAddress allocates a public address. A non-empty idemKey makes
// retries safe: the same key returns the address the first call allocated.
func (c *Client) AllocateAddress(ctx context.Context, req api.AllocateAddressRequest, idemKey string) (*cloud.Address, error) {
	var out cloud.Address
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/addresses", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// Addresses lists addresses: the caller's tenant's, or for an admin one
// tenant's (tenant not empty) or every tenant's; released ones only with
// withReleased.
func (c *Client) Addresses(ctx context.Context, tenant string, withReleased bool) ([]*cloud.Address, error) {
	rel := ""
	if withReleased {
		rel = "true"
	}
	var out api.AddressList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/addresses" + rest.Query("tenant", tenant, "released", rel), Out: &out})
	return out.Addresses, err
}

// GetAddress reads an address, released or not.
func (c *Client) GetAddress(ctx context.Context, id string) (*cloud.Address, error) {
	var out cloud.Address
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("addresses", id), Out: &out})
	return rest.NilOnErr(&out, err)
}

// AssociateAddress associates an address with an instance of its tenant.
func (c *Client) AssociateAddress(ctx context.Context, id, instanceID string) (*cloud.Address, error) {
	var out cloud.Address
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("addresses", id, "associate"),
		Body: api.AssociateAddressRequest{InstanceID: instanceID}, Out: &out})
	return rest.NilOnErr(&out, err)
}

// DisassociateAddress disassociates an address; a free one is unchanged.
func (c *Client) DisassociateAddress(ctx context.Context, id string) (*cloud.Address, error) {
	var out cloud.Address
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("addresses", id, "disassociate"), Out: &out})
	return rest.NilOnErr(&out, err)
}

// ReleaseAddress releases an address; releasing it again succeeds.
func (c *Client) ReleaseAddress(ctx context.Context, id string) (*cloud.Address, error) {
	var out cloud.Address
	_, _, err := c.r.Do(ctx, rest.Call{Method: "DELETE", Path: rest.PathOf("addresses", id), Out: &out})
	return rest.NilOnErr(&out, err)
}
