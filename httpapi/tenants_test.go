package httpapi

import (
	"context"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

func TestBootstrapOnce(t *testing.T) {
	e := newEnv(t)
	tok, created, err := e.Services.Accounts.Bootstrap(context.Background())
	if err != nil || created || tok != "" {
		t.Fatalf("second Bootstrap = %q, %v, %v; want nothing created", tok, created, err)
	}
	if !regexp.MustCompile(`^gpc_tk-[0-9a-f]{16}_[A-Za-z0-9_-]{43}$`).MatchString(e.adminToken) {
		t.Errorf("admin token %q does not look like gpc_<id>_<secret>", e.adminToken)
	}
	// The store keeps only the hash.
	err = e.store.Tx(context.Background(), func(tx cloud.Tx) error {
		tk, err := tx.TokenByHash(context.Background(), service.HashToken(e.adminToken), e.clock.Now())
		if err == nil && (tk.Role != cloud.RoleAdmin || tk.TenantID != OperatorTenant) {
			t.Errorf("bootstrap token %+v", tk)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAdminRoutes checks that members get permission_denied on every
// admin-only route, and admins get through.
func TestAdminRoutes(t *testing.T) {
	e := newEnv(t)
	for _, rt := range routeTable {
		if rt.access != adminOnly {
			continue
		}
		path := strings.ReplaceAll(rt.Path, "{id}", e.acmeID)
		before := e.counts()
		var body *strings.Reader
		if rt.Method != "GET" {
			body = strings.NewReader(`{}`)
		}
		status, _, b := e.rawBody(rt.Method, path, e.acmeToken, body)
		if eb := decodeErr(t, b); status != 403 || eb.Code != cloud.PermissionDenied {
			t.Errorf("member %s %s: %d %s, want 403 permission_denied", rt.Method, path, status, b)
		}
		e.unchanged(before, "member on "+rt.Path)
	}
}

func TestTenantsAndUsers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ts, err := e.admin.Tenants(ctx)
	if err != nil || len(ts) != 3 {
		t.Fatalf("tenants = %v, %v; want operator, acme, globex", ts, err)
	}
	before := e.counts()
	_, err = e.admin.CreateTenant(ctx, "acme")
	wantCode(t, err, cloud.Conflict)
	for _, name := range []string{"", "-x", "a b", strings.Repeat("a", 64)} {
		_, err = e.admin.CreateTenant(ctx, name)
		wantCode(t, err, cloud.Invalid)
	}
	_, err = e.admin.CreateUser(ctx, "tn-missing", api.CreateUserRequest{Name: "bob"})
	wantCode(t, err, cloud.NotFound)
	_, err = e.admin.CreateUser(ctx, e.acmeID, api.CreateUserRequest{Name: "bob", Role: cloud.RoleAdmin})
	wantCode(t, err, cloud.Invalid)
	_, err = e.admin.CreateUser(ctx, e.acmeID, api.CreateUserRequest{Name: "bob", Role: "owner"})
	wantCode(t, err, cloud.Invalid)
	e.unchanged(before, "bad tenant and user requests")

	// A new member's first token works at once and sees its tenant only.
	cu, err := e.admin.CreateUser(ctx, e.acmeID, api.CreateUserRequest{Name: "bob"})
	if err != nil || cu.User.Role != cloud.RoleMember || cu.Token.TenantID != e.acmeID || cu.Secret == "" {
		t.Fatalf("CreateUser = %+v, %v", cu, err)
	}
	bob := e.client(cu.Secret)
	if _, err := bob.ListInstances(ctx, client.ListInstancesOptions{}); err != nil {
		t.Errorf("bob cannot list: %v", err)
	}
	// A second admin joins the operator tenant.
	ad, err := e.admin.CreateUser(ctx, OperatorTenant, api.CreateUserRequest{Name: "ops2", Role: cloud.RoleAdmin})
	if err != nil || ad.Token.Role != cloud.RoleAdmin {
		t.Fatalf("second admin = %+v, %v", ad, err)
	}
	if _, err := e.client(ad.Secret).Tenants(ctx); err != nil {
		t.Errorf("second admin cannot list tenants: %v", err)
	}
}

func TestQuotaRoutes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	q, err := e.acme.Quota(ctx, e.acmeID)
	want := cloud.Quota{TenantID: e.acmeID, Instances: service.DefaultInstances, GPUsPerModel: service.DefaultGPUsPerModel}
	if err != nil || !reflect.DeepEqual(q.Quota, want) {
		t.Fatalf("quota of a new tenant = %+v, %v; want the default %+v", q, err, want)
	}
	if q, err := e.admin.Quota(ctx, OperatorTenant); err != nil || q.Instances != 0 || q.GPUs != nil || q.GPUsPerModel != 0 {
		t.Errorf("operator quota = %+v, %v; want no limits", q, err)
	}
	before := e.counts()
	for _, c := range []struct {
		spec  api.QuotaSpec
		field string
	}{
		{api.QuotaSpec{Instances: -1}, "instances"},
		{api.QuotaSpec{Instances: 2_000_000}, "instances"},
		{api.QuotaSpec{GPUs: map[string]float64{"H100": -1}}, "gpus.H100"},
		{api.QuotaSpec{GPUs: map[string]float64{"B300": 1}}, "gpus.B300"},
		{api.QuotaSpec{GPUs: map[string]float64{"H100": 1, "H100-80GB-SXM": 2}}, ""},
		{api.QuotaSpec{GPUsPerModel: -0.5}, "gpus_per_model"},
		{api.QuotaSpec{GPUsPerModel: 1e7}, "gpus_per_model"},
		{api.QuotaSpec{RequestsPerSecond: -1}, "requests_per_second"},
		{api.QuotaSpec{RequestsPerSecond: 2_000_000}, "requests_per_second"},
		{api.QuotaSpec{Burst: -5}, "burst"},
		{api.QuotaSpec{Burst: 2_000_000}, "burst"},
	} {
		_, err := e.admin.SetQuota(ctx, e.acmeID, c.spec)
		ce := wantCode(t, err, cloud.Invalid)
		if c.field != "" && ce.Details["field"] != c.field {
			t.Errorf("%+v: details %v, want field %s", c.spec, ce.Details, c.field)
		}
	}
	_, err = e.admin.SetQuota(ctx, "tn-missing", api.QuotaSpec{Instances: 1})
	wantCode(t, err, cloud.NotFound)
	status, _, b := e.raw("PUT", "/v1/tenants/"+e.acmeID+"/quota", e.adminToken, strings.NewReader(`{"instances":"many"}`), nil)
	if status != 400 || !strings.Contains(decodeErr(t, b).Message, `"instances" must be an integer`) {
		t.Errorf("string instances: %d %s", status, b)
	}
	e.unchanged(before, "bad quotas")

	q, err = e.admin.SetQuota(ctx, e.acmeID, api.QuotaSpec{Instances: 10, GPUs: map[string]float64{"h100": 2.5}})
	if err != nil || q.GPUs["H100-80GB-SXM"] != 2.5 || q.Instances != 10 {
		t.Fatalf("SetQuota = %+v, %v; want canonical model names", q, err)
	}
	if q, err := e.acme.Quota(ctx, e.acmeID); err != nil || q.Instances != 10 {
		t.Errorf("member reads own quota: %+v, %v", q, err)
	}
	_, err = e.globex.Quota(ctx, e.acmeID)
	wantCode(t, err, cloud.NotFound)
	_, err = e.acme.SetQuota(ctx, e.acmeID, api.QuotaSpec{Instances: 100})
	wantCode(t, err, cloud.PermissionDenied)
}

func TestTokens(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ct, err := e.acme.CreateToken(ctx, api.CreateTokenRequest{Name: "ci"})
	if err != nil || ct.Token.UserID != e.acmeUser.ID || ct.Token.Role != cloud.RoleMember || !strings.HasPrefix(ct.Secret, "gpc_"+ct.Token.ID+"_") {
		t.Fatalf("CreateToken = %+v, %v", ct, err)
	}
	ci := e.client(ct.Secret)
	list, err := ci.Tokens(ctx, "")
	if err != nil || len(list) != 2 {
		t.Fatalf("acme tokens = %v, %v; want 2", list, err)
	}
	all, err := e.admin.Tokens(ctx, "")
	if err != nil || len(all) != 4 {
		t.Errorf("admin sees %d tokens, %v; want 4", len(all), err)
	}
	if gl, err := e.admin.Tokens(ctx, e.globexID); err != nil || len(gl) != 1 {
		t.Errorf("admin ?tenant=globex: %d, %v", len(gl), err)
	}
	_, err = e.acme.Tokens(ctx, e.globexID)
	wantCode(t, err, cloud.NotFound)

	// Another tenant cannot revoke it; its tenant can, and it stops working.
	before := e.counts()
	_, err = e.globex.RevokeToken(ctx, ct.Token.ID)
	wantCode(t, err, cloud.NotFound)
	e.unchanged(before, "globex revokes acme's token")
	rv, err := e.acme.RevokeToken(ctx, ct.Token.ID)
	if err != nil || rv.RevokedAt == nil {
		t.Fatalf("revoke = %+v, %v", rv, err)
	}
	_, err = ci.Offerings(ctx)
	wantCode(t, err, cloud.Unauthenticated)
	again, err := e.acme.RevokeToken(ctx, ct.Token.ID)
	if err != nil || !again.RevokedAt.Equal(*rv.RevokedAt) {
		t.Errorf("revoking again = %+v, %v; want the same revocation", again, err)
	}

	// Expiry: a token works until its time, then it does not.
	_, err = e.acme.CreateToken(ctx, api.CreateTokenRequest{ExpiresAt: ptr(e.clock.Now().Add(-time.Minute))})
	wantCode(t, err, cloud.Invalid)
	short, err := e.acme.CreateToken(ctx, api.CreateTokenRequest{Name: "short", ExpiresAt: ptr(e.clock.Now().Add(time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	sc := e.client(short.Secret)
	if _, err := sc.Offerings(ctx); err != nil {
		t.Errorf("fresh token: %v", err)
	}
	e.clock.Advance(2 * time.Hour)
	_, err = sc.Offerings(ctx)
	wantCode(t, err, cloud.Unauthenticated)

	// POST /v1/tokens takes no body at all, too.
	status, _, b := e.raw("POST", "/v1/tokens", e.acmeToken, nil, nil)
	if status != 201 {
		t.Errorf("POST /v1/tokens without body: %d %s", status, b)
	}
}

func ptr[T any](v T) *T { return &v }

func TestAuthHeader(t *testing.T) {
	e := newEnv(t)
	for _, h := range []string{"", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Token " + e.acmeToken,
		"Bearer " + e.acmeToken + "x", "Bearer " + strings.Repeat("gpc_", 100)} {
		status, _, b := e.raw("GET", "/v1/offerings", "", nil, map[string]string{"Authorization": h})
		if eb := decodeErr(t, b); status != 401 || eb.Code != cloud.Unauthenticated {
			t.Errorf("Authorization %q: %d %s", h, status, b)
		}
	}
	// The scheme is case-insensitive.
	status, _, b := e.raw("GET", "/v1/offerings", "", nil, map[string]string{"Authorization": "bearer " + e.acmeToken})
	if status != 200 {
		t.Errorf("lower-case bearer: %d %s", status, b)
	}
}
