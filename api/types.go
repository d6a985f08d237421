package api

import (
	"encoding/json"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// The request and response bodies of the API. The server decodes requests
// into these types with unknown fields rejected, and the client sends and
// receives the same types, so the two agree by construction. Domain objects
// (instances, volumes, ...) travel as the cloud package's types.

// CreateTenantRequest is the body of POST /v1/tenants.
type CreateTenantRequest struct {
	// Name is unique among tenants.
	Name string `json:"name"`
}

// CreateUserRequest is the body of POST /v1/tenants/{id}/users.
type CreateUserRequest struct {
	Name string `json:"name"`
	// Role defaults to member; admin is only allowed in the operator tenant,
	// because an admin acts on every tenant.
	Role cloud.Role `json:"role,omitempty"`
}

// CreatedUser answers POST /v1/tenants/{id}/users: the user and its first
// token. Secret is shown this once; the server keeps only its hash.
type CreatedUser struct {
	User   *cloud.User  `json:"user"`
	Token  *cloud.Token `json:"token"`
	Secret string       `json:"secret"`
}

// CreateTokenRequest is the body of POST /v1/tokens. The token belongs to
// the calling user and has its role.
type CreateTokenRequest struct {
	Name string `json:"name,omitempty"`
	// ExpiresAt, when set, must be in the future.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// CreatedToken answers POST /v1/tokens and POST /v1/join-tokens: a token
// just made and its secret, shown this once.
type CreatedToken struct {
	Token  *cloud.Token `json:"token"`
	Secret string       `json:"secret"`
}

// QuotaSpec is the body of PUT /v1/tenants/{id}/quota (cloud.Quota has
// the meaning of each field). Zero values mean no limit, or for the
// request rate the server's default. GPU model names may be aliases; the
// server stores canonical names.
type QuotaSpec struct {
	Instances         int                `json:"instances,omitempty"`
	GPUs              map[string]float64 `json:"gpus,omitempty"`
	GPUsPerModel      float64            `json:"gpus_per_model,omitempty"`
	RequestsPerSecond int                `json:"requests_per_second,omitempty"`
	Burst             int                `json:"burst,omitempty"`
}

// QuotaStatus answers the quota routes: the limits and what the tenant
// holds against them now.
type QuotaStatus struct {
	cloud.Quota
	Used Usage `json:"used"`
}

// Usage is what a tenant's non-terminated instances hold: their number and
// whole-GPU equivalents per canonical GPU model.
type Usage struct {
	Instances int                `json:"instances"`
	GPUs      map[string]float64 `json:"gpus,omitempty"`
}

// CreateInstanceRequest is the body of POST /v1/instances. One call creates
// one instance.
type CreateInstanceRequest struct {
	// Tenant is for admins creating an instance for another tenant (it may
	// also be given as ?tenant=); members leave it empty.
	Tenant string `json:"tenant,omitempty"`
	Name   string `json:"name,omitempty"`
	// Offering names a catalog offering (GET /v1/offerings).
	Offering string `json:"offering"`
	// Image is the OCI image the workload runs in ("python:3.12",
	// "ghcr.io/acme/train:1"), stored in canonical form
	// ("docker.io/library/python:3.12"); empty: the operator's default
	// image.
	Image string `json:"image,omitempty"`
	// Zones and Labels constrain placement; labels are selectors such as
	// "driver>=550" or "!maintenance".
	Zones  []string `json:"zones,omitempty"`
	Labels []string `json:"labels,omitempty"`
	// PlacementGroup is the ID of one of the tenant's placement groups
	// (POST /v1/placement-groups): cluster keeps its members on one NVLink
	// island or rack fabric, spread on different hosts.
	PlacementGroup string `json:"placement_group,omitempty"`
	// Subnet is the ID of one of the tenant's subnets (POST /v1/subnets);
	// empty: the tenant's default subnet, in its default network, made on
	// first use. The subnet's zone, when it has one, is the instance's.
	Subnet string `json:"subnet,omitempty"`
	// SecurityGroups are one to five IDs of security groups of the
	// subnet's network; none: the network's default group.
	SecurityGroups []string `json:"security_groups,omitempty"`
	// Command, Env and Volumes describe the workload.
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Volumes lists volume IDs of the same tenant to attach; each must be
	// detached now.
	Volumes []string          `json:"volumes,omitempty"`
	Tags    map[string]string `json:"tags,omitempty"`
	// Publish lists TCP ports inside the instance (1 to 65535, at most 8,
	// each once) that its tenant opens as HTTP through the server at
	// /v1/instances/{id}/ports/{port}/ (docs/ACCESS.md).
	Publish []int `json:"publish,omitempty"`
	// PublishKeepPrefix lists published ports (each one of Publish) whose
	// requests keep their whole path, the /v1/instances/{id}/ports/{port}
	// prefix included, for servers given that prefix as their base URL
	// (Jupyter, TensorBoard).
	PublishKeepPrefix []int `json:"publish_keep_prefix,omitempty"`
}

// InstanceList answers GET /v1/instances. Next, when not empty, is the
// ?after value of the following page.
type InstanceList struct {
	Instances []*cloud.Instance `json:"instances"`
	Next      string            `json:"next,omitempty"`
}

// EventList answers the event routes. Next, when not empty, is the ?after
// value of the following page.
type EventList struct {
	Events []*cloud.Event `json:"events"`
	Next   string         `json:"next,omitempty"`
}

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant  string `json:"tenant,omitempty"`
	Name    string `json:"name"`
	SizeGiB int64  `json:"size_gib"`
	Zone    string `json:"zone,omitempty"`
	// Kind is "block" (the default) or "shared" (see cloud.VolumeKind).
	Kind cloud.VolumeKind `json:"kind,omitempty"`
	// Tags are the tenant's (no "gpucloud:" prefix).
	Tags map[string]string `json:"tags,omitempty"`
}

// AttachVolumeRequest is the body of POST /v1/volumes/{id}/attach.
type AttachVolumeRequest struct {
	InstanceID string `json:"instance_id"`
}

// OfferingList answers GET /v1/offerings.
type OfferingList struct {
	Offerings []*catalog.Offering `json:"offerings"`
	// Availability says, per offering name, whether the fleet can run it.
	// It is present only when the answering server knows the fleet (the
	// leader, once its scheduler has built the fleet index); a client
	// treats a missing entry as "unknown", not as "no".
	Availability map[string]OfferingAvailability `json:"availability,omitempty"`
}

// OfferingAvailability is what the fleet can do for one offering
// (cloud.OfferingAvailability).
type OfferingAvailability = cloud.OfferingAvailability

// TenantList, TokenList, VolumeList and HostList answer the list routes.
type (
	TenantList struct {
		Tenants []*cloud.Tenant `json:"tenants"`
	}
	TokenList struct {
		Tokens []*cloud.Token `json:"tokens"`
	}
	VolumeList struct {
		Volumes []*cloud.Volume `json:"volumes"`
	}
	HostList struct {
		Hosts []*cloud.Host `json:"hosts"`
	}
)

// DrainResult is the answer to POST /v1/hosts/{id}/drain.
type DrainResult struct {
	Host     string            `json:"host"`
	Stopping []*cloud.Instance `json:"stopping"`
}

// CreateJoinTokenRequest is the body of POST /v1/join-tokens (admin).
type CreateJoinTokenRequest struct {
	// Name says what the token is for ("rack-12", "ci"); it is required,
	// so that the token list tells join tokens apart when one is revoked.
	Name string `json:"name"`
	// ExpiresAt, when set, must be in the future. A join token without it
	// expires after 24 hours.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// MaxUses is how many hosts the token joins: 0 is 1, a token for one
	// host; a fleet's token says how many (at most 10,000). A join past
	// the last use is refused (Conflict, details reason
	// join_token_used_up).
	MaxUses int `json:"max_uses,omitempty"`
}

// RemoveHostResult is the answer to POST /v1/hosts/{id}/remove: the host,
// and how many of its agent's credentials were revoked.
type RemoveHostResult struct {
	Host    string `json:"host"`
	Revoked int    `json:"revoked"`
}

// LogPage answers GET /v1/instances/{id}/logs: the instance's output from
// Start on, and the Offset to ask for next. Offsets count bytes of the
// whole output; Start is greater than the offset asked for when the
// server dropped that output to keep the log under its cap (the newest
// 8 MiB are kept). Output that is not valid UTF-8 shows U+FFFD in place of
// the bad bytes.
type LogPage struct {
	Data   string `json:"data"`
	Offset int64  `json:"offset"`
	Start  int64  `json:"start"`
}

// SetPriceRequest is the body of POST /v1/prices (admin): a new version of
// a price.
type SetPriceRequest struct {
	// Kind is compute (the default), volume or address.
	Kind cloud.PriceKind `json:"kind,omitempty"`
	// Offering is required for compute prices and must be in the catalog;
	// volume and address prices leave it out.
	Offering string `json:"offering,omitempty"`
	// Zone, when set, prices that zone only; empty is every zone without
	// a price of its own.
	Zone string `json:"zone,omitempty"`
	// Amount is per hour (compute, address) or per GiB-month (volume), a
	// decimal string such as "12.50"; 0 or more.
	Amount money.Micros `json:"amount"`
	// EffectiveAt defaults to now and may not be earlier than a minute
	// ago: history is never rewritten.
	EffectiveAt *time.Time `json:"effective_at,omitempty"`
}

// PriceList answers GET /v1/prices.
type PriceList struct {
	Prices []*cloud.Price `json:"prices"`
}

// InvoiceList answers GET /v1/invoices; T is *billing.Invoice. It is
// generic because billing is a server-side package that api does not
// import: the handler and the client both use InvoiceList[*billing.Invoice].
type InvoiceList[T any] struct {
	Invoices []T `json:"invoices"`
}

// CreateCommitmentRequest is the body of POST /v1/commitments.
type CreateCommitmentRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant string     `json:"tenant,omitempty"`
	Plan   cloud.Plan `json:"plan"`
	// Offering is an offering name ("h100.8x") or a family ("h100": every
	// offering named "h100.*"). A family's fees are fixed from the
	// on-demand price of its cheapest offering.
	Offering string `json:"offering"`
	// Zone, when set, also reserves capacity in that zone.
	Zone     string `json:"zone,omitempty"`
	Quantity int    `json:"quantity"`
	// Term is "1y", "3y" or a Go duration such as "720h" (at least 1h, at
	// most 5y).
	Term string `json:"term"`
	// Payment is how a reservation is paid (default no_upfront); a
	// retainer leaves it out.
	Payment cloud.Payment `json:"payment,omitempty"`
	// DiscountPct overrides the default discount table, in percent with
	// at most two decimals ("37.5"); admins only.
	DiscountPct json.Number `json:"discount_pct,omitempty"`
	// Start defaults to now and may not be more than a minute in the past.
	Start *time.Time `json:"start,omitempty"`
	// Tags are the tenant's (no "gpucloud:" prefix).
	Tags map[string]string `json:"tags,omitempty"`
}

// CommitmentList answers GET /v1/commitments.
type CommitmentList struct {
	Commitments []*cloud.Commitment `json:"commitments"`
}

// SpotPriceList answers GET /v1/spot/prices: points of price history in
// time order.
type SpotPriceList struct {
	Prices []cloud.SpotPrice `json:"prices"`
}

// SpotPool is a pool's newest spot price with the on-demand price of its
// offering in its zone (absent when there is none), and how often its spot
// instances were reclaimed recently: over the WindowSeconds before now,
// Reclaims notices and SpotSeconds instance-seconds of spot usage, every
// tenant's together. ReclaimRateBP is reclaims per spot instance-hour in
// basis points (Reclaims × 3600 × 10000 / SpotSeconds, rounded down; 0
// without spot seconds): 500 is 0.05 reclaims per instance-hour.
type SpotPool struct {
	cloud.Pool
	Price         money.Micros  `json:"price"`
	Time          time.Time     `json:"time"`
	OnDemand      *money.Micros `json:"on_demand,omitempty"`
	WindowSeconds int64         `json:"window_seconds"`
	Reclaims      int64         `json:"reclaims"`
	SpotSeconds   int64         `json:"spot_seconds"`
	ReclaimRateBP int64         `json:"reclaim_rate_bp"`
}

// SpotPoolList answers GET /v1/spot/pools.
type SpotPoolList struct {
	Pools []SpotPool `json:"pools"`
}

// CreateSpotRequestRequest is the body of POST /v1/spot/requests.
type CreateSpotRequestRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant string `json:"tenant,omitempty"`
	Name   string `json:"name,omitempty"`
	// Type is one_time (the default) or persistent.
	Type cloud.SpotRequestType `json:"type,omitempty"`
	// MaxPrice caps the hourly price; absent means the on-demand price.
	MaxPrice *money.Micros `json:"max_price,omitempty"`
	// Interruption is terminate (the default) or stop, for either type: a
	// stopped instance keeps its volumes and resumes with the request.
	Interruption string `json:"interruption,omitempty"`
	// Pools are the acceptable pools, the first preferred: 1 to 8
	// distinct ones, offerings of the catalog; an empty zone is any zone.
	Pools []cloud.Pool `json:"pools"`
	// Image of every launch, as an instance's (empty: the operator's
	// default image).
	Image   string            `json:"image,omitempty"`
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Volumes []string          `json:"volumes,omitempty"`
	Tags    map[string]string `json:"tags,omitempty"`
	// Subnet and SecurityGroups put every launch on a private network, as
	// in CreateInstanceRequest: a subnet of the tenant (whose zone, when
	// it has one, every pool must allow), one to five groups of its
	// network; absent, the tenant's default subnet and group.
	Subnet         string   `json:"subnet,omitempty"`
	SecurityGroups []string `json:"security_groups,omitempty"`
}

// SpotRequestList answers GET /v1/spot/requests.
type SpotRequestList struct {
	Requests []*cloud.SpotRequest `json:"requests"`
}

// BudgetSpec is the body of PUT /v1/budget.
type BudgetSpec struct {
	// Amount is the monthly limit, more than 0.
	Amount money.Micros `json:"amount"`
	// Thresholds are alert levels in percent of Amount, 1..1000 each;
	// [50, 80, 100] when absent.
	Thresholds []int `json:"thresholds,omitempty"`
}

// BudgetStatus answers the budget routes: the budget (null when none is
// set), what the tenant spent this month so far, rated live, and the
// alerts fired this month.
type BudgetStatus struct {
	TenantID string               `json:"tenant_id"`
	Budget   *cloud.Budget        `json:"budget"`
	Month    string               `json:"month"`
	Spent    money.Micros         `json:"spent"`
	Alerts   []*cloud.BudgetAlert `json:"alerts"`
}

// AllocateAddressRequest is the body of POST /v1/addresses.
type AllocateAddressRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant string `json:"tenant,omitempty"`
	// Zone defaults to the instance's zone when InstanceID is set.
	Zone string `json:"zone,omitempty"`
	// InstanceID, when set, associates the address at once with this
	// instance of the tenant, which must not be terminated.
	InstanceID string `json:"instance_id,omitempty"`
	// Tags are the tenant's (no "gpucloud:" prefix).
	Tags map[string]string `json:"tags,omitempty"`
}

// AssociateAddressRequest is the body of POST /v1/addresses/{id}/associate.
type AssociateAddressRequest struct {
	InstanceID string `json:"instance_id"`
}

// AddressList answers GET /v1/addresses.
type AddressList struct {
	Addresses []*cloud.Address `json:"addresses"`
}

// CreatePlacementGroupRequest is the body of POST /v1/placement-groups.
type CreatePlacementGroupRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant string `json:"tenant,omitempty"`
	// Name is unique among the tenant's live placement groups.
	Name string `json:"name"`
	// Strategy is cluster (members on one NVLink island or rack fabric)
	// or spread (members on different hosts; racks with by_rack).
	Strategy cloud.PlacementStrategy `json:"strategy"`
	ByRack   bool                    `json:"by_rack,omitempty"`
	Tags     map[string]string       `json:"tags,omitempty"`
}

// PlacementGroupList answers GET /v1/placement-groups.
type PlacementGroupList struct {
	PlacementGroups []*cloud.PlacementGroup `json:"placement_groups"`
}

// ImportKeyRequest is the body of POST /v1/keys.
type ImportKeyRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant string `json:"tenant,omitempty"`
	// Name is unique among the tenant's keys; empty: derived from the
	// key's comment (me@laptop → me-laptop), or from its fingerprint.
	Name string `json:"name,omitempty"`
	// PublicKey is one OpenSSH public key, as in an authorized_keys file
	// or a .pub file: "ssh-ed25519 AAAA... comment".
	PublicKey string `json:"public_key"`
}

// KeyList answers GET /v1/keys.
type KeyList struct {
	Keys []*cloud.Key `json:"keys"`
}

// DirectGrant answers POST /v1/instances/{id}/files/grant,
// /v1/volumes/{id}/files/grant and /v1/instances/{id}/port-forward/grant:
// a direct session's grant and where to use it (docs/DATA.md, "Direct
// copies"). The client dials Address over TLS 1.3, trusts the certificate
// whose fingerprint is Fingerprint, and sends Grant; connections may be
// opened until ExpiresAt.
type DirectGrant struct {
	HostID      string    `json:"host_id"`
	Address     string    `json:"address"`
	Fingerprint string    `json:"fingerprint"`
	Grant       string    `json:"grant"`
	SessionID   string    `json:"session_id"`
	ExpiresAt   time.Time `json:"expires_at"`
}
