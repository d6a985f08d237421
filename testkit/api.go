package testkit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// API is the environment of the tests that go through the API: a server on
// loopback over a store, on a settable clock, bootstrapped as a first
// start would (service.Accounts.Bootstrap), with the admin's client.
type API struct {
	T     testing.TB
	Store cloud.Store
	// Services are the services the handler serves, built once over
	// Store on Clock.
	Services *service.Services
	// Server serves the handler; URL is its base URL.
	Server *httptest.Server
	URL    string
	// Clock is the server's clock (and the bootstrap's), at Epoch.
	Clock *Clock
	// AdminToken is the bootstrap admin token and Admin its client.
	AdminToken string
	Admin      *client.Client
}

// Member is a tenant with one member user, as Member makes them.
type Member struct {
	TenantID string
	User     *cloud.User
	// Token is the member's token and Client its client.
	Token  string
	Client *client.Client
}

// NewAPI builds the services over st on a settable clock, serves
// handler(services) on loopback (closed when the test ends) and
// bootstraps st through the same services. The handler is the caller's
// (httpapi.New with its options), so that this package need not import
// the API server: the server's own tests use it.
func NewAPI(t testing.TB, st cloud.Store, handler func(svc *service.Services) http.Handler) *API {
	t.Helper()
	a := &API{T: t, Store: st, Clock: NewClock(Epoch)}
	a.Services = service.New(st, nil, service.Options{Now: a.Clock.Now})
	a.Server = httptest.NewServer(handler(a.Services))
	t.Cleanup(a.Server.Close)
	a.URL = a.Server.URL
	tok, created, err := a.Services.Accounts.Bootstrap(context.Background())
	if err != nil || !created || !strings.HasPrefix(tok, service.SecretPrefix) {
		t.Fatalf("bootstrap = %q, %v, %v; want a new admin token", tok, created, err)
	}
	a.AdminToken, a.Admin = tok, a.Client(tok)
	return a
}

// Client is a client of the server holding token.
func (a *API) Client(token string) *client.Client {
	return client.New(a.URL, token, a.Server.Client())
}

// Member creates tenant (as the admin) with one member user named user.
func (a *API) Member(tenant, user string) Member {
	a.T.Helper()
	ctx := context.Background()
	tn, err := a.Admin.CreateTenant(ctx, tenant)
	if err != nil {
		a.T.Fatalf("create tenant %s: %v", tenant, err)
	}
	cu, err := a.Admin.CreateUser(ctx, tn.ID, api.CreateUserRequest{Name: user})
	if err != nil {
		a.T.Fatalf("create user %s in %s: %v", user, tenant, err)
	}
	return Member{TenantID: tn.ID, User: cu.User, Token: cu.Secret, Client: a.Client(cu.Secret)}
}

// Rows is a snapshot of what a store holds: how many rows of each kind,
// and the sums of the versions of the versioned ones, so that a test can
// check that a refused request changed nothing.
type Rows struct {
	// Tokens counts a revoked token as 1001, so that a revocation shows.
	Instances, Events, Volumes, Tokens, Tenants, Hosts int
	// Attached counts the volumes attached to an instance.
	Attached int
	// Versions sums the versions of instances and hosts.
	Versions int64

	Prices, Commitments, SpotRequests, Usage, Budgets, Alerts int
	// Addresses counts addresses, Released the released ones, Associated
	// the ones on an instance.
	Addresses, Released, Associated int
	SpotVersions                    int64
	// Quotas counts the tenants with a quota; LogBytes sums the end
	// offsets of every instance's output log.
	Quotas   int
	LogBytes int64
	// Groups counts autoscaling groups (deleted ones too), GroupVersions
	// sums their versions, and Metrics counts metric points.
	Groups, Metrics int
	GroupVersions   int64
	// Networks, Subnets and SecurityGroups count networks, subnets and
	// security groups; NetworkVersions sums their versions.
	Networks, Subnets, SecurityGroups int
	NetworkVersions                   int64
	// Keys counts SSH public keys; EndpointKeys counts endpoint keys, a
	// revoked one as 1001.
	Keys, EndpointKeys int
}

// CountRows takes the snapshot of st, in one transaction.
func CountRows(t testing.TB, st cloud.Store) Rows {
	t.Helper()
	var c Rows
	ctx := context.Background()
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		c = Rows{}
		for _, count := range []func(context.Context, cloud.Tx, *Rows) error{
			countCompute, countAccounts, countHosts, countBilling, countAddresses, countGroups, countNetworks,
		} {
			if err := count(ctx, tx, &c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("count the store's rows: %v", err)
	}
	return c
}

// countCompute counts instances (their versions and log bytes), events and
// volumes.
func countCompute(ctx context.Context, tx cloud.Tx, c *Rows) error {
	ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{})
	if err != nil {
		return err
	}
	c.Instances = len(ins)
	for _, in := range ins {
		lc, err := tx.ReadLog(ctx, in.ID, 0, 1)
		if err != nil {
			return err
		}
		c.LogBytes += lc.End
		c.Versions += in.Version
	}
	evs, err := tx.ListEvents(ctx, cloud.EventFilter{})
	if err != nil {
		return err
	}
	c.Events = len(evs)
	vs, err := tx.ListVolumes(ctx, "")
	if err != nil {
		return err
	}
	c.Volumes = len(vs)
	for _, v := range vs {
		if v.InstanceID != "" {
			c.Attached++
		}
	}
	return nil
}

// countAccounts counts tokens (a revoked one as 1001), tenants and quotas.
func countAccounts(ctx context.Context, tx cloud.Tx, c *Rows) error {
	ts, err := tx.ListTokens(ctx, "")
	if err != nil {
		return err
	}
	c.Tokens = len(ts)
	for _, t := range ts {
		if t.RevokedAt != nil {
			c.Tokens += 1000
		}
	}
	tns, err := tx.ListTenants(ctx)
	if err != nil {
		return err
	}
	c.Tenants = len(tns)
	for _, tn := range tns {
		if _, err := tx.GetQuota(ctx, tn.ID); err == nil {
			c.Quotas++
		} else if !cloud.IsNotFound(err) {
			return err
		}
	}
	ks, err := tx.ListKeys(ctx, "")
	if err != nil {
		return err
	}
	c.Keys = len(ks)
	eks, err := tx.ListEndpointKeys(ctx, "", "", true)
	for _, k := range eks {
		c.EndpointKeys++
		if k.RevokedAt != nil {
			c.EndpointKeys += 1000
		}
	}
	return err
}

// countHosts counts hosts and adds their versions.
func countHosts(ctx context.Context, tx cloud.Tx, c *Rows) error {
	hs, err := tx.ListHosts(ctx)
	if err != nil {
		return err
	}
	c.Hosts = len(hs)
	for _, h := range hs {
		c.Versions += h.Version
	}
	return nil
}

// countBilling counts prices, commitments, spot requests (and their
// versions), budgets with their alerts, and usage entries.
func countBilling(ctx context.Context, tx cloud.Tx, c *Rows) error {
	ps, err := tx.ListPrices(ctx, cloud.PriceFilter{})
	if err != nil {
		return err
	}
	c.Prices = len(ps)
	cs, err := tx.ListCommitments(ctx, "")
	if err != nil {
		return err
	}
	c.Commitments = len(cs)
	rs, err := tx.ListSpotRequests(ctx, cloud.SpotRequestFilter{})
	if err != nil {
		return err
	}
	c.SpotRequests = len(rs)
	for _, r := range rs {
		c.SpotVersions += r.Version
	}
	bs, err := tx.ListBudgets(ctx)
	if err != nil {
		return err
	}
	c.Budgets = len(bs)
	for _, b := range bs {
		al, err := tx.ListBudgetAlerts(ctx, b.TenantID)
		if err != nil {
			return err
		}
		c.Alerts += len(al)
	}
	us, err := tx.ListUsage(ctx, cloud.UsageFilter{})
	if err != nil {
		return err
	}
	c.Usage = len(us)
	return nil
}

// countAddresses counts addresses, the released and the associated ones.
func countAddresses(ctx context.Context, tx cloud.Tx, c *Rows) error {
	as, err := tx.ListAddresses(ctx, "")
	if err != nil {
		return err
	}
	c.Addresses = len(as)
	for _, a := range as {
		if a.ReleasedAt != nil {
			c.Released++
		}
		if a.InstanceID != "" {
			c.Associated++
		}
	}
	return nil
}

// countGroups counts autoscaling groups (and their versions) and metric
// points.
func countGroups(ctx context.Context, tx cloud.Tx, c *Rows) error {
	gs, err := tx.ListGroups(ctx, cloud.GroupFilter{})
	if err != nil {
		return err
	}
	c.Groups = len(gs)
	for _, g := range gs {
		c.GroupVersions += g.Version
	}
	ms, err := tx.ListMetrics(ctx, cloud.MetricFilter{})
	if err != nil {
		return err
	}
	c.Metrics = len(ms)
	return nil
}

func countNetworks(ctx context.Context, tx cloud.Tx, c *Rows) error {
	ns, err := tx.ListNetworks(ctx, cloud.NetworkFilter{})
	if err != nil {
		return err
	}
	subs, err := tx.ListSubnets(ctx, cloud.SubnetFilter{})
	if err != nil {
		return err
	}
	gs, err := tx.ListSecurityGroups(ctx, cloud.SecurityGroupFilter{})
	if err != nil {
		return err
	}
	c.Networks, c.Subnets, c.SecurityGroups = len(ns), len(subs), len(gs)
	for _, n := range ns {
		c.NetworkVersions += n.Version
	}
	for _, s := range subs {
		c.NetworkVersions += s.Version
	}
	for _, g := range gs {
		c.NetworkVersions += g.Version
	}
	return nil
}

// Rows is CountRows of the API's store.
func (a *API) Rows() Rows {
	a.T.Helper()
	return CountRows(a.T, a.Store)
}
