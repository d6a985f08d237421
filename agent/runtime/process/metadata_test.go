//go:build unix

package process

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/runtimetest"
)

// TestWorkloadReadsMetadata runs this test binary as a workload that reads
// its metadata from GPUCLOUD_METADATA_URL, with a session token: the
// runtime and the metadata service together give a workload its identity
// and nothing else.
func TestWorkloadReadsMetadata(t *testing.T) {
	md := metadata.New()
	defer md.Close()
	addr, err := md.Listen("md-1")
	if err != nil {
		t.Fatal(err)
	}
	md.Set("md-1", metadata.Document{Offering: "l40s.1x", GPUs: []string{"GPU-x"}, Zone: "z", Host: "h"})
	rt := New(t.TempDir())
	spec := runtime.Spec{
		InstanceID: "md-1", Devices: []string{"GPU-x"}, MetadataURL: "http://" + addr,
		Command: []string{os.Args[0], "-test.run=^TestHelperMetadataClient$"},
		// The race detector otherwise sleeps a second before a raced
		// binary exits.
		Env: map[string]string{"HELPER": "1", "GORACE": "atexit_sleep_ms=0"},
	}
	if err := rt.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if st := runtimetest.Wait(t, rt, "md-1"); st.ExitCode != 0 {
		t.Fatalf("workload exited %d: %s", st.ExitCode, runtimetest.Logs(t, rt, "md-1"))
	}
	want := `{"id":"md-1","offering":"l40s.1x","gpus":["GPU-x"],"tags":{},"zone":"z","host":"h"}` + "\n"
	if got := runtimetest.Logs(t, rt, "md-1"); got != want {
		t.Fatalf("workload read %q, want %q", got, want)
	}
}

// TestHelperMetadataClient is the workload of TestWorkloadReadsMetadata; run
// directly it does nothing.
func TestHelperMetadataClient(t *testing.T) {
	if os.Getenv("HELPER") != "1" {
		t.Skip("helper process only")
	}
	base := os.Getenv("GPUCLOUD_METADATA_URL")
	tok, err := metadata.Token(context.Background(), nil, base, time.Minute)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	req, err := http.NewRequest(http.MethodGet, base+"/v1/instance", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	req.Header.Set(metadata.TokenHeader, tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(os.Stdout, resp.Body)
	os.Exit(0)
}
