package amdsmi

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The JSON amd-smi prints with --json is a list with one object per GPU it
// lists (a compute partition's logical GPUs each have one), keyed "gpu" by
// its index, with one object per section asked for. A value amd-smi could
// not read is the string "N/A". The fields read here, and nothing else, are
// those of AMD SMI's CLI (amdsmi_cli/amdsmi_commands.py: `static` and
// `list`):
//
//	amd-smi static --asic --bus --driver --vram --partition --json
//	  [{"gpu": 0,
//	    "asic": {"market_name": "AMD Instinct MI300X", "vendor_id": "0x1002",
//	             "device_id": "0x74a1", "num_compute_units": 304, ...},
//	    "bus": {"bdf": "0000:0c:00.0", ...},
//	    "driver": {"name": "amdgpu", "version": "6.10.5"},
//	    "vram": {"type": "HBM3", "size": {"value": 196592, "unit": "MB"}, ...},
//	    "partition": {"compute_partition": "CPX", "memory_partition": "NPS4",
//	                  "partition_id": 0}}, ...]
//	amd-smi list --json
//	  [{"gpu": 0, "bdf": "0000:0c:00.0", "uuid": "...", "kfd_id": 45532,
//	    "node_id": 2, "partition_id": 0}, ...]

// value is a JSON scalar amd-smi prints: a number, a string, or "N/A".
type value struct {
	raw string
	na  bool
}

func (v *value) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v.raw, v.na = s, s == "N/A" || s == ""
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want a string or a number, got %s", b)
	}
	v.raw = n.String()
	return nil
}

// int reads the value as a decimal or 0x-hex integer; ok is false for
// "N/A" and for anything else that is not one.
func (v value) int() (int64, bool) {
	if v.na {
		return 0, false
	}
	s := strings.TrimSpace(v.raw)
	base := 10
	if strings.HasPrefix(strings.ToLower(s), "0x") {
		s, base = s[2:], 16
	}
	n, err := strconv.ParseInt(s, base, 64)
	return n, err == nil
}

func (v value) str() string {
	if v.na {
		return ""
	}
	return v.raw
}

// staticGPU is one object of `amd-smi static --json`.
type staticGPU struct {
	GPU  int `json:"gpu"`
	ASIC struct {
		MarketName      value `json:"market_name"`
		VendorID        value `json:"vendor_id"`
		DeviceID        value `json:"device_id"`
		NumComputeUnits value `json:"num_compute_units"`
	} `json:"asic"`
	Bus struct {
		BDF value `json:"bdf"`
	} `json:"bus"`
	Driver struct {
		Name    value `json:"name"`
		Version value `json:"version"`
	} `json:"driver"`
	VRAM struct {
		Size struct {
			Value value `json:"value"`
			Unit  value `json:"unit"`
		} `json:"size"`
	} `json:"vram"`
	Partition struct {
		Compute     value `json:"compute_partition"`
		Memory      value `json:"memory_partition"`
		PartitionID value `json:"partition_id"`
	} `json:"partition"`
}

// listGPU is one object of `amd-smi list --json`.
type listGPU struct {
	GPU         int   `json:"gpu"`
	BDF         value `json:"bdf"`
	UUID        value `json:"uuid"`
	KFDID       value `json:"kfd_id"`
	NodeID      value `json:"node_id"`
	PartitionID value `json:"partition_id"`
}

func parseStatic(b []byte) ([]staticGPU, error) {
	var out []staticGPU
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("amd-smi static: %w", err)
	}
	return out, nil
}

func parseList(b []byte) ([]listGPU, error) {
	var out []listGPU
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("amd-smi list: %w", err)
	}
	return out, nil
}

// parseRenderMinor reads drm_render_minor from a KFD topology node's
// properties file (/sys/class/kfd/kfd/topology/nodes/<node>/properties,
// lines of "name value").
func parseRenderMinor(props string) (int, bool) {
	for _, line := range strings.Split(props, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == "drm_render_minor" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			return n, err == nil && n > 0
		}
	}
	return 0, false
}
