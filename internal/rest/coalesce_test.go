package rest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// recorder is an upgraded connection that records its writes, each
// after a delay (a peer that reads slowly), and whether it was closed.
type recorder struct {
	mu     sync.Mutex
	data   bytes.Buffer
	writes int
	closed bool
	delay  time.Duration
	block  chan struct{} // when not nil, writes wait for it
	fail   error
}

func (r *recorder) Read(p []byte) (int, error) { return 0, io.EOF }

func (r *recorder) Write(p []byte) (int, error) {
	if r.block != nil {
		<-r.block
	}
	time.Sleep(r.delay)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return 0, r.fail
	}
	r.data.Write(p)
	r.writes++
	return len(p), nil
}

func (r *recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return nil
}

func TestCoalescer(t *testing.T) {
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB, as the WebSocket writes
	tests := []struct {
		name  string
		conn  *recorder
		check func(t *testing.T, r *recorder, c *coalescer, want []byte)
	}{
		{"many writes arrive whole, in order, in fewer writes", &recorder{delay: time.Millisecond},
			func(t *testing.T, r *recorder, c *coalescer, want []byte) {
				c.Close() // drains the queue
				r.mu.Lock()
				defer r.mu.Unlock()
				if r.writes >= 200 {
					t.Errorf("%d writes below for 200 above: nothing coalesced", r.writes)
				}
			}},
		{"a write error comes back on a later write", &recorder{fail: errors.New("broken pipe")},
			func(t *testing.T, r *recorder, c *coalescer, want []byte) {
				deadline := time.Now().Add(5 * time.Second)
				for time.Now().Before(deadline) {
					if _, err := c.Write([]byte("x")); err != nil {
						if err.Error() != "broken pipe" {
							t.Errorf("err %v, want broken pipe", err)
						}
						return
					}
					time.Sleep(time.Millisecond)
				}
				t.Error("writes kept succeeding on a broken connection")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCoalescer(tt.conn, nil)
			var want []byte
			for i := range 200 {
				b := append([]byte{byte(i)}, chunk[1:]...)
				want = append(want, b...)
				if _, err := c.Write(b); err != nil && tt.conn.fail == nil {
					t.Fatal(err)
				}
			}
			tt.check(t, tt.conn, c, want)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if tt.conn.fail == nil && !bytes.Equal(tt.conn.data.Bytes(), want) {
				t.Errorf("got %d bytes below, want the %d written, in order", tt.conn.data.Len(), len(want))
			}
			if !tt.conn.closed {
				t.Error("Close did not close the connection")
			}
			if _, err := c.Write([]byte("late")); !errors.Is(err, net.ErrClosed) && tt.conn.fail == nil {
				t.Errorf("a write after Close: %v, want net.ErrClosed", err)
			}
		})
	}
}

// TestCoalescerCloseBounded: a peer that stopped reading does not hold
// Close past closeDrain, and a writer waiting for room is released.
func TestCoalescerCloseBounded(t *testing.T) {
	r := &recorder{block: make(chan struct{})}
	defer close(r.block)
	c := newCoalescer(r, nil)
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 3*coalesceMax)) // more than the queue holds
		werr <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	c.Close()
	if d := time.Since(start); d < closeDrain/2 || d > closeDrain+time.Second {
		t.Errorf("Close took %s, want about %s", d, closeDrain)
	}
	select {
	case err := <-werr:
		if err == nil {
			t.Error("a write that could not be queued succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Error("a writer waiting for room was not released by Close")
	}
}
