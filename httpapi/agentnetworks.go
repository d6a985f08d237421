package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// networkReread is how often a waiting network view is read again even
// when this replica noted no change: another replica's writes are noted
// here only while PostgreSQL carries them (service.NetworkChanges), and
// one sent while the listening connection was down is lost.
const networkReread = time.Second

// agentNetworks handles GET /v1/agent/networks: the caller's host's
// network view (service.Agents.NetworkView). With ?version= (a version an
// earlier answer carried) and ?wait= (a duration, at most
// agentapi.MaxNetworkWait) it answers as soon as the view's version
// differs, or when the wait is over with the view as it is: a long poll
// that wakes when this replica notes a change of one of the host's
// networks (service.NetworkChanges), which other replicas' changes reach
// through PostgreSQL, and re-reads every networkReread.
func (s *handlers) agentNetworks(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	since := q.Get("version")
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > agentapi.MaxNetworkWait {
			return &cloud.Error{Code: cloud.Invalid, Message: "wait: want a duration from 0s to " + agentapi.MaxNetworkWait.String() + ", such as 25s",
				Details: map[string]any{"field": "wait"}}
		}
		wait = d
	}
	ctx := r.Context()
	deadline := time.Now().Add(wait)
	changes := s.svc.NetworkChanges
	for {
		seq := changes.Seq()
		view, nets, err := s.svc.Agents.NetworkView(ctx, p.actor())
		if err != nil {
			return err
		}
		left := time.Until(deadline)
		if since == "" || view.Version != since || left <= 0 {
			writeJSON(w, http.StatusOK, view)
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, min(left, networkReread))
		changes.Wait(wctx, seq, nets, p.actor().HostID)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
