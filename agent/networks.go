package agent

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
)

// networkLoop keeps the host's private networks what the control plane
// says: it long-polls the host's NetworkView (agentapi.MaxNetworkWait at
// a time) and hands every new version to the instances' DNS (updateDNS)
// and to the runtime (ns, when not nil), until ctx ends. A failed call or
// sync is retried with the agent's backoff; a sync that failed is
// retried with the next view, or the same one, since the agent then asks
// for any version.
func (a *Agent) networkLoop(ctx context.Context, ns NetworkSyncer) {
	version, fails := "", 0
	for {
		began := a.cfg.Now()
		view, err := a.srv.Networks(ctx, version, agentapi.MaxNetworkWait)
		if ctx.Err() != nil {
			return
		}
		changed := err == nil && view != nil && (view.Version != version || version == "")
		if changed {
			a.updateDNS(view.Networks)
			if ns == nil {
				version = view.Version
			} else if err = ns.SyncNetworks(ctx, view); err == nil {
				version = view.Version
			} else {
				version = "" // ask again for whatever the view is
			}
		}
		var delay time.Duration
		switch {
		case err != nil:
			fails++
			delay = retryDelay(a.cfg.Interval, fails, err)
			a.log.Warn("agent: networks failed", "err", err, "failures", fails, "retry_in", delay)
		case !changed && a.cfg.Now().Sub(began) < a.cfg.Interval:
			// The same view at once: a server that does not wait. Poll
			// at the agent's interval rather than spin.
			fails, delay = 0, a.cfg.Interval
		default:
			fails = 0
		}
		if delay == 0 {
			continue
		}
		if !sleep(ctx, delay) {
			return
		}
	}
}
