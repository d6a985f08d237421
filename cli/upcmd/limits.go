package upcmd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/files"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cli/agentcmd"
)

// resources is an amount of CPU (milli-cores) and memory (MiB).
type resources struct {
	cpuMilli, memoryMiB int64
}

// limitScale is how `up` fits the containers of its simulated hosts into
// this machine. The simulated fleet promises what real GPU servers have
// (32 cores and 256 GiB per GPU), and an instance's container gets the
// CPU and memory limits of its offering; run as containers on one small
// machine, a few instances could be allowed more memory than the machine
// has, and one tenant could push it into the kernel's out-of-memory
// killer. So each container's memory limit is scaled by machine/fleet
// (never up), which keeps what the whole simulated fleet may hold within
// the machine's memory, and its CPU limit is capped at the machine's CPUs.
// CPU is not scaled like memory: time on a busy CPU is shared in
// proportion to the containers' CPU shares (which follow the offerings),
// nothing is killed for lack of it, and a scaled quota (1/640 on a
// 2-core machine) would starve a lone instance on an idle machine. The
// fleet, the offerings and the scheduler keep their simulated sizes.
type limitScale struct {
	fleet, machine resources
}

// fleetLimits is the limitScale of a simulated fleet on machine m; specs
// are resolved against the default catalog for their CPU and memory.
func fleetLimits(specs []sim.Spec, m resources) (limitScale, error) {
	var f resources
	for _, s := range specs {
		r, err := s.Resolve(catalog.Default())
		if err != nil {
			return limitScale{}, err
		}
		f.cpuMilli += r.CPUMilli
		f.memoryMiB += r.MemoryMiB
	}
	return limitScale{fleet: f, machine: m}, nil
}

// scales reports whether any limit is scaled down.
func (l limitScale) scales() bool {
	return l.machine.cpuMilli > 0 && l.fleet.cpuMilli > l.machine.cpuMilli ||
		l.machine.memoryMiB > 0 && l.fleet.memoryMiB > l.machine.memoryMiB
}

// scale returns v scaled by num/den when den > num > 0 (rounded down, at
// least 1 for a positive v), else v.
func scale(v, num, den int64) int64 {
	if v <= 0 || num <= 0 || den <= num {
		return v
	}
	// Dividing first, where v*num would overflow, loses precision only
	// for sizes no machine has.
	var s int64
	if v > (1<<62)/num {
		s = v / den * num
	} else {
		s = v * num / den
	}
	return max(s, 1)
}

// apply returns s with its memory limit scaled and its CPU limit capped.
func (l limitScale) apply(s runtime.Spec) runtime.Spec {
	if l.machine.cpuMilli > 0 && s.CPUMilli > l.machine.cpuMilli {
		s.CPUMilli = l.machine.cpuMilli
	}
	s.MemoryMiB = scale(s.MemoryMiB, l.machine.memoryMiB, l.fleet.memoryMiB)
	return s
}

// describe is the line up prints when it scales or caps the limits, ""
// when it does not.
func (l limitScale) describe() string {
	if !l.scales() {
		return ""
	}
	var what []string
	if l.machine.memoryMiB > 0 && l.fleet.memoryMiB > l.machine.memoryMiB {
		what = append(what, fmt.Sprintf("each container's memory limit is scaled by %s, so that all of them together fit in its memory",
			ratio(l.machine.memoryMiB, l.fleet.memoryMiB)))
	}
	if l.machine.cpuMilli > 0 && l.fleet.cpuMilli > l.machine.cpuMilli {
		what = append(what, fmt.Sprintf("a container's CPU limit is at most %s CPUs (busy CPUs are shared in proportion to the offerings)",
			milliCores(l.machine.cpuMilli)))
	}
	mem := "memory unknown"
	if l.machine.memoryMiB > 0 {
		mem = gib(l.machine.memoryMiB) + " GiB"
	}
	return fmt.Sprintf("limits: the simulated hosts promise %s CPUs and %s GiB together, this machine has %s CPUs and %s: %s (docs/RUNTIME.md)",
		milliCores(l.fleet.cpuMilli), gib(l.fleet.memoryMiB), milliCores(l.machine.cpuMilli), mem, strings.Join(what, "; "))
}

// milliCores formats milli-cores as cores ("2", "0.5").
func milliCores(m int64) string {
	return strconv.FormatFloat(float64(m)/1000, 'f', -1, 64)
}

// gib formats MiB as GiB with one decimal when it has one ("23.5", "10240").
func gib(mib int64) string {
	return strconv.FormatFloat(float64(mib*10/1024)/10, 'f', -1, 64)
}

// ratio formats the factor num/den as limitScale applies it: "1" when it
// does not scale, else "1/N" with N rounded to 3 significant digits at most.
func ratio(num, den int64) string {
	if num <= 0 || den <= num {
		return "1"
	}
	return "1/" + strconv.FormatFloat(float64(den)/float64(num), 'g', 3, 64)
}

// thisMachine returns this machine's CPUs and memory (agent.Machine);
// memory 0 where it cannot be read (not Linux), which scales no memory
// limit.
func thisMachine() resources {
	cpu, mem := agent.Machine()
	return resources{cpuMilli: cpu, memoryMiB: mem}
}

// containerRuntime is what up's containerd runtime offers the agent: the
// runtime and the optional parts the agent looks for.
type containerRuntime interface {
	agentcmd.Runtime
	runtime.UsageReader
	runtime.Addresser
	runtime.MetadataServer
	runtime.DNSServing
	// Exec and Dial serve sessions (exec, port forwards, ssh): the agent
	// finds them on the runtime it is given, this wrapper.
	runtime.Execer
	runtime.Dialer
	agent.NetworkSyncer
	files.InstanceRoots // instances cp
	// Pause and Resume keep an endpoint's warm pool frozen.
	runtime.Pauser
	runtime.ImageTimer
}

// scaledRuntime is a simulated host's containerd runtime that starts every
// workload with its limits scaled (limitScale).
type scaledRuntime struct {
	containerRuntime
	limits limitScale
}

// Kind is runtime.KindContainerd: the containerd runtime it scales.
func (s scaledRuntime) Kind() string { return runtime.KindContainerd }

// Start starts the workload of s with its CPU and memory limits scaled.
func (r scaledRuntime) Start(ctx context.Context, s runtime.Spec) error {
	return r.containerRuntime.Start(ctx, r.limits.apply(s))
}
