package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// Bounds of the spot routes.
const (
	maxSpotPools        = 8
	defaultSpotPoints   = 1000
	maxSpotPoints       = 10_000
	defaultSpotHistory  = 24 * time.Hour
	spotRequestIDPrefix = "sr-"
)

// parsePool reads a pool as the API names it, "OFFERING/ZONE", with the
// offering resolved through the catalog.
func (s *api) parsePool(fieldName, v string) (cloud.Pool, error) {
	off, zone, ok := strings.Cut(v, "/")
	if !ok || off == "" || zone == "" {
		return cloud.Pool{}, field(fieldName, "%s is not a pool: want OFFERING/ZONE, e.g. h100.1x/zone-a", quote(v))
	}
	o, err := s.offeringField(fieldName, off)
	if err != nil {
		return cloud.Pool{}, err
	}
	if err := checkName(fieldName, zone, true); err != nil {
		return cloud.Pool{}, err
	}
	return cloud.Pool{Offering: o.Name, Zone: zone}, nil
}

// queryTime parses an optional RFC 3339 time parameter.
func queryTime(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, field(name, "%s is not an RFC 3339 time such as 2026-12-01T00:00:00Z", quote(v))
	}
	return t, nil
}

// spotPrices handles GET /v1/spot/prices: the price history of the pools
// of ?pool (repeatable; every pool when absent) from ?since (default 24
// hours ago) until ?until (default no end), oldest first, at most ?limit
// points (default 1000, at most 10000).
func (s *api) spotPrices(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	f := cloud.SpotPriceFilter{Limit: defaultSpotPoints}
	for _, v := range q["pool"] {
		pool, err := s.parsePool("pool", v)
		if err != nil {
			return err
		}
		if !slices.Contains(f.Pools, pool) {
			f.Pools = append(f.Pools, pool)
		}
	}
	var err error
	if f.Since, err = queryTime(r, "since"); err != nil {
		return err
	}
	if f.Since.IsZero() {
		f.Since = s.now().Add(-defaultSpotHistory)
	}
	if f.Until, err = queryTime(r, "until"); err != nil {
		return err
	}
	if !f.Until.IsZero() && !f.Until.After(f.Since) {
		return field("until", "%s is not after since %s", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxSpotPoints {
			return field("limit", "want an integer in 1..%d, got %s", maxSpotPoints, quote(v))
		}
		f.Limit = n
	}
	out := SpotPriceList{Prices: []cloud.SpotPrice{}}
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		ps, err := tx.ListSpotPrices(r.Context(), f)
		out.Prices = append(out.Prices[:0], ps...)
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// Bounds of the reclaim window of GET /v1/spot/pools.
const (
	defaultReclaimWindow = 7 * 24 * time.Hour
	maxReclaimWindow     = 30 * 24 * time.Hour
)

// reclaimWindow parses ?window: a Go duration of whole seconds, from 1s to
// 720h; 168h when absent.
func reclaimWindow(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("window")
	if v == "" {
		return defaultReclaimWindow, nil
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, field("window", "%s is not a duration such as 168h or 30m", quote(v))
	case d < time.Second || d > maxReclaimWindow:
		return 0, field("window", "%s is out of range: want 1s to %s", quote(v), hoursOf(maxReclaimWindow))
	case d%time.Second != 0:
		return 0, field("window", "%s is not a whole number of seconds", quote(v))
	}
	return d, nil
}

// hoursOf prints a whole number of hours as Go would parse it back: "720h".
func hoursOf(d time.Duration) string { return strconv.FormatInt(int64(d/time.Hour), 10) + "h" }

// spotPools handles GET /v1/spot/pools: every pool's newest spot price,
// with the on-demand price of its offering in its zone beside it, and its
// recent reclaims over ?window (default 168h, at most 720h) before now.
// The reclaim figures aggregate every tenant's instances and carry counts
// only, so members see them too.
func (s *api) spotPools(w http.ResponseWriter, r *http.Request, p principal) error {
	window, err := reclaimWindow(r)
	if err != nil {
		return err
	}
	out := SpotPoolList{Pools: []SpotPool{}}
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		out.Pools = out.Pools[:0]
		latest, err := tx.LatestSpotPrices(ctx)
		if err != nil {
			return err
		}
		prices, err := tx.ListPrices(ctx, cloud.PriceFilter{Kind: cloud.PriceCompute})
		if err != nil {
			return err
		}
		book, now := billing.NewPriceBook(prices, nil), s.now()
		stats, err := reclaimStats(ctx, tx, now, window)
		if err != nil {
			return err
		}
		for _, sp := range latest {
			pool := SpotPool{Pool: sp.Pool, Price: sp.Price, Time: sp.Time, WindowSeconds: int64(window / time.Second)}
			if od, ok := book.Compute(sp.Pool.Offering, sp.Pool.Zone, now); ok {
				pool.OnDemand = &od
			}
			if st := stats[sp.Pool]; st != nil {
				pool.Reclaims, pool.SpotSeconds = st.reclaims, st.seconds
				pool.ReclaimRateBP = reclaimRateBP(st.reclaims, st.seconds)
			}
			out.Pools = append(out.Pools, pool)
		}
		slices.SortFunc(out.Pools, func(a, b SpotPool) int {
			return strings.Compare(a.Pool.String(), b.Pool.String())
		})
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// poolReclaims is what a pool went through in a reclaim window: the
// reclaim notices its spot instances got, and the instance-seconds of spot
// usage it billed.
type poolReclaims struct {
	reclaims, seconds int64
}

// reclaimRateBP is reclaims per spot instance-hour in basis points,
// rounded down; 0 without spot seconds.
func reclaimRateBP(reclaims, seconds int64) int64 {
	if seconds <= 0 {
		return 0
	}
	return reclaims * money.SecondsPerHour * 10_000 / seconds
}

// reclaimStats measures every pool over [now-window, now).
//
// Seconds come from the usage ledger as rating reads it: compute intervals
// of market spot (billing.Intervals, open ones cut at now), their bounds
// truncated to whole seconds and clipped to the window. Only the entries
// that matter are read: those still open when the window starts, and those
// within it.
//
// Reclaims are the spot.interruption events in the window. Each counts in
// the pool of its instance's spot interval at the time of the notice, or,
// when it had none (a notice before the instance ran), in the pool of the
// instance's offering and zone as stored.
func reclaimStats(ctx context.Context, tx cloud.Tx, now time.Time, window time.Duration) (map[cloud.Pool]*poolReclaims, error) {
	since := now.Add(-window)
	open, err := tx.OpenUsage(ctx, "", since)
	if err != nil {
		return nil, err
	}
	recent, err := tx.ListUsage(ctx, cloud.UsageFilter{Since: since, Before: now})
	if err != nil {
		return nil, err
	}
	var usage []*cloud.Usage
	for _, u := range slices.Concat(open, recent) {
		if u.Kind == cloud.UsageCompute {
			usage = append(usage, u)
		}
	}
	// Both lists are in ID order; rating pairs the ledger in that order.
	slices.SortFunc(usage, func(a, b *cloud.Usage) int { return cmp.Compare(a.ID, b.ID) })

	stats := map[cloud.Pool]*poolReclaims{}
	of := func(p cloud.Pool) *poolReclaims {
		st := stats[p]
		if st == nil {
			st = &poolReclaims{}
			stats[p] = st
		}
		return st
	}
	lo, hi := since.Unix(), now.Unix()
	spotOf := map[string][]billing.Interval{}
	for _, iv := range billing.Intervals(usage, now) {
		if iv.Market != cloud.MarketSpot {
			continue
		}
		pool := cloud.Pool{Offering: iv.Offering, Zone: iv.Zone}
		if a, b := max(iv.Start.Unix(), lo), min(iv.End.Unix(), hi); a < b {
			of(pool).seconds += b - a
		}
		spotOf[iv.ResourceID] = append(spotOf[iv.ResourceID], iv)
	}

	events, err := tx.ListEvents(ctx, cloud.EventFilter{Kinds: []cloud.EventKind{cloud.EventSpotInterruption}, Since: since})
	if err != nil {
		return nil, err
	}
	instances := map[string]*cloud.Instance{}
	for _, e := range events {
		if e.InstanceID == "" || !e.Time.Before(now) {
			continue
		}
		pool, found := cloud.Pool{}, false
		for _, iv := range spotOf[e.InstanceID] {
			if !e.Time.Before(iv.Start) && !e.Time.After(iv.End) {
				pool, found = cloud.Pool{Offering: iv.Offering, Zone: iv.Zone}, true
				break
			}
		}
		if !found {
			in, seen := instances[e.InstanceID]
			if !seen {
				in, err = tx.GetInstance(ctx, e.InstanceID)
				if err != nil && !cloud.IsNotFound(err) {
					return nil, err
				}
				instances[e.InstanceID] = in
			}
			if in == nil {
				continue
			}
			pool = cloud.Pool{Offering: in.Offering, Zone: in.Zone}
		}
		of(pool).reclaims++
	}
	return stats, nil
}

// checkSpotRequest validates what can be checked without the store and
// fills in the defaults; pool offerings are stored by canonical name.
func (s *api) checkSpotRequest(req *CreateSpotRequestRequest) error {
	if err := checkName("name", req.Name, false); err != nil {
		return err
	}
	switch req.Type {
	case "":
		req.Type = cloud.SpotOneTime
	case cloud.SpotOneTime, cloud.SpotPersistent:
	default:
		return field("type", "unknown type %s (want one_time or persistent)", quote(string(req.Type)))
	}
	switch req.Interruption {
	case "":
		req.Interruption = cloud.ActionTerminate
	case cloud.ActionTerminate, cloud.ActionStop:
	default:
		return field("interruption", "unknown behaviour %s (want terminate or stop)", quote(req.Interruption))
	}
	if req.MaxPrice != nil && (*req.MaxPrice <= 0 || *req.MaxPrice > maxPrice) {
		return field("max_price", "%s is out of range (0, %s]; leave it out to cap at the on-demand price", *req.MaxPrice, maxPrice)
	}
	if len(req.Pools) == 0 || len(req.Pools) > maxSpotPools {
		return field("pools", "%d pools; give 1 to %d, the first preferred", len(req.Pools), maxSpotPools)
	}
	for i := range req.Pools {
		name := fmt.Sprintf("pools[%d]", i)
		o, err := s.offeringField(name+".offering", req.Pools[i].Offering)
		if err != nil {
			return err
		}
		req.Pools[i].Offering = o.Name
		if err := checkName(name+".zone", req.Pools[i].Zone, false); err != nil {
			return err
		}
		if slices.Contains(req.Pools[:i], req.Pools[i]) {
			return field(name, "pool %s is given twice", req.Pools[i])
		}
	}
	// The instance checks are the same as for an on-demand instance.
	check := CreateInstanceRequest{Offering: req.Pools[0].Offering, Command: req.Command, Env: req.Env,
		Volumes: req.Volumes, Tags: req.Tags}
	_, err := s.checkInstanceRequest(&check)
	return err
}

// createSpotRequest handles POST /v1/spot/requests: in one transaction it
// stores the request and launches its first instance in its first pool
// (pending, for the scheduler and the market to place). With an
// Idempotency-Key a retry answers the request the first call made, with
// 200; the same key for another request is a conflict.
func (s *api) createSpotRequest(w http.ResponseWriter, r *http.Request, p principal) error {
	var req CreateSpotRequestRequest
	if err := decodeMoneyBody(w, r, &req, "max_price"); err != nil {
		return err
	}
	key := r.Header.Get("Idempotency-Key")
	if err := checkIdempotencyKey(key); err != nil {
		return err
	}
	asked, err := bodyOrQueryTenant(r, req.Tenant)
	if err != nil {
		return err
	}
	if err := s.checkSpotRequest(&req); err != nil {
		return err
	}
	first, err := s.cat.Offering(req.Pools[0].Offering)
	if err != nil {
		return err
	}
	var out *cloud.SpotRequest
	created := false
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		out, created = nil, false
		tenant, err := s.scope(ctx, tx, p, asked, p.TenantID)
		if err != nil {
			return err
		}
		if key != "" {
			old, err := spotRequestByKey(ctx, tx, tenant, key)
			if err != nil {
				return err
			}
			if old != nil {
				out = old
				return sameSpotRequest(old, &req)
			}
		}
		probe := &cloud.Instance{Volumes: req.Volumes}
		if z := req.Pools[0].Zone; z != "" {
			probe.Zones = []string{z}
		}
		if _, err := attachable(ctx, tx, tenant, probe); err != nil {
			return err
		}
		if err := s.enforceQuota(ctx, tx, tenant, first); err != nil {
			return err
		}
		now := s.now()
		sr := &cloud.SpotRequest{ID: newID(spotRequestIDPrefix), TenantID: tenant, Name: req.Name, Type: req.Type,
			Interruption: req.Interruption, Pools: req.Pools, State: cloud.SpotOpen, Command: req.Command,
			Env: req.Env, Volumes: req.Volumes, Tags: req.Tags, IdempotencyKey: key, CreatedAt: now, UpdatedAt: now}
		if req.MaxPrice != nil {
			sr.MaxPrice = *req.MaxPrice
		}
		if err := tx.CreateSpotRequest(ctx, sr); err != nil {
			var ce *cloud.Error
			if errors.As(err, &ce) && ce.Code == cloud.Conflict && key != "" {
				if id, ok := ce.Details["existing_id"].(string); ok {
					return &keyRace{id: id}
				}
			}
			return err
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventSpotRequest, TenantID: tenant, Actor: p.UserID,
			Reason: fmt.Sprintf("spot request %s created: %s, %s on interruption, pools %s", sr.ID, sr.Type, sr.Interruption, poolNames(sr.Pools))}); err != nil {
			return err
		}
		if _, err := cloud.LaunchSpot(ctx, tx, sr, sr.Pools[0], newID("i-"), p.UserID, now); err != nil {
			return err
		}
		out, created = sr, true
		return nil
	})
	out, err = raceWinner(s, r.Context(), out, err, func(tx cloud.Tx, id string) (*cloud.SpotRequest, error) { return tx.GetSpotRequest(r.Context(), id) }, func(sr *cloud.SpotRequest) error { return sameSpotRequest(sr, &req) })
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(out.Version))
	writeCreated(w, created, "/v1/spot/requests/"+out.ID, out)
	return nil
}

// poolNames renders pools for messages: "h100.1x/zone-a, l40s.1x/*".
func poolNames(pools []cloud.Pool) string {
	names := make([]string, len(pools))
	for i, pl := range pools {
		names[i] = pl.Offering + "/" + cmp.Or(pl.Zone, "*")
	}
	return strings.Join(names, ", ")
}

// spotRequestByKey finds a tenant's spot request made with an idempotency
// key.
func spotRequestByKey(ctx context.Context, tx cloud.Tx, tenant, key string) (*cloud.SpotRequest, error) {
	rs, err := tx.ListSpotRequests(ctx, cloud.SpotRequestFilter{TenantID: tenant})
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if r.IdempotencyKey == key {
			return r, nil
		}
	}
	return nil, nil
}

// sameSpotRequest reports a conflict when an idempotency key is reused for
// another request.
func sameSpotRequest(old *cloud.SpotRequest, req *CreateSpotRequestRequest) error {
	if old.Name == req.Name && old.Type == req.Type && slices.Equal(old.Pools, req.Pools) {
		return nil
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: "the Idempotency-Key was used for spot request " + old.ID + " with another name, type or pools; use a new key for a new request",
		Details: map[string]any{"existing_id": old.ID}}
}

// spotStates parses ?state=open,active.
func spotStates(v string) ([]cloud.SpotRequestState, error) {
	if v == "" {
		return nil, nil
	}
	known := []cloud.SpotRequestState{cloud.SpotOpen, cloud.SpotActive, cloud.SpotDisabled, cloud.SpotClosed, cloud.SpotCancelled}
	var out []cloud.SpotRequestState
	for _, part := range strings.Split(v, ",") {
		st := cloud.SpotRequestState(strings.TrimSpace(part))
		if !slices.Contains(known, st) {
			return nil, field("state", "unknown state %s (known: open, active, disabled, closed, cancelled)", quote(string(st)))
		}
		out = append(out, st)
	}
	return out, nil
}

// listSpotRequests handles GET /v1/spot/requests: the tenant's (admins:
// every tenant's, or ?tenant's), optionally only in the states of ?state.
func (s *api) listSpotRequests(w http.ResponseWriter, r *http.Request, p principal) error {
	states, err := spotStates(r.URL.Query().Get("state"))
	if err != nil {
		return err
	}
	out := SpotRequestList{}
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		out.Requests = []*cloud.SpotRequest{}
		tenant, err := s.scope(r.Context(), tx, p, r.URL.Query().Get("tenant"), "")
		if err != nil {
			return err
		}
		rs, err := tx.ListSpotRequests(r.Context(), cloud.SpotRequestFilter{TenantID: tenant, States: states})
		out.Requests = append(out.Requests, rs...)
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getVisibleSpotRequest reads a spot request the principal may see;
// another tenant's answers like a missing one.
func getVisibleSpotRequest(ctx context.Context, tx cloud.Tx, p principal, id string) (*cloud.SpotRequest, error) {
	sr, err := tx.GetSpotRequest(ctx, id)
	if cloud.IsNotFound(err) || err == nil && !p.visible(sr.TenantID) {
		return nil, notFound("spot request", id)
	}
	return sr, err
}

// getSpotRequest handles GET /v1/spot/requests/{id}; the ETag is the
// version.
func (s *api) getSpotRequest(w http.ResponseWriter, r *http.Request, p principal) error {
	var sr *cloud.SpotRequest
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		var err error
		sr, err = getVisibleSpotRequest(r.Context(), tx, p, r.PathValue("id"))
		return err
	})
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(sr.Version))
	writeJSON(w, http.StatusOK, sr)
	return nil
}

// cancelSpotRequest handles POST /v1/spot/requests/{id}/cancel: the
// request launches nothing more. Its current instance keeps running
// unless ?terminate_instance=true, which terminates it as POST
// /v1/instances/{id}/terminate would, in the same transaction. Cancelling
// a cancelled or closed request answers it unchanged (and still
// terminates the instance when asked to).
func (s *api) cancelSpotRequest(w http.ResponseWriter, r *http.Request, p principal) error {
	want, err := ifMatch(r)
	if err != nil {
		return err
	}
	kill := false
	switch v := r.URL.Query().Get("terminate_instance"); v {
	case "", "false":
	case "true":
		kill = true
	default:
		return field("terminate_instance", "want true or false, got %s", quote(v))
	}
	id := r.PathValue("id")
	var out *cloud.SpotRequest
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		sr, err := getVisibleSpotRequest(ctx, tx, p, id)
		if err != nil {
			return err
		}
		if err := checkVersion("spot request", id, want, sr.Version); err != nil {
			return err
		}
		out = sr
		now := s.now()
		if sr.State != cloud.SpotCancelled && sr.State != cloud.SpotClosed {
			sr.State, sr.Reason, sr.UpdatedAt = cloud.SpotCancelled, "cancelled by "+p.UserID, now
			if err := tx.UpdateSpotRequest(ctx, sr); err != nil {
				return err
			}
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventSpotRequest, TenantID: sr.TenantID,
				InstanceID: sr.InstanceID, Actor: p.UserID, Reason: "spot request " + sr.ID + " cancelled"}); err != nil {
				return err
			}
		}
		if !kill || sr.InstanceID == "" {
			return nil
		}
		in, err := tx.GetInstance(ctx, sr.InstanceID)
		if cloud.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = s.moveInstance(ctx, tx, p, in, terminate, now, "spot request "+sr.ID+" cancelled")
		return err
	})
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(out.Version))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// moveInstance applies a lifecycle action to an instance inside a
// transaction, as POST /v1/instances/{id}/{action} does: the action's
// target decides the move, the instance and its event are written, and
// terminating detaches its volumes. A noop (the instance is already where
// the action leads) writes nothing.
func (s *api) moveInstance(ctx context.Context, tx cloud.Tx, p principal, in *cloud.Instance, a action, now time.Time, why string) (noop bool, err error) {
	from := in.State
	to, noop, err := a.target(in.ID, from)
	if err != nil || noop {
		return noop, err
	}
	reason := a.verb + " requested by " + p.UserID
	if why != "" {
		reason += ": " + why
	}
	in.State, in.Reason, in.UpdatedAt = to, reason, now
	if to == cloud.Pending {
		in.Reason = ""
	}
	if err := tx.UpdateInstance(ctx, in); err != nil {
		return false, err
	}
	if to == cloud.Terminated || to == cloud.Terminating {
		if err := cloud.DetachVolumes(ctx, tx, in); err != nil {
			return false, err
		}
	}
	return false, tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventInstanceState, TenantID: in.TenantID,
		InstanceID: in.ID, HostID: in.HostID, From: from, To: to, Reason: reason, Actor: p.UserID})
}
