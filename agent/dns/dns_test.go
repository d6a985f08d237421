package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

var _ runtime.DNSServer = (*Server)(nil)

// networks are two tenants' networks with the same name and CIDR, on one
// host.
var networks = []agentapi.HostNetwork{
	{ID: "n-1", TenantID: "t-1", Name: "Net", CIDR: "10.0.0.0/24", Endpoints: []agentapi.Endpoint{
		{InstanceID: "i-peer", Name: "peer", Address: "10.0.0.7"},
		{InstanceID: "i-self", Name: "self", Address: "10.0.0.5"},
		{InstanceID: "i-bad", Name: "bad_name", Address: "10.0.0.9"},
		{InstanceID: "i-twin1", Name: "twin", Address: "10.0.0.12"},
		{InstanceID: "i-twin2", Name: "Twin", Address: "10.0.0.11"},
		{InstanceID: "i-noaddr", Name: "noaddr", Address: ""},
	}},
	{ID: "n-2", TenantID: "t-2", Name: "net", CIDR: "10.0.0.0/24", Endpoints: []agentapi.Endpoint{
		{InstanceID: "i-hidden", Name: "hidden", Address: "10.0.0.8"},
	}},
}

// upstream is a fake resolver on 127.0.0.1, on UDP and TCP at one port.
type upstream struct {
	addr    netip.AddrPort
	queries atomic.Int64
	tcp     atomic.Int64
	// lastOPT is the buffer size of the OPT record of the last query (0:
	// none).
	lastOPT atomic.Int64
}

// manyAddrs are the answers of big.example.: more than fit in 512 bytes.
var manyAddrs = func() []netip.Addr {
	var out []netip.Addr
	for i := range 60 {
		out = append(out, netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}))
	}
	return out
}()

// hugeAddrs are the answers of huge.example.: more than 4096 bytes.
var hugeAddrs = func() []netip.Addr {
	var out []netip.Addr
	for i := range 300 {
		out = append(out, netip.AddrFrom4([4]byte{198, 51, byte(100 + i/256), byte(i)}))
	}
	return out
}()

// newUpstream starts a fake resolver that answers example.com. with
// 93.184.216.34, big.example. with manyAddrs (truncated over UDP),
// huge.example. with hugeAddrs (whatever the buffer), fail.example. with
// SERVFAIL, and everything else with NXDOMAIN.
func newUpstream(t *testing.T) *upstream {
	t.Helper()
	var pc net.PacketConn
	var ln net.Listener
	for range 20 {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no port free on both UDP and TCP")
	}
	u := &upstream{addr: netip.MustParseAddrPort(pc.LocalAddr().String())}
	t.Cleanup(func() { pc.Close(); ln.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := u.answer(buf[:n], false); out != nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				msg, err := readFramed(c)
				if err != nil {
					return
				}
				if out := u.answer(msg, true); out != nil {
					_ = writeFramed(c, out)
				}
			}()
		}
	}()
	return u
}

func (u *upstream) answer(msg []byte, tcp bool) []byte {
	var m dnsmessage.Message
	if err := m.Unpack(msg); err != nil || len(m.Questions) != 1 {
		return nil
	}
	u.queries.Add(1)
	if tcp {
		u.tcp.Add(1)
	}
	u.lastOPT.Store(0)
	for _, a := range m.Additionals {
		if a.Header.Type == dnsmessage.TypeOPT {
			u.lastOPT.Store(int64(a.Header.Class))
		}
	}
	q := m.Questions[0]
	resp := dnsmessage.Message{Header: dnsmessage.Header{ID: m.ID, Response: true, RecursionDesired: m.RecursionDesired, RecursionAvailable: true},
		Questions: m.Questions}
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
	switch strings.ToLower(q.Name.String()) {
	case "example.com.":
		resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: [4]byte{93, 184, 216, 34}}})
	case "big.example.":
		if !tcp {
			resp.Truncated = true
			break
		}
		for _, a := range manyAddrs {
			resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: a.As4()}})
		}
	case "huge.example.":
		// Larger than any buffer, truncated or not: a broken upstream.
		for _, a := range hugeAddrs {
			resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: a.As4()}})
		}
	case "fail.example.":
		resp.RCode = dnsmessage.RCodeServerFailure
	default:
		resp.RCode = dnsmessage.RCodeNameError
	}
	out, err := resp.Pack()
	if err != nil {
		return nil
	}
	return out
}

func readFramed(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(l[:]))
	_, err := io.ReadFull(r, msg)
	return msg, err
}

func writeFramed(w io.Writer, msg []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...))
	return err
}

// served is one instance's server, listening on 127.0.0.1.
type served struct {
	udp, tcp string
}

// serve runs srv on loopback sockets until the test ends.
func serve(t *testing.T, srv *Server) served {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, pc, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return served{udp: pc.LocalAddr().String(), tcp: ln.Addr().String()}
}

// newResolver is a resolver of networks that forwards to ups.
func newResolver(t *testing.T, cfg Config, ups ...netip.AddrPort) *Resolver {
	t.Helper()
	cfg.Upstreams = ups
	cfg.Log = slog.New(slog.DiscardHandler)
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	r := New(cfg)
	r.Update(networks)
	return r
}

// query is a question as a client asks it.
type query struct {
	name string
	typ  dnsmessage.Type
	// edns is the buffer size of an OPT record; 0: none.
	edns int
	tcp  bool
}

// ask sends q to s and returns the answer.
func ask(t *testing.T, s served, id uint16, q query) dnsmessage.Message {
	t.Helper()
	msg := packQuery(t, id, q)
	var raw []byte
	if q.tcp {
		c, err := net.Dial("tcp", s.tcp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // a hang fails, not a measure
		if err := writeFramed(c, msg); err != nil {
			t.Fatal(err)
		}
		if raw, err = readFramed(c); err != nil {
			t.Fatal(err)
		}
	} else {
		c, err := net.Dial("udp", s.udp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64<<10)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		raw = buf[:n]
		if limit := max(512, min(q.edns, MaxUDPSize)); n > limit {
			t.Errorf("%s over UDP: %d bytes, more than %d", q.name, n, limit)
		}
	}
	var m dnsmessage.Message
	if err := m.Unpack(raw); err != nil {
		t.Fatalf("%s: unpack the answer: %v", q.name, err)
	}
	if m.ID != id || !m.Response {
		t.Fatalf("%s: answer with ID %d (response %v), want %d", q.name, m.ID, m.Response, id)
	}
	return m
}

func packQuery(t *testing.T, id uint16, q query) []byte {
	t.Helper()
	m := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(q.name), Type: q.typ, Class: dnsmessage.ClassINET}}}
	if q.edns > 0 {
		var opt dnsmessage.ResourceHeader
		_ = opt.SetEDNS0(q.edns, dnsmessage.RCodeSuccess, false)
		m.Additionals = append(m.Additionals, dnsmessage.Resource{Header: opt, Body: &dnsmessage.OPTResource{}})
	}
	msg, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// records are an answer's A and PTR records, as text.
func records(m dnsmessage.Message) []string {
	var out []string
	for _, a := range m.Answers {
		switch b := a.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, netip.AddrFrom4(b.A).String())
		case *dnsmessage.PTRResource:
			out = append(out, b.PTR.String())
		}
	}
	return out
}

// TestZone checks the answers of network n-1's server, over UDP and TCP:
// its own names, case-insensitively, by name and by instance ID, PTR
// records, and no names of the other tenant's network (same name, same
// CIDR); none of which reaches the upstream.
func TestZone(t *testing.T) {
	up := newUpstream(t)
	r := newResolver(t, Config{}, up.addr)
	s := serve(t, r.For("n-1"))
	for _, tc := range []struct {
		name string
		typ  dnsmessage.Type
		// rcode and want are the answer's RCODE and records; soa, whether
		// the authority section has internal.'s SOA.
		rcode     dnsmessage.RCode
		want      []string
		soa       bool
		forwarded bool
	}{
		{name: "peer.net.internal.", typ: dnsmessage.TypeA, want: []string{"10.0.0.7"}},
		{name: "PEER.Net.INTERNAL.", typ: dnsmessage.TypeA, want: []string{"10.0.0.7"}},
		{name: "i-peer.internal.", typ: dnsmessage.TypeA, want: []string{"10.0.0.7"}},
		{name: "I-Self.internal.", typ: dnsmessage.TypeA, want: []string{"10.0.0.5"}},
		{name: "twin.net.internal.", typ: dnsmessage.TypeA, want: []string{"10.0.0.11", "10.0.0.12"}},
		{name: "peer.net.internal.", typ: dnsmessage.TypeAAAA, soa: true},
		{name: "peer.net.internal.", typ: dnsmessage.TypeTXT, soa: true},
		{name: "peer.net.internal.", typ: dnsmessage.TypeALL, want: []string{"10.0.0.7"}},
		{name: "net.internal.", typ: dnsmessage.TypeA, soa: true},
		{name: "internal.", typ: dnsmessage.TypeA, soa: true},
		{name: "nobody.net.internal.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError, soa: true},
		{name: "bad_name.net.internal.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError, soa: true},
		{name: "i-bad.internal.", typ: dnsmessage.TypeA, want: []string{"10.0.0.9"}},
		{name: "noaddr.net.internal.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError, soa: true},
		{name: "peer.other.internal.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError, soa: true},
		// The other tenant's network, of the same name and CIDR.
		{name: "hidden.net.internal.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError, soa: true},
		{name: "i-hidden.internal.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError, soa: true},
		{name: "8.0.0.10.in-addr.arpa.", typ: dnsmessage.TypePTR, rcode: dnsmessage.RCodeNameError},
		{name: "7.0.0.10.in-addr.arpa.", typ: dnsmessage.TypePTR, want: []string{"peer.net.internal.", "i-peer.internal."}},
		{name: "7.0.0.10.IN-ADDR.ARPA.", typ: dnsmessage.TypePTR, want: []string{"peer.net.internal.", "i-peer.internal."}},
		{name: "9.0.0.10.in-addr.arpa.", typ: dnsmessage.TypePTR, want: []string{"i-bad.internal."}},
		{name: "7.0.0.10.in-addr.arpa.", typ: dnsmessage.TypeA},
		{name: "99.0.0.10.in-addr.arpa.", typ: dnsmessage.TypePTR, rcode: dnsmessage.RCodeNameError},
		// Outside the network: the upstream's.
		{name: "7.0.1.10.in-addr.arpa.", typ: dnsmessage.TypePTR, rcode: dnsmessage.RCodeNameError, forwarded: true},
		{name: "example.com.", typ: dnsmessage.TypeA, want: []string{"93.184.216.34"}, forwarded: true},
	} {
		for _, tcp := range []bool{false, true} {
			before := up.queries.Load()
			m := ask(t, s, 4242, query{name: tc.name, typ: tc.typ, tcp: tcp})
			got := records(m)
			soa := len(m.Authorities) == 1 && m.Authorities[0].Header.Type == dnsmessage.TypeSOA &&
				m.Authorities[0].Header.Name.String() == "internal."
			if m.RCode != tc.rcode || !slices.Equal(got, tc.want) || soa != tc.soa || m.Authoritative == tc.forwarded {
				t.Errorf("%s %v (tcp %v): %v %q, soa %v, authoritative %v; want %v %q, soa %v, authoritative %v",
					tc.name, tc.typ, tcp, m.RCode, got, soa, m.Authoritative, tc.rcode, tc.want, tc.soa, !tc.forwarded)
			}
			for _, a := range m.Answers {
				if a.Header.Name.String() != tc.name {
					t.Errorf("%s: an answer for %s, want the name as asked", tc.name, a.Header.Name)
				}
			}
			if forwarded := up.queries.Load() > before; forwarded != tc.forwarded {
				t.Errorf("%s (tcp %v): forwarded %v, want %v", tc.name, tcp, forwarded, tc.forwarded)
			}
		}
	}
}

// TestIsolation checks that each network's server answers its own names
// only, that a network the resolver does not know has none, and that
// Update replaces the zones.
func TestIsolation(t *testing.T) {
	up := newUpstream(t)
	r := newResolver(t, Config{}, up.addr)
	one, two, none := serve(t, r.For("n-1")), serve(t, r.For("n-2")), serve(t, r.For("n-404"))
	for _, tc := range []struct {
		s     served
		name  string
		rcode dnsmessage.RCode
		want  []string
	}{
		{one, "peer.net.internal.", dnsmessage.RCodeSuccess, []string{"10.0.0.7"}},
		{one, "hidden.net.internal.", dnsmessage.RCodeNameError, nil},
		{two, "hidden.net.internal.", dnsmessage.RCodeSuccess, []string{"10.0.0.8"}},
		{two, "peer.net.internal.", dnsmessage.RCodeNameError, nil},
		{two, "i-peer.internal.", dnsmessage.RCodeNameError, nil},
		{none, "peer.net.internal.", dnsmessage.RCodeNameError, nil},
		{none, "i-hidden.internal.", dnsmessage.RCodeNameError, nil},
	} {
		m := ask(t, tc.s, 7, query{name: tc.name, typ: dnsmessage.TypeA})
		if got := records(m); m.RCode != tc.rcode || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v %q, want %v %q", tc.name, m.RCode, got, tc.rcode, tc.want)
		}
	}
	// The running servers see the new zones: peer moved, n-2 is gone.
	r.Update([]agentapi.HostNetwork{{ID: "n-1", Name: "net", CIDR: "10.0.0.0/24", Endpoints: []agentapi.Endpoint{
		{InstanceID: "i-peer", Name: "peer", Address: "10.0.0.70"}}}})
	for _, tc := range []struct {
		s     served
		name  string
		rcode dnsmessage.RCode
		want  []string
	}{
		{one, "peer.net.internal.", dnsmessage.RCodeSuccess, []string{"10.0.0.70"}},
		{one, "self.net.internal.", dnsmessage.RCodeNameError, nil},
		{two, "hidden.net.internal.", dnsmessage.RCodeNameError, nil},
	} {
		m := ask(t, tc.s, 8, query{name: tc.name, typ: dnsmessage.TypeA})
		if got := records(m); m.RCode != tc.rcode || !slices.Equal(got, tc.want) {
			t.Errorf("after Update, %s: %v %q, want %v %q", tc.name, m.RCode, got, tc.rcode, tc.want)
		}
	}
}

// deadAddr is a loopback UDP and TCP port nothing listens on.
func deadAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(pc.LocalAddr().String())
	pc.Close()
	return addr
}

// silentAddr is a loopback UDP port that reads queries and never
// answers.
func silentAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}

// TestForward checks forwarding: answers relayed under the client's ID,
// the client's EDNS buffer size passed on (at most MaxUDPSize), a
// truncated upstream answer fetched again over TCP and truncated for a
// client that cannot take it, the next upstream tried when one is down,
// and SERVFAIL when none answers.
func TestForward(t *testing.T) {
	up := newUpstream(t)
	dead, silent := deadAddr(t), silentAddr(t)
	for _, tc := range []struct {
		what string
		ups  []netip.AddrPort
		q    query
		// rcode, want and tc are the answer's; opt is the buffer size the
		// upstream was told (0: no OPT), viaTCP whether it was asked over
		// TCP too.
		rcode  dnsmessage.RCode
		want   []string
		tc     bool
		opt    int64
		viaTCP bool
	}{
		{what: "an answer", ups: []netip.AddrPort{up.addr}, q: query{name: "example.com.", typ: dnsmessage.TypeA},
			want: []string{"93.184.216.34"}},
		{what: "the name as asked", ups: []netip.AddrPort{up.addr}, q: query{name: "EXAMPLE.com.", typ: dnsmessage.TypeA},
			want: []string{"93.184.216.34"}},
		{what: "EDNS passed on", ups: []netip.AddrPort{up.addr}, q: query{name: "example.com.", typ: dnsmessage.TypeA, edns: 1000},
			want: []string{"93.184.216.34"}, opt: 1000},
		{what: "EDNS capped", ups: []netip.AddrPort{up.addr}, q: query{name: "example.com.", typ: dnsmessage.TypeA, edns: 4096},
			want: []string{"93.184.216.34"}, opt: MaxUDPSize},
		{what: "an upstream error", ups: []netip.AddrPort{up.addr}, q: query{name: "fail.example.", typ: dnsmessage.TypeA},
			rcode: dnsmessage.RCodeServerFailure},
		{what: "no such name", ups: []netip.AddrPort{up.addr}, q: query{name: "nothing.example.", typ: dnsmessage.TypeA},
			rcode: dnsmessage.RCodeNameError},
		{what: "truncated, too large for 512 bytes", ups: []netip.AddrPort{up.addr}, q: query{name: "big.example.", typ: dnsmessage.TypeA},
			tc: true, viaTCP: true},
		{what: "truncated, fits the EDNS buffer", ups: []netip.AddrPort{up.addr}, q: query{name: "big.example.", typ: dnsmessage.TypeA, edns: 1232},
			want: addrStrings(manyAddrs), opt: 1232, viaTCP: true},
		{what: "truncated, over TCP", ups: []netip.AddrPort{up.addr}, q: query{name: "big.example.", typ: dnsmessage.TypeA, tcp: true},
			want: addrStrings(manyAddrs), viaTCP: true},
		{what: "too large over UDP, over TCP", ups: []netip.AddrPort{up.addr}, q: query{name: "huge.example.", typ: dnsmessage.TypeA, tcp: true},
			want: addrStrings(hugeAddrs), viaTCP: true},
		{what: "too large over UDP", ups: []netip.AddrPort{up.addr}, q: query{name: "huge.example.", typ: dnsmessage.TypeA, edns: 1232},
			tc: true, opt: 1232, viaTCP: true},
		{what: "the first upstream down", ups: []netip.AddrPort{dead, up.addr}, q: query{name: "example.com.", typ: dnsmessage.TypeA},
			want: []string{"93.184.216.34"}},
		{what: "the first upstream silent", ups: []netip.AddrPort{silent, up.addr}, q: query{name: "example.com.", typ: dnsmessage.TypeA},
			want: []string{"93.184.216.34"}},
		{what: "every upstream down", ups: []netip.AddrPort{dead}, q: query{name: "example.com.", typ: dnsmessage.TypeA},
			rcode: dnsmessage.RCodeServerFailure},
		{what: "every upstream down, over TCP", ups: []netip.AddrPort{dead, silent}, q: query{name: "example.com.", typ: dnsmessage.TypeA, tcp: true},
			rcode: dnsmessage.RCodeServerFailure},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r := newResolver(t, Config{Timeout: 200 * time.Millisecond}, tc.ups...)
			s := serve(t, r.For("n-1"))
			tcpBefore := up.tcp.Load()
			m := ask(t, s, 0xbeef, tc.q)
			if got := records(m); m.RCode != tc.rcode || !slices.Equal(got, tc.want) || m.Truncated != tc.tc {
				t.Errorf("%v %q (truncated %v), want %v %q (truncated %v)", m.RCode, got, m.Truncated, tc.rcode, tc.want, tc.tc)
			}
			if len(m.Questions) != 1 || m.Questions[0].Name.String() != tc.q.name {
				t.Errorf("questions %v, want %s", m.Questions, tc.q.name)
			}
			if tc.rcode != dnsmessage.RCodeServerFailure || slices.Contains(tc.ups, up.addr) {
				if got := up.lastOPT.Load(); got != tc.opt {
					t.Errorf("the upstream was told a buffer of %d, want %d", got, tc.opt)
				}
			}
			if viaTCP := up.tcp.Load() > tcpBefore; viaTCP != tc.viaTCP {
				t.Errorf("asked over TCP: %v, want %v", viaTCP, tc.viaTCP)
			}
		})
	}
}

func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// TestRateLimit checks that an instance's forwarded queries beyond its
// burst are refused until time gives it tokens again, and that its zone
// is answered meanwhile.
func TestRateLimit(t *testing.T) {
	up := newUpstream(t)
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := newResolver(t, Config{Rate: 1, Burst: 2, Now: clock}, up.addr)
	s := serve(t, r.For("n-1"))
	for i, tc := range []struct {
		advance time.Duration
		name    string
		rcode   dnsmessage.RCode
	}{
		{0, "example.com.", dnsmessage.RCodeSuccess},
		{0, "example.com.", dnsmessage.RCodeSuccess},
		{0, "example.com.", dnsmessage.RCodeRefused},
		{0, "peer.net.internal.", dnsmessage.RCodeSuccess},
		{500 * time.Millisecond, "example.com.", dnsmessage.RCodeRefused},
		{500 * time.Millisecond, "example.com.", dnsmessage.RCodeSuccess},
		{0, "example.com.", dnsmessage.RCodeRefused},
		{time.Hour, "example.com.", dnsmessage.RCodeSuccess},
		{0, "example.com.", dnsmessage.RCodeSuccess},
		{0, "example.com.", dnsmessage.RCodeRefused},
	} {
		mu.Lock()
		now = now.Add(tc.advance)
		mu.Unlock()
		if m := ask(t, s, uint16(i), query{name: tc.name, typ: dnsmessage.TypeA}); m.RCode != tc.rcode {
			t.Errorf("query %d (%s after %v): %v, want %v", i, tc.name, tc.advance, m.RCode, tc.rcode)
		}
	}
}

// TestForwardSlots checks the bound on forwarded queries in progress.
func TestForwardSlots(t *testing.T) {
	st := newState(Config{MaxForwards: 3, Rate: 1000, Burst: 1000, Now: time.Now})
	for i, want := range []bool{true, true, true, false, false} {
		if got := st.acquire(); got != want {
			t.Errorf("acquire %d: %v, want %v", i, got, want)
		}
	}
	st.release()
	if !st.acquire() {
		t.Error("acquire after a release: false")
	}
}

// TestTCPConns checks that an instance holds at most MaxTCPConns
// connections: one more is closed at once, and the others still work.
func TestTCPConns(t *testing.T) {
	r := newResolver(t, Config{}, deadAddr(t))
	s := serve(t, r.For("n-1"))
	var conns []net.Conn
	for range MaxTCPConns + 1 {
		c, err := net.Dial("tcp", s.tcp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		conns = append(conns, c)
	}
	extra := conns[MaxTCPConns]
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Errorf("the connection beyond the limit: %v, want it closed", err)
	}
	for i, c := range conns[:MaxTCPConns] {
		if err := writeFramed(c, packQuery(t, uint16(i), query{name: "peer.net.internal.", typ: dnsmessage.TypeA})); err != nil {
			t.Fatal(err)
		}
		raw, err := readFramed(c)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		var m dnsmessage.Message
		if err := m.Unpack(raw); err != nil || m.ID != uint16(i) || !slices.Equal(records(m), []string{"10.0.0.7"}) {
			t.Errorf("connection %d: %v %+v", i, err, m)
		}
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// TestMalformed checks the answers to messages that are not plain
// queries: none to what has no header or is an answer itself, and an
// error (under the message's ID) to the rest, never forwarded.
func TestMalformed(t *testing.T) {
	r := newResolver(t, Config{}, deadAddr(t))
	srv := r.For("n-1")
	good := packQuery(t, 0x0102, query{name: "example.com.", typ: dnsmessage.TypeA})
	withBit := func(b []byte, i int, bits byte) []byte { b = slices.Clone(b); b[i] |= bits; return b }
	build := func(h dnsmessage.Header, qs []dnsmessage.Question, extra ...dnsmessage.Resource) []byte {
		m := dnsmessage.Message{Header: h, Questions: qs, Additionals: extra}
		out, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	q := func(name string, typ dnsmessage.Type, class dnsmessage.Class) dnsmessage.Question {
		return dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: class}
	}
	opt := func(version uint32) dnsmessage.Resource {
		var h dnsmessage.ResourceHeader
		_ = h.SetEDNS0(1232, dnsmessage.RCodeSuccess, false)
		h.TTL |= version << 16
		return dnsmessage.Resource{Header: h, Body: &dnsmessage.OPTResource{}}
	}
	hdr := dnsmessage.Header{ID: 0x0102}
	for _, tc := range []struct {
		what string
		msg  []byte
		// none: no answer; else the answer's RCODE (extended).
		none  bool
		rcode dnsmessage.RCode
	}{
		{what: "empty", msg: nil, none: true},
		{what: "shorter than a header", msg: good[:11], none: true},
		{what: "an answer", msg: withBit(good, 2, 0x80), none: true},
		{what: "a header only, one question announced", msg: good[:12], rcode: dnsmessage.RCodeFormatError},
		{what: "a question cut short", msg: good[:len(good)-2], rcode: dnsmessage.RCodeFormatError},
		{what: "no question", msg: build(hdr, nil), rcode: dnsmessage.RCodeFormatError},
		{what: "two questions", msg: build(hdr, []dnsmessage.Question{q("a.net.internal.", dnsmessage.TypeA, dnsmessage.ClassINET), q("example.com.", dnsmessage.TypeA, dnsmessage.ClassINET)}),
			rcode: dnsmessage.RCodeFormatError},
		{what: "opcode STATUS", msg: withBit(good, 2, 2<<3), rcode: dnsmessage.RCodeNotImplemented},
		{what: "opcode UPDATE", msg: withBit(good, 2, 5<<3), rcode: dnsmessage.RCodeNotImplemented},
		{what: "class CHAOS", msg: build(hdr, []dnsmessage.Question{q("version.bind.", dnsmessage.TypeTXT, dnsmessage.ClassCHAOS)}),
			rcode: dnsmessage.RCodeRefused},
		{what: "a zone transfer", msg: build(hdr, []dnsmessage.Question{q("net.internal.", dnsmessage.TypeAXFR, dnsmessage.ClassINET)}),
			rcode: dnsmessage.RCodeRefused},
		{what: "two OPT records", msg: build(hdr, []dnsmessage.Question{q("example.com.", dnsmessage.TypeA, dnsmessage.ClassINET)}, opt(0), opt(0)),
			rcode: dnsmessage.RCodeFormatError},
		{what: "EDNS version 1", msg: build(hdr, []dnsmessage.Question{q("example.com.", dnsmessage.TypeA, dnsmessage.ClassINET)}, opt(1)),
			rcode: rcodeBadVersion},
		{what: "garbage after a good query", msg: append(slices.Clone(good[:len(good)]), 0xff, 0xff), rcode: dnsmessage.RCodeSuccess},
	} {
		for _, tcp := range []bool{false, true} {
			resp, fwd := srv.handle(tc.msg, tcp)
			if fwd != nil {
				if tc.rcode != dnsmessage.RCodeSuccess {
					t.Errorf("%s: forwarded", tc.what)
				}
				continue
			}
			if tc.none {
				if resp != nil {
					t.Errorf("%s: answered %x, want no answer", tc.what, resp)
				}
				continue
			}
			var p dnsmessage.Parser
			h, err := p.Start(resp)
			if err != nil {
				t.Fatalf("%s: answer %x: %v", tc.what, resp, err)
			}
			rcode := h.RCode
			if _, err := p.Question(); err == nil {
				_ = p.SkipAllQuestions()
				_ = p.SkipAllAnswers()
				_ = p.SkipAllAuthorities()
				if rh, err := p.AdditionalHeader(); err == nil && rh.Type == dnsmessage.TypeOPT {
					rcode = rh.ExtendedRCode(rcode)
				}
			}
			if h.ID != 0x0102 || !h.Response || rcode != tc.rcode {
				t.Errorf("%s (tcp %v): ID %#x, response %v, %v; want ID 0x102, %v", tc.what, tcp, h.ID, h.Response, rcode, tc.rcode)
			}
		}
	}
}

// FuzzHandle feeds the packet handler arbitrary messages: it must not
// panic, and whatever it answers is a response under the message's ID;
// what it forwards makes a query. `go test` runs the seeds.
func FuzzHandle(f *testing.F) {
	for _, q := range []query{
		{name: "peer.net.internal.", typ: dnsmessage.TypeA},
		{name: "7.0.0.10.in-addr.arpa.", typ: dnsmessage.TypePTR, edns: 4096},
		{name: "example.com.", typ: dnsmessage.TypeAAAA, edns: 100},
	} {
		m := dnsmessage.Message{Header: dnsmessage.Header{ID: 9, RecursionDesired: true},
			Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(q.name), Type: q.typ, Class: dnsmessage.ClassINET}}}
		if q.edns > 0 {
			var opt dnsmessage.ResourceHeader
			_ = opt.SetEDNS0(q.edns, dnsmessage.RCodeSuccess, true)
			m.Additionals = append(m.Additionals, dnsmessage.Resource{Header: opt, Body: &dnsmessage.OPTResource{}})
		}
		msg, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msg, false)
		f.Add(msg, true)
		f.Add(msg[:len(msg)-3], false)
	}
	f.Add([]byte{0, 1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xc0, 0x0c}, false) // a name pointing at itself
	f.Add([]byte{}, true)
	r := New(Config{Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9")}, Log: slog.New(slog.DiscardHandler)})
	r.Update(networks)
	srv := r.For("n-1")
	f.Fuzz(func(t *testing.T, msg []byte, tcp bool) {
		resp, fwd := srv.handle(msg, tcp)
		if fwd != nil {
			if _, err := fwd.upstreamQuery(); err != nil {
				t.Fatalf("the upstream query of %x: %v", msg, err)
			}
			resp = fwd.pack(answer{rcode: dnsmessage.RCodeRefused})
		}
		if resp == nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(resp)
		if err != nil || !h.Response || h.ID != binary.BigEndian.Uint16(msg) {
			t.Fatalf("answer %x to %x: %+v, %v", resp, msg, h, err)
		}
		if !tcp && len(resp) > MaxUDPSize {
			t.Fatalf("answer of %d bytes over UDP", len(resp))
		}
	})
}

// TestResolvConf checks the default upstreams.
func TestResolvConf(t *testing.T) {
	dir := t.TempDir()
	local := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53"), netip.MustParseAddrPort("[::1]:53")}
	for _, tc := range []struct {
		what, text string
		want       []netip.AddrPort
	}{
		{"nameservers", "# resolv.conf\nsearch example.com\nnameserver 10.255.255.53\nnameserver  fd00::53\noptions ndots:5\n",
			[]netip.AddrPort{netip.MustParseAddrPort("10.255.255.53:53"), netip.MustParseAddrPort("[fd00::53]:53")}},
		{"a bad line", "nameserver not-an-address\nnameserver 192.0.2.1\nnameserver\n", []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:53")}},
		{"none", "search example.com\n", local},
		{"missing", "", local},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.what, " ", "-"))
		if tc.what != "missing" {
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		r := New(Config{ResolvConf: path, Log: slog.New(slog.DiscardHandler)})
		if got := r.Upstreams(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, got, tc.want)
		}
	}
}

// TestLabels checks which names become DNS names.
func TestLabels(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"peer", "peer", true},
		{"Peer-2", "peer-2", true},
		{"i-0123abcd", "i-0123abcd", true},
		{"", "", false},
		{"-peer", "", false},
		{"peer-", "", false},
		{"bad_name", "", false},
		{"a.b", "", false},
		{strings.Repeat("a", 63), strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), "", false},
		{"pé", "", false},
	} {
		if got, ok := dnsLabel(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("dnsLabel(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
