package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
)

// outputFlag is -o on the commands that print resources.
type outputFlag struct{ format string }

func (o *outputFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "table", `output format: "table", "json" or "yaml"`)
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
}

// check validates the format; its error is a usage error.
func (o *outputFlag) check(cmd *cobra.Command) error {
	for _, v := range outputFormats {
		if o.format == v {
			return nil
		}
	}
	return cmdutil.Usagef(cmd, `--output %q: want "table", "json" or "yaml"`, o.format)
}

func (o *outputFlag) table() bool { return o.format == "table" }

// writeData writes v as JSON, or as YAML with the same field names (the
// API's types carry JSON tags only, so YAML goes through JSON).
func writeData(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == "json" {
		_, err = w.Write(append(b, '\n'))
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return err
	}
	plainStyle(&doc)
	compactYAML(&doc)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// plainStyle clears the flow and quoting styles that parsing JSON leaves
// on YAML nodes; the encoder quotes what needs quoting by itself.
func plainStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plainStyle(c)
	}
}

// ago renders how long ago t was, coarsely: "45s", "12m", "3h", "5d".
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return span(clockNow().Sub(t))
}

// span renders a duration coarsely: "45s", "12m", "3h", "5d"; a negative
// one as "0s".
func span(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
}

// stamp renders a time for detail views: UTC RFC 3339 and its age, or
// how far off it is when it is to come (an expiry, a deadline).
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if d := t.Sub(clockNow()); d >= time.Second {
		return t.UTC().Format(time.RFC3339) + " (in " + span(d) + ")"
	}
	return t.UTC().Format(time.RFC3339) + " (" + ago(t) + " ago)"
}

// clip shortens s to n runes with an ellipsis, for table cells.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// outputFormats are the values of -o on the catalog commands.
var outputFormats = []string{"table", "json", "yaml"}

// writeList writes v (a slice of catalog types) as JSON or YAML; table
// output is the caller's.
func writeList(w io.Writer, format string, v any) error {
	var b []byte
	switch format {
	case "json":
		var err error
		if b, err = json.MarshalIndent(v, "", "  "); err != nil {
			return err
		}
		b = append(b, '\n')
	case "yaml":
		var doc yaml.Node
		if err := doc.Encode(v); err != nil {
			return err
		}
		compactYAML(&doc)
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(&doc); err != nil {
			return err
		}
		if err := enc.Close(); err != nil {
			return err
		}
		b = buf.Bytes()
	default:
		return fmt.Errorf("unsupported output format %q", format)
	}
	_, err := w.Write(b)
	return err
}

// compactYAML makes YAML output read like a hand-written catalog file: lists
// of scalars (starts, aliases) in flow style, and PCI device ids in hex. The
// result still loads as catalog entries.
func compactYAML(n *yaml.Node) {
	switch n.Kind {
	case yaml.SequenceNode:
		flow := len(n.Content) > 0
		for _, c := range n.Content {
			flow = flow && c.Kind == yaml.ScalarNode
		}
		if flow {
			n.Style = yaml.FlowStyle
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "pci_device_id" && v.Kind == yaml.ScalarNode {
				if id, err := strconv.ParseUint(v.Value, 10, 16); err == nil {
					v.Value = fmt.Sprintf("0x%04X", id)
				}
			}
		}
	}
	for _, c := range n.Content {
		compactYAML(c)
	}
}

// writeTable writes rows (the first is the header) as aligned columns.
func writeTable(w io.Writer, rows [][]string) error {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// formatMiB renders a memory size in GiB when it is whole GiB, else in MiB,
// so that no value is rounded away.
func formatMiB(mib int64) string {
	if mib%catalog.GiB == 0 {
		return strconv.FormatInt(mib/catalog.GiB, 10) + " GiB"
	}
	return strconv.FormatInt(mib, 10) + " MiB"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
