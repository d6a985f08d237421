package containerd

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/core/images"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/internal/imageref"
)

// fakeLookup resolves names from a table; other names do not resolve.
func fakeLookup(table map[string][]string) lookupFunc {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		var out []netip.Addr
		for _, s := range table[host] {
			out = append(out, netip.MustParseAddr(s))
		}
		if len(out) == 0 {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return out, nil
	}
}

// TestRegistryDialerChecks: the pull dialer resolves a registry's name
// once and refuses it when any address is internal (a public name that
// resolves to loopback: DNS rebinding), unless the operator allowed it;
// localhost is refused without asking a resolver.
func TestRegistryDialerChecks(t *testing.T) {
	lookup := fakeLookup(map[string][]string{
		"rebind.example":  {"127.0.0.1"},
		"meta.example":    {"169.254.169.254"},
		"mixed.example":   {"93.184.216.34", "10.0.0.1"},
		"v6.example":      {"::1"},
		"mapped.example":  {"::ffff:127.0.0.1"},
		"ula.example":     {"fd00::1"},
		"public.example":  {"93.184.216.34", "2606:2800:220:1::1"},
		"private.example": {"192.168.1.5"},
	})
	for _, c := range []struct {
		host, port string
		allow      []string
		rule       string // "" when allowed
		want       []string
	}{
		{"rebind.example", "443", nil, "a loopback address", nil},
		{"meta.example", "80", nil, "a link-local address", nil},
		{"mixed.example", "443", nil, "a private address", nil},
		{"v6.example", "443", nil, "a loopback address", nil},
		{"mapped.example", "443", nil, "a loopback address", nil},
		{"ula.example", "443", nil, "a private (unique local) address", nil},
		{"localhost", "5000", nil, "a loopback address (localhost)", nil},
		{"127.0.0.1", "5000", nil, "a loopback address", nil},
		{"169.254.169.254", "80", nil, "a link-local address", nil},
		{"public.example", "443", nil, "", []string{"93.184.216.34", "2606:2800:220:1::1"}},
		{"private.example", "5000", []string{"private.example:5000"}, "", []string{"192.168.1.5"}},
		{"private.example", "5001", []string{"private.example:5000"}, "a private address", nil},
		{"localhost", "5000", []string{"localhost:5000"}, "", []string{"127.0.0.1"}},
		{"127.0.0.1", "5000", []string{"127.0.0.1"}, "", []string{"127.0.0.1"}},
	} {
		d := &registryDialer{allow: imageref.MustAllowList(c.allow...), lookup: lookup}
		addrs, err := d.resolve(context.Background(), c.host, c.port)
		var refused *refusedAddrError
		switch {
		case c.rule != "":
			if !errors.As(err, &refused) || refused.rule != c.rule {
				t.Errorf("%s:%s (allow %v): %v, want refused as %s", c.host, c.port, c.allow, err, c.rule)
			}
		case err != nil:
			t.Errorf("%s:%s (allow %v): %v, want allowed", c.host, c.port, c.allow, err)
		default:
			var got []string
			for _, a := range addrs {
				got = append(got, a.String())
			}
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("%s:%s: dials %v, want %v", c.host, c.port, got, c.want)
			}
		}
	}
}

// TestPullErrorHidesPorts: a pull from a port on the host answers the same
// words whether the port is open or closed: refused outright without the
// allow-list (the registry is the host's loopback, directly or through a
// name), and "could not be pulled" and nothing more with it.
func TestPullErrorHidesPorts(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	go func() {
		for {
			c, err := open.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
			c.Close()
		}
	}()
	closedL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := strconv.Itoa(closedL.Addr().(*net.TCPAddr).Port)
	closedL.Close()
	openPort := strconv.Itoa(open.Addr().(*net.TCPAddr).Port)
	lookup := fakeLookup(map[string][]string{"rebind.example": {"127.0.0.1"}})

	for _, c := range []struct {
		host  string
		allow []string
		says  string
	}{
		{"127.0.0.1", nil, "registry host 127.0.0.1 is a loopback address"},
		{"rebind.example", nil, "registry host rebind.example is a loopback address"},
		{"127.0.0.1", []string{"127.0.0.1"}, ""},
		{"rebind.example", []string{"rebind.example"}, ""},
	} {
		texts := map[string]string{}
		for _, port := range []string{openPort, closedPort} {
			name := c.host + ":" + port + "/x:1"
			res := pullResolver(imageref.MustAllowList(c.allow...), lookup, DefaultMaxImageBytes)
			_, _, err := res.Resolve(context.Background(), name)
			if err == nil {
				t.Fatalf("%s: resolved", name)
			}
			msg := pullError(name, DefaultMaxImageBytes, err).Error()
			texts[port] = strings.ReplaceAll(msg, port, "PORT")
			for _, leak := range []string{"refused", "timeout", "reset", "EOF", "connect", "dial", "tcp", "SSH", "http"} {
				if strings.Contains(strings.ToLower(msg), strings.ToLower(leak)) {
					t.Errorf("%s: %q says %q", name, msg, leak)
				}
			}
			if !strings.Contains(msg, "the image could not be pulled from "+c.host+":"+port) || !strings.Contains(msg, c.says) {
				t.Errorf("%s: %q, want it to say it could not be pulled from the registry, and %q", name, msg, c.says)
			}
		}
		if texts[openPort] != texts[closedPort] {
			t.Errorf("%s (allow %v): open port %q, closed port %q: want the same words", c.host, c.allow, texts[openPort], texts[closedPort])
		}
	}
}

// TestImageSizeCapFromManifest: once a manifest is read, its layers'
// declared sizes must add up to at most the cap before any is fetched;
// what is not a manifest passes through.
func TestImageSizeCapFromManifest(t *testing.T) {
	layer := func(size int64) ocispec.Descriptor {
		return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Size: size}
	}
	config := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Size: 1 << 40}
	const gib = 1 << 30
	for _, c := range []struct {
		name     string
		desc     string // media type handled
		children []ocispec.Descriptor
		max      int64
		tooLarge bool
	}{
		{"under", ocispec.MediaTypeImageManifest, []ocispec.Descriptor{config, layer(5 * gib), layer(10 * gib)}, 20 * gib, false},
		{"exactly", ocispec.MediaTypeImageManifest, []ocispec.Descriptor{layer(10 * gib), layer(10 * gib)}, 20 * gib, false},
		{"over", ocispec.MediaTypeImageManifest, []ocispec.Descriptor{layer(10 * gib), layer(10*gib + 1)}, 20 * gib, true},
		{"one huge layer", images.MediaTypeDockerSchema2Manifest, []ocispec.Descriptor{{MediaType: images.MediaTypeDockerSchema2LayerGzip, Size: 1 << 50}}, 20 * gib, true},
		{"overflowing sum", ocispec.MediaTypeImageManifest, []ocispec.Descriptor{layer(1<<62 + 1), layer(1<<62 + 1), layer(1<<62 + 1)}, 1<<63 - 1, true},
		{"negative size", ocispec.MediaTypeImageManifest, []ocispec.Descriptor{layer(-1)}, 20 * gib, true},
		{"small cap", ocispec.MediaTypeImageManifest, []ocispec.Descriptor{layer(2 << 20)}, 1 << 20, true},
		{"an index is not a manifest", ocispec.MediaTypeImageIndex, []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageManifest, Size: 1 << 50}}, 20 * gib, false},
	} {
		inner := images.HandlerFunc(func(context.Context, ocispec.Descriptor) ([]ocispec.Descriptor, error) {
			return c.children, nil
		})
		_, err := capLayers(c.max)(inner).Handle(context.Background(), ocispec.Descriptor{MediaType: c.desc})
		if got := errors.Is(err, errImageTooLarge); got != c.tooLarge {
			t.Errorf("%s: %v, want too large %v", c.name, err, c.tooLarge)
		}
		if err != nil {
			msg := pullError("ghcr.io/acme/big:1", c.max, err).Error()
			if !strings.Contains(msg, "could not be pulled from ghcr.io") || !strings.Contains(msg, "over the host's limit of "+byteSize(c.max)) {
				t.Errorf("%s: %q, want the registry and the limit", c.name, msg)
			}
		}
	}
}

// TestPullBudget: a pull reads at most its budget from registries, what
// a manifest declared or not: a body over it fails, by its length when the
// server gives one and while reading when it does not.
func TestPullBudget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if r.URL.Query().Get("chunked") != "" {
			w.(http.Flusher).Flush() // no Content-Length
		}
		_, _ = w.Write(make([]byte, n))
	}))
	defer srv.Close()
	for _, c := range []struct {
		n        int
		chunked  bool
		budget   int64
		tooLarge bool
	}{
		{1000, false, 1000, false},
		{1001, false, 1000, true},
		{1000, true, 1000, false},
		{5000, true, 1000, true},
	} {
		b := &budget{}
		b.left.Store(c.budget)
		cl := &http.Client{Transport: &budgetTransport{base: http.DefaultTransport, b: b}}
		url := srv.URL + "/?n=" + strconv.Itoa(c.n)
		if c.chunked {
			url += "&chunked=1"
		}
		resp, err := cl.Get(url)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if got := errors.Is(err, errImageTooLarge); got != c.tooLarge {
			t.Errorf("%d bytes (chunked %v) in a budget of %d: %v, want too large %v", c.n, c.chunked, c.budget, err, c.tooLarge)
		}
	}
}

// testRegistry serves one image, repository repo tag "1", over plain HTTP
// on loopback, as a registry's API does (GET and HEAD of /v2/,
// manifests and blobs), and records the paths asked for.
type testRegistry struct {
	srv   *httptest.Server
	layer string // the layer's blob path
	mu    sync.Mutex
	paths []string
}

func newTestRegistry(t *testing.T, repo string, files []File) *testRegistry {
	t.Helper()
	layer, err := layerTar(files)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"architecture": goruntime.GOARCH, "os": "linux",
		"config": map[string]any{}, "rootfs": map[string]any{"type": "layers", "diff_ids": []string{digestOf(layer)}}})
	manifest, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": ocispec.MediaTypeImageManifest,
		"config": map[string]any{"mediaType": ocispec.MediaTypeImageConfig, "digest": digestOf(cfg), "size": len(cfg)},
		"layers": []any{map[string]any{"mediaType": ocispec.MediaTypeImageLayer, "digest": digestOf(layer), "size": len(layer)}}})
	blobs := map[string][]byte{digestOf(cfg): cfg, digestOf(layer): layer}
	r := &testRegistry{layer: "/v2/" + repo + "/blobs/" + digestOf(layer)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.paths = append(r.paths, req.URL.Path)
		r.mu.Unlock()
		var body []byte
		switch p := req.URL.Path; {
		case p == "/v2/":
		case p == "/v2/"+repo+"/manifests/1" || p == "/v2/"+repo+"/manifests/"+digestOf(manifest):
			body = manifest
			w.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
			w.Header().Set("Docker-Content-Digest", digestOf(manifest))
		case strings.HasPrefix(p, "/v2/"+repo+"/blobs/") && blobs[path.Base(p)] != nil:
			body = blobs[path.Base(p)]
		default:
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if req.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// asked reports whether the registry was asked for path, or for anything
// when path is empty.
func (r *testRegistry) asked(path string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return path == "" && len(r.paths) > 0 || slices.Contains(r.paths, path)
}

// TestPullFromRegistry: through containerd, the runtime pulls from a
// registry on the host's loopback only when the operator allowed it, and
// then runs the image; refused, it never connects; an image over the size
// limit is refused from its manifest, before its layer is fetched.
func TestPullFromRegistry(t *testing.T) {
	need(t)
	files, err := BaseImageFiles("")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, File{Path: "/etc/marker", Mode: 0o644, Data: []byte("pulled\n")})
	for _, c := range []struct {
		name  string
		allow bool
		max   int64
		says  string // "" when the pull succeeds
	}{
		{"refused", false, 0, "registry host 127.0.0.1 is a loopback address"},
		{"allowed", true, 0, ""},
		{"too large", true, 1 << 20, "over the host's limit of 1 MiB"},
	} {
		repo := "acme/" + strings.ReplaceAll(c.name, " ", "-")
		reg := newTestRegistry(t, repo, files)
		host := strings.TrimPrefix(reg.srv.URL, "http://")
		rt := newRuntime(t, func(cfg *Config) {
			cfg.NoPull, cfg.MaxImageBytes = false, c.max
			if c.allow {
				cfg.AllowRegistries = imageref.MustAllowList("127.0.0.1")
			}
		})
		spec := runtime.Spec{InstanceID: newID(t), Image: host + "/" + repo + ":1", Command: sh("cat /etc/marker")}
		if c.says == "" {
			if st, out := run(t, rt, spec); st.ExitCode != 0 || out != "pulled\n" {
				t.Errorf("%s: exit %d, output %q; want the pulled image to run", c.name, st.ExitCode, out)
			}
			continue
		}
		err := rt.Start(t.Context(), spec)
		want := "the image could not be pulled from " + host
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want %q and %q", c.name, err, want, c.says)
		}
		if !c.allow && reg.asked("") {
			t.Errorf("%s: the registry was asked for %v", c.name, reg.paths)
		}
		if reg.asked(reg.layer) {
			t.Errorf("%s: the layer was fetched", c.name)
		}
	}
}
