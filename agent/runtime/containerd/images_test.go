package containerd

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// TestAdoptOnlyOwnHost: runtimes of several hosts on one containerd and
// namespace (gpucloud up's simulated hosts) each adopt only the
// containers of their own host.
func TestAdoptOnlyOwnHost(t *testing.T) {
	onHost := func(h string) func(*Config) { return func(c *Config) { c.Host = h } }
	a := newRuntime(t, onHost("h-a"))
	id := newID(t)
	if err := a.Start(t.Context(), runtime.Spec{InstanceID: id, Command: sh("echo ready; sleep 30"), Grace: grace}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, a, id, "ready")
	for _, c := range []struct {
		host   string
		adopts bool
	}{{"h-b", false}, {"", false}, {"h-a", true}} {
		rt, err := New(t.Context(), Config{Socket: env.daemon.Socket(), Namespace: env.ns, BaseDir: t.TempDir(),
			DefaultImage: testImage, NoPull: true, Host: c.host})
		if err != nil {
			t.Fatal(err)
		}
		st, err := rt.Status(id)
		_ = rt.Close()
		if c.adopts && (err != nil || st.State != runtime.StateRunning) {
			t.Errorf("a runtime of host %q: %+v, %v; want its running container adopted", c.host, st, err)
		}
		if !c.adopts && !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("a runtime of host %q knows host h-a's container: %+v, %v", c.host, st, err)
		}
	}
}

// TestImages: an instance runs in the image its Spec names, in canonical
// or short form; a tarball imported with ImportImageFileTo (no runtime)
// serves the runtimes of the namespace; a malformed name is ErrInvalid and
// a missing image with pulling off an error naming it.
func TestImages(t *testing.T) {
	rt := newRuntime(t)
	files, err := BaseImageFiles("")
	if err != nil {
		t.Fatal(err)
	}
	const name = "registry.test:5000/acme/marker:1"
	files = append(files, File{Path: "/etc/marker", Mode: 0o644, Data: []byte("acme marker\n")})
	var img bytes.Buffer
	if err := WriteImage(&img, name, files, ImageConfig{}); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(t.TempDir(), "marker.tar")
	if err := os.WriteFile(tarball, img.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	names, err := ImportImageFileTo(t.Context(), env.daemon.Socket(), env.ns, "", tarball)
	if err != nil || len(names) != 1 || names[0] != name {
		t.Fatalf("import = %v, %v; want [%s]", names, err, name)
	}
	for _, c := range []struct{ image, want string }{
		{name, "acme marker\n"},
		{"gpucloud/test:1", "no marker\n"}, // docker.io/gpucloud/test:1, the tests' image
		{"", "no marker\n"},                // the default image
	} {
		st, out := run(t, rt, runtime.Spec{InstanceID: newID(t), Image: c.image, Command: sh("cat /etc/marker 2>/dev/null || echo no marker")})
		if st.ExitCode != 0 || out != c.want {
			t.Errorf("image %q: exit %d, output %q; want %q", c.image, st.ExitCode, out, c.want)
		}
	}
	err = rt.Start(t.Context(), runtime.Spec{InstanceID: newID(t), Image: "Bad Name", Command: sh("true")})
	if !errors.Is(err, runtime.ErrInvalid) {
		t.Errorf("a malformed image: %v, want ErrInvalid", err)
	}
	err = rt.Start(t.Context(), runtime.Spec{InstanceID: newID(t), Image: "registry.test:5000/acme/missing:1", Command: sh("true")})
	if err == nil || !strings.Contains(err.Error(), "registry.test:5000/acme/missing:1 is not on this host") {
		t.Errorf("a missing image with pulling off: %v", err)
	}
	if _, err := ImportImageFileTo(t.Context(), filepath.Join(t.TempDir(), "none.sock"), env.ns, "", tarball); err == nil ||
		!strings.Contains(err.Error(), "not reachable") {
		t.Errorf("import without containerd: %v", err)
	}
}
