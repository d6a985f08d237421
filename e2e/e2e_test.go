package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// The fleet: an HGX H100 board (8 GPUs on one NVLink island), a PCIe box
// of 2 L40S, and an HGX A100 board that only the bare-metal instance
// wants, so that metal always finds a whole empty host.
var fleetSpecs = []sim.Spec{
	{ID: "sim-h100", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "H100-80GB-SXM", Count: 8, NVLinkIslands: sim.Islands{8}}},
	{ID: "sim-l40s", Zone: "e2e-a", Rack: "rack-2", GPUs: sim.GPUSpec{Model: "L40S", Count: 2}},
	{ID: "sim-a100", Zone: "e2e-a", Rack: "rack-3", GPUs: sim.GPUSpec{Model: "A100-80GB-SXM", Count: 8, NVLinkIslands: sim.Islands{8}}},
}

// workload is one instance the tenant rents, and the host it can only
// land on.
type workload struct {
	name, offering, host string
}

// One instance of each mode.
var workloads = []workload{
	{"metal", "a100.metal", "sim-a100"},
	{"whole", "h100.2x", "sim-h100"},
	{"mig", "h100.mig.3g.40gb", "sim-h100"},
	{"shared", "l40s.shared.0.25", "sim-l40s"},
}

func (w workload) request() api.CreateInstanceRequest {
	return api.CreateInstanceRequest{Name: "e2e-" + w.name, Offering: w.offering, Command: envCommand,
		Env: map[string]string{"GREETING": "hello"}, Tags: map[string]string{"mode": w.name}}
}

// TestEndToEnd rents one instance of every mode on a simulated fleet run by
// real agents, checks what each workload sees, refuses bad requests
// without side effects, stops, starts and terminates, on both stores.
func TestEndToEnd(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testCloud(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testCloud(t, pgtest.URL(t)) })
}

func testCloud(t *testing.T, db string) {
	began := time.Now()
	phase := func(what string) { t.Logf("%-40s at %6.2fs", what, time.Since(began).Seconds()) }
	c := startCluster(t, db, fleetSpecs...)
	ctx := t.Context()
	acme, alice, aliceToken := c.member("acme", "alice")
	_, bob, _ := c.member("globex", "bob")
	phase("server up, 3 hosts joined")

	// Rent one instance of each mode, as a member of the tenant.
	ids := map[string]string{}
	for _, w := range workloads {
		in, err := alice.CreateInstance(ctx, w.request(), "create-"+w.name)
		if err != nil {
			t.Fatalf("create %s: %v", w.offering, err)
		}
		if in.State != cloud.Pending || in.TenantID != acme.ID || in.Offering != w.offering {
			t.Fatalf("created %s: %+v; want pending in tenant %s", w.offering, in, acme.ID)
		}
		ids[w.name] = in.ID
	}
	again, err := alice.CreateInstance(ctx, workloads[0].request(), "create-metal")
	if err != nil || again.ID != ids["metal"] {
		t.Fatalf("create retried with the same Idempotency-Key: %+v, %v; want instance %s again", again, err, ids["metal"])
	}
	running := map[string]*cloud.Instance{}
	for _, w := range workloads {
		running[w.name] = c.waitState(alice, ids[w.name], cloud.Running)
	}
	phase("4 instances running")

	// Every workload sees exactly its devices, its share, its metadata.
	metadataURLs := map[string]string{}
	for _, w := range workloads {
		env := c.checkWorkload(alice, w, running[w.name], 1)
		metadataURLs[w.name] = env[runtime.EnvMetadataURL]
	}
	c.checkPlacements()
	phase("environments, metadata, placements ok")

	// Bad input, as a new user would send it: refused with the right code,
	// and nothing changes.
	c.badInput(alice, bob, aliceToken, acme.ID, running["whole"].ID)
	phase("bad input refused")

	// Stop the bare-metal instance: its host is released, so that a new
	// 8-GPU instance takes exactly those GPUs; started again it waits for
	// capacity and runs once the new one is gone.
	metal := c.get(alice, ids["metal"])
	st, err := alice.StopInstance(ctx, metal.ID, metal.Version)
	if err != nil || st.State != cloud.Stopping {
		t.Fatalf("stop %s: %+v, %v; want stopping", metal.ID, st, err)
	}
	stopped := c.waitState(alice, metal.ID, cloud.Stopped)
	if stopped.HostID != "" || stopped.Placement != nil {
		t.Fatalf("stopped instance still holds host %q placement %+v", stopped.HostID, stopped.Placement)
	}
	a100 := c.hosts["sim-a100"]
	c.until("the stopped workload to exit", func() (bool, string) {
		r := a100.rt.running()
		return !slices.Contains(r, metal.ID), fmt.Sprintf("running %v", r)
	})
	phase("metal stopped")
	probeW := workload{"probe", "a100.8x", "sim-a100"}
	probe, err := alice.CreateInstance(ctx, probeW.request(), "create-probe")
	if err != nil {
		t.Fatalf("create %s: %v", probeW.offering, err)
	}
	probeIn := c.waitState(alice, probe.ID, cloud.Running)
	metadataURLs["probe"] = c.checkWorkload(alice, probeW, probeIn, 1)[runtime.EnvMetadataURL]
	var metalGPUs, probeGPUs []string
	for _, d := range running["metal"].Placement.Devices {
		metalGPUs = append(metalGPUs, d.UUID)
	}
	for _, d := range probeIn.Placement.Devices {
		probeGPUs = append(probeGPUs, d.UUID)
	}
	if !slices.Equal(metalGPUs, probeGPUs) {
		t.Fatalf("the new instance got %v, want the stopped instance's GPUs %v", probeGPUs, metalGPUs)
	}
	phase("released GPUs placed again")
	st, err = alice.StartInstance(ctx, metal.ID, stopped.Version)
	if err != nil || st.State != cloud.Pending {
		t.Fatalf("start %s: %+v, %v; want pending", metal.ID, st, err)
	}
	c.until("the started instance to wait for capacity, saying why", func() (bool, string) {
		in := c.get(alice, metal.ID)
		return in.State == cloud.Pending && in.Reason != "", fmt.Sprintf("%s (%s)", in.State, in.Reason)
	})
	if _, err := alice.TerminateInstance(ctx, probe.ID, 0); err != nil {
		t.Fatalf("terminate %s: %v", probe.ID, err)
	}
	c.waitState(alice, probe.ID, cloud.Terminated)
	restarted := c.waitState(alice, metal.ID, cloud.Running)
	metadataURLs["metal (run 2)"] = c.checkWorkload(alice, workloads[0], restarted, 2)[runtime.EnvMetadataURL]
	c.checkPlacements()
	c.wantMoves(alice, metal.ID, cloud.Running, cloud.Stopping, cloud.Stopped, cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running)
	phase("metal started again")

	// Terminate everything.
	for _, in := range c.instances(alice, client.ListInstancesOptions{}) {
		if in.State == cloud.Terminated {
			continue
		}
		out, err := alice.TerminateInstance(ctx, in.ID, 0)
		if err != nil || out.State != cloud.Terminating {
			t.Fatalf("terminate %s (%s): %+v, %v; want terminating", in.ID, in.State, out, err)
		}
	}
	for _, in := range c.instances(alice, client.ListInstancesOptions{}) {
		c.waitState(alice, in.ID, cloud.Terminated)
		evs, err := alice.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 1000})
		if err != nil || len(evs.Events) == 0 || evs.Events[len(evs.Events)-1].To != cloud.Terminated {
			t.Errorf("events of %s: %+v, %v; want the last to end in terminated", in.ID, evs, err)
		}
	}
	phase("all terminated")
	c.checkEmpty(metadataURLs)
	phase("hosts and agents empty")
}

// checkWorkload checks one running instance: its placement (on the host it
// must be on, the devices its offering takes, with the UUIDs the host
// reported), the environment its workload printed into the logs the API
// serves, and what its metadata endpoint answers. run counts the times the
// instance was started. It returns the workload's environment.
func (c *cluster) checkWorkload(cl *client.Client, w workload, in *cloud.Instance, run int) map[string]string {
	t := c.t
	t.Helper()
	ctx := t.Context()
	p := in.Placement
	if in.HostID != w.host || p == nil || p.HostID != w.host {
		t.Fatalf("%s (%s) is on %q with placement %+v; want host %s", in.ID, w.offering, in.HostID, p, w.host)
	}
	o, err := catalog.Default().Offering(w.offering)
	if err != nil {
		t.Fatal(err)
	}
	spec := c.hostSpecs()[w.host].Spec
	shape := func(ok bool) {
		if !ok {
			t.Fatalf("%s (%s): placement %+v does not take what the offering does", in.ID, w.offering, p)
		}
	}
	switch o.Mode {
	case catalog.ModeMetal:
		shape(p.Metal && len(spec.GPUs) == 8 && len(p.Devices) == len(spec.GPUs))
	case catalog.ModeGPU:
		shape(!p.Metal && len(p.Devices) == o.GPUs)
	case catalog.ModeMIG:
		shape(len(p.Devices) == 1 && p.Devices[0].Kind == fleet.MIGSlice && p.Devices[0].MIGProfile == o.MIGProfile)
	case catalog.ModeShared:
		shape(len(p.Devices) == 1 && p.Devices[0].Kind == fleet.Share && p.Devices[0].Milli == o.ShareMilli &&
			p.Devices[0].MemoryMiB == o.ShareMemoryMiB)
	default:
		t.Fatalf("offering %s has mode %s", o.Name, o.Mode)
	}
	// The expected devices: the GPU UUIDs the host's agent reported, and
	// for MIG the UUID of the MIG instance the agent made at the
	// placement's slot, which its heartbeat reported back.
	var want []string
	for i, d := range p.Devices {
		if d.GPU < 0 || d.GPU >= len(spec.GPUs) {
			t.Fatalf("%s: placement names gpu %d of a %d-GPU host", in.ID, d.GPU, len(spec.GPUs))
		}
		g := spec.GPUs[d.GPU]
		if g.UUID != sim.GPUUUID(w.host, d.GPU) || d.UUID != g.UUID {
			t.Fatalf("%s: gpu %d is %s in the placement, %s in the host's inventory, %s on the simulator",
				in.ID, d.GPU, d.UUID, g.UUID, sim.GPUUUID(w.host, d.GPU))
		}
		if o.Mode == catalog.ModeMetal && (d.GPU != i || d.Kind != fleet.Whole) {
			t.Fatalf("%s: bare-metal device %d is %+v, want gpu %d whole", in.ID, i, d, i)
		}
		if d.Kind != fleet.MIGSlice {
			want = append(want, g.UUID)
			continue
		}
		c.until(fmt.Sprintf("host %s's heartbeat to show the MIG instance of %s", w.host, in.ID), func() (bool, string) {
			g := c.hostSpecs()[w.host].Spec.GPUs[d.GPU]
			for _, mi := range g.Instances {
				if mi.ProfileID == d.MIGProfileID && mi.Start == d.MIGStart && mi.Alloc == in.ID {
					return g.MIG, ""
				}
			}
			return false, fmt.Sprintf("gpu %d: MIG mode %v, instances %+v", d.GPU, g.MIG, g.Instances)
		})
		want = append(want, sim.MIGUUID(w.host, d.GPU, d.MIGProfileID, d.MIGStart))
	}
	if got, err := c.hosts[w.host].sim.Devices(ctx, p); err != nil || !slices.Equal(got, want) {
		t.Fatalf("%s: the simulated host gives the placement %v (%v), want %v", in.ID, got, err, want)
	}
	if len(want) != len(slices.Compact(slices.Sorted(slices.Values(want)))) {
		t.Fatalf("%s: a device twice in %v", in.ID, want)
	}

	// The server records what the workload sees, MIG UUIDs included
	// (describe shows them), from the agent's running report.
	c.until(fmt.Sprintf("%s's visible device UUIDs recorded", in.ID), func() (bool, string) {
		got := c.get(cl, in.ID)
		var seen []string
		if got.Placement != nil {
			for _, d := range got.Placement.Devices {
				seen = append(seen, d.VisibleUUID)
			}
		}
		return slices.Equal(seen, want), fmt.Sprintf("recorded %v, want %v", seen, want)
	})

	env := c.workloadEnv(cl, in.ID, run)
	devices := strings.Join(want, ",")
	wantEnv := map[string]string{
		runtime.EnvCUDAVisible: devices, runtime.EnvNVIDIAVisible: devices,
		runtime.EnvInstanceID: in.ID, "GREETING": "hello",
		runtime.EnvShareMilli: "", runtime.EnvShareMemoryMiB: "", runtime.EnvMPSThreads: "",
	}
	if o.Mode == catalog.ModeShared {
		wantEnv[runtime.EnvShareMilli] = "250"
		wantEnv[runtime.EnvShareMemoryMiB] = strconv.FormatInt(o.ShareMemoryMiB, 10)
		wantEnv[runtime.EnvMPSThreads] = "25"
		if o.ShareMemoryMiB <= 0 {
			t.Fatalf("offering %s has no GPU memory", o.Name)
		}
	}
	for k, v := range wantEnv {
		if env[k] != v {
			t.Errorf("%s (%s): the workload sees %s=%q, want %q", in.ID, w.offering, k, env[k], v)
		}
	}
	if o.Mode == catalog.ModeMetal && len(strings.Split(env[runtime.EnvCUDAVisible], ",")) != 8 {
		t.Errorf("%s: bare metal sees %q, want all 8 GPUs", in.ID, env[runtime.EnvCUDAVisible])
	}

	url := env[runtime.EnvMetadataURL]
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("%s: %s=%q, want a loopback URL", in.ID, runtime.EnvMetadataURL, url)
	}
	doc, err := c.fetchMetadata(url)
	if err != nil {
		t.Fatalf("%s: metadata: %v", in.ID, err)
	}
	if doc.ID != in.ID || doc.Offering != o.Name || !slices.Equal(doc.GPUs, want) || doc.Host != w.host ||
		doc.Zone != spec.Zone || !reflect.DeepEqual(doc.Tags, map[string]string{"mode": w.name}) {
		t.Errorf("%s: metadata answers %+v; want id %s, offering %s, gpus %v, host %s, zone %s, tags mode=%s",
			in.ID, doc, in.ID, o.Name, want, w.host, spec.Zone, w.name)
	}
	return env
}

// checkPlacements checks every placement held now against the others,
// directly and through a fleet built from the hosts' inventories.
func (c *cluster) checkPlacements() {
	c.t.Helper()
	for _, err := range overlaps(c.instances(c.admin, client.ListInstancesOptions{States: cloud.HoldingStates()})) {
		c.t.Error(err)
	}
	c.placementFleet()
}

// wantMoves checks that the instance's state events contain the moves
// through the given states, in order, one after the other.
func (c *cluster) wantMoves(cl *client.Client, id string, states ...cloud.State) {
	c.t.Helper()
	evs, err := cl.InstanceEvents(c.t.Context(), id, client.EventsOptions{Limit: 1000})
	if err != nil {
		c.t.Fatalf("events of %s: %v", id, err)
	}
	var moves []string
	for _, e := range evs.Events {
		// The API records moves as instance.state, the scheduler as
		// instance.scheduled: every event with a target state is a move.
		if e.To != "" {
			moves = append(moves, string(e.From)+">"+string(e.To))
		}
	}
	var want []string
	for i := 1; i < len(states); i++ {
		want = append(want, string(states[i-1])+">"+string(states[i]))
	}
	if !strings.Contains(" "+strings.Join(moves, " ")+" ", " "+strings.Join(want, " ")+" ") {
		c.t.Errorf("events of %s: moves %v, want %v among them", id, moves, want)
	}
}

// checkEmpty checks that nothing is left once every instance is
// terminated: no allocation on any host (as the API reports it, and as a
// scheduler rebuilding from the store sees it), no MIG instance or MIG mode
// the agents made, no workload running, no assignment, no metadata
// endpoint answering.
func (c *cluster) checkEmpty(metadataURLs map[string]string) {
	t := c.t
	t.Helper()
	ctx := t.Context()
	if held := c.instances(c.admin, client.ListInstancesOptions{States: cloud.HoldingStates()}); len(held) > 0 {
		t.Fatalf("%d instances still hold an allocation: %+v", len(held), held)
	}
	f := c.placementFleet()
	if n := len(f.Allocations()); n != 0 {
		t.Errorf("%d allocations left", n)
	}
	for _, h := range f.Hosts {
		if !h.Empty() || h.UsedCPUMilli != 0 || h.UsedMemoryMiB != 0 {
			t.Errorf("host %s still has allocations: %+v", h.ID, h)
		}
	}
	sch := controller.NewScheduler(c.srv.Store, nil)
	if err := sch.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(sch.Fleet().Allocations()); n != 0 {
		t.Errorf("a scheduler rebuilt from the store sees %d allocations", n)
	}
	for _, h := range c.hosts {
		c.until("host "+h.id+" to run nothing", func() (bool, string) {
			r := h.rt.running()
			return len(r) == 0, fmt.Sprintf("running %v", r)
		})
		as, err := h.api.Assignments(ctx)
		if err != nil || len(as.Assignments) != 0 {
			t.Errorf("host %s still has assignments: %+v, %v", h.id, as, err)
		}
		c.until("host "+h.id+" to have no MIG layout left", func() (bool, string) {
			inv, err := h.sim.Inventory(ctx)
			if err != nil {
				return false, err.Error()
			}
			rec := c.hostSpecs()[h.id].Spec
			for i, g := range inv.Host.GPUs {
				if g.MIG || len(g.Instances) > 0 {
					return false, fmt.Sprintf("simulator: gpu %d MIG %v instances %+v", i, g.MIG, g.Instances)
				}
				if r := rec.GPUs[i]; r.MIG || len(r.Instances) > 0 {
					return false, fmt.Sprintf("last heartbeat: gpu %d MIG %v instances %+v", i, r.MIG, r.Instances)
				}
			}
			return true, ""
		})
	}
	for name, url := range metadataURLs {
		c.until("the metadata endpoint of "+name+" to close", func() (bool, string) {
			doc, err := c.fetchMetadata(url)
			return err != nil, fmt.Sprintf("still answers %+v", doc)
		})
	}
}

// badInput sends what a new user gets wrong. Every request must be
// refused with the right code (and, where the status says more, the
// status), and leave instances, events, volumes and tenants as they were.
func (c *cluster) badInput(alice, bob *client.Client, aliceToken, tenantID, target string) {
	t := c.t
	ctx := t.Context()
	c.prev = nil
	defer func() { c.prev = nil }()
	raw := func(a answer) (int, error) {
		if a.status < 400 {
			return a.status, nil
		}
		return a.status, &a.err
	}
	post := func(path, token, ctype string, body []byte, hdr map[string]string) func() (int, error) {
		return func() (int, error) { return raw(c.raw("POST", path, token, ctype, body, hdr)) }
	}
	get := func(path, token string) func() (int, error) {
		return func() (int, error) { return raw(c.raw("GET", path, token, "", nil, nil)) }
	}
	viaClient := func(err error) (int, error) { return 0, err }
	const js = "application/json"
	valid := `{"offering":"h100.1x","command":["/bin/true"]}`

	// Unknown offering.
	c.refused("unknown offering", cloud.Invalid, http.StatusBadRequest,
		post("/v1/instances", aliceToken, js, []byte(`{"offering":"h100.16x","command":["/bin/true"]}`), nil))
	c.refused("unknown offering (client)", cloud.Invalid, 0, func() (int, error) {
		_, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "b200.1x"}, "bad-offering")
		var ce *cloud.Error
		if errors.As(err, &ce) && ce.Details["field"] != "offering" {
			t.Errorf("unknown offering: details %v do not name the field", ce.Details)
		}
		return viaClient(err)
	})
	c.refused("no offering", cloud.Invalid, http.StatusBadRequest,
		post("/v1/instances", aliceToken, js, []byte(`{"command":["/bin/true"]}`), nil))

	// Malformed JSON.
	for name, body := range map[string]string{
		"truncated JSON":        `{"offering":"h100.1x","command":["/bin/true"`,
		"not JSON":              `offering=h100.1x`,
		"JSON array":            `["h100.1x"]`,
		"wrong type":            `{"offering":1}`,
		"unknown field":         `{"offering":"h100.1x","gpus":-2}`,
		"two objects":           valid + valid,
		"empty body":            ``,
		"command not an array":  `{"offering":"h100.1x","command":"/bin/true"}`,
		"env not string values": `{"offering":"h100.1x","env":{"N":1}}`,
	} {
		c.refused(name, cloud.Invalid, http.StatusBadRequest, post("/v1/instances", aliceToken, js, []byte(body), nil))
	}
	c.refused("form content type", cloud.Invalid, http.StatusUnsupportedMediaType,
		post("/v1/instances", aliceToken, "application/x-www-form-urlencoded", []byte(valid), nil))

	// Negative and oversize fields.
	long := strings.Repeat("a", 64)
	for name, req := range map[string]api.CreateInstanceRequest{
		"64-character name":  {Offering: "h100.1x", Name: long},
		"257 arguments":      {Offering: "h100.1x", Command: slices.Repeat([]string{"x"}, 257)},
		"65 KiB argument":    {Offering: "h100.1x", Command: []string{"/bin/echo", strings.Repeat("x", 65<<10)}},
		"NUL in argument":    {Offering: "h100.1x", Command: []string{"/bin/echo", "a\x00b"}},
		"bad env name":       {Offering: "h100.1x", Env: map[string]string{"1X": "y"}},
		"17 zones":           {Offering: "h100.1x", Zones: slices.Repeat([]string{"e2e-a"}, 17)},
		"bad label selector": {Offering: "h100.1x", Labels: []string{"gpu type=h100"}},
		"empty volume ID":    {Offering: "h100.1x", Volumes: []string{""}},
		"unknown volume":     {Offering: "h100.1x", Volumes: []string{"v-doesnotexist"}},
	} {
		c.refused(name, cloud.Invalid, 0, func() (int, error) {
			_, err := alice.CreateInstance(ctx, req, "")
			return viaClient(err)
		})
	}
	c.refused("256-character Idempotency-Key", cloud.Invalid, http.StatusBadRequest,
		post("/v1/instances", aliceToken, js, []byte(valid), map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}))
	c.refused("negative volume size", cloud.Invalid, 0, func() (int, error) {
		_, err := alice.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: -1}, "")
		return viaClient(err)
	})
	c.refused("oversize volume", cloud.Invalid, 0, func() (int, error) {
		_, err := alice.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: 1 << 40}, "")
		return viaClient(err)
	})
	c.refused("negative quota", cloud.Invalid, 0, func() (int, error) {
		_, err := c.admin.SetQuota(ctx, tenantID, api.QuotaSpec{Instances: -1})
		return viaClient(err)
	})
	c.refused("negative GPU quota", cloud.Invalid, 0, func() (int, error) {
		_, err := c.admin.SetQuota(ctx, tenantID, api.QuotaSpec{GPUs: map[string]float64{"H100-80GB-SXM": -8}})
		return viaClient(err)
	})
	c.refused("negative limit", cloud.Invalid, http.StatusBadRequest, get("/v1/instances?limit=-1", aliceToken))
	c.refused("oversize limit", cloud.Invalid, http.StatusBadRequest, get("/v1/instances?limit=1000000", aliceToken))
	c.refused("negative log offset", cloud.Invalid, http.StatusBadRequest, get("/v1/instances/"+target+"/logs?offset=-1", aliceToken))
	c.refused("negative If-Match", cloud.Invalid, http.StatusBadRequest,
		post("/v1/instances/"+target+"/stop", aliceToken, "", nil, map[string]string{"If-Match": `"-1"`}))

	// A 2 MiB body: twice the limit.
	big := []byte(`{"offering":"h100.1x","name":"` + strings.Repeat("a", 2<<20) + `"}`)
	c.refused("2 MiB body", cloud.Invalid, http.StatusRequestEntityTooLarge, post("/v1/instances", aliceToken, js, big, nil))

	// Wrong, missing and misused tokens.
	// Alice's token with its last character changed: well formed, wrong.
	wrong := aliceToken[:len(aliceToken)-1] + "a"
	if strings.HasSuffix(aliceToken, "a") {
		wrong = aliceToken[:len(aliceToken)-1] + "b"
	}
	c.refused("wrong token", cloud.Unauthenticated, http.StatusUnauthorized, post("/v1/instances", wrong, js, []byte(valid), nil))
	c.refused("made-up token", cloud.Unauthenticated, http.StatusUnauthorized, post("/v1/instances", "gpc_nope_nope", js, []byte(valid), nil))
	c.refused("no token", cloud.Unauthenticated, http.StatusUnauthorized, post("/v1/instances", "", js, []byte(valid), nil))
	c.refused("wrong token (client)", cloud.Unauthenticated, 0, func() (int, error) {
		_, err := client.New(c.srv.URL, wrong, c.hc).CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x"}, "")
		return viaClient(err)
	})
	c.refused("member on an admin route", cloud.PermissionDenied, http.StatusForbidden,
		post("/v1/tenants", aliceToken, js, []byte(`{"name":"evil"}`), nil))
	agentCred := client.New(c.srv.URL, c.hosts["sim-h100"].cred, c.hosts["sim-h100"].hc)
	c.refused("agent credential on a tenant route", cloud.PermissionDenied, 0, func() (int, error) {
		_, err := agentCred.GetInstance(ctx, target)
		return viaClient(err)
	})

	// Another tenant's instance answers as if it did not exist.
	for name, do := range map[string]func() error{
		"get":       func() error { _, err := bob.GetInstance(ctx, target); return err },
		"stop":      func() error { _, err := bob.StopInstance(ctx, target, 0); return err },
		"start":     func() error { _, err := bob.StartInstance(ctx, target, 0); return err },
		"terminate": func() error { _, err := bob.TerminateInstance(ctx, target, 0); return err },
		"logs":      func() error { _, err := bob.InstanceLogs(ctx, target, 0); return err },
		"events":    func() error { _, err := bob.InstanceEvents(ctx, target, client.EventsOptions{}); return err },
		"create in its tenant": func() error {
			_, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Tenant: tenantID, Offering: "h100.1x"}, "")
			return err
		},
	} {
		c.refused("another tenant's instance: "+name, cloud.NotFound, 0, func() (int, error) { return viaClient(do()) })
	}
	if l, err := bob.ListInstances(ctx, client.ListInstancesOptions{}); err != nil || len(l.Instances) != 0 {
		t.Errorf("another tenant lists %+v, %v; want nothing", l, err)
	}
	c.refused("a made-up instance", cloud.NotFound, http.StatusNotFound, get("/v1/instances/i-doesnotexist", aliceToken))

	// Stop with a stale If-Match.
	in := c.get(alice, target)
	if in.Version < 2 {
		t.Fatalf("a running instance at version %d", in.Version)
	}
	c.refused("stop with a stale If-Match", cloud.Conflict, 0, func() (int, error) {
		_, err := alice.StopInstance(ctx, target, in.Version-1)
		var ce *cloud.Error
		if errors.As(err, &ce) && fmt.Sprint(ce.Details["current_version"]) != strconv.FormatInt(in.Version, 10) {
			t.Errorf("stale If-Match: details %v, want current_version %d", ce.Details, in.Version)
		}
		return viaClient(err)
	})
	c.refused("terminate with a stale If-Match (raw)", cloud.Conflict, http.StatusConflict,
		post("/v1/instances/"+target+"/terminate", aliceToken, "", nil, map[string]string{"If-Match": strconv.Quote(strconv.FormatInt(in.Version-1, 10))}))
	if now := c.get(alice, target); now.State != cloud.Running || now.Version != in.Version {
		t.Fatalf("after the refused requests %s is %s v%d, want running v%d", target, now.State, now.Version, in.Version)
	}
}

// refused runs one bad request: it must fail with code (and, when status
// is not 0, that HTTP status) and change nothing. The snapshot after one
// bad request is the one before the next (c.prev), as long as the caller
// changes nothing in between.
func (c *cluster) refused(what string, code cloud.Code, status int, do func() (int, error)) {
	c.t.Helper()
	before := c.prev
	if before == nil {
		before = new(c.snapshot())
	}
	got, err := do()
	var ce *cloud.Error
	switch {
	case !errors.As(err, &ce):
		c.t.Errorf("%s: answered %d, %v; want %s", what, got, err, code)
	case ce.Code != code:
		c.t.Errorf("%s: answered %d %s (%s); want %s", what, got, ce.Code, ce.Message, code)
	case status != 0 && got != status:
		c.t.Errorf("%s: answered status %d (%s); want %d", what, got, ce.Code, status)
	}
	after := c.snapshot()
	if !reflect.DeepEqual(*before, after) {
		c.t.Errorf("%s changed something:\nbefore %+v\nafter  %+v", what, *before, after)
	}
	c.prev = &after
}
