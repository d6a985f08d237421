package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/exporter"
	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agent/gpu/nvml"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agent/network"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
	"github.com/gpucloud/gpucloud/agentapi"
)

func newAgentCommand(stderr io.Writer) *cobra.Command {
	var (
		joinToken, joinTokenFile, credFile, driver, simHost, dir   string
		volumeDir, logLevel                                        string
		metricsListen, runtimeName, containerdSocket, defaultImage string
		mpsControl                                                 string
		manageMIG                                                  bool
		interval, metricsInterval                                  time.Duration
		netFlags                                                   instanceNetFlags
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the host agent: report GPUs, run assigned instances",
		Long: "Run the gpucloud agent on a GPU host. The first start joins the cloud with a\n" +
			"join token (created by an admin with `gpucloud hosts join-token`) and saves the\n" +
			"host's own credential; later starts use the credential. The join token carries\n" +
			"the fingerprint of the cloud's CA (TOKEN@sha256:...): the agent trusts the\n" +
			"server on first contact only if it presents that CA, and keeps the CA in its\n" +
			"data directory (0700) for later starts.\n\n" +
			"The agent reports the host's GPUs (NVML on real GPUs, or a simulated host from\n" +
			"a YAML file), heartbeats, applies MIG layouts (the sim driver always; NVML only\n" +
			"with --manage-mig), and runs each assigned instance's command with exactly its\n" +
			"GPUs visible, stopping it with SIGTERM, then SIGKILL after the grace period.\n\n" +
			"With --runtime containerd (run as root, with containerd and runc installed) each\n" +
			"instance runs in a container of its own: its own namespaces, a non-root user, its\n" +
			"CPU, memory and pids limits, only its volumes, and only its GPUs' device nodes\n" +
			"(docs/RUNTIME.md). The default process runtime isolates nothing: it is for a\n" +
			"single tenant.\n\n" +
			"With --metrics-listen it serves the GPUs' metrics for Prometheus on /metrics, under\n" +
			"the DCGM exporter's names and gpucloud_gpu_* names (docs/METRICS.md).",
		Example: "  gpucloud agent --server https://10.0.0.5:7878 --join-token-file /root/join-token --driver nvml\n" +
			"  GPUCLOUD_JOIN_TOKEN=$T gpucloud agent --server https://127.0.0.1:7878 --driver sim --sim-host h100.yaml\n" +
			"  gpucloud agent --server https://10.0.0.5:7878 --driver nvml --metrics-listen 0.0.0.0:9400\n" +
			"  gpucloud agent --server https://10.0.0.5:7878 --driver nvml --runtime containerd",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			server, _ := cmd.Flags().GetString("server")
			if server == "" {
				server = os.Getenv(EnvServer)
			}
			if server == "" {
				return usagef(cmd, "--server is required (or $%s)", EnvServer)
			}
			log, err := newLogger(stderr, logLevel)
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			if runtimeName != "process" && runtimeName != "containerd" {
				return usagef(cmd, "--runtime %q: want process or containerd", runtimeName)
			}
			var drv gpu.Driver
			var simDevices *sim.Host
			hostname, _ := os.Hostname()
			switch driver {
			case "sim":
				if simHost == "" {
					return usagef(cmd, "--driver sim needs --sim-host FILE")
				}
				h, err := sim.LoadFile(simHost)
				if err != nil {
					return err
				}
				drv, manageMIG, hostname, simDevices = h, true, h.ID(), h
			case "nvml":
				d, err := nvml.Open()
				if err != nil {
					return fmt.Errorf("open NVML: %w", err)
				}
				defer d.Close()
				drv = d
			default:
				return usagef(cmd, "--driver %q: want sim or nvml", driver)
			}
			// The credential, the CA and the workloads' state: the host's
			// root only (a directory made before keeps its mode otherwise).
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			if err := os.Chmod(dir, 0o700); err != nil {
				return err
			}
			if credFile == "" {
				credFile = filepath.Join(dir, "credential")
			}
			ctx, stop := signalContext()
			defer stop()
			jt, err := readJoinToken(joinToken, joinTokenFile, stderr)
			if err != nil {
				return err
			}
			hc, secret, err := agentClient(ctx, server, jt, dir)
			if err != nil {
				return err
			}
			cred, err := os.ReadFile(credFile)
			switch {
			case err == nil:
			case errors.Is(err, os.ErrNotExist):
				if secret == "" {
					return usagef(cmd, "no credential in %s: the first start needs a join token (--join-token-file FILE or $%s)", credFile, EnvJoinToken)
				}
				joined, err := agent.Join(ctx, agentapi.NewClient(server, "", hc), secret, drv)
				if err != nil {
					return fmt.Errorf("join %s: %w", server, err)
				}
				// The client certificate first: a kept credential implies it.
				if err := keepClientCert(dir, joined); err != nil {
					return err
				}
				cred = []byte(joined.Credential)
				if err := os.WriteFile(credFile, append(cred, '\n'), 0o600); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "joined %s as host %s\n", server, joined.HostID)
			default:
				return err
			}
			// The credential works only with the host's client certificate
			// (mutual TLS), at every start.
			if hc, err = agentCredClient(server, dir); err != nil {
				return err
			}
			netCfg, err := netFlags.config(server, log)
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			rt, err := newAgentRuntime(ctx, runtimeName, containerdSocket, defaultImage, mpsControl, dir, simDevices, netCfg)
			if err != nil {
				return err
			}
			if runtimeName == "process" {
				fmt.Fprintln(stderr, "warning: the process runtime does not isolate workloads from each other or from the agent: use --runtime containerd on a shared host")
			}
			md := metadata.New()
			defer md.Close()
			a := agent.New(agentapi.NewClient(server, strings.TrimSpace(string(cred)), hc), agent.Config{
				Driver: drv, Runtime: rt, Metadata: md, DataDir: dir, VolumeDir: volumeDir, Interval: interval, ManageMIG: manageMIG, Log: log,
				MetricsInterval: metricsInterval,
			})
			if metricsListen != "" {
				c := exporter.New(exporter.Config{Driver: drv, Hostname: hostname, Assignments: a.Assignments, Workloads: rt, Log: log})
				ms, err := exporter.Listen(metricsListen, exporter.Handler(c, log))
				if err != nil {
					return fmt.Errorf("--metrics-listen: %w", err)
				}
				go func() {
					if err := ms.Serve(ctx); err != nil {
						log.Error("agent: metrics server stopped", "err", err)
					}
				}()
				fmt.Fprintf(cmd.OutOrStdout(), "GPU metrics on http://%s/metrics\n", ms.Addr())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "agent running against %s (data in %s); Ctrl-C stops it and its workloads\n", server, dir)
			err = a.Run(ctx)
			shut, cancel := contextWithTimeout(10 * time.Second)
			defer cancel()
			rt.StopAll(shut)
			if errors.Is(err, ctx.Err()) {
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&joinToken, "join-token", "", "join token for the first start (visible in ps: prefer --join-token-file or $"+EnvJoinToken+")")
	f.StringVar(&joinTokenFile, "join-token-file", "", "file holding the join token for the first start")
	f.StringVar(&credFile, "credential-file", "", "where the host credential is kept (default DATA-DIR/credential)")
	f.StringVar(&driver, "driver", "nvml", "GPU driver: nvml (real GPUs) or sim (a simulated host)")
	f.StringVar(&simHost, "sim-host", "", "YAML description of the simulated host (--driver sim)")
	f.StringVar(&dir, "data-dir", filepath.Join(dataDir(), "agent"), "volumes, work directories and workload logs")
	f.StringVar(&volumeDir, "volume-dir", "", "keep volumes here (VOLUME-DIR/<id>) rather than in the data directory: a filesystem every host mounts lets volumes follow instances across hosts (spot relaunches find their checkpoints)")
	f.BoolVar(&manageMIG, "manage-mig", false, "let the agent change MIG modes and instances on real GPUs")
	f.DurationVar(&interval, "interval", agent.DefaultInterval, "poll and heartbeat period")
	f.DurationVar(&metricsInterval, "metrics-interval", agent.DefaultMetricsInterval, "how often instances' GPU and CPU utilization is sampled and reported (negative: never)")
	f.StringVar(&metricsListen, "metrics-listen", "", `serve GPU metrics for Prometheus on http://ADDR/metrics, e.g. "127.0.0.1:9400" (default off)`)
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&runtimeName, "runtime", "process", "workload runtime: containerd (a container per instance; needs root, containerd and runc) or process (no isolation, single tenant)")
	f.StringVar(&containerdSocket, "containerd-socket", containerd.DefaultSocket, "containerd's socket (--runtime containerd)")
	netFlags.register(cmd)
	f.StringVar(&defaultImage, "default-image", containerd.BaseImage, "image of instances that name none (--runtime containerd); the built-in "+containerd.BaseImage+" is made from the host's busybox-static when missing")
	f.StringVar(&mpsControl, "mps-control", "", "CUDA MPS control program run per shared GPU (--runtime containerd on real GPUs; "+containerd.DefaultMPSControl+" in PATH when empty)")
	return cmd
}

// agentRuntime is what the agent command needs of a workload runtime.
type agentRuntime interface {
	runtime.Runtime
	runtime.ResourceReader
	StopAll(ctx context.Context) error
}

// newAgentRuntime opens the workload runtime the flags name. For the
// containerd runtime on a simulated host, the sim driver's fake device
// nodes (DATA-DIR/dev) stand in for the NVIDIA driver's.
func newAgentRuntime(ctx context.Context, name, socket, image, mpsControl, dir string, simHost *sim.Host, netCfg network.Config) (agentRuntime, error) {
	if name == "process" {
		return process.New(filepath.Join(dir, "runtime")), nil
	}
	// Each container's own network (a per-tenant bridge, NAT, nftables
	// isolation from other tenants and the host: docs/RUNTIME.md).
	net, err := network.New(ctx, netCfg)
	if err != nil {
		return nil, fmt.Errorf("--runtime containerd: the instance network: %w", err)
	}
	cfg := containerd.Config{Socket: socket, BaseDir: filepath.Join(dir, "runtime"), DefaultImage: image, Network: net, MPSControl: mpsControl}
	if simHost != nil {
		cfg.DevDir = filepath.Join(dir, "dev")
		cfg.MIGMinors = filepath.Join(cfg.DevDir, sim.MIGMinorsFile)
		if err := simHost.MakeDeviceNodes(cfg.DevDir); err != nil {
			return nil, fmt.Errorf("--runtime containerd: the simulated host's device nodes: %w", err)
		}
	}
	rt, err := containerd.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--runtime containerd: %w", err)
	}
	if image == containerd.BaseImage {
		if err := rt.EnsureBaseImage(ctx, ""); err != nil {
			rt.Close()
			return nil, fmt.Errorf("--runtime containerd: the default image: %w", err)
		}
	}
	return rt, nil
}

// instanceNetFlags configure the containers' instance network.
type instanceNetFlags struct {
	subnet         string
	forward        bool
	blocked, allow []string
}

func (n *instanceNetFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&n.subnet, "instance-subnet", network.DefaultSubnet.String(), "the host's instance subnet, one /24 per tenant (--runtime containerd); must not overlap the host's networks")
	f.BoolVar(&n.forward, "ip-forward", false, "turn on the host's IPv4 forwarding, which instances need to reach the outside through NAT (--runtime containerd)")
	f.StringSliceVar(&n.blocked, "block-cidr", nil, "more destinations instances may not reach (the server's own addresses are always blocked); repeatable")
	f.StringSliceVar(&n.allow, "allow-cidr", nil, "exceptions to the blocked private ranges (a dataset server on the host's network); never another tenant or the host; repeatable")
}

// config is the network configuration, with the server's addresses
// blocked: a workload has no business with the control plane's API.
func (n *instanceNetFlags) config(server string, log *slog.Logger) (network.Config, error) {
	cfg := network.Config{Forwarding: n.forward, Log: log}
	p, err := netip.ParsePrefix(n.subnet)
	if err != nil {
		return cfg, fmt.Errorf("--instance-subnet: %v", err)
	}
	cfg.Subnet = p
	for _, list := range []struct {
		flag string
		in   []string
		out  *[]netip.Prefix
	}{{"--block-cidr", n.blocked, &cfg.Blocked}, {"--allow-cidr", n.allow, &cfg.Allowed}} {
		for _, s := range list.in {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return cfg, fmt.Errorf("%s %q: %v", list.flag, s, err)
			}
			*list.out = append(*list.out, p)
		}
	}
	if u, err := url.Parse(server); err == nil && u.Hostname() != "" {
		if addrs, err := net.LookupHost(u.Hostname()); err == nil {
			for _, a := range addrs {
				if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
					cfg.Blocked = append(cfg.Blocked, netip.PrefixFrom(ip, 32))
				}
			}
		}
	}
	return cfg, nil
}
