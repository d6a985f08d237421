package httpapi

// Fuzz targets for the /v1 request bodies (go test -fuzz; .ci/fuzz.sh runs
// each for a few seconds). FuzzDecodeBody drives the one decoder every
// JSON body goes through; FuzzAPIBody sends bodies to the real handler of
// every /v1 route that takes one, over an in-memory store, and checks what
// came of them. FuzzAgentProtocol (agent_fuzz_test.go) does the same for
// the agent's routes. TestFuzzRoutesCoverBodies keeps the route lists
// below complete.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stack"
	"github.com/gpucloud/gpucloud/store/sqlite"
	"github.com/gpucloud/gpucloud/testkit"
)

// bodyRoute is a route whose handler decodes a request body, as the fuzz
// targets send to it.
type bodyRoute struct {
	method string
	// path is the route's pattern; fill replaces its {id} with the
	// fixture's resource of the right kind.
	path string
	// admin: the route is admin-only; the others are sent with the
	// member's token or, when the input says so, the admin's.
	admin bool
	// optional: an empty body is allowed (decodeOptionalBody).
	optional bool
	// money names the amount field of a route that decodes with
	// decodeMoneyBody.
	money string
	// newReq returns a pointer to a fresh request value of the route.
	newReq func() any
	// check is the service's validation of a decoded request that needs
	// no store (service.Check...), nil where there is none. A request it
	// refuses must never be accepted.
	check func(cat *catalog.Catalog, req any) error
	// seeds are request bodies taken from the tests and docs.
	seeds []string
}

func newOf[T any]() func() any { return func() any { return new(T) } }

// apiFuzzRoutes lists every /v1 route outside the agent protocol whose
// handler decodes a JSON body.
var apiFuzzRoutes = []bodyRoute{
	{method: "POST", path: "/v1/tenants", admin: true, newReq: newOf[api.CreateTenantRequest](),
		seeds: []string{`{"name":"initech"}`, `{"name":""}`, `{"name":"a b"}`}},
	{method: "POST", path: "/v1/tenants/{id}/users", admin: true, newReq: newOf[api.CreateUserRequest](),
		seeds: []string{`{"name":"dev2"}`, `{"name":"ops","role":"admin"}`, `{"name":"x","role":"agent"}`}},
	{method: "PUT", path: "/v1/tenants/{id}/quota", admin: true, newReq: newOf[api.QuotaSpec](),
		check: func(cat *catalog.Catalog, req any) error {
			_, err := service.CheckQuotaSpec(cat, *req.(*api.QuotaSpec))
			return err
		},
		seeds: []string{`{"instances":10,"gpus":{"H100":8}}`, `{"gpus":{"h100":1,"H100-80GB-SXM":2}}`, `{"instances":-1}`, `{"gpus":{"H100":1e400}}`}},
	{method: "POST", path: "/v1/tokens", optional: true, newReq: newOf[api.CreateTokenRequest](),
		seeds: []string{``, `{"name":"ci"}`, `{"name":"ci","expires_at":"2025-04-01T00:00:00Z"}`, `{"expires_at":"2020-01-01T00:00:00Z"}`}},
	{method: "POST", path: "/v1/keys", newReq: newOf[api.ImportKeyRequest](),
		check: func(cat *catalog.Catalog, req any) error {
			_, err := service.ParseKey("public_key", req.(*api.ImportKeyRequest).PublicKey)
			return err
		},
		seeds: []string{`{"public_key":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHq3X1V7Xh6mWlq5gU2m9jXqj0uJ0x7bLrJ4bYwq3nPq me@laptop"}`,
			`{"public_key":"ssh-dss AAAA"}`, `{"public_key":"-----BEGIN OPENSSH PRIVATE KEY-----"}`, `{"name":"a b","public_key":"x"}`}},
	{method: "POST", path: "/v1/placement-groups", newReq: newOf[api.CreatePlacementGroupRequest](),
		check: func(cat *catalog.Catalog, req any) error {
			spec := *req.(*api.CreatePlacementGroupRequest)
			return service.CheckPlacementGroupSpec(&spec)
		},
		seeds: []string{`{"name":"train","strategy":"cluster"}`, `{"name":"web","strategy":"spread","by_rack":true,"tags":{"a":"b"}}`,
			`{"name":"x","strategy":"near"}`, `{"name":"x","strategy":"cluster","by_rack":true}`, `{"name":"x","strategy":"spread","tags":{"gpucloud:stack":"s"}}`}},
	{method: "POST", path: "/v1/networks", newReq: newOf[api.CreateNetworkRequest](),
		check: func(_ *catalog.Catalog, req any) error {
			spec := *req.(*api.CreateNetworkRequest)
			return service.CheckNetworkSpec(&spec)
		},
		seeds: []string{`{"name":"train","cidr":"10.1.0.0/16"}`, `{"name":"x","cidr":"10.0.0.1/16"}`, `{"name":"Bad","cidr":"10.2.0.0/16"}`,
			`{"name":"big","cidr":"10.0.0.0/8"}`, `{"name":"v6","cidr":"fd00::/64"}`}},
	{method: "POST", path: "/v1/subnets", newReq: newOf[api.CreateSubnetRequest](),
		check: func(_ *catalog.Catalog, req any) error {
			spec := *req.(*api.CreateSubnetRequest)
			return service.CheckSubnetSpec(&spec)
		},
		seeds: []string{`{"network":"{network}","name":"a","cidr":"10.0.1.0/24","zone":"` + fleet.MockZone + `"}`,
			`{"network":"{network}","name":"b","cidr":"10.1.0.0/24","zone":"z"}`, `{"network":"vpc-none","name":"c","cidr":"10.0.2.0/24","zone":"z"}`,
			`{"network":"{network}","name":"d","cidr":"10.0.3.0/29","zone":"z"}`}},
	{method: "POST", path: "/v1/security-groups", newReq: newOf[api.CreateSecurityGroupRequest](),
		check: func(_ *catalog.Catalog, req any) error {
			spec := *req.(*api.CreateSecurityGroupRequest)
			return service.CheckSecurityGroupSpec(&spec)
		},
		seeds: []string{`{"network":"{network}","name":"db","description":"postgres"}`, `{"network":"{network}","name":""}`, `{"name":"x"}`}},
	{method: "POST", path: "/v1/security-groups/{id}/authorize", newReq: newOf[api.AuthorizeRequest](),
		seeds: []string{`{"direction":"ingress","protocol":"tcp","from_port":22,"to_port":22,"cidr":"0.0.0.0/0"}`,
			`{"direction":"egress","protocol":"all","group":"{id}"}`, `{"direction":"ingress","protocol":"udp","from_port":0,"cidr":"10.0.0.0/8"}`,
			`{"direction":"up","protocol":"tcp"}`, `{"direction":"ingress","protocol":"icmp","cidr":"10.0.0.1/8"}`}},
	{method: "POST", path: "/v1/security-groups/{id}/revoke", newReq: newOf[api.RevokeRequest](),
		seeds: []string{`{"rule_id":"sgr-none"}`, `{"direction":"egress","protocol":"all","cidr":"0.0.0.0/0"}`, `{"direction":"ingress"}`}},
	{method: "POST", path: "/v1/instances", newReq: newOf[api.CreateInstanceRequest](),
		check: func(cat *catalog.Catalog, req any) error {
			spec := *req.(*api.CreateInstanceRequest)
			_, err := service.CheckInstanceSpec(cat, &spec)
			return err
		},
		seeds: []string{
			`{"offering":"h100.mig.3g.40gb","command":["sh","-c","echo $CUDA_VISIBLE_DEVICES; sleep 600"]}`,
			`{"name":"train-1","offering":"h100.1x","zones":["zone-a"],"labels":["driver>=550","!maintenance"],"command":["python","train.py"],"env":{"HF_TOKEN":"x"},"tags":{"team":"ml"}}`,
			`{"offering":"l4.1x","volumes":["v-1","v-1"]}`,
			`{"offering":"l4.1x","subnet":"subnet-none"}`,
			`{"offering":"l4.1x","security_groups":["sg-a","sg-a"]}`,
			`{"offering":"nope"}`,
			`{"offering":"l4.1x","env":{"A=B":"1"}}`,
			`{"offering":"l4.1x","labels":["=="]}`,
			`{"offering":"l4.1x","tenant":"someone-else"}`,
			`{"offering":"l4.1x","command":["a\u0000b"]}`,
			`{"offering":"l4.1x"} {"offering":"l4.1x"}`,
			`{"offering":"l4.1x","unknown":1}`,
			`{"offering":7}`,
			`[]`, `null`, `{`,
		}},
	{method: "POST", path: "/v1/instances/{id}/protection", newReq: newOf[api.ProtectRequest](),
		seeds: []string{`{"protected":true}`, `{"protected":false}`, `{}`}},
	{method: "POST", path: "/v1/volumes", newReq: newOf[api.CreateVolumeRequest](),
		check: func(_ *catalog.Catalog, req any) error {
			spec := *req.(*api.CreateVolumeRequest)
			return service.CheckVolumeSpec(&spec)
		},
		seeds: []string{`{"name":"ckpt","size_gib":50,"zone":"local-a"}`, `{"name":"ckpt","size_gib":0}`, `{"name":"ckpt","size_gib":99999999999}`, `{"name":"-x","size_gib":1}`}},
	{method: "POST", path: "/v1/volumes/{id}/attach", newReq: newOf[api.AttachVolumeRequest](),
		seeds: []string{`{"instance_id":"i-missing"}`, `{"instance_id":""}`}},
	{method: "POST", path: "/v1/prices", admin: true, money: "amount", newReq: newOf[api.SetPriceRequest](),
		seeds: []string{`{"kind":"compute","offering":"h100.1x","zone":"zone-a","amount":"2.50"}`, `{"kind":"storage","amount":"0.10"}`,
			`{"offering":"h100.1x","amount":"1.1234567"}`, `{"offering":"h100.1x","amount":-1}`, `{"offering":"h100.1x","amount":"2","effective_at":"2024-01-01T00:00:00Z"}`,
			// A time in range in its zone but after year 9999 in UTC once
			// made every price unreadable.
			`{"offering":"h100.1x","amount":"2","effective_at":"9999-12-31T23:59:59-23:59"}`}},
	{method: "POST", path: "/v1/commitments", newReq: newOf[api.CreateCommitmentRequest](),
		seeds: []string{`{"plan":"reservation","offering":"h100.8x","zone":"zone-a","quantity":2,"term":"1y","payment":"all_upfront"}`,
			`{"plan":"retainer","offering":"h100","quantity":1,"term":"720h"}`, `{"plan":"reservation","offering":"h100.1x","quantity":1,"term":"1y","discount_pct":"12.5"}`,
			`{"plan":"reservation","offering":"h100.1x","quantity":1,"term":"1y","start":"9999-12-31T23:59:59-23:59"}`}},
	{method: "POST", path: "/v1/spot/requests", money: "max_price", newReq: newOf[api.CreateSpotRequestRequest](),
		check: func(cat *catalog.Catalog, req any) error {
			r := req.(*api.CreateSpotRequestRequest)
			pools := slices.Clone(r.Pools)
			spec := api.CreateSpotRequestRequest{Tenant: r.Tenant, Name: r.Name, Type: r.Type, MaxPrice: r.MaxPrice,
				Interruption: r.Interruption, Pools: pools, Command: r.Command, Env: r.Env, Volumes: r.Volumes, Tags: r.Tags}
			return service.CheckSpotRequestSpec(cat, &spec)
		},
		seeds: []string{`{"name":"train","type":"persistent","max_price":"3.00","interruption":"stop","pools":[{"offering":"l4.1x","zone":"zone-a"},{"offering":"l40s.1x","zone":"zone-b"}],"command":["python","train.py"],"env":{"A":"1"},"tags":{"team":"ml"}}`,
			`{"pools":[{"offering":"l4.1x","zone":"zone-c"}]}`, `{"pools":[]}`, `{"pools":[{"offering":"l4.1x"}],"max_price":"0"}`, `{"pools":[{"offering":"l4.1x"}],"max_price":"x"}`}},
	{method: "POST", path: "/v1/groups", money: "budget_per_hour", newReq: newOf[api.CreateGroupRequest](),
		check: func(cat *catalog.Catalog, req any) error {
			var r api.CreateGroupRequest
			if err := cloneJSON(req, &r); err != nil {
				return err
			}
			spec := api.CreateGroupRequest{Tenant: r.Tenant, Name: r.Name, Template: r.Template, Min: r.Min, Max: r.Max,
				Desired: r.Desired, Policies: r.Policies, Mixed: r.Mixed, Timing: r.Timing, BudgetPerHour: r.BudgetPerHour,
				IdleRelease: r.IdleRelease}
			return service.CheckGroupSpec(cat, &spec)
		},
		seeds: []string{fuzzGroupBody("web"),
			`{"name":"g","template":{"offerings":["l4.1x"]},"min":0,"max":2}`,
			`{"name":"g","template":{"offerings":["l4.1x"]},"min":3,"max":2}`,
			`{"name":"g","template":{"offerings":["l4.1x"]},"min":0,"max":2,"policies":[{"type":"target","metric":"gpu_utilization","target":7}]}`,
			`{"name":"g","template":{"offerings":["l4.1x"]},"min":0,"max":2,"budget_per_hour":"-1"}`}},
	{method: "PATCH", path: "/v1/groups/{id}", money: "budget_per_hour", newReq: newOf[api.UpdateGroupRequest](),
		seeds: []string{`{"max":8}`, `{"min":5,"max":1}`, `{"desired":3}`, `{"budget_per_hour":"1.25"}`, `{"template":{"offerings":[]}}`, `{"policies":[]}`}},
	{method: "POST", path: "/v1/groups/{id}/desired", newReq: newOf[api.SetDesiredRequest](),
		seeds: []string{`{"desired":2}`, `{"desired":-1}`, `{"desired":3,"honor_cooldown":true}`}},
	{method: "POST", path: "/v1/metrics", newReq: newOf[api.PutMetricsRequest](),
		seeds: []string{`{"group_id":"{id}","metrics":[{"name":"queue_depth","value":12}]}`,
			`{"group_id":"{id}","metrics":[{"name":"queue_depth","value":1,"at":"2025-03-01T11:59:00Z"}]}`,
			`{"group_id":"{id}","metrics":[{"name":"","value":1}]}`, `{"group_id":"g-none","metrics":[]}`}},
	{method: "PUT", path: "/v1/budget", money: "amount", newReq: newOf[api.BudgetSpec](),
		seeds: []string{`{"amount":"1000.00","thresholds":[50,90,100]}`, `{"amount":"0"}`, `{"amount":"10","thresholds":[101]}`}},
	{method: "POST", path: "/v1/addresses", newReq: newOf[api.AllocateAddressRequest](),
		seeds: []string{`{}`, `{"zone":"zone-a"}`, `{"instance_id":"{instance}"}`, `{"instance_id":"i-none"}`}},
	{method: "POST", path: "/v1/addresses/{id}/associate", newReq: newOf[api.AssociateAddressRequest](),
		seeds: []string{`{"instance_id":"{instance}"}`, `{"instance_id":""}`}},
	{method: "POST", path: "/v1/join-tokens", admin: true, newReq: newOf[api.CreateJoinTokenRequest](),
		seeds: []string{`{"name":"rack-1"}`, `{"name":"rack-1","expires_at":"2025-03-02T12:00:00Z"}`, `{"name":""}`}},
	{method: "POST", path: "/v1/stacks/plan", newReq: newOf[api.StackRequest](),
		check: func(_ *catalog.Catalog, req any) error {
			r := req.(*api.StackRequest)
			return checkStackTemplate(r.Template, r.Parameters)
		},
		seeds: fuzzStackSeeds(`"name":"train",`)},
	{method: "PUT", path: "/v1/stacks/{name}", newReq: newOf[api.ApplyStackRequest](),
		check: func(_ *catalog.Catalog, req any) error {
			r := req.(*api.ApplyStackRequest)
			return checkStackTemplate(r.Template, r.Parameters)
		},
		seeds: append(fuzzStackSeeds(`"keep_on_failure":true,`), `{"template":"resources: {}"}`)},
	// Serverless endpoints. run and runsync decode with a limit of their
	// own (service.MaxJobInput and a margin), as the stack routes do; the
	// fuzzer's bodies stay under both.
	{method: "POST", path: "/v1/endpoints", newReq: newOf[api.CreateEndpointRequest](),
		check: func(cat *catalog.Catalog, req any) error {
			var r api.CreateEndpointRequest
			if err := cloneJSON(req, &r); err != nil {
				return err
			}
			return service.CheckEndpointSpec(cat, &r.EndpointSpec)
		},
		seeds: []string{fuzzEndpointBody("chat"),
			`{"name":"e","image":"ghcr.io/acme/echo:1","offerings":["l4.1x"]}`,
			`{"name":"e","image":"ghcr.io/acme/echo:1","offerings":[]}`,
			`{"name":"e","image":"ghcr.io/acme/echo:1","offerings":["l4.1x"],"mode":"batch"}`,
			`{"name":"e","image":"ghcr.io/acme/echo:1","offerings":["l4.1x"],"min":3,"max":2}`,
			`{"name":"ep-x","image":"ghcr.io/acme/echo:1","offerings":["l4.1x"]}`}},
	{method: "PATCH", path: "/v1/endpoints/{id}", newReq: newOf[api.UpdateEndpointRequest](),
		seeds: []string{`{"max":8}`, `{"image":"ghcr.io/acme/echo:2","env":{"A":"1"}}`, `{"max":0}`, `{"offerings":[]}`, `{"idle_timeout_seconds":-1}`}},
	{method: "POST", path: "/v1/endpoints/{id}/run", newReq: newOf[api.RunJobRequest](),
		seeds: []string{`{"input":{"prompt":"hi"}}`, `{}`, `{"input":[1,2,3]}`, `{"input":null}`}},
	{method: "POST", path: "/v1/endpoints/{id}/runsync", newReq: newOf[api.RunJobRequest](),
		seeds: []string{`{"input":{"prompt":"hi"}}`, `{"input":"x"}`}},
	{method: "POST", path: "/v1/endpoints/{id}/keys", newReq: newOf[api.CreateEndpointKeyRequest](),
		seeds: []string{`{"name":"app"}`, `{"name":"app","rate":10,"burst":20}`, `{"name":""}`, `{"name":"x","rate":0,"burst":-1}`, `{"name":"x","rate":1001}`}},
}

// fuzzEndpointBody is a valid endpoint request of most fields.
func fuzzEndpointBody(name string) string {
	return `{"name":"` + name + `","image":"ghcr.io/acme/llm:1","command":["python","serve.py"],"env":{"MODEL":"x"},` +
		`"offerings":["l4.1x","l40s.1x"],"port":9000,"health_path":"/ready","mode":"http","min":0,"max":4,"concurrency":2,` +
		`"idle_timeout_seconds":60,"timeout_seconds":120,"retries":1,"retention_seconds":3600,"queue_wait_seconds":10,"spot":true,"zones":["zone-a"]}`
}

// fuzzStackSeeds are stack bodies (plan or apply), each starting with
// extra: a volume, a template that binds only with its parameter, a
// syntax error, a reference cycle and bad parameters.
func fuzzStackSeeds(extra string) []string {
	vol := `resources:\n  ckpt:\n    type: volume\n    properties: {name: ckpt, size_gib: ${param.size}}\n`
	sized := `"template":"parameters:\n  size: {type: integer, default: 10, min: 1, max: 100}\n` + vol + `"`
	return []string{
		`{` + extra + sized + `}`,
		`{` + extra + sized + `,"parameters":{"size":"20"}}`,
		`{` + extra + sized + `,"parameters":{"size":"x"}}`,
		`{` + extra + sized + `,"parameters":{"nope":"1"}}`,
		`{` + extra + `"template":"resources:\n  a: [\n"}`,
		`{` + extra + `"template":"resources:\n  a: {type: volume, properties: {name: '${b.id}', size_gib: 1}}\n  b: {type: volume, properties: {name: '${a.id}', size_gib: 1}}\n"}`,
		`{` + extra + `"template":"{\"resources\":{\"ip\":{\"type\":\"address\",\"properties\":{}}}}"}`,
	}
}

// checkStackTemplate is what the stack service checks of a plan or an
// apply before anything else: the template parses and binds.
func checkStackTemplate(src string, params map[string]string) error {
	t, err := stack.Parse([]byte(src))
	if err != nil {
		return err
	}
	_, err = t.Bind(params)
	return err
}

// fuzzGroupBody is a valid group request of most features.
func fuzzGroupBody(name string) string {
	return `{"name":"` + name + `","template":{"offerings":["l4.1x","l40s.1x"],"command":["python","serve.py"],` +
		`"env":{"PORT":"8080"},"zones":["zone-a"],"tags":{"team":"web"}},"min":1,"max":6,"desired":2,` +
		`"policies":[{"type":"target","metric":"gpu_utilization","target":0.6}],"mixed":{"spot":true,"on_demand_base":1},` +
		`"timing":{"cooldown_seconds":60},"budget_per_hour":"12.50","idle_release":{"threshold":0.1,"idle_seconds":1800}}`
}

// cloneJSON copies src into dst through JSON, so that a check that
// normalizes its argument cannot change the decoded request.
func cloneJSON(src, dst any) error {
	b, err := json.Marshal(src)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, dst)
}

// bodylessRoutes are the POST, PUT and PATCH routes whose handlers read
// no body: a new route that reads one belongs in apiFuzzRoutes or
// agentFuzzRoutes instead.
var bodylessRoutes = []string{
	"POST /v1/instances/{id}/stop", "POST /v1/instances/{id}/start", "POST /v1/instances/{id}/terminate",
	"POST /v1/volumes/{id}/detach", "POST /v1/spot/requests/{id}/cancel", "POST /v1/addresses/{id}/disassociate",
	"POST /v1/hosts/{id}/cordon", "POST /v1/hosts/{id}/uncordon", "POST /v1/hosts/{id}/drain", "POST /v1/hosts/{id}/remove",
	// The published-port proxy passes the body to the workload unread,
	// and so does the HTTP mode's proxy of an endpoint.
	"POST " + portsPath, "PUT " + portsPath, "PATCH " + portsPath, "OPTIONS " + portsPath,
	"POST " + endpointHTTPPath, "PUT " + endpointHTTPPath, "PATCH " + endpointHTTPPath, "OPTIONS " + endpointHTTPPath,
	"POST /v1/endpoints/{id}/cancel/{job}",
	"POST /v1/instances/{id}/files/grant", "POST /v1/volumes/{id}/files/grant", "POST /v1/instances/{id}/port-forward/grant",
}

// TestFuzzRoutesCoverBodies checks that every route that may take a body
// is fuzzed, so that no /v1 body escapes FuzzAPIBody and FuzzAgentProtocol.
func TestFuzzRoutesCoverBodies(t *testing.T) {
	fuzzed := map[string]bool{}
	for _, rt := range slices.Concat(apiFuzzRoutes, agentFuzzRoutes) {
		fuzzed[rt.method+" "+rt.path] = true
	}
	for _, rt := range routeTable {
		key := rt.Method + " " + rt.Path
		if rt.Method == "GET" || rt.Method == "DELETE" || slices.Contains(bodylessRoutes, key) {
			delete(fuzzed, key)
			continue
		}
		if !fuzzed[key] {
			t.Errorf("%s may take a body but no fuzz target sends one: add it to apiFuzzRoutes or agentFuzzRoutes (or to bodylessRoutes if its handler reads none)", key)
		}
		delete(fuzzed, key)
	}
	for key := range fuzzed {
		t.Errorf("fuzz route %s is not in the route table", key)
	}
}

// fuzzContentTypes seed the Content-Type the targets send.
var fuzzContentTypes = []string{"application/json", "application/json; charset=utf-8", "application/json;charset=UTF-8", "application/json; charset=iso-8859-1", "text/plain", "", "application/json; charset"}

// FuzzDecodeBody drives decodeBody (and decodeOptionalBody and
// decodeMoneyBody, as each route's handler does) with every
// request type of the API and the agent protocol. A refusal is a
// *cloud.Error with code invalid_argument (answered 400, 413 or 415, with
// the API's error shape); an acceptance is one valid JSON value in UTF-8
// (no byte order mark, no other charset), sent as application/json, is
// never looser than encoding/json's strict decoding of the same bytes, and
// re-encodes to JSON that decodes again to the same request (what a
// client that echoes a request back, or the server that stores it, sees).
func FuzzDecodeBody(f *testing.F) {
	routes := slices.Concat(apiFuzzRoutes, agentFuzzRoutes)
	for i, rt := range routes {
		for _, s := range rt.seeds {
			f.Add(uint8(i), "application/json", []byte(s))
		}
	}
	for i, ct := range fuzzContentTypes {
		f.Add(uint8(i), ct, []byte(`{"name":"x"}`))
	}
	f.Add(uint8(0), "application/json", []byte("{\"name\":\"\xff\"}"))
	f.Add(uint8(0), "application/json", []byte(`{"name":"x"}  `+"\n"))
	f.Add(uint8(0), "application/json", []byte(`{"name":"x"}x`))
	f.Add(uint8(0), "application/json", []byte(`"x"`))
	f.Fuzz(func(t *testing.T, route uint8, ctype string, body []byte) {
		rt := routes[int(route)%len(routes)]
		if rt.newReq == nil { // the raw log route
			return
		}
		v := rt.newReq()
		err := decodeFuzzBody(rt, ctype, body, v)
		if err != nil {
			checkDecodeRefusal(t, err)
			return
		}
		if rt.optional && len(body) == 0 {
			return
		}
		if mt, _, err := mime.ParseMediaType(ctype); err != nil || mt != "application/json" {
			t.Fatalf("accepted Content-Type %q", ctype)
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body that is not one JSON value: %q", body)
		}
		if !utf8.Valid(body) || bytes.HasPrefix(body, []byte("\uFEFF")) {
			t.Fatalf("accepted a body that is not UTF-8 JSON: %q", body)
		}
		if _, params, _ := mime.ParseMediaType(ctype); params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8") {
			t.Fatalf("accepted a body in charset %q", params["charset"])
		}
		strict := json.NewDecoder(bytes.NewReader(body))
		strict.DisallowUnknownFields()
		if err := strict.Decode(rt.newReq()); err != nil {
			t.Fatalf("accepted %q, which strict encoding/json refuses: %v", body, err)
		}
		// Re-encoding is a fixed point: what the server echoes or stores
		// decodes back to the same request.
		first, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("accepted %q, whose request does not encode: %v", body, err)
		}
		again := rt.newReq()
		if err := decodeFuzzBody(rt, "application/json", first, again); err != nil {
			t.Fatalf("accepted %q, but not its own encoding %s: %v", body, first, err)
		}
		second, err := json.Marshal(again)
		if err != nil || !bytes.Equal(first, second) {
			t.Fatalf("request %q encodes as %s, which decodes and encodes as %s (%v)", body, first, second, err)
		}
	})
}

// decodeFuzzBody decodes body, sent with Content-Type ctype, into v as
// rt's handler does.
func decodeFuzzBody(rt bodyRoute, ctype string, body []byte, v any) error {
	r := httptest.NewRequest(rt.method, "/", bytes.NewReader(body))
	r.Header.Set("Content-Type", ctype)
	w := httptest.NewRecorder()
	switch {
	case rt.optional:
		return decodeOptionalBody(w, r, v)
	case rt.money != "":
		return decodeMoneyBody(w, r, v, rt.money)
	}
	return decodeBody(w, r, v)
}

// checkDecodeRefusal checks a decoder's error: a *cloud.Error with code
// invalid_argument and a message, that writeError answers with 400, 413
// or 415 and the API's error shape.
func checkDecodeRefusal(t *testing.T, err error) {
	t.Helper()
	var ce *cloud.Error
	if !errors.As(err, &ce) || ce.Code != cloud.Invalid || ce.Message == "" {
		t.Fatalf("decode error %T %v is not an invalid_argument *cloud.Error with a message", err, err)
	}
	w := httptest.NewRecorder()
	writeError(w, httptest.NewRequest("POST", "/", nil), slog.New(slog.DiscardHandler), err)
	if s := w.Code; s != http.StatusBadRequest && s != http.StatusRequestEntityTooLarge && s != http.StatusUnsupportedMediaType {
		t.Fatalf("decode error %v answered %d", err, s)
	}
	eb := fuzzErrorBody(t, w.Body.Bytes())
	if eb.Code != cloud.Invalid || eb.Message != ce.Message {
		t.Fatalf("decode error %v answered %+v", err, eb)
	}
}

// fuzzErrorBody decodes an error answer, failing unless it has the API's
// error shape.
func fuzzErrorBody(t *testing.T, b []byte) errorBody {
	t.Helper()
	var eb errorBody
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&eb); err != nil || eb.Code == "" || eb.Message == "" || eb.Details == nil {
		t.Fatalf("error answer %s does not have the shape {code, message, details}: %v", b, err)
	}
	return eb
}

// fuzzServer is one API server over a fresh in-memory SQLite store, called
// in process (no listener), bootstrapped with the built-in price book,
// with tenant acme and its member, one resource of each kind a body route
// names (an instance, a volume, a group, an address, a network, a
// security group and an endpoint of acme), a join token, and a joined
// host (fuzzHost) with another of acme's instances scheduled on it and
// the host's agent credential.
type fuzzServer struct {
	st    cloud.Store
	h     http.Handler
	cat   *catalog.Catalog
	clock *testkit.Clock
	logs  *bytes.Buffer

	admin, member, agent   string
	join                   string
	acme                   string
	instance, volume       string
	group, address, placed string
	// network and secGroup are acme's network and one of its security
	// groups.
	network, secGroup string
	// endpoint is acme's queue-mode endpoint.
	endpoint string
	// changed counts the accepted requests since the fixture was made;
	// the targets make a fresh one after a few, so that what the fuzzer
	// learns keeps meeting the same state.
	changed int
	// rows is the store's count as checkAnswer last took it, valid while
	// counted: no request has been served since. It is the next input's
	// count before, so that each input reads every table once, not twice.
	rows    testkit.Rows
	counted bool
}

// fuzzHost is the fixture's joined host.
const fuzzHost = "h-fuzz"

// newFuzzServer makes the fixture. It fails t on any error.
func newFuzzServer(t testing.TB) *fuzzServer {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "")
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	s := &fuzzServer{st: st, cat: catalog.Default(), clock: testkit.NewClock(testkit.Epoch), logs: &bytes.Buffer{}}
	log := slog.New(slog.NewTextHandler(&syncWriter{w: s.logs}, nil))
	svc := service.New(st, s.cat, service.Options{Now: s.clock.Now})
	// Limits far above what a fuzzer sends: the targets are about bodies,
	// and a limited request never reaches its handler.
	unlimited := Limit{Rate: 1e9, Burst: 1e9}
	s.h = New(svc, Options{Logger: log, TokenCacheTTL: -1, Limits: RateLimits{Member: unlimited, Admin: unlimited, Agent: unlimited, AgentLiveness: unlimited}})
	tok, _, err := svc.Accounts.Bootstrap(ctx)
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	s.admin = tok
	if _, err := service.BootstrapPrices(ctx, st, s.cat, s.clock.Now()); err != nil {
		t.Fatalf("bootstrap prices: %v", err)
	}
	var tn cloud.Tenant
	s.mustDo(t, "POST", "/v1/tenants", s.admin, `{"name":"acme"}`, &tn)
	s.acme = tn.ID
	var cu api.CreatedUser
	s.mustDo(t, "POST", "/v1/tenants/"+s.acme+"/users", s.admin, `{"name":"acme-dev"}`, &cu)
	s.member = cu.Secret
	var in, placed cloud.Instance
	s.mustDo(t, "POST", "/v1/instances", s.member, `{"offering":"l4.1x","command":["sleep","600"]}`, &in)
	s.instance = in.ID
	s.mustDo(t, "POST", "/v1/instances", s.member, `{"offering":"h100.1x","command":["python","train.py"]}`, &placed)
	s.placed = placed.ID
	var v cloud.Volume
	s.mustDo(t, "POST", "/v1/volumes", s.member, `{"name":"ckpt","size_gib":50,"zone":"`+fleet.MockZone+`"}`, &v)
	s.volume = v.ID
	var g cloud.Group
	s.mustDo(t, "POST", "/v1/groups", s.member, fuzzGroupBody("web"), &g)
	s.group = g.ID
	var a cloud.Address
	s.mustDo(t, "POST", "/v1/addresses", s.member, `{}`, &a)
	s.address = a.ID
	var n cloud.Network
	s.mustDo(t, "POST", "/v1/networks", s.member, `{"name":"fuzz","cidr":"10.0.0.0/16"}`, &n)
	s.network = n.ID
	var sg cloud.SecurityGroup
	s.mustDo(t, "POST", "/v1/security-groups", s.member, `{"network":"`+n.ID+`","name":"web"}`, &sg)
	s.secGroup = sg.ID
	var ep cloud.Endpoint
	s.mustDo(t, "POST", "/v1/endpoints", s.member, `{"name":"echo","image":"ghcr.io/acme/echo:1","offerings":["l4.1x"]}`, &ep)
	s.endpoint = ep.ID

	var jt api.CreatedToken
	s.mustDo(t, "POST", "/v1/join-tokens", s.admin, `{"name":"fuzz"}`, &jt)
	s.join = jt.Secret
	inv, _ := json.Marshal(agentapi.JoinRequest{JoinToken: jt.Secret, Inventory: fuzzInventory(fuzzHost)})
	var jr agentapi.JoinResponse
	s.mustDo(t, "POST", "/v1/agent/join", "", string(inv), &jr)
	s.agent = jr.Credential
	testkit.Walk(t, st, s.placed, cloud.Scheduled, testkit.Via{Host: fuzzHost}, s.clock.Now())
	return s
}

// fuzzInventory is what the agent of a host with two H100s reports.
func fuzzInventory(id string) *agentapi.Inventory {
	h := fleet.MockHost(id, "H100", 2)
	h.State = ""
	delete(h.Labels, "driver")
	return &agentapi.Inventory{Host: *h, Driver: "550.54.15", CUDA: "12.4"}
}

func (s *fuzzServer) close() { s.st.Close() }

// count returns the store's count (testkit.CountRows), reading it only
// when a request may have changed the store since checkAnswer took it.
func (s *fuzzServer) count(t *testing.T) testkit.Rows {
	t.Helper()
	if !s.counted {
		s.rows, s.counted = testkit.CountRows(t, s.st), true
	}
	return s.rows
}

// do serves one request and returns the status, the headers and the body.
func (s *fuzzServer) do(method, path, token, ctype string, body []byte) (int, http.Header, []byte) {
	s.counted = false
	r := httptest.NewRequest(method, path, bytes.NewReader(body))
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		r.Header.Set("Content-Type", ctype)
	}
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, r)
	return w.Code, w.Header(), w.Body.Bytes()
}

// mustDo serves a JSON request that must succeed and decodes its answer
// into out.
func (s *fuzzServer) mustDo(t testing.TB, method, path, token, body string, out any) {
	t.Helper()
	code, _, b := s.do(method, path, token, "application/json", []byte(body))
	if code/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, code, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// fill puts the fixture's resources in a path or a body: {id} becomes the
// resource the route's path names, {instance} acme's instance, {name} a
// stack's name.
func (s *fuzzServer) fill(route, v string) string {
	id := s.instance
	switch {
	case strings.HasPrefix(route, "/v1/tenants/"):
		id = s.acme
	case strings.HasPrefix(route, "/v1/volumes/"):
		id = s.volume
	case strings.HasPrefix(route, "/v1/groups/"), route == "/v1/metrics":
		id = s.group
	case strings.HasPrefix(route, "/v1/addresses/"):
		id = s.address
	case strings.HasPrefix(route, "/v1/security-groups/"):
		id = s.secGroup
	case strings.HasPrefix(route, "/v1/endpoints/"):
		id = s.endpoint
	case strings.HasPrefix(route, "/v1/agent/"):
		id = s.placed
	}
	return strings.NewReplacer("{id}", id, "{instance}", s.instance, "{name}", "fuzz", "{network}", s.network).Replace(v)
}

// fuzzServers hands each fuzz input a fixture, and a fresh one after
// maxChanges accepted requests.
type fuzzServers struct {
	cur *fuzzServer
}

const maxChanges = 32

func (p *fuzzServers) get(t *testing.T) *fuzzServer {
	t.Helper()
	if p.cur != nil && p.cur.changed >= maxChanges {
		p.cur.close()
		p.cur = nil
	}
	if p.cur == nil {
		p.cur = newFuzzServer(t)
	}
	return p.cur
}

func (p *fuzzServers) close() {
	if p.cur != nil {
		p.cur.close()
	}
}

// checkAnswer checks what any request of the fuzz targets was answered:
// never an internal error (the handlers' panics are answered so); an error
// with the API's shape and the status of its code (or one of the three
// documented exceptions, with code invalid_argument); when refused, a
// store exactly as before; when accepted, a store that still reads back.
func (s *fuzzServer) checkAnswer(t *testing.T, what string, code int, body []byte, before testkit.Rows) (refused bool) {
	t.Helper()
	if code >= 500 && code != http.StatusServiceUnavailable {
		t.Fatalf("%s: answered %d %s; server log:\n%s", what, code, body, s.logs.String())
	}
	if code < 400 {
		if code != http.StatusNoContent && !json.Valid(body) {
			t.Fatalf("%s: answered %d with a body that is not JSON: %q", what, code, body)
		}
		s.changed++
		// Whatever was written reads back (CountRows reads every table
		// and fails the input when a row does not scan).
		t.Logf("accepted %s: %d %s", what, code, body)
		s.rows, s.counted = testkit.CountRows(t, s.st), true
		return false
	}
	eb := fuzzErrorBody(t, body)
	if want := statusOf(eb.Code); code != want {
		exception := code == http.StatusRequestEntityTooLarge || code == http.StatusUnsupportedMediaType || code == http.StatusMethodNotAllowed
		if !exception || eb.Code != cloud.Invalid {
			t.Fatalf("%s: answered %d with code %s (whose status is %d)", what, code, eb.Code, want)
		}
	}
	after := testkit.CountRows(t, s.st)
	if after != before {
		t.Fatalf("%s: refused (%d %s) but changed the store:\nbefore %+v\nafter  %+v", what, code, body, before, after)
	}
	s.rows, s.counted = after, true
	return true
}

// FuzzAPIBody sends a body to one of the body routes of the /v1 API
// (apiFuzzRoutes), with the member's token (or the admin's, for admin
// routes and when asked), over the real handler and store. Besides
// checkAnswer's properties: a body the decoder refuses is answered
// invalid_argument, and a request the service's own validation refuses
// (bodyRoute.check) is never accepted.
func FuzzAPIBody(f *testing.F) {
	for i, rt := range apiFuzzRoutes {
		for _, s := range rt.seeds {
			f.Add(uint8(i), false, "application/json", []byte(s))
		}
	}
	f.Add(uint8(4), true, "application/json", []byte(`{"offering":"l4.1x","tenant":"{acme}"}`))
	f.Add(uint8(4), false, "text/plain", []byte(`{"offering":"l4.1x"}`))
	f.Add(uint8(6), true, "application/json; charset=utf-8", []byte(`{"name":"v","size_gib":1}`))
	var pool fuzzServers
	f.Cleanup(pool.close)
	f.Fuzz(func(t *testing.T, route uint8, admin bool, ctype string, body []byte) {
		rt := apiFuzzRoutes[int(route)%len(apiFuzzRoutes)]
		s := pool.get(t)
		body = []byte(strings.ReplaceAll(s.fill(rt.path, string(body)), "{acme}", s.acme))
		token := s.member
		if rt.admin || admin {
			token = s.admin
		}
		path := s.fill(rt.path, rt.path)
		what := fmt.Sprintf("%s %s %q (Content-Type %q)", rt.method, path, body, ctype)

		before := s.count(t)
		code, _, answer := s.do(rt.method, path, token, ctype, body)
		refused := s.checkAnswer(t, what, code, answer, before)
		if code == http.StatusTooManyRequests {
			return // limited before its handler (a quota the fuzzer set), which never read the body
		}

		req := rt.newReq()
		if err := decodeFuzzBody(rt, ctype, body, req); err != nil {
			if !refused || fuzzErrorBody(t, answer).Code != cloud.Invalid {
				t.Fatalf("%s: the decoder refuses it (%v) but the route answered %d %s", what, err, code, answer)
			}
			return
		}
		if rt.check == nil {
			return
		}
		if err := rt.check(s.cat, req); err != nil && !refused {
			t.Fatalf("%s: the service's validation refuses it (%v) but the route accepted it: %d %s", what, err, code, answer)
		}
	})
}
