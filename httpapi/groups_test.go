package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
)

// groupRequest is a valid group request of most features.
func groupRequest(name string) api.CreateGroupRequest {
	two := 2
	return api.CreateGroupRequest{Name: name,
		Template: cloud.GroupTemplate{Offerings: []string{"l4.1x", "l40s.1x"}, Command: []string{"python", "serve.py"},
			Env: map[string]string{"PORT": "8080"}, Zones: []string{"zone-a"}, Tags: map[string]string{"team": "web"}},
		Min: 1, Max: 6, Desired: &two,
		Policies: []cloud.ScalingPolicy{{Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.6}},
		Mixed:    cloud.MixedInstances{Spot: true, OnDemandBase: 1}, Timing: cloud.GroupTiming{CooldownSeconds: 60},
		BudgetPerHour: money.MustParse("12.50"), IdleRelease: &cloud.IdleRelease{Threshold: 0.1, IdleSeconds: 1800}}
}

func TestGroupsAPI(t *testing.T) { onBothStores(t, testGroupsAPI) }

func testGroupsAPI(t *testing.T, e *env) {
	ctx := context.Background()
	// Create: 201 with Location and ETag; the budget is a money string.
	body, _ := json.Marshal(groupRequest("web"))
	code, h, b := e.raw("POST", "/v1/groups", e.acmeToken, strings.NewReader(string(body)), map[string]string{"Idempotency-Key": "g-1"})
	var g cloud.Group
	if code != http.StatusCreated || json.Unmarshal(b, &g) != nil || h.Get("Location") != "/v1/groups/"+g.ID || h.Get("ETag") != `"1"` {
		t.Fatalf("create: %d %v %s", code, h, b)
	}
	if !strings.Contains(string(b), `"budget_per_hour":"12.50"`) || g.TenantID != e.acmeID || g.State != cloud.GroupActive ||
		g.Desired != 2 || g.Policies[0].Name != "target" {
		t.Errorf("created group %s", b)
	}
	// A retry answers it with 200; another body with the key is 409.
	before := e.counts()
	code, _, b = e.raw("POST", "/v1/groups", e.acmeToken, strings.NewReader(string(body)), map[string]string{"Idempotency-Key": "g-1"})
	if code != http.StatusOK || !strings.Contains(string(b), `"id":"`+g.ID+`"`) {
		t.Errorf("retry: %d %s", code, b)
	}
	other := groupRequest("web")
	other.Max = 7
	_, err := e.acme.CreateGroup(ctx, other, "g-1")
	if ce := wantCode(t, err, cloud.Conflict); ce.Details["existing_id"] != g.ID || !slices.Equal(detailStrings(ce.Details["fields"]), []string{"max"}) {
		t.Errorf("reused key: %+v", ce)
	}
	e.unchanged(before, "a create retry and a reused key")

	// List and describe.
	if _, err := e.globex.CreateGroup(ctx, groupRequest("api"), ""); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		who    *client.Client
		tenant string
		want   int
	}{{e.acme, "", 1}, {e.globex, "", 1}, {e.admin, "", 2}, {e.admin, e.acmeID, 1}} {
		if gs, err := c.who.Groups(ctx, c.tenant); err != nil || len(gs) != c.want {
			t.Errorf("list %q: %d, %v; want %d", c.tenant, len(gs), err, c.want)
		}
	}
	if gs, err := e.acme.Groups(ctx, "", cloud.GroupDeleted); err != nil || len(gs) != 0 {
		t.Errorf("deleted groups = %v, %v", gs, err)
	}
	_, err = e.acme.Groups(ctx, e.globexID)
	wantCode(t, err, cloud.NotFound)
	// A member launched for the group shows in describe with its
	// protection.
	var member *cloud.Instance
	if err := e.store.Tx(ctx, func(tx cloud.Tx) error {
		cur, err := tx.GetGroup(ctx, g.ID)
		if err != nil {
			return err
		}
		member, err = service.LaunchGroupMember(ctx, tx, catalog.Default(), cur, service.LaunchSpec{Offering: "l4.1x", Seq: 1}, "groups", e.clock.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if p, err := e.acme.SetProtection(ctx, member.ID, true); err != nil || p.ScaleIn == nil || !p.ScaleIn.Protected {
		t.Fatalf("protect = %+v, %v", p, err)
	}
	d, err := e.acme.GetGroup(ctx, g.ID)
	if err != nil || d.ID != g.ID || len(d.Members) != 1 || d.Members[0].ID != member.ID || d.Members[0].ScaleIn == nil ||
		!d.Members[0].ScaleIn.Protected || len(d.RecentEvents) != 1 || d.Template.Offerings[0] != "l4.1x" {
		t.Errorf("describe = %+v, %v", d, err)
	}

	// Update with If-Match: stale is 409, current applies.
	three := 3
	_, err = e.acme.UpdateGroup(ctx, g.ID, api.UpdateGroupRequest{Min: &three}, g.Version+5)
	wantCode(t, err, cloud.Conflict)
	budget := money.MustParse("20")
	up, err := e.acme.UpdateGroup(ctx, g.ID, api.UpdateGroupRequest{Min: &three, BudgetPerHour: &budget}, g.Version)
	if err != nil || up.Min != 3 || up.Desired != 3 || up.BudgetPerHour != budget || up.Version != g.Version+1 {
		t.Errorf("update = %+v, %v", up, err)
	}
	code, h, b = e.raw("PATCH", "/v1/groups/"+g.ID, e.acmeToken, strings.NewReader(`{"policies": []}`), map[string]string{"If-Match": `"2"`})
	if code != http.StatusOK || h.Get("ETag") != `"3"` || strings.Contains(string(b), `"policies"`) {
		t.Errorf("PATCH policies []: %d %v %s", code, h, b)
	}

	// Set desired.
	sd, err := e.acme.SetGroupDesired(ctx, g.ID, api.SetDesiredRequest{Desired: 5})
	if err != nil || sd.Desired != 5 || len(sd.Status.Decisions) != 1 {
		t.Errorf("set desired = %+v, %v", sd, err)
	}
	_, err = e.acme.SetGroupDesired(ctx, g.ID, api.SetDesiredRequest{Desired: 4, HonorCooldown: true})
	wantCode(t, err, cloud.Conflict)
	_, err = e.acme.SetGroupDesired(ctx, g.ID, api.SetDesiredRequest{Desired: 7})
	if ce := wantCode(t, err, cloud.Invalid); ce.Details["field"] != "desired" || ce.Details["max"] != float64(6) {
		t.Errorf("desired 7: %+v", ce)
	}

	// Metrics: 204.
	at := e.clock.Now().Add(-time.Minute)
	if err := e.acme.PutMetrics(ctx, api.PutMetricsRequest{GroupID: g.ID, Metrics: []api.MetricPoint{{Name: "queue", Value: 4}, {Name: "queue", Value: 6, At: &at}}}); err != nil {
		t.Errorf("put metrics: %v", err)
	}
	code, _, b = e.raw("POST", "/v1/metrics", e.acmeToken, strings.NewReader(`{"group_id":"`+g.ID+`","metrics":[{"name":"q","value":1}]}`), nil)
	if code != http.StatusNoContent || len(b) != 0 {
		t.Errorf("raw put metrics: %d %s", code, b)
	}
	if n := e.counts().Metrics; n != 3 {
		t.Errorf("%d metric points, want 3", n)
	}

	// Events, paged.
	evs, err := e.acme.GroupEvents(ctx, g.ID, client.EventsOptions{Limit: 2})
	if err != nil || len(evs.Events) != 2 || evs.Next == "" || evs.Events[0].Kind != cloud.EventGroup {
		t.Fatalf("events = %+v, %v", evs, err)
	}
	rest, err := e.acme.GroupEvents(ctx, g.ID, client.EventsOptions{After: evs.Next})
	if err != nil || len(rest.Events) != 2 || rest.Events[1].Kind != cloud.EventGroupScaling || rest.Next != "" {
		t.Errorf("rest = %+v, %v", rest, err)
	}

	// Delete, twice; a deleting group refuses changes.
	del, err := e.acme.DeleteGroup(ctx, g.ID, 0)
	if err != nil || del.State != cloud.GroupDeleting {
		t.Fatalf("delete = %+v, %v", del, err)
	}
	if again, err := e.acme.DeleteGroup(ctx, g.ID, 0); err != nil || again.Version != del.Version {
		t.Errorf("delete again = %+v, %v", again, err)
	}
	_, err = e.acme.UpdateGroup(ctx, g.ID, api.UpdateGroupRequest{Max: &three}, 0)
	wantCode(t, err, cloud.Conflict)
	_, err = e.acme.DeleteGroup(ctx, g.ID, 1)
	wantCode(t, err, cloud.Conflict)
	// The admin sees it.
	if d, err := e.admin.GetGroup(ctx, g.ID); err != nil || d.State != cloud.GroupDeleting {
		t.Errorf("admin describe = %+v, %v", d, err)
	}
}

func detailStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func TestGroupsRejects(t *testing.T) { onBothStores(t, testGroupsRejects) }

// testGroupsRejects: bad input is a 400 naming the field, and writes
// nothing.
func testGroupsRejects(t *testing.T, e *env) {
	ctx := context.Background()
	g, err := e.acme.CreateGroup(ctx, groupRequest("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	in := e.mustCreate(e.acme, "l4.1x")
	before := e.counts()
	for _, tc := range []struct {
		method, path, body, field string
	}{
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":["l4.1x"]},"max":1,"budget_per_hour":"1.2.3"}`, "budget_per_hour"},
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":["h900.1x"]},"max":1}`, "template.offerings[0]"},
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":[]},"max":1}`, "template.offerings"},
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":["l4.1x"],"tags":{"gpucloud:x":"y"}},"max":1}`, "template.tags"},
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":["l4.1x"],"zones":["a b"]},"max":1}`, "template.zones[0]"},
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":["l4.1x"]},"min":3,"max":2}`, "min"},
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":["l4.1x"]},"max":1001}`, "max"},
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":["l4.1x"]},"max":2,"desired":3}`, "desired"},
		{"POST", "/v1/groups", `{"name":"","template":{"offerings":["l4.1x"]},"max":1}`, "name"},
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":["l4.1x"]},"max":1,"policies":[{"type":"target","metric":"gpu_utilization","target":2}]}`, "policies[0].target"},
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":["l4.1x"]},"max":1,"policies":[{"type":"scheduled","cron":"* *","set_desired":1}]}`, "policies[0].cron"},
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":["l4.1x"]},"max":1,"mixed":{"on_demand_percent":50}}`, "mixed.spot"},
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":["l4.1x"]},"max":1,"idle_release":{"threshold":0.1,"idle_seconds":0}}`, "idle_release.idle_seconds"},
		{"POST", "/v1/groups", `{"name":"x","template":{"offerings":["l4.1x"],"sizes":1},"max":1}`, "sizes"},
		{"POST", "/v1/groups?tenant=" + e.globexID, `{"name":"x","tenant":"` + e.acmeID + `","template":{"offerings":["l4.1x"]},"max":1}`, "tenant"},
		{"PATCH", "/v1/groups/" + g.ID, `{"max":0}`, "min"},
		{"PATCH", "/v1/groups/" + g.ID, `{"budget_per_hour":"-1"}`, "budget_per_hour"},
		{"PATCH", "/v1/groups/" + g.ID, `{"template":{"offerings":["l4.1x"],"volume_gib":-5}}`, "template.volume_gib"},
		{"PATCH", "/v1/groups/" + g.ID, `{"name":"renamed"}`, "name"},
		{"POST", "/v1/groups/" + g.ID + "/desired", `{"desired":99}`, "desired"},
		{"POST", "/v1/groups/" + g.ID + "/desired", `{"desired":"2"}`, "desired"},
		{"POST", "/v1/metrics", `{"group_id":"` + g.ID + `","metrics":[{"name":"Queue","value":1}]}`, "metrics[0].name"},
		{"POST", "/v1/metrics", `{"group_id":"` + g.ID + `","metrics":[]}`, "metrics"},
		{"POST", "/v1/metrics", `{"metrics":[{"name":"q","value":1}]}`, "group_id"},
		{"POST", "/v1/metrics", `{"group_id":"` + g.ID + `","metrics":[{"name":"q","value":1,"at":"2000-01-01T00:00:00Z"}]}`, "metrics[0].at"},
		{"POST", "/v1/instances/" + in.ID + "/protection", `{}`, "protected"},
		{"POST", "/v1/instances/" + in.ID + "/protection", `{"protected":"yes"}`, "protected"},
	} {
		code, _, b := e.raw(tc.method, tc.path, e.acmeToken, strings.NewReader(tc.body), nil)
		if code != http.StatusBadRequest {
			t.Errorf("%s %s %s: %d %s", tc.method, tc.path, tc.body, code, b)
			continue
		}
		if eb := decodeErr(t, b); eb.Code != cloud.Invalid || eb.Details["field"] != tc.field {
			t.Errorf("%s %s %s: %s, want the field %s", tc.method, tc.path, tc.body, b, tc.field)
		}
	}
	for _, q := range []string{"state=gone", "tenant=tn-nope"} {
		code, _, b := e.raw("GET", "/v1/groups?"+q, e.acmeToken, nil, nil)
		if code != http.StatusBadRequest && code != http.StatusNotFound {
			t.Errorf("?%s: %d %s", q, code, b)
		}
	}
	code, _, b := e.raw("PATCH", "/v1/groups/"+g.ID, e.acmeToken, strings.NewReader(`{}`), map[string]string{"If-Match": "latest"})
	if code != http.StatusBadRequest {
		t.Errorf("If-Match latest: %d %s", code, b)
	}
	e.unchanged(before, "rejected group requests")
}

func TestGroupsTenancy(t *testing.T) { onBothStores(t, testGroupsTenancy) }

// testGroupsTenancy: another tenant can neither read, list, update,
// delete, resize, publish metrics to nor protect a tenant's groups and
// instances: each answers 404 as a missing one does, and nothing is
// written.
func testGroupsTenancy(t *testing.T, e *env) {
	ctx := context.Background()
	g, err := e.acme.CreateGroup(ctx, groupRequest("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	in := e.mustCreate(e.acme, "l4.1x")
	// Another tenant's member asks with its token.
	intruder := e.Member("initech", "initech-dev")
	before := e.counts()
	for _, id := range []string{g.ID, "asg-0000000000000000"} {
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/groups/" + id, ""},
			{"PATCH", "/v1/groups/" + id, `{"max":9}`},
			{"DELETE", "/v1/groups/" + id, ""},
			{"POST", "/v1/groups/" + id + "/desired", `{"desired":3}`},
			{"GET", "/v1/groups/" + id + "/events", ""},
			{"GET", "/v1/groups/" + id + "/forecast", ""},
			{"POST", "/v1/metrics", `{"group_id":"` + id + `","metrics":[{"name":"q","value":1}]}`},
		} {
			var body *strings.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			var code int
			var b []byte
			if body != nil {
				code, _, b = e.raw(c.method, c.path, intruder.Token, body, nil)
			} else {
				code, _, b = e.raw(c.method, c.path, intruder.Token, nil, nil)
			}
			if eb := decodeErr(t, b); code != http.StatusNotFound || eb.Message != `group "`+id+`" not found` {
				t.Errorf("another tenant's %s %s: %d %s", c.method, c.path, code, b)
			}
		}
	}
	for _, id := range []string{in.ID, "i-0000000000000000"} {
		code, _, b := e.raw("POST", "/v1/instances/"+id+"/protection", intruder.Token, strings.NewReader(`{"protected":true}`), nil)
		if eb := decodeErr(t, b); code != http.StatusNotFound || eb.Message != `instance "`+id+`" not found` {
			t.Errorf("another tenant protects %s: %d %s", id, code, b)
		}
	}
	// The owner is told why there is no forecast yet: unavailable, as it comes with time.
	_, err = e.acme.GroupForecast(ctx, g.ID)
	wantCode(t, err, cloud.Unavailable)
	if gs, err := intruder.Client.Groups(ctx, ""); err != nil || len(gs) != 0 {
		t.Errorf("initech lists %v, %v", gs, err)
	}
	_, err = intruder.Client.Groups(ctx, e.acmeID)
	wantCode(t, err, cloud.NotFound)
	// Creating in another tenant is not_found too.
	req := groupRequest("x")
	req.Tenant = e.acmeID
	_, err = intruder.Client.CreateGroup(ctx, req, "")
	wantCode(t, err, cloud.NotFound)
	e.unchanged(before, "another tenant's requests")
	// The admin may create for a tenant.
	if ag, err := e.admin.CreateGroup(ctx, req, ""); err != nil || ag.TenantID != e.acmeID {
		t.Errorf("admin create for acme = %+v, %v", ag, err)
	}
}
