package agentapi

import (
	"context"

	"github.com/gpucloud/gpucloud/internal/rest"
)

// MaxGoneIDs is the most volume IDs, and the most instance IDs, one
// GoneRequest may name.
const MaxGoneIDs = 1000

// GoneRequest names the volumes and instances whose files the agent's host
// holds (volume images, working directories, logs) and no assignment of
// the host uses: POST /v1/agent/gone answers which of them are gone, so
// that the agent deletes their files.
type GoneRequest struct {
	Volumes   []string `json:"volumes,omitempty"`
	Instances []string `json:"instances,omitempty"`
}

// GoneResponse lists, of a GoneRequest's IDs, the volumes that are
// deleted and the instances that are terminated or failed (final: they
// never run again), and those the server does not know: their files hold
// nothing anyone may still read.
type GoneResponse struct {
	Volumes   []string `json:"volumes"`
	Instances []string `json:"instances"`
}

// Gone asks which of the volumes and instances req names are gone.
func (c *Client) Gone(ctx context.Context, req GoneRequest) (*GoneResponse, error) {
	var out GoneResponse
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/agent/gone", Body: req, Out: &out})
	return rest.NilOnErr(&out, err)
}
