//go:build !windows

package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/cli/upcmd"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestImageFlags: --image reaches the API on instances, spot requests and
// groups, is stored in canonical form, and describe shows it (or that the
// hosts' default is used); a malformed one is the server's one-line
// invalid_argument naming the field.
func TestImageFlags(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "--image", "python:3.12", "-o", "json", "--", "python", "-V"), &in)
	if in.Image != "docker.io/library/python:3.12" {
		t.Errorf("created with image %q, want the canonical docker.io/library/python:3.12", in.Image)
	}
	if out := e.ok(tok, "instances", "describe", in.ID); !strings.Contains(out, "Image:") || !strings.Contains(out, "docker.io/library/python:3.12") {
		t.Errorf("describe lacks the image:\n%s", out)
	}
	var plain cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "-o", "json"), &plain)
	if out := e.ok(tok, "instances", "describe", plain.ID); !strings.Contains(out, "(the hosts' default)") {
		t.Errorf("describe of an instance without an image:\n%s", out)
	}
	code, _, errOut := e.as(tok, "instances", "create", "--offering", "l4.1x", "--image", "Python:3.12")
	oneLine(t, code, errOut, `image: "Python:3.12"`, "lower case", "(invalid_argument)")

	var sr cloud.SpotRequest
	decodeJSON(t, e.ok(tok, "spot", "requests", "create", "--offering", "l4.1x", "--image", "ghcr.io/acme/train:1", "-o", "json", "--", "true"), &sr)
	if sr.Image != "ghcr.io/acme/train:1" {
		t.Errorf("spot request image %q", sr.Image)
	}
	if out := e.ok(tok, "spot", "requests", "describe", sr.ID); !strings.Contains(out, "ghcr.io/acme/train:1") {
		t.Errorf("spot describe lacks the image:\n%s", out)
	}
	code, _, errOut = e.as(tok, "spot", "requests", "create", "--offering", "l4.1x", "--image", "a b")
	oneLine(t, code, errOut, "image:", "a space", "(invalid_argument)")

	var g cloud.Group
	decodeJSON(t, e.ok(tok, "groups", "create", "web", "--offering", "l4.1x", "--image", "gpucloud/base:1", "--min", "0", "--max", "0", "-o", "json"), &g)
	if g.Template.Image != "docker.io/gpucloud/base:1" {
		t.Errorf("group template image %q", g.Template.Image)
	}
	if out := e.ok(tok, "groups", "describe", "web"); !strings.Contains(out, "docker.io/gpucloud/base:1") {
		t.Errorf("groups describe lacks the image:\n%s", out)
	}
}

// TestImagesImportErrors: the command takes one file, refuses the
// server's flags, and says where containerd was not found.
func TestImagesImportErrors(t *testing.T) {
	tarball := filepath.Join(t.TempDir(), "x.tar")
	if err := os.WriteFile(tarball, []byte("not a tarball"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"images", "import"}, "takes one tarball"},
		{[]string{"images", "import", "a.tar", "b.tar"}, "takes one tarball"},
		{[]string{"images", "import", t.TempDir()}, "is not a file"},
		{[]string{"--token", "x", "images", "import", tarball}, "talks to no gpucloud server"},
	} {
		code, out, errOut := run(t, tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want usage error with %q", tc.args, code, out, errOut, tc.want)
		}
	}
	sock := filepath.Join(t.TempDir(), "none.sock")
	code, _, errOut := run(t, "images", "import", tarball, "--containerd-socket", sock)
	if code == 0 || !strings.Contains(errOut, "containerd is not reachable at "+sock) {
		t.Errorf("no containerd: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = run(t, "images", "import", filepath.Join(t.TempDir(), "missing.tar"))
	if code == 0 || !strings.Contains(errOut, "missing.tar") {
		t.Errorf("missing file: exit %d, stderr %q", code, errOut)
	}
}

// TestImagesImport imports a tarball into a private containerd and finds
// the image there. It needs root and containerd: in CI it fails without
// them, elsewhere it skips saying why.
func TestImagesImport(t *testing.T) {
	needContainerd(t)
	dir, err := os.MkdirTemp("", "gcimg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	d, err := containerd.StartDaemon(context.Background(), filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	files, err := containerd.BaseImageFiles("")
	if err != nil {
		t.Fatal(err)
	}
	var img bytes.Buffer
	if err := containerd.WriteImage(&img, "registry.test/acme/tool:7", files, containerd.ImageConfig{}); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, "tool.tar")
	if err := os.WriteFile(tarball, img.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "images", "import", tarball, "--containerd-socket", d.Socket(), "--namespace", "gpucloud-clitest")
	if code != 0 || !strings.Contains(out, "imported registry.test/acme/tool:7\n") || !strings.Contains(out, d.Socket()) {
		t.Fatalf("import: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A runtime of that namespace runs it without pulling.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, err := containerd.New(ctx, containerd.Config{Socket: d.Socket(), Namespace: "gpucloud-clitest", BaseDir: filepath.Join(dir, "rt"),
		DefaultImage: "registry.test/acme/tool:7", NoPull: true})
	if err != nil {
		t.Fatalf("a runtime with the imported image as its default: %v", err)
	}
	_ = rt.Close()
}

// needContainerd skips a test that needs root, containerd, runc, tini and
// busybox-static when they are missing, saying why; in CI (CI set) it
// fails instead.
func needContainerd(t *testing.T) {
	t.Helper()
	why := upcmd.ContainerdMissing()
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("this test must run in CI: %s", why)
	}
	t.Skipf("skipping: %s", why)
}

// TestImagesBuild: images build writes the base image plus the files
// given, each at its path with its mode, named as asked (canonical), with
// its command; bad flags are usage errors that write nothing.
func TestImagesBuild(t *testing.T) {
	if _, err := containerd.BaseImageFiles(""); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("this test must run in CI: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "worker")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho hi\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"images", "build", "acme/w:1", "--add", prog + ":/usr/bin/w"}, "-o FILE.tar is required"},
		{[]string{"images", "build", "-o", out}, "takes the image's name"},
		{[]string{"images", "build", "acme/w:1", "-o", out, "--add", prog}, "want LOCAL:/PATH"},
		{[]string{"images", "build", "acme/w:1", "-o", out, "--add", prog + ":relative"}, "want LOCAL:/PATH"},
		{[]string{"images", "build", "acme/w:1", "-o", out, "--add", dir + ":/x"}, "is not a file"},
		{[]string{"images", "build", "acme/w:1", "-o", out, "--env", "NOEQUALS"}, "want KEY=VALUE"},
		{[]string{"images", "build", "Bad Name", "-o", out}, "Bad Name"},
	} {
		code, stdout, errOut := run(t, tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want usage error with %q", tc.args, code, stdout, errOut, tc.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%v wrote %s", tc.args, out)
		}
	}
	code, stdout, errOut := run(t, "images", "build", "acme/w:1", "--add", prog+":/usr/local/bin/w", "--cmd", "/usr/local/bin/w --flag",
		"--env", "MODE=test", "-o", out)
	if code != 0 || !strings.Contains(stdout, "wrote docker.io/acme/w:1 to "+out) {
		t.Fatalf("build: exit %d, stdout %q, stderr %q", code, stdout, errOut)
	}
	blobs := tarFiles(t, out)
	var found, config bool
	for name, data := range blobs {
		if !strings.HasPrefix(name, "blobs/") {
			continue
		}
		if strings.Contains(string(data), `"/usr/local/bin/w","--flag"`) && strings.Contains(string(data), "MODE=test") {
			config = true
		}
		for _, gz := range []bool{false, true} {
			layer := tarEntries(data, gz)
			if h, ok := layer["usr/local/bin/w"]; ok {
				found = h.Mode&0o777 == 0o750
			}
		}
	}
	if !found || !config {
		t.Errorf("the image lacks the file with its mode (%v) or its command and environment (%v)", found, config)
	}
}

// tarFiles reads a tar file's regular files by name.
func tarFiles(t *testing.T, path string) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		data, _ := io.ReadAll(tr)
		out[h.Name] = data
	}
	return out
}

// tarEntries reads the headers of a tar (gzipped when gz) by name,
// without a leading "./" or "/"; an unreadable one gives none.
func tarEntries(b []byte, gz bool) map[string]*tar.Header {
	var r io.Reader = bytes.NewReader(b)
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil
		}
		r = zr
	}
	out := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			return out
		}
		out[strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")] = h
	}
}
