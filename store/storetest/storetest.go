// Package storetest is the conformance suite of cloud.Store: every backend
// runs it (store/sqlite on a file and in memory, store/postgres against a
// real server), so that code written against one behaves the same on the
// other. It checks the contract of cloud.Store and cloud.Tx as documented
// there, plus the choices the SQL stores document: lists in ID order, times
// kept in UTC with microsecond precision, JSON fields that round-trip
// exactly.
package storetest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// Run runs the suite. open returns a new, empty store for one test and
// arranges (t.Cleanup) to close it and remove its data. The tests run in
// parallel, each on its own store.
func Run(t *testing.T, open func(t *testing.T) cloud.Store) {
	for _, c := range []struct {
		name string
		test func(*testing.T, cloud.Store)
	}{
		{"Dialect", testDialect},
		{"Tenants", testTenants},
		{"Users", testUsers},
		{"Tokens", testTokens},
		{"TokenByHash", testTokenByHash},
		{"TokenUses", testTokenUses},
		{"ConcurrentTokenUse", testConcurrentTokenUse},
		{"Quotas", testQuotas},
		{"ClusterSecrets", testClusterSecrets},
		{"Instances", testInstances},
		{"InstanceErrors", testInstanceErrors},
		{"Idempotency", testIdempotency},
		{"CreateInstances", testCreateInstances},
		{"UpdateInstance", testUpdateInstance},
		{"UpdateInstanceStates", testUpdateInstanceStates},
		{"ListInstances", testListInstances},
		{"Hosts", testHosts},
		{"AgentTokens", testAgentTokens},
		{"Heartbeat", testHeartbeat},
		{"StampHeartbeats", testStampHeartbeats},
		{"ListSilentHosts", testListSilentHosts},
		{"BumpHosts", testBumpHosts},
		{"HostStamp", testHostStamp},
		{"Counts", testCounts},
		{"UpdateInstances", testUpdateInstances},
		{"AppendEvents", testAppendEvents},
		{"Logs", testLogs},
		{"Volumes", testVolumes},
		{"SharedVolumes", testSharedVolumes},
		{"Events", testEvents},
		{"ListEvents", testListEvents},
		{"EventFilter", testEventFilter},
		{"Times", testTimes},
		{"Rollback", testRollback},
		{"TxErrors", testTxErrors},
		{"ConcurrentIncrement", testConcurrentIncrement},
		{"ConcurrentIfMatch", testConcurrentIfMatch},
		{"ConcurrentIdempotentCreate", testConcurrentIdempotentCreate},
		{"Prices", testPrices},
		{"Commitments", testCommitments},
		{"SpotRequests", testSpotRequests},
		{"SpotPrices", testSpotPrices},
		{"SpotInstances", testSpotInstances},
		{"Addresses", testAddresses},
		{"Budgets", testBudgets},
		{"UsageLedger", testUsageLedger},
		{"OpenUsage", testOpenUsage},
		{"VolumeIdempotency", testVolumeIdempotency},
		{"AddressIdempotency", testAddressIdempotency},
		{"PriceIdempotency", testPriceIdempotency},
		{"ByKey", testByKey},
		{"ConcurrentIdempotentCreates", testConcurrentIdempotentCreates},
		{"Groups", testGroups},
		{"GroupNormalization", testGroupNormalization},
		{"GroupIdempotency", testGroupIdempotency},
		{"GroupNames", testGroupNames},
		{"GroupErrors", testGroupErrors},
		{"Metrics", testMetrics},
		{"GroupHistory", testGroupHistory},
		{"GroupInstances", testGroupInstances},
		{"NetworkResources", testNetworkResources},
		{"NetworkDetails", testNetworkDetails},
		{"ConcurrentVNIs", testConcurrentVNIs},
		{"NetworkInstances", testNetworkInstances},
		{"SubnetAddresses", testSubnetAddresses},
		{"Keys", testKeys},
		{"Replicas", testReplicas},
		{"Sessions", testSessions},
		{"VolumeHosts", testVolumeHosts},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.test(t, open(t))
		})
	}
}

// t0 has nanoseconds and a zone other than UTC, so that every test checks
// the stores' normalization of times to UTC microseconds.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.FixedZone("IST", 5*3600+1800))

// us is what the stores keep of a time.
func us(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// inTx runs fn in a transaction and fails the test on any error.
func inTx(t *testing.T, s cloud.Store, fn func(cloud.Tx) error) {
	t.Helper()
	if err := s.Tx(context.Background(), fn); err != nil {
		t.Fatalf("Tx: %v", err)
	}
}

// try runs fn in a transaction and returns its error, for cases that expect
// one.
func try(s cloud.Store, fn func(cloud.Tx) error) error {
	return s.Tx(context.Background(), fn)
}

// read runs a query in its own transaction.
func read[T any](t *testing.T, s cloud.Store, fn func(cloud.Tx) (T, error)) (T, error) {
	t.Helper()
	var v T
	err := s.Tx(context.Background(), func(tx cloud.Tx) error {
		var err error
		v, err = fn(tx)
		return err
	})
	return v, err
}

// mustRead is read that fails the test on an error.
func mustRead[T any](t *testing.T, s cloud.Store, fn func(cloud.Tx) (T, error)) T {
	t.Helper()
	v, err := read(t, s, fn)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return v
}

// wantCode checks the cloud error code of err ("" for no error) and, when
// msg is not empty, that the message contains it.
func wantCode(t *testing.T, desc string, err error, code cloud.Code, msg string) {
	t.Helper()
	if got := cloud.ErrorCode(err); got != code {
		t.Errorf("%s: error code %q (%v), want %q", desc, got, err, code)
		return
	}
	if msg != "" && (err == nil || !strings.Contains(err.Error(), msg)) {
		t.Errorf("%s: error %v, want it to mention %q", desc, err, msg)
	}
}

// wantEqual compares with reflect.DeepEqual, which is what "round-trips
// exactly" means: nil and empty slices and maps stay apart, times carry the
// same location.
func wantEqual[T any](t *testing.T, desc string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %#v\nwant %#v", desc, got, want)
	}
}

// ids returns the IDs of instances, in order.
func ids(ins []*cloud.Instance) []string {
	out := []string{}
	for _, in := range ins {
		out = append(out, in.ID)
	}
	return out
}

var ctx = context.Background()

func testDialect(t *testing.T, s cloud.Store) {
	if d := s.Dialect(); d != "sqlite" && d != "postgres" {
		t.Errorf("Dialect() = %q, want sqlite or postgres", d)
	}
}

// seedTenants creates tenants with the given IDs (named after them).
func seedTenants(t *testing.T, s cloud.Store, ids ...string) {
	t.Helper()
	inTx(t, s, func(tx cloud.Tx) error {
		for _, id := range ids {
			if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: id, Name: "name-" + id, CreatedAt: t0}); err != nil {
				return err
			}
		}
		return nil
	})
}

// placement is a placement with one device of every kind and a float score
// that has no short decimal form.
func placement(id, host string) *fleet.Placement {
	return &fleet.Placement{
		ID: id, HostID: host, CPUMilli: 16000, MemoryMiB: 131072,
		Devices: []fleet.Device{
			{GPU: 0, UUID: "GPU-0f3c", Kind: fleet.Whole},
			{GPU: 1, UUID: "GPU-1a2b", Kind: fleet.MIGSlice, MIGProfileID: 9, MIGProfile: "3g.40gb",
				MIGStart: 4, MIGSlots: 4, MIGSlices: 3, MIGMedia: true, EnableMIG: true},
			{GPU: 2, Kind: fleet.Share, Milli: 250, MemoryMiB: 20480},
		},
		Preemptible: true, PriceMicros: 2_490_000, Score: 0.1 + 0.2,
	}
}

// fullInstance has every field set.
func fullInstance(id, tenant string) *cloud.Instance {
	return &cloud.Instance{
		ID: id, TenantID: tenant, Name: "train-" + id, Offering: "h100x2", State: cloud.Running,
		Reason: "started", IdempotencyKey: "key-" + id, Image: "registry.local:5000/ml/train@sha256:" + imageDigest,
		Zones: []string{"eu-1a", "eu-1b"}, Labels: []string{"nvlink", "ib"},
		Command: []string{"python", "train.py", "--epochs=3"},
		Env:     map[string]string{"NCCL_DEBUG": "INFO", "EMPTY": ""},
		Volumes: []string{"vol-1"}, Tags: map[string]string{"team": "ml", "ünïcode": "✓"},
		Publish: []int{8888, 6006}, PublishKeepPrefix: []int{8888},
		HostID: "h-1", Placement: placement(id, "h-1"),
		Zone: "eu-1a", Market: cloud.MarketSpot, SpotRequestID: "sr-" + id,
		// Times the store keeps as they are (UTC microseconds): the
		// fixture is compared with what is read back.
		Interruption: &cloud.Interruption{Action: cloud.ActionStop, Reason: cloud.ReclaimCapacity,
			NoticedAt: us(t0), Deadline: us(t0.Add(2 * time.Minute)), For: "i-od"},
		CreatedAt: t0, UpdatedAt: t0.Add(time.Minute),
	}
}

// imageDigest is the digest of the fixtures' images.
const imageDigest = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// hostSpec is a fleet host with labels, a MIG GPU with instances (one not
// rented), a PCIe-only GPU, and usage figures. Empty lists are nil, the
// fleet's canonical form: fleet's JSON omits empty fields, so an empty
// non-nil slice would come back nil.
func hostSpec(id string) fleet.Host {
	return fleet.Host{
		ID: id, Zone: "eu-1a", Rack: "r12",
		Labels: map[string]string{"driver": "550.54", "interconnect": "infiniband"},
		State:  fleet.Schedulable, CPUMilli: 192000, MemoryMiB: 2 << 20,
		GPUs: []fleet.GPU{
			{Index: 0, UUID: "GPU-aaaa", Model: "H100-SXM5-80GB", MemoryMiB: 81559, Island: 0,
				MIG: true, MIGAuto: true, Instances: []fleet.MIGInstance{
					{ProfileID: 9, Start: 0, Slots: 4, Slices: 3, Alloc: "i-1"},
					{ProfileID: 19, Start: 6, Slots: 1, Slices: 1, Media: true},
				}},
			{Index: 1, UUID: "GPU-bbbb", Model: "H100-SXM5-80GB", MemoryMiB: 81559, Island: -1,
				WholeAlloc: "i-2"},
			{Index: 2, UUID: "GPU-cccc", Model: "H100-SXM5-80GB", MemoryMiB: 81559, Island: -1,
				UsedMilli: 500, UsedMemMiB: 40000, Shares: 2},
		},
		UsedCPUMilli: 24000, UsedMemoryMiB: 262144, Allocs: 4,
	}
}

// errSentinel is returned by functions that must make Tx roll back.
var errSentinel = errors.New("storetest: fn failed on purpose")
