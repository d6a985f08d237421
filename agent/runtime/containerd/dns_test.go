package containerd

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/gpucloud/gpucloud/agent/dns"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// fakeUpstream is a resolver on the host's 127.0.0.1 (UDP) that answers
// outside.example. with 192.0.2.77, and everything else with NXDOMAIN.
func fakeUpstream(t *testing.T) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var m dnsmessage.Message
			if m.Unpack(buf[:n]) != nil || len(m.Questions) != 1 {
				continue
			}
			q := m.Questions[0]
			resp := dnsmessage.Message{Header: dnsmessage.Header{ID: m.ID, Response: true, RecursionAvailable: true}, Questions: m.Questions}
			switch {
			case strings.EqualFold(q.Name.String(), "outside.example.") && q.Type == dnsmessage.TypeA:
				resp.Answers = []dnsmessage.Resource{{Header: dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60},
					Body: &dnsmessage.AResource{A: [4]byte{192, 0, 2, 77}}}}
			case strings.EqualFold(q.Name.String(), "outside.example."):
			default:
				resp.RCode = dnsmessage.RCodeNameError
			}
			if out, err := resp.Pack(); err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}

// TestDNS checks that a workload with Spec.DNS resolves the names of its
// network through the server the runtime serves in its network namespace
// (by full name, by instance ID, through the search list), not another
// network's, and other names through the host's resolver; that its
// resolv.conf is read-only, root's, and no mount (a file of its own root
// filesystem, whose host path its mountinfo would otherwise show); and
// that the server stops with the workload.
func TestDNS(t *testing.T) {
	rt := newRuntime(t)
	r := dns.New(dns.Config{Upstreams: []netip.AddrPort{fakeUpstream(t)}, Log: slog.New(slog.DiscardHandler)})
	r.Update([]agentapi.HostNetwork{
		{ID: "n-1", Name: "net", CIDR: "10.0.0.0/24", Endpoints: []agentapi.Endpoint{{InstanceID: "i-peer", Name: "peer", Address: "10.0.0.7"}}},
		{ID: "n-2", Name: "net", CIDR: "10.0.0.0/24", Endpoints: []agentapi.Endpoint{{InstanceID: "i-hidden", Name: "hidden", Address: "10.0.0.8"}}},
	})
	id := newID(t)
	st, out := run(t, rt, runtime.Spec{InstanceID: id, Grace: grace, DNS: r.For("n-1"),
		Network: &runtime.Network{ID: "n-1", Name: "net"},
		Command: sh(`cat /etc/resolv.conf
for n in peer.net.internal PEER.NET.INTERNAL i-peer.internal peer hidden.net.internal outside.example; do
  echo "== $n"; nslookup -type=a "$n" 2>&1
done
echo "== 10.0.0.7"; nslookup 10.0.0.7 2>&1
echo "== tcp"; printf '` + octal(tcpQuery(t)) + `' | nc 169.254.169.253 53 | od -An -v -tx1
echo "== write"; (echo nameserver 1.1.1.1 > /etc/resolv.conf) 2>&1 || echo refused
echo "== mountinfo"; grep -c resolv.conf /proc/self/mountinfo; ls -ln /etc/resolv.conf`)})
	if st.ExitCode != 0 {
		t.Fatalf("exit %d: %s", st.ExitCode, out)
	}
	sections := map[string]string{}
	head, rest, _ := strings.Cut(out, "== ")
	for _, s := range strings.Split("== "+rest, "== ")[1:] {
		name, body, _ := strings.Cut(s, "\n")
		sections[name] = body
	}
	for _, want := range []string{"nameserver 169.254.169.253\n", "search net.internal\n", "options ndots:1\n"} {
		if !strings.Contains(head, want) {
			t.Errorf("resolv.conf %q lacks %q", head, want)
		}
	}
	for _, tc := range []struct {
		section, want string
	}{
		{"peer.net.internal", "Address: 10.0.0.7"},
		{"PEER.NET.INTERNAL", "Address: 10.0.0.7"},
		{"i-peer.internal", "Address: 10.0.0.7"},
		{"peer", "Address: 10.0.0.7"},
		{"hidden.net.internal", "NXDOMAIN"},
		{"outside.example", "Address: 192.0.2.77"},
		{"10.0.0.7", "name = peer.net.internal"},
		{"write", "refused"},
		// A file of the container's own root filesystem, root's: no
		// mount, so its mountinfo names no host path for it.
		{"mountinfo", "0\n-rw-r--r--    1 0        0 "},
	} {
		if got := sections[tc.section]; !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q in it", tc.section, got, tc.want)
		}
	}
	if got := tcpAnswer(t, sections["tcp"]); got != "10.0.0.7" {
		t.Errorf("over TCP: %q, want 10.0.0.7 (output %q)", got, sections["tcp"])
	}
	if strings.Contains(sections["hidden.net.internal"], "10.0.0.8") {
		t.Errorf("another network's name resolved: %q", sections["hidden.net.internal"])
	}
	rt.mu.Lock()
	in := rt.insts[id]
	served := in != nil && in.dns != nil
	rt.mu.Unlock()
	if served {
		t.Error("the DNS server still runs after the workload exited")
	}
}

// tcpQuery is a DNS query for peer.net.internal. framed for TCP.
func tcpQuery(t *testing.T) []byte {
	t.Helper()
	m := dnsmessage.Message{Header: dnsmessage.Header{ID: 77, RecursionDesired: true}, Questions: []dnsmessage.Question{
		{Name: dnsmessage.MustNewName("peer.net.internal."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{byte(len(b) >> 8), byte(len(b))}, b...)
}

// octal escapes b for printf.
func octal(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		fmt.Fprintf(&s, "\\%03o", c)
	}
	return s.String()
}

// tcpAnswer reads od's hex dump of a framed answer to tcpQuery, and
// returns its address.
func tcpAnswer(t *testing.T, dump string) string {
	t.Helper()
	raw, err := hex.DecodeString(strings.Join(strings.Fields(dump), ""))
	if err != nil || len(raw) < 2 || int(raw[0])<<8|int(raw[1]) != len(raw)-2 {
		return fmt.Sprintf("not a framed message (%v)", err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(raw[2:]); err != nil || m.ID != 77 || len(m.Answers) != 1 {
		return fmt.Sprintf("bad answer (%v, %+v)", err, m.Header)
	}
	a, ok := m.Answers[0].Body.(*dnsmessage.AResource)
	if !ok {
		return "not an A record"
	}
	return netip.AddrFrom4(a.A).String()
}

// TestDNSAfterRestart checks that a new runtime (an agent restart) serves
// the DNS of a container it adopted when the agent starts the instance
// again.
func TestDNSAfterRestart(t *testing.T) {
	old := newRuntime(t)
	resolver := func(addr string) *dns.Resolver {
		r := dns.New(dns.Config{Upstreams: []netip.AddrPort{fakeUpstream(t)}, Log: slog.New(slog.DiscardHandler)})
		r.Update([]agentapi.HostNetwork{{ID: "n-1", Name: "net", CIDR: "10.0.0.0/24",
			Endpoints: []agentapi.Endpoint{{InstanceID: "i-peer", Name: "peer", Address: addr}}}})
		return r
	}
	id := newID(t)
	spec := runtime.Spec{InstanceID: id, Grace: grace, DNS: resolver("10.0.0.7").For("n-1"),
		Network: &runtime.Network{ID: "n-1", Name: "net"},
		Command: sh(`i=0; while [ $i -lt 600 ]; do nslookup -type=a peer 2>&1 | grep '^Address: '; sleep 0.1; i=$((i+1)); done`)}
	if err := old.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	waitLog(t, old, id, "Address: 10.0.0.7")
	// The old agent's process goes, and its DNS server with it.
	old.mu.Lock()
	for _, in := range old.insts {
		if in.dns != nil {
			in.dns.Close()
		}
		if in.meta != nil {
			in.meta.Close()
		}
	}
	old.insts = map[string]*inst{}
	old.mu.Unlock()
	_ = old.Close()
	rt := newRuntime(t)
	spec.DNS = resolver("10.0.0.70").For("n-1")
	if err := rt.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, id, "Address: 10.0.0.70")
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
}
