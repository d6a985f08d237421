package metrics

import (
	"net/http"
	"strconv"
	"time"
)

// Unmatched is the route label of a request that no route pattern matched.
const Unmatched = "unmatched"

// Instrument counts and times the requests h answers. h must be (or
// directly call) the http.ServeMux that routes them, with the same
// *http.Request: the route label is the pattern the mux matched
// (r.Pattern, e.g. "GET /v1/instances/{id}"), and "unmatched" for none and
// for the catch-all pattern "/", which the API uses for its 404 and 405
// answers. The raw path is never a label, nor is anything of the tenant.
func (s *Registry) Instrument(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			route := r.Pattern
			if route == "" || route == "/" {
				route = Unmatched
			}
			method := methodLabel(r.Method)
			code := sw.code
			if code == 0 {
				code = http.StatusOK
			}
			s.requests.WithLabelValues(method, route, strconv.Itoa(code)).Inc()
			s.duration.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
		}()
		h.ServeHTTP(sw, r)
	})
}

// methodLabel bounds the method label to the standard methods.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes a flush on when the writer supports it.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
