package exporter

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns the /metrics handler: promhttp over a registry of its
// own that holds only c. A collector error is logged and the scrape still
// serves what could be read.
func Handler(c prometheus.Collector, log *slog.Logger) http.Handler { return HandlerOf(log, c) }

// HandlerOf is Handler over several collectors in one registry: the hosts
// of `gpucloud up`, each with its own Hostname.
func HandlerOf(log *slog.Logger, cs ...prometheus.Collector) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(cs...)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		Registry:      reg,
	})
}

// RequireToken serves h only to requests that carry token as a bearer
// token (Prometheus: authorization.credentials_file); any other is 401.
// The metrics name the host's tenants and instances, which is the
// operator's business alone. The comparison takes the same time whatever
// the guess.
func RequireToken(h http.Handler, token string) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpucloud agent metrics"`)
			http.Error(w, "unauthenticated: the agent's metrics need its metrics token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Listener is the exporter's HTTP listener: it serves /metrics on one address.
type Listener struct {
	ln  net.Listener
	srv *http.Server
}

// Listen listens on addr ("127.0.0.1:9400"; port 0 picks one) for the
// /metrics handler h. Serve serves it.
func Listen(addr string, h http.Handler) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	return &Listener{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// Addr is the address the server listens on.
func (s *Listener) Addr() string { return s.ln.Addr().String() }

// Serve serves until ctx ends, then shuts down, giving scrapes in flight a
// few seconds; it returns nil then, or the error that stopped it earlier.
func (s *Listener) Serve(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(s.ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(shut)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
