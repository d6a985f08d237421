package placement

import (
	"testing"

	"github.com/gpucloud/gpucloud/fleet"
)

// TestPreferBreaksTiesOnly: Request.Prefer picks among the hosts tied
// for the best score and does nothing else: a preferred host that does
// not fit, scores worse, or is unknown leaves the placement the one made
// without Prefer, for every policy.
func TestPreferBreaksTiesOnly(t *testing.T) {
	h100 := func(id string) *fleet.Host { return fleet.MockHost(id, "H100", 8) }
	a100 := func(id string) *fleet.Host { return fleet.MockHost(id, "A100-80GB-SXM", 8) }
	cases := []struct {
		name   string
		hosts  []*fleet.Host
		setup  []*Request
		req    *Request
		prefer []string
		// want: the host chosen; "" = the host chosen without Prefer.
		want string
	}{
		{name: "among empty identical hosts the preferred wins",
			hosts: []*fleet.Host{h100("h1"), h100("h2"), h100("h3"), h100("h4")},
			req:   gpuReq("r", 1), prefer: []string{"h3"}, want: "h3"},
		{name: "the first preferred of several tied wins",
			hosts: []*fleet.Host{h100("h1"), h100("h2"), h100("h3"), h100("h4")},
			req:   gpuReq("r", 1), prefer: []string{"h4", "h2"}, want: "h4"},
		{name: "a preferred host that does not fit is passed over for the next",
			hosts: []*fleet.Host{h100("h1"), h100("h2"), a100("a1")},
			req:   gpuReq("r", 1, "H100"), prefer: []string{"a1", "h2"}, want: "h2"},
		{name: "a preferred host that cannot fit changes nothing",
			hosts: []*fleet.Host{h100("h1"), h100("h2"), a100("a1")},
			req:   gpuReq("r", 1, "H100"), prefer: []string{"a1"}},
		{name: "an unknown host changes nothing",
			hosts: []*fleet.Host{h100("h1"), h100("h2")},
			req:   gpuReq("r", 1), prefer: []string{"gone"}},
		{name: "a preferred host full for the request changes nothing",
			hosts: []*fleet.Host{h100("h1"), h100("h2")},
			setup: []*Request{{ID: "big", Mode: "gpu", GPUs: 8, CPUMilli: 1000, MemoryMiB: 1024, Prefer: []string{"h1"}}},
			req:   gpuReq("r", 1), prefer: []string{"h1"}, want: "h2"},
	}
	for _, c := range cases {
		for _, policy := range Policies() {
			t.Run(c.name+"/"+policy, func(t *testing.T) {
				build := func() (*Engine, *fleet.Fleet) {
					e := newEngine(t, policy)
					f := fleet.MockFleet(c.hosts...)
					for _, r := range c.setup {
						cp := *r
						mustPlace(t, e, f, &cp)
					}
					return e, f
				}
				e, f := build()
				plain, err := e.Place(f, c.req)
				if err != nil {
					t.Fatal(err)
				}
				e, f = build()
				r := *c.req
				r.Prefer = c.prefer
				got, err := e.Place(f, &r)
				if err != nil {
					t.Fatal(err)
				}
				want := c.want
				if want == "" {
					want = plain.HostID
				}
				if got.HostID != want {
					t.Fatalf("placed on %s, want %s (without Prefer: %s)", got.HostID, want, plain.HostID)
				}
				if got.Score != plain.Score {
					t.Fatalf("score %v with Prefer, %v without: Prefer changed more than a tie", got.Score, plain.Score)
				}
			})
		}
	}
}

// TestPreferNeverBeatsABetterScore: on a fleet where one host scores
// strictly better for the request (a packing policy and a half-used
// host), preferring the worse one changes nothing.
func TestPreferNeverBeatsABetterScore(t *testing.T) {
	for _, policy := range []string{"bestfit", "packing"} {
		t.Run(policy, func(t *testing.T) {
			e := newEngine(t, policy)
			f := fleet.MockFleet(fleet.MockHost("h1", "H100", 8), fleet.MockHost("h2", "H100", 8))
			mustPlace(t, e, f, &Request{ID: "seed", Mode: "gpu", GPUs: 4, CPUMilli: 1000, MemoryMiB: 1024, Prefer: []string{"h1"}})
			plain, err := e.Place(f, gpuReq("r", 1))
			if err != nil {
				t.Fatal(err)
			}
			r := gpuReq("r", 1)
			r.Prefer = []string{"h2"}
			got, err := e.Place(f, r)
			if err != nil {
				t.Fatal(err)
			}
			if plain.HostID != "h1" || got.HostID != "h1" {
				t.Fatalf("without Prefer %s, preferring h2 %s; want h1 both times (the half-used host packs better)", plain.HostID, got.HostID)
			}
		})
	}
}

// TestPreferEachTiedHost: on identical empty hosts every one of them can
// be had by preferring it, under every policy.
func TestPreferEachTiedHost(t *testing.T) {
	ids := []string{"h1", "h2", "h3", "h4", "h5"}
	for _, policy := range Policies() {
		t.Run(policy, func(t *testing.T) {
			e := newEngine(t, policy)
			var hosts []*fleet.Host
			for _, id := range ids {
				hosts = append(hosts, fleet.MockHost(id, "H100", 8))
			}
			f := fleet.MockFleet(hosts...)
			for _, id := range ids {
				r := gpuReq("r", 1)
				r.Prefer = []string{id}
				p, err := e.Place(f, r)
				if err != nil {
					t.Fatal(err)
				}
				if p.HostID != id {
					t.Fatalf("preferring %s placed on %s", id, p.HostID)
				}
			}
		})
	}
}
