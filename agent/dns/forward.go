package dns

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// forward asks the upstreams req's question, in order, and returns the
// first answer, under req's ID: over UDP, and again over TCP when the
// UDP answer was truncated. An upstream that fails (no answer within the
// timeout, an unreachable one, an answer to another question) is passed
// over; one that answers SERVFAIL or REFUSED is too, while another is
// left to try. No upstream answering is SERVFAIL.
func (s *Server) forward(ctx context.Context, req *request) []byte {
	query, err := req.upstreamQuery()
	if err != nil {
		return req.pack(answer{rcode: dnsmessage.RCodeServerFailure})
	}
	var fallback []byte
	for _, up := range s.r.cfg.Upstreams {
		resp, err := s.exchange(ctx, up, query, req)
		if err != nil {
			s.r.cfg.Log.Debug("dns: upstream", "upstream", up, "name", req.name, "err", err)
			continue
		}
		switch dnsmessage.RCode(resp[3] & 0xf) {
		case dnsmessage.RCodeServerFailure, dnsmessage.RCodeRefused:
			fallback = resp
			continue
		}
		return req.relay(resp)
	}
	if fallback != nil {
		return req.relay(fallback)
	}
	return req.pack(answer{rcode: dnsmessage.RCodeServerFailure})
}

// upstreamQuery is the query the upstreams get for req: its question and
// flags, with an OPT record when req has one (the client's buffer size,
// at most MaxUDPSize, and its DNSSEC OK bit), and ID zero (exchange sets
// it). Nothing else of the client's message is passed on.
func (req *request) upstreamQuery() ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{RecursionDesired: req.rd, CheckingDisabled: req.cd})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(req.q); err != nil {
		return nil, err
	}
	if req.edns {
		if err := b.StartAdditionals(); err != nil {
			return nil, err
		}
		var opt dnsmessage.ResourceHeader
		if err := opt.SetEDNS0(min(req.limit, MaxUDPSize), dnsmessage.RCodeSuccess, req.do); err != nil {
			return nil, err
		}
		if err := b.OPTResource(opt, dnsmessage.OPTResource{}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// relay is an upstream's answer under req's ID, or a truncated reply when
// it is larger than req takes.
func (req *request) relay(resp []byte) []byte {
	if len(resp) > req.limit {
		return req.pack(answer{tc: true})
	}
	out := bytes.Clone(resp)
	binary.BigEndian.PutUint16(out, req.id)
	return out
}

var (
	// errMismatch is an answer that is not to the query sent.
	errMismatch = errors.New("an answer to another query")
	// errTooLarge is a UDP answer larger than maxUpstreamUDP, which the
	// upstream was not asked for: it is asked again over TCP.
	errTooLarge = errors.New("a UDP answer larger than asked for")
)

// maxUpstreamUDP is the largest UDP answer read from an upstream: far
// more than the buffer size it is told (at most MaxUDPSize).
const maxUpstreamUDP = 4096

// exchange asks one upstream, with a random ID: over UDP, then over TCP
// when the answer is truncated (or larger than it may be). It returns an
// answer to the query.
func (s *Server) exchange(ctx context.Context, up netip.AddrPort, query []byte, req *request) ([]byte, error) {
	query = bytes.Clone(query)
	id := uint16(rand.Uint32())
	binary.BigEndian.PutUint16(query, id)
	resp, err := s.try(ctx, "udp", up, query, id, req)
	if err == nil && resp[2]&0x02 == 0 { // not truncated (TC)
		return resp, nil
	}
	if err != nil && !errors.Is(err, errTooLarge) {
		return nil, err
	}
	return s.try(ctx, "tcp", up, query, id, req)
}

// try sends query to up over network ("udp" or "tcp") and reads its
// answer, within the timeout; over UDP, datagrams that answer something
// else are skipped.
func (s *Server) try(ctx context.Context, network string, up netip.AddrPort, query []byte, id uint16, req *request) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.r.cfg.Timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, network, up.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	if err := c.SetDeadline(deadline); err != nil {
		return nil, err
	}
	// The server ending ends the exchange at once.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if network == "udp" {
		if _, err := c.Write(query); err != nil {
			return nil, err
		}
		buf := make([]byte, maxUpstreamUDP+1)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return nil, err
			}
			if n > maxUpstreamUDP {
				return nil, errTooLarge
			}
			if req.answers(buf[:n], id) {
				return bytes.Clone(buf[:n]), nil
			}
		}
	}
	msg := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(query)), uint16(len(query)))
	if _, err := c.Write(append(msg, query...)); err != nil {
		return nil, err
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	resp := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, resp); err != nil {
		return nil, err
	}
	if !req.answers(resp, id) {
		return nil, fmt.Errorf("over TCP: %w", errMismatch)
	}
	return resp, nil
}

// answers reports whether msg is an answer to req's question under id.
func (req *request) answers(msg []byte, id uint16) bool {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || !h.Response || h.ID != id {
		return false
	}
	q, err := p.Question()
	if err != nil {
		return false
	}
	return q.Type == req.q.Type && q.Class == req.q.Class && lower(q.Name.String()) == req.name
}
