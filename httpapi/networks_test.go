package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestNetworksRoutes covers every network route through the Go client,
// with the statuses, Location and ETag of the raw answers, on both stores.
func TestNetworksRoutes(t *testing.T) {
	onBothStores(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		before := e.counts()
		for _, req := range []api.CreateNetworkRequest{{Name: "main"}, {Name: "main", CIDR: "10.0.0.0/8"}, {Name: "Main", CIDR: "10.0.0.0/16"}} {
			_, err := e.acme.CreateNetwork(ctx, req, "")
			wantCode(t, err, cloud.Invalid)
		}
		e.unchanged(before, "bad networks")

		code, hdr, body := e.raw("POST", "/v1/networks", e.acmeToken, strings.NewReader(`{"name":"main","cidr":"10.0.0.0/16"}`),
			map[string]string{"Idempotency-Key": "n-1"})
		var n cloud.Network
		if err := json.Unmarshal(body, &n); err != nil || code != http.StatusCreated || hdr.Get("Location") != "/v1/networks/"+n.ID ||
			!strings.HasPrefix(n.ID, "vpc-") {
			t.Fatalf("create: %d %v %s", code, hdr, body)
		}
		if code, _, body := e.raw("POST", "/v1/networks", e.acmeToken, strings.NewReader(`{"name":"main","cidr":"10.0.0.0/16"}`),
			map[string]string{"Idempotency-Key": "n-1"}); code != http.StatusOK || !strings.Contains(string(body), n.ID) {
			t.Errorf("retry: %d %s", code, body)
		}
		s, err := e.acme.CreateSubnet(ctx, api.CreateSubnetRequest{Network: n.ID, Name: "a", CIDR: "10.0.1.0/24", Zone: "zone-a"}, "")
		if err != nil {
			t.Fatal(err)
		}
		g, err := e.acme.CreateSecurityGroup(ctx, api.CreateSecurityGroupRequest{Network: n.ID, Name: "web"}, "")
		if err != nil {
			t.Fatal(err)
		}
		code, hdr, _ = e.raw("GET", "/v1/security-groups/"+g.ID, e.acmeToken, nil, nil)
		if code != http.StatusOK || hdr.Get("ETag") != api.ETag(g.Version) {
			t.Errorf("get group: %d ETag %q", code, hdr.Get("ETag"))
		}
		rule := api.AuthorizeRequest{Direction: api.Ingress, Protocol: "tcp", FromPort: 22, ToPort: 22, CIDR: "0.0.0.0/0"}
		g2, err := e.acme.Authorize(ctx, g.ID, rule, g.Version)
		if err != nil || len(g2.Ingress) != 1 || g2.Version != g.Version+1 {
			t.Fatalf("authorize: %+v %v", g2, err)
		}
		_, err = e.acme.Authorize(ctx, g.ID, api.AuthorizeRequest{Direction: api.Ingress, Protocol: "udp", FromPort: 53, ToPort: 53, CIDR: "0.0.0.0/0"}, g.Version)
		wantCode(t, err, cloud.Conflict) // a stale If-Match
		code, _, _ = e.raw("POST", "/v1/security-groups/"+g.ID+"/authorize", e.acmeToken, strings.NewReader(`{"direction":"ingress"}`), map[string]string{"If-Match": "x"})
		if code != http.StatusBadRequest {
			t.Errorf("a bad If-Match: %d", code)
		}

		// Lists, with ?network.
		if ns, err := e.acme.Networks(ctx, ""); err != nil || len(ns) != 2 { // main and the default network
			t.Errorf("networks: %+v %v", ns, err)
		}
		if subs, err := e.acme.Subnets(ctx, "", n.ID); err != nil || len(subs) != 1 || subs[0].ID != s.ID {
			t.Errorf("subnets: %+v %v", subs, err)
		}
		if gs, err := e.acme.SecurityGroups(ctx, "", n.ID); err != nil || len(gs) != 2 {
			t.Errorf("groups: %+v %v", gs, err)
		}

		// An instance in the subnet with the group; deletes are refused
		// while it lives.
		in, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Subnet: s.ID, SecurityGroups: []string{g.ID}}, "")
		if err != nil || in.SubnetID != s.ID || in.PrivateAddress != "10.0.1.4" || in.Zones[0] != "zone-a" {
			t.Fatalf("instance: %+v %v", in, err)
		}
		for _, path := range []string{"/v1/networks/" + n.ID, "/v1/subnets/" + s.ID, "/v1/security-groups/" + g.ID} {
			code, _, body := e.raw("DELETE", path, e.acmeToken, nil, nil)
			if eb := decodeErr(t, body); code != http.StatusConflict || !strings.Contains(eb.Message, in.ID) {
				t.Errorf("DELETE %s: %d %s", path, code, body)
			}
		}
		g3, err := e.acme.Revoke(ctx, g.ID, api.RevokeRequest{RuleID: g2.Ingress[0].ID}, 0)
		if err != nil || len(g3.Ingress) != 0 {
			t.Errorf("revoke: %+v %v", g3, err)
		}
		if _, err := e.acme.TerminateInstance(ctx, in.ID, 0); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/v1/security-groups/" + g.ID, "/v1/subnets/" + s.ID, "/v1/networks/" + n.ID} {
			if code, _, body := e.raw("DELETE", path, e.acmeToken, nil, nil); code != http.StatusNoContent {
				t.Errorf("DELETE %s: %d %s", path, code, body)
			}
		}
		_, err = e.acme.GetNetwork(ctx, n.ID)
		wantCode(t, err, cloud.NotFound)
	})
}

// TestNetworksTenancy: another tenant gets not_found from every route of
// a network, subnet and group, lists none of them, and cannot put an
// instance in them.
func TestNetworksTenancy(t *testing.T) {
	onBothStores(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		n, err := e.acme.CreateNetwork(ctx, api.CreateNetworkRequest{Name: "main", CIDR: "10.0.0.0/16"}, "")
		if err != nil {
			t.Fatal(err)
		}
		s, err := e.acme.CreateSubnet(ctx, api.CreateSubnetRequest{Network: n.ID, Name: "a", CIDR: "10.0.1.0/24", Zone: "z"}, "")
		if err != nil {
			t.Fatal(err)
		}
		g, err := e.acme.CreateSecurityGroup(ctx, api.CreateSecurityGroupRequest{Network: n.ID, Name: "web"}, "")
		if err != nil {
			t.Fatal(err)
		}
		// A third tenant's member, made before the snapshot.
		tok := e.Member("initech", "initech-dev").Token
		before := e.counts()
		rule := `{"direction":"ingress","protocol":"tcp","from_port":22,"to_port":22,"cidr":"0.0.0.0/0"}`
		for _, tc := range []struct{ method, path, body string }{
			{"GET", "/v1/networks/" + n.ID, ""},
			{"DELETE", "/v1/networks/" + n.ID, ""},
			{"GET", "/v1/subnets/" + s.ID, ""},
			{"DELETE", "/v1/subnets/" + s.ID, ""},
			{"GET", "/v1/subnets?network=" + n.ID, ""},
			{"GET", "/v1/security-groups/" + g.ID, ""},
			{"DELETE", "/v1/security-groups/" + g.ID, ""},
			{"GET", "/v1/security-groups?network=" + n.ID, ""},
			{"POST", "/v1/security-groups/" + g.ID + "/authorize", rule},
			{"POST", "/v1/security-groups/" + g.ID + "/revoke", `{"rule_id":"` + g.Egress[0].ID + `"}`},
			{"POST", "/v1/subnets", `{"network":"` + n.ID + `","name":"x","cidr":"10.0.2.0/24","zone":"z"}`},
			{"POST", "/v1/security-groups", `{"network":"` + n.ID + `","name":"x"}`},
			{"POST", "/v1/instances", `{"offering":"l4.1x","subnet":"` + s.ID + `"}`},
			{"POST", "/v1/instances", `{"offering":"l4.1x","subnet":"` + s.ID + `","security_groups":["` + g.ID + `"]}`},
		} {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			code, _, b := e.raw(tc.method, tc.path, tok, body, nil)
			if code != http.StatusNotFound || decodeErr(t, b).Code != cloud.NotFound {
				t.Errorf("%s %s: %d %s", tc.method, tc.path, code, b)
			}
		}
		e.unchanged(before, "another tenant's tries")
		for _, list := range []func() (int, error){
			func() (int, error) { v, err := e.globex.Subnets(ctx, "", ""); return len(v), err },
			func() (int, error) {
				v, err := e.globex.SecurityGroups(ctx, "", "")
				for _, x := range v {
					if x.ID == g.ID {
						return -1, nil
					}
				}
				return 0, err
			},
		} {
			if got, err := list(); err != nil || got < 0 {
				t.Errorf("globex's list shows acme's: %d %v", got, err)
			}
		}
		// An admin reads acme's.
		if _, err := e.admin.GetSecurityGroup(ctx, g.ID); err != nil {
			t.Errorf("admin: %v", err)
		}
	})
}
