package rdma

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/fleet"
)

// tree writes files (path relative to root → content) under a new
// temporary directory and returns it; a path ending in "/" is a directory.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if p[len(p)-1] == '/' {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// ib is the sysfs and /dev of one InfiniBand adapter mlx5_<n> with verbs
// node uverbs<n> and IPoIB interface ib<n>.
func ib(files map[string]string, n string) {
	files["sys/class/infiniband/mlx5_"+n+"/ports/1/link_layer"] = "InfiniBand\n"
	files["sys/class/infiniband/mlx5_"+n+"/ports/1/gid_attrs/ndevs/0"] = ""
	files["sys/class/infiniband/mlx5_"+n+"/device/net/ib"+n+"/"] = ""
	files["sys/class/infiniband_verbs/uverbs"+n+"/ibdev"] = "mlx5_" + n + "\n"
	files["dev/infiniband/uverbs"+n] = ""
}

func TestDiscoverHCAs(t *testing.T) {
	tests := []struct {
		desc    string
		files   func(map[string]string)
		want    []fleet.HCA
		skipped []Skipped
	}{
		{desc: "no RDMA driver", files: func(map[string]string) {}},
		{desc: "an empty class", files: func(f map[string]string) { f["sys/class/infiniband/"] = "" }},
		{desc: "two InfiniBand adapters with rdma_cm", files: func(f map[string]string) {
			ib(f, "0")
			ib(f, "1")
			f["sys/class/infiniband_verbs/abi_version"] = "6\n"
			f["dev/infiniband/rdma_cm"] = ""
		}, want: []fleet.HCA{
			{Name: "mlx5_0", LinkLayer: "InfiniBand", NetDev: "ib0", Devices: []string{"/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"}},
			{Name: "mlx5_1", LinkLayer: "InfiniBand", NetDev: "ib1", Devices: []string{"/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"}},
		}},
		{desc: "RoCE, its interface from the GID table, verbs numbered apart", files: func(f map[string]string) {
			f["sys/class/infiniband/mlx5_bond_0/ports/1/link_layer"] = "Ethernet\n"
			f["sys/class/infiniband/mlx5_bond_0/ports/1/gid_attrs/ndevs/0"] = "bond0\n"
			f["sys/class/infiniband_verbs/uverbs3/ibdev"] = "mlx5_bond_0\n"
			f["dev/infiniband/uverbs3"] = ""
		}, want: []fleet.HCA{
			{Name: "mlx5_bond_0", LinkLayer: "Ethernet", NetDev: "bond0", Devices: []string{"/dev/infiniband/uverbs3"}},
		}},
		{desc: "the first port with a link layer counts, in numeric order", files: func(f map[string]string) {
			f["sys/class/infiniband/hfi1_0/ports/10/link_layer"] = "Ethernet\n"
			f["sys/class/infiniband/hfi1_0/ports/2/link_layer"] = "InfiniBand\n"
			f["sys/class/infiniband/hfi1_0/ports/1/"] = ""
			f["sys/class/infiniband_verbs/uverbs0/ibdev"] = "hfi1_0"
			f["dev/infiniband/uverbs0"] = ""
		}, want: []fleet.HCA{{Name: "hfi1_0", LinkLayer: "InfiniBand", Devices: []string{"/dev/infiniband/uverbs0"}}}},
		{desc: "malformed adapters are skipped, the good one kept", files: func(f map[string]string) {
			ib(f, "0")
			f["sys/class/infiniband/bad_ll/ports/1/link_layer"] = "Token Ring\n"
			f["sys/class/infiniband/no_ports/device/"] = ""
			f["sys/class/infiniband/no_verbs/ports/1/link_layer"] = "InfiniBand\n"
			f["sys/class/infiniband/no_node/ports/1/link_layer"] = "Ethernet\n"
			f["sys/class/infiniband_verbs/uverbs9/ibdev"] = "no_node\n"
			f["sys/class/infiniband/bad,name/ports/1/link_layer"] = "InfiniBand\n"
		}, want: []fleet.HCA{
			{Name: "mlx5_0", LinkLayer: "InfiniBand", NetDev: "ib0", Devices: []string{"/dev/infiniband/uverbs0"}},
		}, skipped: []Skipped{
			{Name: "bad,name"}, {Name: "bad_ll"}, {Name: "no_node"}, {Name: "no_ports"}, {Name: "no_verbs"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			files := map[string]string{}
			tt.files(files)
			root := tree(t, files)
			got, err := Discover(filepath.Join(root, "sys"), filepath.Join(root, "dev"))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
			var se *SkipError
			if tt.skipped == nil {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				return
			}
			if !errors.As(err, &se) {
				t.Fatalf("error %v, want a *SkipError", err)
			}
			if len(se.Skipped) != len(tt.skipped) {
				t.Fatalf("skipped %+v, want %+v", se.Skipped, tt.skipped)
			}
			for i, s := range se.Skipped {
				if s.Name != tt.skipped[i].Name || s.Reason == "" {
					t.Errorf("skipped[%d] = %+v, want %s with a reason", i, s, tt.skipped[i].Name)
				}
			}
		})
	}
}

// TestHCASkipReasons checks that each reason says what is wrong.
func TestHCASkipReasons(t *testing.T) {
	files := map[string]string{}
	f := files
	f["sys/class/infiniband/bad_ll/ports/1/link_layer"] = "Token Ring\n"
	f["sys/class/infiniband/no_ports/device/"] = ""
	f["sys/class/infiniband/no_verbs/ports/1/link_layer"] = "InfiniBand\n"
	f["sys/class/infiniband/no_node/ports/1/link_layer"] = "Ethernet\n"
	f["sys/class/infiniband_verbs/uverbs9/ibdev"] = "no_node\n"
	f["sys/class/infiniband/silent/ports/1/"] = ""
	root := tree(t, files)
	_, err := Discover(filepath.Join(root, "sys"), filepath.Join(root, "dev"))
	var se *SkipError
	if !errors.As(err, &se) {
		t.Fatalf("error %v", err)
	}
	want := map[string]string{
		"bad_ll":   `port 1 has the unknown link layer "Token Ring"`,
		"no_ports": "it has no ports",
		"no_verbs": "no verbs device names it in class/infiniband_verbs (is ib_uverbs loaded?)",
		"no_node":  "its verbs device node " + filepath.Join(root, "dev", "infiniband", "uverbs9") + " is missing",
		"silent":   "no port reports its link layer",
	}
	if len(se.Skipped) != len(want) {
		t.Fatalf("skipped %+v", se.Skipped)
	}
	for _, s := range se.Skipped {
		if s.Reason != want[s.Name] {
			t.Errorf("%s: %q, want %q", s.Name, s.Reason, want[s.Name])
		}
	}
	if msg := err.Error(); !strings.Contains(msg, "bad_ll: "+want["bad_ll"]) || !strings.Contains(msg, "silent: ") {
		t.Errorf("message %q", msg)
	}
}

// TestDiscoverHCAsUnreadable checks that a class path that is not a directory
// is an error with no adapters.
func TestDiscoverHCAsUnreadable(t *testing.T) {
	root := tree(t, map[string]string{"sys/class/infiniband": "not a directory"})
	got, err := Discover(filepath.Join(root, "sys"), filepath.Join(root, "dev"))
	var se *SkipError
	if err == nil || errors.As(err, &se) || got != nil {
		t.Fatalf("got %+v, %v", got, err)
	}
}
