package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	control "github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/store/sqlstore"
)

// inventory is what an agent of a host with gpus GPUs of model reports:
// the mock host without a state, plus driver versions.
func inventory(id, model string, gpus int) *agentapi.Inventory {
	h := fleet.MockHost(id, model, gpus)
	h.State = ""
	delete(h.Labels, "driver")
	return &agentapi.Inventory{Host: *h, Driver: "550.54.15", CUDA: "12.4"}
}

// joinToken creates a join token and returns its secret.
func (e *env) joinToken(name string) string {
	e.t.Helper()
	jt, err := e.admin.CreateJoinToken(context.Background(), api.CreateJoinTokenRequest{Name: name})
	if err != nil {
		e.t.Fatalf("create join token: %v", err)
	}
	return jt.Secret
}

// agentClient returns an agent protocol client with token.
func (e *env) agentClient(token string) *agentapi.Client {
	return agentapi.NewClient(e.srv.URL, token, e.srv.Client())
}

// agentConn is a joined host's agent: its client and its credential.
type agentConn struct {
	*agentapi.Client
	token string
}

// join joins a host and returns its agent, with its credential.
func (e *env) join(inv *agentapi.Inventory) (*agentConn, string) {
	e.t.Helper()
	jr, err := e.agentClient("").Join(context.Background(), agentapi.JoinRequest{JoinToken: e.joinToken("join-" + inv.Host.ID), Inventory: inv})
	if err != nil {
		e.t.Fatalf("join %s: %v", inv.Host.ID, err)
	}
	return &agentConn{Client: e.agentClient(jr.Credential), token: jr.Credential}, jr.HostID
}

func (e *env) host(id string) *cloud.Host {
	e.t.Helper()
	var h *cloud.Host
	err := e.store.Tx(context.Background(), func(tx cloud.Tx) (err error) {
		h, err = tx.GetHost(context.Background(), id)
		return err
	})
	if err != nil {
		e.t.Fatalf("get host %s: %v", id, err)
	}
	return h
}

// events returns the kinds of the events that name host id.
func (e *env) hostEvents(id string) []cloud.EventKind {
	e.t.Helper()
	evs, err := e.admin.Events(context.Background(), client.EventsOptions{Host: id})
	if err != nil {
		e.t.Fatal(err)
	}
	var kinds []cloud.EventKind
	for _, ev := range evs.Events {
		kinds = append(kinds, ev.Kind)
	}
	return kinds
}

func TestJoinTokens(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	jt, err := e.admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "rack-12"})
	if err != nil || jt.Token.Role != cloud.RoleJoin || !strings.HasPrefix(jt.Secret, "gpc_") {
		t.Fatalf("CreateJoinToken = %+v, %v", jt, err)
	}
	_, err = e.acme.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "mine"})
	wantCode(t, err, cloud.PermissionDenied)
	_, err = e.admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{})
	wantCode(t, err, cloud.Invalid)
	past := e.clock.Now().Add(-time.Minute)
	_, err = e.admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "old", ExpiresAt: &past})
	wantCode(t, err, cloud.Invalid)

	list, err := e.admin.JoinTokens(ctx)
	if err != nil || len(list) != 1 || list[0].ID != jt.Token.ID || list[0].Name != "rack-12" {
		t.Fatalf("JoinTokens = %+v, %v", list, err)
	}
	if _, err := e.admin.RevokeToken(ctx, jt.Token.ID); err != nil {
		t.Fatal(err)
	}
	list, _ = e.admin.JoinTokens(ctx)
	if len(list) != 1 || list[0].RevokedAt == nil {
		t.Errorf("after revoking: %+v", list)
	}
}

func TestJoinRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	good := e.joinToken("good")
	soon := e.clock.Now().Add(time.Minute)
	expiring, err := e.admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "soon", ExpiresAt: &soon})
	if err != nil {
		t.Fatal(err)
	}
	revoked, _ := e.admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "revoked"})
	if _, err := e.admin.RevokeToken(ctx, revoked.Token.ID); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	anon := e.agentClient("")
	before := e.counts()
	for _, c := range []struct {
		desc  string
		token string
		code  cloud.Code
	}{
		{"no join token", "", cloud.Unauthenticated},
		{"a made-up token", "gpc_tk-0000_nothing", cloud.Unauthenticated},
		{"not a token at all", "hello", cloud.Unauthenticated},
		{"an expired join token", expiring.Secret, cloud.Unauthenticated},
		{"a revoked join token", revoked.Secret, cloud.Unauthenticated},
		{"a member's token", e.acmeToken, cloud.PermissionDenied},
		{"an admin's token", e.adminToken, cloud.PermissionDenied},
	} {
		_, err := anon.Join(ctx, agentapi.JoinRequest{JoinToken: c.token, Inventory: inventory("n-1", "L4", 1)})
		if got := cloud.ErrorCode(err); got != c.code {
			t.Errorf("%s: %v, want %s", c.desc, err, c.code)
		}
	}

	bad := func(change func(inv *agentapi.Inventory)) *agentapi.Inventory {
		inv := inventory("n-1", "H100", 2)
		change(inv)
		return inv
	}
	for _, c := range []struct {
		desc string
		inv  *agentapi.Inventory
		msg  string
	}{
		{"no inventory", nil, "inventory"},
		{"an unknown GPU model", bad(func(inv *agentapi.Inventory) { inv.Host.GPUs[1].Model = "B300" }), "B300"},
		{"a GPU without UUID", bad(func(inv *agentapi.Inventory) { inv.Host.GPUs[0].UUID = "" }), "uuid"},
		{"a UUID twice", bad(func(inv *agentapi.Inventory) { inv.Host.GPUs[1].UUID = inv.Host.GPUs[0].UUID }), "twice"},
		{"GPUs out of order", bad(func(inv *agentapi.Inventory) { inv.Host.GPUs[1].Index = 5 }), "index"},
		{"negative CPU", bad(func(inv *agentapi.Inventory) { inv.Host.CPUMilli = -1 }), "negative"},
		{"a bad host ID", bad(func(inv *agentapi.Inventory) { inv.Host.ID = "no spaces" }), "inventory.host.id"},
		{"MIG instances without MIG mode", bad(func(inv *agentapi.Inventory) {
			inv.Host.GPUs[0].Instances = []fleet.MIGInstance{{ProfileID: 9, Start: 0}}
		}), "not in MIG mode"},
		{"a MIG instance at a slot its profile cannot use", bad(func(inv *agentapi.Inventory) {
			inv.Host.GPUs[0].MIG = true
			inv.Host.GPUs[0].Instances = []fleet.MIGInstance{{ProfileID: 9, Start: 2}}
		}), "slot"},
		{"MIG on a model without MIG", func() *agentapi.Inventory {
			inv := inventory("n-1", "L4", 1)
			inv.Host.GPUs[0].MIG = true
			return inv
		}(), "no MIG"},
	} {
		_, err := anon.Join(ctx, agentapi.JoinRequest{JoinToken: good, Inventory: c.inv})
		ce := wantCode(t, err, cloud.Invalid)
		if !strings.Contains(ce.Message, c.msg) {
			t.Errorf("%s: %q does not mention %q", c.desc, ce.Message, c.msg)
		}
	}
	e.unchanged(before, "refused joins")
}

func TestJoin(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	inv := inventory("node-1", "H100", 2)
	inv.Host.GPUs[1].WholeAlloc, inv.Host.UsedCPUMilli, inv.Host.Allocs = "i-ghost", 1000, 1
	jr, err := e.agentClient("").Join(ctx, agentapi.JoinRequest{JoinToken: e.joinToken("j"), Inventory: inv})
	if err != nil || jr.HostID != "node-1" {
		t.Fatalf("Join = %+v, %v", jr, err)
	}
	h := e.host("node-1")
	want := fleet.MockHost("node-1", "H100-80GB-SXM", 2)
	want.Labels = map[string]string{"driver": "550.54.15", "cuda": "12.4"}
	if h.State != fleet.Schedulable || !h.LastHeartbeat.Equal(e.clock.Now()) || !sameSpec(h.Spec, *want) {
		t.Errorf("joined host: %+v\nwant spec %+v", h, want)
	}
	if k := e.hostEvents("node-1"); !slices.Equal(k, []cloud.EventKind{EventHostJoined}) {
		t.Errorf("events %v", k)
	}
	agent := e.agentClient(jr.Credential)
	if as, err := agent.Assignments(ctx); err != nil || len(as.Assignments) != 0 {
		t.Errorf("assignments of a new host = %+v, %v", as, err)
	}
	toks, _ := e.admin.Tokens(ctx, OperatorTenant)
	found := false
	for _, tk := range toks {
		found = found || tk.Role == cloud.RoleAgent && tk.HostID == "node-1"
	}
	if !found {
		t.Errorf("no agent token bound to node-1 in %+v", toks)
	}

	// Without a host ID the server names the host.
	inv2 := inventory("", "L4", 1)
	for i := range inv2.Host.GPUs {
		inv2.Host.GPUs[i].UUID += "-b"
	}
	jr2, err := e.agentClient("").Join(ctx, agentapi.JoinRequest{JoinToken: e.joinToken("k"), Inventory: inv2})
	if err != nil || !strings.HasPrefix(jr2.HostID, "h-") {
		t.Fatalf("Join without ID = %+v, %v", jr2, err)
	}
	if h := e.host(jr2.HostID); h.Spec.ID != jr2.HostID {
		t.Errorf("spec ID %q, want %q", h.Spec.ID, jr2.HostID)
	}
}

func TestRejoin(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	old, _ := e.join(inventory("node-1", "L4", 1))
	if _, err := e.admin.CordonHost(ctx, "node-1", 0); err != nil {
		t.Fatal(err)
	}
	v := e.host("node-1").Version
	e.clock.Advance(time.Hour)
	// The re-join presents the host's current credential.
	jr, err := e.agentClient("").Join(ctx, agentapi.JoinRequest{JoinToken: e.joinToken("again"),
		Inventory: inventory("node-1", "L4", 2), Credential: old.token})
	if err != nil {
		t.Fatal(err)
	}
	agent, id := e.agentClient(jr.Credential), jr.HostID
	h := e.host("node-1")
	if id != "node-1" || h.Version != v+1 || len(h.Spec.GPUs) != 2 || h.State != fleet.Cordoned || !h.LastHeartbeat.Equal(e.clock.Now()) {
		t.Errorf("re-joined host %+v (version was %d)", h, v)
	}
	if err := errOf(agent.Heartbeat(ctx, agentapi.HeartbeatRequest{})); err != nil {
		t.Errorf("new credential: %v", err)
	}
	wantCode(t, errOf(old.Heartbeat(ctx, agentapi.HeartbeatRequest{})), cloud.Unauthenticated)
	if k := e.hostEvents("node-1"); !slices.Equal(k, []cloud.EventKind{EventHostJoined, EventHostCordoned, EventHostRejoined}) {
		t.Errorf("events %v", k)
	}
}

// TestJoinTakeover: whoever holds a join token cannot join under the name
// of a host that has joined: the join is refused 409 (reason host_exists,
// naming the host) and changes nothing, and the real agent keeps working.
// A credential that is not the host's does not help; an admin's removal
// (POST /v1/hosts/{id}/remove) lets the name join again and shuts out the
// old agent.
func TestJoinTakeover(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	real, _ := e.join(inventory("node-1", "L4", 1))
	other, _ := e.join(inventory("node-2", "L4", 1))
	for _, c := range []struct {
		desc       string
		credential string
		code       cloud.Code
	}{
		{"a join token alone", "", cloud.Conflict},
		{"another host's credential", other.token, cloud.Conflict},
		{"a join token as the credential", e.joinToken("x"), cloud.Conflict},
		{"a member's token as the credential", e.acmeToken, cloud.Conflict},
		{"a made-up credential", "gpc_made_up", cloud.Conflict},
	} {
		jt := e.joinToken("attacker")
		before := e.counts()
		_, err := e.agentClient("").Join(ctx, agentapi.JoinRequest{JoinToken: jt, Inventory: inventory("node-1", "H100", 8), Credential: c.credential})
		ce := wantCode(t, err, c.code)
		if c.code == cloud.Conflict && (ce.Details["reason"] != "host_exists" || ce.Details["host"] != "node-1") {
			t.Errorf("%s: %+v", c.desc, ce)
		}
		e.unchanged(before, c.desc)
		if err := errOf(real.Heartbeat(ctx, agentapi.HeartbeatRequest{})); err != nil {
			t.Errorf("%s: the real agent's heartbeat: %v", c.desc, err)
		}
		if as, err := real.Assignments(ctx); err != nil || as == nil {
			t.Errorf("%s: the real agent's assignments: %v", c.desc, err)
		}
	}

	// Removing: admins only; then the name joins again.
	_, err := e.acme.RemoveHost(ctx, "node-1")
	wantCode(t, err, cloud.PermissionDenied)
	res, err := e.admin.RemoveHost(ctx, "node-1")
	if err != nil || res.Host != "node-1" || res.Revoked != 1 {
		t.Fatalf("RemoveHost = %+v, %v", res, err)
	}
	wantCode(t, errOf(real.Heartbeat(ctx, agentapi.HeartbeatRequest{})), cloud.Unauthenticated)
	jr, err := e.agentClient("").Join(ctx, agentapi.JoinRequest{JoinToken: e.joinToken("after"), Inventory: inventory("node-1", "L4", 1)})
	if err != nil || jr.HostID != "node-1" {
		t.Fatalf("join after removal = %+v, %v", jr, err)
	}
	if err := errOf(e.agentClient(jr.Credential).Heartbeat(ctx, agentapi.HeartbeatRequest{})); err != nil {
		t.Errorf("the new agent's heartbeat: %v", err)
	}
}

// TestJoinTokenMaxUses: a join token joins one host by default, N with
// max_uses N; the join past the last is refused 409 (reason
// join_token_used_up); the list shows the joins.
func TestJoinTokenMaxUses(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for i, c := range []struct {
		desc    string
		max, ok int
		wantMax int
	}{
		{"the default", 0, 1, 1},
		{"three joins", 3, 3, 3},
	} {
		jt, err := e.admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: fmt.Sprintf("n-%d", i), MaxUses: c.max})
		if err != nil || jt.Token.MaxUses != c.wantMax {
			t.Fatalf("%s: CreateJoinToken = %+v, %v", c.desc, jt, err)
		}
		inv := func(n int) *agentapi.Inventory {
			inv := inventory(fmt.Sprintf("mx-%d-%d", i, n), "L4", 1)
			inv.Host.GPUs[0].UUID += inv.Host.ID
			return inv
		}
		for n := range c.ok {
			if _, err := e.agentClient("").Join(ctx, agentapi.JoinRequest{JoinToken: jt.Secret, Inventory: inv(n)}); err != nil {
				t.Fatalf("%s: join %d: %v", c.desc, n, err)
			}
		}
		before := e.counts()
		_, err = e.agentClient("").Join(ctx, agentapi.JoinRequest{JoinToken: jt.Secret, Inventory: inv(c.ok)})
		if ce := wantCode(t, err, cloud.Conflict); ce.Details["reason"] != "join_token_used_up" {
			t.Errorf("%s: %+v", c.desc, ce)
		}
		e.unchanged(before, c.desc)
		ts, err := e.admin.JoinTokens(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			if tk.ID == jt.Token.ID && (tk.Uses != c.ok || tk.MaxUses != c.wantMax) {
				t.Errorf("%s: listed %d/%d joins, want %d/%d", c.desc, tk.Uses, tk.MaxUses, c.ok, c.wantMax)
			}
		}
	}
	_, err := e.admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "neg", MaxUses: -1})
	wantCode(t, err, cloud.Invalid)
}

func TestHeartbeat(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	inv := inventory("node-1", "H100", 2)
	agent, _ := e.join(inv)
	v := e.host("node-1").Version

	e.clock.Advance(10 * time.Second)
	if err := errOf(agent.Heartbeat(ctx, agentapi.HeartbeatRequest{})); err != nil {
		t.Fatal(err)
	}
	if h := e.host("node-1"); h.Version != v || !h.LastHeartbeat.Equal(e.clock.Now()) {
		t.Errorf("heartbeat without inventory: version %d (was %d), last %v", h.Version, v, h.LastHeartbeat)
	}
	e.clock.Advance(10 * time.Second)
	if err := errOf(agent.Heartbeat(ctx, agentapi.HeartbeatRequest{Inventory: inv})); err != nil {
		t.Fatal(err)
	}
	if h := e.host("node-1"); h.Version != v || !h.LastHeartbeat.Equal(e.clock.Now()) {
		t.Errorf("heartbeat with the same inventory: version %d (was %d)", h.Version, v)
	}
	inv.Host.GPUs[0].MIG = true
	inv.Host.GPUs[0].Instances = []fleet.MIGInstance{{ProfileID: 9, Start: 4}}
	if err := errOf(agent.Heartbeat(ctx, agentapi.HeartbeatRequest{Inventory: inv})); err != nil {
		t.Fatal(err)
	}
	h := e.host("node-1")
	got := h.Spec.GPUs[0]
	if h.Version != v+1 || !got.MIG || len(got.Instances) != 1 || got.Instances[0].Slots != 4 || got.Instances[0].Slices != 3 {
		t.Errorf("heartbeat with a new inventory: version %d (was %d), gpu 0 %+v", h.Version, v, got)
	}
	inv.Host.ID = "node-2"
	wantCode(t, errOf(agent.Heartbeat(ctx, agentapi.HeartbeatRequest{Inventory: inv})), cloud.Invalid)

	// A silent host is marked unhealthy; its next heartbeat heals it.
	e.clock.Advance(time.Minute)
	if marked, err := service.MarkSilentHosts(ctx, e.store, e.clock.Now(), control.DefaultHeartbeatTimeout); err != nil || len(marked) != 1 {
		t.Fatalf("MarkSilentHosts = %v, %v", marked, err)
	}
	if err := errOf(agent.Heartbeat(ctx, agentapi.HeartbeatRequest{})); err != nil {
		t.Fatal(err)
	}
	if h := e.host("node-1"); h.State != fleet.Schedulable || h.Spec.State != fleet.Schedulable {
		t.Errorf("after the heartbeat of an unhealthy host: %s", h.State)
	}
	k := e.hostEvents("node-1")
	if want := []cloud.EventKind{EventHostJoined, EventHostInventory, "host.unhealthy", EventHostHealthy}; !slices.Equal(k, want) {
		t.Errorf("events %v, want %v", k, want)
	}
}

func TestAgentRoles(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	joined, _ := e.join(inventory("node-1", "L4", 1))
	agent := e.client(joined.token)
	joinToken := e.joinToken("j")
	join := e.client(joinToken)
	for _, c := range []struct {
		desc string
		err  error
	}{
		{"an agent lists instances", func() error { _, err := agent.ListInstances(ctx, client.ListInstancesOptions{}); return err }()},
		{"an agent makes itself a token", func() error { _, err := agent.CreateToken(ctx, api.CreateTokenRequest{}); return err }()},
		{"an agent lists hosts", func() error { _, err := agent.Hosts(ctx); return err }()},
		{"an agent makes join tokens", func() error {
			_, err := agent.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "x"})
			return err
		}()},
		{"a join token lists instances", func() error { _, err := join.ListInstances(ctx, client.ListInstancesOptions{}); return err }()},
		{"a join token heartbeats", errOf(e.agentClient(joinToken).Heartbeat(ctx, agentapi.HeartbeatRequest{}))},
		{"a member heartbeats", errOf(e.agentClient(e.acmeToken).Heartbeat(ctx, agentapi.HeartbeatRequest{}))},
		{"an admin reads assignments", func() error { _, err := e.agentClient(e.adminToken).Assignments(ctx); return err }()},
	} {
		if cloud.ErrorCode(c.err) != cloud.PermissionDenied {
			t.Errorf("%s: %v, want permission_denied", c.desc, c.err)
		}
	}
	// Members do not see join tokens and agent credentials, even in the
	// operator tenant.
	u, err := e.admin.CreateUser(ctx, OperatorTenant, api.CreateUserRequest{Name: "op"})
	if err != nil {
		t.Fatal(err)
	}
	toks, err := e.client(u.Secret).Tokens(ctx, "")
	if err != nil || len(toks) == 0 {
		t.Fatalf("an operator member's tokens: %+v, %v", toks, err)
	}
	for _, tk := range toks {
		if tk.Role == cloud.RoleJoin || tk.Role == cloud.RoleAgent {
			t.Errorf("an operator member sees token %+v", tk)
			_, err := e.client(u.Secret).RevokeToken(ctx, tk.ID)
			wantCode(t, err, cloud.NotFound)
		}
	}
	all, _ := e.admin.Tokens(ctx, OperatorTenant)
	for _, tk := range all {
		if tk.Role == cloud.RoleAgent || tk.Role == cloud.RoleJoin {
			_, err := e.client(u.Secret).RevokeToken(ctx, tk.ID)
			wantCode(t, err, cloud.NotFound)
		}
	}
}

// sameSpec reports whether two specs describe the same host, whatever
// their State fields say (the host's State is the one that counts).
func sameSpec(a, b fleet.Host) bool {
	a.State, b.State = "", ""
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// errOf is the error of a call that also answers a value.
func errOf[T any](_ T, err error) error { return err }

// TestJoinForgetsOnlyTheRejoinedHostsCredentials: a failed join leaves
// the server's cache of agent credentials alone, and a re-join forgets
// only its own host's (revoked) credential: the other agents' next calls
// cost no look-up. (Clearing the whole cache on every join made a fleet
// that joins at once look every credential up again together.)
func TestJoinForgetsOnlyTheRejoinedHostsCredentials(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, _ := e.join(inventory("node-a", "L4", 1))
	b, _ := e.join(inventory("node-b", "L4", 1))
	txs := func() int64 { return service.Unwrap(e.store).(interface{ Counts() sqlstore.Counts }).Counts().Begins }
	// lookups is how many transactions a heartbeat of c ran beyond its
	// own.
	lookups := func(c *agentConn) int64 {
		t.Helper()
		before := txs()
		if err := errOf(c.Heartbeat(ctx, agentapi.HeartbeatRequest{})); err != nil {
			t.Fatal(err)
		}
		return txs() - before - 1
	}
	lookups(a)
	lookups(b)
	if _, err := e.agentClient("").Join(ctx, agentapi.JoinRequest{JoinToken: "gpc_jt-nope_nope", Inventory: inventory("node-c", "L4", 1)}); err == nil {
		t.Fatal("a join with a bad token succeeded")
	}
	if n := lookups(a); n != 0 {
		t.Errorf("after a failed join, an agent's credential was looked up %d times", n)
	}
	jr, err := e.agentClient("").Join(ctx, agentapi.JoinRequest{JoinToken: e.joinToken("again"), Inventory: inventory("node-b", "L4", 1), Credential: b.token})
	if err != nil {
		t.Fatal(err)
	}
	if n := lookups(a); n != 0 {
		t.Errorf("after another host's re-join, an agent's credential was looked up %d times", n)
	}
	wantCode(t, errOf(b.Heartbeat(ctx, agentapi.HeartbeatRequest{})), cloud.Unauthenticated)
	if err := errOf(e.agentClient(jr.Credential).Heartbeat(ctx, agentapi.HeartbeatRequest{})); err != nil {
		t.Errorf("the re-joined host's new credential: %v", err)
	}
}
