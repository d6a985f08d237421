// Package spot clears spot prices and rates reclaim risk. It is pure: no
// store, no clock, no floats. The control plane feeds it one Supply per
// pool (an offering in a zone) each clearing and stores what comes out.
//
// # Demand curve
//
// A pool's demand is what would occupy its capacity if every waiting
// instance and every reservation were placed:
//
//	demand      = (Capacity − Free) + SpotPending + OnDemandPending + Reserved
//	utilization = min(demand × 10,000 / Capacity, 10,000)   (basis points, u)
//
// The target price is the floor plus the cube of the utilization times the
// rest of the way to the on-demand price:
//
//	target = floor + (onDemand − floor) × u³ / 10,000³
//
// where floor is FloorBP of the on-demand price (30% by default). The cube
// keeps spot cheap while the pool has slack and makes it steep near full:
// the slope at full is three times the average slope. An idle pool clears
// at the floor, a pool whose demand meets or exceeds its capacity (or one
// without capacity) at the on-demand price. With the default 30% floor:
//
//	utilization   price (share of on-demand)
//	    0%            30.00%
//	   25%            31.09%
//	   50%            38.75%
//	   60%            45.12%
//	   70%            54.01%
//	   80%            65.84%
//	   90%            81.03%
//	   95%            90.02%
//	  100%           100.00%
//
// # Smoothing
//
// Prices do not jump to the target: each clearing moves SmoothingBP of the
// gap from the last price (25% by default), at least one micro and at most
// MaxStepBP of the on-demand price (10% by default). A pool without a last
// price starts at its target. Repeated clearings against an unchanged
// target reach it exactly, so a quiet pool's price settles.
//
// # Reclaim risk
//
// RiskOf rates how likely a pool's spot instances are to be reclaimed soon:
// the pressure of non-spot demand (OnDemandPending plus Reserved) against
// the free capacity, in basis points, capped at 10,000. Above RebalanceAt
// the control plane sends a rebalance recommendation.
package spot

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// Supply is one pool's state at a clearing.
type Supply struct {
	Pool cloud.Pool
	// Capacity is how many instances of the pool's offering the zone's
	// healthy hosts could hold if empty (>= 0).
	Capacity int
	// Free is how many instances of it fit right now.
	Free int
	// SpotRunning and SpotPending count the pool's spot instances that
	// hold capacity and that wait for it.
	SpotRunning, SpotPending int
	// OnDemandPending counts the non-spot instances of the offering
	// waiting in the zone.
	OnDemandPending int
	// Reserved is the capacity held back by zonal commitments and not yet
	// used.
	Reserved int
	// OnDemandPrice is the offering's on-demand price per hour in the
	// zone; the spot price never exceeds it.
	OnDemandPrice money.Micros
	// Prev is the last cleared price; zero when there is none yet (the
	// first clearing starts at the target).
	Prev money.Micros
}

// Config tunes clearing. A zero field takes its default (DefaultConfig).
type Config struct {
	// FloorBP is the lowest spot price, in basis points of on-demand
	// (default 3000: 30%).
	FloorBP int64
	// SmoothingBP is the share of the gap to the target moved per
	// clearing, in basis points (default 2500).
	SmoothingBP int64
	// MaxStepBP is the largest move per clearing, in basis points of
	// on-demand (default 1000).
	MaxStepBP int64
	// NoticeSeconds is how long before a reclaim the instance is told
	// (default 120, at least 30).
	NoticeSeconds int
}

// Defaults of Config.
const (
	DefaultFloorBP       = 3000
	DefaultSmoothingBP   = 2500
	DefaultMaxStepBP     = 1000
	DefaultNoticeSeconds = 120
	// MinNoticeSeconds is the shortest reclaim notice Validate accepts.
	MinNoticeSeconds = 30
)

// DefaultConfig returns the default clearing configuration.
func DefaultConfig() Config {
	return Config{
		FloorBP:       DefaultFloorBP,
		SmoothingBP:   DefaultSmoothingBP,
		MaxStepBP:     DefaultMaxStepBP,
		NoticeSeconds: DefaultNoticeSeconds,
	}
}

// Validate reports a field out of range: basis points must lie in
// 0..10,000 (zero takes the default) and the notice must be at least
// MinNoticeSeconds (zero takes the default).
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int64
	}{{"floor", c.FloorBP}, {"smoothing", c.SmoothingBP}, {"max step", c.MaxStepBP}} {
		if f.v < 0 || f.v > 10_000 {
			errs = append(errs, fmt.Errorf("spot: %s %d bp: want 0..10000", f.name, f.v))
		}
	}
	if c.NoticeSeconds != 0 && c.NoticeSeconds < MinNoticeSeconds {
		errs = append(errs, fmt.Errorf("spot: notice %ds: want at least %ds", c.NoticeSeconds, MinNoticeSeconds))
	}
	return errors.Join(errs...)
}

// Notice is the reclaim notice as a duration.
func (c Config) Notice() time.Duration {
	return time.Duration(c.norm().NoticeSeconds) * time.Second
}

// norm fills defaults and clamps out-of-range fields, so that the pricing
// functions never fail on a config that Validate would reject.
func (c Config) norm() Config {
	d := DefaultConfig()
	fix := func(v *int64, def int64) {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			*v = 0
		case *v > 10_000:
			*v = 10_000
		}
	}
	fix(&c.FloorBP, d.FloorBP)
	fix(&c.SmoothingBP, d.SmoothingBP)
	fix(&c.MaxStepBP, d.MaxStepBP)
	if c.NoticeSeconds == 0 {
		c.NoticeSeconds = d.NoticeSeconds
	}
	c.NoticeSeconds = max(c.NoticeSeconds, MinNoticeSeconds)
	return c
}

// Floor is the lowest spot price of a pool whose on-demand price is
// onDemand.
func Floor(onDemand money.Micros, c Config) money.Micros {
	return floorOf(max(onDemand, 0), c.norm())
}

// MaxStep is the largest move of the price in one clearing: MaxStepBP of
// onDemand, and at least one micro so that a cheap pool still moves.
func MaxStep(onDemand money.Micros, c Config) money.Micros {
	return maxStepOf(max(onDemand, 0), c.norm())
}

func floorOf(od money.Micros, c Config) money.Micros { return money.BasisPoints(od, c.FloorBP) }

func maxStepOf(od money.Micros, c Config) money.Micros {
	return max(money.BasisPoints(od, c.MaxStepBP), 1)
}

// Utilization is the pool's demand against its capacity in basis points,
// 0..10,000; a pool without capacity is full.
func Utilization(s Supply) int64 {
	if s.Capacity <= 0 {
		return 10_000
	}
	used := int64(max(s.Capacity-max(s.Free, 0), 0))
	demand := used + int64(max(s.SpotPending, 0)) + int64(max(s.OnDemandPending, 0)) + int64(max(s.Reserved, 0))
	capacity := int64(s.Capacity)
	if demand >= capacity {
		return 10_000
	}
	return demand * 10_000 / capacity
}

// cube is 10,000³, the denominator of u³.
const cube = 10_000 * 10_000 * 10_000

// Target is the price the pool's demand calls for, in [floor, on-demand]:
// see the package documentation for the curve.
func Target(s Supply, c Config) money.Micros {
	return target(s, c.norm())
}

func target(s Supply, c Config) money.Micros {
	od := max(s.OnDemandPrice, 0)
	floor := floorOf(od, c)
	u := Utilization(s)
	if u >= 10_000 {
		return od
	}
	// (od−floor)·u³/10⁴³ with one rounding; MulDiv works in 128 bits, and
	// the result is at most od−floor, so it cannot overflow.
	up, _ := money.MulDiv(od-floor, u*u*u, cube)
	return floor + up
}

// Clear is the pool's next price: Prev moved toward Target by SmoothingBP of
// the gap (at least one micro, at most MaxStep), within [floor, on-demand].
// A Prev outside that range is first brought into it; a zero Prev starts at
// the target.
func Clear(s Supply, c Config) money.Micros {
	return clear(s, c.norm())
}

func clear(s Supply, c Config) money.Micros {
	t := target(s, c)
	if s.Prev == 0 {
		return t
	}
	od := max(s.OnDemandPrice, 0)
	p := min(max(s.Prev, floorOf(od, c)), od)
	gap := t - p
	if gap == 0 {
		return p
	}
	move, err := money.MulDiv(gap, c.SmoothingBP, 10_000)
	if err != nil { // cannot happen: |gap| <= od
		return t
	}
	step := maxStepOf(od, c)
	switch {
	case gap > 0:
		move = min(max(move, 1), step, gap)
	default:
		move = max(min(move, -1), -step, gap)
	}
	return p + move
}

// ClearAll clears every pool of ss and appends the prices, in order, to
// out[:0], which it returns. With cap(out) >= len(ss) it allocates nothing.
func ClearAll(ss []Supply, c Config, out []money.Micros) []money.Micros {
	c = c.norm()
	out = out[:0]
	for i := range ss {
		out = append(out, clear(ss[i], c))
	}
	return out
}

// Risk is how likely a pool's spot instances are to be reclaimed soon, in
// basis points: 0 (no non-spot pressure) to 10,000 (non-spot demand and
// reservations already claim all the free capacity).
type Risk int

// MaxRisk is the highest Risk.
const MaxRisk Risk = 10_000

// RebalanceAt is the risk above which a pool's spot instances get a
// rebalance recommendation: when non-spot demand and reservations claim
// more than three quarters of the free capacity. Reclaims start once they
// claim all of it, and the reclaim notice (two minutes by default) is too
// short to checkpoint and move a large job, so the recommendation goes out
// while a quarter of the room is still left: early enough to act on, late
// enough that a pool with ordinary on-demand churn (a few pending against
// plenty of free room) does not raise it.
const RebalanceAt Risk = 7_500

// RiskOf rates the reclaim risk of the pool's spot instances: the pressure
// of non-spot demand (OnDemandPending + Reserved) against Free, in basis
// points, capped at MaxRisk. No pressure is no risk; pressure without free
// capacity is MaxRisk.
func RiskOf(s Supply) Risk {
	pressure := int64(max(s.OnDemandPending, 0)) + int64(max(s.Reserved, 0))
	free := int64(max(s.Free, 0))
	switch {
	case pressure == 0:
		return 0
	case pressure >= free:
		return MaxRisk
	}
	return Risk(pressure * 10_000 / free)
}

// Rebalance reports whether the risk calls for a rebalance recommendation.
func (r Risk) Rebalance() bool { return r > RebalanceAt }

// String prints the risk as a percentage: "75.00%".
func (r Risk) String() string { return fmt.Sprintf("%d.%02d%%", int(r)/100, int(r)%100) }
