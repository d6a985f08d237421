package relay

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/stream"
)

// testServer serves a hub's control channels (/control?host=) and
// dial-backs (/session?host=&id=) as the API's agent routes do, and a
// client route (/client?host=) that opens a framed session and splices it.
func testServer(t *testing.T, h *Hub) string {
	t.Helper()
	srv := httptest.NewServer(proxyTo(t, h))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// dialOptions are nil for the plain test servers, and the client of a TLS
// test server (peer_test.go) for its URLs.
func dialOptions(url string) *websocket.DialOptions {
	for base, hc := range tlsClients() {
		if strings.HasPrefix(url, base) {
			return &websocket.DialOptions{HTTPClient: hc}
		}
	}
	return nil
}

func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.Dial(context.Background(), url, dialOptions(url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}

// fakeAgent holds host's control channel and answers each request by
// dialing back as dialHost, then echoing stdin to stdout with exit code 7.
func fakeAgent(t *testing.T, base, host, dialHost string) {
	ctl := dial(t, base+"/control?host="+host)
	go func() {
		for {
			_, b, err := ctl.Read(context.Background())
			if err != nil {
				return
			}
			var req agentapi.SessionRequest
			json.Unmarshal(b, &req)
			ws, _, err := websocket.Dial(context.Background(), base+"/session?host="+dialHost+"&id="+req.ID, dialOptions(base))
			if err != nil {
				continue
			}
			c := stream.NewConn(ws)
			in := c.Reader(stream.Stdin)
			go c.Run(context.Background())
			io.Copy(c.Writer(context.Background(), stream.Stdout), in)
			c.SendStatus(context.Background(), stream.ExitStatus{ExitCode: 7})
		}
	}()
}

func waitConnected(t *testing.T, h *Hub, host string) {
	for i := 0; !h.Connected(host); i++ {
		if i > 200 {
			t.Fatal("agent never connected")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHubRelaysASession(t *testing.T) {
	h := NewHub()
	base := testServer(t, h)
	fakeAgent(t, base, "h-1", "h-1")
	waitConnected(t, h, "h-1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := stream.NewConn(dial(t, base+"/client?host=h-1"))
	out := c.Reader(stream.Stdout)
	go c.Run(ctx)
	w := c.Writer(ctx, stream.Stdin)
	w.Write([]byte("hello"))
	w.Close()
	b, err := io.ReadAll(out)
	if err != nil || string(b) != "hello" {
		t.Fatalf("%q %v", b, err)
	}
	<-c.Done()
	if st, ok := c.Status(); !ok || st.ExitCode != 7 {
		t.Fatalf("status %+v %v", st, ok)
	}
}

func TestHubOpenErrors(t *testing.T) {
	h := NewHub()
	h.DialTimeout = 300 * time.Millisecond
	base := testServer(t, h)
	// h-2's agent dials back claiming to be h-3: another host's
	// dial-back never reaches the session.
	fakeAgent(t, base, "h-2", "h-3")
	waitConnected(t, h, "h-2")
	cases := []struct {
		host string
		want string
	}{
		{"h-9", "not connected to this server replica"},
		{"h-2", "did not open the session within"},
	}
	for _, c := range cases {
		_, err := h.Open(context.Background(), c.host, agentapi.SessionRequest{ID: "s-" + c.host})
		var ce *cloud.Error
		if !errors.As(err, &ce) || ce.Code != cloud.Unavailable || !strings.Contains(ce.Message, c.want) {
			t.Errorf("%s: err %v, want unavailable %q", c.host, err, c.want)
		}
	}
}
