package fleet

import (
	"errors"
	"strings"
	"testing"
)

// tshare is share with a tenant.
func tshare(id, host, tenant string, gpu, milli int) *Placement {
	p := share(id, host, gpu, milli, 1024)
	p.Tenant = tenant
	return p
}

// TestShareTenants: the shares of one GPU belong to one tenant. Another
// tenant's share is refused until the GPU's last share goes; the same
// tenant's shares stack; MIG slices and whole GPUs are not concerned.
func TestShareTenants(t *testing.T) {
	f := MockFleet(MockHost("h", "L40S", 2))
	apply := func(p *Placement) {
		t.Helper()
		if err := f.Apply(p); err != nil {
			t.Fatal(err)
		}
		checkClasses(t, f)
	}
	release := func(id string) {
		t.Helper()
		if err := f.Release(id); err != nil {
			t.Fatal(err)
		}
		checkClasses(t, f)
	}
	gpu := func(i int) *GPU { return &f.Host("h").GPUs[i] }

	apply(tshare("a1", "h", "tenant-a", 0, 250))
	if got := gpu(0).ShareTenant; got != "tenant-a" {
		t.Fatalf("ShareTenant %q after tenant-a's share, want tenant-a", got)
	}
	// Tenant b's share is refused, and changes nothing.
	before := dump(f)
	err := f.Apply(tshare("b1", "h", "tenant-b", 0, 250))
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `belong to tenant "tenant-a", not "tenant-b"`) {
		t.Fatalf("tenant-b's share on tenant-a's GPU: %v", err)
	}
	if dump(f) != before {
		t.Fatal("a refused Apply changed the fleet")
	}
	// Nor does a share without a tenant go there.
	if err := f.Apply(tshare("n1", "h", "", 0, 250)); !errors.Is(err, ErrConflict) {
		t.Fatalf("a share without a tenant on tenant-a's GPU: %v", err)
	}
	// Tenant b takes the other GPU; tenant a stacks a second share.
	apply(tshare("b1", "h", "tenant-b", 1, 250))
	apply(tshare("a2", "h", "tenant-a", 0, 500))
	if gpu(0).Shares != 2 || gpu(0).ShareTenant != "tenant-a" || gpu(1).ShareTenant != "tenant-b" {
		t.Fatalf("gpu 0 %d shares of %q, gpu 1 of %q", gpu(0).Shares, gpu(0).ShareTenant, gpu(1).ShareTenant)
	}
	// The first share going keeps the GPU tenant a's; the last frees it.
	release("a1")
	if gpu(0).ShareTenant != "tenant-a" {
		t.Fatalf("ShareTenant %q with one of tenant-a's shares left", gpu(0).ShareTenant)
	}
	if err := f.Apply(tshare("b2", "h", "tenant-b", 0, 100)); !errors.Is(err, ErrConflict) {
		t.Fatalf("tenant-b's share with a share of tenant-a left: %v", err)
	}
	release("a2")
	if gpu(0).ShareTenant != "" || !gpu(0).Empty() {
		t.Fatalf("gpu 0 after its last share: %+v", *gpu(0))
	}
	apply(tshare("b2", "h", "tenant-b", 0, 100))
	if gpu(0).ShareTenant != "tenant-b" {
		t.Fatalf("ShareTenant %q, want tenant-b", gpu(0).ShareTenant)
	}
	// A whole-GPU or MIG placement's tenant means nothing to shares.
	g := MockFleet(MockHost("m", "H100", 2))
	w := whole("w", "m", 1)
	w.Tenant = "tenant-a"
	if err := g.Apply(w); err != nil {
		t.Fatal(err)
	}
	if err := g.Apply(tshare("s", "m", "tenant-b", 0, 100)); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestShareTenantsEmpty: shares without a tenant (trace replays, the
// simulator, old placements) share GPUs with each other as before, and
// leave the class keys as they were.
func TestShareTenantsEmpty(t *testing.T) {
	f := MockFleet(MockHost("h", "L40S", 1), MockHost("k", "L40S", 1))
	for _, p := range []*Placement{tshare("x", "h", "", 0, 300), tshare("y", "h", "", 0, 300), tshare("z", "h", "", 0, 300)} {
		if err := f.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	if g := f.Host("h").GPUs[0]; g.Shares != 3 || g.ShareTenant != "" {
		t.Fatalf("%d shares of %q, want 3 without a tenant", g.Shares, g.ShareTenant)
	}
	if err := f.Apply(tshare("t", "h", "tenant-a", 0, 50)); !errors.Is(err, ErrConflict) {
		t.Fatalf("a tenant's share on a GPU with tenant-less shares: %v", err)
	}
	checkClasses(t, f)
	// A tenant-less share adds nothing to the class key beyond its usage.
	h := f.Host("h")
	key := f.stateKey(h)
	h.GPUs[0].ShareTenant = "tenant-a"
	withTenant := f.stateKey(h)
	h.GPUs[0].ShareTenant = ""
	if len(withTenant) <= len(key) || withTenant == key {
		t.Fatalf("class key %q with a tenant, %q without", withTenant, key)
	}
	if f.stateKey(h) != key {
		t.Fatal("stateKey is not a function of the state")
	}
	// Equal usage of different tenants: different classes; of one: one.
	g := MockFleet(MockHost("a", "L40S", 1), MockHost("b", "L40S", 1), MockHost("c", "L40S", 1))
	for _, p := range []*Placement{tshare("pa", "a", "tenant-a", 0, 300), tshare("pb", "b", "tenant-b", 0, 300), tshare("pc", "c", "tenant-a", 0, 300)} {
		if err := g.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	if g.Host("a").Class() != g.Host("c").Class() || g.Host("a").Class() == g.Host("b").Class() {
		t.Error("hosts with shares of one tenant in different classes, or of two tenants in one")
	}
	checkClasses(t, g)
}

// TestShareTenantsCheckAndCopies: Check catches a ShareTenant that
// disagrees with the allocations; Clone, HostWithout and AddHost keep or
// reset it as they keep or reset usage.
func TestShareTenantsCheckAndCopies(t *testing.T) {
	f := MockFleet(MockHost("h", "L40S", 2))
	for _, p := range []*Placement{tshare("a1", "h", "tenant-a", 0, 300), tshare("a2", "h", "tenant-a", 0, 300)} {
		if err := f.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	for i, fn := range []func(f *Fleet){
		func(f *Fleet) { f.Host("h").GPUs[0].ShareTenant = "tenant-b" },
		func(f *Fleet) { f.Host("h").GPUs[0].ShareTenant = "" },
		func(f *Fleet) { f.Host("h").GPUs[1].ShareTenant = "tenant-a" },
		func(f *Fleet) { f.allocs["a2"].Tenant = "tenant-b" },
	} {
		c := f.Clone()
		fn(c)
		if err := c.Check(); err == nil {
			t.Errorf("corruption %d not detected", i)
		}
	}
	c := f.Clone()
	if got := c.Host("h").GPUs[0].ShareTenant; got != "tenant-a" || c.Check() != nil {
		t.Fatalf("clone: ShareTenant %q, Check %v", got, c.Check())
	}
	var scratch Host
	if err := f.HostWithout(&scratch, "h", []string{"a1"}); err != nil || scratch.GPUs[0].ShareTenant != "tenant-a" {
		t.Fatalf("without a1: ShareTenant %q, %v", scratch.GPUs[0].ShareTenant, err)
	}
	if err := f.HostWithout(&scratch, "h", []string{"a1", "a2"}); err != nil || scratch.GPUs[0].ShareTenant != "" {
		t.Fatalf("without a1 and a2: ShareTenant %q, %v", scratch.GPUs[0].ShareTenant, err)
	}
	// A host added with usage in it starts free, tenant included.
	g := New()
	if err := g.AddHost(f.Host("h"), nil); err != nil {
		t.Fatal(err)
	}
	if got := g.Host("h").GPUs[0].ShareTenant; got != "" {
		t.Fatalf("AddHost kept ShareTenant %q", got)
	}
	if err := g.Check(); err != nil {
		t.Fatal(err)
	}
}
