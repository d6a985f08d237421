package service

import (
	"reflect"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// stateFields are the fields of an instance that a lifecycle move may
// change: what cloud.Tx.UpdateInstanceStates writes, which MoveInstances
// relies on.
var stateFields = map[string]bool{"State": true, "Reason": true, "HostID": true, "Placement": true,
	"Zone": true, "Interruption": true, "UpdatedAt": true}

// TestApplyChangesOnlyStateFields: every move, legal from any state, with
// or without a placement, a notice or the reason kept, changes no field of
// the instance but the state fields, so that MoveInstances may write those
// alone. A field added to cloud.Instance is covered without a change here:
// the instance is filled by reflection.
func TestApplyChangesOnlyStateFields(t *testing.T) {
	states := []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused,
		cloud.Stopping, cloud.Stopped, cloud.Terminating, cloud.Terminated, cloud.Failed, cloud.Lost}
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	moves := 0
	for _, from := range states {
		for _, to := range states {
			if !cloud.CanMove(from, to) {
				continue
			}
			for _, variant := range []string{"plain", "notice", "keep reason"} {
				var full cloud.Instance
				fill(t, reflect.ValueOf(&full).Elem())
				full.State = from
				before := full
				m := Move{To: to, Reason: "moved", Actor: "tester"}
				if to == cloud.Scheduled {
					m.Placement, m.Zone = &fleet.Placement{ID: full.ID, HostID: "h-2"}, "z-2"
				}
				switch variant {
				case "notice":
					m.Interruption = &cloud.Interruption{Reason: "reclaim", NoticedAt: now, Deadline: now.Add(time.Minute)}
				case "keep reason":
					m.KeepReason = true
				}
				if _, err := apply(&full, m, now); err != nil {
					t.Fatalf("%s -> %s (%s): %v", from, to, variant, err)
				}
				moves++
				a, b := reflect.ValueOf(full), reflect.ValueOf(before)
				for i := range a.NumField() {
					name := a.Type().Field(i).Name
					if !stateFields[name] && !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
						t.Errorf("%s -> %s (%s) changed %s, which UpdateInstanceStates does not write", from, to, variant, name)
					}
				}
			}
		}
	}
	if moves == 0 {
		t.Fatal("no legal move tried")
	}
}

// fill sets every field of v, recursively, to a value that is not zero.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString("x-" + v.Type().Name())
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(3)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(3)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(t, s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k)
		fill(t, e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem())
		v.Set(p)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i))
			}
		}
	default:
		t.Fatalf("fill: a field of kind %s", v.Kind())
	}
}
