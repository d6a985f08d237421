package httpapi

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// jsonFields lists the JSON names of a struct's fields, those of embedded
// structs (pointers too) inline, without the ones never written ("-").
func jsonFields(rt reflect.Type) []string {
	var out []string
	for i := range rt.NumField() {
		f := rt.Field(i)
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if f.Anonymous && name == "" {
			t := f.Type
			if t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			out = append(out, jsonFields(t)...)
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// TestOpenAPIEndpoints: the serverless endpoints' schemas name exactly the
// fields their Go types write, and the routes declare the headers their
// handlers read and write: Idempotency-Key where a retry is safe, If-Match
// on PATCH, and Retry-After on the HTTP mode's 503.
func TestOpenAPIEndpoints(t *testing.T) {
	doc := loadOpenAPI(t)
	for _, c := range []struct {
		schema string
		typ    reflect.Type
	}{
		{"Endpoint", reflect.TypeFor[cloud.Endpoint]()},
		{"EndpointSpec", reflect.TypeFor[cloud.EndpointSpec]()},
		{"EndpointStatus", reflect.TypeFor[cloud.EndpointStatus]()},
		{"WorkerRef", reflect.TypeFor[cloud.WorkerRef]()},
		{"ColdStart", reflect.TypeFor[cloud.ColdStart]()},
		{"Job", reflect.TypeFor[cloud.Job]()},
		{"EndpointDetail", reflect.TypeFor[api.EndpointDetail]()},
		{"EndpointWorker", reflect.TypeFor[api.EndpointWorker]()},
		{"EndpointLatency", reflect.TypeFor[api.EndpointLatency]()},
		{"EndpointList", reflect.TypeFor[api.ListEndpointsResponse]()},
		{"CreateEndpointRequest", reflect.TypeFor[api.CreateEndpointRequest]()},
		{"UpdateEndpointRequest", reflect.TypeFor[api.UpdateEndpointRequest]()},
		{"RunJobRequest", reflect.TypeFor[api.RunJobRequest]()},
		{"EndpointKey", reflect.TypeFor[cloud.EndpointKey]()},
		{"CreateEndpointKeyRequest", reflect.TypeFor[api.CreateEndpointKeyRequest]()},
		{"CreatedEndpointKey", reflect.TypeFor[api.CreatedEndpointKey]()},
		{"EndpointKeyList", reflect.TypeFor[api.ListEndpointKeysResponse]()},
	} {
		var s struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(doc.Components.Schemas[c.schema], &s); err != nil {
			t.Errorf("%s: %v", c.schema, err)
			continue
		}
		var documented []string
		for name := range s.Properties {
			documented = append(documented, name)
		}
		slices.Sort(documented)
		if want := jsonFields(c.typ); !slices.Equal(documented, want) {
			t.Errorf("schema %s has %v; %s writes %v", c.schema, documented, c.typ, want)
		}
	}

	header := func(op openAPIOperation, name string) bool {
		return slices.ContainsFunc(op.Parameters, func(p openAPIParam) bool {
			if p.Ref != "" {
				p = doc.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
			}
			return p.In == "header" && p.Name == name
		})
	}
	for _, c := range []struct {
		method, path, header string
	}{
		{"post", "/v1/endpoints", "Idempotency-Key"},
		{"post", "/v1/endpoints/{id}/run", "Idempotency-Key"},
		{"post", "/v1/endpoints/{id}/runsync", "Idempotency-Key"},
		{"post", "/v1/endpoints/{id}/keys", "Idempotency-Key"},
		{"patch", "/v1/endpoints/{id}", "If-Match"},
	} {
		if !header(doc.Paths[c.path][c.method], c.header) {
			t.Errorf("%s %s does not declare %s", c.method, c.path, c.header)
		}
	}
	proxied := 0
	for _, rt := range routeTable {
		if rt.Path != endpointHTTPPath {
			continue
		}
		proxied++
		var resp struct {
			Headers map[string]json.RawMessage `json:"headers"`
		}
		op := doc.Paths[documentedPath(rt.Path)][strings.ToLower(rt.Method)]
		if err := json.Unmarshal(op.Responses["503"], &resp); err != nil || resp.Headers["Retry-After"] == nil {
			t.Errorf("%s %s: the 503 lacks Retry-After (%v)", rt.Method, rt.Path, err)
		}
	}
	if proxied == 0 {
		t.Error("no route of the HTTP mode's proxy in the route table")
	}
}
