package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/testkit"
)

// fake is a controller that records its rounds.
type fake struct {
	name  string
	every time.Duration
	err   error
	ran   *[]string
}

func (f *fake) Name() string            { return f.name }
func (f *fake) Interval() time.Duration { return f.every }
func (f *fake) Reconcile(context.Context) error {
	*f.ran = append(*f.ran, f.name)
	return f.err
}

// TestLoopRunsDueControllersInOrder: the loop ticks at the smallest
// interval; on each tick it runs, in list order, the controllers whose
// interval has passed (a tick's jitter included), and logs a failed round
// with the controller's name.
func TestLoopRunsDueControllersInOrder(t *testing.T) {
	var ran []string
	c := testkit.NewClock(t0)
	var logs bytes.Buffer
	l := &Loop{Now: c.Now, Log: slog.New(slog.NewTextHandler(&logs, nil)), Controllers: []Controller{
		&fake{name: "market", every: time.Second, ran: &ran},
		&fake{name: "scheduler", every: 200 * time.Millisecond, ran: &ran},
		&fake{name: "budgets", every: time.Minute, ran: &ran, err: errors.New("boom")},
	}}
	if d := l.Tick(); d != 200*time.Millisecond {
		t.Fatalf("tick %s, want the smallest interval", d)
	}
	step := func(want ...string) {
		t.Helper()
		ran = ran[:0]
		got := l.Step(context.Background())
		if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(ran) != fmt.Sprint(want) {
			t.Fatalf("at %s: ran %v (reported %v), want %v", c.Now().Sub(t0), ran, got, want)
		}
	}
	step("market", "scheduler", "budgets")
	if !strings.Contains(logs.String(), "controller=budgets") || !strings.Contains(logs.String(), "boom") {
		t.Fatalf("the failed round is not logged with its controller's name: %s", logs.String())
	}
	for i := 1; i < 5; i++ {
		// A tick that comes a little early still runs the scheduler.
		c.Set(t0.Add(time.Duration(i)*200*time.Millisecond - time.Millisecond))
		step("scheduler")
	}
	c.Set(t0.Add(time.Second))
	step("market", "scheduler")
	c.Set(t0.Add(time.Minute))
	step("market", "scheduler", "budgets")
}

// counting is a controller that counts its rounds.
type counting struct{ rounds atomic.Int64 }

func (c *counting) Name() string                    { return "a" }
func (c *counting) Interval() time.Duration         { return time.Millisecond }
func (c *counting) Reconcile(context.Context) error { c.rounds.Add(1); return nil }

// TestLoopRunUntilCancelled: Run ticks on its own (rounds come without
// the test stepping it) and returns when ctx is cancelled.
func TestLoopRunUntilCancelled(t *testing.T) {
	c := &counting{}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Loop{Controllers: []Controller{c}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx)
	}()
	testkit.Eventually(t, 0, "two rounds at a 1 ms interval", func() bool { return c.rounds.Load() >= 2 })
	cancel()
	select {
	case <-done:
	case <-time.After(testkit.WaitTimeout):
		t.Fatal("Run did not return after its context was cancelled")
	}
}
