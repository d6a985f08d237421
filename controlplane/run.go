// Package serve runs a gpucloud server process: it opens the store, serves
// the /v1 API, campaigns for leadership, and runs the controllers of
// package controller while it leads: one list, built in one place
// (Replica.controllerList), stepped in order by a controller.Loop.
package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/gpucloud/gpucloud/agentapi"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/console"
	"github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/gateway"
	"github.com/gpucloud/gpucloud/httpapi"
	"github.com/gpucloud/gpucloud/internal/batchconn"
	"github.com/gpucloud/gpucloud/internal/imageref"
	"github.com/gpucloud/gpucloud/internal/pki"
	"github.com/gpucloud/gpucloud/metrics"
	"github.com/gpucloud/gpucloud/relay"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/spot"
	"github.com/gpucloud/gpucloud/stackengine"
	"github.com/gpucloud/gpucloud/store/postgres"
	"github.com/gpucloud/gpucloud/store/sqlite"
)

// Config configures a server process.
type Config struct {
	// DB is "sqlite://PATH" (embedded; the default) or "postgres://...".
	DB string
	// Listen is the API address, e.g. "127.0.0.1:8080" (":0" picks a port).
	Listen  string
	Catalog *catalog.Catalog
	// ScheduleInterval is how often the scheduler looks at pending
	// instances (200 ms when zero); HeartbeatTimeout when a silent host
	// becomes unhealthy (30 s when zero; hosts are checked four times per
	// timeout).
	ScheduleInterval time.Duration
	HeartbeatTimeout time.Duration
	Log              *slog.Logger
	Now              func() time.Time

	// Spot configures the spot market (price floor, smoothing, notice);
	// the zero value is spot.DefaultConfig(). PoolNotice overrides the
	// reclaim notice per pool ("offering/zone") or offering; at least 30 s.
	Spot       *spot.Config
	PoolNotice map[string]time.Duration
	// SpotClearInterval is how often spot prices clear (10 s when zero);
	// KeepFailed how long a failed spot instance is kept for inspection
	// before its persistent request relaunches (10 min when zero);
	// BudgetInterval how often budgets are checked (1 min when zero).
	// Intervals are measured on Now.
	SpotClearInterval time.Duration
	KeepFailed        time.Duration
	BudgetInterval    time.Duration
	// GroupInterval is how often the autoscaling group controller runs
	// (10 s when zero).
	GroupInterval time.Duration
	// StackInterval is how often the stack controller runs a round of
	// the stacks being applied or destroyed
	// (controller.DefaultStackInterval when zero).
	StackInterval time.Duration
	// EndpointInterval is how often the endpoint controller sizes the
	// serverless endpoints (every controller tick when zero);
	// GatewayRefresh how often the gateway reads the endpoints' workers
	// (gateway.DefaultRefresh when zero).
	EndpointInterval time.Duration
	GatewayRefresh   time.Duration
	// MarketInterval is how often the spot market drives requests and
	// watches prices (1 s when zero); reclaim deadlines are enforced by the
	// scheduler on every step regardless.
	MarketInterval time.Duration
	// TLS says how the API is served: TLS 1.3 with the cloud's own CA by
	// default (see TLS).
	TLS TLS
	// CAKey is the operator's key that encrypts the CA's private key in
	// the store (service.LoadCA); nil keeps it in plaintext, with a
	// warning at start.
	CAKey *service.CAKeyWrap
	// Limits are the request limits of the API and the web console, one
	// limiter for both: per credential (members, admins, agents; a
	// tenant's quota overrides its users'; a user's console pages take
	// from the user's bucket), failed authentications per source address
	// (bad tokens and bad session cookies alike), and the reverse proxies
	// whose X-Forwarded-For names the client. The zero value has the
	// defaults (httpapi.DefaultRateLimits). They hold per replica.
	Limits httpapi.RateLimits
	// StopGrace is how long an agent waits between SIGTERM and SIGKILL
	// when it stops an instance (service.DefaultStopGrace when zero);
	// AddressPool is the IPv4 block public addresses come from
	// (service.DefaultAddressPool when empty).
	StopGrace   time.Duration
	AddressPool string
	// AllowRegistries are the registries images may name although their
	// host is a loopback, link-local or private address
	// (service.Options.AllowRegistries); empty allows none.
	AllowRegistries imageref.AllowList
	// SessionLimit is how many interactive sessions (exec, port forwards)
	// one user may have open at once (service.DefaultSessionLimit when
	// zero).
	SessionLimit int
	// CreateBatches is how many tenants' batches of creates are committed
	// at once (service.Options.CreateBatches); zero picks by store:
	// service.DefaultCreateBatches on PostgreSQL, any number on SQLite
	// (whose one connection runs them in turn anyway).
	CreateBatches int
	// DirectAccess lets tenants copy files straight to the agents that
	// listen for it, with grants the cloud's CA signs (docs/DATA.md,
	// "Direct copies"). It needs TLS (a plain-HTTP server has no CA to
	// sign with).
	DirectAccess bool
	// Replica names this replica in the session records, so that at its
	// start it closes only the sessions it left open; the host name when
	// empty. Replicas that share a database need distinct, stable names:
	// the name is also the replica's ID in the replica registry.
	Replica string
	// ReplicaAddress is the host:port the other replicas reach this one
	// at, to forward sessions to the agents it holds (docs/CONTROL_PLANE.md,
	// "Several replicas"); the listener's address when empty (the host's
	// name for an unspecified address). The server certificate must
	// cover its host. ReplicaHeartbeat is how often the replica writes
	// its record (service.DefaultReplicaHeartbeat when zero), ReplicaTTL
	// how old a record may be before its replica is gone
	// (service.DefaultReplicaTTL when zero). The registry runs on
	// PostgreSQL only: a SQLite store has one server.
	ReplicaAddress   string
	ReplicaHeartbeat time.Duration
	ReplicaTTL       time.Duration
}

// DefaultSessionLimit is Config.SessionLimit's default.
const DefaultSessionLimit = service.DefaultSessionLimit

// DefaultCreateBatches is Config.CreateBatches' default on PostgreSQL.
const DefaultCreateBatches = service.DefaultCreateBatches

// Replica is a running control-plane process (one of several that may share a store): the API on a listener, and the
// controllers, which run only while this replica is the leader.
type Replica struct {
	// Store is the store every writer of the replica uses: the one it
	// opened, wrapped so that writes the agents' network views and
	// assignments show are noted (service.WatchNetworks,
	// service.WatchAssignments); service.Unwrap reaches the store.
	Store cloud.Store
	// netChanges and asgChanges are the notifiers Store feeds.
	netChanges *service.NetworkChanges
	asgChanges *service.AssignmentChanges
	// URL is the API's base URL: https:// unless Config.TLS.Plain.
	URL string
	// AdminToken is set on the very first start, when the operator tenant
	// and its admin token were created; it is shown once.
	AdminToken string
	// Services are the domain services, built once (newServices): the
	// API, the console and the controllers share them.
	Services  *service.Services
	Scheduler *controller.Scheduler
	Market    *controller.SpotMarket
	// Gateway routes serverless endpoints' traffic on this replica
	// (package gateway), over the same relay as exec and ports.
	Gateway *gateway.Gateway
	// Controllers is what the leader runs, in order (controllerList).
	Controllers []controller.Controller
	// Metrics is the replica's Prometheus registry, served at GET
	// /metrics on the API listener to admin tokens (MetricsURL).
	Metrics *metrics.Registry

	http *http.Server
	ca   *pki.CA
	// hub holds the agents' control channels on this replica; reg is
	// the replica registry's view (nil on SQLite).
	hub    *relay.Hub
	reg    *registry
	cancel context.CancelFunc
	// stopControllers ends the campaign and the controllers (StopControllers).
	stopControllers func()
	// loop is the controllers' loop while this replica leads (nil
	// otherwise): the gateway kicks it when a request finds no ready
	// worker.
	loop   atomic.Pointer[controller.Loop]
	wg     sync.WaitGroup
	leader *leaderState
}

// OpenStore opens the store named by a URL.
func OpenStore(ctx context.Context, url string) (cloud.Store, error) {
	switch {
	case strings.HasPrefix(url, "sqlite://"):
		return sqlite.Open(ctx, strings.TrimPrefix(url, "sqlite://"))
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return postgres.Open(ctx, url)
	}
	return nil, fmt.Errorf("--db %q: want sqlite://PATH or postgres://...", url)
}

// Start opens the store (applying migrations), creates the operator's
// admin token on the first start, serves the API and starts campaigning
// for leadership. Close stops everything.
//
// Start is the composition root: it builds the domain services once
// (newServices) and hands the same services to the API, the console and
// the controllers.
func Start(ctx context.Context, cfg Config) (*Replica, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	st, err := OpenStore(ctx, cfg.DB)
	if err != nil {
		return nil, err
	}
	// Every writer (the services and the controllers) writes through the
	// one store that notes what the agents' network views show.
	changes, asg := service.NewNetworkChanges(), service.NewAssignmentChanges()
	s := &Replica{Store: service.WatchAssignments(service.WatchNetworks(st, changes), asg), netChanges: changes, asgChanges: asg,
		Metrics: metrics.NewRegistry(), leader: &leaderState{}}
	ln, err := s.start(ctx, cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	s.serveHTTP(ln, cfg.Log)
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.Gateway.Run(runCtx)
	}()
	if s.reg != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.runRegistry(runCtx, cfg)
		}()
		// The other replicas' assignment and network changes, and ours
		// to them; a sender of its own per start, since two replicas may
		// share a name (the host's, by default).
		if pg, ok := st.(*postgres.Store); ok {
			s.carryReplicaChanges(ctx, runCtx, pg, s.reg.id+"/"+service.NewID("start"), cfg.Log)
		}
	}
	ctrlCtx, stopCtrl := context.WithCancel(runCtx)
	ctrlDone := make(chan struct{})
	s.stopControllers = func() {
		stopCtrl()
		<-ctrlDone
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(ctrlDone)
		campaign(ctrlCtx, cfg, st, s.leader, func(ctx context.Context) { s.controllers(ctx, cfg) })
	}()
	return s, nil
}

// StopControllers stops this replica's controllers for good (and its
// campaign for the lead), waiting for a round in progress to end; the
// API keeps serving. A clean shutdown of a whole cloud (gpucloud up) stops
// them before its hosts stop their workloads, so that no controller takes
// the shutdown for failures (an endpoint replacing its stopped workers, a
// group relaunching its members).
func (s *Replica) StopControllers() { s.stopControllers() }

// withDefaults fills in the zero values of cfg.
func (cfg Config) withDefaults() Config {
	if cfg.Catalog == nil {
		cfg.Catalog = catalog.Default()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ScheduleInterval == 0 {
		cfg.ScheduleInterval = controller.DefaultScheduleInterval
	}
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = controller.DefaultHeartbeatTimeout
	}
	return cfg
}

// check refuses a configuration the server cannot run with, before
// anything is opened.
func (cfg Config) check() error {
	if cfg.TLS.Plain {
		if err := checkPlain(cfg.Listen); err != nil {
			return err
		}
		if cfg.DirectAccess {
			return errors.New("direct sessions (--direct-access) need TLS: their grants are signed by the cloud's CA, which a plain-HTTP server does not use")
		}
	}
	if cfg.Spot != nil {
		if err := cfg.Spot.Validate(); err != nil {
			return fmt.Errorf("spot market: %w", err)
		}
	}
	for k, d := range cfg.PoolNotice {
		if d < controller.MinNotice {
			return fmt.Errorf("reclaim notice of %s is %s; the minimum is %s", k, d, controller.MinNotice)
		}
	}
	return nil
}

// start builds the replica over its open store, step by step: the CA, the
// controllers, the services, the first start's bootstrap, the listener
// and the handler. It answers the listener to serve; on an error the
// caller closes the store.
func (s *Replica) start(ctx context.Context, cfg Config) (net.Listener, error) {
	var err error
	// Certificates live on the wall clock, which TLS checks, not a test's
	// scaled one.
	if err = s.loadCA(ctx, cfg); err != nil {
		return nil, err
	}
	s.Metrics.Log = cfg.Log
	s.Scheduler = s.newScheduler(cfg)
	s.Market = s.newMarket(cfg)
	s.Services = s.newServices(cfg)
	token, created, err := bootstrap(ctx, s.Services)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	// The relay that carried the sessions this replica left open is
	// gone with its previous run.
	if n, err := s.Services.Sessions.CloseLeftOpen(ctx); err != nil {
		return nil, fmt.Errorf("close the sessions left open: %w", err)
	} else if n > 0 {
		cfg.Log.Info("closed the sessions the previous run left open", "sessions", n)
	}
	if created {
		s.AdminToken = token
	}
	s.Controllers = s.controllerList(cfg)
	s.watch(cfg)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	scheme, tc := "http://", (*tls.Config)(nil)
	if !cfg.TLS.Plain {
		if tc, err = serverTLS(cfg.TLS, s.ca, ln.Addr(), time.Now()); err != nil {
			ln.Close()
			return nil, err
		}
		scheme = "https://"
	}
	s.URL = scheme + ln.Addr().String()
	s.http = &http.Server{
		Handler:   s.Metrics.Instrument(s.handler(cfg)),
		TLSConfig: tc,
		// Failed handshakes (a client that does not trust the CA yet)
		// are the client's to report; keep them out of the server's log.
		ErrorLog:          slog.NewLogLogger(cfg.Log.Handler(), slog.LevelDebug),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		ConnContext:       batchconn.ConnContext,
	}
	if s.Store.Dialect() == "postgres" {
		id := replicaName(cfg)
		s.reg = &registry{id: id, address: replicaAddress(cfg, ln.Addr()), started: time.Now()}
		if !cfg.TLS.Plain {
			hc, err := s.peerClient(id)
			if err != nil {
				ln.Close()
				return nil, fmt.Errorf("the replica's certificate: %w", err)
			}
			s.reg.peers = &relay.Peers{Self: id, Client: hc}
			s.hub.SetPeers(s.reg.peers)
		}
	}
	return ln, nil
}

// loadCA loads (or makes) the cloud's CA, saying in the log how its key is
// kept when that needs the operator's attention.
func (s *Replica) loadCA(ctx context.Context, cfg Config) error {
	ca, state, err := service.LoadCA(ctx, s.Store, time.Now(), cfg.CAKey)
	if err != nil {
		return fmt.Errorf("the cloud's CA: %w", err)
	}
	s.ca = ca
	switch state {
	case service.CAKeyPlain:
		cfg.Log.Warn("the CA's private key is stored unencrypted in the database; anyone who reads the database can " +
			"issue certificates the cloud trusts: give a key with --ca-encryption-key-file or $GPUCLOUD_CA_ENCRYPTION_KEY " +
			"to encrypt it (docs/CONTROL_PLANE.md)")
	case service.CAKeyUpgraded:
		cfg.Log.Info("encrypted the CA's private key in the database", "key", cfg.CAKey.Source)
	}
	return nil
}

// newServices builds the domain services, the one time a replica does:
// the API, the console, the controllers and the stack engine share them.
// The fleet's availability and the placement dry run are the leading
// scheduler's, read at each call (nil and unknown on a replica that does
// not lead); a server that serves TLS signs agents' client certificates
// with the cloud's CA.
func (s *Replica) newServices(cfg Config) *service.Services {
	opts := service.Options{Now: cfg.Now, StopGrace: cfg.StopGrace, AddressPool: cfg.AddressPool, NetworkChanges: s.netChanges, AssignmentChanges: s.asgChanges,
		Availability: s.availability, DryRun: s.dryRun, FleetSeen: s.fleetSeen, AllowRegistries: cfg.AllowRegistries,
		SessionLimit: cfg.SessionLimit, Replica: replicaName(cfg), HeartbeatInterval: controller.HeartbeatInterval(cfg.HeartbeatTimeout),
		CreateBatches: createBatches(cfg.CreateBatches, s.Store.Dialect()), CreatesIdle: s.kickControllers}
	if !cfg.TLS.Plain {
		opts.SignAgentCert = agentCertSigner(s.ca)
		opts.DirectAccess = cfg.DirectAccess
		opts.SignDirectGrant = func(payload []byte) (string, error) { return s.ca.SignToken(agentapi.DirectGrantPurpose, payload) }
		opts.VerifyDirectGrant = func(token string) ([]byte, error) {
			return pki.VerifyToken(s.ca.Cert, agentapi.DirectGrantPurpose, token)
		}
	}
	if _, err := service.ParseAddressPool(cfg.AddressPool); cfg.AddressPool != "" && err != nil {
		cfg.Log.Error("address pool unusable; address allocation will fail", "pool", cfg.AddressPool, "err", err)
	}
	return service.New(s.Store, cfg.Catalog, opts)
}

// createBatches is Config.CreateBatches for a store of dialect d: n when
// set, service.DefaultCreateBatches on a store that runs transactions side
// by side, and no bound (0) on SQLite.
func createBatches(n int, d string) int {
	switch {
	case n > 0:
		return n
	case d == "sqlite":
		return 0
	default:
		return service.DefaultCreateBatches
	}
}

// replicaName is cfg.Replica, or the host's name.
func replicaName(cfg Config) string {
	if cfg.Replica != "" {
		return cfg.Replica
	}
	name, _ := os.Hostname()
	return name
}

// endpointLoad is the gateway's load across the replicas in the
// controller's terms: this replica's own, merged with the others' as
// their registry records last published them (gateway.MergeLoads).
func (s *Replica) endpointLoad() map[string]controller.EndpointLoad {
	if s.Gateway == nil {
		return nil
	}
	in := gateway.MergeLoads(append([]map[string]gateway.Load{s.Gateway.Load()}, s.peerLoads()...)...)
	out := make(map[string]controller.EndpointLoad, len(in))
	for id, l := range in {
		ws := make(map[string]controller.EndpointWorkerLoad, len(l.Workers))
		for wid, w := range l.Workers {
			ws[wid] = controller.EndpointWorkerLoad{Ready: w.Ready, Busy: w.Busy, IdleSince: w.IdleSince, RunningAt: w.RunningAt, ReadyAt: w.ReadyAt}
		}
		out[id] = controller.EndpointLoad{Waiting: l.Waiting, InFlight: l.InFlight, Workers: ws}
	}
	return out
}

// bootstrap is what a server runs at every start over its services: the
// built-in price book when the store has no price, then the operator
// tenant and its admin token (service.Accounts.Bootstrap), which it
// answers on the first start only. The prices come first, so that a
// failure there leaves the store without its admin token and the next
// start shows one.
func bootstrap(ctx context.Context, svc *service.Services) (adminToken string, created bool, err error) {
	if _, err := service.BootstrapPrices(ctx, svc.Store(), svc.Catalog(), svc.Now()); err != nil {
		return "", false, fmt.Errorf("prices: %w", err)
	}
	return svc.Accounts.Bootstrap(ctx)
}

// handler is the replica's one HTTP handler: the API under /v1/, the
// metrics, the CA certificate and the web console on every other path,
// over the replica's services. The API and the console apply one request
// limiter (cfg.Limits): a user's console pages and API calls take from
// the same bucket, and a bad session cookie counts against its address's
// failed authentications as a bad token does.
func (s *Replica) handler(cfg Config) http.Handler {
	limiter := httpapi.NewLimiter(cfg.Limits, s.Services)
	apiOpts := httpapi.Options{Logger: cfg.Log, Metrics: s.Metrics.Handler(), Limiter: limiter,
		// Agents: a client certificate at join, and mutual TLS from then on.
		RequireAgentCert: !cfg.TLS.Plain, Alone: s.alone}
	// Exec, ports and the endpoints' gateway reach the agents through
	// one hub of their control channels.
	s.hub = relay.NewHub()
	apiOpts.Relay = s.hub
	s.Gateway = gateway.New(gateway.Config{Services: s.Services, Hub: apiOpts.Relay, Replica: replicaName(cfg), Log: cfg.Log, Now: cfg.Now,
		Demand:  s.kickControllers,
		Refresh: cfg.GatewayRefresh})
	apiOpts.Gateway = s.Gateway
	// The console's terminal is the API's exec relay, over the same hub
	// of agent control channels.
	api, exec := httpapi.NewWithExec(s.Services, apiOpts)
	root := http.NewServeMux()
	root.Handle("/v1/", api)
	// Sessions forwarded by the other replicas: replicas' certificates
	// only (relay.Hub.ServePeer checks).
	root.HandleFunc(relay.PeerPath, s.hub.ServePeer)
	root.Handle("/metrics", api)
	// The CA certificate is public: a client that has its fingerprint
	// (gpucloud login --ca-fingerprint, a join token) fetches it here and
	// checks it against the fingerprint before trusting it.
	root.HandleFunc("GET /ca.crt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-pem-file")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(pki.EncodeCert(s.ca.Cert))
	})
	clear := cfg.SpotClearInterval
	if clear <= 0 {
		clear = controller.DefaultClearInterval
	}
	copts := console.Options{Logger: cfg.Log, Limiter: limiter, Terminals: exec, SpotClearInterval: clear}
	if s.Gateway != nil {
		copts.Endpoints = s.Gateway
	}
	root.Handle("/", console.New(s.Services, copts))
	return root
}

// serveHTTP serves the handler on ln until Close.
func (s *Replica) serveHTTP(ln net.Listener, log *slog.Logger) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		serve := func() error { return s.http.Serve(ln) }
		if s.http.TLSConfig != nil {
			// Under each TLS connection, a batchconn.Conn, whose writes
			// the relay gathers (ConnContext hands it to the handlers).
			serve = func() error { return s.http.ServeTLS(batchconn.Listener{Listener: ln}, "", "") }
		}
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("api server stopped", "err", err)
		}
	}()
}

// newScheduler is the scheduler as cfg configures it.
func (s *Replica) newScheduler(cfg Config) *controller.Scheduler {
	sc := controller.NewScheduler(s.Store, cfg.Catalog)
	sc.Now, sc.Log, sc.Every = cfg.Now, cfg.Log, cfg.ScheduleInterval
	if cfg.Spot != nil {
		sc.Notice = time.Duration(cfg.Spot.NoticeSeconds) * time.Second
	}
	sc.PoolNotice = cfg.PoolNotice
	sc.Placed, sc.Reclaimed = s.Metrics.AddPlacements, s.Metrics.AddReclaims
	return sc
}

// newMarket is the spot market as cfg configures it, over the scheduler.
func (s *Replica) newMarket(cfg Config) *controller.SpotMarket {
	m := controller.NewSpotMarket(s.Store, s.Scheduler)
	m.Now, m.Log, m.Every = cfg.Now, cfg.Log, cfg.MarketInterval
	if cfg.Spot != nil {
		m.Config = *cfg.Spot
	}
	if cfg.SpotClearInterval > 0 {
		m.ClearInterval = cfg.SpotClearInterval
	}
	if cfg.KeepFailed > 0 {
		m.KeepFailed = cfg.KeepFailed
	}
	m.Reclaimed, m.Relaunched, m.Cleared = s.Metrics.AddReclaims, s.Metrics.AddRelaunches, s.Metrics.ObserveClearing
	return m
}

// watch has the metrics registry watch the store, the market, the fleet
// and leadership.
func (s *Replica) watch(cfg Config) {
	s.Metrics.WatchStore(s.Store)
	s.Metrics.WatchMarket(s.Market)
	s.Metrics.WatchFleet(s.Scheduler)
	s.Metrics.WatchPending(s.Scheduler)
	s.Metrics.WatchAccrued(s.Store, 0, cfg.Now)
	s.Metrics.Leader(s.IsLeader)
}

// MetricsURL is where the replica serves its Prometheus metrics: GET, with
// an admin token as the bearer token.
func (s *Replica) MetricsURL() string { return s.URL + "/metrics" }

// availability is the leading scheduler's view of what the fleet can run
// (controller.Scheduler.Availability); a replica that does not lead does
// not know, and says nil.
func (s *Replica) availability() map[string]cloud.OfferingAvailability {
	if !s.IsLeader() {
		return nil
	}
	return s.Scheduler.Availability()
}

// dryRun is the leading scheduler's placement dry run; a replica that
// does not lead has no fleet and answers unknown.
func (s *Replica) dryRun(reqs []cloud.DryRunRequest) ([]cloud.DryRunResult, bool) {
	if !s.IsLeader() {
		return nil, false
	}
	return s.Scheduler.DryRun(reqs)
}

// fleetSeen is how many hosts the leading scheduler's dry-run fleet
// holds; a replica that does not lead has no fleet.
func (s *Replica) fleetSeen() (int, bool) {
	if !s.IsLeader() {
		return 0, false
	}
	return s.Scheduler.SnapshotHosts(), true
}

// IsLeader reports whether this replica runs the controllers now.
func (s *Replica) IsLeader() bool { return s.leader.get() }

// LeaderTerms counts the times this replica became leader.
func (s *Replica) LeaderTerms() int { return s.leader.termCount() }

// controllerList is the one list of the controllers the leader runs, in
// order; a new controller is one more line here. The order is a contract:
// the market runs before the scheduler, so that the gates and relaunches
// it decides are placed in the same tick, on the fleet of the previous
// step; the group controller runs between them, so that it reads the
// market's quotes of this tick and the scheduler places its launches at
// once (TestControllerOrder holds it); the stack controller runs before
// the scheduler too, so that the instances a stack creates are placed in
// the same tick.
func (s *Replica) controllerList(cfg Config) []controller.Controller {
	return []controller.Controller{
		s.Market,
		&controller.Groups{Store: s.Store, Catalog: cfg.Catalog, Quotes: s.Market, Now: cfg.Now, Every: cfg.GroupInterval, Log: cfg.Log},
		&controller.Stacks{Engine: stackengine.New(s.Services), Every: cfg.StackInterval, Log: cfg.Log},
		&controller.Endpoints{Store: s.Store, Catalog: cfg.Catalog, Load: s.endpointLoad, Availability: s.availability, Applied: s.refreshGateway, Now: cfg.Now, Log: cfg.Log,
			Every: cfg.EndpointInterval},
		s.Scheduler,
		&controller.BudgetChecker{Store: s.Store, Now: cfg.Now, Every: cfg.BudgetInterval, Log: cfg.Log},
		&controller.HeartbeatWatcher{Store: s.Store, Now: cfg.Now, Timeout: cfg.HeartbeatTimeout, Log: cfg.Log},
	}
}

// controllers runs the controllers until ctx ends (leadership lost or
// server closing). It rebuilds the scheduler's fleet from the store
// first, so a new leader never double-places; each term starts a fresh
// loop, which runs every controller on its first tick.
func (s *Replica) controllers(ctx context.Context, cfg Config) {
	if err := s.Scheduler.Rebuild(ctx); err != nil && ctx.Err() == nil {
		cfg.Log.Error("scheduler rebuild", "err", err)
	}
	loop := &controller.Loop{Controllers: s.Controllers, Now: cfg.Now, Log: cfg.Log, Observe: s.Metrics.ObserveStep}
	s.loop.Store(loop)
	defer s.loop.Store(nil)
	loop.Run(ctx)
}

// Close stops the controllers and the API (waiting up to ctx for requests
// in flight) and closes the store.
func (s *Replica) Close(ctx context.Context) error {
	s.cancel()
	// Shutdown waits for requests in flight, but also up to five seconds
	// for connections that were opened and never used (clients dial
	// spares); a second is plenty for real requests, then the rest close.
	shut, cancel := context.WithTimeout(ctx, time.Second)
	err := s.http.Shutdown(shut)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = s.http.Close()
	}
	s.wg.Wait()
	if cerr := s.Store.Close(); err == nil {
		err = cerr
	}
	return err
}

// kickControllers runs the endpoint controller and the scheduler at once
// when this replica leads (controller.Loop.Kick); on another replica the
// leader's next tick sees the work.
func (s *Replica) kickControllers() {
	if l := s.loop.Load(); l != nil {
		l.Kick()
	}
}

// refreshGateway has this replica's gateway read its worker table again
// at once (the endpoint controller resumed or launched workers).
func (s *Replica) refreshGateway() {
	if g := s.Gateway; g != nil {
		g.RefreshNow()
	}
}
