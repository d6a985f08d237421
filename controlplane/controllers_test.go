package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestControllerOrder: the leader runs one list of controllers, the
// market before the scheduler (the scheduler places, in the same tick, the
// relaunches and the zones the market decided), each with the interval
// its configuration gives.
func TestControllerOrder(t *testing.T) {
	s, err := Start(context.Background(), Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "gpucloud.db"), Listen: "127.0.0.1:0",
		ScheduleInterval: 20 * time.Millisecond, MarketInterval: 300 * time.Millisecond, BudgetInterval: time.Hour,
		HeartbeatTimeout: 8 * time.Second, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	var names []string
	every := map[string]time.Duration{}
	for _, c := range s.Controllers {
		names = append(names, c.Name())
		every[c.Name()] = c.Interval()
	}
	market, sched := slices.Index(names, "market"), slices.Index(names, "scheduler")
	if market < 0 || sched < 0 || market > sched {
		t.Fatalf("controllers %v: the market must run before the scheduler", names)
	}
	if s.Controllers[market] != s.Market || s.Controllers[sched] != s.Scheduler {
		t.Fatalf("the listed market and scheduler are not the replica's")
	}
	if groups := slices.Index(names, "groups"); groups < market || groups > sched {
		t.Errorf("controllers %v: the group controller must run between the market and the scheduler", names)
	}
	for _, name := range []string{"budgets", "health", "groups"} {
		if !slices.Contains(names, name) {
			t.Errorf("controllers %v: no %s", names, name)
		}
	}
	want := map[string]time.Duration{"scheduler": 20 * time.Millisecond, "market": 300 * time.Millisecond,
		"budgets": time.Hour, "health": 2 * time.Second}
	for name, d := range want {
		if every[name] != d {
			t.Errorf("%s runs every %s, want %s", name, every[name], d)
		}
	}
}

// TestStopControllers: StopControllers ends the lead and every controller
// round (it waits for one in progress), and the API keeps serving.
func TestStopControllers(t *testing.T) {
	s, err := Start(context.Background(), Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "gpucloud.db"), Listen: "127.0.0.1:0",
		ScheduleInterval: 20 * time.Millisecond, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	deadline := time.Now().Add(10 * time.Second)
	for !s.IsLeader() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !s.IsLeader() {
		t.Fatal("the replica never led")
	}
	s.StopControllers()
	if s.IsLeader() {
		t.Error("still leading after StopControllers")
	}
	hc := s.HTTPClient()
	resp, err := hc.Get(s.URL + "/ca.crt")
	if err != nil {
		t.Fatalf("the API after StopControllers: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /ca.crt: %d", resp.StatusCode)
	}
}

// TestCreatePlacedWithoutTick: a create that leaves the creates idle
// kicks the leader's scheduler (service.Options.CreatesIdle), so a lone
// create is placed at once, not at the scheduler's next tick, here an hour
// away.
func TestCreatePlacedWithoutTick(t *testing.T) {
	ctx := context.Background()
	s := startStill(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"), 1)
	// The scheduler's first round (every controller runs at the loop's
	// start) builds its fleet; the next is due in an hour.
	testkit.Eventually(t, time.Minute, "the scheduler's first round", func() bool { return s.Scheduler.Schedulable() == 1 })
	admin := client.New(s.URL, s.AdminToken, s.HTTPClient())
	tn, err := admin.CreateTenant(ctx, "kick")
	if err != nil {
		t.Fatal(err)
	}
	u, err := admin.CreateUser(ctx, tn.ID, api.CreateUserRequest{Name: "u"})
	if err != nil {
		t.Fatal(err)
	}
	member := client.New(s.URL, u.Secret, s.HTTPClient())
	for i := range 3 {
		in, err := member.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x"}, fmt.Sprint("k", i))
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, "create "+fmt.Sprint(i)+" placed", func() bool {
			got, err := member.GetInstance(ctx, in.ID)
			return err == nil && got.State == cloud.Scheduled
		})
	}
}

// startStill starts a server on db with hosts of the benchmark's fleet
// (benchHost 0 to hosts-1) and every controller's interval an hour: after
// their first round, nothing runs unless kicked. It is closed when the
// test ends.
func startStill(t *testing.T, db string, hosts int) *Replica {
	t.Helper()
	ctx := context.Background()
	st, err := OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	err = st.Tx(ctx, func(tx cloud.Tx) error {
		for i := range hosts {
			h := benchHost(i)
			if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: time.Now()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	hour := time.Hour
	s, err := Start(ctx, Config{DB: db, Listen: "127.0.0.1:0", Log: quiet, HeartbeatTimeout: hour,
		ScheduleInterval: hour, SpotClearInterval: hour, BudgetInterval: hour, GroupInterval: hour,
		StackInterval: hour, MarketInterval: hour, EndpointInterval: hour, GatewayRefresh: hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}
