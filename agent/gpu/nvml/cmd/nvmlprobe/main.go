//go:build cgo

// Command nvmlprobe opens the host's NVIDIA driver through NVML and prints
// what the agent would report, as JSON, changing nothing: the inventory, each
// GPU's utilization as the agent's metrics read it, and for each GPU with MIG
// the catalog check of NVML's MIG profile table. Run it
// on new hardware to see how the driver and the catalog describe it.
//
//	go run ./agent/gpu/nvml/cmd/nvmlprobe > probe.json
//
// It exits 1 when NVML cannot be opened (no NVIDIA driver) or the inventory
// fails, and 0 otherwise, even when a GPU is unhealthy or a profile check
// finds differences: those are in the output.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agent/gpu/nvml"
	"github.com/gpucloud/gpucloud/agentapi"
)

// report is the probe's output.
type report struct {
	Inventory *agentapi.Inventory `json:"inventory"`
	// Profiles maps a GPU index to the check of its MIG profiles.
	Profiles map[string][]nvml.ProfileCheck `json:"mig_profiles,omitempty"`
	// Utilization maps a GPU's UUID to what Driver.Utilization reads (0..1);
	// a GPU it cannot read (one in MIG mode) has a note instead.
	Utilization map[string]float64 `json:"utilization,omitempty"`
	// Telemetry is what Driver.Telemetry reads (what the agent's metrics
	// exporter serves).
	Telemetry []gpu.Telemetry `json:"telemetry,omitempty"`
	// Notes say why a GPU's profiles or utilization were not read.
	Notes []string `json:"notes,omitempty"`
}

func main() {
	profiles := flag.Bool("profiles", true, "check each MIG-capable GPU's profile table against the catalog")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	flag.Parse()
	if err := run(*profiles, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "nvmlprobe:", err)
		os.Exit(1)
	}
}

func run(profiles bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d, err := nvml.Open()
	if err != nil {
		return err
	}
	defer d.Close()
	hostname, _ := os.Hostname()
	d.HostID = hostname

	inv, err := d.Inventory(ctx)
	if err != nil {
		return err
	}
	out := report{Inventory: inv, Profiles: map[string][]nvml.ProfileCheck{}, Utilization: map[string]float64{}}
	for _, g := range inv.Host.GPUs {
		if g.UUID == "" {
			continue
		}
		v, err := d.Utilization(ctx, []string{g.UUID})
		if err != nil {
			out.Notes = append(out.Notes, fmt.Sprintf("gpu %d utilization: %v", g.Index, err))
			continue
		}
		out.Utilization[g.UUID] = v
	}
	if tel, err := d.Telemetry(ctx); err != nil {
		out.Notes = append(out.Notes, fmt.Sprintf("telemetry: %v", err))
	} else {
		out.Telemetry = tel
	}
	if profiles {
		for _, g := range inv.Host.GPUs {
			checks, err := d.CheckProfiles(ctx, g.Index)
			switch {
			case err == nil:
				out.Profiles[strconv.Itoa(g.Index)] = checks
			case errors.Is(err, gpu.ErrNotSupported):
				out.Notes = append(out.Notes, err.Error())
			default:
				return err
			}
		}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
