package controlplane

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver for killLockHolders

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/store/pgtest"
	"github.com/gpucloud/gpucloud/testkit"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func start(t *testing.T, db string) *Replica {
	t.Helper()
	s, err := Start(context.Background(), Config{DB: db, Listen: "127.0.0.1:0", ScheduleInterval: 20 * time.Millisecond, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func addHost(t *testing.T, st cloud.Store, h *fleet.Host) {
	t.Helper()
	err := st.Tx(context.Background(), func(tx cloud.Tx) error {
		return tx.PutHost(context.Background(), &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: time.Now()})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func state(t *testing.T, c *client.Client, id string) cloud.State {
	in, err := c.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return in.State
}

// TestServeRestartLosesNothing: the API accepts an instance, the leader
// places it, and a restarted server has the same state and no new admin
// token.
func TestServeRestartLosesNothing(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testRestart(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testRestart(t, pgtest.URL(t)) })
}

func testRestart(t *testing.T, db string) {
	s := start(t, db)
	if s.AdminToken == "" || !s.IsLeader() {
		testkit.Eventually(t, 0, "leadership", s.IsLeader)
	}
	token := s.AdminToken
	if token == "" {
		t.Fatal("first start printed no admin token")
	}
	addHost(t, s.Store, fleet.MockHost("l40s-1", "L40S", 2))
	c := client.New(s.URL, token, s.HTTPClient())
	ctx := context.Background()
	placed, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l40s.1x"}, "key-1")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 0, "scheduled", func() bool { return state(t, c, placed.ID) == cloud.Scheduled })
	// l40s.2x fits the host only when it is empty: it waits.
	pending, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l40s.2x"}, "key-2")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	s2 := start(t, db)
	defer s2.Close(ctx)
	if s2.AdminToken != "" {
		t.Fatal("second start created another admin token")
	}
	c2 := client.New(s2.URL, token, s2.HTTPClient())
	testkit.Eventually(t, 0, "leadership", s2.IsLeader)
	if st := state(t, c2, placed.ID); st != cloud.Scheduled {
		t.Fatalf("placed instance is %s after restart", st)
	}
	in, err := c2.GetInstance(ctx, pending.ID)
	if err != nil || in.State != cloud.Pending {
		t.Fatalf("pending instance after restart: %+v, %v", in, err)
	}
	testkit.Eventually(t, 0, "the unplaceable instance's reason", func() bool {
		in, _ := c2.GetInstance(ctx, pending.ID)
		return in != nil && in.Reason != ""
	})
}

// TestLeaderFailover: two replicas on one PostgreSQL; exactly one leads;
// when it goes, the other takes over and keeps placing, and no GPU is ever
// handed out twice.
func TestLeaderFailover(t *testing.T) {
	db := pgtest.URL(t)
	ctx := context.Background()
	a := start(t, db)
	b := start(t, db)
	defer b.Close(ctx)
	testkit.Eventually(t, 0, "a leader", func() bool { return a.IsLeader() != b.IsLeader() })
	leader, follower := a, b
	if b.IsLeader() {
		leader, follower = b, a
	}
	token := a.AdminToken + b.AdminToken // exactly one start created it
	// Both serve the one CA of the cloud, from the store: an agent or a
	// CLI pinned to it trusts either replica.
	if a.CAFingerprint() != b.CAFingerprint() {
		t.Fatalf("replicas with two CAs: %s and %s", a.CAFingerprint(), b.CAFingerprint())
	}
	addHost(t, leader.Store, fleet.MockNVLinkHost("h100-1", "H100-80GB-SXM", 8))
	c := client.New(follower.URL, token, follower.HTTPClient())
	var ids []string
	for i := 0; i < 4; i++ {
		in, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x"}, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	testkit.Eventually(t, 0, "the first four placed", func() bool {
		for _, id := range ids {
			if state(t, c, id) != cloud.Scheduled {
				return false
			}
		}
		return true
	})
	if err := leader.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if leader == b {
		b = nil
	}
	testkit.Eventually(t, 0, "the follower to lead", follower.IsLeader)
	c = client.New(follower.URL, token, follower.HTTPClient())
	for i := 4; i < 10; i++ {
		in, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x"}, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	testkit.Eventually(t, 0, "eight placed, two pending", func() bool {
		n := 0
		for _, id := range ids {
			if state(t, c, id) == cloud.Scheduled {
				n++
			}
		}
		return n == 8
	})
	// Kill the leader's lock connection, as a crash or a network cut
	// would: the replica steps down at once, campaigns again, and leads
	// with a fresh fleet index; the two pending instances then go to a
	// new host, and nothing is placed twice.
	// A session of another test's schema, holding an advisory lock as a
	// store migrating beside this test does, must survive the kill.
	bystander := holdAdvisoryLock(t, pgtest.URL(t))
	terms := follower.LeaderTerms()
	killLockHolders(t, db)
	if _, err := bystander.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatalf("killLockHolders ended another schema's session: %v", err)
	}
	testkit.Eventually(t, 0, "a new leadership term", func() bool { return follower.LeaderTerms() > terms && follower.IsLeader() })
	addHost(t, follower.Store, fleet.MockNVLinkHost("h100-2", "H100-80GB-SXM", 8))
	testkit.Eventually(t, 0, "all ten placed", func() bool {
		for _, id := range ids {
			if state(t, c, id) != cloud.Scheduled {
				return false
			}
		}
		return true
	})
	check := controller.NewScheduler(follower.Store, nil)
	if err := check.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if err := check.Fleet().Check(); err != nil {
		t.Fatal(err)
	}
	if n := len(check.Fleet().Allocations()); n != 10 {
		t.Fatalf("%d allocations, want 10", n)
	}
	if follower != a {
		a.Close(ctx)
	}
}

// TestConcurrentIdempotentCreates: on both backends, creates racing with
// one Idempotency-Key yield one instance, and with distinct keys one each
// (creates run at read committed on PostgreSQL, so the unique key
// constraint alone must keep them apart).
func TestConcurrentIdempotentCreates(t *testing.T) {
	run := func(t *testing.T, db string) {
		s := start(t, db)
		defer s.Close(context.Background())
		c := client.New(s.URL, s.AdminToken, s.HTTPClient())
		ctx := context.Background()
		const n = 16
		ids := make(chan string, 2*n)
		errs := make(chan error, 2*n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			for _, key := range []string{"same", fmt.Sprintf("own-%d", i)} {
				wg.Add(1)
				go func(key string) {
					defer wg.Done()
					in, err := c.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x"}, key)
					if err != nil {
						errs <- err
						return
					}
					if key == "same" {
						ids <- in.ID
					}
				}(key)
			}
		}
		wg.Wait()
		close(ids)
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for id := range ids {
			seen[id] = true
		}
		if len(seen) != 1 {
			t.Fatalf("one key gave %d instances: %v", len(seen), seen)
		}
		list, err := c.ListInstances(ctx, client.ListInstancesOptions{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Instances) != n+1 {
			t.Fatalf("%d instances, want %d", len(list.Instances), n+1)
		}
	}
	t.Run("sqlite", func(t *testing.T) { run(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { run(t, pgtest.URL(t)) })
}

// killLockHolders terminates the PostgreSQL sessions of db's schema that
// hold advisory locks, and only those: pgtest.URL names every session of a
// schema after it (application_name), so the sessions of tests running
// beside this one, in other schemas or packages, are left alone.
func killLockHolders(t *testing.T, db string) {
	t.Helper()
	conn, err := sql.Open("pgx", db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var app string
	if err := conn.QueryRow(`SELECT current_setting('application_name')`).Scan(&app); err != nil || app == "" {
		t.Fatalf("the sessions of %s have no application_name to find them by: %q, %v", db, app, err)
	}
	var n int
	err = conn.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database() AND pid <> pg_backend_pid()
		AND pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory')`, app).Scan(&n)
	if err != nil || n == 0 {
		t.Fatalf("terminated %d lock holders: %v", n, err)
	}
}

// holdAdvisoryLock opens a session on db that holds an advisory lock
// until the test ends, and returns it.
func holdAdvisoryLock(t *testing.T, db string) *sql.Conn {
	t.Helper()
	pool, err := sql.Open("pgx", db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	conn, err := pool.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(context.Background(), "SELECT pg_advisory_lock(4242)"); err != nil {
		t.Fatal(err)
	}
	return conn
}
