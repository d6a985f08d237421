package rest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/tunnel"
)

// TestDialTunnel: a tunnel request over the server's TLS, answered 101,
// leaves the TLS on both ends and carries raw bytes both ways, none lost
// to a TLS read buffer however soon they follow the drop (each end
// writes at once); the request's header and token reach the server; a
// refused request is the API's error; a plain-HTTP server has no
// tunnels.
func TestDialTunnel(t *testing.T) {
	fromServer := make([]byte, 1<<20)
	rand.Read(fromServer)
	got := make(chan []byte, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("Gpucloud-Grant") != "g1" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"code":"not_found","message":"session ses-1 not found"}`)
			return
		}
		raw, err := tunnel.Upgrade(w)
		if err != nil {
			t.Errorf("upgrade: %v", err)
			return
		}
		defer raw.Close()
		if _, ok := raw.(*net.TCPConn); !ok {
			t.Errorf("the raw connection is a %T, not the TCP connection (no splice)", raw)
		}
		if err := tunnel.WriteReady(raw); err != nil {
			t.Errorf("ready: %v", err)
			return
		}
		// At once, both ways.
		go raw.Write(fromServer)
		b, _ := io.ReadAll(raw)
		got <- b
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c := New(srv.URL, "tok", srv.Client())
	conn, err := c.DialTunnel(ctx, "/v1/tunnels", http.Header{"Gpucloud-Grant": {"g1"}})
	if err != nil {
		t.Fatal(err)
	}
	fromClient := make([]byte, 3<<20+7)
	rand.Read(fromClient)
	go func() {
		conn.Write(fromClient)
		conn.(*net.TCPConn).CloseWrite()
	}()
	b := make([]byte, len(fromServer))
	if _, err := io.ReadFull(conn, b); err != nil || !bytes.Equal(b, fromServer) {
		t.Fatalf("the server's bytes: %v, equal %t", err, bytes.Equal(b, fromServer))
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, fromClient) {
			t.Fatalf("the server read %d bytes of the client's %d, or others", len(b), len(fromClient))
		}
	case <-ctx.Done():
		t.Fatal("the server did not read the client's bytes")
	}
	conn.Close()

	_, err = c.DialTunnel(ctx, "/v1/tunnels", http.Header{"Gpucloud-Grant": {"another"}})
	if ce := (*cloud.Error)(nil); !errors.As(err, &ce) || ce.Code != cloud.NotFound {
		t.Errorf("a refused tunnel: %v, want not_found", err)
	}

	plain := New("http://127.0.0.1:1", "tok", nil)
	if _, err := plain.DialTunnel(ctx, "/v1/tunnels", nil); !errors.Is(err, ErrNoTunnel) {
		t.Errorf("a plain-HTTP server's tunnel: %v, want ErrNoTunnel", err)
	}
}
