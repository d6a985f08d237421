package service_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// wantInvalidField checks that err is an invalid_argument naming field,
// with a message that starts with it and says want.
func wantInvalidField(t *testing.T, what string, err error, field, want string) {
	t.Helper()
	var ce *cloud.Error
	if !errors.As(err, &ce) || ce.Code != cloud.Invalid || ce.Details["field"] != field {
		t.Errorf("%s: %v, want invalid_argument on %s", what, err, field)
		return
	}
	if !strings.HasPrefix(ce.Message, field+": ") || !strings.Contains(ce.Message, want) {
		t.Errorf("%s: message %q, want it to start with %q and say %q", what, ce.Message, field, want)
	}
}

// TestInstanceImage: an instance's image is stored in canonical form,
// read back, and reaches its host's assignment; a reference that does not
// parse is refused naming the field, writing nothing; two spellings of one
// image are one request for idempotency, another image a conflict naming
// "image"; another tenant sees nothing of it.
func TestInstanceImage(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		in, created, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "l4.1x", Image: "python:3.12"}, "k-1")
		if err != nil || !created {
			t.Fatalf("create: %v, created %v", err, created)
		}
		if in.Image != "docker.io/library/python:3.12" {
			t.Errorf("stored image %q, want the canonical docker.io/library/python:3.12", in.Image)
		}
		got, err := w.svc.Instances.Get(ctx, w.acme, in.ID)
		if err != nil || got.Image != in.Image {
			t.Errorf("read back: %+v, %v", got, err)
		}
		plain, _, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "l4.1x"}, "")
		if err != nil || plain.Image != "" {
			t.Errorf("no image: %+v, %v; want the empty image (the hosts' default)", plain, err)
		}

		// Refusals name the field and write nothing.
		before := w.rows(t)
		for _, c := range []struct{ image, says string }{
			{"Python:3.12", "lower case"},
			{"python 3.12", "a space"},
			{"python:", "empty tag"},
			{"ghcr.io//x", "empty path part"},
			{"python@sha256:abc", "hex digits"},
			{strings.Repeat("a", 600), "the limit is 512"},
		} {
			_, _, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "l4.1x", Image: c.image}, "")
			wantInvalidField(t, "image "+c.image[:min(len(c.image), 20)], err, "image", c.says)
		}
		if w.rows(t) != before {
			t.Error("refused creates wrote something")
		}

		// Idempotency compares canonical images.
		again, created, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "l4.1x", Image: "docker.io/library/python:3.12"}, "k-1")
		if err != nil || created || again.ID != in.ID {
			t.Errorf("retry spelling the image in full: %v, created %v", err, created)
		}
		for _, other := range []string{"python:3.13", ""} {
			_, _, err = w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "l4.1x", Image: other}, "k-1")
			var ce *cloud.Error
			if !errors.As(err, &ce) || ce.Code != cloud.Conflict {
				t.Errorf("same key, image %q: %v, want a conflict", other, err)
			} else if fields, _ := ce.Details["fields"].([]string); !slices.Equal(fields, []string{"image"}) || ce.Details["existing_id"] != in.ID {
				t.Errorf("same key, image %q: details %v, want fields [image]", other, ce.Details)
			}
		}
		if w.rows(t) != before {
			t.Error("retries wrote something")
		}

		// Tenancy is unchanged: the image opens nothing.
		if _, err := w.svc.Instances.Get(ctx, w.glob, in.ID); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("another tenant reads the instance: %v", err)
		}
		theirs, created, err := w.svc.Instances.Create(ctx, w.glob, api.CreateInstanceRequest{Offering: "l4.1x", Image: "python:3.12"}, "k-1")
		if err != nil || !created || theirs.ID == in.ID {
			t.Errorf("another tenant, same key and image: %v, created %v", err, created)
		}

		// The host's agent is told the image.
		testkit.Move(t, st, in.ID, cloud.Scheduled, &fleet.Placement{ID: in.ID, HostID: "h-a", CPUMilli: 1000, MemoryMiB: 1024}, w.clock.Now())
		as, err := w.svc.Agents.Assignments(ctx, service.AgentActor("h-a"))
		if err != nil || len(as) != 1 || as[0].InstanceID != in.ID || as[0].Image != "docker.io/library/python:3.12" {
			t.Errorf("assignments = %+v, %v; want the instance with its image", as, err)
		}
	})
}

// TestSpotRequestImage: a spot request's image is checked and stored as
// an instance's, and every launch runs in it.
func TestSpotRequestImage(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		spec := api.CreateSpotRequestRequest{Pools: []cloud.Pool{{Offering: "l4.1x"}}, Image: "ghcr.io/acme/train:1"}
		sr, _, err := w.svc.Spot.Create(ctx, w.acme, spec, "s-1")
		if err != nil {
			t.Fatal(err)
		}
		if sr.Image != "ghcr.io/acme/train:1" {
			t.Errorf("request image %q", sr.Image)
		}
		in, err := w.svc.Instances.Get(ctx, w.acme, sr.InstanceID)
		if err != nil || in.Image != sr.Image || in.Market != cloud.MarketSpot {
			t.Errorf("launch = %+v, %v; want the request's image", in, err)
		}
		before := w.rows(t)
		bad := spec
		bad.Image = "ghcr.io/acme/Train:1"
		_, _, err = w.svc.Spot.Create(ctx, w.acme, bad, "")
		wantInvalidField(t, "bad spot image", err, "image", "lower case")
		other := spec
		other.Image = "ghcr.io/acme/train:2"
		_, _, err = w.svc.Spot.Create(ctx, w.acme, other, "s-1")
		var ce *cloud.Error
		if !errors.As(err, &ce) || ce.Code != cloud.Conflict || !slices.Equal(ce.Details["fields"].([]string), []string{"image"}) {
			t.Errorf("same key, another image: %v, want a conflict on image", err)
		}
		if w.rows(t) != before {
			t.Error("refused creates wrote something")
		}
		if _, err := w.svc.Spot.Get(ctx, w.glob, sr.ID); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("another tenant reads the request: %v", err)
		}
	})
}
