package batchconn

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// countConn counts the writes that reach the connection.
type countConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countConn) Write(p []byte) (int, error) { c.writes.Add(1); return c.Conn.Write(p) }

func testCert(t testing.TB) tls.Certificate {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "x"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"x"}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
}

// pair is a TLS 1.3 client over a Conn (over a countConn) and the
// server's end, over loopback TCP.
func pair(t testing.TB) (*tls.Conn, *Conn, *countConn, *tls.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cert := testCert(t)
	srv := make(chan *tls.Conn, 1)
	go func() {
		c, err := Listener{ln}.Accept()
		if err != nil {
			srv <- nil
			return
		}
		sc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
		sc.Handshake()
		srv <- sc
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc := &countConn{Conn: raw}
	bc := New(cc)
	tc := tls.Client(bc, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	sc := <-srv
	if sc == nil {
		t.Fatal("accept failed")
	}
	if _, ok := sc.NetConn().(*Conn); !ok {
		t.Fatalf("the listener's connection is a %T, not a *Conn", sc.NetConn())
	}
	t.Cleanup(func() { tc.Close(); sc.Close() })
	return tc, bc, cc, sc
}

// A held write of 256 KiB is one write to the connection instead of one
// per record, and the bytes arrive whole and in order, with a write from
// another goroutine during the hold behind them.
func TestHoldGathersRecords(t *testing.T) {
	tc, bc, cc, sc := pair(t)
	msg := make([]byte, 256<<10)
	rand.Read(msg)
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, 3*len(msg)+5)
		_, err := io.ReadFull(sc, b)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	before := cc.writes.Load()
	if _, err := tc.Write(msg); err != nil {
		t.Fatal(err)
	}
	plain := cc.writes.Load() - before
	before = cc.writes.Load()
	bc.Hold()
	if _, err := tc.Write(msg); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); tc.Write([]byte("after")) }()
	time.Sleep(20 * time.Millisecond)
	if n := cc.writes.Load() - before; n != 0 {
		t.Errorf("%d writes reached the connection during the hold", n)
	}
	if err := bc.Release(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	held := cc.writes.Load() - before
	if _, err := tc.Write(msg); err != nil {
		t.Fatal(err)
	}
	if plain < 16 || held != 1 {
		t.Errorf("writes: %d without a hold, %d with (the other goroutine's included): want 16 or more, and 1", plain, held)
	}
	b := <-got
	want := append(append(append(append([]byte{}, msg...), msg...), "after"...), msg...)
	if !bytes.Equal(b, want) {
		t.Error("the bytes arrived changed or out of order")
	}
}

// Holds nest; a nil Conn's are no-ops; ConnContext finds the Conn under
// a TLS connection.
func TestNestingNilAndContext(t *testing.T) {
	var none *Conn
	none.Hold()
	if err := none.Release(); err != nil {
		t.Fatal(err)
	}
	tc, bc, cc, sc := pair(t)
	go io.Copy(io.Discard, sc)
	before := cc.writes.Load()
	bc.Hold()
	bc.Hold()
	tc.Write(make([]byte, 100<<10))
	bc.Release()
	if n := cc.writes.Load() - before; n != 0 {
		t.Errorf("the inner release wrote (%d writes)", n)
	}
	bc.Release()
	if n := cc.writes.Load() - before; n != 1 {
		t.Errorf("the outer release: %d writes, want 1", n)
	}
	if bc.Release() != nil {
		t.Error("a release without a hold failed")
	}
	if From(ConnContext(context.Background(), tc)) != bc {
		t.Error("ConnContext did not find the Conn under the TLS connection")
	}
	if From(ConnContext(context.Background(), cc)) != nil || From(context.Background()) != nil {
		t.Error("a connection without a Conn has one")
	}
}

// Close is not held up by a write that blocks on a peer that does not
// read: it fails the write, as closing a net.Conn does.
func TestCloseUnblocksAWrite(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	bc := New(a)
	done := make(chan error, 1)
	go func() { _, err := bc.Write([]byte("nobody reads this")); done <- err }()
	time.Sleep(20 * time.Millisecond)
	bc.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the blocked write succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock the write")
	}
}

// BenchmarkTLSWrite is one TLS hop over loopback TCP, 256 KiB messages
// (the relay's), with each message's records written one by one as
// crypto/tls does and gathered into one write by a hold:
//
//	go test ./internal/batchconn -run '^$' -bench TLSWrite -count 5
func BenchmarkTLSWrite(b *testing.B) {
	for _, held := range []bool{false, true} {
		name := "record-per-write"
		if held {
			name = "held"
		}
		b.Run(name, func(b *testing.B) {
			tc, bc, _, sc := pair(b)
			done := make(chan error, 1)
			go func() {
				_, err := io.Copy(io.Discard, sc)
				done <- err
			}()
			msg := make([]byte, 256<<10)
			b.SetBytes(int64(len(msg)))
			b.ResetTimer()
			for range b.N {
				if held {
					bc.Hold()
				}
				_, err := tc.Write(msg)
				if held {
					if rerr := bc.Release(); err == nil {
						err = rerr
					}
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			tc.Close()
			<-done
		})
	}
}

// A Gathered connection writes each Write's records in one write to the
// connection, both ways, and the bytes arrive whole.
func TestGathered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cert := testCert(t)
	msg := make([]byte, 256<<10)
	rand.Read(msg)
	echoed := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			echoed <- err
			return
		}
		sc := Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
		defer sc.Close()
		b := make([]byte, len(msg))
		if _, err := io.ReadFull(sc, b); err != nil {
			echoed <- err
			return
		}
		_, err = sc.Write(b)
		echoed <- err
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc := &countConn{Conn: raw}
	gc := Client(cc, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	defer gc.Close()
	if err := gc.Handshake(); err != nil {
		t.Fatal(err)
	}
	before := cc.writes.Load()
	if _, err := gc.Write(msg); err != nil {
		t.Fatal(err)
	}
	if n := cc.writes.Load() - before; n != 1 {
		t.Errorf("a 256 KiB write was %d writes to the connection, want 1", n)
	}
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(gc, b); err != nil {
		t.Fatal(err)
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, msg) {
		t.Error("the echo came back changed")
	}
}

// BenchmarkGatheredRead: 256 KiB writes from a Gathered client to a TLS
// server that reads the socket as crypto/tls does (about a record per
// system call) or through a Gathered connection's read buffer; both ends
// in this process, so cpu-s/GiB is the whole transfer's CPU.
func BenchmarkGatheredRead(b *testing.B) {
	cert := testCert(b)
	for _, buffered := range []bool{false, true} {
		name := "record-per-read"
		if buffered {
			name = "buffered"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			done := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					done <- err
					return
				}
				cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
				var sc io.ReadCloser = tls.Server(c, cfg)
				if buffered {
					sc = Server(c, cfg)
				}
				defer sc.Close()
				_, err = io.CopyBuffer(io.Discard, struct{ io.Reader }{sc}, make([]byte, 256<<10))
				done <- err
			}()
			raw, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			gc := Client(raw, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
			if err := gc.Handshake(); err != nil {
				b.Fatal(err)
			}
			msg := make([]byte, 256<<10)
			b.SetBytes(int64(len(msg)))
			c0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				if _, err := gc.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
			gc.Close()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric((cpuTime()-c0).Seconds()/(float64(b.N)*float64(len(msg))/(1<<30)), "cpu-s/GiB")
		})
	}
}

// cpuTime is this process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReadBatch returns a 256 KiB write's bytes in far fewer reads than its
// sixteen records, whole and in order, and returns what has arrived
// without waiting for more.
func TestReadBatch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cert := testCert(t)
	type result struct {
		reads int
		data  []byte
		err   error
	}
	got := make(chan result, 1)
	first := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		sc := Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
		defer sc.Close()
		var r result
		buf := make([]byte, 1<<20)
		// A short write alone comes back at once.
		n, err := sc.ReadBatch(buf)
		if err != nil || string(buf[:n]) != "hello" {
			got <- result{err: fmt.Errorf("first read: %q, %v", buf[:n], err)}
			return
		}
		close(first)
		for len(r.data) < 4*(256<<10) {
			n, err := sc.ReadBatch(buf)
			r.reads++
			r.data = append(r.data, buf[:n]...)
			if err != nil {
				r.err = err
				break
			}
		}
		got <- r
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	gc := Client(raw, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	defer gc.Close()
	if _, err := gc.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first:
	case r := <-got:
		t.Fatal(r.err)
	case <-time.After(5 * time.Second):
		t.Fatal("a short write waited for more")
	}
	msg := make([]byte, 256<<10)
	rand.Read(msg)
	for range 4 {
		if _, err := gc.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := bytes.Repeat(msg, 4)
	if !bytes.Equal(r.data, want) {
		t.Fatal("the bytes came back changed")
	}
	// 64 records; a read per record would be 64. How many come together
	// depends on how far the reader is behind the writer.
	if r.reads > 32 {
		t.Errorf("%d reads for four 256 KiB writes (64 records); want at most 32", r.reads)
	}
	t.Logf("%d reads for 1 MiB", r.reads)
}
