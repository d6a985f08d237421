package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/cloud"
)

// action is a state change a tenant asks for. target decides, from the
// current state, where the instance goes: a new state, nothing (the
// instance is already where the action leads, so a retry answers it
// unchanged), or a conflict. Every real move is one cloud.CanMove allows.
type action struct {
	verb   string
	target func(id string, from cloud.State) (to cloud.State, noop bool, err error)
}

// stop asks the agent to stop the workload: scheduled, starting and
// running instances go to stopping (the agent then reports stopped and the
// allocation is released). Stopping or stopped instances are already on
// their way. A pending instance holds nothing: it is stopped at once.
var stop = action{verb: "stop", target: func(id string, from cloud.State) (cloud.State, bool, error) {
	switch {
	case from == cloud.Stopping || from == cloud.Stopped:
		return from, true, nil
	case cloud.CanMove(from, cloud.Stopping):
		return cloud.Stopping, false, nil
	case from == cloud.Pending:
		return cloud.Stopped, false, nil
	}
	return "", false, illegalMove(id, from, cloud.Stopping, "")
}}

// start puts a stopped instance back to pending, for the scheduler to
// place again. An instance that is pending, scheduled, starting or running
// is already started; anything else (stopping, failed, lost, terminated) is
// a conflict.
var start = action{verb: "start", target: func(id string, from cloud.State) (cloud.State, bool, error) {
	switch from {
	case cloud.Stopped:
		return cloud.Pending, false, nil
	case cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running:
		return from, true, nil
	case cloud.Stopping:
		return "", false, illegalMove(id, from, cloud.Pending, "wait until it is stopped")
	}
	return "", false, illegalMove(id, from, cloud.Pending, "")
}}

// terminate ends an instance from any state. One that holds an allocation
// goes to terminating first: the agent stops the workload, reports it, and
// only then are the GPUs released and the instance terminated. Terminating
// a terminating or terminated instance answers it unchanged.
var terminate = action{verb: "terminate", target: func(id string, from cloud.State) (cloud.State, bool, error) {
	if from == cloud.Terminated || from == cloud.Terminating {
		return from, true, nil
	}
	if cloud.CanMove(from, cloud.Terminating) {
		return cloud.Terminating, false, nil
	}
	if !cloud.CanMove(from, cloud.Terminated) {
		return "", false, illegalMove(id, from, cloud.Terminated, "")
	}
	return cloud.Terminated, false, nil
}}

func (s *api) stopInstance(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.change(w, r, p, stop)
}

func (s *api) startInstance(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.change(w, r, p, start)
}

func (s *api) terminateInstance(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.change(w, r, p, terminate)
}

// change applies an action to the instance of the path in one
// transaction: it checks the optional If-Match against the version (stale
// is a conflict, even when the action would change nothing), moves the
// state, writes the event, and on terminate detaches the volumes, which
// outlive their instances.
func (s *api) change(w http.ResponseWriter, r *http.Request, p principal, a action) error {
	want, err := ifMatch(r)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	var out *cloud.Instance
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		in, err := getVisibleInstance(ctx, tx, p, id)
		if err != nil {
			return err
		}
		if err := checkVersion("instance", id, want, in.Version); err != nil {
			return err
		}
		out = in
		_, err = s.moveInstance(ctx, tx, p, in, a, s.now(), "")
		return err
	})
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(out.Version))
	writeJSON(w, http.StatusOK, out)
	return nil
}
