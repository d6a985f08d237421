// Package dashboards ships gpucloud's Grafana dashboards (import
// gpucloud.json into Grafana with a Prometheus data source that scrapes the
// server's /metrics and the agents' --metrics-listen) and lists the metrics
// their queries name, so that a test can check each exists.
package dashboards

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
)

//go:embed *.json
var files embed.FS

// metricName matches the names of gpucloud's and the DCGM exporter's
// metrics in a PromQL expression.
var metricName = regexp.MustCompile(`\b(gpucloud_[a-z0-9_]+|DCGM_[A-Z0-9_]+)\b`)

// Metrics returns the metric names the dashboards' queries use, sorted,
// with a histogram's _bucket, _sum and _count series named by the
// histogram.
func Metrics() ([]string, error) {
	seen := map[string]bool{}
	err := fs.WalkDir(files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		var walk func(v any)
		walk = func(v any) {
			switch x := v.(type) {
			case map[string]any:
				for k, e := range x {
					if s, ok := e.(string); ok && k == "expr" {
						for _, m := range metricName.FindAllString(s, -1) {
							for _, suf := range []string{"_bucket", "_sum", "_count"} {
								m = strings.TrimSuffix(m, suf)
							}
							seen[m] = true
						}
					}
					walk(e)
				}
			case []any:
				for _, e := range x {
					walk(e)
				}
			}
		}
		walk(doc)
		return nil
	})
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out, err
}

// Agent reports whether a metric is one the agents serve (the GPUs' own,
// the instances' CPU and memory) rather than the server.
func Agent(name string) bool {
	return strings.HasPrefix(name, "DCGM_") || strings.HasPrefix(name, "gpucloud_gpu_") && name != "gpucloud_gpu_mig_slices" ||
		strings.HasPrefix(name, "gpucloud_instance_")
}
