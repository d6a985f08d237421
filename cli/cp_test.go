package cli

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/internal/filexfer"
)

func TestParseCopyArgs(t *testing.T) {
	for _, tt := range []struct {
		args                   []string
		id, remote, local, err string
		upload                 bool
	}{
		{args: []string{"./data", "v-1:/data"}, id: "v-1", remote: "/data", local: "./data", upload: true},
		{args: []string{"v-1:/ckpt/a.pt", "."}, id: "v-1", remote: "/ckpt/a.pt", local: "."},
		{args: []string{"v-1:", "out"}, id: "v-1", remote: "/", local: "out"},
		{args: []string{"dir/v-1:x", "v-2:/y"}, id: "v-2", remote: "/y", local: "dir/v-1:x", upload: true},
		{args: []string{"v-1:/a", "v-2:/b"}, err: "one side must be a local path"},
		{args: []string{"a", "b"}, err: "one side must be a volume path"},
		{args: []string{"data:/a", "b"}, id: "data", remote: "/a", local: "b"},
		{args: []string{"./data:/a", "b"}, err: "one side must be a volume path"},
		{args: []string{`C:\data`, "v-1:/b"}, id: "v-1", remote: "/b", local: `C:\data`, upload: true},
		{args: []string{"", "v-1:/b"}, err: "empty local path"},
	} {
		id, remote, local, upload, err := parseCopyArgs(tt.args, "v-", "volume")
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %v, want %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || id != tt.id || remote != tt.remote || local != tt.local || upload != tt.upload {
			t.Errorf("%q: %q %q %q %v %v", tt.args, id, remote, local, upload, err)
		}
	}
}

func TestCopySummary(t *testing.T) {
	for _, tt := range []struct {
		st   filexfer.Stats
		want string
	}{
		{filexfer.Stats{Files: 1, Bytes: 2 << 30, Checksum: "crc32c"}, "copied 1 file (2.0 GiB) in 2s, 1.0 GiB/s; CRC-32C verified"},
		{filexfer.Stats{Files: 3, Bytes: 1 << 20, Resumed: 1 << 30, Skipped: 2, Checksum: "sha256"}, "copied 3 files (1.0 MiB) in 2s, 512.0 KiB/s; resumed 1.0 GiB from partial files; 2 files already there (same SHA-256) skipped; SHA-256 verified"},
		{filexfer.Stats{Dirs: 1}, "copied 0 files (0 B) in 2s"},
		{filexfer.Stats{Skipped: 1, Checksum: "crc32c"}, "copied 0 files (0 B) in 2s; 1 file already there (same CRC-32C) skipped; CRC-32C verified"},
	} {
		if got := copySummary(tt.st, 2*time.Second); got != tt.want {
			t.Errorf("%+v:\n got %s\nwant %s", tt.st, got, tt.want)
		}
	}
}

func TestByteProgress(t *testing.T) {
	old := terminalWidth
	defer func() { terminalWidth = old }()
	var buf bytes.Buffer
	terminalWidth = func(io.Writer) (int, bool) { return 80, true }
	p := newByteProgress(&buf)
	p.start = time.Now().Add(-2 * time.Second)
	p.setTotal(4 << 20)
	p.add(1 << 20)
	if got := buf.String(); !strings.Contains(got, "1.0 MiB / 4.0 MiB   25%") || !strings.Contains(got, "/s") || !strings.Contains(got, "ETA") {
		t.Errorf("progress line %q", got)
	}
	p.stop()
	if !strings.HasSuffix(buf.String(), "\r\033[K") {
		t.Errorf("the line is not cleared: %q", buf.String())
	}
}

func TestCopyChecksumFlag(t *testing.T) {
	e := newCloudEnv(t)
	for _, kind := range []string{"volumes", "instances"} {
		code, _, errOut := e.as(e.admin, kind, "cp", "--checksum", "md5", "./f", "x-0123456789abcdef:/f")
		if code != ExitUsage || !strings.Contains(errOut, `--checksum is crc32c or sha256, not "md5"`) {
			t.Errorf("%s cp --checksum md5: exit %d, %q", kind, code, errOut)
		}
	}
}

// TestOpenCopyFallsBack: --direct on a cloud that grants no direct copy
// says why and copies through the server; a grant's not_found is the
// answer, not a reason to try the relay.
func TestOpenCopyFallsBack(t *testing.T) {
	for _, tt := range []struct {
		desc        string
		grant       int // the grant's status
		grantCode   string
		wantRelayed bool
		wantNote    string
	}{
		{"direct copies off", http.StatusForbidden, "permission_denied", true, "no direct copy (permission_denied: off); copying through the server"},
		{"a host without a listener", http.StatusConflict, "conflict", true, "no direct copy (conflict: off); copying through the server"},
		{"another tenant's", http.StatusNotFound, "not_found", false, ""},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			relayed := false
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch {
				case r.Method == "POST" && r.URL.Path == "/v1/volumes/v-1/files/grant":
					w.WriteHeader(tt.grant)
					fmt.Fprintf(w, `{"code":%q,"message":"off"}`, tt.grantCode)
				case r.Method == "GET" && r.URL.Path == "/v1/volumes/v-1/files":
					relayed = true
					w.WriteHeader(http.StatusNotFound)
					io.WriteString(w, `{"code":"not_found","message":"relay reached"}`)
				default:
					t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
				}
			}))
			defer srv.Close()
			var stderr bytes.Buffer
			_, _, err := openCopy(t.Context(), client.New(srv.URL, "gpc_tk-x_y", srv.Client()), "volumes", "v-1", true, &stderr)
			if err == nil {
				t.Fatal("opened a copy against a fake server")
			}
			if relayed != tt.wantRelayed || strings.TrimSpace(stderr.String()) != tt.wantNote {
				t.Errorf("relayed %v, stderr %q; want %v, %q", relayed, stderr.String(), tt.wantRelayed, tt.wantNote)
			}
		})
	}
}
