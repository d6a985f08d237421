package service

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// Bounds of the spot market's requests and reads.
const (
	maxSpotPools       = 8
	defaultSpotPoints  = 1000
	MaxSpotPoints      = 10_000
	defaultSpotHistory = 24 * time.Hour
	// DefaultReclaimWindow and MaxReclaimWindow bound the window over
	// which Pools counts reclaims.
	DefaultReclaimWindow = 7 * 24 * time.Hour
	MaxReclaimWindow     = 30 * 24 * time.Hour
)

// CheckSpotRequestSpec validates what can be checked without the store
// and fills in the defaults (type, interruption); pool offerings and the
// image are rewritten to their canonical names. The workload is checked as
// an instance's (CheckImage, CheckWorkload).
func CheckSpotRequestSpec(cat *catalog.Catalog, spec *api.CreateSpotRequestRequest) error {
	if err := CheckName("name", spec.Name, false); err != nil {
		return err
	}
	switch spec.Type {
	case "":
		spec.Type = cloud.SpotOneTime
	case cloud.SpotOneTime, cloud.SpotPersistent:
	default:
		return Field("type", "unknown type %s (want one_time or persistent)", Quote(string(spec.Type)))
	}
	switch spec.Interruption {
	case "":
		spec.Interruption = cloud.ActionTerminate
	case cloud.ActionTerminate, cloud.ActionStop:
	default:
		return Field("interruption", "unknown behaviour %s (want terminate or stop)", Quote(spec.Interruption))
	}
	if spec.MaxPrice != nil && (*spec.MaxPrice <= 0 || *spec.MaxPrice > maxPrice) {
		return Field("max_price", "%s is out of range (0, %s]; leave it out to cap at the on-demand price", *spec.MaxPrice, maxPrice)
	}
	if len(spec.Pools) == 0 || len(spec.Pools) > maxSpotPools {
		return Field("pools", "%d pools; give 1 to %d, the first preferred", len(spec.Pools), maxSpotPools)
	}
	for i := range spec.Pools {
		name := fmt.Sprintf("pools[%d]", i)
		o, err := offeringOf(cat, name+".offering", spec.Pools[i].Offering)
		if err != nil {
			return err
		}
		spec.Pools[i].Offering = o.Name
		if err := CheckName(name+".zone", spec.Pools[i].Zone, false); err != nil {
			return err
		}
		if slices.Contains(spec.Pools[:i], spec.Pools[i]) {
			return Field(name, "pool %s is given twice", spec.Pools[i])
		}
	}
	var err error
	if spec.Image, err = CheckImage("image", spec.Image); err != nil {
		return err
	}
	if err := CheckWorkload(spec.Command, spec.Env, spec.Volumes, spec.Tags); err != nil {
		return err
	}
	return checkSpotNetworkSpec(spec)
}

// Create creates a spot request for actor a and, in the same
// transaction, launches its first instance in its first pool through
// LaunchSpot (pending, for the scheduler and the market to place; the
// tenant's quota, the volume rule and the network's rules are an
// instance's; the subnet's zone must suit every pool, checkSpotNetwork).
// With an idempotency key, a retry answers the request the first call made
// (created false) and launches nothing; the same key with a request that
// differs in any field is a Conflict naming the fields.
func (s *Spot) Create(ctx context.Context, a Actor, spec api.CreateSpotRequestRequest, key string) (out *cloud.SpotRequest, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	spec.Pools, spec.SecurityGroups = slices.Clone(spec.Pools), slices.Clone(spec.SecurityGroups)
	if err := CheckSpotRequestSpec(s.cat, &spec); err != nil {
		return nil, false, err
	}
	if err := s.checkRegistry("image", spec.Image); err != nil {
		return nil, false, err
	}
	spec.Tags = addSystemTags(ctx, spec.Tags)
	same := func(r *cloud.SpotRequest) error { return sameSpotRequest(r, &spec) }
	// The launch allocates a private address: a race on the network runs
	// the transaction again (retryNetwork), as an instance create's.
	err = s.retryNetwork(ctx, func(tx cloud.Tx) error {
		out, created = nil, false
		tenant, err := Scope(ctx, tx, a, spec.Tenant, a.TenantID)
		if err != nil {
			return err
		}
		byKey := func(k string) (*cloud.SpotRequest, error) { return tx.SpotRequestByKey(ctx, tenant, k) }
		if old, found, err := prior(key, byKey, same); found || err != nil {
			out = old
			return err
		}
		if err := checkSpotNetwork(ctx, tx, tenant, &spec); err != nil {
			return err
		}
		if err := s.anyRunnable(ctx, tx, spec.Pools, spec.Image); err != nil {
			return err
		}
		now := s.now()
		sr := &cloud.SpotRequest{ID: NewID(SpotRequestPrefix), TenantID: tenant, Name: spec.Name, Type: spec.Type,
			Interruption: spec.Interruption, Pools: spec.Pools, State: cloud.SpotOpen, Image: spec.Image, Command: spec.Command,
			Env: spec.Env, Volumes: spec.Volumes, Tags: spec.Tags, Subnet: spec.Subnet, SecurityGroups: spec.SecurityGroups,
			IdempotencyKey: key, CreatedAt: now, UpdatedAt: now}
		if spec.MaxPrice != nil {
			sr.MaxPrice = *spec.MaxPrice
		}
		if err := tx.CreateSpotRequest(ctx, sr); err != nil {
			return asKeyRace(err, key)
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventSpotRequest, TenantID: tenant, Actor: a.ID,
			Reason: fmt.Sprintf("spot request %s created: %s, %s on interruption, pools %s", sr.ID, sr.Type, sr.Interruption, poolNames(sr.Pools))}); err != nil {
			return err
		}
		if _, err := LaunchSpot(ctx, tx, s.cat, sr, sr.Pools[0], a.ID, now); err != nil {
			return err
		}
		out, created = sr, true
		return nil
	})
	out, err = settleRace(ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.SpotRequest, error) { return tx.GetSpotRequest(ctx, id) }, same)
	return out, created && err == nil, err
}

// poolNames renders pools for messages: "h100.1x/zone-a, l40s.1x/*".
func poolNames(pools []cloud.Pool) string {
	names := make([]string, len(pools))
	for i, pl := range pools {
		names[i] = pl.Offering + "/" + cmp.Or(pl.Zone, "*")
	}
	return strings.Join(names, ", ")
}

// sameSpotRequest reports a conflict when an idempotency key is reused
// for a request that differs in any field the request sent, compared with
// its defaults filled in (type, interruption; no max price is 0) as the
// request holds them.
func sameSpotRequest(old *cloud.SpotRequest, spec *api.CreateSpotRequestRequest) error {
	var d KeyDiffs
	d.String("name", old.Name, spec.Name)
	d.String("type", string(old.Type), string(spec.Type))
	if !slices.Equal(old.Pools, spec.Pools) {
		d.Add("pools", poolList(old.Pools), poolList(spec.Pools))
	}
	var asked money.Micros
	if spec.MaxPrice != nil {
		asked = *spec.MaxPrice
	}
	if old.MaxPrice != asked {
		d.Add("max_price", Quote(old.MaxPrice.String()), Quote(asked.String()))
	}
	d.String("interruption", old.Interruption, spec.Interruption)
	d.String("image", old.Image, spec.Image)
	d.Strings("command", old.Command, spec.Command)
	d.Map("env", old.Env, spec.Env)
	d.Strings("volumes", old.Volumes, spec.Volumes)
	d.Map("tags", old.Tags, spec.Tags)
	// The request keeps the network as asked (empty: the defaults, which
	// each launch resolves), so an empty field is compared too.
	d.String("subnet", old.Subnet, spec.Subnet)
	d.Strings("security_groups", old.SecurityGroups, spec.SecurityGroups)
	return d.Err("spot request", old.ID)
}

// poolList renders pools for a key conflict: ["l4.1x/zone-a"].
func poolList(pools []cloud.Pool) string {
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.String()
	}
	return render(names)
}

// Get reads a spot request actor a may see; another tenant's answers like
// a missing one.
func (s *Spot) Get(ctx context.Context, a Actor, id string) (*cloud.SpotRequest, error) {
	var r *cloud.SpotRequest
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		r, err = Visible(ctx, a, "spot request", id, tx.GetSpotRequest)
		return err
	})
	return r, err
}

// List answers the spot requests of a tenant (a member's own, an admin's
// of tenant, every tenant's when empty) in ID order, only those in states
// when any are given.
func (s *Spot) List(ctx context.Context, a Actor, tenant string, states ...cloud.SpotRequestState) ([]*cloud.SpotRequest, error) {
	out := []*cloud.SpotRequest{}
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = out[:0]
		t, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		rs, err := tx.ListSpotRequests(ctx, cloud.SpotRequestFilter{TenantID: t, States: states})
		out = append(out, rs...)
		return err
	})
	return out, err
}

// Cancel cancels a spot request actor a may see: it launches nothing
// more, with a spot.request event. Its current instance keeps running
// unless terminateInstance, which terminates it as Instances.Act would
// (through Act), in the same transaction. Cancelling a cancelled or closed
// request answers it unchanged (and still terminates the instance when
// asked to). ifMatch, when not zero, is the version the caller read: a
// stale one is a conflict.
func (s *Spot) Cancel(ctx context.Context, a Actor, id string, terminateInstance bool, ifMatch int64) (*cloud.SpotRequest, error) {
	var out *cloud.SpotRequest
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = nil
		sr, err := Visible(ctx, a, "spot request", id, tx.GetSpotRequest)
		if err != nil {
			return err
		}
		if err := CheckVersion("spot request", id, ifMatch, sr.Version); err != nil {
			return err
		}
		now := s.now()
		if sr.State != cloud.SpotCancelled && sr.State != cloud.SpotClosed {
			if err := setSpotRequest(ctx, tx, sr, cloud.SpotCancelled, "cancelled by "+a.ID, now); err != nil {
				return err
			}
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventSpotRequest, TenantID: sr.TenantID,
				InstanceID: sr.InstanceID, Actor: a.ID, Reason: "spot request " + sr.ID + " cancelled"}); err != nil {
				return err
			}
		}
		out = sr
		if !terminateInstance || sr.InstanceID == "" {
			return nil
		}
		in, err := tx.GetInstance(ctx, sr.InstanceID)
		if cloud.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = Act(ctx, tx, a, in, Terminate, "spot request "+sr.ID+" cancelled", now)
		return err
	})
	return out, err
}

// ParsePool reads a pool as the API names it, "OFFERING/ZONE", with the
// offering resolved through the catalog.
func ParsePool(cat *catalog.Catalog, fieldName, v string) (cloud.Pool, error) {
	off, zone, ok := strings.Cut(v, "/")
	if !ok || off == "" || zone == "" {
		return cloud.Pool{}, Field(fieldName, "%s is not a pool: want OFFERING/ZONE, e.g. h100.1x/zone-a", Quote(v))
	}
	o, err := offeringOf(cat, fieldName, off)
	if err != nil {
		return cloud.Pool{}, err
	}
	if err := CheckName(fieldName, zone, true); err != nil {
		return cloud.Pool{}, err
	}
	return cloud.Pool{Offering: o.Name, Zone: zone}, nil
}

// SpotPriceQuery selects points of spot price history.
type SpotPriceQuery struct {
	// Pools are "OFFERING/ZONE" names; every pool when empty.
	Pools []string
	// Since defaults to 24 hours ago; Until to no end.
	Since, Until time.Time
	// Limit caps the points: 1 to MaxSpotPoints, 1000 when 0.
	Limit int
}

// Prices answers the price history of the pools of q, oldest first. The
// spot market is public to every user of the cloud.
func (s *Spot) Prices(ctx context.Context, a Actor, q SpotPriceQuery) ([]cloud.SpotPrice, error) {
	f := cloud.SpotPriceFilter{Since: q.Since, Until: q.Until, Limit: cmp.Or(q.Limit, defaultSpotPoints)}
	for _, v := range q.Pools {
		pool, err := ParsePool(s.cat, "pool", v)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(f.Pools, pool) {
			f.Pools = append(f.Pools, pool)
		}
	}
	if f.Since.IsZero() {
		f.Since = s.now().Add(-defaultSpotHistory)
	}
	if !f.Until.IsZero() && !f.Until.After(f.Since) {
		return nil, Field("until", "%s is not after since %s", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	}
	if f.Limit < 1 || f.Limit > MaxSpotPoints {
		return nil, Field("limit", "want an integer in 1..%d, got %s", MaxSpotPoints, Quote(strconv.Itoa(f.Limit)))
	}
	out := []cloud.SpotPrice{}
	err := s.tx(ctx, func(tx cloud.Tx) error {
		ps, err := tx.ListSpotPrices(ctx, f)
		out = append(out[:0], ps...)
		return err
	})
	return out, err
}

// PoolStats is a pool's newest spot price with the on-demand price of its
// offering in its zone (nil when there is none), and how often its spot
// instances were reclaimed over the window before now: Reclaims notices
// and SpotSeconds instance-seconds of spot usage, every tenant's
// together, and ReclaimRateBP (see ReclaimRateBP).
type PoolStats struct {
	cloud.Pool
	Price         money.Micros
	Time          time.Time
	OnDemand      *money.Micros
	Window        time.Duration
	Reclaims      int64
	SpotSeconds   int64
	ReclaimRateBP int64
}

// CheckReclaimWindow validates the window of Pools: whole seconds, from
// 1s to MaxReclaimWindow. v is the window as the caller wrote it, for the
// message.
func CheckReclaimWindow(d time.Duration, v string) error {
	switch {
	case d < time.Second || d > MaxReclaimWindow:
		return Field("window", "%s is out of range: want 1s to %dh", Quote(v), int64(MaxReclaimWindow/time.Hour))
	case d%time.Second != 0:
		return Field("window", "%s is not a whole number of seconds", Quote(v))
	}
	return nil
}

// Pools answers every pool's newest spot price, with the on-demand price
// beside it and its reclaims over window (DefaultReclaimWindow when 0)
// before now, in pool name order. The reclaim figures aggregate every
// tenant's instances and carry counts only, so members see them too.
func (s *Spot) Pools(ctx context.Context, a Actor, window time.Duration) ([]PoolStats, error) {
	if window == 0 {
		window = DefaultReclaimWindow
	}
	if err := CheckReclaimWindow(window, window.String()); err != nil {
		return nil, err
	}
	out := []PoolStats{}
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = out[:0]
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
			pool := PoolStats{Pool: sp.Pool, Price: sp.Price, Time: sp.Time, Window: window}
			if od, ok := book.Compute(sp.Pool.Offering, sp.Pool.Zone, now); ok {
				pool.OnDemand = &od
			}
			if st := stats[sp.Pool]; st != nil {
				pool.Reclaims, pool.SpotSeconds = st.reclaims, st.seconds
				pool.ReclaimRateBP = ReclaimRateBP(st.reclaims, st.seconds)
			}
			out = append(out, pool)
		}
		slices.SortFunc(out, func(a, b PoolStats) int { return strings.Compare(a.Pool.String(), b.Pool.String()) })
		return nil
	})
	return out, err
}

// poolReclaims is what a pool went through in a reclaim window: the
// reclaim notices its spot instances got, and the instance-seconds of spot
// usage it billed.
type poolReclaims struct {
	reclaims, seconds int64
}

// ReclaimRateBP is reclaims per spot instance-hour in basis points,
// rounded down; 0 without spot seconds.
func ReclaimRateBP(reclaims, seconds int64) int64 {
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

// anyRunnable refuses a spot request none of whose pools' offerings any
// host could ever run (base.runnable).
func (s *Spot) anyRunnable(ctx context.Context, tx cloud.Tx, pools []cloud.Pool, image string) error {
	var first error
	for _, p := range pools {
		o, err := s.cat.Offering(p.Offering)
		if err != nil {
			return nil // CheckSpotRequestSpec has said so already
		}
		err = s.runnable(ctx, tx, o, image)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}
