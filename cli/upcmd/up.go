// Package upcmd is `gpucloud up`: a complete local cloud in one process,
// a server (through serve, with servercmd's flags) and an agent for every
// simulated host (through agentcmd's join and runtimes).
package upcmd

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/exporter"
	"github.com/gpucloud/gpucloud/agent/files"
	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agent/gpu/nvml"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/agentcmd"
	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cli/servercmd"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// hostAgent is one agent `up` runs, with what it must stop on exit.
type hostAgent struct {
	id  string
	ag  *agent.Agent
	rt  agentcmd.Runtime
	md  *metadata.Endpoints
	drv gpu.Driver
	gpu int
	// direct and directLn take direct sessions (up --direct-access), on
	// loopback; nil without.
	direct   *files.Direct
	directLn net.Listener
}

// startAgent joins a host to the server and returns its running agent,
// which runs workloads with rt. A host that joined before (a restart of
// up) re-joins with the credential it kept in dir, as the server joins a
// host that has joined only with its current credential. Every agent of a local cloud keeps volumes
// under volumeDir, so that a volume follows its instance from host to host
// as on a cloud's network storage.
func startAgent(ctx context.Context, url, joinToken string, admin *client.Client, drv gpu.Driver, dir, volumeDir string, manageMIG bool, interval time.Duration, log *slog.Logger, rt agentcmd.Runtime, ul hostUnderlay, direct bool) (*hostAgent, error) {
	// The agent never makes its shared volume directory (a missing one is
	// an operator's filesystem not mounted: writing to the local disk
	// instead would share nothing); up makes its own.
	if err := os.MkdirAll(sharedVolumeDir(volumeDir), 0o755); err != nil {
		return nil, err
	}
	hc, secret, err := agentcmd.JoinClient(ctx, url, joinToken, dir)
	if err != nil {
		return nil, err
	}
	cred, credClient, err := agentcmd.KeptCredential(url, dir)
	if err != nil {
		return nil, err
	}
	if credClient != nil {
		hc = credClient // the re-join presents the host's client certificate
	}
	joined, err := agent.Rejoin(ctx, agentapi.NewClient(url, "", hc), secret, cred, drv)
	if host, ok := agentapi.HostExists(err); ok && cred == "" {
		// A data directory from before up kept its hosts' credentials:
		// up, the cloud's admin, removes the host's old agent (revokes
		// its credentials) and joins it again.
		if err := revokeHostCredentials(ctx, admin, host); err != nil {
			return nil, err
		}
		joined, err = agent.Rejoin(ctx, agentapi.NewClient(url, "", hc), secret, "", drv)
	}
	if err != nil {
		return nil, err
	}
	if hc, err = agentcmd.JoinedClient(url, dir, joined); err != nil { // mutual TLS from now on
		return nil, err
	}
	if err := agentcmd.KeepCredential(dir, joined.Credential); err != nil {
		return nil, err
	}
	inv, err := drv.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	h := &hostAgent{id: joined.HostID, rt: rt, md: metadata.New(), drv: drv, gpu: len(inv.Host.GPUs)}
	acfg := agent.Config{
		Driver: drv, Runtime: h.rt, Metadata: h.md, DataDir: dir, VolumeDir: volumeDir, VolumeImages: isContainers(rt),
		// The simulated hosts share this machine's disk, which is a
		// shared filesystem to them: shared volumes work on every one.
		SharedVolumeDir: sharedVolumeDir(volumeDir),
		Interval:        interval, ManageMIG: manageMIG, Log: log.With("host", joined.HostID),
		Underlay: ul.addr, UnderlayMTU: ul.mtu, Sessions: agentcmd.SessionHandlers(dir, h.rt, log.With("host", joined.HostID)),
	}
	acfg.Sessions = files.Sessions(acfg)
	// Every agent takes tunnelled sessions (docs/ACCESS.md, "Tunnels")
	// where it keeps the cloud's CA; with --direct-access it listens too.
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	switch {
	case err == nil && direct:
		// The simulated hosts' agents run in this process, on this
		// machine: loopback is where clients reach them.
		d, ln, addr, fp, err := files.ListenDirect("127.0.0.1:0", "", joined.HostID, caPEM, dir, files.ForAgent(acfg), acfg.Log)
		if err != nil {
			return nil, err
		}
		h.direct, h.directLn, acfg.DirectAddr, acfg.DirectFingerprint = d, ln, addr, fp
	case err == nil:
		d, fp, err := files.NewDirect(joined.HostID, caPEM, dir, files.ForAgent(acfg), acfg.Log)
		if err != nil {
			return nil, err
		}
		h.direct, acfg.DirectFingerprint = d, fp
	case direct || !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("direct sessions: the cloud's CA: %w", err)
	}
	if h.direct != nil {
		acfg.Tunnels = h.direct
	}
	client := agentapi.NewClient(url, joined.Credential, hc)
	if h.direct != nil {
		h.direct.Reports = files.NewReporter(client.ReportDirect, dir, acfg.Log)
	}
	h.ag = agent.New(client, acfg)
	return h, nil
}

// loadFleet reads a list of simulated hosts (sim.Spec) from YAML.
func loadFleet(path string) ([]sim.Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var specs []sim.Spec
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&specs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("%s: no hosts", path)
	}
	return specs, nil
}

// New returns the up command. stderr takes the log.
func New(stderr io.Writer) *cobra.Command {
	var fl flags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a complete local cloud: server, embedded SQLite and a simulated fleet",
		Long: "Start, in one process, a gpucloud server with embedded SQLite in a data directory,\n" +
			"a simulated fleet (2 hosts of 8x H100-80GB-SXM and 2 of 8x A100-80GB-SXM on NVLink,\n" +
			"4 of 2x L40S; or --fleet FILE) and an agent for every host. If this machine has\n" +
			"NVIDIA GPUs and NVML works, they join as a real host too (MIG layouts untouched).\n\n" +
			"Run as root with containerd, runc, tini, busybox-static, iproute2 and nftables\n" +
			"installed (Debian's packages), it runs every instance in a container of its own, on a private\n" +
			"containerd under DATA-DIR/ctr, in the busybox base image unless the instance\n" +
			"names one (docs/RUNTIME.md), and gives each host a network namespace of its own\n" +
			"on a bridge, the hosts' fabric (--fabric-prefix), named from the cloud's identity.\n" +
			"Otherwise workloads run as plain processes and up says why in one line: they are\n" +
			"then not isolated from each other (--runtime).\n\n" +
			"It prints the API URL and the admin token, writes the CLI configuration so that\n" +
			"the other commands work right away, and shuts down cleanly on Ctrl-C (or\n" +
			"SIGTERM), exiting 0. To run a second cloud beside it, give it another --listen\n" +
			"port and --data-dir. --spot-notice shortens the two-minute notice a reclaimed\n" +
			"spot instance gets, to watch reclaims without waiting.",
		Example: "  gpucloud up\n" +
			"  gpucloud instances create --offering h100.mig.3g.40gb --wait -- sh -c 'echo $CUDA_VISIBLE_DEVICES; sleep 3600'",
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd, &fl, stderr)
		},
	}
	fl.register(cmd)
	return cmd
}

// flags are the up command's flags.
type flags struct {
	spot                             servercmd.SpotFlags
	tls                              servercmd.TLSFlags
	limits                           servercmd.LimitFlags
	registries                       servercmd.RegistryFlags
	catalog                          servercmd.CatalogFlag
	caKey                            servercmd.CAKeyFlags
	dir, listen, fleetFile, logLevel string
	runtimeMode, db                  string
	fabricPrefix                     string
	noNVML                           bool
	interval                         time.Duration
	metricsListen                    string
}

func (fl *flags) register(cmd *cobra.Command) {
	fl.tls.Register(cmd, false)
	f := cmd.Flags()
	fl.spot.Register(cmd)
	fl.limits.Register(cmd)
	fl.registries.Register(cmd)
	fl.catalog.Register(cmd, "what the cloud sells, and the GPU models this machine's NVIDIA GPUs are matched against")
	fl.caKey.Register(cmd)
	f.StringVar(&fl.dir, "data-dir", cmdutil.DataDir(), "where the database, the admin token and the hosts' files live")
	f.StringVar(&fl.listen, "listen", "127.0.0.1:7878", "API listen address")
	f.StringVar(&fl.db, "db", "", "the store: postgres://... for PostgreSQL (default: SQLite in the data directory)")
	f.StringVar(&fl.fleetFile, "fleet", "", "YAML list of simulated hosts (fields of a sim host file) instead of the default fleet")
	f.BoolVar(&fl.noNVML, "no-nvml", false, "do not offer this machine's NVIDIA GPUs even if NVML works")
	f.StringVar(&fl.runtimeMode, "runtime", upRuntimeAuto, "how workloads run: auto (containers when this machine can: root with containerd, runc, tini and busybox-static installed; else processes, with a warning), containerd (containers or fail) or process (plain processes, not isolated)")
	f.StringVar(&fl.fabricPrefix, "fabric-prefix", "", "with containers, the IPv4 prefix of the wire between the hosts' network namespaces (default: a /24 of 100.96.0.0/12 that this machine does not use, chosen by the cloud's identity)")
	f.DurationVar(&fl.interval, "agent-interval", time.Second, "how often agents poll for assignments and heartbeat")
	f.StringVar(&fl.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	f.StringVar(&fl.metricsListen, "agent-metrics-listen", "127.0.0.1:9400", `where the agents serve their GPU metrics for Prometheus ("" turns it off)`)
}

// run is the up command: a server on the data directory, a join token,
// the workload runtimes, an agent for every host, the agents' metrics, the
// CLI configuration; then it waits for a signal and stops it all.
func run(cmd *cobra.Command, fl *flags, stderr io.Writer) error {
	log, err := cmdutil.NewLogger(stderr, fl.logLevel)
	if err != nil {
		return cmdutil.Usagef(cmd, "%v", err)
	}
	fabricPrefix, err := parseFabricPrefix(fl.fabricPrefix)
	if err != nil {
		return cmdutil.Usagef(cmd, "%v", err)
	}
	specs := sim.DefaultFleet()
	if fl.fleetFile != "" {
		if specs, err = loadFleet(fl.fleetFile); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(fl.dir, 0o700); err != nil {
		return err
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	s, err := startServer(ctx, cmd, fl, log)
	if err != nil {
		return err
	}
	defer func() {
		shut, cancel := cmdutil.ShutdownContext(10 * time.Second)
		defer cancel()
		s.Close(shut)
	}()
	token, err := keepDataDir(fl.dir, s)
	if err != nil {
		return err
	}
	joinString, err := createJoinToken(ctx, s, token, len(specs)+1)
	if err != nil {
		return err
	}
	// Containers on a private containerd when this machine can run
	// them, else plain processes (rts.describe says which, and why).
	rts, err := startUpRuntimes(ctx, fl.runtimeMode, fl.dir, log)
	if err != nil {
		return err
	}
	defer rts.close()
	if rts.kind == upRuntimeContainerd {
		if rts.limits, err = fleetLimits(specs, thisMachine()); err != nil {
			return err
		}
	}
	rts.allow = fl.registries.List
	if rts.cloud, err = upCloudID(s.CAFingerprint()); err != nil {
		return err
	}
	rts.fabricPrefix = fabricPrefix
	hosts, err := startHosts(ctx, s.URL, joinString, client.New(s.URL, token, s.HTTPClient()), specs, rts, fl, log)
	if err != nil {
		return err
	}
	// The metrics listener is opened before the agents run, so that a
	// failure to open it leaves no agent polling a server that has gone.
	agentMetrics, err := serveAgentMetrics(ctx, cmd, fl.metricsListen, hosts, log)
	if err != nil {
		return err
	}
	wg := runAgents(ctx, hosts, log)
	out := cmd.OutOrStdout()
	waitSchedulable(ctx, s.Scheduler, hosts, out)
	resumeInstances(ctx, fl.dir, client.New(s.URL, token, s.HTTPClient()), out, log)
	cfgPath, was := writeCLIConfig(s.URL, token, s.CAPEM(), log)
	printWelcome(out, s, token, cfgPath, fl.dir, hosts, rts, agentMetrics)
	if line := repointLine(was, s.URL); line != "" {
		fmt.Fprintln(out, line)
	}
	<-ctx.Done()
	// No controller may take the shutdown for failures: an endpoint
	// would replace its stopped workers, and they would not start again.
	s.StopControllers()
	wg.Wait()
	stopHosts(hosts)
	recordShutdown(fl.dir, s, hosts, log)
	rts.close() // after the containers are stopped
	fmt.Fprintln(out, "gpucloud stopped")
	return nil
}

// startServer starts the server on the data directory's SQLite (or --db),
// or says who holds the listen address.
func startServer(ctx context.Context, cmd *cobra.Command, fl *flags, log *slog.Logger) (*controlplane.Replica, error) {
	db := fl.db
	if db == "" {
		db = "sqlite://" + filepath.Join(fl.dir, "gpucloud.db")
	}
	cfg := controlplane.Config{DB: db, Listen: fl.listen, Log: log, TLS: fl.tls.Config()}
	if err := fl.limits.Apply(cmd, &cfg); err != nil {
		return nil, err
	}
	if err := fl.spot.Apply(cmd, &cfg); err != nil {
		return nil, err
	}
	if err := fl.registries.Apply(cmd, &cfg); err != nil {
		return nil, err
	}
	if err := fl.catalog.Apply(cmd, &cfg); err != nil {
		return nil, err
	}
	// up encrypts the CA's key by default, with a key of its own beside
	// the database (caKeyFile) unless it is given one.
	if err := fl.caKey.Apply(cmd, &cfg, filepath.Join(fl.dir, caKeyFile)); err != nil {
		return nil, err
	}
	// The address is tried before the store is opened: a start that
	// fails on a taken port must not leave a new data directory with a
	// database whose admin token was never written (the next up there
	// would refuse it).
	if ln, err := net.Listen("tcp", fl.listen); errors.Is(err, syscall.EADDRINUSE) {
		return nil, addressInUse(fl.listen)
	} else if err == nil {
		_ = ln.Close()
	}
	s, err := controlplane.Start(ctx, cfg)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, addressInUse(fl.listen)
	}
	return s, err
}

// caKeyFile is the key, in up's data directory, that encrypts the CA's
// private key in the database when up is not given one.
const caKeyFile = "ca-encryption.key"

// keepDataDir keeps the admin token and the CA certificate in the data
// directory and locks it down; it returns the admin token.
func keepDataDir(dir string, s *controlplane.Replica) (string, error) {
	token, err := adminToken(dir, s.AdminToken)
	if err != nil {
		return "", err
	}
	// The data directory is the operator's alone: the admin token
	// and the database (with every tenant's data) are 0600 in a
	// 0700 directory, whatever a previous run or the umask left.
	if err := lockDown(dir); err != nil {
		return "", err
	}
	// The CA certificate is public: curl --cacert and browsers
	// that import it trust the cloud with it.
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), s.CAPEM(), 0o644); err != nil {
		return "", err
	}
	return token, nil
}

// revokeHostCredentials revokes the live agent credentials of host.
func revokeHostCredentials(ctx context.Context, admin *client.Client, host string) error {
	ts, err := admin.Tokens(ctx, "")
	if err != nil {
		return fmt.Errorf("host %s: list its credentials: %w", host, err)
	}
	for _, t := range ts {
		if t.Role == "agent" && t.HostID == host && t.RevokedAt == nil {
			if _, err := admin.RevokeToken(ctx, t.ID); err != nil {
				return fmt.Errorf("host %s: revoke its old credential: %w", host, err)
			}
		}
	}
	return nil
}

// createJoinToken creates the join token of up's hosts (valid an hour,
// for joins joins: the simulated hosts and this machine's GPUs) and
// returns it as agents take it, with the CA's fingerprint.
func createJoinToken(ctx context.Context, s *controlplane.Replica, token string, joins int) (string, error) {
	admin := client.New(s.URL, token, s.HTTPClient())
	jt, err := admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: fmt.Sprintf("gpucloud-up-%d", time.Now().Unix()),
		ExpiresAt: ptr(time.Now().Add(time.Hour)), MaxUses: joins})
	if err != nil {
		return "", fmt.Errorf("create join token: %w", err)
	}
	return agentapi.JoinString(jt.Secret, s.CAFingerprint()), nil
}

// makeHostDir makes the data directory of host id's agent,
// dataDir/hosts/id, and dataDir/hosts, each the host root's only
// (agent.DataDirMode, an existing one included), before anything else
// makes them with a looser mode, and returns its path.
func makeHostDir(dataDir, id string) (string, error) {
	hosts := filepath.Join(dataDir, "hosts")
	if err := agent.MakeDataDir(hosts); err != nil {
		return "", err
	}
	dir := filepath.Join(hosts, id)
	return dir, agent.MakeDataDir(dir)
}

// startHosts joins the simulated hosts, and this machine's GPUs when NVML
// works (unless --no-nvml; a failure there is a warning), and returns
// their agents, not yet running. With containers, it first makes the
// hosts' fabric, a host of it for each.
func startHosts(ctx context.Context, url, joinString string, admin *client.Client, specs []sim.Spec, rts *upRuntimes, fl *flags, log *slog.Logger) ([]*hostAgent, error) {
	volumes := filepath.Join(fl.dir, "volumes")
	var gpus gpu.Driver // this machine's, when NVML works
	if !fl.noNVML {
		if drv, err := nvml.OpenCatalog(fl.catalog.Catalog); err == nil {
			gpus = drv
		}
	}
	n := len(specs)
	if gpus != nil {
		n++
	}
	if err := rts.startFabric(ctx, n); err != nil {
		return nil, err
	}
	var hosts []*hostAgent
	for _, spec := range specs {
		drv, err := sim.New(spec)
		if err != nil {
			return nil, fmt.Errorf("simulated host %s: %w", spec.ID, err)
		}
		hostDir, err := makeHostDir(fl.dir, spec.ID)
		if err != nil {
			return nil, fmt.Errorf("simulated host %s: %w", spec.ID, err)
		}
		rt, err := rts.forHost(ctx, hostDir, drv)
		if err != nil {
			return nil, fmt.Errorf("simulated host %s: %w", spec.ID, err)
		}
		h, err := startAgent(ctx, url, joinString, admin, drv, hostDir, volumes, true, fl.interval, log, rt, rts.underlay(hostDir), fl.limits.DirectAccess())
		if err != nil {
			return nil, fmt.Errorf("simulated host %s: %w", spec.ID, err)
		}
		hosts = append(hosts, h)
	}
	if gpus == nil {
		return hosts, nil
	}
	drv := gpus
	hostDir, err := makeHostDir(fl.dir, "nvml")
	var rt agentcmd.Runtime
	if err == nil {
		rt, err = rts.forHost(ctx, hostDir, drv)
	}
	if err == nil {
		var h *hostAgent
		if h, err = startAgent(ctx, url, joinString, admin, drv, hostDir, volumes, false, fl.interval, log, rt, rts.underlay(hostDir), fl.limits.DirectAccess()); err == nil {
			hosts = append(hosts, h)
		}
	}
	if err != nil {
		log.Warn("NVIDIA GPUs found but the host could not join", "err", err)
	}
	return hosts, nil
}

// serveAgentMetrics serves the GPU metrics of every host's agent on one
// listener until ctx ends, and returns its URL ("" when addr is "").
func serveAgentMetrics(ctx context.Context, cmd *cobra.Command, addr string, hosts []*hostAgent, log *slog.Logger) (string, error) {
	if addr == "" {
		return "", nil
	}
	cs := make([]prometheus.Collector, len(hosts))
	for i, h := range hosts {
		cs[i] = exporter.New(exporter.Config{Driver: h.drv, Hostname: h.id, Assignments: h.ag.Assignments, Workloads: h.rt, Log: log})
	}
	h := exporter.HandlerOf(log, cs...)
	ms, err := exporter.Listen(addr, h)
	if errors.Is(err, syscall.EADDRINUSE) && !cmd.Flags().Changed("agent-metrics-listen") {
		// The default port is taken (another `gpucloud up`, or a
		// DCGM exporter): any free port does, and is printed below.
		ms, err = exporter.Listen("127.0.0.1:0", h)
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return "", fmt.Errorf("--agent-metrics-listen %s: the address is in use; give another, or \"\" to serve no agent metrics", addr)
	}
	if err != nil {
		return "", fmt.Errorf("--agent-metrics-listen: %w", err)
	}
	go func() { _ = ms.Serve(ctx) }()
	return "http://" + ms.Addr() + "/metrics", nil
}

// schedulableWait bounds how long up waits for the scheduler to see its
// hosts before it says it is up anyway.
const schedulableWait = 2 * time.Minute

// waitSchedulable returns once the scheduler's fleet holds every host that
// joined (each agent's first heartbeat makes it schedulable, and the
// scheduler's next step reads it), so that "gpucloud is up" means a plan
// or a create made the next moment sees the whole fleet. It says what it
// waits for when that takes more than a moment, and gives up after
// schedulableWait with a warning.
func waitSchedulable(ctx context.Context, sch *controller.Scheduler, hosts []*hostAgent, out io.Writer) {
	want := len(hosts)
	start := time.Now()
	said := false
	for sch.Schedulable() < want {
		if time.Since(start) > schedulableWait {
			fmt.Fprintf(out, "warning: the scheduler sees %d of %d hosts after %s; creates may wait for the rest\n", sch.Schedulable(), want, schedulableWait)
			return
		}
		if !said && time.Since(start) > 2*time.Second {
			fmt.Fprintf(out, "waiting for the scheduler to see the hosts (%d of %d)...\n", sch.Schedulable(), want)
			said = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runAgents runs every host's agent until ctx ends; the wait group is
// done when they all have stopped.
func runAgents(ctx context.Context, hosts []*hostAgent, log *slog.Logger) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func(h *hostAgent) {
			defer wg.Done()
			if err := h.ag.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("agent stopped", "host", h.id, "err", err)
			}
		}(h)
		if h.direct != nil {
			wg.Add(1)
			go func(h *hostAgent) {
				defer wg.Done()
				if err := h.direct.Serve(ctx, h.directLn); err != nil {
					log.Error("direct files listener stopped", "host", h.id, "err", err)
				}
			}(h)
		}
	}
	return &wg
}

// writeCLIConfig points the CLI's configuration at the server at url,
// and returns its path, or "" when it could not be written (a warning),
// and the configuration it held before (its Server "" when none).
func writeCLIConfig(url, token string, caPEM []byte, log *slog.Logger) (cfgPath string, was cliconfig.File) {
	cfgPath = cliconfig.Path()
	if cfgPath != "" {
		if old, err := cliconfig.Read(cfgPath, io.Discard); err == nil {
			was = old
		}
		if err := cliconfig.Write(cfgPath, url, token, caPEM); err != nil {
			log.Warn("could not write the CLI configuration", "path", cfgPath, "err", err)
			return "", cliconfig.File{}
		}
	}
	return cfgPath, was
}

// repointLine is the line up prints when it repointed the CLI from
// another server, was, to its own, now; "" when it did not. The command
// it gives to point back names the other cloud's CA by its fingerprint
// when the configuration trusted one: each cloud has its own CA, and the
// CLI now trusts only this one's.
func repointLine(was cliconfig.File, now string) string {
	if was.Server == "" || strings.TrimRight(was.Server, "/") == strings.TrimRight(now, "/") {
		return ""
	}
	login := "gpucloud login --server " + was.Server + " --token TOKEN"
	if caPEM, err := base64.StdEncoding.DecodeString(was.CA); err == nil && was.CA != "" {
		if cert, err := pki.ParseCert(caPEM); err == nil {
			login += " --ca-fingerprint " + pki.Fingerprint(cert)
		}
	}
	return fmt.Sprintf("the CLI now points at this cloud (was %s); `%s` points it back", was.Server, login)
}

// printWelcome says what runs where, and how to start using it.
func printWelcome(out io.Writer, s *controlplane.Replica, token, cfgPath, dir string, hosts []*hostAgent, rts *upRuntimes, agentMetrics string) {
	gpus := 0
	for _, h := range hosts {
		gpus += h.gpu
	}
	fmt.Fprintf(out, "gpucloud is up: %s (%d hosts, %d GPUs, data in %s)\n", s.URL, len(hosts), gpus, dir)
	fmt.Fprintln(out, rts.describe())
	fmt.Fprintf(out, "admin token: %s\n", token)
	if strings.HasPrefix(s.URL, "https://") {
		fmt.Fprintf(out, "TLS 1.3 with the cloud's own CA %s (saved to the CLI configuration; other machines: gpucloud login --ca-fingerprint)\n", s.CAFingerprint())
		fmt.Fprintf(out, "console: %s/ (log in with the admin token; the browser must trust the cloud's CA, %s/ca.crt, or run up --plain-http)\n", s.URL, s.URL)
	} else {
		fmt.Fprintf(out, "plain HTTP on loopback (--plain-http): for development only\n")
		fmt.Fprintf(out, "console: %s/ (log in with the admin token)\n", s.URL)
	}
	fmt.Fprintf(out, "server metrics: %s (Prometheus; send the admin token as a bearer token)\n", s.MetricsURL())
	if agentMetrics != "" {
		fmt.Fprintf(out, "agent metrics: %s (GPU metrics of every host, DCGM exporter names; no token)\n", agentMetrics)
	}
	if cfgPath != "" {
		fmt.Fprintf(out, "CLI configured in %s; try:\n", cfgPath)
	} else {
		fmt.Fprintf(out, "export GPUCLOUD_SERVER=%s GPUCLOUD_TOKEN=%s; then try:\n", s.URL, token)
	}
	fmt.Fprintf(out, "  gpucloud offerings --mode mig\n")
	fmt.Fprintf(out, "  gpucloud instances create --offering h100.mig.3g.40gb --wait -- sh -c 'echo $CUDA_VISIBLE_DEVICES; sleep 600'\n")
	fmt.Fprintf(out, "Press Ctrl-C to stop.\n")
}

// stopHosts stops every host's workloads and metadata endpoints.
func stopHosts(hosts []*hostAgent) {
	shut, cancel := cmdutil.ShutdownContext(10 * time.Second)
	defer cancel()
	for _, h := range hosts {
		h.rt.StopAll(shut)
		if err := h.ag.ReleaseVolumes(); err != nil {
			slog.Warn("up: unmount a host's volumes", "host", h.id, "err", err)
		}
		h.md.Close()
	}
}

// addressInUse explains why `up` cannot listen on addr: a gpucloud server
// answers there (most likely another `gpucloud up`), or another program
// holds the port; and how to run this one elsewhere.
func addressInUse(addr string) error {
	who := "another program is listening there"
	// A gpucloud serves TLS 1.3 (its own CA, which this probe need not
	// trust: it only reads the public OpenAPI document's title), or plain
	// HTTP in development.
	url := "https://" + probeAddr(addr)
	if !isGPUCloud(url) {
		url = "http://" + probeAddr(addr)
	}
	if isGPUCloud(url) {
		who = "a gpucloud server is already running there (" + url + "), probably another `gpucloud up`: " +
			"use it (the CLI configuration `gpucloud up` wrote points at it; try `gpucloud hosts list`), or stop it with Ctrl-C"
	}
	return fmt.Errorf("cannot listen on %s: %s. To run another cloud next to it, give it another port and data directory: "+
		"gpucloud up --listen 127.0.0.1:7879 --data-dir DIR (--listen 127.0.0.1:0 picks a free port)", addr, who)
}

// probeAddr is where to reach a listen address from this machine: its
// port on loopback when it listens on every interface.
func probeAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// isGPUCloud reports whether a gpucloud server answers at url: its
// OpenAPI document, which needs no token, names it.
func isGPUCloud(url string) bool {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // identification only; nothing is sent
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url + "/v1/openapi.json")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var doc struct {
		Info struct {
			Title string `json:"title"`
		} `json:"info"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<22)).Decode(&doc) != nil {
		return false
	}
	return strings.HasPrefix(doc.Info.Title, "gpucloud")
}

// adminToken keeps the admin token of a data directory: the first start
// writes it (0600) next to the database, later starts read it back, since
// the server keeps only its hash.
func adminToken(dir, created string) (string, error) {
	path := filepath.Join(dir, "admin-token")
	if created != "" {
		return created, os.WriteFile(path, []byte(created+"\n"), 0o600)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s has a database but no admin token file (%v): start with an empty --data-dir", dir, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func ptr[T any](v T) *T { return &v }

// lockDown makes the data directory 0700 and the database files and the
// admin token in it 0600.
func lockDown(dir string) error {
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	for _, name := range []string{"gpucloud.db", "gpucloud.db-wal", "gpucloud.db-shm", "admin-token", caKeyFile} {
		if err := os.Chmod(filepath.Join(dir, name), 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// sharedVolumeDir is where up's hosts keep shared volumes, beside the
// volumes.
func sharedVolumeDir(volumeDir string) string {
	return filepath.Join(filepath.Dir(volumeDir), "shared-volumes")
}
