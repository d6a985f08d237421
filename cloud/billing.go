package cloud

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/money"
)

// Market is how an instance is priced: on demand (the default; covered by
// the tenant's commitments where they match) or spot.
type Market string

const (
	MarketOnDemand Market = "on_demand"
	MarketSpot     Market = "spot"
)

// Interruption is a reclaim announced to a spot instance: at Deadline the
// control plane stops or terminates it (the agent sends SIGTERM then, not
// earlier). Until then the agent's metadata endpoint shows it as the
// instance-action.
type Interruption struct {
	// Action is "terminate" or "stop".
	Action string `json:"action"`
	// Reason is "capacity" (on-demand or reserved demand needs the
	// slot) or "price" (the spot price rose above the max price).
	Reason    string    `json:"reason"`
	NoticedAt time.Time `json:"noticed_at"`
	Deadline  time.Time `json:"deadline"`
	// For is the instance whose demand caused a capacity reclaim.
	For string `json:"for,omitempty"`
}

// Interruption actions and reasons.
const (
	ActionTerminate  = "terminate"
	ActionStop       = "stop"
	ReclaimCapacity  = "capacity"
	ReclaimPrice     = "price"
	ReclaimRebalance = "rebalance"
)

// PriceKind says what a price is for and in which unit.
type PriceKind string

const (
	// PriceCompute is the on-demand price of one instance of an offering
	// in a zone, per hour.
	PriceCompute PriceKind = "compute"
	// PriceVolume is per GiB-month (a 730-hour month, billed per second).
	PriceVolume PriceKind = "volume"
	// PriceAddress is per public address per hour.
	PriceAddress PriceKind = "address"
)

// Price is one version of a price: in force from EffectiveAt until the next
// version of the same kind, offering and zone takes effect. An empty Zone
// is the price in every zone without a zonal price of its own. Prices are
// never updated or deleted: a change is a new version.
type Price struct {
	ID          int64        `json:"id"`
	Kind        PriceKind    `json:"kind"`
	Offering    string       `json:"offering,omitempty"`
	Zone        string       `json:"zone,omitempty"`
	Amount      money.Micros `json:"amount"`
	EffectiveAt time.Time    `json:"effective_at"`
	CreatedAt   time.Time    `json:"created_at"`
	Actor       string       `json:"actor,omitempty"`
	// IdempotencyKey makes a retried AddPrice return the first version.
	// Prices are the operator's, not a tenant's: the key is unique across
	// every price (empty: not idempotent).
	IdempotencyKey string `json:"-"`
}

// Plan is the kind of a commitment.
type Plan string

const (
	// PlanReservation: a term at a discount; every hour of the term is
	// charged (HourlyFee per unit), used or not, and covered usage costs
	// nothing more.
	PlanReservation Plan = "reservation"
	// PlanRetainer: the articles' hybrid plan (pay as you go with a
	// redemption right): a small HourlyFee per unit holds the terms and
	// the capacity, and covered hours are billed at UsageRate.
	PlanRetainer Plan = "retainer"
)

// Payment is how a reservation's term is paid.
type Payment string

const (
	PaymentAllUpfront     Payment = "all_upfront"
	PaymentPartialUpfront Payment = "partial_upfront"
	PaymentNoUpfront      Payment = "no_upfront"
)

// Commitment is a tenant's reservation or retainer. Offering is an
// offering name ("h100.8x") or a family ("h100", matching every offering
// named "h100.*"). A zonal commitment (Zone set) also reserves capacity:
// the scheduler keeps Quantity instances of the offering free for the
// tenant in that zone. Each hour the commitment covers up to Quantity
// instance-hours of the tenant's matching on-demand usage, the largest
// savings first.
type Commitment struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Plan     Plan   `json:"plan"`
	Offering string `json:"offering"`
	Zone     string `json:"zone,omitempty"`
	Quantity int    `json:"quantity"`
	// Payment and DiscountBP (basis points off the on-demand price)
	// describe a reservation; the fees below are fixed at purchase from
	// the price then in force.
	Payment    Payment      `json:"payment,omitempty"`
	DiscountBP int64        `json:"discount_bp"`
	UpfrontFee money.Micros `json:"upfront_fee"`
	// HourlyFee is per unit per hour of the term.
	HourlyFee money.Micros `json:"hourly_fee"`
	// UsageRate is per covered instance-hour (zero for reservations).
	UsageRate      money.Micros `json:"usage_rate"`
	Start          time.Time    `json:"start"`
	End            time.Time    `json:"end"`
	CreatedAt      time.Time    `json:"created_at"`
	IdempotencyKey string       `json:"-"`
	// Tags are the tenant's, and gpucloud's own (gpucloud:stack).
	Tags map[string]string `json:"tags,omitempty"`
}

// Active reports whether the commitment's term covers t.
func (c *Commitment) Active(t time.Time) bool { return !t.Before(c.Start) && t.Before(c.End) }

// SpotRequestType is one-time (one launch) or persistent (relaunched after
// every interruption until cancelled).
type SpotRequestType string

const (
	SpotOneTime    SpotRequestType = "one_time"
	SpotPersistent SpotRequestType = "persistent"
)

// SpotRequestState is where a spot request is.
type SpotRequestState string

const (
	// SpotOpen: waiting for capacity at or below the max price; an
	// instance may be pending for it.
	SpotOpen SpotRequestState = "open"
	// SpotActive: its instance holds capacity.
	SpotActive SpotRequestState = "active"
	// SpotDisabled: interrupted with behaviour stop; the instance is
	// stopped with its volumes, and a start resumes the request.
	SpotDisabled SpotRequestState = "disabled"
	// SpotClosed: a one-time request whose instance ended.
	SpotClosed SpotRequestState = "closed"
	// SpotCancelled: cancelled by the tenant.
	SpotCancelled SpotRequestState = "cancelled"
)

// Pool is a spot market: one offering in one zone.
type Pool struct {
	Offering string `json:"offering"`
	Zone     string `json:"zone"`
}

// String is "offering/zone", the pool's name in the API.
func (p Pool) String() string { return p.Offering + "/" + p.Zone }

// SpotRequest asks for spot capacity in one of its pools (the first is the
// primary, the others are acceptable backups). It keeps one identity across
// relaunches: each launch is a new instance with the request's template and
// the same volumes, and InstanceID names the current one.
type SpotRequest struct {
	ID       string          `json:"id"`
	TenantID string          `json:"tenant_id"`
	Name     string          `json:"name,omitempty"`
	Type     SpotRequestType `json:"type"`
	// MaxPrice caps the hourly price; zero means the on-demand price.
	MaxPrice money.Micros `json:"max_price,omitempty"`
	// Interruption is the behaviour on reclaim: ActionTerminate or
	// ActionStop.
	Interruption string           `json:"interruption"`
	Pools        []Pool           `json:"pools"`
	State        SpotRequestState `json:"state"`
	Reason       string           `json:"reason,omitempty"`
	InstanceID   string           `json:"instance_id,omitempty"`
	// Launches counts the instances launched for the request.
	Launches int `json:"launches"`
	// Template of every launch: the image (canonical; empty: the hosts'
	// default), command, environment, volumes and tags.
	Image   string            `json:"image,omitempty"`
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Volumes []string          `json:"volumes,omitempty"`
	Tags    map[string]string `json:"tags,omitempty"`
	// Subnet and SecurityGroups are the private network of every launch,
	// as the request asked for them: empty, the tenant's default subnet
	// and the network's default group, resolved at each launch.
	Subnet         string   `json:"subnet,omitempty"`
	SecurityGroups []string `json:"security_groups,omitempty"`

	Version        int64     `json:"version"`
	IdempotencyKey string    `json:"-"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// SpotPrice is one point of a pool's price history: the price from Time
// until the next point.
type SpotPrice struct {
	Pool  Pool         `json:"pool"`
	Time  time.Time    `json:"time"`
	Price money.Micros `json:"price"`
}

// Address is a public IP address a tenant holds; it bills from allocation
// to release, attached to an instance or not.
type Address struct {
	ID         string `json:"id"`
	TenantID   string `json:"tenant_id"`
	IP         string `json:"ip"`
	Zone       string `json:"zone,omitempty"`
	InstanceID string `json:"instance_id,omitempty"`
	// Tags are the tenant's, and gpucloud's own (gpucloud:stack).
	Tags       map[string]string `json:"tags,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	ReleasedAt *time.Time        `json:"released_at,omitempty"`
	// IdempotencyKey makes a retried allocation return the first address
	// (unique per tenant; empty: not idempotent).
	IdempotencyKey string `json:"-"`
}

// UsageKind is what a usage record meters.
type UsageKind string

const (
	UsageCompute UsageKind = "compute"
	UsageVolume  UsageKind = "volume"
	UsageAddress UsageKind = "address"
)

// Usage is one entry of the append-only usage ledger: a resource starts
// (On) or stops accruing at Time. The store appends them itself in the
// transaction that makes the change (an instance.state event that crosses
// MeterEdge, a volume created or deleted, an address allocated or
// released), so that no accepted change can miss its ledger entry. Rating
// pairs them into intervals; an Off without an open On is ignored.
type Usage struct {
	ID         int64     `json:"id"`
	Time       time.Time `json:"time"`
	TenantID   string    `json:"tenant_id"`
	Kind       UsageKind `json:"kind"`
	ResourceID string    `json:"resource_id"`
	On         bool      `json:"on"`
	// Compute: offering, zone and market of the instance.
	Offering string `json:"offering,omitempty"`
	Zone     string `json:"zone,omitempty"`
	Market   Market `json:"market,omitempty"`
	// Quantity is GiB for volumes, 1 otherwise.
	Quantity int64 `json:"quantity"`
	// EventID is the instance.state event behind a compute entry.
	EventID int64 `json:"event_id,omitempty"`
	// EndpointID is, for compute, the serverless endpoint the instance is
	// a worker of (empty: none).
	EndpointID string `json:"endpoint_id,omitempty"`
}

// MeterEdge says whether a lifecycle move starts or stops compute metering:
// an instance bills from running until it leaves the states that hold its
// allocation (stopped, terminated, failed, lost, or back to pending). A
// paused instance (an endpoint's warm pool) holds its allocation and bills
// on at the running rate: its resume starts nothing new.
func MeterEdge(from, to State) (on, off bool) {
	if to == Running && from != Running && from != Paused {
		return true, false
	}
	if from.Holds() && !to.Holds() {
		return false, true
	}
	return false, false
}

// Budget is a tenant's monthly spending limit with alert thresholds in
// percent (e.g. 50, 80, 100). Budgets alert; they never stop instances.
type Budget struct {
	TenantID   string       `json:"tenant_id"`
	Amount     money.Micros `json:"amount"`
	Thresholds []int        `json:"thresholds"`
	UpdatedAt  time.Time    `json:"updated_at"`
}

// BudgetAlert records that a tenant's spending in a month crossed a
// threshold; each (tenant, month, threshold) alerts once.
type BudgetAlert struct {
	TenantID  string       `json:"tenant_id"`
	Month     string       `json:"month"` // "2026-12"
	Threshold int          `json:"threshold"`
	Spent     money.Micros `json:"spent"`
	Time      time.Time    `json:"time"`
}

// ReasonExitedOK is the reason of an instance whose workload ended on its
// own with exit code 0: it is stopped, and a spot request that launched it
// is complete.
const ReasonExitedOK = "the workload exited with code 0"

// Event kinds of pricing and billing.
const (
	EventSpotInterruption EventKind = "spot.interruption"
	EventSpotRebalance    EventKind = "spot.rebalance"
	EventSpotRequest      EventKind = "spot.request"
	EventPriceChange      EventKind = "price.change"
	EventCommitment       EventKind = "commitment"
	EventBudgetAlert      EventKind = "budget.alert"
)

// PriceFilter selects prices; zero fields match everything.
type PriceFilter struct {
	Kind     PriceKind
	Offering string
	Zone     string
}

// SpotPriceFilter selects points of price history in time order.
type SpotPriceFilter struct {
	// Pools limits the result to these pools (all when empty).
	Pools []Pool
	Since time.Time
	Until time.Time // zero: no end
	Limit int
}

// SpotRequestFilter selects spot requests in ID order.
type SpotRequestFilter struct {
	TenantID string
	States   []SpotRequestState
}

// UsageFilter selects ledger entries in ID order.
type UsageFilter struct {
	TenantID string
	// Since and Before select entries with Since <= Time < Before (zero:
	// no bound).
	Since   time.Time
	Before  time.Time
	AfterID int64
	Limit   int
}

// BillingTx is the part of Tx that holds prices, commitments, the spot
// market, addresses, the usage ledger and budgets.
type BillingTx interface {
	// AddPrice appends a price version and sets p.ID. A repeated
	// non-empty IdempotencyKey (of any price: prices are the operator's)
	// appends nothing, sets *p to the version added first and returns
	// Conflict whose Details carry "existing_id" (that version's ID, an
	// int64).
	AddPrice(ctx context.Context, p *Price) error
	// ListPrices lists price versions by kind, offering, zone and
	// effective time.
	ListPrices(ctx context.Context, f PriceFilter) ([]*Price, error)
	// PriceByKey finds the price version added with a non-empty
	// idempotency key (prices are the operator's: keys are global);
	// NotFound when there is none.
	PriceByKey(ctx context.Context, key string) (*Price, error)

	// CreateCommitment inserts a commitment; a repeated non-empty
	// IdempotencyKey of the tenant returns Conflict with "existing_id".
	CreateCommitment(ctx context.Context, c *Commitment) error
	GetCommitment(ctx context.Context, id string) (*Commitment, error)
	// CommitmentByKey finds the tenant's commitment created with a
	// non-empty idempotency key; NotFound when there is none.
	CommitmentByKey(ctx context.Context, tenantID, key string) (*Commitment, error)
	// ListCommitments lists a tenant's commitments (all when tenantID is
	// empty) in ID order.
	ListCommitments(ctx context.Context, tenantID string) ([]*Commitment, error)

	// CreateSpotRequest inserts a request with Version 1 (idempotent by
	// key, as CreateInstance).
	CreateSpotRequest(ctx context.Context, r *SpotRequest) error
	GetSpotRequest(ctx context.Context, id string) (*SpotRequest, error)
	ListSpotRequests(ctx context.Context, f SpotRequestFilter) ([]*SpotRequest, error)
	// SpotRequestByKey finds the tenant's spot request created with a
	// non-empty idempotency key; NotFound when there is none.
	SpotRequestByKey(ctx context.Context, tenantID, key string) (*SpotRequest, error)
	// UpdateSpotRequest writes r when the stored version equals r.Version
	// and increments it; Conflict otherwise.
	UpdateSpotRequest(ctx context.Context, r *SpotRequest) error

	// AppendSpotPrices appends price history points.
	AppendSpotPrices(ctx context.Context, ps []SpotPrice) error
	ListSpotPrices(ctx context.Context, f SpotPriceFilter) ([]SpotPrice, error)
	// LatestSpotPrices returns each pool's newest point.
	LatestSpotPrices(ctx context.Context) ([]SpotPrice, error)

	// CreateAddress allocates an address (and appends its usage On);
	// Conflict when the IP is held by an unreleased address. A repeated
	// non-empty IdempotencyKey of the tenant writes nothing (no second
	// usage On), sets *a to the address allocated first and returns
	// Conflict with "existing_id".
	CreateAddress(ctx context.Context, a *Address) error
	GetAddress(ctx context.Context, id string) (*Address, error)
	ListAddresses(ctx context.Context, tenantID string) ([]*Address, error)
	// UpdateAddress writes InstanceID and ReleasedAt; setting ReleasedAt
	// appends the usage Off.
	UpdateAddress(ctx context.Context, a *Address) error

	// ListUsage reads the usage ledger.
	ListUsage(ctx context.Context, f UsageFilter) ([]*Usage, error)
	// OpenUsage returns, in ID order, the On entries before at of the
	// tenant's resources (every tenant's when tenantID is empty) that no
	// Off follows before at: what is still accruing at at. With the
	// entries from at on, it is all that rating a period starting at at
	// needs, however long the ledger's history.
	OpenUsage(ctx context.Context, tenantID string, at time.Time) ([]*Usage, error)

	PutBudget(ctx context.Context, b *Budget) error // upsert
	GetBudget(ctx context.Context, tenantID string) (*Budget, error)
	ListBudgets(ctx context.Context) ([]*Budget, error)
	// RecordBudgetAlert stores an alert; Conflict when that tenant, month
	// and threshold already alerted.
	RecordBudgetAlert(ctx context.Context, a *BudgetAlert) error
	ListBudgetAlerts(ctx context.Context, tenantID string) ([]*BudgetAlert, error)
}

// Owner is the tenant a commitment belongs to.
func (c *Commitment) Owner() string { return c.TenantID }

// Owner is the tenant a spot request belongs to.
func (r *SpotRequest) Owner() string { return r.TenantID }

// Owner is the tenant an address belongs to.
func (a *Address) Owner() string { return a.TenantID }
