package archtest

import (
	"go/ast"
	"strings"
	"testing"
)

// TestOneMoveFunction checks that no production code outside package
// service writes an instance's state: every lifecycle move goes through
// service.MoveInstance (or MoveInstances), which checks cloud.CanMove and
// writes the event the usage ledger rests on. The stores, which read rows
// into instances, and their conformance fixtures are exempt. Tests are not
// checked; they move instances with testkit.Move.
func TestOneMoveFunction(t *testing.T) {
	mod, _ := modulePackages(t)
	cloudPath := mod + "/cloud"
	exempt := func(rel string) bool {
		return rel == "service" || rel == "cloud" || rel == "store" || strings.HasPrefix(rel, "store/")
	}
	pkgs := typedPackages(t, []string{"cloud"}, exempt)
	for _, p := range pkgs {
		fset, info := p.Fset, p.Info
		isInstance := func(e ast.Expr) bool {
			tv, ok := info.Types[e]
			return ok && isNamed(tv.Type, cloudPath, "Instance")
		}
		for _, f := range p.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					for _, lhs := range n.Lhs {
						if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "State" && isInstance(sel.X) {
							t.Errorf("%s: writes an instance's state; use service.MoveInstance", fset.Position(sel.Pos()))
						}
					}
				case *ast.CompositeLit:
					if !isInstance(n) {
						return true
					}
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							if id, ok := kv.Key.(*ast.Ident); ok && id.Name == "State" {
								t.Errorf("%s: builds an instance with a state; use service.CreateInstance", fset.Position(kv.Pos()))
							}
						}
					}
				}
				return true
			})
		}
	}
	if len(pkgs) < 5 {
		t.Fatalf("checked only %d packages; the test is not finding the code", len(pkgs))
	}
}
