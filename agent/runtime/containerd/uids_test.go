package containerd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

func testPool(t *testing.T, dir, host string, count uint32) *uidPool {
	t.Helper()
	p, err := newUIDPool(Config{Socket: "/run/test.sock", Namespace: "ns", Host: host, UIDDir: dir, UIDBase: 2_000_000, UIDCount: count})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUIDPool: distinct instances, of one runtime or of two sharing the
// machine's claims, get distinct uids; an instance that asks again gets
// its own; a full range is a clear error; release, adopt and prune touch
// only the runtime's own claims.
func TestUIDPool(t *testing.T) {
	dir := t.TempDir()
	a, b := testPool(t, dir, "host-a", 8), testPool(t, dir, "host-b", 8)
	got := map[uint32]string{}
	for i := range 4 {
		for _, p := range []*uidPool{a, b} {
			id := fmt.Sprintf("i-%d", i)
			uid, err := p.acquire(id)
			if err != nil {
				t.Fatal(err)
			}
			if uid < 2_000_000 || uid >= 2_000_008 {
				t.Fatalf("%s: uid %d outside the range", id, uid)
			}
			if other, ok := got[uid]; ok {
				t.Fatalf("uid %d given to %s of %s and to %s", uid, id, p.owner, other)
			}
			got[uid] = p.owner + id
			if again, err := p.acquire(id); err != nil || again != uid {
				t.Fatalf("%s asked again: %d, %v; want %d", id, again, err, uid)
			}
		}
	}
	if _, err := a.acquire("i-full"); !errors.Is(err, errNoUID) || !strings.Contains(err.Error(), "i-full") {
		t.Fatalf("a full range: %v", err)
	}
	uidOf := func(owner string) uint32 {
		for uid, o := range got {
			if o == owner {
				return uid
			}
		}
		t.Fatalf("no uid for %q", owner)
		return 0
	}
	// b cannot release or adopt a's claim.
	a0 := uidOf(a.owner + "i-0")
	b.release(a0, "i-0")
	if err := b.adopt(a0, "i-0"); err == nil {
		t.Errorf("b adopted a's claim of %d", a0)
	}
	if _, err := os.Stat(filepath.Join(dir, strconv.Itoa(int(a0)))); err != nil {
		t.Fatalf("a's claim went: %v", err)
	}
	// a releases i-0: the uid is free for another.
	a.release(a0, "i-0")
	if uid, err := a.acquire("i-new"); err != nil || uid != a0 {
		t.Fatalf("after the release: %d, %v; want the freed %d", uid, err, a0)
	}
	// Prune: a holds i-1 only; its other claims go, b's stay.
	if err := a.prune(map[string]bool{"i-1": true}); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		s, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		left = append(left, strings.TrimSpace(string(s)))
	}
	joined := strings.Join(left, ",")
	if len(left) != 5 || !strings.Contains(joined, "host-a\ti-1") || strings.Contains(joined, "host-a\ti-2") || strings.Count(joined, "host-b") != 4 {
		t.Errorf("after prune: %q; want a's i-1 and b's four", left)
	}
	// Adopt renews a claim that went.
	a2 := uidOf(a.owner + "i-2")
	if err := a.adopt(a2, "i-2"); err != nil {
		t.Fatal(err)
	}
	if uid, err := a.acquire("i-2"); err != nil || uid != a2 {
		t.Errorf("i-2 after adopt: %d, %v; want %d", uid, err, a2)
	}
	for _, cfg := range []Config{{UIDBase: 10, UIDCount: 5}, {UIDBase: 1 << 31, UIDCount: 5}, {UIDBase: 5000, UIDCount: 0}} {
		cfg.UIDDir = dir
		if _, err := newUIDPool(cfg); err == nil {
			t.Errorf("range %d+%d accepted", cfg.UIDBase, cfg.UIDCount)
		}
	}
}

// TestChownTree: a directory another user owns is given, every entry of
// it, to the new one, without following links; one the user owns already
// is left as it is.
func TestChownTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	dir, outside := t.TempDir(), filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(outside, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "a", "b"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "a", "b", "f"), nil, 0o600))
	must(os.Symlink(outside, filepath.Join(dir, "a", "link")))
	for _, p := range []string{dir, filepath.Join(dir, "a"), filepath.Join(dir, "a", "b"), filepath.Join(dir, "a", "b", "f")} {
		must(os.Lchown(p, 3000, 3000))
	}
	ownerOf := func(p string) [2]uint32 {
		st, err := os.Lstat(p)
		must(err)
		return owner(st)
	}
	must(chownTree(dir, 4000, 4001))
	for _, p := range []string{dir, filepath.Join(dir, "a"), filepath.Join(dir, "a", "b", "f"), filepath.Join(dir, "a", "link")} {
		if o := ownerOf(p); o != [2]uint32{4000, 4001} {
			t.Errorf("%s: owner %v", p, o)
		}
	}
	if o := ownerOf(outside); o != [2]uint32{0, 0} {
		t.Errorf("the link's target outside: owner %v, want root's", o)
	}
	// Owned already: the walk is skipped.
	must(os.Lchown(filepath.Join(dir, "a", "b", "f"), 3000, 3000))
	must(chownTree(dir, 4000, 4001))
	if o := ownerOf(filepath.Join(dir, "a", "b", "f")); o != [2]uint32{3000, 3000} {
		t.Errorf("a tree whose top the user owns was walked: %v", o)
	}
}

// TestOwnUsers: two workloads run as distinct uids of the range, each
// owning its working directory; a volume another instance wrote is given
// to the next one, which can write its files; Remove ends the claim.
func TestOwnUsers(t *testing.T) {
	uidDir := t.TempDir()
	rt := newRuntime(t, func(c *Config) { c.UIDDir = uidDir })
	vol := filepath.Join(t.TempDir(), "vol-1")
	script := `echo "id $(id -u):$(id -g)"; echo "work $(stat -c %u /work)"; echo data > /volumes/vol-1/f && echo "wrote"; echo ready; sleep 30`
	uids := map[string]uint32{}
	for _, id := range []string{newID(t), newID(t)} {
		if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: sh(script), Volumes: []string{vol}, Grace: grace}); err != nil {
			t.Fatal(err)
		}
		out := waitLog(t, rt, id, "ready")
		uid := rt.insts[id].uid
		if uid < DefaultUIDBase || uid >= DefaultUIDBase+DefaultUIDCount {
			t.Fatalf("%s runs as %d, outside the range", id, uid)
		}
		for _, want := range []string{fmt.Sprintf("id %d:%d\n", uid, uid), fmt.Sprintf("work %d\n", uid), "wrote\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: output %q lacks %q", id, out, want)
			}
		}
		for other, u := range uids {
			if u == uid {
				t.Fatalf("%s and %s both run as %d", id, other, uid)
			}
		}
		uids[id] = uid
		if err := rt.Stop(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	for id, uid := range uids {
		claim := filepath.Join(uidDir, strconv.Itoa(int(uid)))
		if _, err := os.Stat(claim); err != nil {
			t.Fatalf("%s's claim before Remove: %v", id, err)
		}
		if err := rt.Remove(id); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(claim); !os.IsNotExist(err) {
			t.Errorf("%s's claim after Remove: %v", id, err)
		}
	}
}
