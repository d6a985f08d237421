package service

import (
	"context"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// Read-only views of endpoints for the web console's pages: the list with
// each endpoint's queue, and an endpoint's latest jobs.

// MaxRecentJobs bounds RecentJobs.
const MaxRecentJobs = 100

// Overview lists the live endpoints a may see (a member its tenant's, an
// admin every tenant's), each with its queue's counts, in one
// transaction; the workers are left to Describe.
func (s *Endpoints) Overview(ctx context.Context, a Actor) ([]*api.EndpointDetail, error) {
	if err := endpointUsers(a, "listing endpoints"); err != nil {
		return nil, err
	}
	var out []*api.EndpointDetail
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = nil
		t, err := Scope(ctx, tx, a, "", "")
		if err != nil {
			return err
		}
		es, err := tx.ListEndpoints(ctx, t, cloud.EndpointActive, cloud.EndpointDeleting)
		if err != nil || len(es) == 0 {
			return err
		}
		ids := make([]string, len(es))
		for i, e := range es {
			ids[i] = e.ID
		}
		counts, err := tx.CountJobs(ctx, ids...)
		if err != nil {
			return err
		}
		for _, e := range es {
			out = append(out, &api.EndpointDetail{Endpoint: e, Workers: []api.EndpointWorker{}, Queue: counts[e.ID]})
		}
		return nil
	})
	return out, err
}

// RecentJobs lists endpoint ref's latest jobs, newest first, at most n
// (1 to MaxRecentJobs).
func (s *Endpoints) RecentJobs(ctx context.Context, a Actor, ref string, n int) ([]*cloud.Job, error) {
	if err := endpointUsers(a, "listing an endpoint's jobs"); err != nil {
		return nil, err
	}
	n = min(max(n, 1), MaxRecentJobs)
	var out []*cloud.Job
	err := s.tx(ctx, func(tx cloud.Tx) error {
		e, err := lookupEndpoint(ctx, tx, a, ref)
		if err != nil {
			return err
		}
		out, err = tx.ListJobs(ctx, e.ID, n)
		return err
	})
	return out, err
}
