package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestCreateRefusesWhatNoHostCouldRun: with the fleet's availability known,
// an instance or spot request for an offering no host could ever run is
// invalid and changes nothing; one whose availability is unknown, or
// merely full, is accepted; a retry of an earlier create still answers
// the instance it made.
func TestCreateRefusesWhatNoHostCouldRun(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		avail := map[string]cloud.OfferingAvailability{
			"h100.1x":          {Hosts: 2, FitsNow: 0, Reasons: map[string]int{"insufficient GPUs": 2}},
			"h200.mig.1g.18gb": {Hosts: 0, Reasons: map[string]int{"wrong GPU model": 2}},
			"a10.1x":           {Hosts: 0, Reasons: map[string]int{"wrong GPU model": 2}},
			"h200.1x":          {Hosts: 0, Reasons: map[string]int{"wrong GPU model": 2}, FleetHosts: 2},
		}
		w.svc = service.New(st, catalog.Default(), service.Options{Now: w.clock.Now,
			Availability: func() map[string]cloud.OfferingAvailability { return avail }})
		ctx := context.Background()
		// Created while the fleet was unknown, retried once it is known.
		delete(avail, "a10.1x")
		first, _, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "a10.1x"}, "k-early")
		if err != nil {
			t.Fatal(err)
		}
		avail["a10.1x"] = cloud.OfferingAvailability{Hosts: 0, Reasons: map[string]int{"wrong GPU model": 2}}
		cases := []struct {
			name     string
			offering string
			key      string
			want     cloud.Code
		}{
			{"full but possible", "h100.1x", "", ""},
			{"unknown", "l40s.1x", "", ""},
			{"never", "h200.mig.1g.18gb", "", cloud.Invalid},
			{"retry of an earlier create", "a10.1x", "k-early", ""},
			{"new create of the same", "a10.1x", "k-late", cloud.Invalid},
			// Counted over 2 hosts while the store has none: a host joined
			// or left since, so "no host" is stale, and the create waits.
			{"stale", "h200.1x", "", ""},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				before := w.rows(t)
				in, _, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: c.offering}, c.key)
				if got := cloud.ErrorCode(err); got != c.want {
					t.Fatalf("code %q (%v), want %q", got, err, c.want)
				}
				if c.want != "" {
					if w.rows(t) != before {
						t.Errorf("a refused create changed rows")
					}
					if !strings.Contains(err.Error(), "no host in this cloud could ever run it") || !strings.Contains(err.Error(), "2 wrong GPU model") {
						t.Errorf("message %q", err)
					}
					return
				}
				if c.key == "k-early" && in.ID != first.ID {
					t.Errorf("retry made %s, want %s", in.ID, first.ID)
				}
			})
		}
		_, _, err = w.svc.Spot.Create(ctx, w.acme, api.CreateSpotRequestRequest{Type: cloud.SpotOneTime,
			Pools: []cloud.Pool{{Offering: "h200.mig.1g.18gb"}}}, "")
		if cloud.ErrorCode(err) != cloud.Invalid {
			t.Errorf("spot request for an offering no host runs: %v", err)
		}
		_, _, err = w.svc.Spot.Create(ctx, w.acme, api.CreateSpotRequestRequest{Type: cloud.SpotOneTime,
			Pools: []cloud.Pool{{Offering: "h200.mig.1g.18gb"}, {Offering: "h100.1x"}}}, "")
		if err != nil {
			t.Errorf("spot request with one runnable pool: %v", err)
		}
	})
}

// TestCreateRefusesAnImageOnProcessHosts: where every host that could run
// an offering runs plain processes, an instance or spot request that
// names an image is invalid, naming the image field, and changes nothing;
// without an image, or where a host runs containers, it is accepted.
func TestCreateRefusesAnImageOnProcessHosts(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		avail := map[string]cloud.OfferingAvailability{
			"h100.1x": {Hosts: 2, FitsNow: 2, Containers: 0},
			"l40s.1x": {Hosts: 3, FitsNow: 3, Containers: 1},
		}
		w.svc = service.New(st, catalog.Default(), service.Options{Now: w.clock.Now,
			Availability: func() map[string]cloud.OfferingAvailability { return avail }})
		ctx := context.Background()
		for _, c := range []struct {
			name, offering, image string
			want                  cloud.Code
		}{
			{"image, processes only", "h100.1x", "python:3.12", cloud.Invalid},
			{"no image, processes only", "h100.1x", "", ""},
			{"image, one host runs containers", "l40s.1x", "python:3.12", ""},
			{"image, availability unknown", "a100.1x", "python:3.12", ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				before := w.rows(t)
				_, _, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: c.offering, Image: c.image}, "")
				if got := cloud.ErrorCode(err); got != c.want {
					t.Fatalf("code %q (%v), want %q", got, err, c.want)
				}
				if c.want == "" {
					return
				}
				if w.rows(t) != before {
					t.Errorf("a refused create changed rows")
				}
				var ce *cloud.Error
				if !errors.As(err, &ce) || ce.Details["field"] != "image" || !strings.Contains(ce.Message, "plain processes") {
					t.Errorf("error %#v, want one naming the image field and why", err)
				}
			})
		}
		_, _, err := w.svc.Spot.Create(ctx, w.acme, api.CreateSpotRequestRequest{Type: cloud.SpotOneTime, Image: "python:3.12",
			Pools: []cloud.Pool{{Offering: "h100.1x"}}}, "")
		if cloud.ErrorCode(err) != cloud.Invalid {
			t.Errorf("spot request naming an image on process hosts: %v", err)
		}
	})
}
