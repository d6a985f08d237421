package imageref

import (
	"strings"
	"testing"
)

const (
	sha256Hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	sha512Hex = sha256Hex + sha256Hex
)

func TestNormalize(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"python", "docker.io/library/python:latest"},
		{"python:3.12", "docker.io/library/python:3.12"},
		{"docker.io/library/python:3.12", "docker.io/library/python:3.12"},
		{"index.docker.io/library/python:3.12", "docker.io/library/python:3.12"},
		{"gpucloud/base:1", "docker.io/gpucloud/base:1"},
		{"docker.io/gpucloud/base:1", "docker.io/gpucloud/base:1"},
		{"ghcr.io/acme/train:1", "ghcr.io/acme/train:1"},
		{"ghcr.io/acme/team/train", "ghcr.io/acme/team/train:latest"},
		{"nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3"},
		{"localhost/job", "localhost/job:latest"},
		{"localhost:5000/job:v1", "localhost:5000/job:v1"},
		{"registry.local:5000/ml/job:A_b.c-d", "registry.local:5000/ml/job:A_b.c-d"},
		{"Registry/job", "Registry/job:latest"}, // an upper case first part is a host
		{"10.0.0.5:5000/job", "10.0.0.5:5000/job:latest"},
		{"[fd00::1]:5000/job", "[fd00::1]:5000/job:latest"},
		{"[::1]/job", "[::1]/job:latest"},
		{"a.b/x__y/z-1/w--v/u.t", "a.b/x__y/z-1/w--v/u.t:latest"},
		{"python@sha256:" + sha256Hex, "docker.io/library/python@sha256:" + sha256Hex},
		{"python:3.12@sha256:" + sha256Hex, "docker.io/library/python@sha256:" + sha256Hex},
		{"ghcr.io/a/b@sha512:" + sha512Hex, "ghcr.io/a/b@sha512:" + sha512Hex},
		{"localhost:5000", "docker.io/library/localhost:5000"}, // one part: a repository and its tag
		{"a:" + strings.Repeat("t", MaxTagLen), "docker.io/library/a:" + strings.Repeat("t", MaxTagLen)},
	} {
		got, err := Normalize(c.in)
		if err != nil || got != c.want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", c.in, got, err, c.want)
			continue
		}
		// The canonical form is a fixed point.
		if again, err := Normalize(got); err != nil || again != got {
			t.Errorf("Normalize(%q) = %q, %v; want it unchanged", got, again, err)
		}
	}
}

func TestParseParts(t *testing.T) {
	r, err := Parse("registry.local:5000/ml/job:v2")
	if err != nil {
		t.Fatal(err)
	}
	if r.Registry != "registry.local:5000" || r.Repository != "ml/job" || r.Tag != "v2" || r.Digest != "" || r.Name() != "registry.local:5000/ml/job" {
		t.Errorf("Parse = %+v", r)
	}
	r, err = Parse("python:3@sha256:" + sha256Hex)
	if err != nil {
		t.Fatal(err)
	}
	if r.Tag != "" || r.Digest != "sha256:"+sha256Hex {
		t.Errorf("a tag beside a digest: %+v; want the digest alone", r)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ in, says string }{
		{"", "is empty"},
		{"python 3", "a space at byte 6"},
		{"python\t", "a tab"},
		{"py\x00thon", "byte 0x00"},
		{"pythön", "byte 0xc3"},
		{"Python:3.12", "lower case"},
		{"acme/Train", "lower case"},
		{"ghcr.io/acme/Train:1", "lower case"},
		{"python:", "empty tag"},
		{"python:-x", "tag \"-x\""},
		{"python:a/b", "port \"a\""}, // the ':' is before a '/': a registry, not a tag
		{"python:" + strings.Repeat("t", MaxTagLen+1), "the limit is 128"},
		{":3.12", "no repository"},
		{"ghcr.io/", "empty path part"},
		{"ghcr.io//x", "empty path part"},
		{"/x", "empty path part"},
		{"x/", "empty path part"},
		{"acme/-train", "separated by"},
		{"acme/train-", "separated by"},
		{"acme/tr___ain", "separated by"},
		{"acme/tr._ain", "separated by"},
		{"acme/tr+ain", "separated by"},
		{"-host.io/x", "host name part"},
		{"host..io/x", "host name part"},
		{"ho_st.io/x", "host name part"},
		{"host.io:/x", "empty port"},
		{"host.io:0/x", "port \"0\""},
		{"host.io:70000/x", "port \"70000\""},
		{"host.io:08/x", "port \"08\""},
		{"host.io:+8/x", "port \"+8\""},
		{"[fd00::1/x", "unclosed"},
		{"[fd00::1]x/y", "[IPv6]:port"},
		{"[10.0.0.1]/x", "not an IPv6 address"},
		{"python@sha256:abc", "64"},
		{"python@md5:" + sha256Hex, "want sha256"},
		{"python@sha256:" + strings.ToUpper(sha256Hex), "lower case hex"},
		{"python@", "want sha256"},
		{"a@b@sha256:" + sha256Hex, "want sha256"},
		{"ghcr.io/" + strings.Repeat("a", MaxNameLen), "the limit is 255"},
		{strings.Repeat("a", MaxLen+1), "the limit is 512"},
	} {
		_, err := Parse(c.in)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Parse(%q) = %v; want an error saying %q", c.in, err, c.says)
		}
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"python", "ghcr.io/a/b:1", "[::1]:5/x@sha256:" + sha256Hex, "a:b:c", "A/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Normalize(s)
		if err != nil {
			return
		}
		if len(got) > MaxLen+len(DefaultRegistry+"/"+OfficialPrefix+":"+DefaultTag) {
			t.Fatalf("Normalize(%q) = %q: too long", s, got)
		}
		again, err := Normalize(got)
		if err != nil || again != got {
			t.Fatalf("Normalize(%q) = %q, but Normalize(%q) = %q, %v", s, got, got, again, err)
		}
	})
}
