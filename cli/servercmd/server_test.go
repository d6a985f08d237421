package servercmd

import (
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/controlplane"
)

func TestSpotServerFlags(t *testing.T) {
	parse := func(args ...string) (*controlplane.Config, error) {
		var f SpotFlags
		cmd := &cobra.Command{Use: "server"}
		f.Register(cmd)
		if err := cmd.ParseFlags(args); err != nil {
			return nil, err
		}
		var cfg controlplane.Config
		return &cfg, f.Apply(cmd, &cfg)
	}
	cfg, err := parse("--spot-notice", "90s", "--pool-notice", "h100.8x/a=5m", "--pool-notice", "l4.1x=45s", "--spot-keep-failed", "1h")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Spot.NoticeSeconds != 90 || cfg.PoolNotice["h100.8x/a"] != 5*time.Minute || cfg.PoolNotice["l4.1x"] != 45*time.Second || cfg.KeepFailed != time.Hour {
		t.Fatalf("config %+v %+v", cfg, cfg.Spot)
	}
	for _, bad := range [][]string{
		{"--spot-notice", "29s"},
		{"--pool-notice", "h100.8x=10s"},
		{"--pool-notice", "h100.8x"},
		{"--pool-notice", "=5m"},
		{"--spot-clear-interval", "0s"},
	} {
		if _, err := parse(bad...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
