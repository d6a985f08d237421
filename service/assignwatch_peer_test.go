package service

import (
	"context"
	"slices"
	"testing"
	"time"
)

// The carrier's side of AssignmentChanges: local changes are published
// and remote ones are not; a remote change wakes its waiters; SetPeered
// wakes every waiter and answers at once a wait begun before it.
func TestAssignmentChangesAcrossReplicas(t *testing.T) {
	c := NewAssignmentChanges()
	var published [][]string
	c.Publish(func(keys []string) { published = append(published, slices.Clone(keys)) })

	c.note([]string{hostKey("h1")})
	c.NoteRemote([]string{hostKey("h2")})
	if len(published) != 1 || published[0][0] != hostKey("h1") {
		t.Fatalf("published %v, want the local change alone", published)
	}
	if HostAssignmentKey("h1") != hostKey("h1") {
		t.Fatal("HostAssignmentKey is not the key notes use")
	}

	wait := func(since uint64, keys []string) chan bool {
		done := make(chan bool, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			done <- c.Wait(ctx, since, keys)
		}()
		return done
	}
	waiting := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); c.Waiters() != n; {
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters, want %d", c.Waiters(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	expect := func(done chan bool, want bool) {
		t.Helper()
		select {
		case got := <-done:
			if got != want {
				t.Fatalf("Wait answered %v, want %v", got, want)
			}
		case <-time.After(6 * time.Second):
			t.Fatal("Wait did not answer")
		}
	}

	// A remote change of h3 wakes h3's waiter, not h4's.
	seq := c.Seq()
	w3, w4 := wait(seq, []string{hostKey("h3")}), wait(seq, []string{hostKey("h4")})
	waiting(2)
	c.NoteRemote([]string{hostKey("h3")})
	expect(w3, true)
	waiting(1)

	// The carrier going down wakes every waiter (h4's among them)...
	if c.Peered() {
		t.Fatal("peered before SetPeered")
	}
	c.SetPeered(true)
	expect(w4, true)
	if !c.Peered() {
		t.Fatal("SetPeered(true) did not take")
	}
	// ...and a wait that read its sequence before it answers at once.
	before := c.Seq()
	c.SetPeered(false)
	expect(wait(before, []string{hostKey("never-changed")}), true)
	if c.Peered() {
		t.Fatal("SetPeered(false) did not take")
	}
	// A wait from after it waits as before.
	after := c.Seq()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if c.Wait(ctx, after, []string{hostKey("never-changed")}) {
		t.Fatal("a wait with nothing changed answered changed")
	}
}

// NetworkChanges' side: a local change is published as keys, and the
// keys noted remotely wake the views of those networks and hosts (or
// every view), without being published again.
func TestNetworkChangesAcrossReplicas(t *testing.T) {
	c := NewNetworkChanges()
	var published [][]string
	c.Publish(func(keys []string) { published = append(published, slices.Clone(keys)) })
	c.note([]string{"vpc-1", ""}, []string{"h1"}, true)
	if len(published) != 1 || !slices.Equal(published[0], []string{"net/vpc-1", "host/h1", NetworkKeyAll}) {
		t.Fatalf("published %v", published)
	}
	for _, tc := range []struct {
		name  string
		keys  []string
		nets  []string
		host  string
		wakes bool
	}{
		{"its network", []string{"net/vpc-2"}, []string{"vpc-2"}, "h9", true},
		{"another network", []string{"net/vpc-3"}, []string{"vpc-2"}, "h9", false},
		{"its host", []string{"host/h9"}, []string{"vpc-2"}, "h9", true},
		{"every view", []string{NetworkKeyAll}, []string{"vpc-2"}, "h9", true},
		{"an unknown key", []string{"bogus"}, []string{"vpc-2"}, "h9", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq := c.Seq()
			c.NoteRemote(tc.keys)
			if got := c.Changed(seq, tc.nets, tc.host); got != tc.wakes {
				t.Errorf("changed %v, want %v", got, tc.wakes)
			}
		})
	}
	if len(published) != 1 {
		t.Errorf("remote changes were published again: %v", published)
	}
}
