package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/client"
)

// openAPIDocument is the part of an OpenAPI 3.0 document the tests check.
type openAPIDocument struct {
	OpenAPI    string                                 `json:"openapi"`
	Paths      map[string]map[string]openAPIOperation `json:"paths"`
	Components struct {
		Schemas    map[string]json.RawMessage `json:"schemas"`
		Parameters map[string]openAPIParam    `json:"parameters"`
		Responses  map[string]json.RawMessage `json:"responses"`
	} `json:"components"`
}

type openAPIOperation struct {
	OperationID string                     `json:"operationId"`
	Parameters  []openAPIParam             `json:"parameters"`
	Responses   map[string]json.RawMessage `json:"responses"`
	Security    *[]any                     `json:"security"`
}

type openAPIParam struct {
	Ref  string `json:"$ref"`
	Name string `json:"name"`
	In   string `json:"in"`
}

func loadOpenAPI(t *testing.T) openAPIDocument {
	t.Helper()
	var doc openAPIDocument
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.0") {
		t.Fatalf("openapi %q, want 3.0.x", doc.OpenAPI)
	}
	return doc
}

// documentedPath is a route's path as OpenAPI writes it: Go's ServeMux
// wildcard for the rest of a path, {name...}, is the parameter {name}.
func documentedPath(p string) string { return strings.ReplaceAll(p, "...}", "}") }

// TestOpenAPICoversRoutes fails when a route of the server is missing from
// the document, or the document lists a route the server lacks.
func TestOpenAPICoversRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	server := map[string]bool{}
	for _, rt := range routeTable {
		server[strings.ToLower(rt.Method)+" "+documentedPath(rt.Path)] = true
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[method+" "+path] = true
		}
	}
	var missing, extra []string
	for k := range server {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	for k := range documented {
		if !server[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("routes missing from openapi.json: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("openapi.json lists routes the server lacks: %v", extra)
	}
}

// TestOpenAPIOperations checks each operation: path parameters declared,
// references resolvable, authenticated routes documenting 401, admin
// routes 403, every route the error schema for 500, and public routes
// marked as needing no token.
func TestOpenAPIOperations(t *testing.T) {
	doc := loadOpenAPI(t)
	raw := string(openAPIDoc)
	for _, m := range regexp.MustCompile(`"\$ref": "#/components/(\w+)/(\w+)"`).FindAllStringSubmatch(raw, -1) {
		var ok bool
		switch m[1] {
		case "schemas":
			_, ok = doc.Components.Schemas[m[2]]
		case "parameters":
			_, ok = doc.Components.Parameters[m[2]]
		case "responses":
			_, ok = doc.Components.Responses[m[2]]
		}
		if !ok {
			t.Errorf("unresolved reference %s", m[0])
		}
	}
	ids := map[string]bool{}
	for _, rt := range routeTable {
		op, ok := doc.Paths[documentedPath(rt.Path)][strings.ToLower(rt.Method)]
		if !ok {
			continue // TestOpenAPICoversRoutes reports it
		}
		name := rt.Method + " " + rt.Path
		if op.OperationID == "" || ids[op.OperationID] {
			t.Errorf("%s: operationId %q missing or repeated", name, op.OperationID)
		}
		ids[op.OperationID] = true
		var params []string
		for _, p := range op.Parameters {
			if p.Ref != "" {
				p = doc.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
			}
			if p.In == "path" {
				params = append(params, p.Name)
			}
		}
		for _, m := range regexp.MustCompile(`\{(\w+)\}`).FindAllStringSubmatch(rt.Path, -1) {
			if !slices.Contains(params, m[1]) {
				t.Errorf("%s: path parameter %s not declared", name, m[1])
			}
		}
		if _, ok := op.Responses["500"]; !ok {
			t.Errorf("%s: no 500 response", name)
		}
		_, has401 := op.Responses["401"]
		_, has403 := op.Responses["403"]
		noToken := op.Security != nil && len(*op.Security) == 0
		switch {
		case (rt.access == public || rt.access == anonymous) != noToken:
			t.Errorf("%s: document and server disagree on whether it needs a token", name)
		case rt.access != public && rt.access != anonymous && !has401:
			t.Errorf("%s: no 401 response", name)
		case rt.access == adminOnly && !has403:
			t.Errorf("%s: admin route without 403 response", name)
		}
	}
	if _, ok := doc.Components.Schemas["Error"]; !ok {
		t.Error("no Error schema")
	}
}

func TestServeOpenAPI(t *testing.T) {
	e := newEnv(t)
	got, err := client.New(e.srv.URL, "", e.srv.Client()).OpenAPIDocument(context.Background())
	if err != nil || !bytes.Equal(got, bytes.TrimSpace(openAPIDoc)) {
		t.Fatalf("GET /v1/openapi.json without a token: %d bytes, %v", len(got), err)
	}
}

// TestOpenAPIRateLimits: every route that takes a credential (and the
// join, which takes one in its body) documents its 429 rate_limited with
// Retry-After, and the quota schemas carry the limits' fields.
func TestOpenAPIRateLimits(t *testing.T) {
	doc := loadOpenAPI(t)
	for _, rt := range routeTable {
		op, ok := doc.Paths[documentedPath(rt.Path)][strings.ToLower(rt.Method)]
		if !ok || rt.access == public && rt.Path != "/v1/agent/join" {
			continue
		}
		var ref struct {
			Ref string `json:"$ref"`
		}
		if err := json.Unmarshal(op.Responses["429"], &ref); err != nil ||
			ref.Ref != "#/components/responses/RateLimited" && ref.Ref != "#/components/responses/QuotaExceededOrRateLimited" {
			t.Errorf("%s %s: 429 is %s, want a rate_limited response", rt.Method, rt.Path, op.Responses["429"])
		}
	}
	for _, name := range []string{"RateLimited", "QuotaExceededOrRateLimited"} {
		var resp struct {
			Headers map[string]json.RawMessage `json:"headers"`
		}
		if err := json.Unmarshal(doc.Components.Responses[name], &resp); err != nil || resp.Headers["Retry-After"] == nil {
			t.Errorf("response %s lacks Retry-After: %v", name, err)
		}
	}
	var errSchema struct {
		Properties struct {
			Code struct {
				Enum []string `json:"enum"`
			} `json:"code"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(doc.Components.Schemas["Error"], &errSchema); err != nil || !slices.Contains(errSchema.Properties.Code.Enum, "rate_limited") {
		t.Errorf("the Error schema's codes %v lack rate_limited (%v)", errSchema.Properties.Code.Enum, err)
	}
	for _, schema := range []string{"QuotaSpec", "QuotaStatus"} {
		var s struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(doc.Components.Schemas[schema], &s); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"instances", "gpus", "gpus_per_model", "requests_per_second", "burst"} {
			if s.Properties[f] == nil {
				t.Errorf("schema %s lacks %s", schema, f)
			}
		}
	}
}
