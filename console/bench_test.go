package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/console"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/store/sqlite"
)

// Sizes of the console benchmarks' cloud: 10,000 instances of one tenant
// (9,000 running, one whole H100 each, and 1,000 pending) on 1,125 hosts.
const (
	benchHosts     = 1125
	benchRunning   = 9000
	benchPending   = 1000
	benchBatchSize = 500
)

type benchCloud struct {
	h              http.Handler
	member, admin  string
	someID, lastID string
}

var (
	benchOnce sync.Once
	bench     *benchCloud
	benchErr  error
)

// benchSetup builds the benchmark cloud once per process, in a SQLite
// file, through the services' own moves (so the ledger and the events
// are what a real cloud would hold).
func benchSetup(b *testing.B) *benchCloud {
	benchOnce.Do(func() { bench, benchErr = buildBenchCloud(b.TempDir()) })
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return bench
}

func buildBenchCloud(dir string) (*benchCloud, error) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "file:"+filepath.Join(dir, "bench.db"))
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	start := now.Add(-2 * time.Hour)
	if _, err := service.BootstrapPrices(ctx, st, catalog.Default(), start.Add(-time.Hour)); err != nil {
		return nil, err
	}
	svc := service.New(st, catalog.Default(), service.Options{Now: func() time.Time { return start }})
	adminTok, _, err := svc.Accounts.Bootstrap(ctx)
	if err != nil {
		return nil, err
	}
	admin := service.Actor{ID: "bench", TenantID: service.OperatorTenant, Role: cloud.RoleAdmin}
	tn, err := svc.Accounts.CreateTenant(ctx, admin, "acme")
	if err != nil {
		return nil, err
	}
	// The default quota holds 16 GPUs; the cloud holds one H100 for each of
	// its instances.
	if _, err := svc.Accounts.SetQuota(ctx, admin, tn.ID, api.QuotaSpec{
		Instances: benchRunning + benchPending, GPUsPerModel: benchRunning + benchPending}); err != nil {
		return nil, err
	}
	_, tok, err := svc.Accounts.CreateUser(ctx, admin, tn.ID, "alice", cloud.RoleMember)
	if err != nil {
		return nil, err
	}
	err = st.Tx(ctx, func(tx cloud.Tx) error {
		for i := 0; i < benchHosts; i++ {
			h := fleet.MockHost(fmt.Sprintf("host-%04d", i), "H100", 8)
			h.Zone = "zone-a"
			if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: now}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := &benchCloud{member: tok.Secret, admin: adminTok}
	for base := 0; base < benchRunning+benchPending; base += benchBatchSize {
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			for i := base; i < base+benchBatchSize; i++ {
				in := &cloud.Instance{TenantID: tn.ID, Name: fmt.Sprintf("job-%05d", i), Offering: "h100.1x",
					Command: []string{"python", "train.py"}, CreatedAt: start.Add(time.Duration(i) * time.Millisecond)}
				in.ID = fmt.Sprintf("i-bench%06d", i)
				if err := service.CreateInstance(ctx, tx, catalog.Default(), in, "bench", "created"); err != nil {
					return err
				}
				if i >= benchRunning {
					continue
				}
				host := fmt.Sprintf("host-%04d", i/8)
				p := &fleet.Placement{ID: in.ID, HostID: host, CPUMilli: 1000, MemoryMiB: 1024,
					Devices: []fleet.Device{{GPU: i % 8, UUID: fmt.Sprintf("GPU-%s-%d", host, i%8), Kind: fleet.Whole}}}
				for _, m := range []service.Move{
					{To: cloud.Scheduled, Placement: p, Zone: "zone-a", Actor: "scheduler", Reason: "placed"},
					{To: cloud.Starting, Actor: "agent", Reason: "starting"},
					{To: cloud.Running, Actor: "agent", Reason: "running"},
				} {
					if err := service.MoveInstance(ctx, tx, in, m, in.CreatedAt.Add(time.Second)); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	out.someID, out.lastID = "i-bench004242", fmt.Sprintf("i-bench%06d", benchRunning+benchPending-1)
	out.h = console.New(service.New(st, catalog.Default(), service.Options{Now: func() time.Time { return now }}), console.Options{})
	return out, nil
}

// BenchmarkPages renders each console page of a cloud with 10,000
// instances, through the console's handler (no network): what a browser
// waits for, less the connection.
func BenchmarkPages(b *testing.B) {
	c := benchSetup(b)
	for _, p := range []struct {
		name, path string
		admin      bool
	}{
		{"instances", "/instances", false},
		{"instances-filtered", "/instances?state=pending&offering=h100.1x", false},
		{"instances-page-100", "/instances?after=i-bench004950", false},
		{"instances-admin", "/instances", true},
		{"instance", "/instances/i-bench004242", false},
		{"launch", "/launch", false},
		{"billing", "/billing", false},
		{"billing-meter", "/billing/meter", false},
		{"spot", "/spot", false},
		{"groups", "/groups", false},
		{"fleet", "/fleet", true},
		{"fleet-page-5", "/fleet?page=5", true},
	} {
		tok := c.member
		if p.admin {
			tok = c.admin
		}
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				req := httptest.NewRequest("GET", p.path, nil)
				req.AddCookie(&http.Cookie{Name: console.SessionCookie, Value: tok})
				rec := httptest.NewRecorder()
				c.h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", p.path, rec.Code, rec.Body.String())
				}
			}
		})
	}
}
