package controller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// kickCounter counts its rounds; kickable says whether a kick runs it.
type kickCounter struct {
	name     string
	kickable bool
	rounds   atomic.Int32
}

func (k *kickCounter) Name() string                    { return k.name }
func (k *kickCounter) Interval() time.Duration         { return time.Hour }
func (k *kickCounter) Reconcile(context.Context) error { k.rounds.Add(1); return nil }
func (k *kickCounter) Kickable() bool                  { return k.kickable }

// TestLoopKick: a kick runs the Kickable controllers at once, however long
// their interval, and the others only when due (their first round); kicks
// that come together run them once.
func TestLoopKick(t *testing.T) {
	fast := &kickCounter{name: "endpoints", kickable: true}
	slow := &kickCounter{name: "budgets"}
	l := &Loop{Controllers: []Controller{fast, slow}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: endpoints ran %d times, budgets %d", what, fast.rounds.Load(), slow.rounds.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	l.Kick()
	wait("the first kick", func() bool { return fast.rounds.Load() == 1 && slow.rounds.Load() == 1 })
	for range 5 {
		l.Kick() // together: one pending kick at most
	}
	wait("the second kick", func() bool { return fast.rounds.Load() >= 2 })
	time.Sleep(3 * minKickGap)
	if n := fast.rounds.Load(); n > 3 {
		t.Errorf("5 kicks at once ran the kickable controller %d more times, want at most 2", n-1)
	}
	if n := slow.rounds.Load(); n != 1 {
		t.Errorf("a kick ran a controller that is not Kickable and not due: %d rounds", n)
	}
}
