package storetest

import (
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// testVolumeHosts: a volume has no host until one is set; setting again
// replaces it; a missing volume or an empty host is refused, and nothing
// of a refused set is kept.
func testVolumeHosts(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	for _, id := range []string{"v-1", "v-2"} {
		inTx(t, s, func(tx cloud.Tx) error {
			return tx.CreateVolume(ctx, &cloud.Volume{ID: id, TenantID: "t-1", Name: id, SizeGiB: 1, CreatedAt: t0})
		})
	}
	if err := try(s, func(tx cloud.Tx) error { _, err := tx.GetVolumeHost(ctx, "v-1"); return err }); cloud.ErrorCode(err) != cloud.NotFound {
		t.Fatalf("host of a volume never placed: %v, want not found", err)
	}
	inTx(t, s, func(tx cloud.Tx) error { return tx.RecordVolumeHosts(ctx, []string{"v-1", "v-2"}, "h-1", t0) })
	later := t0.Add(time.Hour)
	inTx(t, s, func(tx cloud.Tx) error { return tx.RecordVolumeHosts(ctx, []string{"v-2"}, "h-2", later) })
	for _, tt := range []struct {
		id, host string
		at       time.Time
	}{{"v-1", "h-1", t0}, {"v-2", "h-2", later}} {
		got := mustRead(t, s, func(tx cloud.Tx) (*cloud.VolumeHost, error) { return tx.GetVolumeHost(ctx, tt.id) })
		if got.VolumeID != tt.id || got.HostID != tt.host || !got.UpdatedAt.Equal(tt.at.Truncate(time.Microsecond)) || got.UpdatedAt.Location() != time.UTC {
			t.Errorf("host of %s: %+v, want %s at %v (UTC)", tt.id, got, tt.host, tt.at)
		}
	}
	for _, e := range []struct {
		name string
		fn   func(cloud.Tx) error
		want cloud.Code
	}{
		{"missing volume", func(tx cloud.Tx) error { return tx.RecordVolumeHosts(ctx, []string{"v-1", "v-9"}, "h-3", t0) }, cloud.NotFound},
		{"no host", func(tx cloud.Tx) error { return tx.RecordVolumeHosts(ctx, []string{"v-1"}, "", t0) }, cloud.Invalid},
	} {
		if err := try(s, e.fn); cloud.ErrorCode(err) != e.want {
			t.Errorf("%s: %v, want %s", e.name, err, e.want)
		}
	}
	if got := mustRead(t, s, func(tx cloud.Tx) (*cloud.VolumeHost, error) { return tx.GetVolumeHost(ctx, "v-1") }); got.HostID != "h-1" {
		t.Errorf("a refused set changed v-1's host to %s", got.HostID)
	}
}
