package agentcmd

import (
	"io"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"4096", 4096, true}, {"512MiB", 512 << 20, true}, {"10GiB", 10 << 30, true},
		{"2T", 2 << 40, true}, {"100M", 100 << 20, true}, {"7KiB", 7 << 10, true}, {"12B", 12, true},
		{"", 0, false}, {"-1GiB", 0, false}, {"1.5GiB", 0, false}, {"GiB", 0, false}, {"10PiB", 0, false},
		{"99999999999TiB", 0, false},
	} {
		got, err := parseSize(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

// TestStorageFlags: the flags become the runtime's and the agent's
// limits; 0 means no limit (sizes) or at once (retention).
func TestStorageFlags(t *testing.T) {
	for _, c := range []struct {
		name          string
		fl            storageFlags
		root, logSize int64
		logFiles      int
		wantErr       bool
	}{
		{"defaults", storageFlags{rootSize: "10GiB", logSize: "100MiB", logFiles: 3}, 10 << 30, 100 << 20, 3, false},
		{"no limits", storageFlags{rootSize: "0", logSize: "0", logFiles: 2}, -1, -1, 2, false},
		{"one log file", storageFlags{rootSize: "1GiB", logSize: "1MiB", logFiles: 1}, 0, 0, 0, true},
		{"a tiny root", storageFlags{rootSize: "1MiB", logSize: "1MiB", logFiles: 2}, 0, 0, 0, true},
		{"a bad size", storageFlags{rootSize: "ten", logSize: "1MiB", logFiles: 2}, 0, 0, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cfg containerd.Config
			err := c.fl.containerd(&cfg)
			if (err != nil) != c.wantErr {
				t.Fatalf("err %v, want error %v", err, c.wantErr)
			}
			if err == nil && (cfg.RootSize != c.root || cfg.LogSize != c.logSize || cfg.LogFiles != c.logFiles) {
				t.Errorf("config %d, %d, %d; want %d, %d, %d", cfg.RootSize, cfg.LogSize, cfg.LogFiles, c.root, c.logSize, c.logFiles)
			}
		})
	}
	for _, c := range []struct {
		retain  time.Duration
		rt      string
		want    time.Duration
		volumes bool
	}{
		{time.Hour, "containerd", time.Hour, true}, {0, "containerd", -1, true}, {time.Minute, "process", time.Minute, false},
	} {
		var cfg agent.Config
		(&storageFlags{retain: c.retain}).apply(&cfg, c.rt, io.Discard)
		if cfg.RetainTerminated != c.want || cfg.VolumeImages != c.volumes {
			t.Errorf("--retain-terminated %v with %s: retain %v, images %v; want %v, %v", c.retain, c.rt, cfg.RetainTerminated, cfg.VolumeImages, c.want, c.volumes)
		}
	}
}
