package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/cloud"
)

func newHostDescribeCommand(s *session) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:     "describe ID",
		Aliases: []string{"show", "get"},
		Short:   "Show everything about a host",
		Long: "Show a host as its agent reported it and the control plane records it: state,\n" +
			"zone, rack, labels (the interconnect label comes from its RDMA adapters unless\n" +
			"the agent's host description sets it), CPU and memory, its address on the\n" +
			"fabric between hosts (the underlay) when it reports one, where its agent takes\n" +
			"direct sessions (--direct-listen) when it does, every GPU with its\n" +
			"UUID, NVLink island and MIG mode, and its RDMA adapters (InfiniBand or RoCE)\n" +
			"with their link layer, network interface and device nodes.\n\n" +
			"-o json and -o yaml print the host as recorded.",
		Example: "  gpucloud hosts describe sim-h100-1\n  gpucloud hosts describe sim-h100-1 -o json",
		Args:    exactArgs(1, "one host ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				hs, err := c.Hosts(ctx)
				if err != nil {
					return c.explain(err)
				}
				for _, h := range hs {
					if h.ID == args[0] {
						if !out.table() {
							return writeData(cmd.OutOrStdout(), out.format, h)
						}
						return describeHost(cmd.OutOrStdout(), h)
					}
				}
				return c.explain(&cloud.Error{Code: cloud.NotFound, Message: fmt.Sprintf("host %q not found", args[0]),
					Details: map[string]any{"kind": "host", "id": args[0]}})
			})
		},
	}
	out.register(cmd)
	return cmd
}

// describeHost writes the detail view of a host.
func describeHost(w io.Writer, h *cloud.Host) error {
	sp := &h.Spec
	var rows fieldRows
	add := rows.add
	add("ID", h.ID)
	add("State", string(h.State))
	add("Zone", dash(sp.Zone))
	add("Rack", dash(sp.Rack))
	add("Labels", dash(joinMap(sp.Labels)))
	add("vCPUs", strconv.FormatFloat(float64(sp.CPUMilli)/1000, 'f', -1, 64))
	add("Memory", formatMiB(sp.MemoryMiB))
	add("GPUs", gpuSummary(h))
	if sp.Underlay != "" {
		u := sp.Underlay
		if sp.MTU > 0 {
			u += ", MTU " + strconv.Itoa(sp.MTU)
		}
		add("Underlay", u)
	}
	if sp.DirectAddr != "" {
		add("Direct", sp.DirectAddr+" (certificate "+sp.DirectFingerprint+")")
	}
	hb := "never"
	if !h.LastHeartbeat.IsZero() {
		hb = stamp(h.LastHeartbeat)
	}
	add("Heartbeat", hb)
	add("Version", strconv.FormatInt(h.Version, 10))
	if err := writeTable(w, rows); err != nil {
		return err
	}
	if len(sp.GPUs) > 0 {
		fmt.Fprintln(w, "GPU devices:")
		rows := [][]string{{"  INDEX", "MODEL", "UUID", "NVLINK ISLAND", "MIG"}}
		for _, g := range sp.GPUs {
			island := "PCIe"
			if g.Island >= 0 {
				island = strconv.Itoa(g.Island)
			}
			mig := "-"
			if g.MIG {
				mig = "on, " + plural(len(g.Instances), "instance", "instances")
			}
			if mode := g.ModeString(); mode != "" {
				// AMD: no MIG; the operator's partition mode instead.
				mig = mode
				if g.Parts > 1 || g.VFs > 0 {
					mig += ", " + plural(g.Parts, "device", "devices")
				}
			}
			rows = append(rows, []string{"  " + strconv.Itoa(g.Index), g.Model, dash(g.UUID), island, mig})
		}
		if err := writeTable(w, rows); err != nil {
			return err
		}
	}
	if len(sp.HCAs) == 0 {
		fmt.Fprintln(w, "RDMA adapters: none")
		return nil
	}
	fmt.Fprintln(w, "RDMA adapters:")
	rows = [][]string{{"  NAME", "LINK LAYER", "NETDEV", "DEVICES"}}
	for _, a := range sp.HCAs {
		ll := a.LinkLayer
		if ll == "Ethernet" {
			ll += " (RoCE)"
		}
		rows = append(rows, []string{"  " + a.Name, ll, dash(a.NetDev), dash(strings.Join(a.Devices, ", "))})
	}
	return writeTable(w, rows)
}
