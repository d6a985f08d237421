package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Server is one instance's DNS server (a runtime.DNSServer): it answers
// from the zone of its network and forwards the rest.
type Server struct {
	r       *Resolver
	network string
}

// Serve answers the queries that reach udp and tcp (either may be nil)
// until ctx ends or one of them fails or is closed; it then closes both,
// waits for the queries it is forwarding, and returns. Sockets closed (by
// the caller, or by Serve when ctx ends) are not an error. The limits of
// forwarded queries and TCP connections hold per call of Serve.
func (s *Server) Serve(ctx context.Context, udp net.PacketConn, tcp net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := newState(s.r.cfg)
	stop := context.AfterFunc(ctx, func() {
		if udp != nil {
			udp.Close()
		}
		if tcp != nil {
			tcp.Close()
		}
		st.closeConns()
	})
	defer stop()
	var loops sync.WaitGroup
	var udpErr, tcpErr error
	if udp != nil {
		loops.Go(func() {
			udpErr = s.serveUDP(ctx, udp, st)
			cancel()
		})
	}
	if tcp != nil {
		loops.Go(func() {
			tcpErr = s.serveTCP(ctx, tcp, st)
			cancel()
		})
	}
	loops.Wait()
	cancel()
	st.wg.Wait()
	var errs []error
	for _, err := range []error{udpErr, tcpErr} {
		if err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// state is what one call of Serve keeps: its limits and the work it
// started.
type state struct {
	forwards chan struct{} // a slot per forwarded query in progress
	bucket   bucket
	conns    chan struct{} // a slot per TCP connection
	wg       sync.WaitGroup

	mu     sync.Mutex
	open   map[net.Conn]bool
	closed bool
}

func newState(cfg Config) *state {
	return &state{
		forwards: make(chan struct{}, cfg.MaxForwards),
		bucket:   bucket{rate: cfg.Rate, burst: float64(cfg.Burst), tokens: float64(cfg.Burst), now: cfg.Now},
		conns:    make(chan struct{}, MaxTCPConns),
		open:     map[net.Conn]bool{},
	}
}

// acquire takes a forwarding slot and a token of the rate limit, and
// reports whether it could; release gives the slot back.
func (st *state) acquire() bool {
	select {
	case st.forwards <- struct{}{}:
	default:
		return false
	}
	if !st.bucket.take() {
		<-st.forwards
		return false
	}
	return true
}

func (st *state) release() { <-st.forwards }

// track records an open TCP connection, and reports false (closing it)
// once Serve is ending.
func (st *state) track(c net.Conn) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		c.Close()
		return false
	}
	st.open[c] = true
	return true
}

func (st *state) untrack(c net.Conn) {
	st.mu.Lock()
	delete(st.open, c)
	st.mu.Unlock()
	c.Close()
}

func (st *state) closeConns() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	for c := range st.open {
		c.Close()
	}
}

// bucket is a token bucket: rate tokens a second, at most burst.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

// take takes a token, and reports false when there is none.
func (b *bucket) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// serveUDP answers the datagrams of conn: from the zone at once, and
// forwarded queries each in a goroutine of its own (within the limits).
func (s *Server) serveUDP(ctx context.Context, conn net.PacketConn, st *state) error {
	buf := make([]byte, 64<<10)
	for {
		n, addr, err := conn.ReadFrom(buf)
		if err != nil {
			return err
		}
		resp, fwd := s.handle(buf[:n], false)
		if fwd != nil {
			if st.acquire() {
				st.wg.Go(func() {
					defer st.release()
					if out := s.forward(ctx, fwd); out != nil {
						_, _ = conn.WriteTo(out, addr)
					}
				})
				continue
			}
			resp = fwd.pack(answer{rcode: dnsmessage.RCodeRefused})
		}
		if resp != nil {
			_, _ = conn.WriteTo(resp, addr)
		}
	}
}

// serveTCP accepts connections, at most MaxTCPConns at once, and answers
// the queries of each in turn.
func (s *Server) serveTCP(ctx context.Context, ln net.Listener, st *state) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return err
			}
			// Out of file descriptors, or the like: wait, and try again.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		select {
		case st.conns <- struct{}{}:
		default:
			c.Close()
			continue
		}
		if !st.track(c) {
			<-st.conns
			continue
		}
		st.wg.Go(func() {
			defer func() {
				st.untrack(c)
				<-st.conns
			}()
			s.serveConn(ctx, c, st)
		})
	}
}

// serveConn answers the length-prefixed queries of one TCP connection
// until it closes, idles for TCPIdle, or sends a message that gets no
// answer.
func (s *Server) serveConn(ctx context.Context, c net.Conn, st *state) {
	for {
		if err := c.SetReadDeadline(time.Now().Add(TCPIdle)); err != nil {
			return
		}
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		resp, fwd := s.handle(msg, true)
		if fwd != nil {
			if st.acquire() {
				resp = s.forward(ctx, fwd)
				st.release()
			} else {
				resp = fwd.pack(answer{rcode: dnsmessage.RCodeRefused})
			}
		}
		if resp == nil || ctx.Err() != nil {
			return
		}
		if err := c.SetWriteDeadline(time.Now().Add(TCPIdle)); err != nil {
			return
		}
		out := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(resp)), uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

// request is a parsed query.
type request struct {
	id     uint16
	rd, cd bool
	q      dnsmessage.Question
	// name is the question's name in lower case.
	name string
	// edns is set when the query carries an OPT record, with its DNSSEC
	// OK bit in do.
	edns, do bool
	// limit is the largest answer the client takes: 65535 over TCP,
	// 512 over UDP without EDNS, its buffer size up to MaxUDPSize with.
	limit int
	tcp   bool
}

// Extended RCODEs (RFC 6891) that dnsmessage does not name.
const rcodeBadVersion dnsmessage.RCode = 16

// Types that dnsmessage does not name.
const typeIXFR dnsmessage.Type = 251

// handle reads one message from a client and returns the answer to send
// now (nil: none, for a message too short to hold a header or one that
// is not a query), or the request to forward.
func (s *Server) handle(msg []byte, tcp bool) (resp []byte, fwd *request) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil, nil
	}
	req := &request{id: h.ID, rd: h.RecursionDesired, cd: h.CheckingDisabled, limit: 512, tcp: tcp}
	if tcp {
		req.limit = 65535
	}
	if h.OpCode != 0 {
		return req.packBare(dnsmessage.RCodeNotImplemented), nil
	}
	if req.q, err = p.Question(); err != nil {
		return req.packBare(dnsmessage.RCodeFormatError), nil
	}
	req.name = lower(req.q.Name.String())
	if _, err := p.Question(); !errors.Is(err, dnsmessage.ErrSectionDone) {
		return req.packBare(dnsmessage.RCodeFormatError), nil
	}
	if p.SkipAllAnswers() != nil || p.SkipAllAuthorities() != nil {
		return req.packBare(dnsmessage.RCodeFormatError), nil
	}
	badVersion := false
	for {
		rh, err := p.AdditionalHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil || rh.Type == dnsmessage.TypeOPT && req.edns {
			return req.packBare(dnsmessage.RCodeFormatError), nil
		}
		if rh.Type == dnsmessage.TypeOPT {
			req.edns, req.do = true, rh.DNSSECAllowed()
			if !tcp {
				req.limit = min(max(int(rh.Class), 512), MaxUDPSize)
			}
			badVersion = rh.TTL>>16&0xff != 0
		}
		if err := p.SkipAdditional(); err != nil {
			return req.packBare(dnsmessage.RCodeFormatError), nil
		}
	}
	switch {
	case badVersion:
		return req.pack(answer{rcode: rcodeBadVersion}), nil
	case req.q.Class != dnsmessage.ClassINET && req.q.Class != dnsmessage.ClassANY,
		req.q.Type == dnsmessage.TypeAXFR || req.q.Type == typeIXFR:
		return req.pack(answer{rcode: dnsmessage.RCodeRefused}), nil
	}
	if ans, ok := s.local(req); ok {
		return req.pack(ans), nil
	}
	return nil, req
}

// answer is what a reply says.
type answer struct {
	rcode dnsmessage.RCode
	// aa marks an authoritative answer (one from a zone).
	aa bool
	// tc truncates the reply: no records, only the question.
	tc bool
	// a and ptr are the A and PTR records of the question's name.
	a   []netip.Addr
	ptr []string
	// soa adds the SOA record of internal. to the authority section, for
	// negative answers.
	soa bool
}

// soaInternal is the SOA record of the internal. zone.
var soaInternal = dnsmessage.SOAResource{
	NS: dnsmessage.MustNewName("ns.internal."), MBox: dnsmessage.MustNewName("hostmaster.internal."),
	Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, MinTTL: TTL,
}

// local answers a question from the server's zone: names under
// .internal, and the reverse names of the network's CIDR. It reports
// false for the questions to forward.
func (s *Server) local(req *request) (answer, bool) {
	z := s.r.zone(s.network)
	name := req.name
	qt := req.q.Type
	if name == "internal." || strings.HasSuffix(name, ".internal.") {
		ans := answer{aa: true, soa: true}
		if name == "internal." || z != nil && name == z.domain {
			return ans, true // a name with no records of its own
		}
		var addrs []netip.Addr
		ok := false
		if z != nil {
			addrs, ok = z.names[name]
		}
		switch {
		case !ok:
			ans.rcode = dnsmessage.RCodeNameError
		case qt == dnsmessage.TypeA || qt == dnsmessage.TypeALL:
			ans.a, ans.soa = addrs, false
		}
		return ans, true
	}
	if z == nil || !z.cidr.IsValid() {
		return answer{}, false
	}
	a, ok := reverseAddr(name)
	if !ok || !z.cidr.Contains(a) {
		return answer{}, false
	}
	ans := answer{aa: true}
	names := z.ptrs[a]
	switch {
	case len(names) == 0:
		ans.rcode = dnsmessage.RCodeNameError
	case qt == dnsmessage.TypePTR || qt == dnsmessage.TypeALL:
		ans.ptr = names
	}
	return ans, true
}

// header is the header of a reply to req.
func (req *request) header(rcode dnsmessage.RCode, aa, tc bool) dnsmessage.Header {
	return dnsmessage.Header{ID: req.id, Response: true, Authoritative: aa, Truncated: tc,
		RecursionDesired: req.rd, RecursionAvailable: true, CheckingDisabled: req.cd, RCode: rcode & 0xf}
}

// packBare is a reply without the question, for queries whose question
// could not be read or is not used.
func (req *request) packBare(rcode dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 12), req.header(rcode, false, false))
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// pack is the reply to req that says ans; one larger than req.limit is
// sent truncated instead.
func (req *request) pack(ans answer) []byte {
	out, err := req.build(ans)
	if err == nil && len(out) <= req.limit {
		return out
	}
	out, err = req.build(answer{rcode: ans.rcode, aa: ans.aa, tc: true})
	if err != nil {
		return req.packBare(dnsmessage.RCodeServerFailure)
	}
	return out
}

func (req *request) build(ans answer) ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), req.header(ans.rcode, ans.aa, ans.tc))
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(req.q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	rh := dnsmessage.ResourceHeader{Name: req.q.Name, Class: dnsmessage.ClassINET, TTL: TTL}
	if !ans.tc {
		for _, a := range ans.a {
			if err := b.AResource(rh, dnsmessage.AResource{A: a.As4()}); err != nil {
				return nil, err
			}
		}
		for _, n := range ans.ptr {
			name, err := dnsmessage.NewName(n)
			if err != nil {
				return nil, err
			}
			if err := b.PTRResource(rh, dnsmessage.PTRResource{PTR: name}); err != nil {
				return nil, err
			}
		}
	}
	if err := b.StartAuthorities(); err != nil {
		return nil, err
	}
	if ans.soa && !ans.tc {
		h := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("internal."), Class: dnsmessage.ClassINET, TTL: TTL}
		if err := b.SOAResource(h, soaInternal); err != nil {
			return nil, err
		}
	}
	if err := b.StartAdditionals(); err != nil {
		return nil, err
	}
	if req.edns {
		var opt dnsmessage.ResourceHeader
		if err := opt.SetEDNS0(MaxUDPSize, ans.rcode, false); err != nil {
			return nil, err
		}
		if err := b.OPTResource(opt, dnsmessage.OPTResource{}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
