package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
)

// Idempotent creates of volumes, addresses and prices: a retry with the
// same key answers the first resource with 200 and writes nothing (no
// second resource, event or usage entry); the same key with another
// request is a conflict naming what differs.

// post sends a create with an Idempotency-Key and decodes its answer into
// out when it is 2xx.
func (e *env) post(path, token, key string, body any, out any) (int, http.Header) {
	e.t.Helper()
	var h map[string]string
	if key != "" {
		h = map[string]string{"Idempotency-Key": key}
	}
	code, hdr, b := e.raw("POST", path, token, strings.NewReader(mustJSON(e.t, body)), h)
	if code/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("POST %s: %d %s: %v", path, code, b, err)
		}
	}
	return code, hdr
}

// wantKeyReused checks the conflict of a key reused for another request:
// it names the first resource and the fields that differ.
func wantKeyReused(t *testing.T, err error, existing any, fields ...string) {
	t.Helper()
	ce := wantCode(t, err, cloud.Conflict)
	if ce.Details["existing_id"] != existing {
		t.Errorf("details %v, want existing_id %v", ce.Details, existing)
	}
	var got []string
	for _, f := range ce.Details["fields"].([]any) {
		got = append(got, f.(string))
	}
	if !slices.Equal(got, fields) {
		t.Errorf("fields %v, want %v", got, fields)
	}
	for _, f := range fields {
		if !strings.Contains(ce.Message, f) {
			t.Errorf("message %q does not name %s", ce.Message, f)
		}
	}
}

func TestVolumeIdempotency(t *testing.T) { onBothStores(t, testVolumeIdempotency) }

func testVolumeIdempotency(t *testing.T, e *env) {
	ctx := context.Background()
	req := api.CreateVolumeRequest{Name: "data", SizeGiB: 100, Zone: "zone-a"}
	before := e.billingCounts()
	var v1, v2 cloud.Volume
	c1, h1 := e.post("/v1/volumes", e.acmeToken, "vol-1", req, &v1)
	c2, h2 := e.post("/v1/volumes", e.acmeToken, "vol-1", req, &v2)
	if c1 != http.StatusCreated || h1.Get("Location") != "/v1/volumes/"+v1.ID || c2 != http.StatusOK ||
		h2.Get("Location") != "" || v1.ID == "" || !reflect.DeepEqual(v2, v1) {
		t.Fatalf("first %d %+v, retry %d %+v (Location %q): want 201 then 200 with the same volume",
			c1, v1, c2, v2, h2.Get("Location"))
	}
	after := e.billingCounts()
	if after.Volumes != before.Volumes+1 || after.Events != before.Events+1 || after.Usage != before.Usage+1 {
		t.Errorf("counts %+v -> %+v: want one volume, one event, one usage On", before, after)
	}

	// The client sends the key too.
	before = after
	again, err := e.acme.CreateVolume(ctx, req, "vol-1")
	if err != nil || again.ID != v1.ID {
		t.Errorf("client retry = %+v, %v; want %s", again, err, v1.ID)
	}
	// The same key for another volume is a mistake, not a retry.
	other := req
	other.SizeGiB, other.Zone = 200, "zone-b"
	_, err = e.acme.CreateVolume(ctx, other, "vol-1")
	wantKeyReused(t, err, v1.ID, "size_gib", "zone")
	_, err = e.acme.CreateVolume(ctx, api.CreateVolumeRequest{Name: "logs", SizeGiB: 100, Zone: "zone-a"}, "vol-1")
	wantKeyReused(t, err, v1.ID, "name")
	e.billingUnchanged(before, "volume retries and reused keys")

	// Another tenant has its own keys; no key is never a retry.
	g, err := e.globex.CreateVolume(ctx, req, "vol-1")
	if err != nil || g.ID == v1.ID || g.TenantID != e.globexID {
		t.Errorf("globex with the same key = %+v, %v; want its own volume", g, err)
	}
	n1, err1 := e.acme.CreateVolume(ctx, req, "")
	n2, err2 := e.acme.CreateVolume(ctx, req, "")
	if err1 != nil || err2 != nil || n1.ID == n2.ID {
		t.Errorf("two creates without a key = %v, %v; want two volumes", err1, err2)
	}
	if c := e.billingCounts(); c.Volumes != before.Volumes+3 || c.Usage != before.Usage+3 {
		t.Errorf("after the other creates: %+v, want 3 more volumes and usage entries than %+v", c, before)
	}
	// An admin creating for a tenant uses that tenant's keys.
	a, err := e.admin.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: 100, Zone: "zone-a", Tenant: e.acmeID}, "vol-1")
	if err != nil || a.ID != v1.ID {
		t.Errorf("admin retry for acme = %+v, %v; want %s", a, err, v1.ID)
	}

	var junk cloud.Volume
	if code, _ := e.post("/v1/volumes", e.acmeToken, "a b", req, &junk); code != http.StatusBadRequest {
		t.Errorf("a key with a space: %d, want 400", code)
	}
}

func TestAddressIdempotency(t *testing.T) { onBothStores(t, testAddressIdempotency) }

func testAddressIdempotency(t *testing.T, e *env) {
	ctx := context.Background()
	before := e.billingCounts()
	var a1, a2 cloud.Address
	c1, h1 := e.post("/v1/addresses", e.acmeToken, "ip-1", api.AllocateAddressRequest{Zone: "zone-a"}, &a1)
	c2, h2 := e.post("/v1/addresses", e.acmeToken, "ip-1", api.AllocateAddressRequest{Zone: "zone-a"}, &a2)
	if c1 != http.StatusCreated || h1.Get("Location") != "/v1/addresses/"+a1.ID || c2 != http.StatusOK ||
		h2.Get("Location") != "" || a1.ID == "" || a2.ID != a1.ID || a2.IP != a1.IP {
		t.Fatalf("first %d %+v, retry %d %+v: want 201 then 200 with the same address", c1, a1, c2, a2)
	}
	after := e.billingCounts()
	if after.Addresses != before.Addresses+1 || after.Events != before.Events+1 || after.Usage != before.Usage+1 {
		t.Errorf("counts %+v -> %+v: want one address, one event, one usage On", before, after)
	}

	before = after
	if again, err := e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{Zone: "zone-a"}, "ip-1"); err != nil || again.ID != a1.ID {
		t.Errorf("client retry = %+v, %v; want %s", again, err, a1.ID)
	}
	_, err := e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{Zone: "zone-b"}, "ip-1")
	wantKeyReused(t, err, a1.ID, "zone")
	_, err = e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{}, "ip-1")
	wantKeyReused(t, err, a1.ID, "zone")
	e.billingUnchanged(before, "address retries and reused keys")

	// With an instance: the retry answers the association; another
	// instance under the key is a conflict.
	in := e.mustCreate(e.acme, "l4.1x")
	other := e.mustCreate(e.acme, "l4.1x")
	b, err := e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{InstanceID: in.ID}, "ip-2")
	if err != nil || b.InstanceID != in.ID {
		t.Fatalf("allocate with instance = %+v, %v", b, err)
	}
	before = e.billingCounts()
	if again, err := e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{InstanceID: in.ID}, "ip-2"); err != nil || again.ID != b.ID {
		t.Errorf("retry with instance = %+v, %v; want %s", again, err, b.ID)
	}
	_, err = e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{InstanceID: other.ID}, "ip-2")
	wantKeyReused(t, err, b.ID, "instance_id")
	e.billingUnchanged(before, "retries with an instance")

	// A released address is still the key's: the retry answers it and
	// allocates nothing.
	if _, err := e.acme.ReleaseAddress(ctx, a1.ID); err != nil {
		t.Fatal(err)
	}
	before = e.billingCounts()
	rel, err := e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{Zone: "zone-a"}, "ip-1")
	if err != nil || rel.ID != a1.ID || rel.ReleasedAt == nil {
		t.Errorf("retry after the release = %+v, %v; want the released %s", rel, err, a1.ID)
	}
	e.billingUnchanged(before, "a retry of a released address")

	g, err := e.globex.AllocateAddress(ctx, api.AllocateAddressRequest{Zone: "zone-a"}, "ip-1")
	if err != nil || g.ID == a1.ID || g.TenantID != e.globexID {
		t.Errorf("globex with the same key = %+v, %v; want its own address", g, err)
	}
	var junk cloud.Address
	if code, _ := e.post("/v1/addresses", e.acmeToken, strings.Repeat("k", 256), api.AllocateAddressRequest{}, &junk); code != http.StatusBadRequest {
		t.Errorf("a 256-character key: %d, want 400", code)
	}
}

func TestPriceIdempotency(t *testing.T) { onBothStores(t, testPriceIdempotency) }

func testPriceIdempotency(t *testing.T, e *env) {
	ctx := context.Background()
	req := api.SetPriceRequest{Offering: "l4.1x", Amount: money.MustParse("1.50")}
	before := e.billingCounts()
	var p1, p2 cloud.Price
	c1, _ := e.post("/v1/prices", e.adminToken, "price-1", req, &p1)
	e.clock.Advance(time.Minute) // a retry later: effective_at left out still matches
	c2, _ := e.post("/v1/prices", e.adminToken, "price-1", req, &p2)
	if c1 != http.StatusCreated || c2 != http.StatusOK || p1.ID == 0 || p2 != p1 {
		t.Fatalf("first %d %+v, retry %d %+v: want 201 then 200 with the same version", c1, p1, c2, p2)
	}
	after := e.billingCounts()
	if after.Prices != before.Prices+1 || after.Events != before.Events+1 {
		t.Errorf("counts %+v -> %+v: want one price version and one event", before, after)
	}

	before = after
	if again, err := e.admin.SetPrice(ctx, req, "price-1"); err != nil || again.ID != p1.ID {
		t.Errorf("client retry = %+v, %v; want %d", again, err, p1.ID)
	}
	_, err := e.admin.SetPrice(ctx, api.SetPriceRequest{Offering: "l4.1x", Amount: money.MustParse("1.75")}, "price-1")
	wantKeyReused(t, err, float64(p1.ID), "amount")
	// Prices are the operator's: one key space across kinds.
	_, err = e.admin.SetPrice(ctx, api.SetPriceRequest{Kind: cloud.PriceVolume, Amount: money.MustParse("1.50")}, "price-1")
	wantKeyReused(t, err, float64(p1.ID), "kind", "offering")
	e.billingUnchanged(before, "price retries and reused keys")

	// A retry of a version that took effect meanwhile is answered, not
	// refused as a price in the past; a new key with that time is.
	at := e.clock.Now().Add(time.Hour)
	later := api.SetPriceRequest{Offering: "l4.1x", Zone: "zone-a", Amount: money.MustParse("2"), EffectiveAt: &at}
	p3, err := e.admin.SetPrice(ctx, later, "price-2")
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(3 * time.Hour)
	before = e.billingCounts()
	if again, err := e.admin.SetPrice(ctx, later, "price-2"); err != nil || again.ID != p3.ID {
		t.Errorf("retry once in force = %+v, %v; want %d", again, err, p3.ID)
	}
	_, err = e.admin.SetPrice(ctx, later, "price-3")
	if ce := wantCode(t, err, cloud.Invalid); ce.Details["field"] != "effective_at" {
		t.Errorf("a new key in the past: %v", ce)
	}
	moved := at.Add(time.Second)
	_, err = e.admin.SetPrice(ctx, api.SetPriceRequest{Offering: "l4.1x", Zone: "zone-a", Amount: money.MustParse("2"),
		EffectiveAt: &moved}, "price-2")
	wantKeyReused(t, err, float64(p3.ID), "effective_at")
	e.billingUnchanged(before, "a retry of a version in force")
}

// TestIdempotentCreateRaces sends the same keyed volume, address and price
// creates at once: each key makes one resource, with one usage On, and
// every call answers it.
func TestIdempotentCreateRaces(t *testing.T) { onBothStores(t, testIdempotentCreateRaces) }

func testIdempotentCreateRaces(t *testing.T, e *env) {
	ctx := context.Background()
	before := e.billingCounts()
	const n = 8
	var wg sync.WaitGroup
	volumes := make([]*cloud.Volume, n)
	addresses := make([]*cloud.Address, n)
	prices := make([]*cloud.Price, n)
	errs := make([]error, 3*n)
	for i := range n {
		wg.Add(3)
		go func() {
			defer wg.Done()
			volumes[i], errs[i] = e.acme.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: 10}, "race")
		}()
		go func() {
			defer wg.Done()
			addresses[i], errs[n+i] = e.acme.AllocateAddress(ctx, api.AllocateAddressRequest{}, "race")
		}()
		go func() {
			defer wg.Done()
			prices[i], errs[2*n+i] = e.admin.SetPrice(ctx, api.SetPriceRequest{Kind: cloud.PriceVolume, Amount: money.MustParse("0.10")}, "race")
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	for i := range n {
		if volumes[i].ID != volumes[0].ID || addresses[i].ID != addresses[0].ID || prices[i].ID != prices[0].ID {
			t.Errorf("call %d answered volume %s, address %s, price %d; the first %s, %s, %d", i,
				volumes[i].ID, addresses[i].ID, prices[i].ID, volumes[0].ID, addresses[0].ID, prices[0].ID)
		}
	}
	c := e.billingCounts()
	if c.Volumes != before.Volumes+1 || c.Addresses != before.Addresses+1 || c.Prices != before.Prices+1 ||
		c.Usage != before.Usage+2 || c.Events != before.Events+3 {
		t.Errorf("after the races: %+v, before %+v; want one of each, two usage entries, three events", c, before)
	}
}

// blindStore hides the rows created with an idempotency key from the next
// hide calls of ListVolumes, ListAddresses and ListPrices, as if a create
// with the key had committed just after the handler looked: the store's
// own check must then catch the key, and the handler answer the first
// resource.
type blindStore struct {
	cloud.Store
	mu   sync.Mutex
	hide int
}

func (b *blindStore) Tx(ctx context.Context, fn func(cloud.Tx) error) error {
	return b.Store.Tx(ctx, func(tx cloud.Tx) error { return fn(&blindTx{Tx: tx, b: b}) })
}

// arm blinds the next lookup (a list or a by-key read); armed reports whether it is still to
// come.
func (b *blindStore) arm() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hide = 1
}

func (b *blindStore) armed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hide > 0
}

// blind reports whether this list call hides keyed rows, and counts it.
func (b *blindStore) blind() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.hide == 0 {
		return false
	}
	b.hide--
	return true
}

type blindTx struct {
	cloud.Tx
	b *blindStore
}

// unkeyed drops the rows with an idempotency key when the store is blind.
func unkeyed[T any](b *blindStore, rows []*T, key func(*T) string, err error) ([]*T, error) {
	if err != nil || !b.blind() {
		return rows, err
	}
	out := []*T{}
	for _, r := range rows {
		if key(r) == "" {
			out = append(out, r)
		}
	}
	return out, nil
}

func (t *blindTx) ListVolumes(ctx context.Context, tenant string) ([]*cloud.Volume, error) {
	vs, err := t.Tx.ListVolumes(ctx, tenant)
	return unkeyed(t.b, vs, func(v *cloud.Volume) string { return v.IdempotencyKey }, err)
}

func (t *blindTx) ListAddresses(ctx context.Context, tenant string) ([]*cloud.Address, error) {
	as, err := t.Tx.ListAddresses(ctx, tenant)
	return unkeyed(t.b, as, func(a *cloud.Address) string { return a.IdempotencyKey }, err)
}

func (t *blindTx) ListPrices(ctx context.Context, f cloud.PriceFilter) ([]*cloud.Price, error) {
	ps, err := t.Tx.ListPrices(ctx, f)
	return unkeyed(t.b, ps, func(p *cloud.Price) string { return p.IdempotencyKey }, err)
}

// VolumeByKey and PriceByKey miss the key when the store is blind.
func (t *blindTx) VolumeByKey(ctx context.Context, tenant, key string) (*cloud.Volume, error) {
	if t.b.blind() {
		return nil, cloud.Errorf(cloud.NotFound, "blinded")
	}
	return t.Tx.VolumeByKey(ctx, tenant, key)
}

func (t *blindTx) PriceByKey(ctx context.Context, key string) (*cloud.Price, error) {
	if t.b.blind() {
		return nil, cloud.Errorf(cloud.NotFound, "blinded")
	}
	return t.Tx.PriceByKey(ctx, key)
}

// TestIdempotentCreateLostLookup runs the retries of volumes, addresses
// and prices on a server whose lookup of the key misses the first create:
// the store's Conflict answers it, as a concurrent create would.
func TestIdempotentCreateLostLookup(t *testing.T) { onBothStores(t, testIdempotentCreateLostLookup) }

func testIdempotentCreateLostLookup(t *testing.T, e *env) {
	ctx := context.Background()
	blind := &blindStore{Store: e.store}
	srv := httptest.NewServer(New(service.New(blind, nil, service.Options{Now: e.clock.Now}), Options{
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: e.logs}, nil))}))
	t.Cleanup(srv.Close)
	acme, admin := client.New(srv.URL, e.acmeToken, srv.Client()), client.New(srv.URL, e.adminToken, srv.Client())

	vol := api.CreateVolumeRequest{Name: "data", SizeGiB: 10}
	v, err := acme.CreateVolume(ctx, vol, "k")
	if err != nil {
		t.Fatal(err)
	}
	a, err := acme.AllocateAddress(ctx, api.AllocateAddressRequest{}, "k")
	if err != nil {
		t.Fatal(err)
	}
	price := api.SetPriceRequest{Kind: cloud.PriceAddress, Amount: money.MustParse("0.01")}
	p, err := admin.SetPrice(ctx, price, "k")
	if err != nil {
		t.Fatal(err)
	}
	before := e.billingCounts()
	retry := func(what string, call func() (string, error), want string) {
		t.Helper()
		blind.arm()
		got, err := call()
		if err != nil || got != want {
			t.Errorf("%s retried past the lookup = %s, %v; want %s", what, got, err, want)
		}
		if blind.armed() {
			t.Errorf("%s: the lookup was not blinded", what)
		}
	}
	retry("volume", func() (string, error) {
		r, err := acme.CreateVolume(ctx, vol, "k")
		return idOf(r, err, func(v *cloud.Volume) string { return v.ID })
	}, v.ID)
	retry("address", func() (string, error) {
		r, err := acme.AllocateAddress(ctx, api.AllocateAddressRequest{}, "k")
		return idOf(r, err, func(a *cloud.Address) string { return a.ID })
	}, a.ID)
	retry("price", func() (string, error) {
		r, err := admin.SetPrice(ctx, price, "k")
		return idOf(r, err, func(p *cloud.Price) string { return strconv.FormatInt(p.ID, 10) })
	}, strconv.FormatInt(p.ID, 10))
	e.billingUnchanged(before, "retries past the lookup")

	// A different request under the key is still a conflict.
	blind.arm()
	_, err = acme.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: 20}, "k")
	wantKeyReused(t, err, v.ID, "size_gib")
	e.billingUnchanged(before, "a reused key past the lookup")
}

func idOf[T any](r *T, err error, id func(*T) string) (string, error) {
	if err != nil {
		return "", err
	}
	return id(r), nil
}
