package autoscale

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The figures of docs/AUTOSCALING.md: go test ./autoscale -run
// TestFigures -figures (with the Alibaba series of `gpucloud sim demand`
// in $GPUCLOUD_DEMAND, a directory of ali-*.csv; without it, the
// synthetic series only).
var figures = flag.Bool("figures", false, "print the replay figures of docs/AUTOSCALING.md")

// figureSeries is the varied set: synthetic shapes, seeded, and the
// Alibaba-derived series found in $GPUCLOUD_DEMAND.
func figureSeries(t *testing.T) (names []string, series []Series) {
	day := 24 * 60
	for _, c := range []struct {
		name string
		cfg  SyntheticConfig
	}{
		{"syn cycles+bursts 1m", SyntheticConfig{Steps: 35 * day, Seed: 1}},
		{"syn cycles+bursts 1h", SyntheticConfig{Steps: 56 * 24, Seed: 2, Interval: time.Hour}},
		{"syn bursty 1m", SyntheticConfig{Steps: 35 * day, Seed: 3, Base: 100, BurstsPerWeek: 30, BurstGPUs: 80, Noise: 0.08}},
		{"syn trend +10%/wk 1m", SyntheticConfig{Steps: 35 * day, Seed: 4, Trend: 0.1}},
		{"syn trend -5%/wk 1m", SyntheticConfig{Steps: 35 * day, Seed: 5, Trend: -0.05}},
		{"syn office hours 1m", SyntheticConfig{Steps: 35 * day, Seed: 6, Office: true}},
		{"syn tiny spiky 1m", SyntheticConfig{Steps: 35 * day, Seed: 7, Base: 3, Daily: 0.3, Noise: 0.4, BurstsPerWeek: 40, BurstGPUs: 12}},
	} {
		names, series = append(names, c.name), append(series, Synthetic(c.cfg))
	}
	dir := os.Getenv("GPUCLOUD_DEMAND")
	if dir == "" {
		return names, series
	}
	files, _ := filepath.Glob(filepath.Join(dir, "ali-*.csv"))
	for _, f := range files {
		s, err := ReadCSV(f, CSVOptions{})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".csv"))
		series = append(series, s)
	}
	return names, series
}

func TestFigures(t *testing.T) {
	if !*figures {
		t.Skip("-figures not set")
	}
	names, series := figureSeries(t)
	opt := ReplayOptions{Config: Config{Boot: 5 * time.Minute}, HistorySteps: -1}
	fmt.Println("| series | gpucloud unmet % | gpucloud × oracle | gpucloud actions | target 70% unmet % | target × oracle | target actions | oracle actions |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for i, s := range series {
		g, err := Replay("gpucloud", s, opt)
		if err != nil {
			t.Fatal(err)
		}
		tt, err := Replay("target", s, opt)
		if err != nil {
			t.Fatal(err)
		}
		o, err := Oracle(s, opt)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("| %s | %.3f | %.3f | %d | %.3f | %.3f | %d | %d |\n", names[i], g.ShortfallPercent, g.CostVsOracle,
			g.ScalingActions, tt.ShortfallPercent, tt.CostVsOracle, tt.ScalingActions, o.ScalingActions)
	}
}
