package service

import (
	"context"
	"testing"
	"time"
)

func TestNetworkChangesWakesOnlyInterested(t *testing.T) {
	tests := []struct {
		name        string
		nets, hosts []string
		all         bool
		wantNets    []string
		wantHost    string
		want        bool
	}{
		{"a network it carries", []string{"net-a"}, nil, false, []string{"net-a", "net-b"}, "h1", true},
		{"another network", []string{"net-c"}, nil, false, []string{"net-a"}, "h1", false},
		{"its host", nil, []string{"h1"}, false, []string{"net-a"}, "h1", true},
		{"another host", nil, []string{"h2"}, false, nil, "h1", false},
		{"every view", nil, nil, true, nil, "h1", true},
		{"empty IDs are nothing", []string{""}, []string{""}, false, []string{""}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewNetworkChanges()
			since := c.Seq()
			c.note(tt.nets, tt.hosts, tt.all)
			if got := c.Changed(since, tt.wantNets, tt.wantHost); got != tt.want {
				t.Fatalf("Changed = %v, want %v", got, tt.want)
			}
			// A change before since is never news.
			if c.Changed(c.Seq(), tt.wantNets, tt.wantHost) {
				t.Fatal("Changed reports a change made before since")
			}
		})
	}
}

func TestNetworkChangesWait(t *testing.T) {
	c := NewNetworkChanges()
	since := c.Seq()
	done := make(chan bool, 1)
	go func() { done <- c.Wait(context.Background(), since, []string{"net-a"}, "h1") }()
	c.note([]string{"net-other"}, nil, false) // wakes the waiter, which waits on
	select {
	case <-done:
		t.Fatal("Wait returned for a network it does not carry")
	case <-time.After(50 * time.Millisecond):
	}
	c.note([]string{"net-a"}, nil, false)
	if !<-done {
		t.Fatal("Wait = false after a change of its network")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c.Wait(ctx, c.Seq(), []string{"net-a"}, "h1") {
		t.Fatal("Wait on an ended context reports a change")
	}
}
