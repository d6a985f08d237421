// Package agentcmd is the `gpucloud agent` command: the host agent's
// launcher (its flags, the join and the credential it keeps, the GPU driver
// and the workload runtime it opens). It links the agent's packages and
// agentapi, and no package of the control plane
// (TestAgentDependencies in agent/deps_test.go).
package agentcmd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/exporter"
	"github.com/gpucloud/gpucloud/agent/files"
	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agent/gpu/amdsmi"
	"github.com/gpucloud/gpucloud/agent/gpu/nvml"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agent/network"
	"github.com/gpucloud/gpucloud/agent/rdma"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
	"github.com/gpucloud/gpucloud/agent/sshd"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// New returns the agent command. stderr takes the log and warnings.
func New(stderr io.Writer) *cobra.Command {
	var fl flags
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
			"a YAML file) and RDMA adapters (/sys/class/infiniband, or the simulated host's\n" +
			"fake ones), heartbeats, applies MIG layouts (the sim driver always; NVML only\n" +
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
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd, &fl, stderr)
		},
	}
	fl.register(cmd)
	return cmd
}

// flags are the agent command's flags.
type flags struct {
	joinToken, joinTokenFile, credFile, driver, simHost, dir   string
	catalog                                                    string
	volumeDir, sharedVolumeDir, logLevel                       string
	metricsListen, runtimeName, containerdSocket, defaultImage string
	metricsTokenFile                                           string
	directListen, directAdvertise                              string
	mpsControl                                                 string
	manageMIG                                                  bool
	interval, metricsInterval                                  time.Duration
	net                                                        instanceNetFlags
	pull                                                       pullFlags
	storage                                                    storageFlags
}

func (fl *flags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	// --join-token is refused (joinTokenFlagRefused), kept only to say so.
	f.StringVar(&fl.joinToken, "join-token", "", "refused: a join token on the command line is visible in ps; use --join-token-file or $"+EnvJoinToken)
	_ = f.MarkHidden("join-token")
	f.StringVar(&fl.joinTokenFile, "join-token-file", "", "file holding the join token for the first start")
	f.StringVar(&fl.credFile, "credential-file", "", "where the host credential is kept (default DATA-DIR/credential)")
	f.StringVar(&fl.driver, "driver", "nvml", "GPU driver: nvml (real NVIDIA GPUs), amdsmi (real AMD GPUs, read with amd-smi) or sim (a simulated host)")
	f.StringVar(&fl.simHost, "sim-host", "", "YAML description of the simulated host (--driver sim)")
	f.StringVar(&fl.catalog, "catalog", "", "the operator catalog file the server was given (--driver nvml), so that GPU models it adds are recognized")
	f.StringVar(&fl.dir, "data-dir", filepath.Join(cmdutil.DataDir(), "agent"), "volumes, work directories and workload logs")
	f.StringVar(&fl.sharedVolumeDir, "shared-volume-dir", "", "keep shared volumes here (DIR/<id>): a filesystem the operator mounts at this same path on every host (NFS, CephFS, Lustre); on XFS mounted with prjquota each volume's size is enforced with a project quota, elsewhere by the filer's own quotas only")
	f.StringVar(&fl.volumeDir, "volume-dir", "", "keep volumes here (VOLUME-DIR/<id>) rather than in the data directory: a filesystem every host mounts lets volumes follow instances across hosts (spot relaunches find their checkpoints)")
	f.BoolVar(&fl.manageMIG, "manage-mig", false, "let the agent change MIG modes and instances on real GPUs")
	f.DurationVar(&fl.interval, "interval", agent.DefaultInterval, "poll and heartbeat period")
	f.DurationVar(&fl.metricsInterval, "metrics-interval", agent.DefaultMetricsInterval, "how often instances' GPU and CPU utilization is sampled and reported (negative: never)")
	f.StringVar(&fl.metricsListen, "metrics-listen", "", `serve GPU metrics for Prometheus on http://ADDR/metrics, e.g. "127.0.0.1:9400" (default off)`)
	f.StringVar(&fl.metricsTokenFile, "metrics-token-file", "", "with --metrics-listen, serve the metrics (which name the host's tenants and instances) only to requests "+
		"with this file's token as a bearer token (Prometheus: authorization.credentials_file)")
	f.StringVar(&fl.directListen, "direct-listen", "", `take direct sessions (cp --direct, port-forward --direct) on ADDR, e.g. "0.0.0.0:7443": TLS 1.3, with grants the server signs; the server must run with --direct-access, and tenants must reach ADDR (default off: they go through the server)`)
	f.StringVar(&fl.directAdvertise, "direct-advertise", "", "with --direct-listen, the HOST:PORT clients dial (default: the listen address, which must then name a host)")
	f.StringVar(&fl.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&fl.runtimeName, "runtime", "process", "workload runtime: containerd (a container per instance; needs root, containerd and runc) or process (no isolation, single tenant)")
	f.StringVar(&fl.containerdSocket, "containerd-socket", containerd.DefaultSocket, "containerd's socket (--runtime containerd)")
	fl.net.register(cmd)
	fl.pull.register(cmd)
	fl.storage.register(cmd)
	f.StringVar(&fl.defaultImage, "default-image", containerd.BaseImage, "image of instances that name none (--runtime containerd); the built-in "+containerd.BaseImage+" is made from the host's busybox-static when missing")
	f.StringVar(&fl.mpsControl, "mps-control", "", "CUDA MPS control program run per shared GPU (--runtime containerd on real GPUs; "+containerd.DefaultMPSControl+" in PATH when empty)")
}

// run is the agent command: it checks the flags, opens the GPU driver,
// joins the cloud on the first start (or reads the kept credential), opens
// the workload runtime and runs the agent until a signal stops it.
func run(cmd *cobra.Command, fl *flags, stderr io.Writer) error {
	if cmd.Flags().Changed("join-token") {
		return cmdutil.Usagef(cmd, "%s", joinTokenFlagRefused)
	}
	server, _ := cmd.Flags().GetString("server")
	if server == "" {
		server = os.Getenv(cliconfig.EnvServer)
	}
	if server == "" {
		return cmdutil.Usagef(cmd, "--server is required (or $%s)", cliconfig.EnvServer)
	}
	log, err := cmdutil.NewLogger(stderr, fl.logLevel)
	if err != nil {
		return cmdutil.Usagef(cmd, "%v", err)
	}
	if fl.runtimeName != "process" && fl.runtimeName != "containerd" {
		return cmdutil.Usagef(cmd, "--runtime %q: want process or containerd", fl.runtimeName)
	}
	if err := fl.pull.apply(&containerd.Config{}); err != nil {
		return cmdutil.Usagef(cmd, "%v", err)
	}
	if err := fl.storage.containerd(&containerd.Config{}); err != nil {
		return cmdutil.Usagef(cmd, "%v", err)
	}
	metricsToken, err := readMetricsToken(fl)
	if err != nil {
		return cmdutil.Usagef(cmd, "%v", err)
	}
	h, err := openDriver(cmd, fl)
	if err != nil {
		return err
	}
	defer h.close()
	if err := agent.MakeDataDir(fl.dir); err != nil {
		return err
	}
	if fl.credFile == "" {
		fl.credFile = filepath.Join(fl.dir, "credential")
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	cred, hc, err := credential(ctx, cmd, fl, server, h.drv)
	if err != nil {
		return err
	}
	netCfg, err := fl.net.config(server, log)
	if err != nil {
		return cmdutil.Usagef(cmd, "%v", err)
	}
	ovCfg, err := fl.net.overlay(netCfg, server, fl.dir)
	if err != nil {
		return cmdutil.Usagef(cmd, "%v", err)
	}
	rt, err := newAgentRuntime(ctx, fl.runtimeName, fl.containerdSocket, fl.defaultImage, fl.mpsControl, fl.dir, h.sim, netCfg, ovCfg, &fl.pull, &fl.storage)
	if err != nil {
		return err
	}
	if fl.runtimeName == "process" {
		fmt.Fprintln(stderr, "warning: the process runtime does not isolate workloads from each other or from the agent: use --runtime containerd on a shared host")
	}
	md := metadata.New()
	defer md.Close()
	agentCfg := agent.Config{
		Driver: h.drv, Runtime: rt, Metadata: md, DataDir: fl.dir, VolumeDir: fl.volumeDir, SharedVolumeDir: fl.sharedVolumeDir, Interval: fl.interval, ManageMIG: h.manageMIG, Log: log,
		MetricsInterval: fl.metricsInterval, Underlay: ovCfg.Underlay, UnderlayMTU: ovCfg.UnderlayMTU, HCAs: h.hcas,
		Sessions: SessionHandlers(fl.dir, rt, log),
	}
	if err := fl.storage.apply(&agentCfg, fl.runtimeName, stderr); err != nil {
		return cmdutil.Usagef(cmd, "%v", err)
	}
	// The files handler reads the storage settings (VolumeImages).
	agentCfg.Sessions = files.Sessions(agentCfg)
	client := agentapi.NewClient(server, cred, hc)
	if fl.directListen == "" && fl.directAdvertise != "" {
		return cmdutil.Usagef(cmd, "--direct-advertise goes with --direct-listen")
	}
	var (
		direct   *files.Direct
		directLn net.Listener
	)
	if fl.directListen != "" {
		if direct, directLn, err = listenDirect(fl, &agentCfg, log); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "taking direct sessions at %s (certificate %s)\n", agentCfg.DirectAddr, agentCfg.DirectFingerprint)
	} else if direct, err = tunnelDirect(fl, &agentCfg, log); err != nil {
		return err
	}
	if direct != nil {
		// Tunnelled sessions (docs/ACCESS.md, "Tunnels") come through
		// the server whether or not the agent listens.
		agentCfg.Tunnels = direct
		direct.Reports = files.NewReporter(client.ReportDirect, fl.dir, log)
		go func() {
			if err := direct.Serve(ctx, directLn); err != nil {
				log.Error("agent: the direct files listener stopped", "err", err)
			}
		}()
	}
	a := agent.New(client, agentCfg)
	if fl.metricsListen != "" {
		if err := serveMetrics(ctx, cmd.OutOrStdout(), fl.metricsListen, metricsToken, exporter.Config{Driver: h.drv, Hostname: h.hostname, Assignments: a.Assignments, Workloads: rt, Log: log}); err != nil {
			return err
		}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "agent running against %s (data in %s); Ctrl-C stops it and its workloads\n", server, fl.dir)
	return runUntilStopped(ctx, a, rt)
}

// hostDriver is the GPU driver the flags name, with what goes with it.
type hostDriver struct {
	drv       gpu.Driver
	sim       *sim.Host // the simulated host, for --driver sim
	hostname  string    // the host's name in its metrics
	manageMIG bool      // always for a simulated host; --manage-mig on real GPUs
	// hcas finds the RDMA adapters of a real host (rdma.Discover); nil
	// for a simulated host, whose driver reports its fake ones.
	hcas  func() ([]fleet.HCA, error)
	close func()
}

// openDriver opens the driver of --driver: NVML, or the simulated host of
// --sim-host.
func openDriver(cmd *cobra.Command, fl *flags) (*hostDriver, error) {
	hostname, _ := os.Hostname()
	switch fl.driver {
	case "sim":
		if fl.simHost == "" {
			return nil, cmdutil.Usagef(cmd, "--driver sim needs --sim-host FILE")
		}
		h, err := sim.LoadFile(fl.simHost)
		if err != nil {
			return nil, err
		}
		return &hostDriver{drv: h, sim: h, hostname: h.ID(), manageMIG: true, close: func() {}}, nil
	case "amdsmi":
		cat := catalog.Default()
		if fl.catalog != "" {
			c, err := catalog.LoadFile(fl.catalog)
			if err != nil {
				return nil, cmdutil.Usagef(cmd, "--catalog %s: %v", fl.catalog, err)
			}
			cat = c
		}
		d := amdsmi.New(amdsmi.Command, cat, "/sys")
		hcas := func() ([]fleet.HCA, error) { return rdma.Discover("/sys", "/dev") }
		// AMD GPUs have no MIG; their partition modes are the operator's.
		return &hostDriver{drv: d, hostname: hostname, manageMIG: false, hcas: hcas, close: func() {}}, nil
	case "nvml":
		cat := catalog.Default()
		if fl.catalog != "" {
			c, err := catalog.LoadFile(fl.catalog)
			if err != nil {
				return nil, cmdutil.Usagef(cmd, "--catalog %s: %v", fl.catalog, err)
			}
			cat = c
		}
		d, err := nvml.OpenCatalog(cat)
		if err != nil {
			return nil, fmt.Errorf("open NVML: %w", err)
		}
		hcas := func() ([]fleet.HCA, error) { return rdma.Discover("/sys", "/dev") }
		return &hostDriver{drv: d, hostname: hostname, manageMIG: fl.manageMIG, hcas: hcas, close: func() { d.Close() }}, nil
	}
	return nil, cmdutil.Usagef(cmd, "--driver %q: want sim, nvml or amdsmi", fl.driver)
}

// credential returns the host's credential and the HTTP client that goes
// with it: the kept one, or on the first start the one a join with the
// join token issues (kept then, with its client certificate).
func credential(ctx context.Context, cmd *cobra.Command, fl *flags, server string, drv gpu.Driver) (string, *http.Client, error) {
	jt, err := readJoinToken(fl.joinTokenFile)
	if err != nil {
		return "", nil, err
	}
	hc, secret, err := JoinClient(ctx, server, jt, fl.dir)
	if err != nil {
		return "", nil, err
	}
	cred, err := os.ReadFile(fl.credFile)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrNotExist):
		if secret == "" {
			return "", nil, cmdutil.Usagef(cmd, "no credential in %s: the first start needs a join token (--join-token-file FILE or $%s)", fl.credFile, EnvJoinToken)
		}
		if cred, err = join(ctx, cmd.OutOrStdout(), server, hc, secret, drv, fl); err != nil {
			return "", nil, err
		}
	default:
		return "", nil, err
	}
	// The credential works only with the host's client certificate
	// (mutual TLS), at every start.
	if hc, err = agentCredClient(server, fl.dir); err != nil {
		return "", nil, err
	}
	return strings.TrimSpace(string(cred)), hc, nil
}

// join joins the cloud with the join token's secret, keeps the client
// certificate and the credential it issues, and returns the credential.
func join(ctx context.Context, out io.Writer, server string, hc *http.Client, secret string, drv gpu.Driver, fl *flags) ([]byte, error) {
	joined, err := agent.Join(ctx, agentapi.NewClient(server, "", hc), secret, drv)
	if err != nil {
		return nil, fmt.Errorf("join %s: %w", server, err)
	}
	// The client certificate first: a kept credential implies it.
	if err := keepClientCert(fl.dir, joined); err != nil {
		return nil, err
	}
	cred := []byte(joined.Credential)
	if err := os.WriteFile(fl.credFile, append(cred, '\n'), 0o600); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "joined %s as host %s\n", server, joined.HostID)
	return cred, nil
}

// serveMetrics serves the GPUs' metrics for Prometheus on addr until ctx
// ends, only to requests with token when it is not empty, and says where
// on out.
func serveMetrics(ctx context.Context, out io.Writer, addr, token string, cfg exporter.Config) error {
	h := exporter.Handler(exporter.New(cfg), cfg.Log)
	if token != "" {
		h = exporter.RequireToken(h, token)
	}
	ms, err := exporter.Listen(addr, h)
	if err != nil {
		return fmt.Errorf("--metrics-listen: %w", err)
	}
	go func() {
		if err := ms.Serve(ctx); err != nil {
			cfg.Log.Error("agent: metrics server stopped", "err", err)
		}
	}()
	fmt.Fprintf(out, "GPU metrics on http://%s/metrics\n", ms.Addr())
	return nil
}

// readMetricsToken reads the metrics token of --metrics-token-file ("" when
// none): the file's content without surrounding white space, one token of
// at least 16 characters.
func readMetricsToken(fl *flags) (string, error) {
	file := fl.metricsTokenFile
	if file == "" {
		return "", nil
	}
	if fl.metricsListen == "" {
		return "", errors.New("--metrics-token-file needs --metrics-listen")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--metrics-token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 16 || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("--metrics-token-file %s: want one token of at least 16 characters (openssl rand -hex 32)", file)
	}
	return token, nil
}

// runUntilStopped runs the agent until ctx ends (a signal: not an error),
// then stops its workloads.
func runUntilStopped(ctx context.Context, a *agent.Agent, rt Runtime) error {
	err := a.Run(ctx)
	shut, cancel := cmdutil.ShutdownContext(10 * time.Second)
	defer cancel()
	rt.StopAll(shut)
	// The stopped workloads' volumes go back into their images.
	if verr := a.ReleaseVolumes(); verr != nil {
		slog.Warn("agent: unmount volumes", "err", verr)
	}
	if errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// Runtime is what the agent command needs of a workload runtime.
type Runtime interface {
	runtime.Runtime
	runtime.ResourceReader
	StopAll(ctx context.Context) error
}

// newAgentRuntime opens the workload runtime the flags name. For the
// containerd runtime on a simulated host, the sim driver's fake device
// nodes (DATA-DIR/dev) stand in for the NVIDIA driver's.
func newAgentRuntime(ctx context.Context, name, socket, image, mpsControl, dir string, simHost *sim.Host, netCfg network.Config, ovCfg network.OverlayConfig, pull *pullFlags, st *storageFlags) (Runtime, error) {
	if name == "process" {
		return process.New(filepath.Join(dir, "runtime")), nil
	}
	// Each container's own network: its private network on the overlay
	// (with --underlay), else a per-tenant bridge, NAT, nftables isolation
	// from other tenants and the host (docs/RUNTIME.md, docs/NETWORK.md).
	net, err := network.New(ctx, netCfg)
	if err != nil {
		return nil, fmt.Errorf("--runtime containerd: the instance network: %w", err)
	}
	hook := &network.Hook{Legacy: net}
	if ovCfg.Underlay.IsValid() {
		ov, err := network.NewOverlay(ctx, ovCfg)
		if err != nil {
			return nil, fmt.Errorf("--runtime containerd: the private networks' overlay: %w", err)
		}
		hook.Driver = ov
	}
	cfg := containerd.Config{Socket: socket, BaseDir: filepath.Join(dir, "runtime"), DefaultImage: image, Network: hook, MPSControl: mpsControl}
	if err := pull.apply(&cfg); err != nil {
		return nil, err
	}
	if err := st.containerd(&cfg); err != nil {
		return nil, err
	}
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
	// The private networks' overlay.
	networkID, underlay, hostNetns string
	underlayMTU                    int
	steerReceive                   bool
}

func (n *instanceNetFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&n.subnet, "instance-subnet", network.DefaultSubnet.String(), "the host's instance subnet, one /24 per tenant (--runtime containerd); must not overlap the host's networks")
	f.BoolVar(&n.forward, "ip-forward", false, "turn on the host's IPv4 forwarding, which instances need to reach the outside through NAT (--runtime containerd)")
	f.StringSliceVar(&n.blocked, "block-cidr", nil, "more destinations instances may not reach (the server's own addresses are always blocked); repeatable")
	f.StringSliceVar(&n.allow, "allow-cidr", nil, "exceptions to the blocked private ranges (a dataset server on the host's network); never another tenant or the host; repeatable")
	f.StringVar(&n.underlay, "underlay", "", "the host's IPv4 address on the network between hosts, which carries the private networks' overlay (VXLAN, UDP 4789) (--runtime containerd; empty: no private networks on this host)")
	f.IntVar(&n.underlayMTU, "underlay-mtu", 0, "the MTU of the network between hosts (default: its interface's); instances get 50 less")
	f.StringVar(&n.networkID, "network-id", "", "the cloud's short identity in the names of the overlay's namespaces, interfaces and nftables tables: 1 to 6 of a-z, 0-9 (default: the first 6 hex digits of the cloud's CA fingerprint)")
	f.StringVar(&n.hostNetns, "host-netns", "", "the network namespace (ip netns) the overlay treats as the host's (default: the agent's own)")
	f.BoolVar(&n.steerReceive, "overlay-steer-receive", false, "spread what the instances' veths receive over every CPU the agent may use (receive packet steering); off by default: it costs a stream 10-20% in a small VM, and may pay on hosts with many cores and cheap interrupts between them")
}

// overlay is the overlay's configuration: none (no Underlay) without
// --underlay. Its identity is --network-id, else the first 6 hex digits of
// the fingerprint of the cloud's CA (kept in the data directory by the
// join), else of the SHA-256 of the server's URL (a plain http:// cloud).
func (n *instanceNetFlags) overlay(legacy network.Config, server, dataDir string) (network.OverlayConfig, error) {
	cfg := network.OverlayConfig{HostNetns: n.hostNetns, UnderlayMTU: n.underlayMTU, Blocked: legacy.Blocked, Allowed: legacy.Allowed, Log: legacy.Log,
		SteerReceive: n.steerReceive}
	if n.underlay == "" {
		return cfg, nil
	}
	a, err := netip.ParseAddr(n.underlay)
	if err != nil || !a.Is4() {
		return cfg, fmt.Errorf("--underlay %q: want an IPv4 address of the host", n.underlay)
	}
	cfg.Underlay = a
	cfg.Cloud = n.networkID
	if cfg.Cloud == "" {
		cfg.Cloud, err = NetworkID(server, dataDir)
		if err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// NetworkID is a cloud's short identity for the names its network makes
// on a host: the first 6 hex digits of its CA's fingerprint (the CA an
// agent keeps in its data directory), or of the SHA-256 of the server's
// URL when there is no CA (a plain http:// server).
func NetworkID(server, dataDir string) (string, error) {
	if b, err := os.ReadFile(filepath.Join(dataDir, caFileName)); err == nil {
		c, err := pki.ParseCert(b)
		if err != nil {
			return "", fmt.Errorf("%s: %w", filepath.Join(dataDir, caFileName), err)
		}
		return network.CloudID(pki.Fingerprint(c))
	}
	sum := sha256.Sum256([]byte(server))
	return network.CloudID(hex.EncodeToString(sum[:]))
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

// SessionHandlers are the session kinds an agent serves beside exec and
// forward: ssh (agent/sshd), with the instances' host keys under dir/ssh,
// where rt can exec.
func SessionHandlers(dir string, rt any, log *slog.Logger) map[string]agent.SessionHandler {
	out := map[string]agent.SessionHandler{}
	if h := sshd.ForRuntime(filepath.Join(dir, "ssh"), rt, log); h != nil {
		out[agentapi.SessionSSH] = h
	}
	return out
}
