package httpapi

import (
	"net/http"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// createGroup handles POST /v1/groups (service.Groups.Create). With an
// Idempotency-Key, a retry answers the group the first call created, with
// 200 instead of 201; the same key with a request that differs in any
// field is a conflict naming the fields.
func (s *handlers) createGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateGroupRequest
	if err := decodeMoneyBody(w, r, &req, "budget_per_hour"); err != nil {
		return err
	}
	tenant, err := bodyOrQueryTenant(r, req.Tenant)
	if err != nil {
		return err
	}
	req.Tenant = tenant
	out, created, err := s.svc.Groups.Create(r.Context(), p.actor(), req, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(out.Version))
	writeCreated(w, created, "/v1/groups/"+out.ID, out)
	return nil
}

// groupStates parses ?state=active,deleting.
func groupStates(v string) ([]cloud.GroupState, error) {
	if v == "" {
		return nil, nil
	}
	known := []cloud.GroupState{cloud.GroupActive, cloud.GroupDeleting, cloud.GroupDeleted}
	var out []cloud.GroupState
	for _, part := range strings.Split(v, ",") {
		st := cloud.GroupState(strings.TrimSpace(part))
		if !slices.Contains(known, st) {
			return nil, service.Field("state", "unknown state %s (known: active, deleting, deleted)", service.Quote(string(st)))
		}
		out = append(out, st)
	}
	return out, nil
}

// listGroups handles GET /v1/groups: the tenant's groups that are not
// deleted (admins: every tenant's, or ?tenant's), or those in the states
// of ?state.
func (s *handlers) listGroups(w http.ResponseWriter, r *http.Request, p principal) error {
	states, err := groupStates(r.URL.Query().Get("state"))
	if err != nil {
		return err
	}
	gs, err := s.svc.Groups.List(r.Context(), p.actor(), r.URL.Query().Get("tenant"), states...)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.GroupList{Groups: gs})
	return nil
}

// getGroup handles GET /v1/groups/{id}: the group with its members and
// recent events (api.GroupDescribe); another tenant's answers like a
// missing one. The ETag is the group's version.
func (s *handlers) getGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	d, err := s.svc.Groups.Describe(r.Context(), p.actor(), r.PathValue("id"))
	if err != nil {
		return err
	}
	out := api.GroupDescribe{Group: *d.Group, Members: make([]api.GroupMember, len(d.Members)), RecentEvents: d.Events}
	for i, in := range d.Members {
		out.Members[i] = api.MemberOf(in)
	}
	w.Header().Set("ETag", api.ETag(d.Group.Version))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// updateGroup handles PATCH /v1/groups/{id} (service.Groups.Update). If-Match,
// when sent, must be the version read.
func (s *handlers) updateGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	want, err := ifMatch(r)
	if err != nil {
		return err
	}
	var req api.UpdateGroupRequest
	if err := decodeMoneyBody(w, r, &req, "budget_per_hour"); err != nil {
		return err
	}
	out, err := s.svc.Groups.Update(r.Context(), p.actor(), r.PathValue("id"), req, want)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(out.Version))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteGroup handles DELETE /v1/groups/{id}: the group goes to deleting;
// the controller terminates its members, then marks it deleted. If-Match,
// when sent, must be the version read.
func (s *handlers) deleteGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	want, err := ifMatch(r)
	if err != nil {
		return err
	}
	out, err := s.svc.Groups.Delete(r.Context(), p.actor(), r.PathValue("id"), want)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(out.Version))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// setGroupDesired handles POST /v1/groups/{id}/desired
// (service.Groups.SetDesired).
func (s *handlers) setGroupDesired(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.SetDesiredRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	out, err := s.svc.Groups.SetDesired(r.Context(), p.actor(), r.PathValue("id"), req.Desired, req.HonorCooldown)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(out.Version))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// putMetrics handles POST /v1/metrics: custom metric points of the group
// the body names (service.Groups.PutMetrics); 204 when all are recorded.
func (s *handlers) putMetrics(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.PutMetricsRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := s.svc.Groups.PutMetrics(r.Context(), p.actor(), req.GroupID, req.Metrics); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// protectInstance handles POST /v1/instances/{id}/protection: sets or
// clears the instance's scale-in protection (service.Instances.SetProtection).
func (s *handlers) protectInstance(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.ProtectRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Protected == nil {
		return service.Field("protected", "is required: true or false")
	}
	out, err := s.svc.Instances.SetProtection(r.Context(), p.actor(), r.PathValue("id"), *req.Protected)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(out.Version))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// groupForecast handles GET /v1/groups/{id}/forecast
// (service.Groups.Forecast).
func (s *handlers) groupForecast(w http.ResponseWriter, r *http.Request, p principal) error {
	id := r.PathValue("id")
	rep, err := s.svc.Groups.Forecast(r.Context(), p.actor(), id)
	if err != nil {
		return err
	}
	out := api.GroupForecast{GroupID: id, Policy: rep.Policy, Metric: rep.Metric, Target: rep.Target,
		HistoryHours: rep.History.Hours(), MAPE: rep.MAPE, WAPE: rep.WAPE,
		Backtest: make([]api.ForecastHour, len(rep.Times)), Ahead: make([]api.ForecastHour, len(rep.Ahead))}
	for i, t := range rep.Times {
		out.Backtest[i] = api.ForecastHour{Time: t, Forecast: rep.Forecast[i], Actual: &rep.Actual[i]}
	}
	for i, t := range rep.Ahead {
		out.Ahead[i] = api.ForecastHour{Time: t, Forecast: rep.AheadValues[i]}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
