package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
)

// maxMetricPoints is how many points one POST /v1/metrics takes.
const maxMetricPoints = 100

func newMetricsCommand(s *session) *cobra.Command {
	return groupCommand("metrics", "Publish custom metrics for autoscaling groups",
		"Publish the values of custom metrics of a group (a queue length, requests per\n"+
			"second) for its target tracking policies: a policy --target-metric\n"+
			"custom:queue=10 holds queue at 10 per member.",
		newMetricsPutCommand(s))
}

func newMetricsPutCommand(s *session) *cobra.Command {
	var at string
	cmd := &cobra.Command{
		Use:   "put GROUP NAME=VALUE...",
		Short: "Publish custom metric values of a group",
		Long: "Publish values of custom metrics of a group, by ID or name: NAME=VALUE, NAME\n" +
			"of a-z, 0-9, '_', '.' and '-' (a leading custom: is dropped), up to 100 at\n" +
			"once. They are measured now, or at --at (from an hour ago to 5 minutes ahead).",
		Example: "  gpucloud metrics put web queue=42\n  gpucloud metrics put asg-0123456789abcdef queue=42 rps=180.5 --at 2m",
		Args:    minArgs(2, "a group ID or name and one or more NAME=VALUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args)-1 > maxMetricPoints {
				return cmdutil.Usagef(cmd, "%d values: at most %d at once", len(args)-1, maxMetricPoints)
			}
			when, err := parseWhen(cmd, "at", at)
			if err != nil {
				return err
			}
			var points []api.MetricPoint
			for _, kv := range args[1:] {
				k, v, ok := strings.Cut(kv, "=")
				k = strings.TrimPrefix(strings.TrimSpace(k), cloud.CustomMetricPrefix)
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if !ok || k == "" || err != nil {
					return cmdutil.Usagef(cmd, "%q: want NAME=VALUE, e.g. queue=42", kv)
				}
				p := api.MetricPoint{Name: k, Value: f}
				if !when.IsZero() {
					t := when
					p.At = &t
				}
				points = append(points, p)
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.groupID(ctx, args[0])
				if err != nil {
					return err
				}
				if err := c.PutMetrics(ctx, api.PutMetricsRequest{GroupID: id, Metrics: points}); err != nil {
					return c.explain(err)
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), storedLine(args[0], id, points, when))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "when the values were measured: RFC 3339 or a duration ago such as 2m (default now)")
	return cmd
}

// storedLine says what metrics put stored: "stored 2 points for group web
// (asg-...), measured now: queue=42, rps=180.5". group is what the user
// typed, id the group's ID; a zero when is the server's now.
func storedLine(group, id string, points []api.MetricPoint, when time.Time) string {
	name := id
	if group != id {
		name = group + " (" + id + ")"
	}
	stamp := "now"
	if !when.IsZero() {
		stamp = "at " + when.UTC().Format(time.RFC3339)
	}
	vals := make([]string, len(points))
	for i, p := range points {
		vals[i] = p.Name + "=" + strconv.FormatFloat(p.Value, 'g', -1, 64)
	}
	noun := "points"
	if len(points) == 1 {
		noun = "point"
	}
	return fmt.Sprintf("stored %d %s for group %s, measured %s: %s", len(points), noun, name, stamp, strings.Join(vals, ", "))
}
