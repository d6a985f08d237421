package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// testReplicas: a replica's row is written and rewritten (its start
// kept, its hosts replaced whole), listed only while its heartbeat is at
// or after the cut, and deleted with its hosts once older; bad rows are
// refused and change nothing.
func testReplicas(t *testing.T, s cloud.Store) {
	hosts := func(ids ...string) []cloud.ReplicaHost {
		out := []cloud.ReplicaHost{}
		for i, id := range ids {
			out = append(out, cloud.ReplicaHost{HostID: id, Since: t0.Add(time.Duration(i) * time.Second)})
		}
		return out
	}
	put := func(id string, hb time.Time, load string, hs []cloud.ReplicaHost) {
		t.Helper()
		inTx(t, s, func(tx cloud.Tx) error {
			return tx.PutReplica(ctx, &cloud.Replica{ID: id, Address: id + ".internal:7878", StartedAt: hb, HeartbeatAt: hb, Load: load, Hosts: hs})
		})
	}
	put("r-a", t0, `{"e":1}`, hosts("h-1", "h-2"))
	put("r-b", t0, "", hosts("h-3"))
	// r-a again, later: its start stays, its hosts are replaced.
	put("r-a", t0.Add(3*time.Second), `{"e":2}`, hosts("h-2", "h-4"))

	for _, c := range []struct {
		name string
		r    cloud.Replica
	}{
		{"no id", cloud.Replica{Address: "x:1", HeartbeatAt: t0}},
		{"no address", cloud.Replica{ID: "r-c", HeartbeatAt: t0}},
		{"duplicate host", cloud.Replica{ID: "r-b", Address: "x:1", HeartbeatAt: t0, Hosts: []cloud.ReplicaHost{{HostID: "h-9"}, {HostID: "h-9"}}}},
		{"empty host", cloud.Replica{ID: "r-b", Address: "x:1", HeartbeatAt: t0, Hosts: []cloud.ReplicaHost{{}}}},
	} {
		r := c.r
		if err := try(s, func(tx cloud.Tx) error { return tx.PutReplica(ctx, &r) }); cloud.ErrorCode(err) != cloud.Invalid {
			t.Errorf("%s: %v, want invalid", c.name, err)
		}
	}

	list := func(since time.Time) []*cloud.Replica {
		return mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Replica, error) { return tx.ListReplicas(ctx, since) })
	}
	want := []*cloud.Replica{
		{ID: "r-a", Address: "r-a.internal:7878", StartedAt: us(t0), HeartbeatAt: us(t0.Add(3 * time.Second)), Load: `{"e":2}`,
			Hosts: []cloud.ReplicaHost{{HostID: "h-2", Since: us(t0)}, {HostID: "h-4", Since: us(t0.Add(time.Second))}}},
		{ID: "r-b", Address: "r-b.internal:7878", StartedAt: us(t0), HeartbeatAt: us(t0),
			Hosts: []cloud.ReplicaHost{{HostID: "h-3", Since: us(t0)}}},
	}
	for _, c := range []struct {
		since time.Time
		want  []*cloud.Replica
	}{
		{t0.Add(-time.Hour), want},
		{t0, want},
		{t0.Add(time.Second), want[:1]},
		{t0.Add(4 * time.Second), []*cloud.Replica{}},
	} {
		if got := list(c.since); !reflect.DeepEqual(got, c.want) {
			t.Errorf("list since %s:\n got %s\nwant %s", c.since.Sub(t0), dump(got), dump(c.want))
		}
	}

	// A replica with many hosts (more than one statement's chunk).
	var many []string
	for i := range 450 {
		many = append(many, fmt.Sprintf("h-%03d", i))
	}
	put("r-c", t0.Add(5*time.Second), "", hosts(many...))
	if got := list(t0.Add(5 * time.Second)); len(got) != 1 || len(got[0].Hosts) != 450 || got[0].Hosts[449].HostID != "h-449" {
		t.Fatalf("many hosts: %s", dump(got))
	}

	n := mustRead(t, s, func(tx cloud.Tx) (int, error) { return tx.DeleteReplicas(ctx, t0.Add(time.Second)) })
	if n != 1 {
		t.Fatalf("deleted %d, want 1 (r-b)", n)
	}
	if got := list(t0.Add(-time.Hour)); len(got) != 2 || got[0].ID != "r-a" || got[1].ID != "r-c" || len(got[0].Hosts) != 2 {
		t.Fatalf("after delete: %s", dump(got))
	}
	// r-b comes back with a new start once it writes again.
	put("r-b", t0.Add(time.Minute), "", nil)
	if got := list(t0.Add(time.Minute)); len(got) != 1 || !got[0].StartedAt.Equal(us(t0.Add(time.Minute))) || len(got[0].Hosts) != 0 {
		t.Fatalf("r-b again: %s", dump(got))
	}
}

func dump(rs []*cloud.Replica) string {
	s := "["
	for _, r := range rs {
		s += fmt.Sprintf("%+v ", *r)
	}
	return s + "]"
}
