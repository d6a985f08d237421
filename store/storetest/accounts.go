package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

func testTenants(t *testing.T, s cloud.Store) {
	b := &cloud.Tenant{ID: "t-b", Name: "beta", CreatedAt: t0}
	a := &cloud.Tenant{ID: "t-a", Name: "alpha", CreatedAt: t0.Add(time.Second)}
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, b); err != nil {
			return err
		}
		return tx.CreateTenant(ctx, a)
	})
	if !b.CreatedAt.Equal(us(t0)) || b.CreatedAt.Location() != time.UTC {
		t.Errorf("CreateTenant left CreatedAt %v, want %v in UTC", b.CreatedAt, us(t0))
	}
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Tenant, error) { return tx.GetTenant(ctx, "t-a") })
	wantEqual(t, "GetTenant", got, a)
	all := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Tenant, error) { return tx.ListTenants(ctx) })
	wantEqual(t, "ListTenants (ID order)", all, []*cloud.Tenant{a, b})

	for _, c := range []struct {
		desc string
		fn   func(cloud.Tx) error
		code cloud.Code
		msg  string
	}{
		{"a duplicate ID is a Conflict",
			func(tx cloud.Tx) error { return tx.CreateTenant(ctx, &cloud.Tenant{ID: "t-a", Name: "other"}) },
			cloud.Conflict, "tenant t-a already exists"},
		{"a duplicate name is a Conflict",
			func(tx cloud.Tx) error { return tx.CreateTenant(ctx, &cloud.Tenant{ID: "t-c", Name: "alpha"}) },
			cloud.Conflict, `"alpha"`},
		{"an empty ID is Invalid",
			func(tx cloud.Tx) error { return tx.CreateTenant(ctx, &cloud.Tenant{Name: "nameless"}) },
			cloud.Invalid, ""},
		{"a missing tenant is NotFound",
			func(tx cloud.Tx) error { _, err := tx.GetTenant(ctx, "t-zz"); return err },
			cloud.NotFound, "tenant t-zz not found"},
	} {
		wantCode(t, c.desc, try(s, c.fn), c.code, c.msg)
	}

	// A Conflict is an answer, not a broken transaction: the same
	// transaction goes on and commits (PostgreSQL would refuse every later
	// statement if the store let the INSERT fail).
	inTx(t, s, func(tx cloud.Tx) error {
		err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t-a", Name: "again"})
		wantCode(t, "duplicate inside a transaction", err, cloud.Conflict, "")
		return tx.CreateTenant(ctx, &cloud.Tenant{ID: "t-c", Name: "gamma"})
	})
	all = mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Tenant, error) { return tx.ListTenants(ctx) })
	if len(all) != 3 {
		t.Errorf("after the failed creates: %d tenants, want 3", len(all))
	}
}

func testUsers(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	u := &cloud.User{ID: "u-1", TenantID: "t-1", Name: "ada", Role: cloud.RoleAdmin, CreatedAt: t0}
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateUser(ctx, u) })
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.User, error) { return tx.GetUser(ctx, "u-1") })
	wantEqual(t, "GetUser", got, u)

	for _, c := range []struct {
		desc string
		fn   func(cloud.Tx) error
		code cloud.Code
		msg  string
	}{
		{"a duplicate ID is a Conflict",
			func(tx cloud.Tx) error { return tx.CreateUser(ctx, &cloud.User{ID: "u-1", TenantID: "t-1"}) },
			cloud.Conflict, "user u-1 already exists"},
		{"a user of a missing tenant is NotFound",
			func(tx cloud.Tx) error { return tx.CreateUser(ctx, &cloud.User{ID: "u-2", TenantID: "t-9"}) },
			cloud.NotFound, "tenant t-9 not found"},
		{"an empty ID is Invalid",
			func(tx cloud.Tx) error { return tx.CreateUser(ctx, &cloud.User{TenantID: "t-1"}) },
			cloud.Invalid, ""},
		{"a missing user is NotFound",
			func(tx cloud.Tx) error { _, err := tx.GetUser(ctx, "u-9"); return err },
			cloud.NotFound, "user u-9 not found"},
	} {
		wantCode(t, c.desc, try(s, c.fn), c.code, c.msg)
	}
}

// seedUsers creates tenants t-1, t-2 and their users u-1, u-2.
func seedUsers(t *testing.T, s cloud.Store) {
	t.Helper()
	seedTenants(t, s, "t-1", "t-2")
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.CreateUser(ctx, &cloud.User{ID: "u-1", TenantID: "t-1", Role: cloud.RoleMember}); err != nil {
			return err
		}
		return tx.CreateUser(ctx, &cloud.User{ID: "u-2", TenantID: "t-2", Role: cloud.RoleMember})
	})
}

func token(id, user, tenant, hash string) *cloud.Token {
	return &cloud.Token{ID: id, UserID: user, TenantID: tenant, Role: cloud.RoleMember, Name: "ci " + id,
		Hash: []byte(hash), CreatedAt: t0}
}

func testTokens(t *testing.T, s cloud.Store) {
	seedUsers(t, s)
	k2 := token("k-2", "u-1", "t-1", "\x00hash-2\xff")
	k1 := token("k-1", "u-1", "t-1", "hash-1")
	k1.ExpiresAt = ptr(t0.Add(time.Hour))
	k3 := token("k-3", "u-2", "t-2", "hash-3")
	inTx(t, s, func(tx cloud.Tx) error {
		for _, k := range []*cloud.Token{k2, k1, k3} {
			if err := tx.CreateToken(ctx, k); err != nil {
				return err
			}
		}
		return nil
	})
	list := func(tenant string) []*cloud.Token {
		return mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Token, error) { return tx.ListTokens(ctx, tenant) })
	}
	wantEqual(t, "ListTokens(t-1): ID order, binary hash intact", list("t-1"), []*cloud.Token{k1, k2})
	wantEqual(t, `ListTokens("") lists every tenant's`, list(""), []*cloud.Token{k1, k2, k3})
	wantEqual(t, "ListTokens of a tenant without tokens", list("t-9"), []*cloud.Token{})

	// Revoking twice keeps the first time.
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.RevokeToken(ctx, "k-1", t0.Add(time.Minute)); err != nil {
			return err
		}
		return tx.RevokeToken(ctx, "k-1", t0.Add(time.Hour))
	})
	got := list("t-1")[0]
	if got.RevokedAt == nil || !got.RevokedAt.Equal(us(t0.Add(time.Minute))) {
		t.Errorf("RevokedAt after two revocations = %v, want the first, %v", got.RevokedAt, us(t0.Add(time.Minute)))
	}

	for _, c := range []struct {
		desc string
		fn   func(cloud.Tx) error
		code cloud.Code
		msg  string
	}{
		{"a duplicate ID is a Conflict",
			func(tx cloud.Tx) error { return tx.CreateToken(ctx, token("k-1", "u-1", "t-1", "new")) },
			cloud.Conflict, "token k-1 already exists"},
		{"a duplicate hash is a Conflict",
			func(tx cloud.Tx) error { return tx.CreateToken(ctx, token("k-9", "u-1", "t-1", "hash-1")) },
			cloud.Conflict, "same hash"},
		{"a token of a missing user is NotFound",
			func(tx cloud.Tx) error { return tx.CreateToken(ctx, token("k-9", "u-9", "t-1", "h9")) },
			cloud.NotFound, "user u-9 not found"},
		{"a token for another tenant than its user's is Invalid",
			func(tx cloud.Tx) error { return tx.CreateToken(ctx, token("k-9", "u-1", "t-2", "h9")) },
			cloud.Invalid, "belongs to tenant t-1"},
		{"a token without a hash is Invalid",
			func(tx cloud.Tx) error { return tx.CreateToken(ctx, token("k-9", "u-1", "t-1", "")) },
			cloud.Invalid, ""},
		{"revoking a missing token is NotFound",
			func(tx cloud.Tx) error { return tx.RevokeToken(ctx, "k-9", t0) },
			cloud.NotFound, "token k-9 not found"},
	} {
		wantCode(t, c.desc, try(s, c.fn), c.code, c.msg)
	}
}

func ptr[T any](v T) *T { return &v }

func testTokenByHash(t *testing.T, s cloud.Store) {
	seedUsers(t, s)
	now := t0
	tokens := map[string]*cloud.Token{}
	add := func(id string, expires, revoked *time.Time) {
		k := token(id, "u-1", "t-1", "hash-"+id)
		k.ExpiresAt, k.RevokedAt = expires, revoked
		tokens[id] = k
	}
	add("live", nil, nil)
	add("expires-later", ptr(now.Add(time.Hour)), nil)
	add("expires-next-micro", ptr(now.Add(time.Microsecond)), nil)
	add("expired", ptr(now.Add(-time.Hour)), nil)
	add("expires-now", ptr(now), nil)
	add("revoked", nil, ptr(now.Add(-time.Minute)))
	add("revoked-now", nil, ptr(now))
	add("revoked-later", nil, ptr(now.Add(time.Hour)))
	add("revoked-via-call", nil, nil)
	inTx(t, s, func(tx cloud.Tx) error {
		for _, k := range tokens {
			if err := tx.CreateToken(ctx, k); err != nil {
				return err
			}
		}
		return tx.RevokeToken(ctx, "revoked-via-call", now.Add(-time.Second))
	})

	for _, c := range []struct {
		desc string
		hash string
		live bool
	}{
		{"a token without expiry or revocation is live", "hash-live", true},
		{"a token that expires later is live", "hash-expires-later", true},
		{"a token that expires one microsecond later is live", "hash-expires-next-micro", true},
		{"an expired token is ignored", "hash-expired", false},
		{"a token is expired from its ExpiresAt on", "hash-expires-now", false},
		{"a revoked token is ignored", "hash-revoked", false},
		{"a token is revoked from its RevokedAt on", "hash-revoked-now", false},
		{"a revocation scheduled later does not apply yet", "hash-revoked-later", true},
		{"a token revoked with RevokeToken is ignored", "hash-revoked-via-call", false},
		{"an unknown hash is NotFound", "hash-unknown", false},
		{"a prefix of a hash does not match", "hash-liv", false},
	} {
		got, err := read(t, s, func(tx cloud.Tx) (*cloud.Token, error) {
			return tx.TokenByHash(ctx, []byte(c.hash), now)
		})
		if !c.live {
			wantCode(t, c.desc, err, cloud.NotFound, "")
			if err != nil && len(c.hash) > 5 && strings.Contains(err.Error(), c.hash) {
				t.Errorf("%s: the error %q shows the hash", c.desc, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.desc, err)
			continue
		}
		wantEqual(t, c.desc, got, tokens[got.ID])
	}
}

// joinToken is a join token of u-1 that allows max joins (0: any number).
func joinToken(id string, max int) *cloud.Token {
	k := token(id, "u-1", "t-1", "hash-"+id)
	k.Role, k.MaxUses = cloud.RoleJoin, max
	return k
}

func testTokenUses(t *testing.T, s cloud.Store) {
	seedUsers(t, s)
	now := t0.Add(time.Minute)
	expired := joinToken("expired", 5)
	expired.ExpiresAt = ptr(now)
	inTx(t, s, func(tx cloud.Tx) error {
		for _, k := range []*cloud.Token{joinToken("once", 1), joinToken("twice", 2), joinToken("any", 0),
			joinToken("revoked", 5), expired} {
			if err := tx.CreateToken(ctx, k); err != nil {
				return err
			}
		}
		return tx.RevokeToken(ctx, "revoked", t0)
	})
	use := func(id string) (*cloud.Token, error) {
		return read(t, s, func(tx cloud.Tx) (*cloud.Token, error) { return tx.RecordTokenUse(ctx, id, now) })
	}
	for _, c := range []struct {
		desc, id string
		uses     int // the count the use answers
		code     cloud.Code
		msg      string
	}{
		{"a single-use token's first use counts", "once", 1, "", ""},
		{"a single-use token's second use is a Conflict", "once", 0, cloud.Conflict, "token once has made its 1 of 1 uses"},
		{"a two-use token's first use", "twice", 1, "", ""},
		{"a two-use token's second use", "twice", 2, "", ""},
		{"a two-use token's third use is a Conflict", "twice", 0, cloud.Conflict, "2 of 2"},
		{"a token without a limit counts on", "any", 1, "", ""},
		{"and on", "any", 2, "", ""},
		{"a revoked token is NotFound", "revoked", 0, cloud.NotFound, "token revoked not found, revoked or expired"},
		{"an expired token is NotFound", "expired", 0, cloud.NotFound, "expired"},
		{"a missing token is NotFound", "k-9", 0, cloud.NotFound, "token k-9 not found"},
	} {
		got, err := use(c.id)
		wantCode(t, c.desc, err, c.code, c.msg)
		if c.code == "" && err == nil && (got.ID != c.id || got.Uses != c.uses) {
			t.Errorf("%s: answered %s with %d uses, want %s with %d", c.desc, got.ID, got.Uses, c.id, c.uses)
		}
	}
	// Refused uses change nothing, and the list shows the counts.
	want := map[string][2]int{"once": {1, 1}, "twice": {2, 2}, "any": {0, 2}, "revoked": {5, 0}, "expired": {5, 0}}
	for _, k := range mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Token, error) { return tx.ListTokens(ctx, "t-1") }) {
		if w := want[k.ID]; k.MaxUses != w[0] || k.Uses != w[1] {
			t.Errorf("token %s: max_uses %d, uses %d; want %d, %d", k.ID, k.MaxUses, k.Uses, w[0], w[1])
		}
	}
	wantCode(t, "a negative max_uses is Invalid",
		try(s, func(tx cloud.Tx) error { return tx.CreateToken(ctx, joinToken("neg", -1)) }), cloud.Invalid, "negative")
}

// testConcurrentTokenUse races Writers transactions for a token's last
// uses: exactly as many commit as there were uses left.
func testConcurrentTokenUse(t *testing.T, s cloud.Store) {
	seedUsers(t, s)
	for _, c := range []struct {
		desc     string
		max, pre int // uses allowed, uses made before the race
	}{
		{"the last use of a single-use token", 1, 0},
		{"the last use of a three-use token", 3, 2},
		{"two uses left", 3, 1},
	} {
		id := fmt.Sprintf("race-%d-%d", c.max, c.pre)
		inTx(t, s, func(tx cloud.Tx) error {
			k := joinToken(id, c.max)
			k.Uses = c.pre
			return tx.CreateToken(ctx, k)
		})
		var wg sync.WaitGroup
		errs := make([]error, Writers)
		for w := range Writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[w] = s.Tx(ctx, func(tx cloud.Tx) error {
					_, err := tx.RecordTokenUse(ctx, id, t0)
					return err
				})
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case cloud.ErrorCode(err) != cloud.Conflict:
				t.Errorf("%s: a losing use failed with %v, want a Conflict", c.desc, err)
			}
		}
		if want := c.max - c.pre; won != want {
			t.Errorf("%s: %d of %d racing uses won, want %d", c.desc, won, Writers, want)
		}
		got := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Token, error) { return tx.ListTokens(ctx, "t-1") })
		for _, k := range got {
			if k.ID == id && k.Uses != c.max {
				t.Errorf("%s: uses %d after the race, want %d", c.desc, k.Uses, c.max)
			}
		}
	}
}

func testQuotas(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	get := func() (*cloud.Quota, error) {
		return read(t, s, func(tx cloud.Tx) (*cloud.Quota, error) { return tx.GetQuota(ctx, "t-1") })
	}
	_, err := get()
	wantCode(t, "a tenant without a quota is NotFound", err, cloud.NotFound, "quota of tenant t-1 not found")

	for _, c := range []struct {
		desc string
		q    *cloud.Quota
	}{
		{"the first put inserts", &cloud.Quota{TenantID: "t-1", Instances: 4,
			GPUs: map[string]float64{"H100-SXM5-80GB": 2.5, "A100-SXM4-40GB": 1.0 / 7}}},
		{"a second put replaces everything", &cloud.Quota{TenantID: "t-1", Instances: 10,
			GPUs: map[string]float64{"L4": 8}}},
		{"the per-model cap and the request rate persist", &cloud.Quota{TenantID: "t-1", Instances: 64,
			GPUsPerModel: 16, RequestsPerSecond: 200, Burst: 2000}},
		{"a fractional per-model cap keeps its fraction", &cloud.Quota{TenantID: "t-1",
			GPUs: map[string]float64{"L4": 0}, GPUsPerModel: 2.0 / 7, RequestsPerSecond: 1_000_000, Burst: 1}},
		{"a put changes the rate alone", &cloud.Quota{TenantID: "t-1", GPUs: map[string]float64{"L4": 0},
			GPUsPerModel: 2.0 / 7, RequestsPerSecond: 5}},
		{"a put with no limits clears them", &cloud.Quota{TenantID: "t-1"}},
		{"an empty map stays empty, not nil", &cloud.Quota{TenantID: "t-1", GPUs: map[string]float64{}}},
	} {
		inTx(t, s, func(tx cloud.Tx) error { return tx.PutQuota(ctx, c.q) })
		got, err := get()
		if err != nil {
			t.Errorf("%s: %v", c.desc, err)
			continue
		}
		wantEqual(t, c.desc, got, c.q)
		// LockQuota reads the same, and changes nothing.
		locked, err := read(t, s, func(tx cloud.Tx) (*cloud.Quota, error) { return tx.LockQuota(ctx, "t-1") })
		if err != nil {
			t.Errorf("%s: LockQuota: %v", c.desc, err)
			continue
		}
		wantEqual(t, c.desc+" (LockQuota)", locked, c.q)
		got, _ = get()
		wantEqual(t, c.desc+" (after LockQuota)", got, c.q)
	}
	for _, tenant := range []string{"t-9", "t-2"} {
		_, err := read(t, s, func(tx cloud.Tx) (*cloud.Quota, error) { return tx.LockQuota(ctx, tenant) })
		wantCode(t, "LockQuota of a tenant without a quota is NotFound", err, cloud.NotFound, "quota of tenant "+tenant+" not found")
	}
	err = try(s, func(tx cloud.Tx) error { return tx.PutQuota(ctx, &cloud.Quota{TenantID: "t-9", Instances: 1}) })
	wantCode(t, "a quota of a missing tenant is NotFound", err, cloud.NotFound, "tenant t-9 not found")
}
