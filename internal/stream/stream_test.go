package stream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// pair returns both ends of a framed session over a real WebSocket.
func pair(t *testing.T) (client, server *Conn) {
	t.Helper()
	got := make(chan *websocket.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}})
		if err != nil {
			t.Error(err)
			return
		}
		got <- ws
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{Subprotocols: []string{Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	if ws.Subprotocol() != Subprotocol {
		t.Fatalf("subprotocol %q", ws.Subprotocol())
	}
	sws := <-got
	t.Cleanup(func() { ws.CloseNow(); sws.CloseNow() })
	return NewConn(ws), NewConn(sws)
}

func TestSessionRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, sv := pair(t)
	stdin := sv.Reader(Stdin)
	stdout, stderr := cl.Reader(Stdout), cl.Reader(Stderr)
	go sv.Run(ctx)
	go cl.Run(ctx)

	big := bytes.Repeat([]byte("0123456789abcdef"), 5000) // 80000 bytes: three messages
	go func() {
		w := cl.Writer(ctx, Stdin)
		w.Write(big)
		w.Close()
		cl.SendResize(ctx, Size{Cols: 100, Rows: 40})
	}()
	in, err := io.ReadAll(stdin)
	if err != nil || !bytes.Equal(in, big) {
		t.Fatalf("stdin: %d bytes, err %v; want %d", len(in), err, len(big))
	}
	select {
	case sz := <-sv.Resizes():
		if sz != (Size{Cols: 100, Rows: 40}) {
			t.Fatalf("resize %+v", sz)
		}
	case <-ctx.Done():
		t.Fatal("no resize")
	}
	go func() {
		sv.Send(ctx, Stdout, []byte("out"))
		sv.Send(ctx, Stderr, []byte("err"))
		sv.SendStatus(ctx, ExitStatus{ExitCode: 3, Message: "bye"})
	}()
	errc := make(chan []byte)
	go func() { b, _ := io.ReadAll(stderr); errc <- b }()
	out, _ := io.ReadAll(stdout)
	errb := <-errc
	if string(out) != "out" || string(errb) != "err" {
		t.Fatalf("stdout %q stderr %q", out, errb)
	}
	<-cl.Done()
	st, ok := cl.Status()
	if !ok || st.ExitCode != 3 || st.Message != "bye" {
		t.Fatalf("status %+v %v", st, ok)
	}
	if cl.Err() != io.EOF {
		t.Fatalf("err %v", cl.Err())
	}
}

// A channel nobody reads is dropped, not a stalled read loop.
func TestUnreadChannelDropped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, sv := pair(t)
	out := cl.Reader(Stdout)
	go cl.Run(ctx)
	go func() {
		sv.Send(ctx, Stderr, bytes.Repeat([]byte("x"), 3*MaxPayload))
		sv.Send(ctx, Stdout, []byte("seen"))
		sv.SendStatus(ctx, ExitStatus{})
	}()
	b, err := io.ReadAll(out)
	if err != nil || string(b) != "seen" {
		t.Fatalf("%q %v", b, err)
	}
}

// A peer that breaks the framing ends the session with ErrFrame.
func TestBadFrameEndsSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, sv := pair(t)
	go sv.ws.Write(ctx, websocket.MessageBinary, []byte{7, 'x'})
	if err := cl.Run(ctx); !errors.Is(err, ErrFrame) {
		t.Fatalf("err %v", err)
	}
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name string
		msg  []byte
		ok   bool
	}{
		{"empty", nil, false},
		{"stdin", []byte{Stdin, 'a'}, true},
		{"stdout empty payload", []byte{Stdout}, true},
		{"status", append([]byte{Status}, `{"exit_code":1}`...), true},
		{"status not json", append([]byte{Status}, `{`...), false},
		{"resize", append([]byte{Resize}, `{"cols":80,"rows":24}`...), true},
		{"resize bad", append([]byte{Resize}, `{"cols":-1}`...), false},
		{"close stdin", []byte{Close, Stdin}, true},
		{"close status", []byte{Close, Status}, false},
		{"close two", []byte{Close, Stdin, Stdout}, false},
		{"unknown", []byte{9}, false},
		{"too big", make([]byte, ReadLimit+1), false},
		{"at the limit", make([]byte, ReadLimit), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.msg)
			if (err == nil) != c.ok {
				t.Fatalf("err %v, want ok=%v", err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrFrame) {
				t.Fatalf("err %v not ErrFrame", err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte{Stdin, 'a'})
	f.Add(append([]byte{Status}, `{"exit_code":0,"message":"x"}`...))
	f.Add(append([]byte{Resize}, `{"cols":1,"rows":2}`...))
	f.Add([]byte{Close, Stdout})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		// What decodes encodes back to the same bytes, within the limit.
		if got := Encode(m.Channel, m.Payload); !bytes.Equal(got, b) {
			t.Fatalf("round trip %x != %x", got, b)
		}
		if len(m.Payload) > MaxPayload {
			t.Fatalf("payload %d over the limit", len(m.Payload))
		}
	})
}
