package service_test

import (
	"context"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// ahFixture is the scaffolding of the accounts, hosts and agents tests:
// services over a fresh, bootstrapped store with the operator's admin and
// two tenants (acme and globex), each with one member.
type ahFixture struct {
	t                   *testing.T
	st                  cloud.Store
	clock               *testkit.Clock
	svc                 *service.Services
	adminToken          string
	admin, acme, globex service.Actor
}

func newAHFixture(t *testing.T, st cloud.Store) *ahFixture {
	t.Helper()
	ctx := context.Background()
	f := &ahFixture{t: t, st: st, clock: testkit.NewClock(testkit.Epoch)}
	f.svc = service.New(st, nil, service.Options{Now: f.clock.Now})
	tok, created, err := f.svc.Accounts.Bootstrap(ctx)
	if err != nil || !created {
		t.Fatalf("Bootstrap = %v, %v", created, err)
	}
	f.adminToken = tok
	err = st.Tx(ctx, func(tx cloud.Tx) error {
		tk, err := tx.TokenByHash(ctx, service.HashToken(tok), f.clock.Now())
		if err == nil {
			f.admin = service.Actor{ID: tk.UserID, TenantID: tk.TenantID, Role: tk.Role}
		}
		return err
	})
	if err != nil {
		t.Fatalf("bootstrap token: %v", err)
	}
	member := func(tenant string) service.Actor {
		tn, err := f.svc.Accounts.CreateTenant(ctx, f.admin, tenant)
		if err != nil {
			t.Fatalf("create tenant %s: %v", tenant, err)
		}
		u, _, err := f.svc.Accounts.CreateUser(ctx, f.admin, tn.ID, "user-"+tenant, "")
		if err != nil {
			t.Fatalf("create user of %s: %v", tenant, err)
		}
		return service.Actor{ID: u.ID, TenantID: u.TenantID, Role: u.Role}
	}
	f.acme, f.globex = member("acme"), member("globex")
	return f
}

// state is what a refused or repeated call must leave as it was: every
// row the accounts, hosts and agents services write, summarized.
func (f *ahFixture) state() testkit.Rows { return testkit.CountRows(f.t, f.st) }

// unchanged fails the test when anything was written since before.
func (f *ahFixture) unchanged(before testkit.Rows, what string) {
	f.t.Helper()
	if after := f.state(); after != before {
		f.t.Errorf("%s wrote: %+v -> %+v", what, before, after)
	}
}

// ahCode fails the test unless err is a *cloud.Error with code, and
// returns it.
func ahCode(t *testing.T, err error, code cloud.Code) *cloud.Error {
	t.Helper()
	if cloud.ErrorCode(err) != code {
		t.Fatalf("error %v, want %s", err, code)
	}
	ce, _ := err.(*cloud.Error)
	return ce
}

// ahHidden fails the test unless err is the NotFound of a missing kind id,
// which is how another tenant's resource must answer.
func ahHidden(t *testing.T, err error, kind, id string) {
	t.Helper()
	ce := ahCode(t, err, cloud.NotFound)
	want := service.NotFound(kind, id).Error()
	if ce.Error() != want || ce.Details["kind"] != kind || ce.Details["id"] != id {
		t.Errorf("not found %+v, want exactly %q", ce, want)
	}
}

func TestAccountsBootstrap(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		if !regexp.MustCompile(`^gpc_tk-[0-9a-f]{16}_[A-Za-z0-9_-]{43}$`).MatchString(f.adminToken) {
			t.Errorf("admin token %q does not look like gpc_<id>_<secret>", f.adminToken)
		}
		if f.admin.Role != cloud.RoleAdmin || f.admin.TenantID != service.OperatorTenant {
			t.Errorf("bootstrap admin %+v", f.admin)
		}
		before := f.state()
		tok, created, err := f.svc.Accounts.Bootstrap(ctx)
		if err != nil || created || tok != "" {
			t.Errorf("second Bootstrap = %q, %v, %v; want nothing created", tok, created, err)
		}
		f.unchanged(before, "a second Bootstrap")
	})
}

func TestAccountsTenantsAndUsers(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		ts, err := f.svc.Accounts.Tenants(ctx, f.admin)
		if err != nil || len(ts) != 3 {
			t.Fatalf("Tenants = %v, %v; want operator, acme, globex", ts, err)
		}
		before := f.state()
		ce := ahCode(t, func() error { _, err := f.svc.Accounts.CreateTenant(ctx, f.admin, "acme"); return err }(), cloud.Conflict)
		if ce.Details["name"] != "acme" {
			t.Errorf("name conflict details %v", ce.Details)
		}
		for _, name := range []string{"", "-x", "a b", strings.Repeat("a", 64)} {
			_, err := f.svc.Accounts.CreateTenant(ctx, f.admin, name)
			if ce := ahCode(t, err, cloud.Invalid); ce.Details["field"] != "name" {
				t.Errorf("tenant name %q: details %v", name, ce.Details)
			}
		}
		_, _, err = f.svc.Accounts.CreateUser(ctx, f.admin, "tn-missing", "bob", "")
		ahHidden(t, err, "tenant", "tn-missing")
		_, _, err = f.svc.Accounts.CreateUser(ctx, f.admin, f.acme.TenantID, "bob", cloud.RoleAdmin)
		ahCode(t, err, cloud.Invalid)
		_, _, err = f.svc.Accounts.CreateUser(ctx, f.admin, f.acme.TenantID, "bob", "owner")
		ahCode(t, err, cloud.Invalid)
		_, _, err = f.svc.Accounts.CreateUser(ctx, f.admin, f.acme.TenantID, "bob", cloud.RoleJoin)
		ahCode(t, err, cloud.Invalid)
		// Members do none of the admins' account business.
		_, err = f.svc.Accounts.CreateTenant(ctx, f.acme, "mine")
		ahCode(t, err, cloud.PermissionDenied)
		_, _, err = f.svc.Accounts.CreateUser(ctx, f.acme, f.acme.TenantID, "bob", "")
		ahCode(t, err, cloud.PermissionDenied)
		_, err = f.svc.Accounts.Tenants(ctx, f.acme)
		ahCode(t, err, cloud.PermissionDenied)
		f.unchanged(before, "refused tenant and user requests")

		u, tok, err := f.svc.Accounts.CreateUser(ctx, f.admin, f.acme.TenantID, "bob", "")
		if err != nil || u.Role != cloud.RoleMember || u.TenantID != f.acme.TenantID || tok.Token.UserID != u.ID ||
			tok.Token.Role != cloud.RoleMember || !strings.HasPrefix(tok.Secret, service.SecretPrefix+tok.Token.ID+"_") {
			t.Fatalf("CreateUser = %+v, %+v, %v", u, tok, err)
		}
		ad, adTok, err := f.svc.Accounts.CreateUser(ctx, f.admin, service.OperatorTenant, "ops2", cloud.RoleAdmin)
		if err != nil || ad.Role != cloud.RoleAdmin || adTok.Token.Role != cloud.RoleAdmin {
			t.Fatalf("second admin = %+v, %+v, %v", ad, adTok, err)
		}
		// The store keeps the hash of the secret, never the secret.
		err = st.Tx(ctx, func(tx cloud.Tx) error {
			got, err := tx.TokenByHash(ctx, service.HashToken(tok.Secret), f.clock.Now())
			if err == nil && got.ID != tok.Token.ID {
				t.Errorf("hash finds %s, want %s", got.ID, tok.Token.ID)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		evs := ahEvents(t, st, cloud.EventFilter{Kinds: []cloud.EventKind{service.EventTenantCreated, service.EventUserCreated}})
		if n := len(evs); n != 6 || evs[n-1].Actor != f.admin.ID || evs[n-1].TenantID != service.OperatorTenant {
			t.Errorf("account events %+v", evs)
		}
	})
}

// ahEvents reads the events f selects.
func ahEvents(t *testing.T, st cloud.Store, f cloud.EventFilter) []*cloud.Event {
	t.Helper()
	var evs []*cloud.Event
	err := st.Tx(context.Background(), func(tx cloud.Tx) error {
		var err error
		evs, err = tx.ListEvents(context.Background(), f)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestAccountsQuota(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		acme := f.acme.TenantID
		q, err := f.svc.Accounts.Quota(ctx, f.acme, acme)
		if err != nil || !reflect.DeepEqual(&q.Quota, service.DefaultQuota(acme)) || q.Used.Instances != 0 {
			t.Fatalf("quota of a new tenant = %+v, %v; want the default", q.Quota, err)
		}
		before := f.state()
		for _, c := range []struct {
			spec  api.QuotaSpec
			field string
		}{
			{api.QuotaSpec{Instances: -1}, "instances"},
			{api.QuotaSpec{Instances: 2_000_000}, "instances"},
			{api.QuotaSpec{GPUs: map[string]float64{"H100": -1}}, "gpus.H100"},
			{api.QuotaSpec{GPUs: map[string]float64{"B300": 1}}, "gpus.B300"},
			{api.QuotaSpec{GPUsPerModel: -1}, "gpus_per_model"},
			{api.QuotaSpec{GPUsPerModel: math.NaN()}, "gpus_per_model"},
			{api.QuotaSpec{RequestsPerSecond: -1}, "requests_per_second"},
			{api.QuotaSpec{RequestsPerSecond: service.MaxQuota + 1}, "requests_per_second"},
			{api.QuotaSpec{Burst: -1}, "burst"},
			{api.QuotaSpec{Burst: service.MaxQuota + 1}, "burst"},
		} {
			_, err := f.svc.Accounts.SetQuota(ctx, f.admin, acme, c.spec)
			if ce := ahCode(t, err, cloud.Invalid); ce.Details["field"] != c.field {
				t.Errorf("%+v: field %v, want %s", c.spec, ce.Details["field"], c.field)
			}
		}
		_, err = f.svc.Accounts.SetQuota(ctx, f.admin, acme, api.QuotaSpec{GPUs: map[string]float64{"H100": 1, "H100-80GB-SXM": 2}})
		ahCode(t, err, cloud.Invalid)
		_, err = f.svc.Accounts.SetQuota(ctx, f.admin, "tn-missing", api.QuotaSpec{Instances: 1})
		ahHidden(t, err, "tenant", "tn-missing")
		f.unchanged(before, "bad quotas")

		q, err = f.svc.Accounts.SetQuota(ctx, f.admin, acme, api.QuotaSpec{Instances: 10, GPUs: map[string]float64{"h100": 2.5}})
		if err != nil || q.Quota.GPUs["H100-80GB-SXM"] != 2.5 || q.Quota.Instances != 10 {
			t.Fatalf("SetQuota = %+v, %v; want canonical model names", q, err)
		}
		if _, _, err := f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "h100.1x"}, ""); err != nil {
			t.Fatal(err)
		}
		if q, err := f.svc.Accounts.Quota(ctx, f.acme, acme); err != nil || q.Quota.Instances != 10 ||
			q.Used.Instances != 1 || q.Used.GPUs["H100-80GB-SXM"] != 1 {
			t.Errorf("member reads own quota: %+v, %v", q, err)
		}
		if evs := ahEvents(t, st, cloud.EventFilter{Kinds: []cloud.EventKind{service.EventQuotaUpdated}}); len(evs) != 1 ||
			evs[0].TenantID != acme || evs[0].Actor != f.admin.ID {
			t.Errorf("quota events %+v", evs)
		}
	})
}

func TestAccountsTokens(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		ci, err := f.svc.Accounts.CreateToken(ctx, f.acme, "ci", nil)
		if err != nil || ci.Token.UserID != f.acme.ID || ci.Token.Role != cloud.RoleMember || ci.Token.TenantID != f.acme.TenantID {
			t.Fatalf("CreateToken = %+v, %v", ci, err)
		}
		if l, err := f.svc.Accounts.Tokens(ctx, f.acme, ""); err != nil || len(l) != 2 {
			t.Errorf("acme's tokens = %d, %v; want 2", len(l), err)
		}
		if l, err := f.svc.Accounts.Tokens(ctx, f.admin, ""); err != nil || len(l) != 4 {
			t.Errorf("admin sees %d tokens, %v; want 4", len(l), err)
		}
		if l, err := f.svc.Accounts.Tokens(ctx, f.admin, f.globex.TenantID); err != nil || len(l) != 1 {
			t.Errorf("admin on globex: %d, %v", len(l), err)
		}
		_, err = f.svc.Accounts.Tokens(ctx, f.acme, f.globex.TenantID)
		ahHidden(t, err, "tenant", f.globex.TenantID)

		// Join tokens are the admins'; members of the operator tenant do
		// not see them, nor agent credentials.
		before := f.state()
		_, err = f.svc.Accounts.CreateJoinToken(ctx, f.acme, "rack", nil, 0)
		ahCode(t, err, cloud.PermissionDenied)
		_, err = f.svc.Accounts.JoinTokens(ctx, f.acme)
		ahCode(t, err, cloud.PermissionDenied)
		_, err = f.svc.Accounts.CreateJoinToken(ctx, f.admin, "", nil, 0)
		ahCode(t, err, cloud.Invalid)
		_, err = f.svc.Accounts.CreateToken(ctx, f.acme, "", ahPtr(f.clock.Now().Add(-time.Minute)))
		ahCode(t, err, cloud.Invalid)
		_, err = f.svc.Accounts.CreateToken(ctx, f.acme, "no spaces please", nil)
		ahCode(t, err, cloud.Invalid)
		_, err = f.svc.Accounts.CreateToken(ctx, service.AgentActor("h-1"), "", nil)
		ahCode(t, err, cloud.PermissionDenied)
		f.unchanged(before, "refused token requests")
		jt, err := f.svc.Accounts.CreateJoinToken(ctx, f.admin, "rack", nil, 0)
		if err != nil || jt.Token.Role != cloud.RoleJoin || jt.Token.UserID != f.admin.ID {
			t.Fatalf("CreateJoinToken = %+v, %v", jt, err)
		}
		if l, err := f.svc.Accounts.JoinTokens(ctx, f.admin); err != nil || len(l) != 1 || l[0].ID != jt.Token.ID {
			t.Errorf("JoinTokens = %+v, %v", l, err)
		}
		op, _, err := f.svc.Accounts.CreateUser(ctx, f.admin, service.OperatorTenant, "op", "")
		if err != nil {
			t.Fatal(err)
		}
		opActor := service.Actor{ID: op.ID, TenantID: op.TenantID, Role: op.Role}
		l, err := f.svc.Accounts.Tokens(ctx, opActor, "")
		if err != nil || len(l) == 0 || slices.ContainsFunc(l, func(tk *cloud.Token) bool { return tk.Role == cloud.RoleJoin }) {
			t.Errorf("an operator member's tokens: %+v, %v", l, err)
		}
		if slices.ContainsFunc(l, func(tk *cloud.Token) bool { return tk.UserID != op.ID }) {
			t.Errorf("an operator member sees other users' tokens: %+v", l)
		}
		before = f.state()
		_, err = f.svc.Accounts.RevokeToken(ctx, opActor, jt.Token.ID)
		ahHidden(t, err, "token", jt.Token.ID)
		f.unchanged(before, "an operator member revokes a join token")
		// Nor the admins' own tokens (the attack of issue 9).
		adm, err := f.svc.Accounts.CreateToken(ctx, f.admin, "admin-ci", nil)
		if err != nil || adm.Token.Role != cloud.RoleAdmin {
			t.Fatalf("admin token = %+v, %v", adm, err)
		}
		before = f.state()
		_, err = f.svc.Accounts.RevokeToken(ctx, opActor, adm.Token.ID)
		ahHidden(t, err, "token", adm.Token.ID)
		f.unchanged(before, "an operator member revokes an admin's token")
		// Another member of the same tenant sees and revokes only their own.
		bob, _, err := f.svc.Accounts.CreateUser(ctx, f.admin, f.acme.TenantID, "bob", "")
		if err != nil {
			t.Fatal(err)
		}
		bobActor := service.Actor{ID: bob.ID, TenantID: bob.TenantID, Role: bob.Role}
		if l, err := f.svc.Accounts.Tokens(ctx, bobActor, ""); err != nil || len(l) != 1 || l[0].UserID != bob.ID {
			t.Errorf("bob's tokens = %+v, %v; want his one", l, err)
		}
		before = f.state()
		_, err = f.svc.Accounts.RevokeToken(ctx, bobActor, ci.Token.ID)
		ahHidden(t, err, "token", ci.Token.ID)
		f.unchanged(before, "a member revokes a tenant colleague's token")

		// Revoking: another tenant cannot (its answer is a missing
		// token's); the owner's tenant can, once; an admin can.
		before = f.state()
		_, err = f.svc.Accounts.RevokeToken(ctx, f.globex, ci.Token.ID)
		ahHidden(t, err, "token", ci.Token.ID)
		_, err = f.svc.Accounts.RevokeToken(ctx, f.globex, "tk-missing")
		ahHidden(t, err, "token", "tk-missing")
		f.unchanged(before, "globex revokes acme's token")
		rv, err := f.svc.Accounts.RevokeToken(ctx, f.acme, ci.Token.ID)
		if err != nil || rv.RevokedAt == nil || !rv.RevokedAt.Equal(f.clock.Now()) {
			t.Fatalf("revoke = %+v, %v", rv, err)
		}
		f.clock.Advance(time.Minute)
		before = f.state()
		again, err := f.svc.Accounts.RevokeToken(ctx, f.acme, ci.Token.ID)
		if err != nil || !again.RevokedAt.Equal(*rv.RevokedAt) {
			t.Errorf("revoking again = %+v, %v; want the same revocation", again, err)
		}
		f.unchanged(before, "revoking a revoked token")
		if _, err := f.svc.Accounts.RevokeToken(ctx, f.admin, jt.Token.ID); err != nil {
			t.Errorf("admin revokes a join token: %v", err)
		}
		err = st.Tx(ctx, func(tx cloud.Tx) error {
			_, err := tx.TokenByHash(ctx, service.HashToken(ci.Secret), f.clock.Now())
			return err
		})
		ahCode(t, err, cloud.NotFound)
	})
}

// TestAccountsIsolation: another tenant's member can neither read nor
// change a tenant's quota or tokens (the answers are a missing ID's), and
// an admin can.
func TestAccountsIsolation(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		acme := f.acme.TenantID
		tok, err := f.svc.Accounts.CreateToken(ctx, f.acme, "ci", nil)
		if err != nil {
			t.Fatal(err)
		}
		before := f.state()
		_, err = f.svc.Accounts.Quota(ctx, f.globex, acme)
		ahHidden(t, err, "tenant", acme)
		_, err = f.svc.Accounts.Quota(ctx, f.globex, "tn-missing")
		ahHidden(t, err, "tenant", "tn-missing")
		_, err = f.svc.Accounts.Tokens(ctx, f.globex, acme)
		ahHidden(t, err, "tenant", acme)
		l, err := f.svc.Accounts.Tokens(ctx, f.globex, "")
		if err != nil || slices.ContainsFunc(l, func(tk *cloud.Token) bool { return tk.TenantID != f.globex.TenantID }) {
			t.Errorf("globex lists %+v, %v", l, err)
		}
		_, err = f.svc.Accounts.RevokeToken(ctx, f.globex, tok.Token.ID)
		ahHidden(t, err, "token", tok.Token.ID)
		_, err = f.svc.Accounts.SetQuota(ctx, f.globex, acme, api.QuotaSpec{Instances: 1})
		ahCode(t, err, cloud.PermissionDenied)
		f.unchanged(before, "globex on acme's accounts")

		if _, err := f.svc.Accounts.SetQuota(ctx, f.admin, acme, api.QuotaSpec{Instances: 3}); err != nil {
			t.Fatal(err)
		}
		if q, err := f.svc.Accounts.Quota(ctx, f.admin, acme); err != nil || q.Quota.Instances != 3 {
			t.Errorf("admin reads acme's quota: %+v, %v", q, err)
		}
		if l, err := f.svc.Accounts.Tokens(ctx, f.admin, acme); err != nil || !slices.ContainsFunc(l, func(tk *cloud.Token) bool { return tk.ID == tok.Token.ID }) {
			t.Errorf("admin lists acme's tokens: %+v, %v", l, err)
		}
		if rv, err := f.svc.Accounts.RevokeToken(ctx, f.admin, tok.Token.ID); err != nil || rv.RevokedAt == nil {
			t.Errorf("admin revokes acme's token: %+v, %v", rv, err)
		}
	})
}

func ahPtr[T any](v T) *T { return &v }

// TestAccountsTenant: a member reads their own tenant (its name, for the
// console), never another's, which is not found exactly as a missing
// one; an admin reads any.
func TestAccountsTenant(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		for _, tc := range []struct {
			name   string
			actor  service.Actor
			tenant string
			want   string // the name, "" for not found
		}{
			{"own", f.acme, f.acme.TenantID, "acme"},
			{"another's", f.acme, f.globex.TenantID, ""},
			{"the operator's", f.globex, service.OperatorTenant, ""},
			{"missing", f.acme, "tn-doesnotexist", ""},
			{"admin, any", f.admin, f.globex.TenantID, "globex"},
			{"admin, missing", f.admin, "tn-doesnotexist", ""},
		} {
			got, err := f.svc.Accounts.Tenant(ctx, tc.actor, tc.tenant)
			if tc.want == "" {
				if ce := ahCode(t, err, cloud.NotFound); ce.Details["id"] != tc.tenant {
					t.Errorf("%s: %v", tc.name, err)
				}
				continue
			}
			if err != nil || got.Name != tc.want || got.ID != tc.tenant {
				t.Errorf("%s: %+v, %v; want %s", tc.name, got, err, tc.want)
			}
		}
	})
}
