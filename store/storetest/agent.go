package storetest

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// What the agent protocol needs of the store: tokens bound to a host,
// heartbeats that leave the host's version alone, and instance logs.

func testAgentTokens(t *testing.T, s cloud.Store) {
	seedUsers(t, s)
	agent := token("k-agent", "u-1", "t-1", "hash-agent")
	agent.Role, agent.HostID = cloud.RoleAgent, "h-7"
	join := token("k-join", "u-1", "t-1", "hash-join")
	join.Role = cloud.RoleJoin
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.CreateToken(ctx, agent); err != nil {
			return err
		}
		return tx.CreateToken(ctx, join)
	})
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Token, error) { return tx.TokenByHash(ctx, []byte("hash-agent"), t0) })
	wantEqual(t, "an agent token with its host round-trips", got, agent)
	got = mustRead(t, s, func(tx cloud.Tx) (*cloud.Token, error) { return tx.TokenByHash(ctx, []byte("hash-join"), t0) })
	wantEqual(t, "a join token without a host round-trips", got, join)
	all := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Token, error) { return tx.ListTokens(ctx, "t-1") })
	wantEqual(t, "ListTokens carries the host", all, []*cloud.Token{agent, join})
}

func testHeartbeat(t *testing.T, s cloud.Store) {
	h := &cloud.Host{ID: "h-1", State: fleet.Unhealthy, Spec: hostSpec("h-1"), LastHeartbeat: t0}
	inTx(t, s, func(tx cloud.Tx) error { return tx.PutHost(ctx, h) })
	beat := t0.Add(90 * time.Second)
	inTx(t, s, func(tx cloud.Tx) error { return tx.Heartbeat(ctx, "h-1", beat) })
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Host, error) { return tx.GetHost(ctx, "h-1") })
	want := *h
	want.LastHeartbeat = us(beat)
	wantEqual(t, "Heartbeat changes LastHeartbeat alone, not the version", got, &want)

	// The version PutHost expects is still the one the caller read before
	// the heartbeat.
	got.State = fleet.Schedulable
	inTx(t, s, func(tx cloud.Tx) error { return tx.PutHost(ctx, got) })
	if got.Version != 2 {
		t.Errorf("PutHost after a heartbeat set Version %d, want 2", got.Version)
	}
	err := try(s, func(tx cloud.Tx) error { return tx.Heartbeat(ctx, "h-9", beat) })
	wantCode(t, "a heartbeat of a missing host is NotFound", err, cloud.NotFound, "host h-9 not found")
}

// testStampHeartbeats: StampHeartbeats stamps the hosts that exist and
// are not unhealthy, however many (past one statement's 512), leaves
// versions alone, and answers which it stamped.
func testStampHeartbeats(t *testing.T, s cloud.Store) {
	var ids []string
	inTx(t, s, func(tx cloud.Tx) error {
		for i := range 600 {
			st := fleet.Schedulable
			switch {
			case i%100 == 2:
				st = fleet.Unhealthy
			case i%3 == 1:
				st = fleet.Cordoned
			}
			id := fmt.Sprintf("h-%03d", i)
			ids = append(ids, id)
			if err := tx.PutHost(ctx, &cloud.Host{ID: id, State: st, Spec: hostSpec(id), LastHeartbeat: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	beat := t0.Add(time.Minute)
	asked := append(slices.Clone(ids), "h-missing", "h-000")
	got := mustRead(t, s, func(tx cloud.Tx) ([]string, error) { return tx.StampHeartbeats(ctx, asked, beat) })
	slices.Sort(got)
	var want []string
	for i, id := range ids {
		if i%100 != 2 {
			want = append(want, id)
		}
	}
	if !slices.Equal(slices.Compact(got), want) {
		t.Errorf("stamped %d hosts, want the %d that exist and are not unhealthy", len(got), len(want))
	}
	hosts := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Host, error) { return tx.ListHosts(ctx) })
	for i, h := range hosts {
		wantBeat := us(beat)
		if i%100 == 2 {
			wantBeat = us(t0)
		}
		if !h.LastHeartbeat.Equal(wantBeat) || h.Version != 1 {
			t.Errorf("host %s: last heartbeat %v version %d; want %v and 1", h.ID, h.LastHeartbeat, h.Version, wantBeat)
		}
	}
	none := mustRead(t, s, func(tx cloud.Tx) ([]string, error) { return tx.StampHeartbeats(ctx, nil, beat) })
	if len(none) != 0 {
		t.Errorf("stamping no host stamped %v", none)
	}
}

// testListSilentHosts: ListSilentHosts lists, in ID order, the hosts that
// are not unhealthy and whose last heartbeat is before the cut.
func testListSilentHosts(t *testing.T, s cloud.Store) {
	for _, h := range []struct {
		id    string
		state fleet.HostState
		beat  time.Duration
	}{
		{"h-4", fleet.Schedulable, -2 * time.Minute},
		{"h-1", fleet.Cordoned, -time.Minute - time.Microsecond},
		{"h-2", fleet.Schedulable, -time.Minute},
		{"h-3", fleet.Unhealthy, -time.Hour},
		{"h-5", fleet.Schedulable, 0},
	} {
		inTx(t, s, func(tx cloud.Tx) error {
			return tx.PutHost(ctx, &cloud.Host{ID: h.id, State: h.state, Spec: hostSpec(h.id), LastHeartbeat: t0.Add(h.beat)})
		})
	}
	got := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Host, error) { return tx.ListSilentHosts(ctx, t0.Add(-time.Minute)) })
	var ids []string
	for _, h := range got {
		ids = append(ids, h.ID)
	}
	if !slices.Equal(ids, []string{"h-1", "h-4"}) {
		t.Errorf("silent hosts %v, want [h-1 h-4]", ids)
	}
	if len(got) == 2 && (got[0].Spec.ID != "h-1" || got[0].Version != 1) {
		t.Errorf("a silent host read back as %+v", got[0])
	}
	// ListHostVersions: every host, in ID order, with its version.
	h2 := mustRead(t, s, func(tx cloud.Tx) (*cloud.Host, error) { return tx.GetHost(ctx, "h-2") })
	inTx(t, s, func(tx cloud.Tx) error { return tx.PutHost(ctx, h2) })
	vs := mustRead(t, s, func(tx cloud.Tx) ([]cloud.RowVersion, error) { return tx.ListHostVersions(ctx) })
	want := []cloud.RowVersion{{ID: "h-1", Version: 1}, {ID: "h-2", Version: 2}, {ID: "h-3", Version: 1}, {ID: "h-4", Version: 1}, {ID: "h-5", Version: 1}}
	if !slices.Equal(vs, want) {
		t.Errorf("host versions %v, want %v", vs, want)
	}
}

// testLogs checks AppendLog and ReadLog: round trips, the cap, invalid
// arguments and rollback. The steps run in this order on one store.
func testLogs(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	inTx(t, s, func(tx cloud.Tx) error {
		for _, id := range []string{"i-1", "i-2"} {
			if err := tx.CreateInstance(ctx, &cloud.Instance{ID: id, TenantID: "t-1", State: cloud.Running}); err != nil {
				return err
			}
		}
		return nil
	})
	l := logs{t, s}
	logsRoundTrip(t, l)
	end := logsCap(t, l)
	logsErrors(t, s, end)
	logsRollback(t, l, end)
}

// logs appends to and reads instance logs in transactions of their own.
type logs struct {
	t *testing.T
	s cloud.Store
}

func (l logs) append(id string, data string, keep int64) int64 {
	l.t.Helper()
	return mustRead(l.t, l.s, func(tx cloud.Tx) (int64, error) { return tx.AppendLog(ctx, id, []byte(data), keep) })
}

func (l logs) read(id string, offset int64, limit int) *cloud.LogChunk {
	l.t.Helper()
	return mustRead(l.t, l.s, func(tx cloud.Tx) (*cloud.LogChunk, error) { return tx.ReadLog(ctx, id, offset, limit) })
}

// bigLog is a cap or read size nothing in testLogs reaches.
const bigLog = 1 << 30

// logsRoundTrip writes i-1's log: binary output round-trips byte for
// byte, across merged and separate chunks, and pages read from any offset.
func logsRoundTrip(t *testing.T, l logs) {
	wantEqual(t, "an empty log", l.read("i-1", 0, 100), &cloud.LogChunk{Data: []byte{}})
	if end := l.append("i-1", "", bigLog); end != 0 {
		t.Errorf("appending nothing to an empty log: end %d, want 0", end)
	}
	var stream []byte
	for i, piece := range []string{"hello\n", "\x00\xff\xfe binary\n", strings.Repeat("x", 70<<10), "tail\n"} {
		stream = append(stream, piece...)
		if end := l.append("i-1", piece, bigLog); end != int64(len(stream)) {
			t.Fatalf("append %d: end %d, want %d", i, end, len(stream))
		}
	}
	n := int64(len(stream))
	wantEqual(t, "the whole log", l.read("i-1", 0, bigLog), &cloud.LogChunk{Data: stream, End: n})
	wantEqual(t, "a page from an offset inside a chunk", l.read("i-1", 3, 10),
		&cloud.LogChunk{Data: stream[3:13], Start: 3, End: n})
	wantEqual(t, "a page across chunks", l.read("i-1", n-8, 100),
		&cloud.LogChunk{Data: stream[n-8:], Start: n - 8, End: n})
	wantEqual(t, "reading at the end", l.read("i-1", n, 100), &cloud.LogChunk{Data: []byte{}, Start: n, End: n})
	wantEqual(t, "the other instance's log is apart", l.read("i-2", 0, 100), &cloud.LogChunk{Data: []byte{}})
	if end := l.append("i-1", "", bigLog); end != n {
		t.Errorf("appending nothing: end %d, want %d", end, n)
	}
}

// logsCap caps i-2's and i-1's logs and returns the end of i-2's. The cap
// keeps exactly the newest bytes; offsets stay those of the whole stream,
// and a read before the oldest kept byte starts there.
func logsCap(t *testing.T, l logs) int64 {
	var s2 []byte
	for _, piece := range []string{"0123456789", "abcdef", "ghij"} {
		s2 = append(s2, piece...)
		l.append("i-2", piece, 12)
	}
	end := int64(len(s2))
	wantEqual(t, "a capped log", l.read("i-2", 0, 100),
		&cloud.LogChunk{Data: s2[end-12:], Start: end - 12, First: end - 12, End: end})
	// A piece larger than the cap keeps its own tail.
	s2 = append(s2, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"...)
	if got := l.append("i-2", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", 12); got != int64(len(s2)) {
		t.Errorf("append larger than the cap: end %d, want %d", got, len(s2))
	}
	end = int64(len(s2))
	wantEqual(t, "after a piece larger than the cap", l.read("i-2", 3, 100),
		&cloud.LogChunk{Data: []byte("OPQRSTUVWXYZ"), Start: end - 12, First: end - 12, End: end})
	// Many chunks, each beyond the merge limit, trimmed one by one.
	chunk := bytes.Repeat([]byte("y"), 65<<10)
	for i := 0; i < 4; i++ {
		chunk[0] = byte('a' + i)
		l.append("i-1", string(chunk), 100<<10)
	}
	got := l.read("i-1", 0, bigLog)
	if got.End-got.First != 100<<10 || int64(len(got.Data)) != 100<<10 || got.Data[len(got.Data)-len(chunk)] != 'd' {
		t.Errorf("capped at 100 KiB: first %d end %d, %d bytes", got.First, got.End, len(got.Data))
	}
	return end
}

// logsErrors checks the invalid arguments and missing instances; end is
// the end of i-2's log.
func logsErrors(t *testing.T, s cloud.Store, end int64) {
	for _, c := range []struct {
		desc string
		fn   func(cloud.Tx) error
		code cloud.Code
		msg  string
	}{
		{"reading past the end is Invalid",
			func(tx cloud.Tx) error { _, err := tx.ReadLog(ctx, "i-2", end+1, 10); return err },
			cloud.Invalid, "past the end"},
		{"a negative offset is Invalid",
			func(tx cloud.Tx) error { _, err := tx.ReadLog(ctx, "i-2", -1, 10); return err },
			cloud.Invalid, ""},
		{"a read size of zero is Invalid",
			func(tx cloud.Tx) error { _, err := tx.ReadLog(ctx, "i-2", 0, 0); return err },
			cloud.Invalid, ""},
		{"a cap of zero is Invalid",
			func(tx cloud.Tx) error { _, err := tx.AppendLog(ctx, "i-2", []byte("x"), 0); return err },
			cloud.Invalid, ""},
		{"the log of a missing instance is NotFound",
			func(tx cloud.Tx) error { _, err := tx.ReadLog(ctx, "i-9", 0, 10); return err },
			cloud.NotFound, "instance i-9 not found"},
		{"appending to a missing instance is NotFound",
			func(tx cloud.Tx) error { _, err := tx.AppendLog(ctx, "i-9", []byte("x"), 10); return err },
			cloud.NotFound, "instance i-9 not found"},
	} {
		wantCode(t, c.desc, try(s, c.fn), c.code, c.msg)
	}
}

// logsRollback appends to i-2's log, which ends at end, in a transaction
// that fails: it leaves no output behind.
func logsRollback(t *testing.T, l logs, end int64) {
	err := try(l.s, func(tx cloud.Tx) error {
		if _, err := tx.AppendLog(ctx, "i-2", []byte("lost"), 12); err != nil {
			return err
		}
		return errSentinel
	})
	if err != errSentinel {
		t.Fatalf("Tx = %v, want the sentinel", err)
	}
	if got := l.read("i-2", 0, 100); got.End != end {
		t.Errorf("after a rolled back append: end %d, want %d", got.End, end)
	}
}
