package service

import (
	"context"
	"fmt"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// Gone answers an agent which of the volumes and instances whose files its
// host holds are gone: a volume that is deleted, an instance that is
// terminated or failed, or either that the store does not know. The agent
// then deletes their files (docs/RUNTIME.md, "Storage limits and
// deletion"). Anything else, a stopped instance or a volume attached
// elsewhere, is kept. The answer tells an agent no more than whether an ID
// it names is still in use; it names no tenant and no other ID.
func (s *Agents) Gone(ctx context.Context, a Actor, req agentapi.GoneRequest) (agentapi.GoneResponse, error) {
	out := agentapi.GoneResponse{Volumes: []string{}, Instances: []string{}}
	if err := agentOnly(a); err != nil {
		return out, err
	}
	for what, ids := range map[string][]string{"volumes": req.Volumes, "instances": req.Instances} {
		if len(ids) > agentapi.MaxGoneIDs {
			return out, &cloud.Error{Code: cloud.Invalid,
				Message: fmt.Sprintf("%s: %d IDs, at most %d per request", what, len(ids), agentapi.MaxGoneIDs),
				Details: map[string]any{"field": what}}
		}
	}
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out.Volumes, out.Instances = out.Volumes[:0], out.Instances[:0]
		for _, id := range dedupe(req.Volumes) {
			v, err := tx.GetVolume(ctx, id)
			if err != nil && !cloud.IsNotFound(err) {
				return err
			}
			if err != nil || v.DeletedAt != nil {
				out.Volumes = append(out.Volumes, id)
			}
		}
		for _, id := range dedupe(req.Instances) {
			in, err := tx.GetInstance(ctx, id)
			if err != nil && !cloud.IsNotFound(err) {
				return err
			}
			if err != nil || in.State == cloud.Terminated || in.State == cloud.Failed {
				out.Instances = append(out.Instances, id)
			}
		}
		return nil
	})
	return out, err
}

// dedupe returns ids without repeats or empty strings, in their order.
func dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// volumeSizes reads the sizes and kinds of the volumes of a host's
// assignments, each volume once per call.
type volumeSizes map[string]*cloud.Volume

// of returns the sizes in GiB of the volumes ids, by ID (nil for none),
// and those of them that are shared. A volume the store no longer has
// (deleted meanwhile) is left out: the instance holding it is being
// stopped, and a host that needs the size refuses to start it.
func (vs volumeSizes) of(ctx context.Context, tx cloud.Tx, ids []string) (map[string]int64, []string, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	out := make(map[string]int64, len(ids))
	var shared []string
	for _, id := range ids {
		v, ok := vs[id]
		if !ok {
			var err error
			v, err = tx.GetVolume(ctx, id)
			if err != nil && !cloud.IsNotFound(err) {
				return nil, nil, err
			}
			vs[id] = v
		}
		if v == nil {
			continue
		}
		if v.SizeGiB > 0 {
			out[id] = v.SizeGiB
		}
		if v.Shared() {
			shared = append(shared, id)
		}
	}
	return out, shared, nil
}
