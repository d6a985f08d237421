package agentapi

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/internal/rest"
)

// The reports of direct sessions: the server records a direct grant when
// it signs it, but only the agent sees what the grant was used for. Once a
// grant has expired and its last connection has closed (or the agent
// stops), the agent reports what it served, and POST
// /v1/agent/direct-sessions records it as an event of the session's
// instance (or, for a detached volume, of the tenant). The agent sends a
// report until the server answers it; the server records each grant once.

// MaxDirectReports is the most reports one DirectReportsRequest carries.
const MaxDirectReports = 100

// DirectReport is what one grant served on the reporting host.
type DirectReport struct {
	// Grant is the grant as its client presented it: the token the
	// cloud's CA signed, which the server checks again, so that an
	// agent reports only grants made for its own host.
	Grant string `json:"grant"`
	// Connections is how many connections the grant opened.
	Connections int `json:"connections"`
	// BytesIn is what the client sent (the files protocol's requests and
	// the data copied in; a forward's bytes to the instance), BytesOut
	// what it received.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// First is when the first connection was admitted, Last when the last
	// one closed.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Cut says the agent stopped while connections were open, which
	// ended them.
	Cut bool `json:"cut,omitempty"`
}

// DirectReportsRequest carries an agent's reports.
type DirectReportsRequest struct {
	Reports []DirectReport `json:"reports"`
}

// DirectReportsResponse answers each report of a request, in order: the
// agent drops every report answered, whatever the answer.
type DirectReportsResponse struct {
	Results []DirectReportResult `json:"results"`
}

// The answers to a report.
const (
	ReportRecorded  = "recorded"
	ReportDuplicate = "duplicate" // recorded before: a report sent again
	ReportRefused   = "refused"   // not this host's grant, or not valid: Error says why
)

// DirectReportResult answers one report.
type DirectReportResult struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// ReportDirect sends reports to the server.
func (c *Client) ReportDirect(ctx context.Context, reports []DirectReport) (*DirectReportsResponse, error) {
	var out DirectReportsResponse
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/agent/direct-sessions", Body: DirectReportsRequest{Reports: reports}, Out: &out})
	return rest.NilOnErr(&out, err)
}
