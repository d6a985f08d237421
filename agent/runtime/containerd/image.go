package containerd

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
)

// BaseImage is the name of gpucloud's base image, the default image of an
// instance that names none unless the operator configures another
// (Config.DefaultImage). BaseImageFiles builds it from the host's
// busybox-static: see docs/RUNTIME.md for what it holds.
const BaseImage = "docker.io/gpucloud/base:1"

// File is one entry of an image WriteImage builds.
type File struct {
	// Path is the absolute path in the image ("/bin/sh").
	Path string
	// Mode holds the permission bits and the type: 0 type bits for a
	// regular file, fs.ModeDir, fs.ModeSymlink (Link is the target), or
	// fs.ModeDevice|fs.ModeCharDevice (Major and Minor are its numbers).
	Mode         fs.FileMode
	Data         []byte
	Link         string
	Major, Minor int64
	UID, GID     int
}

// ImageConfig is what an image says about how to run it.
type ImageConfig struct {
	Env        []string
	Cmd        []string
	WorkingDir string
	User       string
}

// WriteImage writes a one-layer image named name (a full reference such as
// "docker.io/gpucloud/base:1") as one tar that holds both an OCI image
// layout (index.json, whose manifest carries the name in the
// io.containerd.image.name annotation) and a docker manifest.json, so that
// containerd (ImportImage, ctr images import), docker load and podman load
// all read it. Parent directories of the files are added as needed. The
// output is deterministic: the same files give the same bytes.
func WriteImage(w io.Writer, name string, files []File, cfg ImageConfig) error {
	layer, err := layerTar(files)
	if err != nil {
		return err
	}
	layerDigest := digestOf(layer)
	imgCfg := map[string]any{
		"architecture": goruntime.GOARCH,
		"os":           "linux",
		"created":      time.Unix(0, 0).UTC().Format(time.RFC3339),
		"config": map[string]any{
			"Env": cfg.Env, "Cmd": cfg.Cmd, "WorkingDir": cfg.WorkingDir, "User": cfg.User,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	}
	cfgBytes, err := json.Marshal(imgCfg)
	if err != nil {
		return err
	}
	cfgDigest := digestOf(cfgBytes)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfgDigest, "size": len(cfgBytes)},
		"layers": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": len(layer),
		}},
	})
	if err != nil {
		return err
	}
	manDigest := digestOf(manifest)
	tag := name
	if i := strings.LastIndexAny(name, ":/"); i >= 0 && name[i] == ':' {
		tag = name[i+1:]
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manDigest, "size": len(manifest),
			"annotations": map[string]string{
				"io.containerd.image.name":          name,
				"org.opencontainers.image.ref.name": tag,
			},
		}},
	})
	if err != nil {
		return err
	}
	blob := func(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }
	dockerManifest, err := json.Marshal([]any{map[string]any{
		"Config": blob(cfgDigest), "RepoTags": []string{dockerTag(name)}, "Layers": []string{blob(layerDigest)},
	}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{"manifest.json", dockerManifest},
		{blob(cfgDigest), cfgBytes},
		{blob(layerDigest), layer},
		{blob(manDigest), manifest},
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// dockerTag is the short name docker shows ("gpucloud/base:1").
func dockerTag(name string) string {
	name = strings.TrimPrefix(name, "docker.io/")
	return strings.TrimPrefix(name, "library/")
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// layerTar is the uncompressed layer of files, parents first.
func layerTar(files []File) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		p := path.Clean("/" + f.Path)
		if p == "/" {
			continue
		}
		f.Path = p
		byPath[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = File{Path: d, Mode: fs.ModeDir | 0o755}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		if !byPath[path.Dir(p)].Mode.IsDir() && path.Dir(p) != "/" {
			return nil, fmt.Errorf("image: %s is under %s, which is not a directory", p, path.Dir(p))
		}
		h := &tar.Header{
			Name: strings.TrimPrefix(p, "/"), Mode: tarMode(f.Mode),
			Uid: f.UID, Gid: f.GID, ModTime: time.Unix(0, 0), Format: tar.FormatPAX,
		}
		switch {
		case f.Mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Mode&fs.ModeSymlink != 0:
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		case f.Mode&fs.ModeCharDevice != 0:
			h.Typeflag, h.Devmajor, h.Devminor = tar.TypeChar, f.Major, f.Minor
		case f.Mode.IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		default:
			return nil, fmt.Errorf("image: %s has an unsupported mode %v", p, f.Mode)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarMode is the tar header mode of a file mode: permissions and the
// setuid, setgid and sticky bits.
func tarMode(m fs.FileMode) int64 {
	v := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return v
}

// DefaultBusybox is where Debian's busybox-static puts its static busybox.
const DefaultBusybox = "/bin/busybox"

// BaseImageFiles are the files of the base image (BaseImage) built from a
// statically linked busybox (DefaultBusybox when empty): busybox at
// /bin/busybox with a symlink per applet in /bin, /etc/passwd and
// /etc/group naming root and nobody (65534), a sticky world-writable /tmp,
// and /work and /volumes for the instance's directories.
func BaseImageFiles(busybox string) ([]File, error) {
	if busybox == "" {
		busybox = DefaultBusybox
	}
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return nil, fmt.Errorf("base image: %w (Debian: apt-get install busybox-static)", err)
	}
	if !isStaticELF(bin) {
		return nil, fmt.Errorf("base image: %s is not a statically linked program (Debian's busybox-static is)", busybox)
	}
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("base image: %s --list: %w", busybox, err)
	}
	files := []File{
		{Path: "/bin/busybox", Mode: 0o755, Data: bin},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/work:/bin/sh\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/root", Mode: fs.ModeDir | 0o700},
		{Path: "/work", Mode: fs.ModeDir | 0o755},
		{Path: "/volumes", Mode: fs.ModeDir | 0o755},
		{Path: "/usr/bin", Mode: fs.ModeDir | 0o755},
		{Path: "/sbin", Mode: fs.ModeDir | 0o755},
	}
	for _, a := range strings.Fields(string(out)) {
		if a == "busybox" || strings.ContainsAny(a, "/.") {
			continue
		}
		files = append(files, File{Path: "/bin/" + a, Mode: fs.ModeSymlink | 0o777, Link: "busybox"})
	}
	return files, nil
}

// WriteBaseImage writes the base image (BaseImage, from BaseImageFiles)
// as an image tarball for ImportImage.
func WriteBaseImage(w io.Writer, busybox string) error {
	files, err := BaseImageFiles(busybox)
	if err != nil {
		return err
	}
	return WriteImage(w, BaseImage, files, ImageConfig{
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd: []string{"/bin/sh"},
	})
}

// isStaticELF reports whether b is an ELF program without an interpreter
// (PT_INTERP): one that runs in an image without a C library.
func isStaticELF(b []byte) bool {
	if len(b) < 64 || string(b[:4]) != "\x7fELF" || b[4] != 2 || b[5] != 1 {
		return false // only 64-bit little-endian is checked
	}
	le := func(off, n int) uint64 {
		var v uint64
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[off+i])
		}
		return v
	}
	phoff, phentsize, phnum := le(0x20, 8), le(0x36, 2), le(0x38, 2)
	for i := uint64(0); i < phnum; i++ {
		off := phoff + i*phentsize
		if off+4 > uint64(len(b)) {
			return false
		}
		if le(int(off), 4) == 3 { // PT_INTERP
			return false
		}
	}
	return true
}

// ImportImage imports the images of a tarball (an OCI image layout, a
// docker save archive, or both in one as WriteImage makes) into the
// runtime's namespace and unpacks them for its snapshotter, and returns
// their names. An image of the same name is replaced.
func (r *Runtime) ImportImage(ctx context.Context, file io.Reader) ([]string, error) {
	return importImages(r.nsCtx(ctx), r.client, r.platform, r.cfg.Snapshotter, file)
}

// importImages imports a tarball's images with c into ctx's namespace and
// unpacks them for snapshotter.
func importImages(ctx context.Context, c *client.Client, platform platforms.MatchComparer, snapshotter string, file io.Reader) ([]string, error) {
	imgs, err := c.Import(ctx, file, client.WithAllPlatforms(false))
	if err != nil {
		return nil, fmt.Errorf("import image: %w", err)
	}
	var names []string
	for _, im := range imgs {
		img := client.NewImageWithPlatform(c, im, platform)
		if err := img.Unpack(ctx, snapshotter); err != nil {
			return nil, fmt.Errorf("unpack image %s: %w", im.Name, err)
		}
		names = append(names, im.Name)
	}
	if len(names) == 0 {
		return nil, errors.New("import image: the tarball holds no image")
	}
	return names, nil
}

// ImportImageFileTo imports an image tarball (see ImportImage) into the
// namespace of the containerd at socket, unpacked for the snapshotter,
// where the runtimes of that namespace find it (empty arguments take
// DefaultSocket, DefaultNamespace and DefaultSnapshotter). Unlike New it
// needs no init and adopts no container: it is what an operator runs on a
// host, beside a running agent (gpucloud images import).
func ImportImageFileTo(ctx context.Context, socket, namespace, snapshotter, file string) ([]string, error) {
	socket = cmp.Or(socket, DefaultSocket)
	namespace = cmp.Or(namespace, DefaultNamespace)
	snapshotter = cmp.Or(snapshotter, DefaultSnapshotter)
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := os.Stat(socket); err != nil {
		return nil, fmt.Errorf("containerd is not reachable at %s: %w", socket, err)
	}
	c, err := client.New(socket, client.WithDefaultNamespace(namespace), client.WithTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("containerd at %s: %w", socket, err)
	}
	defer c.Close()
	return importImages(namespaces.WithNamespace(ctx, namespace), c, platforms.Default(), snapshotter, f)
}

// ImportImageFile imports an image tarball from a file (see ImportImage).
func (r *Runtime) ImportImageFile(ctx context.Context, file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return r.ImportImage(ctx, f)
}

// image returns an unpacked image by name, pulling it from its registry
// when the runtime does not have it and may pull.
func (r *Runtime) image(ctx context.Context, name string) (client.Image, error) {
	img, err := r.client.GetImage(ctx, name)
	switch {
	case errdefs.IsNotFound(err) && r.cfg.NoPull:
		return nil, fmt.Errorf("image %s is not on this host (import it; pulling is off): %w", name, errdefs.ErrNotFound)
	case errdefs.IsNotFound(err):
		return r.pull(ctx, name)
	case err != nil:
		return nil, fmt.Errorf("image %s: %w", name, err)
	}
	ok, err := img.IsUnpacked(ctx, r.cfg.Snapshotter)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", name, err)
	}
	if !ok {
		if err := img.Unpack(ctx, r.cfg.Snapshotter); err != nil {
			return nil, fmt.Errorf("unpack image %s: %w", name, err)
		}
	}
	return img, nil
}

// EnsureBaseImage imports the base image (BaseImage), built from the
// host's static busybox (DefaultBusybox when empty), unless the runtime
// has it already: a host without a registry then still runs instances
// that name no image.
func (r *Runtime) EnsureBaseImage(ctx context.Context, busybox string) error {
	ctx = r.nsCtx(ctx)
	if _, err := r.client.GetImage(ctx, BaseImage); err == nil {
		return nil
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("image %s: %w", BaseImage, err)
	}
	var buf bytes.Buffer
	if err := WriteBaseImage(&buf, busybox); err != nil {
		return err
	}
	_, err := r.ImportImage(ctx, &buf)
	return err
}
