package controlplane

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"
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
