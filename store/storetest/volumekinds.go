package storetest

import (
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
)

// testSharedVolumes stores a shared volume next to a block one (whose
// empty kind reads as block), and refuses a shared volume that names an
// instance, an unknown kind, and a change of kind.
func testSharedVolumes(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	inTx(t, s, func(tx cloud.Tx) error {
		return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-1", TenantID: "t-1", State: cloud.Running})
	})
	sh := &cloud.Volume{ID: "v-s", TenantID: "t-1", Name: "ckpt", SizeGiB: 10, Kind: cloud.VolumeShared, CreatedAt: t0}
	bl := &cloud.Volume{ID: "v-b", TenantID: "t-1", Name: "data", SizeGiB: 1, CreatedAt: t0}
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.CreateVolume(ctx, sh); err != nil {
			return err
		}
		return tx.CreateVolume(ctx, bl)
	})
	got, _ := getVolume(t, s, "v-s")
	wantEqual(t, "GetVolume of a shared volume", got, sh)
	got, _ = getVolume(t, s, "v-b")
	if got.Kind != cloud.VolumeBlock {
		t.Errorf("kind of a volume created without one = %q, want block", got.Kind)
	}
	err := try(s, func(tx cloud.Tx) error {
		return tx.CreateVolume(ctx, &cloud.Volume{ID: "v-x", TenantID: "t-1", Name: "x", SizeGiB: 1,
			Kind: cloud.VolumeShared, InstanceID: "i-1", CreatedAt: t0})
	})
	wantCode(t, "create a shared volume naming an instance", err, cloud.Invalid, "shared volume v-x names instance i-1")
	err = try(s, func(tx cloud.Tx) error {
		return tx.CreateVolume(ctx, &cloud.Volume{ID: "v-y", TenantID: "t-1", Name: "y", SizeGiB: 1, Kind: "tape", CreatedAt: t0})
	})
	wantCode(t, "create with an unknown kind", err, cloud.Invalid, `unknown kind "tape"`)
	attach := *sh
	attach.InstanceID = "i-1"
	err = try(s, func(tx cloud.Tx) error { return tx.UpdateVolume(ctx, &attach) })
	wantCode(t, "attach a shared volume by InstanceID", err, cloud.Invalid, "shared volume v-s names instance i-1")
	turn := *sh
	turn.Kind = cloud.VolumeBlock
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateVolume(ctx, &turn) })
	got, _ = getVolume(t, s, "v-s")
	if got.Kind != cloud.VolumeShared {
		t.Errorf("kind after an update that changed it = %q, want shared (fixed at creation)", got.Kind)
	}
}
