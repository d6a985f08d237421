package agentcmd

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
)

// storageFlags are the host's storage limits and retention
// (docs/RUNTIME.md, "Storage limits and deletion").
type storageFlags struct {
	retain            time.Duration
	rootSize, logSize string
	logFiles          int
}

func (s *storageFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.DurationVar(&s.retain, "retain-terminated", agent.DefaultRetainTerminated,
		"how long a terminated instance's working directory and log stay on the host (0: removed at once)")
	f.StringVar(&s.rootSize, "root-size", "10GiB",
		"the most a container writes to its root filesystem, e.g. 10GiB or 512MiB (--runtime containerd; 0: no limit)")
	f.StringVar(&s.logSize, "log-size", "100MiB",
		"the most one file of a workload's log holds (--runtime containerd; 0: one file, not rotated, no limit)")
	f.IntVar(&s.logFiles, "log-files", containerd.DefaultLogFiles,
		"how many files a workload's log is kept in, the one written and the rotated ones (at least 2; --runtime containerd): at most --log-size times this on disk")
}

// apply sets the agent's storage configuration: with containers each
// volume is a filesystem of its size; the process runtime, for one
// tenant and maybe not root, keeps plain directories, which it says once.
func (s *storageFlags) apply(cfg *agent.Config, runtimeName string, stderr io.Writer) {
	cfg.RetainTerminated = s.retain
	if s.retain == 0 {
		cfg.RetainTerminated = -1 // at once
	}
	cfg.VolumeImages = runtimeName == "containerd"
	if !cfg.VolumeImages {
		fmt.Fprintln(stderr, "warning: the process runtime does not limit storage: volumes are plain directories that may outgrow their size, and logs are not rotated (docs/RUNTIME.md)")
	}
}

// containerd sets the containerd runtime's limits.
func (s *storageFlags) containerd(cfg *containerd.Config) error {
	root, err := parseSize(s.rootSize)
	if err != nil {
		return fmt.Errorf("--root-size: %w", err)
	}
	logSize, err := parseSize(s.logSize)
	if err != nil {
		return fmt.Errorf("--log-size: %w", err)
	}
	if s.logFiles < 2 {
		return fmt.Errorf("--log-files %d: want at least 2, the file written and a rotated one", s.logFiles)
	}
	if root > 0 && root < 64<<20 {
		return fmt.Errorf("--root-size %s: want at least 64MiB, or 0 for no limit", s.rootSize)
	}
	cfg.RootSize, cfg.LogSize, cfg.LogFiles = root, logSize, s.logFiles
	if root == 0 {
		cfg.RootSize = -1
	}
	if logSize == 0 {
		cfg.LogSize = -1
	}
	return nil
}

// parseSize reads a size in bytes with an optional binary unit: 512MiB,
// 10GiB, 1TiB (K, M, G and T mean the same).
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}, {"B", 0}}
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range units {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, shift = n, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("size %q: want a whole number of bytes, KiB, MiB, GiB or TiB", s)
	}
	return n << shift, nil
}
