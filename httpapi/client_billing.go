package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
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
	var out PriceList
	_, _, err := c.do(ctx, call{method: "GET", out: &out, path: "/v1/prices" + query(
		"kind", string(o.Kind), "offering", o.Offering, "zone", o.Zone, "at", at)})
	return out.Prices, err
}

// SetPrice adds a price version (admin). A non-empty idemKey makes retries
// safe: the same key returns the version the first call added (keys are
// one space for every price).
func (c *Client) SetPrice(ctx context.Context, req SetPriceRequest, idemKey string) (*cloud.Price, error) {
	var out cloud.Price
	_, _, err := c.do(ctx, call{method: "POST", path: "/v1/prices", body: req, header: idemHeader(idemKey), out: &out})
	return nilOnErr(&out, err)
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
func (c *Client) CreateCommitment(ctx context.Context, req CreateCommitmentRequest, idemKey string) (*cloud.Commitment, error) {
	var out cloud.Commitment
	_, _, err := c.do(ctx, call{method: "POST", path: "/v1/commitments", body: req, header: idemHeader(idemKey), out: &out})
	return nilOnErr(&out, err)
}

// Commitments lists commitments: the caller's tenant's, or for an admin
// one tenant's (tenant not empty) or every tenant's.
func (c *Client) Commitments(ctx context.Context, tenant string) ([]*cloud.Commitment, error) {
	var out CommitmentList
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/commitments" + query("tenant", tenant), out: &out})
	return out.Commitments, err
}

// GetCommitment reads a commitment.
func (c *Client) GetCommitment(ctx context.Context, id string) (*cloud.Commitment, error) {
	var out cloud.Commitment
	_, _, err := c.do(ctx, call{method: "GET", path: pathOf("commitments", id), out: &out})
	return nilOnErr(&out, err)
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
	var out SpotPriceList
	_, _, err := c.do(ctx, call{method: "GET", path: path, out: &out})
	return out.Prices, err
}

// SpotPools lists every pool's newest spot price with its on-demand price
// and its reclaims over the server's default window (a week).
func (c *Client) SpotPools(ctx context.Context) ([]SpotPool, error) {
	return c.SpotPoolsOver(ctx, 0)
}

// SpotPoolsOver is SpotPools with the reclaims counted over window before
// now (whole seconds, up to 720h); 0 is the server's default.
func (c *Client) SpotPoolsOver(ctx context.Context, window time.Duration) ([]SpotPool, error) {
	w := ""
	if window != 0 {
		w = window.String()
	}
	var out SpotPoolList
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/spot/pools" + query("window", w), out: &out})
	return out.Pools, err
}

// CreateSpotRequest creates a spot request and launches its first
// instance. A non-empty idemKey makes retries safe.
func (c *Client) CreateSpotRequest(ctx context.Context, req CreateSpotRequestRequest, idemKey string) (*cloud.SpotRequest, error) {
	var out cloud.SpotRequest
	_, _, err := c.do(ctx, call{method: "POST", path: "/v1/spot/requests", body: req, header: idemHeader(idemKey), out: &out})
	return nilOnErr(&out, err)
}

// SpotRequests lists spot requests: the caller's tenant's, or for an admin
// one tenant's (tenant not empty) or every tenant's; states filter when
// given.
func (c *Client) SpotRequests(ctx context.Context, tenant string, states ...cloud.SpotRequestState) ([]*cloud.SpotRequest, error) {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	var out SpotRequestList
	_, _, err := c.do(ctx, call{method: "GET", out: &out,
		path: "/v1/spot/requests" + query("tenant", tenant, "state", strings.Join(names, ","))})
	return out.Requests, err
}

// GetSpotRequest reads a spot request; its Version is what If-Match takes.
func (c *Client) GetSpotRequest(ctx context.Context, id string) (*cloud.SpotRequest, error) {
	var out cloud.SpotRequest
	_, _, err := c.do(ctx, call{method: "GET", path: pathOf("spot", "requests", id), out: &out})
	return nilOnErr(&out, err)
}

// CancelSpotRequest cancels a spot request, and with terminateInstance
// also terminates its current instance. A non-zero ifMatch is the version
// the caller saw.
func (c *Client) CancelSpotRequest(ctx context.Context, id string, terminateInstance bool, ifMatch int64) (*cloud.SpotRequest, error) {
	q := ""
	if terminateInstance {
		q = query("terminate_instance", "true")
	}
	var out cloud.SpotRequest
	_, _, err := c.do(ctx, call{method: "POST", path: pathOf("spot", "requests", id, "cancel") + q,
		header: ifMatchHeader(ifMatch), out: &out})
	return nilOnErr(&out, err)
}

// InvoicesOptions selects invoices: Month "2026-12" (default the current
// month) and, for admins, one Tenant (default every tenant).
type InvoicesOptions struct {
	Month  string
	Tenant string
}

// Invoices rates a month live and returns its invoices.
func (c *Client) Invoices(ctx context.Context, o InvoicesOptions) ([]*billing.Invoice, error) {
	var out InvoiceList
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/invoices" + query("month", o.Month, "tenant", o.Tenant), out: &out})
	return out.Invoices, err
}

// maxCSVBody bounds an invoice CSV the client reads.
const maxCSVBody = 64 << 20

// InvoicesCSV is Invoices as CSV (billing.WriteCSV's format).
func (c *Client) InvoicesCSV(ctx context.Context, o InvoicesOptions) ([]byte, error) {
	path := "/v1/invoices" + query("month", o.Month, "tenant", o.Tenant, "format", "csv")
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/csv")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, decodeError(resp)
	}
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
func (c *Client) SetBudget(ctx context.Context, tenant string, spec BudgetSpec) (*BudgetStatus, error) {
	var out BudgetStatus
	_, _, err := c.do(ctx, call{method: "PUT", path: "/v1/budget" + query("tenant", tenant), body: spec, out: &out})
	return nilOnErr(&out, err)
}

// Budget reads the budget of the caller's tenant (or for an admin of
// tenant), with this month's spending and alerts.
func (c *Client) Budget(ctx context.Context, tenant string) (*BudgetStatus, error) {
	var out BudgetStatus
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/budget" + query("tenant", tenant), out: &out})
	return nilOnErr(&out, err)
}

// AllocateAddress allocates a public address. A non-empty idemKey makes
// retries safe: the same key returns the address the first call allocated.
func (c *Client) AllocateAddress(ctx context.Context, req AllocateAddressRequest, idemKey string) (*cloud.Address, error) {
	var out cloud.Address
	_, _, err := c.do(ctx, call{method: "POST", path: "/v1/addresses", body: req, header: idemHeader(idemKey), out: &out})
	return nilOnErr(&out, err)
}

// Addresses lists addresses: the caller's tenant's, or for an admin one
// tenant's (tenant not empty) or every tenant's; released ones only with
// withReleased.
func (c *Client) Addresses(ctx context.Context, tenant string, withReleased bool) ([]*cloud.Address, error) {
	rel := ""
	if withReleased {
		rel = "true"
	}
	var out AddressList
	_, _, err := c.do(ctx, call{method: "GET", path: "/v1/addresses" + query("tenant", tenant, "released", rel), out: &out})
	return out.Addresses, err
}

// AssociateAddress associates an address with an instance of its tenant.
func (c *Client) AssociateAddress(ctx context.Context, id, instanceID string) (*cloud.Address, error) {
	var out cloud.Address
	_, _, err := c.do(ctx, call{method: "POST", path: pathOf("addresses", id, "associate"),
		body: AssociateAddressRequest{InstanceID: instanceID}, out: &out})
	return nilOnErr(&out, err)
}

// DisassociateAddress disassociates an address; a free one is unchanged.
func (c *Client) DisassociateAddress(ctx context.Context, id string) (*cloud.Address, error) {
	var out cloud.Address
	_, _, err := c.do(ctx, call{method: "POST", path: pathOf("addresses", id, "disassociate"), out: &out})
	return nilOnErr(&out, err)
}

// ReleaseAddress releases an address; releasing it again succeeds.
func (c *Client) ReleaseAddress(ctx context.Context, id string) (*cloud.Address, error) {
	var out cloud.Address
	_, _, err := c.do(ctx, call{method: "DELETE", path: pathOf("addresses", id), out: &out})
	return nilOnErr(&out, err)
}
