package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/gpucloud/gpucloud/internal/imageref"
)

// A pull is the agent, on the host, connecting where a tenant's image name
// says. The runtime pulls with its own HTTP client (pullClient), whose
// dialer resolves a registry's name once, refuses the whole pull when any
// of its addresses is one hosts do not reach (imageref.AddrRule: loopback,
// link-local, private and the like) unless the operator allowed the
// registry (Config.AllowRegistries), and connects only to the addresses
// it checked: a name that resolves to a public address when the server
// checks it and to 127.0.0.1 when the host pulls is refused, and so is a
// redirect to such an address. No proxy from the environment is used.

// DefaultMaxImageBytes is the largest total compressed size of an image's
// layers that a host pulls when Config.MaxImageBytes is zero.
const DefaultMaxImageBytes int64 = 20 << 30

// pullOverhead is what a pull may read beyond its layers: index,
// manifests, configuration and token responses.
const pullOverhead = 64 << 20

// lookupFunc resolves a host name to its addresses.
type lookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// systemLookup resolves with the host's resolver.
func systemLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// refusedAddrError is a registry whose address hosts do not connect to.
type refusedAddrError struct {
	host, rule string
}

func (e *refusedAddrError) Error() string {
	return fmt.Sprintf("registry host %s is %s", e.host, e.rule)
}

// errImageTooLarge is an image over the size limit.
var errImageTooLarge = errors.New("the image is over the host's size limit")

// registryDialer connects to registries, at checked addresses only.
type registryDialer struct {
	allow  imageref.AllowList
	lookup lookupFunc
	dialer net.Dialer
}

// DialContext resolves address's host once, refuses it when any of its
// addresses breaks a rule and the operator did not allow host:port, and
// connects to the first of those addresses that answers.
func (d *registryDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	addrs, err := d.resolve(ctx, host, port)
	if err != nil {
		return nil, err
	}
	var last error
	for _, a := range addrs {
		c, err := d.dialer.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// resolve returns the addresses of host that the dialer may connect to
// at port: all of them, or an error when one is refused.
func (d *registryDialer) resolve(ctx context.Context, host, port string) ([]netip.Addr, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if rule := imageref.HostRule(host); rule != "" {
		// localhost is loopback whatever a resolver says.
		if !d.allow.Allows(host, port) {
			return nil, &refusedAddrError{host, rule}
		}
		addrs = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	} else {
		lookup := d.lookup
		if lookup == nil {
			lookup = systemLookup
		}
		if addrs, err = lookup(ctx, host); err != nil {
			return nil, err
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("%s has no address", host)
		}
	}
	if d.allow.Allows(host, port) {
		return addrs, nil
	}
	for _, a := range addrs {
		if rule := imageref.AddrRule(a); rule != "" {
			return nil, &refusedAddrError{host, rule}
		}
	}
	return addrs, nil
}

// budget is how many bytes a pull may still read from registries.
type budget struct{ left atomic.Int64 }

// budgetTransport counts the bytes of every response body against a
// budget, and fails a read that goes over it.
type budgetTransport struct {
	base http.RoundTripper
	b    *budget
}

func (t *budgetTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.b.left.Load() {
		resp.Body.Close()
		return nil, errImageTooLarge
	}
	resp.Body = &budgetBody{ReadCloser: resp.Body, b: t.b}
	return resp, nil
}

type budgetBody struct {
	io.ReadCloser
	b *budget
}

func (r *budgetBody) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if r.b.left.Add(-int64(n)) < 0 {
		return n, errImageTooLarge
	}
	return n, err
}

// pullClient is the HTTP client of one pull: connections through a
// registryDialer, response bodies within maxBytes plus pullOverhead.
func pullClient(allow imageref.AllowList, lookup lookupFunc, maxBytes int64) *http.Client {
	d := &registryDialer{allow: allow, lookup: lookup, dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
	tr := &http.Transport{
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          10,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 5 * time.Second,
	}
	b := &budget{}
	b.left.Store(maxBytes + pullOverhead)
	return &http.Client{Transport: &budgetTransport{base: tr, b: b}}
}

// pullResolver is the registry resolver of one pull, over pullClient:
// HTTPS, and plain HTTP only for localhost (as containerd's default).
func pullResolver(allow imageref.AllowList, lookup lookupFunc, maxBytes int64) remotes.Resolver {
	c := pullClient(allow, lookup, maxBytes)
	return docker.NewResolver(docker.ResolverOptions{
		Hosts: docker.ConfigureDefaultRegistries(
			docker.WithClient(c),
			docker.WithPlainHTTP(docker.MatchLocalhost),
			docker.WithAuthorizer(docker.NewDockerAuthorizer(docker.WithAuthClient(c))),
		),
	})
}

// capLayers wraps a pull's handler: once a manifest is read, before any
// of its layers is fetched, the total size its layers declare must be at
// most maxBytes.
func capLayers(maxBytes int64) func(images.Handler) images.Handler {
	return func(h images.Handler) images.Handler {
		return images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
			children, err := h.Handle(ctx, desc)
			if err != nil || !images.IsManifestType(desc.MediaType) {
				return children, err
			}
			if err := checkLayerSizes(children, maxBytes); err != nil {
				return nil, err
			}
			return children, nil
		})
	}
}

// checkLayerSizes refuses a manifest's children whose layers add up to
// more than maxBytes.
func checkLayerSizes(children []ocispec.Descriptor, maxBytes int64) error {
	var total int64
	for _, c := range children {
		if !images.IsLayerType(c.MediaType) {
			continue
		}
		if c.Size < 0 || c.Size > maxBytes-total {
			return fmt.Errorf("%w: its layers are over %s compressed", errImageTooLarge, byteSize(maxBytes))
		}
		total += c.Size
	}
	return nil
}

// byteSize writes n bytes in GiB or MiB when it is a whole number of
// them, else in bytes.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// pull pulls image name (canonical) from its registry, unpacked for the
// runtime's snapshotter, within the host's rules and size limit.
func (r *Runtime) pull(ctx context.Context, name string) (client.Image, error) {
	img, err := r.client.Pull(ctx, name, client.WithPullUnpack, client.WithPullSnapshotter(r.cfg.Snapshotter),
		client.WithResolver(pullResolver(r.cfg.AllowRegistries, r.lookupHost, r.cfg.MaxImageBytes)),
		client.WithImageHandlerWrapper(capLayers(r.cfg.MaxImageBytes)))
	if err != nil {
		r.cfg.Log.Warn("image pull failed", "image", name, "err", err)
		return nil, pullError(name, r.cfg.MaxImageBytes, err)
	}
	return img, nil
}

// pullError is what a tenant learns of a failed pull: that the image could
// not be pulled from its registry, and why only when the reason says
// nothing about the host's network (a refused address, the size limit, an
// image the registry does not have). Whether a port was open, closed or
// silent reads the same; the agent's log has the details.
func pullError(name string, maxBytes int64, err error) error {
	reg := "its registry"
	if ref, perr := imageref.Parse(name); perr == nil {
		reg = ref.Registry
	}
	msg := fmt.Sprintf("image %s: the image could not be pulled from %s", name, reg)
	var refused *refusedAddrError
	switch {
	case errors.As(err, &refused):
		msg += fmt.Sprintf(": %s, which hosts do not pull from unless the operator allows the registry", refused)
	case errors.Is(err, errImageTooLarge):
		msg += fmt.Sprintf(": its layers are over the host's limit of %s compressed", byteSize(maxBytes))
	case errdefs.IsNotFound(err):
		msg += ": the registry has no such image"
		return fmt.Errorf("%s: %w", msg, errdefs.ErrNotFound)
	}
	return errors.New(msg)
}
