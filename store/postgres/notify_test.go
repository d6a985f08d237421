package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/store/postgres"
)

// A notification reaches every listener of its schema's channel, in
// order, and none of another schema's; a broken listening connection is
// told down, opened again and told up.
func TestNotifier(t *testing.T) {
	ctx := t.Context()
	// Two stores on one schema, as two replicas have, and one on another.
	u := freshSchema(t)
	var a [2]*postgres.Store
	for i := range a {
		s, err := postgres.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		a[i] = s
	}
	a1, a2, other := a[0], a[1], open(t)
	n1, err := a1.Notifier(ctx, "assignments")
	if err != nil {
		t.Fatal(err)
	}
	n2, err := a2.Notifier(ctx, "assignments")
	if err != nil {
		t.Fatal(err)
	}
	no, err := other.Notifier(ctx, "assignments")
	if err != nil {
		t.Fatal(err)
	}
	if n1.Channel() != n2.Channel() || n1.Channel() == no.Channel() || len(n1.Channel()) > 63 {
		t.Fatalf("channels %q, %q (same schema), %q (another)", n1.Channel(), n2.Channel(), no.Channel())
	}
	if _, err := a1.Notifier(ctx, `x"; DROP`); err == nil {
		t.Fatal("a topic with a quote was taken")
	}

	type listener struct {
		got chan string
		ups chan bool
	}
	listen := func(n *postgres.Notifier) listener {
		l := listener{got: make(chan string, 100), ups: make(chan bool, 10)}
		go n.Listen(ctx, func(on bool) { l.ups <- on }, func(p string) { l.got <- p })
		return l
	}
	waitUp := func(l listener, want bool) {
		t.Helper()
		select {
		case on := <-l.ups:
			if on != want {
				t.Fatalf("up(%v), want up(%v)", on, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no up(%v) in 10 s", want)
		}
	}
	hear := func(l listener, want string) {
		t.Helper()
		select {
		case got := <-l.got:
			if got != want {
				t.Fatalf("got %.20q, want %.20q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%.20q not delivered in 10 s", want)
		}
	}
	l2, lo := listen(n2), listen(no)
	waitUp(l2, true)
	waitUp(lo, true)

	for _, p := range []string{"one", "two", strings.Repeat("x", postgres.MaxPayload)} {
		if err := n1.Notify(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"one", "two", strings.Repeat("x", postgres.MaxPayload)} {
		hear(l2, want)
	}
	if err := n1.Notify(ctx, strings.Repeat("x", postgres.MaxPayload+1)); err == nil {
		t.Fatal("a payload over MaxPayload was sent")
	}
	select {
	case got := <-lo.got:
		t.Fatalf("another schema's listener heard %.20q", got)
	case <-time.After(200 * time.Millisecond):
	}

	// Break the listening connection from the server's side: down, then
	// up again, and it hears again.
	res, err := a1.DB().ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE query LIKE 'LISTEN "`+n2.Channel()+`"%' AND pid <> pg_backend_pid()`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		t.Fatal("no listening backend found to end")
	}
	waitUp(l2, false)
	waitUp(l2, true)
	if err := n1.Notify(ctx, "three"); err != nil {
		t.Fatal(err)
	}
	hear(l2, "three")
	// Listen returns when its context ends.
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { n1.Listen(lctx, func(bool) {}, func(string) {}); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Listen outlived its context")
	}
}
