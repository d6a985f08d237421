package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// joinUses answers the max_uses and uses of join token id.
func (f *ahFixture) joinUses(id string) (maxUses, uses int) {
	f.t.Helper()
	ts, err := f.svc.Accounts.JoinTokens(context.Background(), f.admin)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, t := range ts {
		if t.ID == id {
			return t.MaxUses, t.Uses
		}
	}
	f.t.Fatalf("join token %s not listed", id)
	return 0, 0
}

// TestJoinUnderExistingHost: a join token alone does not join under the
// name of a host that has joined: the join is refused (Conflict, reason
// HostExists, naming the host and the removal), no certificate is signed,
// the token's use is not counted, and the real agent's credential stays
// live. Only the host's own live credential re-joins; after an admin
// removes the host, a join token joins it again.
func TestJoinUnderExistingHost(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		var signed atomic.Int32
		svc := service.New(st, nil, service.Options{Now: f.clock.Now, SignAgentCert: func(csr []byte, host string) ([]byte, error) {
			signed.Add(1)
			return []byte("cert of " + host), nil
		}})
		join, jtID := f.joinActorN("rack-1", 3)
		_, cred, _, _, err := svc.Agents.Join(ctx, join, jtID, ahInventory("node-1", "L4", 1), []byte("csr"), "")
		if err != nil {
			t.Fatal(err)
		}
		real, err := f.token(cred)
		if err != nil {
			t.Fatal(err)
		}
		other := ahInventory("node-2", "L4", 1)
		other.Host.GPUs[0].UUID += "-2"
		_, cred2, _, _, err := svc.Agents.Join(ctx, join, jtID, other, []byte("csr"), "")
		if err != nil {
			t.Fatal(err)
		}
		otherCred, _ := f.token(cred2)
		attacker, attackerToken := f.joinActorN("attacker", 5)
		revokedCred := &cloud.Token{}
		signed.Store(0)

		for _, c := range []struct {
			desc, credential string
		}{
			{"a valid join token alone", ""},
			{"another host's credential", otherCred.ID},
			{"a credential ID that is no token", "tk-0000000000000000"},
			{"the join token's own ID", attackerToken},
		} {
			before := f.state()
			_, _, certPEM, _, err := svc.Agents.Join(ctx, attacker, attackerToken, ahInventory("node-1", "H100", 8), []byte("csr"), c.credential)
			ce := ahCode(t, err, cloud.Conflict)
			if ce.Details["reason"] != service.HostExists || ce.Details["host"] != "node-1" ||
				!strings.Contains(ce.Message, "node-1") || !strings.Contains(ce.Message, "hosts remove node-1") {
				t.Errorf("%s: %+v", c.desc, ce)
			}
			if certPEM != nil || signed.Load() != 0 {
				t.Errorf("%s: a certificate was signed (%d) or answered (%q)", c.desc, signed.Load(), certPEM)
			}
			f.unchanged(before, c.desc)
			if _, uses := f.joinUses(attackerToken); uses != 0 {
				t.Errorf("%s: the refused join counted a use (%d)", c.desc, uses)
			}
			if tk, err := f.token(cred); err != nil || tk.ID != real.ID {
				t.Errorf("%s: the real agent's credential: %+v, %v", c.desc, tk, err)
			}
			if err := svc.Agents.Heartbeat(ctx, service.AgentActor("node-1"), nil); err != nil {
				t.Errorf("%s: the real agent's heartbeat: %v", c.desc, err)
			}
			if h := f.host("node-1"); len(h.Spec.GPUs) != 1 {
				t.Errorf("%s: the host's spec changed: %+v", c.desc, h.Spec)
			}
		}

		// The host's own credential re-joins: a new credential and
		// certificate, the old credential revoked.
		_, cred3, certPEM, created, err := svc.Agents.Join(ctx, join, jtID, ahInventory("node-1", "L4", 1), []byte("csr"), real.ID)
		if err != nil || created || string(certPEM) != "cert of node-1" {
			t.Fatalf("re-join with the host's credential: %v, %q, %v", created, certPEM, err)
		}
		if _, err := f.token(cred); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("the credential a re-join replaced: %v, want revoked", err)
		}
		*revokedCred = *real
		// The replaced credential no longer re-joins.
		_, _, _, _, err = svc.Agents.Join(ctx, attacker, attackerToken, ahInventory("node-1", "L4", 1), []byte("csr"), revokedCred.ID)
		ahCode(t, err, cloud.Conflict)

		// Removing the host: members may not; a missing host is NotFound;
		// an admin's removal revokes the live credential, and a join token
		// then joins the name again.
		_, err = svc.Hosts.Remove(ctx, f.acme, "node-1")
		ahCode(t, err, cloud.PermissionDenied)
		_, err = svc.Hosts.Remove(ctx, f.admin, "node-9")
		ahCode(t, err, cloud.NotFound)
		n, err := svc.Hosts.Remove(ctx, f.admin, "node-1")
		if err != nil || n != 1 {
			t.Fatalf("Remove = %d, %v; want 1 credential revoked", n, err)
		}
		if _, err := f.token(cred3); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("the removed host's credential: %v, want revoked", err)
		}
		if n, err := svc.Hosts.Remove(ctx, f.admin, "node-1"); err != nil || n != 0 {
			t.Errorf("removing a removed host = %d, %v; want 0", n, err)
		}
		id, cred4, _, created, err := svc.Agents.Join(ctx, attacker, attackerToken, ahInventory("node-1", "L4", 1), []byte("csr"), "")
		if err != nil || id != "node-1" || created {
			t.Fatalf("join after removal = %q, %v, %v", id, created, err)
		}
		if tk, err := f.token(cred4); err != nil || tk.HostID != "node-1" {
			t.Errorf("the credential of the join after removal: %+v, %v", tk, err)
		}
		kinds := []cloud.EventKind{}
		for _, ev := range ahEvents(t, st, cloud.EventFilter{HostID: "node-1"}) {
			kinds = append(kinds, ev.Kind)
		}
		if want := fmt.Sprint([]cloud.EventKind{service.EventHostJoined, service.EventHostRejoined, service.EventHostRemoved, service.EventHostRejoined}); fmt.Sprint(kinds) != want {
			t.Errorf("events %v, want %v", kinds, want)
		}
	})
}

// TestJoinTokenUses: a token joins as many hosts as it allows (one by
// default), a revoked one none, and the limits are checked when it is
// made.
func TestJoinTokenUses(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		host := 0
		joinNew := func(a service.Actor, id string) error {
			host++
			inv := ahInventory(fmt.Sprintf("node-%d", host), "L4", 1)
			inv.Host.GPUs[0].UUID += fmt.Sprint(host)
			_, _, _, _, err := f.svc.Agents.Join(ctx, a, id, inv, nil, "")
			return err
		}
		revokedActor, revokedID := f.joinActorN("revoked", 3)
		if _, err := f.svc.Accounts.RevokeToken(ctx, f.admin, revokedID); err != nil {
			t.Fatal(err)
		}
		for i, c := range []struct {
			desc     string
			maxJoins int // made with (0: the default)
			joins    int // that succeed
			wantMax  int
		}{
			{"the default is one join", 0, 1, 1},
			{"a single-use token", 1, 1, 1},
			{"a token of three joins", 3, 3, 3},
		} {
			a, id := f.joinActorN(fmt.Sprintf("tok-%d", i), c.maxJoins)
			for i := range c.joins {
				if err := joinNew(a, id); err != nil {
					t.Fatalf("%s: join %d: %v", c.desc, i+1, err)
				}
			}
			before := f.state()
			ce := ahCode(t, joinNew(a, id), cloud.Conflict)
			if ce.Details["reason"] != service.JoinTokenUsedUp || !strings.Contains(ce.Message, id) {
				t.Errorf("%s: the join past the last: %+v", c.desc, ce)
			}
			f.unchanged(before, c.desc+": the refused join")
			if max, uses := f.joinUses(id); max != c.wantMax || uses != c.joins {
				t.Errorf("%s: max_uses %d, uses %d; want %d, %d", c.desc, max, uses, c.wantMax, c.joins)
			}
		}
		before := f.state()
		ahCode(t, joinNew(revokedActor, revokedID), cloud.Unauthenticated)
		f.unchanged(before, "a revoked token's join")

		for _, c := range []struct {
			desc string
			max  int
		}{
			{"negative", -1},
			{"over the limit", service.MaxJoinTokenJoins + 1},
		} {
			_, err := f.svc.Accounts.CreateJoinToken(ctx, f.admin, "bad", nil, c.max)
			if ce := ahCode(t, err, cloud.Invalid); ce.Details["field"] != "max_uses" {
				t.Errorf("%s: %+v", c.desc, ce)
			}
		}
	})
}

// TestJoinTokenRace: joins racing for a token's last uses: exactly as
// many win as uses were left, the others are refused used up.
func TestJoinTokenRace(t *testing.T) {
	const racers = 6
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		for _, c := range []struct {
			desc      string
			max, used int
		}{
			{"the last use of a single-use token", 1, 0},
			{"the last use of a three-use token", 3, 2},
			{"two uses left", 4, 2},
		} {
			a, id := f.joinActorN(fmt.Sprintf("race-%d-%d", c.max, c.used), c.max)
			inv := func(i int) *agentapi.Inventory {
				inv := ahInventory(fmt.Sprintf("race-%d-%d-%d", c.max, c.used, i), "L4", 1)
				inv.Host.GPUs[0].UUID += inv.Host.ID
				return inv
			}
			for i := range c.used {
				if _, _, _, _, err := f.svc.Agents.Join(ctx, a, id, inv(100+i), nil, ""); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			errs := make([]error, racers)
			for i := range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _, _, _, errs[i] = f.svc.Agents.Join(ctx, a, id, inv(i), nil, "")
				}()
			}
			wg.Wait()
			won := 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case cloud.ErrorCode(err) != cloud.Conflict:
					t.Errorf("%s: a losing join: %v, want used up", c.desc, err)
				}
			}
			if want := c.max - c.used; won != want {
				t.Errorf("%s: %d of %d racing joins won, want %d", c.desc, won, racers, want)
			}
			if _, uses := f.joinUses(id); uses != c.max {
				t.Errorf("%s: uses %d, want %d", c.desc, uses, c.max)
			}
		}
	})
}

// TestHostsRemoveHolding: a host that holds instances is not removed: the
// removal is refused (Conflict, saying to drain it) and changes nothing.
func TestHostsRemoveHolding(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 4)
		in := f.placed(f.acme, "h-a", cloud.Scheduled)
		for _, state := range []cloud.State{cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Stopping} {
			if state != cloud.Scheduled {
				testkit.Move(t, st, in.ID, state, nil, f.clock.Now())
			}
			before := f.state()
			_, err := f.svc.Hosts.Remove(ctx, f.admin, "h-a")
			ce := ahCode(t, err, cloud.Conflict)
			if ce.Details["host"] != "h-a" || !strings.Contains(ce.Message, "hosts drain h-a") {
				t.Errorf("removing a host with a %s instance: %+v", state, ce)
			}
			f.unchanged(before, "a refused removal")
		}
		testkit.Move(t, st, in.ID, cloud.Stopped, nil, f.clock.Now())
		if n, err := f.svc.Hosts.Remove(ctx, f.admin, "h-a"); err != nil || n != 0 {
			t.Errorf("removing a drained host without credentials = %d, %v", n, err)
		}
	})
}
