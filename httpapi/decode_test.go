package httpapi

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
)

func gzipped(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	if _, err := z.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestBodyCharsetAndEncoding: a body in another charset than UTF-8, or with
// a content coding, is refused with 415 and says why; it is never decoded
// on a guess.
func TestBodyCharsetAndEncoding(t *testing.T) {
	e := newEnv(t)
	const ok = `{"offering":"l4.1x","tags":{"owner":"José"}}`
	latin1 := strings.ReplaceAll(ok, "é", "\xe9") // é in ISO-8859-1
	utf16 := "\xff\xfe{\x00}\x00"
	for _, c := range []struct {
		name    string
		body    string
		header  map[string]string
		status  int
		detail  string // the details key that names the problem
		message string
	}{
		{"UTF-8 without a charset", ok, nil, 201, "", ""},
		{"charset=utf-8", ok, map[string]string{"Content-Type": "application/json; charset=utf-8"}, 201, "", ""},
		{"charset=UTF-8, quoted", ok, map[string]string{"Content-Type": `application/json; charset="UTF-8"`}, 201, "", ""},
		{"Content-Encoding: identity", ok, map[string]string{"Content-Encoding": "identity"}, 201, "", ""},
		{"charset=iso-8859-1", latin1, map[string]string{"Content-Type": "application/json; charset=iso-8859-1"}, 415, "charset", `charset "iso-8859-1" is not accepted`},
		{"charset=utf-16", utf16, map[string]string{"Content-Type": "application/json; charset=utf-16"}, 415, "charset", "UTF-8"},
		{"charset=us-ascii", ok, map[string]string{"Content-Type": "application/json; charset=us-ascii"}, 415, "charset", "UTF-8"},
		{"ISO-8859-1 bytes sent as UTF-8", latin1, nil, 415, "offset", "not valid UTF-8 (byte " + strconv.Itoa(strings.IndexByte(latin1, 0xe9)) + ")"},
		{"UTF-16 without a charset", utf16, nil, 415, "offset", "not valid UTF-8 (byte 0)"},
		{"a byte order mark", "\ufeff" + ok, nil, 400, "", "byte order mark"},
		{"gzip", gzipped(t, ok), map[string]string{"Content-Encoding": "gzip"}, 415, "content_encoding", `Content-Encoding "gzip" is not accepted`},
		{"br", ok, map[string]string{"Content-Encoding": "br"}, 415, "content_encoding", "uncompressed"},
		{"identity then gzip", gzipped(t, ok), map[string]string{"Content-Encoding": "identity, gzip"}, 415, "content_encoding", "gzip"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := e.counts()
			status, h, b := e.raw("POST", "/v1/instances", e.acmeToken, strings.NewReader(c.body), c.header)
			if c.status == 201 {
				if status != 201 {
					t.Fatalf("%d %s, want 201", status, b)
				}
				return
			}
			eb := decodeErr(t, b)
			if status != c.status || eb.Code != cloud.Invalid || !strings.Contains(eb.Message, c.message) {
				t.Errorf("got %d %s %q, want %d invalid_argument containing %q", status, eb.Code, eb.Message, c.status, c.message)
			}
			if _, ok := eb.Details[c.detail]; c.detail != "" && !ok {
				t.Errorf("details %v lack %s", eb.Details, c.detail)
			}
			if c.detail == "content_encoding" && h.Get("Accept-Encoding") != "identity" {
				t.Errorf("Accept-Encoding %q, want identity", h.Get("Accept-Encoding"))
			}
			e.unchanged(before, c.name)
		})
	}
}

// TestLogChunkCharsetAndEncoding: a log chunk is stored as the workload
// wrote it, whatever its bytes, but one that declares another charset or a
// content coding is refused.
func TestLogChunkCharsetAndEncoding(t *testing.T) {
	e := newEnv(t)
	agent, _ := e.join(inventory("node-1", "L4", 1))
	in := e.mustCreate(e.acme, "l4.1x")
	e.schedule()
	path := "/v1/agent/instances/" + in.ID + "/logs"
	for _, c := range []struct {
		name   string
		body   string
		header map[string]string
		status int
	}{
		{"text/plain in UTF-8", "hé\n", map[string]string{"Content-Type": "text/plain; charset=utf-8"}, 204},
		{"raw bytes, no charset", "\xff\xfe\n", map[string]string{"Content-Type": "application/octet-stream"}, 204},
		{"text/plain in Latin-1", "h\xe9\n", map[string]string{"Content-Type": "text/plain; charset=iso-8859-1"}, 415},
		{"gzip", gzipped(t, "hello\n"), map[string]string{"Content-Type": "text/plain", "Content-Encoding": "gzip"}, 415},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, _, b := e.raw("POST", path, agent.token, strings.NewReader(c.body), c.header)
			if status != c.status {
				t.Errorf("%d %s, want %d", status, b, c.status)
			}
			if status != http.StatusNoContent {
				if eb := decodeErr(t, b); eb.Code != cloud.Invalid {
					t.Errorf("code %s", eb.Code)
				}
			}
		})
	}
	if page, err := e.acme.InstanceLogs(t.Context(), in.ID, 0); err != nil || !strings.HasPrefix(page.Data, "hé\n") || page.Offset != 7 {
		t.Errorf("log after the refusals: %+v, %v; want only the two accepted chunks (7 bytes)", page, err)
	}
}
