package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/internal/pki"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/store/pgtest"
	"github.com/gpucloud/gpucloud/store/sqlstore"
	"github.com/gpucloud/gpucloud/testkit"
)

// The control-plane benchmark: a server on loopback with a fleet of
// simulated hosts takes a burst of concurrent creates through the real HTTP
// API, and its scheduler places them all. It measures what a tenant sees
// (create latency) and what the fleet sees (placements committed per second,
// from the first create until the store holds every instance scheduled).
//
//	go test ./serve -run XXX -bench ControlPlane -benchtime 1x
//	bash -c '. .ci/postgres.sh && go test ./serve -run XXX -bench ControlPlane -benchtime 1x'
//
// The first runs on SQLite only; the second on PostgreSQL too, once with
// the store's defaults and once limited to benchMaxTx concurrent
// transactions. Each tenant has a quota, as new tenants do, raised by the
// admin so that the burst fits (creates then count the tenant's instances
// at serializable isolation); the "-noquota" runs clear it, for the cost
// of that count (such creates run at read committed). The "-exits" runs
// add churn: benchExits instances run before the burst, and their agents
// report their exit during it (the final report that releases an
// allocation). Each iteration starts from an empty database; only the
// burst is timed. The figures: p50-ms, p99-ms
// and max-ms of the create latency (retries included), creates/s
// (answered creates over the time from the first create sent to the last
// answered), placed/s (creates over the time from the first sent to all
// scheduled), client-retries (creates the server answered with a conflict
// after losing its own retries, sent again with the same key), and
// rebuilds (full rebuilds of the scheduler's fleet from the first create
// until the burst and its exits are done and the scheduler has stepped
// since).
const (
	benchHosts   = 1000
	benchCreates = 2000
	// benchWorkers is how many creates are in flight at once, over one
	// shared keep-alive HTTP client.
	benchWorkers = 64
	// benchTenants spreads the creates over several tenants, each with its
	// own member token, as a public cloud's traffic is.
	benchTenants = 8
	// benchExits instances (h100.1x) run before the burst of an "-exits"
	// run; their agents report their exit one every benchExitEvery once
	// the burst starts.
	benchExits     = 200
	benchExitEvery = 5 * time.Millisecond
)

// benchOfferings is the mix of creates, in equal parts; it fits the fleet
// with room to spare, so every create must end up scheduled.
var benchOfferings = []string{"h100.1x", "h100.mig.3g.40gb", "a100.2x", "l40s.shared.0.25"}

// BenchmarkControlPlane runs the burst on each backend with the store's
// defaults (PostgreSQL runs at most postgres.DefaultMaxTx transactions at
// once), on PostgreSQL without that limit, for comparison, and on each
// backend with exits during the burst.
func BenchmarkControlPlane(b *testing.B) {
	sqliteDB := func() string { return "sqlite://" + filepath.Join(b.TempDir(), "gpucloud.db") }
	pgDB := func() string { return pgtest.URL(b) }
	b.Run("sqlite", func(b *testing.B) { benchControlPlane(b, -1, 0, true, sqliteDB) })
	// The same burst over plain HTTP, for the cost of TLS 1.3 (compare
	// with "sqlite" in the same run: the machine's load moves both).
	b.Run("sqlite-plain", func(b *testing.B) { benchControlPlaneTLS(b, false, sqliteDB) })
	b.Run("sqlite-noquota", func(b *testing.B) { benchControlPlane(b, -1, 0, false, sqliteDB) })
	b.Run("postgres", func(b *testing.B) { benchControlPlane(b, -1, 0, true, pgDB) })
	b.Run("postgres-plain", func(b *testing.B) { benchControlPlaneTLS(b, false, pgDB) })
	b.Run("postgres-noquota", func(b *testing.B) { benchControlPlane(b, -1, 0, false, pgDB) })
	b.Run("postgres-unlimited-tx", func(b *testing.B) { benchControlPlane(b, 0, 0, true, pgDB) })
	b.Run("sqlite-exits", func(b *testing.B) { benchControlPlane(b, -1, benchExits, true, sqliteDB) })
	b.Run("postgres-exits", func(b *testing.B) { benchControlPlane(b, -1, benchExits, true, pgDB) })
}

// burst is what one iteration measured.
type burst struct {
	latencies []time.Duration
	creating  time.Duration // first create sent to last create answered
	placing   time.Duration // first create sent to all scheduled
	retries   int64
	rebuilds  int // the scheduler's Rebuilds when the first create was sent
	// The burst's wall time, this process's CPU time (the server and the
	// bench's client) and the whole machine's (PostgreSQL's backends too)
	// in it: how many cores it kept busy, and whether it was bound by
	// them.
	wall, proc, busy time.Duration
	store            sqlstore.Counts // the store's work in it
}

// exiting is an instance that runs before the burst and exits during it,
// with the agent of its host.
type exiting struct {
	id    string
	agent *agentapi.Client
}

func benchControlPlane(b *testing.B, maxTx, exits int, quota bool, newDB func() string) {
	benchControlPlaneWith(b, maxTx, exits, quota, true, newDB)
}

// benchControlPlaneTLS is the default burst over TLS 1.3 or plain HTTP.
func benchControlPlaneTLS(b *testing.B, tls bool, newDB func() string) {
	benchControlPlaneWith(b, -1, 0, true, tls, newDB)
}

func benchControlPlaneWith(b *testing.B, maxTx, exits int, quota, tls bool, newDB func() string) {
	var all []burst
	var rebuilds int
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db := newDB()
		s, tokens, ex := benchSetup(b, db, maxTx, exits, quota, tls)
		b.StartTimer()
		counts := service.Unwrap(s.Store).(interface{ Counts() sqlstore.Counts }).Counts
		proc0, busy0, c0, t0 := selfCPU(b), machineBusy(), counts(), time.Now()
		if os.Getenv("GPUCLOUD_BENCH_PGSS") != "" {
			// For the statements' breakdown of one burst: a PostgreSQL
			// started with shared_preload_libraries=pg_stat_statements
			// and the extension created in public (docs/BENCHMARKS.md).
			if _, err := rawDB(b, s.Store).Exec("SELECT public.pg_stat_statements_reset()"); err != nil {
				b.Fatal(err)
			}
		}
		r := benchBurst(b, s, tokens, ex)
		r.wall, r.proc, r.busy = time.Since(t0), time.Duration(selfCPU(b)-proc0), time.Duration(machineBusy()-busy0)
		r.store = counts().Sub(c0)
		b.StopTimer()
		// Rebuilds caused by the last exits happen on the scheduler's
		// next steps.
		time.Sleep(3 * controller.DefaultScheduleInterval)
		rebuilds += s.Scheduler.Rebuilds() - r.rebuilds
		benchVerify(b, s)
		if err := s.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		all = append(all, r)
		b.StartTimer()
	}
	var lat []time.Duration
	var creating, placing, wall, proc, busy time.Duration
	var retries, txs, stmts int64
	var open time.Duration
	for _, r := range all {
		lat = append(lat, r.latencies...)
		creating += r.creating
		placing += r.placing
		retries += r.retries
		wall, proc, busy = wall+r.wall, proc+r.proc, busy+r.busy
		txs, stmts, open = txs+r.store.Begins, stmts+r.store.Statements, open+r.store.Open
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	n := float64(len(all) * benchCreates)
	b.ReportMetric(ms(percentile(lat, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	b.ReportMetric(n/creating.Seconds(), "creates/s")
	b.ReportMetric(n/placing.Seconds(), "placed/s")
	b.ReportMetric(float64(retries)/float64(len(all)), "client-retries")
	b.ReportMetric(float64(rebuilds)/float64(len(all)), "rebuilds")
	// Cores busy during the bursts: this process's, and the machine's.
	b.ReportMetric(proc.Seconds()/wall.Seconds(), "proc-cores")
	b.ReportMetric(busy.Seconds()/wall.Seconds(), "busy-cores")
	// The store's transactions and statements per create, the
	// scheduler's and the bench's polling included.
	b.ReportMetric(float64(txs)/n, "tx/create")
	b.ReportMetric(float64(stmts)/n, "stmts/create")
	// Transactions open, summed, over the wall time: on SQLite, whose one
	// connection runs them one at a time, how busy it was.
	b.ReportMetric(open.Seconds()/wall.Seconds(), "tx-open")
}

// percentile returns the p-quantile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// benchSetup registers the fleet directly through the store, starts the
// server on it (limiting its store to maxTx concurrent transactions when
// maxTx >= 0, 0 meaning no limit; -1 keeps the store's default) and waits
// until its scheduler has built the fleet index. Each tenant's quota is
// raised to fit the burst, or cleared when quota is false. It returns the
// server, one member token per tenant, and the exits instances it started
// (each placed and reported running by the agent of its host).
func benchSetup(b *testing.B, db string, maxTx, exits int, quota, tls bool) (*Replica, []string, []exiting) {
	ctx := context.Background()
	st, err := OpenStore(ctx, db)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	agentTokens := benchAgentTokens(b, st, now)
	for lo := 0; lo < benchHosts; lo += 100 {
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			for i := lo; i < min(lo+100, benchHosts); i++ {
				h := benchHost(i)
				if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: now}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	s, err := Start(ctx, Config{DB: db, Listen: "127.0.0.1:0", Log: quiet, TLS: TLS{Plain: !tls},
		// No host sends heartbeats here; none may turn unhealthy.
		HeartbeatTimeout: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if maxTx >= 0 {
		service.Unwrap(s.Store).(interface{ LimitTx(int) }).LimitTx(maxTx)
	}
	admin := client.New(s.URL, s.AdminToken, s.HTTPClient())
	var tokens []string
	for i := 0; i < benchTenants; i++ {
		t, err := admin.CreateTenant(ctx, fmt.Sprintf("bench-%d", i))
		if err != nil {
			b.Fatal(err)
		}
		u, err := admin.CreateUser(ctx, t.ID, api.CreateUserRequest{Name: "load"})
		if err != nil {
			b.Fatal(err)
		}
		// The tenant may send the whole burst at once (the benchmark
		// measures the control plane, not the rate limit) and, with a
		// quota, hold it.
		spec := api.QuotaSpec{RequestsPerSecond: benchCreates, Burst: benchCreates}
		if quota {
			spec.Instances, spec.GPUsPerModel = benchCreates, benchCreates
		}
		if _, err := admin.SetQuota(ctx, t.ID, spec); err != nil {
			b.Fatal(err)
		}
		tokens = append(tokens, u.Secret)
	}
	// An instance that fits no host gets its reason once a scheduler step
	// has run over the rebuilt fleet; then it is terminated, out of the way.
	// If that step has run already, the API refuses the instance outright
	// (no host could ever run it), which tells the same.
	probe, err := admin.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "t4.1x"}, "probe")
	if cloud.ErrorCode(err) == cloud.Invalid && strings.Contains(err.Error(), "could ever run") {
		return s, tokens, benchRunning(b, s, admin, agentTokens, exits)
	}
	if err != nil {
		b.Fatal(err)
	}
	testkit.Eventually(b, time.Minute, "the scheduler to look at the probe instance", func() bool {
		if probe, err = admin.GetInstance(ctx, probe.ID); err != nil {
			b.Fatal(err)
		}
		return probe.Reason != ""
	})
	if _, err := admin.TerminateInstance(ctx, probe.ID, probe.Version); err != nil {
		b.Fatal(err)
	}
	return s, tokens, benchRunning(b, s, admin, agentTokens, exits)
}

// benchAgentTokens writes an agent credential for every host of the fleet
// into the store (as a join would, without its host write) and returns
// them by host.
func benchAgentTokens(b *testing.B, st cloud.Store, now time.Time) map[string]string {
	ctx := context.Background()
	tokens := map[string]string{}
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "tn-bench-agents", Name: "bench-agents", CreatedAt: now}); err != nil {
			return err
		}
		if err := tx.CreateUser(ctx, &cloud.User{ID: "u-bench-agents", TenantID: "tn-bench-agents", Name: "agents",
			Role: cloud.RoleAdmin, CreatedAt: now}); err != nil {
			return err
		}
		for i := 0; i < benchHosts; i++ {
			host := benchHost(i).ID
			id := fmt.Sprintf("tk-bench%04d", i)
			secret := "gpc_" + id + "_" + randomKey()
			sum := sha256.Sum256([]byte(secret))
			if err := tx.CreateToken(ctx, &cloud.Token{ID: id, UserID: "u-bench-agents", TenantID: "tn-bench-agents",
				Role: cloud.RoleAgent, Name: "agent-" + host, Hash: sum[:], CreatedAt: now, HostID: host}); err != nil {
				return err
			}
			tokens[host] = secret
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return tokens
}

// benchRunning creates n h100.1x instances, waits until they are placed,
// and has the agent of each one's host report it running.
func benchRunning(b *testing.B, s *Replica, admin *client.Client, agentTokens map[string]string, n int) []exiting {
	ctx := context.Background()
	var out []exiting
	for i := 0; i < n; i++ {
		in, err := admin.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x"}, randomKey())
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, exiting{id: in.ID})
	}
	for i := range out {
		testkit.EventuallySays(b, time.Minute, "instance "+out[i].id+" to be scheduled", func() (bool, string) {
			in, err := admin.GetInstance(ctx, out[i].id)
			if err != nil {
				b.Fatal(err)
			}
			if in.State != cloud.Scheduled {
				return false, string(in.State)
			}
			out[i].agent = agentapi.NewClient(s.URL, agentTokens[in.HostID], benchAgentHTTP(b, s, in.HostID))
			return true, ""
		})
		if err := out[i].agent.ReportStatus(ctx, out[i].id, agentapi.StatusReport{Phase: agentapi.PhaseRunning}); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// benchAgentHTTP is the HTTP client of host's agent: over TLS it presents
// a client certificate of the cloud's CA for the host, as a join issues
// it, so that the TLS runs measure the agents' mutual TLS.
func benchAgentHTTP(b *testing.B, s *Replica, host string) *http.Client {
	hc := s.HTTPClient()
	if !strings.HasPrefix(s.URL, "https://") {
		return hc
	}
	key, csr, err := pki.NewClientKey(host)
	if err != nil {
		b.Fatal(err)
	}
	certPEM, err := s.ca.SignClient(csr, host, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		b.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	hc.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{cert}
	return hc
}

// benchHost returns host i of the fleet: 40% 8x H100 and 30% 8x A100 on
// one NVLink island each, 30% 8x L40S on PCIe.
func benchHost(i int) *fleet.Host {
	id := fmt.Sprintf("host-%04d", i)
	switch {
	case i%10 < 4:
		return fleet.MockNVLinkHost(id, "H100-80GB-SXM", 8)
	case i%10 < 7:
		return fleet.MockNVLinkHost(id, "A100-80GB-SXM", 8)
	}
	return fleet.MockHost(id, "L40S", 8)
}

// benchBurst sends every create, benchWorkers at a time, has the agents
// of the exiting instances report their exits meanwhile, and polls the
// store until all creates are scheduled and all exits reported.
func benchBurst(b *testing.B, s *Replica, tokens []string, exits []exiting) burst {
	ctx := context.Background()
	hc := s.HTTPClient()
	hc.Transport.(*http.Transport).MaxIdleConns = benchWorkers
	hc.Transport.(*http.Transport).MaxIdleConnsPerHost = benchWorkers
	defer hc.CloseIdleConnections()
	clients := make([]*client.Client, len(tokens))
	for i, tok := range tokens {
		clients[i] = client.New(s.URL, tok, hc)
	}
	jobs := make(chan int)
	r := burst{latencies: make([]time.Duration, benchCreates)}
	var retries atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	r.rebuilds = s.Scheduler.Rebuilds()
	start := time.Now()
	exited := make(chan error, 1)
	go func() {
		var err error
		for _, e := range exits {
			time.Sleep(benchExitEvery)
			code := 0
			if err = e.agent.ReportStatus(ctx, e.id, agentapi.StatusReport{Phase: agentapi.PhaseExited, ExitCode: &code}); err != nil {
				break
			}
		}
		exited <- err
	}()
	for w := 0; w < benchWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				req := api.CreateInstanceRequest{Offering: benchOfferings[i%len(benchOfferings)]}
				key := randomKey()
				t := time.Now()
				// A create that lost its serialization races is retried
				// with the same key, as a client should: it can never
				// create the instance twice.
				var err error
				for try := 0; try < 5; try++ {
					if try > 0 {
						retries.Add(1)
					}
					if _, err = clients[i%len(clients)].CreateInstance(ctx, req, key); err == nil || !retryable(err) {
						break
					}
				}
				r.latencies[i] = time.Since(t)
				if err != nil {
					failed.CompareAndSwap(nil, fmt.Errorf("create %d (%s): %w", i, req.Offering, err))
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		for i := 0; i < benchCreates; i++ {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		r.creating = time.Since(start)
		close(done)
	}()
	db := rawDB(b, s.Store)
	// Every create is answered before the last can be placed, so the
	// count is polled only from then on: polled all along, every 5 ms, it
	// took about 6% of PostgreSQL's CPU from the burst it measures.
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("the creates not answered after five minutes")
	}
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	for {
		n := countState(b, db, cloud.Scheduled)
		if n >= benchCreates {
			r.placing = time.Since(start)
			break
		}
		if time.Since(start) > 5*time.Minute {
			b.Fatalf("%d of %d scheduled after five minutes", n, benchCreates)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := <-exited; err != nil {
		b.Fatalf("exit report: %v", err)
	}
	r.retries = retries.Load()
	return r
}

func retryable(err error) bool {
	c := cloud.ErrorCode(err)
	return c == cloud.Conflict || c == cloud.Internal
}

func randomKey() string {
	var k [16]byte
	_, _ = rand.Read(k[:])
	return hex.EncodeToString(k[:])
}

// rawDB returns the store's database, for the cheap count the poll needs;
// listing instances through the store would decode every row, and poll the
// server's CPU away from the work it measures.
func rawDB(b *testing.B, st cloud.Store) *sql.DB {
	d, ok := service.Unwrap(st).(interface{ DB() *sql.DB })
	if !ok {
		b.Fatalf("store %T does not expose its database", st)
	}
	return d.DB()
}

func countState(b *testing.B, db *sql.DB, state cloud.State) int {
	var n int
	if err := db.QueryRow("SELECT count(*) FROM instances WHERE state = '" + string(state) + "'").Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// benchVerify checks the end state: exactly every create scheduled and
// nothing else, and a fleet rebuilt from the store that holds every stored
// allocation (a GPU handed out twice would not fit) and passes Check.
func benchVerify(b *testing.B, s *Replica) {
	db := rawDB(b, s.Store)
	if n := countState(b, db, cloud.Scheduled); n != benchCreates {
		b.Fatalf("%d instances scheduled, want %d", n, benchCreates)
	}
	if n := countState(b, db, cloud.Pending); n != 0 {
		b.Fatalf("%d instances still pending", n)
	}
	var misfits countingHandler
	check := controller.NewScheduler(s.Store, nil)
	check.Log = slog.New(&misfits)
	if err := check.Rebuild(context.Background()); err != nil {
		b.Fatal(err)
	}
	if n := misfits.errors.Load(); n > 0 {
		b.Fatalf("%d stored allocations do not fit the rebuilt fleet", n)
	}
	if err := check.Fleet().Check(); err != nil {
		b.Fatal(err)
	}
	if n := len(check.Fleet().Allocations()); n != benchCreates {
		b.Fatalf("rebuilt fleet holds %d allocations, want %d", n, benchCreates)
	}
}

// countingHandler counts error records and drops everything.
type countingHandler struct{ errors atomic.Int64 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.errors.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
