package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/imageref"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestImageRegistryRefused: an image whose registry is a loopback,
// link-local, private or other internal address (an IP literal or a
// localhost name) is refused at create time, for instances, batches, spot
// requests and groups, as invalid_argument naming the field and the rule
// and never the port, and writes nothing; the operator's allow-list
// (Options.AllowRegistries) lets its registry through.
func TestImageRegistryRefused(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		w.svc = service.New(st, catalog.Default(), service.Options{Now: w.clock.Now,
			AllowRegistries: imageref.MustAllowList("10.0.0.5:5000", "registry.localhost")})
		ctx := context.Background()
		before := w.rows(t)
		for _, c := range []struct{ image, rule string }{
			{"127.0.0.1:8080/x:1", "a loopback address"},
			{"[::1]:8080/x:1", "a loopback address"},
			{"localhost:8080/x:1", "a loopback address (localhost)"},
			{"0.0.0.0:8080/x:1", "unspecified"},
			{"169.254.169.254/latest:1", "a link-local address"},
			{"[fe80::1]:8080/x:1", "a link-local address"},
			{"10.0.0.5:5001/x:1", "a private address"},
			{"172.20.0.1:8080/x:1", "a private address"},
			{"192.168.0.10:8080/x:1", "a private address"},
			{"[fd12::1]:8080/x:1", "a private (unique local) address"},
			{"100.100.100.200/x:1", "carrier-grade NAT"},
			{"239.1.1.1/x:1", "a multicast address"},
		} {
			port := ""
			if ref, err := imageref.Parse(c.image); err == nil {
				_, port = imageref.SplitRegistry(ref.Registry)
			}
			check := func(what, field string, err error) {
				t.Helper()
				wantInvalidField(t, what+" "+c.image, err, field, c.rule)
				if err != nil && port != "" && strings.Contains(err.Error(), ":"+port) {
					t.Errorf("%s %s: %q names the port", what, c.image, err)
				}
			}
			_, _, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "l4.1x", Image: c.image}, "")
			check("instance", "image", err)
			_, err = w.svc.Instances.CreateMany(ctx, w.acme, []service.InstanceCreate{{Spec: api.CreateInstanceRequest{Offering: "l4.1x", Image: c.image}}})
			check("batch", "image", err)
			_, _, err = w.svc.Spot.Create(ctx, w.acme, api.CreateSpotRequestRequest{Type: cloud.SpotOneTime,
				Pools: []cloud.Pool{{Offering: "l4.1x"}}, Image: c.image}, "")
			check("spot request", "image", err)
			_, _, err = w.svc.Groups.Create(ctx, w.acme, api.CreateGroupRequest{Name: "g",
				Template: cloud.GroupTemplate{Offerings: []string{"l4.1x"}, Image: c.image}, Min: 0, Max: 1}, "")
			check("group", "template.image", err)
		}
		if w.rows(t) != before {
			t.Error("refused creates wrote something")
		}
		for _, image := range []string{"10.0.0.5:5000/ml/job:1", "registry.localhost/x:1", "ghcr.io/acme/x:1", "registry.internal:5000/x:1"} {
			if _, _, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "l4.1x", Image: image}, ""); err != nil {
				t.Errorf("%s (allowed or public): %v", image, err)
			}
		}
	})
}
