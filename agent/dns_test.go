package agent_test

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// dnsRecorder is a recorder whose runtime says it serves DNS.
type dnsRecorder struct{ *recorder }

func (dnsRecorder) ServesDNS() bool { return true }

// lookup asks srv for name's A records over a loopback socket.
func lookup(t *testing.T, srv runtime.DNSServer, name string) (dnsmessage.RCode, []string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, pc, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 3, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	msg, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // a hang fails, not a measure
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			addrs = append(addrs, netip.AddrFrom4(r.A).String())
		}
	}
	return m.RCode, addrs
}

// TestSpecCarriesDNS checks that an instance on a private network gets its
// network's DNS server when the runtime serves DNS, which answers the
// names of the network view the agent was given and not another
// tenant's; and that an instance without a network, or a runtime that
// serves no DNS, gets none.
func TestSpecCarriesDNS(t *testing.T) {
	net1 := &agentapi.InstanceNetwork{NetworkID: "n-1", NetworkName: "net", CIDR: "10.0.0.0/24", Address: "10.0.0.5"}
	view := []agentapi.HostNetwork{
		{ID: "n-1", TenantID: "t-1", Name: "net", CIDR: "10.0.0.0/24", Endpoints: []agentapi.Endpoint{
			{InstanceID: "i-dns", Name: "self", Address: "10.0.0.5"}, {InstanceID: "i-peer", Name: "peer", Address: "10.0.0.7"}}},
		{ID: "n-2", TenantID: "t-2", Name: "net", CIDR: "10.0.0.0/24", Endpoints: []agentapi.Endpoint{
			{InstanceID: "i-other", Name: "other", Address: "10.0.0.8"}}},
	}
	for _, tc := range []struct {
		what       string
		servesDNS  bool
		network    *agentapi.InstanceNetwork
		wantServer bool
	}{
		{"on a network", true, net1, true},
		{"without a network", true, nil, false},
		{"a runtime without DNS", false, net1, false},
	} {
		t.Run(tc.what, func(t *testing.T) {
			rec := &recorder{specs: map[string]runtime.Spec{}}
			e := newEnv(t, h100, func(c *agent.Config) {
				rec.Runtime = c.Runtime
				c.Runtime = rec
				if tc.servesDNS {
					c.Runtime = dnsRecorder{rec}
				}
				c.DNSUpstreams = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9")}
			})
			e.ag.UpdateDNS(view)
			as := e.assignment("i-dns", whole(h100.ID, 0), serveScript)
			as.Network = tc.network
			e.assign(as)
			e.ready(as.InstanceID)
			srv := rec.spec(as.InstanceID).DNS
			if (srv != nil) != tc.wantServer {
				t.Fatalf("spec DNS %v, want a server: %v", srv, tc.wantServer)
			}
			if srv == nil {
				return
			}
			for _, q := range []struct {
				name  string
				rcode dnsmessage.RCode
				want  []string
			}{
				{"peer.net.internal.", dnsmessage.RCodeSuccess, []string{"10.0.0.7"}},
				{"i-dns.internal.", dnsmessage.RCodeSuccess, []string{"10.0.0.5"}},
				{"other.net.internal.", dnsmessage.RCodeNameError, nil},
				{"i-other.internal.", dnsmessage.RCodeNameError, nil},
			} {
				if rcode, got := lookup(t, srv, q.name); rcode != q.rcode || !slices.Equal(got, q.want) {
					t.Errorf("%s: %v %q, want %v %q", q.name, rcode, got, q.rcode, q.want)
				}
			}
			// A new view reaches the running instance's server.
			e.ag.UpdateDNS(view[1:])
			if rcode, _ := lookup(t, srv, "peer.net.internal."); rcode != dnsmessage.RCodeNameError {
				t.Errorf("peer.net.internal. after its network left the view: %v, want NXDOMAIN", rcode)
			}
		})
	}
}
