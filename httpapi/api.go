// Package httpapi is the server side of gpucloud's /v1 JSON API over HTTP:
// the handlers, the bearer-token authentication, the one table from error
// codes to statuses and the embedded OpenAPI document. The request and
// response bodies are package api's, the agent protocol's are package
// agentapi's, and the Go clients are packages client and agentapi.
//
// Handlers are thin: they decode the request, check the route's access
// (routeTable), call one method of a domain service (package service, which
// holds every rule that changes state) and encode the answer. Every error
// is JSON {code, message, details} with the codes of cloud.Code; statusOf
// maps them to HTTP statuses.
//
// Tenancy: a member acts on its own tenant only, and another tenant's
// resource answers 404 not_found, never 403, so that IDs do not leak. An
// admin acts on every tenant; admin-only routes answer members 403
// permission_denied.
//
// Limits (ratelimit.go): every authenticated request takes a token from
// its credential's bucket, and every failed authentication one from its
// source address's; over either, the answer is 429 rate_limited with
// Retry-After. Request bodies are UTF-8 JSON without a content coding
// (decode.go).
package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/gateway"
	"github.com/gpucloud/gpucloud/relay"
	"github.com/gpucloud/gpucloud/service"
)

// Options configures the handler: its HTTP concerns only. The domain's
// options (the clock, the stop grace, the address pool, the fleet's
// availability, agent certificates) are the services' (service.Options),
// which the caller builds once and hands to New. The zero value uses
// slog.Default and the default limits.
type Options struct {
	// Logger receives the causes of internal errors.
	Logger *slog.Logger
	// Alone, when set, reports whether this server is the only replica
	// that writes the store (no live peer). Then an agent's assignment
	// watch waits for this server's own notes of changes and needs no
	// timer to see another replica's writes (agentAssignments). Nil: it
	// may not be.
	Alone func() bool
	// TokenCacheTTL is how long a token lookup is trusted
	// (DefaultTokenCacheTTL when zero; negative disables the cache).
	TokenCacheTTL time.Duration
	// Metrics serves GET /metrics, to admin tokens only (the exposition
	// counts instances per tenant); nil answers not_found.
	Metrics http.Handler
	// Limits are the request limits (per credential, and failed
	// authentications per source address); the zero value has the
	// defaults (DefaultRateLimits).
	Limits RateLimits
	// Limiter, when set, is the limiter whose buckets the handler's
	// requests take from, and Limits is not used: a server that serves
	// other handlers beside the API (the web console) makes one
	// (NewLimiter) and hands it to them all, so that a user's requests
	// through any of them share one bucket and a failed authentication
	// through any of them counts against its address.
	Limiter *Limiter
	// RequireAgentCert accepts an agent credential only from a connection
	// whose verified TLS client certificate names the credential's host
	// (mutual TLS): a stolen credential alone opens nothing. A server that
	// serves TLS sets it (and service.Options.SignAgentCert); over plain
	// HTTP there is no certificate to check.
	RequireAgentCert bool
	// Relay holds the agents' session control channels that this
	// replica serves (nil: a hub of the handler's own). Exec and port
	// forwards reach only the agents connected to the same hub.
	Relay *relay.Hub
	// Gateway routes serverless endpoints' jobs and requests (nil: the
	// endpoints' run, runsync and HTTP routes answer unavailable); it
	// must reach its workers through Relay.
	Gateway *gateway.Gateway
}

// handlers holds what the handlers share. Its only mutable state is
// caches and the rate limiter's buckets; everything else is in the store.
type handlers struct {
	// svc holds the domain services every handler calls.
	svc *service.Services
	cat *catalog.Catalog
	now func() time.Time
	log *slog.Logger
	mux *http.ServeMux
	// tokens caches token lookups for a short time, keys endpoint keys'
	// (DefaultKeyCacheTTL).
	tokens, keys *tokenCache
	// limits applies the request limits.
	limits *limiter
	// metrics serves GET /metrics (Options.Metrics).
	metrics http.Handler
	// alone is Options.Alone.
	alone func() bool
	// requireAgentCert is Options.RequireAgentCert.
	requireAgentCert bool
	// hub is Options.Relay.
	hub *relay.Hub
	// ports proxies the published HTTP ports (ports.go).
	ports *portsProxy
	// gateway routes serverless endpoints' traffic (Options.Gateway).
	gateway *gateway.Gateway
	// paths holds every route's path without its method, so that a request
	// whose path exists but whose method does not can be told apart from
	// one whose path does not exist (405 rather than 404).
	paths *http.ServeMux
}

// access is who may call a route.
type access int

const (
	// public routes need no token (the agent's join carries its join
	// token in the body, and the handler checks it, under the failed-
	// authentication limit of its source address).
	public access = iota
	// anonymous routes need no token and carry no credential: each
	// request takes from its source address's Anonymous bucket.
	anonymous
	// authed routes need the token of a tenant's user (admin or member);
	// the handler scopes by tenant. Join and agent tokens are refused.
	authed
	// adminOnly routes answer everyone but admins permission_denied.
	adminOnly
	// agentOnly routes need an agent credential, bound to a host; the
	// handler acts on that host only.
	agentOnly
	// invoke routes are an endpoint's calls (run, runsync, status,
	// cancel, the HTTP mode): a user's token, or an endpoint key of that
	// endpoint (the handler answers another endpoint not_found). An
	// endpoint key opens no other route.
	invoke
)

// handlerFunc is a route's handler. It returns an error instead of writing
// one, so that every error goes through writeError.
type handlerFunc func(s *handlers, w http.ResponseWriter, r *http.Request, p principal) error

// route is one entry of the API: the mux registers routeTable and the
// OpenAPI test checks the document against it, so the two cannot drift.
type route struct {
	Method string
	Path   string
	access access
	handle handlerFunc
}

// routeTable lists every route of the API.
var routeTable = []route{
	{"GET", "/v1/openapi.json", anonymous, (*handlers).openAPI},
	{"GET", "/v1/offerings", authed, (*handlers).listOfferings},

	{"POST", "/v1/tenants", adminOnly, (*handlers).createTenant},
	{"GET", "/v1/tenants", adminOnly, (*handlers).listTenants},
	{"POST", "/v1/tenants/{id}/users", adminOnly, (*handlers).createUser},
	{"PUT", "/v1/tenants/{id}/quota", adminOnly, (*handlers).putQuota},
	{"GET", "/v1/tenants/{id}/quota", authed, (*handlers).getQuota},

	{"GET", "/v1/tokens", authed, (*handlers).listTokens},
	{"POST", "/v1/tokens", authed, (*handlers).createToken},
	{"DELETE", "/v1/tokens/{id}", authed, (*handlers).revokeToken},

	{"POST", "/v1/instances", authed, (*handlers).createInstance},
	{"GET", "/v1/instances", authed, (*handlers).listInstances},
	{"GET", "/v1/instances/{id}", authed, (*handlers).getInstance},
	{"POST", "/v1/instances/{id}/stop", authed, (*handlers).stopInstance},
	{"POST", "/v1/instances/{id}/start", authed, (*handlers).startInstance},
	{"POST", "/v1/instances/{id}/terminate", authed, (*handlers).terminateInstance},
	{"GET", "/v1/instances/{id}/events", authed, resourceEvents(func(s *handlers) eventsFunc { return s.svc.Instances.Events })},
	{"POST", "/v1/instances/{id}/protection", authed, (*handlers).protectInstance},
	{"GET", "/v1/events", adminOnly, (*handlers).listEvents},

	{"POST", "/v1/volumes", authed, (*handlers).createVolume},
	{"GET", "/v1/volumes", authed, (*handlers).listVolumes},
	{"GET", "/v1/volumes/{id}", authed, (*handlers).getVolume},
	{"GET", "/v1/volumes/{id}/events", authed, resourceEvents(func(s *handlers) eventsFunc { return s.svc.Volumes.Events })},
	{"POST", "/v1/volumes/{id}/attach", authed, (*handlers).attachVolume},
	{"POST", "/v1/volumes/{id}/detach", authed, (*handlers).detachVolume},
	{"DELETE", "/v1/volumes/{id}", authed, (*handlers).deleteVolume},
	{"POST", "/v1/placement-groups", authed, (*handlers).createPlacementGroup},
	{"GET", "/v1/placement-groups", authed, (*handlers).listPlacementGroups},
	{"GET", "/v1/placement-groups/{id}", authed, (*handlers).getPlacementGroup},
	{"DELETE", "/v1/placement-groups/{id}", authed, (*handlers).deletePlacementGroup},
	{"POST", "/v1/keys", authed, (*handlers).importKey},
	{"GET", "/v1/keys", authed, (*handlers).listKeys},
	{"GET", "/v1/keys/{id}", authed, (*handlers).getKey},
	{"DELETE", "/v1/keys/{id}", authed, (*handlers).deleteKey},

	{"POST", "/v1/networks", authed, (*handlers).createNetwork},
	{"GET", "/v1/networks", authed, (*handlers).listNetworks},
	{"GET", "/v1/networks/{id}", authed, (*handlers).getNetwork},
	{"DELETE", "/v1/networks/{id}", authed, (*handlers).deleteNetwork},
	{"POST", "/v1/subnets", authed, (*handlers).createSubnet},
	{"GET", "/v1/subnets", authed, (*handlers).listSubnets},
	{"GET", "/v1/subnets/{id}", authed, (*handlers).getSubnet},
	{"DELETE", "/v1/subnets/{id}", authed, (*handlers).deleteSubnet},
	{"POST", "/v1/security-groups", authed, (*handlers).createSecurityGroup},
	{"GET", "/v1/security-groups", authed, (*handlers).listSecurityGroups},
	{"GET", "/v1/security-groups/{id}", authed, (*handlers).getSecurityGroup},
	{"DELETE", "/v1/security-groups/{id}", authed, (*handlers).deleteSecurityGroup},
	{"POST", "/v1/security-groups/{id}/authorize", authed, (*handlers).authorizeSecurityGroup},
	{"POST", "/v1/security-groups/{id}/revoke", authed, (*handlers).revokeSecurityGroup},

	{"POST", "/v1/stacks/plan", authed, (*handlers).planStack},
	{"GET", "/v1/stacks", authed, (*handlers).listStacks},
	{"GET", "/v1/stacks/{name}", authed, (*handlers).getStack},
	{"PUT", "/v1/stacks/{name}", authed, (*handlers).applyStack},
	{"DELETE", "/v1/stacks/{name}", authed, (*handlers).destroyStack},
	{"GET", "/v1/stacks/{name}/events", authed, (*handlers).stackEvents},
	{"GET", "/v1/stacks/{name}/drift", authed, (*handlers).stackDrift},

	{"GET", "/v1/instances/{id}/logs", authed, (*handlers).instanceLogs},
	{"GET", "/v1/instances/{id}/exec", authed, (*handlers).exec},
	{"GET", "/v1/instances/{id}/port-forward", authed, (*handlers).portForward},
	{"GET", "/v1/instances/{id}/ssh", authed, (*handlers).instanceSSH},
	{"GET", "/v1/instances/{id}/files", authed, (*handlers).instanceFiles},
	{"GET", "/v1/volumes/{id}/files", authed, (*handlers).volumeFiles},
	{"POST", "/v1/instances/{id}/files/grant", authed, filesGrant("instances")},
	{"POST", "/v1/volumes/{id}/files/grant", authed, filesGrant("volumes")},
	{"POST", "/v1/instances/{id}/port-forward/grant", authed, (*handlers).forwardGrant},
	{"GET", "/v1/tunnels", authed, (*handlers).tunnel},
	// Published HTTP ports (ports.go): every method portMethods lists.
	{"GET", portsPath, authed, (*handlers).openPort},
	{"POST", portsPath, authed, (*handlers).openPort},
	{"PUT", portsPath, authed, (*handlers).openPort},
	{"PATCH", portsPath, authed, (*handlers).openPort},
	{"DELETE", portsPath, authed, (*handlers).openPort},
	{"OPTIONS", portsPath, authed, (*handlers).openPort},

	{"GET", "/v1/prices", authed, (*handlers).listPrices},
	{"POST", "/v1/prices", adminOnly, (*handlers).setPrice},

	{"POST", "/v1/commitments", authed, (*handlers).createCommitment},
	{"GET", "/v1/commitments", authed, (*handlers).listCommitments},
	{"GET", "/v1/commitments/{id}", authed, (*handlers).getCommitment},

	{"GET", "/v1/spot/prices", authed, (*handlers).spotPrices},
	{"GET", "/v1/spot/pools", authed, (*handlers).spotPools},
	{"POST", "/v1/spot/requests", authed, (*handlers).createSpotRequest},
	{"GET", "/v1/spot/requests", authed, (*handlers).listSpotRequests},
	{"GET", "/v1/spot/requests/{id}", authed, (*handlers).getSpotRequest},
	{"POST", "/v1/spot/requests/{id}/cancel", authed, (*handlers).cancelSpotRequest},

	// Serverless endpoints (endpoints.go).
	{"POST", "/v1/endpoints", authed, (*handlers).createEndpoint},
	{"GET", "/v1/endpoints", authed, (*handlers).listEndpoints},
	{"GET", "/v1/endpoints/{id}", authed, (*handlers).getEndpoint},
	{"PATCH", "/v1/endpoints/{id}", authed, (*handlers).updateEndpoint},
	{"DELETE", "/v1/endpoints/{id}", authed, (*handlers).deleteEndpoint},
	{"POST", "/v1/endpoints/{id}/run", invoke, (*handlers).runJob},
	{"POST", "/v1/endpoints/{id}/runsync", invoke, (*handlers).runJobSync},
	{"GET", "/v1/endpoints/{id}/status/{job}", invoke, (*handlers).jobStatus},
	{"POST", "/v1/endpoints/{id}/cancel/{job}", invoke, (*handlers).cancelJob},
	{"POST", "/v1/endpoints/{id}/keys", authed, (*handlers).createEndpointKey},
	{"GET", "/v1/endpoints/{id}/keys", authed, (*handlers).listEndpointKeys},
	{"DELETE", "/v1/endpoints/{id}/keys/{key}", authed, (*handlers).revokeEndpointKey},
	{"GET", endpointHTTPPath, invoke, (*handlers).endpointHTTP},
	{"POST", endpointHTTPPath, invoke, (*handlers).endpointHTTP},
	{"PUT", endpointHTTPPath, invoke, (*handlers).endpointHTTP},
	{"PATCH", endpointHTTPPath, invoke, (*handlers).endpointHTTP},
	{"DELETE", endpointHTTPPath, invoke, (*handlers).endpointHTTP},
	{"OPTIONS", endpointHTTPPath, invoke, (*handlers).endpointHTTP},
	{"POST", "/v1/groups", authed, (*handlers).createGroup},
	{"GET", "/v1/groups", authed, (*handlers).listGroups},
	{"GET", "/v1/groups/{id}", authed, (*handlers).getGroup},
	{"PATCH", "/v1/groups/{id}", authed, (*handlers).updateGroup},
	{"DELETE", "/v1/groups/{id}", authed, (*handlers).deleteGroup},
	{"POST", "/v1/groups/{id}/desired", authed, (*handlers).setGroupDesired},
	{"GET", "/v1/groups/{id}/events", authed, resourceEvents(func(s *handlers) eventsFunc { return s.svc.Groups.Events })},
	{"GET", "/v1/groups/{id}/forecast", authed, (*handlers).groupForecast},
	{"POST", "/v1/metrics", authed, (*handlers).putMetrics},

	{"GET", "/v1/invoices", authed, (*handlers).listInvoices},
	{"PUT", "/v1/budget", authed, (*handlers).putBudget},
	{"GET", "/v1/budget", authed, (*handlers).getBudget},

	{"POST", "/v1/addresses", authed, (*handlers).allocateAddress},
	{"GET", "/v1/addresses", authed, (*handlers).listAddresses},
	{"GET", "/v1/addresses/{id}", authed, (*handlers).getAddress},
	{"POST", "/v1/addresses/{id}/associate", authed, (*handlers).associateAddress},
	{"POST", "/v1/addresses/{id}/disassociate", authed, (*handlers).disassociateAddress},
	{"DELETE", "/v1/addresses/{id}", authed, (*handlers).releaseAddress},

	{"GET", "/v1/hosts", adminOnly, (*handlers).listHosts},
	{"POST", "/v1/hosts/{id}/cordon", adminOnly, (*handlers).cordonHost},
	{"POST", "/v1/hosts/{id}/uncordon", adminOnly, (*handlers).uncordonHost},
	{"POST", "/v1/hosts/{id}/drain", adminOnly, (*handlers).drainHost},
	{"POST", "/v1/hosts/{id}/remove", adminOnly, (*handlers).removeHost},

	{"POST", "/v1/join-tokens", adminOnly, (*handlers).createJoinToken},
	{"GET", "/v1/join-tokens", adminOnly, (*handlers).listJoinTokens},
	{"POST", "/v1/agent/join", public, (*handlers).agentJoin},
	{"POST", "/v1/agent/heartbeat", agentOnly, (*handlers).agentHeartbeat},
	{"GET", "/v1/agent/assignments", agentOnly, (*handlers).agentAssignments},
	{"GET", "/v1/agent/networks", agentOnly, (*handlers).agentNetworks},
	{"POST", "/v1/agent/instances/{id}/status", agentOnly, (*handlers).agentStatus},
	{"POST", "/v1/agent/instances/{id}/logs", agentOnly, (*handlers).agentLogs},
	{"POST", "/v1/agent/instances/{id}/scale-in-lock", agentOnly, (*handlers).agentScaleInLock},
	{"POST", "/v1/agent/metrics", agentOnly, (*handlers).agentMetrics},
	{"POST", "/v1/agent/gone", agentOnly, (*handlers).agentGone},
	{"POST", "/v1/agent/direct-sessions", agentOnly, (*handlers).agentDirectSessions},
	{"GET", "/v1/agent/sessions", agentOnly, (*handlers).agentSessions},
	{"GET", "/v1/agent/sessions/{id}", agentOnly, (*handlers).agentSession},

	{"GET", "/metrics", adminOnly, (*handlers).serveMetrics},
}

// New returns the API handler over the services svc, which hold the
// store, the catalog and the clock. It holds no global state: two
// handlers over two stores are independent.
func New(svc *service.Services, opts Options) http.Handler {
	ttl := opts.TokenCacheTTL
	if ttl == 0 {
		ttl = DefaultTokenCacheTTL
	}
	s := &handlers{svc: svc, cat: svc.Catalog(), now: svc.Now, log: opts.Logger,
		mux: http.NewServeMux(), paths: http.NewServeMux(), tokens: newTokenCache(ttl), keys: newTokenCache(keyCacheTTL(ttl)), metrics: opts.Metrics,
		requireAgentCert: opts.RequireAgentCert, hub: opts.Relay, gateway: opts.Gateway, alone: opts.Alone}
	if s.hub == nil {
		s.hub = relay.NewHub()
	}
	if s.requireAgentCert && ttl > 0 {
		s.tokens.agentTTL = DefaultAgentTokenCacheTTL
	}
	s.ports = newPortsProxy(s)
	if opts.Limiter != nil {
		s.limits = opts.Limiter.l
	} else {
		s.limits = newLimiter(opts.Limits, s.svc.Accounts.RequestRate)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	seen := map[string]bool{}
	for _, rt := range routeTable {
		s.mux.Handle(rt.Method+" "+rt.Path, s.wrap(rt))
		if !seen[rt.Path] {
			seen[rt.Path] = true
			s.paths.Handle(rt.Path, http.NotFoundHandler())
		}
	}
	s.mux.HandleFunc("/", s.fallback)
	return s.mux
}

// wrap authenticates a request for rt, takes it from its credential's
// request limit, authorizes it, runs its handler and answers its error.
// The agents' routes run in the store's fleet lane.
func (s *handlers) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				writeError(w, r, s.log, fmt.Errorf("panic in %s %s: %v", rt.Method, rt.Path, v))
			}
		}()
		if rt.access == agentOnly {
			// The agents' protocol takes its own turns at the store
			// (cloud.LaneFleet), its credentials' look-ups included.
			r = r.WithContext(cloud.WithLane(r.Context(), cloud.LaneFleet))
		}
		var p principal
		if rt.access == anonymous {
			if err := s.limits.allowAnonymous(r); err != nil {
				writeError(w, r, s.log, err)
				return
			}
		}
		if rt.access != public && rt.access != anonymous {
			var err error
			if p, err = s.authenticate(r); err != nil {
				writeError(w, r, s.log, err)
				return
			}
			if err := s.limits.allow(r.Context(), p, rt); err != nil {
				s.refused(r, rt, p)
				writeError(w, r, s.log, err)
				return
			}
			if err := allowed(rt, p); err != nil {
				writeError(w, r, s.log, err)
				return
			}
		}
		if err := rt.handle(s, w, r, p); err != nil {
			writeError(w, r, s.log, err)
		}
	})
}

// keyCacheTTL is the endpoint keys' cache time for a token cache time
// ttl: DefaultKeyCacheTTL, or ttl when shorter (negative: no cache).
func keyCacheTTL(ttl time.Duration) time.Duration {
	return min(ttl, DefaultKeyCacheTTL)
}

// allowed checks the principal's role against the route's access.
func allowed(rt route, p principal) error {
	deny := func(msg string) error {
		return &cloud.Error{Code: cloud.PermissionDenied, Message: rt.Method + " " + rt.Path + " " + msg,
			Details: map[string]any{"role": p.Role}}
	}
	switch rt.access {
	case authed:
		if !p.admin() && p.Role != cloud.RoleMember {
			return deny("is for users' tokens; agent and join tokens open only the /v1/agent routes, endpoint keys only their endpoint's calls")
		}
	case invoke:
		if !p.admin() && p.Role != cloud.RoleMember && p.Role != cloud.RoleInvoke {
			return deny("is for users' tokens and endpoint keys")
		}
	case adminOnly:
		if !p.admin() {
			return deny("is for admins only")
		}
	case agentOnly:
		if p.Role != cloud.RoleAgent || p.HostID == "" {
			return deny("is for agent credentials, which POST /v1/agent/join issues")
		}
	}
	return nil
}

// fallback answers paths and methods the API does not have, in the API's
// error shape rather than net/http's plain text.
func (s *handlers) fallback(w http.ResponseWriter, r *http.Request) {
	if _, pattern := s.paths.Handler(r); pattern != "" && pattern != "/" {
		var allow []string
		for _, rt := range routeTable {
			if rt.Path == pattern {
				allow = append(allow, rt.Method)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, r, s.log, &statusError{status: http.StatusMethodNotAllowed, err: &cloud.Error{
			Code:    cloud.Invalid,
			Message: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")),
			Details: map[string]any{"allow": allow}}})
		return
	}
	writeError(w, r, s.log, &cloud.Error{Code: cloud.NotFound,
		Message: "no such route: " + r.Method + " " + r.URL.Path + "; GET /v1/openapi.json lists the routes",
		Details: map[string]any{"path": r.URL.Path}})
}

// serveMetrics answers the Prometheus exposition of Options.Metrics; the
// route table has already checked that the token is an admin's.
func (s *handlers) serveMetrics(w http.ResponseWriter, r *http.Request, p principal) error {
	if s.metrics == nil {
		return &cloud.Error{Code: cloud.NotFound, Message: "this server does not serve metrics"}
	}
	s.metrics.ServeHTTP(w, r)
	return nil
}

// listOfferings answers the catalog's offerings, with the fleet's
// availability of each when this server knows it.
func (s *handlers) listOfferings(w http.ResponseWriter, r *http.Request, p principal) error {
	writeJSON(w, http.StatusOK, api.OfferingList{Offerings: s.cat.Offerings(), Availability: s.svc.Availability()})
	return nil
}
