package provider_test

// The acceptance harness: real terraform (or tofu) against a real
// in-process gpucloud server with simulated hosts whose agents join and
// run instances (process runtime), through terraform-plugin-testing. The
// provider runs in the test process (ProtoV6ProviderFactories, which
// terraform reaches through TF_REATTACH_PROVIDERS), so no registry is
// contacted; TestProviderBinary builds the real binary and runs it
// through dev_overrides.
//
// The tests run where terraform or tofu is on PATH (or
// TF_ACC_TERRAFORM_PATH names one); without one they skip, unless $CI is
// set: then they fail, so that CI never passes without running them.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for freshSchema

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/httpapi"
	"github.com/gpucloud/gpucloud/terraform/provider"
)

// terraformBin is the terraform or tofu binary the tests run; empty:
// none, and the acceptance tests skip.
var terraformBin string

// cloudOnce is a cloud the acceptance tests share, started on first use.
type cloudOnce struct {
	once  sync.Once
	cloud *testCloud
	err   error
	stop  func()
}

// shared is the cloud most tests share; containerCloud the one whose
// hosts report a container runtime, for endpoints (started only by the
// tests that need it).
var shared, containerCloud cloudOnce

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	terraformBin = findTerraform()
	if terraformBin == "" && os.Getenv("CI") != "" {
		fmt.Fprintln(os.Stderr, "terraform/provider: neither terraform nor tofu is on PATH and $CI is set: the acceptance tests must run in CI (.ci/tools.sh installs tofu)")
		return 1
	}
	tmp, err := os.MkdirTemp("", "gpucloud-tf-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if terraformBin != "" {
		// A CLI configuration of our own (none of the user's mirrors or
		// overrides), no checkpoint calls, and the provider's address as
		// the binary names it by default.
		cliConfig := filepath.Join(tmp, "terraformrc")
		if err := os.WriteFile(cliConfig, nil, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.Setenv("TF_CLI_CONFIG_FILE", cliConfig)
		os.Setenv("TF_ACC", "1")
		os.Setenv("TF_ACC_TERRAFORM_PATH", terraformBin)
		os.Setenv("CHECKPOINT_DISABLE", "1")
		os.Setenv("TF_ACC_PROVIDER_NAMESPACE", "gpucloud")
		if filepath.Base(terraformBin) == "tofu" {
			os.Setenv("TF_ACC_PROVIDER_HOST", "registry.opentofu.org")
		} else {
			os.Setenv("TF_ACC_PROVIDER_HOST", "registry.terraform.io")
		}
	}
	// The provider must not find the user's gpucloud settings.
	for _, v := range []string{"GPUCLOUD_SERVER", "GPUCLOUD_TOKEN", "GPUCLOUD_CA_FILE", "GPUCLOUD_CA_FINGERPRINT"} {
		os.Unsetenv(v)
	}
	os.Setenv("GPUCLOUD_CONFIG", filepath.Join(tmp, "no-config.yaml"))
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	for _, c := range []*cloudOnce{&shared, &containerCloud} {
		if c.stop != nil {
			c.stop()
		}
	}
	return code
}

// findTerraform is $TF_ACC_TERRAFORM_PATH, else terraform on PATH, else
// tofu on PATH (.ci/tools.sh installs it where terraform is missing).
func findTerraform() string {
	if p := os.Getenv("TF_ACC_TERRAFORM_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"terraform", "tofu"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// needTerraform skips t where no terraform is installed (never in CI:
// TestMain fails first).
func needTerraform(t *testing.T) {
	t.Helper()
	if terraformBin == "" {
		t.Skip("neither terraform nor tofu is installed (TF_ACC_TERRAFORM_PATH, PATH)")
	}
}

// factories serve the provider in the test process.
var factories = map[string]func() (tfprotov6.ProviderServer, error){
	"gpucloud": providerserver.NewProtocol6WithError(provider.New("test")()),
}

// sharedCloud is the cloud the tests share: safe, because each test
// works in tenants of its own. Its store is SQLite, or PostgreSQL (a
// fresh schema, dropped at the end) where GPUCLOUD_TEST_POSTGRES_URL is
// set, as store/pgtest's tests do: `bash -c '. .ci/postgres.sh; go test
// ./terraform/provider/ -run TestTenantIsolation'`.
func sharedCloud(t *testing.T) *testCloud {
	t.Helper()
	return shared.get(t, hosts, false)
}

// endpointCloud is the cloud of the endpoint tests: one L4 host whose
// agent reports a container runtime, so that the server accepts
// endpoints (it refuses them on a cloud with no container host: their
// workers are containers). Its workloads still run as processes, and no
// containerd is started: the tests take no request (min 0), and the
// workers a warm pool launches fail (the process runtime refuses an
// image) and are released, which the endpoint's spec does not mind.
func endpointCloud(t *testing.T) *testCloud {
	t.Helper()
	return containerCloud.get(t, []sim.Spec{{ID: "tf-ctr-a", Zone: "tf-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 2}}}, true)
}

// get starts the cloud on first use (as sharedCloud says) and answers
// it; containers: the hosts report a container runtime.
func (co *cloudOnce) get(t *testing.T, specs []sim.Spec, containers bool) *testCloud {
	t.Helper()
	needTerraform(t)
	co.once.Do(func() {
		dir, err := os.MkdirTemp("", "gpucloud-tf-cloud-")
		if err != nil {
			co.err = err
			return
		}
		db, drop := "sqlite://"+filepath.Join(dir, "gpucloud.db"), func() {}
		if base := os.Getenv("GPUCLOUD_TEST_POSTGRES_URL"); base != "" {
			if db, drop, err = freshSchema(base); err != nil {
				co.err = err
				return
			}
		}
		c, stop, err := startCloud(db, dir, specs, containers)
		co.cloud, co.err = c, err
		co.stop = func() {
			if stop != nil {
				stop()
			}
			drop()
			os.RemoveAll(dir)
		}
	})
	if co.err != nil {
		t.Fatalf("start the cloud: %v", co.err)
	}
	return co.cloud
}

// testCloud is a running server and its simulated hosts' agents.
type testCloud struct {
	srv   *controlplane.Replica
	admin *client.Client
	// fingerprint is the cloud's CA's, which the provider blocks pin.
	fingerprint string

	mu      sync.Mutex
	tenants int
}

// hosts are the simulated fleet: two L4 boxes in one zone, two racks.
var hosts = []sim.Spec{
	{ID: "tf-l4-a", Zone: "tf-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 2}},
	{ID: "tf-l4-b", Zone: "tf-a", Rack: "rack-2", GPUs: sim.GPUSpec{Model: "L4", Count: 2}},
}

// containerKind is the process runtime reporting itself as containerd
// (the host's "runtime" label), for a cloud whose endpoints the server
// must accept; every other method is the process runtime's.
type containerKind struct{ *process.Runtime }

func (containerKind) Kind() string { return runtime.KindContainerd }

// startCloud starts a server on db and an agent per simulated host, and
// waits until the scheduler holds every host. containers: the hosts
// report a container runtime (containerKind) and share a volume directory
// (dir/shared), so that endpoints and their shared volumes are accepted.
// stop stops them all.
func startCloud(db, dir string, hosts []sim.Spec, containers bool) (*testCloud, func(), error) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("GPUCLOUD_TF_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	unlimited := httpapi.Limit{Rate: 10000, Burst: 10000}
	srv, err := controlplane.Start(ctx, controlplane.Config{
		DB: db, Listen: "127.0.0.1:0", ScheduleInterval: 20 * time.Millisecond, Log: log,
		// The spot market and the groups move within a test's patience.
		SpotClearInterval: 500 * time.Millisecond, MarketInterval: 100 * time.Millisecond, GroupInterval: 100 * time.Millisecond,
		Limits: httpapi.RateLimits{Member: unlimited, Admin: unlimited, Agent: unlimited, AgentLiveness: unlimited, AuthFailures: unlimited, Anonymous: unlimited},
	})
	if err != nil {
		return nil, nil, err
	}
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	stops = append(stops, func() {
		shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close(shut)
	})
	hc := srv.HTTPClient()
	c := &testCloud{srv: srv, admin: client.New(srv.URL, srv.AdminToken, hc), fingerprint: srv.CAFingerprint()}
	if err := waitFor(30*time.Second, srv.IsLeader); err != nil {
		stop()
		return nil, nil, fmt.Errorf("the server to lead: %w", err)
	}
	jt, err := c.admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "tf", ExpiresAt: new(time.Now().Add(time.Hour)), MaxUses: len(hosts)})
	if err != nil {
		stop()
		return nil, nil, err
	}
	var sharedDir string
	if containers {
		sharedDir = filepath.Join(dir, "shared")
		if err := os.MkdirAll(sharedDir, 0o750); err != nil {
			stop()
			return nil, nil, err
		}
	}
	agentCtx, stopAgents := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runtimes []*process.Runtime
	stops = append(stops, func() {
		stopAgents()
		wg.Wait()
		shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, rt := range runtimes {
			rt.StopAll(shut)
		}
	})
	for _, spec := range hosts {
		drv, err := sim.New(spec)
		if err != nil {
			stop()
			return nil, nil, err
		}
		joined, err := agent.Join(ctx, agentapi.NewClient(srv.URL, "", hc), jt.Secret, drv)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("host %s: %w", spec.ID, err)
		}
		cert, _, err := joined.TLSCertificate()
		if err != nil {
			stop()
			return nil, nil, err
		}
		ahc, err := agentapi.TLSClient(srv.CAPEM(), cert)
		if err != nil {
			stop()
			return nil, nil, err
		}
		hdir := filepath.Join(dir, spec.ID)
		if err := os.MkdirAll(hdir, 0o750); err != nil {
			stop()
			return nil, nil, err
		}
		rt := process.New(filepath.Join(hdir, "runtime"))
		runtimes = append(runtimes, rt)
		var art runtime.Runtime = rt
		if containers {
			art = containerKind{rt}
		}
		ag := agent.New(agentapi.NewClient(srv.URL, joined.Credential, ahc), agent.Config{
			Driver: drv, Runtime: art, Metadata: metadata.New(), DataDir: hdir, SharedVolumeDir: sharedDir,
			Interval: 20 * time.Millisecond, ManageMIG: true, Log: log.With("host", spec.ID),
		})
		wg.Go(func() { ag.Run(agentCtx) })
	}
	if err := waitFor(30*time.Second, func() bool { return srv.Scheduler.Schedulable() >= len(hosts) }); err != nil {
		stop()
		return nil, nil, fmt.Errorf("the scheduler to hold every host: %w", err)
	}
	// The availability the server checks creates against (counted at
	// most once a second) holds every host, so that a test of what no
	// host could run is refused, not taken for a fleet still joining.
	if err := waitFor(30*time.Second, func() bool {
		for _, a := range srv.Scheduler.Availability() {
			if a.FleetHosts >= len(hosts) && a.Hosts > 0 {
				return true
			}
		}
		return false
	}); err != nil {
		stop()
		return nil, nil, fmt.Errorf("the availability to count every host: %w", err)
	}
	return c, stop, nil
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// tenant is a tenant of the cloud with a member's token: its provider
// block and its own client.
type tenant struct {
	ID     string
	Token  string
	Client *client.Client
	cloud  *testCloud
}

// newTenant makes a tenant with a member user, named after the test.
func (c *testCloud) newTenant(t *testing.T) *tenant {
	t.Helper()
	c.mu.Lock()
	c.tenants++
	n := c.tenants
	c.mu.Unlock()
	ctx := t.Context()
	name := fmt.Sprintf("tf-%d", n)
	tn, err := c.admin.CreateTenant(ctx, name)
	if err != nil {
		t.Fatalf("create tenant: %v", err)
	}
	u, err := c.admin.CreateUser(ctx, tn.ID, api.CreateUserRequest{Name: name + "-user"})
	if err != nil {
		t.Fatalf("create user: %v", err)
	}
	if u.User.Role != cloud.RoleMember {
		t.Fatalf("user role %s, want member", u.User.Role)
	}
	return &tenant{ID: tn.ID, Token: u.Secret, Client: client.New(c.srv.URL, u.Secret, c.srv.HTTPClient()), cloud: c}
}

// provider is the provider's source address and the tenant's provider
// block: the cloud's URL, the tenant's token, the CA pinned by its
// fingerprint.
func (tn *tenant) provider() string {
	return "terraform {\n  required_providers {\n    gpucloud = { source = \"gpucloud/gpucloud\" }\n  }\n}\n" + fmt.Sprintf("provider \"gpucloud\" {\n  endpoint       = %q\n  token          = %q\n  ca_fingerprint = %q\n}\n",
		tn.cloud.srv.URL, tn.Token, tn.cloud.fingerprint)
}

// config is the tenant's provider block followed by body.
func (tn *tenant) config(body string) string {
	return tn.provider() + strings.TrimSpace(body) + "\n"
}

// spotPool waits (10 s at most) until the spot market has cleared a price
// for an L4 pool, and returns that pool.
func (c *testCloud) spotPool(t *testing.T) api.SpotPool {
	t.Helper()
	var found api.SpotPool
	err := waitFor(10*time.Second, func() bool {
		pools, err := c.admin.SpotPools(t.Context())
		if err != nil {
			return false
		}
		for _, p := range pools {
			if p.Offering == "l4.1x" && p.Price > 0 {
				found = p
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("no spot price for l4.1x: %v", err)
	}
	return found
}

// freshSchema makes a new schema on the PostgreSQL server at base and
// returns the URL whose connections use it, and the function that drops
// it (store/pgtest.URL's, for a cloud that outlives one test).
func freshSchema(base string) (string, func(), error) {
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return "", nil, err
	}
	b := make([]byte, 6)
	rand.Read(b)
	schema := "gpucloud_tf_" + hex.EncodeToString(b)
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("create schema: %w", err)
	}
	drop := func() {
		admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		admin.Close()
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		drop()
		return "", nil, fmt.Errorf("GPUCLOUD_TEST_POSTGRES_URL: want a postgres:// URL (%v)", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}
