package agenttest

import (
	"context"

	"github.com/gpucloud/gpucloud/agentapi"
)

// OpGone is the Gone operation, for FailNext and Calls.
const OpGone = "Gone"

// MarkGone makes Gone name the volumes as deleted and the instances as
// terminated, as the real server does once they are (IDs it never heard
// of are gone there too; here only those marked are).
func (s *ControlPlane) MarkGone(volumes, instances []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone == nil {
		s.gone = map[string]bool{}
	}
	for _, v := range volumes {
		s.gone["v:"+v] = true
	}
	for _, i := range instances {
		s.gone["i:"+i] = true
	}
}

// GoneAsked returns the requests Gone took, in order.
func (s *ControlPlane) GoneAsked() []agentapi.GoneRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]agentapi.GoneRequest(nil), s.goneAsked...)
}

// Gone implements agent.GoneChecker: of the IDs asked, those MarkGone
// named.
func (s *ControlPlane) Gone(ctx context.Context, req agentapi.GoneRequest) (*agentapi.GoneResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter(ctx, OpGone); err != nil {
		return nil, err
	}
	req = roundTrip(req)
	s.goneAsked = append(s.goneAsked, req)
	out := &agentapi.GoneResponse{Volumes: []string{}, Instances: []string{}}
	for _, v := range req.Volumes {
		if s.gone["v:"+v] {
			out.Volumes = append(out.Volumes, v)
		}
	}
	for _, i := range req.Instances {
		if s.gone["i:"+i] {
			out.Instances = append(out.Instances, i)
		}
	}
	return roundTrip(out), nil
}
