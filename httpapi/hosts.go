package httpapi

import (
	"context"
	"net/http"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// Event kinds of host actions.
const (
	EventHostCordoned   cloud.EventKind = "host.cordoned"
	EventHostUncordoned cloud.EventKind = "host.uncordoned"
)

// listHosts handles GET /v1/hosts (admin).
func (s *api) listHosts(w http.ResponseWriter, r *http.Request, p principal) error {
	out := HostList{}
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		hs, err := tx.ListHosts(r.Context())
		out.Hosts = hs
		return err
	})
	if err != nil {
		return err
	}
	if out.Hosts == nil {
		out.Hosts = []*cloud.Host{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// cordonHost handles POST /v1/hosts/{id}/cordon (admin): the host keeps
// what it runs and takes nothing new. Cordoning a cordoned host changes
// nothing; an unhealthy host is cordoned too, so that it does not take
// work when it recovers.
func (s *api) cordonHost(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.setHostState(w, r, p, fleet.Cordoned, EventHostCordoned, func(from fleet.HostState) error {
		return nil
	})
}

// uncordonHost handles POST /v1/hosts/{id}/uncordon (admin). Only a
// cordoned host becomes schedulable; an unhealthy one stays unhealthy until
// its heartbeats say otherwise, so uncordoning it is a conflict.
func (s *api) uncordonHost(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.setHostState(w, r, p, fleet.Schedulable, EventHostUncordoned, func(from fleet.HostState) error {
		if from == fleet.Unhealthy {
			return &cloud.Error{Code: cloud.Conflict,
				Message: "host is unhealthy; it becomes schedulable when its agent reports healthy again",
				Details: map[string]any{"from": from, "to": fleet.Schedulable}}
		}
		return nil
	})
}

// setHostState moves a host to state to through PutHost, whose version
// check makes a concurrent change (a scheduler commit, another operator) a
// conflict instead of a lost update. An optional If-Match pins the version
// the operator saw.
func (s *api) setHostState(w http.ResponseWriter, r *http.Request, p principal, to fleet.HostState,
	kind cloud.EventKind, allowed func(from fleet.HostState) error) error {
	want, err := ifMatch(r)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	var out *cloud.Host
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		h, err := tx.GetHost(ctx, id)
		if cloud.IsNotFound(err) {
			return notFound("host", id)
		}
		if err != nil {
			return err
		}
		if err := checkVersion("host", id, want, h.Version); err != nil {
			return err
		}
		out = h
		from := h.State
		if from == to {
			return nil
		}
		if err := allowed(from); err != nil {
			return err
		}
		h.State = to
		h.Spec.State = to
		if err := tx.PutHost(ctx, h); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: s.now(), Kind: kind, HostID: h.ID, Actor: p.UserID,
			Reason: string(from) + " -> " + string(to) + " by " + p.UserID})
	})
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(out.Version))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// drainHost handles POST /v1/hosts/{id}/drain (admin): the host is
// cordoned, and every instance running there is asked to stop (the agent
// stops it, the allocation is released; its tenant may start it again and
// it is placed elsewhere). Instances being terminated carry on. Draining a
// drained host changes nothing. The answer lists the instances it stopped.
func (s *api) drainHost(w http.ResponseWriter, r *http.Request, p principal) error {
	id := r.PathValue("id")
	var stopped []*cloud.Instance
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		stopped = stopped[:0]
		h, err := tx.GetHost(ctx, id)
		if cloud.IsNotFound(err) {
			return notFound("host", id)
		}
		if err != nil {
			return err
		}
		now := s.now()
		if h.State == fleet.Schedulable {
			from := h.State
			h.State, h.Spec.State = fleet.Cordoned, fleet.Cordoned
			if err := tx.PutHost(ctx, h); err != nil {
				return err
			}
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventHostCordoned, HostID: h.ID, Actor: p.UserID,
				Reason: string(from) + " -> cordoned by " + p.UserID + " (drain)"}); err != nil {
				return err
			}
		}
		ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{HostID: id,
			States: []cloud.State{cloud.Scheduled, cloud.Starting, cloud.Running}})
		if err != nil {
			return err
		}
		for _, in := range ins {
			from := in.State
			in.State, in.Reason, in.UpdatedAt = cloud.Stopping, "host "+id+" drained by "+p.UserID, now
			if err := tx.UpdateInstance(ctx, in); err != nil {
				return err
			}
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventInstanceState, TenantID: in.TenantID,
				InstanceID: in.ID, HostID: id, From: from, To: cloud.Stopping, Reason: in.Reason, Actor: p.UserID}); err != nil {
				return err
			}
			stopped = append(stopped, in)
		}
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, DrainResult{Host: id, Stopping: stopped})
	return nil
}

// DrainResult is the answer to POST /v1/hosts/{id}/drain.
type DrainResult struct {
	Host     string            `json:"host"`
	Stopping []*cloud.Instance `json:"stopping"`
}

// DrainHost cordons a host and stops the instances running on it.
func (c *Client) DrainHost(ctx context.Context, id string) (*DrainResult, error) {
	var out DrainResult
	_, _, err := c.do(ctx, call{method: "POST", path: pathOf("hosts", id, "drain"), out: &out})
	return nilOnErr(&out, err)
}
