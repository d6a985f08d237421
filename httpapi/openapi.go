package httpapi

import (
	_ "embed"
	"net/http"
)

// openAPIDoc is the OpenAPI 3.0 description of every route in routeTable;
// TestOpenAPICoversRoutes fails when the two disagree.
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the embedded OpenAPI document, for tools that serve or
// check it without a server.
func OpenAPI() []byte { return append([]byte(nil), openAPIDoc...) }

// openAPI handles GET /v1/openapi.json. It needs no token, so that API
// tools can discover the API before they have one.
func (s *handlers) openAPI(w http.ResponseWriter, r *http.Request, p principal) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(openAPIDoc)
	return nil
}
