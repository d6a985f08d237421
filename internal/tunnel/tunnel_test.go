package tunnel

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// TestJoin: Join carries both directions and each end's
// half-close, and returns the bytes each way.
func TestJoin(t *testing.T) {
	pair := func() (net.Conn, net.Conn) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
	client, c2 := pair()
	a2, agent := pair()
	done := make(chan [2]int64, 1)
	go func() { ab, ba := Join(c2, a2); done <- [2]int64{ab, ba} }()
	up := bytes.Repeat([]byte("u"), 1<<20)
	go func() { client.Write(up); client.(*net.TCPConn).CloseWrite() }()
	b, err := io.ReadAll(agent)
	if err != nil || !bytes.Equal(b, up) {
		t.Fatalf("the agent read %d bytes, %v", len(b), err)
	}
	agent.Write([]byte("down"))
	agent.(*net.TCPConn).CloseWrite()
	b, err = io.ReadAll(client)
	if err != nil || string(b) != "down" {
		t.Fatalf("the client read %q, %v", b, err)
	}
	if n := <-done; n != [2]int64{1 << 20, 4} {
		t.Errorf("Join carried %v, want [%d 4]", n, 1<<20)
	}
}
