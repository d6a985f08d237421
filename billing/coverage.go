package billing

import (
	"sort"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// This file rates the on-demand seconds that commitments may cover, hour
// by hour.

// tcommit is a tenant's commitment with its term in whole seconds.
type tcommit struct {
	c      *cloud.Commitment
	idx    int32 // index into rater.commits
	ts, te int64
}

// dinterval is an on-demand interval [a, b) that some commitment matches.
type dinterval struct {
	a, b int64
	inst string
	s    *schedule
	cs   []int // indices into the tenant's tcommits
	ep   int32 // index into rater.eps
}

type piece struct {
	d       int32 // index into the deferred intervals
	a, n    int64 // first second and length
	price   money.Micros
	covered int64
}

type candidate struct {
	saving money.Micros
	tc     int32
	piece  int32
}

type delta struct {
	k   lkey
	sec int64
}

// hourWork is scratch space reused across hours and tenants.
type hourWork struct {
	pieces []piece
	cands  []candidate
	pts    []int64
	capa   []int64
	cov    []int64
	deltas []delta
}

// cover rates deferred on-demand intervals, hour by hour, as covered by
// the tenant's commitments or on demand. An hour in which nothing starts,
// ends or changes price, and that starts with nothing changing, rates as
// the hour before it, so that only hours with changes are worked out.
func (r *rater) cover(tcs []tcommit, ds []dinterval) error {
	sort.Slice(ds, func(i, j int) bool { return ds[i].a < ds[j].a })
	// Breakpoints: where anything that matters to an hour's allocation
	// changes.
	bps := []int64{r.cut}
	seen := map[*schedule]bool{}
	for _, d := range ds {
		bps = append(bps, d.a, d.b)
		if !seen[d.s] {
			seen[d.s] = true
			bps = append(bps, d.s.at[1:]...)
		}
	}
	for _, tc := range tcs {
		bps = append(bps, tc.ts, tc.te)
	}
	sort.Slice(bps, func(i, j int) bool { return bps[i] < bps[j] })

	w := &r.hw
	w.capa = resize(w.capa, len(tcs))
	w.cov = resize(w.cov, len(tcs))
	var active []int32
	next, bi := 0, 0
	prevClean := false
	var mul int64
	h0 := r.start - mod(r.start, 3600)
	for h := h0; h < r.cut; h += 3600 {
		he := h + 3600
		for bi < len(bps) && bps[bi] < h {
			bi++
		}
		atH := bi < len(bps) && bps[bi] == h
		j := bi
		for j < len(bps) && bps[j] == h {
			j++
		}
		clean := (j >= len(bps) || bps[j] >= he) && he <= r.cut
		for next < len(ds) && ds[next].a < he {
			active = append(active, int32(next))
			next++
		}
		keep := active[:0]
		for _, k := range active {
			if ds[k].b > h {
				keep = append(keep, k)
			}
		}
		active = keep
		if clean && prevClean && !atH {
			mul++
			r.recordCoverage(tcs, h)
			continue
		}
		r.flush(mul)
		if err := r.coverHour(tcs, ds, active, h, he); err != nil {
			return err
		}
		mul, prevClean = 1, clean
		r.recordCoverage(tcs, h)
	}
	r.flush(mul)
	return nil
}

func mod(a, m int64) int64 {
	x := a % m
	if x < 0 {
		x += m
	}
	return x
}

func resize(s []int64, n int) []int64 {
	if cap(s) < n {
		return make([]int64, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func (r *rater) flush(mul int64) {
	for _, d := range r.hw.deltas {
		r.acc[d.k] += d.sec * mul
	}
	r.hw.deltas = r.hw.deltas[:0]
}

func (r *rater) recordCoverage(tcs []tcommit, h int64) {
	for i, s := range r.hw.cov {
		if s > 0 {
			r.coverage = append(r.coverage, CoverageHour{CommitmentID: tcs[i].c.ID, Hour: unix(h), Seconds: s})
		}
	}
}

// coverHour allocates the hour [h, he) and leaves its lines in hw.deltas
// and its coverage in hw.cov.
func (r *rater) coverHour(tcs []tcommit, ds []dinterval, active []int32, h, he int64) error {
	w := &r.hw
	w.pieces, w.cands = w.pieces[:0], w.cands[:0]
	for i, tc := range tcs {
		w.capa[i] = int64(tc.c.Quantity) * overlap(h, h+3600, tc.ts, tc.te)
		w.cov[i] = 0
	}
	for _, k := range active {
		if err := r.splitPieces(tcs, ds, k, h, he); err != nil {
			return err
		}
	}
	r.allocate(tcs, ds)
	return nil
}

// splitPieces cuts the part of deferred interval k inside [h, he) into
// pieces at price changes and at the terms of its commitments, so that
// each piece has one price and each commitment is active over all of it or
// none, and lists the commitments that may cover each piece as candidates.
func (r *rater) splitPieces(tcs []tcommit, ds []dinterval, k int32, h, he int64) error {
	w := &r.hw
	d := &ds[k]
	a, b := max(d.a, h), min(d.b, he)
	if a >= b {
		return nil
	}
	pts := append(w.pts[:0], a)
	si := d.s.find(a)
	for i := si + 1; i < len(d.s.at) && d.s.at[i] < b; i++ {
		pts = append(pts, d.s.at[i])
	}
	for _, ci := range d.cs {
		tc := &tcs[ci]
		if a < tc.ts && tc.ts < b {
			pts = append(pts, tc.ts)
		}
		if a < tc.te && tc.te < b {
			pts = append(pts, tc.te)
		}
	}
	if len(pts) > 2 {
		sort.Slice(pts, func(i, j int) bool { return pts[i] < pts[j] })
	}
	pts = append(pts, b)
	w.pts = pts
	for i := 0; i+1 < len(pts); i++ {
		x, y := pts[i], pts[i+1]
		if x == y {
			continue
		}
		for si+1 < len(d.s.at) && d.s.at[si+1] <= x {
			si++
		}
		if !d.s.ok[si] {
			return r.noPrice(d.s, x)
		}
		p := piece{d: k, a: x, n: y - x, price: d.s.price[si]}
		pi := int32(len(w.pieces))
		w.pieces = append(w.pieces, p)
		for _, ci := range d.cs {
			tc := &tcs[ci]
			if tc.ts <= x && y <= tc.te && p.price >= tc.c.UsageRate {
				w.cands = append(w.cands, candidate{saving: p.price - tc.c.UsageRate, tc: int32(ci), piece: pi})
			}
		}
	}
	return nil
}

// allocate gives the hour's pieces to the candidates, the largest saving
// per second first (ties: commitment ID, instance ID, time), each
// commitment up to its capacity for the hour; the seconds left over bill
// on demand.
func (r *rater) allocate(tcs []tcommit, ds []dinterval) {
	w := &r.hw
	cands := w.cands
	sort.Slice(cands, func(i, j int) bool {
		x, y := &cands[i], &cands[j]
		if x.saving != y.saving {
			return x.saving > y.saving
		}
		if x.tc != y.tc {
			return x.tc < y.tc // tcs are sorted by ID
		}
		px, py := &w.pieces[x.piece], &w.pieces[y.piece]
		if ix, iy := ds[px.d].inst, ds[py.d].inst; ix != iy {
			return ix < iy
		}
		return px.a < py.a
	})
	for _, cd := range cands {
		p := &w.pieces[cd.piece]
		take := min(w.capa[cd.tc], p.n-p.covered)
		if take <= 0 {
			continue
		}
		p.covered += take
		w.capa[cd.tc] -= take
		w.cov[cd.tc] += take
		tc := &tcs[cd.tc]
		w.deltas = append(w.deltas, delta{lkey{catCompute, ds[p.d].s.id, tc.idx, tc.c.UsageRate, ds[p.d].ep}, take})
	}
	for i := range w.pieces {
		p := &w.pieces[i]
		if rest := p.n - p.covered; rest > 0 {
			w.deltas = append(w.deltas, delta{lkey{catCompute, ds[p.d].s.id, -1, p.price, ds[p.d].ep}, rest})
		}
	}
}
