package service

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// groupKinds are the event kinds of groups.
var groupKinds = []cloud.EventKind{cloud.EventGroup, cloud.EventGroupScaling}

// detailID is the string an event's details hold under key, if any.
func detailID(e *cloud.Event, key string) string {
	if len(e.Details) == 0 {
		return ""
	}
	var d map[string]json.RawMessage
	if json.Unmarshal(e.Details, &d) != nil {
		return ""
	}
	var id string
	if json.Unmarshal(d[key], &id) != nil {
		return ""
	}
	return id
}

// namedEventBatch is how many events a scan of one resource's events
// reads at once.
const namedEventBatch = 500

// scanNamedEvents calls fn, in ID order, with each event of tenant after
// the event ID after whose kind is one of kinds and whose details name id
// under key (a group's events: "group_id"; a volume's: "volume_id"), until
// fn returns false.
func scanNamedEvents(ctx context.Context, tx cloud.Tx, tenant string, kinds []cloud.EventKind, key, id string, after int64, fn func(*cloud.Event) bool) error {
	f := cloud.EventFilter{TenantID: tenant, Kinds: kinds, AfterID: after, Limit: namedEventBatch}
	for {
		evs, err := tx.ListEvents(ctx, f)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if detailID(e, key) == id && !fn(e) {
				return nil
			}
		}
		if len(evs) < f.Limit {
			return nil
		}
		f.AfterID = evs[len(evs)-1].ID
	}
}

// pageEvents answers one page of what scan yields: at most limit events
// (all when 0) and the after of the next page (0 at the end).
func pageEvents(limit int, scan func(fn func(*cloud.Event) bool) error) (evs []*cloud.Event, next int64, err error) {
	evs = []*cloud.Event{}
	err = scan(func(e *cloud.Event) bool {
		if limit > 0 && len(evs) == limit {
			next = evs[limit-1].ID
			return false
		}
		evs = append(evs, e)
		return true
	})
	return evs, next, err
}

// scanGroupEvents calls fn, in ID order, with each event of g after the
// event ID after (its tenant's events of the group kinds whose details
// name g), until fn returns false.
func scanGroupEvents(ctx context.Context, tx cloud.Tx, g *cloud.Group, after int64, fn func(*cloud.Event) bool) error {
	return scanNamedEvents(ctx, tx, g.TenantID, groupKinds, "group_id", g.ID, after, fn)
}

// lastGroupEvents answers the newest n events of g, oldest first.
func lastGroupEvents(ctx context.Context, tx cloud.Tx, g *cloud.Group, n int) ([]*cloud.Event, error) {
	out := []*cloud.Event{}
	err := scanGroupEvents(ctx, tx, g, 0, func(e *cloud.Event) bool {
		out = append(out, e)
		if len(out) > 2*n {
			out = append(out[:0], out[len(out)-n:]...)
		}
		return true
	})
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out, err
}

// Events answers one page of the events of a group actor a may see (its
// group and group.scaling events: creation, updates, scaling decisions,
// launches refused, scale-in notices, deletion), after the event ID
// after, at most limit (all when 0), and the after of the next page (0 at
// the end). Its members' own events are theirs (GET
// /v1/instances/{id}/events).
func (s *Groups) Events(ctx context.Context, a Actor, id string, after int64, limit int) (evs []*cloud.Event, next int64, err error) {
	err = s.tx(ctx, func(tx cloud.Tx) error {
		g, err := Visible(ctx, a, "group", id, tx.GetGroup)
		if err != nil {
			return err
		}
		evs, next, err = pageEvents(limit, func(fn func(*cloud.Event) bool) error {
			return scanGroupEvents(ctx, tx, g, after, fn)
		})
		return err
	})
	return evs, next, err
}

// PutMetrics records custom metric points of a group actor a may see
// (CloudWatch's PutMetricData): 1 to MaxMetricPoints per call, names as
// CheckMetricName, finite values, times from MetricMaxAge before now to
// MetricMaxAhead after it (none, or the zero time: now). A policy tracks
// one as "custom:NAME". All the points are written, or none. A deleted
// group takes none (conflict).
func (s *Groups) PutMetrics(ctx context.Context, a Actor, groupID string, points []api.MetricPoint) error {
	if groupID == "" {
		return Field("group_id", "is required")
	}
	if len(points) == 0 || len(points) > MaxMetricPoints {
		return Field("metrics", "%d points; give 1 to %d", len(points), MaxMetricPoints)
	}
	now := s.now()
	ps := make([]cloud.MetricPoint, len(points))
	for i, p := range points {
		field := fmt.Sprintf("metrics[%d]", i)
		if err := CheckMetricName(field+".name", p.Name); err != nil {
			return err
		}
		if math.IsNaN(p.Value) || math.IsInf(p.Value, 0) {
			return Field(field+".value", "is not a finite number")
		}
		at := now
		if p.At != nil && !p.At.IsZero() {
			at = *p.At
		}
		if at.Before(now.Add(-MetricMaxAge)) || at.After(now.Add(MetricMaxAhead)) {
			return Field(field+".at", "%s is outside the accepted window: from %s before now to %s after it",
				at.UTC().Format(time.RFC3339), MetricMaxAge, MetricMaxAhead)
		}
		ps[i] = cloud.MetricPoint{Name: p.Name, GroupID: groupID, At: at.UTC(), Value: p.Value}
	}
	return s.tx(ctx, func(tx cloud.Tx) error {
		g, err := Visible(ctx, a, "group", groupID, tx.GetGroup)
		if err != nil {
			return err
		}
		if g.State == cloud.GroupDeleted {
			return &cloud.Error{Code: cloud.Conflict, Message: "group " + Quote(groupID) + " is deleted; it takes no metrics",
				Details: map[string]any{"state": g.State}}
		}
		for i := range ps {
			ps[i].TenantID = g.TenantID
		}
		return tx.AppendMetrics(ctx, ps)
	})
}
