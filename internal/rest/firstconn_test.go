package rest

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// h2Server is an HTTPS server speaking HTTP/2 that counts its connections;
// handler answers its requests.
func h2Server(t *testing.T, handler http.HandlerFunc) (*httptest.Server, *atomic.Int64, *http.Client) {
	srv := httptest.NewUnstartedServer(handler)
	srv.EnableHTTP2 = true
	var n atomic.Int64
	srv.Listener = countingListener{srv.Listener, &n}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	hc := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}}}
	t.Cleanup(hc.CloseIdleConnections)
	return srv, &n, hc
}

// TestColdClientDialsOnce: 64 requests sent at once by a new client over
// HTTPS share one connection (Go's transport alone dials 64: without the
// gate, this test sees 64); the first
// request holds the others only until it has its connection, not until it
// is answered; a first request that cannot connect leaves the others free
// to try; plain HTTP is not held at all.
func TestColdClientDialsOnce(t *testing.T) {
	t.Run("a burst", func(t *testing.T) {
		srv, conns, hc := h2Server(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
		cl := New(srv.URL, "tok", hc)
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, _, err := cl.Do(context.Background(), Call{Method: "GET", Path: "/v1/x"}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if n := conns.Load(); n != 1 {
			t.Errorf("64 requests of a cold client: %d connections, want 1", n)
		}
	})

	t.Run("a long first request", func(t *testing.T) {
		hold := make(chan struct{})
		srv, conns, hc := h2Server(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/long" {
				<-hold
			}
			w.WriteHeader(http.StatusNoContent)
		})
		defer close(hold)
		cl := New(srv.URL, "tok", hc)
		go func() { _, _, _ = cl.Do(context.Background(), Call{Method: "GET", Path: "/v1/long"}) }()
		// The second waits for the first's connection, not its answer.
		for deadline := time.Now().Add(10 * time.Second); conns.Load() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the first request never connected")
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, _, err := cl.Do(ctx, Call{Method: "GET", Path: "/v1/short"}); err != nil {
			t.Fatalf("a request behind a long first one: %v", err)
		}
		if n := conns.Load(); n != 1 {
			t.Errorf("%d connections, want 1", n)
		}
	})

	t.Run("a first request that cannot connect", func(t *testing.T) {
		// A listener that accepts nothing: its address refuses once closed.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		cl := New("https://"+addr, "tok", &http.Client{Timeout: 5 * time.Second})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, err := cl.Do(context.Background(), Call{Method: "GET", Path: "/v1/x"})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err == nil {
				t.Error("a request to a closed port succeeded")
			}
		}
	})

	t.Run("a waiting request's context", func(t *testing.T) {
		hold := make(chan struct{})
		// A server that never finishes its handshake: the first request
		// has no connection, so the second waits at the gate.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { <-hold; c.Close() }()
			}
		}()
		defer close(hold)
		cl := New("https://"+ln.Addr().String(), "tok", &http.Client{})
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _, _ = cl.Do(ctx, Call{Method: "GET", Path: "/v1/first"})
		}()
		time.Sleep(50 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, _, err = cl.Do(ctx, Call{Method: "GET", Path: "/v1/second"})
		if err == nil || time.Since(start) > 5*time.Second {
			t.Errorf("a request waiting at the gate: err %v after %v, want its context's deadline", err, time.Since(start))
		}
	})

	t.Run("plain HTTP", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
		defer srv.Close()
		cl := New(srv.URL, "tok", srv.Client())
		if g := cl.coldGate(httptestRequest(t, srv.URL)); g != nil {
			t.Error("a plain-HTTP request is held at the gate")
		}
	})
}

func httptestRequest(t *testing.T, url string) *http.Request {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
