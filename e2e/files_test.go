package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/files"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/filexfer"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestFiles: volumes cp and instances cp through the server (TLS 1.3)
// and the host's agent, with the process runtime, on both stores: a tree
// in and back out, a copy cut midway resumed, the checksum, another
// tenant's not_found, a stopped instance's clear error.
func TestFiles(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testFiles(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testFiles(t, pgtest.URL(t)) })
}

// withFiles registers the files handler, as gpucloud agent and up do.
func withFiles(cfg *agent.Config) { cfg.Sessions = files.Sessions(*cfg) }

// filesClient opens a files session, cut after cut bytes written when
// cut > 0.
func filesClient(t *testing.T, cl *client.Client, kind, id string, cut int64) (*filexfer.Client, error) {
	t.Helper()
	conn, err := cl.OpenFiles(t.Context(), kind, id)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { conn.Close() })
	return filexfer.NewClient(&cutAfter{Conn: conn, left: cut}), nil
}

// cutAfter closes its connection once left bytes are written (0: never).
type cutAfter struct {
	net.Conn
	left int64
}

func (c *cutAfter) Write(p []byte) (int, error) {
	if c.left > 0 && int64(len(p)) >= c.left {
		n, _ := c.Conn.Write(p[:c.left])
		c.Conn.Close()
		return n, net.ErrClosed
	}
	if c.left > 0 {
		c.left -= int64(len(p))
	}
	return c.Conn.Write(p)
}

func writeRandom(t *testing.T, p string, size int) []byte {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

func sameFile(t *testing.T, p string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the %d written", p, len(got), len(want))
	}
}

func testFiles(t *testing.T, db string) {
	spec := sim.Spec{ID: "sim-files", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 1}}
	c := startClusterTuned(t, db, nil, withFiles, spec)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	_, mallory, _ := c.member("globex", "mallory")
	vol, err := alice.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: 1}, "")
	if err != nil {
		t.Fatal(err)
	}
	in, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "600"},
		Volumes: []string{vol.ID}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, in.ID, cloud.Running)
	volDir := filepath.Join(c.hosts[spec.ID].dir, "volumes", vol.ID)
	local := t.TempDir()
	tree := map[string][]byte{
		"dataset/a.bin":       writeRandom(t, filepath.Join(local, "dataset/a.bin"), 3<<20+17),
		"dataset/sub/b.txt":   writeRandom(t, filepath.Join(local, "dataset/sub/b.txt"), 100),
		"dataset/sub/empty.x": writeRandom(t, filepath.Join(local, "dataset/sub/empty.x"), 0),
	}

	t.Run("a directory in through the volume", func(t *testing.T) {
		fc, err := filesClient(t, alice, "volumes", vol.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		st, err := filexfer.Upload(fc, filepath.Join(local, "dataset"), "/", filexfer.Options{})
		if err != nil || st.Files != len(tree) {
			t.Fatalf("upload: %+v, %v", st, err)
		}
		for name, data := range tree {
			sameFile(t, filepath.Join(volDir, name), data)
		}
	})

	t.Run("and out through the instance", func(t *testing.T) {
		fc, err := filesClient(t, alice, "instances", in.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		// The process runtime's instance sees its volume as its working
		// directory, the root of its files.
		if _, err := filexfer.Download(fc, "/dataset", out, filexfer.Options{}); err != nil {
			t.Fatal(err)
		}
		for name, data := range tree {
			sameFile(t, filepath.Join(out, name), data)
		}
	})

	t.Run("a cut copy resumes", func(t *testing.T) {
		big := writeRandom(t, filepath.Join(local, "big.bin"), 8<<20)
		fc, err := filesClient(t, alice, "volumes", vol.ID, 3<<20)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := filexfer.Upload(fc, filepath.Join(local, "big.bin"), "/big.bin", filexfer.Options{}); err == nil {
			t.Fatal("a copy over a cut connection succeeded")
		}
		var moved atomic.Int64
		fc, err = filesClient(t, alice, "volumes", vol.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The agent takes in what reached it before the cut in its own
		// time: wait until the partial file holds some of it.
		c.until("a partial upload after the cut", func() (bool, string) {
			fi, err := fc.Stat("/big.bin")
			return filexfer.IsNotFound(err) && fi != nil && fi.Partial > 0, fmt.Sprint(fi, err)
		})
		st, err := filexfer.Upload(fc, filepath.Join(local, "big.bin"), "/big.bin", filexfer.Options{Add: func(n int64) { moved.Add(n) }})
		if err != nil {
			t.Fatal(err)
		}
		if st.Resumed == 0 || st.Bytes+st.Resumed != int64(len(big)) || moved.Load() != int64(len(big)) {
			t.Errorf("resumed copy: %+v, progress %d", st, moved.Load())
		}
		sameFile(t, filepath.Join(volDir, "big.bin"), big)
	})

	t.Run("another tenant", func(t *testing.T) {
		for _, kind := range []struct{ kind, id string }{{"volumes", vol.ID}, {"instances", in.ID}} {
			_, err := filesClient(t, mallory, kind.kind, kind.id, 0)
			wantCode(t, "mallory's "+kind.kind+" cp", err, cloud.NotFound)
		}
	})

	t.Run("a stopped instance", func(t *testing.T) {
		if _, err := alice.StopInstance(ctx, in.ID, 0); err != nil {
			t.Fatal(err)
		}
		c.waitState(alice, in.ID, cloud.Stopped)
		_, err := filesClient(t, alice, "instances", in.ID, 0)
		wantCode(t, "instances cp of a stopped instance", err, cloud.Conflict)
	})
}
