// Package servercmd is the `gpucloud server` command, the control plane's
// launcher, and the server flags `gpucloud up` shares with it (TLS, the
// spot market, request limits). It starts the server through serve.
package servercmd

import (
	"context"
	"fmt"
	"github.com/gpucloud/gpucloud/internal/imageref"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/httpapi"
	"github.com/gpucloud/gpucloud/spot"
)

// New returns the server command. stderr takes the log.
func New(stderr io.Writer) *cobra.Command {
	var (
		db, listen string
		hbTimeout  time.Duration
		logLevel   string
		spotFlags  SpotFlags
		tlsFlags   TLSFlags
		limits     LimitFlags
		registries RegistryFlags
		cat        CatalogFlag
		caKey      CAKeyFlags
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane: API, scheduler and health controllers",
		Long: "Run a gpucloud server. It stores everything in embedded SQLite by default\n" +
			"(--db sqlite://PATH) or in PostgreSQL (--db postgres://...), applying schema\n" +
			"migrations at start. Several servers may share one PostgreSQL: one of them\n" +
			"leads and runs the controllers, the others serve the API.\n\n" +
			"The first start creates the operator tenant and an admin token, printed once.",
		Example: "  gpucloud server --db sqlite://./gpucloud.db --listen 127.0.0.1:7878\n" +
			"  gpucloud server --db postgres://gpucloud@db.internal/gpucloud --listen 0.0.0.0:7878",
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if db == "" {
				var err error
				if db, err = defaultDB(); err != nil {
					return err
				}
			}
			log, err := cmdutil.NewLogger(stderr, logLevel)
			if err != nil {
				return cmdutil.Usagef(cmd, "%v", err)
			}
			cfg := controlplane.Config{DB: db, Listen: listen, HeartbeatTimeout: hbTimeout, Log: log, TLS: tlsFlags.Config()}
			if err := spotFlags.Apply(cmd, &cfg); err != nil {
				return err
			}
			if err := limits.Apply(cmd, &cfg); err != nil {
				return err
			}
			if err := registries.Apply(cmd, &cfg); err != nil {
				return err
			}
			if err := cat.Apply(cmd, &cfg); err != nil {
				return err
			}
			if err := caKey.Apply(cmd, &cfg, ""); err != nil {
				return err
			}
			ctx, stop := cmdutil.SignalContext()
			defer stop()
			s, err := controlplane.Start(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "gpucloud server listening on %s (store %s)\n", s.URL, s.Store.Dialect())
			if strings.HasPrefix(s.URL, "https://") {
				fmt.Fprintf(cmd.OutOrStdout(), "TLS 1.3; the cloud's CA is %s (clients: gpucloud login --ca-fingerprint %s; the CA itself: %s/ca.crt)\n",
					s.CAFingerprint(), s.CAFingerprint(), s.URL)
			}
			if s.AdminToken != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "admin token (shown once; keep it): %s\n", s.AdminToken)
			}
			<-ctx.Done()
			shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return s.Close(shut)
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", "", "store: sqlite://PATH or postgres://URL (default sqlite in the data directory)")
	f.StringVar(&listen, "listen", "127.0.0.1:7878", "API listen address")
	f.DurationVar(&hbTimeout, "heartbeat-timeout", 30*time.Second, "mark a host unhealthy after this long without a heartbeat")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	spotFlags.Register(cmd)
	tlsFlags.Register(cmd, true)
	limits.Register(cmd)
	registries.Register(cmd)
	cat.Register(cmd, "what the server sells (give each agent the same file for GPU models it adds)")
	caKey.Register(cmd)
	cmd.AddCommand(newRotateCAKey())
	return cmd
}

// defaultDB is the store of a server not given --db: SQLite in the data
// directory.
func defaultDB() (string, error) {
	if err := os.MkdirAll(cmdutil.DataDir(), 0o700); err != nil {
		return "", err
	}
	return "sqlite://" + filepath.Join(cmdutil.DataDir(), "gpucloud.db"), nil
}

// CAKeyFlags name the key that encrypts the CA's private key in the store.
type CAKeyFlags struct {
	file string
}

// Register adds --ca-encryption-key-file to cmd.
func (f *CAKeyFlags) Register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.file, "ca-encryption-key-file", "", "a file holding the key (64 hex digits: openssl rand -hex 32) that encrypts the CA's private key "+
		"in the database; or $"+controlplane.EnvCAKey+" holds the key itself. Without either the CA key is stored unencrypted")
}

// Apply reads the key into cfg.CAKey: the flag's file, else the
// environment's key, else defaultFile (made, 0600, when missing) unless it
// is empty.
func (f *CAKeyFlags) Apply(cmd *cobra.Command, cfg *controlplane.Config, defaultFile string) error {
	file, env := f.file, os.Getenv(controlplane.EnvCAKey)
	if file == "" && env == "" && defaultFile != "" {
		if _, err := controlplane.EnsureCAKeyFile(defaultFile); err != nil {
			return err
		}
		file = defaultFile
	}
	w, err := controlplane.CAKeyFrom(file, env)
	if err != nil {
		return cmdutil.Usagef(cmd, "%v", err)
	}
	cfg.CAKey = w
	return nil
}

// newRotateCAKey is `gpucloud server rotate-ca-key`: the CA's private key
// in the store re-encrypted under a new key, in one transaction.
func newRotateCAKey() *cobra.Command {
	var db, oldFile, newFile string
	cmd := &cobra.Command{
		Use:   "rotate-ca-key",
		Short: "Re-encrypt the CA's private key in the database under a new key",
		Long: "Re-encrypt the CA's private key in the database: decrypt it with the key in\n" +
			"--old-key-file (leave it out when the CA key is stored unencrypted) and\n" +
			"encrypt it with the key in --new-key-file, in one transaction. Running servers\n" +
			"keep working; give each the new key (--ca-encryption-key-file or\n" +
			"$" + controlplane.EnvCAKey + ") before its next start: a server started with the\n" +
			"old key refuses to start, saying the key is wrong.",
		Example: "  openssl rand -hex 32 > new.key && chmod 600 new.key\n" +
			"  gpucloud server rotate-ca-key --db postgres://gpucloud@db.internal/gpucloud --old-key-file old.key --new-key-file new.key",
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if newFile == "" {
				return cmdutil.Usagef(cmd, "--new-key-file is required")
			}
			if db == "" {
				var err error
				if db, err = defaultDB(); err != nil {
					return err
				}
			}
			if err := controlplane.RotateCAKey(cmd.Context(), db, oldFile, newFile); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "the CA key in the database is now encrypted with the key in %s; give it to every server before its next start\n", newFile)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", "", "store: sqlite://PATH or postgres://URL (default sqlite in the data directory)")
	f.StringVar(&oldFile, "old-key-file", "", "the key the CA key is encrypted with now (leave out when it is unencrypted)")
	f.StringVar(&newFile, "new-key-file", "", "the key to encrypt it with")
	return cmd
}

// RegistryFlags name the registries images may name although their host
// is an internal address (imageref.AllowList).
type RegistryFlags struct {
	entries []string
	// List is the parsed list, once Apply has run.
	List imageref.AllowList
}

// Register adds --allow-registry to cmd.
func (f *RegistryFlags) Register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.entries, "allow-registry", nil, "a registry, HOST or HOST:PORT, that images may name although it is at a loopback, "+
		"link-local or private address (refused otherwise); repeatable")
}

// Apply parses the flags into f.List and cfg.AllowRegistries.
func (f *RegistryFlags) Apply(cmd *cobra.Command, cfg *controlplane.Config) error {
	l, err := imageref.NewAllowList(f.entries)
	if err != nil {
		return cmdutil.Usagef(cmd, "--allow-registry: %v", err)
	}
	f.List, cfg.AllowRegistries = l, l
	return nil
}

// TLSFlags say how a server serves: TLS 1.3 with the cloud's own CA
// by default.
type TLSFlags struct {
	cert, key string
	hosts     []string
	plain     bool
}

// Register adds the flags to cmd; operator adds those of a server run by
// an operator (its own certificate, more names).
func (t *TLSFlags) Register(cmd *cobra.Command, operator bool) {
	f := cmd.Flags()
	f.BoolVar(&t.plain, "plain-http", false, "serve plain HTTP instead of TLS 1.3 (development only; refused unless --listen is a loopback address)")
	if !operator {
		return
	}
	f.StringVar(&t.cert, "tls-cert", "", "the server certificate (PEM, chain after the leaf) instead of one the cloud's own CA issues")
	f.StringVar(&t.key, "tls-key", "", "the key of --tls-cert")
	f.StringSliceVar(&t.hosts, "tls-host", nil, "another name or address the issued server certificate covers (the one clients and agents reach the server by); repeatable")
}

// Config is the TLS configuration the flags say.
func (t *TLSFlags) Config() controlplane.TLS {
	return controlplane.TLS{CertFile: t.cert, KeyFile: t.key, Hosts: t.hosts, Plain: t.plain}
}

// SpotFlags are the server's spot market settings.
type SpotFlags struct {
	notice     time.Duration
	poolNotice []string
	clear      time.Duration
	keepFailed time.Duration
}

// Register adds the flags to cmd.
func (f *SpotFlags) Register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.DurationVar(&f.notice, "spot-notice", controller.DefaultNotice, "reclaim notice a spot instance gets before it is stopped (at least 30s)")
	fs.StringArrayVar(&f.poolNotice, "pool-notice", nil, "reclaim notice of one pool or offering, e.g. h100.8x/us-east-1a=5m or h100.8x=3m (repeatable)")
	fs.DurationVar(&f.clear, "spot-clear-interval", controller.DefaultClearInterval, "how often spot prices clear")
	fs.DurationVar(&f.keepFailed, "spot-keep-failed", controller.DefaultKeepFailed, "how long a failed spot instance is kept for inspection before its persistent request relaunches")
}

// Apply checks the flags and sets them on cfg.
func (f *SpotFlags) Apply(cmd *cobra.Command, cfg *controlplane.Config) error {
	if f.notice < controller.MinNotice {
		return cmdutil.Usagef(cmd, "--spot-notice %s: at least %s", f.notice, controller.MinNotice)
	}
	if f.clear <= 0 || f.keepFailed < 0 {
		return cmdutil.Usagef(cmd, "--spot-clear-interval must be positive and --spot-keep-failed not negative")
	}
	sc := spot.DefaultConfig()
	sc.NoticeSeconds = int(f.notice / time.Second)
	cfg.Spot, cfg.SpotClearInterval, cfg.KeepFailed = &sc, f.clear, f.keepFailed
	for _, pn := range f.poolNotice {
		k, v, ok := strings.Cut(pn, "=")
		d, err := time.ParseDuration(v)
		if !ok || k == "" || err != nil {
			return cmdutil.Usagef(cmd, "--pool-notice %q: want OFFERING[/ZONE]=DURATION, e.g. h100.8x/us-east-1a=5m", pn)
		}
		if d < controller.MinNotice {
			return cmdutil.Usagef(cmd, "--pool-notice %q: at least %s", pn, controller.MinNotice)
		}
		if cfg.PoolNotice == nil {
			cfg.PoolNotice = map[string]time.Duration{}
		}
		cfg.PoolNotice[k] = d
	}
	return nil
}

// LimitFlags are the API's request limits (httpapi.RateLimits), and the
// sessions' settings.
type LimitFlags struct {
	limits        []string
	proxies       []string
	sessions      int
	replica       string
	address       string
	directAccess  bool
	createBatches int
}

// DirectAccess reports whether --direct-access was given.
func (f *LimitFlags) DirectAccess() bool { return f.directAccess }

// Register adds the flags to cmd.
func (f *LimitFlags) Register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringArrayVar(&f.limits, "rate-limit", nil, "a request limit, ROLE=RATE/BURST per second: member (default "+
		limitText(httpapi.DefaultMemberRate, httpapi.DefaultMemberBurst)+"), admin ("+
		limitText(httpapi.DefaultAdminRate, httpapi.DefaultAdminBurst)+"), agent ("+
		limitText(httpapi.DefaultAgentRate, httpapi.DefaultAgentBurst)+"; what its workloads make it do), agent-liveness ("+
		limitText(httpapi.DefaultAgentLivenessRate, httpapi.DefaultAgentLivenessBurst)+"; an agent's heartbeats and assignment polls), auth-failures (per source address, "+
		limitText(httpapi.DefaultAuthFailureRate, httpapi.DefaultAuthFailureBurst)+") or anonymous (requests without a token, per source address, "+
		limitText(httpapi.DefaultAnonymousRate, httpapi.DefaultAnonymousBurst)+"); a tenant's quota overrides member and admin; repeatable")
	fs.StringArrayVar(&f.proxies, "trusted-proxy", nil, "the address or CIDR of a reverse proxy whose X-Forwarded-For names the client (for the failed-authentication limit); repeatable")
	fs.BoolVar(&f.directAccess, "direct-access", false, "let tenants copy files and forward ports straight to the agents that listen for it (agent --direct-listen), with short-lived grants this server signs (docs/DATA.md, docs/ACCESS.md); otherwise both go through the server")
	fs.IntVar(&f.createBatches, "create-batches", 0, "how many tenants' batches of instance creates are committed at once; the others' creates wait and join their tenant's next batch (0: "+strconv.Itoa(controlplane.DefaultCreateBatches)+" on PostgreSQL, no bound on SQLite)")
	fs.IntVar(&f.sessions, "session-limit", controlplane.DefaultSessionLimit, "how many exec and port-forward sessions one user may have open at once")
	fs.StringVar(&f.replica, "replica-name", "", "this replica's name in the session records and the replica registry (default: the host name); replicas sharing a database need distinct, stable names")
	fs.StringVar(&f.address, "replica-address", "", "host:port the other replicas reach this one at, to forward sessions to the agents it holds (default: the listen address, with the host name for an unspecified address; the server certificate must cover it)")
}

func limitText(rate float64, burst int) string {
	return strconv.FormatFloat(rate, 'f', -1, 64) + "/" + strconv.Itoa(burst)
}

// Apply parses the flags into cfg.Limits.
func (f *LimitFlags) Apply(cmd *cobra.Command, cfg *controlplane.Config) error {
	l, err := parseLimits(f.limits, f.proxies)
	if err != nil {
		return cmdutil.Usagef(cmd, "%v", err)
	}
	cfg.Limits = l
	if f.sessions < 1 {
		return cmdutil.Usagef(cmd, "--session-limit %d: want at least 1", f.sessions)
	}
	cfg.SessionLimit, cfg.Replica, cfg.ReplicaAddress = f.sessions, f.replica, f.address
	cfg.DirectAccess = f.directAccess
	if f.createBatches < 0 {
		return cmdutil.Usagef(cmd, "--create-batches %d: want 0 (by store) or more", f.createBatches)
	}
	cfg.CreateBatches = f.createBatches
	return nil
}

// parseLimits reads --rate-limit ROLE=RATE/BURST and --trusted-proxy
// values; unset roles keep their defaults.
func parseLimits(limits, proxies []string) (httpapi.RateLimits, error) {
	var out httpapi.RateLimits
	for _, s := range limits {
		role, v, ok := strings.Cut(s, "=")
		rateS, burstS, ok2 := strings.Cut(v, "/")
		if !ok || !ok2 {
			return out, fmt.Errorf("--rate-limit %q: want ROLE=RATE/BURST, e.g. member=50/500", s)
		}
		rate, err := strconv.ParseFloat(strings.TrimSpace(rateS), 64)
		if err != nil || rate <= 0 || rate > 1e6 {
			return out, fmt.Errorf("--rate-limit %q: the rate must be a number of requests per second above 0", s)
		}
		burst, err := strconv.Atoi(strings.TrimSpace(burstS))
		if err != nil || burst < 1 || burst > 1e7 {
			return out, fmt.Errorf("--rate-limit %q: the burst must be a whole number of requests, at least 1", s)
		}
		lim := httpapi.Limit{Rate: rate, Burst: burst}
		switch strings.TrimSpace(role) {
		case "member":
			out.Member = lim
		case "admin":
			out.Admin = lim
		case "agent":
			out.Agent = lim
		case "agent-liveness":
			out.AgentLiveness = lim
		case "auth-failures":
			out.AuthFailures = lim
		case "anonymous":
			out.Anonymous = lim
		default:
			return out, fmt.Errorf("--rate-limit %q: the role must be member, admin, agent, agent-liveness, auth-failures or anonymous", s)
		}
	}
	for _, p := range proxies {
		pre, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil {
				return out, fmt.Errorf("--trusted-proxy %q: want an address or a CIDR such as 10.0.0.0/8", p)
			}
			pre = netip.PrefixFrom(a, a.BitLen())
		}
		out.TrustedProxies = append(out.TrustedProxies, pre.Masked())
	}
	return out, nil
}
