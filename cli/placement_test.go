package cli

import (
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
)

func TestPlacementGroups(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	_, other := e.member("globex", "gary")
	var g cloud.PlacementGroup
	decodeJSON(t, e.ok(tok, "placement-groups", "create", "train", "--strategy", "cluster", "-o", "json"), &g)
	if g.Name != "train" || g.Strategy != cloud.PlacementCluster || !strings.HasPrefix(g.ID, "pg-") {
		t.Fatalf("created %+v", g)
	}
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "--placement-group", g.ID, "-o", "json"), &in)
	if in.PlacementGroupID != g.ID {
		t.Errorf("instance %+v is not in %s", in, g.ID)
	}
	if out := e.ok(tok, "instances", "describe", in.ID); !strings.Contains(out, g.ID) {
		t.Errorf("describe does not name the placement group:\n%s", out)
	}
	if out := e.ok(tok, "placement-groups", "list"); !strings.Contains(out, "train") || !strings.Contains(out, "cluster") {
		t.Errorf("list:\n%s", out)
	}
	for _, args := range [][]string{
		{"placement-groups", "create", "x"},
		{"placement-groups", "create", "x", "--strategy", "near"},
		{"placement-groups", "create"},
	} {
		code, _, errOut := e.as(tok, args...)
		if code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, %q; want a usage error", args, code, errOut)
		}
	}
	// Another tenant: not found, and its list is empty.
	code, _, errOut := e.as(other, "placement-groups", "delete", g.ID)
	oneLine(t, code, errOut, "(not_found)")
	if out := e.ok(other, "placement-groups", "list"); !strings.Contains(out, "no placement groups") {
		t.Errorf("globex lists:\n%s", out)
	}
	code, _, errOut = e.as(tok, "placement-groups", "delete", g.ID)
	oneLine(t, code, errOut, "(conflict)")
	e.ok(tok, "instances", "terminate", in.ID)
	if out := e.ok(tok, "placement-groups", "delete", g.ID); !strings.Contains(out, "deleted") {
		t.Errorf("delete: %s", out)
	}
}
