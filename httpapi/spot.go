package httpapi

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// queryTime parses an optional RFC 3339 time parameter.
func queryTime(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, service.Field(name, "%s is not an RFC 3339 time such as 2026-12-01T00:00:00Z", service.Quote(v))
	}
	return t, nil
}

// spotPrices handles GET /v1/spot/prices: the price history of the pools
// of ?pool (repeatable; every pool when absent) from ?since (default 24
// hours ago) until ?until (default no end), oldest first, at most ?limit
// points (default 1000, at most 10000).
func (s *handlers) spotPrices(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	sq := service.SpotPriceQuery{Pools: q["pool"]}
	var err error
	if sq.Since, err = queryTime(r, "since"); err != nil {
		return err
	}
	if sq.Until, err = queryTime(r, "until"); err != nil {
		return err
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > service.MaxSpotPoints {
			return service.Field("limit", "want an integer in 1..%d, got %s", service.MaxSpotPoints, service.Quote(v))
		}
		sq.Limit = n
	}
	ps, err := s.svc.Spot.Prices(r.Context(), p.actor(), sq)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.SpotPriceList{Prices: ps})
	return nil
}

// reclaimWindow parses ?window: a Go duration of whole seconds, from 1s to
// 720h (service.CheckReclaimWindow); 168h when absent.
func reclaimWindow(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("window")
	if v == "" {
		return service.DefaultReclaimWindow, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, service.Field("window", "%s is not a duration such as 168h or 30m", service.Quote(v))
	}
	return d, service.CheckReclaimWindow(d, v)
}

// spotPools handles GET /v1/spot/pools: every pool's newest spot price,
// with the on-demand price of its offering in its zone beside it, and its
// recent reclaims over ?window (default 168h, at most 720h) before now.
// The reclaim figures aggregate every tenant's instances and carry counts
// only, so members see them too.
func (s *handlers) spotPools(w http.ResponseWriter, r *http.Request, p principal) error {
	window, err := reclaimWindow(r)
	if err != nil {
		return err
	}
	stats, err := s.svc.Spot.Pools(r.Context(), p.actor(), window)
	if err != nil {
		return err
	}
	out := api.SpotPoolList{Pools: make([]api.SpotPool, len(stats))}
	for i, st := range stats {
		out.Pools[i] = api.SpotPool{Pool: st.Pool, Price: st.Price, Time: st.Time, OnDemand: st.OnDemand,
			WindowSeconds: int64(st.Window / time.Second), Reclaims: st.Reclaims, SpotSeconds: st.SpotSeconds,
			ReclaimRateBP: st.ReclaimRateBP}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// createSpotRequest handles POST /v1/spot/requests: in one transaction the
// request is stored and its first instance launched in its first pool
// (service.Spot.Create). With an Idempotency-Key a retry answers the
// request the first call made, with 200; the same key with a request that
// differs in any field is a conflict naming the fields.
func (s *handlers) createSpotRequest(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateSpotRequestRequest
	if err := decodeMoneyBody(w, r, &req, "max_price"); err != nil {
		return err
	}
	tenant, err := bodyOrQueryTenant(r, req.Tenant)
	if err != nil {
		return err
	}
	req.Tenant = tenant
	out, created, err := s.svc.Spot.Create(r.Context(), p.actor(), req, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(out.Version))
	writeCreated(w, created, "/v1/spot/requests/"+out.ID, out)
	return nil
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
			return nil, service.Field("state", "unknown state %s (known: open, active, disabled, closed, cancelled)", service.Quote(string(st)))
		}
		out = append(out, st)
	}
	return out, nil
}

// listSpotRequests handles GET /v1/spot/requests: the tenant's (admins:
// every tenant's, or ?tenant's), optionally only in the states of ?state.
func (s *handlers) listSpotRequests(w http.ResponseWriter, r *http.Request, p principal) error {
	states, err := spotStates(r.URL.Query().Get("state"))
	if err != nil {
		return err
	}
	rs, err := s.svc.Spot.List(r.Context(), p.actor(), r.URL.Query().Get("tenant"), states...)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.SpotRequestList{Requests: rs})
	return nil
}

// getSpotRequest handles GET /v1/spot/requests/{id}; another tenant's
// answers like a missing one. The ETag is the version.
func (s *handlers) getSpotRequest(w http.ResponseWriter, r *http.Request, p principal) error {
	sr, err := s.svc.Spot.Get(r.Context(), p.actor(), r.PathValue("id"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(sr.Version))
	writeJSON(w, http.StatusOK, sr)
	return nil
}

// cancelSpotRequest handles POST /v1/spot/requests/{id}/cancel: the
// request launches nothing more. Its current instance keeps running
// unless ?terminate_instance=true, which terminates it as POST
// /v1/instances/{id}/terminate would, in the same transaction
// (service.Spot.Cancel). If-Match, when sent, must be the version read.
func (s *handlers) cancelSpotRequest(w http.ResponseWriter, r *http.Request, p principal) error {
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
		return service.Field("terminate_instance", "want true or false, got %s", service.Quote(v))
	}
	out, err := s.svc.Spot.Cancel(r.Context(), p.actor(), r.PathValue("id"), kill, want)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(out.Version))
	writeJSON(w, http.StatusOK, out)
	return nil
}
