package service_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// fieldOf is the field a typed error names ("" when none).
func fieldOf(err error) string {
	var ce *cloud.Error
	if errors.As(err, &ce) {
		if f, ok := ce.Details["field"].(string); ok {
			return f
		}
	}
	return ""
}

// TestEndpointVolumes: an endpoint takes the tenant's shared volumes, and
// every worker it launches mounts them; a block volume is refused naming
// the field and why, another tenant's volume or a missing one is
// not_found, and a refused create or update writes nothing.
func TestEndpointVolumes(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		f.sharedHost("h-shared")
		vol := func(a service.Actor, name string, kind cloud.VolumeKind) *cloud.Volume {
			t.Helper()
			v, _, err := f.svc.Volumes.Create(ctx, a, api.CreateVolumeRequest{Name: name, SizeGiB: 10, Kind: kind}, "")
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		sv, sv2, blk := vol(f.acme, "models", cloud.VolumeShared), vol(f.acme, "cache", cloud.VolumeShared), vol(f.acme, "scratch", cloud.VolumeBlock)
		gone := vol(f.acme, "gone", cloud.VolumeShared)
		if _, err := f.svc.Volumes.Delete(ctx, f.acme, gone.ID); err != nil {
			t.Fatal(err)
		}
		theirs := vol(f.globex, "models", cloud.VolumeShared)

		for _, c := range []struct {
			name    string
			volumes []string
			code    cloud.Code
			field   string
			says    string
		}{
			{"one shared volume", []string{sv.ID}, "", "", ""},
			{"two shared volumes", []string{sv.ID, sv2.ID}, "", "", ""},
			{"a block volume", []string{blk.ID}, cloud.Invalid, "volumes[0]", "block volume, which attaches to one instance at a time"},
			{"a block volume after a shared one", []string{sv.ID, blk.ID}, cloud.Invalid, "volumes[1]", "shared"},
			{"another tenant's", []string{theirs.ID}, cloud.NotFound, "volumes[0]", "not found"},
			{"a missing one", []string{"vol-0123456789abcdef"}, cloud.NotFound, "volumes[0]", "not found"},
			{"a deleted one", []string{gone.ID}, cloud.NotFound, "volumes[0]", "not found"},
			{"given twice", []string{sv.ID, sv.ID}, cloud.Invalid, "volumes[1]", "given once"},
			{"an empty ID", []string{""}, cloud.Invalid, "volumes[0]", ""},
		} {
			req := echoEndpoint("v-" + strings.ReplaceAll(strings.ReplaceAll(c.name, " ", "-"), "'", ""))
			req.Volumes = c.volumes
			before := f.counts()
			e, _, err := f.svc.Endpoints.Create(ctx, f.acme, req, "")
			if c.code == "" {
				if err != nil || !slices.Equal(e.Spec.Volumes, c.volumes) {
					t.Errorf("%s: %+v %v", c.name, e, err)
				}
				continue
			}
			if codeOf(err) != c.code || fieldOf(err) != c.field || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: %v (field %q), want %s naming %s and saying %q", c.name, err, fieldOf(err), c.code, c.field, c.says)
			}
			f.unchanged(before, c.name)
		}

		// Update: a new list is checked the same way and rolls the
		// workers over; a refused one changes nothing.
		e, _, err := f.svc.Endpoints.Create(ctx, f.acme, echoEndpoint("echo"), "k-echo")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			volumes []string
			code    cloud.Code
		}{{[]string{blk.ID}, cloud.Invalid}, {[]string{theirs.ID}, cloud.NotFound}} {
			before := f.counts()
			if _, err := f.svc.Endpoints.Update(ctx, f.acme, "echo", api.UpdateEndpointRequest{Volumes: &c.volumes}, 0); codeOf(err) != c.code || fieldOf(err) != "volumes[0]" {
				t.Errorf("update to %v: %v, want %s", c.volumes, err, c.code)
			}
			f.unchanged(before, "refused update")
		}
		up, err := f.svc.Endpoints.Update(ctx, f.acme, "echo", api.UpdateEndpointRequest{Volumes: &[]string{sv.ID}}, 0)
		if err != nil || !slices.Equal(up.Spec.Volumes, []string{sv.ID}) || up.Status.Generation != e.Status.Generation+1 {
			t.Fatalf("update to a shared volume: %+v %v", up, err)
		}
		// A retried create with the same key and other volumes is a
		// conflict naming them (an updated endpoint answers itself).
		req := echoEndpoint("other")
		req.Volumes = []string{sv.ID}
		first, _, err := f.svc.Endpoints.Create(ctx, f.acme, req, "k-other")
		if err != nil {
			t.Fatal(err)
		}
		req.Volumes = []string{sv2.ID}
		if _, _, err := f.svc.Endpoints.Create(ctx, f.acme, req, "k-other"); codeOf(err) != cloud.Conflict || !strings.Contains(err.Error(), "volumes") {
			t.Errorf("reused key with other volumes: %v", err)
		}

		// Every worker mounts the shared volume: two at once, one volume.
		workers := launchWorkers(t, f, first, cloud.MarketOnDemand, cloud.MarketOnDemand)
		for _, id := range workers {
			in, err := f.svc.Instances.Get(ctx, f.acme, id)
			if err != nil || !slices.Equal(in.Volumes, []string{sv.ID}) {
				t.Errorf("worker %s: %+v %v, want volume %s", id, in, err, sv.ID)
			}
		}
		got, err := f.svc.Volumes.Get(ctx, f.acme, sv.ID)
		if err != nil || got.InstanceID != "" {
			t.Errorf("a shared volume is held by no one instance: %+v %v", got, err)
		}
		// Another tenant sees none of it.
		if _, err := f.svc.Endpoints.Describe(ctx, f.globex, first.ID); codeOf(err) != cloud.NotFound {
			t.Errorf("globex describes acme's endpoint: %v", err)
		}
	})
}
