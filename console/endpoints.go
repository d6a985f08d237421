package console

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// The serverless endpoints' pages (docs/CONSOLE.md, "Endpoints"): the
// list, and an endpoint's page with its spec, workers, cold starts,
// latest jobs and keys. Every read and change is service.Endpoints'; what
// only the gateway knows (readiness, latency) comes from
// Options.Endpoints.

// EndpointStats adds to an endpoint's detail what only this replica's
// gateway knows: its workers' readiness and load, and its latency;
// *gateway.Gateway implements it.
type EndpointStats interface {
	Describe(d *api.EndpointDetail)
}

// recentJobs is how many jobs an endpoint's page lists.
const recentJobs = 20

func (c *Console) endpointsPage(w http.ResponseWriter, r *http.Request, s *session) error {
	ds, err := c.svc.Endpoints.Overview(r.Context(), s.actor)
	if err != nil {
		return err
	}
	if c.stats != nil {
		for _, d := range ds {
			c.stats.Describe(d)
		}
	}
	c.render(w, r, http.StatusOK, "endpoints", s, map[string]any{"Title": "Endpoints", "Endpoints": ds, "Stats": c.stats != nil})
	return nil
}

func (c *Console) endpointPage(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.renderEndpoint(w, r, s, http.StatusOK, nil)
}

// renderEndpoint renders endpoint {id}'s page; created, when set, is a key
// just made, whose secret the page shows this once.
func (c *Console) renderEndpoint(w http.ResponseWriter, r *http.Request, s *session, status int, created *api.CreatedEndpointKey) error {
	ctx, ref := r.Context(), r.PathValue("id")
	d, err := c.svc.Endpoints.Describe(ctx, s.actor, ref)
	if err != nil {
		return err
	}
	if c.stats != nil {
		c.stats.Describe(d)
	}
	jobs, err := c.svc.Endpoints.RecentJobs(ctx, s.actor, d.ID, recentJobs)
	if err != nil {
		return err
	}
	keys, err := c.svc.Endpoints.Keys(ctx, s.actor, d.ID, false)
	if err != nil {
		return err
	}
	c.render(w, r, status, "endpoint", s, map[string]any{"Title": "Endpoint " + d.Name, "Section": "endpoints", "D": d,
		"Jobs": jobs, "Keys": keys, "Created": created, "KeyIdem": newFormKey(), "Stats": c.stats != nil})
	return nil
}

// newFormKey is the idempotency key a key's create form carries: a form
// sent twice (a double click, a reload's resubmission) makes one key.
func newFormKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "console-" + hex.EncodeToString(b[:])
}

// formInt reads an optional whole number of a form: empty is 0.
func formInt(r *http.Request, field string) (int, error) {
	v := strings.TrimSpace(r.PostFormValue(field))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, &cloud.Error{Code: cloud.Invalid, Message: field + ": want a whole number, got " + strconv.Quote(v), Details: map[string]any{"field": field}}
	}
	return n, nil
}

// createEndpointKey makes a key from the endpoint page's form and renders
// the page with its secret, which is not shown again (no redirect: the
// secret is in this answer only, never in a URL).
func (c *Console) createEndpointKey(w http.ResponseWriter, r *http.Request, s *session) error {
	rate, err := formInt(r, "rate")
	if err != nil {
		return err
	}
	burst, err := formInt(r, "burst")
	if err != nil {
		return err
	}
	req := api.CreateEndpointKeyRequest{Name: strings.TrimSpace(r.PostFormValue("name")), Rate: rate, Burst: burst}
	k, created, err := c.svc.Endpoints.CreateKey(r.Context(), s.actor, r.PathValue("id"), req, r.PostFormValue("idempotency_key"))
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.renderEndpoint(w, r, s, status, &k)
}

func (c *Console) revokeEndpointKey(w http.ResponseWriter, r *http.Request, s *session) error {
	if _, err := c.svc.Endpoints.RevokeKey(r.Context(), s.actor, r.PathValue("id"), r.PathValue("key")); err != nil {
		return err
	}
	http.Redirect(w, r, "/endpoints/"+r.PathValue("id")+"#keys", http.StatusSeeOther)
	return nil
}
