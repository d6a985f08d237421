package archtest

import (
	"go/ast"
	"go/types"
	"slices"
	"strings"
	"testing"
)

// txWritePrefixes name the cloud.Tx methods that change the store.
var txWritePrefixes = []string{"Create", "Update", "Put", "Append", "Add", "Delete", "Revoke", "Record", "Bump", "Heartbeat", "Stamp", "Prune", "End", "Claim"}

// txReads are the cloud.Tx methods that only read (LockQuota reads the
// quota row under a lock, for the quota check that follows it).
var txReads = []string{"ClusterSecret", "InstanceIDs", "InstancesByKeys", "InstanceVersions", "HostStamp", "LockQuota", "LatestSpotPrices",
	"OpenUsage", "OpenSessions", "GroupHistory", "GroupVersions", "StackIDs", "StackEvents", "TokenByHash", "StackByName"}

func txWrites(method string) bool {
	for _, p := range txWritePrefixes {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

func txReadsOnly(method string) bool {
	return slices.Contains(txReads, method) || strings.HasPrefix(method, "Get") || strings.HasPrefix(method, "List") ||
		strings.HasPrefix(method, "Count") || strings.HasPrefix(method, "Read") || strings.HasSuffix(method, "ByKey")
}

// TestTxWritesOnlyInServices checks that no production code outside
// package service and the stores calls a cloud.Tx method that writes:
// controllers plan and service functions apply, so that every rule that
// changes state lives in one service. Every cloud.Tx method must be
// classified as a read or a write, so that a new method cannot slip past.
func TestTxWritesOnlyInServices(t *testing.T) {
	mod, _ := modulePackages(t)
	cloudPath := mod + "/cloud"
	exempt := func(rel string) bool {
		return rel == "service" || rel == "cloud" || rel == "store" || strings.HasPrefix(rel, "store/")
	}
	pkgs := typedPackages(t, []string{"cloud"}, exempt)
	seen := map[string]bool{}
	for _, p := range pkgs {
		for _, f := range p.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				s, ok := p.Info.Selections[sel]
				if !ok || s.Kind() != types.MethodVal || !isNamed(s.Recv(), cloudPath, "Tx") {
					return true
				}
				name := sel.Sel.Name
				seen[name] = true
				if txWrites(name) {
					t.Errorf("%s: calls cloud.Tx.%s outside package service; plan the change in the controller and apply it through a service", p.Fset.Position(sel.Pos()), name)
				}
				return true
			})
		}
	}
	if len(pkgs) < 5 {
		t.Fatalf("checked only %d packages; the test is not finding the code", len(pkgs))
	}
	if len(seen) == 0 {
		t.Fatal("found no cloud.Tx call at all; the test is not finding the code")
	}
	// Every method of cloud.Tx is either a read or a write.
	_, _, imp, _ := loadModule(t)
	cloudPkg, err := imp.Import(cloudPath)
	if err != nil {
		t.Fatal(err)
	}
	iface, ok := cloudPkg.Scope().Lookup("Tx").Type().Underlying().(*types.Interface)
	if !ok {
		t.Fatal("cloud.Tx is not an interface")
	}
	for i := range iface.NumMethods() {
		m := iface.Method(i).Name()
		if txWrites(m) == txReadsOnly(m) {
			t.Errorf("cloud.Tx.%s is classified as both or neither read and write; add it to txReads or a write prefix", m)
		}
	}
}
