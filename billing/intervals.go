package billing

import (
	"sort"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Interval is a time a resource accrued: from an On entry of the usage
// ledger to the next Off of the same kind and resource, or to the cut
// time while still open. Offering, Zone, Market, Quantity and EndpointID
// are the On entry's.
type Interval struct {
	TenantID   string          `json:"tenant_id"`
	Kind       cloud.UsageKind `json:"kind"`
	ResourceID string          `json:"resource_id"`
	Offering   string          `json:"offering,omitempty"`
	Zone       string          `json:"zone,omitempty"`
	Market     cloud.Market    `json:"market,omitempty"`
	Quantity   int64           `json:"quantity"`
	EndpointID string          `json:"endpoint_id,omitempty"`
	Start      time.Time       `json:"start"`
	End        time.Time       `json:"end"`
	Open       bool            `json:"open"`
}

// Intervals pairs On/Off entries per (kind, resource): an On opens, the
// next Off closes; an Off with nothing open and a second On while open are
// ignored (the ledger is at-least-once safe). Open intervals end at the cut
// time given. usage is taken in ID order; entries at or after cut have not
// happened yet as of cut and are ignored. Resources of different tenants
// are never paired together. An On timed before the previous Off of its
// resource (clock skew between writers) starts at that Off, and an Off
// timed before its On ends the interval at its start, so that the
// intervals of one resource never overlap. Intervals come in the order of
// their On entries.
func Intervals(usage []*cloud.Usage, cut time.Time) []Interval {
	pos := make(map[*cloud.Usage]int, len(usage))
	byTenant := map[string][]*cloud.Usage{}
	var tenants []string
	for i, u := range usage {
		if u == nil {
			continue
		}
		pos[u] = i
		if _, ok := byTenant[u.TenantID]; !ok {
			tenants = append(tenants, u.TenantID)
		}
		byTenant[u.TenantID] = append(byTenant[u.TenantID], u)
	}
	var ivs []ival
	var p pairer
	for _, t := range tenants {
		ivs = append(ivs, p.pair(byTenant[t], cut)...)
	}
	sort.Slice(ivs, func(i, j int) bool { return pos[ivs[i].on] < pos[ivs[j].on] })
	out := make([]Interval, len(ivs))
	for i, iv := range ivs {
		u := iv.on
		out[i] = Interval{TenantID: u.TenantID, Kind: u.Kind, ResourceID: u.ResourceID, Offering: u.Offering, Zone: u.Zone,
			Market: u.Market, Quantity: u.Quantity, EndpointID: u.EndpointID, Start: iv.start, End: iv.end, Open: iv.open}
	}
	return out
}

// ival is an interval without copying the On entry's fields.
type ival struct {
	on         *cloud.Usage
	start, end time.Time
	open       bool
}

type rkey struct {
	kind cloud.UsageKind
	id   string
}

type rstate struct {
	open    int // index in the result of the open interval, -1 when closed
	last    time.Time
	hasLast bool
}

// pairer pairs one tenant's entries; its buffers are reused from call to
// call, and a result is valid until the next call.
type pairer struct {
	idx    map[rkey]int32
	states []rstate
	out    []ival
}

func (p *pairer) pair(usage []*cloud.Usage, cut time.Time) []ival {
	if p.idx == nil {
		p.idx = make(map[rkey]int32, len(usage)/2+1)
	} else {
		clear(p.idx)
	}
	states, out := p.states[:0], p.out[:0]
	for _, u := range usage {
		if u == nil || !u.Time.Before(cut) {
			continue
		}
		k := rkey{u.Kind, u.ResourceID}
		si, ok := p.idx[k]
		if !ok {
			si = int32(len(states))
			states = append(states, rstate{open: -1})
			p.idx[k] = si
		}
		st := &states[si]
		if u.On {
			if st.open >= 0 {
				continue
			}
			start := u.Time
			if st.hasLast && start.Before(st.last) {
				start = st.last
			}
			st.open = len(out)
			out = append(out, ival{on: u, start: start, open: true})
			continue
		}
		if st.open < 0 {
			continue
		}
		iv := &out[st.open]
		end := u.Time
		if end.Before(iv.start) {
			end = iv.start
		}
		iv.end, iv.open = end, false
		st.open, st.last, st.hasLast = -1, end, true
	}
	for i := range out {
		if out[i].open {
			out[i].end = cut
		}
	}
	p.states, p.out = states, out
	return out
}
