package storetest

import (
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// testEventFilter checks EventFilter.Kinds and EventFilter.Since: alone,
// together and with the other fields, on events whose times are not in ID
// order (Since selects by time, the order stays the ID order).
func testEventFilter(t *testing.T, s cloud.Store) {
	const (
		reclaim   = cloud.EventSpotInterruption
		rebalance = cloud.EventSpotRebalance
		note      = cloud.EventKind("note")
	)
	es := []*cloud.Event{
		{Time: t0, Kind: reclaim, TenantID: "t-1", InstanceID: "i-1", Reason: "a"},
		{Time: t0.Add(time.Hour), Kind: rebalance, TenantID: "t-1", InstanceID: "i-1", Reason: "b"},
		{Time: t0.Add(2 * time.Hour), Kind: reclaim, TenantID: "t-2", InstanceID: "i-2", Reason: "c"},
		{Time: t0.Add(3 * time.Hour), Kind: note, TenantID: "t-1", Reason: "d"},
		// Appended last but older than every other event.
		{Time: t0.Add(-time.Hour), Kind: reclaim, TenantID: "t-1", InstanceID: "i-3", Reason: "e"},
		{Time: t0.Add(2*time.Hour + time.Microsecond), Kind: reclaim, TenantID: "t-1", InstanceID: "i-1", Reason: "f"},
	}
	appendEvents(t, s, es...)
	reasons := func(list []*cloud.Event) []string {
		out := []string{}
		for _, e := range list {
			out = append(out, e.Reason)
		}
		return out
	}
	for _, c := range []struct {
		desc string
		f    cloud.EventFilter
		want []string
	}{
		{"no Kinds and no Since: everything", cloud.EventFilter{}, []string{"a", "b", "c", "d", "e", "f"}},
		{"an empty Kinds list matches every kind", cloud.EventFilter{Kinds: []cloud.EventKind{}},
			[]string{"a", "b", "c", "d", "e", "f"}},
		{"one kind", cloud.EventFilter{Kinds: []cloud.EventKind{reclaim}}, []string{"a", "c", "e", "f"}},
		{"several kinds, in any order", cloud.EventFilter{Kinds: []cloud.EventKind{note, rebalance}},
			[]string{"b", "d"}},
		{"a kind given twice", cloud.EventFilter{Kinds: []cloud.EventKind{note, note}}, []string{"d"}},
		{"a kind nobody wrote", cloud.EventFilter{Kinds: []cloud.EventKind{"nothing"}}, []string{}},
		{"Since includes events at that time", cloud.EventFilter{Since: t0.Add(2 * time.Hour)},
			[]string{"c", "d", "f"}},
		{"Since is by time, not by ID", cloud.EventFilter{Since: t0.Add(-30 * time.Minute)},
			[]string{"a", "b", "c", "d", "f"}},
		{"Since a microsecond later excludes them", cloud.EventFilter{Since: t0.Add(2*time.Hour + time.Microsecond)},
			[]string{"d", "f"}},
		// The stores keep microseconds: an event appended at t0 (which has
		// nanoseconds) is at t0 for Since t0, in any zone.
		{"Since is normalized like the stored times", cloud.EventFilter{Since: t0.UTC()}, []string{"a", "b", "c", "d", "f"}},
		{"Since after the last event", cloud.EventFilter{Since: t0.Add(4 * time.Hour)}, []string{}},
		{"Kinds and Since together", cloud.EventFilter{Kinds: []cloud.EventKind{reclaim}, Since: t0.Add(time.Minute)},
			[]string{"c", "f"}},
		{"with tenant and instance", cloud.EventFilter{TenantID: "t-1", InstanceID: "i-1",
			Kinds: []cloud.EventKind{reclaim}, Since: t0}, []string{"a", "f"}},
		{"with AfterID and Limit", cloud.EventFilter{Kinds: []cloud.EventKind{reclaim}, Since: t0,
			AfterID: es[0].ID, Limit: 1}, []string{"c"}},
	} {
		got, err := read(t, s, func(tx cloud.Tx) ([]*cloud.Event, error) { return tx.ListEvents(ctx, c.f) })
		if err != nil {
			t.Errorf("%s: %v", c.desc, err)
			continue
		}
		wantEqual(t, c.desc, reasons(got), c.want)
	}

	// Paging with Kinds and Since visits every match once.
	f := cloud.EventFilter{Kinds: []cloud.EventKind{reclaim, note}, Since: t0, Limit: 1}
	var paged []string
	for pages := 0; pages <= len(es); pages++ {
		page := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Event, error) { return tx.ListEvents(ctx, f) })
		if len(page) == 0 {
			break
		}
		paged = append(paged, reasons(page)...)
		f.AfterID = page[len(page)-1].ID
	}
	wantEqual(t, "paging with Kinds and Since", paged, []string{"a", "c", "d", "f"})
}
