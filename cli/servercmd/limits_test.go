package servercmd

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/httpapi"
)

func TestParseLimits(t *testing.T) {
	l, err := parseLimits([]string{"member=5/20", "admin=100/1000", "agent=300.5/3000", "agent-liveness=400/4000", "auth-failures=1/5", "anonymous=2/7"},
		[]string{"10.0.0.0/8", "192.0.2.7", "fd00::1"})
	if err != nil {
		t.Fatal(err)
	}
	want := httpapi.RateLimits{Member: httpapi.Limit{Rate: 5, Burst: 20}, Admin: httpapi.Limit{Rate: 100, Burst: 1000},
		Agent: httpapi.Limit{Rate: 300.5, Burst: 3000}, AgentLiveness: httpapi.Limit{Rate: 400, Burst: 4000}, AuthFailures: httpapi.Limit{Rate: 1, Burst: 5},
		Anonymous: httpapi.Limit{Rate: 2, Burst: 7}}
	if l.Member != want.Member || l.Admin != want.Admin || l.Agent != want.Agent || l.AgentLiveness != want.AgentLiveness || l.AuthFailures != want.AuthFailures || l.Anonymous != want.Anonymous {
		t.Errorf("limits %+v, want %+v", l, want)
	}
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("fd00::1/128")}
	for i, p := range proxies {
		if i >= len(l.TrustedProxies) || l.TrustedProxies[i] != p {
			t.Errorf("proxies %v, want %v", l.TrustedProxies, proxies)
			break
		}
	}
	if l, err := parseLimits(nil, nil); err != nil || l.Member != (httpapi.Limit{}) {
		t.Errorf("no flags: %+v, %v; want the zero value (the defaults)", l, err)
	}
	for _, tc := range []struct {
		limits, proxies []string
		want            string
	}{
		{[]string{"member=50"}, nil, "ROLE=RATE/BURST"},
		{[]string{"member"}, nil, "ROLE=RATE/BURST"},
		{[]string{"member=0/10"}, nil, "rate"},
		{[]string{"member=x/10"}, nil, "rate"},
		{[]string{"member=5/0"}, nil, "burst"},
		{[]string{"member=5/1.5"}, nil, "burst"},
		{[]string{"root=5/10"}, nil, "role"},
		{nil, []string{"10.0.0.0/33"}, "--trusted-proxy"},
		{nil, []string{"proxy.internal"}, "--trusted-proxy"},
	} {
		if _, err := parseLimits(tc.limits, tc.proxies); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: %v, want an error naming %q", tc.limits, tc.proxies, err, tc.want)
		}
	}
}
