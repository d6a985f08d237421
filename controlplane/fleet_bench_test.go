package controlplane

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/httpapi"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/store/pgtest"
	"github.com/gpucloud/gpucloud/store/sqlstore"
)

// The fleet-scale benchmark (issue 26): N agents, the real agent code
// (package agent) with the simulated GPU driver and a runtime that starts
// nothing, each joined with its own join (its own host, credential, client
// key and certificate) and talking over its own mutual-TLS HTTP/2
// connection, against one server on PostgreSQL or SQLite. While the fleet
// idles, a tenant creates a trickle of instances (fleetCreateRate a
// second over the window); each one's workload "runs" fleetWorkload to twice
// that and exits by itself.
//
//	bash -c '. .ci/postgres.sh; go test ./controlplane -run XXX -bench Fleet/postgres -benchtime 1x -timeout 60m'
//
// The agents run in a child process (the test binary again, running
// TestFleetAgentProcess), so that the server's CPU is this process's and
// the agents' is the child's: the two are measured apart, over the same
// window, from the kernel's accounting (getrusage and /proc). On
// PostgreSQL the CPU of the database's backends that serve the server is
// measured too (its sessions carry the test schema as application_name).
// Both processes share the machine's cores: the figures are meant as
// ratios and as growth with N, not as absolute capacity.
//
// The figures, over the measured window (after every agent joined and
// warmed up):
//   - srv-cpu-us/agent/s: the server process's CPU time per agent per
//     second; srv-cores: the same, in cores;
//   - pg-cpu-us/agent/s: the PostgreSQL backends' (postgres only);
//   - agent-cpu-us/agent/s: the agent process's, per agent;
//   - req/s: requests the server answered (its own counter,
//     gpucloud_http_requests_total);
//   - store-tx/s, store-rt/s: the store's transactions and round trips
//     (statements, begins and ends: sqlstore.Counts);
//   - start-p50-ms, start-p99-ms: from an instance's placement (its
//     instance.state event to scheduled, on the server's clock) to its
//     agent starting the workload (the runtime's Start, same machine's
//     clock);
//   - exit-p50-ms, exit-p99-ms: from a workload's exit to the instance's
//     state change in the store (the event that moves it out of running);
//   - create-p50-ms, create-p99-ms: the tenant's creates during the
//     window, through the API;
//   - agent-errors: failures the agents logged (a heartbeat or pass that
//     failed), over the whole run;
//   - unfinished: instances that had not run and exited, with the
//     instance stopped, two minutes after the window (an overloaded
//     server); the delays are of the others;
//   - srv-MiB, srv-goroutines: the server process's resident memory and
//     goroutines at the window's end.
const (
	fleetInterval   = time.Second // the agents' interval, as `gpucloud up --agent-interval 1s`
	fleetWarmup     = 5 * time.Second
	fleetWindow     = 20 * time.Second
	fleetCreateRate = 5 // instances a second over the window
	fleetWorkload   = 2 * time.Second
	// fleetJoiners is how many joins run at once.
	fleetJoiners = 8
	// fleetAgentEnv carries the agent process's configuration.
	fleetAgentEnv = "GPUCLOUD_FLEET_AGENTS"
)

// BenchmarkFleet runs the fleet at 500, 2,000 and 5,000 agents on each
// store, with agents that poll their assignments every interval (poll: an
// agent against a server from before the watch) and with agents that
// watch them (watch: GET /v1/agent/assignments?version=&wait=).
func BenchmarkFleet(b *testing.B) {
	stores := []struct {
		name string
		db   func(b *testing.B) string
	}{
		{"postgres", func(b *testing.B) string { return pgtest.URL(b) }},
		{"sqlite", func(b *testing.B) string { return "sqlite://" + filepath.Join(b.TempDir(), "gpucloud.db") }},
	}
	for _, st := range stores {
		for _, watch := range []bool{false, true} {
			mode := map[bool]string{false: "poll", true: "watch"}[watch]
			for _, n := range fleetSizes(b) {
				b.Run(fmt.Sprintf("%s/%s/agents=%d", st.name, mode, n), func(b *testing.B) {
					for range b.N {
						benchFleet(b, st.db(b), n, watch)
					}
				})
			}
		}
	}
}

// fleetSizesEnv names the fleet sizes to run, comma-separated
// ("500,2000,5000" for the figures in docs/BENCHMARKS.md). Unset, the
// benchmark runs 50 agents with a short window: the smoke test of CI's
// every-benchmark-once step, which must not take minutes per variant.
const fleetSizesEnv = "GPUCLOUD_FLEET_SIZES"

func fleetSizes(b *testing.B) []int {
	raw := os.Getenv(fleetSizesEnv)
	if raw == "" {
		return []int{50}
	}
	var out []int
	for _, f := range strings.Split(raw, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 20000 {
			b.Fatalf("%s=%q: want sizes 1..20000, comma-separated", fleetSizesEnv, raw)
		}
		out = append(out, n)
	}
	return out
}

// fleetTimes are the settling time after the agents' ramp and the
// measured window: fleetWarmup and fleetWindow for a measurement, 2 s and
// 5 s for the smoke test.
func fleetTimes() (warmup, window time.Duration) {
	if os.Getenv(fleetSizesEnv) == "" {
		return 2 * time.Second, 5 * time.Second
	}
	return fleetWarmup, fleetWindow
}

// fleetRamp is how long the fleet settles after the last join, besides
// the warm-up: a second per 500 agents. Each agent runs from its join
// (runFleetAgents), so the joins' pace is the fleet's ramp.
func fleetRamp(n int) time.Duration { return time.Duration(n) * time.Second / 500 }

// fleetAgentsConfig is what the agent process is told (fleetAgentEnv).
type fleetAgentsConfig struct {
	URL        string        `json:"url"`
	JoinString string        `json:"join_string"`
	CAPEM      []byte        `json:"ca_pem"`
	Agents     int           `json:"agents"`
	Interval   time.Duration `json:"interval"`
	Workload   time.Duration `json:"workload"`
	Watch      bool          `json:"watch"`
	Dir        string        `json:"dir"`
	Out        string        `json:"out"`
	// Profile, when set (GPUCLOUD_FLEET_PROFILE), is where the agent
	// process writes a CPU profile of its window and a goroutine dump at
	// the window's end (agents-*-N.*).
	Profile string `json:"profile,omitempty"`
}

// fleetAgentsResult is what the agent process writes to Out at its end.
type fleetAgentsResult struct {
	// Started and Exited are, per instance, when its workload started and
	// exited (the first run of each).
	Started     map[string]time.Time `json:"started"`
	Exited      map[string]time.Time `json:"exited"`
	Errors      int64                `json:"errors"`
	FirstErrors []string             `json:"first_errors"`
	// Kinds counts the agents' warnings and errors by kind (logKind).
	Kinds   map[string]int `json:"kinds"`
	Joining time.Duration  `json:"joining"`
}

// cpuTime is a process's CPU time, user and system.
type cpuTime time.Duration

func selfCPU(b *testing.B) cpuTime {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return cpuTime(time.Duration(ru.Utime.Nano() + ru.Stime.Nano()))
}

// machineBusy is the CPU time the whole machine has spent busy since it
// started (/proc/stat: every state but idle and iowait, in ticks of 1/100
// s); 0 where it cannot be read.
func machineBusy() cpuTime {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for i, x := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, _ := strconv.ParseInt(x, 10, 64)
		ticks += v
	}
	return cpuTime(time.Duration(ticks) * 10 * time.Millisecond)
}

// procCPU reads a process's CPU time from /proc/PID/stat (clock ticks of
// 1/100 s, as Linux's USER_HZ is); 0 when the process is gone.
func procCPU(pid int) cpuTime {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	// The command name is in parentheses and may hold spaces.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return cpuTime(time.Duration(ut+st) * 10 * time.Millisecond)
}

// rssMiB is a process's resident memory in MiB (VmRSS).
func rssMiB(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// pgBackends are the PIDs of the PostgreSQL sessions of the test's schema
// (pgtest names them by application_name).
func pgBackends(b *testing.B, s *Replica, db string) []int {
	i := strings.Index(db, "application_name=")
	if i < 0 {
		return nil
	}
	app := db[i+len("application_name="):]
	if j := strings.IndexAny(app, "& "); j >= 0 {
		app = app[:j]
	}
	rows, err := rawDB(b, s.Store).Query("SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			b.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// fleetReading is one reading of the counters the figures come from.
type fleetReading struct {
	at              time.Time
	server, agents  cpuTime
	pg              map[int]cpuTime
	store           sqlstore.Counts
	requests        float64
	serverGoroutine int
	rebuilds        int // the scheduler's full rebuilds of its fleet
}

func benchFleet(b *testing.B, db string, n int, watch bool) {
	ctx := context.Background()
	b.StopTimer()
	lim := httpapi.DefaultRateLimits()
	// One join token joins the whole fleet, at once.
	lim.Member = httpapi.Limit{Rate: 100000, Burst: 100000}
	var srvErrs atomic.Int64
	var srvFirst []string
	srvKinds := map[string]int{}
	srvLogMu := &sync.Mutex{}
	srvLog := slog.New(countingLog{n: &srvErrs, mu: srvLogMu, first: &srvFirst, level: slog.LevelDebug, kinds: srvKinds})
	s, err := Start(ctx, Config{DB: db, Listen: "127.0.0.1:0", Log: srvLog, Limits: lim})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	counts := service.Unwrap(s.Store).(interface{ Counts() sqlstore.Counts }).Counts
	admin := client.New(s.URL, s.AdminToken, s.HTTPClient())
	tn, err := admin.CreateTenant(ctx, "fleet")
	if err != nil {
		b.Fatal(err)
	}
	u, err := admin.CreateUser(ctx, tn.ID, api.CreateUserRequest{Name: "load"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := admin.SetQuota(ctx, tn.ID, api.QuotaSpec{Instances: 10000, GPUsPerModel: 100000,
		RequestsPerSecond: 1000, Burst: 1000}); err != nil {
		b.Fatal(err)
	}
	member := client.New(s.URL, u.Secret, s.HTTPClient())
	jt, err := admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "fleet", MaxUses: n,
		ExpiresAt: new(time.Now().Add(time.Hour))})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cfg := fleetAgentsConfig{URL: s.URL, JoinString: agentapi.JoinString(jt.Secret, s.CAFingerprint()), CAPEM: s.CAPEM(),
		Agents: n, Interval: fleetInterval, Workload: fleetWorkload, Watch: watch, Dir: dir, Out: filepath.Join(dir, "result.json"),
		Profile: os.Getenv("GPUCLOUD_FLEET_PROFILE")}
	child, ready, stop := startFleetAgents(b, cfg)
	defer stop()
	select {
	case <-ready:
	case <-time.After(10 * time.Minute):
		b.Fatalf("the %d agents did not join within 10 minutes", n)
	}
	// The agents run from their joins; the fleet settles.
	warmup, _ := fleetTimes()
	time.Sleep(fleetRamp(n) + warmup)

	pg := strings.HasPrefix(db, "postgres")
	read := func() fleetReading {
		r := fleetReading{at: time.Now(), server: selfCPU(b), agents: procCPU(child.Process.Pid), store: counts(),
			serverGoroutine: goruntime.NumGoroutine(), rebuilds: s.Scheduler.Rebuilds()}
		if pg {
			r.pg = map[int]cpuTime{}
			for _, pid := range pgBackends(b, s, db) {
				r.pg[pid] = procCPU(pid)
			}
		}
		return r
	}
	// The request counter is read outside the window: gathering the
	// registry reads the store too.
	reqs0 := requestCount(b, s)
	r0 := read()
	// The creates go out at a steady rate, each on its own, whatever
	// their latency: a tenant does not wait for the fleet.
	var (
		mu        sync.Mutex
		ids       []string
		createLat []time.Duration
		creating  sync.WaitGroup
		failed    atomic.Value
	)
	tick := time.NewTicker(time.Second / fleetCreateRate)
	_, window := fleetTimes()
	for end := time.Now().Add(window); time.Now().Before(end); {
		<-tick.C
		creating.Go(func() {
			t := time.Now()
			in, err := member.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x"}, randomKey())
			if err != nil {
				failed.CompareAndSwap(nil, err)
				return
			}
			mu.Lock()
			ids, createLat = append(ids, in.ID), append(createLat, time.Since(t))
			mu.Unlock()
		})
	}
	tick.Stop()
	r1 := read()
	if dir := os.Getenv("GPUCLOUD_FLEET_PROFILE"); dir != "" {
		// What the server's goroutines wait on at the window's end.
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("goroutines-%d.txt", n)))
		if err == nil {
			_ = pprof.Lookup("goroutine").WriteTo(f, 1)
			f.Close()
		}
	}
	creating.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	slices.Sort(createLat)
	r1.requests = requestCount(b, s)
	r0.requests = reqs0
	rss := rssMiB("self")

	// Every instance runs, exits and is stopped; then the agents end.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var left int
		if err := rawDB(b, s.Store).QueryRow("SELECT count(*) FROM instances WHERE state NOT IN ('stopped', 'failed', 'terminated')").Scan(&left); err != nil {
			b.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			// An overloaded server: the figures below are of the
			// instances that got through, and unfinished says how many
			// did not.
			b.Logf("%d of %d instances not done two minutes after the window", left, len(ids))
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	res := stop()

	// The delays, from the store's events and the agents' runtime.
	var startD, exitD []time.Duration
	var slowAt []string // the starts over a second: when placed (from the window's start), and the delay
	unfinished := 0
	for _, id := range ids {
		var evs []*cloud.Event
		if err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
			var err error
			evs, err = tx.ListEvents(ctx, cloud.EventFilter{InstanceID: id})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		var placed, changed time.Time
		for _, e := range evs {
			if e.Kind != cloud.EventInstanceState {
				continue
			}
			if e.To == cloud.Scheduled && placed.IsZero() {
				placed = e.Time
			}
			if (e.To == cloud.Stopping || e.To == cloud.Stopped || e.To == cloud.Failed) && changed.IsZero() {
				changed = e.Time
			}
		}
		for _, fe := range res.FirstErrors {
			if strings.Contains(fe, id) {
				for _, e := range evs {
					b.Logf("event %s %s %s->%s host=%s actor=%s reason=%s", e.Time.Format("15:04:05.000000"), e.Kind, e.From, e.To, e.HostID, e.Actor, e.Reason)
				}
				b.Logf("workload started %v", res.Started[id].Format("15:04:05.000000"))
				break
			}
		}
		started, ok1 := res.Started[id]
		exited, ok2 := res.Exited[id]
		if placed.IsZero() || !ok1 || !ok2 || changed.IsZero() {
			unfinished++
		}
		if !placed.IsZero() && ok1 {
			startD = append(startD, started.Sub(placed))
			if started.Sub(placed) > time.Second {
				slowAt = append(slowAt, fmt.Sprintf("%.1fs:%v", placed.Sub(r0.at).Seconds(), started.Sub(placed).Round(time.Millisecond)))
			}
		}
		if ok2 && !changed.IsZero() {
			exitD = append(exitD, changed.Sub(exited))
		}
	}
	slices.Sort(startD)
	slices.Sort(exitD)

	secs := r1.at.Sub(r0.at).Seconds()
	perAgent := func(c cpuTime) float64 { return float64(c) / float64(time.Microsecond) / float64(n) / secs }
	// A percentile of no samples (nothing got through) is -1.
	pct := func(ds []time.Duration, p float64) float64 {
		if len(ds) == 0 {
			return -1
		}
		return float64(percentile(ds, p)) / float64(time.Millisecond)
	}
	d := r1.store.Sub(r0.store)
	b.ReportMetric(perAgent(r1.server-r0.server), "srv-cpu-us/agent/s")
	b.ReportMetric(float64(r1.server-r0.server)/float64(time.Second)/secs, "srv-cores")
	if pg {
		var pgCPU cpuTime
		for pid, c := range r1.pg {
			if c0, ok := r0.pg[pid]; ok {
				pgCPU += c - c0
			} else {
				pgCPU += c // a session opened in the window
			}
		}
		b.ReportMetric(perAgent(pgCPU), "pg-cpu-us/agent/s")
	}
	b.ReportMetric(perAgent(r1.agents-r0.agents), "agent-cpu-us/agent/s")
	b.ReportMetric((r1.requests-r0.requests)/secs, "req/s")
	b.ReportMetric(float64(d.Begins)/secs, "store-tx/s")
	b.ReportMetric(float64(d.Statements+d.Begins+d.Commits+d.Rollbacks)/secs, "store-rt/s")
	b.ReportMetric(pct(startD, 0.50), "start-p50-ms")
	b.ReportMetric(pct(startD, 0.99), "start-p99-ms")
	b.ReportMetric(pct(exitD, 0.50), "exit-p50-ms")
	b.ReportMetric(pct(exitD, 0.99), "exit-p99-ms")
	b.ReportMetric(pct(createLat, 0.50), "create-p50-ms")
	b.ReportMetric(pct(createLat, 0.99), "create-p99-ms")
	b.ReportMetric(float64(res.Errors), "agent-errors")
	b.ReportMetric(float64(unfinished), "unfinished")
	b.ReportMetric(rss, "srv-MiB")
	b.ReportMetric(float64(r1.serverGoroutine), "srv-goroutines")
	b.ReportMetric(float64(r1.rebuilds-r0.rebuilds), "rebuilds")
	if len(srvFirst) > 0 {
		srvLogMu.Lock()
		b.Logf("server: %d log records, the first: %q; the commonest: %q", srvErrs.Load(), srvFirst, topKinds(srvKinds, 6))
		srvLogMu.Unlock()
	}
	if len(res.FirstErrors) > 0 {
		b.Logf("agent errors: %q; the commonest: %q", res.FirstErrors, topKinds(res.Kinds, 6))
	}
	b.Logf("slowest starts %v, exits %v; starts over 1 s (placed at, delay): %v", startD[max(0, len(startD)-5):], exitD[max(0, len(exitD)-5):], slowAt)
	b.Logf("%d agents joined in %s; %d instances over %.1fs", n, res.Joining.Round(time.Millisecond), len(ids), secs)
}

// requestCount is the server's count of the requests it answered.
func requestCount(b *testing.B, s *Replica) float64 {
	// A collector that reads the store may time out on an overloaded
	// server; the request counter is gathered all the same.
	mfs, err := s.Metrics.Registry.Gather()
	if err != nil {
		b.Logf("metrics: %v", err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "gpucloud_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// startFleetAgents starts the agent process. ready closes once every
// agent has joined and runs; stop ends the process (once) and returns
// what it wrote.
func startFleetAgents(b *testing.B, cfg fleetAgentsConfig) (*exec.Cmd, <-chan struct{}, func() fleetAgentsResult) {
	env, err := json.Marshal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFleetAgentProcess$", "-test.count=1", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), fleetAgentEnv+"="+string(env))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "fleet: ready" {
				close(ready)
			}
		}
	}()
	var once sync.Once
	var res fleetAgentsResult
	stop := func() fleetAgentsResult {
		once.Do(func() {
			stdin.Close()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					b.Errorf("agent process: %v\n%s", err, tail(stderr.String(), 4000))
					return
				}
			case <-time.After(2 * time.Minute):
				_ = cmd.Process.Kill()
				b.Errorf("agent process did not end\n%s", tail(stderr.String(), 4000))
				return
			}
			raw, err := os.ReadFile(cfg.Out)
			if err != nil {
				b.Errorf("agent process result: %v", err)
				return
			}
			if err := json.Unmarshal(raw, &res); err != nil {
				b.Errorf("agent process result: %v", err)
			}
		})
		return res
	}
	return cmd, ready, stop
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// TestFleetAgentProcess is the agent process of BenchmarkFleet: it runs
// only when started by it (fleetAgentEnv), joins the agents, says
// "fleet: ready" on its output, runs them until its input closes, and
// writes a fleetAgentsResult.
func TestFleetAgentProcess(t *testing.T) {
	raw := os.Getenv(fleetAgentEnv)
	if raw == "" {
		t.Skip("the agent process of BenchmarkFleet")
	}
	var cfg fleetAgentsConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := runFleetAgents(cfg, os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

// countingLog counts the warnings and errors the agents log, and keeps
// the first few.
type countingLog struct {
	n     *atomic.Int64
	mu    *sync.Mutex
	first *[]string
	level slog.Level // the least level counted (0: info and up; the agents' is warn)
	// kinds, when set, counts the records by kind (logKind).
	kinds map[string]int
}

// logKind is a log message without what varies between records of one
// kind (addresses, numbers).
var logKindNoise = regexp.MustCompile(`[0-9.:\[\]]+[0-9]`)

func logKind(msg string) string {
	msg = logKindNoise.ReplaceAllString(msg, "N")
	if len(msg) > 100 {
		msg = msg[:100]
	}
	return msg
}

// topKinds is the n commonest kinds of kinds, with their counts.
func topKinds(kinds map[string]int, n int) []string {
	keys := slices.SortedFunc(maps.Keys(kinds), func(a, b string) int { return kinds[b] - kinds[a] })
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, fmt.Sprintf("%d× %s", kinds[k], k))
	}
	return out
}

func (h countingLog) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h countingLog) Handle(_ context.Context, r slog.Record) error {
	if h.kinds != nil {
		h.mu.Lock()
		h.kinds[logKind(r.Message)]++
		h.mu.Unlock()
	}
	if h.n.Add(1) <= 5 {
		msg := r.Message
		r.Attrs(func(a slog.Attr) bool {
			msg += " " + a.String()
			return true
		})
		h.mu.Lock()
		*h.first = append(*h.first, msg)
		h.mu.Unlock()
	}
	return nil
}
func (h countingLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingLog) WithGroup(string) slog.Handler      { return h }

// fleetServer is an agent's client as the benchmark's polling agents see
// it: the agent protocol and the storage sweep's question, without the
// assignment watch (as against a server from before it) and without the
// session control channel (an idle WebSocket per host, which the
// benchmark leaves out). fleetWatcher adds the watch.
type fleetServer struct {
	agent.ControlPlane
	agent.GoneChecker
}

type fleetWatcher struct {
	agent.ControlPlane
	agent.GoneChecker
	agent.AssignmentWatcher
}

func runFleetAgents(cfg fleetAgentsConfig, stop io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	secret, _, err := agentapi.SplitJoinToken(cfg.JoinString)
	if err != nil {
		return err
	}
	joinHC, err := agentapi.TLSClient(cfg.CAPEM)
	if err != nil {
		return err
	}
	rt := newFleetRuntime(cfg.Workload)
	var errs atomic.Int64
	var first []string
	kinds, logMu := map[string]int{}, &sync.Mutex{}
	log := slog.New(countingLog{n: &errs, mu: logMu, first: &first, level: slog.LevelWarn, kinds: kinds})
	began := time.Now()
	agents := make([]*agent.Agent, cfg.Agents)
	jobs := make(chan int)
	var wg, run sync.WaitGroup
	var failed atomic.Value
	for range fleetJoiners {
		wg.Go(func() {
			joiner := agentapi.NewClient(cfg.URL, "", joinHC)
			for i := range jobs {
				if err := joinFleetAgent(ctx, cfg, joiner, secret, i, rt, log, agents); err != nil {
					failed.CompareAndSwap(nil, err)
					continue
				}
				// Each agent runs as soon as it joined, as a host
				// does: the joins' pace spreads the agents' starts
				// (and their TLS handshakes), and no host waits
				// silent for the rest of the fleet to join, longer
				// than the server's heartbeat timeout at 5,000.
				ag := agents[i]
				run.Go(func() {
					if err := ag.Run(ctx); err != nil {
						log.Error("run", "err", err)
					}
				})
			}
		})
	}
	for i := range cfg.Agents {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		cancel()
		run.Wait()
		return err
	}
	joining := time.Since(began)
	fmt.Fprintln(out, "fleet: ready")
	if cfg.Profile != "" {
		go profileFleetAgents(ctx, cfg)
	}
	_, _ = io.Copy(io.Discard, stop)
	cancel()
	run.Wait()
	started, exited := rt.record()
	logMu.Lock()
	raw, err := json.Marshal(fleetAgentsResult{Started: started, Exited: exited, Errors: errs.Load(), FirstErrors: first, Joining: joining, Kinds: kinds})
	logMu.Unlock()
	if err != nil {
		return err
	}
	return os.WriteFile(cfg.Out, raw, 0o600)
}

// profileFleetAgents writes the agent process's CPU profile over the
// benchmark's window and its goroutines at the window's end.
func profileFleetAgents(ctx context.Context, cfg fleetAgentsConfig) {
	warmup, window := fleetTimes()
	sleep(ctx, max(cfg.Interval, fleetRamp(cfg.Agents))+warmup)
	if ctx.Err() != nil {
		return
	}
	f, err := os.Create(filepath.Join(cfg.Profile, fmt.Sprintf("agents-cpu-%d.pprof", cfg.Agents)))
	if err != nil {
		return
	}
	defer f.Close()
	if pprof.StartCPUProfile(f) != nil {
		return
	}
	sleep(ctx, window)
	pprof.StopCPUProfile()
	if g, err := os.Create(filepath.Join(cfg.Profile, fmt.Sprintf("agents-goroutines-%d.txt", cfg.Agents))); err == nil {
		_ = pprof.Lookup("goroutine").WriteTo(g, 1)
		g.Close()
	}
}

// joinFleetAgent joins agent i as a host would (its own client key, CSR
// and certificate) and builds it over its own mutual-TLS client.
func joinFleetAgent(ctx context.Context, cfg fleetAgentsConfig, joiner *agentapi.Client, secret string, i int,
	rt *fleetRuntime, log *slog.Logger, agents []*agent.Agent) error {
	drv, err := sim.New(sim.Spec{ID: fmt.Sprintf("fleet-%05d", i), Zone: "zone-a", Rack: fmt.Sprintf("rack-%03d", i/32),
		GPUs: sim.GPUSpec{Model: "H100-80GB-SXM", Count: 8, NVLinkIslands: sim.Islands{8}}})
	if err != nil {
		return err
	}
	var joined *agent.Joined
	for try := 0; ; try++ {
		// Joins of one token race for its use count: a lost race is
		// retried.
		if joined, err = agent.Join(ctx, joiner, secret, drv); err == nil || try == 5 || cloud.ErrorCode(err) != cloud.Conflict {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("agent %d: %w", i, err)
	}
	cert, ok, err := joined.TLSCertificate()
	if err != nil || !ok {
		return fmt.Errorf("agent %d: client certificate: %v (issued %v)", i, err, ok)
	}
	hc, err := agentapi.TLSClient(cfg.CAPEM, cert)
	if err != nil {
		return err
	}
	c := agentapi.NewClient(cfg.URL, joined.Credential, hc)
	dataDir := filepath.Join(cfg.Dir, "hosts", joined.HostID)
	var srv agent.ControlPlane = fleetServer{c, c}
	if cfg.Watch {
		srv = fleetWatcher{c, c, c}
	}
	agents[i] = agent.New(srv, agent.Config{Driver: drv, Runtime: rt.host(joined.HostID), DataDir: dataDir,
		Interval: cfg.Interval, ManageMIG: true, Log: log.With("host", joined.HostID)})
	return nil
}

// fleetRuntime is a runtime that starts nothing: a workload "runs" for
// between run and twice run from its Start and then has exited with code
// 0. It records
// when each instance's first run started and exited. One fleetRuntime
// serves every host of the agent process (instance IDs are unique).
type fleetRuntime struct {
	run     time.Duration
	mu      sync.Mutex
	runs    map[string]*fleetRun
	started map[string]time.Time
	exited  map[string]time.Time
}

type fleetRun struct {
	start, exit time.Time
	stopped     bool
}

func newFleetRuntime(run time.Duration) *fleetRuntime {
	return &fleetRuntime{run: run, runs: map[string]*fleetRun{}, started: map[string]time.Time{}, exited: map[string]time.Time{}}
}

// host is the runtime as one host's agent uses it.
func (r *fleetRuntime) host(string) runtime.Runtime { return r }

func (r *fleetRuntime) record() (started, exited map[string]time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started, r.exited
}

func (r *fleetRuntime) Start(_ context.Context, s runtime.Spec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.runs[s.InstanceID]; ok {
		return nil
	}
	// Each workload runs from r.run to twice that, by its ID, so that its
	// exit falls anywhere in its agent's interval.
	h := fnv.New32a()
	h.Write([]byte(s.InstanceID))
	now := time.Now()
	run := r.run + time.Duration(h.Sum32()%1000)*r.run/1000
	r.runs[s.InstanceID] = &fleetRun{start: now, exit: now.Add(run)}
	if _, ok := r.started[s.InstanceID]; !ok {
		r.started[s.InstanceID], r.exited[s.InstanceID] = now, now.Add(run)
	}
	return nil
}

func (r *fleetRuntime) Stop(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	run, ok := r.runs[id]
	if !ok {
		return runtime.ErrNotFound
	}
	if now := time.Now(); now.Before(run.exit) {
		run.exit, run.stopped = now, true
	}
	return nil
}

func (r *fleetRuntime) Status(id string) (runtime.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run, ok := r.runs[id]
	if !ok {
		return runtime.Status{}, runtime.ErrNotFound
	}
	st := runtime.Status{State: runtime.StateRunning, StartedAt: run.start}
	if !time.Now().Before(run.exit) {
		st.State, st.ExitedAt = runtime.StateExited, run.exit
		if run.stopped {
			st.ExitCode, st.Signal = 143, "SIGTERM"
		}
	}
	return st, nil
}

func (r *fleetRuntime) Wait(ctx context.Context, id string) (runtime.Status, error) {
	for {
		st, err := r.Status(id)
		if err != nil || st.State == runtime.StateExited {
			return st, err
		}
		r.mu.Lock()
		exit := time.Now().Add(10 * time.Millisecond)
		if run, ok := r.runs[id]; ok {
			exit = run.exit
		}
		r.mu.Unlock()
		t := time.NewTimer(time.Until(exit))
		select {
		case <-ctx.Done():
			t.Stop()
			return st, ctx.Err()
		case <-t.C:
		}
	}
}

func (r *fleetRuntime) Logs(id string, offset int64) ([]byte, int64, error) {
	if _, err := r.Status(id); err != nil {
		return nil, 0, err
	}
	return nil, offset, nil
}

func (r *fleetRuntime) Remove(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	run, ok := r.runs[id]
	switch {
	case !ok:
		return runtime.ErrNotFound
	case time.Now().Before(run.exit):
		return runtime.ErrRunning
	}
	delete(r.runs, id)
	return nil
}
