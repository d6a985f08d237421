package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// BusyError is the answer to an HTTP request that waited its endpoint's
// queue wait for a worker and got none: 503 with Retry-After.
type BusyError struct {
	Endpoint   string
	Waited     time.Duration
	RetryAfter int
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("endpoint %s had no worker free for %s; retry in %d s (it is scaling up)", e.Endpoint, e.Waited.Round(time.Millisecond), e.RetryAfter)
}

type ctxKey struct{}

type proxied struct {
	w    *worker
	path string
}

// Serve proxies an HTTP-mode request of endpoint e (as the caller's
// service read it) to a ready worker with a free slot: the path after
// the endpoint's prefix, with X-Forwarded-Prefix; the tenant's
// credentials are removed by strip. It waits for a worker up to the
// endpoint's queue wait (counted as queued load, so that the controller
// starts workers, from zero if need be), then answers *BusyError.
func (g *Gateway) Serve(w http.ResponseWriter, r *http.Request, e *cloud.Endpoint, path, prefix string, strip func(http.Header)) error {
	start := g.cfg.Now()
	g.mu.Lock()
	es := g.endpoints[e.ID]
	if es == nil {
		// Created since the last refresh: take it now.
		es = &endpoint{ep: e, workers: map[string]*worker{}, changed: make(chan struct{})}
		g.endpoints[e.ID] = es
	}
	es.waiting++
	g.mu.Unlock()
	wait := time.Duration(e.Spec.QueueWaitSeconds) * time.Second
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var wk *worker
	for first := true; wk == nil; first = false {
		g.mu.Lock()
		if es.ep != nil {
			wk = es.pick()
		}
		changed := es.changed
		if wk != nil {
			es.waiting--
		}
		g.mu.Unlock()
		if wk != nil {
			break
		}
		if first {
			g.demand()
		}
		select {
		case <-changed:
		case <-timer.C:
			g.mu.Lock()
			es.waiting--
			g.mu.Unlock()
			return &BusyError{Endpoint: e.Name, Waited: wait, RetryAfter: 5}
		case <-r.Context().Done():
			g.mu.Lock()
			es.waiting--
			g.mu.Unlock()
			return r.Context().Err()
		}
	}
	failed := false
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(e.Spec.TimeoutSeconds)*time.Second)
	defer cancel()
	rp := &httputil.ReverseProxy{
		Transport: wk.tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = wk.id + ".worker.invalid:" + strconv.Itoa(wk.port)
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
			strip(pr.Out.Header)
		},
		FlushInterval: -1,
		ErrorHandler: func(rw http.ResponseWriter, req *http.Request, err error) {
			failed = !errors.Is(err, context.Canceled)
			msg := "the worker did not answer: " + err.Error()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				msg = fmt.Sprintf("the request ran past the endpoint's timeout of %ds", e.Spec.TimeoutSeconds)
				failed = false
			}
			// The API's error shape (httpapi's errorBody).
			b, _ := json.Marshal(map[string]any{"code": cloud.Unavailable, "message": msg, "details": map[string]any{"worker": wk.id}})
			rw.Header().Set("Content-Type", "application/json")
			rw.WriteHeader(http.StatusBadGateway)
			_, _ = rw.Write(append(b, '\n'))
		},
	}
	rp.ServeHTTP(w, r.WithContext(ctx))
	took := g.cfg.Now().Sub(start)
	if failed {
		took = 0
	}
	g.release(es, wk, failed, took)
	return nil
}

// Prefix is the path prefix of an HTTP-mode endpoint's requests.
func Prefix(ref string) string { return "/v1/endpoints/" + ref + "/http" }
